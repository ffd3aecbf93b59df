"""Tiering: when a tape is interpreted, run as bytecode or compiled, and when its plan is made."""

import dataclasses

import numpy as np
import pytest

import ngrad
from ngrad.engine import runtime
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.runtime import dispatch, tiering
from ngrad.engine.runtime.plan import CompiledPlan
from ngrad.engine.runtime.tiering import POLICY, Decision, Policy, Record, next_state

from .compiled import prim_joint
from .oracles import fd_gradient, prim_tape

pytestmark = pytest.mark.usefixtures("jit_always")


def test_facade_uses_the_compiler(monkeypatch):
    from ngrad.engine.targets import cpu as comp

    before = set(comp._memory)
    x = ngrad.tensor(np.linspace(-1, 1, 7), requires_grad=True)
    y = (x.tanh() * x).sum()
    y.backward()
    np.testing.assert_allclose(
        x.grad.numpy(), np.tanh(x.detach().numpy()) + x.detach().numpy() / np.cosh(x.detach().numpy()) ** 2
    )
    assert set(comp._memory) - before  # a kernel was made (the cache may have dropped an old one)


def test_jit_never_interprets(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "never")
    tape, _ = prim_tape("exp", [np.ones(3)], {})
    assert dispatch.tier_for(tape, runtime.jit_mode()) is None


def test_auto_tier_compiles_on_repeat(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_JIT_THRESHOLD", "2")
    tape, _ = prim_tape("mul", [np.ones(4) * 3.25, np.ones(4)], {})
    dispatch.records.pop(tape.key(), None)
    first = dispatch.tier_for(tape, "auto")
    assert not first.tier.ready() or first.cached
    assert dispatch.tier_for(tape, "auto").tier.ready()


def test_long_tapes_plan_and_compile_once_interpreting_has_paid(monkeypatch, tmp_path, rng):
    # ski rental: a tape is planned once interpreting it has cost about what planning costs,
    # and a plan of many new functions compiles once interpreting has cost their compile time
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))  # nothing on disk yet
    policy = Policy(threshold=2, plan_eager=0, plan_s=1.0, eager_functions=0, compile_s=1e3)
    tape, values = prim_joint("tanh", np.float64, rng)  # a fused loop: one function to compile
    dispatch.records.pop(tape.key(), None)
    monkeypatch.setenv("NGRAD_JIT", "auto")
    for _ in range(3):
        np.testing.assert_allclose(runtime.run(tape, values, policy=policy)[0], interpret(tape, values)[0])
    cold = dispatch.records[tape.key()]
    assert cold.tier is None and cold.seen == 3 and cold.rent > 0
    cold.rent = len(tape.instrs) * policy.plan_s  # planning has now been paid for
    record = dispatch.tier_for(tape, "auto", policy=policy)
    assert isinstance(record.tier, CompiledPlan) and not record.tier.ready()
    assert record.pending >= 1 and record.seen == 4
    record.rent = record.pending * policy.compile_s  # and compiling too
    assert dispatch.tier_for(tape, "auto", policy=policy).tier.ready()
    np.testing.assert_allclose(runtime.run(tape, values, policy=policy)[0], interpret(tape, values)[0])


def test_a_traced_program_of_many_new_functions_is_tiered_not_compiled_at_once(monkeypatch, tmp_path, rng):
    """ngrad.compile compiles its program at once unless it needs more than PREPARE_FUNCTIONS new
    functions (an unrolled loop through a gather: minutes of Numba); then the traced step runs on
    the interpreter until that has cost the estimated compile time, and on kernels after."""
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_COMPILE", "wait")  # the paid-for compile is ready when the call ends
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))  # nothing on disk yet
    # ngrad.compile takes no policy: the runtime's own record is the one swapped
    monkeypatch.setattr(tiering, "POLICY", dataclasses.replace(POLICY, prepare_functions=2))
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
    (record,) = [
        r
        for r in dispatch.records.values()
        if isinstance(r.tier, CompiledPlan) and r.functions > 2 and r.pending == r.functions
    ]
    comp = record.tier
    assert not comp.ready() and record.rent > 0  # traced and run without compiling
    want = fd_gradient(lambda a: loss_of(ngrad.tensor(a)).item(), x0)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-8)
    record.rent = record.pending * POLICY.compile_s  # interpreting has paid for the compile
    x.grad = None
    loss = step(x)
    assert comp.ready()
    np.testing.assert_allclose(loss.item(), loss_of(ngrad.tensor(x0)).item(), rtol=1e-13)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-8)


