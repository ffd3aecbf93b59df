"""``ngrad.linalg``: PyTorch's ``torch.linalg`` for real (float32, float64) matrices.

Decompositions (``cholesky``, ``eigh``, ``svd``, ``qr``), ``inv``, ``solve``,
``solve_triangular``, ``det``, ``slogdet`` and ``matrix_exp`` are primitives (LAPACK through
NumPy, on stacks of matrices, with PyTorch's derivative rules in the primitive table), so they
differentiate to any order and in forward mode; everything else here (``cholesky_solve``,
``logdet``, ``lstsq``, ``pinv``, ``matrix_rank``, the norms, ``matrix_power``, ``multi_dot``) is
written in them. Leading batch dimensions are taken throughout, broadcast where PyTorch
broadcasts them. See docs/linalg.md for the derivative conventions and what runs where.

```python
>>> import ngrad
>>> A = ngrad.tensor([[3.0, 1.0], [1.0, 2.0]], dtype=ngrad.float64, requires_grad=True)
>>> b = ngrad.tensor([9.0, 8.0], dtype=ngrad.float64)
>>> x = ngrad.linalg.solve(A, b)
>>> x
tensor([2., 3.], dtype=ngrad.float64, grad_fn=<LinalgSolveExBackward0>)
>>> ngrad.linalg.det(A).backward()  # the cofactor matrix, det(A) inv(A)^T
>>> ngrad.allclose(A.grad, ngrad.tensor([[2.0, -1.0], [-1.0, 3.0]], dtype=ngrad.float64))
True

```
"""

import math
from collections import namedtuple

from .engine.ir.prims.linalg import LinAlgError, svd_sizes
from .tensor.record import TORCH_NAME, broadcast_shapes, named, record_op, to_tensor

__all__ = [
    "LinAlgError",
    "inv",
    "solve",
    "solve_triangular",
    "det",
    "slogdet",
    "logdet",
    "cholesky",
    "cholesky_ex",
    "cholesky_solve",
    "eigh",
    "eigvalsh",
    "svd",
    "svdvals",
    "qr",
    "lstsq",
    "pinv",
    "matrix_rank",
    "matrix_exp",
    "matrix_power",
    "multi_dot",
    "vector_norm",
    "matrix_norm",
    "norm",
    "cross",
]

_SLOGDET = namedtuple("linalg_slogdet", ["sign", "logabsdet"])
_CHOLESKY_EX = namedtuple("linalg_cholesky_ex", ["L", "info"])
_EIGH = namedtuple("linalg_eigh", ["eigenvalues", "eigenvectors"])
_SVD = namedtuple("linalg_svd", ["U", "S", "Vh"])
_QR = namedtuple("linalg_qr", ["Q", "R"])
_LSTSQ = namedtuple("linalg_lstsq", ["solution", "residuals", "rank", "singular_values"])


def _matrices(A, name):
    A = to_tensor(A)
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if not A.dtype.is_floating_point:
        raise RuntimeError(
            f"{name}: Expected a floating point or complex tensor as input. Got {TORCH_NAME[A.dtype.short]}"
        )
    return A


def _square(A, name, floating=True):
    A = to_tensor(A)
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(
            f"{name}: A must be batches of square matrices, but they are {A.shape[-2]} by {A.shape[-1]} matrices"
        )
    return _matrices(A, name) if floating else A


def _same_dtype(A, B, name):
    if B.dtype is not A.dtype:
        raise RuntimeError(
            f"{name}: Expected A and B to have the same dtype, but found A of type "
            f"{TORCH_NAME[A.dtype.short]} and B of type {TORCH_NAME[B.dtype.short]} instead"
        )


def _broadcast_batches(A, B):
    batch = broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-2]))
    A = A.expand(*batch, *A.shape[-2:]) if tuple(A.shape[:-2]) != batch else A
    B = B.expand(*batch, *B.shape[-2:]) if tuple(B.shape[:-2]) != batch else B
    return A, B


def _op(prim, srcs, params, shape, name):
    return record_op(prim, tuple(s._node for s in srcs), params, tuple(shape), srcs[0]._node.dtype, name)


