"""The benchmark runner: each problem's gradient against finite differences and the hand-written
NumPy reference, the agreement check and the CLI's output and JSON schema (the GradBench tool:
tests/test_gradbench.py)."""

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

import ngrad
from ngrad.bench.problems import PROBLEMS, ba, kmeans, lstm, ode
from ngrad.bench.runner import agree, run_suite
from ngrad.cli import main

SMALL = {
    "chain": 8,
    "rosenbrock": 8,
    "lse": 8,
    "llsq": 16,
    "lj": 8,
    "ode": 5,
    "lstm": 4,
    "gmm": 6,
    "kmeans": 40,
    "ba": 5,
    "det": 4,
    "mlp": 3,
}
STANDARD = sorted(n for n, p in PROBLEMS.items() if p.compute is None)


def test_every_problem_has_a_small_size():
    assert set(SMALL) == set(PROBLEMS)


def _value(prob, inp):
    t = {k: ngrad.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in inp.items()}
    return prob.objective(ngrad, **t).item()


@pytest.mark.parametrize("name", STANDARD)
def test_gradient_matches_central_differences(name):
    prob, rng = PROBLEMS[name], np.random.default_rng(1)
    inp = prob.inputs(SMALL[name], rng)
    value, grads = prob.system("ngrad")(inp)
    assert np.isclose(value, _value(prob, inp), rtol=1e-12)
    eps = 1e-6
    for k in prob.wrt:
        u = rng.standard_normal(inp[k].shape)
        numeric = (
            _value(prob, dict(inp, **{k: inp[k] + eps * u})) - _value(prob, dict(inp, **{k: inp[k] - eps * u}))
        ) / (2 * eps)
        assert np.isclose(np.sum(grads[k] * u), numeric, rtol=1e-5, atol=1e-7), k


def test_kmeans_newton_direction_matches_differences():
    inp = kmeans.inputs(SMALL["kmeans"], np.random.default_rng(2), k=4, d=2)
    _, out = PROBLEMS["kmeans"].system("ngrad")(inp)
    c, eps = inp["centroids"], 1e-3

    def cost(cc):
        return ((inp["points"][:, None] - cc[None]) ** 2).sum(2).min(1).sum()

    g, h = np.zeros_like(c), np.zeros_like(c)
    for idx in np.ndindex(*c.shape):  # the cost is piecewise quadratic: differences are exact
        e = np.zeros_like(c)
        e[idx] = eps
        g[idx] = (cost(c + e) - cost(c - e)) / (2 * eps)
        h[idx] = (cost(c + e) - 2 * cost(c) + cost(c - e)) / eps**2
    np.testing.assert_allclose(out["dir"], g / h, rtol=1e-6)


@pytest.mark.parametrize("n", [12, 13])  # 12: three blocks of four points; 13: and one more point
def test_kmeans_blocks_of_products_find_the_nearest_centroids(monkeypatch, n):
    monkeypatch.setattr(kmeans, "BLOCK_ELEMENTS", 12)  # k = 3: blocks of (about) four points
    inp = kmeans.inputs(n, np.random.default_rng(4), k=3, d=2)
    d2 = ((inp["points"][:, None] - inp["centroids"][None]) ** 2).sum(2)
    near = kmeans.nearest(ngrad, ngrad.from_numpy(inp["points"]), ngrad.from_numpy(inp["centroids"]))
    np.testing.assert_array_equal(near.numpy(), d2.argmin(1))
    value, out = PROBLEMS["kmeans"].system("ngrad")(inp)
    assert np.isclose(value, d2.min(1).sum(), rtol=1e-12)
    np.testing.assert_allclose(out["dir"], kmeans.numpy(inp)[1]["dir"], rtol=1e-12)


def _scan_bodies(t):
    """The ``length`` and ``body`` of every scan in ``t``'s program, in no order."""
    stack, seen, found = [t._node], set(), []
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            if node.op == "scan":
                found.append((node.params["length"], node.params["body"]))
            stack.extend(node.srcs)
    return sorted(found)


def test_recurrences_are_one_scan_body_whatever_their_length(monkeypatch):
    x = ngrad.from_numpy(np.random.default_rng(5).uniform(-1, 1, 6))
    (a,), (b,) = (_scan_bodies(ode.solve(ngrad, x, s)) for s in (3, 7))
    assert (a[0], b[0]) == (3, 7) and a[1] == b[1]
    monkeypatch.setattr(lstm, "UNROLL", 2)  # 5 steps: 2 blocks of 2 and 1 step; 8: 4 blocks, 1 step
    found = []
    for c in (6, 10):
        inp = {k: ngrad.from_numpy(v) for k, v in lstm.inputs(c, np.random.default_rng(c), layers=2, b=3).items()}
        found.append(_scan_bodies(lstm.objective(ngrad, **inp)))
    assert [[n for n, _ in f] for f in found] == [[1, 2], [1, 4]]
    assert [body for _, body in found[0]] == [body for _, body in found[1]]


