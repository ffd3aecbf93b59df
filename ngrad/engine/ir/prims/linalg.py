"""Rows of the primitive table: linear algebra on stacks of matrices (LAPACK through NumPy, run
as glue steps on every target), with the NumPy implementations the interpreter's math namespace
takes from ``Numpy``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import shapes as S
from .table import Cotangents, P, Params, Tangents, matrix_t, per_arg, sole

if TYPE_CHECKING:
    from ..tape import Var


def _lapack(fn: Callable[..., np.ndarray], name: str, *args: np.ndarray) -> np.ndarray:
    try:
        return fn(*args)
    except np.linalg.LinAlgError:
        raise RuntimeError(f"{name}: The input matrix is singular, so the computation could not be completed") from None


class Numpy:
    """The NumPy forward of each row below (part of the interpreter's math namespace)."""

    @staticmethod
    def inv(a: np.ndarray) -> np.ndarray:
        return _lapack(np.linalg.inv, "linalg.inv", a)

    @staticmethod
    def solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _lapack(np.linalg.solve, "linalg.solve", a, b)

    det = staticmethod(np.linalg.det)


def _solve_vjp(need: Sequence[bool], g: Var, out: Var, args: Sequence[Var], params: Params) -> Cotangents:
    a = args[0]
    gb = matrix_t(a).solve(g)  # one solve with A^T serves both cotangents
    return [-gb.matmul(matrix_t(out)) if need[0] else None, gb if need[1] else None]


def _solve_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    (ta, tb), a = ts, args[0]
    terms = [t for t in (tb, -ta.matmul(out) if ta is not None else None) if t is not None]
    return a.solve(terms[0] if len(terms) == 1 else terms[0] + terms[1])


def _det_vjp(g: Var, out: Var, a: Var) -> Var:
    return (g * out).reshape(shape=out.shape + (1, 1)).expand(shape=a.shape) * matrix_t(a.inv())


def _det_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    t, (a,) = sole(ts), args  # det(A) trace(A^-1 T)
    r = len(a.shape)
    return out * (matrix_t(a.inv()) * t).sum(axes=(r - 2, r - 1), keepdim=False)


P(
    "inv",
    "linalg",
    S.square,
    lambda m, a: m.inv(a),
    per_arg(lambda g, out, a: -matrix_t(out).matmul(g).matmul(matrix_t(out))),
    lambda ts, out, args, params: -out.matmul(sole(ts)).matmul(out),
)
P("solve", "linalg", S.solve, lambda m, a, b: m.solve(a, b), _solve_vjp, _solve_jvp)
P("det", "linalg", S.det, lambda m, a: m.det(a), per_arg(_det_vjp), _det_jvp)
