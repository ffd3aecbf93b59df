"""``ngrad bench gradbench-tool``: ngrad as a tool for GradBench's evals.

Contract: ``serve(stdin, stdout)`` reads one JSON message per line and answers each with one
JSON line, until stdin ends:

- ``{"id", "kind": "start", "eval"}`` -> ``{"id", "tool": "ngrad", "config": {versions}}``
- ``{"id", "kind": "define", "module"}`` -> ``{"id", "success", "timings"?, "error"?}``. Defining
  a module whose programs have one structure at every size (all but ``det``, whose recursion
  has ell levels, and ``particle`` and ``saddle``, which have no sizes; ``ode``'s steps and
  ``lstm``'s characters are an ``ngrad.scan``, one body whatever their count) runs each function
  three times on an input of the eval's shape (``ht``: both of its layouts; ``lstm``: each of
  GradBench's layer counts) and waits for the background compiles, so its kernels are compiled
  (or loaded from the disk cache) here; that time is reported as a timing named ``compile``.
  ``lse``, ``llsq``, ``kmeans``, ``gmm``, ``ode`` and ``lstm`` compile in the calls of ``define``
  and make a new size's plan from those kernels in its first call (``NGRAD_JIT_THRESHOLD=1``,
  ``NGRAD_COMPILE=wait`` while they run, unless set).
- ``{"id", "kind": "evaluate", "module", "function", "input"}`` -> ``{"id", "success": true,
  "output", "timings"}``: the function runs at least ``input["min_runs"]`` times (default 1) and
  until its runs have taken ``input["min_seconds"]`` (default 0), each run reported as a timing
  named ``evaluate``; the input's conversion from JSON to arrays and the output's to JSON are
  done once, outside the timings (GradBench's convention for its own tools). Each output has
  the type of the eval's specification (``evals/<name>/README.md`` in GradBench's repository)
  and, where that and GradBench's C++ reference differ, the reference's (``ba``).
- ``{"id", "kind": "analysis", ...}``, or any other kind -> ``{"id"}``, as the protocol asks.

A message that is not JSON, names an unknown module or function, or whose function raises,
gets ``{"id", "success": false, "error": "..."}`` (``"id": null`` when none could be read),
and the tool goes on with the next line.

```python
>>> import io, json
>>> msgs = [{"id": 0, "kind": "start", "eval": "hello"}, {"id": 1, "kind": "define", "module": "hello"},
...         {"id": 2, "kind": "evaluate", "module": "hello", "function": "double", "input": 3.0}]
>>> out = io.StringIO()
>>> serve(io.StringIO("".join(json.dumps(m) + "\\n" for m in msgs)), out)
0
>>> [json.loads(line).get("output") for line in out.getvalue().splitlines()]
[None, None, 6.0]

```
"""

import contextlib
import functools
import importlib.metadata
import json
import os
import time

import numpy as np

import ngrad

from .problems import PROBLEMS, ba, det, gmm, ht, lstm, nested, ode

__all__ = ["serve", "MODULES"]


def _t(a, grad=False):
    return ngrad.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def _arrays(inp, names):
    return {k: np.asarray(inp[k], dtype=np.float64) for k in names}


# --- each eval: its functions as (prepare, run, post), GradBench's own convention (its
# ``wrap.multiple_runs``): prepare turns the JSON input into the bench problem's inputs and post
# turns the result into the eval's JSON output, both untimed; run computes the result (timed).
# Gradients come from the problem's own ngrad system, the code ``ngrad bench`` times.


def _value(name):
    """The problem's objective alone (no gradient), as a float, under ``ngrad.compile`` as the
    gradients are (the Python numbers static): eager, llsq's value at n = 8,196 stayed on the
    interpreter at 24 ms a call, its gradient compiled at 0.26 ms."""
    objective = PROBLEMS[name].objective

    def step(t, static):
        return objective(ngrad, **t, **dict(static))

    step = ngrad.compile(step, static_argnums=(1,))

    def run(inp):
        t = {k: ngrad.from_numpy(v) for k, v in inp.items() if isinstance(v, np.ndarray)}
        return step(t, tuple((k, v) for k, v in inp.items() if not isinstance(v, np.ndarray))).item()

    return run


def _ode_primal():
    """y(2) itself (an array), under ``ngrad.compile`` as the values of ``_value`` are."""
    solve = ngrad.compile(lambda x, s: ode.solve(ngrad, x, s), static_argnums=(1,))
    return lambda inp: solve(ngrad.from_numpy(inp["x"]), inp["s"]).numpy()


def _outputs(name, *keys):
    """The problem's gradient outputs ``keys`` (a dict of arrays)."""
    system = PROBLEMS[name].system("ngrad")

    def run(inp):
        outs = system(inp)[1]
        return {k: outs[k] for k in keys}

    return run


