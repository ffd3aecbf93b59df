"""ngrad.optim against PyTorch step for step (float64, rtol 1e-9) where torch is installed, and
against NumPy transcriptions of the update rules everywhere; LBFGS converges on Rosenbrock-100."""

import math

import numpy as np
import pytest

import ngrad

from .oracles import torch_or_skip

RNG = np.random.default_rng(7)
A, B, W0 = RNG.standard_normal((30, 6)), RNG.standard_normal(30), RNG.standard_normal(6)

CONFIGS = [
    ("SGD", dict(lr=0.05)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.1, maximize=True)),
    ("Adam", dict(lr=0.05)),
    ("Adam", dict(lr=0.05, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.05)),
    ("AdamW", dict(lr=0.05, amsgrad=True, maximize=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1)),
]


def trajectory(lib, name, kw, steps=25, sched=None):
    """Parameters after each step on a least-squares loss with a quartic term (two groups)."""
    w = lib.tensor(W0[:4].copy(), dtype=lib.float64, requires_grad=True)
    v = lib.tensor(W0[4:].copy(), dtype=lib.float64, requires_grad=True)
    At, bt = lib.tensor(A, dtype=lib.float64), lib.tensor(B, dtype=lib.float64)
    sign = -1 if kw.get("maximize") else 1
    opt = getattr(lib.optim, name)([{"params": [w]}, {"params": [v], "lr": kw["lr"] / 2}], **kw)
    sc = sched(lib, opt) if sched else None
    out = []
    for _ in range(steps):
        opt.zero_grad()
        x = lib.cat([w, v])
        loss = sign * (((At @ x - bt) ** 2).mean() + 0.01 * (x**4).sum())
        loss.backward()
        opt.step()
        if sc:
            sc.step()
        out.append(np.concatenate([w.detach().numpy(), v.detach().numpy()]))
    return np.array(out)


