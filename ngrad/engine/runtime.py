"""The runtime: the one entry point that executes tapes.

Contract: ``run(tape, values)`` checks every input against the tape's slot (shape, dtype,
kind) before anything executes, runs the tape, and returns fresh, writable, C-contiguous
arrays that share memory with no input. Today every tape runs on the NumPy interpreter;
the compiled targets plug in here, behind the same checks. ``NGRAD_DEBUG=1`` prints each
tape before it runs.
"""
import os
import sys

import numpy as np

from .interpret import interpret, np_dtype

__all__ = ["run", "debug_level"]


def debug_level():
    try:
        return int(os.environ.get("NGRAD_DEBUG", "0") or 0)
    except ValueError:
        return 0


def _check(tape, values):
    if len(values) != len(tape.inputs):
        raise ValueError(f"tape takes {len(tape.inputs)} inputs, got {len(values)}")
    for i, (s, k, v) in enumerate(zip(tape.inputs, tape.kinds, values)):
        if k == "scalar":
            if not isinstance(v, (int, float, bool, np.number, np.bool_, np.ndarray)) or np.ndim(v) != 0:
                raise TypeError(f"input {i} of the tape must be a scalar, got {type(v).__name__}")
            continue
        if not isinstance(v, np.ndarray):
            raise TypeError(f"input {i} of the tape must be an ndarray, got {type(v).__name__}")
        if v.shape != tape.shapes[s] or v.dtype != np_dtype(tape.dtypes[s]):
            raise ValueError(f"input {i} of the tape must be {tape.dtypes[s]}{list(tape.shapes[s])}, "
                             f"got {v.dtype}{list(v.shape)}")


def run(tape, values):
    """Execute ``tape`` on ``values`` after validating them; return owned output arrays."""
    _check(tape, values)
    if debug_level() >= 1:
        print(f"ngrad: running tape ({len(tape.instrs)} instrs)\n{tape.format()}", file=sys.stderr)
    outs = interpret(tape, values)
    ids = {id(v) for v in values}
    res = []
    for o in outs:
        if id(o) in ids or o.base is not None or not o.flags.c_contiguous or not o.flags.writeable:
            o = np.array(o, order="C", copy=True)
        ids.add(id(o))
        res.append(o)
    return res
