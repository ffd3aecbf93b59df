"""The autograd.functional benchmarks (issue: "the rest of the autograd surface"), float64:

- the Jacobian of a function from R^n to R^n, n=200: ``vectorize=True`` (one batched reverse
  program) against the loop of one backward call per row, and against PyTorch's two modes;
- a Hessian-vector product of a 1e5-dimensional function (``hvp`` and ``vhp``: reverse over
  reverse) against one gradient evaluation of the same function.

Run: python benchmarks/functional.py
"""

import time

import numpy as np

import ngrad
from ngrad.autograd import functional as F


def _time(f, repeat=21):
    f()
    f()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _jac_fn(lib):
    def f(x):
        return (x.sin() * x.cumsum(0)).tanh() + x**2

    return f


def _energy(lib):
    def f(x):
        d = x[1:] - x[:-1]
        return ((d * d - 1) ** 2).sum() + (x.cos() * x).sum()

    return f


def main():
    rng = np.random.default_rng(0)
    try:
        import torch
        import torch.autograd.functional as TF

        torch.set_num_threads(ngrad.get_num_threads())
    except ImportError:
        torch = None
    x = ngrad.tensor(rng.standard_normal(200))
    rows = []
    loop = _time(lambda: F.jacobian(_jac_fn(ngrad), x).numpy(), repeat=3)
    vec = _time(lambda: F.jacobian(_jac_fn(ngrad), x, vectorize=True).numpy())
    fwd = _time(lambda: F.jacobian(_jac_fn(ngrad), x, vectorize=True, strategy="forward-mode").numpy())
    rows.append(("jacobian n=200, loop of backward calls", loop, None))
    rows.append(("jacobian n=200, vectorize=True", vec, f"{loop / vec:.0f}x faster than the loop"))
    rows.append(("jacobian n=200, vectorize=True, forward-mode", fwd, f"{loop / fwd:.0f}x faster than the loop"))
    if torch is not None:
        xt = torch.tensor(x.numpy())
        rows.append(("  PyTorch jacobian, loop", _time(lambda: TF.jacobian(_jac_fn(torch), xt), repeat=3), None))
        rows.append(
            ("  PyTorch jacobian, vectorize=True", _time(lambda: TF.jacobian(_jac_fn(torch), xt, vectorize=True)), None)
        )
    n = 100_000
    x = ngrad.tensor(rng.standard_normal(n))
    v = ngrad.tensor(rng.standard_normal(n))

    def gradient():
        xr = x.detach().requires_grad_()
        return ngrad.autograd.grad(_energy(ngrad)(xr), xr)[0].numpy()

    g = _time(gradient)
    h = _time(lambda: F.hvp(_energy(ngrad), x, v)[1].numpy())
    vh = _time(lambda: F.vhp(_energy(ngrad), x, v)[1].numpy())
    rows.append(("gradient n=1e5", g, None))
    rows.append(("hvp n=1e5", h, f"{h / g:.2f}x the gradient"))
    rows.append(("vhp n=1e5", vh, f"{vh / g:.2f}x the gradient"))
    if torch is not None:
        xt, vt = torch.tensor(x.numpy()), torch.tensor(v.numpy())

        def tgrad():
            xr = xt.detach().requires_grad_()
            return torch.autograd.grad(_energy(torch)(xr), xr)[0]

        rows.append(("  PyTorch gradient n=1e5", _time(tgrad), None))
        rows.append(("  PyTorch hvp n=1e5", _time(lambda: TF.hvp(_energy(torch), xt, vt)), None))
        rows.append(("  PyTorch vhp n=1e5", _time(lambda: TF.vhp(_energy(torch), xt, vt)), None))
    for name, t, note in rows:
        print(f"{name:48s} {t * 1e3:10.3f} ms  {note or ''}")


if __name__ == "__main__":
    main()
