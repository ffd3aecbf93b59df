"""Cases of the primitive table's ``selection`` family (``ngrad/engine/ir/prims/selection.py``), merged
into ``tests/test_prims.py``'s ``CASES`` and ``NOT_DIFFERENTIABLE``, so every test that runs
over the table (finite differences of first and second order, JVPs, the compiled, bytecode and
CUDA-simulator corpora) runs them too."""

import numpy as np

R = np.random.default_rng(17)


def _with_zeros():
    # rows with no zero, one, two and three: each branch of cumprod's exact rule, to second order
    x = R.uniform(0.5, 1.5, (4, 6)) * R.choice([-1.0, 1.0], (4, 6))
    x[1, 2] = 0.0
    x[2, 1] = x[2, 4] = 0.0
    x[3, 0] = x[3, 2] = x[3, 3] = 0.0
    return x


# (args, params, differentiable argument positions), by primitive
CASES: dict = {
    "cumprod": ([_with_zeros()], {"axis": 1}, [0]),
    "logcumsumexp": ([R.uniform(-3.0, 3.0, (4, 3))], {"axis": 0}, [0]),
}
NOT_DIFFERENTIABLE: set = {"cumargmax", "cumargmin", "argmode", "searchsorted"}
