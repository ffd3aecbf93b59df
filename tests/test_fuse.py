"""Fusion decisions: which instructions share a kernel, what a kernel stores."""

import numpy as np
import pytest

import ngrad
from ngrad.engine.backend.codegen import render
from ngrad.engine.backend.fuse import fuse
from ngrad.engine.ir.graph import lower
from ngrad.engine.transform.differentiate import vjp

from .compiled import assert_same

pytestmark = pytest.mark.usefixtures("jit_always")


def test_broadcast_then_reduce_is_one_kernel_without_temporary():
    x = ngrad.tensor(np.random.default_rng(0).standard_normal((5, 3)), requires_grad=True)
    y = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    plan = fuse(lower([y._node]).tape)
    (k,) = plan.kernels()
    assert k.shape == (5, 5, 3) and k.stores == [] and len(k.reductions) == 1
    assert "(broadcast)" in render(k, plan.tape).text


def test_no_op_movements_inside_a_kernel():
    """Regression (found by Hypothesis): an expand to its own shape inside a fused loop."""
    from ngrad.engine.ir.tape import parse

    tape = parse("""\
in %0 : f64[3,1]
in %1 : f64[] scalar
%2 = reshape(%1; shape=(1, 1)) : f64[1,1]
%3 = expand(%2; shape=(3, 1)) : f64[3,1]
%4 = expand(%3; shape=(3, 1)) : f64[3,1]
%5 = mul(%4, %0) : f64[3,1]
%6 = reshape(%5; shape=(3, 1)) : f64[3,1]
out %6 %3""")
    assert_same(tape.verify(), [np.arange(3.0).reshape(3, 1), 2.0], rtol=0)


@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)])
@pytest.mark.parametrize("op", ["sum", "amax", "prod"])
def test_reductions_over_an_unrolled_short_axis(axes, op, rng):
    # the trailing extent 3 is unrolled in the source; each reduction keeps its own accumulators
    x0 = rng.uniform(0.5, 1.5, (6, 5, 3))
    tape = lower([_reduce(ngrad.from_numpy(x0).exp(), op, axes)._node]).tape
    k = fuse(tape).kernels()[0]
    assert "_2 = " in render(k, tape).text  # three copies of the body
    assert_same(tape, [x0], rtol=1e-12)


def _reduce(t, op, axes):
    if op == "sum":
        return t.sum(axes)
    if op == "amax":
        return t.amax(axes)
    for a in sorted(axes, reverse=True):
        t = t.prod(a)
    return t


def test_one_element_kernels_run_early_so_big_loops_fuse():
    # the seed times 1/2 is computed before the (N, N) loops: forward and reverse share one loop
    x = ngrad.randn(40, 3, dtype=ngrad.float64, requires_grad=True)
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1) + ngrad.eye(40, dtype=ngrad.float64)
    e = ((1 / r2) ** 3).sum() / 2
    low = lower([e._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    plan = fuse(joint.tape)
    assert [k.shape for k in plan.kernels()].count((40, 40)) == 1


def test_a_value_is_stored_only_by_the_kernel_that_computes_it_first(rng):
    # gmm's shape of plan: x - mu is stored for a matmul, and later loops recompute it (cheap
    # arithmetic) rather than reload it; they must not store it again
    x = ngrad.tensor(rng.standard_normal((40, 5, 3)), requires_grad=True)
    mu = ngrad.tensor(rng.standard_normal((5, 3)), requires_grad=True)
    w = ngrad.tensor(rng.standard_normal((5, 3, 3)), requires_grad=True)
    xc = x - mu
    z = xc * mu.exp() + ngrad.matmul(xc.transpose(0, 1), w).transpose(0, 1)
    low = lower([(z * z).sum()._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[n._node] for n in (x, mu, w)])
    stored = [s for k in fuse(joint.tape).kernels() for s in k.stores]
    assert len(stored) == len(set(stored))
    values = [n.value for n in low.sources] + [np.ones(joint.tape.shapes[s]) for s in joint.seeds]
    assert_same(joint.tape, values, rtol=1e-12)


def test_reductions_of_the_last_iteration_share_a_loop_before_the_next_iteration():
    """PyTorch's polynomial tutorial realizes, at each ``.item()``, the last iteration's four
    gradient sums, the coefficient updates and the next loss: two loops (the sums, then the
    forward with the loss), whatever order lowering walks them in; compiled equals interpreted."""
    x = ngrad.tensor(np.linspace(-1.0, 1.0, 50))
    y = ngrad.tensor(np.sin(np.linspace(-1.0, 1.0, 50)))
    a, b, c, d = (ngrad.tensor(v, dtype=ngrad.float64) for v in (0.1, -0.2, 0.3, -0.05))
    y_pred = a + b * x + c * x**2 + d * x**3
    y_pred.sum().item()
    g = 2.0 * (y_pred - y)
    a = a - 1e-3 * g.sum()
    b = b - 1e-3 * (g * x).sum()
    c = c - 1e-3 * (g * x**2).sum()
    d = d - 1e-3 * (g * x**3).sum()
    loss = (a + b * x + c * x**2 + d * x**3 - y).pow(2).sum()
    low = lower([loss._node, a._node, b._node, c._node, d._node])
    kernels = fuse(low.tape).kernels()
    assert len(kernels) == 2
    assert len(kernels[0].reductions) == 4 and len(kernels[1].reductions) == 1
    assert_same(low.tape, [n.value for n in low.sources], rtol=1e-12)