@pytest.mark.parametrize("name,kw", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_matches_pytorch_step_for_step(name, kw):
    torch = torch_or_skip()
    np.testing.assert_allclose(trajectory(ngrad, name, kw), trajectory(torch, name, kw), rtol=1e-9, atol=1e-12)


SCHEDULERS = {
    "step": lambda lib, o: lib.optim.lr_scheduler.StepLR(o, 5, gamma=0.5),
    "exp": lambda lib, o: lib.optim.lr_scheduler.ExponentialLR(o, 0.9),
    "cosine": lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingLR(o, 7, eta_min=1e-3),
}


@pytest.mark.parametrize("kind", sorted(SCHEDULERS))
def test_schedulers_match_pytorch(kind):
    torch = torch_or_skip()
    np.testing.assert_allclose(
        trajectory(ngrad, "Adam", dict(lr=0.05), sched=SCHEDULERS[kind]),
        trajectory(torch, "Adam", dict(lr=0.05), sched=SCHEDULERS[kind]),
        rtol=1e-9,
    )


@pytest.mark.parametrize("kind", sorted(SCHEDULERS))
def test_schedulers_follow_their_closed_forms(kind):
    opt = ngrad.optim.SGD([ngrad.zeros(1, requires_grad=True)], lr=1.0)
    sched = SCHEDULERS[kind](ngrad, opt)
    for e in range(20):
        want = {
            "step": 0.5 ** (e // 5),
            "exp": 0.9**e,
            "cosine": 1e-3 + (1 - 1e-3) * (1 + math.cos(math.pi * e / 7)) / 2,
        }[kind]
        assert sched.get_last_lr()[0] == pytest.approx(want, rel=1e-12)
        opt.step()
        sched.step()


def _numpy_adam(g_of, w, lr, b1, b2, eps, steps):
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t in range(1, steps + 1):
        g = g_of(w)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr / (1 - b1**t) * m / (np.sqrt(v) / math.sqrt(1 - b2**t) + eps)
    return w


def _numpy_sgd(g_of, w, lr, mu, steps, nesterov=False):
    buf = None
    for _ in range(steps):
        g = g_of(w)
        buf = g if buf is None else mu * buf + g
        w = w - lr * (g + mu * buf if nesterov else buf)
    return w


def _numpy_rmsprop(g_of, w, lr, alpha, eps, steps):
    s = np.zeros_like(w)
    for _ in range(steps):
        g = g_of(w)
        s = alpha * s + (1 - alpha) * g * g
        w = w - lr * g / (np.sqrt(s) + eps)
    return w


def _run(opt_cls, steps, **kw):
    w = ngrad.tensor(W0.copy(), requires_grad=True)
    At, bt = ngrad.tensor(A), ngrad.tensor(B)
    opt = opt_cls([w], **kw)
    for _ in range(steps):
        opt.zero_grad()
        ((At @ w - bt) ** 2).mean().backward()
        opt.step()
    return w.detach().numpy()


def _lsq_grad(w):
    return 2 * A.T @ (A @ w - B) / len(B)


def test_update_rules_against_numpy():
    np.testing.assert_allclose(
        _run(ngrad.optim.Adam, 20, lr=0.05), _numpy_adam(_lsq_grad, W0, 0.05, 0.9, 0.999, 1e-8, 20), rtol=1e-10
    )
    np.testing.assert_allclose(
        _run(ngrad.optim.SGD, 20, lr=0.02, momentum=0.9, nesterov=True),
        _numpy_sgd(_lsq_grad, W0, 0.02, 0.9, 20, nesterov=True),
        rtol=1e-10,
    )
    np.testing.assert_allclose(
        _run(ngrad.optim.RMSprop, 20, lr=0.01), _numpy_rmsprop(_lsq_grad, W0, 0.01, 0.99, 1e-8, 20), rtol=1e-10
    )


def test_a_step_outside_compile_replays_its_program_and_follows_changes(monkeypatch):
    import copy

    from ngrad.tracing import CompiledFunction

    w = ngrad.tensor(W0[:4].copy(), requires_grad=True)
    v = ngrad.tensor(W0[4:].copy(), requires_grad=True)
    opt = ngrad.optim.SGD([w, v], lr=0.02, momentum=0.9)
    ref_w, ref_v, buf_w, buf_v = W0[:4].copy(), W0[4:].copy(), np.zeros(4), np.zeros(2)
    for k in range(8):
        gw, gv = np.full(4, 0.1 * k + 0.5), np.arange(2.0) + k
        w.grad, v.grad = ngrad.tensor(gw), ngrad.tensor(gv)
        if k == 3:  # from here on the compiled update runs: no Python update rule, no general replay
            monkeypatch.setattr(CompiledFunction, "_replay", lambda *a: pytest.fail("traced or replayed"))
            monkeypatch.setattr(ngrad.optim.SGD, "_update", lambda *a: pytest.fail("recorded"))
        if k == 5:
            monkeypatch.undo()
            opt.param_groups[0]["momentum"] = 0.5  # a hyperparameter: traced again, and honoured
            v.grad = None  # a parameter without a gradient is skipped
        if k == 6:
            opt.param_groups[0]["lr"] = 0.01  # the learning rate is an input of the program
        opt.step()
        mom, lr = (0.9 if k < 5 else 0.5), (0.02 if k < 6 else 0.01)
        buf_w = gw if k == 0 else mom * buf_w + gw
        ref_w = ref_w - lr * buf_w
        if k != 5:
            buf_v = gv if k == 0 else mom * buf_v + gv
            ref_v = ref_v - lr * buf_v
        np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-13)
        np.testing.assert_allclose(v.detach().numpy(), ref_v, rtol=1e-13)
    clone = copy.deepcopy(opt)  # the compiled program is not copied; the copy makes its own
    clone.step()
    assert clone.param_groups[0]["params"][0] is not w


def test_state_dict_round_trip_continues_identically():
    full = _run(ngrad.optim.Adam, 10, lr=0.05)
    w = ngrad.tensor(W0.copy(), requires_grad=True)
    At, bt = ngrad.tensor(A), ngrad.tensor(B)
    opt = ngrad.optim.Adam([w], lr=0.05)

    def steps(opt, n):
        for _ in range(n):
            opt.zero_grad()
            ((At @ w - bt) ** 2).mean().backward()
            opt.step()

    steps(opt, 4)
    saved = opt.state_dict()
    assert saved["param_groups"][0]["params"] == [0] and saved["state"][0]["step"].item() == 4
    fresh = ngrad.optim.Adam([w], lr=0.05)
    fresh.load_state_dict(saved)
    steps(fresh, 6)
    np.testing.assert_allclose(w.detach().numpy(), full, rtol=1e-12)


def test_zero_grad_and_argument_errors():
    w = ngrad.ones(2, requires_grad=True)
    opt = ngrad.optim.SGD([w], lr=0.1)
    (w * w).sum().backward()
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 0.0])
    opt.zero_grad()
    assert w.grad is None
    opt.step()  # parameters without gradients are skipped
    np.testing.assert_array_equal(w.detach().numpy(), [1.0, 1.0])
    with pytest.raises(ValueError, match="empty parameter list"):
        ngrad.optim.Adam([])
    with pytest.raises(ValueError, match="Invalid learning rate"):
        ngrad.optim.Adam([w], lr=-1)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 0"):
        ngrad.optim.Adam([w], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="non-leaf"):
        ngrad.optim.SGD([w * 2], lr=0.1)
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        ngrad.optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(TypeError, match="iterable of Tensors"):
        ngrad.optim.SGD(w, lr=0.1)


