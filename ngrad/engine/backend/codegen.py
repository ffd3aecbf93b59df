"""Codegen: a fused ``Kernel`` becomes readable Python source for Numba's ``njit`` or ``cuda.jit``.

Contract: ``program(kernels, tape)`` returns ``Source``: the text of one module-level
function ``kernel`` running the kernels' loop nests in order, and each kernel's calling
convention (loop sizes, input arrays, scalars, output arrays, reduction accumulators);
``render(kernel, tape)`` is the one-kernel case. Each loop nest is rendered by the named passes
of ``LOOP_PASSES`` over a ``LoopState``; its element (reads, instructions, stores) by
``render_element`` (element.py). Consecutive loops over one axis run in blocks of rows
(``blocking.blocks``: each block through all of them, then the next) where each reads what the
loops before it store only at rows already made, so their arrays stay in cache between them;
what only a run's own later loops read lives in buffers of a block's rows (``blocking.held``).
Elementwise expressions come from the primitive table's forward rows, evaluated against
``SourceMath`` (source_math.py: it builds expression text instead of numbers), so the
interpreter and the compiled code share one definition. Every generated line carries the tape
instruction it came from as a comment. Sizes are arguments and never appear in the text, so one
kernel serves every batch size; literals are typed to the dtype they are used with (float32
code stays float32). CPU text imports ``math`` and ``numpy`` only; the CUDA text
(``cuda_source.py``) renders the same element with ``render_element``. This module itself never
imports Numba. Whenever its output changes meaning, bump ``store.CODEGEN_VERSION``.
"""

import dataclasses
import math
import re
import typing

import numpy as np

from ..ir.dtypes import from_short
from ..ir.tape import format_instr
from .blocking import Run, block_head, blocks, hold_lines, settle
from .element import render_element, rows_inside
from .fuse import ReadKind
from .passes import Pass, run_passes
from .source_math import GUARDED, NP_TYPE, TRIG_LIMIT, SourceMath, identity, typed

__all__ = [
    "render",
    "program",
    "Source",
    "Part",
    "LoopState",
    "LoopCopy",
    "LOOP_PASSES",
    "choose_nest",
    "render_elements",
    "accumulate_reductions",
    "guard_ranges",
    "bind_parameters",
    "write_nest",
    "describe_part",
    "blocks",
    "Run",
    "BLOCK_ROWS",
]


_VMATH_CALL = re.compile(r"\b_v[a-z0-9]+\(")  # a call of a vmath helper (see source_math's ``_v``) in kernel source


class Part:
    """One kernel's calling convention inside a generated function: loop extents (``dims``: the
    axes whose extent is an argument; short inner ones are literals), input arrays (as (slot,
    broadcast pattern): the array is passed without its broadcast axes), scalars (by slot;
    ``late[k]``: passed as a one-element array because an earlier loop of the same function makes
    it), stored slots, reductions (their accumulator arrays, passed without their reduced axes),
    and ``guard``: a last one-element bool array set when an argument left the range of a guarded
    primitive. ``fresh[k]``: the kernel writes all of accumulator k itself. ``padded``: input
    array position -> whether its rows are shifted, for arrays read through a window (a slice,
    or an unslice: zero outside the window); ``shifted``: some array (passed or local) is read at
    other rows than the loop's, so the loop cannot run in chunks of rows. Stores the function
    keeps as local scratch are in neither ``stores`` nor ``arrays``. ``bounds``: None, or the
    int64 array of window starts and stops passed last."""

    __slots__ = (
        "dims",
        "arrays",
        "scalars",
        "late",
        "stores",
        "reductions",
        "guard",
        "fresh",
        "padded",
        "shifted",
        "bounds",
    )

    def __init__(
        self, dims, arrays, scalars, late, stores, reductions, guard, fresh, padded=None, shifted=False, bounds=None
    ):
        self.dims, self.late = dims, late
        self.arrays, self.scalars, self.stores, self.reductions = arrays, scalars, stores, reductions
        self.guard, self.fresh, self.padded, self.shifted = guard, fresh, padded or {}, shifted
        self.bounds = bounds

    @property
    def rows(self):
        """Per input array: indexed by the outermost loop variable (else read at row 0 only; a
        padded array whose rows are shifted is neither: see ``shifted``)."""
        return [not pattern[0] and not self.padded.get(k) for k, (_, pattern) in enumerate(self.arrays)]

    @property
    def whole(self):
        """Per input array: read only at the loop's own index (no broadcast axis, no padding)."""
        return [not any(pattern) and k not in self.padded for k, (_, pattern) in enumerate(self.arrays)]


