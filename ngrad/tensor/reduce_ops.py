"""Reductions of ``Tensor``: sums, means, extremes (with indices), sorting, variance, norms,
``logsumexp``/``softmax`` and ``cumsum``.

Contract: a mixin of ``Tensor``; ``reduction`` records one reduce node over normalized axes.
Named-tuple results (``max``, ``min``, ``sort``, ``topk``) follow PyTorch's field names.
"""

import math
from collections import namedtuple

import numpy as np

from ..autograd.meta import own_meta
from ..engine.ir import dtypes as D
from ..engine.ir.graph import Node, source
from .functions import where
from .record import (
    TORCH_NAME,
    TensorBase,
    cast_node,
    float_node,
    named,
    normalize_dim,
    normalize_dims,
    record_op,
    reshape_node,
    value_on,
    wrap,
)

_MAX = namedtuple("max", ["values", "indices"])


_MIN = namedtuple("min", ["values", "indices"])


_SORT = namedtuple("sort", ["values", "indices"])


_TOPK = namedtuple("topk", ["values", "indices"])


_ALL_AXES = [tuple(range(i)) for i in range(65)]

# the params of a full sum, one dict per rank: a loop's graphs then share them, and realizing one
# recognizes them by identity (a recorded node's params are never changed)
_FULL_SUM = [{"axes": axes, "keepdim": False} for axes in _ALL_AXES]


def reduction(op, t, dim, keepdim, name, node=None, **params):
    """Record reduction ``op`` of ``t`` (or ``node``) over ``dim``, with any further ``params``."""
    n = node or t._node
    axes = normalize_dims(dim, len(n.shape))
    shape = tuple((1 if i in axes else s) for i, s in enumerate(n.shape) if keepdim or i not in axes)
    return record_op(op, (n,), {"axes": axes, "keepdim": bool(keepdim), **params}, shape, n.dtype, name)


def zeros_like_node(x, axes):
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    return wrap(source(value_on(np.zeros(shape, x.dtype.np), x._node.device), x.dtype))


def _softmax_input(t, dim, dtype, op):
    """The tensor (log_)softmax works on: ``t`` converted to ``dtype``; a tensor that is not
    floating is refused with PyTorch's message (its kernels exist only for floating types)."""
    if dtype is not None:
        t = t.to(dtype)
    d = t.dtype
    if not d.is_floating_point:
        kernel = (
            f"{op}_lastdim_kernel_impl"
            if t.ndim <= 1 or normalize_dim(dim, t.ndim) == t.ndim - 1
            else f"{op}_kernel_impl"
        )
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{TORCH_NAME[d.short]}'")
    return t


