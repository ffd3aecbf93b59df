"""Fusion: partition a tape into steps, each a fused loop (``Kernel``) or one NumPy call (``Glue``).

Contract: ``fuse(tape)`` returns a ``Plan`` whose steps, run in order, compute every output
of the tape. A ``Kernel`` is one nd loop over an iteration shape: it reads arrays (with a
broadcast pattern, so an ``expand`` never materializes its result), runtime scalars and literals,
evaluates a run of elementwise instructions per element, stores the values that are needed
elsewhere, and accumulates reductions over its iteration space as epilogues (so
``((x[:, None] - x[None]) ** 2).sum(-1)`` never builds its N x N x 3 temporary). Everything
else (movement, indexing, scans, matmul through BLAS) is a ``Glue`` step run by NumPy.

An elementwise instruction joins the latest kernel of its shape when all its operands are
available at that kernel's position (computed before it, or by it, but not by one of its
reductions, which are complete only after the loop). A value another kernel computed is
rematerialized rather than stored and reloaded when that is cheaper: broadcast reads are re-read
from their source, and short chains of cheap arithmetic (``CHEAP``) are recomputed.
"""

import dataclasses
import enum
import typing

from .. import pace
from ..ir.prims import PRIMS
from .passes import Pass, run_passes

__all__ = ["fuse", "reads_of", "Plan", "Kernel", "Glue", "Read", "ReadKind", "FuseState", "PASSES"]

FUSED = ("unary", "binary", "compare", "logical", "where", "cast")
EPILOGUES = ("sum", "prod", "amax", "amin")
# recomputed in a later kernel rather than stored and reloaded: a few cycles each, while a
# libm call (exp, sin, tanh: 3-20 ns) costs more than the memory traffic it would save
CHEAP = {
    "reshape",
    "expand",
    "neg",
    "add",
    "sub",
    "mul",
    "div",
    "abs",
    "sign",
    "cast",
    "detach",
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "logical_and",
    "logical_or",
    "logical_not",
    "where",
    "maximum",
    "minimum",
    "sqrt",
    "isnan",
}
REMAT_BUDGET = 16
CUDA_ATOMIC = ("f32", "f64", "i32", "i64")  # dtypes CUDA's atomic add, max and min take


class ReadKind(str, enum.Enum):
    """How a kernel reads a slot it does not compute (see ``Read``)."""

    ARRAY = "array"  # an array of the slot ``src``, at the loop's index with broadcast axes fixed at 0
    SCALAR = "scalar"  # a one-element value ``src`` (a runtime scalar or a one-element array)
    LITERAL = "literal"  # a constant ``value`` inlined into the kernel's text
    WINDOW = "window"  # the array ``src`` through a slice's ``window``: no view is built per call
    PAD = "pad"  # the array ``src`` placed in a zero array at ``window`` (an unslice), read where it is used;
    # a negative start places it partly before row 0 (an unslice of a slice, ``_unslice_read``)
    CAT = "cat"  # ``pieces`` one after another along ``axis`` (a concatenation), read where it is used


class Read(typing.NamedTuple):
    """One kernel read: ``kind`` first (so ``read[0]`` is the kind), then its payload.

    ``src``: the slot read (None for a literal or a concatenation); ``pattern``: for an array, per
    axis of the kernel's shape whether the source is broadcast there; ``window``: for a window or
    pad, the slice's (start, stop, step) per axis; ``value``: a literal's value; ``axis`` and
    ``pieces``: for a concatenation, the axis and, in order along it, each piece's (start, stop)
    there and its own read (a literal, a whole array of the piece's shape, or a window)."""

    kind: ReadKind
    src: int | None = None
    pattern: tuple = ()
    window: tuple = ()
    value: object = None
    axis: int = 0
    pieces: tuple = ()


class Glue:
    """One instruction run by the NumPy interpreter's implementation."""

    __slots__ = ("instr",)

    def __init__(self, instr):
        self.instr = instr


class Kernel:
    """A fused loop. ``reads``: slot -> ``Read``, one of six kinds (``ReadKind``): an array at the
    loop's index with a broadcast pattern, a one-element scalar, an inlined literal, an array
    through a slice's window, an unslice's source padded with zeros outside its window, or a
    concatenation's pieces, each read in its part of the axis;
    ``body``: elementwise instructions in order; ``reductions``: epilogue instructions;
    ``stores``: slots written to full-size output arrays (filled in by ``fuse``); ``defined``:
    the slots readable inside the loop (read or computed)."""

    __slots__ = ("shape", "reads", "body", "reductions", "stores", "defined")

    def __init__(self, shape):
        self.shape = shape
        self.reads, self.body, self.reductions, self.stores = {}, [], [], []
        self.defined = set()


