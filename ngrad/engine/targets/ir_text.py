"""LLVM IR written straight as text, for ngrad's own CPU compiler: the part of llvmlite's IR
builder that ``emit`` and vmath's helpers use, with the same names and arguments, where each call
appends one line of text instead of building an instruction object that is printed later.

Contract: ``Module(name, triple)`` holds one ``Function`` (``module.function(name, ret, args)``)
and the declarations and metadata it uses; ``str(module)`` is LLVM's textual IR, which
``llvmlite.binding.parse_assembly`` reads. ``IRBuilder(function, block)`` emits into a block of
that function (``function.append_basic_block``); each method returns the ``Value`` it defines. Types are
``Type`` singletons (``DoubleType()``, ``IntType(64)``, ``t.as_pointer()``); pointers print as
LLVM's opaque ``ptr`` and remember what they point to, so ``load`` and ``gep`` need no type, and a
bitcast from one pointer to another is the same value. ``builder.fast`` holds the fast-math flags
every float operation, comparison and float-returning call gets when it names none itself (Numba's
``fastmath``). The optimised code is the same as from llvmlite's builder: the IR differs only in
names and in pointer casts that LLVM drops on reading (llvmlite's typed pointers are opaque in
LLVM since version 17). Emitting and printing ba's ten kernels took 82 ms through llvmlite's
objects, 16 ms here (with ``emit``'s faster walks of the syntax tree).

```python
>>> from ngrad.engine.targets import ir_text as ir
>>> m = ir.Module("doc", "x86_64-unknown-linux-gnu")
>>> f = m.function("twice", ir.DoubleType(), [ir.DoubleType()])
>>> b = ir.IRBuilder(f, f.append_basic_block("entry"))
>>> b.ret(b.fmul(f.args[0], ir.Constant(ir.DoubleType(), 2.0)))
>>> print(str(m).splitlines()[-4:-1])
['entry.0:', '  %.1 = fmul double %a0, 0x4000000000000000', '  ret double %.1']

```
"""

import struct

__all__ = ["Type", "Value", "Constant", "Module", "Function", "Block", "IRBuilder"]
__all__ += ["DoubleType", "FloatType", "IntType", "VoidType", "FunctionType"]


class Type:
    """An LLVM type: ``text`` as it is written, ``intrinsic_name`` as intrinsics' names spell it,
    ``width`` in bits (integers), ``pointee`` (pointers), ``elements`` (structures). One object
    per type, so ``==`` is ``is``."""

    __slots__ = ("text", "intrinsic_name", "width", "pointee", "elements", "_pointer")

    def __init__(self, text, intrinsic_name="", width=0, pointee=None, elements=()):
        self.text, self.intrinsic_name, self.width, self.pointee = text, intrinsic_name, width, pointee
        self.elements, self._pointer = elements, None

    def as_pointer(self):
        if self._pointer is None:
            self._pointer = Type("ptr", "p0", 64, self)
        return self._pointer

    def __str__(self):
        return self.text

    __repr__ = __str__


_INTS: dict = {}
_F64, _F32, _VOID = Type("double", "f64"), Type("float", "f32"), Type("void")


def DoubleType():  # noqa: N802  (llvmlite's names: vmath's helpers take either builder)
    return _F64


def FloatType():  # noqa: N802
    return _F32


def VoidType():  # noqa: N802
    return _VOID


def IntType(width):  # noqa: N802
    t = _INTS.get(width)
    if t is None:
        t = _INTS[width] = Type(f"i{width}", f"i{width}", width)
    return t


class FunctionType:
    """A function's type: what it returns and its arguments' types."""

    __slots__ = ("return_type", "args")

    def __init__(self, return_type, args):
        self.return_type, self.args = return_type, tuple(args)


class Value:
    """A value of type ``type`` written ``ref`` where an instruction uses it (``%.12``, ``null``...)."""

    __slots__ = ("type", "ref")

    def __init__(self, type, ref):
        self.type, self.ref = type, ref


