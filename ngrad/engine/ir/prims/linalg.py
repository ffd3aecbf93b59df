"""Rows of the primitive table: linear algebra on stacks of matrices (LAPACK through NumPy, run
as glue steps on every target), with the NumPy implementations the interpreter's math namespace
takes from ``Numpy``.

Contract: every row works on the last two axes and takes any leading batch axes as they are.
A decomposition with several results is one row with one packed result, which the facade
slices: ``eigh`` gives (..., n + 1, n) (the eigenvalues in ascending order, then the
eigenvectors as columns), ``svd`` a flat (..., m*u + k + n*v) (U by rows, S, V by rows: V, not
Vh), ``slogdet`` (..., 2) (sign, log|det|). ``cholesky`` and ``eigh`` read the symmetric part
of their operand, (A + A^T) / 2, so their VJPs (PyTorch's symmetric gradients) are the exact
derivatives of their forwards; the facade passes the triangle PyTorch reads through a splice,
so values are PyTorch's. ``cholesky`` raises PyTorch's error naming the function ``check`` (nan
factors where ``check`` is empty, for ``cholesky_ex``, whose ``info`` is the non-differentiable
``cholesky_info`` row). ``qr`` gives Q of a matrix with at least as many rows as columns (R is
Q^T A, upper triangular, in the facade). The derivative rules are PyTorch's
(FunctionsManual.cpp), written in rows of the table, so they differentiate again. Where two
eigenvalues (singular values) are equal the eigenvector (singular vector) terms divide by zero,
as PyTorch's; a term whose numerator is also exactly zero is zero instead, which is what PyTorch
computes when only the eigenvalues (singular values) get a gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import shapes as S
from .table import Cotangents, P, Params, Tangents, matrix_t, per_arg, sole, zeros_like

if TYPE_CHECKING:
    from ..tape import Var

Shape = tuple[int, ...]


class LinAlgError(RuntimeError):
    """PyTorch's ``torch.linalg.LinAlgError``: a decomposition of a value failed (a matrix that
    is not positive-definite, a singular one)."""


# --- shape rules ---------------------------------------------------------------------------------


def square(shapes: Sequence[Shape], dtypes: Sequence[str]) -> S.Typed:
    a = shapes[0]
    if len(a) < 2 or a[-1] != a[-2] or dtypes[0][0] != "f":
        S.fail(f"{a}:{dtypes[0]} is not a stack of square float matrices")
    return a, dtypes[0]


def _solve(shapes: Sequence[Shape], dtypes: Sequence[str], **flags: bool) -> S.Typed:
    a, b = shapes
    square(shapes[:1], dtypes)
    if len(b) != len(a) or b[:-2] != a[:-2] or b[-2] != a[-1] or dtypes[1] != dtypes[0]:
        S.fail(f"solve operands {a}:{dtypes[0]} and {b}:{dtypes[1]} do not fit")
    return b, dtypes[0]


def _det(shapes: Sequence[Shape], dtypes: Sequence[str]) -> S.Typed:
    return square(shapes, dtypes)[0][:-2], dtypes[0]


def _slogdet(shapes: Sequence[Shape], dtypes: Sequence[str]) -> S.Typed:
    return square(shapes, dtypes)[0][:-2] + (2,), dtypes[0]


def _info(shapes: Sequence[Shape], dtypes: Sequence[str]) -> S.Typed:
    return square(shapes, dtypes)[0][:-2], "i32"


def _eigh(shapes: Sequence[Shape], dtypes: Sequence[str]) -> S.Typed:
    a = square(shapes, dtypes)[0]
    return a[:-2] + (a[-1] + 1, a[-1]), dtypes[0]


def svd_sizes(m: int, n: int, full: bool) -> tuple[int, int, int]:
    """The widths of U and V and the count of singular values of an m x n SVD."""
    k = min(m, n)
    return (m, n, k) if full else (k, k, k)


def _svd(shapes: Sequence[Shape], dtypes: Sequence[str], full: bool) -> S.Typed:
    a = shapes[0]
    if len(a) < 2 or dtypes[0][0] != "f":
        S.fail(f"{a}:{dtypes[0]} is not a stack of float matrices")
    m, n = a[-2:]
    u, v, k = svd_sizes(m, n, full)
    return a[:-2] + (m * u + k + n * v,), dtypes[0]


def _qr(shapes: Sequence[Shape], dtypes: Sequence[str], complete: bool) -> S.Typed:
    a = shapes[0]
    if len(a) < 2 or a[-2] < a[-1] or dtypes[0][0] != "f":
        S.fail(f"{a}:{dtypes[0]} is not a stack of float matrices with no more columns than rows")
    return a[:-1] + (a[-2] if complete else a[-1],), dtypes[0]


# --- NumPy forwards ------------------------------------------------------------------------------


def _lapack(fn: Callable[..., np.ndarray], name: str, *args: np.ndarray) -> np.ndarray:
    try:
        return fn(*args)
    except np.linalg.LinAlgError:
        raise LinAlgError(f"{name}: The input matrix is singular, so the computation could not be completed") from None


def _symmetric(a: np.ndarray) -> np.ndarray:
    return (a + np.swapaxes(a, -1, -2)) * 0.5


def leading_minor_orders(a: np.ndarray) -> np.ndarray:
    """For each matrix of the stack, the order of its first leading minor that is not
    positive-definite (0 where the matrix has a Cholesky factor): LAPACK's ``info``."""
    stack = np.asarray(a).reshape((-1,) + a.shape[-2:])
    info = np.zeros(len(stack), np.int32)
    for b, m in enumerate(stack):
        try:
            np.linalg.cholesky(m)
            continue
        except np.linalg.LinAlgError:
            pass
        for k in range(1, m.shape[-1] + 1):
            try:
                np.linalg.cholesky(m[:k, :k])
            except np.linalg.LinAlgError:
                info[b] = k
                break
    return info.reshape(a.shape[:-2])


