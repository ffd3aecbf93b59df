"""Types of a generated CPU kernel's text, as Numba would infer them, for ngrad's own compiler.

Contract: ``Typer(fn, sig)`` takes a kernel's ``ast.FunctionDef`` and its argument signature
(``objects.signature``); ``infer()`` gives every variable one type (``types``: scalars by short
name ``f64 f32 i64 i32 u64 b``, arrays as ``("arr", dtype, ndim)``), unifying a variable's
assignments as Numba does (an int later assigned a float is a float), and ``ty(node)`` is the type
of an expression. Anything outside the part of Python and NumPy it types raises ``Unsupported``:
the kernel is then compiled by Numba. Promotion is NumPy's for scalars as Numba applies it
(integer literals int64, float literals float64, int64 with float32 float64, uint64 with a signed
integer int64 as Numba makes it; arithmetic of two unsigned integers is not typed here).
"""

import ast

from ..backend import vmath

__all__ = [
    "Typer",
    "Unsupported",
    "arg_type",
    "binop_type",
    "const_type",
    "constant_int",
    "float_of",
    "hint",
    "indices",
    "names",
    "np_attr",
    "numeric",
    "statements",
    "unify",
    "CONSTANTS",
    "FLOATS",
    "INTRINSICS",
    "LIBM",
    "NP_TYPES",
    "SIZE",
]


class Unsupported(Exception):
    """The text or signature is outside what ngrad's compiler handles (Numba compiles it)."""


class _Unknown(Exception):
    """A name whose type is not known yet (type inference goes round again)."""


SIZE = {"f64": 8, "f32": 4, "i64": 8, "i32": 4, "u64": 8, "b": 1}
ARRAY_DTYPES = {"<f8": "f64", "<f4": "f32", "<i8": "i64", "<i4": "i32", "<u8": "u64", "|b1": "b"}
NP_TYPES = {"float64": "f64", "float32": "f32", "int64": "i64", "int32": "i32", "uint64": "u64", "bool_": "b"}
FLOATS, INTS = ("f32", "f64"), ("b", "i32", "i64")
# math.* of one float: libm's function (float32 operands: its f suffix)
LIBM = frozenset(
    "tan asin acos atan sinh cosh tanh exp log expm1 log1p erf sin cos log10 log2 asinh acosh atanh erfc cbrt".split()
)
INTRINSICS = {
    "sqrt": "llvm.sqrt",
    "floor": "llvm.floor",
    "ceil": "llvm.ceil",
    "rint": "llvm.rint",
    "trunc": "llvm.trunc",
    "fabs": "llvm.fabs",
}
CONSTANTS = {"inf": float("inf"), "nan": float("nan"), "pi": 3.141592653589793, "e": 2.718281828459045}


def numeric(a, b):
    """NumPy's promotion of two scalar types, as Numba types operations on them (except that
    Numba makes uint64 with a signed integer int64, where NumPy makes float64: codegen's window
    indices, ``np.uint64(i - w) // 2``, rely on it; two unsigned operands are not typed here)."""
    if isinstance(a, tuple) or isinstance(b, tuple) or None in (a, b) or a == b == "u64":
        raise Unsupported(f"operands {a} and {b}")
    if a == b:
        return a
    if "u64" in (a, b):
        other = b if a == "u64" else a
        return "i64" if other in INTS else "f64"
    if a in INTS and b in INTS:
        return max(a, b, key=INTS.index)
    if a in FLOATS and b in FLOATS:
        return "f64"
    f, i = (a, b) if a in FLOATS else (b, a)
    return "f32" if f == "f32" and i == "b" else "f64"


