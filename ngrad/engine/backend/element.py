"""One element of a fused kernel as source lines: its reads, its instructions against a math
namespace, its stores; shared by the CPU loop nests (codegen.py) and the CUDA kernels
(cuda_source.py).

Contract: ``render_element(kernel, tape, idx, math_, arrays, scalars, body, ...)`` runs
``ELEMENT_PASSES`` over an ``ElementState``: it appends the element's lines to ``body`` (reads that
ignore the inner loop indices go to the outer loops' lists, see ``render_element``), appends the
kernel's array and scalar parameters to ``arrays`` and ``scalars`` in first-read order, and
returns the expression of every slot it defines. Every line carries the tape instruction it came
from as a comment.
"""

import dataclasses
import typing

from ..ir.prims import PRIMS
from ..ir.tape import format_instr
from .fuse import ReadKind
from .passes import Pass, run_passes
from .source_math import COMPLEX, Expr, typed

__all__ = [
    "render_element",
    "ElementState",
    "ELEMENT_PASSES",
    "read_operands",
    "pair_sincos",
    "compute_instrs",
    "store_slots",
    "rows_inside",
    "widest",
]


def _pow_literal(x, value):
    """``x ** c`` for a literal ``c``: multiplications and sqrt instead of a pow call."""
    t = x.text
    if value == 2:
        return f"({t} * {t})"
    if value == 3:
        return f"({t} * {t} * {t})"
    if value == 1:
        return t
    if value in (0.5, -0.5) and x.dtype in COMPLEX:  # math.sqrt is real only: the pow call
        return None
    if value == 0.5:
        return f"math.sqrt({t})"
    if value == -1:
        return f"({typed(1, x.dtype)} / {t})"
    if value == -0.5:  # PyTorch's: a reciprocal square root (-inf at -0.0, where C's pow gives inf)
        return f"({typed(1, x.dtype)} / math.sqrt({t}))"
    return None


def _unsigned(index):
    return f"np.uint64({index})"


def _held_row(state, src, row, plus=None, minus=None):
    """The position of row ``row`` (a signed expression) of a slot kept in a block buffer, and
    how far from the loop's own row it is (``row`` less the row: ``plus - minus``, window bounds'
    names or None, into ``state.halo``): the buffer starts at the row its offset names."""
    state.halo.append((src, plus, minus))
    return _unsigned(f"{row} - {state.held[src]}")


def _bound(bounds, p, key, value):
    """The name of the argument holding a window's start or stop (``key``: (slot, axis, end))."""
    return bounds.setdefault(key, (f"{p}w{len(bounds)}", value))[0]


def _window_index(r, slot, idx, shape, bounds, p, rows_inside=False, bare=None):
    """The index expressions of a window read ``r`` (a slice: the source at start + step * i; an
    unslice: at (i - start) / step) at loop indices ``idx``, and the conditions under which an
    unslice's element is inside its window (zero outside; none along the rows where the loop
    runs only inside it, ``rows_inside``). Starts and stops are arguments (``bounds``: key ->
    (name, value)), so one kernel serves every size (x[1:] and x[:-1] at n=100 and n=1000);
    steps are literals. A start of 0 or a stop at the end is left out, so the text depends on
    sizes only where a window is whole at one size. Indices are unsigned: Numba checks a signed
    one for negativity, which stops LLVM from vectorising the loop (``bare``: the unsigned name
    of a loop index, where it has one)."""

    def bound(axis, end, value):
        return _bound(bounds, p, (slot, axis, end), value)

    bare = bare or {}
    ix, inside = [], []
    for d, (i, (a, b, c), n) in enumerate(zip(idx, r.window, shape)):
        start = bound(d, 0, a) if a else None
        if r.kind == ReadKind.WINDOW:
            at = bare.get(i, i) if c == 1 else f"{i} * {c}"
            ix.append(_unsigned(f"{start} + {i}" if c == 1 else f"{start} + {at}") if a else at)
            continue
        ix.append(_unsigned(f"{i} - {start}") if a else bare.get(i, i) if c == 1 else i)
        if d == 0 and rows_inside and c == 1:
            continue
        inside += ([f"{i} >= {start}"] if a else []) + ([f"{i} < {bound(d, 1, b)}"] if b < n else [])
        if c != 1:
            ix[-1] = f"{ix[-1]} // {c}"
            inside.append(f"({i} - {start or 0}) % {c} == 0")
    return ix, inside


