"""Relax a small Lennard-Jones cluster by gradient descent: energy by broadcasting, forces by autograd.

Run: python examples/lennard_jones.py
"""

import numpy as np

import ngrad as torch


def energy(pos):
    n = pos.shape[0]
    d = pos[:, None, :] - pos[None, :, :]
    r2 = (d**2).sum(-1) + torch.eye(n, dtype=pos.dtype)
    inv6 = (1.0 / r2) ** 3
    pair = 4 * (inv6**2 - inv6) * (1 - torch.eye(n, dtype=pos.dtype))
    return pair.sum() / 2


def relax(n_atoms=13, steps=300, lr=2e-3, seed=0):
    rng = np.random.default_rng(seed)
    pos = torch.tensor(rng.uniform(0, 2.2, (n_atoms, 3)), requires_grad=True)
    first = None
    for _ in range(steps):
        e = energy(pos)
        e.backward()
        with torch.no_grad():
            g = pos.grad
            step = lr / max(1.0, g.abs().max().item())  # cap the largest move
            pos = (pos - step * g).detach().requires_grad_()
        first = e.item() if first is None else first
    return first, energy(pos).item()


if __name__ == "__main__":
    start, end = relax()
    print(f"Lennard-Jones energy: {start:.3f} -> {end:.3f}")
