"""Loops: how a compiled program runs a ``scan`` instruction.

Contract: ``scan(params, args)`` returns the packed result of a ``scan`` instruction
(``ir.prims.control``) on checked host operands, its body run step by step as a program of its
own through ``dispatch.prepare``: the body tiers, compiles and caches like any tape (once,
whatever the number of steps: a new length compiles nothing), and a step costs one call of the
body's driver (a compiled body's ``driver.stepper``, which stores each step's carries straight
into the history row of the next: ``_stepped``). The CUDA target runs a scan's steps this way
on the host (a step of a recurrence is too small to fill a GPU; the operands cross once each
way). ``steps(text, tape)`` is how a
program that is not compiled yet (interpreted, or on its NumPy driver) runs a scan's steps: on
the body's compiled driver when that is ready, else ``dispatch.numpy_body``. A big result is
written into memory already mapped: one the caller has dropped since an earlier call (``_shelf``);
a new one of ``MAPPED_MIN_BYTES`` or more is mapped with all its pages at once (``_mapped``).
"""

import math
import mmap
import types
import weakref

import numpy as np

from ..config import jit_mode
from ..ir.interpret import np_dtype
from ..ir.prims.control import body_of, layout, roles, run_scan
from ..recent import Recent
from .buffers import POOL_MIN_BYTES, recycle, taker
from .checks import aligned

__all__ = ["scan", "steps", "MAPPED_MIN_BYTES"]


class _Lent(Recent):
    """Big scan results handed out, by (shape, dtype), each taken back once nothing references
    it (``buffers.taker`` and ``recycle``): a reverse-mode scan's result holds every step's
    carries (GradBench's ode at n = 100,000 and s = 100: 80 MB, whose fresh pages cost 8-16 ms of
    system time a call, and 70-190 ms the first time, while the kernel gathers huge pages). The
    ``SIZES`` most recently used sizes are kept, ``buffers.LENT_MAX`` results each."""

    SIZES = 8

    def bound(self):
        return self.SIZES


# what ``buffers`` keeps for a plan, kept here for every scan: no free list (a scan's result
# always goes to its caller), and the results lent out; ``known``: every result handed out, so
# that a result ``buffers.taker`` allocated anew is told from one it took back
_shelf = types.SimpleNamespace(pool={}, lent=_Lent(), known=weakref.WeakValueDictionary())


class _Compiled(Recent):
    """Bodies' compiled drivers (``dispatch.prepare``'s, once compiled), by body text: a step's
    driver is the same function from then on, and asking ``prepare`` again cost 35-70 µs a call
    (``config.compile_mode`` counts the CPUs each time), half of GradBench ode's smallest
    primal."""

    def bound(self):
        return 16


_compiled = _Compiled()

# A new scan result this big is mapped with every 4 KiB page present (``_mapped``), not on the
# huge pages NumPy asks for from 4 MiB: a process's first touch of huge pages is slow on this
# (virtual) machine, likely pages the host must back again, even with gigabytes of free 2 MiB
# blocks listed (GradBench ode's gradient at n = 100,000, s = 100: 80 MB of history, 105-165 ms
# of system time in its first call; 5-7 ms for the same process's next 80 MB), while mapping
# 4 KiB pages all at once costs 26-30 ms, and touching them one by one 70 ms.
MAPPED_MIN_BYTES = 1 << 22


def _mapped(size, dt):
    """A new array of ``size`` elements of ``dt`` on pages mapped at once (``MAP_POPULATE``,
    where the platform has it; else NumPy's)."""
    flags = getattr(mmap, "MAP_POPULATE", None)
    if flags is None or not hasattr(mmap, "MAP_ANONYMOUS"):
        return np.empty(size, dt)
    pages = mmap.mmap(-1, size * dt.itemsize, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | flags)
    return np.frombuffer(pages, dt, count=size)


