"""Realization: compute the values of pending nodes.

Contract: ``realize(nodes)`` lowers the unrealized graph below ``nodes`` (stopping at nodes
that already hold values), runs it as one program and stores each requested node's value.
A realized node that passes no gradient on (a constant or a leaf) forgets its sources, so long chains of no-grad
computations (an ODE integrated step by step) never keep their history alive.
"""
from .graph import lower
from .runtime import run

__all__ = ["realize"]


def realize(nodes):
    """Give every node in ``nodes`` its value; returns the values in order."""
    pending = [n for n in dict.fromkeys(nodes) if n.value is None]
    if pending:
        low = lower(pending)
        outs = run(low.tape, [s.value for s in low.sources])
        for n, v in zip(pending, outs):
            n.value = v
            if not n.differentiable:
                n.srcs = ()
    return [n.value for n in nodes]