def binop_type(op, a, b):
    """The type of ``a <op> b`` (and the type both operands are cast to, except for ``/``)."""
    t = numeric(a, b)
    if isinstance(op, ast.Div):
        return t if t in FLOATS else "f64"
    if isinstance(op, (ast.BitOr, ast.BitAnd, ast.BitXor)):
        if t in FLOATS:
            raise Unsupported("bitwise operation on floats")
        return t
    if isinstance(op, (ast.LShift, ast.RShift)):
        if t in FLOATS:
            raise Unsupported("shift of floats")
        return "i64" if t == "b" else t
    if isinstance(op, ast.Pow):
        if t not in FLOATS:
            raise Unsupported("integer power")
        return t
    if isinstance(op, ast.FloorDiv) and t in FLOATS:
        raise Unsupported("float floor division")
    if isinstance(op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
        return "i64" if t == "b" else t
    raise Unsupported(f"operator {type(op).__name__}")


def unify(a, b):
    """The type of a variable (or ``x if c else y``) given values of types ``a`` and ``b``."""
    if a == b:
        return a
    if "u64" in (a, b):
        raise Unsupported(f"a variable of {a} and {b}")
    return numeric(a, b)


def np_attr(node):
    """``"float64"`` for ``np.float64``, ``"sqrt"`` for ``math.sqrt``: (module, name) or None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("np", "math"):
        return node.value.id, node.attr
    return None


def float_of(t):
    if t in FLOATS:
        return t
    if t in INTS:
        return "f64"
    raise Unsupported(f"math on {t}")


class Typer:
    """The types of one kernel function (see the module's contract)."""

    def __init__(self, fn, sig):
        self.fn, self.sig = fn, sig
        self.types: dict = {}

    def infer(self):
        params = [a.arg for a in self.fn.args.args]
        a = self.fn.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs or len(params) != len(self.sig):
            raise Unsupported("arguments")
        for p, s in zip(params, self.sig):
            self.types[p] = arg_type(s)
        self.params = params
        for settle in range(10):
            self.changed = self.revised = False
            self._type_block(self.fn.body, final=False)
            if settle == 0 and not self.revised:
                # every name was typed where it was read and kept its first type: another pass
                # would see the same types everywhere (two thirds of typing a straight kernel)
                return
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
            if isinstance(old, tuple) or isinstance(t, tuple):
                raise Unsupported(f"{name} holds arrays of two kinds")
            new = unify(old, t)
            if new != old:
                self.types[name] = new
                self.changed = self.revised = True

    def _type_block(self, body, final):
        for s in body:
            try:
                self._type_stmt(s, final)
            except _Unknown as e:
                if final:
                    raise Unsupported(f"{e} used before it is assigned") from None
                self.revised = True  # read before its type was known: typed again next pass

    def _type_stmt(self, s, final):
        if isinstance(s, ast.Assign):
            if len(s.targets) != 1:
                raise Unsupported("chained assignment")
            self._type_assign(s.targets[0], s.value)
        elif isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Name):
                self._bind(s.target.id, binop_type(s.op, self.ty(s.target), self.ty(s.value)))
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
                    if self.ty(a) not in INTS:
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
            return const_type(n.value)
        if isinstance(n, ast.Name):
            t = self.types.get(n.id)
            if t is None:
                raise _Unknown(n.id)
            return t
        if isinstance(n, ast.Attribute):
            attr = np_attr(n)
            if attr is not None and attr[1] in CONSTANTS:
                return "f64"
            raise Unsupported(f"attribute {ast.unparse(n)}")
        if isinstance(n, ast.BinOp):
            return binop_type(n.op, self.ty(n.left), self.ty(n.right))
        if isinstance(n, ast.UnaryOp):
            t = self.ty(n.operand)
            if isinstance(n.op, ast.Not):
                return "b"
            if t == "u64" or isinstance(t, tuple) or (isinstance(n.op, ast.Invert) and t in FLOATS):
                raise Unsupported("unary operation")
            return "i64" if t == "b" and not isinstance(n.op, ast.Invert) else t
        if isinstance(n, ast.Compare):
            ts = [self.ty(n.left)] + [self.ty(c) for c in n.comparators]
            for op, a, b in zip(n.ops, ts, ts[1:]):
                if not isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)):
                    raise Unsupported("comparison")
                numeric(a, b)
            return "b"
        if isinstance(n, ast.BoolOp):
            for v in n.values:
                if self.ty(v) != "b":
                    raise Unsupported("and/or of non-booleans")
            return "b"
        if isinstance(n, ast.IfExp):
            self.ty(n.test)
            return unify(self.ty(n.body), self.ty(n.orelse))
        if isinstance(n, ast.Subscript):
            if isinstance(n.value, ast.Attribute) and n.value.attr == "shape":
                self._shape_of(n)
                return "i64"
            t = self.ty(n.value)
            if not isinstance(t, tuple):
                raise Unsupported("subscript of a scalar")
            idx = indices(n.slice)
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
        if (
            not isinstance(base, ast.Name)
            or not isinstance(n.slice, ast.Constant)
            or not isinstance(n.slice.value, int)
        ):
            raise Unsupported("shape")
        t = self.ty(base)
        if not isinstance(t, tuple) or not 0 <= n.slice.value < t[2]:
            raise Unsupported("shape")
        return base.id, n.slice.value

    def _call_type(self, n):
        if n.keywords:
            raise Unsupported("keyword arguments")
        f, args = n.func, n.args
        attr = np_attr(f)
        if isinstance(f, ast.Name):
            name = f.id
            if name in ("max", "min") and len(args) >= 2:
                t = self.ty(args[0])
                for a in args[1:]:
                    t = unify(t, self.ty(a))
                return t
            if name == "abs" and len(args) == 1:
                t = self.ty(args[0])
                numeric(t, t)
                return "i64" if t == "b" else t
            if name in ("float", "int", "bool") and len(args) == 1:
                numeric(self.ty(args[0]), "b")
                return {"float": "f64", "int": "i64", "bool": "b"}[name]
            if name == "len" and len(args) == 1:
                t = self.ty(args[0])
                if not isinstance(t, tuple) or t[2] < 1:
                    raise Unsupported("len")
                return "i64"
            if name in vmath.FUNCTIONS and len(args) == 1:
                float_of(self.ty(args[0]))
                return "f64"
            if name in ("_fmax", "_fmin") and len(args) == 2:
                a, b = self.ty(args[0]), self.ty(args[1])
                if a != b or a not in FLOATS:
                    raise Unsupported("_fmax of mixed types")
                return a
            if name in ("_wide_vectors", "_short_loops", "_independent") and not args:
                return None
            raise Unsupported(f"call of {name}")
        if attr is None:
            raise Unsupported(f"call of {ast.unparse(f)}")
        mod, name = attr
        if mod == "np" and name in NP_TYPES and len(args) == 1:
            t = self.ty(args[0])
            numeric(t, "b")
            return NP_TYPES[name]
        if mod == "np" and name == "empty" and len(args) == 2:
            dims = args[0].elts if isinstance(args[0], ast.Tuple) else [args[0]]
            for d in dims:
                if self.ty(d) not in INTS:
                    raise Unsupported("np.empty of a non-integer shape")
            dt = np_attr(args[1])
            if dt is None or dt[1] not in NP_TYPES:
                raise Unsupported("np.empty's dtype")
            return ("arr", NP_TYPES[dt[1]], len(dims))
        if len(args) == 1 and (
            name in INTRINSICS or mod == "math" and name in LIBM or name in ("isnan", "isinf", "isfinite")
        ):
            t = float_of(self.ty(args[0]))
            return "b" if name.startswith("is") else t
        if len(args) == 2 and (mod, name) in (
            ("math", "atan2"),
            ("np", "remainder"),
            ("np", "fmod"),
            ("math", "copysign"),
        ):
            t = numeric(self.ty(args[0]), self.ty(args[1]))
            if t not in FLOATS:
                raise Unsupported(f"{name} of integers")
            return t
        raise Unsupported(f"call of {mod}.{name}")


