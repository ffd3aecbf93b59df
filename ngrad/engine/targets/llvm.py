"""ngrad's own compiler of CPU kernels: a generated kernel module's text to machine code through
llvmlite, without Numba.

Numba compiles a generated kernel through its whole Python front end (bytecode analysis, type
inference over its generic typing tables, lowering of every operation through its registries)
and its CPython wrapper, and a process pays 0.3 s to import it and set it up before the first
compile: three quarters of a kernel's compile time, measured. Generated kernels use a small,
explicitly typed part of Python (codegen writes every literal's dtype), so this module types and
lowers that part directly to LLVM IR (the vmath helpers inline as under Numba) and hands it to
LLVM's optimisation pipeline at Numba's level, with Numba's flags: ``error_model='numpy'``
(integer division by zero is 0, float division IEEE), ``fastmath={'reassoc', 'contract'}`` on
float arithmetic, the GIL released while the kernel runs (``nogil``).

Contract: ``compile(text, sig, name, step)`` returns ``(object_code, wrapper, env)`` for the
``kernel`` function of generated module ``text`` at argument signature ``sig``
(``objects.signature``): an object file whose symbol ``wrapper`` is a CPython function
``(self, args, kws)`` as ``objects`` runs it (``env`` names an unused environment slot), the same
kind of object Numba's machine code is kept as. It raises ``Unsupported`` for any construct,
type or signature outside the part it compiles (complex numbers, non-contiguous arrays, unsigned
arithmetic...): the caller then compiles the text with Numba, so nothing is ever compiled
differently from what the text says. ``step()`` is called every few dozen statements (the compile
worker's deference to calls). The semantics follow Numba's for the same text: NumPy's type
promotion of scalars (integer literals int64, float literals float64), Python's floor division,
modulo, ``max``/``min`` and NaN comparisons, wraparound of negative signed indices, casts on
stores.
"""

import ast
import hashlib
import sys
import time

import llvmlite.binding as ll
from llvmlite import ir

from ..backend import vmath

__all__ = ["compile", "Unsupported", "IRValue", "IRMath", "usable", "phases"]


class Unsupported(Exception):
    """The text or signature is outside what this compiler handles (Numba compiles it)."""


class _Unknown(Exception):
    """A name whose type is not known yet (type inference goes round again)."""


# ---------------------------------------------------------------------------------------------
# The operator protocol vmath's helpers are written against, emitting LLVM instructions


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


# ---------------------------------------------------------------------------------------------
# Types: scalars by short name ("f64", "f32", "i64", "i32", "u64", "b"), arrays as ("arr", dtype, ndim)

_F64, _F32, _I64, _I32, _I8, _I1 = ir.DoubleType(), ir.FloatType(), ir.IntType(64), ir.IntType(32), ir.IntType(8), ir.IntType(1)
_PTR = _I8.as_pointer()
_REG = {"f64": _F64, "f32": _F32, "i64": _I64, "i32": _I32, "u64": _I64, "b": _I1}
_MEM = {**_REG, "b": _I8}
_SIZE = {"f64": 8, "f32": 4, "i64": 8, "i32": 4, "u64": 8, "b": 1}
_ARRAY_DTYPES = {"<f8": "f64", "<f4": "f32", "<i8": "i64", "<i4": "i32", "<u8": "u64", "|b1": "b"}
_NP_TYPES = {"float64": "f64", "float32": "f32", "int64": "i64", "int32": "i32", "uint64": "u64", "bool_": "b"}
_FLOATS, _INTS = ("f32", "f64"), ("b", "i32", "i64")
_FAST = ("reassoc", "contract")
_MATH1 = {  # math.* of one float: libm's function (float32 operands: its f suffix)
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "exp",
    "log",
    "expm1",
    "log1p",
    "erf",
    "sin",
    "cos",
    "log10",
    "log2",
    "asinh",
    "acosh",
    "atanh",
    "erfc",
    "cbrt",
}
_INTRINSIC1 = {"sqrt": "llvm.sqrt", "floor": "llvm.floor", "ceil": "llvm.ceil", "rint": "llvm.rint", "trunc": "llvm.trunc", "fabs": "llvm.fabs"}
_CONSTANTS = {"inf": float("inf"), "nan": float("nan"), "pi": 3.141592653589793, "e": 2.718281828459045}


def _numeric(a, b):
    """NumPy's promotion of two scalar types, as Numba types operations on them."""
    if isinstance(a, tuple) or isinstance(b, tuple) or "u64" in (a, b) or None in (a, b):
        raise Unsupported(f"operands {a} and {b}")
    if a == b:
        return a
    if a in _INTS and b in _INTS:
        return max(a, b, key=_INTS.index)
    if a in _FLOATS and b in _FLOATS:
        return "f64"
    f, i = (a, b) if a in _FLOATS else (b, a)
    return "f32" if f == "f32" and i == "b" else "f64"