class Plan:
    """The steps of a fused tape, in execution order."""

    __slots__ = ("tape", "steps")

    def __init__(self, tape, steps):
        self.tape, self.steps = tape, steps

    def kernels(self):
        return [s for s in self.steps if isinstance(s, Kernel)]


def _ones(shape):
    return all(d == 1 for d in shape)


@dataclasses.dataclass
class FuseState:
    """What the fusion passes share. Every step has a position; sorting by position gives the
    execution order. Loop kernel n is (n,); a glue step or a one-element kernel runs right after
    the latest of its operands, (that position) + (sequence,), so a view of an input runs before
    every kernel instead of splitting one."""

    tape: object
    cpu: bool
    numpy: bool = False  # no kernels: every instruction a NumPy step (``fuse``)
    placed: list = dataclasses.field(default_factory=list)  # (position, step)
    where: dict = dataclasses.field(default_factory=dict)  # slot -> (position of its step, by an epilogue)
    literal: dict = dataclasses.field(default_factory=dict)  # slot -> the constant it holds
    windows: dict = dataclasses.field(default_factory=dict)  # slot of a slice -> the kernel read of its source
    latest: dict = dataclasses.field(default_factory=dict)  # shape -> (position, kernel)
    defs: dict = dataclasses.field(default_factory=dict)  # slot -> how a kernel computed it: Read or instr
    home: dict = dataclasses.field(default_factory=dict)  # slot -> the kernel that computes it first
    loops: int = 0  # loop kernels made so far
    seq: int = 0  # glue and one-element steps placed so far
    scalar_glue: bool = False  # one-element arithmetic runs as NumPy glue (see ``place_instrs``)
    steps: list = dataclasses.field(default_factory=list)  # in execution order, once ordered

    @classmethod
    def of(cls, tape, target="cpu"):
        """The state before any pass: only the tape's inputs are placed."""
        where = {s: ((-1,), False) for s in tape.inputs}
        return cls(tape, target in ("cpu", "numpy"), target == "numpy", where=where)


def _available(state, slot, pos):
    """Whether ``slot`` is computed before the step at ``pos``, or by it but not by an epilogue."""
    p, epi = state.where[slot]
    return p < pos or (p == pos and not epi)


def _last(state, deps, literals=False):
    """The position of the latest step among those computing ``deps`` (kernels inline
    literals, so theirs count only for glue, which reads them as arrays)."""
    return max([state.where[d][0] for d in deps if literals or d not in state.literal] + [(-1,)])


def _after(state, deps, literals=False):
    """A new position right after the latest of ``deps``: a step runs as early as it can."""
    state.seq += 1
    return _last(state, deps, literals) + (state.seq,)


def _kernel_for(state, shape, deps):
    """The kernel (and its position) that computes a value of ``shape`` from ``deps``: the latest
    of that shape when all of ``deps`` are available there, else a new one."""
    hit = state.latest.get(shape)
    if hit is not None and all(d in state.literal or _available(state, d, hit[0]) for d in deps):
        if not (_ones(shape) and hit[0] > _last(state, deps)):  # else a new one-element kernel runs earlier
            return hit
    # Loop kernel n runs at (n,), after every view of the inputs. A kernel of one element
    # runs right after its operands instead: computed from inputs (the seed times a
    # constant), it runs before the big loops, so they can all use it and fuse together.
    if _ones(shape):
        pos = _after(state, deps)
    else:
        pos = (state.loops,)
        state.loops += 1
    kern = Kernel(shape)
    state.placed.append((pos, kern))
    state.latest[shape] = (pos, kern)
    return pos, kern


def _glue(state, ins):
    pos = _after(state, ins.args, literals=True)
    state.placed.append((pos, Glue(ins)))
    state.where[ins.out] = (pos, False)


def _remat(state, kern, pos, slot, budget):
    """Define ``slot`` inside the kernel at ``pos`` by recomputing it; False if not worth it."""
    d = state.defs.get(slot)
    if d is None:
        return False
    if isinstance(d, Read):  # free, whatever is left of the budget: a read recurses no further
        if d.kind == ReadKind.LITERAL or _read_ready(state, d, pos):
            kern.reads[slot] = d
            kern.defined.add(slot)
            return True
        return False
    if d.prim not in CHEAP or budget[0] <= 0:
        return False
    budget[0] -= 1
    for a in d.args:
        if (
            a not in kern.defined
            and a not in state.literal
            and not _available(state, a, pos)
            and not _remat(state, kern, pos, a, budget)
        ):
            return False
    for a in d.args:
        _read(state, kern, pos, a, budget)
    kern.body.append(d)
    kern.defined.add(slot)
    return True


