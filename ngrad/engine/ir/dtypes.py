"""Element types and PyTorch's type-promotion rules.

Contract: ``DType`` objects are singletons compared by identity; ``promote`` and
``result_type`` reproduce ``torch.promote_types`` and ``torch.result_type`` for bool, int32,
int64, float32, float64, complex64 and complex128 (a complex operand with a float64 one gives
complex128, as PyTorch's). Inside tapes dtypes are short names ('b8', 'i32', 'i64', 'f32',
'f64', 'c64', 'c128'); ``DIFFERENTIABLE`` holds those gradients flow through (floating and complex).
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
    "complex64",
    "complex128",
    "DIFFERENTIABLE",
    "COMPLEX",
    "REAL_OF",
    "COMPLEX_OF",
    "promote",
    "result_type",
    "from_numpy_dtype",
    "from_short",
    "get_default_dtype",
    "set_default_dtype",
    "get_default_complex_dtype",
    "scalar_type",
]


class DType:
    """An element type: ``ngrad.float32``, ``ngrad.float64``, ``ngrad.int64``, ``ngrad.int32``,
    ``ngrad.bool``, ``ngrad.complex64``, ``ngrad.complex128``.

    ```python
    >>> import ngrad
    >>> ngrad.complex64.is_complex, ngrad.complex64.is_floating_point, ngrad.complex64.to_real()
    (True, False, ngrad.float32)

    ```
    """

    __slots__ = (
        "name",
        "np",
        "short",
        "category",
        "itemsize",
        "is_floating_point",
        "is_signed",
        "is_complex",
        "differentiable",
    )

    def __init__(self, name: str, np_dtype: DTypeLike, short: str, category: int) -> None:
        self.name = name
        self.np = np.dtype(np_dtype)
        self.short = short
        # 0 bool < 1 integer < 2 floating < 3 complex: PyTorch promotes across categories first.
        self.category = category
        self.itemsize = self.np.itemsize
        self.is_floating_point = category == 2
        self.is_complex = category == 3
        self.is_signed = category != 0
        # gradients flow through floating and complex values (PyTorch's requires_grad rule)
        self.differentiable = category >= 2

    def to_real(self) -> DType:
        """The real dtype of a complex one (``complex64`` -> ``float32``); other dtypes as they are."""
        return _BY_SHORT[REAL_OF.get(self.short, self.short)]

    def to_complex(self) -> DType:
        """The complex dtype of a floating one (``float64`` -> ``complex128``); complex as it is."""
        return _BY_SHORT[COMPLEX_OF.get(self.short, self.short)]

    def __repr__(self) -> str:
        return f"ngrad.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (from_short, (self.short,))


bool_ = DType("bool", np.bool_, "b8", 0)
int32 = DType("int32", np.int32, "i32", 1)
int64 = DType("int64", np.int64, "i64", 1)
float32 = DType("float32", np.float32, "f32", 2)
float64 = DType("float64", np.float64, "f64", 2)
complex64 = DType("complex64", np.complex64, "c64", 3)
complex128 = DType("complex128", np.complex128, "c128", 3)

_ALL = (bool_, int32, int64, float32, float64, complex64, complex128)
DIFFERENTIABLE = frozenset(("f32", "f64", "c64", "c128"))
COMPLEX = frozenset(("c64", "c128"))
REAL_OF = {"c64": "f32", "c128": "f64"}
COMPLEX_OF = {"f32": "c64", "f64": "c128"}
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
            "supported types are: float64, float32, complex64, complex128, int64, int32, and bool."
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


def get_default_complex_dtype() -> DType:
    """The complex dtype of Python complex numbers: ``complex64`` while the default dtype is
    ``float32``, ``complex128`` while it is ``float64`` (PyTorch's rule)."""
    return _default[0].to_complex()


def scalar_type(category: int) -> DType:
    """The dtype of a Python number of a category (0 bool, 1 int, 2 float, 3 complex)."""
    return (bool_, int64, _default[0], _default[0].to_complex())[category]


def set_default_dtype(d: DType) -> None:
    """Set the default floating dtype (``ngrad.float32`` or ``ngrad.float64``)."""
    if d not in (float32, float64):
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default[0] = d


def promote(a: DType, b: DType) -> DType:
    """The smallest dtype that holds both, PyTorch style (``promote(int64, float32) is float32``,
    ``promote(complex64, float64) is complex128``)."""
    if a is b:
        return a
    if a.category != b.category:
        hi, lo = (a, b) if a.category > b.category else (b, a)
        if hi is complex64 and lo is float64:  # complex of the wider real part
            return complex128
        return hi
    return a if _RANK[a] > _RANK[b] else b


def _combine(higher: DType | None, lower: DType | None) -> DType | None:
    # PyTorch's combine_categories: a lower tier counts only when it brings a higher category;
    # a complex one keeps a floating higher tier's precision
    if higher is None:
        return lower
    if lower is None or higher.is_complex:
        return higher
    if lower.is_complex:
        return higher.to_complex() if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher is bool_ or lower.is_floating_point:
        return promote(higher, lower)
    return higher


def result_type(dims: Iterable[DType], zero_dims: Iterable[DType] = (), scalars: Iterable[DType] = ()) -> DType | None:
    """PyTorch's three-tier promotion: dimensioned tensors, zero-dim tensors, Python scalars.

    A lower tier only matters when it brings a higher category; a Python float then
    contributes the default dtype, a Python int ``int64``, a Python complex the default
    complex dtype.
    """
    tiers: list[DType | None] = []
    for tier in (dims, zero_dims, scalars):
        best = None
        for d in tier:
            best = d if best is None else promote(best, d)
        tiers.append(best)
    return _combine(tiers[0], _combine(tiers[1], tiers[2]))
