"""Threads: how many run the big fused loops, and running one loop in chunks of rows.

Contract: ``set_num_threads(n)``/``get_num_threads()`` set and read the process-wide thread
count (1: every kernel serial). ``run_chunked`` calls a row-local segment's function on one chunk
of rows per thread, each with private accumulators for reductions over axis 0, combined after.
"""

import concurrent.futures
import os
import threading

import numpy as np

from .buffers import accumulator
from .layout import kept

__all__ = ["set_num_threads", "get_num_threads", "run_chunked"]

_threads = 1


def set_num_threads(n):
    """Use ``n`` threads for large fused loops (1, the default, keeps every kernel serial).

    >>> import ngrad
    >>> ngrad.set_num_threads(2); ngrad.get_num_threads()
    2
    >>> ngrad.set_num_threads(1)
    """
    global _threads
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"set_num_threads expects an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"Number of threads must be positive, got {n}")
    _threads = int(n)


def get_num_threads():
    """The number of threads large fused loops use (see ``set_num_threads``)."""
    return _threads


# Threads: a big kernel runs in chunks of its outermost loop, one chunk per thread, each a call
# of the same serial kernel (compiled ``nogil``) on row slices of its arrays; reductions over
# axis 0 get a private accumulator per chunk, combined afterwards. No parallel compile (Numba's
# ``parallel=True`` doubles compile time) and no Numba threading layer: a plain Python pool,
# safe with concurrent Python threads, and rebuilt in a child after ``fork``.
_pool = None
_pool_lock = threading.Lock()


def _workers(n):
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers != n:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="ngrad")
        return _pool


def _forget_pool():  # after fork the pool's threads do not exist in the child
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)

_COMBINE = {"sum": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


def _chunk_calls(kernels, src, args, bounds, tape):
    """Each chunk's arguments, the guard flags they write, and the reductions to combine:
    (full accumulator, primitive, its private copy in each chunk)."""
    calls = [[] for _ in bounds[1:]]
    flags, combine = [], []
    at = 0
    for step, part in zip(kernels, src.parts):
        # a part's arguments: sizes, arrays, scalars, stores, accumulators, flag (codegen.Part)
        rank = len(part.dims)
        na, ns, no, nc = len(part.arrays), len(part.scalars), len(part.stores), len(part.reductions)
        arrays = args[at + rank : at + rank + na]
        scalars = args[at + rank + na : at + rank + na + ns]
        stores = args[at + rank + na + ns : at + rank + na + ns + no]
        accs = args[at + rank + na + ns + no : at + rank + na + ns + no + nc]
        at += rank + na + ns + no + nc + (1 if part.guard else 0) + (part.bounds is not None)
        privates = []
        for ins, fresh, c in zip(part.reductions, part.fresh, accs):
            if 0 in ins.params["axes"]:
                mine = [accumulator(ins, tape, step.shape, fresh, lambda shape, dt: np.empty(shape, dt)) for _ in calls]
                mine = [m.reshape(kept(m.shape, ins)) for m in mine]
                combine.append((c, ins.prim, mine))
                privates.append(mine)
            else:
                privates.append([c[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])])
        for j, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            calls[j] += [
                *[hi - lo if d == 0 else step.shape[d] for d in part.dims],
                *[a[lo:hi] if r else a for a, r in zip(arrays, part.rows)],
                *scalars,
                *[o[lo:hi] for o in stores],
                *[p[j] for p in privates],
            ]
            if part.guard:
                flags.append(np.zeros(1, np.bool_))
                calls[j].append(flags[-1])
            if part.bounds is not None:  # a chunked loop has no window along its rows
                calls[j].append(part.bounds)
    return calls, flags, combine


def run_chunked(fn, kernels, src, args, threads, tape):
    """Call ``fn`` (the function of a row-local segment) on ``threads`` chunks of rows; returns
    whether a guard flag was raised (a sin/cos argument out of range)."""
    n0 = kernels[0].shape[0]
    k = min(threads, n0)
    bounds = [n0 * i // k for i in range(k + 1)]
    calls, flags, combine = _chunk_calls(kernels, src, args, bounds, tape)
    if src.keep is not None:  # an argument several loops share is passed once (``codegen.program``)
        calls = [[c[k] for k in src.keep] for c in calls]
    first = calls[0]
    if not fn.ready:  # the first call compiles (or loads from disk): once, in this thread
        fn(*first)
        first = None
    futures = [_workers(threads).submit(fn, *c) for c in calls[1:]]
    if first is not None:
        fn(*first)  # the calling thread takes a chunk too
    for f in futures:
        f.result()
    for full, prim, mine in combine:
        out = mine[0]
        for p in mine[1:]:
            _COMBINE[prim](out, p, out=out)
        full[...] = out
    return any(f[0] for f in flags)