def _reflected(A, upper):
    """``A`` with the values of the symmetric matrix its lower (upper) triangle holds, and A's own
    gradient path: the rows that read a symmetric matrix get PyTorch's values and give PyTorch's
    symmetric gradient to A itself."""
    mirror = A.triu() + A.triu(1).mT if upper else A.tril() + A.tril(-1).mT
    return record_op("splice", (A._node, mirror._node), None, A._node.shape, A._node.dtype, "AliasBackward0")


def inv(A):
    """The inverse of each square matrix in ``A`` (..., n, n); a singular one raises
    ``LinAlgError`` when the value is computed."""
    A = _square(A, "linalg.inv")
    return _op("inv", (A,), None, A.shape, "LinalgInvExBackward0")


def solve(A, B, *, left=True):
    """``X`` with ``A @ X = B`` (``X @ A = B`` for ``left=False``). ``B`` is a stack of matrices
    (..., n, k), or of vectors (..., n) when it has one dimension fewer than ``A`` and their
    shapes agree that way (PyTorch's rule); batch dimensions broadcast."""
    A, B = _square(A, "linalg.solve"), to_tensor(B)
    if not left:
        return solve(A.mT, B.mT).mT
    _same_dtype(A, B, "linalg.solve")
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    Bm = B.unsqueeze(-1) if vector else B
    if Bm.ndim < 2 or Bm.shape[-2] != A.shape[-1]:
        raise RuntimeError(
            f"linalg.solve: Incompatible shapes of A and B for the equation AX = B "
            f"({A.shape[-2]}x{A.shape[-1]} and {'x'.join(map(str, Bm.shape[-2:]))})"
        )
    A, Bm = _broadcast_batches(A, Bm)
    X = _op("solve", (A, Bm), None, Bm.shape, "LinalgSolveExBackward0")
    return named(X.squeeze(-1), "LinalgSolveExBackward0") if vector else X


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """``X`` with ``A @ X = B`` (``X @ A = B`` for ``left=False``) for triangular ``A``: only
    its upper (``upper=True``) or lower triangle is read, and its diagonal is taken as ones with
    ``unitriangular``. ``B`` is a stack of matrices; batch dimensions broadcast. A zero on the
    diagonal gives inf and nan, as PyTorch's.

    >>> import ngrad
    >>> L = ngrad.tensor([[2.0, 0.0], [1.0, 4.0]])
    >>> ngrad.linalg.solve_triangular(L, ngrad.tensor([[2.0], [9.0]]), upper=False)
    tensor([[1.],
            [2.]])
    """
    A, B = _square(A, "linalg.solve_triangular"), to_tensor(B)
    if B.ndim < 2:
        raise RuntimeError("linalg.solve_triangular: The input tensor B must have at least 2 dimensions.")
    _same_dtype(A, B, "linalg.solve_triangular")
    if not left:
        return solve_triangular(A.mT, B.mT, upper=not upper, unitriangular=unitriangular).mT
    if B.shape[-2] != A.shape[-1]:
        raise RuntimeError(
            f"linalg.solve_triangular: Incompatible shapes of A and B for the equation AX = B "
            f"({A.shape[-2]}x{A.shape[-1]} and {B.shape[-2]}x{B.shape[-1]})"
        )
    A, B = _broadcast_batches(A, B)
    params = {"upper": bool(upper), "unitriangular": bool(unitriangular)}
    return _op("solve_triangular", (A, B), params, B.shape, "LinalgSolveTriangularBackward0")


def det(A):
    """The determinant of each square matrix in ``A``. Its gradient is the cofactor matrix
    (det(A) inv(A)^T where A is invertible), taken from an SVD, so singular matrices have
    PyTorch's gradient too."""
    A = _square(A, "linalg.det")
    return _op("det", (A,), None, A.shape[:-2], "LinalgDetBackward0")


def slogdet(A):
    """``(sign, logabsdet)``: the sign of each determinant (0 for a singular matrix) and the
    log of its absolute value (-inf for a singular matrix), without overflow. The gradient of
    ``logabsdet`` is inv(A)^T; ``sign`` has none.

    >>> import ngrad
    >>> ngrad.linalg.slogdet(ngrad.tensor([[0.0, 2.0], [3.0, 0.0]]))
    linalg_slogdet(sign=tensor(-1.), logabsdet=tensor(1.7918))
    """
    A = _square(A, "linalg.slogdet")
    packed = _op("slogdet", (A,), None, A.shape[:-2] + (2,), "LinalgSlogdetBackward0")
    return _SLOGDET(packed[..., 0].detach(), named(packed[..., 1], "LinalgSlogdetBackward0"))