def _one(key):
    """post: the single output ``key`` as a (nested) list."""
    return lambda out: out[key].tolist()


def _lists(out):
    return {k: v.tolist() for k, v in out.items()}


def _flat(*keys):
    """post: the outputs ``keys`` flattened row by row and concatenated, as one list."""
    return lambda out: np.concatenate([out[k].reshape(-1) for k in keys]).tolist()


def _hello_square(x):
    return (_t(x) * _t(x)).item()


def _hello_double(x):
    x = _t(x, grad=True)
    (x * x).backward()
    return x.grad.item()


def _vector(inp):
    return {"x": np.asarray(inp["x"], dtype=np.float64)}


def _llsq_prepare(inp):
    return {"x": np.asarray(inp["x"], dtype=np.float64), "n": int(inp["n"])}


def _ode_prepare(inp):
    return {"x": np.asarray(inp["x"], dtype=np.float64), "s": int(inp["s"])}


def _kmeans_prepare(inp):
    return _arrays(inp, ("points", "centroids"))


def _gmm_prepare(inp):
    out = _arrays(inp, ("alpha", "mu", "q", "l", "x"))
    k, d = out["mu"].shape
    out["l"] = out["l"].reshape(k, d * (d - 1) // 2)  # d = 1: JSON has empty rows
    return dict(out, gamma=float(inp["gamma"]), m=int(inp["m"]))


def _lstm_prepare(inp):
    return _arrays(inp, ("main_params", "extra_params", "state", "sequence"))


def _ba_prepare(inp):
    n, m, p = int(inp["n"]), int(inp["m"]), int(inp["p"])
    return {"n": n, "m": m, "full": ba.expand(n, m, p, inp["cam"], inp["x"], inp["w"], inp["feat"])}


def _ba_objective(inp):
    """Every residual, computed in full (GradBench forbids exploiting the duplication)."""
    full = inp["full"]
    obs = full["obs"]
    r = ba.residuals(ngrad, _t(full["cams"][obs[:, 0]]), _t(full["x"][obs[:, 1]]), _t(full["w"]), _t(full["feats"]))
    return {"reproj_error": r.numpy(), "w_err": 1 - full["w"] ** 2}


def _ba_objective_post(out):
    """GradBench's BAObjectiveOutput: the first observation's residuals and how many there are
    (its reference sends ``reproj_error``, though its README says ``reproj_err``)."""
    r, w = out["reproj_error"], out["w_err"]
    return {
        "reproj_error": {"elements": r[0].tolist(), "repeated": int(r.shape[0])},
        "w_err": {"element": float(w[0]), "repeated": int(w.shape[0])},
    }


_BA_VALS = _outputs("ba", "vals")


def _ba_jacobian(inp):
    rows, cols = ba.sparsity(inp["n"], inp["m"], inp["full"]["obs"])
    return {"rows": rows, "cols": cols, "vals": _BA_VALS(inp["full"])["vals"]}


def _ba_jacobian_post(out):
    """GradBench's BAJacobianOutput: the first 30 entries of each list and the last one (the
    first observation's two rows and the last weight's)."""
    return {k: np.concatenate([v[:30], v[-1:]]).tolist() for k, v in out.items()}


def _particle_prepare(inp):
    return float(inp["w"])


def _particle(variant, w0):
    return nested.particle(w0, variant)


def _saddle_prepare(inp):
    return [float(v) for v in inp["start"]]


def _saddle(variant, start):
    return nested.saddle(start, variant)


def _det_prepare(inp):
    return {"A": np.asarray(inp["A"], dtype=np.float64), "ell": int(inp["ell"])}


def _det_primal(inp):
    with ngrad.no_grad():
        return det.det(ngrad, ngrad.from_numpy(inp["A"]), inp["ell"]).item()


def _det_gradient(inp):
    """Eager autograd, not the bench's ``ngrad.compile``: each ell is another program, and its
    first call is better interpreted than compiled (tiering compiles it once it pays)."""
    A = ngrad.from_numpy(inp["A"]).requires_grad_()
    det.det(ngrad, A, inp["ell"]).backward()
    return A.grad.numpy()


MODULES = {
    "hello": {"square": (float, _hello_square, float), "double": (float, _hello_double, float)},
    "lse": {"primal": (_vector, _value("lse"), float), "gradient": (_vector, _outputs("lse", "x"), _one("x"))},
    "llsq": {
        "primal": (_llsq_prepare, _value("llsq"), float),
        "gradient": (_llsq_prepare, _outputs("llsq", "x"), _one("x")),
    },
    "ode": {
        "primal": (_ode_prepare, _ode_primal(), np.ndarray.tolist),
        "gradient": (_ode_prepare, _outputs("ode", "x"), _one("x")),
    },
    "kmeans": {
        "cost": (_kmeans_prepare, _value("kmeans"), float),
        "dir": (_kmeans_prepare, _outputs("kmeans", "dir"), _one("dir")),
    },
    "gmm": {
        "objective": (_gmm_prepare, _value("gmm"), float),
        "jacobian": (_gmm_prepare, _outputs("gmm", "alpha", "mu", "q", "l"), _lists),
    },
    "lstm": {
        "objective": (_lstm_prepare, _value("lstm"), float),
        "jacobian": (
            _lstm_prepare,
            _outputs("lstm", "main_params", "extra_params"),
            _flat("main_params", "extra_params"),
        ),
    },
    "ba": {
        "objective": (_ba_prepare, _ba_objective, _ba_objective_post),
        "jacobian": (_ba_prepare, _ba_jacobian, _ba_jacobian_post),
    },
    "det": {"primal": (_det_prepare, _det_primal, float), "gradient": (_det_prepare, _det_gradient, np.ndarray.tolist)},
    "ht": {
        "objective": (ht.model_arrays, ht.objective, np.ndarray.tolist),
        "jacobian": (ht.model_arrays, ht.jacobian, np.ndarray.tolist),
    },
    "particle": {v: (_particle_prepare, functools.partial(_particle, v), float) for v in nested.VARIANTS},
    "saddle": {v: (_saddle_prepare, functools.partial(_saddle, v), list) for v in nested.VARIANTS},
}


def _kmeans_warm(n, k):
    points = np.random.default_rng(0).random((n, 8))
    return {"points": points.tolist(), "centroids": points[-k:].tolist()}


def _gmm_warm(d):
    inp = gmm.inputs(1000, np.random.default_rng(0), d=d, k=5)
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in inp.items()}


