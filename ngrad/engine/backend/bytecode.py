"""Bytecode: a tape of small arrays encoded as rows of integers, run by one compiled loop.

Contract: ``encode(tape)`` returns a ``Bytecode``, or None when the tape does not fit (an integer
slot, more than one floating dtype, a movement or reduction of rank above ``RANK``, an indexing
primitive). Every slot gets a fixed window of one flat *arena* (booleans are stored as 0 and 1),
windows are reused once their slot is dead (see ``home`` in ``encode`` for the values that share
one; windows of ``8 * ALIGN`` elements or more start at a multiple of ``ALIGN`` elements of an
arena aligned alike), and each instruction becomes one or more rows
``[op, n, out, a, b, c, shape[4], src strides[4], dst strides[4]]`` (int32), except that an
element-wise instruction whose result only another element-wise one reads becomes part of that
one's row (or of the row adding it into a slice of a value, in that value's window). ``Bytecode.source`` is the
text of the loop that runs such rows, rendered for exactly the operations the tape uses (so its
compile cost grows with the variety of operations, never with the tape's length), or for a
superset of them that a loop compiled before holds (``Bytecode.use``, ``loop_ops``); the runtime
compiles it like any kernel (``compile.kernel``) and calls ``bytecode.run(fn, values)``, which
copies the inputs into a fresh arena, runs the loop and returns fresh output arrays. Inputs must
already be checked (``runtime.checks.check``).

Why: an unrolled recurrence (an RK4 solver, an LSTM over a sequence) records thousands of
instructions on arrays of a few dozen elements. Fused kernels need a Numba function for every
stretch between two slices or concatenations (hundreds of functions, minutes of compiling), and
the NumPy interpreter pays microseconds per instruction. The loop below pays tens of nanoseconds
per instruction and is compiled once per set of operations, then loaded from the disk cache.

Element-wise rows render the primitive table's forward expressions (``source_math.SourceMath``), so
they share one definition with the interpreter and the fused kernels.
"""

import dataclasses
import functools
import marshal
import math
import sys

import numpy as np

from .. import pace
from ..ir.dtypes import from_numpy_dtype
from ..ir.interpret import np_dtype
from ..ir.prims import ELEMENTWISE, PRIMS
from ..ir.tape import params_key
from ..transform.lower import lower
from .bytecode_loop import source
from .bytecode_rows import (
    FLAT,
    MOVES,
    NO_ARGS,
    RANK,
    REDUCE,
    chain_key,
    chain_op,
    dense,
    element_op,
    instr_rows,
    leaves,
    pad,
    strides,
    tree_of,
    window_start,
)
from .passes import Pass, run_passes

__all__ = ["encode", "Bytecode", "RANK", "plan_name", "loop_ops", "loops_name", "source", "LOOP_MAX_OPS"]

_FORMAT = 1  # of ``Bytecode.dumps``
ALIGN = 8  # elements: 64 bytes of float64, a cache line (vector loads that straddle two cost more)
OP, WIDTH = 0, 18  # a row's operation field, and its width (see the module docstring)
LOOP_MAX_OPS = 48  # Numba compiles a loop in about 0.1 s an operation, more for many (30: 3 s)


