"""Cases of the primitive table's ``scatter`` family (``ngrad/engine/ir/prims/scatter.py``), merged
into ``tests/test_prims.py``'s ``CASES`` and ``NOT_DIFFERENTIABLE``, so every test that runs
over the table (finite differences of first and second order, JVPs, the compiled, bytecode and
CUDA-simulator corpora) runs them too. ``tests/test_scatter.py`` runs the same checks over every
reduction, with and without ``include_self``."""

import numpy as np

R = np.random.default_rng(17)

# an index no larger than the target (4, 5) apart from axis 0, with repeated positions
IDX = np.array([[0, 3, 3, 1], [2, 3, 0, 1], [0, 0, 3, 1]])
# one position per column: scatter's gradient of its source is the adjoint only without duplicates
UNIQUE = np.array([[0, 3, 2, 1], [2, 1, 0, 3], [3, 0, 1, 2]])

# (args, params, differentiable argument positions), by primitive
CASES: dict = {
    "scatter": ([R.standard_normal((4, 5)), UNIQUE, R.standard_normal((3, 4))], {"axis": 0}, [0, 2]),
    "scatter_reduce": (
        [R.uniform(0.5, 2.0, (4, 5)), IDX, R.uniform(0.5, 2.0, (3, 4))],
        {"axis": 0, "reduce": "prod", "include_self": False},
        [0, 2],
    ),
}
NOT_DIFFERENTIABLE: set = set()
