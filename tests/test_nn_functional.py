"""``ngrad.nn.functional``'s losses beyond what tests/test_ops.py's cases cover (those check
values and gradients against finite differences and PyTorch): ignored targets, the edges of
the binary cross-entropy, argument errors, gradients in the class weights, and a training step
under ``ngrad.compile`` whose targets change from call to call."""

import math

import numpy as np
import pytest

import ngrad
import ngrad.nn.functional as F

from .oracles import tensor_fd_check


def t64(a, requires_grad=False):
    return ngrad.tensor(np.asarray(a, np.float64), dtype=ngrad.float64, requires_grad=requires_grad)


def log_softmax(x):
    z = x - x.max(1, keepdims=True)
    return z - np.log(np.exp(z).sum(1, keepdims=True))


@pytest.mark.parametrize(
    "loss",
    [
        lambda x, t: F.cross_entropy(x, t),
        lambda x, t: F.cross_entropy(x, t, weight=t64([1.0, 2.0, 3.0]), label_smoothing=0.2),
        lambda x, t: F.nll_loss(x, t),
    ],
)
def test_every_target_ignored_gives_nan_with_zero_gradients(loss, rng):
    x = t64(rng.standard_normal((4, 3)), requires_grad=True)
    y = loss(x, ngrad.tensor([-100] * 4))
    y.backward()
    assert math.isnan(y.item())
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((4, 3)))


def test_ignored_targets_add_nothing_and_leave_the_mean(rng):
    x0 = rng.standard_normal((5, 4))
    target = np.array([0, 3, 7, 1, 7])
    lp = log_softmax(x0)
    keep = target != 7
    expected = -lp[np.arange(5)[keep], target[keep]].mean()
    x = t64(x0, requires_grad=True)
    y = F.cross_entropy(x, ngrad.tensor(target), ignore_index=7)
    y.backward()
    np.testing.assert_allclose(y.item(), expected, rtol=1e-14)
    grad = np.exp(lp)
    grad[np.arange(5), np.where(keep, target, 0)] -= 1
    np.testing.assert_allclose(x.grad.numpy(), grad * keep[:, None] / keep.sum(), rtol=1e-12, atol=1e-15)


def test_binary_cross_entropy_clamps_its_logs_at_minus_100():
    p, t = t64([0.0, 1.0, 0.5]), t64([1.0, 0.0, 0.5])
    loss = F.binary_cross_entropy(p, t, reduction="none")
    np.testing.assert_allclose(loss.numpy(), [100.0, 100.0, math.log(2)], rtol=1e-14)
    logits = t64([-800.0, 800.0, 0.0])  # saturated logits stay finite: softplus, not log(sigmoid)
    np.testing.assert_allclose(
        F.binary_cross_entropy_with_logits(logits, t, reduction="none").numpy(), [800.0, 800.0, math.log(2)], rtol=1e-14
    )


def test_class_weights_and_pos_weight_are_differentiable(rng):
    x0, w0 = rng.standard_normal((6, 3)), rng.uniform(0.5, 2.0, 3)
    target = ngrad.tensor([0, 2, 1, 1, -100, 2])
    tensor_fd_check(lambda x, w: F.cross_entropy(x, target, weight=w, label_smoothing=0.1), [x0, w0], rng)
    z0, t0, pw0 = rng.standard_normal((4, 3)), rng.uniform(0, 1, (4, 3)), rng.uniform(0.5, 2.0, 3)
    tensor_fd_check(lambda z, pw: F.binary_cross_entropy_with_logits(z, t64(t0), pos_weight=pw), [z0, pw0], rng)


def test_loss_arguments_are_checked():
    x = t64(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(3\) to match target batch_size \(2\)"):
        F.cross_entropy(x, ngrad.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="expected target dtype to be Long"):
        F.nll_loss(x, t64([0.0, 1.0, 2.0]))
    with pytest.raises(RuntimeError, match="weight tensor should be defined either for all 4 classes"):
        F.cross_entropy(x, ngrad.tensor([0, 1, 2]), weight=t64([1.0, 2.0]))
    with pytest.raises(RuntimeError, match=r"Expected target size \[3, 2\], got \[3\]"):
        F.cross_entropy(t64(np.zeros((3, 4, 2))), ngrad.tensor([0, 1, 2]))
    with pytest.raises(RuntimeError, match="label_smoothing must be between 0.0 and 1.0"):
        F.cross_entropy(x, ngrad.tensor([0, 1, 2]), label_smoothing=1.5)
    with pytest.raises(ValueError, match="that is different to the input size"):
        F.binary_cross_entropy(x.sigmoid(), t64(np.zeros((2, 4))))
    with pytest.raises(ValueError, match="avg is not a valid value for reduction"):
        F.l1_loss(x, x, reduction="avg")
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        F.gelu(x, approximate="fast")
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(x, ngrad.tensor([0, 1, 4])).item()


def test_a_compiled_training_step_reads_new_targets_each_call(rng):
    @ngrad.compile
    def step(x, target, w):
        loss = F.cross_entropy(F.linear(x, w), target, label_smoothing=0.1)
        loss.backward()
        return loss

    w0 = rng.standard_normal((4, 6))
    for k in range(4):
        x0, target = rng.standard_normal((8, 6)), rng.integers(0, 4, 8)
        target[k] = -100
        w = t64(w0, requires_grad=True)
        loss = step(t64(x0), ngrad.tensor(target), w)
        lp, keep = log_softmax(x0 @ w0.T), target != -100
        nll = -lp[np.arange(8)[keep], target[keep]]
        expected = (0.9 * nll.sum() + 0.1 / 4 * -lp[keep].sum()) / keep.sum()
        np.testing.assert_allclose(loss.item(), expected, rtol=1e-13)
        onehot = np.zeros((8, 4))
        onehot[np.arange(8), np.where(keep, target, 0)] = 1
        dz = (np.exp(lp) - (0.9 * onehot + 0.1 / 4)) * keep[:, None] / keep.sum()
        np.testing.assert_allclose(w.grad.numpy(), dz.T @ x0, rtol=1e-11, atol=1e-14)
