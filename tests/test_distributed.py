"""ngrad.distributed on a LocalCluster of two worker processes: the distributed value and
gradient equal one process's (and NumPy's), optimizers and SciPy reach the same answer, a
worker killed mid-run changes nothing, and bad input fails on the client with a clear error.

The workers interpret tapes (NGRAD_JIT=never, like the rest of the semantics tests) except in
the one test of compiled kernels, which starts its own one-worker cluster."""

import os
import runpy
import signal
from pathlib import Path

import numpy as np
import pytest

import ngrad

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
nd = ngrad.distributed

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TRACES = []  # appended to each time a worker traces the compiled fit of test_map (a worker's own list)


@pytest.fixture(scope="module")
def client():
    c = nd.local_cluster(2, env={"NGRAD_JIT": "never"}, memory_limit="1GiB")
    yield c
    c.close()
    c.cluster.close()


def logistic(w, X, y):
    """The logistic regression loss of one chunk: sum of softplus(x.w) - y x.w."""
    z = X @ w
    return (ngrad.nn.functional.softplus(z) - y * z).sum()


def logistic_numpy(w, X, y):
    z = X @ w
    p = 1 / (1 + np.exp(-z))
    return np.sum(np.logaddexp(0, z) - y * z), X.T @ (p - y)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(1003, 4))
    y = (rng.random(1003) < 1 / (1 + np.exp(-X @ np.array([1.0, -2.0, 0.5, 0.0])))).astype(np.float64)
    return X, y


def reference(f, w, *arrays):
    """One process: value and gradient of ``f`` over the whole data."""
    wt = ngrad.tensor(w, dtype=ngrad.float64, requires_grad=True)
    loss = f(wt, *[ngrad.tensor(a) for a in arrays])
    loss.backward()
    return loss.item(), wt.grad.numpy()


def test_value_and_gradient_equal_one_process_for_arrays_frames_and_delayed_chunks(client, problem):
    X, y = problem
    w = np.array([0.3, -0.1, 0.2, 0.05])
    value, grad = reference(logistic, w, X, y)
    v_np, g_np = logistic_numpy(w, X, y)  # an independent oracle
    np.testing.assert_allclose([value, *grad], [v_np, *g_np], rtol=1e-12)
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    frame = dd.from_pandas(pd.DataFrame(np.column_stack([X, y])), npartitions=3)
    part = dask.delayed(lambda a, b: (a, b))
    datas = {
        "arrays": ((da.from_array(X, chunks=(250, 2)), da.from_array(y, chunks=250)), logistic),
        "frame": (frame, lambda w, Z: logistic(w, Z[:, :4], Z[:, 4])),
        "delayed": ([part(X[i : i + 400], y[i : i + 400]) for i in range(0, 1003, 400)], logistic),
    }
    for name, (data, f) in datas.items():
        objective = nd.Objective(f, data, client=client, split_every=2)
        assert objective.rows == 1003, name
        v, g = objective.value_and_grad(ngrad.tensor(w, dtype=ngrad.float64))
        np.testing.assert_allclose(v.item(), value, rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(g.numpy(), grad, rtol=1e-12, err_msg=name)
        objective.close()


def test_every_worker_prepares_each_program_once(client, problem):
    X, y = problem
    objective = nd.Objective(logistic, (da.from_array(X, chunks=200), da.from_array(y, chunks=200)), client=client)
    w = ngrad.zeros(4, dtype=ngrad.float64)
    for _ in range(3):
        objective.value_and_grad(w)
    digests = {f.key.removeprefix("ngrad-program-") for f in objective._programs.values()}
    assert len(digests) == 2  # row blocks of 200 and the last one of 3
    counts = client.run(lambda: dict(__import__("ngrad").distributed.program.compiles))
    for per_worker in counts.values():
        assert all(per_worker.get(d, 0) <= 1 for d in digests)
    assert sum(per_worker.get(d, 0) for per_worker in counts.values() for d in digests) >= 2
    objective.close()


def test_optimizer_steps_follow_the_full_batch_steps(client, problem):
    X, y = problem
    objective = nd.Objective(logistic, (da.from_array(X, chunks=300), da.from_array(y, chunks=300)), client=client)
    Xt, yt = ngrad.tensor(X), ngrad.tensor(y)
    w_dist = ngrad.zeros(4, dtype=ngrad.float64, requires_grad=True)
    w_one = ngrad.zeros(4, dtype=ngrad.float64, requires_grad=True)
    for w, loss_of in ((w_dist, objective), (w_one, lambda w: logistic(w, Xt, yt))):
        opt = ngrad.optim.Adam([w], lr=0.05)
        for _ in range(4):
            opt.zero_grad()
            loss_of(w / 1003).backward()  # composes with other ops: the gradient flows through
            opt.step()
    np.testing.assert_allclose(w_dist.detach().numpy(), w_one.detach().numpy(), rtol=1e-12)
    mixed = nd.Objective(lambda w, X, y: logistic(w.double(), X, y), objective.parts, client=client)
    m = ngrad.zeros(4, requires_grad=True)  # float32 parameters of a float64 objective
    mixed(m).backward()
    assert m.grad.dtype == ngrad.float32
    np.testing.assert_allclose(m.grad.numpy(), logistic_numpy(np.zeros(4), X, y)[1], rtol=1e-6)
    objective.close()


def _kill_one_worker(client, holding):
    """SIGKILL the process of a worker that holds one of the futures ``holding``."""
    who = client.who_has(holding)
    victim = next(iter(w for ws in who.values() for w in ws))
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)


