"""The generated driver: a compiled plan unrolled into straight-line Python for one call.

Contract: ``driver_of(plan)`` is ``prepare``'s function for a ``CompiledPlan`` (built once,
None while threads run its loops in chunks) of ``plan.tape``; ``driver_code(plan, inputs, g,
fallback)`` returns its lines and output expressions for a caller's own generated function (``inline``).
A driver checks its inputs (an array's class, shape, dtype, layout: anything else takes
``fix_input``; a runtime scalar's class: anything but a number takes ``check_one``),
allocates buffers (big ones from the plan's pool), calls kernels and NumPy glue, and copies an
output that would share memory with an input or another output. Writing one is two passes per
step: *deciding* what the step does (``glue_kind``: a ``GlueKind``; ``store_targets``: a
``StoreTarget`` per stored slot) and *rendering* that decision as Python (``_Writer``). Every
line carries the tape instruction it came from. ``stepper(drive)`` is the ``Stepping`` of a
driver without input checks: a scan's step, storing its outputs into arrays its caller gives.
"""

import enum
import importlib.util
import marshal
import math
import re
import sys
import typing

import numpy as np

from .. import pace
from ..backend.fuse import Glue, reads_of
from ..backend.source_math import Expr, SourceMath, identity
from ..config import debug_level
from ..ir.interpret import NUMPY, evaluate, matmul_into, np_dtype
from ..ir.prims import PRIMS
from ..store import plan_name, read_plan, write_plan
from . import buffers, loops
from .buffers import POOL_MIN_BYTES
from .checks import NUMBERS, check_one, fix_input
from .executor import execute, executed
from .layout import keepdims, kept, squeezed

__all__ = [
    "driver_of",
    "driver_code",
    "warm",
    "stepper",
    "Stepping",
    "GlueKind",
    "glue_kind",
    "StoreTarget",
    "store_targets",
]

# prims whose kernel text (the primitive table's forward against source_math.SourceMath) is Python
# operators only, which NumPy values evaluate with NumPy's semantics and keep their dtype
_SCALAR_OPS = frozenset(["add", "sub", "mul", "div", "neg", "pow", "abs", "eq", "ne", "lt", "le", "gt", "ge"])

# elementwise prims whose NumPy implementation broadcasts its operands
_BROADCASTING = frozenset(["binary", "compare", "logical", "where"])

# a variable a driver makes for a slot (not an input ``x``, which its caller holds anyway)
_LOCAL = re.compile(r"\b[eorp]\d+\b")

# prims whose NumPy result may share memory with an operand (their results are not fresh)
_SHARES = frozenset(["reshape", "permute", "expand", "slice", "flip", "detach", "real", "imag"])


def driver_of(plan, checked=True, kernels=None, keep=True):
    """The compiled plan's generated driver (see ``dispatch.prepare``), built once; None while
    threads run its loops in chunks. ``checked=False``: the driver without its input checks, for
    callers whose values are exact by construction (a scan's steps, ``loops``); ``kernels``: the
    functions it calls, when they are not published yet (``warm``); ``keep=False``: a new one,
    not kept (stand-ins for the kernels: the compile server's ``signatures``)."""
    if plan.chunks():
        return None
    if not keep:
        return _driver(plan, checked, kernels=kernels)[0]
    if checked:
        if plan.drive is None:
            plan.drive = _driver(plan, True, kernels=kernels)[0]
        return plan.drive
    if plan.trusted is None:
        plan.trusted = _driver(plan, False)[0]
        plan.trusted.plan, plan.trusted.stepping = plan, None  # ``stepper`` builds it when asked
    return plan.trusted


def warm(plan, kernels, values):
    """Run ``plan`` once on ``values`` with ``kernels``, its layout's functions before they are
    published, along the route its calls will take: its driver (built here with them, and kept),
    or the executor while threads run its loops in chunks. Each function then has machine code
    for exactly the argument types the calls pass (a driver passed one loop a NumPy result laid
    out as ``x[:, idx]`` lays it out, where the executor's reshape had copied it: GradBench gmm's
    first call after its kernels arrived compiled two of them again, 0.44 s)."""
    drive = driver_of(plan, kernels=kernels)
    if drive is None:
        execute(plan, values, kernels)
    else:
        drive(values)


