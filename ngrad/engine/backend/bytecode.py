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
already be checked (``runtime._check``).

Why: an unrolled recurrence (an RK4 solver, an LSTM over a sequence) records thousands of
instructions on arrays of a few dozen elements. Fused kernels need a Numba function for every
stretch between two slices or concatenations (hundreds of functions, minutes of compiling), and
the NumPy interpreter pays microseconds per instruction. The loop below pays tens of nanoseconds
per instruction and is compiled once per set of operations, then loaded from the disk cache.

Element-wise rows render the primitive table's forward expressions (``codegen.SourceMath``), so
they share one definition with the interpreter and the fused kernels.
"""

import functools
import marshal
import math
import sys

import numpy as np

from ..ir.dtypes import from_numpy_dtype
from ..ir.interpret import np_dtype
from ..ir.prims import ELEMENTWISE, PRIMS
from ..ir.tape import params_key
from .bytecode_loop import LoopMath, source
from .codegen import Expr, identity

__all__ = ["encode", "Bytecode", "RANK", "plan_name", "loop_ops", "loops_name", "source", "LOOP_MAX_OPS"]

RANK = 4  # movements and reductions run as 4-deep loops: slots of higher rank do not fit
_FORMAT = 1  # of ``Bytecode.dumps``
ALIGN = 8  # elements: 64 bytes of float64, a cache line (vector loads that straddle two cost more)
OP, WIDTH = 0, 18  # a row's operation field, and its width (see the module docstring)
LOOP_MAX_OPS = 48  # Numba compiles a loop in about 0.1 s an operation, more for many (30: 3 s)

_MOVES = ("reshape", "detach", "permute", "expand", "slice", "unslice", "flip", "cat")
_REDUCE = ("sum", "prod", "amax", "amin")


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


_FLAT = [1] * RANK + [0] * (2 * RANK)  # the shape and strides fields of a row that has none
_NO_ARGS = [[0, 0, 0], [0, 0], [0], []]  # the operand fields a row with k operands leaves empty
_ELEMENTWISE = frozenset(name for name, prim in PRIMS.items() if prim.kind in ELEMENTWISE)
_RANKED = frozenset(_MOVES + _REDUCE + ("cumsum",))  # primitives whose rows walk shapes (rank <= RANK)
_REDUCE_SET = frozenset(_REDUCE)
_TAKEN = _ELEMENTWISE | _RANKED | {"const", "matmul"}


def _dense(shape, strides):
    """Whether walking ``shape`` with ``strides`` visits one contiguous run in order (axes of
    extent 1 take no step)."""
    live = [d for d, m in enumerate(shape) if m != 1]
    return [strides[d] for d in live] == _strides([shape[d] for d in live])


def _window(small, big, params):
    """Where the window ``starts``/``steps`` of ``params`` of an array of shape ``big`` starts,
    when its ``small`` elements are one contiguous run of it; else None (slice and unslice)."""
    return _window_at(small, big, tuple(params["starts"]), tuple(params["steps"]))


@functools.lru_cache(maxsize=4096)  # an unrolled recurrence takes the same few windows thousands of times
def _window_at(small, big, starts, steps):
    st = _strides(big)
    if not _dense(small, [k * m for k, m in zip(st, steps)]):
        return None
    return sum(a * k for a, k in zip(starts, st))


def _strides(shape):
    s, acc = [], 1
    for n in reversed(shape):
        s.append(acc)
        acc *= n
    return s[::-1]


def _pad(values, fill):
    return [fill] * (RANK - len(values)) + list(values)


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
    if prims & _REDUCE_SET and any(ins.prim in _REDUCE and tape.dtypes[ins.out] == "b8" for ins in tape.instrs):
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
    dt = _fits(tape)
    if dt is None:
        return None
    size, dtypes = [math.prod(s) for s in tape.shapes], tape.dtypes
    # Windows are shared where values are: ``home`` maps a slot to (the slot whose window holds
    # it, the offset in that window). An instruction equal to an earlier one (the same slice of
    # an input in every step of a recurrence) reuses its window, a reshape is its argument's
    # window read with another shape, and a contiguous slice is a part of its argument's window.
    home, seen, instrs, shapes = {}, {}, [], tape.shapes
    where = home.get
    for ins in tape.instrs:
        prim, a = ins.prim, ins.args
        if prim == "reshape" or prim == "detach":
            home[ins.out] = where(a[0], (a[0], 0))
            continue
        if prim == "slice" and (start := _window(shapes[ins.out], shapes[a[0]], ins.params)) is not None:
            w, d = where(a[0], (a[0], 0))
            home[ins.out] = (w, d + start)
            continue
        # a window, read as a shape; params of everything but a literal are ints and tuples of
        # ints: equal means identical
        key = (
            prim,
            tuple([(*where(x, (x, 0)), shapes[x]) for x in a]),
            params_key(ins.params) if prim == "const" else tuple(ins.params.items()),
        )
        twin = seen.get(key)
        if twin is not None:
            home[ins.out] = (twin, 0)
        else:
            seen[key] = ins.out
            instrs.append(ins)
    # a broadcast of one element (a time step times a vector) is read by element-wise rows as
    # that element, and is only materialised when something else reads it
    keep = {where(s, (s, 0))[0] for s in tape.outputs}
    spread = {}
    for ins in instrs:
        if ins.prim == "expand" and size[ins.args[0]] == 1:
            r, d = where(ins.args[0], (ins.args[0], 0))
            spread[ins.out] = spread.get(r, (r, d))
    reads, needed = [], set(keep)  # per instruction: (window, offset, read as one element)
    note = needed.add
    for ins in instrs:
        ew = ins.prim in _ELEMENTWISE
        r = []
        for a in ins.args:
            w, d = where(a, (a, 0))
            if ew and w in spread:
                w, d = spread[w]
                r.append((w, d, True))
            else:
                r.append((w, d, False))
            note(w)
        reads.append(r)
    kept = [j for j, ins in enumerate(instrs) if ins.out not in spread or ins.out in needed]
    instrs, reads = [instrs[j] for j in kept], [reads[j] for j in kept]
    # the gradient of a contiguous slice that one sum reads (a fan-out being accumulated) is
    # added into that sum's copy of its other operand: ``folded`` maps the sum's index to (the
    # operand it replaced, where the window starts)
    uses = {}
    for r in reads:
        for w, _, _ in r:
            uses[w] = uses.get(w, 0) + 1
    windows = {}
    for j, ins in enumerate(instrs):
        if ins.prim == "unslice" and ins.out not in keep and uses.get(ins.out) == 1:
            start = _window(tape.shapes[ins.args[0]], tape.shapes[ins.out], ins.params)
            if start is not None:
                windows[ins.out] = (reads[j][0], (start, size[ins.args[0]]))
    folded, gone = {}, set()
    for j, ins in enumerate(instrs):
        if ins.prim == "add" and dtypes[ins.out][0] == "f":
            for k, (w, _, single) in enumerate(reads[j]):
                if w in windows and not single and not reads[j][1 - k][2]:
                    reads[j] = [reads[j][1 - k], windows[w][0]]
                    folded[j] = windows[w][1]
                    gone.add(w)
                    break
    if gone:
        kept = [j for j, ins in enumerate(instrs) if ins.out not in gone]
        position = {j: k for k, j in enumerate(kept)}
        folded = {position[j]: v for j, v in folded.items()}
        instrs, reads = [instrs[j] for j in kept], [reads[j] for j in kept]
    # a piece of a concatenation along its leading axes, or the operand of an unslice that is
    # one contiguous window of its result, that an element-wise row makes and nothing else reads
    # is made in its place in the result: ``into`` maps it to (result, offset)
    into = {}
    made = {ins.out for ins in instrs if ins.prim in _ELEMENTWISE}
    for ins in instrs:
        axis = ins.params.get("axis")
        if ins.prim == "cat" and math.prod(tape.shapes[ins.out][:axis]) == 1:
            at, step = 0, _strides(tape.shapes[ins.out])[axis]
            for a in ins.args:
                if a in made and a not in home and uses[a] == 1 and a not in keep:
                    into[a] = (ins.out, at * step)
                at += tape.shapes[a][axis]
        elif (
            ins.prim == "unslice"
            and (a := ins.args[0]) in made
            and a not in home
            and uses[a] == 1
            and a not in keep
            and (start := _window(tape.shapes[a], tape.shapes[ins.out], ins.params)) is not None
        ):
            into[a] = (ins.out, start)
    # An element-wise instruction whose operand is made by another element-wise instruction,
    # read there and nowhere else, runs with it as one row (``y + h * k``: one pass over the
    # window instead of two, and no window for ``h * k``). ``tree[j]`` is instruction j's
    # expression: (instr, operands), an operand being ("leaf", read) or an inlined instruction's
    # tree. Trees are two deep at most, so the operations a loop needs depend on the patterns of
    # the tape, not on its length (longer chains would end wherever a recurrence ends), and read
    # at most three windows (a row's operand fields). An inlined instruction makes no row; its
    # operands are read where it is used, so they stay alive until then.
    #
    # A fold's sum that can add in place (its first operand dies there: see the allocation
    # below) takes the element-wise instruction making the slice's gradient the same way:
    # ``dx[1:] += g[1:] * u[:-1]`` is one pass. ``added`` maps the sum's index to the inlined
    # instruction's.
    tree, inlined, chains, added = {}, set(), set(), {}
    made_at = {ins.out: j for j, ins in enumerate(instrs)}
    # the last instruction reading each window, before any inlining (which moves reads later, up to
    # the reader)
    final = {}
    for j, r in enumerate(reads):
        for w, _, _ in r:
            final[w] = j
    for j, ins in enumerate(instrs):
        if pairs and j in folded:
            (x, dx, _), (w, d, single) = reads[j]
            k = made_at.get(w)
            if (
                k in tree
                and k not in chains
                and not single
                and not d
                and uses.get(w) == 1
                and w not in keep
                and w not in into
                and size[w] == folded[j][1]
                and ins.out not in into
                and not dx
                and final[x] == j
                and x not in keep
                and x not in into
                and size[x] == size[ins.out]
                and all(leaf[0] != x for leaf in reads[k])
            ):
                added[j] = k
                inlined.add(k)
                tree[k] = _tree(tree, reads, k)
                reads[j] = [reads[j][0], *_leaves(tree[k][1])]
        if not pairs or ins.prim not in _ELEMENTWISE or j in folded:
            continue
        kids, n = None, size[ins.out]
        for p, (w, d, single) in enumerate(reads[j]):
            k = made_at.get(w)
            if (
                k is None
                or k not in tree
                or k in chains
                or single
                or d
                or uses[w] != 1
                or w in keep
                or w in into
                or size[w] != n
            ):
                continue
            trial = (kids or [("leaf", e) for e in reads[j]])[:]
            trial[p] = _tree(tree, reads, k)
            if len(_leaves(trial)) <= 3:
                kids = trial
                inlined.add(k)
        tree[j] = (ins, kids)  # None: its operands are its reads (see _tree)
        if kids is not None:
            chains.add(j)
            reads[j] = _leaves(kids)
    for k in inlined:
        reads[k] = []
    last = {}  # (``uses`` still holds: a fold or a chain moves reads, it does not add any)
    for j, r in enumerate(reads):
        for w, _, _ in r:
            last[w] = j
    free, top, at = {}, [0], {}

    def alloc(slot):
        n = size[slot]
        spare = free.get(n)
        if spare:
            at[slot] = spare.pop()
        else:
            if n >= 8 * ALIGN:
                top[0] = -(-top[0] // ALIGN) * ALIGN
            at[slot] = top[0]
            top[0] += n

    bc = Bytecode()
    bc.tensors, bc.scalar_at, scalar_off = [], [], []
    for i, (s, k) in enumerate(zip(tape.inputs, tape.kinds)):
        alloc(s)
        if k == "scalar":
            bc.scalar_at.append(i)
            scalar_off.append(at[s])
        else:
            bc.tensors.append((i, at[s], size[s]))
    ops, rows, vals = {}, [], []

    def row(op, n, out, a=0, b=0, c=0, shape=(), src=(), dst=(), val=0.0):
        if op == "move" and _dense(shape, dst):  # as flat loops: a contiguous window, one value spread
            if _dense(shape, src):
                op = "copy"
            elif not any(k for k, m in zip(src, shape) if m != 1):
                op = "spread"
        r = [ops.setdefault(op, len(ops)), n, out, a, b, c]
        rows.append(r + (_pad(shape, 1) + _pad(src, 0) + _pad(dst, 0) if shape else _FLAT))
        vals.append(val)

    named = {}  # (prim, params, operand dtypes, result dtype) -> element-wise operation name
    chained = {}  # _chain_key -> the operation of a chain row
    code_of = ops.setdefault
    for j, ins in enumerate(instrs):
        if j in inlined:
            continue
        r, out = reads[j], ins.out
        # allocated before the arguments are freed: no row reads and writes one window (LLVM's
        # overlap check would send the loop down its scalar path), except a fold's sum, which
        # adds into its first operand's window when that operand dies there (no copy at all)
        in_place = False
        if out in into:
            result, offset = into[out]
            if result not in at:
                alloc(result)
            at[out] = at[result] + offset
        elif (
            j in folded
            and not r[0][1]
            and last[w := r[0][0]] == j
            and w not in keep
            and w not in into
            and size[w] == size[out]
            and all(e[0] != w for e in r[1:])
        ):
            at[out], in_place = at[w], True
        elif out not in at:
            alloc(out)
        o, args = at[out], [at[w] + d for w, d, _ in r]
        if j in added:  # the window plus an element-wise expression (see ``added``)
            if not in_place:  # its operand outlived the fold after all (another read moved after it)
                row("copy", size[out], o, args[0])
            start, length = folded[j]
            key = ("+=", _chain_key(tape, tree[added[j]], r[1:]))
            op = chained.get(key)
            if op is None:
                op = chained[key] = "+" + _chain_op(tape, tree[added[j]], r[1:])
            rows.append([code_of(op, len(ops)), length, o + start, *args[1:], *_NO_ARGS[len(args) - 1], *_FLAT])
            vals.append(0.0)
        elif j in folded:  # the sum of a value and a slice's gradient (see ``folded``)
            start, length = folded[j]
            rows.append([code_of("accumulate", len(ops)), size[out], o, *args, length, start, *_FLAT[1:]])
            vals.append(0.0)
        elif j in chains:
            key = _chain_key(tape, tree[j], r)
            op = chained.get(key)
            if op is None:
                op = chained[key] = _chain_op(tape, tree[j], r)
            rows.append([code_of(op, len(ops)), size[out], o, *args, *_NO_ARGS[len(args)], *_FLAT])
            vals.append(0.0)
        elif ins.prim in _ELEMENTWISE:  # most rows: inline
            key = (
                ins.prim,
                *ins.params.items(),
                dtypes[out],
                *[(dtypes[a], single) for a, (_, _, single) in zip(ins.args, r)],
            )
            op = named.get(key)
            if op is None:
                op = named[key] = _element_op(tape, ins, tuple(single for _, _, single in r))
            rows.append([code_of(op, len(ops)), size[out], o, *args, *_NO_ARGS[len(args)], *_FLAT])
            vals.append(0.0)
        else:
            _rows(tape, ins, o, args, size, row, into)
        for w, _, _ in r:
            if last[w] == j and w not in keep and w not in into and at[w] != at[out]:
                free.setdefault(size[w], []).append(at[w])
                last[w] = -1  # read twice by this row: freed once
    bc.outputs = []
    for s in tape.outputs:
        w, d = home.get(s, (s, 0))
        bc.outputs.append((at[w] + d, size[s], tape.shapes[s], tape.dtypes[s] == "b8"))
    bc.scalar_off = np.array(scalar_off, np.intp)
    bc.size, bc.dtype = max(top[0], 1), np_dtype(dt)
    # the rows name operations by their place in the sorted set, so equal sets share one loop
    names = sorted(ops)
    renumber = np.array([names.index(name) for name in ops] or [0], np.int32)
    code = np.array(rows, np.int32).reshape(len(rows), WIDTH)  # offsets < 2**31: a slot has <= 4,096 elements
    code[:, OP] = renumber[code[:, OP]]
    bc.code, bc.vals, bc.ops = code, np.array(vals, np.float64), tuple(names)
    bc.source = source(bc.ops, dt)
    return bc


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


def _tree(tree, reads, k):
    """Instruction k's tree with its operands spelled out (``tree[k]`` leaves them out, None, when
    they are all reads: they are ``reads[k]`` then, until k is inlined somewhere)."""
    ins, kids = tree[k]
    return (ins, kids if kids is not None else [("leaf", e) for e in reads[k]])


def _encoder():
    """The code an encoding depends on: this module (the encoder), the loop's source, the primitive table and
    codegen (the expressions inside chain operations' names), and the tape format."""
    from ..ir import prims, tape
    from . import bytecode_loop, codegen

    return sys.modules[__name__], bytecode_loop, codegen, prims, tape


def plan_name(tape):
    """The name the encoding of ``tape`` is stored under (see ``store.write_plan``), from the
    encoder's code and the tape's structural key, which holds everything ``encode`` reads (slots,
    shapes, dtypes, primitives, parameters, literal values); None when it cannot be stored."""
    from ..store import plan_name as named

    return named("b", _encoder(), tape.key())


def loops_name():
    """The name the op sets of compiled loops are stored under (see ``runtime._share_loop``): it
    changes with the encoder's code, which names the operations and renders their branches; None
    when that code cannot be read."""
    from ..store import plan_name as named

    return named("loops-", _encoder(), "loops")


def _leaves(kids):
    """The distinct reads under the operands ``kids`` of a tree, in order of appearance."""
    out, stack = [], list(reversed(kids))
    while stack:
        node = stack.pop()
        if node[0] == "leaf":
            if node[1] not in out:
                out.append(node[1])
        else:
            stack.extend(reversed(node[1]))
    return out


def _chain_key(tape, node, leaves):
    """What ``_chain_op`` renders of a tree, as a key: its instructions' primitives, parameters
    and dtypes, and which leaf each operand is."""
    if node[0] == "leaf":
        w, _, single = node[1]
        return leaves.index(node[1]), single, tape.dtypes[w]
    ins, kids = node
    return (ins.prim, tuple(ins.params.items()), tape.dtypes[ins.out]) + tuple(
        _chain_key(tape, k, leaves) for k in kids
    )


def _chain_op(tape, node, leaves):
    """The operation of a chain row: "=" and its operands' dtypes (marked as in ``_element_op``),
    then the expression of one element (operands x, y, z in the order of ``leaves``)."""

    def render(node):  # two deep at most
        if node[0] == "leaf":
            i = leaves.index(node[1])
            w, _, single = node[1]
            ref = "xyz"[i] if single else f"{'xyz'[i]}[i]"
            return Expr(f"({ref} != 0)" if tape.dtypes[w] == "b8" else ref, tape.dtypes[w])
        ins, kids = node
        return PRIMS[ins.prim].fwd(LoopMath, *[render(k) for k in kids], **ins.params)

    e = render(node)
    text = f"(1 if {e.text} else 0)" if tape.dtypes[node[0].out] == "b8" else e.text
    return "=" + ",".join(tape.dtypes[w] + "*" * single for w, _, single in leaves) + " " + text


def _element_op(tape, ins, one):
    """The operation's name: "prim[params](dtypes)", a dtype marked "*" where that operand is read
    as one element, and "->b8" for a boolean result."""
    name = ins.prim + ("[" + ",".join(f"{k}={v!r}" for k, v in sorted(ins.params.items())) + "]" if ins.params else "")
    return f"{name}({','.join(tape.dtypes[a] + '*' * s for a, s in zip(ins.args, one))})" + (
        "->b8" if tape.dtypes[ins.out] == "b8" else ""
    )


def _rows(tape, ins, o, args, size, row, into):
    """Append the rows of one instruction (``o``, ``args``: arena offsets; ``into``: pieces of a
    concatenation already in place)."""
    p, shape, n = ins.params, tape.shapes[ins.out], size[ins.out]
    if ins.prim == "const":
        row("const", 1, o, val=float(p["value"]))
    elif ins.prim in ("expand", "permute", "slice", "flip"):
        src_shape = tape.shapes[ins.args[0]]
        st, base = _strides(src_shape), args[0]
        if ins.prim == "expand":
            src = [s if m == k else 0 for s, m, k in zip(st, src_shape, shape)]
        elif ins.prim == "permute":
            src = [st[d] for d in p["perm"]]
        elif ins.prim == "slice":
            src = [s * k for s, k in zip(st, p["steps"])]
            base += sum(a * s for a, s in zip(p["starts"], st))
        else:
            src = [-s if d in p["axes"] else s for d, s in enumerate(st)]
            base += sum((m - 1) * s for d, (m, s) in enumerate(zip(src_shape, st)) if d in p["axes"] and m)
        row("move", n, o, base, shape=shape, src=src, dst=_strides(shape))
    elif ins.prim == "unslice":
        src_shape, st = tape.shapes[ins.args[0]], _strides(shape)
        start = _window(src_shape, shape, p)
        if ins.args[0] in into:  # made in its place: zeros around it
            row("pad", n, o, 0, start, size[ins.args[0]])
        elif start is not None:
            row("place", n, o, args[0], start, size[ins.args[0]])  # one window: zeros around a copy
        else:
            row("fill", n, o, val=0.0)
            row(
                "move",
                size[ins.args[0]],
                o + sum(a * k for a, k in zip(p["starts"], st)),
                args[0],
                shape=src_shape,
                src=_strides(src_shape),
                dst=[k * m for k, m in zip(st, p["steps"])],
            )
    elif ins.prim == "cat":
        axis, st, at = p["axis"], _strides(shape), 0
        flat = math.prod(shape[:axis]) == 1  # each piece is one contiguous window of the result
        for a, slot in zip(args, ins.args):
            piece = tape.shapes[slot]
            if slot not in into:  # a piece made in place needs no row
                if flat:
                    row("copy", size[slot], o + at * st[axis], a)
                else:
                    row("move", size[slot], o + at * st[axis], a, shape=piece, src=_strides(piece), dst=st)
            at += piece[axis]
    elif ins.prim in _REDUCE:
        src_shape = tape.shapes[ins.args[0]]
        kept = _strides([1 if d in p["axes"] else m for d, m in enumerate(src_shape)])
        dst = [0 if d in p["axes"] else s for d, s in enumerate(kept)]
        row(
            ins.prim,
            n,
            o,
            args[0],
            shape=src_shape,
            src=_strides(src_shape),
            dst=dst,
            val=float(identity(ins.prim, tape.dtypes[ins.out])),
        )
    elif ins.prim == "matmul":
        x, y = (tape.shapes[a] for a in ins.args)
        row("matmul", n, o, *args, shape=(math.prod(x[:-2]), x[-2], x[-1], y[-1]))
    elif ins.prim == "cumsum":
        ax = p["axis"]
        row("cumsum", n, o, args[0], shape=(math.prod(shape[:ax]), shape[ax], math.prod(shape[ax + 1 :])))
    else:  # _fits admits nothing else
        raise AssertionError(ins.prim)