def _not_positive_definite(sym: np.ndarray, name: str) -> LinAlgError:
    """PyTorch's error (of function ``name``) for the first matrix of the stack with no Cholesky
    factor."""
    info = leading_minor_orders(sym).reshape(-1)
    b = int(np.flatnonzero(info)[0])
    where = f"(Batch element {b}): " if sym.ndim > 2 else ""
    return LinAlgError(
        f"{name}: {where}The factorization could not be completed because the input is not "
        f"positive-definite (the leading minor of order {info[b]} is not positive-definite)."
    )


def _substitute(t: np.ndarray, b: np.ndarray, upper: bool) -> np.ndarray:
    """Forward or back substitution, for a triangular system LAPACK's solver calls singular:
    PyTorch's triangular solve divides by the zero pivot (inf and nan) instead of failing."""
    x = np.zeros(b.shape, np.result_type(t, b))
    for i in range(t.shape[-1] - 1, -1, -1) if upper else range(t.shape[-1]):
        rest = np.einsum("...j,...jk->...k", t[..., i, :], x)
        x[..., i, :] = (b[..., i, :] - rest) / t[..., i, i, None]
    return x


_BLOCK = 64  # the order up to which a triangular system goes to LAPACK's solver whole


def _triangular(t: np.ndarray, b: np.ndarray, upper: bool) -> np.ndarray:
    """``X`` with ``T X = B`` for triangular ``T``: halves solved in turn with the coupling block
    applied by one matrix product, so the work is BLAS's (n^2 k multiply-adds, where a general
    solver would also factor T); LAPACK's solver takes the small diagonal blocks."""
    n = t.shape[-1]
    if n <= _BLOCK:
        try:
            return np.linalg.solve(t, b)
        except np.linalg.LinAlgError:
            return _substitute(t, b, upper)
    h = n // 2
    if upper:
        low = _triangular(t[..., h:, h:], b[..., h:, :], upper)
        high = _triangular(t[..., :h, :h], b[..., :h, :] - t[..., :h, h:] @ low, upper)
    else:
        high = _triangular(t[..., :h, :h], b[..., :h, :], upper)
        low = _triangular(t[..., h:, h:], b[..., h:, :] - t[..., h:, :h] @ high, upper)
    return np.concatenate([high, low], axis=-2)