class Stepping(typing.NamedTuple):
    """A driver for a scan's steps (``stepper``): ``drive(values, outs, S)`` stores each output
    it can straight into the array ``outs[k]`` its caller gives (of the output's exact shape and
    dtype, C-contiguous, sharing memory with no input), returning None for it and the value
    itself for the others (its caller copies them in); the intermediates that do not outlive a
    call are the arrays ``S`` of ``scratch``'s (shape, dtype), which the caller makes once for
    all its steps (from ``plan``'s pool). It runs under its caller's ``errstate``."""

    drive: typing.Callable
    scratch: list
    plan: typing.Any


def stepper(drive):
    """The ``Stepping`` of a compiled driver without input checks (``driver_of(plan, False)``,
    what ``dispatch.prepare(tape, checked=False)`` gives once compiled), built once; None for any
    other function. A scan's step written this way costs no copy of its carries into the
    history, no pool traffic and no ``errstate`` (GradBench ode's RK4 step at n = 100,000:
    800 KB copied a step, and six buffers taken and given back in its reverse)."""
    s = getattr(drive, "stepping", False)
    if s is None:
        fn, g = _driver(drive.plan, False, into=True)
        s = drive.stepping = Stepping(fn, g["SCRATCH"], drive.plan)
    return s or None


def _driver(plan, checked, into=False, kernels=None):
    """The driver of a compiled plan as a Python function of ``values`` (``into``: of ``values,
    outs, S``, a ``Stepping``'s), and the globals it runs in (``kernels``: see ``driver_code``)."""
    # the plan run step by step: the exact route when a vectorised sin/cos met an argument out
    # of its range (the executor falls back to the interpreter), and with threads on
    tape = plan.tape
    g = {"execute": lambda values: executed(plan, values)}
    inputs = [f"values[{i}]" for i in range(len(tape.inputs))]
    lines, outs = driver_code(plan, inputs, g, "return execute(values)", checked, into=into, kernels=kernels)
    head, what = ("drive(values, outs, S)", "step driver") if into else ("drive(values)", "driver")
    text = f"def {head}:\n" + "".join(f"    {line}\n" for line in lines + [f"return [{', '.join(outs)}]"])
    if debug_level() >= 2:
        print(f"ngrad: generated {what}\n{text}", file=sys.stderr)
    pace.step()  # compiling the text is one stretch of C (4 ms for ba's): it starts a turn
    exec(_compiled(text, f"<ngrad {what} {len(tape.instrs)} instrs>"), g)
    return g["drive"], g


def _compiled(text, name):
    """``compile(text, name, "exec")`` (ba's driver: 3-5 ms of C under the interpreter's lock, a pace
    step after it), read back from the disk cache (0.1 ms) when this Python compiled it before."""
    key = plan_name("d", (), (text, name, importlib.util.MAGIC_NUMBER))
    data = key and read_plan(key)
    if data:
        try:
            return marshal.loads(data)
        except (EOFError, ValueError, TypeError):  # passed the checksum, yet not this Python's
            pass
    code = compile(text, name, "exec")
    pace.step()
    if key:
        write_plan(key, marshal.dumps(code))
    return code


class GlueKind(enum.Enum):
    """How a driver computes one glue step."""

    CONSTANT = "constant"  # a value computed once per plan
    IMPLICIT = "implicit"  # an expand NumPy broadcasts where it is read (``implicit_expands``)
    SCALAR_ALIAS = "scalar alias"  # a reshape or detach of a runtime scalar: the same NumPy scalar
    ALIAS = "alias"  # a detach: the same array
    REQUIRE = "require"  # a value check (the interpreter's NumPy) whose result is its operand
    MATMUL_INTO = "matmul into"  # a matmul into a buffer of the plan's (``CompiledPlan.into``)
    RESHAPE = "reshape"
    SLICE = "slice"
    UNSLICE = "unslice"  # zeros, and the window assigned
    SCALAR_OP = "scalar op"  # one-element arithmetic as Python operators on NumPy values
    NUMPY = "numpy"  # the interpreter's NumPy implementation


class StoreTarget(typing.NamedTuple):
    """Where a loop's stored slot goes: a new buffer, or (``into``) the buffer of a slot that
    dies at this loop (see ``store_targets``)."""

    slot: int
    into: int | None


