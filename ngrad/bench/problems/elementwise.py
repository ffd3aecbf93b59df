"""Problems over one vector (or one point cloud): the element-wise chain, Rosenbrock, logsumexp
(GradBench ``lse``), linear least squares (GradBench ``llsq``) and a Lennard-Jones energy.

Inputs are float64; the size is the length of ``x`` (for ``lj``: the number of atoms).
"""

import numpy as np

from . import Problem

# --- element-wise chain -------------------------------------------------------------------------------


def chain(T, x):
    return T.sum(T.sin(x) * T.exp(-(x * x) / 2) + T.tanh(x) * x)


def chain_numpy(inp):
    x = inp["x"]
    s, e, t = np.sin(x), np.exp(-x * x / 2), np.tanh(x)
    return float(np.sum(s * e + t * x)), {"x": np.cos(x) * e - s * e * x + (1 - t * t) * x + t}


# --- Rosenbrock ----------------------------------------------------------------------------------------


def rosenbrock(T, x):
    a, b = x[:-1], x[1:]
    return T.sum(100 * (b - a * a) ** 2 + (1 - a) ** 2)


def rosenbrock_numpy(inp):
    x = inp["x"]
    a, b = x[:-1], x[1:]
    d = b - a * a
    g = np.zeros_like(x)
    g[:-1] = -400 * d * a - 2 * (1 - a)
    g[1:] += 200 * d
    return float(np.sum(100 * d * d + (1 - a) ** 2)), {"x": g}


# --- logsumexp (GradBench lse) -------------------------------------------------------------------------------


def lse(T, x):
    return T.logsumexp(x, 0)


def lse_numpy(inp):
    x = inp["x"]
    m = x.max()
    e = np.exp(x - m)
    s = e.sum()
    return float(m + np.log(s)), {"x": e / s}


# --- linear least squares (GradBench llsq) --------------------------------------------------------------------


def llsq_points(n):
    """The sample points t_i = -1 + 2i/(n-1) of GradBench's llsq."""
    return np.linspace(-1.0, 1.0, n)


def llsq(T, x, n):
    """Half the squared error of the polynomial with coefficients ``x`` fitting sign(t) at ``n``
    points of [-1, 1]: 0.5 * sum_i (sign(t_i) - sum_j x_j t_i^j)^2."""
    t = T.linspace(-1.0, 1.0, n, dtype=T.float64)
    # t_i^j (j < m) as running products, as GradBench's reference multiplies: a power with a
    # float exponent costs about 9x as much (NumPy: 351 ms against 40 at n = 16,392, m = 128)
    ones = T.ones((n, 1), dtype=T.float64)
    powers = T.cumprod(T.cat([ones, t[:, None] * T.ones((1, x.shape[0] - 1), dtype=T.float64)], 1), 1)
    r = T.sign(t) - T.sum(powers * x, 1)
    return T.sum(r * r) / 2


def llsq_numpy(inp):
    x, t = inp["x"], llsq_points(inp["n"])
    V = t[:, None] ** np.arange(len(x))
    r = np.sign(t) - V @ x
    return float(r @ r / 2), {"x": -(V.T @ r)}


def _llsq_inputs(n, rng):
    return {"x": rng.standard_normal(32) / 32, "n": int(n)}


# --- Lennard-Jones energy by broadcasting -------------------------------------------------------------------


def lennard_jones(T, x, eye):
    d = x[:, None, :] - x[None, :, :]
    r2 = T.sum(d * d, -1) + eye
    inv6 = (1 / r2) ** 3
    return T.sum(4 * (inv6 * inv6 - inv6) * (1 - eye)) / 2


def lennard_jones_numpy(inp):
    x, eye = inp["x"], inp["eye"]
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1) + eye
    inv6 = (1 / r2) ** 3
    off = 1 - eye
    energy = float(np.sum(4 * (inv6 * inv6 - inv6) * off) / 2)
    # dE/dr2 for each pair, then dr2/dx_i = 2 d_ij (each pair counted from both ends)
    de = 4 * (-6 * inv6 * inv6 + 3 * inv6) / r2 * off
    return energy, {"x": 2 * np.einsum("ij,ijk->ik", de, d)}


def _lj_inputs(n, rng):
    """Atoms on a cubic grid of spacing 1.2, jittered by up to 0.1."""
    side = int(np.ceil(n ** (1 / 3)))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n] * 1.2
    return {"x": grid + rng.uniform(-0.1, 0.1, (n, 3)), "eye": np.eye(n)}


PROBLEMS = [
    Problem(
        "chain",
        "sum(sin(x)*exp(-x**2/2) + tanh(x)*x): a chain of element-wise ops",
        "length of x, uniform on [-3, 3]",
        [10**5, 10**6, 10**7],
        [10**6],
        lambda n, rng: {"x": rng.uniform(-3, 3, n)},
        chain_numpy,
        chain,
    ),
    Problem(
        "rosenbrock",
        "the extended Rosenbrock function",
        "length of x, uniform on [-2, 2]",
        [100, 10**4, 10**6],
        [100, 10**5],
        lambda n, rng: {"x": rng.uniform(-2, 2, n)},
        rosenbrock_numpy,
        rosenbrock,
    ),
    Problem(
        "lse",
        "logsumexp of a vector (GradBench lse)",
        "length of x, standard normal",
        [10**4, 10**6],
        [10**5],
        lambda n, rng: {"x": rng.standard_normal(n)},
        lse_numpy,
        lse,
    ),
    Problem(
        "llsq",
        "least-squares fit of a degree-31 polynomial to sign(t) (GradBench llsq)",
        "number of sample points n (32 coefficients x, standard normal / 32)",
        [1024, 2**14, 2**18],
        [2**14],
        _llsq_inputs,
        llsq_numpy,
        llsq,
    ),
    Problem(
        "lj",
        "Lennard-Jones energy and forces of N atoms by broadcasting (N x N x 3)",
        "number of atoms",
        [100, 1000],
        [300],
        _lj_inputs,
        lennard_jones_numpy,
        lennard_jones,
    ),
]
