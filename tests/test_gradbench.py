"""ngrad as a GradBench tool (``ngrad bench gradbench-tool``): every response against the
protocol's message types (GradBench's CONTRIBUTING.md), every eval's output against values
worked out independently of ngrad (SciPy's densities and rotations, closed forms, plain loops,
central differences), and, where a GradBench checkout is given in ``GRADBENCH_REPO`` (with its
C++ reference built in ``tools/manual/bin`` and its Python package importable), GradBench's own
validator on each eval's output."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ngrad
from ngrad.bench import gradbench
from ngrad.bench.problems import lstm, nested

# --- the protocol's response types (CONTRIBUTING.md, "Types"): field -> (types, required) -------------

_TIMINGS = (list, False)
RESPONSE_FIELDS = {
    "start": {"id": (int, True), "tool": (str, False), "config": (object, False)},
    "define": {"id": (int, True), "success": (bool, True), "timings": _TIMINGS, "error": (str, False)},
    "evaluate": {
        "id": (int, True),
        "success": (bool, True),
        "output": (object, False),
        "timings": _TIMINGS,
        "error": (str, False),
    },
    "analysis": {"id": (int, True)},
}


def check_response(kind, msg_id, r):
    """Fails unless ``r`` is a response of GradBench's type for a message of ``kind``."""
    fields = RESPONSE_FIELDS[kind]
    assert set(r) <= set(fields), f"fields GradBench does not define: {set(r) - set(fields)}"
    for name, (types, required) in fields.items():
        if required:
            assert name in r, f"{kind} response lacks {name!r}: {r}"
        if name in r:
            assert isinstance(r[name], types), f"{kind} response's {name!r} is not {types}: {r[name]!r}"
    assert r["id"] == msg_id and not isinstance(r["id"], bool)
    for t in r.get("timings", []):
        assert set(t) == {"name", "nanoseconds"} and isinstance(t["name"], str)
        assert isinstance(t["nanoseconds"], int) and t["nanoseconds"] >= 0
    if kind == "evaluate" and r["success"]:
        assert "output" in r and "error" not in r  # GradBench's intermediary rejects either
    if kind == "define" and r["success"]:
        assert "error" not in r


def test_check_response_rejects_what_gradbench_rejects():
    check_response("evaluate", 2, {"id": 2, "success": True, "output": 1.0, "timings": []})
    for bad in (
        {"id": 2, "output": 1.0},  # no success: what ngrad sent before
        {"id": 2, "success": True},  # success without output
        {"id": 2, "success": "yes", "output": 1.0},
        {"id": 2, "success": True, "output": 1.0, "timings": [{"name": "evaluate", "nanoseconds": 1.5}]},
    ):
        with pytest.raises(AssertionError):
            check_response("evaluate", 2, bad)


def _evaluate(module, function, inp, min_runs=1):
    msg = {"id": 7, "kind": "evaluate", "module": module, "function": function}
    r = gradbench.respond(json.dumps(dict(msg, input=dict(inp, min_runs=min_runs, min_seconds=0))))
    check_response("evaluate", 7, r)
    assert r["success"], r
    assert len(r["timings"]) == min_runs and {t["name"] for t in r["timings"]} == {"evaluate"}
    return r["output"]


def test_a_session_of_every_message_kind_follows_the_types():
    x = [0.5, -1.0, 2.0]
    msgs = [
        {"id": 0, "kind": "start", "eval": "lse"},
        {"id": 1, "kind": "define", "module": "lse"},
        {"id": 2, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": x}},
        {"id": 3, "kind": "analysis", "of": 2, "valid": True},
        {"id": 4, "kind": "evaluate", "module": "lse", "function": "nope", "input": {"x": x}},
        {"id": 5, "kind": "define", "module": "no-such-eval"},
    ]
    res = [gradbench.respond(json.dumps(m)) for m in msgs]
    for m, r in zip(msgs, res, strict=True):
        check_response(m["kind"], m["id"], r)
    assert res[0]["tool"] == "ngrad" and res[1]["success"] and res[2]["success"]
    assert res[3] == {"id": 3}
    assert res[4]["success"] is False and "unknown function" in res[4]["error"]
    assert res[5]["success"] is False and "unknown module" in res[5]["error"]


def test_a_subprocess_session_survives_malformed_lines():
    x = [0.5, -1.0, 2.0, 0.25]
    lines = [
        {"id": 0, "kind": "start", "eval": "lse"},
        "this is not json",
        {"id": 1, "kind": "evaluate", "module": "lse", "function": "gradient", "input": {"x": x, "min_runs": 3}},
        {"id": 2, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"y": x}},
        {"id": 3, "kind": "teleport"},
    ]
    out = subprocess.run(
        [sys.executable, "-m", "ngrad", "bench", "gradbench-tool"],
        input="".join((m if isinstance(m, str) else json.dumps(m)) + "\n" for m in lines),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    res = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["id"] for r in res] == [0, None, 1, 2, 3]
    assert res[1]["success"] is False and "not JSON" in res[1]["error"]
    check_response("evaluate", 1, res[2])
    np.testing.assert_allclose(res[2]["output"], np.exp(x) / np.exp(x).sum(), rtol=1e-12)
    assert len(res[2]["timings"]) == 3
    assert res[3]["success"] is False and "KeyError" in res[3]["error"]
    assert res[4] == {"id": 3}  # any kind but define and evaluate: the id alone


