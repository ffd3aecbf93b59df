"""Buffers: which arrays a plan keeps, lends and takes back between runs."""

import math

import numpy as np
import pytest

import ngrad
from ngrad.engine import runtime
from ngrad.engine.ir.graph import lower
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.runtime import buffers
from ngrad.engine.runtime.driver import driver_code
from ngrad.engine.runtime.executor import execute
from ngrad.engine.runtime.plan import CompiledPlan
from ngrad.engine.transform.differentiate import vjp

from .compiled import assert_same

pytestmark = pytest.mark.usefixtures("jit_always")


def test_results_never_share_the_plan_buffers(rng):
    x0 = rng.standard_normal(buffers.POOL_MIN_BYTES // 8 + 1)  # big enough to run from the pool
    x = ngrad.from_numpy(x0).requires_grad_()
    y = (x.exp() * x).sin()
    (y * 2).sum().backward()
    value, grad = y.detach().numpy(), x.grad.numpy()
    kept = value.copy(), grad.copy()
    for _ in range(2):  # the same plan again, on other data: its pooled buffers are reused
        z = ngrad.from_numpy(x0 * 2).requires_grad_()
        w = (z.exp() * z).sin()
        (w * 2).sum().backward()
    np.testing.assert_array_equal(value, kept[0])
    np.testing.assert_array_equal(grad, kept[1])


def test_dropped_results_are_reused_and_held_ones_never(rng, monkeypatch):
    """A plan takes a result's memory back only once nothing references it: not while the
    caller holds the array, nor while a view of it (a reshape, a slice) is alive."""
    taken = []
    real = buffers.taker
    monkeypatch.setattr(
        buffers, "taker", lambda comp, made: lambda shape, dt: taken.append(real(comp, made)(shape, dt)) or taken[-1]
    )
    x0 = rng.standard_normal(buffers.POOL_MIN_BYTES // 8 + 1)  # big enough to run from the pool

    def gradient(scale):
        x = ngrad.from_numpy(x0 * scale).requires_grad_()
        ((x.exp() * x).sin() * 2).sum().backward()
        return x.grad.numpy()

    view = gradient(1.0)[1:]  # only a view survives
    kept = view.copy()
    held = gradient(2.0)
    held_copy = held.copy()
    for k in range(4):
        gradient(3.0 + k)
    np.testing.assert_array_equal(view, kept)
    np.testing.assert_array_equal(held, held_copy)
    g = gradient(1.5)
    address = g.ctypes.data
    del g
    taken.clear()
    gradient(2.5)
    assert address in {a.ctypes.data for a in taken}  # dropped: the next run writes its memory again


def test_a_repeated_gradient_allocates_no_new_big_buffers(rng, monkeypatch):
    """After a warm-up run, every big buffer of logsumexp's gradient (intermediates, the result
    the caller dropped) comes back from the plan."""
    taken = []
    real = buffers.taker
    monkeypatch.setattr(
        buffers, "taker", lambda comp, made: lambda shape, dt: taken.append(real(comp, made)(shape, dt)) or taken[-1]
    )
    x0 = rng.standard_normal(buffers.POOL_MIN_BYTES // 8 + 5)

    def gradient():
        x = ngrad.from_numpy(x0).requires_grad_()
        y = x[1:].logsumexp(0) + x[:-1].sum()
        y.backward()
        return y.item(), x.grad.numpy()

    for _ in range(3):
        value, grad = gradient()
    e = np.exp(x0[1:] - x0[1:].max())
    np.testing.assert_allclose(
        grad, np.concatenate([[1.0], np.ones(len(x0) - 2) + e[:-1] / e.sum(), [e[-1] / e.sum()]]), rtol=1e-12
    )
    np.testing.assert_allclose(value, np.log(e.sum()) + x0[1:].max() + x0[:-1].sum(), rtol=1e-12)
    del grad
    before = {id(a) for a in taken if a.nbytes >= buffers.POOL_MIN_BYTES}
    taken.clear()
    gradient()
    big = [a for a in taken if a.nbytes >= buffers.POOL_MIN_BYTES]
    assert big and all(id(a) in before for a in big)


def test_matmul_products_are_written_into_the_plan_buffers(rng, monkeypatch):
    """A tanh layer's gradient: its products (forward, and both of the backward's) land in
    buffers the plan takes, so a repeated run reuses their memory, by the runtime and by the
    driver alike, and agrees with the interpreter."""
    x = ngrad.from_numpy(rng.standard_normal((64, 80)))
    w = ngrad.from_numpy(rng.standard_normal((80, 128)) / 9).requires_grad_()
    v = ngrad.from_numpy(rng.standard_normal((128, 3))).requires_grad_()
    low = lower([ngrad.matmul(ngrad.tanh(ngrad.matmul(x, w)), v).logsumexp(1).sum()._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[w._node], low.slot_of[v._node]])
    tape = joint.tape
    values = [n.value for n in low.sources] + [np.ones(tape.shapes[s]) for s in joint.seeds]
    ref = interpret(tape, values)
    comp = CompiledPlan(tape)
    comp.compile()
    big = {s for s in comp.into if math.prod(tape.shapes[s]) * 8 >= buffers.POOL_MIN_BYTES}
    assert {tape.shapes[s] for s in big} == {(64, 128), (80, 128)}, comp.into  # h = x @ w, x.T @ dh
    drive = runtime.prepare(tape)
    real = buffers.taker
    for run in (lambda: execute(comp, values), lambda: drive(values)):
        taken = []
        monkeypatch.setattr(
            buffers,
            "taker",
            lambda comp, made: lambda shape, dt: taken.append(real(comp, made)(shape, dt)) or taken[-1],
        )
        seen = []
        for _ in range(3):
            taken.clear()
            got = run()  # the results are dropped at the next assignment: their memory may come back
            for a, b in zip(got, ref):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
            seen.append({(a.shape, a.ctypes.data) for a in taken if a.shape in ((64, 128), (80, 128))})
            del got
        assert {shape for shape, _ in seen[-1]} == {(64, 128), (80, 128)}
        assert seen[-1] <= seen[-2] | seen[-3]  # no new memory for them once warm


def test_matmul_read_through_a_permute_is_written_in_the_permuted_layout(rng):
    x = ngrad.tensor(rng.standard_normal((6, 5, 3)), requires_grad=True)
    w = ngrad.tensor(rng.standard_normal((5, 3, 3)), requires_grad=True)
    z = ngrad.matmul(x.transpose(0, 1), w).transpose(0, 1)  # (6, 5, 3), as GradBench's gmm writes it
    low = lower([(z.sin() * x).sum()._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node], low.slot_of[w._node]])
    values = [n.value for n in low.sources] + [rng.standard_normal(joint.tape.shapes[s]) for s in joint.seeds]
    comp = CompiledPlan(joint.tape)
    assert any(inverse for _, inverse in comp.into.values())  # the forward matmul and the gradient's
    assert_same(joint.tape, values, rtol=1e-12)
    lines, _ = driver_code(comp, [f"v[{i}]" for i in range(len(values))], {}, "return None")
    assert sum("laid out as" in line for line in lines) == 2, lines  # the driver writes them so too
