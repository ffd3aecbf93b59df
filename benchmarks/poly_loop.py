"""Plain-tensor loops: per-iteration time and memory must stay flat over 10,000 iterations.

* ``poly``: PyTorch's "polynomial with tensors" tutorial loop (no autograd), 2,000 points,
  float32: record, ``.item()`` the loss every iteration, update the four coefficients in place.
* ``no-read``: ``s = s * 0.9 + x`` on 2,000 float64 values, never read until the end.

For each: the time of one iteration around iteration 100 and around the last (medians over 100
iterations), the resident memory at several points, the total (also without the first 10
iterations, where ngrad compiles or loads its kernels), and the program structures the loop made
(a steady loop makes a few, then none). PyTorch eager runs the same loops in the same
run when it is installed.

Run: python benchmarks/poly_loop.py [--iters N]
"""

import argparse
import math
import os
import statistics
import time

import ngrad
from ngrad.engine.runtime import dispatch


def _rss_mib():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def poly(lib, iters, marks):
    """The tutorial loop; returns per-iteration times, {iteration: RSS MiB}, final loss."""
    x = lib.linspace(-math.pi, math.pi, 2000, dtype=lib.float32)
    y = lib.sin(x)
    lib.manual_seed(0)
    a, b, c, d = (lib.randn((), dtype=lib.float32) for _ in range(4))
    lr, times, rss, loss = 1e-6, [], {}, None
    for t in range(iters):
        start = time.perf_counter()
        y_pred = a + b * x + c * x**2 + d * x**3
        loss = (y_pred - y).pow(2).sum().item()
        grad_y_pred = 2.0 * (y_pred - y)
        grad_a = grad_y_pred.sum()
        grad_b = (grad_y_pred * x).sum()
        grad_c = (grad_y_pred * x**2).sum()
        grad_d = (grad_y_pred * x**3).sum()
        a -= lr * grad_a
        b -= lr * grad_b
        c -= lr * grad_c
        d -= lr * grad_d
        times.append(time.perf_counter() - start)
        if t + 1 in marks:
            rss[t + 1] = _rss_mib()
    return times, rss, loss


def no_read(lib, iters, marks):
    """``s = s * 0.9 + x``, read once at the end."""
    x = lib.linspace(0.0, 1.0, 2000, dtype=lib.float64)
    s = lib.zeros(2000, dtype=lib.float64)
    times, rss = [], {}
    for t in range(iters):
        start = time.perf_counter()
        s = s * 0.9 + x
        times.append(time.perf_counter() - start)
        if t + 1 in marks:
            rss[t + 1] = _rss_mib()
    start = time.perf_counter()
    out = s.sum().item()
    times[-1] += time.perf_counter() - start
    return times, rss, out


def report(name, lib_name, result, total):
    times, rss, value = result
    early = statistics.median(times[50:150]) * 1e6
    late = statistics.median(times[-100:]) * 1e6
    mem = "  ".join(f"@{k}: {v:.0f}" for k, v in sorted(rss.items()))
    print(
        f"  {lib_name:<6} it~100 {early:7.1f} us  it~{len(times)} {late:7.1f} us  ({late / early:4.2f}x)  "
        f"total {total:6.2f} s  result {value:.6g}"
    )
    print(f"         first 10 iterations {sum(times[:10]):.2f} s (compiling or loading kernels)  RSS MiB {mem}")
    return total - sum(times[:10])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=10_000)
    args = p.parse_args()
    n = args.iters
    marks = {m for m in (100, 1000, n // 2, n) if m <= n}
    try:
        import torch
    except ImportError:
        torch = None
    for name, loop in (("poly", poly), ("no-read", no_read)):
        print(f"{name}: {n} iterations")
        totals = {}
        before = len(dispatch.records)
        start = time.perf_counter()
        result = loop(ngrad, n, marks)
        totals["ngrad"] = time.perf_counter() - start
        steady = {"ngrad": report(name, "ngrad", result, totals["ngrad"])}
        print(f"         program structures made: {len(dispatch.records) - before}")
        if torch is not None:
            start = time.perf_counter()
            result = loop(torch, n, marks)
            totals["torch"] = time.perf_counter() - start
            steady["torch"] = report(name, "torch", result, totals["torch"])
            print(
                f"  ngrad / torch: total {totals['ngrad'] / totals['torch']:.2f}x, "
                f"after the first 10 iterations {steady['ngrad'] / steady['torch']:.2f}x"
            )


if __name__ == "__main__":
    main()