class Bytecode:
    """An encoded tape: ``code`` (int32 rows), ``vals`` (one float per row: constants), the arena's
    ``size`` and ``dtype``, where inputs go and outputs come from, and the loop's ``source``."""

    __slots__ = ("code", "vals", "size", "dtype", "tensors", "scalar_at", "scalar_off", "outputs", "ops", "source")

    def run(self, fn, values):
        """Run the compiled loop ``fn`` on checked input ``values``; fresh output arrays."""
        raw = np.empty(self.size + ALIGN, self.dtype)
        skip = (-raw.ctypes.data // raw.itemsize) % ALIGN
        f = raw[skip : skip + self.size]
        for i, o, n in self.tensors:
            f[o : o + n] = values[i].reshape(-1)
        if self.scalar_at:
            f[self.scalar_off] = [values[i] for i in self.scalar_at]
        fn(self.code, self.vals, f)
        outs = []
        for o, n, shape, boolean in self.outputs:
            r = f[o : o + n].reshape(shape)
            outs.append(r != 0 if boolean else r.copy())
        return outs

    def use(self, ops):
        """Run on the loop of ``ops`` instead, a superset of this encoding's operations (in any
        order): the rows' operation numbers are renumbered into it."""
        place = {op: j for j, op in enumerate(ops)}
        self.code[:, OP] = np.array([place[op] for op in self.ops], np.int32)[self.code[:, OP]]
        self.ops = tuple(ops)
        self.source = source(self.ops, self.arena())

    def arena(self):
        """The short name of the arena's dtype ("f32" or "f64"), as ``source`` takes it."""
        return from_numpy_dtype(self.dtype).short

    def dumps(self):
        """This encoding as bytes (``loads`` reads them)."""
        return marshal.dumps(
            (
                _FORMAT,
                self.code.shape[0],
                self.code.tobytes(),
                self.vals.tobytes(),
                self.size,
                self.dtype.str,
                self.tensors,
                self.scalar_at,
                self.scalar_off.tolist(),
                self.outputs,
                self.ops,
            )
        )

    @staticmethod
    def loads(data):
        """The encoding ``dumps`` wrote, or ValueError when ``data`` is anything else: damaged,
        cut short, another format, or rows that would reach outside the arena (the loop does
        not check bounds, so nothing read here is trusted before it is checked)."""
        try:
            fmt, rows, code, vals, size, dt, tensors, scalar_at, scalar_off, outputs, ops = marshal.loads(data)
            bc = Bytecode()
            bc.code = np.frombuffer(code, np.int32).reshape(rows, WIDTH).copy()
            bc.vals = np.frombuffer(vals, np.float64).copy()
            bc.size, bc.dtype, bc.ops = size, np.dtype(dt), tuple(ops)
            bc.tensors, bc.scalar_at, bc.outputs = tensors, scalar_at, outputs
            bc.scalar_off = np.array(scalar_off, np.intp)
            spans = [(o, n) for _, o, n in tensors] + [(o, n) for o, n, _, _ in outputs]
            ok = (
                fmt == _FORMAT
                and len(bc.vals) == rows
                and len(scalar_off) == len(scalar_at)
                and bc.dtype in (np.float32, np.float64)
                and all(0 <= o and o + n <= size for o, n in spans)
                and all(math.prod(shape) == n for _, n, shape, _ in outputs)
                and all(0 <= o < size for o in scalar_off)
                and (not rows or 0 <= bc.code[:, OP].min() and bc.code[:, OP].max() < len(ops))
            )
        except (TypeError, ValueError, EOFError) as e:
            raise ValueError(f"not an encoding: {e}") from None
        if not ok:
            raise ValueError("not an encoding: fields out of range")
        bc.source = source(bc.ops, bc.arena())
        return bc


_ELEMENTWISE = frozenset(name for name, prim in PRIMS.items() if prim.kind in ELEMENTWISE)
_RANKED = frozenset(MOVES + REDUCE + ("cumsum",))  # primitives whose rows walk shapes (rank <= RANK)
_REDUCE_SET = frozenset(REDUCE)
_TAKEN = _ELEMENTWISE | _RANKED | {"const", "matmul"}


def _fits(tape):
    kinds = set(tape.dtypes)
    floats = {d for d in kinds if d[0] == "f"}
    if len(floats) > 1 or kinds - floats - {"b8"}:
        return None
    prims = {ins.prim for ins in tape.instrs}
    if not prims <= _TAKEN:
        return None
    # one pass over the tape's shapes and its primitives first: the loops below are for the rare tape they
    # leave in doubt (an encoding is made on a program's first call, so its cost is a first call's)
    if max(map(len, tape.shapes), default=0) > RANK:
        shapes = tape.shapes
        for ins in tape.instrs:
            if ins.prim in _RANKED and any(len(shapes[s]) > RANK for s in (ins.out, *ins.args)):
                return None
    if prims & _REDUCE_SET and any(ins.prim in REDUCE and tape.dtypes[ins.out] == "b8" for ins in tape.instrs):
        return None
    return floats.pop() if floats else "f64"  # booleans only: any arena holds 0 and 1


def encode(tape, pairs=True):
    """The bytecode of ``tape``, or None when it does not fit (see the module docstring).
    ``pairs``: an element-wise instruction runs in the row of the one that alone reads its
    result (see ``tree`` below); off, every instruction has rows of its own.

    ```python
    >>> from ngrad.engine.ir.tape import Builder
    >>> b = Builder()
    >>> x = b.input((3,), "f64")
    >>> bc = encode(b.finish([(x * x).sum(axes=(0,), keepdim=False)]))
    >>> bc.ops, bc.code.shape
    (('mul(f64,f64)', 'sum'), (2, 18))

    ```
    """
    tape = lower(tape)  # rows with a decomposition (logsumexp) run as the rows it is written in
    dt = _fits(tape)
    if dt is None:
        return None
    return run_passes("encode", PASSES, EncodeState.of(tape, dt, pairs)).bc


@dataclasses.dataclass
class EncodeState:
    """What the encoding passes share. Instruction lists are indexed alike: ``instrs[j]`` reads
    ``reads[j]``, a list of (window slot, offset, read as one element)."""

    tape: object
    dt: str  # the arena's dtype
    pairs: bool
    size: list  # slot -> elements
    home: dict = dataclasses.field(default_factory=dict)  # slot -> (slot whose window holds it, offset)
    instrs: list = dataclasses.field(default_factory=list)  # the instructions that make rows
    keep: set = dataclasses.field(default_factory=set)  # windows holding outputs
    spread: dict = dataclasses.field(default_factory=dict)  # broadcast of one element -> that element
    reads: list = dataclasses.field(default_factory=list)
    uses: dict = dataclasses.field(default_factory=dict)  # window -> reads of it
    folded: dict = dataclasses.field(default_factory=dict)  # sum index -> (window start, length)
    into: dict = dataclasses.field(default_factory=dict)  # slot -> (result it is made in, offset)
    tree: dict = dataclasses.field(default_factory=dict)  # index -> (instr, operands or None)
    inlined: set = dataclasses.field(default_factory=set)
    chains: set = dataclasses.field(default_factory=set)
    added: dict = dataclasses.field(default_factory=dict)  # fold's sum index -> inlined instr index
    last: dict = dataclasses.field(default_factory=dict)  # window -> the last row reading it
    free: dict = dataclasses.field(default_factory=dict)  # elements -> free window offsets
    top: int = 0  # arena elements allocated
    at: dict = dataclasses.field(default_factory=dict)  # slot -> arena offset
    bc: object = None
    scalar_off: list = dataclasses.field(default_factory=list)
    ops: dict = dataclasses.field(default_factory=dict)  # operation name -> number, in order of first use
    rows: list = dataclasses.field(default_factory=list)
    vals: list = dataclasses.field(default_factory=list)
    named: dict = dataclasses.field(default_factory=dict)  # element-wise key -> operation name
    chained: dict = dataclasses.field(default_factory=dict)  # chain_key -> the operation of a chain row

    @classmethod
    def of(cls, tape, dt, pairs=True):
        """The state before any pass."""
        return cls(tape, dt, pairs, [math.prod(s) for s in tape.shapes])

    def where(self, slot):
        """The window holding ``slot`` and its offset there."""
        return self.home.get(slot, (slot, 0))


def share_windows(st):
    """Windows are shared where values are: an instruction equal to an earlier one (the same slice
    of an input in every step of a recurrence) reuses its window, a reshape is its argument's
    window read with another shape, and a contiguous slice is a part of its argument's window."""
    home, seen, shapes, where = st.home, {}, st.tape.shapes, st.where
    for ins in st.tape.instrs:
        pace.tick()
        prim, a = ins.prim, ins.args
        if prim == "reshape" or prim == "detach":
            home[ins.out] = where(a[0])
            continue
        if prim == "slice" and (start := window_start(shapes[ins.out], shapes[a[0]], ins.params)) is not None:
            w, d = where(a[0])
            home[ins.out] = (w, d + start)
            continue
        # a window, read as a shape; params of everything but a literal are ints and tuples of
        # ints: equal means identical
        key = (
            prim,
            tuple([(*where(x), shapes[x]) for x in a]),
            params_key(ins.params) if prim == "const" else tuple(ins.params.items()),
        )
        twin = seen.get(key)
        if twin is not None:
            home[ins.out] = (twin, 0)
        else:
            seen[key] = ins.out
            st.instrs.append(ins)


def read_operands(st):
    """Each instruction's reads. A broadcast of one element (a time step times a vector) is read
    by element-wise rows as that element, and is only materialised when something else reads it."""
    where, size = st.where, st.size
    st.keep = {where(s)[0] for s in st.tape.outputs}
    for ins in st.instrs:
        pace.tick()
        if ins.prim == "expand" and size[ins.args[0]] == 1:
            r, d = where(ins.args[0])
            st.spread[ins.out] = st.spread.get(r, (r, d))
    reads, needed = [], set(st.keep)
    for ins in st.instrs:
        ew = ins.prim in _ELEMENTWISE
        r = []
        for a in ins.args:
            w, d = where(a)
            if ew and w in st.spread:
                w, d = st.spread[w]
                r.append((w, d, True))
            else:
                r.append((w, d, False))
            needed.add(w)
        reads.append(r)
    kept = [j for j, ins in enumerate(st.instrs) if ins.out not in st.spread or ins.out in needed]
    st.instrs, st.reads = [st.instrs[j] for j in kept], [reads[j] for j in kept]


def fold_slice_gradients(st):
    """The gradient of a contiguous slice that one sum reads (a fan-out being accumulated) is
    added into that sum's copy of its other operand: ``folded`` maps the sum's index to (the
    operand it replaced, where the window starts)."""
    tape, reads, uses = st.tape, st.reads, st.uses
    for r in reads:
        for w, _, _ in r:
            uses[w] = uses.get(w, 0) + 1
    windows = {}
    for j, ins in enumerate(st.instrs):
        if ins.prim == "unslice" and ins.out not in st.keep and uses.get(ins.out) == 1:
            start = window_start(tape.shapes[ins.args[0]], tape.shapes[ins.out], ins.params)
            if start is not None:
                windows[ins.out] = (reads[j][0], (start, st.size[ins.args[0]]))
    folded, gone = {}, set()
    for j, ins in enumerate(st.instrs):
        if ins.prim == "add" and tape.dtypes[ins.out][0] == "f":
            for k, (w, _, single) in enumerate(reads[j]):
                if w in windows and not single and not reads[j][1 - k][2]:
                    reads[j] = [reads[j][1 - k], windows[w][0]]
                    folded[j] = windows[w][1]
                    gone.add(w)
                    break
    if gone:
        kept = [j for j, ins in enumerate(st.instrs) if ins.out not in gone]
        position = {j: k for k, j in enumerate(kept)}
        folded = {position[j]: v for j, v in folded.items()}
        st.instrs, st.reads = [st.instrs[j] for j in kept], [reads[j] for j in kept]
    st.folded = folded


def make_in_place(st):
    """A piece of a concatenation along its leading axes, or the operand of an unslice that is one
    contiguous window of its result, that an element-wise row makes and nothing else reads is
    made in its place in the result: ``into`` maps it to (result, offset)."""
    tape, uses, into = st.tape, st.uses, st.into
    made = {ins.out for ins in st.instrs if ins.prim in _ELEMENTWISE}
    for ins in st.instrs:
        axis = ins.params.get("axis")
        if ins.prim == "cat" and math.prod(tape.shapes[ins.out][:axis]) == 1:
            at, step = 0, strides(tape.shapes[ins.out])[axis]
            for a in ins.args:
                if a in made and a not in st.home and uses[a] == 1 and a not in st.keep:
                    into[a] = (ins.out, at * step)
                at += tape.shapes[a][axis]
        elif (
            ins.prim == "unslice"
            and (a := ins.args[0]) in made
            and a not in st.home
            and uses[a] == 1
            and a not in st.keep
            and (start := window_start(tape.shapes[a], tape.shapes[ins.out], ins.params)) is not None
        ):
            into[a] = (ins.out, start)


def _add_into_fold(st, j, ins, made_at, final):
    """A fold's sum that can add in place (its first operand dies there: see ``emit_rows``) takes
    the element-wise instruction making the slice's gradient: ``dx[1:] += g[1:] * u[:-1]`` is one
    pass. ``added`` maps the sum's index to the inlined instruction's."""
    reads, size = st.reads, st.size
    (x, dx, _), (w, d, single) = reads[j]
    k = made_at.get(w)
    if (
        k in st.tree
        and k not in st.chains
        and not single
        and not d
        and st.uses.get(w) == 1
        and w not in st.keep
        and w not in st.into
        and size[w] == st.folded[j][1]
        and ins.out not in st.into
        and not dx
        and final[x] == j
        and x not in st.keep
        and x not in st.into
        and size[x] == size[ins.out]
        and all(leaf[0] != x for leaf in reads[k])
    ):
        st.added[j] = k
        st.inlined.add(k)
        st.tree[k] = tree_of(st.tree, reads, k)
        reads[j] = [reads[j][0], *leaves(st.tree[k][1])]


def _inline_operands(st, j, ins, made_at):
    """Instruction j's tree, with the element-wise instructions that make its operands (read there
    and nowhere else) inlined, up to three windows read."""
    reads, size = st.reads, st.size
    kids, n = None, size[ins.out]
    for p, (w, d, single) in enumerate(reads[j]):
        k = made_at.get(w)
        if (
            k is None
            or k not in st.tree
            or k in st.chains
            or single
            or d
            or st.uses[w] != 1
            or w in st.keep
            or w in st.into
            or size[w] != n
        ):
            continue
        trial = (kids or [("leaf", e) for e in reads[j]])[:]
        trial[p] = tree_of(st.tree, reads, k)
        if len(leaves(trial)) <= 3:
            kids = trial
            st.inlined.add(k)
    st.tree[j] = (ins, kids)  # None: its operands are its reads (see tree_of)
    if kids is not None:
        st.chains.add(j)
        reads[j] = leaves(kids)


def inline_chains(st):
    """An element-wise instruction whose operand is made by another element-wise instruction,
    read there and nowhere else, runs with it as one row (``y + h * k``: one pass over the window
    instead of two, and no window for ``h * k``). ``tree[j]`` is instruction j's expression:
    (instr, operands), an operand being ("leaf", read) or an inlined instruction's tree. Trees
    are two deep at most, so the operations a loop needs depend on the patterns of the tape, not
    on its length (longer chains would end wherever a recurrence ends), and read at most three
    windows (a row's operand fields). An inlined instruction makes no row; its operands are read
    where it is used, so they stay alive until then."""
    made_at = {ins.out: j for j, ins in enumerate(st.instrs)}
    # the last instruction reading each window, before any inlining (which moves reads later, up
    # to the reader)
    final = {}
    for j, r in enumerate(st.reads):
        for w, _, _ in r:
            final[w] = j
    for j, ins in enumerate(st.instrs):
        pace.tick()
        if st.pairs and j in st.folded:
            _add_into_fold(st, j, ins, made_at, final)
        if not st.pairs or ins.prim not in _ELEMENTWISE or j in st.folded:
            continue
        _inline_operands(st, j, ins, made_at)
    for k in st.inlined:
        st.reads[k] = []


def _alloc(st, slot):
    """A window for ``slot``: a free one of its size, else a new one at the arena's top."""
    n = st.size[slot]
    spare = st.free.get(n)
    if spare:
        st.at[slot] = spare.pop()
    else:
        if n >= 8 * ALIGN:
            st.top = -(-st.top // ALIGN) * ALIGN
        st.at[slot] = st.top
        st.top += n


def _row(st, op, n, out, a=0, b=0, c=0, shape=(), src=(), dst=(), val=0.0):
    """Append one row (a movement over dense windows becomes a flat copy or spread)."""
    if op == "move" and dense(shape, dst):  # as flat loops: a contiguous window, one value spread
        if dense(shape, src):
            op = "copy"
        elif not any(k for k, m in zip(src, shape) if m != 1):
            op = "spread"
    r = [st.ops.setdefault(op, len(st.ops)), n, out, a, b, c]
    st.rows.append(r + (pad(shape, 1) + pad(src, 0) + pad(dst, 0) if shape else FLAT))
    st.vals.append(val)


def place_inputs(st):
    """The inputs' windows come first; scalars are copied in one by one, tensors as windows."""
    for j, r in enumerate(st.reads):  # (``uses`` still holds: a fold or a chain moves reads, adds none)
        for w, _, _ in r:
            st.last[w] = j
    st.bc = bc = Bytecode()
    bc.tensors, bc.scalar_at = [], []
    for i, (s, k) in enumerate(zip(st.tape.inputs, st.tape.kinds)):
        _alloc(st, s)
        if k == "scalar":
            bc.scalar_at.append(i)
            st.scalar_off.append(st.at[s])
        else:
            bc.tensors.append((i, st.at[s], st.size[s]))


def _result_window(st, j, r, out):
    """Allocate instruction j's result before its arguments are freed: no row reads and writes
    one window (LLVM's overlap check would send the loop down its scalar path), except a fold's
    sum, which adds into its first operand's window when that operand dies there (no copy at
    all). True when the result took that operand's window."""
    size, at = st.size, st.at
    if out in st.into:
        result, offset = st.into[out]
        if result not in at:
            _alloc(st, result)
        at[out] = at[result] + offset
    elif (
        j in st.folded
        and not r[0][1]
        and st.last[w := r[0][0]] == j
        and w not in st.keep
        and w not in st.into
        and size[w] == size[out]
        and all(e[0] != w for e in r[1:])
    ):
        at[out] = at[w]
        return True
    elif out not in at:
        _alloc(st, out)
    return False


def _chain(st, key, node, leaves, prefix=""):
    """The operation of a chain row of ``node`` (named once per key)."""
    op = st.chained.get(key)
    if op is None:
        op = st.chained[key] = prefix + chain_op(st.tape, node, leaves)
    return op


def _emit(st, j, ins):
    """The rows of instruction j, then its operands' windows freed where this is their last read."""
    tape, dtypes, code_of = st.tape, st.tape.dtypes, st.ops.setdefault
    r, out = st.reads[j], ins.out
    in_place = _result_window(st, j, r, out)
    o, args = st.at[out], [st.at[w] + d for w, d, _ in r]
    if j in st.added:  # the window plus an element-wise expression (see ``_add_into_fold``)
        if not in_place:  # its operand outlived the fold after all (another read moved after it)
            _row(st, "copy", st.size[out], o, args[0])
        start, length = st.folded[j]
        node = st.tree[st.added[j]]
        op = _chain(st, ("+=", chain_key(tape, node, r[1:])), node, r[1:], "+")
        st.rows.append([code_of(op, len(st.ops)), length, o + start, *args[1:], *NO_ARGS[len(args) - 1], *FLAT])
        st.vals.append(0.0)
    elif j in st.folded:  # the sum of a value and a slice's gradient (see ``fold_slice_gradients``)
        start, length = st.folded[j]
        st.rows.append([code_of("accumulate", len(st.ops)), st.size[out], o, *args, length, start, *FLAT[1:]])
        st.vals.append(0.0)
    elif j in st.chains:
        op = _chain(st, chain_key(tape, st.tree[j], r), st.tree[j], r)
        st.rows.append([code_of(op, len(st.ops)), st.size[out], o, *args, *NO_ARGS[len(args)], *FLAT])
        st.vals.append(0.0)
    elif ins.prim in _ELEMENTWISE:  # most rows: inline
        key = (
            ins.prim,
            *ins.params.items(),
            dtypes[out],
            *[(dtypes[a], single) for a, (_, _, single) in zip(ins.args, r)],
        )
        op = st.named.get(key)
        if op is None:
            op = st.named[key] = element_op(tape, ins, tuple(single for _, _, single in r))
        st.rows.append([code_of(op, len(st.ops)), st.size[out], o, *args, *NO_ARGS[len(args)], *FLAT])
        st.vals.append(0.0)
    else:
        instr_rows(tape, ins, o, args, st.size, functools.partial(_row, st), st.into)
    for w, _, _ in r:
        if st.last[w] == j and w not in st.keep and w not in st.into and st.at[w] != st.at[out]:
            st.free.setdefault(st.size[w], []).append(st.at[w])
            st.last[w] = -1  # read twice by this row: freed once


def emit_rows(st):
    """Every instruction that is not inlined into another becomes its rows, in order."""
    for j, ins in enumerate(st.instrs):
        pace.tick()
        if j not in st.inlined:
            _emit(st, j, ins)


def finish(st):
    """Where outputs come from, the arena's size, and the rows with their operations renumbered:
    the rows name operations by their place in the sorted set, so equal sets share one loop."""
    bc, tape = st.bc, st.tape
    bc.outputs = []
    for s in tape.outputs:
        w, d = st.where(s)
        bc.outputs.append((st.at[w] + d, st.size[s], tape.shapes[s], tape.dtypes[s] == "b8"))
    bc.scalar_off = np.array(st.scalar_off, np.intp)
    bc.size, bc.dtype = max(st.top, 1), np_dtype(st.dt)
    names = sorted(st.ops)
    renumber = np.array([names.index(name) for name in st.ops] or [0], np.int32)
    code = np.array(st.rows, np.int32).reshape(len(st.rows), WIDTH)  # offsets < 2**31: a slot has <= 4,096 elements
    code[:, OP] = renumber[code[:, OP]]
    bc.code, bc.vals, bc.ops = code, np.array(st.vals, np.float64), tuple(names)
    bc.source = source(bc.ops, st.dt)


PASSES = [
    Pass("share_windows", "equal instructions, reshapes and contiguous slices share a window", share_windows),
    Pass("read_operands", "each instruction's reads; one-element broadcasts read as that element", read_operands),
    Pass("fold_slice_gradients", "a slice's gradient is added into the sum that reads it", fold_slice_gradients),
    Pass("make_in_place", "pieces of a concatenation or unslice are made in their result", make_in_place),
    Pass("inline_chains", "element-wise operands read once run in their reader's row", inline_chains),
    Pass("place_inputs", "inputs get the first windows of the arena", place_inputs),
    Pass("emit_rows", "each instruction's rows, reusing the windows of dead slots", emit_rows),
    Pass("finish", "outputs, arena size, and operations numbered in sorted order", finish),
]


def loop_ops(ops, known):
    """The operations of the loop to run an encoding of operations ``ops`` on, given the op sets
    of loops already compiled (``known``, most recent first): the first that holds them all;
    else, when one holds at least three quarters of them, the union with it, if that has at
    most ``LOOP_MAX_OPS`` (variants of one model share a loop: an LSTM of another length can
    inline one pair differently); else ``ops``. Sorted names, like ``encode``'s.

    ```python
    >>> loop_ops(("add(f64,f64)",), [("add(f64,f64)", "mul(f64,f64)")])
    ('add(f64,f64)', 'mul(f64,f64)')

    ```
    """
    want = set(ops)
    for k in known:
        if want <= set(k):
            return tuple(k)
    best = max(known, key=lambda k: len(want & set(k)), default=())
    union = want | set(best)
    if 4 * len(want & set(best)) >= 3 * len(want) and len(union) <= LOOP_MAX_OPS:
        return tuple(sorted(union))
    return tuple(ops)


def _encoder():
    """The code an encoding depends on: this module (the encoder), the loop's source, the primitive
    table (its rows and shape rules), codegen and its source math (the expressions inside chain
    operations' names), and the tape format."""
    from ..ir import prims, shapes, tape
    from . import bytecode_loop, bytecode_rows, codegen, source_math

    return sys.modules[__name__], bytecode_loop, bytecode_rows, codegen, source_math, prims, shapes, tape


def plan_name(tape):
    """The name the encoding of ``tape`` is stored under (see ``store.write_plan``), from the
    encoder's code and the tape's structural key, which holds everything ``encode`` reads (slots,
    shapes, dtypes, primitives, parameters, literal values); None when it cannot be stored."""
    from ..store import plan_name as named

    return named("b", _encoder(), tape.key())


def loops_name():
    """The name the op sets of compiled loops are stored under (see ``runtime.machine.share_loop``): it
    changes with the encoder's code, which names the operations and renders their branches; None
    when that code cannot be read."""
    from ..store import plan_name as named

    return named("loops-", _encoder(), "loops")
