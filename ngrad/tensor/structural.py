"""Structural ops beside the scatter family: ``repeat_interleave``, ``kron``, ``rot90``,
``block_diag``, ``cartesian_prod``, ``combinations`` and ``cdist``.

Contract: each checks its operands with PyTorch's error types and phrases, then is written in
the table's movement, indexing and elementwise rows (no rows of their own), so gradients,
forward mode, ``ngrad.compile`` and the CUDA target come with them. Index arrays computed from
Python values (``combinations``, tensor ``repeats``) are made here and checked before use.
``cdist`` has PyTorch's gradients, zero at zero distance for every ``p``.
"""

import itertools
import math

import numpy as np

from ..engine.ir import dtypes as D
from .functions import cat, meshgrid, stack, where
from .record import (
    TORCH_NAME,
    TensorBase,
    broadcast_shapes,
    const_node,
    host_value,
    index_source,
    named,
    normalize_dim,
    to_tensor,
    wrap,
)

__all__ = ["block_diag", "cartesian_prod", "combinations", "cdist"]


def _zero(t):
    return wrap(const_node(0, t.dtype))


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Each element (or slice along ``dim``; the flattened tensor when ``dim`` is None) repeated
    ``repeats`` times (an int, or a tensor of one count per element). With ``repeats`` None,
    ``input`` holds the counts and the result repeats their positions.

    ```python
    >>> import ngrad
    >>> x = ngrad.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> x.repeat_interleave(2, dim=1)
    tensor([[1., 1., 2., 2.],
            [3., 3., 4., 4.]])
    >>> x.repeat_interleave(ngrad.tensor([0, 2]), dim=0)
    tensor([[3., 4.],
            [3., 4.]])
    >>> ngrad.repeat_interleave(ngrad.tensor([1, 0, 2]))
    tensor([0, 2, 2])

    ```
    """
    if repeats is None:  # the counts are the input: repeat their positions
        if input.ndim != 1:
            raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
        if input.dtype not in (D.int32, D.int64):
            raise NotImplementedError(
                f"\"repeat_interleave_cpu\" not implemented for '{TORCH_NAME[input.dtype.short]}'"
            )
        counts = host_value(input)
        if counts.size and counts.min() < 0:
            raise RuntimeError("repeats can not be negative")
        return wrap(index_source(np.repeat(np.arange(counts.size), counts))).to(input.dtype)
    x = input.reshape(-1) if dim is None else input
    d = 0 if dim is None else normalize_dim(dim, max(x.ndim, 1))
    x = x.reshape(1) if not x.ndim else x
    n = x.shape[d]
    if isinstance(repeats, TensorBase):
        if repeats.ndim > 1:
            raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
        if repeats.dtype not in (D.int32, D.int64):
            raise NotImplementedError(
                f"\"repeat_interleave_cpu\" not implemented for '{TORCH_NAME.get(repeats.dtype.short, 'Float')}'"
            )
        counts = host_value(repeats).reshape(-1)
        if counts.size == 1:
            counts = np.repeat(counts, n)
        if counts.size != n:
            raise RuntimeError(
                "repeats must have the same size as input along dim, but got repeats.size(0) = "
                f"{counts.size} and input.size({d}) = {n}"
            )
        if counts.size and counts.min() < 0:
            raise RuntimeError("repeats can not be negative")
        if output_size is not None and output_size != int(counts.sum()):
            raise RuntimeError("allocated size does not match required size")
        at = wrap(index_source(np.repeat(np.arange(n), counts)))
        return named(x.index_select(d, at), "IndexSelectBackward0")
    r = int(repeats)
    if r < 0:
        raise RuntimeError("Repeats must be non-negative")
    if output_size is not None and output_size != r * n:
        raise RuntimeError(f"repeat_interleave: Invalid output_size, expected {r * n} but got {output_size}")
    shape = tuple(x.shape)
    out = x.unsqueeze(d + 1).expand(*shape[: d + 1], r, *shape[d + 1 :])
    return out.reshape(*shape[:d], n * r, *shape[d + 1 :])


def kron(input, other):
    """The Kronecker product: ``out[i * m + j] = input[i] * other[j]`` along every dimension
    (the shorter shape padded with leading ones).

    ```python
    >>> import ngrad
    >>> ngrad.kron(ngrad.tensor([1.0, 10.0]), ngrad.tensor([[1.0, 2.0]]))
    tensor([[ 1.,  2., 10., 20.]])

    ```
    """
    a, b = to_tensor(input), to_tensor(other)
    nd = max(a.ndim, b.ndim)
    sa, sb = (1,) * (nd - a.ndim) + tuple(a.shape), (1,) * (nd - b.ndim) + tuple(b.shape)
    ai = a.reshape(*(v for s in sa for v in (s, 1)))
    bi = b.reshape(*(v for s in sb for v in (1, s)))
    return named((ai * bi).reshape(*(p * q for p, q in zip(sa, sb))), "KronBackward0")


def rot90(input, k=1, dims=(0, 1)):
    """Rotated by 90 degrees ``k`` times in the plane of ``dims``, from the first towards the
    second.

    ```python
    >>> import ngrad
    >>> ngrad.tensor([[1.0, 2.0], [3.0, 4.0]]).rot90()
    tensor([[2., 4.],
            [1., 3.]])

    ```
    """
    dims = list(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.ndim}")
    d0, d1 = normalize_dim(dims[0], input.ndim), normalize_dim(dims[1], input.ndim)
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
    k %= 4
    if k == 1:
        return input.flip(d1).transpose(d0, d1)
    if k == 2:
        return input.flip(d0, d1)
    if k == 3:
        return input.flip(d0).transpose(d0, d1)
    return input.clone()


def block_diag(*tensors):
    """The tensors (0-, 1- or 2-dimensional: a 0-d one is 1x1, a vector one row) placed along
    the diagonal of a matrix of zeros.

    ```python
    >>> import ngrad
    >>> ngrad.block_diag(ngrad.tensor([[1.0, 2.0]]), ngrad.tensor(3.0))
    tensor([[1., 2., 0.],
            [0., 0., 3.]])

    ```
    """
    from ..factories import zeros

    mats = []
    for k, t in enumerate(tensors):
        t = to_tensor(t)
        if t.ndim > 2:
            raise RuntimeError(
                f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {k} has {t.ndim} dimensions"
            )
        mats.append(t.reshape(1, 1) if not t.ndim else t.reshape(1, -1) if t.ndim == 1 else t)
    if not mats:
        return zeros(1, 0)
    dtype = D.result_type([m.dtype for m in mats])
    cols = sum(m.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        right = cols - left - m.shape[1]
        parts = [zeros(m.shape[0], left, dtype=dtype)] if left else []
        parts += [m.to(dtype)] + ([zeros(m.shape[0], right, dtype=dtype)] if right else [])
        rows.append(cat(parts, 1) if len(parts) > 1 else parts[0])
        left += m.shape[1]
    return cat(rows, 0) if len(rows) > 1 else rows[0].clone()


def _vector(t):
    if t.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")
    return t


def cartesian_prod(*tensors):
    """Every combination of one element from each vector, as the rows of a matrix (one vector:
    itself).

    ```python
    >>> import ngrad
    >>> ngrad.cartesian_prod(ngrad.tensor([1, 2]), ngrad.tensor([5, 6]))
    tensor([[1, 5],
            [1, 6],
            [2, 5],
            [2, 6]])

    ```
    """
    ts = [_vector(to_tensor(t)) for t in tensors]
    if len(ts) == 1:
        return ts[0]
    if not ts:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    if any(t.dtype is not ts[0].dtype for t in ts):
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    return stack([g.reshape(-1) for g in meshgrid(*ts, indexing="ij")], 1)


def combinations(input, r=2, with_replacement=False):
    """The length-``r`` combinations of a vector's elements, in order, as rows (with
    ``with_replacement``, elements may repeat).

    ```python
    >>> import ngrad
    >>> ngrad.combinations(ngrad.tensor([1.0, 2.0, 3.0]))
    tensor([[1., 2.],
            [1., 3.],
            [2., 3.]])

    ```
    """
    x = _vector(to_tensor(input))
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return x[:0].clone()
    make = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    at = np.array(list(make(range(x.shape[0]), r)), np.int64).reshape(-1, r)
    return x[wrap(index_source(at))] if at.size else x[:0].reshape(0, r).clone()


def _cdist_checks(x1, x2, p, compute_mode):
    for name, t in (("X1", x1), ("X2", x2)):
        if t.ndim < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: {t.ndim}D")
        if t.dtype.category != 2:
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: {TORCH_NAME[t.dtype.short]}")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    if x1.dtype is not x2.dtype:
        raise RuntimeError(f"expected scalar type {TORCH_NAME[x1.dtype.short]} but found {TORCH_NAME[x2.dtype.short]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    modes = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")
    if compute_mode not in modes:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")


def _safe_pow(a, zero, e):
    """``a ** e`` for ``a >= 0``, zero (with a zero gradient) where ``zero``: the power is taken
    of one there, so no infinite derivative is ever multiplied by zero."""
    return where(zero, _zero(a), where(zero, wrap(const_node(1, a.dtype)), a) ** e)


def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """The ``p``-norm distance between each row of ``x1`` (``..., P, M``) and each row of
    ``x2`` (``..., R, M``): a ``..., P, R`` tensor (batch dimensions broadcast). ``p`` may be
    0 (the count of differing coordinates), any positive number, or ``inf``. Gradients are
    PyTorch's, zero where a distance is zero; the distances are always computed directly (the
    ``compute_mode`` of PyTorch's matrix-product shortcut is accepted and has no effect).

    ```python
    >>> import ngrad
    >>> a, b = ngrad.tensor([[0.0, 0.0], [1.0, 1.0]]), ngrad.tensor([[3.0, 4.0]])
    >>> ngrad.cdist(a, b), ngrad.cdist(a, b, p=1), ngrad.cdist(a, b, p=float("inf"))
    (tensor([[5.0000],
            [3.6056]]), tensor([[7.],
            [5.]]), tensor([[4.],
            [3.]]))

    ```
    """
    x1, x2 = to_tensor(x1), to_tensor(x2)
    _cdist_checks(x1, x2, p, compute_mode)
    batch = tuple(broadcast_shapes(tuple(x1.shape[:-2]), tuple(x2.shape[:-2])))
    a = x1.expand(*batch, *x1.shape[-2:]).unsqueeze(-2)
    b = x2.expand(*batch, *x2.shape[-2:]).unsqueeze(-3)
    d = a - b
    if p == 0:  # a count: its gradient is zero, as PyTorch's, but it is one
        none = wrap(const_node(False, D.bool_)).expand(tuple(d.shape))
        out = (d != 0).to(d.dtype).sum(-1) + where(none, d, _zero(d)).sum(-1)
    elif p == 1:
        out = d.abs().sum(-1)
    elif p == 2:
        s = (d * d).sum(-1)
        out = _safe_pow(s, s == 0, 0.5)
    elif math.isinf(p):  # the largest |d|, its gradient to every coordinate that reaches it
        m = d.abs().amax(-1, keepdim=True).detach()
        hit = (d.abs() == m).to(d.dtype)
        out = m.squeeze(-1) + (hit * (d.abs() - d.abs().detach())).sum(-1)
    else:
        ad = d.abs()
        s = _safe_pow(ad, ad == 0, p).sum(-1)
        out = _safe_pow(s, s == 0, 1.0 / p)
    return named(out, "CdistBackward0")