def _lstm_warm(layers, c):
    rng = np.random.default_rng(layers)
    inp = lstm.inputs(c, rng, layers=layers, b=lstm.HIDDEN)
    return {k: v.tolist() for k, v in inp.items()}


def _ode_warm(n, s):
    return {"x": np.random.default_rng(n).uniform(-1, 1, n).tolist(), "s": s}


# small inputs in GradBench's format, run at define time so that kernels compile there (no
# dimension of size 1: that would be another broadcast pattern, so other kernels)
_WARM = {
    "hello": 1.5,
    "lse": {"x": [0.5, -1.0, 2.0]},
    "llsq": {"x": [0.1, -0.2, 0.3], "n": 7},
    # kmeans and gmm: GradBench's smallest n, 1,000 points, so that their arrays take the fused
    # kernels of the real sizes (on a few points their tapes took other kernels, and the first
    # workload compiled 0.3-4 s); kmeans also with 1,000 centroids (whose arrays took other
    # kernels again: 0.1-0.4 s a first call) on enough points for its blocks of products
    "kmeans": [_kmeans_warm(1000, 10), _kmeans_warm(2000, 1000)],
    # (gmm at d = 2, where l has one column, and at d = 10 takes other kernels than at d = 3:
    # GradBench's first two sizes compiled 1-1.6 s a call in their first evaluations)
    "gmm": [_gmm_warm(2), _gmm_warm(10)],
    # ode and lstm: their steps are a scan, whose bodies are the same programs whatever the
    # step count or sequence length (kernels take their sizes as arguments). The engine runs a
    # scan of small steps (at most 4,096 elements an instruction) written out as bytecode when
    # that makes at most 65,536 instructions, else step by step: each way compiles its own, so
    # the warm-up takes both. ode: one step, 16 small ones (written out), steps of 5,000
    # elements; lstm, for each of GradBench's layer counts (2, 4, 6: each is another body) at
    # its text's 14 bits a character: a block of lstm.UNROLL characters and 2 left over, 300
    # (written out; without it the first objective at c = 1,024 took 2.2 s), 2,048 (step by
    # step). Without them GradBench's first calls compiled for 0.6-9 s.
    "ode": [_ode_warm(n, s) for n, s in ((5, 4), (50, 1), (50, 16), (5000, 4))],
    "lstm": [_lstm_warm(layers, c) for layers in (2, 4, 6) for c in (lstm.UNROLL + 3, 300, 2048)],
    # ht: both layouts (with and without us) of ADBench's hand
    "ht": [ht.small_input(True), ht.small_input(False)],
    "ba": {
        "n": 2,
        "m": 3,
        "p": 5,
        "cam": [0.1, -0.05, 0.02, 0.1, 0.2, 0.0, 1.0, 0.01, -0.01, 1e-3, 1e-4],
        "x": [0.3, -0.2, 9.0],
        "w": 0.9,
        "feat": [0.05, -0.05],
    },
}


