"""A run of loops in blocks of rows (``codegen.blocks``) keeps the values only its own later loops
read in buffers of one block's rows and the rows beyond it those loops read (``blocking.held``),
instead of arrays of the full extent: the buffers hold the block and, moved from the block
before, the rows below it (blocks going up) or above it (going down); when the loops read
farther from their row than a block, the buffers hold every row. The compiled plans equal the
interpreter, values and gradients, on two calls, each way and at both reaches."""

import numpy as np
import pytest

import ngrad
from ngrad.bench.problems import ode
from ngrad.engine.backend import blocking, codegen
from ngrad.engine.backend.fuse import fuse
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.runtime.dispatch import prepare

from .compiled import assert_same, graph_tape

pytestmark = [pytest.mark.usefixtures("jit_always"), pytest.mark.numba]


def _held(tape):
    """The slots the program of every loop of ``tape`` holds a block at a time (only the tape's
    outputs read outside it)."""
    kernels = fuse(tape).kernels()
    return blocking.held(kernels, tape, set(tape.outputs), codegen.blocks(kernels))


def _same_each_call(tape, values, rng):
    """The compiled plan equals the interpreter, and again on other inputs (a buffer holding
    rows of the last call, or of the wrong block, would show)."""
    assert_same(tape, values, 1e-12)
    drive = prepare(tape)
    for vs in (values, [np.asarray(v * rng.uniform(0.5, 2.0, np.shape(v)), np.asarray(v).dtype) for v in values]):
        for got, want in zip(drive(vs), interpret(tape, vs), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _far(a, b):
    # the second loop reads the first's value 9 rows down: more than a block of 4
    c = (a * b).sin()
    return (ngrad.cat([b[:9], c[:-9]]) * a).exp()


def _up(a, b):
    # the second loop reads the first's value one row up: blocks from the last row down
    c = (a * b).sin()
    return (ngrad.cat([c[1:], b[:1]]) * a).exp() + c


@pytest.mark.parametrize("n", [37, 3])
def test_an_rk4_step_holds_its_stages_a_block_at_a_time(n, monkeypatch, rng):
    monkeypatch.setattr(codegen, "BLOCK_ROWS", 4)  # 37 rows: nine blocks and one of a row
    x, y = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    forward, inputs = graph_tape(lambda x, y: ode.rk4_step(ngrad, x, y, 0.125), [x, y], rng, False)
    assert len(_held(forward)) == 3  # the stages the last loop combines; it stores y only
    text = codegen.program(fuse(forward).kernels(), forward, outside=set(forward.outputs)).text
    assert text.count("a block at a time") == 3 and "loc0 = h0 <= 4" in text
    _same_each_call(forward, inputs, rng)
    joint, values = graph_tape(lambda x, y: (ode.rk4_step(ngrad, x, y, 0.125) * y).sin(), [x, y], rng, True)
    assert _held(joint)  # the reverse loops' gradients of the stages, going down
    _same_each_call(joint, values, rng)


@pytest.mark.parametrize("fn", [_far, _up])
def test_reads_beyond_a_block_each_way(fn, monkeypatch, rng):
    monkeypatch.setattr(codegen, "BLOCK_ROWS", 4)
    a, b = rng.standard_normal(29), rng.standard_normal(29)
    for grad in (False, True):
        tape, values = graph_tape(fn, [a, b], rng, grad)
        if not grad and fn is _far:
            assert _held(tape)  # held, at every row: 9 rows below the block is more than a block
        _same_each_call(tape, values, rng)


def _stages(shift):
    """Three RK4-like stages, each reading the one before ``shift`` rows down, whose gradients
    read each other ``shift`` rows up: the joint's forward loops lead its reverse loops."""

    def f(x, y):
        def rhs(y):
            return x * ngrad.cat([ngrad.ones_like(x[:shift]), y[:-shift]])

        k1 = rhs(y)
        k2 = rhs(y + 0.5 * k1)
        k3 = rhs(y + 0.5 * k2)
        return ((y + (k1 + 2 * k2 + k3) / 4) * y).sin()

    return f


@pytest.mark.parametrize("shift,n", [(1, 37), (1, 3), (6, 37), (6, 13)])
def test_a_reverse_pass_recomputes_the_loops_leading_it_block_by_block(shift, n, monkeypatch, rng):
    """The forward loops of a joint lead its reverse loops in one pass down the rows: each block
    recomputes them over itself and the rows below and above it that the later loops reach,
    through as many stages as they chain (``shift`` 1: within a block of 4; 6: beyond it, where
    the buffers hold every row and the first block computes them all)."""
    monkeypatch.setattr(codegen, "BLOCK_ROWS", 4)
    x, y = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    joint, values = graph_tape(_stages(shift), [x, y], rng, True)
    kernels = fuse(joint).kernels()
    runs, keep = blocking.settle(kernels, joint, set(joint.outputs))
    assert [(run.descending, run.lead) for run in runs] == [(True, 3)]
    assert all(st in keep for j in runs[0].loops[:3] for st in kernels[j].stores if st not in joint.outputs)
    text = codegen.program(kernels, joint, outside=set(joint.outputs)).text
    assert "offu0 = blk0 - hb0" in text and "k0_b1 = min(" in text
    _same_each_call(joint, values, rng)


def test_a_lead_whose_value_is_read_outside_runs_apart(rng):
    # the forward loops' stages are outputs as well: not held, so their run goes up on its own
    x, y = rng.uniform(-1, 1, 29), rng.uniform(-1, 1, 29)
    joint, _ = graph_tape(_stages(1), [x, y], rng, True)
    kernels = fuse(joint).kernels()
    stored = {st for k in kernels[:3] for st in k.stores}
    runs, _ = blocking.settle(kernels, joint, set(joint.outputs) | stored)
    assert all(not run.lead for run in runs)


def test_a_value_read_outside_the_run_is_not_held(rng):
    a, b = rng.standard_normal(29), rng.standard_normal(29)
    tape, _ = graph_tape(_up, [a, b], rng, False)
    kernels = fuse(tape).kernels()
    stored = {s for k in kernels for s in k.stores}
    assert blocking.held(kernels, tape, stored, codegen.blocks(kernels)) == {}
    assert blocking.held(kernels, tape, None, codegen.blocks(kernels)) == {}


@pytest.mark.slow  # two RK4 bodies to compile: about 15 s
def test_an_ode_gradient_holds_its_reverse_steps_gradients(monkeypatch, rng):
    """GradBench ode's gradient as a scan run step by step (y_n-1 is not zero once n / 4 steps
    have passed: a step reaches 4 rows up): its reverse step is one pass down the rows, each
    block recomputing the RK4 stages over itself and the rows beyond it their gradients read,
    then the gradients, all held (a block of 8 rows and those beyond it), and the gradient
    equals the written-out NumPy reference, on two calls with other inputs."""
    monkeypatch.setattr(codegen, "BLOCK_ROWS", 8)
    n = 37
    monkeypatch.setenv("NGRAD_SCAN_UNROLL", "0")
    texts = []
    program = codegen.program

    def recorded(*args, **kwargs):
        source = program(*args, **kwargs)
        texts.append(source.text)
        return source

    monkeypatch.setattr("ngrad.engine.runtime.layout.program", recorded)
    system = ode.PROBLEMS[0].system("ngrad")
    for s in (12, 10):
        inp = {"x": rng.uniform(-1, 1, n), "s": s}
        value, grads = system(inp)
        want_value, want = ode.numpy(inp)
        np.testing.assert_allclose(value, want_value, rtol=1e-12)
        assert np.count_nonzero(want["x"]) == n
        np.testing.assert_allclose(grads["x"], want["x"], rtol=1e-11, atol=0)
    # one pass: the four stages recomputed block by block (``offu``), then three of their
    # gradients going down, all seven held
    assert any("the last first" in t and "offu" in t and t.count("a block at a time") == 7 for t in texts)
