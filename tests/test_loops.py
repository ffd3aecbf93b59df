"""Loops of constant work per iteration keep a constant pending history: what a read realizes
besides its result (the values still held), the pending depth bound, and that neither changes a
result or a gradient (NumPy models of the same loops, PyTorch where installed)."""

import gc
import math
import tracemalloc
import weakref

import numpy as np
import pytest

import ngrad
from ngrad.engine.ir import graph
from ngrad.engine.runtime import realize as realize_mod
from ngrad.engine.runtime.realize import held, pending_count, realize


def _poly_ngrad(steps, dtype, on_read=None):
    """PyTorch's "polynomial with tensors" tutorial loop (no autograd), in ngrad."""
    x = ngrad.linspace(-math.pi, math.pi, 2000, dtype=dtype)
    y = ngrad.sin(x)
    a, b, c, d = (ngrad.tensor(v, dtype=dtype) for v in (0.1, -0.2, 0.3, -0.05))
    lr, losses = 1e-6, []
    for t in range(steps):
        y_pred = a + b * x + c * x**2 + d * x**3
        losses.append((y_pred - y).pow(2).sum().item())
        if on_read is not None:
            on_read(t, a, b, c, d, y_pred)
        grad_y_pred = 2.0 * (y_pred - y)
        grad_a = grad_y_pred.sum()
        grad_b = (grad_y_pred * x).sum()
        grad_c = (grad_y_pred * x**2).sum()
        grad_d = (grad_y_pred * x**3).sum()
        a -= lr * grad_a
        b -= lr * grad_b
        c -= lr * grad_c
        d -= lr * grad_d
    return losses, [t.item() for t in (a, b, c, d)]


def _poly_numpy(steps):
    x = np.linspace(-math.pi, math.pi, 2000)
    y = np.sin(x)
    a, b, c, d = 0.1, -0.2, 0.3, -0.05
    losses = []
    for _ in range(steps):
        y_pred = a + b * x + c * x**2 + d * x**3
        losses.append(((y_pred - y) ** 2).sum())
        g = 2.0 * (y_pred - y)
        a, b, c, d = (
            a - 1e-6 * g.sum(),
            b - 1e-6 * (g * x).sum(),
            c - 1e-6 * (g * x**2).sum(),
            d - 1e-6 * (g * x**3).sum(),
        )
    return losses, [a, b, c, d]


def test_the_tutorial_loop_reads_from_values_and_equals_numpy():
    sizes = []

    def on_read(t, a, b, c, d, y_pred):
        # the read realized what the loop still holds: the next iteration starts from values
        sizes.append(pending_count([a._node, b._node, c._node, d._node, y_pred._node]))

    losses, coeffs = _poly_ngrad(300, ngrad.float64, on_read)
    want_losses, want_coeffs = _poly_numpy(300)
    assert max(sizes) == 0
    np.testing.assert_allclose(losses, want_losses, rtol=1e-12)
    np.testing.assert_allclose(coeffs, want_coeffs, rtol=1e-12)


def test_the_tutorial_loop_runs_one_program_structure_per_iteration(monkeypatch):
    keys = []
    run = realize_mod.run

    def counting(tape, values, target):
        keys.append(tape.key())
        return run(tape, values, target)

    monkeypatch.setattr(realize_mod, "run", counting)
    _poly_ngrad(40, ngrad.float32)
    # the first iterations differ (nothing of the previous iteration is pending yet); then every
    # read runs the same program: a steady loop never recompiles
    assert len(keys) == 40 + 4  # 40 reads of the loss, 4 of the coefficients at the end
    assert len(set(keys[3:40])) == 1


def test_a_loop_that_never_reads_keeps_its_pending_depth_bounded(monkeypatch):
    monkeypatch.setattr(graph, "PENDING_DEPTH", 64)
    xs = np.linspace(0.0, 1.0, 50)
    x = ngrad.tensor(xs)
    s = ngrad.zeros(50, dtype=ngrad.float64)
    want = np.zeros(50)
    tracemalloc.start()
    sizes, memory = [], []
    try:
        for i in range(10_000):
            s = s * 0.9 + x
            want = want * 0.9 + xs
            if i % 500 == 499:
                sizes.append(pending_count([s._node]))
                gc.collect()
                memory.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert max(sizes) <= 64 + 2
    assert max(memory[2:]) - min(memory[2:]) < 100_000  # flat: no history kept between bounds
    np.testing.assert_allclose(s.numpy(), want, rtol=1e-12)


