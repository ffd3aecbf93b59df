"""The scatter family as methods of ``Tensor`` (``scatter``, ``scatter_add``, ``scatter_reduce``,
``index_add``, ``index_copy``, ``index_fill``, ``index_put``, ``masked_scatter``,
``masked_select``, ``put``, ``take``, with their in-place forms) and the structural ops beside
them (``repeat_interleave``, ``kron``, ``rot90``...). Contract: a mixin of ``Tensor``; every
method records through ``record`` or the free functions. ``FUNCTIONS`` names the methods
``ngrad`` also exports as functions (``ngrad.name(input, ...)``); ``__all__`` the free functions
it exports as they are.

Every op checks its operands with PyTorch's error types and phrases before it records. The
scatter forms record the ``scatter``/``scatter_reduce`` rows (``ngrad/engine/ir/prims/scatter.py``);
the index forms turn their one-dimensional index into a scatter index of the source's shape;
``index_put``, ``put`` and ``take`` work on flat positions. Outside ``ngrad.compile`` index
values are read and checked where the op is called; under it they stay steps of the program,
and the rows check them when it runs, so no index reaches a kernel unchecked.
"""

import math

import numpy as np

from .. import grad_mode as _grad_mode
from ..engine.ir import dtypes as D
from .functions import where
from .inplace import check_overlap, inplace_update
from .record import (
    TORCH_NAME,
    TensorBase,
    broadcast_shapes,
    const_node,
    host_value,
    index_source,
    is_number,
    named,
    normalize_dim,
    record_op,
    to_tensor,
    wrap,
)
from .structural import block_diag, cartesian_prod, cdist, combinations, kron, repeat_interleave, rot90

__all__ = ["block_diag", "cartesian_prod", "combinations", "cdist"]
FUNCTIONS: list[str] = [
    "repeat_interleave",
    "kron",
    "rot90",
    "scatter",
    "scatter_add",
    "scatter_reduce",
    "index_add",
    "index_copy",
    "index_fill",
    "index_put",
    "masked_scatter",
    "masked_select",
    "put",
    "take",
]

_gm = _grad_mode.state
_INTS = (D.int32, D.int64)


def _name(t):
    return TORCH_NAME.get(t.dtype.short, t.dtype.name.capitalize())


def _checked(idx, size, dim, error=RuntimeError, prefix=""):
    """The index tensor ``idx`` as int64, its values checked against ``[0, size)`` now outside
    ``ngrad.compile`` (PyTorch's error), or left to the row that reads it under it."""
    if _gm.trace is not None:
        return idx.to(D.int64)
    iv = host_value(idx)
    if iv.size and (iv.min() < 0 or iv.max() >= size):
        bad = int(iv.min() if iv.min() < 0 else iv.max())
        raise error(f"{prefix}index {bad} is out of bounds for dimension {dim} with size {size}")
    return wrap(index_source(iv))


def _wrapped(idx, n):
    """Flat positions ``idx`` into ``n`` elements, negative ones counting from the end (PyTorch's
    ``put`` and ``take``): checked now, or by the row that reads them under ``ngrad.compile``."""
    if _gm.trace is not None:
        i = idx.to(D.int64)
        return where(i < 0, i + n, i)
    iv = host_value(idx)
    if iv.size and (iv.min() < -n or iv.max() >= n):
        bad = int(iv[(iv < -n) | (iv >= n)].reshape(-1)[0])
        raise IndexError(f"out of range: tried to access index {bad} on a tensor of {n} elements.")
    return wrap(index_source(np.where(iv < 0, iv + n, iv)))


def _record_scatter(x, idx, src, axis, name, reduce=None, include_self=True):
    """The ``scatter`` (``reduce`` None) or ``scatter_reduce`` row on checked operands."""
    params = {"axis": axis} if reduce is None else {"axis": axis, "reduce": reduce, "include_self": include_self}
    op = "scatter" if reduce is None else "scatter_reduce"
    n = x._node
    return record_op(op, (n, idx._node, src._node), params, n.shape, n.dtype, name)


