"""Buffers: which memory a compiled plan's results and intermediates are written into.

Contract: ``taker(plan, made)`` is a function ``take(shape, dtype)`` lending an array from the
plan's pool (or reclaiming a result the caller has dropped, or allocating), recording it in
``made``; ``recycle(plan, made, results)`` gives the intermediates back to the pool and watches
the results until nothing references them. ``donors`` picks the dying inputs a loop may write in
place of; ``owned`` copies outputs that would share memory with an input or another output, so
callers always own their results; ``accumulator`` makes a reduction's accumulator.
"""

import sys
import threading

import numpy as np

from ..backend.source_math import identity
from ..ir.interpret import np_dtype
from .layout import keepdims

__all__ = ["POOL_MIN_BYTES", "LENT_MAX", "taker", "recycle", "donors", "owned", "root", "accumulator"]

# Arrays of at least this many bytes are kept by their plan for its next run: a new array costs
# a page fault per 4 KiB on first touch (measured here: 0.5 to 10 ms per 8 MB, depending on the
# kernel's huge-page compaction), which a loop calling the same gradient thousands of times would
# pay on every call. Intermediates go back to the plan's pool when the run ends. Results belong
# to the caller: the plan keeps watching a few of them (``LENT_MAX`` per result of a run, by
# shape and dtype: a scan holds one step's carries while the next step runs) and takes one back
# only once nothing else references it (the caller dropped it, and no view of it is alive), so
# the next run writes into memory that is already mapped.
POOL_MIN_BYTES = 1 << 16
LENT_MAX = 2


def _refcount(arrays, i):
    return sys.getrefcount(arrays[i])


# what ``_refcount`` reports for an array referenced only by its list (interpreter-dependent)
_UNREFERENCED = _refcount([np.empty(1)], 0)


def _reclaim(arrays):
    """An array of ``arrays`` that nothing else references, removed from the list; or None."""
    for i in range(len(arrays)):
        if _refcount(arrays, i) <= _UNREFERENCED:
            return arrays.pop(i)
    return None


_lent_lock = threading.Lock()


def taker(plan, made):
    """``take(shape, dtype)``: an array for this run of ``plan`` (pooled, reclaimed or new),
    appended to ``made``."""
    pool, lent = plan.pool, plan.lent

    def take(shape, dt):
        key = (shape, dt)
        free = pool.get(key)
        arr = free.pop() if free else None
        if arr is None and key in lent:
            with _lent_lock:
                arr = _reclaim(lent[key])
        if arr is None:
            arr = np.empty(shape, dt)
        made.append(arr)
        return arr

    return take


def recycle(plan, made, results):
    """The big arrays of ``made`` back to ``plan``: intermediates to its pool, ``results`` (handed
    to the caller) watched until they are dropped."""
    keep = {id(root(r)) for r in results}
    # a caller may hold one run's results through the next (a scan's carries): watch two runs' worth
    limit = LENT_MAX * max(1, len(keep))
    for arr in made:
        if arr.nbytes < POOL_MIN_BYTES:
            continue
        key = (arr.shape, arr.dtype)
        if id(arr) not in keep:
            plan.pool.setdefault(key, []).append(arr)
            continue
        with _lent_lock:
            watched = plan.lent.setdefault(key, [])
            if len(watched) >= limit:  # stop watching results the caller still holds
                unused = [i for i in range(len(watched)) if _refcount(watched, i) <= _UNREFERENCED]
                watched[:] = [watched[i] for i in unused]
            if len(watched) < limit:
                watched.append(arr)


def donors(gone, part, env, made):
    """Buffers this kernel may write its results into: arrays it reads only at its own index,
    that die at this step, that this run allocated, and that no other live value shares. Each
    element is read before it is overwritten, so the loop stays correct, and a gradient chain
    then moves through memory once instead of twice."""
    dying = set(gone)
    ours = {id(m) for m in made}
    candidates = []
    for (a, _), whole in zip(part.arrays, part.whole):
        arr = env.get(a)
        if whole and a in dying and arr is not None and arr.flags.c_contiguous and id(root(arr)) in ours:
            candidates.append(arr)
    if not candidates:
        return []
    sharing = {}  # root -> how many live values use its memory
    for v in env.values():
        if isinstance(v, np.ndarray):
            r = id(root(v))
            sharing[r] = sharing.get(r, 0) + 1
    return [arr for arr in candidates if sharing[id(root(arr))] == 1]


def accumulator(ins, tape, shape, fresh, take):
    """The array a kernel reduces into: filled with the identity, unless the kernel writes every
    element itself (``fresh``, see codegen)."""
    dt = np_dtype(tape.dtypes[ins.out])
    acc = take(keepdims(shape, ins), dt)
    if not fresh:
        acc.fill(identity(ins.prim, tape.dtypes[ins.out]))
    return acc


def owned(outs, values):
    """``outs`` with every output that is (a view of) an input or of another output copied, and
    every one that is not C-contiguous and writable: callers own their results."""
    taken = {id(root(v)) for v in values if isinstance(v, np.ndarray)}
    res = []
    for o in outs:
        if id(root(o)) in taken or not o.flags.c_contiguous or not o.flags.writeable:
            o = np.array(o, order="C", copy=True)
        taken.add(id(root(o)))
        res.append(o)
    return res


def root(a):
    """The array that owns ``a``'s memory."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a
