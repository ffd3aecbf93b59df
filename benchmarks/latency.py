"""First calls and time to steady state: ngrad against PyTorch eager, torch.compile and JAX jit.

Each measurement runs in a fresh process (so imports, Numba's start-up and the kernel cache count
as a user's script sees them) and times every call of value and gradient, one after another:

- ``example``: the issue's small function (``sin(x) * exp(x) / (1 + x*x)`` summed over 100,000
  points, plus ``tanh(A @ A)`` summed for a 50x50 ``A``) written as eager PyTorch code;
- each ``ngrad bench`` problem at one size (``--problems``, ``--size-index``), through the bench's
  own systems (ngrad: the step under ``ngrad.compile``; PyTorch eager; JAX ``jit``) plus
  ``torch.compile`` of PyTorch's step and ngrad without ``ngrad.compile`` (``ngrad eager``).

ngrad runs twice per case: ``cold`` (an empty kernel cache) and ``warm`` (the cache the cold run
left). Columns: import (s), call 1, call 2 and the slowest of calls 3-5 (ms), the steady state
(ms: the median of the last half of the calls; for ngrad, of the calls in the ``AFTER_S`` after
``ngrad.synchronize_compiles()``, since its first few calls after the compiles vary by half
between runs on two cores) and the time to steady state (s: from the first call
until the first call within 1.5x the steady state, every call before counted; ngrad's calls go
on after the timed ones for as long as it compiles, as a loop's would, and its second tier of
machine code (``cpu.upgrade``) comes last: the quick tier's calls count where they are within
1.5x). The ``ratio``
columns divide by PyTorch eager's same call; the last one is the slowest ngrad call after the
first against eager's call of the same number, or the slowest of its calls after the timed ones
against the slowest of eager's over a second of calls after its timed ones (``LATER_S``),
whichever ratio is higher.

The first line says what ran ngrad's large matrix products and where it compiled: MKL is an
opt-in extra (``pip install 'ngrad[mkl]'``, also in the ``test`` extra), whose loading and first
product (30-90 ms here) fall in call 1; ``NGRAD_BLAS=numpy`` measures a default install.

On a shared or loaded machine each number varies from run to run by more than the differences
it is meant to show: ``--repeat N`` measures every case N times (each ngrad repeat with a new
empty cache) and reports the best of the N for each column.

Run: ``python benchmarks/latency.py [--problems example,gmm,ode] [--calls 20] [--repeat 3] [--markdown OUT]``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# the others' calls go on after the timed ones for this long, as ngrad's go on while it compiles:
# the slowest of many calls on a shared machine is several times the median for PyTorch too
# (kmeans: 11x over 1,500 calls), so ngrad's slowest later call is set against theirs
LATER_S = 1.0
# ngrad's calls after its compiles, whose median's last half is its steady state
AFTER_S = 0.3
SYSTEMS = ("ngrad", "ngrad eager", "torch", "torch.compile", "jax")


def _example_inputs(rng):
    return {"x": rng.standard_normal(100_000), "A": rng.standard_normal((50, 50))}


def _example(T, x, A):
    return (x.sin() * x.exp() / (1 + x * x)).sum() + (A @ A).tanh().sum()


def _runner(problem, size, system):
    """``(f, inputs)``: ``f(inputs)`` computes value and gradient once."""
    import numpy as np

    rng = np.random.default_rng(0)
    if problem == "example":
        inputs = _example_inputs(rng)
        if system == "jax":
            import jax
            import jax.numpy as jnp

            jax.config.update("jax_enable_x64", True)

            def g(x, A):
                return (jnp.sin(x) * jnp.exp(x) / (1 + x * x)).sum() + jnp.tanh(A @ A).sum()

            step = jax.jit(jax.value_and_grad(g, argnums=(0, 1)))

            def f(inp):
                v, g = step(inp["x"], inp["A"])
                jax.block_until_ready(g)
                return float(v)

            return f, inputs
        T = _module(system)

        def body(x, A):
            return _example(T, x, A)

        if system == "torch.compile":
            body = T.compile(body)

        def f(inp):
            x = T.tensor(inp["x"], dtype=T.float64, requires_grad=True)
            A = T.tensor(inp["A"], dtype=T.float64, requires_grad=True)
            y = body(x, A)
            y.backward()
            return y.item(), x.grad.numpy(), A.grad.numpy()

        return f, inputs
    from ngrad.bench.problems import PROBLEMS, _autograd, _step

    prob = PROBLEMS[problem]
    inputs = prob.inputs(size, rng)
    if system == "ngrad eager":
        import ngrad

        return _autograd(prob, ngrad, ngrad.from_numpy), inputs
    if system == "torch.compile":
        import torch

        compiled = torch.compile(lambda t: _step(prob, torch, t))

        def f(inp):
            t = {
                k: (torch.from_numpy(v).requires_grad_(k in prob.wrt) if isinstance(v, np.ndarray) else v)
                for k, v in inp.items()
            }
            value, outs = compiled(t)
            return value.item(), {k: o.detach().numpy() for k, o in outs.items()}

        return f, inputs
    return prob.system(system), inputs


def _module(system):
    if system.startswith("torch"):
        import torch

        return torch
    import ngrad

    return ngrad


def _calls_while(f, inputs, going, seconds):
    """The times of calls ``f(inputs)`` made one after another while ``going()``, for at most
    ``seconds``."""
    more, stop = [], time.perf_counter() + seconds
    while going() and time.perf_counter() < stop:
        t = time.perf_counter()
        f(inputs)
        more.append(time.perf_counter() - t)
    return more


def child(problem, size, system, calls):
    """Time ``calls`` calls in this (fresh) process; print one JSON line."""
    t0 = time.perf_counter()
    if system.startswith("ngrad"):
        import ngrad  # noqa: F401
    elif system.startswith("torch"):
        import torch  # noqa: F401
    else:
        import jax  # noqa: F401
    imported = time.perf_counter() - t0
    f, inputs = _runner(problem, size, system)
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        f(inputs)
        times.append(time.perf_counter() - t)
    out = {"import_s": imported, "times": times}
    if not system.startswith("ngrad"):  # as many calls again as ngrad's compiles take, about
        out["more"] = _calls_while(f, inputs, lambda: True, LATER_S)
    else:  # its steady state: once the background compiles are in use
        import ngrad
        from ngrad.engine.runtime import background

        out["more"] = _calls_while(f, inputs, background.pending, 60)  # as a loop goes on meanwhile
        t = time.perf_counter()
        ngrad.synchronize_compiles()
        out["wait_s"] = time.perf_counter() - t
        out["after"] = _calls_while(f, inputs, lambda: True, AFTER_S)
    print(json.dumps(out))


def _measure(problem, size, system, calls, cache):
    env = dict(os.environ, NGRAD_CACHE_DIR=cache)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", problem, str(size), system, str(calls)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1][:120]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def _summary(m):
    if "error" in m:
        return m
    ts = [t * 1e3 for t in m["times"]]
    last = m["after"] if "after" in m else m["times"]
    steady = statistics.median([t * 1e3 for t in last[len(last) // 2 :]])
    every = ts + [t * 1e3 for t in m.get("more", ())]
    reach = next((i for i, t in enumerate(every) if t <= 1.5 * steady), None)
    # not reached by any call: all of them, and the wait for the compiles after them
    to_steady = sum(every[: reach + 1]) / 1e3 if reach is not None else sum(every) / 1e3 + m.get("wait_s", 0.0)
    return {
        "import_s": m["import_s"],
        "later": max((t * 1e3 for t in m.get("more", ())), default=0.0),  # the slowest call after the timed ones
        "call1": ts[0],
        "call2": ts[1],
        "calls3_5": max(ts[2:5]),
        "steady": steady,
        "to_steady_s": to_steady,
        "times": ts,
    }


def _best(summaries):
    """The best (smallest) of each column over repeated measurements of one case; an error if
    any of them failed."""
    failed = next((m for m in summaries if "error" in m), None)
    if failed is not None:
        return failed
    best = {k: min(m[k] for m in summaries) for k in summaries[0] if k != "times"}
    best["times"] = [min(t) for t in zip(*(m["times"] for m in summaries))]  # call by call
    return best


def _case(problem, size, system, calls, repeat):
    """``[(how, best summary)]`` for one problem and system: ngrad cold and warm (each repeat on a
    new empty cache), the others once per repeat."""
    hows = ("cold", "warm") if system.startswith("ngrad") else ("",)
    runs = {how: [] for how in hows}
    for _ in range(repeat):
        if system.startswith("ngrad"):
            with tempfile.TemporaryDirectory() as cache:
                for how in hows:
                    runs[how].append(_summary(_measure(problem, size, system, calls, cache)))
        else:
            runs[""].append(_summary(_measure(problem, size, system, calls, tempfile.gettempdir())))
    return [(how, _best(runs[how])) for how in hows]


def _installed(system):
    mod = {"torch": "torch", "torch.compile": "torch", "jax": "jax"}.get(system)
    if mod is None:
        return True
    try:
        __import__(mod)
    except ImportError:
        return False
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="example,chain,ode,lstm,gmm,kmeans,ba,mlp")
    ap.add_argument("--size-index", type=int, default=0, help="which of each problem's sizes (default the first)")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=1, help="measure each case N times, report the best of each column")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--child", nargs=4, metavar=("PROBLEM", "SIZE", "SYSTEM", "CALLS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        problem, size, system, calls = args.child
        return child(problem, int(size), system, int(calls))
    from ngrad.bench.problems import PROBLEMS

    systems = [s for s in args.systems.split(",") if _installed(s)]
    import compileall

    import ngrad

    # ngrad's modules as installed (pip compiles them at install): a checkout whose bytecode is
    # stale or missing, under PYTHONDONTWRITEBYTECODE, compiled the compiler's modules from source
    # on the worker at every first compile (10-15 ms of the calls' lock)
    compileall.compile_dir(os.path.dirname(ngrad.__file__), quiet=1)
    from ngrad.engine.config import compile_mode
    from ngrad.engine.ir import blas

    # MKL is an opt-in extra: where it is installed its loading and first product count in call 1
    setting = f"ngrad: large products on {blas.describe()}; compiles: NGRAD_COMPILE={compile_mode()}"
    if args.repeat > 1:
        setting += f"; best of {args.repeat} runs for each column"
    print(setting)
    lines = [
        "| problem | system | cache | import (s) | call 1 (ms) | call 2 | calls 3-5 | steady | to steady (s) "
        "| call 1 / eager | call 2 / eager | calls 3-5 / eager | worst call 2+ / eager's same call (or steady) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print(lines[0])
    print(lines[1])
    for problem in args.problems.split(","):
        size = 0 if problem == "example" else PROBLEMS[problem].sizes[args.size_index]
        rows = []
        for system in systems:
            if problem != "example" and system == "ngrad eager" and not PROBLEMS[problem].traced:
                continue
            rows += [(system, how, r) for how, r in _case(problem, size, system, args.calls, max(1, args.repeat))]
        eager = next((r for s, _, r in rows if s == "torch" and "error" not in r), None)
        for system, how, r in rows:
            label = f"{problem} {size:,}" if size else problem
            if "error" in r:
                line = f"| {label} | {system} | {how} | failed: {r['error']} ||||||||||"
            else:
                ratios = [f"{r[k] / eager[k]:.2f}x" for k in ("call1", "call2", "calls3_5")] if eager else ["", "", ""]
                if eager:  # the slowest of calls 2.. against PyTorch eager's call of the same number,
                    # and of the calls after them (while ngrad's compiles go on) against its steady state
                    k, worst = max(
                        enumerate(n / e for n, e in zip(r["times"][1:], eager["times"][1:])), key=lambda p: p[1]
                    )
                    later = r.get("later", 0.0) / (eager.get("later") or eager["steady"])
                    ratios.append(f"{worst:.2f}x (call {k + 2})" if worst >= later else f"{later:.2f}x (later)")
                else:
                    ratios.append("")
                line = (
                    f"| {label} | {system} | {how} | {r['import_s']:.2f} | {r['call1']:.1f} | {r['call2']:.1f} "
                    f"| {r['calls3_5']:.1f} | {r['steady']:.2f} | {r['to_steady_s']:.2f} | " + " | ".join(ratios) + " |"
                )
            lines.append(line)
            print(line, flush=True)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(setting + "\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
