"""Element types and PyTorch's type-promotion rules.

Contract: ``DType`` objects are singletons compared by identity; ``promote`` and
``result_type`` reproduce ``torch.result_type`` for bool, int32, int64, float32, float64.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

__all__ = [
    "DType",
    "bool_",
    "int32",
    "int64",
    "float32",
    "float64",
    "promote",
    "result_type",
    "from_numpy_dtype",
    "from_short",
    "get_default_dtype",
    "set_default_dtype",
]


class DType:
    """An element type: ``ngrad.float32``, ``ngrad.float64``, ``ngrad.int64``, ``ngrad.int32``, ``ngrad.bool``."""

    __slots__ = ("name", "np", "short", "category", "itemsize", "is_floating_point", "is_signed")

    def __init__(self, name: str, np_dtype: DTypeLike, short: str, category: int) -> None:
        self.name = name
        self.np = np.dtype(np_dtype)
        self.short = short
        # 0 bool < 1 integer < 2 floating: PyTorch promotes across categories first.
        self.category = category
        self.itemsize = self.np.itemsize
        self.is_floating_point = category == 2
        self.is_signed = category != 0

    def __repr__(self) -> str:
        return f"ngrad.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (from_short, (self.short,))


bool_ = DType("bool", np.bool_, "b8", 0)
int32 = DType("int32", np.int32, "i32", 1)
int64 = DType("int64", np.int64, "i64", 1)
float32 = DType("float32", np.float32, "f32", 2)
float64 = DType("float64", np.float64, "f64", 2)

_ALL = (bool_, int32, int64, float32, float64)
_BY_SHORT = {d.short: d for d in _ALL}
_BY_NP = {d.np: d for d in _ALL}
_RANK = {d: i for i, d in enumerate(_ALL)}


def from_short(short: str) -> DType:
    """The dtype of a short name (``"f32"``, ...)."""
    return _BY_SHORT[short]


def from_numpy_dtype(np_dtype: DTypeLike) -> DType:
    """The ngrad dtype of a NumPy dtype, or ``TypeError`` naming the supported ones."""
    d = _BY_NP.get(np.dtype(np_dtype))
    if d is None:
        raise TypeError(
            f"can't convert np.ndarray of type numpy.{np.dtype(np_dtype).name}. The only "
            "supported types are: float64, float32, int64, int32, and bool."
        )
    return d


_default = [float32]


def get_default_dtype() -> DType:
    """The floating dtype of Python floats and factories (``ngrad.float32`` unless changed).

    >>> import ngrad
    >>> ngrad.get_default_dtype()
    ngrad.float32
    """
    return _default[0]


def set_default_dtype(d: DType) -> None:
    """Set the default floating dtype (``ngrad.float32`` or ``ngrad.float64``)."""
    if d not in (float32, float64):
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default[0] = d


def promote(a: DType, b: DType) -> DType:
    """The smallest dtype that holds both, PyTorch style (``promote(int64, float32) is float32``)."""
    if a is b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    return a if _RANK[a] > _RANK[b] else b


def result_type(dims: Iterable[DType], zero_dims: Iterable[DType] = (), scalars: Iterable[DType] = ()) -> DType | None:
    """PyTorch's three-tier promotion: dimensioned tensors, zero-dim tensors, Python scalars.

    A lower tier only matters when it brings a higher category; a Python float then
    contributes the default dtype, a Python int ``int64``.
    """
    result = None
    for d in dims:
        result = d if result is None else promote(result, d)
    for tier in (zero_dims, scalars):
        best = None
        for d in tier:
            best = d if best is None else promote(best, d)
        if best is not None and (result is None or best.category > result.category):
            result = best
    return result
