"""ADBench's and GradBench's ``gmm``: the log-likelihood of a Gaussian mixture with a Wishart
prior on its precisions.

Inputs: ``alpha`` (k) log-weights, ``mu`` (k, d) means, ``q`` (k, d) log-diagonals and ``l``
(k, d(d-1)/2) strictly-lower entries of the precision factors Q_k = diag(exp(q_k)) + L_k (``l``
fills L_k column by column), points ``x`` (n, d), and the prior's ``gamma`` and ``m``. The value
is

    -n d/2 log(2 pi) + sum_i logsumexp_k(alpha_k + sum(q_k) - |Q_k (x_i - mu_k)|^2 / 2)
    - n logsumexp(alpha) - sum_k (gamma^2/2 (|exp(q_k)|^2 + |l_k|^2) - m sum(q_k)) + k C(d, gamma, m)

with C the Wishart log-normaliser: the last two terms are the log-density of a Wishart prior on
each precision Q_k^T Q_k, as GradBench's C++ reference (``cpp/gradbench/evals/gmm.hpp``) and its
naive validator (``log_posterior``) compute it. The gradient is with respect to alpha, mu, q and l. The
size is n, with d = 10 and k = 25 as in ADBench's standard files; alpha and x are standard
normal, mu uniform on [0, 1], q and l normal with deviation 0.1, gamma = 1, m = 0.
"""

import math

import numpy as np

from . import Problem

D, K = 10, 25


def ltri_index(d):
    """(d, d) indices into [0, l...]: 1 + the position of L[j, i] in l below the diagonal, else 0."""
    index, pos = np.zeros((d, d), dtype=np.int64), 1
    for i in range(d):
        for j in range(i + 1, d):
            index[j, i], pos = pos, pos + 1
    return index


def constant(n, d, k, gamma, m):
    """The parts of the value that depend on no parameter: the Gaussians' and the k Wishart
    normalisers."""
    nw = d + m + 1
    log_gamma_d = 0.25 * d * (d - 1) * math.log(math.pi) + sum(
        math.lgamma(0.5 * nw + 0.5 * (1 - j)) for j in range(1, d + 1)
    )
    wishart = nw * d * (math.log(gamma) - 0.5 * math.log(2)) - log_gamma_d
    return -n * d * 0.5 * math.log(2 * math.pi) + k * wishart


def objective(T, alpha, mu, q, l, x, gamma, m):
    (n, d), k = x.shape, alpha.shape[0]
    diag = T.exp(q)
    # QT[k, i, j] = Q_k[j, i]: L_k transposed (gathered so), plus the diagonal
    QT = T.cat([T.zeros((k, 1), dtype=T.float64), l], 1)[:, ltri_index(d).T] + diag[:, None, :] * T.eye(
        d, dtype=T.float64
    )
    # Q_k (x_i - mu_k) = Q_k x_i - Q_k mu_k, every component at once: one (n, d) x (d, k d) matrix
    # product, which BLAS runs at full speed, where k batched (n, d) x (d, d) products do not
    # (NumPy's batched matmul of GradBench's d = 32, k = 100 took 2.5 s on its first, interpreted call)
    xq = T.matmul(x, T.swapaxes(QT, 0, 1).reshape(d, k * d)).reshape(n, k, d)
    z = xq - T.sum(QT * mu[:, :, None], 1)[None, :, :]
    main = alpha[None, :] + T.sum(q, 1)[None, :] - 0.5 * T.sum(z * z, 2)  # (n, k)
    prior = T.sum(0.5 * gamma**2 * (T.sum(diag * diag, 1) + T.sum(l * l, 1)) - m * T.sum(q, 1))
    return constant(n, d, k, gamma, m) + T.sum(T.logsumexp(main, 1)) - n * T.logsumexp(alpha, 0) - prior


def _softmax(a, axis):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def numpy(inp):
    alpha, mu, q, l, x, gamma, m = (inp[k] for k in ("alpha", "mu", "q", "l", "x", "gamma", "m"))
    (n, d), k = x.shape, len(alpha)
    index = ltri_index(d)
    L = np.concatenate([np.zeros((k, 1)), l], 1)[:, index]
    e = np.exp(q)
    xc = x[:, None, :] - mu[None]
    z = e * xc + np.einsum("kji,nki->nkj", L, xc)
    main = alpha + q.sum(1) - 0.5 * (z * z).sum(2)
    mx = main.max(1, keepdims=True)
    slse = np.sum(mx[:, 0] + np.log(np.exp(main - mx).sum(1)))
    am = alpha.max()
    lse_alpha = am + np.log(np.exp(alpha - am).sum())
    prior = np.sum(0.5 * gamma**2 * ((e * e).sum(1) + (l * l).sum(1)) - m * q.sum(1))
    value = constant(n, d, k, gamma, m) + slse - n * lse_alpha - prior
    W = _softmax(main, 1)
    d_alpha = W.sum(0) - n * _softmax(alpha, 0)
    d_q = np.einsum("nk,nkd->kd", W, 1 - z * e * xc) - gamma**2 * e * e + m
    d_mu = np.einsum("nk,nkd->kd", W, e * z + np.einsum("kji,nkj->nki", L, z))
    G = -np.einsum("nk,nkj,nki->kji", W, z, xc)
    rows, cols = np.nonzero(index)
    order = np.argsort(index[rows, cols])
    d_l = G[:, rows[order], cols[order]] - gamma**2 * l
    return float(value), {"alpha": d_alpha, "mu": d_mu, "q": d_q, "l": d_l}


def inputs(n, rng, d=D, k=K):
    return {
        "alpha": rng.standard_normal(k),
        "mu": rng.uniform(0, 1, (k, d)),
        "q": 0.1 * rng.standard_normal((k, d)),
        "l": 0.1 * rng.standard_normal((k, d * (d - 1) // 2)),
        "x": rng.standard_normal((n, d)),
        "gamma": 1.0,
        "m": 0,
    }


PROBLEMS = [
    Problem(
        "gmm",
        f"Gaussian mixture log-likelihood with a Wishart prior, d={D}, k={K} (GradBench gmm)",
        "n, the number of points",
        [1000, 10000],
        [1000],
        inputs,
        numpy,
        objective,
        wrt=("alpha", "mu", "q", "l"),
    ),
]
