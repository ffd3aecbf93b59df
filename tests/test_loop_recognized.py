"""Graphs recognized without a scan: a realization whose graph has the structure of one realized
before is matched against it (``realize._Known``) instead of being scanned and keyed. Whatever
changes between two graphs (their structure, which sources they share, which values are still
held, literals, params, in-place writes through views), the values are those of a NumPy model of
the same loop, and of PyTorch where it is installed."""

import math

import numpy as np
import pytest

import ngrad
from ngrad.engine.runtime import realize as realize_mod


@pytest.fixture(params=["walked", "written"], autouse=True)
def matcher(request, monkeypatch):
    """Every test twice: graphs matched by ``_Known.walk``, and by the code written for their
    structure (``realize._written``) from their second match on."""
    monkeypatch.setattr(realize_mod, "_WRITE_AFTER", 10**9 if request.param == "walked" else 1)
    monkeypatch.setattr(realize_mod, "_seen", type(realize_mod._seen)())  # structures known before: not written
    return request.param


@pytest.fixture
def scans(monkeypatch):
    """The number of graphs scanned (not recognized) since the test began."""
    count = [0]
    scan = realize_mod._scan

    def counted(roots):
        count[0] += 1
        return scan(roots)

    monkeypatch.setattr(realize_mod, "_scan", counted)
    return count


def test_a_loop_of_one_structure_is_scanned_only_until_it_is_known(scans):
    xs = np.linspace(-1.0, 1.0, 7)
    x, s, want = ngrad.tensor(xs), ngrad.zeros(7, dtype=ngrad.float64), np.zeros(7)
    for k in range(6):
        s = s * 0.5 + x * float(k)  # runtime scalars: one structure every iteration
        want = want * 0.5 + xs * float(k)
        np.testing.assert_allclose(s.numpy(), want, rtol=1e-15)
    assert scans[0] <= 2


def test_structures_that_start_alike_are_told_apart(scans):
    # one first root (a sum of a 3x3 matrix to shape (3,)) over other axes, other ops, other
    # sharing: each realization gets its own structure's values, never a matched neighbour's
    m = np.arange(9.0).reshape(3, 3) - 4.0
    t, u = ngrad.tensor(m), ngrad.tensor(m * 2.0)
    for _ in range(3):  # four structures with one first root are known at once
        np.testing.assert_allclose((t * 1.5).sum(0).numpy(), (m * 1.5).sum(0), rtol=1e-15)
        np.testing.assert_allclose((t * 1.5).sum(1).numpy(), (m * 1.5).sum(1), rtol=1e-15)
        np.testing.assert_allclose((t * t).sum(0).numpy(), (m * m).sum(0), rtol=1e-15)
        np.testing.assert_allclose((t * u).sum(0).numpy(), (m * m * 2.0).sum(0), rtol=1e-15)
    for _ in range(3):
        v = t + 1.0  # one pending node read twice, then two equal ones read once each
        np.testing.assert_allclose((v * v).sum(0).numpy(), ((m + 1.0) ** 2).sum(0), rtol=1e-15)
        np.testing.assert_allclose(((t + 1.0) * (t + 2.0)).sum(0).numpy(), ((m + 1) * (m + 2)).sum(0), rtol=1e-15)
        np.testing.assert_allclose((t**2).sum(0).numpy(), (m**2).sum(0), rtol=1e-15)
        np.testing.assert_allclose((t**3).sum(0).numpy(), (m**3).sum(0), rtol=1e-15)
    assert scans[0] == 8  # each structure scanned once, then matched


def test_a_source_realized_in_between_changes_the_structure(monkeypatch):
    ran = []
    run = realize_mod.run
    monkeypatch.setattr(realize_mod, "run", lambda tape, values, target: ran.append(tape) or run(tape, values, target))
    xs = np.linspace(0.0, 1.0, 5)
    x = ngrad.tensor(xs, requires_grad=True)  # a realized y keeps its history (for backward)
    for k in range(6):
        y = x * float(k + 1)
        if k % 2:
            y.detach().numpy()  # now a value: the next graph reads it where the last computed it
        with ngrad.no_grad():
            got = (y + 1.0).sum().item()
        np.testing.assert_allclose(got, (xs * (k + 1) + 1.0).sum(), rtol=1e-14)
        assert ("mul" in [i.prim for i in ran[-1].instrs]) == (k % 2 == 0)


def test_the_values_still_held_are_kept_as_they_change():
    # a loop that holds an intermediate in some iterations only: each read realizes what is held
    # then, and only that (a held tensor left pending would be computed again from its history)
    xs = np.linspace(-1.0, 1.0, 6)
    x, a, want = ngrad.tensor(xs), ngrad.tensor(0.5, dtype=ngrad.float64), 0.5
    kept = []
    for k in range(8):
        h = a * x + 1.0
        if k % 3 == 0:
            kept.append((h, want * xs + 1.0))
        got = (h * h).sum().item()
        np.testing.assert_allclose(got, ((want * xs + 1.0) ** 2).sum(), rtol=1e-14)
        assert h._node.value is not None  # held by ``h`` while the read ran: realized with it
        a = a - 0.01 * (h * x).sum()
        want = want - 0.01 * ((want * xs + 1.0) * xs).sum()
        del h
    for t, w in kept:
        np.testing.assert_allclose(t.numpy(), w, rtol=1e-14)