def _binop_type(op, a, b):
    """The type of ``a <op> b`` (and the type both operands are cast to, except for ``/``)."""
    t = _numeric(a, b)
    if isinstance(op, ast.Div):
        return t if t in _FLOATS else "f64"
    if isinstance(op, (ast.BitOr, ast.BitAnd, ast.BitXor)):
        if t in _FLOATS:
            raise Unsupported("bitwise operation on floats")
        return t
    if isinstance(op, (ast.LShift, ast.RShift)):
        if t in _FLOATS:
            raise Unsupported("shift of floats")
        return "i64" if t == "b" else t
    if isinstance(op, ast.Pow):
        if t not in _FLOATS:
            raise Unsupported("integer power")
        return t
    if isinstance(op, ast.FloorDiv) and t in _FLOATS:
        raise Unsupported("float floor division")
    if isinstance(op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
        return "i64" if t == "b" else t
    raise Unsupported(f"operator {type(op).__name__}")


def _unify(a, b):
    """The type of a variable (or ``x if c else y``) given values of types ``a`` and ``b``."""
    if a == b:
        return a
    return _numeric(a, b)


def _np_attr(node):
    """``"float64"`` for ``np.float64``, ``"sqrt"`` for ``math.sqrt``: (module, name) or None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("np", "math"):
        return node.value.id, node.attr
    return None


def _float_of(t):
    if t in _FLOATS:
        return t
    if t in _INTS:
        return "f64"
    raise Unsupported(f"math on {t}")


class _Array:
    """An array in the kernel: its element type, rank, and the slots of its data pointer and
    dimensions (allocas, which LLVM promotes to registers)."""

    __slots__ = ("dtype", "ndim", "ptr", "dims", "local")

    def __init__(self, dtype, ndim, ptr, dims, local):
        self.dtype, self.ndim, self.ptr, self.dims, self.local = dtype, ndim, ptr, dims, local


class _Function:
    """One kernel function being typed and emitted."""

    def __init__(self, fn, sig, name, step):
        self.fn, self.sig, self.step, self.count = fn, sig, step, 0
        self.types: dict = {}
        self.module = ir.Module(name=name)
        self.module.triple = ll.get_process_triple()
        self.name = name

    # ---- typing ------------------------------------------------------------------------------

    def infer(self):
        params = [a.arg for a in self.fn.args.args]
        a = self.fn.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs or len(params) != len(self.sig):
            raise Unsupported("arguments")
        for p, s in zip(params, self.sig):
            self.types[p] = _arg_type(s)
        self.params = params
        for _ in range(10):
            self.changed = False
            self._type_block(self.fn.body, final=False)
            if not self.changed:
                break
        else:
            raise Unsupported("types do not settle")
        self._type_block(self.fn.body, final=True)

    def _bind(self, name, t):
        old = self.types.get(name)
        if old is None:
            self.types[name] = t
            self.changed = True
        elif old != t:
            if isinstance(old, tuple) or isinstance(t, tuple) or name in self.params and isinstance(old, tuple):
                raise Unsupported(f"{name} holds arrays of two kinds")
            new = _unify(old, t)
            if new != old:
                self.types[name] = new
                self.changed = True

    def _type_block(self, body, final):
        for s in body:
            try:
                self._type_stmt(s, final)
            except _Unknown as e:
                if final:
                    raise Unsupported(f"{e} used before it is assigned") from None

    def _type_stmt(self, s, final):
        if isinstance(s, ast.Assign):
            if len(s.targets) != 1:
                raise Unsupported("chained assignment")
            self._type_assign(s.targets[0], s.value)
        elif isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Name):
                self._bind(s.target.id, _binop_type(s.op, self.ty(s.target), self.ty(s.value)))
            else:
                self.ty(s.target), self.ty(s.value)
        elif isinstance(s, ast.For):
            if s.orelse:
                raise Unsupported("for ... else")
            it = s.iter
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
                if not isinstance(s.target, ast.Name):
                    raise Unsupported("range loop target")
                for a in it.args:
                    if self.ty(a) not in _INTS:
                        raise Unsupported("range of non-integers")
                self._bind(s.target.id, "i64")
            elif isinstance(it, ast.Tuple) and all(isinstance(e, ast.Tuple) for e in it.elts):
                for e in it.elts:
                    self._type_assign(s.target, e)
            else:
                raise Unsupported("loop over something other than range or a literal tuple")
            self._type_block(s.body, final)
        elif isinstance(s, (ast.If, ast.While)):
            if isinstance(s, ast.While) and s.orelse:
                raise Unsupported("while ... else")
            self.ty(s.test)
            self._type_block(s.body, final)
            self._type_block(s.orelse, final)
        elif isinstance(s, ast.Expr):
            if not (isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)):
                self.ty(s.value)
        elif isinstance(s, ast.Return):
            if s.value is not None:
                raise Unsupported("a kernel returning a value")
        elif not isinstance(s, (ast.Pass, ast.Break, ast.Continue)):
            raise Unsupported(f"statement {type(s).__name__}")

    def _type_assign(self, target, value):
        if isinstance(target, ast.Name):
            self._bind(target.id, self.ty(value))
        elif isinstance(target, ast.Tuple):
            if not isinstance(value, ast.Tuple) or len(value.elts) != len(target.elts):
                raise Unsupported("tuple assignment")
            for t, v in zip(target.elts, value.elts):
                self._type_assign(t, v)
        elif isinstance(target, ast.Subscript):
            self.ty(target), self.ty(value)
        else:
            raise Unsupported("assignment target")

    def ty(self, n):
        """The type of expression ``n``."""
        if isinstance(n, ast.Constant):
            return _const_type(n.value)
        if isinstance(n, ast.Name):
            t = self.types.get(n.id)
            if t is None:
                raise _Unknown(n.id)
            return t
        if isinstance(n, ast.Attribute):
            attr = _np_attr(n)
            if attr is not None and attr[1] in _CONSTANTS:
                return "f64"
            raise Unsupported(f"attribute {ast.unparse(n)}")
        if isinstance(n, ast.BinOp):
            return _binop_type(n.op, self.ty(n.left), self.ty(n.right))
        if isinstance(n, ast.UnaryOp):
            t = self.ty(n.operand)
            if isinstance(n.op, ast.Not):
                return "b"
            if t in ("u64",) or isinstance(t, tuple) or (isinstance(n.op, ast.Invert) and t in _FLOATS):
                raise Unsupported("unary operation")
            return "i64" if t == "b" and not isinstance(n.op, ast.Invert) else t
        if isinstance(n, ast.Compare):
            ts = [self.ty(n.left)] + [self.ty(c) for c in n.comparators]
            for op, a, b in zip(n.ops, ts, ts[1:]):
                if not isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)):
                    raise Unsupported("comparison")
                _numeric(a, b)
            return "b"
        if isinstance(n, ast.BoolOp):
            for v in n.values:
                if self.ty(v) != "b":
                    raise Unsupported("and/or of non-booleans")
            return "b"
        if isinstance(n, ast.IfExp):
            self.ty(n.test)
            return _unify(self.ty(n.body), self.ty(n.orelse))
        if isinstance(n, ast.Subscript):
            if isinstance(n.value, ast.Attribute) and n.value.attr == "shape":
                self._shape_of(n)
                return "i64"
            t = self.ty(n.value)
            if not isinstance(t, tuple):
                raise Unsupported("subscript of a scalar")
            idx = _indices(n.slice)
            if len(idx) != t[2]:
                raise Unsupported("indexing that is not one element")
            for i in idx:
                if self.ty(i) not in ("i64", "i32", "u64"):
                    raise Unsupported("index type")
            return t[1]
        if isinstance(n, ast.Call):
            return self._call_type(n)
        raise Unsupported(f"expression {type(n).__name__}")

    def _shape_of(self, n):
        base = n.value.value
        if not isinstance(base, ast.Name) or not isinstance(n.slice, ast.Constant) or not isinstance(n.slice.value, int):
            raise Unsupported("shape")
        t = self.ty(base)
        if not isinstance(t, tuple) or not 0 <= n.slice.value < t[2]:
            raise Unsupported("shape")
        return base.id, n.slice.value

    def _call_type(self, n):
        if n.keywords:
            raise Unsupported("keyword arguments")
        f, args = n.func, n.args
        attr = _np_attr(f)
        if isinstance(f, ast.Name):
            name = f.id
            if name in ("max", "min") and len(args) >= 2:
                t = self.ty(args[0])
                for a in args[1:]:
                    t = _unify(t, self.ty(a))
                return t
            if name == "abs" and len(args) == 1:
                t = self.ty(args[0])
                _numeric(t, t)
                return "i64" if t == "b" else t
            if name in ("float", "int", "bool") and len(args) == 1:
                _numeric(self.ty(args[0]), "b")
                return {"float": "f64", "int": "i64", "bool": "b"}[name]
            if name == "len" and len(args) == 1:
                t = self.ty(args[0])
                if not isinstance(t, tuple) or t[2] < 1:
                    raise Unsupported("len")
                return "i64"
            if name in vmath.FUNCTIONS and len(args) == 1:
                _float_of(self.ty(args[0]))
                return "f64"
            if name in ("_fmax", "_fmin") and len(args) == 2:
                a, b = self.ty(args[0]), self.ty(args[1])
                if a != b or a not in _FLOATS:
                    raise Unsupported("_fmax of mixed types")
                return a
            if name == "_wide_vectors" and not args:
                return None
            raise Unsupported(f"call of {name}")
        if attr is None:
            raise Unsupported(f"call of {ast.unparse(f)}")
        mod, name = attr
        if mod == "np" and name in _NP_TYPES and len(args) == 1:
            t = self.ty(args[0])
            _numeric(t, "b")
            return _NP_TYPES[name]
        if mod == "np" and name == "empty" and len(args) == 2:
            dims = args[0].elts if isinstance(args[0], ast.Tuple) else [args[0]]
            for d in dims:
                if self.ty(d) not in _INTS:
                    raise Unsupported("np.empty of a non-integer shape")
            dt = _np_attr(args[1])
            if dt is None or dt[1] not in _NP_TYPES:
                raise Unsupported("np.empty's dtype")
            return ("arr", _NP_TYPES[dt[1]], len(dims))
        if len(args) == 1 and (name in _INTRINSIC1 or mod == "math" and name in _MATH1 or name in ("isnan", "isinf", "isfinite")):
            t = _float_of(self.ty(args[0]))
            return "b" if name.startswith("is") else t
        if len(args) == 2 and (mod, name) in (("math", "atan2"), ("np", "remainder"), ("np", "fmod"), ("math", "copysign")):
            t = _numeric(self.ty(args[0]), self.ty(args[1]))
            if t not in _FLOATS:
                raise Unsupported(f"{name} of integers")
            return t
        raise Unsupported(f"call of {mod}.{name}")

    # ---- emitting ----------------------------------------------------------------------------

    def emit(self):
        fnty = ir.FunctionType(_PTR, [_PTR, _PTR, _PTR])
        self.function = f = ir.Function(self.module, fnty, name=self.name)
        self.env = ir.GlobalVariable(self.module, _PTR, name=self.name + "_env")
        self.env.initializer = ir.Constant(_PTR, None)
        entry = f.append_basic_block("entry")
        self.allocas = ir.IRBuilder(entry)
        body = f.append_basic_block("body")
        self.b = b = ir.IRBuilder(body)
        self.slots: dict = {}
        self.arrays: dict = {}
        self.locals: list = []
        self.loops: list = []
        self.exit = f.append_basic_block("exit")
        self.fail = f.append_basic_block("fail")
        for name, t in self.types.items():
            if isinstance(t, tuple):
                if name in self.params:
                    continue
                ptr = self._alloca(_MEM[t[1]].as_pointer(), name)
                self.allocas.store(ir.Constant(ptr.type.pointee, None), ptr)
                dims = [self._alloca(_I64, f"{name}.{k}") for k in range(t[2])]
                self.arrays[name] = _Array(t[1], t[2], ptr, dims, True)
                self.locals.append(self.arrays[name])
            elif t is not None:
                self.slots[name] = self._alloca(_REG[t], name)
        self._unpack(f.args[1])
        self.state = b.call(self._c("PyEval_SaveThread", _PTR, []), [])
        self.first = b.block
        self._block(self.fn.body)
        if not b.block.is_terminated:
            b.branch(self.exit)
        for block, failed in ((self.exit, False), (self.fail, True)):
            b.position_at_end(block)
            for arr in self.locals:
                b.call(self._c("free", ir.VoidType(), [_PTR]), [b.bitcast(b.load(arr.ptr), _PTR)])
            b.call(self._c("PyEval_RestoreThread", ir.VoidType(), [_PTR]), [self.state])
            if failed:
                b.call(self._c("PyErr_NoMemory", _PTR, []), [])
                b.ret(ir.Constant(_PTR, None))
            else:
                none = self._global("_Py_NoneStruct")
                b.call(self._c("Py_IncRef", ir.VoidType(), [_PTR]), [none])
                b.ret(none)
        self.allocas.branch(body)
        return self.module

    def _alloca(self, t, name):
        return self.allocas.alloca(t, name=name)

    def _c(self, name, ret, args):
        """The declared external function ``name``."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return fn

    def _global(self, name):
        g = self.module.globals.get(name)
        if g is None:
            g = ir.GlobalVariable(self.module, _I8, name=name)
            g.linkage = "external"
        return self.b.bitcast(g, _PTR)

    def _unpack(self, args):
        """Read each argument out of the call's tuple (its kind is ``sig``'s: trusted)."""
        b = self.b
        get = self._c("PyTuple_GetItem", _PTR, [_PTR, _I64])
        for k, (name, s) in enumerate(zip(self.params, self.sig)):
            obj = b.call(get, [args, ir.Constant(_I64, k)])
            t = _arg_type(s)
            if isinstance(t, tuple):
                if name not in self.types or self.types[name] != t:
                    if name in self.types:
                        raise Unsupported("an argument array rebound")
                    continue
                data = b.load(b.bitcast(b.gep(obj, [ir.Constant(_I64, _OFFSETS["data"])]), _PTR.as_pointer()))
                ptr = self._alloca(_MEM[t[1]].as_pointer(), name)
                b.store(b.bitcast(data, ptr.type.pointee), ptr)
                shape = b.load(b.bitcast(b.gep(obj, [ir.Constant(_I64, _OFFSETS["dims"])]), _I64.as_pointer().as_pointer()))
                dims = []
                for d in range(t[2]):
                    slot = self._alloca(_I64, f"{name}.{d}")
                    b.store(b.load(b.gep(shape, [ir.Constant(_I64, d)])), slot)
                    dims.append(slot)
                self.arrays[name] = _Array(t[1], t[2], ptr, dims, False)
                continue
            if s == "f8" or s == "s<f8":
                v = b.call(self._c("PyFloat_AsDouble", _F64, [_PTR]), [obj])
            elif s == "i8":
                v = b.call(self._c("PyLong_AsLongLong", _I64, [_PTR]), [obj])
            elif s == "?":
                v = b.icmp_signed("!=", b.call(self._c("PyObject_IsTrue", _I32, [_PTR]), [obj]), ir.Constant(_I32, 0))
            else:  # a NumPy scalar: its value right after the object's header
                field = b.gep(obj, [ir.Constant(_I64, _OFFSETS["scalar"])])
                v = b.load(b.bitcast(field, _MEM[t].as_pointer()))
                if t == "b":
                    v = b.icmp_signed("!=", v, ir.Constant(_I8, 0))
            if name in self.slots:
                b.store(self._cast(v, t, self.types[name]), self.slots[name])

    # statements

    def _block(self, body):
        for s in body:
            if self.b.block.is_terminated:
                return
            self.count += 1
            if self.step is not None and self.count % 64 == 0:
                self.step()
            self._stmt(s)

    def _stmt(self, s):
        b = self.b
        if isinstance(s, ast.Assign):
            self._assign(s.targets[0], s.value)
        elif isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Name):
                self._store_name(s.target.id, self._binop(s.op, self.ex(s.target), self.ex(s.value)))
            else:
                addr, t = self._address(s.target)
                old = (t, self._load(addr, t))
                self._store_at(addr, t, self._binop(s.op, old, self.ex(s.value)))
        elif isinstance(s, ast.For):
            if isinstance(s.iter, ast.Call):
                self._range_loop(s)
            else:
                self._tuple_loop(s)
        elif isinstance(s, ast.While):
            cond, body, after = (self.function.append_basic_block(x) for x in ("while", "do", "done"))
            b.branch(cond)
            b.position_at_end(cond)
            b.cbranch(self._truth(s.test), body, after)
            b.position_at_end(body)
            self.loops.append((cond, after))
            self._block(s.body)
            self.loops.pop()
            if not b.block.is_terminated:
                b.branch(cond)
            b.position_at_end(after)
        elif isinstance(s, ast.If):
            then, other, after = (self.function.append_basic_block(x) for x in ("then", "else", "endif"))
            b.cbranch(self._truth(s.test), then, other)
            for block, stmts in ((then, s.body), (other, s.orelse)):
                b.position_at_end(block)
                self._block(stmts)
                if not b.block.is_terminated:
                    b.branch(after)
            b.position_at_end(after)
        elif isinstance(s, ast.Expr):
            v = s.value
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "_wide_vectors":
                # LLVM tunes AVX-512 server cores to 256-bit vectors; vmath's polynomials run 1.2-1.7x
                # faster at 512 (see njit._wide_vectors)
                set.add(self.function.attributes, '"prefer-vector-width"="512"')
            elif not isinstance(v, ast.Constant):
                self.ex(v)
        elif isinstance(s, ast.Return):
            b.branch(self.exit)
        elif isinstance(s, ast.Break):
            b.branch(self.loops[-1][1])
        elif isinstance(s, ast.Continue):
            b.branch(self.loops[-1][0])

    def _assign(self, target, value):
        if isinstance(target, ast.Tuple):  # every value first, as Python does
            values = [self.ex(v) for v in value.elts]
            for t, v in zip(target.elts, values):
                self._assign_value(t, v)
        elif isinstance(target, ast.Name) and isinstance(self.types.get(target.id), tuple):
            if isinstance(value, ast.Name):  # another name for an argument (codegen's "the same argument")
                source = self.arrays.get(value.id)
                if self.loops or self.b.block is not self.first or source is None or source.local or target.id in self.params:
                    raise Unsupported("array assignment")
                self.arrays[target.id] = source
                return
            self._allocate(self.arrays.get(target.id), value)
        else:
            self._assign_value(target, self.ex(value))

    def _assign_value(self, target, tv):
        if isinstance(target, ast.Name):
            self._store_name(target.id, tv)
        else:
            addr, t = self._address(target)
            self._store_at(addr, t, tv)

    def _store_name(self, name, tv):
        if name not in self.slots:
            raise Unsupported(f"assignment to {name}")
        self.b.store(self._cast(tv[1], tv[0], self.types[name]), self.slots[name])

    def _allocate(self, arr, call):
        """``name = np.empty(shape, dtype)``: malloc, freeing what the name held before (a loop
        allocating each time keeps one buffer at a time), freed at exit."""
        b = self.b
        if arr is None or not arr.local or not (isinstance(call, ast.Call) and _np_attr(call.func) == ("np", "empty")):
            raise Unsupported("array assignment")
        dims = call.args[0].elts if isinstance(call.args[0], ast.Tuple) else [call.args[0]]
        size = ir.Constant(_I64, _SIZE[arr.dtype])
        for slot, d in zip(arr.dims, dims):
            dt, dv = self.ex(d)
            v = self._cast(dv, dt, "i64")
            b.store(v, slot)
            size = b.mul(size, v)
        b.call(self._c("free", ir.VoidType(), [_PTR]), [b.bitcast(b.load(arr.ptr), _PTR)])
        size = b.select(b.icmp_signed(">", size, ir.Constant(_I64, 0)), size, ir.Constant(_I64, 1))
        p = b.call(self._c("malloc", _PTR, [_I64]), [size])
        b.store(b.bitcast(p, arr.ptr.type.pointee), arr.ptr)
        ok = self.function.append_basic_block("allocated")
        b.cbranch(b.icmp_unsigned("==", p, ir.Constant(_PTR, None)), self.fail, ok)
        b.position_at_end(ok)

    def _range_loop(self, s):
        b, it = self.b, s.iter
        args = [self._cast(v, t, "i64") for t, v in map(self.ex, it.args)]
        if len(args) == 1:
            start, stop, step = ir.Constant(_I64, 0), args[0], 1
        elif len(args) == 2:
            (start, stop), step = args, 1
        elif len(args) == 3:
            start, stop, step = args[0], args[1], _constant_int(it.args[2])
            if not step:
                raise Unsupported("range step that is not a non-zero literal")
        else:
            raise Unsupported("range arguments")
        counter = self._alloca(_I64, "range")
        b.store(start, counter)
        cond, body, incr, after = (self.function.append_basic_block(x) for x in ("for", "body", "next", "done"))
        b.branch(cond)
        b.position_at_end(cond)
        i = b.load(counter)
        b.cbranch(b.icmp_signed("<" if step > 0 else ">", i, stop), body, after)
        b.position_at_end(body)
        b.store(i, self.slots[s.target.id])
        self.loops.append((incr, after))
        self._block(s.body)
        self.loops.pop()
        if not b.block.is_terminated:
            b.branch(incr)
        b.position_at_end(incr)
        b.store(b.add(b.load(counter), ir.Constant(_I64, step), flags=["nsw"]), counter)
        b.branch(cond)
        b.position_at_end(after)

    def _tuple_loop(self, s):
        """``for a, b in ((x, y), (z, w)):`` written out once per element."""
        b = self.b
        after = self.function.append_basic_block("done")
        for e in s.iter.elts:
            nxt = self.function.append_basic_block("item")
            if not b.block.is_terminated:
                self._assign(s.target, e)
                self.loops.append((nxt, after))
                self._block(s.body)
                self.loops.pop()
                if not b.block.is_terminated:
                    b.branch(nxt)
            b.position_at_end(nxt)
        b.branch(after)
        b.position_at_end(after)

    # memory

    def _address(self, n):
        """The pointer to element ``n`` (a subscript of an array) and the element's type."""
        if not isinstance(n.value, ast.Name) or n.value.id not in self.arrays:
            raise Unsupported("subscript")
        arr, b = self.arrays[n.value.id], self.b
        flat = None
        for k, i in enumerate(_indices(n.slice)):
            t, v = self.ex(i)
            dim = b.load(arr.dims[k])
            if t == "i32":
                v, t = b.sext(v, _I64), "i64"
            if t == "i64":  # a negative index counts from the end, as in Python
                v = b.select(b.icmp_signed("<", v, ir.Constant(_I64, 0)), b.add(v, dim), v)
            flat = v if flat is None else b.add(b.mul(flat, dim), v)
        data = b.load(arr.ptr)
        return (data if flat is None else b.gep(data, [flat], inbounds=True)), arr.dtype

    def _load(self, addr, t):
        v = self.b.load(addr)
        return self.b.icmp_unsigned("!=", v, ir.Constant(_I8, 0)) if t == "b" else v

    def _store_at(self, addr, t, tv):
        v = self._cast(tv[1], tv[0], t)
        self.b.store(self.b.zext(v, _I8) if t == "b" else v, addr)

    # expressions: (type, value)

    def ex(self, n):
        b = self.b
        if isinstance(n, ast.Constant):
            t = _const_type(n.value)
            return t, ir.Constant(_REG[t], n.value if t != "b" else int(n.value))
        if isinstance(n, ast.Name):
            if n.id not in self.slots:
                raise Unsupported(f"name {n.id}")
            return self.types[n.id], b.load(self.slots[n.id])
        if isinstance(n, ast.Attribute):
            return "f64", ir.Constant(_F64, _CONSTANTS[_np_attr(n)[1]])
        if isinstance(n, ast.BinOp):
            return self._binop(n.op, self.ex(n.left), self.ex(n.right))
        if isinstance(n, ast.UnaryOp):
            t, v = self.ex(n.operand)
            if isinstance(n.op, ast.Not):
                return "b", b.not_(self._truth_of(t, v))
            if isinstance(n.op, ast.Invert):
                return t, b.not_(v)
            if t == "b":
                t, v = "i64", b.zext(v, _I64)
            if isinstance(n.op, ast.UAdd):
                return t, v
            return t, (b.fneg(v, flags=_FAST) if t in _FLOATS else b.neg(v))
        if isinstance(n, ast.Compare):
            return "b", self._compare(n)
        if isinstance(n, ast.BoolOp):
            return "b", self._short(n.values, isinstance(n.op, ast.And))
        if isinstance(n, ast.IfExp):
            t = self.ty(n)
            return t, self._choose(n.test, lambda: self.ex(n.body), lambda: self.ex(n.orelse), t)
        if isinstance(n, ast.Subscript):
            if isinstance(n.value, ast.Attribute) and n.value.attr == "shape":
                name, k = self._shape_of(n)
                return "i64", b.load(self.arrays[name].dims[k])
            addr, t = self._address(n)
            return t, self._load(addr, t)
        if isinstance(n, ast.Call):
            return self._call(n)
        raise Unsupported(f"expression {type(n).__name__}")

    def _cast(self, v, src, dst):
        """``v`` of type ``src`` as a ``dst`` (Numba's casts: truncation toward zero, C's rules)."""
        b = self.b
        if src == dst or (src in ("i64", "u64") and dst in ("i64", "u64")):
            return v
        if isinstance(v, ir.Constant) and dst != "b" and src != "b":
            value = v.constant
            return ir.Constant(_REG[dst], float(value) if dst in _FLOATS else int(value))
        if dst == "b":
            return self._truth_of(src, v)
        if dst in _FLOATS:
            if src in _FLOATS:
                return b.fpext(v, _REG[dst]) if dst == "f64" else b.fptrunc(v, _F32)
            return b.uitofp(v, _REG[dst]) if src in ("b", "u64") else b.sitofp(v, _REG[dst])
        if src in _FLOATS:
            return b.fptoui(v, _REG[dst]) if dst == "u64" else b.fptosi(v, _REG[dst])
        if src == "b":
            return b.zext(v, _REG[dst])
        width_src, width_dst = _REG[src].width, _REG[dst].width
        if width_src == width_dst:
            return v
        return b.trunc(v, _REG[dst]) if width_src > width_dst else b.sext(v, _REG[dst])

    def _truth_of(self, t, v):
        if t == "b":
            return v
        if t in _FLOATS:
            return self.b.fcmp_unordered("!=", v, ir.Constant(_REG[t], 0.0))
        return self.b.icmp_signed("!=", v, ir.Constant(_REG[t], 0))

    def _truth(self, n):
        return self._truth_of(*self.ex(n))

    def _binop(self, op, left, right):
        b = self.b
        t = _binop_type(op, left[0], right[0])
        operand = _numeric(left[0], right[0])
        if isinstance(op, ast.Div) and operand not in _FLOATS:
            operand = "f64"
        if operand == "b" and not isinstance(op, (ast.BitOr, ast.BitAnd, ast.BitXor)):
            operand = "i64"
        x, y = self._cast(left[1], left[0], operand), self._cast(right[1], right[0], operand)
        if operand in _FLOATS:
            kind = type(op)
            if kind is ast.Add:
                return t, b.fadd(x, y, flags=_FAST)
            if kind is ast.Sub:
                return t, b.fsub(x, y, flags=_FAST)
            if kind is ast.Mult:
                return t, b.fmul(x, y, flags=_FAST)
            if kind is ast.Div:
                return t, b.fdiv(x, y, flags=_FAST)
            if kind is ast.Pow:
                return t, self._intrinsic("llvm.pow", t, [x, y])
            if kind is ast.Mod:
                return t, self._float_mod(x, y, t)
            raise Unsupported(f"float {kind.__name__}")
        kind = type(op)
        if kind is ast.Add:
            return t, b.add(x, y)
        if kind is ast.Sub:
            return t, b.sub(x, y)
        if kind is ast.Mult:
            return t, b.mul(x, y)
        if kind is ast.BitOr:
            return t, b.or_(x, y)
        if kind is ast.BitAnd:
            return t, b.and_(x, y)
        if kind is ast.BitXor:
            return t, b.xor(x, y)
        if kind is ast.LShift:
            return t, b.shl(x, y)
        if kind is ast.RShift:
            return t, b.ashr(x, y)
        if kind in (ast.FloorDiv, ast.Mod):  # Python's, and 0 for a zero divisor (NumPy's error model)
            zero, one = ir.Constant(x.type, 0), ir.Constant(x.type, 1)
            by_zero = b.icmp_signed("==", y, zero)
            d = b.select(by_zero, one, y)
            q, r = b.sdiv(x, d), b.srem(x, d)
            off = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, d), zero))
            out = b.sub(q, b.zext(off, x.type)) if kind is ast.FloorDiv else b.select(off, b.add(r, d), r)
            return t, b.select(by_zero, zero, out)
        raise Unsupported(f"integer {kind.__name__}")

    def _float_mod(self, x, y, t):
        """Python's ``x % y`` on floats: the sign of ``y``; NaN for a zero ``y``."""
        b, zero = self.b, ir.Constant(_REG[t], 0.0)
        r = b.frem(x, y)
        flip = b.and_(b.fcmp_unordered("!=", r, zero), b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero)))
        moved = b.select(flip, b.fadd(r, y), r)
        return b.select(b.fcmp_ordered("==", r, zero), self._intrinsic("llvm.copysign", t, [zero, y]), moved)

    def _compare(self, n):
        operands = [n.left] + list(n.comparators)
        if len(n.ops) == 1:
            return self._compare_two(n.ops[0], self.ex(operands[0]), self.ex(operands[1]))
        # a < b < c: each middle operand evaluated once, later pairs only while earlier ones hold
        result = self._alloca(_I1, "chain")
        after = self.function.append_basic_block("chained")
        left = self.ex(operands[0])
        for op, right_node in zip(n.ops, operands[1:]):
            right = self.ex(right_node)
            c = self._compare_two(op, left, right)
            self.b.store(c, result)
            nxt = self.function.append_basic_block("chain")
            self.b.cbranch(c, nxt, after)
            self.b.position_at_end(nxt)
            left = right
        self.b.branch(after)
        self.b.position_at_end(after)
        return self.b.load(result)

    def _compare_two(self, op, left, right):
        t = _numeric(left[0], right[0])
        if t == "b":
            t = "i64"
        x, y = self._cast(left[1], left[0], t), self._cast(right[1], right[0], t)
        sym = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}[type(op)]
        if t in _FLOATS:  # ordered, except != (true for NaN, like Python's)
            return (self.b.fcmp_unordered if sym == "!=" else self.b.fcmp_ordered)(sym, x, y)
        return self.b.icmp_signed(sym, x, y)

    def _short(self, values, is_and):
        """``a and b and c`` / ``a or b``, each operand evaluated only when it decides."""
        b = self.b
        result = self._alloca(_I1, "bool")
        after = self.function.append_basic_block("decided")
        for v in values[:-1]:
            c = self._truth(v)
            b.store(c, result)
            nxt = self.function.append_basic_block("operand")
            b.cbranch(c, nxt, after) if is_and else b.cbranch(c, after, nxt)
            b.position_at_end(nxt)
        b.store(self._truth(values[-1]), result)
        b.branch(after)
        b.position_at_end(after)
        return b.load(result)

    def _choose(self, test, then, other, t):
        """``then() if test else other()``, only the chosen side evaluated (a guarded read must
        not run when its guard fails)."""
        b = self.b
        c = self._truth(test)
        result = self._alloca(_REG[t], "choice")
        yes, no, after = (self.function.append_basic_block(x) for x in ("yes", "no", "chosen"))
        b.cbranch(c, yes, no)
        for block, side in ((yes, then), (no, other)):
            b.position_at_end(block)
            st, sv = side()
            b.store(self._cast(sv, st, t), result)
            b.branch(after)
        b.position_at_end(after)
        return b.load(result)

    def _intrinsic(self, name, t, args):
        fn = self.module.declare_intrinsic(name, [_REG[t]], ir.FunctionType(_REG[t], [_REG[t]] * len(args)))
        return self.b.call(fn, args)

    def _libm(self, name, t, args):
        fname = name + ("f" if t == "f32" else "")
        return self.b.call(self._c(fname, _REG[t], [_REG[t]] * len(args)), args)

    def _call(self, n):
        b, f, args = self.b, n.func, n.args
        t = self.ty(n)
        if isinstance(f, ast.Name):
            name = f.id
            if name in ("max", "min"):
                at, av = self.ex(args[0])
                acc = self._cast(av, at, t)
                for a in args[1:]:  # Python's: a later value replaces the result only when strictly beyond it
                    vt, vv = self.ex(a)
                    v = self._cast(vv, vt, t)
                    beyond = self._compare_two(ast.Gt() if name == "max" else ast.Lt(), (t, v), (t, acc))
                    acc = b.select(beyond, v, acc)
                return t, acc
            if name == "abs":
                at, v = self.ex(args[0])
                v = self._cast(v, at, t)
                if t in _FLOATS:
                    return t, self._intrinsic("llvm.fabs", t, [v])
                return t, b.select(b.icmp_signed("<", v, ir.Constant(v.type, 0)), b.neg(v), v)
            if name in ("float", "int", "bool"):
                at, v = self.ex(args[0])
                return t, self._cast(v, at, t)
            if name == "len":
                if not isinstance(args[0], ast.Name):
                    raise Unsupported("len of an expression")
                return "i64", b.load(self.arrays[args[0].id].dims[0])
            if name in vmath.FUNCTIONS:
                at, v = self.ex(args[0])
                x = self._cast(v, at, "f64")
                return "f64", vmath.FUNCTIONS[name](IRMath(b), IRValue(b, x)).v
            if name in ("_fmax", "_fmin"):
                x, y = self.ex(args[0])[1], self.ex(args[1])[1]
                fn = self.module.declare_intrinsic(
                    "llvm.maxnum" if name == "_fmax" else "llvm.minnum", [_REG[t]], ir.FunctionType(_REG[t], [_REG[t]] * 2)
                )
                return t, b.call(fn, [x, y], fastmath=("nnan", "nsz"))
        mod, name = _np_attr(f)
        if mod == "np" and name in _NP_TYPES:
            at, v = self.ex(args[0])
            return t, self._cast(v, at, t)
        if name in ("isnan", "isinf", "isfinite"):
            at, v = self.ex(args[0])
            x = self._cast(v, at, _float_of(at))
            if name == "isnan":
                return "b", b.fcmp_unordered("uno", x, x)
            inf = ir.Constant(x.type, float("inf"))
            mag = self._intrinsic("llvm.fabs", _float_of(at), [x])
            return "b", (b.fcmp_ordered("==", mag, inf) if name == "isinf" else b.fcmp_ordered("<", mag, inf))
        xs = []
        for a in args:
            at, v = self.ex(a)
            xs.append(self._cast(v, at, t))
        if name in _INTRINSIC1:
            return t, self._intrinsic(_INTRINSIC1[name], t, xs)
        if mod == "math" and name in _MATH1 or name == "atan2":
            return t, self._libm(name, t, xs)
        if name == "copysign":
            return t, self._intrinsic("llvm.copysign", t, xs)
        if name == "fmod":  # C's fmod: the sign of x
            return t, b.frem(*xs)
        if name == "remainder":  # NumPy's: Python's modulo on floats
            return t, self._float_mod(*xs, t)
        raise Unsupported(f"call of {mod}.{name}")


