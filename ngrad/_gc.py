"""Python's cyclic garbage collector, paused while ngrad builds big graphs and tapes.

The collector runs after every 700 net container allocations and, in its older generations,
walks every live container. Differentiating, lowering and encoding an unrolled recurrence makes
hundreds of thousands of objects in one go, and the collections it triggers found nothing to
free: the first call of GradBench's ``lstm`` at c = 256 (a 47,000-instruction joint tape) took
2.4 s, 1.3 s with the collector paused. These passes make no reference cycles of their own;
cycles that user code makes meanwhile are collected once the collector runs again.
"""

import contextlib
import gc
import threading

__all__ = ["paused"]

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused():
    """Run the block with the collector off (nested and concurrent uses count; the outermost
    exit restores what was there before).

    >>> import gc
    >>> with paused():
    ...     gc.isenabled()
    False
    """
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