def test_minimize_converges_to_the_one_process_answer_even_when_a_worker_dies_mid_run(client, problem):
    X, y = problem
    Xt, yt = ngrad.tensor(X), ngrad.tensor(y)
    expected = ngrad.scipy.minimize(
        lambda w: logistic(w, Xt, yt), ngrad.zeros(4, dtype=ngrad.float64), method="L-BFGS-B"
    )
    objective = nd.Objective(logistic, (da.from_array(X, chunks=250), da.from_array(y, chunks=250)), client=client)
    client.wait_for_workers(2)
    iterates = []

    def kill_at_the_third_iterate(x):
        iterates.append(x)
        if len(iterates) == 3:
            _kill_one_worker(client, objective.parts)  # chunks lost with it are rebuilt from their graph

    res = ngrad.scipy.minimize(
        objective, ngrad.zeros(4, dtype=ngrad.float64), method="L-BFGS-B", callback=kill_at_the_third_iterate
    )
    assert res.success and len(iterates) >= 3
    # the same answer: where the chunks live (before and after the kill) only changes the order
    # of the additions, a rounding difference the L-BFGS path carries no further than this
    np.testing.assert_allclose(res.x.numpy(), expected.x.numpy(), rtol=1e-8)
    _, g = logistic_numpy(res.x.numpy(), X, y)
    assert np.abs(g).max() < 1e-3  # stationary, by NumPy's gradient
    objective.close()


def test_chunks_whose_holder_is_gone_run_on_any_worker(client, problem, monkeypatch):
    # between a worker's death and the scheduler noticing, who_has names no holder for its
    # chunks: their task goes wherever Dask puts it (Dask refuses allow_other_workers alone)
    X, y = problem
    objective = nd.Objective(logistic, (da.from_array(X, chunks=250), da.from_array(y, chunks=250)), client=client)
    client.wait_for_workers(2)
    everything = [i for _, group in objective._groups() for i in group]
    monkeypatch.setattr(objective, "_groups", lambda: iter([(None, everything)]))
    w = np.array([0.5, 0.1, -0.3, 0.2])
    value, grad = reference(logistic, w, X, y)
    result = objective.submit(ngrad.tensor(w, dtype=ngrad.float64)).result()
    np.testing.assert_allclose([result[0], *result[1]], [value, *grad], rtol=1e-12)
    objective.close()


def test_a_worker_killed_while_a_step_runs_gives_the_same_result(client, problem, monkeypatch):
    monkeypatch.setattr(nd.objective, "INLINE_BYTES", 0)  # the parameters as a task of their own
    X, y = problem
    objective = nd.Objective(logistic, (da.from_array(X, chunks=100), da.from_array(y, chunks=100)), client=client)
    client.wait_for_workers(2)
    w = np.array([0.5, 0.1, -0.3, 0.2])
    value, grad = reference(logistic, w, X, y)
    future = objective.submit(ngrad.tensor(w, dtype=ngrad.float64))
    _kill_one_worker(client, objective.parts)
    result = future.result()
    np.testing.assert_allclose([result[0], *result[1]], [value, *grad], rtol=1e-12)
    objective.close()
    client.wait_for_workers(2)


