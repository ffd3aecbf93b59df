"""Rows of the primitive table whose value the compiled targets compute from simpler rows:
``logsumexp``, ``softmax``, ``var`` and ``std``, with the NumPy forwards the interpreter's math
namespace takes from ``Numpy``.

Contract: each row has a derivative of its own, PyTorch's formula written in rows of the
table (so a second derivative differentiates that formula again, as PyTorch's double backward
does), a NumPy forward, and a ``lower`` rule that writes its value in simpler rows with the
same operations, in the same order, as the NumPy forward. ``transform.lower`` applies it
before the CPU and CUDA fusion and the bytecode encoder see a tape, so the value fuses into
loops as a composition recorded by the facade would; the interpreter and the NumPy driver run
the row's own forward (one step instead of six).

Why rows and not the facade's compositions: PyTorch's ``logsumexp`` gradient is
``exp(x - out)``, not the softmax that differentiating the composition gives. The two differ
where ``out`` rounds (1 each at [3e38, 3e38], whose sum 2 is absorbed, against 0.5), and the
second derivative must see ``out`` as a function of ``x`` (``diag(p) - p p^T``), which a
formula spliced onto the composition's value would not. PyTorch's ``softmax`` gradient is
``y * (g - sum(g * y))`` and its value the exponentials times their sum's reciprocal: the
gradient of ``sum(softmax)`` is then +0.0 wherever the probabilities sum to 1 exactly, where
the composition's is a rounding residue of either sign. PyTorch accumulates a float32 variance
in float64 (the std of [3e38, 3e38, -1] is 1.7e38, not an overflow) and takes its gradient
``2 / (n - correction) * g * (x - mean)`` in float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import shapes as S
from .table import P, Params, Tangents, keepdim_shape, per_arg, sole, unreduce, zeros_like

if TYPE_CHECKING:
    from ..tape import Var

Shape = tuple[int, ...]


def _reduced(shape: Shape, axes: Sequence[int]) -> Shape:
    return tuple(n for i, n in enumerate(shape) if i not in axes)


class Numpy:
    """The NumPy forward of each row below (part of the interpreter's math namespace)."""

    @staticmethod
    def logsumexp(x: np.ndarray, axes: tuple[int, ...], keepdim: bool) -> np.ndarray:
        # the lower rule's steps: the max (0 where infinite: an infinite row keeps its inf or
        # NaN instead of inf - inf), the shifted exponentials' sum, its log, the max added back
        if x.size:
            m = np.amax(x, axis=axes, keepdims=True)
        else:
            m = np.zeros(keepdim_shape(x.shape, axes), x.dtype)
        m = np.where(np.abs(m) == np.inf, x.dtype.type(0), m)
        out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True, dtype=x.dtype)) + m
        return out if keepdim else out.reshape(_reduced(x.shape, axes))

    @staticmethod
    def softmax(x: np.ndarray, axis: int) -> np.ndarray:
        # the lower rule's steps, in PyTorch's order: the max, the shifted exponentials, their
        # sum's reciprocal, the product (float32 exponentials rounded from float64 ones, as the
        # compiled kernels' are: within an ulp of PyTorch's, where NumPy's float32 exp is off by
        # one in four cases out of ten, which shows in the rounding of sum(softmax))
        if x.size:
            m = np.amax(x, axis=axis, keepdims=True)
        else:
            m = np.zeros(keepdim_shape(x.shape, (axis,)), x.dtype)
        d = x - m
        e = np.exp(d.astype(np.float64)).astype(x.dtype) if x.dtype == np.float32 else np.exp(d)
        return e * (x.dtype.type(1) / np.sum(e, axis=axis, keepdims=True, dtype=x.dtype))

    @staticmethod
    def var(x: np.ndarray, axes: tuple[int, ...], correction: float, keepdim: bool, root: bool = False) -> np.ndarray:
        # the lower rule's steps (see ``_moment_lower``)
        n = _count(x.shape, axes)
        if x.dtype == np.float32:
            w = x.astype(np.float64)
            k = w[tuple(slice(0, 1) if i in axes else slice(None) for i in range(x.ndim))] if x.size else 0.0
            d = w - k
            s1, s2 = np.sum(d, axis=axes, keepdims=True), np.sum(d * d, axis=axes, keepdims=True)
            out = np.maximum(s2 - s1 * s1 / np.float64(n), 0.0)
        else:
            c = x - np.sum(x, axis=axes, keepdims=True, dtype=x.dtype) / x.dtype.type(n)
            out = np.sum(c * c, axis=axes, keepdims=True, dtype=x.dtype)
        out = out / out.dtype.type(_divisor(x.shape, axes, correction))
        out = np.sqrt(out) if root else out
        return (out if keepdim else out.reshape(_reduced(x.shape, axes))).astype(x.dtype)

    @staticmethod
    def std(x: np.ndarray, axes: tuple[int, ...], correction: float, keepdim: bool) -> np.ndarray:
        return Numpy.var(x, axes, correction, keepdim, root=True)


