"""Gradients at kinks follow PyTorch's conventions (hand-computed values, and PyTorch when present)."""

import math

import numpy as np
import pytest

import ngrad

CASES = {
    "relu at 0": (lambda L, x: x.relu().sum(), [0.0, -1.0, 2.0], [0.0, 0.0, 1.0]),
    "abs at 0": (lambda L, x: x.abs().sum(), [0.0, -1.0, 2.0], [0.0, -1.0, 1.0]),
    "sqrt at 0": (lambda L, x: x.sqrt().sum(), [0.0, 4.0], [math.inf, 0.25]),
    "maximum ties split": (
        lambda L, x: L.maximum(x, L.tensor([1.0, 0.0, 5.0], dtype=L.float64)).sum(),
        [1.0, 2.0, 3.0],
        [0.5, 1.0, 0.0],
    ),
    "minimum ties split": (
        lambda L, x: L.minimum(x, L.tensor([1.0, 0.0, 5.0], dtype=L.float64)).sum(),
        [1.0, 2.0, 3.0],
        [0.5, 0.0, 1.0],
    ),
    "full max spreads over ties": (lambda L, x: x.max(), [3.0, 1.0, 3.0, 3.0], [1 / 3, 0.0, 1 / 3, 1 / 3]),
    "full min spreads over ties": (lambda L, x: x.min(), [1.0, 1.0, 3.0], [0.5, 0.5, 0.0]),
    "amax spreads over ties": (lambda L, x: x.amax(), [2.0, 2.0], [0.5, 0.5]),
    "max along dim picks one index": (lambda L, x: x.max(0)[0], [2.0, 2.0, 1.0], [1.0, 0.0, 0.0]),
    "clamp bounds inclusive": (
        lambda L, x: x.clamp(0.0, 1.0).sum(),
        [0.0, 1.0, 0.5, -1.0, 2.0],
        [1.0, 1.0, 1.0, 0.0, 0.0],
    ),
    "prod with one zero": (lambda L, x: x.prod(), [2.0, 0.0, 3.0], [0.0, 6.0, 0.0]),
    "prod with two zeros": (lambda L, x: x.prod(), [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]),
    "norm at 0": (lambda L, x: x.norm(), [0.0, 0.0], [0.0, 0.0]),
    "pow exponent at base 0": (
        lambda L, x: (L.tensor([0.0, 0.0, 2.0], dtype=L.float64) ** x).sum(),
        [2.0, 0.0, 1.0],
        [0.0, 0.0, 2 * math.log(2)],
    ),
    "pow base with exponent 0": (lambda L, x: (x**0).sum(), [0.0, 3.0], [0.0, 0.0]),
    "logaddexp of equal values halves": (
        lambda L, x: L.logaddexp(x, L.tensor([1.0, 0.0], dtype=L.float64)).sum(),
        [1.0, 2.0],
        [0.5, 1 / (1 + math.exp(-2))],
    ),
    "nan_to_num stops the gradient at inf": (
        lambda L, x: (x * L.tensor([1e308, 1.0], dtype=L.float64) * 10).nan_to_num().sum(),
        [1.0, 1.0],
        [0.0, 10.0],
    ),
    "leaky_relu at 0 takes the slope": (
        lambda L, x: L.nn.functional.leaky_relu(x, 0.2).sum(),
        [0.0, -1.0, 1.0],
        [0.2, 0.2, 1.0],
    ),
    "elu at 0 takes alpha": (lambda L, x: L.nn.functional.elu(x, 0.7).sum(), [0.0, 1.0], [0.7, 1.0]),
    "masked_fill stops the gradient": (lambda L, x: x.masked_fill(x > 1, 0.0).sum(), [1.0, 2.0], [1.0, 0.0]),
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


def test_special_values_follow_numpy():
    v = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.5, 3.7])
    x = ngrad.tensor(v, dtype=ngrad.float64)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(x.isinf().numpy(), np.isinf(v))
        np.testing.assert_array_equal(x.isfinite().numpy(), np.isfinite(v))
        np.testing.assert_array_equal(x.nan_to_num().numpy(), np.nan_to_num(v))
        np.testing.assert_array_equal(
            x.nan_to_num(1.0, 2.0, -3.0).numpy(), np.nan_to_num(v, nan=1.0, posinf=2.0, neginf=-3.0)
        )
        np.testing.assert_array_equal(x.trunc().numpy(), np.trunc(v))
        np.testing.assert_array_equal(x.frac().numpy(), v - np.trunc(v))
        y = np.array([0.0, -1.0, 2.0, np.inf, 1.0, -np.inf, -np.inf, np.nan])
        np.testing.assert_array_equal(ngrad.atan2(x, ngrad.tensor(y, dtype=ngrad.float64)).numpy(), np.arctan2(v, y))
        np.testing.assert_allclose(
            ngrad.logaddexp(x, ngrad.tensor(y, dtype=ngrad.float64)).numpy(), np.logaddexp(v, y), rtol=1e-15
        )
    i = ngrad.tensor([1, -2, 3])
    assert not i.isinf().any() and i.isfinite().all() and i.trunc().tolist() == [1, -2, 3]


def test_stable_extremes():
    x = ngrad.tensor([-1000.0, 0.0, 1000.0], dtype=ngrad.float64, requires_grad=True)
    y = x.sigmoid().sum() + ngrad.nn.functional.softplus(x).sum() + x.logsumexp(0) + x.softmax(0)[0]
    y.backward()
    assert np.all(np.isfinite(x.grad.numpy()))
    assert np.isfinite(y.item())
    np.testing.assert_allclose(ngrad.tensor([-math.inf, -math.inf]).logsumexp(0).item(), -math.inf)