class Source:
    """Generated text of one function, the ``Part`` of each kernel it runs, in order, and which
    of their arguments it takes (``keep``)."""

    __slots__ = ("text", "parts", "keep")

    def __init__(self, text, parts, keep=None):
        # ``keep``: which of the loops' arguments (in their order) the function takes, where two
        # loops share one (``program``); None: all
        self.text, self.parts, self.keep = text, parts, keep


# Inner loop extents up to this are written into the kernel as literals (and unrolled by LLVM):
# a (N, N, 3) loop of coordinates runs twice as fast. The kernel is then specific to that extent;
# outer extents (batch sizes) never are.
SMALL_DIM = 4


@dataclasses.dataclass
class LoopCopy:
    """One copy of the element in a loop nest (one per index of an unrolled short innermost
    extent, else the only one): its loop indices, the suffix of its local names, the expression
    of each slot it defines, and the lines it adds to the body and to each loop's head (``pre``)
    and tail (``post``): d -> lines run inside loop d, before or after loop d + 1 (d = -1: outside
    every loop)."""

    idx: list
    tag: str
    bare: dict = dataclasses.field(default_factory=dict)  # loop index -> its unsigned name (``render_element``)
    names: dict = dataclasses.field(default_factory=dict)
    pre: dict = dataclasses.field(default_factory=dict)
    post: dict = dataclasses.field(default_factory=dict)
    body: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class LoopState:
    """What the passes rendering one kernel's loop nest share (see ``LOOP_PASSES``). Every name
    is prefixed with ``p``; ``late``: the scalars an earlier loop of the function makes;
    ``scratch``: stores the function allocates itself; ``bound``: slot -> the local array an
    earlier loop of the function stored it in (read from there, not passed). The nest's own lines
    (the range guard's) follow the copies' in ``pre``, ``post`` and ``body``; ``params``,
    ``lines`` and ``part`` are the result."""

    kernel: typing.Any
    tape: typing.Any
    p: str = ""
    late: typing.Any = frozenset()
    scratch: typing.Any = frozenset()
    bound: dict = dataclasses.field(default_factory=dict)
    shape: tuple = ()
    rank: int = 1
    unroll: int = 0  # the extent of the unrolled innermost axis (0: none)
    loop_dims: int = 1
    dims: list = dataclasses.field(default_factory=list)  # loops whose extent is an argument
    copies: list = dataclasses.field(default_factory=list)
    # a loop over the rows where every read testing the row index reads without a condition
    # (``element.rows_inside``): (its reads, the starts and stops of its range), and its copies
    inside: typing.Any = None
    inner: list = dataclasses.field(default_factory=list)
    arrays: list = dataclasses.field(default_factory=list)
    scalars: list = dataclasses.field(default_factory=list)
    bounds: dict = dataclasses.field(default_factory=dict)
    guards: list = dataclasses.field(default_factory=list)  # arguments of guarded primitives
    fresh: list = dataclasses.field(default_factory=list)  # accumulator arrays the kernel overwrites whole
    pre: dict = dataclasses.field(default_factory=dict)
    post: dict = dataclasses.field(default_factory=dict)
    body: list = dataclasses.field(default_factory=list)
    params: list = dataclasses.field(default_factory=list)
    lines: list = dataclasses.field(default_factory=list)
    part: typing.Any = None
    # rows in blocks (``program``): the nest runs rows ``blk0`` to ``blk1`` of a block loop around
    # it and the loops beside it, and its lines are ``nest``, not in ``lines``
    block: bool = False
    descending: bool = False  # the blocks run from the last row down, and so does each nest in them
    # the names of the first and the last but one row the nest runs in a block (a lead loop's reach
    # beyond the block, ``blocking.Run``)
    block_lo: str = "blk0"
    block_hi: str = "blk1"
    nest: list = dataclasses.field(default_factory=list)
    tail: list = dataclasses.field(default_factory=list)  # lines after the block loop (a range guard's flag)
    # slots kept in a buffer of a block's rows (``program``) -> the name of the row at its start,
    # and the (plus, minus) window bounds whose difference is how far a read of one goes
    held: dict = dataclasses.field(default_factory=dict)
    halo: list = dataclasses.field(default_factory=list)


