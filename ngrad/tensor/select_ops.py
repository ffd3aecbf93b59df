"""Scans and selection methods of ``Tensor`` (``cumprod``, ``logcumsumexp``, ``cummax``/``cummin``,
``median``, ``nanmedian``, ``kthvalue``, ``quantile``/``nanquantile``, ``mode``, ``unique``,
``unique_consecutive``, ``histc``) and the free functions ``searchsorted`` and ``bucketize``.

Contract: a mixin of ``Tensor``; every method records through ``record`` or the free functions.
``FUNCTIONS`` names the methods ``ngrad`` also exports as functions (``ngrad.name(input, ...)``);
``__all__`` the free functions it exports as they are. Order statistics select through a stable
sort (NaN largest) and gather the values at the selected indices, so gradients go where PyTorch
sends them; results whose size depends on values (``unique``) realize their input, as ``nonzero``
does. Named-tuple results follow PyTorch's field names.
"""

import math
from collections import namedtuple

import numpy as np

from .. import grad_mode
from ..engine.ir import dtypes as D
from ..engine.ir.graph import Node, source
from .functions import where
from .record import (
    TORCH_NAME,
    TensorBase,
    cast_node,
    host_value,
    named,
    normalize_dim,
    record_op,
    scalar_dtype,
    to_tensor,
    value_on,
    wrap,
)

__all__ = ["searchsorted", "bucketize"]
FUNCTIONS = """cumprod logcumsumexp cummax cummin median nanmedian kthvalue quantile nanquantile mode unique
unique_consecutive histc""".split()

_CUMMAX = namedtuple("cummax", ["values", "indices"])
_CUMMIN = namedtuple("cummin", ["values", "indices"])
_MEDIAN = namedtuple("median", ["values", "indices"])
_NANMEDIAN = namedtuple("nanmedian", ["values", "indices"])
_KTHVALUE = namedtuple("kthvalue", ["values", "indices"])
_MODE = namedtuple("mode", ["values", "indices"])
_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _placed(array, like, dtype):
    """A host array as a constant tensor on ``like``'s device."""
    value = np.ascontiguousarray(array, dtype=dtype.np).reshape(np.shape(array))  # 0-d stays 0-d
    return wrap(source(value_on(value, like._node.device), dtype))


def _not_implemented(kernel, t):
    return NotImplementedError(f"\"{kernel}\" not implemented for '{TORCH_NAME.get(t.dtype.short, t.dtype.name)}'")


def _c_number(v):
    """A double as C++'s stream prints it in PyTorch's messages (``1``, ``0.5``, ``inf``)."""
    return f"{v:g}"


