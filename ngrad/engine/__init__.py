"""The engine: folders in pipeline order, each importing only from the folders before it.

- ``config``, ``recent``, ``store``  settings read from the environment (the one reader of
                  ``NGRAD_*``); the bounded in-memory cache; the versioned disk store of kernels
                  and plans. Any layer may use them.
- ``ir/``         the IR and its reference semantics: ``dtypes`` (element types, promotion),
                  ``prims`` (the primitive table: forward, VJP and JVP per row), ``shapes`` (the
                  shape and dtype rule of each kind of row), ``tape`` (flat SSA: build, verify,
                  print, parse), ``graph`` (the lazy nodes the facade records, lowered to a
                  tape), ``interpret`` (the NumPy oracle) and ``blas`` (the matrix products it
                  calls)
- ``transform/``  tape -> tape: ``differentiate`` (vjp, jvp, joint and split tapes), ``batch``
- ``backend/``    tape -> code, as pass lists (``passes``): ``fuse`` (kernels and glue),
                  ``codegen`` and ``element`` (loop nests as Python source), ``source_math``
                  (expression text), ``cuda_source`` (``cuda.jit`` kernels), ``bytecode`` with
                  ``bytecode_rows`` and ``bytecode_loop`` (the tier for long tapes of small
                  steps), ``vmath`` (vectorisable math)
- ``targets/``    code -> callables: ``cpu`` (``njit``) and ``cuda`` (``cuda.jit``); the only
                  modules that import Numba
- ``runtime/``    validated execution, one module per decision: ``dispatch``, ``tiering``,
                  ``checks``, ``plan``, ``layout``, ``executor``, ``driver``, ``buffers``,
                  ``threads``, ``machine``, ``cuda``, and ``realize`` (lower + run) for the facade

The engine never imports the facade (``ngrad.tensor``, ``ngrad.autograd``); tests/test_layers.py
checks these rules.
"""