def choose_nest(state):
    """One loop per axis; a short innermost extent (xyz coordinates) is unrolled instead: its
    copies of the element become straight-line code, and a reduction along another axis gets one
    local per copy. Where reads test the row index (a concatenation along the rows, an unslice
    with a window along them), the rows where every test holds get a second nest of copies that
    read without the tests (``element.rows_inside``)."""
    state.rank = max(1, len(state.kernel.shape))
    state.shape = state.kernel.shape or (1,)
    state.unroll = state.shape[-1] if state.rank > 1 and state.shape[-1] <= SMALL_DIM else 0
    state.loop_dims = state.rank - 1 if state.unroll else state.rank
    state.dims = [d for d in range(state.loop_dims) if d == 0 or state.shape[d] > SMALL_DIM]  # extents not in the text
    state.fresh = [True] * len(state.kernel.reductions)
    state.pre = {d: [] for d in range(-1, state.rank)}
    state.post = {d: [] for d in range(-1, state.rank)}
    for copy in range(max(state.unroll, 1)):
        idx = [f"{state.p}i{d}" for d in range(state.loop_dims)] + ([str(copy)] if state.unroll else [])
        tag = f"_{copy}" if state.unroll else ""
        pre = {d: [] for d in range(-1, state.rank)}
        state.copies.append(LoopCopy(idx, tag, pre=pre, post={d: [] for d in range(-1, state.rank)}))
    slots, starts, stops = rows_inside(state.kernel, state.bounds, state.p)
    if slots:
        state.inside = (frozenset(slots), starts, stops)
        for c in state.copies:
            bare = {c.idx[0]: f"{state.p}u0"}
            state.inner.append(
                LoopCopy(c.idx, c.tag, bare, pre={d: [] for d in state.pre}, post={d: [] for d in state.pre})
            )


def render_elements(state):
    """Each copy's element: reads (those ignoring the inner indices hoisted into the outer loops'
    heads), instructions and stores (``render_element``); again for the loop over the rows
    inside every row test, where those reads have no condition."""
    for c in state.copies + state.inner:
        outer = [c.pre[d] for d in range(state.loop_dims)]
        c.names = render_element(
            state.kernel,
            state.tape,
            c.idx,
            SourceMath,
            state.arrays,
            state.scalars,
            c.body,
            state.p,
            c.tag,
            state.bounds,
            outer,
            state.inside[0] if c in state.inner else frozenset(),
            c.bare,
            state.held,
            state.halo,
        )


def _reduction_line(ins, acc, x, extreme, nan):
    """The body line adding the term ``x`` into the accumulator ``acc`` (``{ind}``: the body's
    indentation, for a line that continues on the next)."""
    if ins.prim == "sum":
        return f"{acc} += {x}"
    if ins.prim == "prod":
        return f"{acc} *= {x}"
    if extreme:
        return f"{acc} = {'_fmax' if ins.prim == 'amax' else '_fmin'}({acc}, {x})\n{{ind}}{nan} |= {x} != {x}"
    if ins.prim == "amax":
        return f"if {x} > {acc} or {x} != {x}:\n{{ind}}    {acc} = {x}"
    return f"if {x} < {acc} or {x} != {x}:\n{{ind}}    {acc} = {x}"