def _read_ready(state, r, pos):
    """Whether what the read ``r`` loads is there at ``pos``. A concatenation loads its pieces at
    other indices than the loop's, and so does an unslice, so they must come from an earlier step."""
    if r.kind == ReadKind.CAT:
        return all(p.kind == ReadKind.LITERAL or state.where[p.src][0] < pos for _, _, p in r.pieces)
    if r.kind == ReadKind.PAD:  # at other indices than the loop's too
        return state.where[r.src][0] < pos
    return _available(state, r.src, pos)


def _read(state, kern, pos, slot, budget=None):
    """Make ``slot`` (of the kernel's shape) readable inside the kernel at ``pos``. Recomputing
    shares one budget per read from the tape, which also bounds the recursion's depth."""
    if slot in kern.defined:
        return
    if slot in state.literal:
        kern.reads[slot] = Read(ReadKind.LITERAL, value=state.literal[slot])
    elif slot in state.windows:
        kern.reads[slot] = state.windows[slot]
    elif state.where[slot][0] == pos or not _remat(state, kern, pos, slot, budget or [REMAT_BUDGET]):
        kern.reads[slot] = Read(ReadKind.ARRAY, slot, pattern=tuple(False for _ in kern.shape))
    kern.defined.add(slot)


def _compute(state, ins):
    """``ins`` evaluated per element in the latest kernel of its shape that can run it."""
    pos, kern = _kernel_for(state, state.tape.shapes[ins.out], ins.args)
    for a in ins.args:
        _read(state, kern, pos, a)
    kern.body.append(ins)
    kern.defined.add(ins.out)
    state.defs[ins.out] = ins
    state.home[ins.out] = kern
    state.where[ins.out] = (pos, False)


def _as_read(state, ins, r, deps=None):
    """``ins`` computed by the way a kernel of its shape reads its operands ``deps`` (default:
    ``r.src``; a broadcast, an unslice, a concatenation), in the latest such kernel: it costs no
    step of its own."""
    pos, kern = _kernel_for(state, state.tape.shapes[ins.out], [r.src] if deps is None else deps)
    kern.reads[ins.out] = r
    kern.defined.add(ins.out)
    state.defs[ins.out] = r
    state.home[ins.out] = kern
    state.where[ins.out] = (pos, False)


def _fusible_cat(state, ins):
    """Whether kernels read the concatenation ``ins`` piece by piece (``ReadKind.CAT``): on the
    CPU, as windows are, and when no piece is all of it (a piece is then read at other indices
    than the loop's, so it never comes from the loop that reads it)."""
    if not state.cpu or ins.prim != "cat":
        return False
    shapes, axis = state.tape.shapes, ins.params["axis"]
    return all(shapes[a][axis] < shapes[ins.out][axis] for a in ins.args)


def _cat_read(state, ins):
    """The read of a concatenation: each nonempty piece with its part of the axis, as a literal,
    a window of the slice's source, or the piece's own array."""
    shapes, axis = state.tape.shapes, ins.params["axis"]
    pieces, start = [], 0
    for a in ins.args:
        stop = start + shapes[a][axis]
        if stop > start:
            if a in state.literal:
                r = Read(ReadKind.LITERAL, value=state.literal[a])
            else:
                r = state.windows.get(a) or Read(ReadKind.ARRAY, a, pattern=tuple(False for _ in shapes[a]))
            pieces.append((start, stop, r))
        start = stop
    return Read(ReadKind.CAT, axis=axis, pieces=tuple(pieces))


def _unslice_read(state, ins):
    """The read of an unslice: its operand placed in zeros at its window, or, where the operand is
    a slice whose window composes with it (steps of 1, and on each axis one of the two starting
    at 0), the slice's source placed at the difference of their starts, which is negative for
    the gradient of ``y[1:]`` placed in ``[:-1]``: no view is built, and the loops on either side
    of it can be one function (GradBench ode's reverse step read four such slices between five
    loops). It is read only by loops after the slice's, where the source is complete."""
    r = Read(ReadKind.PAD, ins.args[0], window=_window(ins.params))
    w = state.windows.get(ins.args[0])
    if w is None or any(b != 1 or d != 1 or (a and c) for (a, _, b), (c, _, d) in zip(r.window, w.window)):
        return r
    return Read(
        ReadKind.PAD, w.src, window=tuple((a - c, stop, 1) for (a, stop, _), (c, _, _) in zip(r.window, w.window))
    )


