"""A kernel's statements and expressions as LLVM IR, for ngrad's own CPU compiler.

Contract: ``Emitter`` (a ``Typer`` whose ``infer()`` has run) emits the kernel body with
``block(fn.body)`` at builder ``b`` of function ``function``, given ``slots`` (an alloca per scalar
variable outside ``ssa``), ``values`` (the LLVM value of each name of ``ssa`` bound so far: its
parameters), ``arrays`` (``Array`` per array name), ``locals`` (the arrays it allocates, freed by the
caller at ``exit``), ``exit`` (where ``return`` goes), ``fail`` (where a failed allocation goes) and
``step`` (called every 64 statements, or None). The semantics are Numba's for the same text
(``kernel_types`` gives the types): Python's floor division, modulo, ``max``/``min`` and NaN
comparisons, NumPy's error model (integer division by zero is 0), IEEE float arithmetic except
``reassoc`` on accumulations (``ACCUMULATE``), wraparound of negative signed indices, casts on stores, and
only the chosen side of ``x if c else y`` or of ``and``/``or`` evaluated (a guarded read never
runs when its guard fails).
"""

import ast
import functools

from ..backend import vmath
from . import ir_text as ir
from .ir_values import IRMath
from .kernel_types import (
    CONSTANTS,
    FLOATS,
    INTRINSICS,
    LIBM,
    NP_TYPES,
    SIZE,
    Typer,
    Unsupported,
    binop_type,
    const_type,
    constant_int,
    float_of,
    hint,
    indices,
    names,
    np_attr,
    numeric,
    statements,
)

__all__ = ["Emitter", "Array", "ACCUMULATE", "REG", "MEM", "PTR", "F32", "F64", "I64", "I32", "I8", "I1"]

# Float arithmetic is IEEE, as NumPy's: fusion recomputes values in later kernels rather than
# storing them, and amax's, amin's and the max/min VJPs' masks compare a recomputed value with one
# from another kernel for equality (an FMA contracted in one kernel and not the other left no
# element equal to its row's max: a NaN gradient). Only a reduction's accumulation may be
# reassociated, so that loops over it vectorise; vmath's helpers keep their own flags (ir_values).
ACCUMULATE = ("reassoc",)
# statements between two looks of the compile worker's pacing (``step``): a statement with
# vector math inside writes hundreds of lines of IR, and 64 of them took 6.5 ms of the lock
STEP_STATEMENTS = 8
F64, F32, I64, I32, I8, I1 = (
    ir.DoubleType(),
    ir.FloatType(),
    ir.IntType(64),
    ir.IntType(32),
    ir.IntType(8),
    ir.IntType(1),
)
PTR = I8.as_pointer()
REG = {"f64": F64, "f32": F32, "i64": I64, "i32": I32, "u64": I64, "b": I1}  # in registers
MEM = {**REG, "b": I8}  # in memory


_FLOAT_OPS = {ast.Add: "fadd", ast.Sub: "fsub", ast.Mult: "fmul", ast.Div: "fdiv"}
_INT_OPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.BitOr: "or_",
    ast.BitAnd: "and_",
    ast.BitXor: "xor",
    ast.LShift: "shl",
    ast.RShift: "ashr",
}


class Array:
    """An array in the kernel: its element type, rank, and the slots of its data pointer and
    dimensions (allocas, which LLVM promotes to registers); ``local`` when the kernel allocates it."""

    __slots__ = ("dtype", "ndim", "ptr", "dims", "local")

    def __init__(self, dtype, ndim, ptr, dims, local):
        self.dtype, self.ndim, self.ptr, self.dims, self.local = dtype, ndim, ptr, dims, local


