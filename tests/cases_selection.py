"""Cases of the primitive table's ``selection`` family (``ngrad/engine/ir/prims/selection.py``), merged
into ``tests/test_prims.py``'s ``CASES`` and ``NOT_DIFFERENTIABLE``, so every test that runs
over the table (finite differences of first and second order, JVPs, the compiled, bytecode and
CUDA-simulator corpora) runs them too."""

import numpy as np

R = np.random.default_rng(17)


# (args, params, differentiable argument positions), by primitive
CASES: dict = {
    # no zeros here: the second-order check differentiates the VJP, whose masks are PyTorch's
    # first-order algorithm (tests/test_selection.py checks first order at zeros)
    "cumprod": ([R.uniform(0.5, 1.5, (3, 5)) * R.choice([-1.0, 1.0], (3, 5))], {"axis": 1}, [0]),
    "logcumsumexp": ([R.uniform(-3.0, 3.0, (4, 3))], {"axis": 0}, [0]),
}
NOT_DIFFERENTIABLE: set = {"cumargmax", "cumargmin", "argmode", "searchsorted"}
