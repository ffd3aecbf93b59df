"""Rows of the primitive table: scans and selection: cumulative products and extremes, log-
cumulative sums, order statistics (median, kthvalue, quantile, mode), searchsorted, bucketize,
histc and unique, with the NumPy implementations the interpreter's math namespace takes from
``Numpy``.

Contract: six rows. ``cumprod`` and ``logcumsumexp`` are differentiable scans (their VJPs and
JVPs are PyTorch's formulas, written in rows of the table; ``cumprod``'s are exact where the
input has zeros, to second order). ``cumargmax``/``cumargmin`` (the index of the running extreme: the latest
one on ties, the latest NaN once one is seen), ``argmode`` (the index of the most frequent value
along an axis, kept as size 1: the smallest such value, its last occurrence) and
``searchsorted`` (insertion points of values in sorted rows) give integer results, never
differentiated: the facade gathers values at them, so gradients go to the selected entries as
PyTorch's do. Median, kthvalue, quantile, histc and unique are compositions in the facade.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from .. import shapes as S
from .table import P, Params, Tangents, per_arg, sole, zeros_like

if TYPE_CHECKING:
    from ..tape import Var

Shape = tuple[int, ...]
_LOWEST = {"f32": float(np.finfo(np.float32).min), "f64": float(np.finfo(np.float64).min)}


# --- shape rules ---------------------------------------------------------------------------------


def _float_scan(shapes: Sequence[Shape], dtypes: Sequence[str], axis: int) -> S.Typed:
    if dtypes[0][0] != "f":
        S.fail(f"scan operand must be floating, got {dtypes[0]}")
    return S.scan(shapes, dtypes, axis)


def _index_scan(shapes: Sequence[Shape], dtypes: Sequence[str], axis: int) -> S.Typed:
    return S.scan(shapes, dtypes, axis)[0], "i64"


def _argmode(shapes: Sequence[Shape], dtypes: Sequence[str], axis: int) -> S.Typed:
    return S.arg(shapes, dtypes, axis, True)


def _searchsorted(shapes: Sequence[Shape], dtypes: Sequence[str], right: bool) -> S.Typed:
    seq, values = shapes
    if not seq or len(seq) != len(values) or seq[:-1] != values[:-1] or dtypes[0] != dtypes[1]:
        S.fail(f"searchsorted rows {seq}:{dtypes[0]} and values {values}:{dtypes[1]} must share leading dims and dtype")
    return values, "i64"


# --- NumPy forwards ------------------------------------------------------------------------------


def _positions(x: np.ndarray, axis: int) -> np.ndarray:
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return np.arange(x.shape[axis], dtype=np.int64).reshape(shape)


def _cumarg(x: np.ndarray, axis: int, running: np.ufunc) -> np.ndarray:
    # Position j holds the running extreme when x_j equals the extreme up to j (or is NaN, which
    # every later position keeps); the extreme up to k was last reached at the latest such j <= k.
    with np.errstate(invalid="ignore"):
        reached = x == running.accumulate(x, axis=axis) if x.size else np.zeros(x.shape, bool)
    if x.dtype.kind == "f":
        reached |= np.isnan(x)
    marks = np.where(reached, _positions(x, axis), 0)
    return np.maximum.accumulate(marks, axis=axis) if x.size else marks.astype(np.int64)


class Numpy:
    """The NumPy forward of each row below (part of the interpreter's math namespace)."""

    @staticmethod
    def cumprod(x: np.ndarray, axis: int) -> np.ndarray:
        return np.cumprod(x, axis=axis, dtype=x.dtype)

    @staticmethod
    def logcumsumexp(x: np.ndarray, axis: int) -> np.ndarray:
        if not x.size:
            return x.copy()
        with np.errstate(invalid="ignore"):
            return np.logaddexp.accumulate(x, axis=axis, dtype=x.dtype)

    @staticmethod
    def cumargmax(x: np.ndarray, axis: int) -> np.ndarray:
        return _cumarg(x, axis, np.maximum)

    @staticmethod
    def cumargmin(x: np.ndarray, axis: int) -> np.ndarray:
        return _cumarg(x, axis, np.minimum)

    @staticmethod
    def argmode(x: np.ndarray, axis: int) -> np.ndarray:
        """The last occurrence (in a stable sort, NaN largest and equal to NaN) of the smallest
        of the most frequent values."""
        rows = np.moveaxis(x, axis, -1)
        order = np.argsort(rows, axis=-1, kind="stable")
        s = np.take_along_axis(rows, order, axis=-1)
        same = s[..., 1:] == s[..., :-1]
        if s.dtype.kind == "f":
            same |= np.isnan(s[..., 1:]) & np.isnan(s[..., :-1])
        k = np.arange(s.shape[-1], dtype=np.int64)
        starts = np.where(np.concatenate([np.ones(same.shape[:-1] + (1,), bool), ~same], axis=-1), k, 0)
        length = k - np.maximum.accumulate(starts, axis=-1)
        best = np.argmax(length, axis=-1)[..., None]  # the first longest run ends there: the smallest value
        return np.moveaxis(np.take_along_axis(order, best, axis=-1), -1, axis).astype(np.int64)

    @staticmethod
    def searchsorted(seq: np.ndarray, values: np.ndarray, right: bool) -> np.ndarray:
        side: Literal["left", "right"] = "right" if right else "left"
        if seq.ndim == 1 or not any(seq.strides[:-1]):  # one row, maybe broadcast: one search
            row = seq.reshape(-1, seq.shape[-1])[0] if seq.size else seq.reshape(seq.shape[-1])
            return np.searchsorted(row, values, side=side).astype(np.int64)
        out = np.empty(values.shape, np.int64)
        flat_seq = seq.reshape(-1, seq.shape[-1])
        flat_out = out.reshape(-1, values.shape[-1])
        for r, v in enumerate(values.reshape(-1, values.shape[-1])):
            flat_out[r] = np.searchsorted(flat_seq[r], v, side=side)
        return out


# --- derivative rules ----------------------------------------------------------------------------


def _rev_cumsum(v: Var, axis: int) -> Var:
    return v.flip(axes=(axis,)).cumsum(axis=axis).flip(axes=(axis,))


def _zero_masks(x: Var, axis: int) -> tuple[Var, Var, Var]:
    """Where ``x`` is zero, its first zero along ``axis`` and its second."""
    is0 = x.eq(0)
    count = is0.cast(dtype="i64").cumsum(axis=axis)
    return is0, is0.logical_and(count.eq(1)), is0.logical_and(count.eq(2))


def _cumprod_vjp(g: Var, out: Var, x: Var, axis: int) -> Var:
    # dy_j/dx_k is the product of x_i (i <= j, i != k). Where x_k != 0 that is y_j / x_k, so
    # the cotangent is sum_{j>=k} g_j y_j / x_k (PyTorch's rule; 0 after a zero, y being 0
    # there). At the first zero it is sum_{j>=k} g_j times the cumulative product with that zero
    # read as one; at the second, the first zero's entry times the same with both read as one;
    # later zeros get 0. Each is the exact product formula, never a division by zero, so its
    # own derivative (second order, as PyTorch's O(n^2) double backward) is exact too.
    is0, first, second = _zero_masks(x, axis)
    one, zero = x.bld.full(1, x.shape, x.dtype), zeros_like(x)
    nonzero = _rev_cumsum(g * out, axis) / is0.where(one, x)
    skip_first = first.where(one, x)
    at_first = _rev_cumsum(g * skip_first.cumprod(axis=axis), axis)
    first_entry = first.where(x, zero).sum(axes=(axis,), keepdim=True).expand(shape=x.shape)
    at_second = first_entry * _rev_cumsum(g * second.where(one, skip_first).cumprod(axis=axis), axis)
    return is0.where(first.where(at_first, second.where(at_second, zero)), nonzero)


def _cumprod_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    # before a slice's first zero y_j * sum_{k<=j} t_k / x_k; from it on, only the first zero's
    # tangent survives, times the product of the others
    t, (x,), axis = sole(ts), args, params["axis"]
    is0, first, _ = _zero_masks(x, axis)
    one, zero = x.bld.full(1, x.shape, x.dtype), zeros_like(x)
    before = is0.cast(dtype="i64").cumsum(axis=axis).eq(0)
    skipped = first.where(one, x).cumprod(axis=axis)
    at_zero = first.where(t, zero).sum(axes=(axis,), keepdim=True).expand(shape=x.shape)
    return before.where(out * (before.where(t, zero) / before.where(x, one)).cumsum(axis=axis), at_zero * skipped)


def _logcumsumexp_vjp(g: Var, out: Var, x: Var, axis: int) -> Var:
    # PyTorch's: the positive and negative parts of g summed in log space, so no exp overflows;
    # |g| is read as 1 where g is 0 (masked anyway) so that no log(0) reaches a second derivative.
    def rev(v: Var) -> Var:
        return v.flip(axes=(axis,)).logcumsumexp(axis=axis).flip(axes=(axis,))

    lowest = g.bld.full(_LOWEST[g.dtype], g.shape, g.dtype)
    log_abs = g.eq(0).where(g.bld.full(1, g.shape, g.dtype), g.abs()).log()
    positive = g.gt(0).where(log_abs, lowest)
    negative = g.lt(0).where(log_abs, lowest)
    return (rev(positive - out) + x).exp() - (rev(negative - out) + x).exp()


def _logcumsumexp_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    t, (x,), axis = sole(ts), args, params["axis"]
    e = (x - x.amax(axes=(axis,), keepdim=True).expand(shape=x.shape)).exp()
    return (e * t).cumsum(axis=axis) / e.cumsum(axis=axis)


P("cumprod", "scan", S.scan, lambda m, x, axis: m.cumprod(x, axis), per_arg(_cumprod_vjp), _cumprod_jvp)
P(
    "logcumsumexp",
    "scan",
    _float_scan,
    lambda m, x, axis: m.logcumsumexp(x, axis),
    per_arg(_logcumsumexp_vjp),
    _logcumsumexp_jvp,
)
P("cumargmax", "scan", _index_scan, lambda m, x, axis: m.cumargmax(x, axis))
P("cumargmin", "scan", _index_scan, lambda m, x, axis: m.cumargmin(x, axis))
P("argmode", "sort", _argmode, lambda m, x, axis: m.argmode(x, axis))
P("searchsorted", "search", _searchsorted, lambda m, seq, values, right: m.searchsorted(seq, values, right))
