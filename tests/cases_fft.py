"""Cases of the primitive table's ``fft`` family (``ngrad/engine/ir/prims/fft.py``), merged
into ``tests/test_prims.py``'s ``CASES`` and ``NOT_DIFFERENTIABLE``, so every test that runs
over the table (finite differences of first and second order, JVPs, the compiled, bytecode and
CUDA-simulator corpora) runs them too. Complex operands are perturbed in their real and
imaginary parts by the oracles; ``irfftn`` takes a half spectrum of an odd and of an even length."""

import numpy as np

R = np.random.default_rng(17)


def c(*shape):
    return R.standard_normal(shape) + 1j * R.standard_normal(shape)


# (args, params, differentiable argument positions), by primitive
CASES: dict = {
    "fftn": ([c(3, 4)], {"axes": (0, 1), "norm": "backward", "inverse": False}, [0]),
    "rfftn": ([R.standard_normal((3, 5))], {"axes": (1,), "norm": "ortho"}, [0]),
    "irfftn": ([c(3, 3)], {"axes": (0, 1), "norm": "forward", "n": 4}, [0]),
}
NOT_DIFFERENTIABLE: set = set()
