"""Logistic regression on synthetic data, fitted with L-BFGS: the negative log-likelihood with
a small L2 penalty, written with `binary_cross_entropy_with_logits`-style arithmetic.

Run: python examples/logistic_regression.py
"""

import numpy as np

import ngrad as torch


def data(n=2000, d=5, seed=0):
    rng = np.random.default_rng(seed)
    w_true = rng.standard_normal(d)
    X = rng.standard_normal((n, d))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ w_true + 0.5)))).astype(np.float64)
    return torch.tensor(X), torch.tensor(y), w_true


def fit(seed=0):
    X, y, w_true = data(seed=seed)
    w = torch.zeros(X.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1, max_iter=100, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        z = X @ w + b
        # log(1 + exp(z)) - y z, stable for large |z|
        loss = (torch.nn.functional.softplus(z) - y * z).mean() + 1e-4 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    accuracy = (((X @ w + b) > 0).double() == y).double().mean().item()
    return w.detach().numpy(), b.item(), w_true, accuracy


if __name__ == "__main__":
    w, b, w_true, accuracy = fit()
    print(f"w = {np.round(w, 2)} (true {np.round(w_true, 2)}), b = {b:.2f} (true 0.5), accuracy {accuracy:.3f}")
