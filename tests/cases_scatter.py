"""Cases of the primitive table's ``scatter`` family (``ngrad/engine/ir/prims/scatter.py``), merged
into ``tests/test_prims.py``'s ``CASES`` and ``NOT_DIFFERENTIABLE``, so every test that runs
over the table (finite differences of first and second order, JVPs, the compiled, bytecode and
CUDA-simulator corpora) runs them too."""

import numpy as np

R = np.random.default_rng(17)

# (args, params, differentiable argument positions), by primitive
CASES: dict = {}
NOT_DIFFERENTIABLE: set = set()