def test_bad_input_fails_on_the_client_with_a_clear_error(client, problem):
    X, y = problem
    w = ngrad.zeros(4, dtype=ngrad.float64)
    with pytest.raises(ValueError, match="mismatched chunk shapes"):
        nd.Objective(logistic, (da.from_array(X, chunks=300), da.from_array(y, chunks=250)), client=client)
    part = dask.delayed(lambda n, k: np.ones((n, k)))
    with pytest.raises(ValueError, match=r"mismatched chunk shapes: array 0 of chunk 1 is float64\[5, 3\]"):
        nd.Objective(lambda w, x: x.sum(), [part(4, 4), part(5, 3)], client=client)
    with pytest.raises(ValueError, match="the arrays of chunk 0 must have the same number of rows"):
        nd.Objective(logistic, [dask.delayed((X[:10], y[:9]))], client=client)
    with pytest.raises(TypeError, match="data must be a dask array"):
        nd.Objective(logistic, (X, y), client=client)
    objective = nd.Objective(lambda w, X, y: X @ w, (da.from_array(X, chunks=500), da.from_array(y, chunks=500)))
    with pytest.raises(RuntimeError, match="Expected f\\(\\*args\\) to return a scalar Tensor, got tensor with 1 dims"):
        objective(w)
    with pytest.raises(ngrad.TraceError, match="value of a tensor"):
        nd.Objective(lambda w, X, y: w.sum() if (X > 0).any().item() else w.sum(), objective.parts, client=client)(w)
    b = ngrad.zeros(1, dtype=ngrad.float64, requires_grad=True)
    with pytest.raises(ValueError, match="requires grad but is not one of its parameters"):
        nd.Objective(lambda w, X, y: logistic(w, X, y) + b.sum(), objective.parts, client=client)(w)
    with pytest.raises(TypeError, match="parameters must be a tensor"):
        objective([1.0, 2.0])
    objective.close()


def fit(target):
    """A module-level function: it travels by reference, so TRACES is the worker's module's."""
    TRACES.append(1)  # runs only while a worker traces
    return ((target - 1.0) ** 2).sum() * 2


def test_map_returns_results_in_order_and_compiles_once_per_worker(client):
    compiled = ngrad.compile(fit)
    targets = [ngrad.full((3,), float(i), dtype=ngrad.float64) for i in range(12)]
    results = nd.map(compiled, targets, client=client, progress=True)
    assert [r.item() for r in results] == [6.0 * (i - 1.0) ** 2 for i in range(12)]
    traces = client.run(lambda: len(__import__("tests.test_distributed").test_distributed.TRACES))
    assert all(n <= 1 for n in traces.values()) and sum(traces.values()) >= 1
    address = client.scheduler.address  # a scheduler address works as well as a client
    assert nd.map(lambda a, b: a - b, [5, 7], [1, 2], client=address, progress=False) == [4, 5]

    def fails(i):
        if i == 3:
            raise ArithmeticError("call 3 fails")
        return i

    with pytest.raises(ArithmeticError, match="call 3 fails"):
        nd.map(fails, range(6), client=client)


def test_the_example_fits_over_a_dask_array_larger_than_any_chunk(client):
    mod = runpy.run_path(str(EXAMPLES / "distributed_logistic.py"))
    theta, truth, accuracy, chunks = mod["fit"](client, n=20_000, chunk=4_000)
    assert chunks == 5
    np.testing.assert_allclose(theta, truth, atol=0.15)
    assert accuracy > 0.6


@pytest.mark.numba
def test_compiled_kernels_are_made_once_and_a_restarted_worker_loads_them_from_the_shared_cache(problem, tmp_path):
    X, y = problem
    w = np.array([0.2, 0.4, -0.1, 0.3])
    v_np, g_np = logistic_numpy(w, X, y)
    cache = tmp_path / "kernels"
    env = {"NGRAD_JIT": "always", "NGRAD_CACHE_DIR": str(cache)}
    with nd.local_cluster(1, env=env) as client:
        objective = nd.Objective(logistic, (da.from_array(X, chunks=600), da.from_array(y, chunks=600)), client=client)
        for _ in range(2):
            v, g = objective.value_and_grad(ngrad.tensor(w, dtype=ngrad.float64))
            np.testing.assert_allclose([v.item(), *g.numpy()], [v_np, *g_np], rtol=1e-12)
        (counts,) = client.run(lambda: dict(__import__("ngrad").distributed.program.compiles)).values()
        assert sorted(counts.values()) == [1, 1]  # two chunk shapes (600 and 403 rows), prepared once each
        files = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
        assert any(p.suffix == ".o" for p in files)  # the kernels' machine code is on disk
        _kill_one_worker(client, objective.parts)  # its replacement's kernels come from the disk cache
        client.wait_for_workers(1)
        v, g = objective.value_and_grad(ngrad.tensor(w, dtype=ngrad.float64))
        np.testing.assert_allclose([v.item(), *g.numpy()], [v_np, *g_np], rtol=1e-12)
        assert {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()} == files  # nothing compiled again
        objective.close()
        client.cluster.close()