class ReduceOps:
    """Reductions, sorting and normalizations along dimensions, a mixin of ``Tensor``."""

    __slots__ = ()

    # reductions -----------------------------------------------------------------------------------------
    def sum(self, dim=None, keepdim=False, *, dtype=None):
        n = self._node
        if dtype is not None:
            n = cast_node(n, dtype)
        elif n.dtype.category < 2:
            n = cast_node(n, D.int64)
        if dim is None and not keepdim:  # the full sum of a loss: the hot path
            return record_op("sum", (n,), _FULL_SUM[len(n.shape)], (), n.dtype, "SumBackward0")
        return reduction("sum", self, dim, keepdim, "SumBackward0" if dim is None else "SumBackward1", n)

    def mean(self, dim=None, keepdim=False, *, dtype=None):
        n = self._node if dtype is None else cast_node(self._node, dtype)
        if not n.dtype.differentiable:
            raise RuntimeError(
                "mean(): could not infer output dtype. Input dtype must be either a floating "
                f"point or complex dtype. Got: {n.dtype.name.capitalize()}"
            )
        axes = normalize_dims(dim, len(n.shape))
        count = math.prod(n.shape[a] for a in axes)
        s = reduction("sum", self, dim, keepdim, "SumBackward1", n)
        out = named(s / count if count else s * float("nan"), "MeanBackward0" if dim is None else "MeanBackward1")
        own_meta(out._node).saves = False  # PyTorch's MeanBackward saves no tensor: a second backward works
        return out

    def prod(self, dim=None, keepdim=False, *, dtype=None):
        n = self._node
        if dtype is not None:
            n = cast_node(n, dtype)
        elif n.dtype.category < 2:
            n = cast_node(n, D.int64)
        return reduction("prod", self, dim, keepdim, "ProdBackward0" if dim is None else "ProdBackward1", n)

    def _extreme(self, op, dim, keepdim, name):
        n = self._node
        axes = normalize_dims(dim, len(n.shape))
        if any(n.shape[a] == 0 for a in axes) or (not axes and 0 in n.shape):
            raise RuntimeError(
                f"{op}(): Expected reduction dim to be specified for input.numel() == 0. "
                "Specify the reduction dim with the 'dim' argument."
            )
        return reduction(op, self, dim, keepdim, name)

    def amax(self, dim=(), keepdim=False):
        return self._extreme("amax", dim, keepdim, "AmaxBackward0")

    def amin(self, dim=(), keepdim=False):
        return self._extreme("amin", dim, keepdim, "AminBackward0")

    def _full_extreme(self, op, name):
        """A full max/min as PyTorch's: with a NaN present the value is NaN and the gradient is
        shared by the NaNs (the plain reduction's gradient would be NaN everywhere)."""
        if not self.dtype.is_floating_point or not self.numel():
            return self._extreme(op, None, False, name)
        nan = self != self
        # the reduction never sees a NaN, so its gradient stays finite where it is not selected
        fill = -math.inf if op == "amax" else math.inf
        plain = where(nan, fill, self)._extreme(op, None, False, name)
        count = nan.to(self.dtype).sum()
        on_nans = where(nan, self, 0.0).sum() / where(count == 0, 1.0, count)
        return named(where(count > 0, on_nans, plain), name)

    def _arg_extreme(self, op, dim, keepdim):
        n = self._node
        if n.dtype is D.bool_ or n.dtype.is_complex:
            raise RuntimeError(f"{op}(): does not support {'bool' if n.dtype is D.bool_ else 'complex'} input")
        if dim is None:
            n = reshape_node(n, (math.prod(n.shape),))
            axis, keepdim = 0, False
        else:
            axis = normalize_dim(dim, len(n.shape))
        if not n.shape:
            n = reshape_node(n, (1,))
            axis = 0
        if n.shape[axis] == 0:
            raise IndexError(f"{op}(): Expected reduction dim {axis} to have non-zero size.")
        shape = tuple((1 if i == axis else s) for i, s in enumerate(n.shape) if keepdim or i != axis)
        if dim is not None and not self._node.shape:
            shape = ()
        return wrap(Node(op, (n,), {"axis": axis, "keepdim": bool(keepdim)}, shape, D.int64))

    def argmax(self, dim=None, keepdim=False):
        return self._arg_extreme("argmax", dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        return self._arg_extreme("argmin", dim, keepdim)

    def _max_min(self, op, dim, keepdim, other, name, tup):
        if isinstance(dim, TensorBase) and other is None:
            dim, other = None, dim
        if other is not None:
            return self.maximum(other) if op == "amax" else self.minimum(other)
        if dim is None:
            return self._full_extreme(op, name + "1")
        idx = self._arg_extreme("argmax" if op == "amax" else "argmin", dim, True)
        axis = normalize_dim(dim, max(self.ndim, 1))
        vals = self.gather(axis, idx) if self.ndim else self
        if not keepdim and self.ndim:
            vals, idx = vals.squeeze(axis), idx.squeeze(axis)
        return tup(named(vals, name + "0"), idx)

    def argsort(self, dim=-1, descending=False, stable=False):
        """The indices that sort along ``dim``. The sort is stable (equal values keep their order,
        for either direction) and NaN sorts as the largest value, as in PyTorch."""
        n = self._node
        if not n.shape:
            return wrap(source(value_on(np.zeros((), np.int64), n.device), D.int64))
        axis = normalize_dim(dim, len(n.shape))
        return wrap(Node("argsort", (n,), {"axis": axis, "descending": bool(descending)}, n.shape, D.int64))

    def sort(self, dim=-1, descending=False, stable=False):
        """``(values, indices)`` sorted along ``dim``; the gradient of the values goes back to the
        entries they came from.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([3.0, 1.0, 2.0]).sort(descending=True)
        sort(values=tensor([3., 2., 1.]), indices=tensor([0, 2, 1]))

        ```
        """
        idx = self.argsort(dim, descending)
        if not self.ndim:
            return _SORT(self.clone(), idx)
        return _SORT(named(self.gather(normalize_dim(dim, self.ndim), idx), "SortBackward0"), idx)

    def topk(self, k, dim=-1, largest=True, sorted=True):
        """The ``k`` largest (or smallest) entries along ``dim`` and their indices, in order."""
        d = normalize_dim(dim, max(self.ndim, 1))
        size = self.shape[d] if self.ndim else 1
        if not 0 <= k <= size:
            raise RuntimeError("selected index k out of range")
        values, indices = self.sort(dim, descending=largest)
        if not self.ndim:
            return _TOPK(values, indices)
        return _TOPK(named(values.narrow(d, 0, k), "TopkBackward0"), indices.narrow(d, 0, k))

    def max(self, dim=None, keepdim=False, other=None):
        """Full reduction (ties share the gradient evenly), or ``(values, indices)`` along ``dim``."""
        return self._max_min("amax", dim, keepdim, other, "MaxBackward", _MAX)

    def min(self, dim=None, keepdim=False, other=None):
        return self._max_min("amin", dim, keepdim, other, "MinBackward", _MIN)

    def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        """The variance over ``dim`` with divisor ``n - correction`` (default 1, or ``unbiased``),
        as PyTorch's: a float32 variance accumulates in float64, its gradient
        ``2 / (n - correction) * g * (x - mean)`` is taken in float32; a complex one is the sum of
        its parts' variances.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([[3e38, 3e38, -1.0]]).std(1)
        tensor([1.7321e+38])

        ```
        """
        return self._spread("var", dim, unbiased, keepdim, correction)

    def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        """The square root of ``var``; its gradient is 0 where it is 0 (a constant slice), as
        PyTorch's, not 0 * inf = NaN that would poison a whole batch."""
        return self._spread("std", dim, unbiased, keepdim, correction)

    def _spread(self, op, dim, unbiased, keepdim, correction):
        if isinstance(dim, bool):
            dim, unbiased = None, dim
        if correction is None:
            correction = 1 if unbiased is None or unbiased else 0
        name = "VarBackward0" if op == "var" else "StdBackward0"
        if self._node.dtype.is_complex:  # the mean squared modulus: the two parts' variances
            v = self.real.var(dim, keepdim=keepdim, correction=correction) + self.imag.var(
                dim, keepdim=keepdim, correction=correction
            )
            if op == "var":
                return named(v, name)
            zero = v == 0  # the double where keeps sqrt's derivative away from 0
            return named(where(zero, 0.0, where(zero, 1.0, v).sqrt()), name)
        if not self._node.dtype.is_floating_point:
            raise RuntimeError("std and var only support floating point and complex dtypes")
        return reduction(op, self, dim, keepdim, name, correction=correction)

    def _moments(self, dim, unbiased, keepdim, correction, spread, name):
        """``(spread, mean)`` over ``dim``, both named ``name`` (PyTorch's ``var_mean``/``std_mean``)."""
        if isinstance(dim, bool):
            dim, unbiased = None, dim
        if correction is not None and unbiased is not None:
            raise TypeError(f"{spread}_mean() received an invalid combination of arguments: unbiased and correction")
        first = getattr(self, spread)(dim, unbiased, keepdim, correction=correction)
        mean = self.mean(normalize_dims(dim, self.ndim), keepdim=keepdim)
        return named(first, name), named(mean, name)

    def norm(self, p="fro", dim=None, keepdim=False):
        """Vector p-norm over ``dim`` (all elements by default); the gradient at 0 is 0."""
        x = self
        if x.dtype.is_complex:  # the norm of the moduli
            return x.abs().norm(p, dim, keepdim)
        if not x.dtype.is_floating_point:
            raise RuntimeError(
                "linalg.vector_norm: Expected a floating point or complex tensor as input. "
                f"Got {TORCH_NAME[x.dtype.short]}"
            )
        if p == "fro" or p is None:
            p = 2
        if isinstance(p, str):
            raise RuntimeError(f"norm: unsupported p={p!r}")
        p = float(p)
        axes = normalize_dims(dim, x.ndim)
        if p == math.inf or p == -math.inf:
            a = x.abs()
            op = "amax" if p > 0 else "amin"
            # PyTorch's gradient is 0 where the norm is NaN: the reduction runs on the NaNs
            # replaced by 0 (finite gradient) and only the value is taken from the NaN one
            nan = (a != a).any(axes, keepdim)
            plain = where(a != a, 0.0, a)._extreme(op, axes, keepdim, "AmaxBackward0")
            out = where(nan, a.detach()._extreme(op, axes, keepdim, "AmaxBackward0"), plain)
        elif p == 0:
            out = (x != 0).to(x.dtype).sum(axes, keepdim)
        elif p == 1:
            out = x.abs().sum(axes, keepdim)
        else:
            # x + 0.0 is x but for -0.0, which becomes +0.0: at a zero norm the gradient 2x * 0 is
            # then +0.0 for every entry, PyTorch's (its x / norm masked to 0), not -0.0 for a -0.0
            if p == 2:
                xs = x + 0.0
                s = (xs * xs).sum(axes, keepdim)
            else:
                s = (x.abs() ** p).sum(axes, keepdim)
            # the double-where keeps the derivative at s == 0 finite (PyTorch gives 0 there)
            zero = s == 0
            safe = where(zero, 1.0, s)
            out = where(zero, 0.0, safe.sqrt() if p == 2 else safe ** (1.0 / p))
        return named(out, "LinalgVectorNormBackward0")

    def logsumexp(self, dim, keepdim=False):
        """``log(exp(x).sum(dim))``, computed shifted by the maximum so that nothing overflows;
        its gradient is PyTorch's ``exp(x - out)`` (one primitive, ``logsumexp``, which kernels
        compute fused from the shifted sum).

        ```python
        >>> import ngrad
        >>> x = ngrad.tensor([[3e38, 3e38, -1.0]], requires_grad=True)
        >>> x.logsumexp(1).backward()
        >>> x.grad
        tensor([[1., 1., 0.]])

        ```
        """
        x = wrap(float_node(self._node))
        if x.dtype.is_complex:  # not ordered: the maximum's error, as PyTorch's CPU kernels
            return x.amax(normalize_dims(dim, x.ndim))
        return reduction("logsumexp", x, dim, keepdim, "LogsumexpBackward0")

    def softmax(self, dim, dtype=None):
        """``exp(x) / exp(x).sum(dim)`` of a floating tensor (``dtype`` converts it first), in
        PyTorch's order, with its gradient ``y * (g - sum(g * y))``.

        ```python
        >>> import ngrad
        >>> x = ngrad.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
        >>> x.softmax(1).sum().backward()
        >>> x.grad
        tensor([[0., 0., 0.]])

        ```
        """
        x = _softmax_input(self, dim, dtype, "softmax")
        axis = normalize_dim(dim, x.ndim)
        if not x.ndim:  # one probability, 1 (nan at nan or an infinity)
            return named(x.reshape(1).softmax(0).reshape(()), "SoftmaxBackward0")
        # one primitive: PyTorch's order (the max, the shifted exponentials, the product by their
        # sum's reciprocal) and its gradient, y * (g - sum(g * y))
        n = x._node
        return record_op("softmax", (n,), {"axis": axis}, n.shape, n.dtype, "SoftmaxBackward0")

    def log_softmax(self, dim, dtype=None):
        """``x - logsumexp(x, dim)`` of a floating tensor (``dtype`` converts it first)."""
        x = _softmax_input(self, dim, dtype, "log_softmax")
        axis = normalize_dim(dim, x.ndim)
        # PyTorch's order, (x - max) - log(sum(exp(x - max))): x - logsumexp(x) loses log(2)
        # in [3e38, 3e38] to rounding, and an infinite max gives NaN, not a finite value
        m = x.detach().amax(axis, keepdim=True) if x.numel() else zeros_like_node(x, (axis,) if x.ndim else ())
        shifted = x - m
        return named(shifted - shifted.exp().sum(axis, keepdim=True).log(), "LogSoftmaxBackward0")

    def cumsum(self, dim, *, dtype=None):
        n = self._node
        if dtype is not None:
            n = cast_node(n, dtype)
        elif n.dtype.category < 2:
            n = cast_node(n, D.int64)
        if not n.shape:
            return wrap(n) if n is not self._node else self.clone()
        return record_op(
            "cumsum", (n,), {"axis": normalize_dim(dim, len(n.shape))}, n.shape, n.dtype, "CumsumBackward0"
        )


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(var, mean)`` of ``input`` over ``dim`` in one call, as ``torch.var_mean``: ``correction``
    (default 1) or ``unbiased`` choose the divisor ``n - correction``; both are differentiable.

    ```python
    >>> import ngrad
    >>> ngrad.var_mean(ngrad.tensor([1.0, 2.0, 6.0]))
    (tensor(7.), tensor(3.))

    ```
    """
    return input._moments(dim, unbiased, keepdim, correction, "var", "VarMeanBackward0")


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(std, mean)`` of ``input`` over ``dim``, as ``torch.std_mean`` (see ``var_mean``).

    ```python
    >>> import ngrad
    >>> ngrad.std_mean(ngrad.tensor([[1.0, 3.0], [2.0, 2.0]]), dim=1, correction=0)
    (tensor([1., 0.]), tensor([2., 2.]))

    ```
    """
    return input._moments(dim, unbiased, keepdim, correction, "std", "StdMeanBackward0")
