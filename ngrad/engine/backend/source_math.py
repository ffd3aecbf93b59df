"""The vocabulary of generated source: ``Expr`` (the text of a scalar expression of a known
dtype), ``typed`` literals, and ``SourceMath``, the primitive table's math namespace producing
Numba-compatible text instead of numbers, so the interpreter and compiled code share one
definition of every element-wise primitive.

Contract: ``PRIMS[p].fwd(SourceMath, *exprs, **params)`` is the ``Expr`` of primitive ``p`` on
operand expressions; ``typed(value, dtype)`` is a literal that keeps its dtype (float32 code stays
float32, complex64 complex64); ``identity(prim, dtype)`` is a reduction's starting value. Complex
operands take NumPy's scalar functions (Numba's complex math) where real ones take the vectorisable
helpers; ``CudaMath`` gives them ``cmath``'s. Names of the vectorisable
math (``_vexp``...) are the helpers of vmath.py, which the compiled module defines. The CPU loops
(codegen.py), the CUDA kernels (cuda_source.py) and bytecode's chain rows all build on these.
"""

import math

import numpy as np

__all__ = [
    "Expr",
    "SourceMath",
    "typed",
    "to_sign_of",
    "identity",
    "dual",
    "NP_TYPE",
    "GUARDED",
    "TRIG_LIMIT",
    "COMPLEX",
]


_NP_INFO = {"i64": np.int64, "i32": np.int32}
NP_TYPE = {
    "f64": "np.float64",
    "f32": "np.float32",
    "i64": "np.int64",
    "i32": "np.int32",
    "b8": "np.bool_",
    "c64": "np.complex64",
    "c128": "np.complex128",
}
COMPLEX = ("c64", "c128")
_REAL_OF = {"c64": "f32", "c128": "f64"}


class Expr:
    """Source text of a scalar expression of a known dtype; operators build bigger expressions."""

    __slots__ = ("text", "dtype")

    def __init__(self, text, dtype):
        self.text, self.dtype = text, dtype

    def _bin(self, op, other):
        return Expr(f"({self.text} {op} {other.text})", self.dtype)

    def __add__(self, o):
        return self._bin("+", o)

    def __sub__(self, o):
        return self._bin("-", o)

    def __mul__(self, o):
        return self._bin("*", o)

    def __truediv__(self, o):
        return self._bin("/", o)

    def __neg__(self):
        return Expr(f"(-{self.text})", self.dtype)

    def __lt__(self, o):
        return Expr(f"({self.text} < {o.text})", "b8")

    def __le__(self, o):
        return Expr(f"({self.text} <= {o.text})", "b8")

    def __gt__(self, o):
        return Expr(f"({self.text} > {o.text})", "b8")

    def __ge__(self, o):
        return Expr(f"({self.text} >= {o.text})", "b8")

    def __eq__(self, o):
        return Expr(f"({self.text} == {o.text})", "b8")

    def __ne__(self, o):
        return Expr(f"({self.text} != {o.text})", "b8")

    __hash__ = None  # type: ignore[assignment]  # unhashable on purpose: == builds an expression, not a bool


def typed(value, dtype):
    """The source text of the literal ``value`` in ``dtype`` (``np.float32(0.5)``, ``True``)."""
    if dtype == "b8":
        return "True" if value else "False"
    if dtype[0] == "i":
        return f"{NP_TYPE[dtype]}({int(value)})"
    if dtype in COMPLEX:
        z = complex(value)
        return f"{NP_TYPE[dtype]}(complex({_float_text(z.real)}, {_float_text(z.imag)}))"
    return f"{NP_TYPE[dtype]}({_float_text(float(value))})"


def _float_text(v):
    return repr(v) if math.isfinite(v) else ("np.nan" if v != v else "np.inf" if v > 0 else "-np.inf")


def dual(real, complex_form):
    """A math function for both kinds of operand: ``real`` (a function of the ``Expr``, or a
    staticmethod of one) for real ones, ``complex_form`` (a ``str.format`` text of the operand's
    text, ``{0}``) for complex ones."""
    real = real.__func__ if isinstance(real, staticmethod) else real

    def f(x):
        if x.dtype in COMPLEX:
            return Expr(complex_form.format(x.text), x.dtype)
        return real(x)

    return staticmethod(f)


