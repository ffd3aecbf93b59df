"""Pace: the points where long Python off the calls' path lets the program's calls go first.

Contract: the stages that run long on the compile worker (planning a tape, writing kernels'
sources and drivers, lowering kernels to LLVM IR, Numba's compiler passes, loading machine
code, importing modules) call ``step()`` between pieces of their work, or ``tick()`` for each
small piece of a long loop (unrolling a scan, encoding bytecode). ``step`` calls each function
given to ``on_step``, in order: the runtime gives it its compile worker's
``background.defer_to_calls``, which on that thread waits for the end of a slow call of the
program once the worker has had its share of it, and on any other thread returns at once. A
function is given once; nothing is ever taken back. Work that runs without the interpreter's
lock is marked ``unlocked()``: ``locked_cpu()``, the clock the share is counted on, leaves it
out. This module imports nothing of the engine, so every layer may call it.

```python
>>> import itertools
>>> from ngrad.engine import pace
>>> looks = itertools.count()  # called for the rest of the process: nothing it needs goes away
>>> pace.on_step(looks.__next__)
>>> from ngrad.engine.targets import njit  # Numba's passes call step() once it is imported
>>> njit.numba.njit(lambda a: a + 1.0)(2.0)
3.0
>>> next(looks) > 10
True

```
"""

import contextlib
import threading
import time

__all__ = ["on_step", "step", "tick", "TICKS", "unlocked", "locked_cpu"]

_functions: list = []
_lock = threading.Lock()
# a long loop's pieces (an instruction unrolled, encoded, inlined) that make one step: about
# 0.5-1 ms of Python
TICKS = 128
_ticks = [0]
_threads = threading.local()  # per thread: the CPU seconds it spent ``unlocked``


def on_step(fn):
    """Have ``fn()`` called at every ``step()`` from now on (a second time: nothing changes)."""
    with _lock:
        if fn not in _functions:
            _functions.append(fn)


def step():
    """A point between two pieces of long work (see the module docstring)."""
    for fn in _functions:
        fn()


def tick():
    """One small piece of a long loop: every ``TICKS``-th is a ``step``."""
    _ticks[0] += 1
    if not _ticks[0] % TICKS:
        step()


@contextlib.contextmanager
def unlocked():
    """Mark work that runs without the interpreter's lock (LLVM's optimisation and code
    generation): the calling thread's CPU time inside it is not counted by ``locked_cpu``, so
    the compile worker's share of a call is spent only by what takes the lock from the calls."""
    t = time.thread_time()
    try:
        yield
    finally:
        _threads.unlocked = getattr(_threads, "unlocked", 0.0) + time.thread_time() - t


def locked_cpu():
    """The calling thread's CPU time, less what it spent ``unlocked``.

    >>> before = locked_cpu()
    >>> with unlocked():
    ...     _ = sum(range(200_000))
    >>> locked_cpu() - before < 0.001
    True
    """
    return time.thread_time() - getattr(_threads, "unlocked", 0.0)