def test_the_depth_bound_realizes_with_requires_grad_and_backward_is_unchanged(monkeypatch):
    monkeypatch.setattr(graph, "PENDING_DEPTH", 32)
    xs = np.linspace(-1.0, 1.0, 7)
    x = ngrad.tensor(xs, requires_grad=True)
    s = ngrad.zeros(7, dtype=ngrad.float64)
    sizes = []
    for _ in range(500):
        s = s * 0.9 + x.sin()
        sizes.append(pending_count([s._node]))
    assert max(sizes) <= 3 * 32 // 2 + 3  # a chain of 32 (2 per iteration), with one sin each
    s.sum().backward()
    geometric = (1 - 0.9**500) / 0.1  # d(sum s)/dx = sum_k 0.9^k cos(x)
    np.testing.assert_allclose(s.detach().numpy(), geometric * np.sin(xs), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), geometric * np.cos(xs), rtol=1e-12)


def test_the_autograd_tutorial_loop_matches_torch():
    torch = pytest.importorskip("torch")

    def loop(lib):
        x = lib.linspace(-math.pi, math.pi, 2000, dtype=lib.float64)
        y = lib.sin(x)
        p = [lib.tensor(v, dtype=lib.float64, requires_grad=True) for v in (0.1, -0.2, 0.3, -0.05)]
        losses = []
        for _ in range(60):
            y_pred = p[0] + p[1] * x + p[2] * x**2 + p[3] * x**3
            loss = (y_pred - y).pow(2).sum()
            losses.append(loss.item())
            loss.backward()
            with lib.no_grad():
                for q in p:
                    q -= 1e-6 * q.grad
                    q.grad = None
        return losses, [q.item() for q in p]

    got, want = loop(ngrad), loop(torch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10)


def test_a_read_keeps_held_values_and_lets_the_rest_go():
    x = ngrad.tensor(np.arange(6.0))
    kept = x.exp()  # a tensor the program still holds
    view = (x * 3.0).reshape(2, 3)  # a view: its source keeps the value, the view stays one op
    temp = x * 2.0
    ref_temp = weakref.ref(temp._node)
    out = (kept + view.reshape(6) + temp.sin()).sum()
    del temp
    assert out.item() == pytest.approx(np.exp(np.arange(6.0)).sum() + 45.0 + np.sin(2 * np.arange(6.0)).sum())
    assert kept._node.value is not None
    np.testing.assert_array_equal(kept._node.value, np.exp(np.arange(6.0)))
    assert view._node.value is None and view._node.srcs[0].value is not None
    assert ref_temp() is None  # freed with the history of the realized sum


def test_held_is_the_pending_nodes_referenced_from_outside_in_a_stable_order():
    x = ngrad.tensor(np.arange(4.0))
    a = x * 2.0
    b = a + 1.0
    c = (b * b).sum()
    assert held([c._node]) == [a._node, b._node]
    del a
    assert held([c._node]) == [b._node]
    realize([c._node], keep=True)
    assert b._node.value is not None and c._node.value is not None


def test_a_deep_pending_chain_in_ngrad_compile_stays_one_program(monkeypatch):
    monkeypatch.setattr(graph, "PENDING_DEPTH", 16)

    @ngrad.compile
    def f(x):
        for _ in range(100):
            x = x * 0.5 + 1.0
        return x

    xs = np.linspace(0.0, 1.0, 5)
    want = xs.copy()
    for _ in range(100):
        want = want * 0.5 + 1.0
    for _ in range(3):
        np.testing.assert_allclose(f(ngrad.tensor(xs)).numpy(), want, rtol=1e-12)


def test_a_value_set_outside_realize_leaves_no_spurious_depth(monkeypatch):
    monkeypatch.setattr(graph, "PENDING_DEPTH", 8)
    x = ngrad.tensor(np.arange(3.0))
    for _ in range(8):
        x = x + 1.0
    assert x._node.depth == 8
    x._node.value = np.arange(3.0) + 8.0  # as backward gives its seeds values: the depth stays
    for _ in range(5):
        x = x * 2.0  # recorded deeper than the bound, but only 5 nodes are pending
    assert x._node.value is None and pending_count([x._node]) == 5 and x._node.depth == 5
    np.testing.assert_array_equal(x.numpy(), (np.arange(3.0) + 8.0) * 32.0)


def test_graphs_of_one_structure_share_a_tape_and_keep_their_own_values(monkeypatch):
    tapes = []
    run = realize_mod.run
    monkeypatch.setattr(
        realize_mod, "run", lambda tape, values, target: tapes.append(tape) or run(tape, values, target)
    )
    xs = np.linspace(-1.0, 1.0, 5)
    x = ngrad.tensor(xs)
    got = [(x * k + (k - 1.0)).sin().numpy() for k in (2.0, 3.0)]  # runtime scalars: one structure
    got += [(x**p).numpy() for p in (2, 3)]  # literal exponents: two structures
    got += [(x * x).numpy(), (x * x.exp()).numpy()]  # a shared source against two different ones
    want = [np.sin(xs * 2.0 + 1.0), np.sin(xs * 3.0 + 2.0), xs**2, xs**3, xs * xs, xs * np.exp(xs)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-15)
    assert tapes[0] is tapes[1]
    assert tapes[2] is not tapes[3] and tapes[4] is not tapes[5]


