"""Rows of the primitive table: the scatter family (scatter, scatter_reduce, index_add, index_copy,
index_fill, index_put, masked_scatter, put, take) and the structural ops built beside it, with
the NumPy implementations the interpreter's math namespace takes from ``Numpy``.

Contract: two rows, both ``(x, idx, src)`` with ``idx`` an i64 array of ``src``'s shape, of
``x``'s rank, no larger than ``x`` apart from dimension ``axis`` (PyTorch's ``scatter`` layout:
``src[i][j]`` goes to ``x[idx[i][j]][j]`` for ``axis`` 0). ``scatter`` overwrites (the last
write of a repeated position in row-major order of ``idx`` wins, as PyTorch's CPU loop);
``scatter_reduce`` combines with ``reduce`` (sum, prod, mean, amax, amin), starting from ``x``
where ``include_self`` and from the reduction's identity where not; positions no index names
keep ``x``. Both check their indices (PyTorch's RuntimeError, negative ones included) before
anything is written, and run as glue steps on every target. The facade writes the rest of the
family (index_add, index_put, put, take...) in these rows and the table's ``gather``, ``index``
and ``where``.

Derivatives are PyTorch's (``scatter_reduce_backward`` in FunctionsManual.cpp), written as
multipliers: ``out`` is, to first order, ``w_self * x`` plus the sum into each position of
``w_src * src``, so the VJP is ``(g * w_self, gather(g) * w_src)`` and the JVP the same
multipliers applied to tangents. The gradient of ``scatter``'s source is PyTorch's
``gather(g)`` for every element, the ones a later duplicate overwrote included. One deliberate
difference: for amax/amin without ``include_self``, an excluded element of ``x`` equal to the
result does not take a share of the tied gradient (PyTorch's does, which makes the source's
gradient wrong there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import shapes as S
from .table import LINEAR, Cotangents, P, Params, Tangents, zeros_like

if TYPE_CHECKING:
    from ..tape import Var

REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _positions(x: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    """The flat position in ``x`` of each element of ``idx`` (row-major order of ``idx``),
    after PyTorch's bounds check."""
    n = x.shape[axis]
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = int(idx.min() if idx.min() < 0 else idx.max())
        raise RuntimeError(f"index {bad} is out of bounds for dimension {axis} with size {n}")
    grid = list(np.ogrid[tuple(slice(k) for k in idx.shape)])
    grid[axis] = idx
    full = np.broadcast_arrays(*grid)
    return np.ravel_multi_index(tuple(a.reshape(-1) for a in full), x.shape) if idx.size else np.zeros(0, np.int64)


_IDENTITY = {"sum": 0, "mean": 0, "prod": 1}


class Numpy:
    """The NumPy forward of each row below (part of the interpreter's math namespace)."""

    @staticmethod
    def scatter(x: np.ndarray, idx: np.ndarray, src: np.ndarray, axis: int) -> np.ndarray:
        pos = _positions(x, idx, axis)
        out = np.array(x, copy=True).reshape(-1)
        # the last of equal positions wins: the first of each in the reversed order
        last = pos.size - 1 - np.unique(pos[::-1], return_index=True)[1]
        out[pos[last]] = np.asarray(src).reshape(-1)[last]
        return out.reshape(x.shape)

    @staticmethod
    def scatter_reduce(
        x: np.ndarray, idx: np.ndarray, src: np.ndarray, axis: int, reduce: str, include_self: bool
    ) -> np.ndarray:
        pos = _positions(x, idx, axis)
        vals = np.asarray(src).reshape(-1)
        out = np.array(x, copy=True).reshape(-1)
        if not include_self:
            start: float
            if reduce in _IDENTITY:
                start = _IDENTITY[reduce]
            elif out.dtype.kind == "f":
                start = -np.inf if reduce == "amax" else np.inf
            else:
                info = np.iinfo(out.dtype) if out.dtype.kind in "iu" else None
                start = (info.min if reduce == "amax" else info.max) if info is not None else reduce == "amin"
            out[pos] = start
        if reduce in ("sum", "mean"):
            np.add.at(out, pos, vals)
        else:
            ufunc = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}[reduce]
            ufunc.at(out, pos, vals)
        if reduce == "mean":
            count = np.full(out.shape, 1 if include_self else 0, np.int64)
            np.add.at(count, pos, 1)
            count[count == 0] = 1
            out = out / count if out.dtype.kind == "f" else out // count
        return out.reshape(x.shape).astype(x.dtype, copy=False)


def scatter_shape(shapes: Sequence[S.Shape], dtypes: Sequence[str], axis: int, **params: object) -> S.Typed:
    """``x``'s shape and dtype, once ``idx`` (i64, ``src``'s shape, ``x``'s rank) fits ``x``
    apart from ``axis`` and ``src`` has ``x``'s dtype."""
    x, i, s = shapes
    S.axes_ok((axis,), len(x))
    if dtypes[1] != "i64" or i != s or len(i) != len(x) or dtypes[2] != dtypes[0]:
        S.fail(f"scatter index {i}:{dtypes[1]} and source {s}:{dtypes[2]} do not fit {x}:{dtypes[0]}")
    if any(a > b for d, (a, b) in enumerate(zip(i, x)) if d != axis):
        S.fail(f"scatter index {i} is larger than {x} apart from axis {axis}")
    if params.get("reduce", "sum") not in REDUCTIONS:
        S.fail(f"scatter_reduce: no reduction {params['reduce']!r}; the reductions are {REDUCTIONS}")
    return x, dtypes[0]


