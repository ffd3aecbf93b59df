"""Realization: compute the values of pending nodes.

Contract: ``realize(nodes)`` lowers the unrealized graph below ``nodes`` (stopping at nodes
that already hold values), runs it as one program and stores each requested node's value.
A realized node that passes no gradient on (a constant or a leaf) forgets its sources, so long chains of no-grad
computations (an ODE integrated step by step) never keep their history alive.
``realize(nodes, keep=True)`` also keeps the value of every pending node of that graph that is
still referenced from outside it (``held``): a tensor the program still holds (the coefficients of
an optimizer loop, between two ``.item()``) starts the next read from its value instead of
recomputing its whole history, so a loop's pending history stays the size of one iteration.
A loop realizes graphs of one structure again and again: the tape lowered for a structure is
kept (``Recent``), so the next graph of that structure is only walked, not lowered again.
"""

import sys

from ..ir.graph import Node, lower, target_of
from ..ir.tape import params_key
from ..recent import Recent
from .dispatch import run

__all__ = ["KEEP_SOURCES", "realize", "held", "pending_count"]

# views are as cheap to recompute as to keep (and keeping an expand would materialize it): a held
# view keeps its source's value instead
_VIEWS = frozenset(["reshape", "permute", "expand", "slice", "flip", "detach"])

# the hash of a graph structure (``_scan``'s key) -> [(that key, the tape ``lower`` made of it)]:
# a lookup hashes the fresh key once and compares it once with the kept one (a ``Recent``'s own
# ``get`` does both twice, its ``move_to_end`` looking the key up again: 7 µs of the 110 of an
# iteration of PyTorch's polynomial tutorial). Only graphs of up to _MAX_KEPT nodes, so that the
# keys stay small. A loop's graphs are, with the depth bound: a chain of PENDING_DEPTH (1,024)
# operations with a Python number each is 2,049 nodes (at 2,048, such a chain was lowered again
# at every depth-bound realization)
_tapes = Recent()
_MAX_KEPT = 4096


def realize(nodes, keep=False):
    """Give every node in ``nodes`` its value; returns the values in order. ``keep``: also give
    values to the pending nodes below them that something outside the graph still references."""
    pending = [n for n in dict.fromkeys(nodes) if n.value is None]
    if not pending:
        return [n.value for n in nodes]
    if target_of(pending) == "cuda":
        if keep:
            pending += held(pending)
        groups = [[n for n in pending if n.device == "cuda"], [n for n in pending if n.device != "cuda"]]
        for group in groups:  # one program per device
            if group:
                low = lower(group)
                _store(group, run(low.tape, [s.value for s in low.sources], target_of(group)))
        return [n.value for n in nodes]
    scan = _scan(pending)
    structure, sources, _, _, index = scan
    if keep:
        pending += _held(pending, scan)
    key = (structure, tuple([index[n] for n in pending]))
    h = hash(key)
    kept = _tapes.get(h)
    tape = next((t for k, t in kept if k == key), None) if kept is not None else None
    if tape is None:
        low = lower(pending)
        tape, ordered = low.tape, low.sources
        if (
            len(structure) <= _MAX_KEPT
            and len(ordered) == len(sources)
            and all(a is b for a, b in zip(ordered, sources))
        ):
            if kept is None:
                _tapes[h] = [(key, tape)]
            else:  # another structure of the same hash
                kept.append((key, tape))
        sources = ordered
    _store(pending, run(tape, [s.value for s in sources], "cpu"))
    return [n.value for n in nodes]


# Set while forward-mode AD is active (the facade's dual_level): tangents are computed through the
# graph, so a realized node keeps its sources
KEEP_SOURCES = [False]


def _store(group, outs):
    keep = KEEP_SOURCES[0]
    for n, v in zip(group, outs):
        n.value = v
        n.depth = 0
        if not n.differentiable and not keep:
            n.srcs = ()


def _scan(roots):
    """Walk the pending graph below ``roots`` in ``lower``'s order. Returns its structure (what
    ``lower`` makes a tape of: ops, params, types, edges, and the types of the sources), the
    source nodes in ``lower``'s input order, the pending nodes other than the roots and constants,
    how many times sources of pending nodes reference each of those, and each node's position."""
    parts, sources, walked, refs, index = [], [], [], {}, {}
    rooted = set(roots)
    stack = [(r, False) for r in reversed(roots)]
    pop, push = stack.pop, stack.append
    while stack:
        n, ready = pop()
        if n in index:
            continue
        if n.value is not None:
            index[n] = len(parts)
            p = n.params
            parts.append((n.shape, n.dtype, bool(p and p.get("scalar"))))
            sources.append(n)
            continue
        if not ready:
            push((n, True))
            for s in reversed(n.srcs):
                if s not in index:
                    push((s, False))
            continue
        index[n] = len(parts)
        args = []
        for s in n.srcs:
            args.append(index[s])
            if s.value is None:
                refs[s] = refs.get(s, 0) + 1
        p = n.params
        parts.append((n.op, params_key(p) if p else (), n.shape, n.dtype, tuple(args)))
        if n not in rooted and n.op != "const":
            walked.append(n)
    return tuple(parts), sources, walked, refs, index


def _outside(scan):
    """How many references to each pending node of a ``_scan`` come from outside the walked graph
    (a tensor, another graph), plus the scan's own (``_OWN``, the same for every node): CPython's
    reference count less the references of the graph's sources."""
    walked, refs = scan[2], scan[3]
    return [sys.getrefcount(n) - refs[n] for n in walked]


def _calibrate():
    """The count ``_outside`` gives a node that nothing outside the graph holds."""
    leaf = Node("input", (), None, (), None, value=0)
    root = Node("neg", (Node("neg", (leaf,), None, (), None),), None, (), None)
    scan = _scan([root])
    return _outside(scan)[0]


_OWN = _calibrate()


def _held(roots, scan):
    """``held``, given the ``_scan`` of ``roots`` (alive while counting: its containers hold
    the references ``_OWN`` counts)."""
    out, wanted = [], set(roots)
    for n, extra in zip(scan[2], _outside(scan)):
        if extra <= _OWN:
            continue
        while n.op in _VIEWS and n.srcs:  # keep the value under a chain of views
            n = n.srcs[0]
            if n.value is not None or n.op == "const":
                break
        else:
            if n not in wanted:
                wanted.add(n)
                out.append(n)
    return out


def held(roots):
    """The pending nodes below ``roots`` (not themselves roots) that something outside the graph
    realizing ``roots`` still references (a live tensor, another pending graph), in a
    deterministic order: the outputs a loop keeps besides what it reads, the same every iteration.

    A view is not kept: its pending source is, so the view is one cheap op over a value."""
    roots = [r for r in dict.fromkeys(roots) if r.value is None]
    return _held(roots, _scan(roots))


def pending_count(roots):
    """How many nodes below ``roots`` (included) wait for a value, constants aside: the size of
    the program that reading them now would run."""
    roots = [r for r in dict.fromkeys(roots) if r.value is None]
    return len(_scan(roots)[2]) + len(roots)
