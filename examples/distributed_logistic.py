"""Logistic regression over a dask array larger than any of its chunks, fitted with L-BFGS on a
Dask cluster: each worker computes the log-likelihood and its gradient on the row blocks it
holds, and ngrad sums them. The data is drawn on the workers and never passes through this
process; only the parameters and the gradients do.

Run: python examples/distributed_logistic.py   (starts two worker processes on this machine)
"""

import numpy as np

import ngrad
import ngrad.distributed


def data(n, chunk, d=5, seed=0):
    """``X`` (n x d) and labels ``y`` drawn on the cluster, in row blocks of ``chunk``."""
    import dask.array as da

    rng = np.random.default_rng(seed)
    truth = np.append(rng.standard_normal(d), 0.5)  # weights, then the intercept
    draw = da.random.default_rng(seed)
    X = draw.standard_normal((n, d), chunks=(chunk, d))
    p = 1 / (1 + np.exp(-(X @ truth[:-1] + truth[-1])))
    y = (draw.uniform(size=n, chunks=chunk) < p).astype(np.float64)
    return X.persist(), y.persist(), truth


def nll(theta, X, y):
    """The negative log-likelihood of one row block: sum of log(1 + exp(z)) - y z."""
    z = X @ theta[:-1] + theta[-1]
    return (ngrad.nn.functional.softplus(z) - y * z).sum()


def fit(client=None, n=400_000, chunk=50_000):
    """Fit by L-BFGS; return (weights and intercept, the truth, accuracy, number of chunks)."""
    X, y, truth = data(n, chunk)
    objective = ngrad.distributed.Objective(nll, (X, y), client=client)

    def loss(theta):  # the mean, plus a penalty added once (not once per chunk)
        return objective(theta) / objective.rows + 1e-4 * (theta[:-1] ** 2).sum()

    res = ngrad.scipy.minimize(loss, ngrad.zeros(len(truth), dtype=ngrad.float64), method="L-BFGS-B")
    theta = res.x.numpy()
    accuracy = float((((X @ theta[:-1] + theta[-1]) > 0) == y).mean().compute())
    chunks = len(objective.parts)
    objective.close()
    return theta, truth, accuracy, chunks


if __name__ == "__main__":
    client = ngrad.distributed.local_cluster(2)
    try:
        theta, truth, accuracy, chunks = fit(client)
    finally:
        client.close()
        client.cluster.close()
    print(f"{chunks} chunks; theta = {np.round(theta, 3)} (true {np.round(truth, 3)}), accuracy {accuracy:.3f}")
