"""Tiering: when a tape is interpreted, run as bytecode or compiled, and when its plan is made."""

import numpy as np
import pytest

import ngrad
from ngrad.engine import runtime
from ngrad.engine.ir.interpret import interpret

from .compiled import prim_joint
from .oracles import fd_gradient, prim_tape

pytestmark = pytest.mark.usefixtures("jit_always")


def test_facade_uses_the_compiler(monkeypatch):
    from ngrad.engine.targets import compile as comp

    before = len(comp._memory)
    x = ngrad.tensor(np.linspace(-1, 1, 7), requires_grad=True)
    y = (x.tanh() * x).sum()
    y.backward()
    np.testing.assert_allclose(
        x.grad.numpy(), np.tanh(x.detach().numpy()) + x.detach().numpy() / np.cosh(x.detach().numpy()) ** 2
    )
    assert len(comp._memory) > before


def test_jit_never_interprets(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "never")
    tape, _ = prim_tape("exp", [np.ones(3)], {})
    assert runtime._compiled_for(tape, runtime.jit_mode()) is None


def test_auto_tier_compiles_on_repeat(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_JIT_THRESHOLD", "2")
    tape, _ = prim_tape("mul", [np.ones(4) * 3.25, np.ones(4)], {})
    runtime._plans.pop(tape.key(), None)
    first = runtime._compiled_for(tape, "auto")
    assert not first.ready() or first.cached
    assert runtime._compiled_for(tape, "auto").ready()


def test_long_tapes_plan_and_compile_once_interpreting_has_paid(monkeypatch, tmp_path, rng):
    # ski rental: a tape is planned once interpreting it has cost about what planning costs,
    # and a plan of many new functions compiles once interpreting has cost their compile time
    monkeypatch.setenv("NGRAD_JIT_THRESHOLD", "2")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))  # nothing on disk yet
    monkeypatch.setattr(runtime, "PLAN_EAGER", 0)
    monkeypatch.setattr(runtime, "PLAN_S", 1.0)
    monkeypatch.setattr(runtime, "EAGER_FUNCTIONS", 0)
    monkeypatch.setattr(runtime, "COMPILE_S", 1e3)
    tape, values = prim_joint("tanh", np.float64, rng)  # a fused loop: one function to compile
    runtime._plans.pop(tape.key(), None)
    monkeypatch.setenv("NGRAD_JIT", "auto")
    for _ in range(3):
        np.testing.assert_allclose(runtime.run(tape, values)[0], interpret(tape, values)[0])
    cold = runtime._plans[tape.key()]
    assert isinstance(cold, runtime._Cold) and cold.seen == 3 and cold.rent > 0
    cold.rent = len(tape.instrs) * runtime.PLAN_S  # planning has now been paid for
    comp = runtime._compiled_for(tape, "auto")
    assert isinstance(comp, runtime._Compiled) and not comp.ready()
    assert comp.pending >= 1 and comp.seen == 4
    comp.rent = comp.pending * runtime.COMPILE_S  # and compiling too
    assert runtime._compiled_for(tape, "auto").ready()
    np.testing.assert_allclose(runtime.run(tape, values)[0], interpret(tape, values)[0])


def test_a_traced_program_of_many_new_functions_is_tiered_not_compiled_at_once(monkeypatch, tmp_path, rng):
    """ngrad.compile compiles its program at once unless it needs more than PREPARE_FUNCTIONS new
    functions (an unrolled loop through a gather: minutes of Numba); then the traced step runs on
    the interpreter until that has cost the estimated compile time, and on kernels after."""
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))  # nothing on disk yet
    monkeypatch.setattr(runtime, "PREPARE_FUNCTIONS", 2)
    idx = ngrad.tensor(rng.permutation(50))

    def loss_of(x):
        h = x
        for _ in range(3):  # a gather between steps: a function per step
            h = (h[idx] * 0.5 + x).tanh()
        return (h * h).sum()

    @ngrad.compile
    def step(x):
        loss = loss_of(x)
        loss.backward()
        return loss

    x0 = rng.uniform(-1, 1, 50)
    x = ngrad.tensor(x0, requires_grad=True)
    step(x)
    (comp,) = [
        c
        for c in runtime._plans.values()
        if isinstance(c, runtime._Compiled) and c.functions() > 2 and c.pending == c.functions()
    ]
    assert not comp.ready() and comp.rent > 0  # traced and run without compiling
    want = fd_gradient(lambda a: loss_of(ngrad.tensor(a)).item(), x0)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-8)
    comp.rent = comp.pending * runtime.COMPILE_S  # interpreting has paid for the compile
    x.grad = None
    loss = step(x)
    assert comp.ready()
    np.testing.assert_allclose(loss.item(), loss_of(ngrad.tensor(x0)).item(), rtol=1e-13)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-8)
