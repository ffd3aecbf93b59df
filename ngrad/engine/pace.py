"""Pace: the points where long Python off the calls' path lets the program's calls go first.

Contract: the stages that run long on the compile worker (planning a tape, writing kernels'
sources and drivers, lowering kernels to LLVM IR, Numba's compiler passes, loading machine
code, importing modules) call ``step()`` between pieces of their work, or ``tick()`` for each
small piece of a long loop (unrolling a scan, encoding bytecode). ``step`` calls each
function given to ``on_step``, in order: the runtime gives it its compile worker's
``background.defer_to_calls``, which on that thread sleeps while a slow call of the program
runs and the worker has had its share of it, and on any other thread returns at once. A
function is given once; nothing is ever taken back. This module imports nothing of the engine,
so every layer may call it.

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

import threading

__all__ = ["on_step", "step", "tick", "TICKS"]

_functions: list = []
_lock = threading.Lock()
# a long loop's pieces (an instruction unrolled, encoded, inlined) that make one step: about
# 0.5-1 ms of Python
TICKS = 128
_ticks = [0]


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