def _epilogue(state, ins):
    """The reduction ``ins`` accumulated by the kernel that computes its operand (or a new one)."""
    src = ins.args[0]
    spos, epi = state.where[src]
    hit = state.latest.get(state.tape.shapes[src])
    if hit is not None and hit[0] == spos and src in hit[1].defined and not epi:
        pos, kern = hit
    else:
        pos, kern = _kernel_for(state, state.tape.shapes[src], [src])
        _read(state, kern, pos, src)
    kern.reductions.append(ins)
    state.where[ins.out] = (pos, True)


def _place(state, ins):
    """Place one instruction: in a kernel (computed, read, or accumulated) or as a glue step."""
    tape, literal = state.tape, state.literal
    prim = PRIMS[ins.prim]
    shape = tape.shapes[ins.out]
    if ins.prim == "const":
        literal[ins.out] = ins.params["value"]
    elif ins.prim in ("reshape", "expand") and ins.args[0] in literal:
        literal[ins.out] = literal[ins.args[0]]
    if (
        state.scalar_glue
        and _ones(tape.shapes[ins.args[0]] if ins.prim in EPILOGUES else shape)
        and (prim.kind in FUSED or ins.prim in EPILOGUES or ins.prim in ("reshape", "expand"))
    ):
        _glue(state, ins)
        return
    moved = ins.args[0] not in literal and tape.shapes[ins.args[0]] != shape if ins.args else False
    noop = ins.prim in ("reshape", "expand") and tape.shapes[ins.args[0]] == shape
    if noop and ins.args[0] not in literal:  # an identity: computed in the loop like elementwise
        _compute(state, ins)
    elif ins.prim == "expand" and ins.args[0] not in literal:
        src = ins.args[0]
        if _ones(tape.shapes[src]):
            _as_read(state, ins, Read(ReadKind.SCALAR, src))
        else:
            pattern = tuple(a == 1 and b != 1 for a, b in zip(tape.shapes[src], shape))
            _as_read(state, ins, Read(ReadKind.ARRAY, src, pattern=pattern))
    elif ins.prim == "slice" and state.cpu and moved:
        # a view for glue; a kernel reads the source at the window's indices instead (no
        # view built per call, and every slice of one array is one kernel argument)
        state.windows[ins.out] = Read(ReadKind.WINDOW, ins.args[0], window=_window(ins.params))
        _glue(state, ins)
    elif ins.prim == "unslice" and state.cpu and moved:
        # the gradient of a slice is read where it is used (zero outside its window) instead
        # of being built as a zeroed array: a fan-out of slices sums in one loop
        _as_read(state, ins, _unslice_read(state, ins), [ins.args[0]])
    elif _fusible_cat(state, ins):
        # read where it is used, each element from its piece, instead of built by NumPy: a
        # pass over memory and an array fewer (GradBench ode's right-hand side, four a step)
        axis = ins.params["axis"]
        _as_read(state, ins, _cat_read(state, ins), [a for a in ins.args if tape.shapes[a][axis]])
    elif prim.kind in FUSED:
        _compute(state, ins)
    elif ins.prim in EPILOGUES and (state.cpu or (ins.prim != "prod" and tape.dtypes[ins.out] in CUDA_ATOMIC)):
        _epilogue(state, ins)
    else:
        _glue(state, ins)


def place_instrs(state):
    """Place every instruction in order (see ``_place``), recomputing cheap values a kernel reads
    rather than reloading them. Next to real loops, one-element arithmetic (a seed times a
    constant, the max of a logsumexp checked for inf) runs as NumPy glue on the CPU:
    microseconds per call, against a fifth of a second to compile a kernel for it. A tape of
    scalars only still compiles to one kernel. For the ``numpy`` target every instruction is
    glue, in the tape's order."""
    tape = state.tape
    if state.numpy:
        for n, ins in enumerate(tape.instrs):
            state.placed.append(((n,), Glue(ins)))
            state.where[ins.out] = ((n,), False)
        return
    state.scalar_glue = state.cpu and any(
        PRIMS[i.prim].kind in FUSED and not _ones(tape.shapes[i.out]) for i in tape.instrs
    )
    for ins in _by_phase(state):
        pace.tick()  # ba's 394 instructions: one 3.5 ms pass under the interpreter's lock
        _place(state, ins)