class Emitter(Typer):
    """Statements and expressions of a typed kernel as LLVM IR (see the module's contract)."""

    short_loops = False  # the kernel said ``_short_loops()``: its loops are not interleaved
    group = None  # the access group of the loop being emitted whose body says ``_independent()``

    # statements

    def _block(self, body):
        for s in body:
            if self.b.block.is_terminated:
                return
            self.count += 1
            if self.step is not None and self.count % STEP_STATEMENTS == 0:
                self.step()
            self._stmt(s)

    def _stmt(self, s):
        b = self.b
        if isinstance(s, ast.Assign):
            self._assign(s.targets[0], s.value)
        elif isinstance(s, ast.AugAssign):  # an accumulation: reassociated (see ACCUMULATE)
            if isinstance(s.target, ast.Name):
                self._store_name(s.target.id, self._binop(s.op, self.ex(s.target), self.ex(s.value), ACCUMULATE))
            else:
                addr, t = self._address(s.target)
                old = (t, self._load(addr, t))
                self._store_at(addr, t, self._binop(s.op, old, self.ex(s.value), ACCUMULATE))
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
            self._flow(s.body, cond, loop=(cond, after))
            b.position_at_end(after)
        elif isinstance(s, ast.If):
            then, other, after = (self.function.append_basic_block(x) for x in ("then", "else", "endif"))
            b.cbranch(self._truth(s.test), then, other)
            self.nested += 1
            for block, stmts in ((then, s.body), (other, s.orelse)):
                b.position_at_end(block)
                self._flow(stmts, after)
            self.nested -= 1
            b.position_at_end(after)
        elif isinstance(s, ast.Expr):
            said = hint(s)
            if said == "_wide_vectors":
                # LLVM tunes AVX-512 server cores to 256-bit vectors; vmath's polynomials run 1.2-1.7x
                # faster at 512 (see njit._wide_vectors)
                set.add(self.function.attributes, '"prefer-vector-width"="512"')
            elif said == "_short_loops":
                self.short_loops = True
            elif said != "_independent" and not isinstance(s.value, ast.Constant):  # that one: _range_loop
                self.ex(s.value)
        elif isinstance(s, ast.Return):
            b.branch(self.exit)
        elif isinstance(s, ast.Break):
            b.branch(self.loops[-1][1])
        elif isinstance(s, ast.Continue):
            b.branch(self.loops[-1][0])

    def _flow(self, stmts, then, loop=None):
        """``stmts`` at the builder's block, then a branch to ``then`` unless they ended in a
        ``return``, ``break`` or ``continue``; ``loop``: the blocks those two go to inside them."""
        if loop is not None:
            self.loops.append(loop)
        self._block(stmts)
        if loop is not None:
            self.loops.pop()
        if not self.b.block.is_terminated:
            self.b.branch(then)

    def _assign(self, target, value):
        if isinstance(target, ast.Tuple):  # every value first, as Python does
            values = [self.ex(v) for v in value.elts]
            for t, v in zip(target.elts, values):
                self._assign_value(t, v)
        elif isinstance(target, ast.Name) and isinstance(self.types.get(target.id), tuple):
            if isinstance(value, ast.Name):  # another name for an array (codegen's "the same argument")
                source = self.arrays.get(value.id)
                # only where it binds for the rest of the kernel: at the top level, both names
                # assigned once (Python would keep the old array on a later np.empty)
                once = self._assignments
                if self.loops or self.nested or source is None or once.get(target.id) != 1 or once.get(value.id, 0) > 1:
                    raise Unsupported("array assignment")
                self.arrays[target.id] = source
                return
            self._allocate(self.arrays.get(target.id), value)
        else:
            self._assign_value(target, self.ex(value))

    @functools.cached_property
    def _assignments(self):
        """How many statements bind each name (a loop's target counts once; a store into an
        array's element binds nothing)."""
        counts: dict = {}
        for n in statements(self.fn.body):
            todo = (
                list(n.targets)
                if isinstance(n, ast.Assign)
                else [n.target]
                if isinstance(n, (ast.AugAssign, ast.For))
                else []
            )
            while todo:
                t = todo.pop()
                if isinstance(t, ast.Name):
                    counts[t.id] = counts.get(t.id, 0) + 1
                elif isinstance(t, ast.Tuple):
                    todo.extend(t.elts)
        return counts

    def _assign_value(self, target, tv):
        if isinstance(target, ast.Name):
            self._store_name(target.id, tv)
        else:
            addr, t = self._address(target)
            self._store_at(addr, t, tv)

    def _store_name(self, name, tv):
        if name in self.ssa:
            self.values[name] = self._cast(tv[1], tv[0], self.types[name])
            return
        if name not in self.slots:
            raise Unsupported(f"assignment to {name}")
        self.b.store(self._cast(tv[1], tv[0], self.types[name]), self.slots[name])

    @functools.cached_property
    def ssa(self):
        """The scalar names kept as LLVM values instead of allocas: parameters never rebound,
        names bound once (an assignment or a ``range`` loop), every use of which follows the
        binding in its block or lies inside a statement after it (or in the loop's body), so the
        binding dominates it. A kernel's IR is then a third smaller, for Python to build and
        print and for LLVM to parse and clean up."""
        once, bad = self._assignments, set()

        def loads(node):
            return names(node, ast.Load)

        def bound(target):
            return names(target, ast.Store)

        def block(stmts, seen):
            seen = set(seen)
            for st in stmts:
                if isinstance(st, ast.Assign):
                    bad.update(loads(st) - seen)  # the value, and a subscript target's indices
                    seen |= {n for t in st.targets for n in bound(t)}
                elif isinstance(st, ast.For):
                    bad.update(loads(st.iter) - seen)
                    block(st.body, seen | bound(st.target))
                    block(st.orelse, seen)
                elif isinstance(st, (ast.While, ast.If)):
                    bad.update(loads(st.test) - seen)
                    block(st.body, seen)
                    block(st.orelse, seen)
                else:
                    bad.update(loads(st) - seen)

        block(self.fn.body, self.params)
        scalars = {n for n, t in self.types.items() if t is not None and not isinstance(t, tuple)}
        wanted = {n for n in scalars if once.get(n, 0) == (0 if n in self.params else 1)}
        return wanted - bad

    def _allocate(self, arr, call):
        """``name = np.empty(shape, dtype)``: malloc, freeing what the name held before (a loop
        allocating each time keeps one buffer at a time), freed at exit."""
        b = self.b
        if arr is None or not arr.local or not (isinstance(call, ast.Call) and np_attr(call.func) == ("np", "empty")):
            raise Unsupported("array assignment")
        dims = call.args[0].elts if isinstance(call.args[0], ast.Tuple) else [call.args[0]]
        size, bad = ir.Constant(I64, SIZE[arr.dtype]), ir.Constant(I1, 0)
        for slot, d in zip(arr.dims, dims):
            dt, dv = self.ex(d)
            v = self._cast(dv, dt, "i64")
            b.store(v, slot)
            product = b.smul_with_overflow(size, v)
            size = b.extract_value(product, 0)
            bad = b.or_(bad, b.or_(b.extract_value(product, 1), b.icmp_signed("<", v, ir.Constant(I64, 0))))
        b.call(self._c("free", ir.VoidType(), [PTR]), [b.bitcast(b.load(arr.ptr), PTR)])
        size = b.select(b.icmp_signed(">", size, ir.Constant(I64, 0)), size, ir.Constant(I64, 1))
        # a negative or overflowing shape asks for more than any malloc gives: MemoryError
        size = b.select(bad, ir.Constant(I64, -1), size)
        p = b.call(self._c("malloc", PTR, [I64]), [size])
        b.store(b.bitcast(p, arr.ptr.type.pointee), arr.ptr)
        ok = self.function.append_basic_block("allocated")
        b.cbranch(b.icmp_unsigned("==", p, ir.Constant(PTR, None)), self.fail, ok)
        b.position_at_end(ok)

    def _range_loop(self, s):
        b, it = self.b, s.iter
        args = [self._cast(v, t, "i64") for t, v in map(self.ex, it.args)]
        if len(args) == 1:
            start, stop, step = ir.Constant(I64, 0), args[0], 1
        elif len(args) == 2:
            (start, stop), step = args, 1
        elif len(args) == 3:
            start, stop, step = args[0], args[1], constant_int(it.args[2])
            if not step:
                raise Unsupported("range step that is not a non-zero literal")
        else:
            raise Unsupported("range arguments")
        counter = self._alloca(I64, "range")
        b.store(start, counter)
        cond, body, incr, after = (self.function.append_basic_block(x) for x in ("for", "body", "next", "done"))
        b.branch(cond)
        b.position_at_end(cond)
        i = b.load(counter)
        b.cbranch(b.icmp_signed("<" if step > 0 else ">", i, stop), body, after)
        b.position_at_end(body)
        self._store_name(s.target.id, ("i64", i))
        # ``_independent()`` first in the body: no iteration reads what another writes, so the loop's
        # array accesses join an access group it declares parallel (LLVM checks no overlap then)
        group = self.module.access_group() if s.body and hint(s.body[0]) == "_independent" else None
        outer, self.group = self.group, group
        self._flow(s.body, incr, loop=(incr, after))
        self.group = outer
        b.position_at_end(incr)
        b.store(b.add(b.load(counter), ir.Constant(I64, step), flags=["nsw"]), counter)
        b.branch(cond)
        hints = [("llvm.loop.interleave.count", 1)] if self.short_loops else []
        hints += [("llvm.loop.parallel_accesses", group)] if group else []
        if hints:
            b.loop_hint(self.module.loop_id(hints))
        b.position_at_end(after)

    def _tuple_loop(self, s):
        """``for a, b in ((x, y), (z, w)):`` written out once per element."""
        b = self.b
        after = self.function.append_basic_block("done")
        for e in s.iter.elts:
            nxt = self.function.append_basic_block("item")
            if not b.block.is_terminated:
                self._assign(s.target, e)
                self._flow(s.body, nxt, loop=(nxt, after))
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
        for k, i in enumerate(indices(n.slice)):
            t, v = self.ex(i)
            dim = self._dim(arr, k)
            if t == "i32":
                v, t = b.sext(v, I64), "i64"
            if t == "i64" and not self._natural(i, v):  # a negative index counts from the end, as in Python
                v = b.select(b.icmp_signed("<", v, ir.Constant(I64, 0)), b.add(v, dim), v)
            if flat is None:
                flat = v
            elif isinstance(flat, ir.Constant) and flat.constant == 0:
                flat = v
            else:
                flat = b.add(b.mul(flat, dim), v)
        data = self._data(arr)
        return (data if flat is None else b.gep(data, [flat], inbounds=True)), arr.dtype

    def _data(self, arr):
        return self.b.load(arr.ptr) if arr.local else arr.ptr

    def _dim(self, arr, k):
        return self.b.load(arr.dims[k]) if arr.local else arr.dims[k]

    def _natural(self, node, v):
        """Whether index ``node`` (of value ``v``) is never negative: a literal, or the variable
        of a ``range`` loop from a literal start >= 0 upwards that nothing else assigns (LLVM would
        prove it too, after spending time on the check)."""
        if isinstance(v, ir.Constant):
            return v.constant >= 0
        return isinstance(node, ast.Name) and node.id in self._counters

    @functools.cached_property
    def _counters(self):
        """The names of ``range`` loops' variables that count up from a literal >= 0 and are
        bound nowhere else."""
        once, names = self._assignments, set()
        for s in statements(self.fn.body):
            if isinstance(s, ast.For) and isinstance(s.target, ast.Name) and once.get(s.target.id) == 1:
                it = s.iter
                if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
                    start = constant_int(it.args[0]) if len(it.args) > 1 else 0
                    step = constant_int(it.args[2]) if len(it.args) > 2 else 1
                    if start is not None and start >= 0 and step is not None and step > 0:
                        names.add(s.target.id)
        return names

    def _load(self, addr, t):
        v = self.b.load(addr, self.group)
        return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if t == "b" else v

    def _store_at(self, addr, t, tv):
        v = self._cast(tv[1], tv[0], t)
        self.b.store(self.b.zext(v, I8) if t == "b" else v, addr, self.group)

    # expressions: (type, value)

    def ex(self, n):
        b = self.b
        if isinstance(n, ast.Constant):
            t = const_type(n.value)
            return t, ir.Constant(REG[t], n.value if t != "b" else int(n.value))
        if isinstance(n, ast.Name):
            v = self.values.get(n.id)
            if v is not None:
                return self.types[n.id], v
            if n.id not in self.slots:
                raise Unsupported(f"name {n.id}")
            return self.types[n.id], b.load(self.slots[n.id])
        if isinstance(n, ast.Attribute):
            return "f64", ir.Constant(F64, CONSTANTS[np_attr(n)[1]])
        if isinstance(n, ast.BinOp):
            return self._binop(n.op, self.ex(n.left), self.ex(n.right))
        if isinstance(n, ast.UnaryOp):
            t, v = self.ex(n.operand)
            if isinstance(n.op, ast.Not):
                return "b", b.not_(self._truth_of(t, v))
            if isinstance(n.op, ast.Invert):
                return t, b.not_(v)
            if t == "b":
                t, v = "i64", b.zext(v, I64)
            if isinstance(n.op, ast.UAdd):
                return t, v
            return t, (b.fneg(v) if t in FLOATS else b.neg(v))
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
                return "i64", self._dim(self.arrays[name], k)
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
            return ir.Constant(REG[dst], float(value) if dst in FLOATS else int(value))
        if dst == "b":
            return self._truth_of(src, v)
        if dst in FLOATS:
            if src in FLOATS:
                return b.fpext(v, REG[dst]) if dst == "f64" else b.fptrunc(v, F32)
            return b.uitofp(v, REG[dst]) if src in ("b", "u64") else b.sitofp(v, REG[dst])
        if src in FLOATS:
            return b.fptoui(v, REG[dst]) if dst == "u64" else b.fptosi(v, REG[dst])
        if src == "b":
            return b.zext(v, REG[dst])
        width_src, width_dst = REG[src].width, REG[dst].width
        if width_src == width_dst:
            return v
        return b.trunc(v, REG[dst]) if width_src > width_dst else b.sext(v, REG[dst])

    def _truth_of(self, t, v):
        if t == "b":
            return v
        if t in FLOATS:
            return self.b.fcmp_unordered("!=", v, ir.Constant(REG[t], 0.0))
        return self.b.icmp_signed("!=", v, ir.Constant(REG[t], 0))

    def _truth(self, n):
        return self._truth_of(*self.ex(n))

    def _binop(self, op, left, right, flags=()):
        b = self.b
        t = binop_type(op, left[0], right[0])
        operand = numeric(left[0], right[0])
        if isinstance(op, ast.Div) and operand not in FLOATS:
            operand = "f64"
        if operand == "b" and not isinstance(op, (ast.BitOr, ast.BitAnd, ast.BitXor)):
            operand = "i64"
        x, y = self._cast(left[1], left[0], operand), self._cast(right[1], right[0], operand)
        if operand in FLOATS:
            kind = type(op)
            if kind in _FLOAT_OPS:
                return t, getattr(b, _FLOAT_OPS[kind])(x, y, flags=flags)
            if kind is ast.Pow:
                return t, self._intrinsic("llvm.pow", t, [x, y])
            if kind is ast.Mod:
                return t, self._float_mod(x, y, t)
            raise Unsupported(f"float {kind.__name__}")
        kind = type(op)
        if kind in _INT_OPS:
            return t, getattr(b, _INT_OPS[kind])(x, y)
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
        b, zero = self.b, ir.Constant(REG[t], 0.0)
        r = b.frem(x, y)
        flip = b.and_(
            b.fcmp_unordered("!=", r, zero), b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero))
        )
        moved = b.select(flip, b.fadd(r, y), r)
        return b.select(b.fcmp_ordered("==", r, zero), self._intrinsic("llvm.copysign", t, [zero, y]), moved)

    def _compare(self, n):
        operands = [n.left] + list(n.comparators)
        if len(n.ops) == 1:
            return self._compare_two(n.ops[0], self.ex(operands[0]), self.ex(operands[1]))
        # a < b < c: each middle operand evaluated once, later pairs only while earlier ones hold
        result = self._alloca(I1, "chain")
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
        t = numeric(left[0], right[0])
        if t == "b":
            t = "i64"
        x, y = self._cast(left[1], left[0], t), self._cast(right[1], right[0], t)
        sym = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}[type(op)]
        if t in FLOATS:  # ordered, except != (true for NaN, like Python's)
            return (self.b.fcmp_unordered if sym == "!=" else self.b.fcmp_ordered)(sym, x, y)
        return self.b.icmp_signed(sym, x, y)

    def _short(self, values, is_and):
        """``a and b and c`` / ``a or b``, each operand evaluated only when it decides."""
        b = self.b
        result = self._alloca(I1, "bool")
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
        result = self._alloca(REG[t], "choice")
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
        fn = self.module.declare_intrinsic(name, [REG[t]], ir.FunctionType(REG[t], [REG[t]] * len(args)))
        return self.b.call(fn, args)

    def _libm(self, name, t, args):
        fname = name + ("f" if t == "f32" else "")
        return self.b.call(self._c(fname, REG[t], [REG[t]] * len(args)), args)

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
                if t in FLOATS:
                    return t, self._intrinsic("llvm.fabs", t, [v])
                return t, b.select(b.icmp_signed("<", v, ir.Constant(v.type, 0)), b.neg(v), v)
            if name in ("float", "int", "bool"):
                at, v = self.ex(args[0])
                return t, self._cast(v, at, t)
            if name == "len":
                if not isinstance(args[0], ast.Name):
                    raise Unsupported("len of an expression")
                return "i64", self._dim(self.arrays[args[0].id], 0)
            if name in vmath.FUNCTIONS:
                at, v = self.ex(args[0])
                x = self._cast(v, at, "f64")
                m = IRMath(b, ir)
                return "f64", vmath.FUNCTIONS[name](m, m.value(x)).v
            if name in ("_fmax", "_fmin"):
                x, y = self.ex(args[0])[1], self.ex(args[1])[1]
                fn = self.module.declare_intrinsic(
                    "llvm.maxnum" if name == "_fmax" else "llvm.minnum", [REG[t]], ir.FunctionType(REG[t], [REG[t]] * 2)
                )
                return t, b.call(fn, [x, y], fastmath=("nnan", "nsz"))
        mod, name = np_attr(f)
        if mod == "np" and name in NP_TYPES:
            at, v = self.ex(args[0])
            return t, self._cast(v, at, t)
        if name in ("isnan", "isinf", "isfinite"):
            at, v = self.ex(args[0])
            x = self._cast(v, at, float_of(at))
            if name == "isnan":
                return "b", b.fcmp_unordered("uno", x, x)
            inf = ir.Constant(x.type, float("inf"))
            mag = self._intrinsic("llvm.fabs", float_of(at), [x])
            return "b", (b.fcmp_ordered("==", mag, inf) if name == "isinf" else b.fcmp_ordered("<", mag, inf))
        xs = []
        for a in args:
            at, v = self.ex(a)
            xs.append(self._cast(v, at, t))
        if name in INTRINSICS:
            return t, self._intrinsic(INTRINSICS[name], t, xs)
        if mod == "math" and name in LIBM or name == "atan2":
            return t, self._libm(name, t, xs)
        if name == "copysign":
            return t, self._intrinsic("llvm.copysign", t, xs)
        if name == "fmod":  # C's fmod: the sign of x
            return t, b.frem(*xs)
        if name == "remainder":  # NumPy's: Python's modulo on floats
            return t, self._float_mod(*xs, t)
        raise Unsupported(f"call of {mod}.{name}")
