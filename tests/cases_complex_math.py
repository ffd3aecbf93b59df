"""Cases of the primitive table's ``complex_math`` family (``ngrad/engine/ir/prims/complex_math.py``), merged
into ``tests/test_prims.py``'s ``CASES`` and ``NOT_DIFFERENTIABLE``, so every test that runs
over the table (finite differences of first and second order, JVPs, the compiled, bytecode and
CUDA-simulator corpora) runs them too. Complex arguments are complex128 (the compiled corpora run
them as complex64 beside float32); the oracles perturb their real and imaginary parts."""

import numpy as np

R = np.random.default_rng(17)


def c(*shape):
    """Complex values away from 0 (where angle and abs have kinks)."""
    r, t = R.uniform(0.5, 2.0, shape), R.uniform(-3.0, 3.0, shape)
    return r * np.exp(1j * t)


def n(*shape):
    return R.uniform(-2.0, 2.0, shape)


# (args, params, differentiable argument positions), by primitive
CASES: dict = {
    "conj": ([c(3, 4)], {}, [0]),
    "real": ([c(3, 4)], {}, [0]),
    "imag": ([c(3, 4)], {}, [0]),
    "complex": ([n(3, 4), n(3, 4)], {}, [0, 1]),
    "angle": ([c(3, 4)], {}, [0]),
    "view_as_real": ([c(3, 4)], {}, [0]),
    "view_as_complex": ([n(3, 4, 2)], {}, [0]),
}
NOT_DIFFERENTIABLE: set = set()