def _shift(x: Var, axes: Sequence[int]) -> Var:
    """The maximum along ``axes`` (kept as size 1), 0 where it is infinite or the axes are empty:
    an infinite row keeps its inf or NaN instead of inf - inf."""
    kept = keepdim_shape(x.shape, axes)
    m = x.amax(axes=axes, keepdim=True) if math.prod(x.shape) else x.bld.full(0, kept, x.dtype)
    return m.abs().eq(x.bld.full(math.inf, kept, x.dtype)).where(zeros_like(m), m)


def _logsumexp_lower(args: Sequence[Var], params: Params) -> Var:
    (x,), axes, keepdim = args, params["axes"], params["keepdim"]
    m = _shift(x, axes)
    out = (x - m.expand(shape=x.shape)).exp().sum(axes=axes, keepdim=True).log() + m
    return out if keepdim else out.reshape(shape=_reduced(x.shape, axes))


def _scaled_probabilities(g: Var, out: Var, x: Var, axes: Sequence[int], keepdim: bool) -> Var:
    """``g * exp(x - out)`` (``g`` of ``out``'s shape) as ``exp(x - m) * (g * exp(m - out))``, the
    shift ``m`` held constant: the first factor is the lowered forward's (a compiled program
    keeps it rather than computing every exponential again: the same rows, which
    ``transform.lower`` merges), the last one number a slice (``m - out`` lies in
    [-log n, 0], so neither factor overflows). At an infinite or NaN row the product is
    PyTorch's: NaN where ``x - out`` is, 0 where it is -inf."""
    kept = keepdim_shape(x.shape, axes)
    m = _shift(x, axes).detach()
    if not keepdim:
        g, out = g.reshape(shape=kept), out.reshape(shape=kept)
    return (x - m.expand(shape=x.shape)).exp() * (g * (m - out).exp()).expand(shape=x.shape)


def _logsumexp_vjp(g: Var, out: Var, x: Var, axes: Sequence[int], keepdim: bool) -> Var:
    # PyTorch's g * exp(x - out), out a function of x again when this is differentiated
    return _scaled_probabilities(g, out, x, axes, keepdim)


def _logsumexp_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    (x,), axes, keepdim = args, params["axes"], params["keepdim"]
    ones = out.bld.full(1, out.shape, out.dtype)
    return (sole(ts) * _scaled_probabilities(ones, out, x, axes, keepdim)).sum(axes=axes, keepdim=keepdim)


def _softmax_lower(args: Sequence[Var], params: Params) -> Var:
    (x,), axis = args, params["axis"]
    kept = keepdim_shape(x.shape, (axis,))
    m = x.amax(axes=(axis,), keepdim=True) if math.prod(x.shape) else x.bld.full(0, kept, x.dtype)
    e = (x - m.expand(shape=x.shape)).exp()
    # the reciprocal taken in the loop over x (the same number for each element of a slice): a
    # step over the sums' shape alone would be one more kernel, or glue, between the two loops
    s = e.sum(axes=(axis,), keepdim=True).expand(shape=x.shape)
    return e * (x.bld.full(1, x.shape, x.dtype) / s)


def _softmax_vjp(g: Var, out: Var, x: Var, axis: int) -> Var:
    # PyTorch's y * (g - sum(g * y)): where the probabilities sum to 1 exactly, the gradient of
    # sum(softmax) is +0.0, not a rounding residue of either sign
    return out * (g - (g * out).sum(axes=(axis,), keepdim=True).expand(shape=x.shape))


def _softmax_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    t, axis = sole(ts), params["axis"]
    return out * (t - (t * out).sum(axes=(axis,), keepdim=True).expand(shape=out.shape))


def _float_scan(shapes: Sequence[Shape], dtypes: Sequence[str], axis: int) -> S.Typed:
    if dtypes[0] not in ("f32", "f64"):
        S.fail(f"softmax operand must be real floating, got {dtypes[0]}")
    return S.scan(shapes, dtypes, axis)


def _float_reduce(shapes: Sequence[Shape], dtypes: Sequence[str], axes: Sequence[int], keepdim: bool) -> S.Typed:
    if dtypes[0] not in ("f32", "f64"):
        S.fail(f"logsumexp operand must be real floating, got {dtypes[0]}")
    return S.reduce(shapes, dtypes, axes, keepdim)


P(
    "logsumexp",
    "reduce",
    _float_reduce,
    lambda m, x, axes, keepdim: m.logsumexp(x, axes, keepdim),
    per_arg(_logsumexp_vjp),
    _logsumexp_jvp,
    lower=_logsumexp_lower,
)
P(
    "softmax",
    "normalize",
    _float_scan,
    lambda m, x, axis: m.softmax(x, axis),
    per_arg(_softmax_vjp),
    _softmax_jvp,
    lower=_softmax_lower,
)