def _accumulate(state, n, c, k, ins):
    """Copy ``c`` (the ``n``-th) of the element adds into reduction ``k``'s accumulator: a local
    started in the head and written back in the tail of the deepest loop its index depends on, or
    (innermost) the accumulator array itself."""
    p, dtype, axes = state.p, state.tape.dtypes[ins.out], ins.params["axes"]
    # the accumulator arrives without its reduced axes (a full reduction's is 0-d)
    ix = ", ".join(c.bare.get(c.idx[d], c.idx[d]) for d in range(len(state.kernel.shape)) if d not in axes) or "()"
    x = c.names[ins.args[0]].text
    depth = max([d for d in range(state.loop_dims) if d not in axes and d < len(state.kernel.shape)], default=-1)
    across = state.unroll and state.rank - 1 in axes  # the unrolled copies add into one local
    acc, nan = f"{p}c{k}[{ix}]", None
    local = depth < state.loop_dims - 1 or across
    # a float max/min in a local: LLVM's maxnum/minnum, which it vectorises (5x on a vector), with
    # NaN counted on the side (maxnum would skip it; NumPy propagates it)
    extreme = local and ins.prim in ("amax", "amin") and dtype[0] == "f"
    if local:
        acc = f"{p}acc{k}" + (c.tag if state.unroll and not across else "")
        nan = f"{p}nan{k}" + (c.tag if state.unroll and not across else "")
        whole = all(d > depth for d in axes)  # the local sees every term of its element
        state.fresh[k] = state.fresh[k] and whole
        if n == 0 or not across:
            start = typed(identity(ins.prim, dtype), dtype) if whole else f"{p}c{k}[{ix}]"
            c.pre[depth].append(f"{acc} = {start}")
            if extreme:
                c.pre[depth].append(f"{nan} = {'False' if whole else f'{start} != {start}'}")
                c.post[depth].append(f"{p}c{k}[{ix}] = np.nan if {nan} else {acc}")
            else:
                c.post[depth].append(f"{p}c{k}[{ix}] = {acc}")
    else:
        state.fresh[k] = False
    c.body.append(f"{_reduction_line(ins, acc, x, extreme, nan)}  # %{ins.out} = {format_instr(ins)}")


def accumulate_reductions(state):
    """Each reduction accumulates in a local inside the deepest loop its accumulator index depends
    on (outside the whole nest for a full reduction): a load and store per element (the arrays
    might alias) would keep LLVM from vectorising and from keeping the sum in a register. Such an
    accumulator starts from the reduction's identity, so its array needs no initial fill."""
    for copies in (state.copies, state.inner):
        for n, c in enumerate(copies):
            for k, ins in enumerate(state.kernel.reductions):
                _accumulate(state, n, c, k, ins)


def guard_ranges(state):
    """Arguments of guarded primitives out of ``TRIG_LIMIT`` are counted by one line (one
    reduction) per element, and the count sets the kernel's flag."""
    for c in state.copies:
        for ins in state.kernel.body:
            if ins.prim in GUARDED and c.names[ins.args[0]].text not in state.guards:
                state.guards.append(c.names[ins.args[0]].text)
    if state.guards:
        p = state.p
        test = " | ".join(f"(abs({g}) > {TRIG_LIMIT!r})" for g in state.guards)
        state.body.append(f"{p}bad += {test}  # range guard of sin/cos")
        state.pre[-1].append(f"{p}bad = 0")
        state.post[-1].append(f"{p}flag[0] = {p}bad > 0")