def gather_at(g: Var, idx: Var, axis: int) -> Var:
    """``g`` gathered at ``idx`` (which may be smaller than ``g`` apart from ``axis``)."""
    if any(a != b for d, (a, b) in enumerate(zip(idx.shape, g.shape)) if d != axis):
        stops = tuple(b if d == axis else a for d, (a, b) in enumerate(zip(idx.shape, g.shape)))
        g = g.slice(starts=(0,) * len(stops), stops=stops, steps=(1,) * len(stops))
    return g.gather(idx, axis=axis)


def _scatter_vjp(need: Sequence[bool], g: Var, out: Var, args: Sequence[Var], params: Params) -> Cotangents:
    x, idx, src = args
    gx = g.scatter(idx, zeros_like(src), **params) if need[0] else None
    return [gx, None, gather_at(g, idx, params["axis"]) if need[2] else None]


def _sum_into(x: Var, idx: Var, src: Var, axis: int) -> Var:
    return x.scatter_reduce(idx, src, axis=axis, reduce="sum", include_self=True)


def _prod_weights(out: Var, x: Var, idx: Var, src: Var, axis: int, include_self: bool) -> tuple[Var, Var]:
    # Exact with zeros, as PyTorch's: the product of the others is read from products taken with
    # the zero in question replaced by one, never from a division by zero that is kept.
    params = {"axis": axis, "reduce": "prod", "include_self": include_self}
    one_x, one_s = x.bld.full(1, x.shape, x.dtype), x.bld.full(1, src.shape, src.dtype)
    masked_self = x.eq(0).where(one_x, x)
    w_self = masked_self.scatter_reduce(idx, src, **params) / masked_self
    src_zero = src.eq(0)
    zeros = _sum_into(zeros_like(x), idx, src_zero.cast(dtype=x.dtype), axis)
    single = src_zero.logical_and(gather_at(zeros, idx, axis).eq(1))
    masked_src_result = x.scatter_reduce(idx, single.where(one_s, src), **params)
    others = gather_at(out, idx, axis) / src_zero.where(one_s, src)
    w_src = single.where(gather_at(masked_src_result, idx, axis), others)
    return w_self, w_src


def weights(out: Var, args: Sequence[Var], params: Params) -> tuple[Var, Var]:
    """The multipliers ``(w_self, w_src)`` of a ``scatter_reduce`` (see the module's docstring)."""
    x, idx, src = args
    axis, reduce, include_self = params["axis"], params["reduce"], params["include_self"]
    one_x, one_s = x.bld.full(1, x.shape, x.dtype), x.bld.full(1, src.shape, src.dtype)
    if reduce == "sum":
        w_self, w_src = one_x, one_s
    elif reduce == "mean":
        # the count of each position's terms (its own value among them where included), one where none
        inv = 1 / one_x.scatter_reduce(idx, one_s, axis=axis, reduce="sum", include_self=include_self)
        w_self, w_src = inv, gather_at(inv, idx, axis)
    elif reduce == "prod":
        w_self, w_src = _prod_weights(out, x, idx, src, axis, include_self)
    else:  # amax, amin: the cotangent spread evenly over the elements equal to the result
        self_is = x.eq(out).cast(dtype=x.dtype)
        if not include_self:
            self_is = self_is.scatter(idx, zeros_like(src), axis=axis)
        src_is = src.eq(gather_at(out, idx, axis)).cast(dtype=x.dtype)
        inv = 1 / _sum_into(self_is, idx, src_is, axis)
        w_self, w_src = self_is * inv, src_is * gather_at(inv, idx, axis)
    if not include_self:
        w_self = w_self.scatter(idx, zeros_like(src), axis=axis)
    return w_self, w_src


def _reduce_vjp(need: Sequence[bool], g: Var, out: Var, args: Sequence[Var], params: Params) -> Cotangents:
    w_self, w_src = weights(out, args, params)
    return [g * w_self if need[0] else None, None, gather_at(g, args[1], params["axis"]) * w_src if need[2] else None]


def _reduce_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    (tx, _, ts_), (x, idx) = ts, args[:2]
    w_self, w_src = weights(out, args, params)
    total = tx * w_self if tx is not None else zeros_like(x)
    return _sum_into(total, idx, ts_ * w_src, params["axis"]) if ts_ is not None else total


P("scatter", "index", scatter_shape, lambda m, x, idx, src, axis: m.scatter(x, idx, src, axis), _scatter_vjp, LINEAR)
P(
    "scatter_reduce",
    "index",
    scatter_shape,
    lambda m, x, idx, src, axis, reduce, include_self: m.scatter_reduce(x, idx, src, axis, reduce, include_self),
    _reduce_vjp,
    _reduce_jvp,
)