@dataclasses.dataclass
class ElementState:
    """What the passes rendering one element share (see ``render_element`` for the arguments).
    ``names``: slot -> the expression of its value; ``level``: local name -> the deepest loop its
    value depends on (-1: none); ``depth_of``: loop index -> its loop (an unrolled copy's literal
    index has none); ``pair_of``: out slot -> the (sin, cos) instructions computed together;
    ``inside``: the reads whose conditions along the rows always hold (see ``rows_inside``);
    ``bare``: loop index -> its unsigned name, used where the index is used alone; ``held``:
    slot -> the name of the row at position 0 of the block buffer it is kept in (see
    ``render_element``), and ``halo`` collects how far from their own row the reads of those
    slots go."""

    kernel: typing.Any
    tape: typing.Any
    idx: list
    math_: typing.Any
    arrays: list
    scalars: list
    body: list
    p: str = ""
    tag: str = ""
    bounds: typing.Any = None
    outer: typing.Any = None
    inside: typing.Any = frozenset()
    bare: dict = dataclasses.field(default_factory=dict)
    held: dict = dataclasses.field(default_factory=dict)
    halo: list = dataclasses.field(default_factory=list)
    names: dict = dataclasses.field(default_factory=dict)
    level: dict = dataclasses.field(default_factory=dict)
    depth_of: dict = dataclasses.field(default_factory=dict)
    pair_of: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        n = len(self.idx) if self.outer is None else len(self.outer)
        self.depth_of = {i: d for d, i in enumerate(self.idx) if d < n}


def _emit(state, line, name, deps):
    """Add ``line`` defining ``name`` from values of loops ``deps``: into the body, or into the
    list of the deepest outer loop it depends on (see ``render_element``)."""
    d = max(deps, default=-1)
    state.level[name] = d
    if state.outer is None or d >= len(state.outer) - 1:
        state.body.append(line)
    else:
        state.outer[max(d, 0)].append(line)  # never before every loop: a zero extent runs nothing


def _array(state, src, pattern):
    """The position of ``src`` read with broadcast ``pattern`` among the kernel's array parameters."""
    if (src, pattern) not in state.arrays:
        state.arrays.append((src, pattern))
    return state.arrays.index((src, pattern))


def _read_window(state, slot, r, dtype):
    """A slice's or unslice's load (zero outside an unslice's window), at every loop index."""
    src = r.src
    k = _array(state, src, tuple(False for _ in state.tape.shapes[src]) or (False,))
    ix, inside = _window_index(
        r, slot, state.idx, state.kernel.shape, state.bounds, state.p, slot in state.inside, state.bare
    )
    if src in state.held:  # a step of 1 along the rows (``codegen``): the row is i + start or i - start
        a = r.window[0][0]
        start = _bound(state.bounds, state.p, (slot, 0, 0), a) if a else None
        i = state.idx[0]
        window = r.kind == ReadKind.WINDOW
        row = i if start is None else f"{start} + {i}" if window else f"{i} - {start}"
        ix[0] = _held_row(state, src, row, *((start, None) if window else (None, start)))
    v = f"{state.p}r{slot}{state.tag}"
    load = f"{state.p}a{k}[{', '.join(ix) or '0'}]"
    if inside:
        load += f" if {' and '.join(inside)} else {typed(0, dtype)}"
    what = "slice" if r.kind == ReadKind.WINDOW else "unslice, zero outside"
    if slot in state.inside:
        what = "unslice, rows inside its window"
    _emit(state, f"{v} = {load}  # read %{src} as %{slot} = {what}", v, [state.depth_of.get(i, -1) for i in state.idx])
    return Expr(v, dtype)