def _indices(s):
    if isinstance(s, ast.Tuple):
        return s.elts
    return [s]


def _constant_int(n):
    if isinstance(n, ast.Constant) and type(n.value) is int:
        return n.value
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(n.operand, ast.Constant) and type(n.operand.value) is int:
        return -n.operand.value
    return None


def _const_type(v):
    if v is True or v is False:
        return "b"
    if type(v) is int:
        if not -(2**63) <= v < 2**63:
            raise Unsupported("integer literal beyond int64")
        return "i64"
    if type(v) is float:
        return "f64"
    raise Unsupported(f"literal {v!r}")


def _arg_type(s):
    """The type of an argument of signature entry ``s`` (``objects.signature``'s)."""
    if isinstance(s, tuple):
        dtype, ndim, layout = s[0], s[1], s[2]
        if dtype not in _ARRAY_DTYPES or (layout != "C" and ndim > 1) or (layout == "A"):
            raise Unsupported(f"array argument {s}")
        return ("arr", _ARRAY_DTYPES[dtype], ndim)
    scalar = {"f8": "f64", "i8": "i64", "?": "b", "s<f8": "f64", "s<f4": "f32", "s<i8": "i64", "s<i4": "i32", "s|b1": "b"}
    if s not in scalar:
        raise Unsupported(f"argument {s}")
    return scalar[s]


