"""The engine: folders in pipeline order, each importing only from the folders before it.

- ``config``, ``store``   settings read from the environment; the disk store (any layer may use)
- ``ir/``         the IR and its reference semantics: ``dtypes``, ``prims`` (the primitive table),
                  ``graph`` (the lazy nodes the facade records, lowered to a tape), ``tape`` (flat
                  SSA: build, verify, print, parse), ``interpret`` (the NumPy oracle) and ``blas``
                  (the matrix products it calls)
- ``transform/``  tape -> tape: ``differentiate`` (vjp, jvp, joint and split tapes) and ``batch``
- ``backend/``    tape -> code: ``fuse`` (kernels), ``codegen`` (Python source), ``bytecode`` (the
                  tier for long tapes of small steps), ``vmath`` (vectorisable math)
- ``targets/``    code -> callables: the only modules that import Numba
- ``runtime/``    validated execution: plans, tiering, drivers, threads, buffers, the CUDA
                  executor, and ``realize`` (lower + run) for the facade

The engine never imports the facade (``ngrad.tensor``, ``ngrad.autograd``); tests/test_layers.py
checks these rules.
"""
