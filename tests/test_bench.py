"""The benchmark runner: problem gradients, agreement checks, CLI output and JSON schema."""
import json
import subprocess
import sys

import numpy as np
import pytest

from ngrad.bench.problems import PROBLEMS
from ngrad.bench.runner import run_suite
from ngrad.cli import main


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_problem_gradients_match_finite_differences(name):
    prob = PROBLEMS[name]
    rng = np.random.default_rng(0)
    inp = prob.inputs(8, rng)
    f = prob.systems["ngrad"]()
    _, g = f(inp)
    u = rng.standard_normal(inp["x"].shape)
    eps = 1e-6
    plus = dict(inp, x=inp["x"] + eps * u)
    minus = dict(inp, x=inp["x"] - eps * u)
    numeric = (f(plus)[0] - f(minus)[0]) / (2 * eps)
    assert np.isclose(np.sum(g * u), numeric, rtol=1e-5, atol=1e-7)
    # and the hand-written NumPy reference agrees with ngrad
    v_ref, g_ref = prob.systems["numpy"]()(inp)
    np.testing.assert_allclose(g, g_ref, rtol=1e-9, atol=1e-12)


def test_run_suite_checks_and_times():
    res = run_suite(["rosenbrock"], [50], repeat=3, budget=0.1)
    (row,) = res
    assert row["problem"] == "rosenbrock" and row["size"] == 50
    for t in row["systems"].values():
        assert t["median_s"] > 0 and t["first_s"] > 0 and t["q1_s"] <= t["q3_s"] and t["runs"] >= 2


def test_disagreement_is_reported(monkeypatch):
    prob = PROBLEMS["lse"]
    broken = dict(prob.systems, ngrad=lambda: (lambda inp: (0.0, np.zeros_like(inp["x"]))))
    monkeypatch.setattr(prob, "systems", broken)
    with pytest.raises(AssertionError, match="ngrad disagrees with the NumPy reference"):
        run_suite(["lse"], [10], repeat=2)


def test_cli_json_schema(tmp_path, capsys):
    path = tmp_path / "out.json"
    assert main(["bench", "--problems", "lse,chain", "--sizes", "100", "--repeat", "3", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert set(data) == {"machine", "results"}
    assert {"python", "numpy", "numba", "ngrad", "torch", "jax"} <= set(data["machine"])
    assert [r["problem"] for r in data["results"]] == ["lse", "chain"]
    for r in data["results"]:
        assert {"ngrad", "numpy"} <= set(r["systems"])
        assert set(r["systems"]["ngrad"]) == {"first_s", "median_s", "q1_s", "q3_s", "runs"}
    assert "vs ngrad" in capsys.readouterr().out


def test_cli_rejects_unknown_problems(capsys):
    assert main(["bench", "--problems", "nope"]) == 2
    assert "unknown problem" in capsys.readouterr().out


def test_python_dash_m_lists_problems():
    out = subprocess.run([sys.executable, "-m", "ngrad", "bench", "--list"], capture_output=True, text=True, check=True)
    assert all(name in out.stdout for name in PROBLEMS)