def logdet(A):
    """The log of each determinant: nan where it is negative, -inf where it is zero."""
    sign, logabs = slogdet(_square(A, "linalg.slogdet"))
    from .tensor.functions import where

    return where(sign < 0, math.nan, logabs)


def _cholesky(A, upper, check, name):
    A = _square(A, name)
    params = {"check": name if check else ""}
    L = _op("cholesky", (_reflected(A, upper),), params, A.shape, "LinalgCholeskyExBackward0")
    return named(L.mT, "LinalgCholeskyExBackward0") if upper else L


def cholesky(A, *, upper=False):
    """The lower triangular ``L`` with ``A = L @ L.mT`` for each symmetric positive-definite
    matrix (its upper factor ``L.mT`` for ``upper=True``). Only the lower (upper) triangle of
    ``A`` is read; the gradient is PyTorch's symmetric one. A matrix that is not
    positive-definite raises ``LinAlgError`` when the value is computed.

    >>> import ngrad
    >>> ngrad.linalg.cholesky(ngrad.tensor([[4.0, 2.0], [2.0, 5.0]]))
    tensor([[2., 0.],
            [1., 2.]])
    """
    return _cholesky(A, upper, True, "linalg.cholesky")


def cholesky_ex(A, *, upper=False, check_errors=False):
    """``(L, info)``: ``cholesky`` without the error. ``info`` (int32) is 0 for a factored
    matrix, else the order of its first leading minor that is not positive-definite, whose
    ``L`` is nan (PyTorch leaves LAPACK's partial factor there)."""
    L = _cholesky(A, upper, check_errors, "linalg.cholesky_ex")
    info = record_op("cholesky_info", (_reflected(to_tensor(A), upper)._node,), None, L.shape[:-2], _int32(), None)
    return _CHOLESKY_EX(L, info)


def _int32():
    from .engine.ir import dtypes as D

    return D.int32


def cholesky_solve(B, L, upper=False):
    """``X`` with ``(L @ L.mT) @ X = B`` from a Cholesky factor ``L`` (``L.mT @ L`` with
    ``upper=True``): two triangular solves, so only the factor's triangle is read and gets a
    gradient (PyTorch's also gives one to the other triangle). Batch dimensions broadcast."""
    B, L = to_tensor(B), _square(L, "cholesky_solve")
    if B.ndim < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {B.ndim} dimensions instead")
    if B.shape[-2] != L.shape[-1]:
        raise RuntimeError(
            f"Incompatible matrix sizes for cholesky_solve: each A matrix is {L.shape[-1]} by {L.shape[-1]} "
            f"but each b matrix is {B.shape[-2]} by {B.shape[-1]}"
        )
    first = solve_triangular(L.mT if upper else L, B, upper=False)
    return named(solve_triangular(L if upper else L.mT, first, upper=True), "CholeskySolveBackward0")


def eigh(A, UPLO="L"):
    """``(eigenvalues, eigenvectors)`` of each symmetric matrix, the eigenvalues in ascending
    order and the eigenvectors as columns; only the lower (``UPLO='L'``) or upper triangle is
    read. The eigenvector gradients divide by the gaps between eigenvalues (inf or nan where two
    are equal, as PyTorch's); a loss of the eigenvalues alone always has a finite gradient.

    >>> import ngrad
    >>> ngrad.linalg.eigh(ngrad.tensor([[2.0, 1.0], [1.0, 2.0]])).eigenvalues
    tensor([1., 3.])
    """
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    A = _square(A, "linalg.eigh")
    n = A.shape[-1]
    packed = _op("eigh", (_reflected(A, UPLO == "U"),), None, A.shape[:-2] + (n + 1, n), "LinalgEighBackward0")
    return _EIGH(named(packed[..., 0, :], "LinalgEighBackward0"), named(packed[..., 1:, :], "LinalgEighBackward0"))


def eigvalsh(A, UPLO="L"):
    """The eigenvalues of each symmetric matrix, in ascending order (``eigh``'s first result)."""
    return eigh(A, UPLO).eigenvalues