def test_in_place_writes_through_views_in_a_matched_loop():
    base_np = np.linspace(1.0, 2.0, 8)
    base = ngrad.tensor(base_np)
    for k in range(6):
        lo = k % 2  # two alternating slices: two structures, each matched from its second time
        view = base[lo : lo + 4]
        view.mul_(0.5)
        base_np[lo : lo + 4] *= 0.5
        view += 1.0
        base_np[lo : lo + 4] += 1.0
        np.testing.assert_allclose(base.sum().item(), base_np.sum(), rtol=1e-14)
        np.testing.assert_allclose(view.numpy(), base_np[lo : lo + 4], rtol=1e-14)
    assert base._version == 12


def test_params_are_compared_as_the_structural_key_compares_them():
    same = realize_mod._same_params
    key = realize_mod.params_key
    for p, q in [
        ({"value": -0.0, "dtype": "f64"}, {"value": 0.0, "dtype": "f64"}),
        ({"value": True, "dtype": "f64"}, {"value": 1, "dtype": "f64"}),
        ({"value": 1.0, "dtype": "f64"}, {"value": 1, "dtype": "f64"}),
        ({"axes": (True,), "keepdim": False}, {"axes": (1,), "keepdim": False}),
        ({"axes": (0,), "keepdim": False}, {"axes": (0,), "keepdim": 0}),
        ({"axes": (0,)}, {"axes": (0,), "keepdim": False}),
        ({"value": float("nan"), "dtype": "f64"}, {"value": 2.0, "dtype": "f64"}),
    ]:
        assert key(p) != key(q)
        assert not same(p, realize_mod._params_kept(q), key(q)) and not same(q, realize_mod._params_kept(p), key(p))
    for p in [{"value": -0.0, "dtype": "f32"}, {"axes": (0, 2), "keepdim": True}, {"perm": (1, 0)}]:
        assert same(dict(p), realize_mod._params_kept(p), key(p))
    floats = {"pad": (0.0, -0.0)}  # compared by their key: (0.0, -0.0) == (-0.0, 0.0)
    assert realize_mod._params_kept(floats) is realize_mod._KEYED
    assert same({"pad": (0.0, -0.0)}, realize_mod._KEYED, key(floats))
    assert not same({"pad": (-0.0, 0.0)}, realize_mod._KEYED, key(floats))
    assert same(None, None, ()) and not same(None, None, key({"shape": (1,)}))
    assert not same({"shape": (1,)}, None, ())


def test_the_literal_of_a_matched_graph_is_its_own():
    xs = np.linspace(-1.0, 1.0, 5)
    x = ngrad.tensor(xs)
    for _ in range(2):
        for p in (2, 3, -0.0, 0.0, 2.5):
            np.testing.assert_allclose((x**p * 1.0).sum().item(), (xs**p).sum(), rtol=1e-14)


def _poly(lib, steps):
    x = lib.linspace(-math.pi, math.pi, 200, dtype=lib.float64)
    y = lib.sin(x)
    a, b, c, d = (lib.tensor(v, dtype=lib.float64) for v in (0.1, -0.2, 0.3, -0.05))
    losses = []
    for t in range(steps):
        y_pred = a + b * x + c * x**2 + d * x**3
        losses.append((y_pred - y).pow(2).sum().item())
        grad = 2.0 * (y_pred - y)
        if t % 4 == 0:  # a held view and an in-place write through it, every fourth iteration
            head = grad[:10]
            head.mul_(0.0)
        a -= 1e-5 * grad.sum()
        b -= 1e-5 * (grad * x).sum()
        c -= 1e-5 * (grad * x**2).sum()
        d -= 1e-5 * (grad * x**3).sum()
    return losses, [float(v.item()) for v in (a, b, c, d)]


def test_a_matched_loop_with_views_agrees_with_pytorch():
    torch = pytest.importorskip("torch")
    got, want = _poly(ngrad, 24), _poly(torch, 24)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


@pytest.mark.numba
def test_a_prepared_driver_takes_numbers_and_refuses_anything_else_as_a_runtime_scalar(jit_always):
    # the driver checks its runtime scalars itself (run() no longer does it for it), so what
    # prepare() hands out refuses a str as run() does, where ``dtype.type`` would parse it
    from ngrad.engine.ir.graph import lower
    from ngrad.engine.runtime.dispatch import prepare, run

    xs = np.linspace(-1.0, 1.0, 6)
    low = lower([(ngrad.tensor(xs) * 2.5 + 1.0)._node])
    k = low.tape.kinds.index("scalar")
    values = [n.value for n in low.sources]
    drive = prepare(low.tape)
    for number in (3.0, np.float64(3.0), np.asarray(3.0), np.float32(3.0), 3):
        values[k] = number
        np.testing.assert_allclose(drive(values)[0], run(low.tape, values)[0], rtol=1e-15)
    for bad in ("2.5", [2.5], None):
        values[k] = bad
        for call in (drive, lambda v: run(low.tape, v)):
            with pytest.raises(TypeError, match="must be a scalar"):
                call(values)


