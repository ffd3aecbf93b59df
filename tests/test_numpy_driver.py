"""The NumPy driver (``dispatch.numpy_driver``): the calls of a structure before its kernels are
ready run as straight-line NumPy, and equal the interpreter on every primitive (with its VJP, in
float64 and float32), the op corpus with gradients and scans; it owns its outputs and needs no
compiler."""

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ngrad
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.runtime import background, dispatch, tiering
from ngrad.engine.runtime.dispatch import numpy_driver

from . import test_ops, test_prims
from .compiled import corpus_joint, graph_tape, prim_joint, random_joint
from .test_random_graphs import program


def _same(tape, values, rtol):
    ref = interpret(tape, values)
    got = numpy_driver(tape)(values)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert a.__class__ is np.ndarray and a.shape == b.shape and a.dtype == b.dtype
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(a, b)
    # owned: no output shares memory with an input or with another output
    arrays = [v for v in values if isinstance(v, np.ndarray)]
    for i, a in enumerate(got):
        assert not any(np.shares_memory(a, v) for v in arrays if v.size and a.size)
        assert not any(np.shares_memory(a, b) for b in got[i + 1 :] if a.size and b.size)


def test_big_values_are_freed_when_they_die(rng):
    # value and gradient of a chain over 100,000 points: the driver lets each big NumPy result go
    # when its last reader has run, as the interpreter does, so its peak is a few arrays, not all
    import tracemalloc

    def f(x):
        y = x
        for _ in range(8):
            y = (y.sin() * 0.5 + y * y * 0.25).tanh()
        return y.sum()

    tape, values = graph_tape(f, [rng.standard_normal(100_000)], rng, grad=True)
    dispatch._numpy.clear()  # its own driver, written by the code under test
    drive = numpy_driver(tape)
    drive(values)
    tracemalloc.start()
    got = drive(values)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    ref = interpret(tape, values)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    # the reverse pass needs the 8 layers' saved values (17 arrays at the peak); all 121 of the
    # call's arrays stayed alive before
    assert len(tape.instrs) > 100 and peak < 24 * 800_000