# ---------------------------------------------------------------------------------------------
# The object layouts the wrapper reads, checked once against this process's Python and NumPy

_OFFSETS = {"data": 16, "dims": 32, "scalar": 16}
_state: dict = {}


def usable():
    """Whether this process's objects have the layouts the wrapper reads (CPython's object header
    of 16 bytes, NumPy's array fields): checked by reading them back once; a free-threaded or
    otherwise different build compiles with Numba instead."""
    ok = _state.get("usable")
    if ok is None:
        ok = _state["usable"] = _check_layouts()
    return ok


def _check_layouts():
    import ctypes

    import numpy as np

    try:
        if getattr(sys, "_is_gil_enabled", lambda: True)() is False:
            return False
        a = np.zeros((3, 5))
        base = id(a)
        data = ctypes.c_void_p.from_address(base + _OFFSETS["data"]).value
        dims = ctypes.c_void_p.from_address(base + _OFFSETS["dims"]).value
        if data != a.ctypes.data or list((ctypes.c_int64 * 2).from_address(dims)) != [3, 5]:
            return False
        for value, ctype in ((np.float32(1.5), ctypes.c_float), (np.int64(-7), ctypes.c_int64), (np.int32(9), ctypes.c_int32)):
            if ctype.from_address(id(value) + _OFFSETS["scalar"]).value != value:
                return False
        return ctypes.c_bool.from_address(id(np.bool_(True)) + _OFFSETS["scalar"]).value is True
    except Exception:
        return False