def scan(params, args, numpy=False):
    """The packed result of ``scan(*args; **params)`` (see the module docstring). ``numpy``: the
    steps run interpreted or on the body's NumPy driver (``dispatch.numpy_body``), not compiled
    (the outer program runs on its own NumPy driver: its kernels are not ready; see ``steps``)."""
    from .dispatch import prepare  # dispatch runs drivers, which run scans
    from .driver import stepper

    body = body_of(params["body"])
    # exact operands once (the outer program may hand over views): every step's are then exact
    # by construction, and the body's driver runs without its input checks
    args = [aligned(a) if isinstance(a, np.ndarray) else a for a in args]
    if not params["length"]:
        call = None
    elif numpy:
        call = steps(params["body"], body)
    else:
        call = _compiled.get(params["body"]) if jit_mode() != "never" else None
        if call is None:
            call = prepare(body, checked=False)
            if stepper(call) is not None:  # compiled: the same driver from now on
                _compiled[params["body"]] = call
    lay = layout(body, params["length"], params["carries"], params["history"])
    dt, made = np_dtype(lay.dtype), []
    out = taker(_shelf, made)((lay.size,), dt) if lay.size * dt.itemsize >= POOL_MIN_BYTES else None
    if out is not None and _shelf.known.get(id(out)) is not out:  # new memory: no page touched yet
        if out.nbytes >= MAPPED_MIN_BYTES:
            out = made[-1] = _mapped(lay.size, dt)
        _shelf.known[id(out)] = out
    stepping = None if call is None else stepper(call)
    with np.errstate(all="ignore"):
        if stepping is not None:
            out = _stepped(stepping, body, args, params, lay, dt if out is None else out)
        else:
            out = run_scan(
                lambda tape, values: call(values),
                body,
                args,
                params["length"],
                params["reverse"],
                params["carries"],
                params["xs"],
                history=params["history"],
                out=out,
            )
    recycle(_shelf, made, [out])
    return out


def _row(a, t):
    """Row ``t`` of ``a`` as an array (a view; 0-d where ``a`` is 1-d)."""
    return a[t] if a.ndim > 1 else a[t : t + 1].reshape(())


def _stepped(stepping, body, args, params, lay, out):
    """``run_scan`` on a compiled body's ``Stepping`` (``driver.stepper``): each step stores its
    carries straight into the history row of the next step (the last into the final carries;
    with no history, into one of two sets of arrays taken in turn) and its ys into their rows.
    ``out``: the packed result's array, or its dtype (a new one is made)."""
    length, carries = params["length"], params["carries"]
    if not isinstance(out, np.ndarray):
        out = np.empty(lay.size, out)
    carry, seq, inv = (list(args[r.start : r.stop]) for r in roles(len(args), carries, params["xs"]))
    order = range(length - 1, -1, -1) if params["reverse"] else range(length)
    slices = [[s[t, ...] for t in order] if s.ndim == 1 else list(s[::-1] if params["reverse"] else s) for s in seq]
    kept, ys = ([out[o : o + math.prod(s)].reshape(s) for o, s in part] for part in (lay.history, lay.ys))
    finals = [out[o : o + math.prod(s)].reshape(s) for o, s in lay.finals]
    made = []
    take = taker(stepping.plan, made)
    scratch = [take(shape, dt) for shape, dt in stepping.scratch]
    turns = [] if kept or length < 2 else [[take(f.shape, f.dtype) for f in finals] for _ in range(2)]
    drive = stepping.drive
    for step in range(length):
        at = order[step]
        if step == 0:
            for h, c in zip(kept, carry):
                h[at] = c
        if step == length - 1:
            targets = finals
        elif kept:
            targets = [_row(h, order[step + 1]) for h in kept]
        else:
            targets = turns[step % 2]
        outs = targets + [_row(y, at) for y in ys]
        got = drive(carry + [s[step] for s in slices] + inv, outs, scratch)
        for g, o in zip(got, outs):
            if g is not None:
                o[...] = g
        carry = targets
    if not length:
        for f, c in zip(finals, carry):
            f[...] = c
    recycle(stepping.plan, made, [])
    return out


def steps(text, tape):
    """How a program whose own kernels are not ready runs the steps of a scan whose body is
    ``tape`` (canonical text ``text``): on the body's compiled driver when its tier is ready, else
    interpreted or on its NumPy driver (``dispatch.numpy_body``). The body is a structure of its
    own, so a scan of a new length (a new outer program, planned and compiled anew) finds its
    body compiled by the runs of other lengths: GradBench's ode gradient at n = 100,000 and a new
    s = 100 took 245 ms on the body's NumPy driver at its first call, against 75 compiled.

    >>> import numpy as np
    >>> from ngrad.engine.ir.tape import Builder
    >>> b = Builder()
    >>> x = b.input((2,), "f64")
    >>> body = b.finish([x * x])
    >>> steps(body.format(), body)([np.array([1.0, 3.0])])[0]
    array([1., 9.])
    """
    from .dispatch import numpy_body, prepare, records

    record = None if jit_mode() == "never" else records.get(tape.key())
    if record is not None and record.tier is not None and record.tier.ready():
        return prepare(tape, checked=False)
    return numpy_body(text, tape)
