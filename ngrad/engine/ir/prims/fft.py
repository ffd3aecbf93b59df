"""Rows of the primitive table: discrete Fourier transforms on NumPy's FFT (pocketfft, single and
double precision), run as glue steps on every target (on CUDA through CuPy's FFT where CuPy is
installed, else on the host), with the NumPy implementations the interpreter's math namespace
takes from ``Numpy``.

Contract: three rows, over the axes ``axes`` with PyTorch's ``norm`` ("backward": the inverse
scales by 1/n; "ortho": both by 1/sqrt(n); "forward": the forward by 1/n):

- ``fftn(x; axes, norm, inverse)``: complex to complex, the same shape;
- ``rfftn(x; axes, norm)``: real to complex, the last of ``axes`` cut to its n // 2 + 1
  non-negative frequencies;
- ``irfftn(x; axes, norm, n)``: that half spectrum (its last axis of n // 2 + 1) back to ``n``
  real values.

Sizes are the operands' (the facade trims or zero-pads to PyTorch's ``n``/``s`` with ``slice``
and ``unslice``). All three are linear (their own JVP); the VJPs are PyTorch's: the adjoint
transform with the dual normalization, and for ``irfftn`` the half spectrum of the cotangent
with the bins the Hermitian half stands for twice (FftC2RBackward) doubled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import shapes as S
from ..dtypes import COMPLEX, COMPLEX_OF, REAL_OF
from .table import LINEAR, Cotangents, P, Params, Shapes, Typed, per_arg

if TYPE_CHECKING:
    from ..tape import Var

NORMS = ("backward", "ortho", "forward")
DUAL = {"backward": "forward", "ortho": "ortho", "forward": "backward"}  # the adjoint's scaling


class Numpy:
    """The NumPy forward of each row below (part of the interpreter's math namespace). The
    functions are NumPy's, so CuPy arrays (the CUDA target's glue) dispatch to CuPy's FFT."""

    @staticmethod
    def fftn(x: np.ndarray, axes: Sequence[int], norm: Any, inverse: bool) -> np.ndarray:
        if not axes:
            return x
        return (np.fft.ifftn if inverse else np.fft.fftn)(x, axes=tuple(axes), norm=norm)

    @staticmethod
    def rfftn(x: np.ndarray, axes: Sequence[int], norm: Any) -> np.ndarray:
        return np.fft.rfftn(x, axes=tuple(axes), norm=norm)

    @staticmethod
    def irfftn(x: np.ndarray, axes: Sequence[int], norm: Any, n: int) -> np.ndarray:
        s = [x.shape[a] for a in axes[:-1]] + [n]
        return np.fft.irfftn(x, s=s, axes=tuple(axes), norm=norm)


def _check(shape: Sequence[int], axes: Sequence[int], norm: str) -> None:
    if norm not in NORMS:
        S.fail(f"fft: norm must be one of {NORMS}, got {norm!r}")
    if len(set(axes)) != len(axes) or any(not 0 <= a < len(shape) for a in axes):
        S.fail(f"fft: axes {tuple(axes)} of a rank-{len(shape)} operand")


def _fftn(shapes: Shapes, dtypes: Sequence[str], axes: Sequence[int], norm: str, inverse: bool) -> Typed:
    _check(shapes[0], axes, norm)
    if dtypes[0] not in COMPLEX:
        S.fail(f"fftn takes a complex operand, got {dtypes[0]}")
    return tuple(shapes[0]), dtypes[0]


def _rfftn(shapes: Shapes, dtypes: Sequence[str], axes: Sequence[int], norm: str) -> Typed:
    _check(shapes[0], axes, norm)
    if dtypes[0] not in COMPLEX_OF or not axes:
        S.fail(f"rfftn takes a float operand and at least one axis, got {dtypes[0]} and {tuple(axes)}")
    shape = list(shapes[0])
    shape[axes[-1]] = shape[axes[-1]] // 2 + 1
    return tuple(shape), COMPLEX_OF[dtypes[0]]


def _irfftn(shapes: Shapes, dtypes: Sequence[str], axes: Sequence[int], norm: str, n: int) -> Typed:
    _check(shapes[0], axes, norm)
    if dtypes[0] not in COMPLEX or not axes or n < 1 or shapes[0][axes[-1]] != n // 2 + 1:
        S.fail(f"irfftn takes a complex half spectrum of n // 2 + 1 = {n // 2 + 1}, got {shapes[0]}:{dtypes[0]}")
    shape = list(shapes[0])
    shape[axes[-1]] = n
    return tuple(shape), REAL_OF[dtypes[0]]


def _rfftn_vjp(g: Var, out: Var, x: Var, axes: Sequence[int], norm: str) -> Var:
    # the adjoint of (real -> complex, full transform, first half): zero-pad, transform back, real part
    rank = len(g.shape)
    padded = g.unslice(shape=x.shape, starts=(0,) * rank, stops=g.shape, steps=(1,) * rank)
    return padded.fftn(axes=tuple(axes), norm=DUAL[norm], inverse=True).real()


def _irfftn_vjp(g: Var, out: Var, x: Var, axes: Sequence[int], norm: str, n: int) -> Var:
    half = g.rfftn(axes=tuple(axes), norm=DUAL[norm])
    last, h = axes[-1], half.shape[axes[-1]]
    twice = n - h  # the bins 1..twice stand for two of the full spectrum's (PyTorch's FftC2RBackward)
    if twice <= 0:
        return half
    ones = half.bld.full(1, tuple(1 if i != last else twice for i in range(len(half.shape))), half.dtype)
    window = tuple(1 if i != last else h for i in range(len(half.shape)))
    starts = tuple(1 if i == last else 0 for i in range(len(half.shape)))
    stops = tuple(1 + twice if i == last else 1 for i in range(len(half.shape)))
    extra = ones.unslice(shape=window, starts=starts, stops=stops, steps=(1,) * len(half.shape))
    return half * (extra + 1).expand(shape=half.shape)


def _fftn_vjp(need: Sequence[bool], g: Var, out: Var, args: Sequence[Var], params: Params) -> Cotangents:
    return [g.fftn(axes=tuple(params["axes"]), norm=DUAL[params["norm"]], inverse=not params["inverse"])]


P("fftn", "fft", _fftn, lambda m, x, axes, norm, inverse: m.fftn(x, axes, norm, inverse), _fftn_vjp, LINEAR)
P("rfftn", "fft", _rfftn, lambda m, x, axes, norm: m.rfftn(x, axes, norm), per_arg(_rfftn_vjp), LINEAR)
P("irfftn", "fft", _irfftn, lambda m, x, axes, norm, n: m.irfftn(x, axes, norm, n), per_arg(_irfftn_vjp), LINEAR)