def widest(r):
    """The piece of a concatenation read ``r`` with the longest part of the axis (the last of
    equals): where a loop runs unconditionally (``rows_inside``)."""
    lengths = [b - a for a, b, _ in r.pieces]
    return max(range(len(lengths)), key=lambda k: (lengths[k], k))


def rows_inside(kernel, bounds, p=""):
    """The reads of ``kernel`` that test the row index (axis 0: a concatenation along it, an
    unslice with a window along it of step 1), and the names of the row range where every such
    test holds, as (slots, starts, stops) (``bounds`` as in ``render_element``; the range is
    from the latest start, 0 if none, to the earliest stop, the extent if none). A loop over
    that range reads each without a condition: LLVM vectorises a conditional load with masked
    loads, 3x slower (GradBench ode's stage with four concatenations: 183 -> 58 us at 1e5)."""
    slots, starts, stops = [], [], []
    for slot, r in sorted(kernel.reads.items()):
        if r.kind == ReadKind.CAT and r.axis == 0:
            k = widest(r)
            a, b, _ = r.pieces[k]
            if a:
                starts.append(_bound(bounds, p, (slot, 0, f"start of piece {k}"), a))
            if k + 1 < len(r.pieces):
                stops.append(_bound(bounds, p, (slot, 0, f"start of piece {k + 1}"), b))
        elif r.kind == ReadKind.PAD and r.window[0][2] == 1 and tuple(r.window[0]) != (0, kernel.shape[0], 1):
            a, b, _ = r.window[0]
            if a > 0:  # a negative start (an unslice of a slice, ``fuse``) holds from row 0
                starts.append(_bound(bounds, p, (slot, 0, 0), a))
            if b < kernel.shape[0]:
                stops.append(_bound(bounds, p, (slot, 0, 1), b))
        else:
            continue
        slots.append(slot)
    return slots, starts, stops


def _piece_load(state, slot, k, piece, at, dtype, start=None):
    """The load of piece ``k`` of a concatenation at its index ``at`` along the axis (the loop's
    index elsewhere; ``start``: the name of the piece's start, if not 0): a literal, or its
    array (a window's source through the window)."""
    if piece.kind == ReadKind.LITERAL:
        return typed(piece.value, dtype)
    axis = state.kernel.reads[slot].axis
    if piece.src in state.held:  # along the rows, through a window of step 1 (``codegen``)
        a = piece.window[0][0] if piece.kind == ReadKind.WINDOW else 0
        begin = _bound(state.bounds, state.p, (slot, 0, f"start of piece {k} window"), a) if a else None
        row = at if begin is None else f"{begin} + {at}"
        n = _array(state, piece.src, (False,))
        return f"{state.p}a{n}[{_held_row(state, piece.src, row, begin, start)}]"
    ix = []
    for d, i in enumerate(state.idx):
        i = at if d == axis else i
        if piece.kind == ReadKind.WINDOW:
            a, _, c = piece.window[d]
            i = i if c == 1 else f"({i}) * {c}"
            if a:
                i = f"{_bound(state.bounds, state.p, (slot, d, f'start of piece {k} window'), a)} + {i}"
        ix.append(state.bare.get(i, i) if i.isidentifier() or i.isdigit() else _unsigned(i))  # see _window_index
    n = _array(state, piece.src, tuple(False for _ in state.tape.shapes[piece.src]) or (False,))
    return f"{state.p}a{n}[{', '.join(ix)}]"


def _read_cat(state, slot, r, dtype):
    """A concatenation's load: the piece whose part of the axis holds the loop's index, read at
    that index less the part's start (a chain of conditionals; starts are arguments, as window
    bounds are)."""
    i = state.idx[r.axis]
    starts = [
        _bound(state.bounds, state.p, (slot, r.axis, f"start of piece {k}"), a) if a else None
        for k, (a, _, _) in enumerate(r.pieces)
    ]
    loads = [
        _piece_load(state, slot, k, piece, f"{i} - {start}" if start else i, dtype, start)
        for k, (start, (_, _, piece)) in enumerate(zip(starts, r.pieces))
    ]
    if slot in state.inside:  # the loop runs inside the widest piece only
        load = loads[widest(r)]
    else:
        load = loads[-1]
        for k in range(len(loads) - 2, -1, -1):
            load = f"{loads[k]} if {i} < {starts[k + 1]} else {load}"
    v = f"{state.p}r{slot}{state.tag}"
    what = ", ".join(
        "literal" if p.src is None else f"%{p.src}" + (" through a window" if p.kind == ReadKind.WINDOW else "")
        for _, _, p in r.pieces
    )
    _emit(state, f"{v} = {load}  # %{slot} = cat of {what}", v, [state.depth_of.get(i, -1) for i in state.idx])
    return Expr(v, dtype)