def bind_parameters(state):
    """The function's parameters for this kernel, and the lines binding its locals before the
    nest: scratch arrays, arrays stored by an earlier loop, window bounds, late scalars."""
    p, kernel, bound = state.p, state.kernel, state.bound
    state.params = (
        [f"{p}n{d}" for d in state.dims]
        + [f"{p}a{k}" for k, (a, _) in enumerate(state.arrays) if a not in bound]
        + [f"{p}S{k}" if sc in state.late else f"{p}s{k}" for k, sc in enumerate(state.scalars)]
        + [f"{p}o{k}" for k, st in enumerate(kernel.stores) if st not in state.scratch]
        + [f"{p}c{k}" for k in range(len(kernel.reductions))]
        + ([f"{p}flag"] if state.guards else [])
        + ([f"{p}w"] if state.bounds else [])
    )
    extents = "".join(f"{p}n{d}, " if d in state.dims else f"{state.shape[d]}, " for d in range(state.rank))
    out = [
        f"{p}o{k} = np.empty(({extents}), {NP_TYPE[state.tape.dtypes[st]]})  # scratch %{st}"
        for k, st in enumerate(kernel.stores)
        if st in state.scratch and st not in state.held
    ]
    out += [f"{p}a{k} = {bound[a]}  # %{a}, stored above" for k, (a, _) in enumerate(state.arrays) if a in bound]
    out += [
        f"{name} = {p}w[{k}]  # "
        + (f"{'start' if end == 0 else 'stop'} of %{slot}'s window" if end in (0, 1) else f"{end} of %{slot}")
        + f" on axis {axis}"
        for k, ((slot, axis, end), (name, _)) in enumerate(state.bounds.items())
    ]
    # a scalar made by an earlier loop of the same function arrives as a one-element array, read
    # once that loop has run; any other is a plain argument
    out += [f"{p}s{k} = {p}S{k}[0]" for k, sc in enumerate(state.scalars) if sc in state.late]
    state.lines = out


def _nest(state, copies, rows, head, ind):
    """One loop nest at indentation ``ind``, its outer loop over ``range(rows)`` with ``head``
    first in its body: each loop's head lines, the loop, the body (``pass`` if empty), then each
    loop's tail lines, the copies' lines before the nest's own (lines outside every loop are the
    caller's)."""
    p, shape, out = state.p, state.shape, []
    pre = {d: [ln for c in copies for ln in c.pre[d]] + state.pre[d] for d in state.pre}
    post = {d: [ln for c in copies for ln in c.post[d]] + state.post[d] for d in state.post}
    body = [ln for c in copies for ln in c.body] + state.body
    for d in range(state.loop_dims):
        if d > 0:
            out += [ind + ln for ln in pre[d - 1]]
        if d == 0 and state.block:
            lo, hi = rows.split(", ") if ", " in rows else ("0", rows)
            b0, b1 = state.block_lo, state.block_hi
            if state.descending:  # every stream goes down, from block to block too: prefetched
                loop = f"range(min({hi}, {b1}) - 1, max({lo}, {b0}) - 1, -1)"
            else:
                whole = lo == "0" and hi == f"{p}n0"
                loop = f"range({b0}, {b1})" if whole else f"range(max({lo}, {b0}), min({hi}, {b1}))"
        elif d == 0:
            loop = f"range({rows})"
        elif shape[d] <= SMALL_DIM:
            loop = f"range({shape[d]})"  # a short extent LLVM unrolls
        else:
            loop = f"range({p}n{d})"
        out.append(f"{ind}for {p}i{d} in {loop}:")
        ind += "    "
        if d == 0:
            out += [ind + ln for ln in head]
    out += [ind + ln for ln in pre[state.loop_dims - 1]]
    for ln in body:
        out.append(ind + ln.replace("{ind}", ind))
    if not body:
        out.append(ind + "pass")
    out += [ind + ln for ln in post[state.loop_dims - 1]]
    for d in range(state.loop_dims - 1, 0, -1):
        ind = ind[:-4]
        out += [ind + ln for ln in post[d - 1]]
    return out


