"""Estimate the parameters of an ODE from noisy observations: the Lotka-Volterra predator-prey
model, integrated with RK4 in ngrad and differentiated through every step, fitted with L-BFGS.

Run: python examples/ode_fit.py
"""

import numpy as np

import ngrad as torch


def simulate(theta, y0, steps, h):
    """RK4 trajectory (steps + 1, 2) of prey u and predators v: u' = a u - b u v, v' = d u v - c v."""
    a, b, c, d = theta[0], theta[1], theta[2], theta[3]

    def f(u, v):
        return a * u - b * u * v, d * u * v - c * v

    u, v = y0
    path = [(u, v)]
    for _ in range(steps):
        k1 = f(u, v)
        k2 = f(u + h / 2 * k1[0], v + h / 2 * k1[1])
        k3 = f(u + h / 2 * k2[0], v + h / 2 * k2[1])
        k4 = f(u + h * k3[0], v + h * k3[1])
        u = u + h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        v = v + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        path.append((u, v))
    return torch.stack([torch.stack(p) for p in path])


def fit(iterations=30, seed=0):
    rng = np.random.default_rng(seed)
    y0 = (torch.tensor(1.0, dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64))
    true = torch.tensor([1.1, 0.4, 0.4, 0.1], dtype=torch.float64)
    steps, h = 30, 0.2
    observed = simulate(true, y0, steps, h) * torch.tensor(1 + 0.01 * rng.standard_normal((steps + 1, 2)))
    # log-parameters stay positive; L-BFGS needs few evaluations of the unrolled solver
    log_theta = torch.tensor(np.log([0.9, 0.3, 0.5, 0.15]), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([log_theta], max_iter=iterations, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = ((simulate(log_theta.exp(), y0, steps, h) - observed) ** 2).mean()
        loss.backward()
        return loss

    opt.step(closure)
    return log_theta.detach().exp().numpy(), closure().item(), opt.state[log_theta]["func_evals"]


if __name__ == "__main__":
    theta, loss, evals = fit()
    print(f"a, b, c, d = {np.round(theta, 3)} (true 1.1, 0.4, 0.4, 0.1), loss {loss:.2e}, {evals} evaluations")