# Higham's degree-13 Pade approximant of exp and the 1-norm up to which it needs no scaling
_PADE = (
    64764752532480000.0,
    32382376266240000.0,
    7771770303897600.0,
    1187353796428800.0,
    129060195264000.0,
    10559470521600.0,
    670442572800.0,
    33522128640.0,
    1323241920.0,
    40840800.0,
    960960.0,
    16380.0,
    182.0,
    1.0,
)
_THETA13 = 5.371920351148152


def _expm(a: np.ndarray) -> np.ndarray:
    """exp of each matrix by scaling and squaring (Higham 2005), each scaled by its own power
    of two."""
    if a.size == 0:
        return a.copy()
    b = _PADE
    norm = np.abs(a).sum(axis=-2).max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.ceil(np.log2(norm / _THETA13))
    s = np.where(np.isfinite(s) & (s > 0), s, 0).astype(np.int64)
    x = a / np.exp2(s).astype(a.dtype)[..., None, None]
    eye = np.eye(a.shape[-1], dtype=a.dtype)
    x2 = x @ x
    x4 = x2 @ x2
    x6 = x4 @ x2
    u = x @ (x6 @ (b[13] * x6 + b[11] * x4 + b[9] * x2) + b[7] * x6 + b[5] * x4 + b[3] * x2 + b[1] * eye)
    v = x6 @ (b[12] * x6 + b[10] * x4 + b[8] * x2) + b[6] * x6 + b[4] * x4 + b[2] * x2 + b[0] * eye
    with np.errstate(all="ignore"):
        try:
            r = np.linalg.solve(v - u, v + u)
        except np.linalg.LinAlgError:  # a non-finite input: PyTorch's result is nan too
            return np.full(a.shape, np.nan, a.dtype)
        for i in range(int(s.max())):
            r = np.where((s > i)[..., None, None], r @ r, r)
    return r.astype(a.dtype, copy=False)


class Numpy:
    """The NumPy forward of each row below (part of the interpreter's math namespace)."""

    @staticmethod
    def inv(a: np.ndarray) -> np.ndarray:
        return _lapack(np.linalg.inv, "linalg.inv", a)

    @staticmethod
    def solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _lapack(np.linalg.solve, "linalg.solve", a, b)

    det = staticmethod(np.linalg.det)

    @staticmethod
    def slogdet(a: np.ndarray) -> np.ndarray:
        sign, logabs = np.linalg.slogdet(a)
        return np.stack([sign, logabs], axis=-1).astype(a.dtype, copy=False)

    @staticmethod
    def cholesky(a: np.ndarray, check: str) -> np.ndarray:
        """The lower factor; where there is none, PyTorch's error naming the function ``check``
        (or nan where ``check`` is empty)."""
        sym = _symmetric(a)
        try:
            return np.linalg.cholesky(sym)
        except np.linalg.LinAlgError:
            if check:
                raise _not_positive_definite(sym, check) from None
        failed = leading_minor_orders(sym) != 0
        safe = np.where(failed[..., None, None], np.eye(a.shape[-1], dtype=a.dtype), sym)
        return np.where(failed[..., None, None], np.nan, np.linalg.cholesky(safe)).astype(a.dtype, copy=False)

    @staticmethod
    def cholesky_info(a: np.ndarray) -> np.ndarray:
        return leading_minor_orders(_symmetric(a))

    @staticmethod
    def solve_triangular(a: np.ndarray, b: np.ndarray, upper: bool, unitriangular: bool) -> np.ndarray:
        n = a.shape[-1]
        t = np.triu(a, 1 if unitriangular else 0) if upper else np.tril(a, -1 if unitriangular else 0)
        if unitriangular:
            t = t + np.eye(n, dtype=a.dtype)
        with np.errstate(all="ignore"):
            return _triangular(t, b, upper)

    @staticmethod
    def eigh(a: np.ndarray) -> np.ndarray:
        w, v = np.linalg.eigh(_symmetric(a))
        return np.concatenate([w[..., None, :], v], axis=-2)

    @staticmethod
    def svd(a: np.ndarray, full: bool) -> np.ndarray:
        u, s, vh = np.linalg.svd(a, full_matrices=full)
        v = np.swapaxes(vh, -1, -2)
        flat = [x.reshape(x.shape[:-2] + (x.shape[-2] * x.shape[-1],)) for x in (u, v)]
        flat.insert(1, s)
        return np.concatenate(flat, axis=-1)

    @staticmethod
    def qr(a: np.ndarray, complete: bool) -> np.ndarray:
        return np.linalg.qr(a, mode="complete" if complete else "reduced")[0]

    matrix_exp = staticmethod(_expm)