def _scatter(self, dim, index, src, value, reduce, include_self, name):
    """PyTorch's checks of ``scatter``/``scatter_add``/``scatter_reduce``, then the row; ``src``
    None: ``value`` fills the index's shape."""
    idx = to_tensor(index)
    if idx.dtype not in _INTS:
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    axis = normalize_dim(dim, max(self.ndim, 1))
    if src is not None:
        src = to_tensor(src)
        if src.dtype is not self.dtype:
            raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    if not idx.numel():
        return named(self.clone(), name)
    x = self.reshape(1) if not self.ndim else self
    i = idx.reshape(1) if not idx.ndim else idx
    s = src.reshape(1) if src is not None and not src.ndim else src
    if i.ndim != x.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if s is not None and s.ndim != i.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    ishape, xshape = tuple(i.shape), tuple(x.shape)
    if any(d != axis and a > b for d, (a, b) in enumerate(zip(ishape, xshape))) or (
        s is not None and any(a > b for a, b in zip(ishape, s.shape))
    ):
        also = f" and to be no larger size than src {list(s.shape)}" if s is not None else ""
        raise RuntimeError(
            f"Expected index {list(ishape)} to be no larger than self {list(xshape)} apart from dimension {axis}{also}"
        )
    if s is None:
        # a 0-d tensor value is PyTorch's Scalar: its value, not its gradient
        fill = value.detach().to(self.dtype) if isinstance(value, TensorBase) else wrap(const_node(value, self.dtype))
        s = fill.reshape(()).expand(ishape)
    elif tuple(s.shape) != ishape:
        s = s[tuple(slice(0, a) for a in ishape)]  # only the part the index covers is read
    out = _record_scatter(x, _checked(i, xshape[axis], axis), s.contiguous(), axis, name, reduce, include_self)
    return out.reshape(()) if not self.ndim else out


def _along(idx, axis, shape):
    """A one-dimensional index along ``axis`` as a scatter index of ``shape``."""
    return idx.reshape(tuple(-1 if d == axis else 1 for d in range(len(shape)))).expand(shape)


def _index_source(op, self, dim, index, source, long_only):
    """PyTorch's checks of ``index_add``/``index_copy``; the (index, source, axis) of the scatter
    that does it, on one-dimensional views of 0-d operands."""
    idx, src = to_tensor(index), to_tensor(source)
    if long_only and idx.dtype is not D.int64:
        raise RuntimeError(f"{op}(): Expected a long tensor for index, but got {_name(idx)}")
    if idx.dtype not in _INTS:
        raise RuntimeError(f"{op}(): Expected dtype int32/int64 for index but got: {_name(idx)}")
    if idx.ndim > 1:
        raise IndexError(
            f"{op}(): Index is supposed to be a vector, but got dim: {idx.ndim} with type: {_name(idx)} "
            f"and size: {list(idx.shape)}"
        )
    axis = normalize_dim(dim, max(self.ndim, 1))
    if src.dtype is not self.dtype:
        raise RuntimeError(f"{op}(): self ({_name(self)}) and source ({_name(src)}) must have the same scalar type")
    n = src.shape[axis] if src.ndim else 1
    if idx.numel() != n:
        sep = ": " if op == "index_add_" else " "
        end = f", for dim: {axis}" if op == "index_add_" else ""
        err = RuntimeError if op == "index_add_" else IndexError
        raise err(f"{op}(): Number of indices ({idx.numel()}) should be equal to source.size(dim){sep}({n}){end}")
    x, s = self.reshape(1) if not self.ndim else self, src.reshape(1) if not src.ndim else src
    strict = op == "index_add_" and self.ndim != src.ndim  # index_copy_ takes a 0-d tensor for one entry
    if strict or x.ndim != s.ndim or any(d != axis and a != b for d, (a, b) in enumerate(zip(x.shape, s.shape))):
        raise RuntimeError(
            "source tensor shape must match self tensor shape, excluding the specified dimension. "
            f"Got self.shape = {list(self.shape)} source.shape = {list(src.shape)}"
        )
    error, prefix = (RuntimeError, "") if op == "index_add_" else (IndexError, f"{op}(): ")
    i = _checked(idx.reshape(-1), x.shape[axis], axis, error, prefix)
    return x, _along(i, axis, tuple(s.shape)), s, axis