def _read_array(state, slot, r, dtype):
    """An array's load at the loop indices of its axes that are not broadcast."""
    src, pattern = r.src, tuple(r.pattern) or (False,)
    k = _array(state, src, pattern)
    # the array arrives without its broadcast (extent 1) axes: fewer indices to lower
    used = [state.idx[d] for d in range(len(pattern)) if not pattern[d]]
    v = f"{state.p}r{slot}{state.tag}"
    at = ", ".join(state.bare.get(i, i) for i in used) or "0"
    if src in state.held:
        at = _held_row(state, src, state.idx[0])
    _emit(
        state,
        f"{v} = {state.p}a{k}[{at}]  # read %{src}" + (" (broadcast)" if any(pattern) else ""),
        v,
        [state.depth_of.get(i, -1) for i in used],
    )
    return Expr(v, dtype)


def read_operands(state):
    """Each read of the kernel becomes a literal, a scalar parameter, or a load from an array
    parameter, in slot order."""
    for slot in sorted(state.kernel.reads):
        r = state.kernel.reads[slot]
        dtype = state.tape.dtypes[slot]
        if r.kind == ReadKind.LITERAL:
            state.names[slot] = Expr(typed(r.value, dtype), dtype)
        elif r.kind == ReadKind.SCALAR:
            if r.src not in state.scalars:
                state.scalars.append(r.src)
            state.names[slot] = Expr(f"{state.p}s{state.scalars.index(r.src)}", dtype)
        elif r.kind in (ReadKind.WINDOW, ReadKind.PAD):
            state.names[slot] = _read_window(state, slot, r, dtype)
        elif r.kind == ReadKind.CAT:
            state.names[slot] = _read_cat(state, slot, r, dtype)
        else:
            state.names[slot] = _read_array(state, slot, r, dtype)


def pair_sincos(state):
    """sin and cos of one value share their range reduction when the math namespace has
    ``sincos`` (about 13% of the element-wise chain's value+gradient kernel in float64 on an H100)."""
    if getattr(state.math_, "sincos", None) is None:
        return
    first = {}
    for ins in state.kernel.body:
        if ins.prim in ("sin", "cos") and state.tape.dtypes[ins.out] not in COMPLEX:  # sincos is real
            first.setdefault((ins.prim, ins.args[0]), ins)
    for (prim, a), sin in first.items():
        cos = first.get(("cos", a))
        if prim == "sin" and cos is not None:
            state.pair_of[sin.out] = state.pair_of[cos.out] = (sin, cos)


def _compute_pair(state, ins, args, pair):
    """The line of one instruction of a sin/cos pair: the pair's sincos call, or, for the second
    of the two, a comment naming the value the first made."""
    p, tag = state.p, state.tag
    v = f"{p}v{ins.out}{tag}"
    sin, cos = pair
    deps = [state.level.get(a.text, -1) for a in args]
    if (cos if ins is sin else sin).out in state.names:
        _emit(state, f"# %{ins.out} = {format_instr(ins)}: {v} was made with it", v, deps)
    else:
        _emit(
            state,
            f"{p}v{sin.out}{tag}, {p}v{cos.out}{tag} = {state.math_.sincos(args[0]).text}"
            f"  # %{sin.out} = {format_instr(sin)}; %{cos.out} = {format_instr(cos)}",
            v,
            deps,
        )
    return Expr(v, state.tape.dtypes[ins.out])