def test_ba_jacobian_matches_differences():
    inp = ba.inputs(SMALL["ba"], np.random.default_rng(3))
    _, out = PROBLEMS["ba"].system("ngrad")(inp)
    obs, p = inp["obs"], SMALL["ba"]
    args = [inp["cams"][obs[:, 0]], inp["x"][obs[:, 1]], inp["w"]]

    def r(a):
        return ba.residuals(ngrad, *(ngrad.from_numpy(v) for v in a), ngrad.from_numpy(inp["feats"])).numpy()

    cols = []
    for which, width in ((0, 11), (1, 3), (2, 1)):
        for j in range(width):  # residuals of observation i depend only on its own parameters
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            h = 1e-6 * max(1.0, float(np.abs(args[which]).max()))
            if which == 2:
                plus[2] += h
                minus[2] -= h
            else:
                plus[which][:, j] += h
                minus[which][:, j] -= h
            cols.append((r(plus) - r(minus)) / (2 * h))
    jac = np.stack(cols, 2)  # (p, 2, 15)
    np.testing.assert_allclose(out["vals"][: 30 * p].reshape(p, 2, 15), jac, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["vals"][30 * p :], -2 * inp["w"])


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("system", ["ngrad", "torch", "jax"])
def test_systems_agree_with_the_numpy_reference(name, system):
    prob = PROBLEMS[name]
    f = prob.system(system)
    if f is None:
        pytest.skip(f"{system} is not installed")
    inp = prob.inputs(SMALL[name], np.random.default_rng(4))
    agree(name, SMALL[name], system, f(inp), prob.numpy(inp))


def test_disagreement_is_reported(monkeypatch):
    prob = PROBLEMS["lse"]
    monkeypatch.setattr(prob, "system", lambda s: lambda inp: (0.0, {"x": np.zeros_like(inp["x"])}))
    with pytest.raises(AssertionError, match="disagrees with the NumPy reference"):
        run_suite(["lse"], [10], repeat=2, systems=("ngrad",))


def test_run_suite_checks_and_times():
    (row,) = run_suite(["rosenbrock"], [50], repeat=3, budget=0.1)
    assert row["problem"] == "rosenbrock" and row["size"] == 50
    assert {"ngrad", "numpy"} <= set(row["systems"])
    for t in row["systems"].values():
        assert t["median_s"] > 0 and t["first_s"] > 0 and t["q1_s"] <= t["median_s"] <= t["q3_s"] and t["runs"] >= 2


def test_cli_tables_and_json_schema(tmp_path, capsys):
    path = tmp_path / "out.json"
    assert (
        main(
            [
                "bench",
                "--problems",
                "lse,chain",
                "--sizes",
                "100",
                "--repeat",
                "3",
                "--threads",
                "1",
                "--json",
                str(path),
            ]
        )
        == 0
    )
    data = json.loads(path.read_text())
    assert set(data) == {"machine", "results"}
    keys = {
        "python",
        "platform",
        "cpus",
        "usable_cpus",
        "numpy",
        "numba",
        "ngrad",
        "torch",
        "jax",
        "threads",
        "ngrad_blas",
    }
    assert keys <= set(data["machine"])
    assert data["machine"]["threads"] == 1
    assert [r["problem"] for r in data["results"]] == ["lse", "chain"]
    for r in data["results"]:
        assert r["size"] == 100 and {"ngrad", "numpy"} <= set(r["systems"])
        for name, t in r["systems"].items():
            # ngrad's steady state waited for its background compiles (how long: compile_wait_s)
            extra = {"compile_wait_s"} if name == "ngrad" else set()
            assert set(t) == {"first_s", "median_s", "q1_s", "q3_s", "runs"} | extra
    out = capsys.readouterr().out
    assert "vs ngrad" in out and "logsumexp" in out


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is optional")
def test_cli_plot(tmp_path):
    path = tmp_path / "t.png"
    assert main(["bench", "--problems", "lse", "--sizes", "10,100", "--repeat", "2", "--plot", str(path)]) == 0
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_cli_rejects_bad_arguments(capsys):
    assert main(["bench", "--problems", "nope"]) == 2
    assert "unknown problem" in capsys.readouterr().out
    assert main(["bench", "--sizes", "ten"]) == 2
    assert "--sizes" in capsys.readouterr().out


def test_python_dash_m_lists_problems():
    out = subprocess.run([sys.executable, "-m", "ngrad", "bench", "--list"], capture_output=True, text=True, check=True)
    assert all(name in out.stdout for name in PROBLEMS)