def _by_phase(state):
    """The tape's instructions in a topological order that groups them by *phase*: how many
    loops must finish before they can be computed (a reduction's result, or glue reading a
    loop's value, is ready one loop later). A reduction and the loop values it reads are placed
    as early as they can be, in the loop that computes its operand, because the next phase waits
    for it; every other instruction as late as its readers allow, where they are (its value is
    not stored and reloaded). In the tape's own order the next iteration of a loop interleaves
    with the reductions of the last (lowering walks depth first), and an independent reduction
    placed after a later kernel was opened joins that one: PyTorch's polynomial tutorial made
    four kernels where two do. A stable sort by phase: no edge goes to a lower phase."""
    tape, scalar_glue = state.tape, state.scalar_glue
    instrs = tape.instrs
    ready, looped, asap, epilogue = {}, set(), [], []
    for ins in instrs:
        kind = PRIMS[ins.prim].kind
        if ins.prim in EPILOGUES and not (scalar_glue and _ones(tape.shapes[ins.args[0]])):
            key = ready.get(ins.args[0], 0)
            ready[ins.out] = key + 1
            epilogue.append(True)
        else:
            in_loop = kind in FUSED or ins.prim in ("reshape", "expand", "slice", "unslice") or _fusible_cat(state, ins)
            if in_loop and not (scalar_glue and _ones(tape.shapes[ins.out])):
                key = ready[ins.out] = max([ready.get(a, 0) for a in ins.args], default=0)
                looped.add(ins.out)
            else:
                key = ready[ins.out] = max([ready.get(a, 0) + (a in looped) for a in ins.args], default=0)
            epilogue.append(False)
        asap.append(key)
    # latest first: a reader's phase is final before its operands'
    urgent = set()
    latest = {}  # slot -> the lowest phase among its readers seen so far
    keys = list(asap)
    for n in range(len(instrs) - 1, -1, -1):
        ins, key = instrs[n], keys[n]
        if epilogue[n] or ins.out in urgent:
            urgent.update(a for a in ins.args if a in looped)
        elif ins.out in latest:
            key = keys[n] = max(asap[n], latest[ins.out])
        for a in ins.args:
            latest[a] = min(latest.get(a, key), key)
    order = sorted(range(len(instrs)), key=lambda n: (keys[n], n))
    return [instrs[n] for n in order]


def order_steps(state):
    """The placed steps in execution order (by position)."""
    state.steps = [st for _, st in sorted(state.placed, key=lambda ps: ps[0])]


def flatten_one_op_loops(state):
    """A loop of one operation fuses nothing: NumPy runs it as fast, and no kernel is compiled.
    At every size, so that a plan does not change with its sizes (a one-operation loop that
    became a kernel above some size made GradBench's ba compile 5 more functions at p = 100,000
    than at 10,000); a big one gives up threads, which fused loops keep. A loop reading a slice's
    gradient stays, which NumPy would first build as a zeroed array (the gradient of x[:-1]
    plus that of x[1:]: five NumPy calls against one loop), and so does one computing with a
    concatenation it reads (NumPy would build it first)."""
    instr_of = {ins.out: ins for ins in state.tape.instrs}
    flat = []
    for step in state.steps:
        if (
            state.cpu
            and isinstance(step, Kernel)
            and len(step.body) <= 1
            and not step.reductions
            and not any(r.kind == ReadKind.PAD or (r.kind == ReadKind.CAT and step.body) for r in step.reads.values())
        ):
            # its reads as NumPy steps (a slice's own view step is already there)
            flat += [
                Glue(instr_of[slot])
                for slot, r in sorted(step.reads.items())
                if r.kind not in (ReadKind.LITERAL, ReadKind.WINDOW) and r.src != slot
            ]
            flat += [Glue(ins) for ins in step.body]
        else:
            flat.append(step)
    state.steps = flat


def sink_glue(state):
    """Glue after a kernel moves down to the first step that reads it (see ``_sink``)."""
    state.steps = _sink(state.steps)


def drop_dead_steps(state):
    """Steps whose values nothing reads are dropped (see ``_live``)."""
    state.steps = _live(state.steps, state.tape, state.home)


