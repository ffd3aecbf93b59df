"""Values and gradients at special values (NaN, +-inf, +-0, denormals, overflow) follow PyTorch.

A table: each op runs on inputs made of special values, in float64 and float32, and its value
and gradient (the backward of its sum) are compared with torch's, interpreted and compiled.
Known differences are listed in KNOWN with their reason (strict xfail: fixing one fails the
test until its entry is removed).
"""

import numpy as np
import pytest

import ngrad
import ngrad.nn.functional as NF

from .oracles import torch_or_skip

NAN, INF = float("nan"), float("inf")
# every special kind at once, plus ordinary values so a rule's ordinary branch is also compared
SPECIAL = [NAN, INF, -INF, 0.0, -0.0, 1e-310, 3e38, -3e38, 1e4, 1.5, -2.0, 0.5]
POSITIVE = [NAN, INF, 0.0, -0.0, 1e-310, 3e38, 1e4, 1.5, 0.5]
ROWS_NAN = [[1.0, NAN, 3.0], [2.0, 2.0, -1.0], [INF, 1.0, -INF], [0.0, -0.0, 0.0]]
ROWS = [[1.0, 2.0, 3.0], [2.0, 2.0, 2.0], [INF, 1.0, 0.0], [3e38, 3e38, -1.0], [1e4, -1e4, 0.5], [0.0, -0.0, 0.0]]
LOGITS = [
    [3e38, 3e38, -1.0],
    [1e4, 0.0, -1e4],
    [1e4, 1e4 + 1, 1e4 - 1],  # float32 logits near 1e4: the shift by the max must come first
    [-3e38, 3e38, 1.0],
    [INF, 0.0, 1.0],
    [-INF, 0.0, 1.0],
    [-INF, -INF, -INF],
    [NAN, 0.0, 1.0],
    [1.0, 2.0, 3.0],
]


def _functional(lib):
    return NF if lib is ngrad else lib.nn.functional


def _ce(lib, x):
    return _functional(lib).cross_entropy(x, lib.tensor([0, 1, 0, 0, 2, 1, 0, 0, 2]), reduction="none")