def glue_kind(ins, tape, plan, implicit, scalar_operand):
    """How the driver computes glue instruction ``ins`` (``implicit``: the expands NumPy
    broadcasts; ``scalar_operand``: its first operand is held as a NumPy scalar)."""
    out = ins.out
    a0 = ins.args[0] if ins.args else None
    if out in plan.consts:
        return GlueKind.CONSTANT
    if out in implicit:
        return GlueKind.IMPLICIT
    if ins.prim in ("reshape", "detach") and scalar_operand:
        # a runtime scalar stays a NumPy scalar until something needs it as an array
        return GlueKind.SCALAR_ALIAS
    if ins.prim == "detach":
        return GlueKind.ALIAS
    if ins.prim == "require":
        return GlueKind.REQUIRE
    if out in plan.into:
        return GlueKind.MATMUL_INTO
    if ins.prim in ("reshape", "slice", "unslice"):
        return GlueKind(ins.prim)
    if (
        ins.prim in _SCALAR_OPS
        and math.prod(tape.shapes[out]) == 1
        and tape.dtypes[a0] in ("f32", "f64")
        and all(tape.dtypes[a] == tape.dtypes[a0] for a in ins.args)
    ):
        # one-element arithmetic (bias corrections, a logsumexp's max): Python's operators
        # on NumPy values take 0.1 µs where the interpreter's dispatch takes 2
        return GlueKind.SCALAR_OP
    return GlueKind.NUMPY


def store_targets(part, sizes, tape, spare):
    """A ``StoreTarget`` per slot the loop ``part`` stores: the first of ``spare`` (slots whose
    buffers it may write in place of, see ``_Writer.donors``) of the store's dtype and shape, each
    taken once, else a new buffer."""
    spare, targets = list(spare), []
    for st in part.stores:
        d = next((a for a in spare if tape.dtypes[a] == tape.dtypes[st] and tape.shapes[a] == tuple(sizes)), None)
        if d is not None:
            spare.remove(d)
        targets.append(StoreTarget(st, d))
    return targets


def driver_code(plan, inputs, g, fallback, checked=True, into=False, kernels=None):
    """Lines and output expressions of a driver (see ``_driver`` and ``dispatch.inline``) of
    ``plan.tape``: the caller's tape with its rows lowered, as the plan was fused (the same
    inputs and outputs). ``into``: a ``Stepping``'s (its scratch's shapes and dtypes go to
    ``g["SCRATCH"]``); ``kernels``: the functions to call in place of the layout's own (``warm``)."""
    tape = plan.tape
    lay = plan.serial
    if kernels is None:
        plan.compile(lay)
    g.update(
        {
            "ndarray": np.ndarray,
            "empty": np.empty,
            "zeros": np.zeros,
            "asarray": np.asarray,
            "contiguous": np.ascontiguousarray,
            "errstate": np.errstate,
            "bool_": np.bool_,
            "taker": lambda made: buffers.taker(plan, made),
            "recycle": lambda made, res: buffers.recycle(plan, made, res),
            "matmul_into": matmul_into,
        }
    )
    w = _Writer(plan, tape, g, into)
    w.inputs(inputs, checked)
    g["fix"] = lambda i, v: fix_input(tape, i, v)
    g["check_one"] = lambda i, v: check_one(tape, i, v)
    g["NUMBERS"] = NUMBERS
    if plan.threaded is not plan.serial:  # loops big enough for threads: once threads are on,
        g["plan"] = plan  # they run in chunks (``execute``); the driver is serial
        w.lines.append("if plan.chunks():")
        w.lines.append(f"    {fallback}")
    consts = plan.consts  # constants (literals and their reshapes), computed once per plan
    for step in plan.plan.steps:
        if isinstance(step, Glue) and step.instr.out in consts and consts[step.instr.out] is None:
            consts[step.instr.out] = evaluate(tape, step.instr, consts)
    steps = plan.plan.steps
    quiet = False  # some NumPy glue computes: no floating-point warnings (one errstate per call)
    fns = lay.kernels if kernels is None else kernels
    for n_seg, (seg, src, fn, gone) in enumerate(zip(lay.segments, lay.sources, fns, lay.dead)):
        gone = set(gone)
        if src is None:
            ins = steps[seg[0]].instr
            line = w.glue(ins)
            quiet = quiet or (
                not line.startswith("#")
                and ins.out not in consts
                and PRIMS[ins.prim].kind not in ("movement", "index", "cast")
            )
            w.lines.append(line)
            w.live.add(ins.out)
        else:
            pace.step()  # a loop's call at a time: the compile worker's pacing looks in between
            w.segment(n_seg, seg, src, fn, gone, fallback)
        w.live -= gone
    return w.finish(quiet)


