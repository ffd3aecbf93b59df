"""``ngrad.set_num_threads``: kernels run in chunks of rows on several threads agree with the
serial kernels and the interpreter (reductions over every axis included), and survive fork and
concurrent Python threads."""

import os
import subprocess
import sys

import numpy as np
import pytest

import ngrad
from ngrad.engine import runtime
from ngrad.engine.ir.graph import lower
from ngrad.engine.runtime import dispatch, layout, threads
from ngrad.engine.runtime.plan import CompiledPlan

N = layout.PARALLEL_MIN * 2


@pytest.fixture(autouse=True)
def _jit_always(monkeypatch, tmp_path_factory):
    # loops of PARALLEL_MIN elements are worth threads here, whatever their instruction count
    monkeypatch.setattr(layout, "PARALLEL_WORK", 1)
    monkeypatch.setenv("NGRAD_JIT", "always")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))
    yield
    ngrad.set_num_threads(1)


def _program(x, w):
    # an elementwise chain with sin/cos (range guard), a full sum, a row sum keeping axis 0
    # (each chunk writes its own rows), a column sum over axis 0 and an amax (private
    # accumulators per chunk, combined afterwards)
    y = (x.sin() * w + (x * 0.5).exp()).tanh()
    return y.sum() + y.sum(1).pow(2).sum() + y.sum(0).abs().sum() + y.amax()


def _chain(x, w):
    return (x.sin() * (-(x * x) / 2).exp() + x.tanh() * x * w).sum()


def _value_and_grad(fn, x0, w0, threads, monkeypatch, jit="always"):
    monkeypatch.setenv("NGRAD_JIT", jit)
    ngrad.set_num_threads(threads)
    x = ngrad.from_numpy(x0).requires_grad_()
    y = fn(x, ngrad.from_numpy(w0))
    y.backward()
    return y.item(), x.grad.numpy()


def _pairs(x, w):
    # three loops over (n, n, 3) and (n, n) in one function, each reading the previous by rows
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1) + 1
    return ((1 / r2) ** 3 * w[None, :]).sum() / 2


def _windows(x, w):
    # slices read through windows and their gradients read as padded arrays: along the rows
    # (no chunks: a chunk would need its neighbours' rows) and along axis 1 only (chunked)
    return (x[1:, 2:] * x[:-1, :-2]).sum() + ((x[:, ::2] - w[::2]).sin() ** 2).sum() + x[:, 1:-1].exp().sum()