def test_min_seconds_counts_the_runs_time():
    inp = {"x": [0.1, 0.2], "n": 5, "min_runs": 1, "min_seconds": 0.05}
    r = gradbench.respond(
        json.dumps({"id": 2, "kind": "evaluate", "module": "llsq", "function": "gradient", "input": inp})
    )
    check_response("evaluate", 2, r)
    times = [t["nanoseconds"] for t in r["timings"]]
    # runs until min_seconds have passed: more than one unless the first alone took that long
    assert sum(times) >= 0.05e9 and (len(times) >= 2 or times[0] >= 0.05e9)


# --- each eval's function, against values worked out without ngrad ------------------------------------------


def test_lse_and_llsq():
    x = [0.5, -1.0, 2.0]
    assert np.isclose(_evaluate("lse", "primal", {"x": x}), np.log(np.exp(x).sum()), rtol=1e-12)
    c, n = np.array([0.3, -0.2, 0.1]), 9
    t = -1 + 2 * np.arange(n) / (n - 1)  # GradBench's sample points
    r = np.sign(t) - np.polynomial.polynomial.polyval(t, c)
    assert np.isclose(_evaluate("llsq", "primal", {"x": c.tolist(), "n": n}), r @ r / 2, rtol=1e-12)
    grad = _evaluate("llsq", "gradient", {"x": c.tolist(), "n": n})
    np.testing.assert_allclose(grad, [-(r * t**j).sum() for j in range(3)], rtol=1e-10)


def test_kmeans_direction_is_the_newton_step():
    pts = np.random.default_rng(5).random((20, 2))
    c = pts[-3:]
    d2 = ((pts[:, None] - c[None]) ** 2).sum(2)
    assert np.isclose(_evaluate("kmeans", "cost", {"points": pts.tolist(), "centroids": c.tolist()}), d2.min(1).sum())
    own = d2.argmin(1)
    # the cost is a sum of quadratics per centroid: J = 2 (count c - sum), H = 2 count, J / H = c - mean
    step = np.stack([c[j] - pts[own == j].mean(0) for j in range(3)])
    out = _evaluate("kmeans", "dir", {"points": pts.tolist(), "centroids": c.tolist()})
    np.testing.assert_allclose(out, step, rtol=1e-10, atol=1e-14)