def svd(A, full_matrices=True, *, driver=None):
    """``(U, S, Vh)`` with ``A = U @ diag(S) @ Vh``, singular values in descending order;
    ``full_matrices=False`` keeps only min(m, n) columns of U and rows of Vh. As PyTorch's, the
    extra columns of a full U (rows of Vh) get no gradient, and the singular vector gradients
    divide by the gaps between singular values; a loss of ``S`` alone is always finite.

    >>> import ngrad
    >>> ngrad.linalg.svd(ngrad.tensor([[3.0, 0.0], [0.0, -4.0]])).S
    tensor([4., 3.])
    """
    A = _matrices(A, "linalg.svd")
    if driver is not None:
        raise RuntimeError(
            "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER backend."
        )
    m, n = A.shape[-2:]
    full = bool(full_matrices) and m != n
    u, v, k = svd_sizes(m, n, full)
    batch = tuple(A.shape[:-2])
    name = "LinalgSvdBackward0"
    packed = _op("svd", (A,), {"full": full}, batch + (m * u + k + n * v,), name)
    U = packed[..., : m * u].reshape(*batch, m, u)
    V = packed[..., m * u + k :].reshape(*batch, n, v)
    return _SVD(named(U, name), named(packed[..., m * u : m * u + k], name), named(V.mT, name))


def svdvals(A):
    """The singular values of each matrix, in descending order (``svd``'s ``S``)."""
    return svd(_matrices(A, "linalg.svdvals"), full_matrices=False).S


def qr(A, mode="reduced"):
    """``(Q, R)`` with ``A = Q @ R``, Q with orthonormal columns and R upper triangular.
    ``mode``: 'reduced' (k = min(m, n) columns of Q), 'complete' (all m; for m > n not
    differentiable, as PyTorch's) or 'r' (an empty Q and R; ngrad differentiates R, which
    PyTorch refuses). R's diagonal has LAPACK's signs, as PyTorch's.

    >>> import ngrad
    >>> q, r = ngrad.linalg.qr(ngrad.tensor([[3.0, 1.0], [4.0, 2.0]], dtype=ngrad.float64))
    >>> ngrad.allclose(q @ r, ngrad.tensor([[3.0, 1.0], [4.0, 2.0]], dtype=ngrad.float64))
    True
    """
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(
            f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', or 'complete'"
        )
    A = _matrices(A, "linalg.qr")
    m, n = A.shape[-2:]
    square = A if m >= n else A[..., :m]  # Q of a wide matrix is that of its first m columns
    complete = mode == "complete" and m > n
    width = m if complete else square.shape[-1]
    Q = _op("qr", (square,), {"complete": complete}, tuple(A.shape[:-1]) + (width,), "LinalgQrBackward0")
    k = min(m, n)
    R = named((Q[..., :k].mT @ A).triu(), "LinalgQrBackward0")
    if complete:
        R = named(_pad_rows(R, m - n), "LinalgQrBackward0")
    if mode == "r":
        from .factories import zeros

        return _QR(zeros(0, dtype=A.dtype, device=A.device), R)
    return _QR(Q, R)


def _pad_rows(R, rows):
    from .factories import zeros
    from .tensor.functions import cat

    return cat([R, zeros(*R.shape[:-2], rows, R.shape[-1], dtype=R.dtype, device=R.device)], -2)


def _is_zero(v):
    return isinstance(v, (int, float)) and v == 0