def _f(name):
    return lambda x: Expr(f"{name}({x.text})", x.dtype)


def _v(name):
    def f(x):
        if x.dtype == "f32":
            return Expr(f"np.float32({name}(np.float64({x.text})))", x.dtype)
        return Expr(f"{name}({x.text})", x.dtype)

    return staticmethod(f)


def _v_odd(name):
    """``_v(name)`` for a function with f(+-0) = +-0 (expm1, log1p), whose vectorisable form
    loses the sign of zero: PyTorch keeps it."""
    inner = _v(name).__func__

    def f(x):
        return Expr(f"({x.text} if {x.text} == 0 else {inner(x).text})", x.dtype)

    return staticmethod(f)


def to_sign_of(r, s, y, step):
    """``r``, a remainder of a division by ``y`` (text evaluated as often as needed), moved by
    ``step * y`` to the sign of ``s`` where it is non-zero and of the other sign."""
    zero = typed(0, s.dtype)
    flip = f"({r} != {zero} and (({r} < {zero}) != ({s.text} < {zero})))"
    return Expr(f"({r} {'+' if step > 0 else '-'} ({y.text} if {flip} else {zero}))", s.dtype)


class SourceMath:
    """The math namespace of the primitive table, producing Numba-compatible source text."""

    sqrt = dual(_f("math.sqrt"), "np.sqrt({0})")
    # the vectorisable math of engine/vmath.py (float32 evaluates in float64 and rounds once);
    # complex operands: NumPy's scalar functions, which Numba compiles for complex64 and complex128
    exp, log, tanh = (
        dual(_v("_vexp"), "np.exp({0})"),
        dual(_v("_vlog"), "np.log({0})"),
        dual(_v("_vtanh"), "np.tanh({0})"),
    )
    expm1, log1p = dual(_v_odd("_vexpm1"), "np.expm1({0})"), dual(_v_odd("_vlog1p"), "np.log1p({0})")
    sigmoid, softplus = dual(_v("_vsigmoid"), "(1 / (1 + np.exp(-{0})))"), _v("_vsoftplus")
    # guarded: see GUARDED and render()
    sin, cos = dual(_v("_vsin"), "np.sin({0})"), dual(_v("_vcos"), "np.cos({0})")
    tan, asin = dual(_f("math.tan"), "np.tan({0})"), dual(_f("math.asin"), "np.arcsin({0})")
    acos, atan = dual(_f("math.acos"), "np.arccos({0})"), dual(_f("math.atan"), "np.arctan({0})")
    sinh, cosh, erf = dual(_f("math.sinh"), "np.sinh({0})"), dual(_f("math.cosh"), "np.cosh({0})"), _v("_verf")
    floor, ceil, round = _f("np.floor"), _f("np.ceil"), _f("np.rint")

    @staticmethod
    def sign(x):  # PyTorch's: 0 at NaN (np.sign gives NaN) and at -0.0
        one, zero = typed(1, x.dtype), typed(0, x.dtype)
        return Expr(f"({one} if {x.text} > {zero} else (-{one} if {x.text} < {zero} else {zero}))", x.dtype)

    @staticmethod
    def abs(x):
        return Expr(f"abs({x.text})", _REAL_OF.get(x.dtype, x.dtype))

    @staticmethod
    def conj(x):
        return Expr(f"{x.text}.conjugate()", x.dtype)

    @staticmethod
    def real(x):
        return Expr(f"{x.text}.real", _REAL_OF[x.dtype])

    @staticmethod
    def imag(x):
        return Expr(f"{x.text}.imag", _REAL_OF[x.dtype])

    @staticmethod
    def complex(x, y):
        dtype = "c64" if x.dtype == "f32" else "c128"
        return Expr(f"{NP_TYPE[dtype]}(complex({x.text}, {y.text}))", dtype)

    @staticmethod
    def angle(x):
        if x.dtype in COMPLEX:
            real = _REAL_OF[x.dtype]
            return Expr(f"{NP_TYPE[real]}(math.atan2({x.text}.imag, {x.text}.real))", real)
        pi, zero = typed(math.pi, x.dtype), typed(0, x.dtype)
        return Expr(f"({x.text} if {x.text} != {x.text} else ({pi} if {x.text} < {zero} else {zero}))", x.dtype)

    @staticmethod
    def isnan(x):
        return Expr(f"({x.text} != {x.text})", "b8")

    @staticmethod
    def div(x, y):  # complex: NumPy's division (inf or nan for a zero divisor), where Numba's raises
        if x.dtype == "c128":
            return Expr(f"_cdiv({x.text}, {y.text})", x.dtype)
        if x.dtype == "c64":
            return Expr(f"np.complex64(_cdiv(np.complex128({x.text}), np.complex128({y.text})))", x.dtype)
        return x / y

    @staticmethod
    def pow(x, y):
        return Expr(f"({x.text} ** {y.text})", x.dtype)

    @staticmethod
    def maximum(x, y):  # NaN propagates, ties keep x (NumPy's semantics)
        return Expr(f"({x.text} if ({x.text} >= {y.text} or {x.text} != {x.text}) else {y.text})", x.dtype)

    @staticmethod
    def minimum(x, y):
        return Expr(f"({x.text} if ({x.text} <= {y.text} or {x.text} != {x.text}) else {y.text})", x.dtype)

    @staticmethod
    def where(c, x, y):
        return Expr(f"({x.text} if {c.text} else {y.text})", x.dtype)

    @staticmethod
    def atan2(x, y):
        if x.dtype == "f32":
            return Expr(f"np.float32(math.atan2(np.float64({x.text}), np.float64({y.text})))", x.dtype)
        return Expr(f"math.atan2({x.text}, {y.text})", x.dtype)

    @staticmethod
    def floordiv(x, y):  # Python's (and NumPy's) floor division, on the CPU and on the device
        return Expr(f"({x.text} // {y.text})", x.dtype)

    @staticmethod
    def remainder(x, y):  # NumPy's: the sign of y, NaN for a zero float divisor
        return Expr(f"np.remainder({x.text}, {y.text})", x.dtype)

    @staticmethod
    def fmod(x, y):  # the sign of x; Numba's integer np.fmod takes y's sign, so integers fix it
        if x.dtype[0] == "f":
            return Expr(f"np.fmod({x.text}, {y.text})", x.dtype)
        return to_sign_of(f"({x.text} % {y.text})", x, y, -1)

    @staticmethod
    def logical_not(x):
        return Expr(f"(not {x.text})", "b8")

    @staticmethod
    def logical_and(x, y):
        return Expr(f"({x.text} and {y.text})", "b8")

    @staticmethod
    def logical_or(x, y):
        return Expr(f"({x.text} or {y.text})", "b8")

    @staticmethod
    def cast(x, dtype):
        if dtype == "b8":
            return Expr(f"({x.text} != 0)", dtype)
        if x.dtype in COMPLEX and dtype not in COMPLEX:  # PyTorch discards the imaginary part
            return Expr(f"{NP_TYPE[dtype]}({x.text}.real)", dtype)
        return Expr(f"{NP_TYPE[dtype]}({x.text})", dtype)


# Primitives whose vectorised version is accurate only for |x| <= TRIG_LIMIT: the kernel counts
# arguments out of range (a reduction LLVM vectorises) and the runtime re-runs the tape on the
# interpreter when any was, so a huge argument costs time, never accuracy.
GUARDED = ("sin", "cos")
TRIG_LIMIT = 1.0e6

_IDENTITY = {"sum": 0, "prod": 1}


def identity(prim, dtype):
    """The value a reduction starts from: its result over no elements."""
    if prim in _IDENTITY:
        return _IDENTITY[prim]
    if dtype == "b8":
        return prim == "amin"
    if dtype[0] == "i":
        info = np.iinfo(_NP_INFO[dtype])
        return info.min if prim == "amax" else info.max
    return -math.inf if prim == "amax" else math.inf