def _gmm_input(rng, d, k, n, m, gamma):
    return {
        "d": d,
        "k": k,
        "n": n,
        "m": m,
        "gamma": gamma,
        "x": rng.normal(size=(n, d)).tolist(),
        "alpha": rng.normal(size=k).tolist(),
        "mu": rng.uniform(size=(k, d)).tolist(),
        "q": (0.3 * rng.normal(size=(k, d))).tolist(),
        "l": (0.3 * rng.normal(size=(k, d * (d - 1) // 2))).tolist(),
    }


def _gmm_log_posterior(inp):
    """The log of GradBench's posterior from SciPy's densities: a mixture of Gaussians with
    precisions Q^T Q (Q lower triangular, diagonal exp(q), l below it column by column) and
    a Wishart prior on each precision, scale I / gamma^2 and d + m + 1 degrees of freedom."""
    stats = pytest.importorskip("scipy.stats")
    d, k, gamma, m = inp["d"], inp["k"], inp["gamma"], inp["m"]
    alpha, x = np.array(inp["alpha"]), np.array(inp["x"])
    phi = np.exp(alpha) / np.exp(alpha).sum()
    total, dens = 0.0, np.zeros((len(x), k))
    for j in range(k):
        Q = np.diag(np.exp(inp["q"][j]))
        col, row = np.triu_indices(d, 1)  # below the diagonal, column by column
        Q[row, col] = inp["l"][j]
        P = Q.T @ Q
        dens[:, j] = phi[j] * stats.multivariate_normal.pdf(x, inp["mu"][j], np.linalg.inv(P))
        total += stats.wishart.logpdf(P, df=d + m + 1, scale=np.eye(d) / gamma**2)
    return total + np.log(dens.sum(1)).sum()


def test_gmm_objective_and_gradients_are_gradbenchs_log_posterior():
    inp = _gmm_input(np.random.default_rng(6), d=3, k=2, n=5, m=1, gamma=0.7)
    assert np.isclose(_evaluate("gmm", "objective", inp), _gmm_log_posterior(inp), rtol=1e-10)
    jac = _evaluate("gmm", "jacobian", inp)
    assert set(jac) == {"alpha", "mu", "q", "l"}
    eps = 1e-6
    for name in ("q", "l", "alpha"):  # the prior's terms are in q and l
        arr = np.array(inp[name])
        for idx in np.ndindex(*arr.shape):
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += eps
            minus[idx] -= eps
            fd = (
                _gmm_log_posterior(dict(inp, **{name: plus.tolist()}))
                - _gmm_log_posterior(dict(inp, **{name: minus.tolist()}))
            ) / (2 * eps)
            assert np.isclose(np.array(jac[name])[idx], fd, rtol=1e-5, atol=1e-6), (name, idx)


def test_ode_starts_at_zero_as_gradbench():
    # y_i is a polynomial of degree i + 1 in t, so RK4 is exact for n = 4 at any step count:
    # y_i(2) = x_0 ... x_i 2^(i+1) / (i+1)!, and the last one's gradient is y_3(2) / x_j
    x = np.array([0.5, 0.8, -0.6, 0.9])
    y = np.cumprod(x) * 2.0 ** np.arange(1, 5) / [math.factorial(i) for i in range(1, 5)]
    np.testing.assert_allclose(_evaluate("ode", "primal", {"x": x.tolist(), "s": 3}), y, rtol=1e-12)
    np.testing.assert_allclose(_evaluate("ode", "gradient", {"x": x.tolist(), "s": 3}), y[-1] / x, rtol=1e-10)


def _lstm_loss(main, extra, state, seq):
    """ADBench's LSTM objective in scalar loops, as its C++ states it (lse keeps the + 2)."""
    sig = lambda a: 1 / (1 + math.exp(-a))  # noqa: E731
    layers, b = len(main) // 2, len(main[0]) // 4
    h = [list(state[2 * i]) for i in range(layers)]
    c = [list(state[2 * i + 1]) for i in range(layers)]
    total = 0.0
    for t in range(len(seq) - 1):
        inp = [seq[t][j] * extra[0][j] for j in range(b)]
        for i in range(layers):
            w, bias = main[2 * i], main[2 * i + 1]
            for j in range(b):
                f = sig(inp[j] * w[j] + bias[j])
                ig = sig(h[i][j] * w[b + j] + bias[b + j])
                o = sig(inp[j] * w[2 * b + j] + bias[2 * b + j])
                ch = math.tanh(h[i][j] * w[3 * b + j] + bias[3 * b + j])
                c[i][j] = c[i][j] * f + ig * ch
                h[i][j] = o * math.tanh(c[i][j])
            inp = h[i]
        y = [inp[j] * extra[1][j] + extra[2][j] for j in range(b)]
        lse = math.log(sum(math.exp(v) for v in y) + 2)
        total += sum(seq[t + 1][j] * (y[j] - lse) for j in range(b))
    return -total / ((len(seq) - 1) * b)


def test_lstm_objective_keeps_adbenchs_plus_two_and_the_jacobian_is_flat():
    rng = np.random.default_rng(7)
    inp = {
        "main_params": rng.random((4, 12)),
        "extra_params": rng.random((3, 3)),
        "state": rng.random((4, 3)),
        "sequence": rng.integers(0, 2, (4, 3)).astype(float),
    }
    js = {k: v.tolist() for k, v in inp.items()}
    assert np.isclose(
        _evaluate("lstm", "objective", js),
        _lstm_loss(inp["main_params"], inp["extra_params"], inp["state"], inp["sequence"]),
        rtol=1e-12,
    )
    jac = _evaluate("lstm", "jacobian", js)
    assert isinstance(jac, list) and all(isinstance(v, float) for v in jac) and len(jac) == 48 + 9
    params, eps, fd = np.concatenate([inp["main_params"].ravel(), inp["extra_params"].ravel()]), 1e-6, []
    for i in range(len(params)):
        vals = []
        for sign in (1, -1):
            p = params.copy()
            p[i] += sign * eps
            vals.append(_lstm_loss(p[:48].reshape(4, 12), p[48:].reshape(3, 3), inp["state"], inp["sequence"]))
        fd.append((vals[0] - vals[1]) / (2 * eps))
    np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-8)


BA_INPUT = {
    "n": 3,
    "m": 4,
    "p": 20,
    "cam": [0.1, -0.05, 0.02, 0.1, 0.2, 0.0, 1.0, 0.01, -0.01, 1e-3, 1e-4],
    "x": [0.3, -0.2, 9.0],
    "w": 0.9,
    "feat": [0.05, -0.05],
}


def _ba_residual(params):
    """One observation's two residuals from SciPy's rotation: params are a camera (11), a point
    (3) and a weight."""
    rotation = pytest.importorskip("scipy.spatial.transform").Rotation
    cam, X, w = params[:11], params[11:14], params[14]
    Xc = rotation.from_rotvec(cam[:3]).apply(X - cam[3:6])
    proj = Xc[:2] / Xc[2]
    rsq = proj @ proj
    return w * (proj * (1 + cam[9] * rsq + cam[10] * rsq**2) * cam[6] + cam[7:9] - np.array(BA_INPUT["feat"]))


def test_ba_outputs_have_the_references_shapes_and_values():
    n, m, p = BA_INPUT["n"], BA_INPUT["m"], BA_INPUT["p"]
    params = np.array(BA_INPUT["cam"] + BA_INPUT["x"] + [BA_INPUT["w"]])
    obj = _evaluate("ba", "objective", BA_INPUT)
    assert obj["reproj_error"]["repeated"] == p and obj["w_err"]["repeated"] == p
    assert type(obj["reproj_error"]["repeated"]) is int and type(obj["w_err"]["repeated"]) is int
    np.testing.assert_allclose(obj["reproj_error"]["elements"], _ba_residual(params), rtol=1e-12)
    assert np.isclose(obj["w_err"]["element"], 1 - 0.9**2)
    jac = _evaluate("ba", "jacobian", BA_INPUT)
    assert all(len(v) == 31 for v in jac.values())
    assert jac["rows"] == [15 * i for i in range(30)] + [31 * p]  # two rows of 15 per observation, p of one
    first = list(range(11)) + [11 * n, 11 * n + 1, 11 * n + 2, 11 * n + 3 * m]
    assert jac["cols"] == first + first + [11 * n + 3 * m + p - 1]
    eps = 1e-6
    fd = np.stack(
        [(_ba_residual(params + eps * e) - _ba_residual(params - eps * e)) / (2 * eps) for e in np.eye(15)], 1
    )
    np.testing.assert_allclose(np.reshape(jac["vals"][:30], (2, 15)), fd, rtol=1e-5, atol=1e-6)
    assert np.isclose(jac["vals"][30], -2 * 0.9)


# --- GradBench's own validator, where a checkout with its built reference is given ----------------------


def _gradbench_repo():
    root = os.environ.get("GRADBENCH_REPO")
    if not root or not (Path(root) / "tools/manual/bin").is_dir():
        pytest.skip("set GRADBENCH_REPO to a GradBench checkout with tools/manual/bin built")
    sys.path.insert(0, str(Path(root) / "python/gradbench"))
    return Path(root), pytest.importorskip("gradbench.eval")


def _json(inp):
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in inp.items()}


def _validator_cases():
    rng = np.random.default_rng(8)
    x = rng.random(6).tolist()
    pts = rng.random((30, 3))
    lstm_inp = _json(lstm.inputs(5, rng, layers=2, b=4))
    return [
        ("lse", "primal", {"x": x}),
        ("lse", "gradient", {"x": x}),
        ("llsq", "primal", {"x": x, "n": 11}),
        ("llsq", "gradient", {"x": x, "n": 11}),
        ("ode", "primal", {"x": x, "s": 5}),
        ("ode", "gradient", {"x": x, "s": 5}),
        ("kmeans", "cost", {"points": pts.tolist(), "centroids": pts[-4:].tolist()}),
        ("kmeans", "dir", {"points": pts.tolist(), "centroids": pts[-4:].tolist()}),
        ("gmm", "objective", _gmm_input(rng, d=4, k=3, n=10, m=0, gamma=1.0)),
        ("gmm", "jacobian", _gmm_input(rng, d=4, k=3, n=10, m=2, gamma=0.5)),
        ("lstm", "objective", lstm_inp),
        ("lstm", "jacobian", lstm_inp),
        ("ba", "objective", BA_INPUT),
        ("ba", "jacobian", BA_INPUT),
        ("det", "primal", {"A": rng.random(25).tolist(), "ell": 5}),
        ("det", "gradient", {"A": rng.random(36).tolist(), "ell": 6}),
        ("ht", "objective", _ht_input(rng, 5, complicated=True)),
        ("ht", "jacobian", _ht_input(rng, 5, complicated=True)),
        ("ht", "objective", _ht_input(rng, 5, complicated=False)),
        ("ht", "jacobian", _ht_input(rng, 5, complicated=False)),
    ]


def test_gradbenchs_validator_accepts_every_output(monkeypatch):
    root, gb = _gradbench_repo()
    from gradbench import cpp

    monkeypatch.chdir(root)  # its validator runs tools/manual/bin/<eval> from the checkout

    def expect(module):
        return lambda function, inp: cpp.evaluate(
            tool="manual", module=module, function=function, input=inp | {"min_runs": 1, "min_seconds": 0}
        )

    for module, function, inp in _validator_cases():
        analysis = gb.mismatch(expect(module))(function, inp, _evaluate(module, function, inp))
        assert analysis.valid, (module, function, analysis.error)


# --- det, ht, particle and saddle --------------------------------------------------------------------------


def test_det_small_cases_by_hand_and_the_cofactors():
    a, b, c, d = 0.3, -1.2, 2.5, 0.7
    assert np.isclose(_evaluate("det", "primal", {"A": [a, b, c, d], "ell": 2}), a * d - b * c, rtol=1e-15)
    np.testing.assert_allclose(_evaluate("det", "gradient", {"A": [a, b, c, d], "ell": 2}), [d, -c, -b, a])
    m = np.array([[2.0, -1.0, 0.5], [1.0, 3.0, -2.0], [0.25, 4.0, 1.0]])
    sarrus = sum(
        m[0, j] * m[1, (j + 1) % 3] * m[2, (j + 2) % 3] - m[0, j] * m[1, (j + 2) % 3] * m[2, (j + 1) % 3]
        for j in range(3)
    )
    assert np.isclose(_evaluate("det", "primal", {"A": m.ravel().tolist(), "ell": 3}), sarrus, rtol=1e-14)
    assert _evaluate("det", "primal", {"A": [1.5], "ell": 1}) == 1.5
    A = np.random.default_rng(9).random((6, 6))
    inp = {"A": A.ravel().tolist(), "ell": 6}
    value = np.linalg.det(A)
    assert np.isclose(_evaluate("det", "primal", inp), value, rtol=1e-12)
    grad = _evaluate("det", "gradient", inp)
    assert isinstance(grad, list) and len(grad) == 36
    np.testing.assert_allclose(grad, (value * np.linalg.inv(A).T).ravel(), rtol=1e-9, atol=1e-12)


def _random_transform(rng):
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    t = np.eye(4)
    t[:3, :3], t[:3, 3] = q, rng.normal(size=3)
    return t


# ADBench's hand: the wrist, four bones for each finger in a chain from the wrist, the forearm
HAND_PARENTS = [-1, 0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11, 0, 13, 14, 15, 0, 17, 18, 19, 0]


def _ht_input(rng, npts, complicated, n_verts=30, mirrored=False):
    """A random hand of GradBench's shape: its 22 bones' hierarchy with random transforms,
    skinning weights summing to one, triangles over the vertices, random points."""
    n_bones, n_tri = 22, 12
    weights = rng.random((n_verts, n_bones)) * (rng.random((n_verts, n_bones)) < 0.3)
    weights[:, 0] += 0.1
    model = {
        "bone_count": n_bones,
        "bone_names": [f"b{i}" for i in range(n_bones)],
        "parents": HAND_PARENTS,
        "base_relatives": [_random_transform(rng).tolist() for _ in range(n_bones)],
        "inverse_base_absolutes": [_random_transform(rng).tolist() for _ in range(n_bones)],
        "base_positions": np.c_[rng.normal(size=(n_verts, 3)), np.ones(n_verts)].tolist(),
        "weights": (weights / weights.sum(1, keepdims=True)).tolist(),
        "triangles": rng.integers(0, n_verts, (n_tri, 3)).tolist(),
        "is_mirrored": mirrored,
    }
    corr = rng.integers(0, n_tri if complicated else n_verts, npts)
    return {
        "theta": (0.4 * rng.normal(size=26)).tolist(),
        "us": (0.5 * rng.random((npts, 2))).tolist() if complicated else [],
        "data": {"model": model, "correspondences": corr.tolist(), "points": rng.normal(size=(npts, 3)).tolist()},
    }


def _ht_residuals(inp):
    """GradBench's ht in loops after its C++ reference, with SciPy's rotations: the bones'
    Rz Ry Rx from intrinsic ZYX Euler angles, the global one from the rotation vector."""
    rotation = pytest.importorskip("scipy.spatial.transform").Rotation
    model, theta = inp["data"]["model"], np.array(inp["theta"])
    parents, n_bones = model["parents"], len(model["parents"])
    pose = np.zeros((3, n_bones + 3))  # the reference's layout: one column per row of parameters
    pose[:, 0], pose[:, 1], pose[:, 2] = theta[:3], 1.0, theta[3:6]
    i_theta, col = 6, 5
    for _ in range(5):
        for joint in range(3):
            pose[0, col], i_theta = theta[i_theta], i_theta + 1
            if joint == 0:
                pose[1, col], i_theta = theta[i_theta], i_theta + 1
            col += 1
        col += 1
    absolutes = []
    for i in range(n_bones):
        tx, tz, ty = pose[:, i + 3]
        tr = np.eye(4)
        tr[:3, :3] = rotation.from_euler("ZYX", [tz, ty, tx]).as_matrix()
        rel = np.array(model["base_relatives"][i]) @ tr
        absolutes.append(rel if parents[i] == -1 else absolutes[parents[i]] @ rel)
    base = np.array(model["base_positions"]).T
    weights = np.array(model["weights"])
    pos = np.zeros((3, base.shape[1]))
    for b in range(n_bones):
        pos += (absolutes[b] @ np.array(model["inverse_base_absolutes"][b]) @ base)[:3] * weights[:, b]
    if model["is_mirrored"]:
        pos[0] *= -1
    pos = rotation.from_rotvec(pose[:, 0]).as_matrix() @ (pos * pose[:, 1:2]) + pose[:, 2:3]
    corr, points = inp["data"]["correspondences"], np.array(inp["data"]["points"])
    out = []
    for i, c in enumerate(corr):
        if inp["us"]:
            (u0, u1), t = inp["us"][i], model["triangles"][c]
            out.append(points[i] - (u0 * pos[:, t[0]] + u1 * pos[:, t[1]] + (1 - u0 - u1) * pos[:, t[2]]))
        else:
            out.append(points[i] - pos[:, c])
    return np.concatenate(out)


@pytest.mark.parametrize("complicated", [False, True])
def test_ht_residuals_and_jacobian(complicated):
    inp = _ht_input(np.random.default_rng(10), npts=7, complicated=complicated, mirrored=complicated)
    obj = _evaluate("ht", "objective", inp)
    assert isinstance(obj, list) and len(obj) == 21
    np.testing.assert_allclose(obj, _ht_residuals(inp), rtol=1e-10, atol=1e-12)
    jac = np.array(_evaluate("ht", "jacobian", inp))
    assert jac.shape == (21, 28 if complicated else 26)
    eps, cols = 1e-6, []
    if complicated:  # a residual depends on its own point's u only: moving every u0 at once gives its column
        us = np.array(inp["us"])
        for k in range(2):
            step = np.zeros_like(us)
            step[:, k] = eps
            plus, minus = (dict(inp, us=(us + s * step).tolist()) for s in (1, -1))
            cols.append((_ht_residuals(plus) - _ht_residuals(minus)) / (2 * eps))
    theta = np.array(inp["theta"])
    for j in range(26):
        plus, minus = (dict(inp, theta=(theta + s * eps * np.eye(26)[j]).tolist()) for s in (1, -1))
        cols.append((_ht_residuals(plus) - _ht_residuals(minus)) / (2 * eps))
    np.testing.assert_allclose(jac, np.stack(cols, 1), rtol=1e-5, atol=1e-7)


def _plain_descent(f, g, x):
    """GradBench's gd.hpp in floats, for one dimension."""
    fx, gx, i, eta = f(x), g(x), 0, 1e-5
    while abs(gx) > 1e-5:
        if i == 10:
            eta, i = eta * 2, 0
            continue
        xp = x - eta * gx
        if abs(x - xp) <= 1e-5:
            break
        if f(xp) < fx:
            x, fx, gx, i = xp, f(xp), g(xp), i + 1
        else:
            eta, i = eta / 2, 0
    return x


def test_descent_is_gradbenchs_solver():
    f = lambda x: (x - 3.0) ** 2 + 0.5 * (x - 3.0) ** 4  # noqa: E731
    g = lambda x: 2 * (x - 3.0) + 2 * (x - 3.0) ** 3  # noqa: E731
    got = nested.argmin(lambda t: f(t).sum(), g, ngrad.tensor([0.0], dtype=ngrad.float64))
    assert got.item() == _plain_descent(f, g, 0.0)


@pytest.mark.parametrize("variant", ["ff", "fr", "rf", "rr"])
def test_nested_derivatives_in_every_mode(variant):
    # o(w) = sum of d/dx sum((x - w)^3) at x = 2w = 3 sum(w^2): its gradient 6w needs the inner
    # derivative differentiated again in w, through both x and w
    outer, inner = nested._modes(variant)

    def o(w):
        return inner(lambda x: ((x - w) ** 3).sum(), 2 * w).sum()

    w = ngrad.tensor([0.5, -1.25], dtype=ngrad.float64)
    np.testing.assert_allclose(outer(o)(w).numpy(), 6 * w.numpy(), rtol=1e-12)


def test_particle_flight_is_gradbenchs():
    # Euler steps in plain floats with the potential's gradient by hand: 353 steps, x_0(t_f)^2
    x, xdot, dt = np.array([0.0, 8.0]), np.array([0.75, 0.0]), 0.1
    charges = np.array([[10.0, 10.0], [10.0, 0.0]])
    while True:
        d = x - charges
        force = (d / (d * d).sum(1, keepdims=True) ** 1.5).sum(0)  # -grad p
        if x[1] + dt * xdot[1] <= 0:
            break
        x, xdot = x + dt * xdot, xdot + dt * force
    expected = (x[0] - x[1] / xdot[1] * xdot[0]) ** 2
    with ngrad.no_grad():
        got = nested.miss(ngrad.tensor([0.0], dtype=ngrad.float64), nested._reverse).item()
    assert np.isclose(got, expected, rtol=1e-12)


# --- benchmarks/gradbench.py: the score script's relay and arithmetic ---------------------------------------


def _score_script():
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "gradbench.py"
    spec = importlib.util.spec_from_file_location("gradbench_score_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _timings(*ms):
    return [{"name": "evaluate", "nanoseconds": int(m * 1e6)} for m in ms] + [{"name": "other", "nanoseconds": 9}]


def test_score_script_arithmetic_on_canned_messages():
    s = _score_script()
    define = ({"id": 1, "kind": "define", "module": "m"}, {"id": 1, "success": True})

    def evaluate(i, *ms, success=True):
        msg = {"id": i, "kind": "evaluate", "module": "m", "function": "f", "input": 0, "description": f"w{i}"}
        if not success:
            return msg, {"id": i, "success": False, "error": "boom"}
        return msg, {"id": i, "success": True, "output": 0, "timings": _timings(*ms)}

    def analysis(i, of, valid):
        return {"id": i, "kind": "analysis", "of": of, "valid": valid, "error": None if valid else "Expected 1"}, {
            "id": i
        }

    # per workload the mean of its evaluate timings (the first run included, other names not), summed
    ex = [define, evaluate(2, 30, 10, 20), analysis(3, 2, True), evaluate(4, 5), analysis(5, 4, False)]
    r = s.summarize(ex)
    assert math.isclose(r["score_ms"], 20 + 5) and (r["valid"], r["invalid"], r["failed"]) == (1, 1, 0)
    assert r["outcome"] == "invalid" and r["workloads"][1]["error"] == "Expected 1"
    assert r["workloads"][0]["runs"] == [30_000_000, 10_000_000, 20_000_000]
    # GradBench's order of outcomes: a failed evaluate before an invalid one, undefined first
    assert s.summarize([*ex, evaluate(6, success=False)])["outcome"] == "failure"
    assert (
        s.summarize([({"id": 1, "kind": "define", "module": "m"}, {"id": 1, "success": False})])["outcome"]
        == "undefined"
    )
    assert s.summarize([define, evaluate(2, 1), (evaluate(3)[0], None)], ended="timeout")["outcome"] == "timeout"
    assert s.summarize([define, evaluate(2, 4, 4), analysis(3, 2, True)]) | {"workloads": None} == {
        "outcome": "success", "ended": None, "score_ms": 4.0, "workloads": None, "valid": 1, "invalid": 0, "failed": 0,
    }  # fmt: skip


def test_score_script_rejects_what_gradbenchs_intermediary_rejects():
    s = _score_script()
    ev = {"id": 2, "kind": "evaluate", "module": "m", "function": "f", "input": 0}
    s.check_response(ev, {"id": 2, "success": True, "output": 1, "timings": _timings(1)})
    s.check_response({"id": 0, "kind": "start"}, {"id": 0})
    for bad in (
        {"id": 2, "output": 1},  # no success
        {"id": 2, "success": True},  # success without output
        {"id": 2, "success": True, "output": 1, "error": "x"},
        {"id": 3, "success": True, "output": 1},  # another id
        {"id": True, "success": True, "output": 1},
        {"id": 2, "success": True, "output": 1, "timings": [{"name": "evaluate", "nanoseconds": 1.5}]},
    ):
        with pytest.raises(s.ProtocolError):
            s.check_response(ev, bad)


_FAKE_EVAL = """
import json, sys
for m in ({"id": 0, "kind": "start"}, {"id": 1, "kind": "define", "module": "m"},
          {"id": 2, "kind": "evaluate", "module": "m", "function": "f", "input": 2}):
    print(json.dumps(m), flush=True)
    r = json.loads(sys.stdin.readline())
    if m["kind"] == "evaluate":
        print(json.dumps({"id": 3, "kind": "analysis", "of": 2, "valid": r["output"] == 4}), flush=True)
        sys.stdin.readline()
"""


_FAKE_TOOL = """
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    r = {"id": m["id"]}
    if MODE == "silent":
        continue
    if MODE == "answers" and m["kind"] == "define":
        r["success"] = True
    if MODE == "answers" and m["kind"] == "evaluate":
        r.update(success=True, output=2 * m["input"], timings=[{"name": "evaluate", "nanoseconds": 7000000}])
    print(json.dumps(r), flush=True)
"""


@pytest.mark.parametrize("mode", ["answers", "silent", "no success"])
def test_score_script_relay_outcomes(tmp_path, mode):
    s = _score_script()
    (tmp_path / "tool.py").write_text(f"MODE = {mode!r}\n" + _FAKE_TOOL)
    (tmp_path / "eval.py").write_text(_FAKE_EVAL)
    r = s.relay([sys.executable, "eval.py"], [sys.executable, "tool.py"], cwd=tmp_path, timeout=2)
    expected = {"answers": "success", "silent": "timeout", "no success": "error"}[mode]
    assert r["outcome"] == expected, r
    if mode == "answers":
        assert r["score_ms"] == 7.0 and r["valid"] == 1


def test_score_script_relays_hello_to_ngrad():
    root = os.environ.get("GRADBENCH_REPO")
    if not root:
        pytest.skip("set GRADBENCH_REPO to a GradBench checkout (and GRADBENCH_PYTHON to a Python with pydantic)")
    python = os.environ.get("GRADBENCH_PYTHON", sys.executable)
    if subprocess.run([python, "-c", "import pydantic, numpy"], capture_output=True).returncode:
        pytest.skip(f"{python} lacks what GradBench's evals import (pydantic): set GRADBENCH_PYTHON")
    s = _score_script()
    root = Path(root).resolve()
    s.build_reference(root, ["hello"], progress=lambda _: None)
    r = s.relay(
        s.eval_command(root, "hello", python),
        s.tool_command("ngrad", sys.executable),
        cwd=root,
        eval_env=s.environment(root, 1),
        tool_env=s.environment(root, 1),
        timeout=300,
    )
    assert r["outcome"] == "success", r
    assert len(r["workloads"]) == r["valid"] > 0 and r["score_ms"] > 0