def _rosenbrock_lbfgs(lib, steps, **kw):
    x = lib.tensor(np.tile([-1.2, 1.0], 50), dtype=lib.float64, requires_grad=True)
    opt = lib.optim.LBFGS([x], **kw)

    def closure():
        opt.zero_grad()
        loss = (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()
        loss.backward()
        return loss

    out = []
    for _ in range(steps):
        opt.step(closure)
        out.append(x.detach().numpy().copy())
    return np.array(out), opt.state[x]


@pytest.mark.parametrize(
    "kw",
    [dict(line_search_fn="strong_wolfe", history_size=10), dict(lr=0.1, history_size=5)],
    ids=["strong_wolfe", "fixed_step"],
)
def test_lbfgs_matches_pytorch(kw):
    torch = torch_or_skip()
    mine, st = _rosenbrock_lbfgs(ngrad, 2, **kw)
    theirs, st_t = _rosenbrock_lbfgs(torch, 2, **kw)
    np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-11)
    assert (st["func_evals"], st["n_iter"]) == (st_t["func_evals"], st_t["n_iter"])


def test_lbfgs_converges_on_rosenbrock_100():
    xs, st = _rosenbrock_lbfgs(
        ngrad, 10, line_search_fn="strong_wolfe", max_iter=100, tolerance_grad=1e-10, tolerance_change=1e-14
    )
    np.testing.assert_allclose(xs[-1], np.ones(100), atol=1e-6)


def test_lbfgs_with_a_zero_dimensional_parameter():
    # a scalar parameter (a bias) keeps its shape through the flat update vector
    w = ngrad.zeros(2, dtype=ngrad.float64, requires_grad=True)
    b = ngrad.tensor(0.0, dtype=ngrad.float64, requires_grad=True)
    opt = ngrad.optim.LBFGS([w, b], line_search_fn="strong_wolfe", max_iter=50)
    target = ngrad.tensor([1.0, -2.0], dtype=ngrad.float64)

    def closure():
        opt.zero_grad()
        loss = ((w - target) ** 2).sum() + (b - 0.5) ** 2
        loss.backward()
        return loss

    opt.step(closure)
    assert b.shape == () and abs(b.item() - 0.5) < 1e-8
    np.testing.assert_allclose(w.detach().numpy(), [1.0, -2.0], atol=1e-8)
