"""Fit a damped oscillation to noisy data with gradient descent on the mean squared error.

Run: python examples/curve_fit.py
"""

import numpy as np

import ngrad as torch


def model(t, params):
    amplitude, decay, omega = params[0], params[1], params[2]
    return amplitude * torch.exp(-decay * t) * torch.cos(omega * t)


def fit(steps=2000, lr=0.05, seed=0):
    rng = np.random.default_rng(seed)
    t = torch.linspace(0, 6, 200, dtype=torch.float64)
    true = torch.tensor([2.0, 0.4, 3.0], dtype=torch.float64)
    y = model(t, true) + torch.tensor(0.05 * rng.standard_normal(200))
    params = torch.tensor([1.0, 0.1, 2.8], dtype=torch.float64, requires_grad=True)
    for _ in range(steps):
        loss = ((model(t, params) - y) ** 2).mean()
        (g,) = torch.autograd.grad(loss, params)
        with torch.no_grad():
            params = (params - lr * g).requires_grad_()
    return params.detach().numpy(), loss.item()


if __name__ == "__main__":
    p, loss = fit()
    print(f"amplitude {p[0]:.3f}, decay {p[1]:.3f}, omega {p[2]:.3f}, final loss {loss:.5f}")
