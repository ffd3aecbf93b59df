"""The lazy graph: what the facade records, and its lowering to a tape.

Contract: a ``Node`` is one recorded operation (a primitive name, source nodes, params,
shape and dtype) or a source of values (``op == "input"``, with ``value`` set). Elementwise
nodes may broadcast their sources; ``lower`` makes that explicit (reshape + expand) so tapes
stay strict. ``lower(roots, grad)`` walks the graph iteratively (any depth) and returns a
``Lowered``: the tape, the node of each slot, and the source nodes in input order. In
``grad`` mode realized nodes that require grad are recomputed instead of being read, so the
whole differentiable path is on the tape (with ``wrt`` given, only those on a path to one of
``wrt``: the rest are read, as torch reads any saved value), and every node that does not require grad but is
computed from one that does is followed by a ``detach`` instruction: cotangents stop there.
``replay(tape, inputs)`` is the inverse direction: it records a tape as new nodes (this is how
``create_graph=True`` turns a joint tape into a differentiable graph).
"""

from typing import NamedTuple

import numpy as np

from .dtypes import DIFFERENTIABLE, from_short
from .prims import ELEMENTWISE, PRIMS
from .tape import NO_PARAMS, Builder, Instr, Tape

__all__ = ["Node", "lower", "Lowered", "post_order", "replay", "settle_depth", "source", "target_of"]


class Node:
    """One recorded operation or value source. ``requires_grad``: gradients flow into it;
    ``differentiable``: its gradient flows on into ``srcs`` (False for leaves and constants).
    ``depth``: the longest chain of pending nodes it ends (see ``PENDING_DEPTH``); ``grad_depth``:
    the longest chain of operations recorded with gradients that it ends, never reset (the reverse
    pass cuts a graph deeper than ``reverse.DEEP_SEGMENT`` into segments).
    ``device``: ``"cpu"``, ``"cuda"``, or None for values usable on any device (see ``_place``).
    ``meta``: None, or the facade's annotations of the node (the engine never reads them)."""

    # meta is set on every node that requires grad (its grad_fn's name): a slot, where an instance
    # dict would add 256 bytes to each node of a deep graph. A node built field by field (as
    # ngrad.compile's replay builds its outputs) sets both itself.
    __slots__ = (
        "op",
        "srcs",
        "params",
        "shape",
        "dtype",
        "value",
        "requires_grad",
        "differentiable",
        "depth",
        "grad_depth",
        "device",
        "meta",
        "__dict__",
        "__weakref__",
    )

    def __init__(self, op, srcs, params, shape, dtype, requires_grad=False, value=None):
        self.meta = None
        self.device = "cpu"
        self.op = op
        self.srcs = srcs
        self.params = params
        self.shape = shape
        self.dtype = dtype
        self.value = value
        self.requires_grad = self.differentiable = requires_grad
        if CUDA_SEEN[0] and srcs:
            _place(self, srcs)
        if ON_RECORD[0] is not None:
            ON_RECORD[0](self)
        self.grad_depth = 0
        if srcs:
            d = g = 0
            try:
                for s in srcs:
                    if s.depth > d:
                        d = s.depth
                    if s.grad_depth > g:
                        g = s.grad_depth
            except AttributeError:  # a source built field by field (ngrad.compile's outputs: values)
                d = max(getattr(s, "depth", 0) for s in srcs)
                g = max(getattr(s, "grad_depth", 0) for s in srcs)
            self.depth = d + 1
            if requires_grad:
                self.grad_depth = g + 1
            if d >= PENDING_DEPTH and ON_DEEP[0] is not None:
                ON_DEEP[0](self)
        else:
            self.depth = 0

    def __repr__(self):
        return f"Node({self.op}, {self.dtype.short}{list(self.shape)})"


# A function the facade sets while a recording mode needs to annotate every new node
# (inference_mode marks inference values, anomaly detection keeps the creation traceback).
ON_RECORD = [None]

# The longest chain of pending nodes a recorded node may end (``depth``, an upper bound: a source
# realized since keeps the depth it had). A node deeper than that is handed to ``ON_DEEP[0]``,
# which the facade sets to realize it, so a loop that never reads its result still runs in
# programs of bounded size and keeps a bounded pending history. 1024: s = s * 0.9 + x ran as fast
# per iteration at 256 and at 1024 (both on the bytecode tier), and an unrolled recurrence of a
# few hundred steps (RK4 over 40 steps is 843 deep) stays one program.
PENDING_DEPTH = 1024
ON_DEEP = [None]

# Set once a CUDA value exists: until then every node is on the CPU and recording skips placement.
CUDA_SEEN = [False]


def _free(n):
    """Whether ``n`` can join a graph on any device: literals, runtime scalars, index arrays made
    by the facade (``device`` None) and, as in PyTorch, realized 0-d CPU tensors (copied over)."""
    return (
        n.device is None
        or n.op == "const"
        or (
            n.op == "input"
            and ((n.params is not None and n.params.get("scalar")) or (not n.shape and n.device == "cpu"))
        )
    )


