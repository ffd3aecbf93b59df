"""Cases of the primitive table's ``composite`` family (``ngrad/engine/ir/prims/composite.py``):
rows with a derivative of their own whose value the compiled targets compute from simpler rows
(``transform.lower``). Merged into ``tests/test_prims.py``'s ``CASES``, so finite differences of
first and second order, JVPs, and the compiled, bytecode and CUDA-simulator corpora (which run
the lowered rows) cover them."""

import numpy as np

R = np.random.default_rng(23)

# (args, params, differentiable argument positions), by primitive
CASES: dict = {
    "logsumexp": ([R.uniform(-3.0, 3.0, (3, 4, 2))], {"axes": (0, 2), "keepdim": False}, [0]),
    "softmax": ([R.uniform(-3.0, 3.0, (3, 4))], {"axis": 0}, [0]),
    "var": ([R.uniform(-3.0, 3.0, (3, 4, 2))], {"axes": (0, 2), "correction": 1, "keepdim": False}, [0]),
    "std": ([R.uniform(-3.0, 3.0, (4, 5))], {"axes": (1,), "correction": 0, "keepdim": True}, [0]),
}
NOT_DIFFERENTIABLE: set = set()
