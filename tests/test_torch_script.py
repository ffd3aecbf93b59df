"""``import ngrad as torch``: an autograd script written for PyTorch gives PyTorch's numbers."""

import numpy as np
import pytest

import ngrad

SCRIPT = """
torch.set_default_dtype(torch.float64)
rng = np.random.default_rng(0)
pos = torch.tensor(rng.uniform(0, 3, (8, 3)), requires_grad=True)

def energy(p):
    d = p[:, None, :] - p[None, :, :]
    r2 = (d ** 2).sum(-1) + torch.eye(p.shape[0])
    inv6 = (1.0 / r2) ** 3
    e = 4 * (inv6 ** 2 - inv6)
    mask = 1 - torch.eye(p.shape[0])
    return 0.5 * (e * mask).sum() + 0.01 * (p ** 2).sum()

history = []
for step in range(20):
    e = energy(pos)
    e.backward()
    with torch.no_grad():
        g = pos.grad
        step_size = 1e-3 / (1 + g.norm())
        pos = (pos - step_size * g).detach().requires_grad_()
    history.append(e.item())

x = torch.linspace(-2, 2, 7, requires_grad=True)
y = torch.tanh(x) * torch.sigmoid(x) + torch.nn.functional.softplus(x).log_softmax(0)
(gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
(hx,) = torch.autograd.grad(gx.sum(), x)
w = torch.ones(3, 1, requires_grad=True)
jac = torch.autograd.grad(torch.stack([(w * k).sum() for k in range(3)]), w,
                          torch.eye(3), is_grads_batched=True)[0]
result = [history, pos.detach().numpy(), gx.detach().numpy(), hx.numpy(), jac.numpy()]
torch.set_default_dtype(torch.float32)
"""


def run(module):
    env = {"torch": module, "np": np}
    exec(SCRIPT, env)
    return env["result"]


def test_script_runs_on_ngrad():
    history, pos, gx, hx, jac = run(ngrad)
    assert history[-1] < history[0] and np.all(np.isfinite(pos))
    assert jac.shape == (3, 3, 1)


def test_script_matches_pytorch():
    torch = pytest.importorskip("torch")
    ours, theirs = run(ngrad), run(torch)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-12)