def lstsq(A, B, rcond=None, *, driver=None):
    """``(solution, residuals, rank, singular_values)`` of the least-squares problems
    min ||A X - B||: the minimum-norm solution, ``pinv(A) @ B`` with singular values at or below
    ``rcond`` times the largest read as zero (default eps * max(m, n)), which is what PyTorch's
    drivers 'gelsy' (the default), 'gelsd' and 'gelss' compute for any rank; with 'gels', a QR of
    A (or of A^T for wide A), for A of full rank. As PyTorch's, ``residuals`` (the squared
    residual of each column) is computed for tall A with a driver other than 'gelsy' (PyTorch
    leaves it empty for a rank-deficient A, ngrad computes it), ``rank`` for drivers other than
    'gels' and ``singular_values`` for 'gelsd' and 'gelss'; each is empty otherwise. ``B`` may be
    a stack of vectors (..., m); batch dimensions broadcast.

    >>> import ngrad
    >>> A = ngrad.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]], dtype=ngrad.float64)
    >>> ngrad.linalg.lstsq(A, ngrad.tensor([[1.0], [2.0], [4.0]], dtype=ngrad.float64)).solution
    tensor([[0.8333],
            [1.5000]], dtype=ngrad.float64)
    """
    from .factories import zeros

    A, B = _matrices(A, "torch.linalg.lstsq"), to_tensor(B)
    if driver not in (None, "gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    if B.dtype is not A.dtype:
        raise RuntimeError(
            f"torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's dtype "
            f"{TORCH_NAME[A.dtype.short]} and other's dtype {TORCH_NAME[B.dtype.short]}"
        )
    vector = B.ndim == A.ndim - 1  # PyTorch's rule here, unlike solve's
    Bm = B.unsqueeze(-1) if vector else B
    if Bm.ndim < 2 or Bm.shape[-2] != A.shape[-2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    A, Bm = _broadcast_batches(A, Bm)
    m, n = A.shape[-2:]
    driver = driver or "gelsy"
    if driver != "gels":  # the minimum-norm solution, whatever A's rank, as gelsy's, gelsd's and gelss's
        X = pinv(A, rtol=rcond) @ Bm
    elif m >= n:
        q, r = qr(A)
        X = solve_triangular(r, q.mT @ Bm, upper=True)
    else:  # the minimum-norm solution Q R^-T B of A^T = QR
        q, r = qr(A.mT)
        X = q @ solve_triangular(r.mT, Bm, upper=False)
    X = named(X, "LinalgLstsqBackward0")
    empty = zeros(0, dtype=A.dtype, device=A.device)
    residuals = empty
    if m > n and driver != "gelsy":
        residuals = ((A @ X - Bm) ** 2).sum(-2)
    rank = matrix_rank(A.detach(), rtol=rcond) if driver != "gels" else zeros(0, dtype=_int64(), device=A.device)
    sv = svdvals(A.detach()) if driver in ("gelsd", "gelss") else empty
    return _LSTSQ(X.squeeze(-1) if vector else X, residuals, rank, sv)


def _bool():
    from .engine.ir import dtypes as D

    return D.bool_


def _int64():
    from .engine.ir import dtypes as D

    return D.int64


def pinv(A, *, atol=None, rtol=None, hermitian=False):
    """The pseudo-inverse of each matrix, from its SVD (of the symmetric matrix the lower
    triangle holds, with ``hermitian=True``), singular values at or below max(atol, rtol * the largest) read as zero
    (rtol defaults to eps * max(m, n) when neither is given). The gradient is that of the
    composition, PyTorch's for matrices of constant rank.

    >>> import ngrad
    >>> ngrad.linalg.pinv(ngrad.tensor([[2.0, 0.0], [0.0, 0.0]]))
    tensor([[0.5000, 0.0000],
            [0.0000, 0.0000]])
    """
    from .tensor.functions import where

    A = to_tensor(A)
    if A.ndim < 2 or not A.dtype.is_floating_point:
        raise RuntimeError(
            f"linalg.pinv({TORCH_NAME.get(A.dtype.short, A.dtype.short)}{{{list(A.shape)}}}): expected a tensor "
            f"with 2 or more dimensions of float, double, cfloat or cdouble types"
        )
    m, n = A.shape[-2:]
    if hermitian:  # the symmetric matrix of the lower triangle; the gradient is PyTorch's general one
        A = _reflected(_square(A, "linalg.pinv"), False)
    U, S, Vh = svd(A, full_matrices=False)
    cut = _cutoff(S[..., :1] if min(m, n) else S.sum(-1, keepdim=True), atol, rtol, m, n)
    inverse = where(S > cut, 1 / where(S > cut, S, 1.0), 0.0)
    return named((Vh.mT * inverse.unsqueeze(-2)) @ U.mT, "LinalgPinvBackward0")


def _cutoff(top, atol, rtol, m, n):
    """PyTorch's cutoff: max(atol, rtol * the largest singular value), rtol defaulting to
    eps * max(m, n) when neither is given (``top``: the largest, kept as a dimension)."""
    from .tensor.functions import where

    eps = 1.1920928955078125e-07 if top.dtype.short == "f32" else 2.220446049250313e-16
    if rtol is None:
        rtol = eps * max(m, n) if atol is None or _is_zero(atol) else 0.0
    cut = top * rtol if not hasattr(rtol, "ndim") else top * to_tensor(rtol).unsqueeze(-1)
    if atol is not None:
        a = to_tensor(atol, top.dtype)
        a = a.unsqueeze(-1) if a.ndim else a
        cut = where(cut > a, cut, a)
    return cut.detach()


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False):
    """The number of singular values (absolute eigenvalues with ``hermitian``) of each matrix
    above max(atol, rtol * the largest), as an int64 tensor (PyTorch's tolerances)."""
    A = _matrices(A, "linalg.matrix_rank")
    m, n = A.shape[-2:]
    size = eigvalsh(A).abs() if hermitian else svdvals(A)
    top = size.amax(-1, keepdim=True) if min(m, n) else size.sum(-1, keepdim=True)
    return (size > _cutoff(top, atol, rtol, m, n)).sum(-1)


def matrix_exp(A):
    """The matrix exponential of each square matrix (Pade approximation with scaling and
    squaring); its derivatives are exponentials of block matrices, as PyTorch's.

    >>> import ngrad
    >>> ngrad.linalg.matrix_exp(ngrad.tensor([[0.0, 1.0], [0.0, 0.0]]))
    tensor([[1., 1.],
            [0., 1.]])
    """
    A = _square(A, "linalg.matrix_exp")
    return _op("matrix_exp", (A,), None, A.shape, "LinalgMatrixExpBackward0")


def matrix_power(A, n):
    """``A`` multiplied by itself ``n`` times (by repeated squaring); ``n = 0`` gives identity
    matrices and a negative ``n`` powers of the inverse."""
    A = _square(A, "linalg.matrix_power", floating=False)  # integer matrices too, for n >= 0
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"linalg_matrix_power(): argument 'n' (position 2) must be int, not {type(n).__name__}")
    if n == 0:  # identities, with a zero gradient for A as PyTorch's
        from .factories import eye, ones
        from .tensor.functions import where

        identity = eye(A.shape[-1], dtype=A.dtype, device=A.device).expand(*A.shape)
        return where(ones(*A.shape, dtype=_bool(), device=A.device), identity, A)
    if n < 0:
        A, n = inv(A), -n
    result, square = None, A
    while True:  # binary powering: the bits of n, lowest first
        if n & 1:
            result = square if result is None else result @ square
        n >>= 1
        if not n:
            return result
        square = square @ square


