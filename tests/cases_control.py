"""Cases of the primitive table's ``control`` family (``ngrad/engine/ir/prims/control.py``),
merged into ``tests/test_prims.py``'s ``CASES``, so every test that runs over the table (finite
differences of first and second order, JVPs, the compiled, bytecode and CUDA-simulator corpora)
runs a scan too: backwards over three steps, with a carry, a sequence and an invariant that all
receive gradients (``tests/test_scan.py`` covers the rest of its forms)."""

import numpy as np

from ngrad.engine.ir.tape import Builder

R = np.random.default_rng(23)


def _body():
    b = Builder()
    c, x, w = b.input((2,), "f64"), b.input((2,), "f64"), b.input((2,), "f64")
    nxt = (c * w).sin() + x * c
    y = (nxt * x).sum(axes=(0,), keepdim=False).reshape(shape=(1,))
    return b.finish([nxt, y]).format()


SCAN = {"body": _body(), "length": 3, "reverse": True, "carries": 1, "xs": 1, "history": True}

# (args, params, differentiable argument positions), by primitive
CASES: dict = {
    "scan": ([R.standard_normal(2), R.standard_normal((3, 2)), R.standard_normal(2)], SCAN, [0, 1, 2]),
}
NOT_DIFFERENTIABLE: set = set()
