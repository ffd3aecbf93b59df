"""vmath's LLVM backend: values inside a kernel being compiled whose operators emit LLVM
instructions through an IR builder.

Contract: ``IRMath(builder, layer)`` is the math backend ``m`` vmath's functions take, where
``layer`` is the module of ``builder``'s types and constants (``llvmlite.ir`` for Numba's
intrinsics in ``njit``, ``ir_text`` for ngrad's own compiler in ``emit``: the same names);
``m.value(x)`` is an ``IRValue``, a float64 or int64 LLVM value they compute on;
``fn(m, m.value(x)).v`` is the LLVM value of vmath function ``fn`` at ``x``, emitted inline at
``builder``'s position. Imports nothing.
"""

__all__ = ["IRValue", "IRMath", "FLAGS"]

# the fast-math flags of vmath's float arithmetic: its polynomials are written for fused
# multiply-adds, and a helper is the same text in every kernel (the kernels' own arithmetic is
# IEEE: see emit.ACCUMULATE)
FLAGS = ("reassoc", "contract")


class IRValue:
    """A value inside a kernel being compiled: operators emit LLVM instructions (see ``IRMath``)."""

    __slots__ = ("m", "b", "v")

    def __init__(self, math, value):
        self.m, self.b, self.v = math, math.b, value

    def _float(self):
        return self.v.type.intrinsic_name == "f64"

    def _coerce(self, other):
        if isinstance(other, IRValue):
            return other.v
        return self.m.ir.Constant(self.v.type, float(other) if self._float() else int(other))

    def _op(self, fop, iop, other, swap=False):
        a, c = self.v, self._coerce(other)
        a, c = (c, a) if swap else (a, c)
        if self._float():
            return IRValue(self.m, getattr(self.b, fop)(a, c, flags=FLAGS))
        return IRValue(self.m, getattr(self.b, iop)(a, c))

    def _cmp(self, op, other):
        if self._float():  # ordered, except != (true for NaN, like Python's)
            cmp = self.b.fcmp_unordered if op == "!=" else self.b.fcmp_ordered
            return IRValue(self.m, cmp(op, self.v, self._coerce(other)))
        return IRValue(self.m, self.b.icmp_signed(op, self.v, self._coerce(other)))

    def __add__(self, o):
        return self._op("fadd", "add", o)

    def __radd__(self, o):
        return self._op("fadd", "add", o, True)

    def __sub__(self, o):
        return self._op("fsub", "sub", o)

    def __rsub__(self, o):
        return self._op("fsub", "sub", o, True)

    def __mul__(self, o):
        return self._op("fmul", "mul", o)

    def __rmul__(self, o):
        return self._op("fmul", "mul", o, True)

    def __truediv__(self, o):
        return self._op("fdiv", None, o)

    def __rtruediv__(self, o):
        return self._op("fdiv", None, o, True)

    def __and__(self, o):
        return self._op(None, "and_", o)

    def __or__(self, o):
        return self._op(None, "or_", o)

    def __lshift__(self, o):
        return self._op(None, "shl", o)

    def __neg__(self):
        return IRValue(self.m, self.b.fneg(self.v))

    def __lt__(self, o):
        return self._cmp("<", o)

    def __le__(self, o):
        return self._cmp("<=", o)

    def __gt__(self, o):
        return self._cmp(">", o)

    def __ge__(self, o):
        return self._cmp(">=", o)

    def __eq__(self, o):
        return self._cmp("==", o)

    def __ne__(self, o):
        return self._cmp("!=", o)

    __hash__ = None  # type: ignore[assignment]  # comparisons build IR values: never a dict key


class IRMath:
    """vmath's backend emitting LLVM IR: a helper's operations become the caller's own
    straight-line IR, so the loop around it sees no call and vectorises."""

    def __init__(self, builder, layer):
        self.b, self.ir = builder, layer
        self.f64, self.i64 = layer.DoubleType(), layer.IntType(64)

    def value(self, v):
        """``v``, an LLVM value of this builder, as vmath's functions take it."""
        return IRValue(self, v)

    def _llvm(self, name, *args):
        f64 = self.f64
        fn = self.b.module.declare_intrinsic(name, [f64], self.ir.FunctionType(f64, [f64] * len(args)))
        return IRValue(self, self.b.call(fn, [a.v for a in args]))

    def select(self, c, x, y):
        f = lambda v: v if isinstance(v, IRValue) else IRValue(self, self.ir.Constant(self.f64, float(v)))
        return IRValue(self, self.b.select(c.v, f(x).v, f(y).v))

    def rint(self, x):
        return self._llvm("llvm.rint", x)

    def abs(self, x):
        return self._llvm("llvm.fabs", x)

    def copysign(self, x, y):
        return self._llvm("llvm.copysign", x, y)

    def minimum(self, x, c):
        return self.select(x < c, x, c)

    def maximum(self, x, c):
        return self.select(x > c, x, c)

    def bits(self, x):
        return IRValue(self, self.b.bitcast(x.v, self.i64))

    def float(self, i):
        return IRValue(self, self.b.bitcast(i.v, self.f64))

    def lshr(self, i, n):
        return IRValue(self, self.b.lshr(i.v, self.ir.Constant(self.i64, n)))
