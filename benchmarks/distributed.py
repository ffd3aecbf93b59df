"""ngrad.distributed on a LocalCluster: when does distributing a gradient pay?

Three measurements, each a median of repeated ``Objective.value_and_grad`` steps once every
worker has compiled its kernels (``ngrad.synchronize_compiles``), on worker processes with one
thread each:

* ``throughput``: logistic-regression value and gradient over n rows x 16 float64 features in
  8 row blocks, for 1 and 2 worker processes, against one process running the same compiled
  program over the whole array (``ngrad.compile(ngrad.func.value_and_grad(f))``).
* ``overhead``: the same step over tiny chunks (16 rows each), 1 to 64 of them: what the
  scheduler costs per step and per chunk when there is no compute to hide it.
* ``gradient size``: a step whose parameters (and so every chunk's gradient) hold p float64
  numbers, over 8 tiny chunks: the cost of moving and summing gradients through Dask.

docs/distributed.md turns these into the estimate of where communication dominates.

Run: python benchmarks/distributed.py [--quick]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

# This script's folder is first on sys.path and this file is named like Dask's package:
# look past it, so that `import distributed` finds Dask's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import ngrad  # noqa: E402
import ngrad.distributed as nd  # noqa: E402

WARM = 3  # calls before timing, once compiled


def logistic(w, X, y):
    z = X @ w
    return (ngrad.nn.functional.softplus(z) - y * z).sum()


def linear(w, X):
    """A chunk's loss whose gradient has len(w) numbers and costs almost nothing."""
    return (X.sum() * w).sum()


class Timing(float):
    """A median step time (seconds) that also carries the best one: on a machine shared with
    other work the best is the step least disturbed by it."""

    def __new__(cls, median, best):
        t = super().__new__(cls, median)
        t.best = best
        return t

    def __str__(self):
        return f"{self * 1e3:8.2f} ms/step (best {self.best * 1e3:7.2f})"


def _steady(objective, params):
    """Warm up: trace, compile on every worker (kernels compile in the background under
    NGRAD_JIT=auto: wait for them), chunks where the scheduler settles them."""
    for _ in range(2):
        objective.value_and_grad(params)
    objective.client.run(ngrad.synchronize_compiles)
    for _ in range(WARM):
        objective.value_and_grad(params)


def _median_step(objective, params, repeat):
    _steady(objective, params)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        objective.value_and_grad(params)
        times.append(time.perf_counter() - t)
    return Timing(statistics.median(times), min(times))


def _data(n, d, chunks, seed=0):
    import dask.array as da

    rng = da.random.default_rng(seed)
    rows = max(1, n // chunks)
    X = rng.standard_normal((n, d), chunks=(rows, d))
    y = (rng.uniform(size=n, chunks=rows) < 0.5).astype(np.float64)
    return X.persist(), y.persist()


def throughput(client, sizes, repeat, d=16):
    out = []
    for n in sizes:
        X, y = _data(n, d, 8)
        objective = nd.Objective(logistic, (X, y), client=client)
        w = ngrad.full((d,), 0.01, dtype=ngrad.float64)
        t = _median_step(objective, w, repeat)
        objective.close()
        out.append((n, t))
    return out


def one_process(sizes, repeat, d=16):
    out = []
    vg = ngrad.compile(ngrad.func.value_and_grad(logistic))
    rng = np.random.default_rng(0)
    for n in sizes:
        X, y = ngrad.tensor(rng.standard_normal((n, d))), ngrad.tensor((rng.random(n) < 0.5).astype(np.float64))
        w = ngrad.full((d,), 0.01, dtype=ngrad.float64)
        for _ in range(WARM):
            vg(w, X, y)
        ngrad.synchronize_compiles()
        vg(w, X, y)
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            vg(w, X, y)[1].numpy()
            times.append(time.perf_counter() - t)
        out.append((n, Timing(statistics.median(times), min(times))))
    return out


def overhead(client, counts, repeat):
    out = []
    for chunks in counts:
        X, y = _data(16 * chunks, 4, chunks)
        objective = nd.Objective(logistic, (X, y), client=client)
        out.append((chunks, _median_step(objective, ngrad.zeros(4, dtype=ngrad.float64), repeat)))
        objective.close()
    return out


def gradient_size(client, sizes, repeat):
    import dask.array as da

    out = []
    X = da.ones((8 * 16, 4), chunks=(16, 4)).persist()
    for p in sizes:
        objective = nd.Objective(linear, X, client=client)
        out.append((p, _median_step(objective, ngrad.zeros(p, dtype=ngrad.float64), repeat)))
        objective.close()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    args = parser.parse_args()
    sizes = [100_000, 1_000_000] if args.quick else [100_000, 1_000_000, 4_000_000]
    repeat = 5 if args.quick else 9
    print("one process, compiled, whole array:")
    base = dict(one_process(sizes, repeat))
    for n, t in base.items():
        print(f"  n={n:>9,}  {t}  {n / t / 1e6:7.2f} M rows/s")
    for workers in (1, 2):
        client = nd.local_cluster(workers)
        try:
            print(f"\n{workers} worker process(es):")
            for n, t in throughput(client, sizes, repeat):
                print(f"  n={n:>9,}  {t}  {n / t / 1e6:7.2f} M rows/s  ({base[n] / t:.2f}x one process)")
            print("  scheduler overhead, 16-row chunks:")
            for chunks, t in overhead(client, [1, 8, 64] if args.quick else [1, 4, 16, 64], repeat):
                print(f"    {chunks:>3} chunks  {t}  {t / chunks * 1e3:7.3f} ms/chunk")
            print("  gradient size, 8 tiny chunks:")
            for p, t in gradient_size(client, [10, 100_000, 1_000_000], repeat):
                print(f"    p={p:>9,}  {t}")
        finally:
            client.close()
            client.cluster.close()


if __name__ == "__main__":
    main()
