"""Runs benchmark problems on every available system and reports value+gradient times.

Contract: ``run_suite(problems, sizes, repeat, quick)`` checks that all systems agree on the
value and the gradient (float64, rtol 1e-6) before timing anything, then times each system's
first call and its steady state (median and spread over ``repeat`` calls after warm-up), and
returns plain dicts that the CLI prints as tables and writes as JSON.
"""
import platform
import statistics
import time

import numpy as np

from .problems import PROBLEMS

__all__ = ["run_suite", "machine_info"]

SYSTEMS = ("ngrad", "numpy", "torch", "jax")


def machine_info():
    import numba

    info = {"python": platform.python_version(), "platform": platform.platform(), "processor": platform.processor(),
            "numpy": np.__version__, "numba": numba.__version__}
    from .. import __version__
    info["ngrad"] = __version__
    for mod in ("torch", "jax"):
        try:
            info[mod] = __import__(mod).__version__
        except ImportError:
            info[mod] = None
    return info


def _time(fn, inp, repeat, budget):
    t0 = time.perf_counter()
    fn(inp)
    first = time.perf_counter() - t0
    times, spent = [], 0.0
    for _ in range(max(2, repeat)):
        t = time.perf_counter()
        fn(inp)
        dt = time.perf_counter() - t
        times.append(dt)
        spent += dt
        if spent > budget and len(times) >= 3:
            break
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    return {"first_s": first, "median_s": statistics.median(times), "q1_s": q[0], "q3_s": q[2], "runs": len(times)}


def run_suite(names, sizes=None, repeat=20, budget=2.0, progress=None):
    """Results for each (problem, size): agreement check, then timings per available system."""
    results = []
    rng = np.random.default_rng(0)
    for name in names:
        prob = PROBLEMS[name]
        for n in (sizes or prob.sizes):
            inp = prob.inputs(n, rng)
            runners = {s: prob.systems[s]() for s in SYSTEMS}
            runners = {s: f for s, f in runners.items() if f is not None}
            ref_v, ref_g = runners["numpy"](inp)
            for s, f in runners.items():
                v, g = f(inp)
                if not (np.isclose(v, ref_v, rtol=1e-6, atol=1e-9)
                        and np.allclose(g, ref_g, rtol=1e-6, atol=1e-9 * max(1.0, float(np.abs(ref_g).max())))):
                    raise AssertionError(f"{name} (n={n}): {s} disagrees with the NumPy reference "
                                         f"(value {v} vs {ref_v}, max gradient error {np.abs(g - ref_g).max():.3g})")
            row = {"problem": name, "size": n, "systems": {}}
            for s, f in runners.items():
                if progress:
                    progress(f"{name} n={n}: {s}")
                row["systems"][s] = _time(f, inp, repeat, budget)
            results.append(row)
    return results