class Constant(Value):
    """A constant: ``constant`` is its Python value (None: a null pointer)."""

    __slots__ = ("constant",)

    def __init__(self, type, constant):
        self.type, self.constant = type, constant
        if type is _F64 or type is _F32:
            x = float(constant)
            if type is _F32:  # LLVM writes a float as the double of equal value
                x = struct.unpack("<f", struct.pack("<f", x))[0]
            self.ref = f"0x{struct.unpack('<Q', struct.pack('<d', x))[0]:016x}"
        elif constant is None:
            self.ref = "null"
        else:
            self.ref = str(int(constant))


class Block:
    """A basic block: its label and lines; ``is_terminated`` once a branch or return ends it."""

    __slots__ = ("label", "lines", "is_terminated")

    def __init__(self, label):
        self.label, self.lines, self.is_terminated = label, [], False


class Function(Value):
    """A function defined (``blocks``) or declared (none) in the module; its value is its symbol."""

    __slots__ = ("name", "ftype", "blocks", "args", "attributes", "module", "count")

    def __init__(self, module, name, ftype, define):
        super().__init__(_PTR, f'@"{name}"')
        self.module, self.name, self.ftype, self.count = module, name, ftype, 0
        self.blocks: list = [] if define else None  # type: ignore[assignment]
        self.args = [Value(t, f"%a{k}") for k, t in enumerate(ftype.args)]
        self.attributes: set = set()

    def append_basic_block(self, name):
        # labels and values share the function's names: one count numbers both
        block = Block(f"{name}.{self.count}")
        self.count += 1
        self.blocks.append(block)
        return block


class Module:
    """One kernel's IR: its function, the functions and globals it declares, its metadata."""

    def __init__(self, name, triple):
        self.name, self.triple = name, triple
        self.globals: dict = {}  # name: Function, or the text of a global variable
        self.metadata: list = []
        self.defined = None

    def function(self, name, ret, args):
        """Define function ``name`` (one per module)."""
        self.defined = f = Function(self, name, FunctionType(ret, args), True)
        return f

    def declare(self, name, ret, args):
        """The external function ``name``, declared at its first use."""
        fn = self.globals.get(name)
        if fn is None:
            fn = self.globals[name] = Function(self, name, FunctionType(ret, args), False)
        return fn

    def declare_intrinsic(self, intrinsic, tys, fnty):
        """LLVM's intrinsic ``intrinsic`` for types ``tys`` (its name suffixed as LLVM's)."""
        name = ".".join([intrinsic] + [t.intrinsic_name for t in tys])
        return self.declare(name, fnty.return_type, fnty.args)

    def variable(self, name, text):
        """Global ``@name``, defined by ``text`` (``external global i8``, ``global ptr null``)."""
        if name not in self.globals:
            self.globals[name] = text
        return Value(_PTR, f'@"{name}"')

    def loop_id(self, hints):
        """Metadata naming a loop for LLVM's loop passes, with ``(name, value)`` hints (an int, or
        a metadata node's name such as an access group's): a node of its own whose first operand
        is itself, as LLVM takes one."""
        k = len(self.metadata)
        props = [f"!{k + 1 + j}" for j in range(len(hints))]
        self.metadata.append(f"!{k} = distinct !{{!{k}{''.join(', ' + p for p in props)}}}")
        self.metadata += [
            f'!{k + 1 + j} = !{{!"{n}", {v if isinstance(v, str) else f"i32 {v}"}}}' for j, (n, v) in enumerate(hints)
        ]
        return f"!{k}"

    def access_group(self):
        """A new access group: loads and stores marked with it (``load``, ``store``) are the ones a
        loop's ``llvm.loop.parallel_accesses`` says no other iteration depends on."""
        k = len(self.metadata)
        self.metadata.append(f"!{k} = distinct !{{}}")
        return f"!{k}"

    def __str__(self):
        out = [f'; ModuleID = "{self.name}"', f'target triple = "{self.triple}"', ""]
        for name, g in self.globals.items():
            if isinstance(g, Function):
                params = ", ".join(t.text for t in g.ftype.args)
                out.append(f'declare {g.ftype.return_type.text} @"{name}"({params})')
            else:
                out.append(f'@"{name}" = {g}')
        f = self.defined
        if f is not None:
            params = ", ".join(f"{a.type.text} {a.ref}" for a in f.args)
            attrs = "".join(" " + a for a in sorted(f.attributes))
            out.append(f'define {f.ftype.return_type.text} @"{f.name}"({params}){attrs} {{')
            for block in f.blocks:
                out.append(block.label + ":")
                out += block.lines
            out.append("}")
        out += self.metadata
        return "\n".join(out) + "\n"