def choose_stores(state):
    """A value is stored by the kernel that computes it first when anything outside that kernel
    reads it; a later kernel recomputing it (rather than reloading it) does not store it again."""
    needed = set(state.tape.outputs)
    for step in state.steps:
        needed |= reads_of(step)
    for step in state.steps:
        if isinstance(step, Kernel):
            step.stores = [
                s for s in _defined_order(step) if s in needed and s not in state.literal and state.home.get(s) is step
            ]


PASSES = [
    Pass("place_instrs", "put each instruction in a kernel (computed, read, accumulated) or a glue step", place_instrs),
    Pass("order_steps", "sort the placed steps by position into execution order", order_steps),
    Pass("flatten_one_op_loops", "one-operation loops become NumPy glue (CPU)", flatten_one_op_loops),
    Pass("sink_glue", "glue after a kernel moves down to its first reader", sink_glue),
    Pass("drop_dead_steps", "glue and loops whose values nothing reads are dropped", drop_dead_steps),
    Pass("choose_stores", "each kernel stores what is read outside it and first computed by it", choose_stores),
]


# without kernels there is nothing to flatten, sink past or store from
NUMPY_PASSES = [p for p in PASSES if p.name in ("place_instrs", "order_steps", "drop_dead_steps")]


def fuse(tape, target="cpu"):
    """Partition ``tape`` into kernels and glue steps by running ``PASSES``; see the module docstring.

    For ``target="cuda"`` every loop stays a kernel (glue there is a device round trip, not a
    microsecond of NumPy), and only reductions the GPU can combine with atomics (``sum``,
    ``amax``, ``amin`` of numbers) are epilogues; ``prod`` and boolean reductions are glue.
    ``target="numpy"``: no kernel at all, every instruction a glue step (the plan a driver runs
    before any kernel is compiled, ``runtime.plan``)."""
    state = FuseState.of(tape, target)
    state = run_passes("fuse", NUMPY_PASSES if state.numpy else PASSES, state)
    return Plan(tape, state.steps)


def _window(params):
    """A slice's or unslice's (start, stop, step) per axis."""
    return tuple(zip(params["starts"], params["stops"], params["steps"]))


def _live(steps, tape, home):
    """``steps`` without the glue whose value nothing reads (a view or constant that every
    kernel inlines, as a literal or by reading the array it broadcasts, costs nothing on the
    CPU but a device allocation and launch on the GPU) and without the loops none of whose
    values (those it computes first, ``home``, and its reductions) anything reads: a scan's
    reverse body recomputed the forward step's new carry, which only the forward body returns."""
    live, kept = set(tape.outputs), []
    for step in reversed(steps):
        if isinstance(step, Glue) and step.instr.out not in live:
            continue
        if (
            isinstance(step, Kernel)
            and not any(home.get(s) is step and s in live for s in step.defined)
            and not any(ins.out in live for ins in step.reductions)
        ):
            continue
        live.update(reads_of(step))
        kept.append(step)
    return kept[::-1]


def reads_of(step):
    """The slots a step reads from outside itself (a glue step's operands, a kernel's arrays
    and scalars)."""
    if isinstance(step, Glue):
        return set(step.instr.args)
    r = set()
    for read in step.reads.values():
        if read.kind == ReadKind.CAT:
            r.update(p.src for _, _, p in read.pieces if p.kind != ReadKind.LITERAL)
        elif read.kind != ReadKind.LITERAL:
            r.add(read.src)
    r.update(a for ins in step.body for a in ins.args if a not in step.defined)
    return r


def _sink(steps):
    """Move each glue step that follows a kernel down to just before the first step that reads
    it (to the end if none does): the output scaling of a loss no longer sits between the
    forward and reverse loops, which can then compile and run as one function. Reshapes stay:
    they are views and never separate loops."""
    out, pending, after_kernel = [], [], False
    for step in steps:
        need = reads_of(step)
        for g in reversed(pending):  # release the pending producers of this step, transitively
            if g.instr.out in need:
                need |= set(g.instr.args)
        out += [g for g in pending if g.instr.out in need]
        pending = [g for g in pending if g.instr.out not in need]
        if isinstance(step, Glue) and after_kernel and step.instr.prim != "reshape":
            pending.append(step)
        else:
            out.append(step)
        after_kernel = after_kernel or isinstance(step, Kernel)
    return out + pending


def _defined_order(kern):
    """Slots a kernel defines, in a deterministic order: reads (by slot), then body results."""
    return sorted(s for s, r in kern.reads.items() if r.kind != ReadKind.LITERAL and r.src != s) + [
        i.out for i in kern.body
    ]