def _place(node, srcs):
    """Put ``node`` on the device of its sources; PyTorch's error when they disagree."""
    found = None
    for s in srcs:
        if _free(s):
            continue
        if found is None:
            found = s.device
        elif s.device != found:
            a, b = ("cuda:0", "cpu") if found == "cuda" else ("cpu", "cuda:0")
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!"
            )
    if found is None:
        node.device = None  # computed from literals and scalars only: it goes where it is used
    elif found == "cuda":
        node.device = "cuda"


def source(value, dtype, requires_grad=False, scalar=False, device="auto"):
    """A node holding a realized array (``scalar``: a runtime Python number, 0-d). ``device``:
    ``"auto"`` follows the value (a device array is on ``"cuda"``), ``None`` marks a value the
    engine copies to whichever device uses it (index arrays)."""
    n = Node("input", (), {"scalar": True} if scalar else None, value.shape, dtype, False, value)
    n.requires_grad = requires_grad
    if device == "auto":
        if value.__class__ is not np.ndarray and not scalar and hasattr(value, "copy_to_host"):
            n.device = "cuda"
            CUDA_SEEN[0] = True
    elif device != "cpu":
        n.device = device
    return n


def post_order(roots, parents):
    """The vertices reachable from ``roots`` through ``parents(v)``, each listed after every
    vertex it leads to (iterative depth-first search: any depth)."""
    seen, post = set(), []
    stack = [(r, False) for r in roots]
    while stack:
        v, done = stack.pop()
        if done:
            post.append(v)
            continue
        if id(v) in seen:
            continue
        seen.add(id(v))
        stack.append((v, True))
        stack.extend((p, False) for p in parents(v) if id(p) not in seen)
    return post


def settle_depth(root):
    """Make ``depth`` exact on the pending graph below ``root`` (a source realized since a node
    was recorded leaves that node's depth too high) and return ``root``'s."""
    settled = set()
    stack = [root]
    while stack:
        v = stack[-1]
        d, waiting = 0, False
        for s in v.srcs:
            if s.value is not None:
                s.depth = 0
            elif s not in settled:
                stack.append(s)
                waiting = True
            elif s.depth > d:
                d = s.depth
        if waiting:
            continue
        stack.pop()
        v.depth = d + 1
        settled.add(v)
    return root.depth


def target_of(nodes):
    """The target a program computing ``nodes`` runs on (one device: recording checked that)."""
    for n in nodes:
        if n.device == "cuda":
            return "cuda"
    return "cpu"


class Lowered(NamedTuple):
    """A lowered graph: ``tape``; ``sources``: nodes feeding its inputs, in order; ``slot_of``:
    node -> slot; ``node_of_instr``: instruction index -> the node it computes."""

    tape: Tape
    sources: list
    slot_of: dict
    node_of_instr: dict


def lower(roots, grad=False, cuts=(), recompute=(), literal=None, wrt=None, reads=()):
    """Lower the graph below ``roots`` to a tape whose outputs are the roots (see module doc).

    ``cuts``: realized nodes read as inputs even in ``grad`` mode (the reverse pass then runs
    in segments between them: tensor hooks, custom Functions; forward mode reads its dual
    tensors this way). ``recompute``: realized nodes put on the tape anyway (forward mode: the
    path from the dual tensors, which tangents must flow along). ``literal(node)``: whether a
    one-element source becomes a const of the tape instead of an input (``ngrad.compile``).
    ``wrt``: in ``grad`` mode, the nodes whose cotangents are wanted; a realized node from which
    none of them is reachable is read, not recomputed, so a loop that differentiates its latest
    value (``autograd.grad(f(y), y, create_graph=True)``) lowers only what lies above it.
    ``reads``: pending nodes read as inputs all the same (a scan's body reads the work that
    depends on no step as values its scan computes once, outside the loop)."""
    b = Builder()
    below = _Below(wrt) if grad and wrt is not None else None
    slot_of, sources, node_of_instr = {}, [], {}
    bcast = {}
    spreads = {}  # op -> whether its sources broadcast to its shape
    moves = {}  # (op, shape) -> the params of a broadcasting reshape or expand, one dict each
    t = b.tape
    shapes, dtypes, inputs, kinds, instrs = t.shapes, t.dtypes, t.inputs, t.kinds, t.instrs
    stack = [(r, False) for r in reversed(roots)]
    push, new_instr = stack.append, object.__new__
    while stack:
        n, ready = stack.pop()
        if not ready:
            if n in slot_of:
                continue
            if (
                n.value is not None
                and (n in cuts or not ((grad and n.differentiable and (below is None or below(n))) or n in recompute))
            ) or (reads and n in reads):
                if literal is not None and literal(n):
                    slot_of[n] = b.full(np.asarray(n.value).reshape(-1)[0], n.shape, n.dtype.short).slot
                    continue
                # Builder.input, inlined: a graph may have a source per operation
                slot_of[n] = len(shapes)
                shapes.append(n.shape)
                dtypes.append(n.dtype.short)
                inputs.append(len(shapes) - 1)
                kinds.append("scalar" if n.params and n.params.get("scalar") else "tensor")
                sources.append(n)
                continue
            # computed here, once its sources are: marked ready, it comes back after them (in a
            # DAG nothing below it can push it again, so it is written once)
            push((n, True))
            for s in reversed(n.srcs):
                if s not in slot_of:
                    push((s, False))
            continue
        op = n.op
        if op == "input":
            raise RuntimeError("a source node lost its value (it was freed) and cannot be recomputed")
        if op == "const":  # one literal per value and dtype, however many nodes spell it
            params = n.params
            slot_of[n] = b.full(params["value"], (), params["dtype"]).slot
            continue
        srcs = n.srcs
        args = tuple(map(slot_of.__getitem__, srcs))
        spread = spreads.get(op)
        if spread is None:
            spread = spreads[op] = PRIMS[op].kind in ELEMENTWISE and op != "cast"
        # operands of another shape are broadcast (counted in C: most have the node's shape)
        if spread and list(map(shapes.__getitem__, args)).count(n.shape) != len(args):
            args = _broadcast(b, list(args), n.shape, bcast, moves)
        v = len(shapes)
        node_of_instr[len(instrs)] = n
        # Builder.emit_known, inlined. The node's params are copied (the facade updates a
        # detach's), and shared when empty
        shapes.append(n.shape)
        dtypes.append(n.dtype.short)
        params = n.params
        ins = new_instr(Instr)  # Instr(...) without its __init__ call
        ins.out, ins.prim, ins.args, ins.params = v, op, args, dict(params) if params else NO_PARAMS
        instrs.append(ins)
        if grad and not n.differentiable and op != "detach":
            for s in srcs:
                if s.requires_grad:
                    v = b.var(v).detach().slot
                    break
        slot_of[n] = v
    return Lowered(b.finish([b.var(slot_of[r]) for r in roots]), sources, slot_of, node_of_instr)