# --- var and std: PyTorch's float32 statistics accumulate in float64 --------------------------


def _count(shape: Shape, axes: Sequence[int]) -> int:
    return math.prod(shape[a] for a in axes)


def _divisor(shape: Shape, axes: Sequence[int], correction: float) -> float:
    return max(0, _count(shape, axes) - correction)


def _deviations(x: Var, axes: Sequence[int]) -> Var:
    """``x - mean(x)`` along ``axes``, the mean a function of ``x``."""
    return x - (x.sum(axes=axes, keepdim=True) / _count(x.shape, axes)).expand(shape=x.shape)


def _slope(shape: Shape, axes: Sequence[int], correction: float) -> float:
    """PyTorch's ``2 / (n - correction)`` of a variance's derivative (inf for no degree of freedom)."""
    d = _divisor(shape, axes, correction)
    return 2.0 / d if d else math.inf


def _moment(
    shapes: Sequence[Shape], dtypes: Sequence[str], axes: Sequence[int], correction: float, keepdim: bool
) -> S.Typed:
    if dtypes[0] not in ("f32", "f64"):
        S.fail(f"var and std operands must be real floating, got {dtypes[0]}")
    return S.reduce(shapes, dtypes, axes, keepdim)


def _moment_lower(root: bool) -> Callable[[Sequence[Var], Params], Var]:
    """The rule of ``var`` (``root``: ``std``). float32 is accumulated in float64, as PyTorch's
    (one pass: the sums of the differences from the slice's first element and of their squares;
    float32 values differ exactly in float64 and square nearly so, so the cancellation this
    shift leaves costs nothing after the rounding to float32, and the pass reads float32 once,
    where two passes in float64 took twice as long); float64 takes two passes, the mean's first."""

    def rule(args: Sequence[Var], params: Params) -> Var:
        (x,), axes, correction, keepdim = args, params["axes"], params["correction"], params["keepdim"]
        n, kept = _count(x.shape, axes), keepdim_shape(x.shape, axes)
        if x.dtype == "f32":
            if n:
                firsts = x.slice(starts=(0,) * len(x.shape), stops=kept, steps=(1,) * len(x.shape))
                k = firsts.cast(dtype="f64").expand(shape=x.shape)
            else:
                k = x.bld.full(0, x.shape, "f64")
            d = x.cast(dtype="f64") - k
            s1, s2 = d.sum(axes=axes, keepdim=True), (d * d).sum(axes=axes, keepdim=True)
            out = (s2 - s1 * s1 / n).maximum(x.bld.full(0, kept, "f64"))
        else:
            c = _deviations(x, axes)
            out = (c * c).sum(axes=axes, keepdim=True)
        out = out / _divisor(x.shape, axes, correction)
        out = out.sqrt() if root else out
        out = out if keepdim else out.reshape(shape=_reduced(x.shape, axes))
        return out.cast(dtype="f32") if x.dtype == "f32" else out

    return rule


def _var_vjp(g: Var, out: Var, x: Var, axes: Sequence[int], correction: float, keepdim: bool) -> Var:
    # PyTorch's 2 / (n - correction) * g * (x - mean(x)), in x's dtype (a float32 mean that
    # overflows gives PyTorch's infinities); the mean is a function of x to second order
    return unreduce(g, x.shape, axes, keepdim) * _slope(x.shape, axes, correction) * _deviations(x, axes)


def _std_vjp(g: Var, out: Var, x: Var, axes: Sequence[int], correction: float, keepdim: bool) -> Var:
    # PyTorch's: the variance's, of g / (2 std), 0 where the std is 0 (a constant slice)
    zero = out.eq(zeros_like(out))
    return _var_vjp(zero.where(zeros_like(g), g / (out * 2)), out, x, axes, correction, keepdim)


def _var_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    (x,), axes, correction, keepdim = args, params["axes"], params["correction"], params["keepdim"]
    return (_deviations(x, axes) * sole(ts)).sum(axes=axes, keepdim=keepdim) * _slope(x.shape, axes, correction)


def _std_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    return out.eq(zeros_like(out)).where(zeros_like(out), _var_jvp(ts, out, args, params) / (out * 2))


for _name, _vjp, _jvp in (("var", _var_vjp, _var_jvp), ("std", _std_vjp, _std_jvp)):
    P(
        _name,
        "reduce",
        _moment,
        lambda m, x, axes, correction, keepdim, _f=_name: getattr(m, _f)(x, axes, correction, keepdim),
        per_arg(_vjp),
        _jvp,
        lower=_moment_lower(_name == "std"),
    )
