"""``ngrad.linalg``: PyTorch's ``torch.linalg`` for real square systems and norms.

``inv``, ``solve`` and ``det`` are primitives (LAPACK through NumPy, on stacks of matrices,
with their derivative rules in the primitive table), so they differentiate to any order and in
forward mode; the norms are compositions.

```python
>>> import ngrad
>>> A = ngrad.tensor([[3.0, 1.0], [1.0, 2.0]], dtype=ngrad.float64, requires_grad=True)
>>> b = ngrad.tensor([9.0, 8.0], dtype=ngrad.float64)
>>> x = ngrad.linalg.solve(A, b)
>>> x
tensor([2., 3.], dtype=ngrad.float64, grad_fn=<LinalgSolveExBackward0>)
>>> ngrad.linalg.det(A).backward()  # det(A) inv(A)^T
>>> ngrad.allclose(A.grad, ngrad.tensor([[2.0, -1.0], [-1.0, 3.0]], dtype=ngrad.float64))
True

```
"""

from .tensor.record import TORCH_NAME, broadcast_shapes, named, record_op, to_tensor

__all__ = ["inv", "solve", "det", "vector_norm", "norm", "cross"]


def _square(A, name):
    A = to_tensor(A)
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(
            f"{name}: A must be batches of square matrices, but they are {A.shape[-2]} by {A.shape[-1]} matrices"
        )
    if not A.dtype.is_floating_point:
        raise RuntimeError(
            f"{name}: Expected a floating point or complex tensor as input. Got {TORCH_NAME[A.dtype.short]}"
        )
    return A


def inv(A):
    """The inverse of each square matrix in ``A`` (..., n, n); a singular one raises a
    RuntimeError when the value is computed."""
    A = _square(A, "linalg.inv")
    n = A._node
    return record_op("inv", (n,), None, n.shape, n.dtype, "LinalgInvExBackward0")


def solve(A, B, *, left=True):
    """``X`` with ``A @ X = B`` (``X @ A = B`` for ``left=False``). ``B`` is a stack of matrices
    (..., n, k), or of vectors (..., n) when it has one dimension fewer than ``A`` and their
    shapes agree that way (PyTorch's rule); batch dimensions broadcast."""
    A, B = _square(A, "linalg.solve"), to_tensor(B)
    if not left:
        return solve(A.mT, B.mT).mT
    if B.dtype is not A.dtype:
        raise RuntimeError(
            f"linalg.solve: Expected A and B to have the same dtype, but found A of type "
            f"{TORCH_NAME[A.dtype.short]} and B of type {TORCH_NAME[B.dtype.short]} instead"
        )
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    Bm = B.unsqueeze(-1) if vector else B
    if Bm.ndim < 2 or Bm.shape[-2] != A.shape[-1]:
        raise RuntimeError(
            f"linalg.solve: Incompatible shapes of A and B for the equation AX = B "
            f"({A.shape[-2]}x{A.shape[-1]} and {'x'.join(map(str, Bm.shape[-2:]))})"
        )
    batch = broadcast_shapes(tuple(A.shape[:-2]), tuple(Bm.shape[:-2]))
    A = A.expand(*batch, *A.shape[-2:]) if tuple(A.shape[:-2]) != batch else A
    Bm = Bm.expand(*batch, *Bm.shape[-2:]) if tuple(Bm.shape[:-2]) != batch else Bm
    a, b = A._node, Bm._node
    X = record_op("solve", (a, b), None, b.shape, b.dtype, "LinalgSolveExBackward0")
    return named(X.squeeze(-1), "LinalgSolveExBackward0") if vector else X


def det(A):
    """The determinant of each square matrix in ``A``. Its gradient, ``det(A) inv(A)^T``, needs
    ``A`` invertible (PyTorch's also covers singular matrices)."""
    A = _square(A, "linalg.det")
    n = A._node
    return record_op("det", (n,), None, n.shape[:-2], n.dtype, "LinalgDetBackward0")


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """``sum(|x|**ord) ** (1/ord)`` over ``dim`` (all elements by default); ``ord`` may be
    ``inf``, ``-inf`` or 0 (the count of non-zeros). The gradient at 0 is 0."""
    x = to_tensor(x)
    if dtype is not None:
        x = x.to(dtype)
    elif not x.dtype.is_floating_point:
        raise RuntimeError(
            f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {TORCH_NAME[x.dtype.short]}"
        )
    return x.norm(ord, dim=dim, keepdim=keepdim)  # Tensor.norm takes inf, -inf and 0 too


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """The 2-norm of the flattened tensor (``ord=None``), a vector norm over one ``dim``, or the
    Frobenius norm (``ord='fro'``) over two."""
    A = to_tensor(A)
    if ord in (None, "fro") and (dim is None or isinstance(dim, int) or len(dim) <= 2):
        if ord == "fro" and (dim is None and A.ndim != 2 or isinstance(dim, int)):
            raise RuntimeError("linalg.norm: the Frobenius norm needs a matrix (two dimensions)")
        return vector_norm(A, 2, dim, keepdim, dtype=dtype)
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.norm: ord={ord!r} is not supported (the nuclear norm needs an SVD)")
    if dim is None and A.ndim != 1 or dim is not None and not isinstance(dim, int) and len(dim) != 1:
        raise RuntimeError(
            f"linalg.norm: a numeric ord={ord} needs one dimension: ngrad has no matrix norms "
            f"other than the Frobenius norm"
        )
    return vector_norm(A, ord, dim, keepdim, dtype=dtype)


def cross(input, other, *, dim=-1):
    """The cross product of 3-vectors along ``dim`` (the last by default)."""
    return to_tensor(input).cross(other, dim=dim)