# name -> (function of (library, tensor), input rows)
OPS = {
    **{
        u: ((lambda u: lambda lib, x: getattr(lib, u)(x))(u), SPECIAL)
        for u in ["exp", "expm1", "sin", "cos", "tanh", "sigmoid", "abs", "sign", "trunc", "floor", "ceil", "round"]
    },
    **{u: ((lambda u: lambda lib, x: getattr(lib, u)(x))(u), POSITIVE) for u in ["log", "log1p", "sqrt", "rsqrt"]},
    "relu": (lambda lib, x: lib.relu(x), SPECIAL),
    "neg": (lambda lib, x: -x, SPECIAL),
    "square": (lambda lib, x: x * x, SPECIAL),
    "reciprocal": (lambda lib, x: 1 / x, SPECIAL),
    "div_by_x": (lambda lib, x: lib.ones_like(x) / x, SPECIAL),
    "x_div_zero": (lambda lib, x: x / lib.zeros_like(x), SPECIAL),
    "x_div_negzero": (lambda lib, x: x / -lib.zeros_like(x), SPECIAL),
    "pow_2": (lambda lib, x: x**2, SPECIAL),
    "pow_half": (lambda lib, x: x**0.5, POSITIVE),
    "pow_3": (lambda lib, x: x**3.0, SPECIAL),
    "pow_neg_half": (lambda lib, x: x**-0.5, POSITIVE),
    "pow_base": (lambda lib, x: 2.0**x, SPECIAL),
    "clamp": (lambda lib, x: lib.clamp(x, -1.0, 1.0), SPECIAL),
    "clamp_min": (lambda lib, x: lib.clamp(x, min=0.0), SPECIAL),
    "maximum": (lambda lib, x: lib.maximum(x, lib.flip(x, (0,))), SPECIAL),
    "minimum": (lambda lib, x: lib.minimum(x, lib.flip(x, (0,))), SPECIAL),
    "maximum_zero": (lambda lib, x: lib.maximum(x, lib.zeros_like(x)), SPECIAL),
    "sum": (lambda lib, x: x.sum(1), ROWS_NAN),
    "mean": (lambda lib, x: x.mean(1), ROWS_NAN),
    "prod": (lambda lib, x: x.prod(1), ROWS_NAN),
    "amax": (lambda lib, x: lib.amax(x, 1), ROWS_NAN),
    "amin": (lambda lib, x: lib.amin(x, 1), ROWS_NAN),
    "max": (lambda lib, x: x.max(), ROWS_NAN),
    "min": (lambda lib, x: x.min(), ROWS_NAN),
    "max_dim": (lambda lib, x: x.max(1)[0], ROWS_NAN),
    "var": (lambda lib, x: x.var(1), ROWS),
    "std": (lambda lib, x: x.std(1), ROWS),
    "var_nan": (lambda lib, x: x.var(1), ROWS_NAN),
    "std_nan": (lambda lib, x: x.std(1), ROWS_NAN),
    "norm_1": (lambda lib, x: lib.norm(x, 1, dim=1), ROWS + ROWS_NAN),
    "norm_2": (lambda lib, x: lib.norm(x, 2, dim=1), ROWS + ROWS_NAN),
    "norm_inf": (lambda lib, x: lib.norm(x, INF, dim=1), ROWS + ROWS_NAN),
    "softmax": (lambda lib, x: lib.softmax(x, 1), LOGITS),
    "log_softmax": (lambda lib, x: lib.log_softmax(x, 1), LOGITS),
    "logsumexp": (lambda lib, x: lib.logsumexp(x, 1), LOGITS),
    "cross_entropy": (_ce, LOGITS),
}

# (op, dtype) -> why ngrad still differs from PyTorch there
KNOWN: dict[tuple[str, str], str] = {}


def _run(lib, fn, rows, dtype):
    x = lib.tensor(np.array(rows), dtype=getattr(lib, dtype), requires_grad=True)
    y = fn(lib, x)
    y.sum().backward()
    return y.detach().numpy().astype(np.float64), x.grad.detach().numpy().astype(np.float64)


# PyTorch's sign of max(-0.0, 0.0) depends on the SIMD lane the pair lands in: not compared
UNSIGNED_ZERO = {"maximum_zero"}


def _compare(op, dtype):
    torch = torch_or_skip()
    fn, rows = OPS[op]
    with np.errstate(all="ignore"):
        value, grad = _run(ngrad, fn, rows, dtype)
    want_value, want_grad = _run(torch, fn, rows, dtype)
    # atol: a rounding residue such as softmax's 1e-17 gradient where 0 is exact
    rtol, atol = (1e-12, 1e-15) if dtype == "float64" else (2e-6, 1e-7)
    for what, got, want in (("value", value, want_value), ("gradient", grad, want_grad)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"{op} {what}")
        zeros = (want == 0) & (op not in UNSIGNED_ZERO)
        np.testing.assert_array_equal(
            np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=f"{op} {what}: sign of 0"
        )


def _cases():
    for op in OPS:
        for dtype in ("float64", "float32"):
            marks = [pytest.mark.xfail(strict=True, reason=KNOWN[op, dtype])] if (op, dtype) in KNOWN else []
            yield pytest.param(op, dtype, marks=marks, id=f"{op}-{dtype}")


@pytest.mark.parametrize("op,dtype", list(_cases()))
def test_interpreted_follows_pytorch(op, dtype):
    _compare(op, dtype)


@pytest.mark.numba
@pytest.mark.parametrize("op,dtype", list(_cases()))
def test_compiled_follows_pytorch(op, dtype, jit_always):
    _compare(op, dtype)
