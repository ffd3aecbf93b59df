"""Cases of the primitive table's ``linalg`` family (``ngrad/engine/ir/prims/linalg.py``), merged
into ``tests/test_prims.py``'s ``CASES`` and ``NOT_DIFFERENTIABLE``, so every test that runs
over the table (finite differences of first and second order, JVPs, the compiled, bytecode and
CUDA-simulator corpora) runs them too."""

import numpy as np

R = np.random.default_rng(17)

# (args, params, differentiable argument positions), by primitive


def n(*shape):
    return R.uniform(-2.0, 2.0, shape)


CASES: dict = {
    "inv": ([n(2, 3, 3) + 3 * np.eye(3)], {}, [0]),
    "solve": ([n(2, 3, 3) + 3 * np.eye(3), n(2, 3, 2)], {}, [0, 1]),
    "det": ([n(2, 3, 3) + np.eye(3)], {}, [0]),
}
NOT_DIFFERENTIABLE: set = set()
