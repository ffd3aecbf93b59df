"""Operations with no single owning tensor: ``pow``, ``where``, ``nonzero``, ``matmul``, ``cat``,
``stack``, ``meshgrid``.

Contract: like every operation, these check operands, infer shape and dtype and record nodes
(through ``record``); PyTorch's argument checks and messages. They import only ``record``.
"""

import numpy as np

from ..engine.ir import dtypes as D
from ..engine.ir.graph import source
from .record import (
    TensorBase,
    binary,
    broadcast_shapes,
    cast_node,
    category,
    const_node,
    expand_node,
    host_value,
    named,
    normalize_dim,
    operands,
    record_op,
    reshape_node,
    scalar_dtype,
    scalar_node,
    to_tensor,
    value_on,
    wrap,
)


def pow(input, exponent):
    """``input ** exponent``; a Python-number exponent is part of the program (``x**2`` -> ``x*x``-able).

    The derivative in the base is 0 where the exponent is 0; in the exponent, 0 where the base
    is 0 and the exponent is non-negative (as in PyTorch).
    """
    if not isinstance(input, TensorBase):
        return to_tensor(exponent).__rpow__(input)
    n = input._node
    c = category(exponent)
    if c is not None:
        d = n.dtype
        if c > d.category:
            d = (D.bool_, D.int64, D.get_default_dtype())[c]
            n = cast_node(n, d)
        if d.category == 1 and exponent < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        return record_op("pow", (n, const_node(exponent, d)), None, n.shape, d, "PowBackward0")
    return binary("pow", input, to_tensor(exponent), "PowBackward1")


def where(condition, input=None, other=None):
    """Elementwise ``input if condition else other``, broadcasting all three.

    With only ``condition``, the indices of its non-zero entries (``nonzero(as_tuple=True)``).
    """
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    cond = to_tensor(condition)
    if cond.dtype is not D.bool_:
        raise RuntimeError(
            f"where expected condition to be a boolean tensor, but got a tensor with dtype "
            f"{cond.dtype.name.capitalize()}"
        )
    if isinstance(input, TensorBase):
        a, b, d = operands(input, other)
    elif isinstance(other, TensorBase):
        b, a, d = operands(other, input)
    else:
        d = D.result_type((), (), (scalar_dtype(input), scalar_dtype(other)))
        a, b = scalar_node(input, d), scalar_node(other, d)
    c = cond._node
    shape = broadcast_shapes(broadcast_shapes(c.shape, a.shape), b.shape)
    return record_op("where", (c, a, b), None, shape, d, "WhereBackward0")


def nonzero(input, *, as_tuple=False):
    """Indices of the non-zero entries (computed at once: the result's size depends on values)."""
    t = to_tensor(input)
    v = host_value(t)
    idx = np.nonzero(v) if v.ndim else np.nonzero(v.reshape(1))

    def placed(a):
        return wrap(source(value_on(np.ascontiguousarray(a, dtype=np.int64), t._node.device), D.int64))

    if as_tuple:
        return tuple(placed(i) for i in idx)
    return placed(np.stack(idx, axis=1) if idx else np.zeros((0, 0)))


def matmul(input, other):
    """Matrix product with NumPy/PyTorch rules for 1-D operands and broadcast batch dimensions."""
    a, b = to_tensor(input), to_tensor(other)
    na, nb = a._node, b._node
    sa, sb = na.shape, nb.shape
    if len(sa) == 2 and len(sb) in (1, 2) and na.dtype is nb.dtype and sa[1] == sb[0]:  # the common case
        if len(sb) == 2:
            return record_op("matmul", (na, nb), None, (sa[0], sb[1]), na.dtype, "MmBackward0")
        out = record_op("matmul", (na, reshape_node(nb, (sb[0], 1))), None, (sa[0], 1), na.dtype, "MvBackward0")
        return wrap(reshape_node(out._node, (sa[0],), "MvBackward0"))
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}")
    sa, sb = a.shape, b.shape
    an = a._node if a.ndim > 1 else reshape_node(a._node, (1,) + sa)
    bn = b._node if b.ndim > 1 else reshape_node(b._node, sb + (1,))
    if an.shape[-1] != bn.shape[-2]:
        if a.ndim == 1 and b.ndim == 1:
            raise RuntimeError(
                f"inconsistent tensor size, expected tensor [{sa[0]}] and src [{sb[0]}] to have "
                f"the same number of elements, but got {sa[0]} and {sb[0]} elements respectively"
            )
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, an.shape[-2:]))} and "
            f"{'x'.join(map(str, bn.shape[-2:]))}) (operand shapes {list(sa)} and {list(sb)})"
        )
    batch = broadcast_shapes(an.shape[:-2], bn.shape[:-2])
    an = expand_node(an, batch + an.shape[-2:])
    bn = expand_node(bn, batch + bn.shape[-2:])
    shape = batch + (an.shape[-2], bn.shape[-1])
    name = (
        "DotBackward0"
        if a.ndim == b.ndim == 1
        else (
            "MmBackward0"
            if a.ndim == b.ndim == 2
            else (
                "MvBackward0"
                if a.ndim == 2 and b.ndim == 1
                else "BmmBackward0"
                if a.ndim == b.ndim == 3
                else "MatmulBackward0"
            )
        )
    )
    out = record_op("matmul", (an, bn), None, shape, an.dtype, name)
    final = shape
    if a.ndim == 1:
        final = final[:-2] + final[-1:]
    if b.ndim == 1:
        final = final[:-1]
    return wrap(reshape_node(out._node, final, name)) if final != shape else out