def statements(body):
    """Every statement of ``body``, those inside loops and branches included."""
    todo = list(reversed(body))
    while todo:
        s = todo.pop()
        yield s
        if isinstance(s, (ast.For, ast.While, ast.If)):
            todo += reversed(s.orelse)
            todo += reversed(s.body)


# the fields holding the nodes inside each kind of node a kernel's expressions and simple
# statements are made of: ``ast.walk`` finds them through every field of every node, and three of
# its walks were a fifth of lowering ba's largest kernel
_CHILDREN = {
    ast.BinOp: ("left", "right"),
    ast.UnaryOp: ("operand",),
    ast.BoolOp: ("values",),
    ast.Compare: ("left", "comparators"),
    ast.Call: ("func", "args", "keywords"),
    ast.keyword: ("value",),
    ast.IfExp: ("test", "body", "orelse"),
    ast.Attribute: ("value",),
    ast.Subscript: ("value", "slice"),
    ast.Slice: ("lower", "upper", "step"),
    ast.Tuple: ("elts",),
    ast.List: ("elts",),
    ast.Constant: (),
    ast.Assign: ("targets", "value"),
    ast.AugAssign: ("target", "value"),
    ast.Expr: ("value",),
    ast.Return: ("value",),
}


def hint(s):
    """The name of the hint statement ``s`` calls (``_short_loops()``...), else None."""
    v = s.value if isinstance(s, ast.Expr) else None
    return v.func.id if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) else None


def names(node, ctx):
    """The names ``node`` reads (``ctx`` ``ast.Load``) or binds (``ast.Store``), anywhere in it."""
    out, todo = set(), [node]
    while todo:
        n = todo.pop()
        kind = n.__class__
        if kind is ast.Name:
            if n.ctx.__class__ is ctx:
                out.add(n.id)
            continue
        fields = _CHILDREN.get(kind)
        if fields is None:
            todo.extend(ast.iter_child_nodes(n))
            continue
        for f in fields:
            v = getattr(n, f)
            if v.__class__ is list:
                todo += v
            elif v is not None:
                todo.append(v)
    return out


def indices(s):
    if isinstance(s, ast.Tuple):
        return s.elts
    return [s]


def constant_int(n):
    if isinstance(n, ast.Constant) and type(n.value) is int:
        return n.value
    if (
        isinstance(n, ast.UnaryOp)
        and isinstance(n.op, ast.USub)
        and isinstance(n.operand, ast.Constant)
        and type(n.operand.value) is int
    ):
        return -n.operand.value
    return None


def const_type(v):
    if v is True or v is False:
        return "b"
    if type(v) is int:
        if not -(2**63) <= v < 2**63:
            raise Unsupported("integer literal beyond int64")
        return "i64"
    if type(v) is float:
        return "f64"
    raise Unsupported(f"literal {v!r}")


def arg_type(s):
    """The type of an argument of signature entry ``s`` (``objects.signature``'s)."""
    if isinstance(s, tuple):
        dtype, ndim, layout = s[0], s[1], s[2]
        if dtype not in ARRAY_DTYPES or (layout != "C" and ndim > 1) or (layout == "A"):
            raise Unsupported(f"array argument {s}")
        return ("arr", ARRAY_DTYPES[dtype], ndim)
    scalar = {
        "f8": "f64",
        "i8": "i64",
        "?": "b",
        "s<f8": "f64",
        "s<f4": "f32",
        "s<i8": "i64",
        "s<i4": "i32",
        "s|b1": "b",
    }
    if s not in scalar:
        raise Unsupported(f"argument {s}")
    return scalar[s]