class _Writer:
    """A driver being written: its lines, and what each slot is at this point of the call.

    ``var``: slot -> the expression holding it; ``fresh``: variables holding arrays the driver
    made; ``root``: slot -> the variable owning its memory; ``loose``: slots that may not be
    C-contiguous; ``scalar``: variables holding a runtime scalar as a NumPy scalar; ``allocated``:
    variables holding a C-contiguous buffer the driver allocated for a loop; ``live``: the slots
    whose values are alive now; ``pooled``: some buffer comes from the plan's pool."""

    def __init__(self, plan, tape, g, into=False):
        self.plan, self.tape, self.g = plan, tape, g
        # a ``Stepping``'s: the output each slot is first (stored into ``outs[k]``: ``direct``),
        # and the buffers made for loops' stores, scratch unless an output is (a view of) one
        self.into, self.direct, self.made = into, {}, []
        self.out_at = {} if not into else {s: k for k, s in reversed(list(enumerate(tape.outputs)))}
        self.lines = []
        self.var, self.fresh, self.root, self.loose, self.scalar = {}, set(), {}, set(), set()
        self.allocated, self.live, self.pooled = set(), set(tape.inputs), False
        self.implicit = implicit_expands(plan.plan.steps, tape)

    def dtype_name(self, s):
        name = f"D{s}"
        self.g[name] = np_dtype(self.tape.dtypes[s])
        return name

    def alloc(self, shape, s):
        """An expression making a buffer for slot ``s``: a big one from the plan's pool, where
        its pages are already mapped; a small one from malloc, which keeps such memory itself."""
        if math.prod(shape) * np_dtype(self.tape.dtypes[s]).itemsize >= POOL_MIN_BYTES:
            self.pooled = True
            return f"take({tuple(shape)!r}, {self.dtype_name(s)})"
        return f"empty({tuple(shape)!r}, {self.dtype_name(s)})"

    def inputs(self, inputs, checked):
        """Bind each input to a variable, checked (anything unexpected goes through ``fix``)."""
        tape = self.tape
        for i, (s, kind) in enumerate(zip(tape.inputs, tape.kinds)):
            v = self.var[s] = f"x{s}"
            self.root[s] = v
            if kind == "scalar":
                if checked:  # a number as it is; anything else the tape's error (``type()`` parses a str)
                    self.lines.append(f"{v} = {inputs[i]}  # in %{s} scalar")
                    self.lines.append(f"if {v}.__class__ not in NUMBERS: check_one({i}, {v})")
                    self.lines.append(f"{v} = {self.dtype_name(s)}.type({v})")
                else:
                    self.lines.append(f"{v} = {self.dtype_name(s)}.type({inputs[i]})  # in %{s} scalar")
                self.scalar.add(v)
            else:
                self.lines.append(f"{v} = {inputs[i]}  # in %{s}")
                if not checked:
                    continue
                self.lines.append(
                    f"if {v}.__class__ is not ndarray or {v}.shape != {tape.shapes[s]!r} or "
                    f"{v}.dtype is not {self.dtype_name(s)} or not {v}.flags.c_contiguous or not {v}.flags.aligned:"
                )
                self.lines.append(f"    {v} = fix({i}, {v})")

    def glue(self, ins):
        """The line computing glue instruction ``ins`` (earlier lines it needs are appended)."""
        out = ins.out
        a0 = ins.args[0] if ins.args else None
        kind = glue_kind(ins, self.tape, self.plan, self.implicit, self.var.get(a0) in self.scalar)
        v = self.var[out] = f"e{out}"
        if kind is GlueKind.CONSTANT:
            self.g[f"C{out}"] = self.plan.consts[out]
            self.root[out] = f"C{out}"
            return f"{v} = C{out}  # %{out} = {ins.prim} (constant)"
        if kind is GlueKind.IMPLICIT:
            self._alias(out, a0, self.root.get(a0, self.var[a0]))
            return f"# %{out} = expand(%{a0}): NumPy broadcasts {self.var[a0]} where it is read"
        if kind is GlueKind.SCALAR_ALIAS:
            self.var[out], self.root[out] = self.var[a0], self.root[a0]
            return f"# %{out} = {ins.prim}(%{a0}) is {self.var[a0]}"
        if kind is GlueKind.ALIAS:
            self._alias(out, a0, self.root[a0])
            return f"# %{out} = detach(%{a0}) is {self.var[a0]}"
        args = [self._array(a) if self.var[a] in self.scalar else self.var[a] for a in ins.args]
        if kind is GlueKind.REQUIRE:
            self.g[f"G{out}"] = _computing(self.tape, ins)
            self.lines.append(f"G{out}({args[0]})  # %{out} = require(%{a0}), {ins.params['test']}")
            self._alias(out, a0, self.root.get(a0, self.var[a0]))
            return f"# %{out} is {self.var[a0]}"
        if kind is GlueKind.MATMUL_INTO:
            return self._matmul_into(ins, args)
        if kind is GlueKind.UNSLICE:
            self.lines.append(f"{v} = zeros({ins.params['shape']!r}, {self.dtype_name(out)})  # %{out} = unslice")
            self.root[out] = v
            self.fresh.add(v)
            return f"{v}[{_index_text(ins.params)}] = {args[0]}"
        if kind is GlueKind.SCALAR_OP and not self.tape.shapes[out] and not any(self.tape.shapes[a] for a in ins.args):
            # 0-d arithmetic (an optimizer loop's coefficient updates) on NumPy scalars: 0.04 µs an
            # operator where a 0-d array takes 0.4; the value stays a scalar until read as an array
            operands = [Expr(self._scalar(a), self.tape.dtypes[a]) for a in ins.args]
            self.scalar.add(v)
            self.root[out] = v
            return f"{v} = {PRIMS[ins.prim].fwd(SourceMath, *operands, **ins.params).text}  # %{out} = {ins.prim}"
        expr = self._expression(ins, kind, args)
        if ins.prim in _SHARES:
            self.root[out] = self.root.get(a0, v)
            if ins.prim != "reshape" or a0 in self.loose:
                self.loose.add(out)
        else:
            self.root[out] = v
            self.fresh.add(v)
            if kind is GlueKind.NUMPY:
                # NumPy lays some results out as it likes (``x[:, idx]``: axes permuted), and a
                # loop compiled for C-contiguous arrays would be compiled again for them
                self.loose.add(out)
        return f"{v} = {expr}  # %{out} = {ins.prim}"

    def _array(self, a):
        """An expression of slot ``a``, held as a NumPy scalar, as an array: a reshape of a scalar
        to one element is the same scalar (``SCALAR_ALIAS``), so a reader that needs the shape (a
        ``cat``, an output) reshapes it back; an expand NumPy broadcasts (``IMPLICIT``) stays 0-d,
        as its elementwise readers broadcast it."""
        shape = tuple(self.tape.shapes[a])
        one = shape and math.prod(shape) == 1
        return f"asarray({self.var[a]})" + (f".reshape({shape!r})" if one else "")

    def _scalar(self, a):
        """An expression of 0-d slot ``a`` as a NumPy scalar."""
        v = self.var[a]
        return v if v in self.scalar else f"{v}[()]"

    def _alias(self, out, a0, root):
        """Slot ``out`` is the value of ``a0`` (owned by ``root``)."""
        self.var[out], self.root[out] = self.var[a0], root
        if a0 in self.loose:
            self.loose.add(out)

    def _matmul_into(self, ins, args):
        out = ins.out
        v = self.var[out]
        shape, inverse = self.plan.into[out]
        buf = v if inverse is None else f"p{out}"
        how = "into a buffer of the plan's" if inverse is None else "laid out as its permute's result"
        self.lines.append(f"{buf} = {self.alloc(shape, out)}  # %{out} = matmul, {how}")
        self.root[out] = buf
        self.fresh.add(buf)
        if inverse is not None:
            self.loose.add(out)
            self.lines.append(f"{v} = {buf}.transpose({inverse!r})")
        return f"matmul_into({args[0]}, {args[1]}, {v})"

    def _expression(self, ins, kind, args):
        """The expression of a glue step that makes a value (a reshape, slice, one-element
        arithmetic or the interpreter's NumPy)."""
        if kind is GlueKind.RESHAPE:
            return f"{args[0]}.reshape({ins.params['shape']!r})"
        if kind is GlueKind.SLICE:
            return f"{args[0]}[{_index_text(ins.params)}]"
        if kind is GlueKind.SCALAR_OP:
            operands = [Expr(self.var[a], self.tape.dtypes[a]) for a in ins.args]
            text = PRIMS[ins.prim].fwd(SourceMath, *operands, **ins.params)
            return f"asarray{text.text}" if text.text.startswith("(") else f"asarray({text.text})"
        tape = self.tape
        if ins.prim == "scan":  # its body runs as a program of its own (``loops``)
            numpy = self.plan.numpy
            self.g[f"G{ins.out}"] = lambda *arrays, params=ins.params: loops.scan(params, arrays, numpy)
        else:
            self.g[f"G{ins.out}"] = _computing(tape, ins)
        return f"G{ins.out}({', '.join(args)})"

    def array_arg(self, a, shape):
        """The expression passing slot ``a`` to a loop as an array of ``shape``."""
        v = self.var[a]
        if v in self.scalar:  # a runtime scalar (a Python number) that a one-element loop reads as an array
            return f"asarray({v}).reshape({tuple(shape)!r})"
        if a in self.loose:
            self.lines.append(f"if not {v}.flags.c_contiguous: {v} = contiguous({v})")
        return v if tuple(shape) == tuple(self.tape.shapes[a]) else f"{v}.reshape({tuple(shape)!r})"

    def donors(self, j, part, gone):
        """Slots whose buffers a one-loop segment may write its stores into, as
        ``buffers.donors`` decides at run time: arrays this driver made that the loop reads only
        at its own index, whose values die here and that no other live value shares (NumPy's
        results are not candidates: their layout follows their operands')."""
        if j not in self.plan.in_place or not part.stores:
            return []
        root, var, sharing = self.root, self.var, {}
        for s in self.live:
            sharing[root[s]] = sharing.get(root[s], 0) + 1
        return [
            a
            for (a, _), whole in zip(part.arrays, part.whole)
            if whole and a in gone and root[a] in self.allocated and var[a] == root[a] and sharing[root[a]] == 1
        ]

    def segment(self, n_seg, seg, src, fn, gone, fallback):
        """The lines of a segment of loops: its buffers, then one call of its function."""
        steps = self.plan.plan.steps
        args, guards, parts = [], [], iter(src.parts)
        for j in seg:
            step = steps[j]
            if isinstance(step, Glue):
                self.lines.append(self.glue(step.instr))
                self.live.add(step.instr.out)
                continue
            part = next(parts)
            args += self.loop_args(j, n_seg, step, part, gone, guards, len(seg) == 1)
        name = f"K{n_seg}"
        self.g[name] = _warming(fn, self.g, name)
        if src.keep is not None:  # an argument several loops share is passed once
            args = [args[k] for k in src.keep]
        self.lines.append(f"{name}({', '.join(args)})")
        if guards:
            # an argument outside the range of a vectorised sin/cos: the interpreter is exact
            self.lines.append(f"if {' or '.join(b + '[0]' for b in guards)}:")
            self.lines.append(f"    {fallback}")

    def loop_args(self, j, n_seg, step, part, gone, guards, alone):
        """The arguments of one loop (``part`` of its segment's function), after the lines making
        its buffers; ``alone``: the loop is its segment's only step (then it may write in place)."""
        tape, var = self.tape, self.var
        sizes = step.shape or (1,)
        args = [str(sizes[d]) for d in part.dims]
        for a, pattern in part.arrays:
            args.append(self.array_arg(a, squeezed(tape.shapes[a], pattern)))
        for s_, late in zip(part.scalars, part.late):
            v = var[s_]
            if v in self.scalar:
                args.append(f"asarray({v}).reshape(-1)" if late else v)
            else:
                args.append(f"{v}.reshape(-1)" if late else f"{v}.reshape(-1)[0]")
        spare = self.donors(j, part, gone) if alone else []
        for st, into in store_targets(part, sizes, tape, spare):
            if into is None:
                o = f"o{st}"
                k = self.out_at.get(st)
                if k is not None and st not in self.direct:
                    self.direct[st] = k
                    shaped = "" if tuple(sizes) == tuple(tape.shapes[st]) else f".reshape({tuple(sizes)!r})"
                    self.lines.append(f"{o} = outs[{k}]{shaped}  # store %{st} into output {k}")
                else:
                    if self.into:
                        self.made.append((len(self.lines), o, tuple(sizes), st))
                    self.lines.append(f"{o} = {self.alloc(sizes, st)}  # store %{st}")
                self.fresh.add(o)
                self.allocated.add(o)
            else:  # written in place of a value that dies here (see ``donors``)
                o = var[into]
                self.lines.append(f"# store %{st} into {o}, the buffer of %{into}, which dies here")
            args.append(o)
            var[st] = o if tuple(sizes) == tuple(tape.shapes[st]) else f"{o}.reshape({tape.shapes[st]!r})"
            self.root[st] = o
            self.live.add(st)
        for ins, isfresh in zip(part.reductions, part.fresh):
            args.append(self.accumulator(ins, step.shape, isfresh))
        if part.guard:
            guards.append(f"b{len(guards)}_{j}")
            self.lines.append(f"{guards[-1]} = zeros(1, bool_)")
            args.append(guards[-1])
        if part.bounds is not None:
            self.g[f"W{n_seg}_{j}"] = part.bounds
            args.append(f"W{n_seg}_{j}")
        return args

    def accumulator(self, ins, shape, isfresh):
        """The lines making reduction ``ins``'s accumulator; returns the argument passing it."""
        c = f"r{ins.out}"
        keep = keepdims(shape, ins)
        kept_shape = kept(keep, ins)
        made = () if not kept_shape else keep  # a full reduction's 0-d accumulator: no reshape
        self.lines.append(f"{c} = {self.alloc(made, ins.out)}  # %{ins.out} = {ins.prim}")
        if not isfresh:
            self.g[f"I{ins.out}"] = identity(ins.prim, self.tape.dtypes[ins.out])
            self.lines.append(f"{c}.fill(I{ins.out})")
        self.live.add(ins.out)
        self.fresh.add(c)
        out_shape = self.tape.shapes[ins.out]
        self.var[ins.out] = c if made == tuple(out_shape) else f"{c}.reshape({out_shape!r})"
        self.root[ins.out] = c
        return c if kept_shape == made else f"{c}.reshape({kept_shape!r})"

    def finish(self, quiet):
        """The driver's lines and output expressions (outputs copied where they would share)."""
        if self.into:
            return self._finish_into()
        outs, taken = [], set()
        for s in self.tape.outputs:
            v = self.var[s]
            if v in self.scalar:
                v = self._array(s)
            elif self.root.get(s) not in self.fresh or self.root.get(s) in taken:  # an input, a constant, or shared
                v = f"{v}.copy()"
            taken.add(self.root.get(s))
            outs.append(v)
        lines = self._dropping(self.lines, outs)
        if quiet:  # entering errstate costs about a microsecond: once, around everything
            lines = ["with errstate(all='ignore'):"] + ["    " + line for line in lines]
        if self.pooled:
            # big buffers come from the plan's pool and go back to it (the results are watched
            # until the caller drops them; see ``buffers.recycle``)
            lines = ["made = []", "take = taker(made)"] + lines
            lines.append(f"y = [{', '.join(outs)}]")
            lines.append("recycle(made, y)")
            outs = [f"y[{k}]" for k in range(len(outs))]
        return lines, outs

    def _dropping(self, lines, outs):
        """``lines`` with a ``del`` of each variable of a big array (``POOL_MIN_BYTES`` or
        more) after the last line that names it, unless an output does, as the executor drops
        a slot when it dies: NumPy glue's results go back to the heap as soon as their last
        reader has run, where the next ones reuse them. Kept to the end of the call, the
        chain's 27 NumPy steps held 21 MB at once where the interpreter held 6, and its first
        call on the NumPy driver took 3,900 page faults (10 ms where the calls after took 3.4)."""
        last = {}
        for k, line in enumerate(lines):
            for name in _LOCAL.findall(line):
                last[name] = k
        for name in _LOCAL.findall(" ".join(outs)):
            last.pop(name, None)
        after = {}
        for name, k in last.items():
            s = int(name[1:])
            if math.prod(self.tape.shapes[s]) * np_dtype(self.tape.dtypes[s]).itemsize >= POOL_MIN_BYTES:
                while k + 1 < len(lines) and (lines[k].endswith(":") or lines[k + 1][:1] == " "):
                    k += 1  # after the block the line opens (an ``if`` and its fallback)
                after.setdefault(k, []).append(name)
        out = []
        for k, line in enumerate(lines):
            out.append(line)
            if k in after:
                out.append(f"del {', '.join(sorted(after[k]))}  # dead")
        return out

    def _finish_into(self):
        """``finish`` for a ``Stepping``: None for each output stored into ``outs``, the value
        itself for the others (no copy: its caller copies it into its own array, under its own
        ``errstate``), and the loop buffers no output shares made scratch (``S``)."""
        outs, kept, lines = [], set(), self.lines
        for k, s in enumerate(self.tape.outputs):
            if self.direct.get(s) == k:
                outs.append("None")
                continue
            outs.append(self._array(s) if self.var[s] in self.scalar else self.var[s])
            kept.add(self.root.get(s))
        scratch = self.g["SCRATCH"] = []
        for at, o, shape, st in self.made:
            if o not in kept:
                lines[at] = f"{o} = S[{len(scratch)}]  # store %{st}, scratch"
                scratch.append((shape, np_dtype(self.tape.dtypes[st])))
        if any("take(" in line for line in lines):
            lines = ["made = []", "take = taker(made)"] + lines
            lines.append(f"y = [{', '.join(outs)}]")
            lines.append("recycle(made, [r for r in y if r is not None])")
            outs = [f"y[{k}]" for k in range(len(outs))]
        return lines, outs


