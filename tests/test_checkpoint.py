"""``ngrad.utils.checkpoint``: gradients equal to the plain computation's (arguments and tensors
the function closes over, both forms, second order, forward mode), PyTorch's warnings, errors and
grad_fn names (checked on PyTorch too where it is installed), random values drawn once, and the
point of it all: a lower peak of memory in the backward, measured with tracemalloc."""

import tracemalloc

import numpy as np
import pytest

import ngrad
from ngrad.utils import checkpoint as ck

from .oracles import LIBS


def checkpoint_of(lib):
    if lib is ngrad:
        return ck.checkpoint, ck.checkpoint_sequential
    import torch.utils.checkpoint as tck

    return tck.checkpoint, tck.checkpoint_sequential


def weights(lib, n=3, width=4, seed=0):
    rng = np.random.default_rng(seed)
    return [lib.tensor(rng.standard_normal((width, width)) / 2, requires_grad=True) for _ in range(n)]


def mlp_grads(lib, mode):
    """Gradients of a 3-layer tanh network whose layers close over their weights; ``mode``:
    None (plain), True or False (use_reentrant)."""
    checkpoint, _ = checkpoint_of(lib)
    ws = weights(lib)
    x = lib.tensor(np.linspace(-1, 1, 8).reshape(2, 4), requires_grad=True)
    h = x
    for w in ws:
        layer = (lambda w: lambda h: (h @ w).tanh())(w)
        h = layer(h) if mode is None else checkpoint(layer, h, use_reentrant=mode)
    (h * h).sum().backward()
    return [t.grad.numpy() for t in ws + [x]]


@pytest.mark.parametrize("reentrant", [False, True])
def test_gradients_equal_the_plain_computations(reentrant):
    expected = mlp_grads(ngrad, None)
    for got, want in zip(mlp_grads(ngrad, reentrant), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    torch = pytest.importorskip("torch")
    for got, want in zip(mlp_grads(torch, reentrant), expected):
        np.testing.assert_allclose(got, want, rtol=1e-10)


def test_a_plain_gradient_of_one_layer_matches_finite_differences():
    w = ngrad.tensor([[0.3, -0.7], [1.1, 0.2]], dtype=ngrad.float64, requires_grad=True)
    x = ngrad.tensor([[0.5, -1.5]], dtype=ngrad.float64)
    y = ck.checkpoint(lambda h: (h @ w).tanh(), x, use_reentrant=False)
    (g,) = ngrad.autograd.grad(y.sum(), w)
    base, eps, fd = w.detach().numpy(), 1e-6, np.zeros((2, 2))
    for i in np.ndindex(2, 2):
        up, down = base.copy(), base.copy()
        up[i] += eps
        down[i] -= eps
        fd[i] = (np.tanh(x.numpy() @ up).sum() - np.tanh(x.numpy() @ down).sum()) / (2 * eps)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-6)


def test_second_order_and_forward_mode_pass_through_a_boundary():
    x = ngrad.tensor([0.3, -0.8], dtype=ngrad.float64, requires_grad=True)
    y = ck.checkpoint(lambda t: t.sin() * t, x, use_reentrant=False)
    (g,) = ngrad.autograd.grad(y.sum(), x, create_graph=True)
    (h,) = ngrad.autograd.grad(g.sum(), x)
    xs = x.detach().numpy()
    np.testing.assert_allclose(g.detach().numpy(), np.cos(xs) * xs + np.sin(xs))
    np.testing.assert_allclose(h.numpy(), 2 * np.cos(xs) - xs * np.sin(xs))
    fw = ngrad.autograd.forward_ad
    with fw.dual_level():
        d = fw.make_dual(x.detach(), ngrad.ones(2, dtype=ngrad.float64))
        t = fw.unpack_dual(ck.checkpoint(lambda t: t.sin() * t, d, use_reentrant=False)).tangent
    np.testing.assert_allclose(t.numpy(), np.cos(xs) * xs + np.sin(xs))


