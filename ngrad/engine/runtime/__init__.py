"""The runtime: the one entry point that executes tapes.

Contract: ``run(tape, values)`` checks every input against the tape's slot (shape, dtype,
kind) before anything executes (Numba does not check bounds: kernels never see unchecked
input), runs the tape, and returns fresh, writable, C-contiguous arrays that share memory with
no input. ``prepare``/``inline`` make a function (or its lines) equal to ``run`` for calling many
times; ``set_num_threads``/``get_num_threads`` set how many threads run big fused loops.

Tiering, so a one-shot script never waits on a compiler (``NGRAD_JIT``): ``never`` runs every
tape on the NumPy interpreter; ``always`` compiles every tape; ``auto`` (the default) follows
``tiering.next_state``. Compiled tapes run as a plan of fused Numba kernels and NumPy glue
(``fuse``, ``codegen``, ``targets``), except long tapes of small arrays, which run as bytecode
(``machine``) under the same tiering.

Compiles under ``auto`` run off the calls' path (``background``, ``compile_server``) unless
``NGRAD_COMPILE=wait``; ``synchronize_compiles`` waits for them.

``NGRAD_DEBUG=1`` prints each tape before it runs, ``=2`` also the generated source, ``=3``
also per-kernel compile and run times.

Modules, each named by the decision it makes: ``checks`` (inputs against slots), ``layout``
(segments and the shapes kernels take), ``threads`` (the thread count, chunked loops),
``buffers`` (the pool: lending and reclaiming arrays), ``plan`` (a compiled plan), ``executor``
(running its steps), ``driver`` (the generated driver), ``machine`` (the bytecode tier),
``tiering`` (the rules), ``dispatch`` (which tier runs a call), ``cuda`` (the CUDA executor),
``realize`` (the values of pending graph nodes), ``allocator`` (the process's malloc, set once
when this package is imported).
"""

from ..config import debug_level, jit_mode
from . import allocator, background
from .dispatch import inline, prepare, run
from .threads import get_num_threads, set_num_threads

allocator.tune()

__all__ = [
    "run",
    "prepare",
    "inline",
    "debug_level",
    "jit_mode",
    "set_num_threads",
    "get_num_threads",
    "synchronize_compiles",
]


def synchronize_compiles(timeout=None):
    """Wait until every kernel compiling in the background is compiled and in use, as a
    benchmark that wants steady state does before it times; True once none is left, False if
    ``timeout`` seconds passed first. Under ``NGRAD_JIT=auto`` a tape structure that repeats
    compiles in the background while its calls run on the interpreter (``NGRAD_COMPILE=wait``
    compiles in the call instead).

    ```python
    >>> import ngrad
    >>> x = ngrad.linspace(0, 1, 5, requires_grad=True)
    >>> for _ in range(3):
    ...     (x.sin() * x).sum().backward()
    >>> ngrad.synchronize_compiles()
    True

    ```
    """
    return background.synchronize(timeout)