@pytest.mark.parametrize("name", sorted(test_prims.CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_primitive_with_its_vjp(name, dtype, rng):
    tape, values = prim_joint(name, dtype, rng)
    _same(tape, values, rtol=1e-6 if dtype == np.float32 else 1e-13)


@pytest.mark.parametrize("name", sorted(test_ops.CASES))
def test_op_corpus_values_and_gradients(name, rng):
    tape, values = corpus_joint(name, rng)
    _same(tape, values, rtol=1e-12)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(program, st.integers(0, 2**32 - 1))
def test_random_programs_equal_the_interpreter(ops, seed):
    _same(*random_joint(ops, seed), rtol=1e-13)


@pytest.fixture
def soon(monkeypatch):
    """No kernel (every call comes before one is ready), and a NumPy driver as soon as a structure
    has cost anything interpreting."""
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_JIT_THRESHOLD", "1000")
    monkeypatch.setattr(tiering, "POLICY", dataclasses.replace(tiering.POLICY, numpy_driver_s=1e-12))


def test_a_structure_runs_on_its_numpy_driver_once_interpreting_it_has_cost_as_much(soon, monkeypatch):
    ran = []
    monkeypatch.setattr(dispatch, "interpret", lambda tape, values: ran.append(tape) or interpret(tape, values))
    x = ngrad.tensor(np.linspace(-1.0, 1.0, 7), requires_grad=True)
    results = []
    for _ in range(3):
        y = (x.sin() * x + 2.0).pow(2).sum()
        y.backward()
        results.append((y.item(), x.grad.numpy().copy()))
        x.grad = None
    assert len({id(t) for t in ran}) == len(ran)  # each structure interpreted once, at its first call
    for value, grad in results[1:]:
        assert value == results[0][0]
        np.testing.assert_array_equal(grad, results[0][1])
    xv = np.linspace(-1.0, 1.0, 7)
    np.testing.assert_allclose(results[0][1], 2 * (np.sin(xv) * xv + 2) * (np.cos(xv) * xv + np.sin(xv)), rtol=1e-13)


def test_no_numpy_driver_is_made_while_compiles_run_and_one_is_due_again_after(soon, monkeypatch):
    # a compile running in the background lands soon: making a driver meanwhile cost the call
    # that made it tens of milliseconds (lstm's scan bodies: 26 ms, a call of 13)
    monkeypatch.setattr(tiering, "POLICY", dataclasses.replace(tiering.POLICY, numpy_driver_s=1e-9))
    pending = [1]
    monkeypatch.setattr(background, "pending", lambda: pending[0])
    made = []
    monkeypatch.setattr(dispatch, "numpy_driver", lambda *a, **k: made.append(a) or numpy_driver(*a, **k))
    w = ngrad.tensor(np.array([[0.5, -0.2], [0.1, 0.3]]), requires_grad=True)
    xs = ngrad.tensor(np.linspace(-1.0, 1.0, 20).reshape(10, 2))

    def call():
        h, ys = ngrad.scan(lambda h, x: ((h @ w + x).tanh(),) * 2, ngrad.zeros(2, dtype=ngrad.float64), xs)
        (h.sum() + ys.sum()).backward()
        value, grad = h.sum().item(), w.grad.numpy().copy()
        w.grad = None
        return value, grad

    with monkeypatch.context() as m:
        m.setenv("NGRAD_SCAN_UNROLL", "0")  # steps one by one, not written out
        first = call()
        for _ in range(3):
            assert call()[0] == first[0]
        assert made == []  # due many times over, never made
        pending[0] = 0
        for _ in range(3):
            value, grad = call()
    assert made  # due again once nothing compiles: the structure's and its bodies' drivers
    assert value == first[0]
    np.testing.assert_array_equal(grad, first[1])


def test_big_arrays_stay_on_the_interpreter_whose_python_is_a_small_part(monkeypatch):
    # value and gradient over 200,000 points: a call is milliseconds of NumPy, which a driver
    # does at the same speed, so none is made (it was, at the second call: 1 ms for nothing)
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_JIT_THRESHOLD", "1000")
    made = []
    monkeypatch.setattr(dispatch, "numpy_driver", lambda *a, **k: made.append(a) or numpy_driver(*a, **k))
    x = ngrad.tensor(np.linspace(-1.0, 1.0, 200_000), requires_grad=True)
    for _ in range(5):
        y = (x.sin() * x.exp() + x.tanh() * x).sum()
        y.backward()
        x.grad = None
    assert made == []


def test_a_scan_runs_its_body_on_a_numpy_driver_within_the_first_call(soon, monkeypatch):
    monkeypatch.setenv("NGRAD_SCAN_UNROLL", "0")  # steps one by one, not written out
    bodies = []
    inner = dispatch.numpy_driver
    spy = lambda tape, checked=True: bodies.append(checked) or inner(tape, checked)  # noqa: E731
    monkeypatch.setattr(dispatch, "numpy_driver", spy)
    w = ngrad.tensor(np.array([[0.5, -0.2], [0.1, 0.3]]), requires_grad=True)

    def step(h, x):
        h = (h @ w + x).tanh()
        return h, h.sum()

    xs = ngrad.tensor(np.linspace(-1.0, 1.0, 20).reshape(10, 2))
    h, ys = ngrad.scan(step, ngrad.zeros(2, dtype=ngrad.float64), xs)
    (h.sum() + ys.sum()).backward()
    assert False in bodies  # a body's driver, without input checks
    hv, total, wv = np.zeros(2), 0.0, w.detach().numpy()
    for x in xs.numpy():
        hv = np.tanh(hv @ wv + x)
        total += hv.sum()
    np.testing.assert_allclose(h.detach().numpy(), hv, rtol=1e-13)
    np.testing.assert_allclose(ys.sum().item(), total, rtol=1e-13)
    eps, fd = 1e-6, np.zeros((2, 2))
    for i in range(2):
        for j in range(2):
            for sign in (1, -1):
                wp = wv.copy()
                wp[i, j] += sign * eps
                hp, tp = np.zeros(2), 0.0
                for x in xs.numpy():
                    hp = np.tanh(hp @ wp + x)
                    tp += hp.sum()
                fd[i, j] += sign * (hp.sum() + tp) / (2 * eps)
    np.testing.assert_allclose(w.grad.numpy(), fd, rtol=1e-6)


def test_the_numpy_driver_imports_no_compiler():
    code = (
        "import os, sys; os.environ.update(NGRAD_JIT='auto', NGRAD_JIT_THRESHOLD='1000')\n"
        "import numpy as np, ngrad\n"
        "from ngrad.engine.runtime import tiering\n"
        "tiering.POLICY = tiering.dataclasses.replace(tiering.POLICY, numpy_driver_s=1e-12)\n"
        "from ngrad.engine.runtime.dispatch import records\n"
        "x = ngrad.tensor(np.ones(5), requires_grad=True)\n"
        "for _ in range(4):\n"
        "    (x * 3.0).exp().sum().backward()\n"
        "assert any(r.numpy is not None for r in records.values())\n"
        "print('numba' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_under_never_a_scan_steps_on_the_interpreter_alone(monkeypatch):
    made = []
    inner = dispatch.numpy_driver
    monkeypatch.setattr(dispatch, "numpy_driver", lambda tape, checked=True: made.append(1) or inner(tape, checked))
    monkeypatch.setattr(tiering, "POLICY", dataclasses.replace(tiering.POLICY, numpy_driver_s=0.0))
    xs = ngrad.tensor(np.linspace(0.0, 1.0, 40).reshape(20, 2))
    h, _ = ngrad.scan(lambda h, x: ((h * 0.5 + x).sin(), ()), ngrad.zeros(2, dtype=ngrad.float64), xs)
    hv = np.zeros(2)
    for x in xs.numpy():
        hv = np.sin(hv * 0.5 + x)
    np.testing.assert_allclose(h.numpy(), hv, rtol=1e-14)
    assert not made  # NGRAD_JIT=never (this folder's default): the oracle runs alone