# --- building blocks of the rules ----------------------------------------------------------------


def _last(v: Var, start: int, stop: int, axis: int = -1) -> Var:
    """``v`` sliced to ``start:stop`` on one axis (the last by default)."""
    r = len(v.shape)
    axis %= r
    return v.slice(
        starts=tuple(start if i == axis else 0 for i in range(r)),
        stops=tuple(stop if i == axis else s for i, s in enumerate(v.shape)),
        steps=(1,) * r,
    )


def diagonal(m: Var) -> Var:
    """The main diagonals of a stack of square matrices (..., n, n) -> (..., n)."""
    *batch, n, _ = m.shape
    flat = m.reshape(shape=(*batch, n * n))
    r = len(batch) + 1
    return flat.slice(starts=(0,) * r, stops=(*batch, n * n), steps=(1,) * (r - 1) + (n + 1,))


def diag_embed(d: Var) -> Var:
    """Square matrices holding ``d`` (..., n) on their diagonals, zeros elsewhere."""
    *batch, n = d.shape
    r = len(d.shape)
    flat = d.unslice(shape=(*batch, n * n), starts=(0,) * r, stops=(*batch, n * n), steps=(1,) * (r - 1) + (n + 1,))
    return flat.reshape(shape=(*batch, n, n))


def _eye(like: Var) -> Var:
    """Identity matrices of the shape and dtype of the square stack ``like``."""
    return diag_embed(like.bld.full(1, like.shape[:-1], like.dtype))


def triangle(v: Var, upper: bool, strict: bool) -> Var:
    """``v`` (..., n, n) with zeros outside its lower (upper) triangle, the diagonal out too
    when ``strict``: PyTorch's tril and triu, as a ``where`` (an infinity outside stays out)."""
    n = v.shape[-1]
    one = v.bld.full(1, (n,), v.dtype)
    lower = diag_embed(one).cumsum(axis=0)  # ones on and below the diagonal
    keep = (lower - diag_embed(one) if strict else lower).gt(0.5)
    if upper:
        keep = keep.permute(perm=(1, 0))
    r = len(v.shape)
    keep = keep.reshape(shape=(1,) * (r - 2) + (n, n)).expand(shape=v.shape)
    return keep.where(v, zeros_like(v))


def _quotient(num: Var, den: Var) -> Var:
    """``num / den`` off the diagonal and zero on it; zero too where both are exactly zero (no
    gradient reached a pair of equal eigenvalues or singular values, so no 0 / 0: PyTorch's
    result when only the eigenvalues get a gradient). A mask on both keeps the rule linear in
    ``num`` wherever ``den`` is not zero, so forward mode through the reverse of the reverse is
    exact too."""
    off = triangle(num, False, True) + triangle(num, True, True)
    both = den.eq(0).logical_and(num.eq(0))
    return both.where(zeros_like(num), off / (den + _eye(den)))


def _scaled(x: Var, s: Var) -> Var:
    """``x / s`` (``s`` spread to x's shape), zero where both are exactly zero."""
    both = s.eq(0).logical_and(x.eq(0))
    return both.where(zeros_like(x), x / s)


def _row(v: Var) -> Var:
    """(..., k) -> (..., 1, k): a vector that scales the columns of a matrix."""
    return v.reshape(shape=v.shape[:-1] + (1, v.shape[-1]))


def _col(v: Var) -> Var:
    return v.reshape(shape=v.shape + (1,))


def _spread(v: Var, like: Var) -> Var:
    return v.expand(shape=like.shape)


def _tri_solve(a: Var, b: Var, upper: bool) -> Var:
    return a.solve_triangular(b, upper=upper, unitriangular=False)


# --- triangular solves, Cholesky, determinants ---------------------------------------------------


def _solve_vjp(need: Sequence[bool], g: Var, out: Var, args: Sequence[Var], params: Params) -> Cotangents:
    a = args[0]
    gb = matrix_t(a).solve(g)  # one solve with A^T serves both cotangents
    return [-gb.matmul(matrix_t(out)) if need[0] else None, gb if need[1] else None]


