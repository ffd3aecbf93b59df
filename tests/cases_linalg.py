"""Cases of the primitive table's ``linalg`` family (``ngrad/engine/ir/prims/linalg.py``), merged
into ``tests/test_prims.py``'s ``CASES`` and ``NOT_DIFFERENTIABLE``, so every test that runs
over the table (finite differences of first and second order, JVPs, the compiled, bytecode and
CUDA-simulator corpora) runs them too.

Eigenvectors and singular vectors are taken at matrices with well separated eigenvalues and
singular values, where LAPACK's choice of signs is locally constant, so finite differences of
the packed results are differences of smooth functions."""

import numpy as np

R = np.random.default_rng(17)

# (args, params, differentiable argument positions), by primitive


def n(*shape):
    return R.uniform(-2.0, 2.0, shape)


def spd(batch, size):
    x = n(batch, size, size)
    return x @ np.swapaxes(x, -1, -2) + size * np.eye(size)


def separated(batch, size):
    """Symmetric matrices with eigenvalues 1, 2.5, 4, ... (a random orthogonal basis)."""
    q = np.linalg.qr(n(batch, size, size))[0]
    return q @ (np.arange(size) * 1.5 + 1.0)[:, None] * np.eye(size) @ np.swapaxes(q, -1, -2)


CASES: dict = {
    "inv": ([n(2, 3, 3) + 3 * np.eye(3)], {}, [0]),
    "solve": ([n(2, 3, 3) + 3 * np.eye(3), n(2, 3, 2)], {}, [0, 1]),
    "det": ([n(2, 3, 3) + np.eye(3)], {}, [0]),
    "slogdet": ([n(2, 3, 3) + np.eye(3)], {}, [0]),
    "solve_triangular": ([n(2, 3, 3) + 3 * np.eye(3), n(2, 3, 2)], {"upper": True, "unitriangular": False}, [0, 1]),
    "cholesky": ([spd(2, 3)], {"check": "linalg.cholesky"}, [0]),
    "eigh": ([separated(2, 3)], {}, [0]),
    "svd": ([n(2, 4, 3)], {"full": False}, [0]),
    "qr": ([n(2, 4, 3)], {"complete": False}, [0]),
    "matrix_exp": ([n(2, 3, 3) * 0.5], {}, [0]),
}
NOT_DIFFERENTIABLE: set = {"cholesky_info"}
