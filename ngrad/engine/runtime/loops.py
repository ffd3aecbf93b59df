"""Loops: how a compiled program runs a ``scan`` instruction.

Contract: ``scan(params, args)`` returns the packed result of a ``scan`` instruction
(``ir.prims.control``) on checked host operands, its body run step by step as a program of its
own through ``dispatch.prepare``: the body tiers, compiles and caches like any tape (once,
whatever the number of steps: a new length compiles nothing), and a step costs one call of the
body's driver. The CUDA target runs a scan's steps this way on the host (a step of a recurrence
is too small to fill a GPU; the operands cross once each way).
"""

import numpy as np

from ..ir.prims.control import body_of, run_scan
from .checks import aligned

__all__ = ["scan"]


def scan(params, args, numpy=False):
    """The packed result of ``scan(*args; **params)`` (see the module docstring). ``numpy``: the
    steps run interpreted or on the body's NumPy driver (``dispatch.numpy_body``), not compiled
    (the outer program runs on its own NumPy driver: its kernels are not ready)."""
    from .dispatch import numpy_body, prepare  # dispatch runs drivers, which run scans

    body = body_of(params["body"])
    # exact operands once (the outer program may hand over views): every step's are then exact
    # by construction, and the body's driver runs without its input checks
    args = [aligned(a) if isinstance(a, np.ndarray) else a for a in args]
    if not params["length"]:
        call = None
    else:
        call = numpy_body(params["body"], body) if numpy else prepare(body, checked=False)
    with np.errstate(all="ignore"):
        return run_scan(
            lambda tape, values: call(values),
            body,
            args,
            params["length"],
            params["reverse"],
            params["carries"],
            params["xs"],
            history=params["history"],
        )
