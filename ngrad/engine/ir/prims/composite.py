"""Rows of the primitive table whose value the compiled targets compute from simpler rows:
``logsumexp`` and ``softmax``, with the NumPy forwards the interpreter's math namespace takes
from ``Numpy``.

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
the composition's is a rounding residue of either sign.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import shapes as S
from .table import P, Params, Tangents, keepdim_shape, per_arg, sole, zeros_like

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