@LIBS
def test_the_forms_differ_as_in_pytorch(lib):
    checkpoint, _ = checkpoint_of(lib)
    w = lib.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)

    def layer(h):
        return (h @ w).tanh()

    x = lib.tensor([[1.0, 2.0]], requires_grad=True)
    y = checkpoint(layer, x, use_reentrant=False)
    assert y.grad_fn.name() == "TanhBackward0"
    assert lib.autograd.grad(y.sum(), w)[0].shape == (2, 2)  # grad() works without reentrance
    y = checkpoint(layer, x, use_reentrant=True)
    assert y.grad_fn.name() == "CheckpointFunctionBackward"
    with pytest.raises(RuntimeError, match="use_reentrant=True, torch.utils.checkpoint is incompatible with .grad"):
        lib.autograd.grad(y.sum(), x)
    with pytest.raises(RuntimeError, match="use_reentrant=True, torch.utils.checkpoint is incompatible with .grad"):
        y.sum().backward(inputs=[x])
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.array([[1.0], [2.0]]) * (1 - y.detach().numpy() ** 2), rtol=1e-5)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        z = checkpoint(layer, x.detach(), use_reentrant=True)
    assert not z.requires_grad  # reentrant: only the inputs decide
    assert checkpoint(layer, x.detach(), use_reentrant=False).requires_grad
    with pytest.warns(UserWarning, match="the use_reentrant parameter should be passed explicitly"):
        checkpoint(layer, x)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(layer, x, use_reentrant=True, scale=2)


@LIBS
def test_checkpoint_sequential_runs_every_chunk(lib):
    _, sequential = checkpoint_of(lib)
    x = lib.tensor([0.5, 1.0], dtype=lib.float64, requires_grad=True)
    layers = [lib.tanh, lambda h: h * 3, lib.sin, lambda h: h + 1, lib.exp]
    y = sequential(layers, 2, x, use_reentrant=False)
    y.sum().backward()
    xs = np.array([0.5, 1.0])
    u = np.sin(3 * np.tanh(xs)) + 1
    np.testing.assert_allclose(y.detach().numpy(), np.exp(u))
    np.testing.assert_allclose(x.grad.numpy(), np.exp(u) * np.cos(3 * np.tanh(xs)) * 3 * (1 - np.tanh(xs) ** 2))


def test_random_values_are_drawn_once():
    x = ngrad.ones(64, dtype=ngrad.float64, requires_grad=True)

    def block(h):
        return ngrad.nn.functional.dropout(h * 2, p=0.5, training=True).sin()

    ngrad.manual_seed(3)
    ck.checkpoint(block, x, use_reentrant=False).sum().backward()
    after_ck, grad_ck = ngrad.rand(1).item(), x.grad.numpy().copy()
    x.grad = None
    ngrad.manual_seed(3)
    block(x).sum().backward()
    assert ngrad.rand(1).item() == after_ck  # the generator is where the plain call leaves it
    np.testing.assert_array_equal(x.grad.numpy(), grad_ck)


def backward_peak(segments, depth=32, width=32, batch=2048):
    """Peak traced memory (bytes) of a tanh MLP's forward and backward; ``segments`` 0: plain."""
    rng = np.random.default_rng(0)
    ws = [ngrad.tensor(rng.standard_normal((width, width)) / width**0.5, requires_grad=True) for _ in range(depth)]
    x = ngrad.tensor(rng.standard_normal((batch, width)))
    layers = [(lambda w: lambda h: (h @ w).tanh())(w) for w in ws]
    tracemalloc.start()
    try:
        if segments:
            y = ck.checkpoint_sequential(layers, segments, x, use_reentrant=False)
        else:
            y = x
            for f in layers:
                y = f(y)
        (y * y).sum().backward()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, [w.grad.numpy() for w in ws]


def test_checkpointing_lowers_the_peak_memory_of_the_backward():
    plain, expected = backward_peak(0)
    checkpointed, got = backward_peak(4)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    # 32 activations of 0.5 MiB are alive at once without it; 3 boundaries and 8 activations with
    # it (measured: 17.2 against 7.3 MiB)
    assert checkpointed < 0.55 * plain, (checkpointed / 2**20, plain / 2**20)


@LIBS
@pytest.mark.parametrize("reentrant", [False, True])
def test_hooks_retain_grad_and_a_freed_graph_across_boundaries(lib, reentrant):
    checkpoint, _ = checkpoint_of(lib)
    w = lib.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=lib.float64, requires_grad=True)
    x = lib.tensor([[1.0, 2.0]], dtype=lib.float64, requires_grad=True)
    y = checkpoint(lambda t: (t @ w).tanh(), x, use_reentrant=reentrant)
    y.register_hook(lambda g: g * 2)
    y.retain_grad()
    z = checkpoint(lambda t: t.sin() * 3, y, use_reentrant=reentrant)
    z.sum().backward()
    ys = np.tanh(np.array([[1.0, 2.0]]) @ w.detach().numpy())
    gy = 3 * np.cos(ys)
    np.testing.assert_allclose(y.grad.numpy(), 2 * gy)  # retain_grad sees the hooked gradient
    np.testing.assert_allclose(w.grad.numpy(), np.array([[1.0], [2.0]]) * (2 * gy * (1 - ys**2)))
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        z.sum().backward()
