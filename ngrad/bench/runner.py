"""Runs benchmark problems on every available system and reports value+gradient times.

Contract: ``run_suite(names, sizes, repeat, budget)`` builds each problem's inputs, checks that
every system agrees with the hand-written NumPy reference on the value and on every output
(float64, rtol 1e-6) before timing anything, then times each system's first call (for JAX
this includes compiling; ngrad's runs on its interpreter while its kernels compile on a worker
thread, and ``compile_wait_s`` is how long its steady state then waited for them, checked again)
and its steady state (median and quartiles over up to ``repeat`` calls, stopping early after
``budget`` seconds), and returns plain dicts that the CLI prints as tables and writes as JSON.
Systems run one after another in one process, on the same inputs, with the same thread count
(``pin_threads``).

```python
>>> res = run_suite(["rosenbrock"], [20], repeat=3, budget=0.05)
>>> {"ngrad", "numpy"} <= set(res[0]["systems"]), res[0]["size"]
(True, 20)

```
"""

import importlib.metadata
import os
import platform
import statistics
import time

import numpy as np

from .problems import PROBLEMS, SYSTEMS

__all__ = ["run_suite", "machine_info", "pin_threads", "agree"]


def pin_threads(threads):
    """Give every system ``threads`` threads: ngrad's loops and its products on MKL, PyTorch's
    intra-op pool, and XLA's CPU client (read when JAX starts, so this must run before JAX is
    imported). Returns a function restoring ngrad's and PyTorch's previous settings.

    OpenMP's wait policy is left as the user has it (the header prints it): on a quiet machine
    ``OMP_WAIT_POLICY=PASSIVE`` made PyTorch's small problems slower (logsumexp 1e4: 0.11-0.15 ms
    unset, 0.21-0.23 ms passive), and on a busy one the spinning of PyTorch's, MKL's and Numba's
    runtimes in one process slowed PyTorch up to 10x (14.6 ms unset, 1.43 ms passive)."""
    import ngrad

    from ..engine.ir import blas

    before, blas_before = ngrad.get_num_threads(), blas.set_num_threads(threads)
    ngrad.set_num_threads(threads)
    os.environ.setdefault(
        "XLA_FLAGS",
        f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} intra_op_parallelism_threads={threads}",
    )
    restore_torch = None
    try:
        import torch

        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        restore_torch = lambda: torch.set_num_threads(old)  # noqa: E731
    except ImportError:
        pass

    def restore():
        ngrad.set_num_threads(before)
        blas.set_num_threads(blas_before)
        if restore_torch:
            restore_torch()

    return restore


def machine_info():
    """Versions and the machine, for the JSON results."""
    from .. import __version__
    from ..engine.config import cores
    from ..engine.ir import blas

    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "usable_cpus": cores(),  # what affinity and a control group's quota leave this process
        "numpy": np.__version__,
        "numba": importlib.metadata.version("numba"),
        "ngrad": __version__,
        "ngrad_blas": blas.describe(),
    }
    for mod in ("torch", "jax"):
        try:
            info[mod] = __import__(mod).__version__
        except ImportError:
            info[mod] = None
    return info


def agree(name, size, system, got, ref):
    """Raise AssertionError unless ``got`` = (value, outputs) matches the reference."""
    (v, outs), (rv, routs) = got, ref
    problems = []
    if not np.isclose(v, rv, rtol=1e-6, atol=1e-9):
        problems.append(f"value {v!r} vs {rv!r}")
    for k, r in routs.items():
        g = np.asarray(outs.get(k))
        scale = max(1.0, float(np.abs(r).max()) if r.size else 1.0)
        if g.shape != r.shape or not np.allclose(g, r, rtol=1e-6, atol=1e-9 * scale):
            err = float(np.abs(g - r).max()) if g.shape == r.shape else f"shape {g.shape} vs {r.shape}"
            problems.append(f"{k}: max error {err}")
    if problems:
        raise AssertionError(
            f"{name} (size {size}): {system} disagrees with the NumPy reference: " + "; ".join(problems)
        )


def _time(fn, inp, repeat, budget):
    fn(inp)  # warm-up: ngrad compiles a tape the second time it sees it
    times, spent = [], 0.0
    for _ in range(max(2, repeat)):
        t = time.perf_counter()
        fn(inp)
        dt = time.perf_counter() - t
        times.append(dt)
        spent += dt
        if spent > budget and len(times) >= 3:
            break
    q = statistics.quantiles(times, n=4, method="inclusive")
    return {"median_s": statistics.median(times), "q1_s": q[0], "q3_s": q[2], "runs": len(times)}


def run_suite(names, sizes=None, repeat=20, budget=2.0, quick=False, systems=SYSTEMS, progress=None):
    """Results for each (problem, size): the agreement check, then timings per available system.
    ``progress(description, advance)`` is called before and after each timed system."""
    results = []
    for name in names:
        prob = PROBLEMS[name]
        for n in sizes or (prob.quick_sizes if quick else prob.sizes):
            inp = prob.inputs(n, np.random.default_rng(0))
            runners = {s: prob.system(s) for s in systems}
            runners = {s: f for s, f in runners.items() if f is not None}
            ref = prob.numpy(inp)
            first = {}
            for s, f in runners.items():
                if progress:
                    progress(f"{name} {n:,}: checking {s}", 0)
                t = time.perf_counter()
                agree(name, n, s, f(inp), ref)
                first[s] = time.perf_counter() - t
            row = {"problem": name, "size": n, "systems": {}}
            for s, f in runners.items():
                if progress:
                    progress(f"{name} {n:,}: timing {s}", 0)
                extra = {}
                if s == "ngrad":
                    # the first call ran on the interpreter while the kernels compile on a worker
                    # thread: the steady state is timed once they are in use, and checked again
                    import ngrad

                    t = time.perf_counter()
                    ngrad.synchronize_compiles()
                    extra["compile_wait_s"] = time.perf_counter() - t
                    agree(name, n, s, f(inp), ref)
                row["systems"][s] = {"first_s": first[s], **extra, **_time(f, inp, repeat, budget)}
                if progress:
                    progress(f"{name} {n:,}: timed {s}", 1)
            results.append(row)
    return results


def count_steps(names, sizes=None, quick=False, systems=SYSTEMS):
    """How many (problem, size, system) timings ``run_suite`` will make, for a progress bar."""
    installed = [s for s in systems if s in ("ngrad", "numpy") or _installed(s)]
    return sum(len(sizes or (PROBLEMS[n].quick_sizes if quick else PROBLEMS[n].sizes)) for n in names) * len(installed)


def _installed(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None