def _broadcast(b, args, shape, bcast, moves):
    """``args`` broadcast to ``shape``: each slot of another shape reshaped to the rank, then
    expanded, once per slot and shape (``bcast``)."""
    shapes, dtypes = b.tape.shapes, b.tape.dtypes
    for i, a in enumerate(args):
        if shapes[a] != shape:
            key = (a, shape)
            v = bcast.get(key)
            if v is None:
                v = a
                if len(shapes[v]) < len(shape):
                    ranked = (1,) * (len(shape) - len(shapes[v])) + shapes[v]
                    v = b.emit_known("reshape", [v], _shaped(moves, "reshape", ranked), ranked, dtypes[a])
                if shapes[v] != shape:
                    v = b.emit_known("expand", [v], _shaped(moves, "expand", shape), shape, dtypes[a])
                bcast[key] = v
            args[i] = v
    return tuple(args)


def _shaped(moves, op, shape):
    """The params ``{"shape": shape}`` of a broadcasting ``op``, one dict per op and shape (a tape
    broadcasting a scalar at every step would hold a dict per step)."""
    params = moves.get((op, shape))
    if params is None:
        params = moves[(op, shape)] = {"shape": shape}
    return params


class _Below:
    """``below(n)``: whether a node of ``wrt`` lies strictly below ``n`` on a differentiable path
    (memoized, iterative: any depth)."""

    def __init__(self, wrt):
        self.wrt = set(wrt)
        self.reach = {}  # node -> whether it is in wrt or one lies below it

    def __call__(self, n):
        if len(self.wrt) == 1 and n in self.wrt:
            return False  # a DAG: the only target cannot lie below itself
        reach, wrt = self.reach, self.wrt
        stack = [n]
        while stack:
            v = stack[-1]
            if v in reach:
                stack.pop()
                continue
            waiting = False
            if v.differentiable:
                for s in v.srcs:
                    if s.requires_grad and s not in reach and s not in wrt:
                        stack.append(s)
                        waiting = True
            if waiting:
                continue
            stack.pop()
            reach[v] = v in wrt or self._feeds(v)
        return self._feeds(n)

    def _feeds(self, v):
        """Whether a source of ``v`` its gradient flows into is in ``wrt`` or reaches one (its
        sources outside ``wrt`` are in ``reach`` already)."""
        if v.differentiable:
            for s in v.srcs:
                if s.requires_grad and (s in self.wrt or self.reach[s]):
                    return True
        return False


def replay(tape, inputs, grad_enabled, known=None):
    """Record ``tape`` as nodes over ``inputs`` (one node per input slot); return output nodes.

    ``known`` maps slots to existing nodes that already compute them (the forward part of a
    joint tape), so they are reused rather than recorded twice.
    """
    env = dict(known or {})
    env.update(zip(tape.inputs, inputs))
    for ins in tape.instrs:
        if ins.out in env:
            continue
        srcs = tuple(env[a] for a in ins.args)
        dtype = tape.dtypes[ins.out]
        rg = (
            grad_enabled
            and PRIMS[ins.prim].vjp is not None
            and dtype in DIFFERENTIABLE
            and any(s.requires_grad for s in srcs)
        )
        env[ins.out] = Node(ins.prim, srcs, dict(ins.params) or None, tape.shapes[ins.out], from_short(dtype), rg)
    return [env[s] for s in tape.outputs]
