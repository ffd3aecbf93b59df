"""Realization: compute the values of pending nodes.

Contract: ``realize(nodes)`` lowers the unrealized graph below ``nodes`` (stopping at nodes
that already hold values), runs it as one program and stores each requested node's value.
A realized node that passes no gradient on (a constant or a leaf) forgets its sources, so long chains of no-grad
computations (an ODE integrated step by step) never keep their history alive.
``realize(nodes, keep=True)`` also keeps the value of every pending node of that graph that is
still referenced from outside it (``held``): a tensor the program still holds (the coefficients of
an optimizer loop, between two ``.item()``) starts the next read from its value instead of
recomputing its whole history, so a loop's pending history stays the size of one iteration.
"""

import sys

from ..ir.graph import Node, lower, target_of
from .dispatch import run

__all__ = ["realize", "held", "pending_count"]

# views are as cheap to recompute as to keep (and keeping an expand would materialize it): a held
# view keeps its source's value instead
_VIEWS = frozenset(["reshape", "permute", "expand", "slice", "flip", "detach"])
_NOT_COMPUTED = frozenset(["const", "input"])


def realize(nodes, keep=False):
    """Give every node in ``nodes`` its value; returns the values in order. ``keep``: also give
    values to the pending nodes below them that something outside the graph still references."""
    pending = [n for n in dict.fromkeys(nodes) if n.value is None]
    if keep and pending:
        pending += held(pending)
    groups = [pending]
    if len(pending) > 1 and target_of(pending) == "cuda":  # one program per device
        groups = [[n for n in pending if n.device == "cuda"], [n for n in pending if n.device != "cuda"]]
    for group in groups:
        if not group:
            continue
        low = lower(group)
        outs = run(low.tape, [s.value for s in low.sources], target_of(group))
        for n, v in zip(group, outs):
            n.value = v
            n.depth = 0
            if not n.differentiable:
                n.srcs = ()
    return [n.value for n in nodes]


def _walk(roots):
    """The pending nodes below ``roots`` (roots excluded), and how many times the sources of
    pending nodes reference each of them (by id)."""
    refs, walked, stack = {}, [], list(roots)
    for r in roots:
        refs[id(r)] = 0
    while stack:
        n = stack.pop()
        for s in n.srcs:
            if s.value is not None or s.op in _NOT_COMPUTED:
                continue
            k = id(s)
            c = refs.get(k)
            if c is None:
                refs[k] = 1
                walked.append(s)
                stack.append(s)
            else:
                refs[k] = c + 1
    return walked, refs


def _outside(walked, refs):
    """How many references to each node of ``walked`` come from outside the walked graph (a tensor,
    another graph): CPython's reference count less the graph's own and this loop's."""
    return [sys.getrefcount(n) - refs[id(n)] for n in walked]


def _calibrate():
    """The references ``_outside`` counts for a node nothing else holds (the list, the loop)."""
    leaf = Node("input", (), None, (), None, value=0)
    root = Node("neg", (Node("neg", (leaf,), None, (), None),), None, (), None)
    walked, refs = _walk([root])
    return _outside(walked, refs)[0]


_OWN = _calibrate()


def held(roots):
    """The pending nodes below ``roots`` (not themselves roots) that something outside the graph
    realizing ``roots`` still references (a live tensor, another pending graph), in a
    deterministic order: the outputs a loop keeps besides what it reads, the same every iteration.

    A view is not kept: its pending source is, so the view is one cheap op over a value."""
    walked, refs = _walk(roots)
    if not walked:
        return []
    out, wanted = [], {id(r) for r in roots}
    for n, extra in zip(walked, _outside(walked, refs)):
        if extra <= _OWN:
            continue
        while n.op in _VIEWS and n.srcs:  # keep the value under a chain of views
            n = n.srcs[0]
            if n.value is not None or n.op in _NOT_COMPUTED:
                break
        else:
            if id(n) not in wanted:
                wanted.add(id(n))
                out.append(n)
    return out


def pending_count(roots):
    """How many nodes below ``roots`` (included) wait for a value: the size of the program that
    reading them now would run."""
    walked, refs = _walk([r for r in roots if r.value is None])
    return len(walked) + sum(1 for r in dict.fromkeys(roots) if r.value is None)