def _machine():
    """LLVM, initialised once, and a target machine for this CPU (as ``objects`` loads for)."""
    from . import objects

    objects.setup()
    return objects.machine()


def _pipeline(tm):
    pto = ll.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    return ll.create_pass_builder(tm, pto)


def compile(text, sig, name, step=None):
    """Machine code of generated module ``text``'s ``kernel`` for argument signature ``sig``:
    ``(object_code, wrapper, env)`` (see the module's contract); raises ``Unsupported``.

    ```python
    >>> import numpy as np
    >>> from ngrad.engine.targets import llvm, objects
    >>> text = "def kernel(n, a, o):\\n    for i in range(n):\\n        o[i] = a[i] * 2.0\\n"
    >>> a, o = np.arange(3.0), np.zeros(3)
    >>> f = objects.make(*llvm.compile(text, objects.signature((3, a, o)), "k_doc"))
    >>> f(3, a, o)
    >>> o
    array([0., 2., 4.])

    ```
    """
    if sig is None or not usable():
        raise Unsupported("signature")
    t0 = time.perf_counter()
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        raise Unsupported("syntax") from e
    kernels = [s for s in tree.body if isinstance(s, ast.FunctionDef)]
    rest = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.Import, ast.ImportFrom, ast.Expr))]
    if len(kernels) != 1 or kernels[0].name != "kernel" or rest or kernels[0].decorator_list:
        raise Unsupported("module layout")
    symbol = f"ngrad_{name}_{hashlib.sha256(repr(sig).encode()).hexdigest()[:12]}"
    fn = _Function(kernels[0], sig, symbol, step)
    fn.infer()
    module = fn.emit()
    t1 = time.perf_counter()
    tm = _machine()
    llmod = ll.parse_assembly(str(module))
    pb = _pipeline(tm)
    pb.getModulePassManager().run(llmod, pb)
    code = tm.emit_object(llmod)
    _state["last"] = (t1 - t0, time.perf_counter() - t1)
    return code, symbol, symbol + "_env"


def phases():
    """Where the last compile's time went: (typing and emitting IR in Python, LLVM) seconds."""
    return _state.get("last", (0.0, 0.0))
