"""How a scan's steps run and where their results live (``engine/runtime/loops.py``,
``buffers.recycle``): a big packed result is written into the memory of one the caller has
dropped (never into one it or a view of it still holds), with the interpreter's values; a plan
with several results of one shape takes them back even when its caller holds one run's results
through the next (a scan's carries); a program not compiled yet runs the steps of a scan whose
body is compiled on the body's compiled driver."""

import types
import weakref

import numpy as np
import pytest

from ngrad.engine.ir.interpret import interpret
from ngrad.engine.ir.prims import control
from ngrad.engine.ir.tape import Builder
from ngrad.engine.runtime import buffers, dispatch, loops

N, STEPS = 4096, 5  # a result of (1 + 5) * 4,096 doubles: big enough for the shelf


def _body(n=N):
    """Two carries of one shape (so the body's plan returns two results of one key) and a y."""
    b = Builder()
    c, d, x, w = (b.input((n,), "f64") for _ in range(4))
    c2 = c * w + x * d
    d2 = d * 0.5 - c * x
    y = (c2 * d2).sum(axes=(0,), keepdim=False).reshape(shape=(1,))
    return b.finish([c2, d2, y])


def _case(n=N, length=STEPS):
    body = _body(n)
    text = control.text_of(body)
    params = {"body": text, "length": length, "reverse": False, "carries": 2, "xs": 1, "history": True}
    r = np.random.default_rng(n + length)
    args = [r.standard_normal(n), r.standard_normal(n), r.standard_normal((length, n)) * 0.1, r.standard_normal(n)]
    return body, params, args


def _reference(body, params, args):
    """The packed result as the interpreter's scan row makes it, step by step."""
    run = lambda tape, values: interpret(tape, values)  # noqa: E731
    p = params
    return control.run_scan(run, body, args, p["length"], p["reverse"], p["carries"], p["xs"], p["history"])


def test_a_dropped_result_is_written_again_and_a_held_one_never(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "never")
    body, params, args = _case()
    want = _reference(body, params, args)
    first = loops.scan(params, args)
    np.testing.assert_array_equal(first, want)
    held = loops.scan(params, args)  # ``first`` is still referenced: fresh memory
    assert not np.shares_memory(first, held)
    kept = weakref.ref(first)
    del first
    again = loops.scan(params, args)
    assert again is kept()  # the dropped result, kept and written whole again
    np.testing.assert_array_equal(again, want)
    view = again[N:]  # a view keeps its base's memory from being written
    del again
    other = loops.scan(params, args)
    assert not np.shares_memory(other, view) and not np.shares_memory(other, held)
    np.testing.assert_array_equal(view, want[N:])
    np.testing.assert_array_equal(other, want)


def test_small_results_are_not_kept(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "never")
    body, params, args = _case(n=8)
    before = {k: len(v) for k, v in loops._shelf.lent.items()}
    out = loops.scan(params, args)
    np.testing.assert_array_equal(out, _reference(body, params, args))
    assert {k: len(v) for k, v in loops._shelf.lent.items()} == before


def test_results_held_through_the_next_run_are_taken_back():
    """Two results of one shape a run, the caller holding each run's until the next has run (a
    scan passes its carries so): the run after takes the dropped ones back, no new memory."""
    plan = types.SimpleNamespace(pool={}, lent={})
    shape, dt = (4 * N,), np.dtype(np.float64)  # 128 KiB: at least POOL_MIN_BYTES
    held, runs = [], []
    for _ in range(6):
        made = []
        take = buffers.taker(plan, made)
        results = [take(shape, dt), take(shape, dt)]
        buffers.recycle(plan, made, results)
        runs.append([weakref.ref(a) for a in results])
        held = results  # the previous run's results are dropped only now
        del results
    # two runs' worth of arrays, taken back from the third run on (a new array each time would
    # have left the dropped ones to the garbage collector)
    for k in range(2, 6):
        assert [r() for r in runs[k]] == [r() for r in runs[k - 2]] and runs[k][0]() is not None
    assert held  # the last run's results are still the caller's


def test_interpreted_programs_run_their_scans_through_loops():
    assert control.STEPS["run"] is loops.steps


def test_steps_under_never_are_the_interpreter(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "never")
    body, params, args = _case(n=16)
    values = [args[0], args[1], args[2][0], args[3]]
    want = interpret(body, values)
    never = loops.steps(params["body"], body)
    for got, w in zip(never(values), want):
        np.testing.assert_array_equal(got, w)


@pytest.mark.numba
def test_a_compiled_body_runs_compiled_steps_for_an_uncompiled_program(monkeypatch, tmp_path):
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_COMPILE", "wait")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    body, params, args = _case(n=24)
    values = [args[0], args[1], args[2][0], args[3]]
    want = interpret(body, values)
    before = loops.steps(params["body"], body)
    assert isinstance(before, dispatch._Body)  # not compiled yet: interpreted, then NumPy
    dispatch.prepare(body, checked=False)  # what a compiled program's scan does: compile the body
    after = loops.steps(params["body"], body)
    assert not isinstance(after, dispatch._Body)
    for got, w in zip(after(values), want):
        np.testing.assert_allclose(got, w, rtol=1e-13, atol=1e-13)
    # the interpreter's scan row (an outer program not compiled) now takes the compiled steps
    np.testing.assert_allclose(
        control.Numpy.scan(*args, **params), _reference(body, params, args), rtol=1e-13, atol=1e-13
    )
