"""The benchmark problems: each written once with ngrad's public API the way a user would,
plus a hand-written NumPy value-and-gradient, and PyTorch / JAX versions where installed.

Every problem maps an input dict of float64 arrays to (value, gradient of the first input).
"""
import numpy as np

import ngrad

__all__ = ["PROBLEMS", "Problem"]


class Problem:
    """A benchmark problem: ``inputs(size, rng)`` builds the data; ``systems`` maps a system name
    to a factory returning a callable ``f(inputs) -> (value, grad)`` (or None if unavailable)."""

    def __init__(self, name, doc, sizes, quick_sizes, inputs, systems):
        self.name, self.doc, self.sizes, self.quick_sizes = name, doc, sizes, quick_sizes
        self.inputs, self.systems = inputs, systems


def _ngrad(fn):
    def make():
        def run(inp):
            x = ngrad.from_numpy(inp["x"]).requires_grad_()
            rest = {k: ngrad.from_numpy(v) for k, v in inp.items() if k != "x"}
            value = fn(ngrad, x, **rest)
            value.backward()
            return value.item(), x.grad.numpy()
        return run
    return make


def _torch(fn):
    def make():
        try:
            import torch
        except ImportError:
            return None

        def run(inp):
            x = torch.from_numpy(inp["x"]).requires_grad_()
            rest = {k: torch.from_numpy(v) for k, v in inp.items() if k != "x"}
            value = fn(torch, x, **rest)
            value.backward()
            return value.item(), x.grad.numpy()
        return run
    return make


def _jax(jfn):
    def make():
        try:
            import jax
            jax.config.update("jax_enable_x64", True)
            import jax.numpy as jnp
        except ImportError:
            return None
        step = jax.jit(jax.value_and_grad(lambda x, rest: jfn(jnp, x, **rest)))

        def run(inp):
            rest = {k: v for k, v in inp.items() if k != "x"}
            value, grad = step(inp["x"], rest)
            grad.block_until_ready()
            return float(value), np.asarray(grad)
        return run
    return make


# --- element-wise chain -------------------------------------------------------------------------------

def chain(L, x):
    return ((x.sin() * (-(x * x) / 2).exp()) + x.tanh() * x).sum()


def chain_jax(jnp, x):
    return jnp.sum(jnp.sin(x) * jnp.exp(-x * x / 2) + jnp.tanh(x) * x)


def chain_numpy(inp):
    x = inp["x"]
    s, e, t = np.sin(x), np.exp(-x * x / 2), np.tanh(x)
    return float(np.sum(s * e + t * x)), np.cos(x) * e - s * e * x + (1 - t * t) * x + t


# --- Rosenbrock ------------------------------------------------------------------------------------------

def rosenbrock(L, x):
    a, b = x[:-1], x[1:]
    return (100 * (b - a * a) ** 2 + (1 - a) ** 2).sum()


def rosenbrock_jax(jnp, x):
    a, b = x[:-1], x[1:]
    return jnp.sum(100 * (b - a * a) ** 2 + (1 - a) ** 2)


def rosenbrock_numpy(inp):
    x = inp["x"]
    a, b = x[:-1], x[1:]
    d = b - a * a
    g = np.zeros_like(x)
    g[:-1] = -400 * d * a - 2 * (1 - a)
    g[1:] += 200 * d
    return float(np.sum(100 * d * d + (1 - a) ** 2)), g


# --- logsumexp ---------------------------------------------------------------------------------------------

def lse(L, x):
    return x.logsumexp(0)


def lse_jax(jnp, x):
    import jax
    return jax.nn.logsumexp(x)


def lse_numpy(inp):
    x = inp["x"]
    m = x.max()
    e = np.exp(x - m)
    s = e.sum()
    return float(m + np.log(s)), e / s


# --- Lennard-Jones energy by broadcasting ------------------------------------------------------------------

def lennard_jones(L, x, eye):
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1) + eye
    inv6 = (1 / r2) ** 3
    return (4 * (inv6 * inv6 - inv6) * (1 - eye)).sum() / 2


def lennard_jones_jax(jnp, x, eye):
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1) + eye
    inv6 = (1 / r2) ** 3
    return jnp.sum(4 * (inv6 * inv6 - inv6) * (1 - eye)) / 2


def lennard_jones_numpy(inp):
    x, eye = inp["x"], inp["eye"]
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1) + eye
    inv6 = (1 / r2) ** 3
    off = 1 - eye
    energy = float(np.sum(4 * (inv6 * inv6 - inv6) * off) / 2)
    # dE/dr2 for each pair, then dr2/dx_i = 2 d_ij (each pair counted from both ends)
    de = 4 * (-6 * inv6 * inv6 + 3 * inv6) / r2 * off
    return energy, 2 * np.einsum("ij,ijk->ik", de, d)


def _lj_inputs(n, rng):
    side = int(np.ceil(n ** (1 / 3)))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n] * 1.2
    return {"x": grid + rng.uniform(-0.1, 0.1, (n, 3)), "eye": np.eye(n)}


PROBLEMS = {
    "chain": Problem("chain", "sum(sin(x)*exp(-x**2/2) + tanh(x)*x): a chain of element-wise ops",
                     [10 ** 5, 10 ** 6, 10 ** 7], [10 ** 5, 10 ** 6],
                     lambda n, rng: {"x": rng.uniform(-3, 3, n)},
                     {"ngrad": _ngrad(chain), "numpy": lambda: chain_numpy, "torch": _torch(chain),
                      "jax": _jax(chain_jax)}),
    "rosenbrock": Problem("rosenbrock", "the extended Rosenbrock function",
                          [100, 10 ** 4, 10 ** 6], [100, 10 ** 5],
                          lambda n, rng: {"x": rng.uniform(-2, 2, n)},
                          {"ngrad": _ngrad(rosenbrock), "numpy": lambda: rosenbrock_numpy, "torch": _torch(rosenbrock),
                           "jax": _jax(rosenbrock_jax)}),
    "lse": Problem("lse", "logsumexp of a vector", [10 ** 4, 10 ** 6], [10 ** 5],
                   lambda n, rng: {"x": rng.standard_normal(n)},
                   {"ngrad": _ngrad(lse), "numpy": lambda: lse_numpy, "torch": _torch(lse), "jax": _jax(lse_jax)}),
    "lj": Problem("lj", "Lennard-Jones energy and forces of N atoms by broadcasting (N x N x 3)",
                  [100, 1000], [100, 300], _lj_inputs,
                  {"ngrad": _ngrad(lennard_jones), "numpy": lambda: lennard_jones_numpy,
                   "torch": _torch(lennard_jones), "jax": _jax(lennard_jones_jax)}),
}
