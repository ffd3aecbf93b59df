"""Train a small tanh MLP on a synthetic regression task with Adam; the whole training step
(forward, backward, optimizer update) is one ``ngrad.compile``d program.

Run: python examples/mlp_adam.py
"""

import numpy as np

import ngrad


def make_data(n=512, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, (n, 2))
    y = np.sin(x[:, :1] * 1.5) * np.cos(x[:, 1:]) + 0.1 * x[:, :1]
    return ngrad.tensor(x, dtype=ngrad.float32), ngrad.tensor(y, dtype=ngrad.float32)


def train(steps=400, hidden=32, lr=1e-2, seed=0):
    ngrad.manual_seed(seed)
    x, y = make_data(seed=seed)
    w1 = (ngrad.randn(2, hidden) * 0.7).requires_grad_()
    b1 = ngrad.zeros(hidden, requires_grad=True)
    w2 = (ngrad.randn(hidden, 1) * (1 / hidden**0.5)).requires_grad_()
    b2 = ngrad.zeros(1, requires_grad=True)
    opt = ngrad.optim.Adam([w1, b1, w2, b2], lr=lr)

    @ngrad.compile
    def step(x, y):
        opt.zero_grad()
        pred = (x @ w1 + b1).tanh() @ w2 + b2
        loss = ((pred - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    first = step(x, y).item()
    for _ in range(steps - 1):
        loss = step(x, y)
    return first, loss.item()


if __name__ == "__main__":
    first, last = train()
    print(f"mse {first:.4f} -> {last:.4f}")