_I1, _I8, _I64 = IntType(1), IntType(8), IntType(64)
_PTR = _I8.as_pointer()
_SIGNED = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}
_UNSIGNED = {"<": "ult", "<=": "ule", ">": "ugt", ">=": "uge", "==": "eq", "!=": "ne"}
_ORDERED = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "one", "ord": "ord", "uno": "uno"}
_UNORDERED = {"<": "ult", "<=": "ule", ">": "ugt", ">=": "uge", "==": "ueq", "!=": "une", "ord": "ord", "uno": "uno"}


class IRBuilder:
    """Appends instructions to a block of ``function`` (see the module's contract)."""

    def __init__(self, function, block, fast=()):
        self.function, self.module, self.block = function, function.module, block
        self.fast = " ".join(fast)

    def position_at_end(self, block):
        self.block = block

    def _def(self, type, text):
        f = self.function
        ref = f"%.{f.count}"
        f.count += 1
        self.block.lines.append(f"  {ref} = {text}")
        return Value(type, ref)

    def _flags(self, flags):
        text = " ".join(flags) if flags else self.fast
        return " " + text if text else ""

    # arithmetic

    def _int(self, op, a, b, flags=()):
        flags = "".join(" " + f for f in flags)
        return self._def(a.type, f"{op}{flags} {a.type.text} {a.ref}, {b.ref}")

    def add(self, a, b, flags=()):
        return self._int("add", a, b, flags)

    def sub(self, a, b):
        return self._int("sub", a, b)

    def mul(self, a, b):
        return self._int("mul", a, b)

    def sdiv(self, a, b):
        return self._int("sdiv", a, b)

    def srem(self, a, b):
        return self._int("srem", a, b)

    def and_(self, a, b):
        return self._int("and", a, b)

    def or_(self, a, b):
        return self._int("or", a, b)

    def xor(self, a, b):
        return self._int("xor", a, b)

    def shl(self, a, b):
        return self._int("shl", a, b)

    def ashr(self, a, b):
        return self._int("ashr", a, b)

    def lshr(self, a, b):
        return self._int("lshr", a, b)

    def neg(self, a):
        return self.sub(Constant(a.type, 0), a)

    def not_(self, a):
        return self.xor(a, Constant(a.type, -1))

    def _float(self, op, a, b, flags):
        return self._def(a.type, f"{op}{self._flags(flags)} {a.type.text} {a.ref}, {b.ref}")

    def fadd(self, a, b, flags=()):
        return self._float("fadd", a, b, flags)

    def fsub(self, a, b, flags=()):
        return self._float("fsub", a, b, flags)

    def fmul(self, a, b, flags=()):
        return self._float("fmul", a, b, flags)

    def fdiv(self, a, b, flags=()):
        return self._float("fdiv", a, b, flags)

    def frem(self, a, b, flags=()):
        return self._float("frem", a, b, flags)

    def fneg(self, a, flags=()):
        flags = "".join(" " + f for f in flags)
        return self._def(a.type, f"fneg{flags} {a.type.text} {a.ref}")

    # comparisons and choices

    def icmp_signed(self, op, a, b):
        return self._def(_I1, f"icmp {_SIGNED[op]} {a.type.text} {a.ref}, {b.ref}")

    def icmp_unsigned(self, op, a, b):
        return self._def(_I1, f"icmp {_UNSIGNED[op]} {a.type.text} {a.ref}, {b.ref}")

    def fcmp_ordered(self, op, a, b, flags=()):
        return self._def(_I1, f"fcmp{self._flags(flags)} {_ORDERED[op]} {a.type.text} {a.ref}, {b.ref}")

    def fcmp_unordered(self, op, a, b, flags=()):
        return self._def(_I1, f"fcmp{self._flags(flags)} {_UNORDERED[op]} {a.type.text} {a.ref}, {b.ref}")

    def select(self, c, a, b):
        return self._def(a.type, f"select i1 {c.ref}, {a.type.text} {a.ref}, {b.type.text} {b.ref}")

    # casts

    def _cast(self, op, a, t):
        return self._def(t, f"{op} {a.type.text} {a.ref} to {t.text}")

    def bitcast(self, a, t):
        if a.type.pointee is not None and t.pointee is not None:
            return Value(t, a.ref)  # opaque pointers: the same value
        return self._cast("bitcast", a, t)

    def zext(self, a, t):
        return self._cast("zext", a, t)

    def sext(self, a, t):
        return self._cast("sext", a, t)

    def trunc(self, a, t):
        return self._cast("trunc", a, t)

    def fpext(self, a, t):
        return self._cast("fpext", a, t)

    def fptrunc(self, a, t):
        return self._cast("fptrunc", a, t)

    def sitofp(self, a, t):
        return self._cast("sitofp", a, t)

    def uitofp(self, a, t):
        return self._cast("uitofp", a, t)

    def fptosi(self, a, t):
        return self._cast("fptosi", a, t)

    def fptoui(self, a, t):
        return self._cast("fptoui", a, t)

    # memory

    def alloca(self, t, name):
        f = self.function
        ref = f'%"{name}.{f.count}"'
        f.count += 1
        self.block.lines.append(f"  {ref} = alloca {t.text}")
        return Value(t.as_pointer(), ref)

    def load(self, p, group=None):
        """``group``: the access group (``Module.access_group``) the load belongs to."""
        t = p.type.pointee
        return self._def(t, f"load {t.text}, ptr {p.ref}" + (f", !llvm.access.group {group}" if group else ""))

    def store(self, v, p, group=None):
        tail = f", !llvm.access.group {group}" if group else ""
        self.block.lines.append(f"  store {v.type.text} {v.ref}, ptr {p.ref}{tail}")

    def gep(self, p, indices, inbounds=False):
        t = p.type.pointee
        at = "".join(f", {i.type.text} {i.ref}" for i in indices)
        return self._def(p.type, f"getelementptr{' inbounds' if inbounds else ''} {t.text}, ptr {p.ref}{at}")

    # calls

    def call(self, fn, args, fastmath=()):
        ret = fn.ftype.return_type
        flags = list(fastmath)
        if ret is _F64 or ret is _F32:
            flags += [f for f in self.fast.split() if f not in flags]
        operands = ", ".join(f"{a.type.text} {a.ref}" for a in args)
        text = f"call{''.join(' ' + f for f in flags)} {ret.text} {fn.ref}({operands})"
        if ret is _VOID:
            self.block.lines.append("  " + text)
            return None
        return self._def(ret, text)

    def smul_with_overflow(self, a, b):
        """``{product, overflowed}`` of signed integers ``a * b``."""
        t = a.type
        pair = Type(f"{{{t.text}, i1}}", elements=(t, _I1))
        fn = self.module.declare_intrinsic("llvm.smul.with.overflow", [t], FunctionType(pair, [t, t]))
        return self.call(fn, [a, b])

    def extract_value(self, agg, k):
        return self._def(agg.type.elements[k], f"extractvalue {agg.type.text} {agg.ref}, {k}")

    # control flow

    def _end(self, text):
        self.block.lines.append("  " + text)
        self.block.is_terminated = True

    def branch(self, target):
        return self._end(f"br label %{target.label}")

    def cbranch(self, c, then, other):
        return self._end(f"br i1 {c.ref}, label %{then.label}, label %{other.label}")

    def ret(self, v):
        return self._end(f"ret {v.type.text} {v.ref}")

    def loop_hint(self, metadata):
        """Attach loop metadata to the branch that just ended this block (a loop's back edge)."""
        self.block.lines[-1] += f", !llvm.loop {metadata}"