def _flat_scatter(self, pos, vals, accumulate, name):
    """``self`` with the flat positions ``pos`` set to (or, accumulating, added) ``vals``."""
    flat = self.reshape(-1)
    if not pos.numel():
        return named(self.clone(), name)
    out = _record_scatter(flat, pos.reshape(-1), vals.reshape(-1).contiguous(), 0, name, "sum" if accumulate else None)
    return named(out.reshape(tuple(self.shape)), name)


class ScatterOps:
    """The scatter family methods, a mixin of ``Tensor``."""

    __slots__ = ()

    def scatter(self, dim, index, src=None, value=None, *, reduce=None):
        """A copy with ``src`` (a tensor, or a number ``value``) written at ``index`` along
        ``dim``: ``out[index[i][j]][j] = src[i][j]`` for ``dim=0``. Of repeated positions the
        last write wins, as on PyTorch's CPU. ``reduce='add'`` or ``'multiply'`` combines
        instead (``scatter_reduce`` has more reductions).

        ```python
        >>> import ngrad
        >>> x = ngrad.zeros(2, 3)
        >>> x.scatter(1, ngrad.tensor([[2], [0]]), ngrad.tensor([[5.0], [7.0]]))
        tensor([[0., 0., 5.],
                [7., 0., 0.]])
        >>> x.scatter(0, ngrad.tensor([[1, 1, 0]]), 2.0, reduce="add")
        tensor([[0., 0., 2.],
                [2., 2., 0.]])

        ```
        """
        if src is not None and (is_number(src) or (isinstance(src, TensorBase) and not src.ndim)):
            src, value = None, src  # PyTorch's value overload takes numbers and 0-d tensors
        if src is None and value is None:
            raise TypeError("scatter() missing 1 required positional argument: 'src' or 'value'")
        if reduce is not None and reduce not in ("add", "multiply"):
            raise RuntimeError("reduce argument must be either add or multiply.")
        how = {None: None, "add": "sum", "multiply": "prod"}[reduce]
        name = "ScatterBackward0" if src is not None else "ScatterBackward1"
        return _scatter(self, dim, index, src, value, how, True, name)

    def scatter_add(self, dim, index, src):
        """A copy with ``src`` added at ``index`` along ``dim`` (repeated positions add up).

        ```python
        >>> import ngrad
        >>> ngrad.zeros(3).scatter_add(0, ngrad.tensor([0, 2, 0]), ngrad.tensor([1.0, 2.0, 3.0]))
        tensor([4., 0., 2.])

        ```
        """
        if not isinstance(src, TensorBase):
            raise TypeError(f"scatter_add(): argument 'src' (position 3) must be Tensor, not {type(src).__name__}")
        return _scatter(self, dim, index, src, None, "sum", True, "ScatterAddBackward0")

    def scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
        """A copy with ``src`` combined into the positions ``index`` names along ``dim`` by
        ``reduce`` (``'sum'``, ``'prod'``, ``'mean'``, ``'amax'``, ``'amin'``), with this
        tensor's own value among the terms when ``include_self``. Gradients are PyTorch's
        (exact with zeros for ``'prod'``; spread evenly over ties for ``'amax'``/``'amin'``).

        ```python
        >>> import ngrad
        >>> x = ngrad.tensor([1.0, 10.0])
        >>> idx, src = ngrad.tensor([0, 0, 1]), ngrad.tensor([4.0, 2.0, 3.0])
        >>> x.scatter_reduce(0, idx, src, "amax"), x.scatter_reduce(0, idx, src, "mean", include_self=False)
        (tensor([ 4., 10.]), tensor([3., 3.]))

        ```
        """
        from ..engine.ir.prims.scatter import REDUCTIONS

        if reduce not in REDUCTIONS:
            raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
        return _scatter(self, dim, index, src, None, reduce, bool(include_self), "ScatterReduceBackward0")

    def index_add(self, dim, index, source, *, alpha=1):
        """A copy with ``alpha * source`` added at the entries ``index`` names along ``dim``
        (repeated entries add up).

        ```python
        >>> import ngrad
        >>> ngrad.zeros(3, 2).index_add(0, ngrad.tensor([2, 0, 2]), ngrad.ones(3, 2), alpha=2)
        tensor([[2., 2.],
                [0., 0.],
                [4., 4.]])

        ```
        """
        x, idx, src, axis = _index_source("index_add_", self, dim, index, source, False)
        if alpha != 1:
            src = src * alpha
        out = _record_scatter(x, idx, src.contiguous(), axis, "IndexAddBackward0", "sum")
        return out.reshape(()) if not self.ndim else out

    def index_copy(self, dim, index, source):
        """A copy with the entries ``index`` names along ``dim`` replaced by ``source``'s (of a
        repeated entry, the last one).

        ```python
        >>> import ngrad
        >>> ngrad.zeros(3).index_copy(0, ngrad.tensor([2, 0]), ngrad.tensor([5.0, 6.0]))
        tensor([6., 0., 5.])

        ```
        """
        x, idx, src, axis = _index_source("index_copy_", self, dim, index, source, True)
        out = _record_scatter(x, idx, src.contiguous(), axis, "IndexCopyBackward0")
        return out.reshape(()) if not self.ndim else out

    def index_fill(self, dim, index, value):
        """A copy with the entries ``index`` names along ``dim`` (negative ones counting from
        the end) set to ``value`` (a number or a 0-d tensor, which gets the gradient).

        ```python
        >>> import ngrad
        >>> ngrad.zeros(2, 3).index_fill(1, ngrad.tensor([0, -1]), 7.0)
        tensor([[7., 0., 7.],
                [7., 0., 7.]])

        ```
        """
        idx = to_tensor(index)
        if idx.dtype is not D.int64:
            raise IndexError("index_fill_(): Expected dtype int64 for index.")
        if idx.ndim > 1:
            raise RuntimeError("Index has to be a vector/scalar")
        if isinstance(value, TensorBase) and value.ndim:
            raise RuntimeError(
                "index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                f"{value.ndim} dimension(s)."
            )
        axis = normalize_dim(dim, max(self.ndim, 1))
        n = self.shape[axis] if self.ndim else 1
        if _gm.trace is None:
            iv = host_value(idx).reshape(-1)
            if iv.size and (iv.min() < -n or iv.max() >= n):
                bad = int(iv[(iv < -n) | (iv >= n)][0])
                raise IndexError(f"index {bad} is out of bounds for dimension {axis} with size {n}")
            hit = np.zeros(n, bool)
            hit[iv] = True
            mask = wrap(index_source(hit)).to(D.bool_)
        else:  # the positions as a scatter of ones, whose row checks them when the program runs
            i = idx.reshape(-1)
            i = where(i < 0, i + n, i)
            ones = wrap(const_node(1, D.int64)).expand((i.numel(),))
            mask = _record_scatter(wrap(const_node(0, D.int64)).expand((n,)), i, ones, 0, "IndexFillBackward0") > 0
        shape = tuple(self.shape)
        mask = mask.reshape(tuple(-1 if d == axis else 1 for d in range(len(shape)))).expand(shape)
        fill = to_tensor(value).to(self.dtype) if isinstance(value, TensorBase) else wrap(const_node(value, self.dtype))
        name = "IndexFillBackward1" if isinstance(value, TensorBase) else "IndexFillBackward0"
        return named(where(mask, fill.expand(shape), self), name)

    def index_put(self, indices, values, accumulate=False):
        """A copy with ``values`` written (``accumulate``: added) at ``self[indices]``
        (``indices`` a tuple of integer or boolean tensors, broadcast as in indexing).

        ```python
        >>> import ngrad
        >>> x = ngrad.zeros(2, 3)
        >>> rows, cols = ngrad.tensor([0, 1, 0]), ngrad.tensor([2, 0, 2])
        >>> x.index_put((rows, cols), ngrad.tensor([1.0, 2.0, 3.0]), accumulate=True)
        tensor([[0., 0., 4.],
                [2., 0., 0.]])

        ```
        """
        indices = tuple(indices)
        for k, t in enumerate(indices):
            if not isinstance(t, TensorBase):
                raise TypeError(f"expected Tensor as element {k} in argument 0, but got {type(t).__name__}")
        vals = to_tensor(values)
        if vals.dtype is not self.dtype:
            raise RuntimeError(
                f"Index put requires the source and destination dtypes match, got {_name(self)} for the "
                f"destination and {_name(vals)} for the source."
            )
        shape = tuple(self.shape)
        picked = wrap(index_source(np.arange(math.prod(shape)).reshape(shape)))[indices]
        sel = tuple(picked.shape)
        try:
            if np.broadcast_shapes(tuple(vals.shape), sel) != sel:
                raise ValueError
        except ValueError:
            raise RuntimeError(
                f"shape mismatch: value tensor of shape {list(vals.shape)} cannot be broadcast to indexing "
                f"result of shape {list(sel)}"
            ) from None
        return _flat_scatter(self, picked, vals.expand(sel), accumulate, "IndexPutBackward0")

    def masked_scatter(self, mask, source):
        """A copy (broadcast with ``mask``) whose elements where ``mask`` is True are taken, in
        order, from ``source``'s first elements.

        ```python
        >>> import ngrad
        >>> mask = ngrad.tensor([[True, False], [True, True]])
        >>> ngrad.zeros(2, 2).masked_scatter(mask, ngrad.tensor([1.0, 2.0, 3.0, 4.0]))
        tensor([[1., 0.],
                [2., 3.]])

        ```
        """
        m, src = to_tensor(mask), to_tensor(source)
        if m.dtype is not D.bool_:
            raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype {_name(m)}")
        if src.dtype is not self.dtype:
            raise RuntimeError(
                f"masked_scatter: expected self and source to have same dtypes but got{_name(self)} and {_name(src)}"
            )
        shape = tuple(broadcast_shapes(tuple(m.shape), tuple(self.shape)))
        flat_mask = m.expand(shape).reshape(-1)
        if _gm.trace is None and int(host_value(flat_mask).sum()) > src.numel():
            raise RuntimeError("Number of elements of source < number of ones in mask")
        base = self.expand(shape)
        if not src.numel() or not flat_mask.numel():
            return named(base.clone(), "MaskedScatterBackward0")
        # the k-th selected element reads source's k-th: a mask's running count is its index
        at = flat_mask.to(D.int64).cumsum(0) - 1
        at = where(at < 0, wrap(const_node(0, D.int64)), at)
        n = src.reshape(-1)._node
        picked = record_op("index", (n, at._node), {"axis": 0}, (at.numel(),), n.dtype, "MaskedScatterBackward0")
        return named(where(flat_mask, picked, base.reshape(-1)).reshape(shape), "MaskedScatterBackward0")

    def masked_select(self, mask):
        """The elements where ``mask`` (broadcast with this tensor) is True, as a vector.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([[1.0, 2.0], [3.0, 4.0]]).masked_select(ngrad.tensor([True, False]))
        tensor([1., 3.])

        ```
        """
        m = to_tensor(mask)
        if m.dtype is not D.bool_:
            raise RuntimeError("masked_select: expected BoolTensor for mask")
        shape = tuple(broadcast_shapes(tuple(m.shape), tuple(self.shape)))
        x = self.expand(shape).reshape(-1)
        return named(x[m.expand(shape).reshape(-1)], "MaskedSelectBackward0")

    def put(self, index, source, accumulate=False):
        """A copy with ``source`` written (``accumulate``: added) at the flat positions
        ``index`` (as if this tensor were one-dimensional; negative ones count from the end).

        ```python
        >>> import ngrad
        >>> ngrad.zeros(2, 2).put(ngrad.tensor([3, -4]), ngrad.tensor([1.0, 2.0]))
        tensor([[2., 0.],
                [0., 1.]])

        ```
        """
        idx, src = to_tensor(index), to_tensor(source)
        if idx.dtype is not D.int64:
            raise RuntimeError(f"put_(): Expected a long tensor for index, but got {_name(idx)}")
        if src.dtype is not self.dtype:
            raise RuntimeError(
                "put_(): self and source expected to have the same dtype, but got "
                f"self.dtype = {_name(self)} and source.dtype = {_name(src)}"
            )
        if idx.numel() != src.numel():
            raise IndexError(
                "put_(): Expected source and index to have the same number of elements, but got "
                f"source.numel() = {src.numel()}, index.numel() = {idx.numel()}"
            )
        pos = _wrapped(idx.reshape(-1), self.numel()) if idx.numel() else idx.reshape(-1)
        return _flat_scatter(self, pos, src, accumulate, "PutBackward0")

    def take(self, index):
        """The elements at the flat positions ``index`` (as if this tensor were one-dimensional;
        negative ones count from the end), in ``index``'s shape.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([[1.0, 2.0], [3.0, 4.0]]).take(ngrad.tensor([[3, 0], [-1, 1]]))
        tensor([[4., 1.],
                [4., 2.]])

        ```
        """
        idx = to_tensor(index)
        if idx.dtype is not D.int64:
            raise RuntimeError(f"take(): Expected a long tensor for index, but got {_name(idx)}")
        flat = self.reshape(-1)
        if not idx.numel():
            return named(flat[:0].reshape(tuple(idx.shape)), "TakeBackward0")
        pos = _wrapped(idx.reshape(-1), self.numel())
        n = flat._node
        out = record_op("gather", (n, pos._node), {"axis": 0}, (pos.numel(),), n.dtype, "TakeBackward0")
        return named(out.reshape(tuple(idx.shape)), "TakeBackward0")

    # in place: the out-of-place result written into this tensor (through views, into their base)
    def scatter_(self, dim, index, src=None, value=None, *, reduce=None):
        check_overlap(self, src)
        return inplace_update(self, self.scatter(dim, index, src, value, reduce=reduce))

    def scatter_add_(self, dim, index, src):
        check_overlap(self, src)
        return inplace_update(self, self.scatter_add(dim, index, src))

    def scatter_reduce_(self, dim, index, src, reduce, *, include_self=True):
        check_overlap(self, src)
        return inplace_update(self, self.scatter_reduce(dim, index, src, reduce, include_self=include_self))

    def index_add_(self, dim, index, source, *, alpha=1):
        check_overlap(self, source)
        return inplace_update(self, self.index_add(dim, index, source, alpha=alpha))

    def index_copy_(self, dim, index, source):
        check_overlap(self, source)
        return inplace_update(self, self.index_copy(dim, index, source))

    def index_fill_(self, dim, index, value):
        check_overlap(self, value)
        return inplace_update(self, self.index_fill(dim, index, value))

    def index_put_(self, indices, values, accumulate=False):
        check_overlap(self, values)
        return inplace_update(self, self.index_put(indices, values, accumulate))

    def masked_scatter_(self, mask, source):
        check_overlap(self, source)
        return inplace_update(self, self.masked_scatter(mask, source))

    def put_(self, index, source, accumulate=False):
        check_overlap(self, source)
        return inplace_update(self, self.put(index, source, accumulate))

    # structural ops (ngrad/tensor/structural.py)
    def repeat_interleave(self, repeats=None, dim=None, *, output_size=None):
        return repeat_interleave(self, repeats, dim, output_size=output_size)

    def kron(self, other):
        return kron(self, other)

    def rot90(self, k=1, dims=(0, 1)):
        return rot90(self, k, dims)


for _f in (ScatterOps.repeat_interleave, ScatterOps.kron, ScatterOps.rot90):
    _f.__doc__ = globals()[_f.__name__].__doc__
