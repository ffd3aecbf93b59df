"""Fit a damped oscillation with SciPy's L-BFGS-B on ngrad gradients.

``ngrad.scipy.minimize`` hands SciPy a compiled value-and-gradient function, so each of SciPy's
evaluations replays one fused program instead of re-recording the model.

Run: python examples/curve_fit_scipy.py
"""

import numpy as np

import ngrad


def model(t, p):
    return p[0] * ngrad.exp(-p[1] * t) * ngrad.cos(p[2] * t + p[3])


def fit(seed=0):
    rng = np.random.default_rng(seed)
    t = ngrad.linspace(0, 8, 400, dtype=ngrad.float64)
    truth = ngrad.tensor([1.5, 0.3, 2.2, 0.4], dtype=ngrad.float64)
    y = model(t, truth) + ngrad.tensor(0.02 * rng.standard_normal(400))
    res = ngrad.scipy.minimize(
        lambda p: ((model(t, p) - y) ** 2).mean(), ngrad.tensor([1.0, 0.1, 2.0, 0.0]), method="L-BFGS-B"
    )
    return res.x.numpy(), res.fun, res.nfev


if __name__ == "__main__":
    p, loss, nfev = fit()
    print(
        f"amplitude {p[0]:.3f}  decay {p[1]:.3f}  omega {p[2]:.3f}  phase {p[3]:.3f}  "
        f"(mse {loss:.2e}, {nfev} evaluations)"
    )