def _solve_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    (ta, tb), a = ts, args[0]
    terms = [t for t in (tb, -ta.matmul(out) if ta is not None else None) if t is not None]
    return a.solve(terms[0] if len(terms) == 1 else terms[0] + terms[1])


def _tri_vjp(need: Sequence[bool], g: Var, out: Var, args: Sequence[Var], params: Params) -> Cotangents:
    a, upper, unit = args[0], params["upper"], params["unitriangular"]
    gb = matrix_t(a).solve_triangular(g, upper=not upper, unitriangular=unit)
    ga = triangle(-gb.matmul(matrix_t(out)), upper, unit) if need[0] else None
    return [ga, gb if need[1] else None]


def _tri_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    (ta, tb), a = ts, args[0]
    rhs = tb
    if ta is not None:
        moved = -triangle(ta, params["upper"], params["unitriangular"]).matmul(out)
        rhs = moved if rhs is None else rhs + moved
    assert rhs is not None
    return a.solve_triangular(rhs, **params)


def _cholesky_vjp(g: Var, out: Var, a: Var, check: str) -> Var:
    # PyTorch's: L^-T Sym(tril(L^T gL)) L^-1, with Sym halving the diagonal
    lt = matrix_t(out)
    x = triangle(lt.matmul(g), False, False)
    p = (x + matrix_t(triangle(x, False, True))) * 0.5
    y = _tri_solve(lt, p, True)  # L^-T P
    return matrix_t(_tri_solve(lt, matrix_t(y), True))  # (L^-T (L^-T P)^T)^T = L^-T P L^-1


def _cholesky_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    t = sole(ts)
    sym = (t + matrix_t(t)) * 0.5
    y = _tri_solve(out, sym, False)  # L^-1 S
    x = matrix_t(_tri_solve(out, matrix_t(y), False))  # L^-1 S L^-T
    return out.matmul(triangle(x, False, True) + diag_embed(diagonal(x) * 0.5))


def _prod_others(s: Var) -> Var:
    """Entry i: the product of the entries of ``s`` (..., n) other than the i-th, exact with
    zeros (each row of an n x n spread with its diagonal read as one)."""
    n = s.shape[-1]
    spread = _row(s).expand(shape=s.shape + (n,))
    ones = s.bld.full(1, spread.shape, s.dtype)
    return _eye(spread).gt(0.5).where(ones, spread).prod(axes=(len(spread.shape) - 1,), keepdim=False)


def cofactor(a: Var) -> Var:
    """The cofactor matrix of each square matrix, det(A) A^-T where A is invertible, from an
    SVD (det(U) det(V) U diag(prod of the other singular values) V^T), so singular matrices
    have theirs: PyTorch's gradient of det."""
    n = a.shape[-1]
    u, s, v = svd_parts(a.svd(full=False), n, n, False)
    sign = (u.det() * v.det()).detach()  # +-1, constant where the SVD is smooth
    scale = _prod_others(s) * _spread(_col(sign), s)
    return (u * _spread(_row(scale), u)).matmul(matrix_t(v))


def _det_vjp(g: Var, out: Var, a: Var) -> Var:
    return _spread(g.reshape(shape=out.shape + (1, 1)), a) * cofactor(a)


def _det_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    t, (a,) = sole(ts), args
    r = len(a.shape)
    return (cofactor(a) * t).sum(axes=(r - 2, r - 1), keepdim=False)


def _slogdet_vjp(g: Var, out: Var, a: Var) -> Var:
    glog = _last(g, 1, 2).reshape(shape=out.shape[:-1] + (1, 1))
    return _spread(glog, a) * matrix_t(a.inv())  # the sign is constant: no gradient


def _slogdet_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    t, (a,) = sole(ts), args
    r = len(a.shape)
    dlog = (matrix_t(a.inv()) * t).sum(axes=(r - 2, r - 1), keepdim=False).reshape(shape=out.shape[:-1] + (1,))
    return zeros_like(dlog).cat(dlog, axis=r - 2)