def multi_dot(tensors):
    """The product of the matrices in ``tensors`` in the cheapest order (PyTorch's dynamic
    programme over the chain); the first may be a vector (a row) and the last a vector (a
    column), which are dropped from the result's shape."""
    tensors = [to_tensor(t) for t in tensors]
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    first, last = tensors[0], tensors[-1]
    if first.ndim not in (1, 2):
        raise RuntimeError(f"multi_dot(): the first tensor must be 1D or 2D but got {first.ndim}D")
    if last.ndim not in (1, 2):
        raise RuntimeError(f"multi_dot(): the last tensor must be 1D or 2D but got {last.ndim}D")
    for i, t in enumerate(tensors[1:-1], 1):
        if t.ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {t.ndim}D")
    mats = [first.unsqueeze(0) if first.ndim == 1 else first]
    mats += tensors[1:-1] + [last.unsqueeze(-1) if last.ndim == 1 else last]
    for i in range(len(mats) - 1):
        if mats[i].shape[1] != mats[i + 1].shape[0]:
            raise RuntimeError(
                f"multi_dot(): tensors {i} and {i + 1} with shapes {list(tensors[i].shape)} and "
                f"{list(tensors[i + 1].shape)} cannot be multiplied"
            )
    out = _chain(mats)
    if first.ndim == 1:
        out = out.squeeze(0)
    if last.ndim == 1:
        out = out.squeeze(-1)
    return out