def compute_instrs(state):
    """Each instruction of the kernel's body becomes one line: its forward row against the math
    namespace, a literal power as products, a no-op movement as its operand."""
    for ins in state.kernel.body:
        args = [state.names[a] for a in ins.args]
        pair = state.pair_of.get(ins.out)
        if pair is not None:
            state.names[ins.out] = _compute_pair(state, ins, args, pair)
            continue
        text = None
        exponent = state.kernel.reads.get(ins.args[1]) if ins.prim == "pow" else None
        if exponent is not None and exponent.kind == ReadKind.LITERAL:
            text = _pow_literal(args[0], exponent.value)
        if ins.prim in ("reshape", "expand"):  # fusion only puts no-op movements in a loop
            text = args[0].text
        if text is None:
            text = PRIMS[ins.prim].fwd(state.math_, *args, **ins.params).text
        v = f"{state.p}v{ins.out}{state.tag}"
        _emit(
            state, f"{v} = {text}  # %{ins.out} = {format_instr(ins)}", v, [state.level.get(a.text, -1) for a in args]
        )
        state.names[ins.out] = Expr(v, state.tape.dtypes[ins.out])


def store_slots(state):
    """Each stored slot is written into its output array at the element's indices."""
    for k, slot in enumerate(state.kernel.stores):
        at = ", ".join(state.bare.get(i, i) for i in state.idx)
        if slot in state.held:
            at = _unsigned(f"{state.idx[0]} - {state.held[slot]}")
        state.body.append(f"{state.p}o{k}[{at}] = {state.names[slot].text}  # store %{slot}")


ELEMENT_PASSES = [
    Pass(
        "read_operands",
        "each read becomes a literal, a scalar or an array load (hoisted where it can be)",
        read_operands,
    ),
    Pass("pair_sincos", "sin and cos of one value share one sincos call where the target has it", pair_sincos),
    Pass("compute_instrs", "each body instruction becomes one line against the math namespace", compute_instrs),
    Pass("store_slots", "each stored slot is written at the element's indices", store_slots),
]


def render_element(
    kernel,
    tape,
    idx,
    math_,
    arrays,
    scalars,
    body,
    p="",
    tag="",
    bounds=None,
    outer=None,
    inside=frozenset(),
    bare=None,
    held=None,
    halo=None,
):
    """Append to ``body`` the lines computing one element of ``kernel`` at loop indices ``idx``
    (reads, its instructions against the math namespace ``math_``, stores) by running
    ``ELEMENT_PASSES``; return the expression of every slot it defines. ``arrays`` and
    ``scalars`` collect the kernel's parameters; ``bounds`` (key -> (name, value)) the window
    starts and stops, which are arguments too.

    ``outer``: a loop nest's lists of lines run inside loop d before loop d + 1 starts (d = 0,
    1, ...; the last list is the innermost body's head). A read that does not use the inner
    indices (a broadcast operand), and arithmetic on such reads only, goes into the list of the
    deepest loop it depends on: the stores of the inner loop might alias any array as far as
    LLVM knows, so it would not hoist those loads itself (gmm's (n, k, d) loops reading (n, k)
    and (k, d) operands: 0.70 -> 0.50 ms measured).

    ``inside``: reads (slots) whose conditions along the rows (axis 0) always hold, in a loop that
    runs only where each reads one piece of a concatenation or inside an unslice's window (see
    ``rows_inside``); ``bare``: loop index -> an unsigned name of it, for indices used alone.

    ``held``: slot -> the name of an offset, for the slots a run of loops in blocks keeps in a
    buffer of a block's rows (``codegen``): each is stored and read at its row less the offset,
    and ``halo`` (a list) gets, for every read of one, the window bounds' names (plus, minus)
    whose difference is how far from the loop's own row it reads."""
    state = ElementState(kernel, tape, idx, math_, arrays, scalars, body, p, tag, bounds, outer, inside, bare or {})
    state.held = held or {}
    state.halo = halo if halo is not None else []
    return run_passes("element", ELEMENT_PASSES, state, level=4).names  # one list per element: only at 4
