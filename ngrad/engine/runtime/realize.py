"""Realization: compute the values of pending nodes.

Contract: ``realize(nodes)`` lowers the unrealized graph below ``nodes`` (stopping at nodes
that already hold values), runs it as one program and stores each requested node's value.
A realized node that passes no gradient on (a constant or a leaf) forgets its sources, so long chains of no-grad
computations (an ODE integrated step by step) never keep their history alive.
"""

from ..ir.graph import lower, target_of
from .dispatch import run

__all__ = ["realize"]


def realize(nodes):
    """Give every node in ``nodes`` its value; returns the values in order."""
    pending = [n for n in dict.fromkeys(nodes) if n.value is None]
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
            if not n.differentiable:
                n.srcs = ()
    return [n.value for n in nodes]