def _chain(mats):
    """The product of a chain of matrices in the order of fewest multiplications."""
    dims = [m.shape[0] for m in mats] + [mats[-1].shape[1]]
    k = len(mats)
    cost = [[0] * k for _ in range(k)]
    split = [[0] * k for _ in range(k)]
    for length in range(1, k):
        for i in range(k - length):
            j = i + length
            cost[i][j] = math.inf
            for s in range(i, j):
                c = cost[i][s] + cost[s + 1][j] + dims[i] * dims[s + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, s
    result = {}
    stack = [(0, k - 1, False)]
    while stack:  # iterative: each interval after its two halves
        i, j, ready = stack.pop()
        if i == j:
            result[i, j] = mats[i]
        elif ready:
            s = split[i][j]
            result[i, j] = result[i, s] @ result[s + 1, j]
        else:
            s = split[i][j]
            stack += [(i, j, True), (i, s, False), (s + 1, j, False)]
    return result[0, k - 1]


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """``sum(|x|**ord) ** (1/ord)`` over ``dim`` (all elements by default); ``ord`` may be
    ``inf``, ``-inf`` or 0 (the count of non-zeros). The gradient at 0 is 0."""
    x = to_tensor(x)
    if dtype is not None:
        x = x.to(dtype)
    elif not x.dtype.differentiable:
        raise RuntimeError(
            f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {TORCH_NAME[x.dtype.short]}"
        )
    return x.norm(ord, dim=dim, keepdim=keepdim)  # Tensor.norm takes inf, -inf and 0 too


_MATRIX_ORDS = ("fro", "nuc", 2, -2, 1, -1, math.inf, -math.inf)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """The matrix norm of each matrix over the two dimensions ``dim``: 'fro' (Frobenius),
    'nuc' (the sum of singular values), 2 and -2 (the largest and smallest singular value), 1
    and -1 (the largest and smallest column sum of absolute values), inf and -inf (row sums).

    >>> import ngrad
    >>> ngrad.linalg.matrix_norm(ngrad.tensor([[1.0, -2.0], [3.0, 4.0]]), 1)
    tensor(6.)
    """
    A = to_tensor(A)
    if dtype is not None:
        A = A.to(dtype)
    if A.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    if not A.dtype.is_floating_point:
        raise RuntimeError(
            f"linalg.matrix_norm: Expected a floating point or complex tensor as input. Got {TORCH_NAME[A.dtype.short]}"
        )
    if ord not in _MATRIX_ORDS or isinstance(ord, bool):
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    dim = (dim,) if isinstance(dim, int) else tuple(dim)
    if len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dim))}")
    d0, d1 = (d % A.ndim for d in dim)
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, {dim[1]})")
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    M = A.movedim((d0, d1), (-2, -1))
    if ord in ("nuc", 2, -2):
        S = svdvals(M)
        out = S.sum(-1) if ord == "nuc" else (S.amax(-1) if ord == 2 else S.amin(-1))
    else:
        sums = M.abs().sum(-2 if abs(ord) == 1 else -1)
        out = sums.amax(-1) if ord > 0 else sums.amin(-1)
    if keepdim:
        for d in sorted((d0, d1)):
            out = out.unsqueeze(d)
    return out


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """PyTorch's ``linalg.norm``: with ``ord=None`` the 2-norm of the flattened tensor (or over
    ``dim``); a string ``ord`` is a matrix norm (``matrix_norm``, over the last two dimensions by
    default); a numeric ``ord`` is a vector norm over one dimension and a matrix norm over two,
    and without ``dim`` it needs a 1-D or 2-D input."""
    A = to_tensor(A)
    if isinstance(dim, int):
        dim = (dim,)
    elif dim is not None:
        dim = tuple(dim)
    if isinstance(ord, str):
        if dim is not None and len(dim) != 2:
            raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dim))}")
        return matrix_norm(A, ord, dim if dim is not None else (-2, -1), keepdim, dtype=dtype)
    if ord is None:
        return vector_norm(A, 2, dim, keepdim, dtype=dtype)
    if dim is None:
        if A.ndim not in (1, 2):
            raise RuntimeError(
                f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got {A.ndim}D."
            )
        dim = tuple(range(A.ndim))
    if len(dim) == 2:
        return matrix_norm(A, ord, dim, keepdim, dtype=dtype)
    return vector_norm(A, ord, dim, keepdim, dtype=dtype)


def cross(input, other, *, dim=-1):
    """The cross product of 3-vectors along ``dim`` (the last by default)."""
    return to_tensor(input).cross(other, dim=dim)
