"""Gradients at kinks follow PyTorch's conventions (hand-computed values, and PyTorch when present)."""
import math

import numpy as np
import pytest

import ngrad

CASES = {
    "relu at 0": (lambda L, x: x.relu().sum(), [0.0, -1.0, 2.0], [0.0, 0.0, 1.0]),
    "abs at 0": (lambda L, x: x.abs().sum(), [0.0, -1.0, 2.0], [0.0, -1.0, 1.0]),
    "sqrt at 0": (lambda L, x: x.sqrt().sum(), [0.0, 4.0], [math.inf, 0.25]),
    "maximum ties split": (lambda L, x: L.maximum(x, L.tensor([1.0, 0.0, 5.0], dtype=L.float64)).sum(),
                           [1.0, 2.0, 3.0], [0.5, 1.0, 0.0]),
    "minimum ties split": (lambda L, x: L.minimum(x, L.tensor([1.0, 0.0, 5.0], dtype=L.float64)).sum(),
                           [1.0, 2.0, 3.0], [0.5, 0.0, 1.0]),
    "full max spreads over ties": (lambda L, x: x.max(), [3.0, 1.0, 3.0, 3.0], [1 / 3, 0.0, 1 / 3, 1 / 3]),
    "full min spreads over ties": (lambda L, x: x.min(), [1.0, 1.0, 3.0], [0.5, 0.5, 0.0]),
    "amax spreads over ties": (lambda L, x: x.amax(), [2.0, 2.0], [0.5, 0.5]),
    "max along dim picks one index": (lambda L, x: x.max(0)[0], [2.0, 2.0, 1.0], [1.0, 0.0, 0.0]),
    "clamp bounds inclusive": (lambda L, x: x.clamp(0.0, 1.0).sum(), [0.0, 1.0, 0.5, -1.0, 2.0],
                               [1.0, 1.0, 1.0, 0.0, 0.0]),
    "prod with one zero": (lambda L, x: x.prod(), [2.0, 0.0, 3.0], [0.0, 6.0, 0.0]),
    "prod with two zeros": (lambda L, x: x.prod(), [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]),
    "norm at 0": (lambda L, x: x.norm(), [0.0, 0.0], [0.0, 0.0]),
    "pow exponent at base 0": (lambda L, x: (L.tensor([0.0, 0.0, 2.0], dtype=L.float64) ** x).sum(),
                               [2.0, 0.0, 1.0], [0.0, 0.0, 2 * math.log(2)]),
    "pow base with exponent 0": (lambda L, x: (x ** 0).sum(), [0.0, 3.0], [0.0, 0.0]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_kink_gradient(name):
    fn, x, expected = CASES[name]
    t = ngrad.tensor(x, dtype=ngrad.float64, requires_grad=True)
    fn(ngrad, t).backward()
    np.testing.assert_allclose(t.grad.numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_kink_gradient_matches_pytorch(name):
    torch = pytest.importorskip("torch")
    fn, x, _ = CASES[name]
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    fn(torch, t).backward()
    n = ngrad.tensor(x, dtype=ngrad.float64, requires_grad=True)
    fn(ngrad, n).backward()
    np.testing.assert_allclose(n.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_stable_extremes():
    x = ngrad.tensor([-1000.0, 0.0, 1000.0], dtype=ngrad.float64, requires_grad=True)
    y = x.sigmoid().sum() + ngrad.nn.functional.softplus(x).sum() + x.logsumexp(0) + x.softmax(0)[0]
    y.backward()
    assert np.all(np.isfinite(x.grad.numpy()))
    assert np.isfinite(y.item())
    np.testing.assert_allclose(ngrad.tensor([-math.inf, -math.inf]).logsumexp(0).item(), -math.inf)