def _computing(tape, ins):
    """``compute(tape, ins, arrays)`` as a function of the arrays, with the row's forward, its
    params and the result's dtype looked up once."""
    fwd, params, want = PRIMS[ins.prim].fwd, ins.params, np_dtype(tape.dtypes[ins.out])
    ndarray, asarray = np.ndarray, np.asarray

    def run(*arrays):
        r = fwd(NUMPY, *arrays, **params)
        if r.__class__ is not ndarray or r.dtype != want:
            r = asarray(r, dtype=want)
        return r

    return run


def implicit_expands(steps, tape):
    """The expands a driver need not build: each read only by elementwise NumPy glue whose
    result keeps its shape when that operand is the expand's source instead (NumPy broadcasts
    it). ``np.broadcast_to`` costs 4 us, about twice the one-element-by-vector product it feeds
    at the end of a logsumexp's gradient."""
    readers = {}
    for step in steps:
        for a in reads_of(step):
            readers.setdefault(a, []).append(step)
    implicit = {}  # expand slot -> its source
    outputs = set(tape.outputs)
    for step in steps:
        if not isinstance(step, Glue) or step.instr.prim != "expand" or step.instr.out in outputs:
            continue
        ins = step.instr
        users = readers.get(ins.out, ())
        if not users or not all(isinstance(u, Glue) and PRIMS[u.instr.prim].kind in _BROADCASTING for u in users):
            continue
        implicit[ins.out] = ins.args[0]
        if not all(_keeps_shape(u.instr, tape, implicit) for u in users):
            del implicit[ins.out]
    return implicit


def _keeps_shape(ins, tape, implicit):
    """Whether ``ins`` keeps its result's shape with the ``implicit`` expands' sources read."""
    shapes = [tape.shapes[implicit.get(a, a)] for a in ins.args]
    return tuple(np.broadcast_shapes(*shapes)) == tuple(tape.shapes[ins.out])


def _index_text(params):
    return ", ".join(f"{a}:{b}:{c}" for a, b, c in zip(params["starts"], params["stops"], params["steps"]))


def _warming(kernel, g, name):
    """The kernel's first calls go through its wrapper (load or compile, cache repair); once it
    is ready, the driver calls the machine code for these argument types (``cpu.direct``):
    a driver's arguments are inputs it checked (class, shape, dtype, layout), arrays it made and
    literals, so their types are the same on every call."""

    def call(*args):
        r = kernel(*args)
        if kernel.ready:
            from ..targets.cpu import direct

            g[name] = direct(kernel, args)
        return r

    return call
