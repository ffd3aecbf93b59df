"""A compiled scan's steps store their carries straight into the history rows of the next step
(the last step into the final carries; with no history, into two sets of arrays taken in turn)
and their ys into their rows, and keep their intermediates in arrays made once per scan
(``driver.stepper``, ``loops._stepped``). Checked against the interpreter on two calls with
different values: carries made by a loop, a carry passed through unchanged, two outputs of one
value, a one-element y that is a reshape of a sum, a 0-d carry, every length from 0 to 5 both
ways, with and without history; and values and gradients of a program through ``ngrad.scan``."""

import numpy as np
import pytest

import ngrad
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.ir.prims import control
from ngrad.engine.ir.tape import Builder
from ngrad.engine.runtime import loops
from ngrad.engine.runtime.dispatch import prepare
from ngrad.engine.runtime.driver import stepper

pytestmark = pytest.mark.numba

N = 37


def _body():
    """Carries: c (made by loops, through an intermediate the step alone uses), k (passed
    through), z (0-d); ys: the sum of the new c (one element, a reshape), c again (one value
    twice), z's square (0-d)."""
    b = Builder()
    c, k, z = b.input((N,), "f64"), b.input((N,), "f64"), b.input((), "f64")
    x, w = b.input((N,), "f64"), b.input((N,), "f64")
    a = c * w + x
    mean = a.sum(axes=(0,), keepdim=False)
    # ``a`` read one row up and one row down: no run of loops in blocks makes it, so it is stored
    up = b.full(0.0, (1,), "f64").cat(a.slice(starts=(0,), stops=(N - 1,), steps=(1,)), axis=0)
    down = a.slice(starts=(1,), stops=(N,), steps=(1,)).cat(b.full(1.0, (1,), "f64"), axis=0)
    # and c one row down in the loop writing the new c: a step writing over its own carry fails
    c_up = b.full(0.0, (1,), "f64").cat(c.slice(starts=(0,), stops=(N - 1,), steps=(1,)), axis=0)
    mix = up * w + down * x + c_up * 0.5
    nxt = mix * mean.reshape(shape=(1,)).expand(shape=(N,)) * 0.01 + k * z.reshape(shape=(1,)).expand(shape=(N,))
    z2 = z * 0.5 + mean * 1e-3
    body = b.finish([nxt, k, z2, nxt.sum(axes=(0,), keepdim=True), nxt, z2 * z2])
    return body


def _params(body, length, reverse, history):
    text = control.text_of(body)
    return {"body": text, "length": length, "reverse": reverse, "carries": 3, "xs": 1, "history": history}


def _args(seed, length):
    r = np.random.default_rng(seed)
    c, k, z = r.standard_normal(N), r.standard_normal(N), np.array(0.7 + seed)
    return [c, k, z, r.standard_normal((length, N)), r.standard_normal(N)]


def _reference(body, params, args):
    p = params
    run = lambda tape, values: interpret(tape, values)  # noqa: E731
    return control.run_scan(run, body, args, p["length"], p["reverse"], p["carries"], p["xs"], p["history"])


@pytest.mark.parametrize("history", [True, False])
@pytest.mark.parametrize("reverse", [False, True])
def test_steps_written_in_place_equal_the_interpreter(history, reverse, jit_always):
    body = _body()
    step = stepper(prepare(body, checked=False))
    assert step is not None and step.scratch  # the intermediate ``a`` is scratch
    for length in range(6):
        params = _params(body, length, reverse, history)
        for seed in (1, 2):  # two calls, other values: nothing of the first is left over
            args = _args(seed + 10 * length, length)
            want = _reference(body, params, args)
            got = loops.scan(params, [a.copy() for a in args])
            # (the kernels reassociate sums: rounding apart)
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13 * np.abs(want).max(initial=1.0))


def test_the_step_driver_stores_carries_and_ys_into_the_callers_arrays(jit_always):
    body = _body()
    step = stepper(prepare(body, checked=False))
    args = _args(3, 1)
    values = [args[0], args[1], args[2], args[3][0], args[4]]
    outs = [np.empty(N), np.empty(N), np.empty(()), np.empty(1), np.empty(N), np.empty(())]
    scratch = [np.empty(shape, dt) for shape, dt in step.scratch]
    got = step.drive(values, outs, scratch)
    want = interpret(body, values)
    assert got[0] is None  # the new carry went straight into outs[0]
    for k, (g, o, w) in enumerate(zip(got, outs, want)):
        np.testing.assert_allclose(o if g is None else g, w, rtol=1e-13, err_msg=f"output {k}")
    assert got[4] is not None  # c's second output: the first took the store


def _loss(lib, scan, w0, c0, xs):
    w, c = lib.tensor(w0, requires_grad=True), lib.tensor(c0, requires_grad=True)
    x = lib.tensor(xs, requires_grad=True)

    def step(h, xt):
        a = h * w + xt
        h = lib.cat([lib.ones_like(a[:1]), a[:-1]]) * w * 0.5 + a * 0.1
        return h, (h * h).sum()

    h, ys = scan(step, c, x)
    loss = (h * h).sum() + ys.sum()
    loss.backward()
    return [loss.detach().numpy(), w.grad.numpy(), c.grad.numpy(), x.grad.numpy()]


def test_values_and_gradients_through_ngrad_scan_equal_the_interpreter(jit_always, monkeypatch):
    r = np.random.default_rng(4)
    for seed in (1, 2):
        w0, c0, xs = r.standard_normal(N) * seed, r.standard_normal(N), r.standard_normal((9, N))
        got = _loss(ngrad, ngrad.scan, w0, c0, xs)
        monkeypatch.setenv("NGRAD_JIT", "never")
        want = _loss(ngrad, ngrad.scan, w0, c0, xs)
        monkeypatch.setenv("NGRAD_JIT", "always")
        for g, w in zip(got, want):  # (the kernels reassociate sums: rounding apart)
            np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-13 * np.abs(w).max())


def test_a_compiled_body_is_asked_of_prepare_once(jit_always, monkeypatch):
    """After its first compiled call a scan keeps its body's driver (``loops._compiled``): later
    calls, other values, ask ``dispatch.prepare`` nothing and still equal the interpreter."""
    from ngrad.engine.runtime import dispatch

    body = _body()
    asked = []
    real = dispatch.prepare
    monkeypatch.setattr(dispatch, "prepare", lambda *a, **k: asked.append(a) or real(*a, **k))
    loops._compiled.clear()
    for seed in (5, 6, 7):
        params, args = _params(body, 3, False, True), _args(seed, 3)
        want = _reference(body, params, args)
        np.testing.assert_allclose(loops.scan(params, args), want, rtol=1e-11, atol=1e-13 * np.abs(want).max())
    assert len(asked) == 1