def write_nest(state):
    """The loops' lines (``_nest``) between the lines outside every loop. With reads that test
    the row index (``state.inside``), the rows where each test holds run in a nest of their own
    without the tests, row indices unsigned, and the rows before and after in the plain nest."""
    p, out = state.p, state.lines
    out += [ln for c in state.copies for ln in c.pre[-1]] + state.pre[-1]
    nest = state.nest if state.block else out
    if state.inside is None:
        nest += _nest(state, state.copies, f"{p}n0", [], "")
    else:
        _, starts, stops = state.inside
        lo = f"max({', '.join(starts)})" if len(starts) > 1 else (starts or ["0"])[0]
        out.append(f"{p}lo = {lo}")
        hi = f"min({', '.join(stops)}, {p}n0)" if stops else f"{p}n0"
        out.append(f"{p}hi = {hi}")
        outside = [f"for {p}j0, {p}j1 in ((0, min({p}lo, {p}n0)), (max({p}lo, {p}hi), {p}n0)):  # rows outside"]
        outside += _nest(state, state.copies, f"{p}j0, {p}j1", [], "    ")
        if state.block:  # most blocks have no row outside: their tests cost more than the rows
            outside = [f"if {state.block_lo} < {p}lo or {state.block_hi} > {p}hi:"] + ["    " + ln for ln in outside]
        nest += outside
        head = [f"{p}u0 = np.uint64({p}i0)  # unsigned: Numba tests a signed index for negativity"]
        nest += _nest(state, state.inner, f"{p}lo, {p}hi", head, "")
    (state.tail if state.block else out).extend([ln for c in state.copies for ln in c.post[-1]] + state.post[-1])


def _windowed(kernel):
    """(source, read at shifted rows) of each array a kernel reads through a window: a slice's, an
    unslice's, or a concatenation's piece (along the rows, every piece is: it is read at the
    loop's row less its part's start)."""
    shape = kernel.shape or (1,)
    for r in kernel.reads.values():
        if r.kind in (ReadKind.WINDOW, ReadKind.PAD):
            yield r.src, bool(r.window) and tuple(r.window[0]) != (0, shape[0], 1)
        elif r.kind == ReadKind.CAT:
            for _, _, p in r.pieces:
                if p.kind == ReadKind.WINDOW:
                    yield p.src, r.axis == 0 or tuple(p.window[0]) != (0, shape[0], 1)
                elif p.kind == ReadKind.ARRAY:
                    yield p.src, r.axis == 0


def describe_part(state):
    """The kernel's calling convention (``Part``): which arrays it is passed, which of them are
    read through a window at shifted rows, its scalars, stores, accumulators, guard and bounds."""
    kernel, bound = state.kernel, state.bound
    windowed = {src for src, _ in _windowed(kernel)}
    shifted = {src for src, moved in _windowed(kernel) if moved}
    passed = [(a, pattern) for a, pattern in state.arrays if a not in bound]
    padded = {k: a in shifted for k, (a, pattern) in enumerate(passed) if a in windowed and not any(pattern)}
    state.part = Part(
        state.dims,
        passed,
        state.scalars,
        [sc in state.late for sc in state.scalars],
        [st for st in kernel.stores if st not in state.scratch],
        list(kernel.reductions),
        bool(state.guards),
        state.fresh,
        padded,
        bool(shifted),
        np.array([v for _, v in state.bounds.values()], np.int64) if state.bounds else None,
    )


LOOP_PASSES = [
    Pass(
        "choose_nest", "one loop per axis; a short innermost extent is unrolled into copies of the element", choose_nest
    ),
    Pass(
        "render_elements",
        "each copy's reads, instructions and stores (reads hoisted out where they can be)",
        render_elements,
    ),
    Pass(
        "accumulate_reductions",
        "each reduction adds into a local around the deepest loop its index uses",
        accumulate_reductions,
    ),
    Pass("guard_ranges", "sin/cos arguments beyond TRIG_LIMIT are counted and flagged", guard_ranges),
    Pass("bind_parameters", "the kernel's parameters and the locals bound before its nest", bind_parameters),
    Pass("write_nest", "the loops' lines: heads, body and tails at their indentation", write_nest),
    Pass("describe_part", "the kernel's calling convention (Part)", describe_part),
]