P(
    "inv",
    "linalg",
    square,
    lambda m, a: m.inv(a),
    per_arg(lambda g, out, a: -matrix_t(out).matmul(g).matmul(matrix_t(out))),
    lambda ts, out, args, params: -out.matmul(sole(ts)).matmul(out),
)
P("solve", "linalg", _solve, lambda m, a, b: m.solve(a, b), _solve_vjp, _solve_jvp)
P(
    "solve_triangular",
    "linalg",
    _solve,
    lambda m, a, b, upper, unitriangular: m.solve_triangular(a, b, upper, unitriangular),
    _tri_vjp,
    _tri_jvp,
)
P("det", "linalg", _det, lambda m, a: m.det(a), per_arg(_det_vjp), _det_jvp)
P("slogdet", "linalg", _slogdet, lambda m, a: m.slogdet(a), per_arg(_slogdet_vjp), _slogdet_jvp)
P(
    "cholesky",
    "linalg",
    lambda shapes, dtypes, check: square(shapes, dtypes),
    lambda m, a, check: m.cholesky(a, check),
    per_arg(_cholesky_vjp),
    _cholesky_jvp,
)
P("cholesky_info", "linalg", _info, lambda m, a: m.cholesky_info(a))


# --- eigen and singular value decompositions, QR -------------------------------------------------


def eigh_parts(packed: Var) -> tuple[Var, Var]:
    """The eigenvalues (..., n) and eigenvectors (..., n, n) of an ``eigh`` result."""
    n = packed.shape[-1]
    return _last(packed, 0, 1, -2).reshape(shape=packed.shape[:-2] + (n,)), _last(packed, 1, n + 1, -2)


def _gaps(w: Var) -> Var:
    """E_ij = w_j - w_i."""
    n = w.shape[-1]
    full = w.shape + (n,)
    return _row(w).expand(shape=full) - _col(w).expand(shape=full)


def _eigh_vjp(g: Var, out: Var, a: Var) -> Var:
    gw, gv = eigh_parts(g)
    w, v = eigh_parts(out)
    vtgv = matrix_t(v).matmul(gv)
    inner = _quotient((vtgv - matrix_t(vtgv)) * 0.5, _gaps(w)) + diag_embed(gw)
    return v.matmul(inner).matmul(matrix_t(v))


def _eigh_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    t, (w, v) = sole(ts), eigh_parts(out)
    m = matrix_t(v).matmul((t + matrix_t(t)) * 0.5).matmul(v)
    dw = _row(diagonal(m))
    dv = v.matmul(_quotient(m, _gaps(w)))
    return dw.cat(dv, axis=len(dw.shape) - 2)


def svd_parts(packed: Var, m: int, n: int, full: bool) -> tuple[Var, Var, Var]:
    """U (..., m, u), S (..., k) and V (..., n, v) of an m x n ``svd`` result."""
    u, v, k = svd_sizes(m, n, full)
    batch = packed.shape[:-1]
    U = _last(packed, 0, m * u).reshape(shape=(*batch, m, u))
    s = _last(packed, m * u, m * u + k)
    V = _last(packed, m * u + k, m * u + k + n * v).reshape(shape=(*batch, n, v))
    return U, s, V


def _first_columns(x: Var, k: int) -> Var:
    return x if x.shape[-1] == k else _last(x, 0, k)


def _svd_vjp(g: Var, out: Var, a: Var, full: bool) -> Var:
    # PyTorch's svd_backward; with full_matrices the extra columns of U and V get no gradient
    m, n = a.shape[-2:]
    k = min(m, n)
    gu, gs, gv = (_first_columns(x, k) for x in svd_parts(g, m, n, full))
    u, s, v = (_first_columns(x, k) for x in svd_parts(out, m, n, full))
    utgu, vtgv = matrix_t(u).matmul(gu), matrix_t(v).matmul(gv)
    utgu, vtgv = utgu - matrix_t(utgu), vtgv - matrix_t(vtgv)
    srow, scol = _spread(_row(s), utgu), _spread(_col(s), utgu)
    inner = _quotient(utgu * srow + scol * vtgv, _gaps(s * s)) + diag_embed(gs)
    if m > k:
        gus = _scaled(gu, _spread(_row(s), gu))
        return (u.matmul(inner) + gus - u.matmul(matrix_t(u).matmul(gus))).matmul(matrix_t(v))
    if n > k:
        gvt = matrix_t(gv)
        sgv = _scaled(gvt, _spread(_col(s), gvt))
        return u.matmul(inner.matmul(matrix_t(v)) + sgv - sgv.matmul(v).matmul(matrix_t(v)))
    return u.matmul(inner).matmul(matrix_t(v))