def _decide(record, policy=POLICY, mode="auto", instrs=10, **kw):
    return next_state(record, policy, mode=mode, instrs=instrs, **kw)


def test_next_state_plans_a_short_tape_at_first_sight_and_interprets_call_1():
    assert _decide(Record(seen=1)) is Decision.PLAN
    planned = Record(tier=object(), seen=1, functions=1, pending=1)
    assert _decide(planned) is Decision.INTERPRET  # call 1: not worth a compile yet
    assert _decide(planned, mode="always") is Decision.COMPILE
    assert _decide(planned, now=True) is Decision.COMPILE  # prepare compiles at first sight
    assert _decide(planned, ready=True) is Decision.RUN
    assert _decide(Record(), mode="never") is Decision.WAIT
    assert _decide(Record(), instrs=0) is Decision.WAIT


def test_next_state_compiles_at_the_threshold_or_when_cached():
    policy = Policy(threshold=3)
    planned = dict(tier=object(), functions=1, pending=1)
    assert _decide(Record(seen=2, **planned), policy) is Decision.INTERPRET  # call 2 of 3
    assert _decide(Record(seen=3, **planned), policy) is Decision.COMPILE
    cached = dict(planned, pending=0, cached=True)
    assert _decide(Record(seen=1, **cached), policy) is Decision.COMPILE  # on disk: at once
    assert _decide(Record(seen=2, **planned)) is Decision.COMPILE  # call 2 under the default rules


def test_next_state_plans_and_compiles_like_skis():
    policy = Policy(plan_eager=100, plan_s=1e-3, eager_functions=4, compile_s=0.5, prepare_functions=8)
    # a long tape is planned once seen the threshold number of times and its rent paid the plan
    assert _decide(Record(seen=1), policy, instrs=200) is Decision.WAIT
    assert _decide(Record(seen=2, rent=0.1), policy, instrs=200) is Decision.WAIT
    assert _decide(Record(seen=2, rent=0.2), policy, instrs=200) is Decision.PLAN
    assert _decide(Record(seen=1), policy, instrs=200, now=True) is Decision.PLAN
    assert _decide(Record(seen=1), policy, instrs=200, mode="always") is Decision.PLAN
    # a plan of many new functions compiles once interpreting has cost their compile time
    many = dict(tier=object(), functions=6, pending=6, seen=5)
    assert _decide(Record(rent=2.9, **many), policy) is Decision.INTERPRET
    assert _decide(Record(rent=3.0, **many), policy) is Decision.COMPILE
    assert _decide(Record(rent=0.0, **many), policy, now=True) is Decision.COMPILE  # 6 <= prepare's 8
    more = dict(many, functions=9, pending=9)
    assert _decide(Record(rent=0.0, **more), policy, now=True) is Decision.INTERPRET
    assert _decide(Record(rent=4.5, **more), policy, now=True) is Decision.COMPILE


def test_next_state_offers_bytecode_once():
    policy = Policy(bytecode_functions=4)
    # small steps: offered at first sight; declined, the tape is planned and never offered again
    assert _decide(Record(seen=1, small=True), policy, instrs=300) is Decision.ENCODE
    assert _decide(Record(seen=1, small=True, offered=True), policy, instrs=300) is Decision.PLAN
    declined = Record(tier=object(), seen=1, small=True, offered=True, functions=9, pending=9)
    assert _decide(declined, policy, instrs=300, mode="always") is Decision.COMPILE
    # big steps: planned first, offered once the plan needs more than bytecode_functions
    assert _decide(Record(seen=1, small=False), policy, instrs=300) is Decision.PLAN
    big = dict(tier=object(), seen=1, small=False, pending=5)
    assert _decide(Record(functions=5, **big), policy, instrs=300) is Decision.ENCODE
    assert _decide(Record(functions=4, **big), policy, instrs=300, mode="always") is Decision.COMPILE
    assert _decide(Record(functions=5, offered=True, **big), policy, instrs=300, mode="always") is Decision.COMPILE
    # too short for bytecode (``small`` unknown): never offered
    assert _decide(Record(seen=1), policy, instrs=100) is Decision.PLAN