def _loops(kernel, tape, p, late, scratch=frozenset(), bound=None, block=None, held=None, bounds=("blk0", "blk1")):
    """The parameters, lines, ``Part``, (in blocks of rows) nest lines and halo of one kernel's
    loop nest (``LOOP_PASSES``; the arguments are ``LoopState``'s; ``block``: None, or whether
    the nest runs descending in its block; ``bounds``: the names of the first and the last but
    one row it runs in a block). The halo: how far from their own row its reads of held slots
    go, as (slot, signed expression of its window bounds: ``{p}w[k]``, function parameters,
    valid anywhere; positive above the row)."""
    state = LoopState(kernel, tape, p, late, scratch, bound or {}, block=block is not None, descending=bool(block))
    state.held, (state.block_lo, state.block_hi) = held or {}, bounds
    state = run_passes("loops", LOOP_PASSES, state)
    names = {name: f"{p}w[{k}]" for k, (name, _) in enumerate(state.bounds.values())}

    def distance(plus, minus):
        if plus and minus:
            return f"({names[plus]} - {names[minus]})"
        return names[plus] if plus else f"-{names[minus]}" if minus else "0"

    halo = {(src, distance(plus, minus)) for src, plus, minus in state.halo}
    return state.params, state.lines, state.part, (state.nest, state.tail), sorted(halo)


# Rows a run of loops in blocks (``blocks``) takes at a time: 2 KiB of each float64 array, so the
# dozen arrays the loops of GradBench ode's RK4 step stream stay in a 32 KiB L1 cache from one
# loop to the next (its gradient at n = 100,000, s = 100: 59-62 ms in blocks of 256 rows, 61-66
# of 512, 65-69 of 1,024).
BLOCK_ROWS = 256


def render(kernel, tape):
    """The source text of one fused kernel (see the module docstring)."""
    return program([kernel], tape)


# A value one loop stores and only later loops of the same function read is allocated by the
# function (Numba: tens of nanoseconds) instead of passed in (NumPy: a few hundred), up to this
# size; bigger ones come from the runtime's buffer pool, where they cost no page faults.
SCRATCH_MAX_BYTES = 1 << 15


