"""Bytecode rows: how one instruction of a tape becomes rows of the encoding ``bytecode.encode`` makes.

Contract: ``instr_rows`` appends the rows of a movement, reduction, matmul, scan or constant;
``element_op`` and ``chain_op`` name the operation of an element-wise row (one primitive, or a
tree of inlined ones), and the name says everything the loop's branch renders
(``bytecode_loop``); ``window_start`` and ``strides`` describe where a value lies in the arena.
A row is ``[op, n, out, a, b, c, shape[RANK], src strides[RANK], dst strides[RANK]]``.
"""

import functools
import math

from ..ir.prims import PRIMS
from .bytecode_loop import LoopMath
from .source_math import Expr, identity

__all__ = [
    "RANK",
    "MOVES",
    "REDUCE",
    "FLAT",
    "NO_ARGS",
    "dense",
    "window_start",
    "window_at",
    "strides",
    "pad",
    "tree_of",
    "leaves",
    "chain_key",
    "chain_op",
    "element_op",
    "instr_rows",
]

RANK = 4  # movements and reductions run as 4-deep loops: slots of higher rank do not fit
MOVES = ("reshape", "detach", "permute", "expand", "slice", "unslice", "flip", "cat")
REDUCE = ("sum", "prod", "amax", "amin")


FLAT = [1] * RANK + [0] * (2 * RANK)  # the shape and strides fields of a row that has none
NO_ARGS = [[0, 0, 0], [0, 0], [0], []]  # the operand fields a row with k operands leaves empty


def dense(shape, steps):
    """Whether walking ``shape`` with strides ``steps`` visits one contiguous run in order (axes of
    extent 1 take no step)."""
    live = [d for d, m in enumerate(shape) if m != 1]
    return [steps[d] for d in live] == strides([shape[d] for d in live])


def window_start(small, big, params):
    """Where the window ``starts``/``steps`` of ``params`` of an array of shape ``big`` starts,
    when its ``small`` elements are one contiguous run of it; else None (slice and unslice)."""
    return window_at(small, big, tuple(params["starts"]), tuple(params["steps"]))


@functools.lru_cache(maxsize=4096)  # an unrolled recurrence takes the same few windows thousands of times
def window_at(small, big, starts, steps):
    """``window_start`` with the window given as tuples (so that it can be cached)."""
    st = strides(big)
    if not dense(small, [k * m for k, m in zip(st, steps)]):
        return None
    return sum(a * k for a, k in zip(starts, st))


def strides(shape):
    """The row-major strides of ``shape``, in elements."""
    s, acc = [], 1
    for n in reversed(shape):
        s.append(acc)
        acc *= n
    return s[::-1]


def pad(values, fill):
    """``values`` (a shape or strides) widened to ``RANK`` fields, ``fill`` in front."""
    return [fill] * (RANK - len(values)) + list(values)


def tree_of(tree, reads, k):
    """Instruction k's tree with its operands spelled out (``tree[k]`` leaves them out, None, when
    they are all reads: they are ``reads[k]`` then, until k is inlined somewhere)."""
    ins, kids = tree[k]
    return (ins, kids if kids is not None else [("leaf", e) for e in reads[k]])


def leaves(kids):
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


def chain_key(tape, node, leaves):
    """What ``chain_op`` renders of a tree, as a key: its instructions' primitives, parameters
    and dtypes, and which leaf each operand is."""
    if node[0] == "leaf":
        w, _, single = node[1]
        return leaves.index(node[1]), single, tape.dtypes[w]
    ins, kids = node
    return (ins.prim, tuple(ins.params.items()), tape.dtypes[ins.out]) + tuple(chain_key(tape, k, leaves) for k in kids)


def chain_op(tape, node, leaves):
    """The operation of a chain row: "=" and its operands' dtypes (marked as in ``element_op``),
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


def element_op(tape, ins, one):
    """The operation's name: "prim[params](dtypes)", a dtype marked "*" where that operand is read
    as one element, and "->b8" for a boolean result."""
    name = ins.prim + ("[" + ",".join(f"{k}={v!r}" for k, v in sorted(ins.params.items())) + "]" if ins.params else "")
    return f"{name}({','.join(tape.dtypes[a] + '*' * s for a, s in zip(ins.args, one))})" + (
        "->b8" if tape.dtypes[ins.out] == "b8" else ""
    )


def instr_rows(tape, ins, o, args, size, row, into):
    """Append the rows of one instruction (``o``, ``args``: arena offsets; ``into``: pieces of a
    concatenation already in place)."""
    p, shape, n = ins.params, tape.shapes[ins.out], size[ins.out]
    if ins.prim == "const":
        row("const", 1, o, val=float(p["value"]))
    elif ins.prim in ("expand", "permute", "slice", "flip"):
        src_shape = tape.shapes[ins.args[0]]
        st, base = strides(src_shape), args[0]
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
        row("move", n, o, base, shape=shape, src=src, dst=strides(shape))
    elif ins.prim == "unslice":
        src_shape, st = tape.shapes[ins.args[0]], strides(shape)
        start = window_start(src_shape, shape, p)
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
                src=strides(src_shape),
                dst=[k * m for k, m in zip(st, p["steps"])],
            )
    elif ins.prim == "cat":
        axis, st, at = p["axis"], strides(shape), 0
        flat = math.prod(shape[:axis]) == 1  # each piece is one contiguous window of the result
        for a, slot in zip(args, ins.args):
            piece = tape.shapes[slot]
            if slot not in into:  # a piece made in place needs no row
                if flat:
                    row("copy", size[slot], o + at * st[axis], a)
                else:
                    row("move", size[slot], o + at * st[axis], a, shape=piece, src=strides(piece), dst=st)
            at += piece[axis]
    elif ins.prim in REDUCE:
        src_shape = tape.shapes[ins.args[0]]
        kept = strides([1 if d in p["axes"] else m for d, m in enumerate(src_shape)])
        dst = [0 if d in p["axes"] else s for d, s in enumerate(kept)]
        row(
            ins.prim,
            n,
            o,
            args[0],
            shape=src_shape,
            src=strides(src_shape),
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