def _random_actions(rng, steps, slots):
    """Random loop actions over ``slots`` tensors: ops with tensors and Python numbers,
    reductions, in-place updates of whole tensors and through slices, reads, fresh values."""
    actions = []
    for _ in range(steps):
        kind = rng.integers(7)
        i, j, k = (int(v) for v in rng.integers(slots, size=3))
        c = float(rng.choice([0.5, -1.25, 2.0]))  # runtime scalars: the structure stays
        op = str(rng.choice(["+", "-", "*"]))
        actions.append((int(kind), i, j, k, c, op, int(rng.integers(3))))
    return actions


def _apply(lib, ts, action, reads):
    kind, i, j, k, c, op, lo = action
    binary = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}[op]
    if kind == 0:
        ts[i] = binary(ts[j], ts[k])
    elif kind == 1:
        ts[i] = binary(ts[j], c) * 0.5
    elif kind == 2:
        ts[i] = ts[j] - ts[k].sum() * 0.01
    elif kind == 3:
        ts[i] += c * 0.1
    elif kind == 4:
        view = ts[i][lo : lo + 2]
        view *= 0.5  # through a view: the base sees it
    elif kind == 5:
        reads.append(float(ts[i].sum().item() if lib is not np else ts[i].sum()))
    else:
        ts[i] = lib.tensor(np.full(5, c)) if lib is not np else np.full(5, c)


def test_random_loops_agree_with_numpy_and_with_scanning(monkeypatch):
    # a pool of actions over two tensors, drawn anew each round: graphs of one structure recur
    # with other sharing (x * y, then x * x), other values held, other views written
    rng = np.random.default_rng(7)
    start = [np.linspace(-1.0, 1.0, 5) * (m + 1) for m in range(2)]
    pool = _random_actions(rng, 10, 2)
    rounds = [[pool[a] for a in rng.integers(len(pool), size=6)] for _ in range(60)]
    matched = [0]
    match = realize_mod._Known.match

    def counting(self, roots):
        at = match(self, roots)
        matched[0] += at is not None
        return at

    monkeypatch.setattr(realize_mod._Known, "match", counting)
    results = {}
    for mode in ("matched", "scanned"):
        if mode == "scanned":
            monkeypatch.setattr(realize_mod, "_seen", type(realize_mod._seen)())
            monkeypatch.setattr(realize_mod, "_remember", lambda *args: None)
        ts, model, reads, want = [ngrad.tensor(s.copy()) for s in start], [s.copy() for s in start], [], []
        for body in rounds:
            for action in body:
                _apply(ngrad, ts, action, reads)
                _apply(np, model, action, want)
            np.testing.assert_allclose(reads, want, rtol=1e-12)
        for t, m in zip(ts, model):
            np.testing.assert_allclose(t.numpy(), m, rtol=1e-12)
        results[mode] = reads
    assert matched[0] > 20, matched  # the matched path ran
    assert results["matched"] == results["scanned"]  # bit for bit: the same tapes on the same values


def _tapes_run(monkeypatch):
    ran = []
    run = realize_mod.run
    monkeypatch.setattr(realize_mod, "run", lambda tape, values, target: ran.append(tape) or run(tape, values, target))
    return ran


def test_a_known_structure_refuses_a_value_where_it_computed_a_node(monkeypatch):
    ran = _tapes_run(monkeypatch)
    xs = np.linspace(0.0, 1.0, 5)
    x = ngrad.tensor(xs, requires_grad=True)  # a realized y keeps its sources: it still looks computed
    for k in range(3):
        y = x * 2.0
        with ngrad.no_grad():
            assert (y + float(k)).sum().item() == pytest.approx((xs * 2.0 + k).sum(), rel=1e-14)
    assert "mul" in [i.prim for i in ran[-1].instrs]
    monkeypatch.setattr(realize_mod, "_remember", lambda *args: None)  # only y's pending structure is known
    y = x * 3.0
    y.detach().numpy()  # y now has a value: it is read, not computed again
    with ngrad.no_grad():
        assert (y + 1.0).sum().item() == pytest.approx((xs * 3.0 + 1.0).sum(), rel=1e-14)
    assert "mul" not in [i.prim for i in ran[-1].instrs]


def test_a_known_structure_tells_a_runtime_scalar_from_a_0d_tensor(monkeypatch):
    ran = _tapes_run(monkeypatch)
    xs = np.linspace(0.0, 1.0, 5)
    x = ngrad.tensor(xs)
    for k in range(6):
        c = 2.0 if k % 2 else ngrad.tensor(2.0, dtype=ngrad.float64)  # one shape and dtype, two kinds
        np.testing.assert_allclose((x * c).sum().item(), (xs * 2.0).sum(), rtol=1e-14)
        assert ("scalar" in ran[-1].kinds) == (k % 2 == 1)