def program(kernels, tape, late=frozenset(), outside=None):
    """One function running several kernels' loops in order (``late``: the slots its own loops
    make). One compile instead of one per kernel: Numba spends about 0.2 s on every function
    whatever its size. Kernel j's names carry the prefix ``k{j}_``. ``outside``: the slots read
    by anything but this function's loops (None: all); a small store no one outside reads is
    local scratch (see ``SCRATCH_MAX_BYTES``), and so is one a run of loops in blocks keeps a
    block at a time (``blocking.held``)."""
    block_runs, keep = settle(kernels, tape, outside)
    scratch = set(keep)
    if outside is not None:
        denied = set(outside)
        for kern in kernels:
            for r in kern.reads.values():  # a local array is read at the loop's index or through a window
                if r.kind == ReadKind.SCALAR or (
                    r.kind == ReadKind.ARRAY and (any(r.pattern) or tape.shapes[r.src] != kern.shape)
                ):
                    denied.add(r.src)
            for st in kern.stores:
                if (
                    st in scratch
                    or math.prod(kern.shape) * from_short(tape.dtypes[st]).itemsize > SCRATCH_MAX_BYTES
                    or (kern.shape or (1,)) != (tape.shapes[st] or (1,))
                ):
                    denied.add(st)  # stored twice (recomputed by a later loop), big, or reshaped
                scratch.add(st)
        scratch = (scratch - denied) | set(keep)
    params, lines, parts, bound = [], [], [], {}
    run_of = {j: r for r, run in enumerate(block_runs) for j in run.loops}
    home = {st: j for j, kern in enumerate(kernels) for st in kern.stores}
    # a lead's values are held from the lowest row it recomputes, the later loops' from the block's
    offsets = {
        st: f"off{r}" if home[st] not in block_runs[r].loops[: block_runs[r].lead] else f"offu{r}"
        for st, r in keep.items()
    }
    rendered, names = [], {}
    for j, kern in enumerate(kernels):
        p = f"k{j}_" if len(kernels) > 1 else ""
        run = block_runs[run_of[j]] if j in run_of else None
        leads = run is not None and j in run.loops[: run.lead]
        way = None if run is None else run.descending and not leads
        rows = (f"{p}b0", f"{p}b1") if leads else ("blk0", "blk1")
        rendered.append(_loops(kern, tape, p, late, scratch, bound, way, offsets, rows))
        for k, st in enumerate(kern.stores):
            if st in scratch:
                bound[st] = names[st] = f"{p}o{k}"
    keys = []
    for j, (ps, ls, part, _, _) in enumerate(rendered):
        params += ps
        keys += _argument_keys(j, part)
        r = run_of.get(j)
        run = None if r is None else block_runs[r]
        if run is not None and j == run.loops[0] and r in keep.values():
            # the buffers of what the run holds, before its loops' lines bind them
            halo = {k: rendered[k][4] for k in run.loops}
            lines += hold_lines(keep, r, run, halo, home, tape, names, BLOCK_ROWS)
        if len(kernels) > 1:
            lines.append(f"# loop {j}" + (" (its rows in the blocks below)" if run is not None else ""))
        lines += ls
        parts.append(part)
        if run is not None and j == run.loops[-1]:  # the block loop through all of them
            n, first = f"k{run.loops[0]}_n0", run.loops[0]
            if run.descending:
                what = f"loops {first}-{j}, a block of rows at a time, the last first"
                lines.append(f"for blk in range(({n} - 1) // {BLOCK_ROWS}, -1, -1):  # {what}")
                lines.append(f"    blk0 = blk * {BLOCK_ROWS}")
            else:
                lines.append(
                    f"for blk0 in range(0, {n}, {BLOCK_ROWS}):  # loops {first}-{j}, a block of rows at a time"
                )
            lines.append(f"    blk1 = min(blk0 + {BLOCK_ROWS}, {n})")
            if r in keep.values():
                lines += ["    " + ln for ln in block_head(keep, r, run, kernels, BLOCK_ROWS)]
            lines += ["\n".join("    " + x for x in ln.split("\n")) for k in run.loops for ln in rendered[k][3][0]]
            lines += [ln for k in run.loops for ln in rendered[k][3][1]]
    body = ["    " + ln for text in lines for ln in text.split("\n")]
    if any(_VMATH_CALL.search(ln) for ln in body):
        body.insert(0, "    _wide_vectors()  # vmath inside: 512-bit vectors where the CPU has them")
    keep, first = [], {}
    for k, key in enumerate(keys):
        if key not in first:
            first[key] = k
            keep.append(k)
        else:  # passed once: every loop's name for it bound to the first's
            body.insert(0, f"    {params[k]} = {params[first[key]]}  # the same argument")
    out = [f"def kernel({', '.join(params[k] for k in keep)}):"] + body
    text = "import math\n\nimport numpy as np\n\n\n" + "\n".join(out) + "\n"
    return Source(text, parts, None if len(keep) == len(params) else tuple(keep))


def _argument_keys(j, part):
    """What each argument of loop ``j`` (``part``, in ``bind_parameters``' order) is, so that
    an argument two loops of one function share is passed once: an input array (by slot,
    broadcast pattern and whether chunks of rows slice it) or a scalar (by slot and how it is
    passed); anything else is the loop's own. Numba unboxes every array argument of every call
    (0.15-0.2 µs each): GradBench ode's reverse RK4 step passed 60 arrays to its eight loops,
    22 of them distinct."""
    own = lambda what, n: [(what, j, k) for k in range(n)]  # noqa: E731
    rows = part.rows
    return (
        own("n", len(part.dims))
        + [("a", a, tuple(pattern), rows[k]) for k, (a, pattern) in enumerate(part.arrays)]
        + [("s", sc, late) for sc, late in zip(part.scalars, part.late)]
        + own("o", len(part.stores) + len(part.reductions) + part.guard + (part.bounds is not None))
    )