def cat(tensors, dim=0):
    """Concatenate along an existing dimension (dtypes promote as in PyTorch)."""
    tensors = [to_tensor(t) for t in tensors]
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if not t.ndim:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    ref = tensors[0]
    d = normalize_dim(dim, ref.ndim)
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = D.promote(dtype, t.dtype)
    for i, t in enumerate(tensors):
        if t.ndim != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} and {t.ndim}")
        for k, (a, b) in enumerate(zip(ref.shape, t.shape)):
            if k != d and a != b:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size {a} but "
                    f"got size {b} for tensor number {i} in the list."
                )
    nodes = tuple(cast_node(t._node, dtype) for t in tensors)
    if len(nodes) == 1:
        return record_op("reshape", nodes, {"shape": nodes[0].shape}, nodes[0].shape, dtype, "CatBackward0")
    shape = ref.shape[:d] + (sum(t.shape[d] for t in tensors),) + ref.shape[d + 1 :]
    return record_op("cat", nodes, {"axis": d}, shape, dtype, "CatBackward0")


concat = concatenate = cat


def meshgrid(*tensors, indexing=None):
    """Coordinate grids from 0-d or 1-d tensors: output ``k`` varies along dimension ``k`` with
    ``indexing='ij'`` (the default); ``'xy'`` swaps the first two dimensions (Cartesian order).

    ```python
    >>> import ngrad
    >>> xs, ys = ngrad.meshgrid(ngrad.tensor([1, 2, 3]), ngrad.tensor([10, 20]), indexing="xy")
    >>> xs.shape, ys[:, 0]
    (ngrad.Size([2, 3]), tensor([10, 20]))

    ```
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    indexing = "ij" if indexing is None else indexing
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
    ts = [to_tensor(t) for t in tensors]
    for t in ts:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t.ndim}D")
    ts = [t.reshape(-1) for t in ts]
    order = list(range(len(ts)))
    if indexing == "xy" and len(ts) > 1:
        order[0], order[1] = 1, 0
    shape = [ts[k].shape[0] for k in order]
    grids = []
    for k, t in enumerate(ts):
        axis = order.index(k)
        grids.append(t.reshape(*[-1 if i == axis else 1 for i in range(len(ts))]).expand(*shape))
    return tuple(grids)


def stack(tensors, dim=0):
    """Join tensors of one shape along a new dimension."""
    tensors = [to_tensor(t) for t in tensors]
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} at "
                f"entry 0 and {list(t.shape)} at entry {i}"
            )
    d = normalize_dim(dim, tensors[0].ndim + 1)
    return named(cat([t.unsqueeze(d) for t in tensors], d), "StackBackward0")


def _scatter_into(input, view_of, src, name):
    """A copy of ``input`` whose view ``view_of(copy)`` holds ``src`` (of that view's shape)."""
    src = to_tensor(src)
    out = input.clone()
    window = view_of(out)
    if tuple(src.shape) != tuple(window.shape):
        raise RuntimeError(
            f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
            f"slice size = {list(window.shape)}"
        )
    window.copy_(src)
    return named(out, name)


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """``input`` with the slice ``start:end:step`` along ``dim`` replaced by ``src`` (a new
    tensor; gradients flow to both).

    ```python
    >>> import ngrad
    >>> ngrad.slice_scatter(ngrad.zeros(2, 4), ngrad.ones(2, 2), dim=1, start=0, step=2)
    tensor([[1., 0., 1., 0.],
            [1., 0., 1., 0.]])

    ```
    """
    d = normalize_dim(dim, input.ndim)
    key = (slice(None),) * d + (slice(start, end, step),)
    return _scatter_into(input, lambda t: t[key], src, "SliceScatterBackward0")


def select_scatter(input, src, dim, index):
    """``input`` with ``input.select(dim, index)`` replaced by ``src``."""
    return _scatter_into(input, lambda t: t.select(dim, index), src, "SelectScatterBackward0")


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """``input`` with ``input.diagonal(offset, dim1, dim2)`` replaced by ``src``."""
    return _scatter_into(input, lambda t: t.diagonal(offset, dim1, dim2), src, "DiagonalScatterBackward0")


def as_strided_scatter(input, src, size, stride, storage_offset=None):
    """``input`` with ``input.as_strided(size, stride, storage_offset)`` replaced by ``src``."""
    return _scatter_into(input, lambda t: t.as_strided(size, stride, storage_offset), src, "AsStridedScatterBackward0")
