"""vmath's LLVM backend: values inside a kernel being compiled whose operators emit LLVM
instructions through llvmlite's IR builder.

Contract: ``IRMath(builder)`` is the math backend ``m`` vmath's functions take, ``IRValue(builder,
value)`` a float64 or int64 LLVM value they compute on; ``fn(IRMath(b), IRValue(b, x)).v`` is the
LLVM value of vmath function ``fn`` at ``x``, emitted inline at ``b``'s position. Both CPU
compilers use it: ngrad's own (``emit``) and Numba's intrinsics (``njit``). Imports llvmlite only.
"""

from llvmlite import ir

__all__ = ["IRValue", "IRMath"]

_F64, _I64 = ir.DoubleType(), ir.IntType(64)


class IRValue:
    """A value inside a kernel being compiled: operators emit LLVM instructions (see ``IRMath``)."""

    __slots__ = ("b", "v")

    def __init__(self, builder, value):
        self.b, self.v = builder, value

    def _coerce(self, other):
        if isinstance(other, IRValue):
            return other.v
        if isinstance(self.v.type, ir.DoubleType):
            return ir.Constant(_F64, float(other))
        return ir.Constant(self.v.type, int(other))

    def _op(self, fop, iop, other, swap=False):
        a, c = self.v, self._coerce(other)
        a, c = (c, a) if swap else (a, c)
        return IRValue(self.b, getattr(self.b, fop if isinstance(self.v.type, ir.DoubleType) else iop)(a, c))

    def _cmp(self, op, other):
        if isinstance(self.v.type, ir.DoubleType):  # ordered, except != (true for NaN, like Python's)
            cmp = self.b.fcmp_unordered if op == "!=" else self.b.fcmp_ordered
            return IRValue(self.b, cmp(op, self.v, self._coerce(other)))
        return IRValue(self.b, self.b.icmp_signed(op, self.v, self._coerce(other)))

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
        return IRValue(self.b, self.b.fneg(self.v))

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

    def __init__(self, builder):
        self.b = builder

    def _llvm(self, name, *args):
        fn = self.b.module.declare_intrinsic(name, [_F64], ir.FunctionType(_F64, [_F64] * len(args)))
        return IRValue(self.b, self.b.call(fn, [a.v for a in args]))

    def select(self, c, x, y):
        f = lambda v: v if isinstance(v, IRValue) else IRValue(self.b, ir.Constant(_F64, float(v)))
        return IRValue(self.b, self.b.select(c.v, f(x).v, f(y).v))

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
        return IRValue(self.b, self.b.bitcast(x.v, _I64))

    def float(self, i):
        return IRValue(self.b, self.b.bitcast(i.v, _F64))

    def lshr(self, i, n):
        return IRValue(self.b, self.b.lshr(i.v, ir.Constant(_I64, n)))
