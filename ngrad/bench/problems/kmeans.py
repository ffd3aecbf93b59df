"""GradBench's ``kmeans``: the k-means cost and its Newton direction.

``cost`` is sum_i min_j |p_i - c_j|^2 over points p (n, d) and centroids c (k, d). ``dir`` is
the Newton step J / H with J the gradient of the cost with respect to the centroids and H the
diagonal of its Hessian, computed as the Hessian-vector product with a vector of ones (the
Hessian is diagonal, so the product is its diagonal): a second-order program, reverse over
reverse. The size is n, with k = 32 centroids in d = 8 dimensions; points are standard normal
and the centroids are k distinct points of the data (so every centroid owns a point).
"""

import numpy as np

from . import Problem, scan

K, D = 32, 8


# points per block of ``nearest``: a block's (rows, k) products, 4 MB, are still in the cache when
# its argmax reads them (one (n, k) product at n = 10,000, k = 1,000 wrote and read 80 MB: 22 ms
# against 6.6 in blocks of 1,000 rows, NumPy, d = 8)
BLOCK_ELEMENTS = 1 << 19


def nearest(T, points, centroids):
    """The index of each point's nearest centroid (the first of equals, as GradBench's reference):
    the j maximising p . c_j - |c_j|^2 / 2, read off matrix products of [p, -1/2] (n, d + 1) and
    [c, |c|^2] (k, d + 1), a scan over blocks of rows, so that no (n, k) array is written (the
    broadcast difference (n, k, d) took 70-100 ms at n = 10,000, k = 1,000, d = 16)."""
    n, k = points.shape[0], centroids.shape[0]
    lifted = T.cat([points, T.full((n, 1), -0.5, dtype=points.dtype)], 1)
    keys = T.cat([centroids, T.sum(centroids**2, 1)[:, None]], 1).T
    blocks = n * k // BLOCK_ELEMENTS
    if blocks < 2:
        return T.argmax(lifted @ keys, 1)
    # blocks of equal rows where a count a little larger divides n, else a last smaller product
    blocks = next((b for b in range(blocks, 2 * blocks) if n % b == 0), blocks)
    rows = n // blocks
    whole = rows * blocks

    def block(_, part):
        return (), T.argmax(part @ keys, 1)

    _, near = scan(T, block, (), lifted[:whole].reshape(blocks, rows, lifted.shape[1]))
    near = near.reshape(whole)
    return near if whole == n else T.cat([near, T.argmax(lifted[whole:] @ keys, 1)])


def cost(T, points, centroids):
    """sum_i min_j |p_i - c_j|^2, as the distance to each point's nearest centroid: the index is
    piecewise constant in c, so the derivatives are the cost's wherever it has them."""
    return T.sum((points - centroids[nearest(T, points, centroids)]) ** 2)


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