def test_structures_whose_keys_hash_alike_keep_their_own_tapes(monkeypatch):
    # every key in one bucket: each structure must still find its own tape, never another's
    monkeypatch.setattr(realize_mod, "_tapes", type(realize_mod._tapes)())
    monkeypatch.setattr(realize_mod, "_remember", lambda *args: None)  # no structure matched, all looked up
    monkeypatch.setattr(realize_mod, "_seen", type(realize_mod._seen)())
    monkeypatch.setattr(realize_mod, "hash", lambda key: 7, raising=False)
    xs = np.linspace(-1.0, 1.0, 5)
    x = ngrad.tensor(xs)
    for _ in range(2):  # the second round finds each structure's tape in the shared bucket
        np.testing.assert_allclose((x * 2.0).sin().numpy(), np.sin(xs * 2.0), rtol=1e-15)
        np.testing.assert_allclose((x * 2.0).cos().numpy(), np.cos(xs * 2.0), rtol=1e-15)
        np.testing.assert_allclose((x**3).numpy(), xs**3, rtol=1e-15)
    assert [len(kept) for kept in realize_mod._tapes.values()] == [3]


def test_chains_at_the_depth_bound_are_lowered_once(monkeypatch):
    # each operation with a Python number adds a runtime scalar source: a chain at the real depth
    # bound (1,024) is about 2,050 nodes, and every realization of it past the first must reuse
    # its tape (it was lowered again each time, about 70 ms per 1,024 operations)
    lowered = []
    lower = realize_mod.lower
    monkeypatch.setattr(realize_mod, "lower", lambda roots: lowered.append(len(roots)) or lower(roots))
    xs = np.linspace(0.0, 1.0, 8)
    s, want = ngrad.tensor(xs), xs.copy()
    for _ in range(4 * graph.PENDING_DEPTH):
        s = s * 0.999 + 0.001
        want = want * 0.999 + 0.001
    np.testing.assert_allclose(s.numpy(), want, rtol=1e-12)
    assert 2 <= len(lowered) <= 3  # the first depth-bound chain (and the final read's shorter one)


def _descend(steps, lowered=None):
    """Gradient descent on y*y whose step is itself differentiable (create_graph): y_n = 0.98^n x."""
    x = ngrad.tensor([1.0, -2.0], dtype=ngrad.float64, requires_grad=True)
    y = x
    for _ in range(steps):
        (g,) = ngrad.autograd.grad((y * y).sum(), y, create_graph=True)
        y = y - 0.01 * g
    return x, y


def test_differentiating_the_latest_value_lowers_only_what_lies_above_it(monkeypatch):
    from ngrad.autograd import reverse

    sizes = []
    real = reverse.lower

    def counting(*args, **kwargs):
        low = real(*args, **kwargs)
        sizes.append(len(low.tape.instrs))
        return low

    monkeypatch.setattr(reverse, "lower", counting)
    x, y = _descend(60)
    # each call's tape is the step alone (the history below y is read, not recomputed)
    assert len(set(sizes)) == 1 and sizes[0] < 10
    # and the history is still there for a gradient through all of it
    np.testing.assert_allclose(y.detach().numpy(), 0.98**60 * np.array([1.0, -2.0]), rtol=1e-12)
    (dx,) = ngrad.autograd.grad(y.sum(), x)
    np.testing.assert_allclose(dx.numpy(), [0.98**60] * 2, rtol=1e-12)


def test_reading_realized_nodes_off_the_path_keeps_every_gradient():
    """Targets below other targets, realized nodes that lead to none, and pending targets."""
    torch = pytest.importorskip("torch")
    for lib in (ngrad, torch):
        x = lib.tensor([0.5, -1.25, 2.0], dtype=lib.float64, requires_grad=True)
        w = lib.tensor([1.5, 0.25, -0.75], dtype=lib.float64, requires_grad=True)
        h = (x.sin() * w).exp()
        if lib is ngrad:
            h.detach().numpy()  # realized: recomputed for x's and w's gradients, read for k's
        k = h * 3.0 + x
        out = (k * k).sum() + (h * x).sum()
        grads = lib.autograd.grad(out, [k, x, h, w], create_graph=True)
        second = lib.autograd.grad(sum(g.sum() for g in grads), [x, w])
        found = [g.detach().numpy() for g in grads + second]
        if lib is ngrad:
            mine = found
    for a, b in zip(mine, found):
        np.testing.assert_allclose(a, b, rtol=1e-12)