@pytest.mark.parametrize("fn", [_program, _chain, _pairs, _windows])
def test_parallel_kernels_equal_serial_kernels_and_the_interpreter(fn, monkeypatch):
    rng = np.random.default_rng(0)
    if fn is _pairs:
        x0, w0 = rng.uniform(-3, 3, (120, 3)), rng.standard_normal(120)
    else:
        x0, w0 = rng.uniform(-3, 3, (N // 64, 64)), rng.standard_normal(64)
    before = len(dispatch.records)
    par = _value_and_grad(fn, x0, w0, 2, monkeypatch)
    assert any(
        c.threaded.kernels is not None and any(c.threaded.chunked)
        for c in [r.tier for r in list(dispatch.records.values())[before:] or dispatch.records.values()]
    )
    if fn is _pairs:  # one function for all its loops, run in chunks of rows
        comp = list(dispatch.records.values())[-1].tier
        assert any(c and len(src.parts) >= 3 for c, src in zip(comp.threaded.chunked, comp.threaded.sources))
    ser = _value_and_grad(fn, x0, w0, 1, monkeypatch)
    ref = _value_and_grad(fn, x0, w0, 1, monkeypatch, jit="never")
    for got in (par, ser):
        assert got[0] == pytest.approx(ref[0], rel=1e-12)
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-11, atol=1e-14)


def test_big_kernels_get_their_own_functions_when_threads_are_on():
    x = ngrad.from_numpy(np.random.default_rng(0).standard_normal((N // 64, 64)))
    tape = lower([((x.exp().sum(0) * 2).sum() + x.sin().amax())._node]).tape
    comp = CompiledPlan(tape)
    serial = [s for s in comp.serial.sources if s is not None]
    threaded = [s for s in comp.threaded.sources if s is not None]
    assert len(serial) < len(threaded) and all(
        len(s.parts) == 1 for s, c in zip(comp.threaded.sources, comp.threaded.chunked) if c
    )
    assert any(comp.threaded.chunked)


def test_a_driver_made_with_threads_off_runs_in_chunks_once_they_are_on(monkeypatch):
    x = ngrad.from_numpy(np.random.default_rng(1).uniform(-3, 3, (N // 64, 64))).requires_grad_()
    low = lower([_program(x, ngrad.ones(64))._node])
    values = [n.value for n in low.sources]
    run = runtime.prepare(low.tape)  # threads off: the serial driver
    serial = run(values)
    chunks = []
    real = threads.run_chunked
    monkeypatch.setattr(threads, "run_chunked", lambda *a: chunks.append(1) or real(*a))
    ngrad.set_num_threads(2)
    parallel = run(values)
    assert chunks
    ngrad.set_num_threads(1)
    count = len(chunks)
    again = run(values)
    assert len(chunks) == count  # serial again
    for p, s, a in zip(parallel, serial, again, strict=True):
        np.testing.assert_allclose(p, s, rtol=1e-12)
        np.testing.assert_array_equal(a, s)


def test_loops_with_little_work_stay_serial_in_the_driver(monkeypatch):
    # llsq's shape: a (1024, 32) product summed over rows is 32K elements of two instructions;
    # with threads on it stays in the plan's driver, while a long chain over as many elements
    # is worth chunks
    monkeypatch.setattr(layout, "PARALLEL_WORK", 1 << 22)
    ngrad.set_num_threads(2)
    rng = np.random.default_rng(2)
    a, v = ngrad.from_numpy(rng.standard_normal((1024, 32))), ngrad.from_numpy(rng.standard_normal(32))
    light = lower([(a * v).sum(0)._node]).tape
    comp = CompiledPlan(light)
    assert comp.threaded is comp.serial and runtime.prepare(light).__name__ == "drive"
    heavy = a
    for _ in range(200):
        heavy = (heavy * 1.0001).sin()
    comp = CompiledPlan(lower([heavy.sum(0)._node]).tape)
    assert any(comp.threaded.chunked)


def test_huge_trig_argument_in_a_parallel_kernel_falls_back():
    x0 = np.linspace(-1, 1, N)
    x0[N // 3] = 3e7
    ngrad.set_num_threads(2)
    y = ngrad.from_numpy(x0).sin().sum()
    assert y.item() == pytest.approx(np.sin(x0).sum(), rel=1e-13)


def test_set_num_threads_errors():
    with pytest.raises(ValueError, match="positive"):
        ngrad.set_num_threads(0)
    with pytest.raises(TypeError):
        ngrad.set_num_threads(2.0)
    ngrad.set_num_threads(3)
    assert ngrad.get_num_threads() == 3


SAFETY = r"""
import os, sys, threading, numpy as np, ngrad
from ngrad.engine.runtime import layout
layout.PARALLEL_WORK = 1
ngrad.set_num_threads(2)
x0 = np.linspace(-1, 1, {n})
def step():
    x = ngrad.from_numpy(x0).requires_grad_()
    y = (x.exp() * x).sum()
    y.backward()
    return y.item(), float(x.grad.numpy().sum())
ref = step()
pid = os.fork()  # a child forked after a parallel kernel ran must be able to run one too
if pid == 0:
    os._exit(0 if step() == ref else 3)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
results = []
threads = [threading.Thread(target=lambda: results.extend(step() for _ in range(5))) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
assert len(results) == 20 and all(abs(r[0] - ref[0]) < 1e-9 * abs(ref[0]) for r in results), results
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_parallel_kernels_survive_fork_and_concurrent_threads(tmp_path):
    env = dict(os.environ, NGRAD_CACHE_DIR=str(tmp_path), NGRAD_JIT="always")
    env.pop("NUMBA_THREADING_LAYER", None)
    out = subprocess.run(
        [sys.executable, "-c", SAFETY.format(n=N)], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")
