"""The allocator: memory freed by one array is mapped already for the next.

Contract: ``tune()`` (run once, when the runtime is imported) sets the C library's ``malloc`` of
this process, where it is glibc's, so that a block of up to ``MMAP_MAX`` bytes comes from its heap
and that up to ``TRIM_MAX`` bytes freed at the top of the heap stay there for the next blocks,
instead of being handed back to the kernel. It returns what it did: ``"tuned"``, ``"system"``
(``NGRAD_MALLOC=system``: malloc is left as it was) or ``"unavailable"`` (not glibc, or glibc
refused a setting; nothing else changes). Memory a process has freed then stays in its resident
size, up to ``TRIM_MAX`` more than it uses, as with the allocators PyTorch recommends (jemalloc,
tcmalloc); ``NGRAD_MALLOC=system`` is the choice where that matters more than time.

Why: glibc gives every block of 128 KiB or more fresh pages from the kernel (``mmap``) and
returns them when it is freed, and it hands the top of its heap back too, so a NumPy result of
100,000 float64 values costs about 200 page faults on its first write: 0.5 ms on these machines,
where NumPy computes the product itself in 0.03 ms. Every call the interpreter runs makes such
results: value and gradient of a 100,000-point function took 10 ms a call interpreted, 3.5 ms
with the heap kept (PyTorch eager: 2-5 ms). Compiled plans keep their own arrays
(``buffers``); the interpreter, NumPy glue and the user's own NumPy code get the heap's.

>>> tune() in ("tuned", "system", "unavailable")
True
"""

import ctypes
import functools

from ..config import malloc_mode

__all__ = ["tune", "MMAP_MAX", "TRIM_MAX"]

# glibc's parameter numbers (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# 4 M float64 values: bigger arrays are rare enough for their pages to be worth giving back
MMAP_MAX = 32 << 20
# twice the largest block, as glibc's own dynamic rule would have it
TRIM_MAX = 64 << 20


@functools.cache
def tune():
    """Set glibc's malloc as the module docstring says, once per process; what was done."""
    return "system" if malloc_mode() == "system" else _set()


def _set():
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (only glibc has it: musl's mallopt does nothing)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "unavailable"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, MMAP_MAX) != 1 or mallopt(_M_TRIM_THRESHOLD, TRIM_MAX) != 1:
        return "unavailable"
    return "tuned"
