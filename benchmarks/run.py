"""The compiler benchmarks in one command: value + gradient, float64, ngrad against a hand-written
NumPy gradient, PyTorch eager and JAX jit (when installed), steady state and first call, then the
warm-cache reload time of a fresh process, then the optimizer-loop benchmarks (loops.py) and
the autograd.functional ones (functional.py).

Run: python benchmarks/run.py [--quick] [--json results.json]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

from ngrad.cli import main as ngrad_main

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import functional  # noqa: E402  (sibling benchmark modules)
import loops  # noqa: E402

SUITE = [("chain", "1e6,1e7"), ("rosenbrock", "1e6"), ("lj", "1000"), ("lse", "1e6")]
QUICK = [("chain", "1e6"), ("rosenbrock", "1e5"), ("lj", "300"), ("lse", "1e5")]

RELOAD = r"""
import time, numpy as np
t0 = time.perf_counter()
import ngrad
from ngrad.engine.targets import cpu as c
from ngrad.bench.problems import PROBLEMS
import numba
t1 = time.perf_counter()
numba.njit(lambda v: v + 1)(1.0)  # Numba's own start-up: its first compile in a process
t_start = time.perf_counter() - t1
t1 = time.perf_counter()
for name in ("chain", "rosenbrock", "lse", "lj"):
    p = PROBLEMS[name]
    f = p.system("ngrad")
    f(p.inputs(50, np.random.default_rng(0)))
t2 = time.perf_counter()
print(f"{t1 - t0:.4f} {t2 - t1:.4f} {c.stats['compiled']} {c.stats['loaded']} {c.stats['seconds']:.4f} {t_start:.4f}")
"""


def reload_times():
    """Cold process (compiles), then warm process (loads from the disk cache)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NGRAD_CACHE_DIR=cache, NGRAD_JIT="always")
        rows = []
        for label in ("cold", "warm"):
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", RELOAD], env=env, capture_output=True, text=True, check=True)
            total = time.perf_counter() - t
            imp, work, compiled, loaded, kernel_s, start = out.stdout.split()
            rows.append(
                (label, total, float(imp), float(work), int(compiled), int(loaded), float(kernel_s), float(start))
            )
        return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    for name, sizes in QUICK if args.quick else SUITE:
        argv = ["bench", "--problems", name, "--sizes", sizes, "--repeat", "10"]
        if args.json:
            argv += ["--json", f"{args.json}.{name}"]
        ngrad_main(argv)
    print("\nfresh process, four problems' kernels (chain, rosenbrock, lse, lj):")
    for label, total, imp, work, compiled, loaded, kernel_s, start in reload_times():
        per = kernel_s / max(1, compiled + loaded) * 1e3
        print(
            f"  {label}: process {total:.2f} s, import {imp * 1e3:.0f} ms, Numba start-up {start * 1e3:.0f} ms, "
            f"first calls {work * 1e3:.0f} ms, {compiled} compiled / {loaded} loaded, "
            f"{per:.1f} ms per compiled function"
        )
    if not args.quick:
        print("\noptimizer loops (benchmarks/loops.py):")
        loops.main([])
        print("\nautograd.functional (benchmarks/functional.py):")
        functional.main()


if __name__ == "__main__":
    main()
