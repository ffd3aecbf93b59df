"""GradBench's ``kmeans``: the k-means cost and its Newton direction.

``cost`` is sum_i min_j |p_i - c_j|^2 over points p (n, d) and centroids c (k, d). ``dir`` is
the Newton step J / H with J the gradient of the cost with respect to the centroids and H the
diagonal of its Hessian, computed as the Hessian-vector product with a vector of ones (the
Hessian is diagonal, so the product is its diagonal): a second-order program, reverse over
reverse. The size is n, with k = 32 centroids in d = 8 dimensions; points are standard normal
and the centroids are k distinct points of the data (so every centroid owns a point).
"""

import numpy as np

from . import Problem

K, D = 32, 8


def cost(T, points, centroids):
    return T.sum(T.amin(T.sum((points[:, None, :] - centroids[None, :, :]) ** 2, 2), 1))


def compute(T, t):
    c = t["centroids"]
    value = cost(T, t["points"], c)
    (g,) = T.autograd.grad(value, c, create_graph=True)
    (h,) = T.autograd.grad(T.sum(g), c)
    # the results are reported, not differentiated: with their graphs (kept alive by create_graph)
    # ngrad.compile would also compute and keep what a backward through them reads
    return value.detach(), {"dir": (g / h).detach()}


def jax_system(jax, J):
    f = lambda c, p: cost(J, p, c)  # noqa: E731

    @jax.jit
    def step(points, centroids):
        value, g = jax.value_and_grad(f)(centroids, points)
        h = jax.grad(lambda c: J.sum(jax.grad(f)(c, points)))(centroids)
        return value, g / h

    def run(inp):
        value, d = step(inp["points"], inp["centroids"])
        return float(value), {"dir": np.asarray(d)}

    return run


def numpy(inp):
    p, c = inp["points"], inp["centroids"]
    d2 = ((p[:, None, :] - c[None, :, :]) ** 2).sum(2)
    owner = d2.argmin(1)
    count = np.bincount(owner, minlength=len(c)).astype(np.float64)
    sums = np.zeros_like(c)
    np.add.at(sums, owner, p)
    grad = 2 * (count[:, None] * c - sums)
    return float(d2.min(1).sum()), {"dir": grad / (2 * count[:, None])}


def inputs(n, rng, k=K, d=D):
    points = rng.standard_normal((n, d))
    return {"points": points, "centroids": points[rng.choice(n, k, replace=False)].copy()}


PROBLEMS = [
    Problem(
        "kmeans",
        f"k-means cost and Newton direction (Hessian diagonal), k={K}, d={D} (GradBench kmeans)",
        "n, the number of points",
        [1000, 10000],
        [1000],
        inputs,
        numpy,
        cost,
        wrt=("centroids",),
        compute=compute,
        jax=jax_system,
    ),
]