def _define(module):
    if module not in MODULES:
        return {"success": False, "error": f"unknown module {module!r}; ngrad supports {', '.join(MODULES)}"}
    t = time.perf_counter_ns()
    warm = _WARM.get(module, [])
    with _tiering(module):
        inputs = [
            (prepare(raw), run, post)
            for raw in (warm if isinstance(warm, list) else [warm])
            for prepare, run, post in MODULES[module].values()
        ]
        for inp, run, post in inputs:
            # tiering: a traced program's second call replays it, which compiles from the third
            # (with two, gmm's first evaluation still compiled 0.3-0.9 s in its call)
            for _ in range(3):
                out = run(inp)
            post(out)
    # ... in the background: wait for it here, or the evaluations that follow would run on the
    # interpreter while the compiler takes their core (kmeans: 8 s of compiling on 2 cores)
    ngrad.synchronize_compiles()
    # and once more on what was published: a program's first compiled call resolves its kernels'
    # entry points (hello's first evaluations took 0.16-0.34 ms, the next 0.05-0.1)
    with _tiering(module):
        for inp, run, _ in inputs:
            run(inp)
    return {"success": True, "timings": [{"name": "compile", "nanoseconds": time.perf_counter_ns() - t}]}


# Modules whose define compiles the kernels of every size: their evaluations compile a new size's
# plan in the call that first meets it, from those kernels (tiering would interpret that call
# and the ones after it while the plan is made in the background: kmeans' first cost at k = 1,000,
# n = 10,000 took 2.7 s so, 0.36 s compiled). Their define compiles in its own calls too: a
# background compile warms its kernels on copies of the inputs, and lstm's first jacobian then
# compiled Numba specialisations for 7 s. ba: its kernels at p = 5 serve every size, and each
# size's first jacobian took the interpreter 1-7 s (GradBench's score 35.4 -> 26.9 s). An
# NGRAD_JIT_THRESHOLD or NGRAD_COMPILE the user set is kept.
_COMPILE_AT_ONCE = {"lse", "llsq", "kmeans", "gmm", "ode", "lstm", "ba"}


@contextlib.contextmanager
def _tiering(module):
    chosen = {"NGRAD_JIT_THRESHOLD": "1", "NGRAD_COMPILE": "wait"} if module in _COMPILE_AT_ONCE else {}
    saved = {k: os.environ.get(k) for k in chosen}
    for k, v in chosen.items():
        os.environ.setdefault(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)


def _evaluate(msg):
    module, function = msg.get("module"), msg.get("function")
    if module not in MODULES or function not in MODULES[module]:
        return {"success": False, "error": f"unknown function {function!r} of module {module!r}"}
    prepare, run, post = MODULES[module][function]
    raw = msg.get("input")
    min_runs, min_seconds = 1, 0.0
    if isinstance(raw, dict):
        min_runs, min_seconds = int(raw.get("min_runs", 1)), float(raw.get("min_seconds", 0.0))
    inp = prepare(raw)
    timings, elapsed = [], 0
    # as GradBench's own tools: at least min_runs runs, and until the runs (not the whole
    # response) have taken min_seconds
    with _tiering(module):
        while len(timings) < min_runs or elapsed < min_seconds * 1e9:
            t = time.perf_counter_ns()
            result = run(inp)
            ns = time.perf_counter_ns() - t
            timings.append({"name": "evaluate", "nanoseconds": ns})
            elapsed += ns
    return {"success": True, "output": post(result), "timings": timings}


def respond(line):
    """The response (a dict) to one line of input."""
    try:
        msg = json.loads(line)
    except json.JSONDecodeError as e:
        return {"id": None, "success": False, "error": f"malformed message (not JSON): {e}"}
    if not isinstance(msg, dict):
        return {"id": None, "success": False, "error": "malformed message: expected a JSON object"}
    mid, kind = msg.get("id"), msg.get("kind")
    try:
        if kind == "start":
            return {
                "id": mid,
                "tool": "ngrad",
                "config": {
                    "ngrad": ngrad.__version__,
                    "numba": importlib.metadata.version("numba"),
                    "numpy": np.__version__,
                },
            }
        if kind == "define":
            return {"id": mid, **_define(msg.get("module"))}
        if kind == "evaluate":
            return {"id": mid, **_evaluate(msg)}
        # the protocol: any other kind (analysis, or one a later protocol adds) is acknowledged
        # with its id alone
        return {"id": mid}
    except Exception as e:  # the tool answers and goes on: GradBench reports the error
        return {"id": mid, "success": False, "error": f"{type(e).__name__}: {e}"}


def serve(stdin, stdout):
    """Answer every line of ``stdin`` on ``stdout`` until it ends; returns 0."""
    for line in stdin:
        if not line.strip():
            continue
        stdout.write(json.dumps(respond(line)) + "\n")
        stdout.flush()
    return 0
