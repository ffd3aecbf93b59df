"""Rows of the primitive table: complex numbers: ``conj``, ``real``, ``imag``, ``complex``,
``angle`` (elementwise, so they fuse with the complex arithmetic of the core rows) and
``view_as_real``/``view_as_complex`` (a complex array as pairs of reals and back, run as glue),
with the NumPy forwards the interpreter's math namespace takes from ``Numpy``.

Contract: gradients follow PyTorch's convention for complex values (see ``table``): the
cotangent of a complex slot is ``dL/dx + i dL/dy`` for a real loss ``L``. ``real``/``imag``/
``angle`` take a complex argument to its real dtype (``angle`` also takes a real one: 0 or pi);
``complex`` takes two equal real arguments to the complex dtype of their precision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import shapes as S
from ..dtypes import COMPLEX, COMPLEX_OF, REAL_OF
from .table import Cotangents, Infer, P, Params, Shapes, Tangents, Typed, per_arg, real_result, sole, zeros_like

if TYPE_CHECKING:
    from ..tape import Var


class Numpy:
    """The NumPy forward of each row below (part of the interpreter's math namespace)."""

    conj = staticmethod(np.conj)
    real = staticmethod(np.real)
    imag = staticmethod(np.imag)

    @staticmethod
    def complex(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return x + 1j * y if x.dtype == np.float64 else (x + np.complex64(1j) * y).astype(np.complex64)

    @staticmethod
    def angle(x: np.ndarray) -> np.ndarray:
        """``atan2(imag, real)``; for a real ``x`` 0 or pi (NaN stays NaN), as PyTorch's."""
        if x.dtype.kind == "c":
            return np.angle(x)
        return np.where(np.isnan(x), x, np.where(x < 0, np.pi, 0)).astype(x.dtype)

    @staticmethod
    def view_as_real(x: np.ndarray) -> np.ndarray:
        return np.stack([x.real, x.imag], axis=-1)

    @staticmethod
    def view_as_complex(x: np.ndarray) -> np.ndarray:
        return Numpy.complex(x[..., 0], x[..., 1])


def _complex_only(name: str) -> Infer:
    def infer(shapes: Shapes, dtypes: Sequence[str]) -> Typed:
        if dtypes[0] not in COMPLEX:
            S.fail(f"{name} takes a complex argument, got {dtypes[0]}")
        return real_result(shapes, dtypes)

    return infer


def _complex_of(shapes: Shapes, dtypes: Sequence[str]) -> Typed:
    shape, dtype = S.matching(shapes, dtypes)
    if dtype not in COMPLEX_OF:
        S.fail(f"complex takes two float32 or float64 arguments, got {dtype}")
    return shape, COMPLEX_OF[dtype]


def _view_as_real(shapes: Shapes, dtypes: Sequence[str]) -> Typed:
    if dtypes[0] not in COMPLEX:
        S.fail(f"view_as_real takes a complex argument, got {dtypes[0]}")
    return tuple(shapes[0]) + (2,), REAL_OF[dtypes[0]]


def _view_as_complex(shapes: Shapes, dtypes: Sequence[str]) -> Typed:
    if dtypes[0] not in COMPLEX_OF or not shapes[0] or shapes[0][-1] != 2:
        S.fail(f"view_as_complex takes a float array whose last dimension is 2, got {shapes[0]}:{dtypes[0]}")
    return tuple(shapes[0][:-1]), COMPLEX_OF[dtypes[0]]


def _angle_vjp(g: Var, out: Var, x: Var) -> Var:
    if x.dtype not in COMPLEX:
        return zeros_like(x)
    # PyTorch's: g * z / |z|^2 * i, 0 at z = 0
    r2 = x.real() * x.real() + x.imag() * x.imag()
    step = (x / r2.cast(dtype=x.dtype)) * g.cast(dtype=x.dtype)
    return r2.eq(0).where(zeros_like(x), (-step.imag()).complex(step.real()))  # step * i


def _view_as_real_vjp(need: Sequence[bool], g: Var, out: Var, args: Sequence[Var], params: Params) -> Cotangents:
    return [g.view_as_complex()]


def _view_as_complex_vjp(need: Sequence[bool], g: Var, out: Var, args: Sequence[Var], params: Params) -> Cotangents:
    return [g.view_as_real()]


def _real_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    return sole(ts).real()


def _imag_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    return sole(ts).imag()


P("conj", "unary", S.unary, lambda m, x: m.conj(x), per_arg(lambda g, out, x: g.conj()))
# a real cotangent g of Re(z) is the complex g; of Im(z), i g
P(
    "real",
    "unary",
    _complex_only("real"),
    lambda m, x: m.real(x),
    per_arg(lambda g, out, x: g.complex(zeros_like(g))),
    _real_jvp,
)
P(
    "imag",
    "unary",
    _complex_only("imag"),
    lambda m, x: m.imag(x),
    per_arg(lambda g, out, x: zeros_like(g).complex(g)),
    _imag_jvp,
)
P(
    "complex",
    "binary",
    _complex_of,
    lambda m, x, y: m.complex(x, y),
    per_arg(lambda g, out, x, y: g.real(), lambda g, out, x, y: g.imag()),
    "linear",
)
P("angle", "unary", real_result, lambda m, x: m.angle(x), per_arg(_angle_vjp))
P(
    "view_as_real",
    "complex_view",
    _view_as_real,
    lambda m, x: m.view_as_real(x),
    _view_as_real_vjp,
    "linear",
)
P(
    "view_as_complex",
    "complex_view",
    _view_as_complex,
    lambda m, x: m.view_as_complex(x),
    _view_as_complex_vjp,
    "linear",
)