def _widen(x: Var, width: int) -> Var:
    """``x`` with zero columns appended up to ``width``."""
    if x.shape[-1] == width:
        return x
    return x.cat(x.bld.full(0, x.shape[:-1] + (width - x.shape[-1],), x.dtype), axis=len(x.shape) - 1)


def _svd_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    t, a = sole(ts), args[0]
    m, n = a.shape[-2:]
    k = min(m, n)
    u, s, v = svd_parts(out, m, n, False)
    tv = t.matmul(v)
    dp = matrix_t(u).matmul(tv)
    srow, scol, e = _spread(_row(s), dp), _spread(_col(s), dp), _gaps(s * s)
    du = u.matmul(_quotient(dp * srow + scol * matrix_t(dp), e))
    dv = v.matmul(_quotient(scol * dp + matrix_t(dp) * srow, e))
    if m > k:
        du = du + (tv - u.matmul(dp)) / _spread(_row(s), du)
    if n > k:
        ttu = matrix_t(t).matmul(u)
        dv = dv + (ttu - v.matmul(matrix_t(dp))) / _spread(_row(s), dv)
    if params["full"]:  # the extra columns get no tangent, as PyTorch's
        du, dv = _widen(du, m), _widen(dv, n)
    batch = out.shape[:-1]
    parts = [du.reshape(shape=(*batch, m * du.shape[-1])), diagonal(dp), dv.reshape(shape=(*batch, n * dv.shape[-1]))]
    return parts[0].cat(parts[1], parts[2], axis=len(batch))


def _r_factor(q: Var, a: Var) -> Var:
    return triangle(matrix_t(q).matmul(a), True, False)


def _qr_complete(a: Var, complete: bool) -> None:
    if complete and a.shape[-2] > a.shape[-1]:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")


def _qr_vjp(g: Var, out: Var, a: Var, complete: bool) -> Var:
    # gA = [gQ + Q (tril(M - M^T, -1) - M)] R^-T with M = Q^T gQ: Q's part of PyTorch's rule
    _qr_complete(a, complete)
    r = _r_factor(out, a)
    mq = matrix_t(out).matmul(g)
    x = g + out.matmul(triangle(mq - matrix_t(mq), False, True) - mq)
    return matrix_t(_tri_solve(r, matrix_t(x), True))


def _qr_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    t, a = sole(ts), args[0]
    _qr_complete(a, params["complete"])
    r = _r_factor(out, a)
    tr = matrix_t(_tri_solve(matrix_t(r), matrix_t(t), False))  # dA R^-1
    c = matrix_t(out).matmul(tr)
    low = triangle(c, False, True)
    return out.matmul(low - matrix_t(low) - c) + tr


def _expm_block(a: Var, t: Var) -> Var:
    """The upper right block of exp([[A, T], [0, A]]): the derivative of exp at A along T."""
    r, n = len(a.shape), a.shape[-1]
    top = a.cat(t, axis=r - 1)
    block = top.cat(zeros_like(a).cat(a, axis=r - 1), axis=r - 2).matrix_exp()
    return _last(_last(block, 0, n, -2), n, 2 * n)


P("eigh", "linalg", _eigh, lambda m, a: m.eigh(a), per_arg(_eigh_vjp), _eigh_jvp)
P("svd", "linalg", _svd, lambda m, a, full: m.svd(a, full), per_arg(_svd_vjp), _svd_jvp)
P("qr", "linalg", _qr, lambda m, a, complete: m.qr(a, complete), per_arg(_qr_vjp), _qr_jvp)
P(
    "matrix_exp",
    "linalg",
    square,
    lambda m, a: m.matrix_exp(a),
    per_arg(lambda g, out, a: _expm_block(matrix_t(a), g)),
    lambda ts, out, args, params: _expm_block(args[0], sole(ts)),
)