class SelectOps:
    """Scans and selection methods, a mixin of ``Tensor``."""

    __slots__ = ()

    # scans -------------------------------------------------------------------------------------------------
    def cumprod(self, dim, *, dtype=None):
        """The cumulative product along ``dim``. Its gradient is exact where the input has zeros
        (PyTorch's rule: no division by a zero), and integer inputs give int64, as PyTorch's.

        ```python
        >>> import ngrad
        >>> x = ngrad.tensor([2.0, 0.0, 3.0], requires_grad=True)
        >>> x.cumprod(0).sum().backward()
        >>> x.grad
        tensor([1., 8., 0.])

        ```
        """
        n = self._node
        if dtype is not None:
            n = cast_node(n, dtype)
        elif n.dtype.category < 2:
            n = cast_node(n, D.int64)
        axis = normalize_dim(dim, len(n.shape))
        if not n.shape:
            return wrap(n) if n is not self._node else self.clone()
        return record_op("cumprod", (n,), {"axis": axis}, n.shape, n.dtype, "CumprodBackward0")

    def logcumsumexp(self, dim):
        """``log(cumsum(exp(x)))`` along ``dim``, computed without overflow (a running
        ``logaddexp``); floating inputs only, as PyTorch's.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([-1000.0, 0.0, 0.0]).logcumsumexp(0)
        tensor([-1.0000e+03,  0.0000e+00,  6.9315e-01])

        ```
        """
        n = self._node
        axis = normalize_dim(dim, len(n.shape))
        if not n.dtype.is_floating_point:
            raise _not_implemented("logcumsumexp_out_cpu", self)
        if not n.shape:
            return self.clone()
        return record_op("logcumsumexp", (n,), {"axis": axis}, n.shape, n.dtype, "LogcumsumexpBackward0")

    def _cum_extreme(self, op, dim, name, tup):
        axis = normalize_dim(dim, self.ndim)
        x = self if self.ndim else self.reshape(1)
        idx = wrap(Node(op, (x._node,), {"axis": axis}, x._node.shape, D.int64))  # a plain tuple, not a Size
        values = named(x.gather(axis, idx), name)
        if not self.ndim:
            values, idx = named(values.reshape(()), name), idx.reshape(())
        return tup(values, idx)

    def cummax(self, dim):
        """``(values, indices)`` of the running maximum along ``dim``: on ties the latest index,
        and NaN once one is seen (its latest index), as PyTorch's. The gradient of the values
        goes to the index of the running maximum.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([1.0, 3.0, 2.0, 3.0]).cummax(0)
        cummax(values=tensor([1., 3., 3., 3.]), indices=tensor([0, 1, 1, 3]))

        ```
        """
        return self._cum_extreme("cumargmax", dim, "CummaxBackward0", _CUMMAX)

    def cummin(self, dim):
        """``(values, indices)`` of the running minimum along ``dim`` (see ``cummax``)."""
        return self._cum_extreme("cumargmin", dim, "CumminBackward0", _CUMMIN)

    # order statistics --------------------------------------------------------------------------------------
    def _select_at(self, dim, keepdim, op, position, name, tup):
        """Values and indices of the entry at ``position(x, axis, n)`` of the stable sort along
        ``dim`` (an int, or an int64 tensor of the reduced shape, kept as size 1)."""
        axis = normalize_dim(dim, self.ndim)
        x = self if self.ndim else self.reshape(1)
        n = x.shape[axis]
        if n == 0:
            raise IndexError(f"{op}(): Expected reduction dim {axis} to have non-zero size.")
        order = x.argsort(axis)
        at = position(x, axis, n)
        idx = order.narrow(axis, at, 1) if isinstance(at, int) else order.gather(axis, at)
        values = named(x.gather(axis, idx), name)
        if not keepdim or not self.ndim:
            values, idx = named(values.squeeze(axis), name), idx.squeeze(axis)
        return tup(values, idx)

    def _nan_count(self, axis):
        return self.isnan().sum(axis, keepdim=True)

    def _median_position(self, axis, n):
        if not self.dtype.is_floating_point:
            return (n - 1) // 2
        nans = self._nan_count(axis)  # with a NaN, the first NaN in sorted order, as PyTorch
        return where(nans > 0, n - nans, (n - 1) // 2)

    def _nanmedian_position(self, axis, n):
        if not self.dtype.is_floating_point:
            return (n - 1) // 2
        count = n - self._nan_count(axis)
        return where(count > 0, (count - 1) // 2, 0)

    def _full_median(self, position, name):
        """The full reduction: the selected value, its gradient spread evenly over the entries
        equal to it (all NaNs when it is NaN), as PyTorch's ``evenly_distribute_backward``."""
        flat = self.reshape(-1)
        if not flat.numel():  # NaN, still on the graph (an empty gradient) as PyTorch's
            if not self.dtype.is_floating_point:  # NaN cast to the dtype, as PyTorch's kernel writes it
                with np.errstate(invalid="ignore"):
                    return _placed(np.array(np.nan).astype(self.dtype.np), self, self.dtype)
            return named(flat.sum() * math.nan, name)
        values = flat._select_at(0, False, "median", position, name, _MEDIAN).values
        if not self.dtype.is_floating_point:
            return values
        v = values.detach()  # (a dual tensor of forward mode needs the spread too: no requires_grad test)
        hit = (flat == v) | (flat.isnan() & v.isnan())
        spread = where(hit, flat, 0.0).sum() / hit.sum()
        return record_op("splice", (spread._node, v._node), None, (), self.dtype, name)

    def median(self, dim=None, keepdim=False):
        """The lower median: of the whole tensor (its gradient spread evenly over ties), or
        ``(values, indices)`` along ``dim`` (the gradient goes to the index). NaN if the slice
        holds one, as PyTorch's. Among equal values the index is the stable sort's.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([[3.0, 1.0, 2.0, 4.0]]).median(1)
        median(values=tensor([2.]), indices=tensor([2]))

        ```
        """
        if dim is None:
            return self._full_median(SelectOps._median_position, "MedianBackward0")
        return self._select_at(dim, keepdim, "median", SelectOps._median_position, "MedianBackward1", _MEDIAN)

    def nanmedian(self, dim=None, keepdim=False):
        """``median`` ignoring NaN (NaN only where a slice is all NaN)."""
        if dim is None:
            return self._full_median(SelectOps._nanmedian_position, "NanmedianBackward0")
        return self._select_at(  # PyTorch's messages say median() here too
            dim, keepdim, "median", SelectOps._nanmedian_position, "NanmedianBackward1", _NANMEDIAN
        )

    def kthvalue(self, k, dim=-1, keepdim=False):
        """``(values, indices)`` of the ``k``-th smallest entry along ``dim`` (NaN sorts largest).

        ```python
        >>> import ngrad
        >>> ngrad.tensor([5.0, 1.0, 4.0]).kthvalue(2)
        kthvalue(values=tensor(4.), indices=tensor(2))

        ```
        """
        axis = normalize_dim(dim, self.ndim)
        if self.ndim and not self.shape[axis]:
            raise IndexError(f"kthvalue(): Expected reduction dim {axis} to have non-zero size.")
        if not 1 <= k <= (self.shape[axis] if self.ndim else 1):
            raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {axis}")
        return self._select_at(dim, keepdim, "kthvalue", lambda x, a, n: int(k) - 1, "KthvalueBackward0", _KTHVALUE)

    def mode(self, dim=-1, keepdim=False):
        """``(values, indices)`` of the most frequent value along ``dim``: the smallest of equally
        frequent ones, at its last index (PyTorch's CPU choice).

        ```python
        >>> import ngrad
        >>> ngrad.tensor([2.0, 1.0, 2.0, 1.0, 3.0]).mode()
        mode(values=tensor(1.), indices=tensor(3))

        ```
        """
        axis = normalize_dim(dim, self.ndim)
        x = self if self.ndim else self.reshape(1)
        if x.shape[axis] == 0:
            raise IndexError(f"mode(): Expected reduction dim {axis} to have non-zero size.")
        shape = x._node.shape
        idx = wrap(Node("argmode", (x._node,), {"axis": axis}, shape[:axis] + (1,) + shape[axis + 1 :], D.int64))
        values = named(x.gather(axis, idx), "ModeBackward0")
        if not keepdim or not self.ndim:
            values, idx = named(values.squeeze(axis), "ModeBackward0"), idx.squeeze(axis)
        return _MODE(values, idx)

    # quantiles ---------------------------------------------------------------------------------------------
    def quantile(self, q, dim=None, keepdim=False, *, interpolation="linear"):
        """The ``q``-th quantiles (``q`` a number or a 1-D tensor in [0, 1]) of the whole tensor
        or along ``dim``, between sorted neighbours by ``interpolation`` (``linear``, ``lower``,
        ``higher``, ``midpoint``, ``nearest``; PyTorch's ranks, NaN where a slice holds one). A
        tensor ``q`` puts its dimension first. Differentiable through the sort, as PyTorch's.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([1.0, 2.0, 3.0, 4.0]).quantile(ngrad.tensor([0.25, 0.5]))
        tensor([1.7500, 2.5000])

        ```
        """
        return self._quantile(q, dim, keepdim, interpolation, False, "quantile")

    def nanquantile(self, q, dim=None, keepdim=False, *, interpolation="linear"):
        """``quantile`` ignoring NaN (NaN only where a slice is all NaN)."""
        return self._quantile(q, dim, keepdim, interpolation, True, "quantile")  # PyTorch's messages say quantile()

    def _quantile_checks(self, q, interpolation, op):
        if self.dtype not in (D.float32, D.float64):
            raise RuntimeError(f"{op}() input tensor must be either float or double dtype")
        if isinstance(q, TensorBase):
            if q.ndim > 1:
                raise RuntimeError(f"{op}() q must be a scalar or 1D tensor")
            if q.dtype is not self.dtype:
                raise RuntimeError(f"{op}() q tensor must be same dtype as the input tensor")
        if not self.numel():
            raise RuntimeError(f"{op}() input tensor must be non-empty")
        if interpolation not in _INTERPOLATIONS:
            raise RuntimeError(
                f"{op}() interpolation must be one of linear, lower, higher, midpoint or nearest, but got "
                f"{interpolation}"
            )
        if isinstance(q, TensorBase):
            qv = host_value(q.detach())
            if not np.all((qv >= 0) & (qv <= 1)):
                raise RuntimeError(f"{op}() q values must be in the range [0, 1]")
            return q.reshape(-1)
        if not 0 <= q <= 1:
            raise RuntimeError(f"{op}() q must be in the range [0, 1] but got {q}")
        return _placed(np.array([q]), self, self.dtype)

    def _quantile(self, q, dim, keepdim, interpolation, ignore_nan, op):
        axis = None if dim is None else normalize_dim(dim, self.ndim)
        qs = self._quantile_checks(q, interpolation, op)
        x = self.reshape(-1) if axis is None or not self.ndim else self.movedim(axis, -1)
        s = x.sort(-1).values  # (..., n), read at ranks (..., Q)
        last = s.shape[-1] - 1
        if ignore_nan:  # the rank among the non-NaN entries; 0 (a NaN) where all are NaN
            ranks = qs * ((~s.isnan()).sum(-1, keepdim=True) - 1)
            ranks = where(ranks < 0, 0.0, ranks)
        else:  # the last rank (a NaN) where the slice holds one
            ranks = where(s.isnan().any(-1, keepdim=True), float(last), qs * last)
        ranks = ranks.expand(s.shape[:-1] + qs.shape)
        if interpolation in ("lower", "higher", "nearest"):
            ranks = {"lower": ranks.floor, "higher": ranks.ceil, "nearest": ranks.round}[interpolation]()
        below = ranks.long()
        out = s.gather(-1, below)
        if interpolation in ("linear", "midpoint"):
            weights = ranks - below if interpolation == "linear" else 0.5
            out = out.lerp(s.gather(-1, ranks.ceil().long()), weights)
        if keepdim:
            kept = [1] * self.ndim if axis is None else list(self.shape)
            if axis is not None and self.ndim:
                kept[axis] = 1
            out = out.reshape(tuple(kept) + (out.shape[-1],))
        out = out.movedim(-1, 0)
        return out.squeeze(0) if not isinstance(q, TensorBase) or q.ndim == 0 else out

    # counting ----------------------------------------------------------------------------------------------
    def histc(self, bins=100, min=0, max=0):  # noqa: A002  (PyTorch's argument names)
        """A histogram of ``bins`` equal bins over [``min``, ``max``] (the data's range when they are
        equal: then the input is realized, as PyTorch reads it); values outside are ignored and
        ``max`` falls in the last bin. Not differentiable, as PyTorch's.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([1.0, 2.0, 1.0, 4.0]).histc(bins=3, min=1, max=4)
        tensor([2., 1., 1.])

        ```
        """
        if not self.dtype.is_floating_point:
            raise _not_implemented("histogram_cpu", self)
        if bins <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
        lo, hi = float(min), float(max)
        if lo == hi and self.numel():
            data = host_value(self.detach())
            lo, hi = float(data.min()), float(data.max())
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise RuntimeError(f"torch.histc: range of [{_c_number(lo)}, {_c_number(hi)}] is not finite")
        if not lo < hi:
            raise RuntimeError("torch.histc: max must be larger than min")
        # PyTorch's arithmetic in the input's dtype: (x - left) * bins / (right - left)
        left, right = self.dtype.np.type(lo), self.dtype.np.type(hi)
        x = self.detach().reshape(-1)
        inside = (x >= float(left)) & (x <= float(right))
        pos = ((where(inside, x, float(left)) - float(left)) * bins / float(right - left)).long()
        pos = where(inside, where(pos >= bins, bins - 1, pos), 0)
        ones = inside.to(self.dtype)._node
        return wrap(
            Node("scatter_add", (ones, pos._node), {"axis": 0, "shape": (int(bins),)}, (int(bins),), self.dtype)
        )

    def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
        """The distinct values, sorted (also with ``sorted=False``, as PyTorch's CPU kernel), of
        the whole tensor or the distinct slices along ``dim``; with ``return_inverse`` where each
        entry went, with ``return_counts`` how often each occurs. Every NaN is distinct. The
        result's size depends on the values, so the input is realized (as ``nonzero``). No
        derivative: the values stay on the graph, and a backward reaching them raises, as PyTorch's.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([3, 1, 3, 2]).unique(return_counts=True)
        (tensor([1, 2, 3]), tensor([1, 1, 2]))

        ```
        """
        v = host_value(self.detach())
        if dim is None:
            values, inverse, counts = np.unique(v.reshape(-1), return_inverse=True, return_counts=True, equal_nan=False)
            inverse = inverse.reshape(v.shape)
        else:
            values, inverse, counts = _unique_slices(v, _unique_axis(self, dim))
        kernel = "_unique2" if dim is None else "unique_dim"
        return self._unique_result(values, inverse, counts, return_inverse, return_counts, kernel)

    def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
        """``unique`` of runs: each run of equal consecutive values (or slices along ``dim``) gives
        one entry, in order. Realizes the input.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([1, 1, 2, 2, 1]).unique_consecutive(return_counts=True)
        (tensor([1, 2, 1]), tensor([2, 2, 1]))

        ```
        """
        v = host_value(self.detach())
        axis = 0 if dim is None else _unique_axis(self, dim)
        rows = _slices(v.reshape(-1) if dim is None else v, axis)
        change = np.ones(rows.shape[0], bool)
        change[1:] = np.any(rows[1:] != rows[:-1], axis=1)
        starts = np.flatnonzero(change)
        values = np.take(v.reshape(-1) if dim is None else v, starts, axis=axis)
        inverse = np.cumsum(change) - 1
        counts = np.diff(np.append(starts, rows.shape[0]))
        inverse = inverse.reshape(v.shape) if dim is None else inverse
        return self._unique_result(values, inverse, counts, return_inverse, return_counts, "unique_consecutive")

    def _unique_result(self, values, inverse, counts, return_inverse, return_counts, kernel):
        out = [_placed(values, self, self.dtype)]
        if self.requires_grad and grad_mode.state.enabled:  # PyTorch's values stay on the graph...
            out[0] = _no_derivative(kernel).apply(self, out)
        if return_inverse:
            out.append(_placed(inverse, self, D.int64))
        if return_counts:
            out.append(_placed(counts, self, D.int64))
        return out[0] if len(out) == 1 else tuple(out)


_NO_DERIVATIVE = {}
_GRAD_FN = {"_unique2": "Unique2", "unique_dim": "UniqueDim", "unique_consecutive": "UniqueConsecutive"}


def _no_derivative(kernel):
    """A custom Function passing on the values it is given, whose backward raises PyTorch's
    error for an operation without a derivative (``kernel``), grad_fn named as PyTorch's."""
    cls = _NO_DERIVATIVE.get(kernel)
    if cls is None:
        from ..autograd.function import Function, FunctionCtx

        def backward(ctx, grad):  # ...but fail once a gradient reaches them
            raise NotImplementedError(f"the derivative for '{kernel}' is not implemented.")

        def forward(ctx, source, holder):
            return holder[0]

        name = _GRAD_FN[kernel]
        cls = type(name, (Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})
        cls._backward_cls = type(name + "Backward0", (FunctionCtx,), {"_cls": cls})
        _NO_DERIVATIVE[kernel] = cls
    return cls


def _unique_axis(t, dim):
    if not t.ndim:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    return normalize_dim(dim, t.ndim)


def _slices(v, axis):
    """The slices of ``v`` along ``axis`` as the rows of a matrix, as PyTorch's unique reads them."""
    if any(n == 0 for i, n in enumerate(v.shape) if i != axis):
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    rows = np.moveaxis(v, axis, 0)
    return rows.reshape(rows.shape[0], int(np.prod(rows.shape[1:], dtype=np.int64)))


def _unique_slices(v, axis):
    """Distinct slices along ``axis`` in lexicographic order, where each slice went, and counts."""
    rows = np.moveaxis(v, axis, 0)
    flat = _slices(v, axis)
    if not flat.shape[0]:
        return v, np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort(flat.T[::-1]) if flat.shape[1] else np.arange(flat.shape[0])
    ordered = flat[order]
    change = np.ones(len(order), bool)
    change[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    group = np.cumsum(change) - 1
    inverse = np.empty(len(order), np.int64)
    inverse[order] = group
    starts = np.flatnonzero(change)
    values = np.moveaxis(rows[order[starts]], 0, axis)
    return values, inverse, np.diff(np.append(starts, len(order)))


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None):  # noqa: A002
    """Where ``input``'s values would go in the last dimension of ``sorted_sequence`` to keep it
    sorted (``right``/``side='right'``: after equal entries). ``sorted_sequence`` is 1-D or
    matches ``input`` in its leading dimensions; ``sorter`` sorts an unsorted sequence.

    ```python
    >>> import ngrad
    >>> ngrad.searchsorted(ngrad.tensor([1.0, 2.0, 3.0]), ngrad.tensor([2.0, 2.5]), right=True)
    tensor([2, 2])

    ```
    """
    seq = to_tensor(sorted_sequence)
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError(
                "torch.searchsorted(): side and right can't be set to opposites, got side of left while right was True"
            )
        right = side == "right"
    if not seq.ndim:
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 dimension"
        )
    if isinstance(input, TensorBase):
        values, common = input, D.result_type((seq.dtype,), (input.dtype,), ())
    else:  # a Python number promotes as PyTorch's wrapped scalars do
        common = D.result_type((seq.dtype,), (), (scalar_dtype(input),))
        values = to_tensor(input, common)
    if sorter is not None:
        if sorter.dtype is not D.int64:
            name = TORCH_NAME[sorter.dtype.short]
            raise RuntimeError(f"torch.searchsorted(): sorter must be a tensor of long dtype but got dtype {name}")
        if sorter.shape != seq.shape:
            raise RuntimeError(
                "torch.searchsorted(): boundary and sorter must have the same size, but got boundary tensor "
                f"{list(seq.shape)}and got sorter tensor {list(sorter.shape)}"
            )
        seq = seq.gather(-1, sorter)
    if seq.ndim > 1 and (values.ndim != seq.ndim or values.shape[:-1] != seq.shape[:-1]):
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries "
            f"tensor and input value tensor must match, but we got boundaries tensor {list(seq.shape)} and input value "
            f"tensor {list(values.shape)}"
        )
    seq, values = seq.detach().to(common), values.detach().to(common)
    flat = values.reshape(1) if not values.ndim else values
    rows = seq.expand(flat.shape[:-1] + seq.shape[-1:])
    out = wrap(Node("searchsorted", (rows._node, flat._node), {"right": bool(right)}, flat._node.shape, D.int64))
    out = out.reshape(()) if not values.ndim else out
    return out.to(D.int32) if out_int32 else out


def bucketize(input, boundaries, *, out_int32=False, right=False):  # noqa: A002
    """The bucket of each value of ``input`` among the 1-D ``boundaries``: ``i`` with
    ``boundaries[i-1] < x <= boundaries[i]`` (``right``: ``boundaries[i-1] <= x < boundaries[i]``).

    ```python
    >>> import ngrad
    >>> ngrad.bucketize(ngrad.tensor([0.5, 1.0, 2.5]), ngrad.tensor([1.0, 2.0]))
    tensor([0, 0, 2])

    ```
    """
    b = to_tensor(boundaries)
    if b.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({b.ndim})")
    return searchsorted(b, input, out_int32=out_int32, right=right)
