"""Loops of one function run in blocks of rows (``codegen.blocks``): each block of rows goes
through every loop of a run before the next block, when each loop reads what the run's loops
before it store only at rows they have made: its own or lower ones (a concatenation's piece, an
unslice; the blocks go up), or its own or higher ones (an unslice of a slice, read as one window
of the slice's source, ``fuse``; the blocks go down). The compiled plans equal the
interpreter, values and gradients, with blocks smaller than the arrays (a last block cut short)
and larger, on two calls; a loop reading a value of the run both one row up and one row down
starts a run of its own."""

import numpy as np
import pytest

import ngrad
from ngrad.bench.problems import ode
from ngrad.engine.backend import codegen
from ngrad.engine.backend.fuse import ReadKind, fuse
from ngrad.engine.ir.graph import lower
from ngrad.engine.ir.interpret import interpret, np_dtype
from ngrad.engine.runtime.dispatch import prepare
from ngrad.engine.transform.differentiate import vjp

from .compiled import assert_same

pytestmark = [pytest.mark.usefixtures("jit_always"), pytest.mark.numba]


def _joint(fn, arrays, rng):
    """The joint tape (value and gradient of every input) of ``fn`` and its inputs."""
    xs = [ngrad.tensor(a, requires_grad=True) for a in arrays]
    low = lower([fn(*xs)._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node] for x in xs])
    seeds = [rng.standard_normal(joint.tape.shapes[s]).astype(np_dtype(joint.tape.dtypes[s])) for s in joint.seeds]
    return joint.tape, [n.value for n in low.sources] + seeds


def _forward(fn, arrays):
    """The tape of ``fn`` (no gradient) and its inputs."""
    low = lower([fn(*[ngrad.tensor(a) for a in arrays])._node])
    return low.tape, [n.value for n in low.sources]


def _rk4(x, y):
    # GradBench ode's step: four loops, each reading the stage before it one row down
    return ode.rk4_step(ngrad, x, y, 0.125)


def _runs(tape):
    return codegen.blocks(fuse(tape).kernels())


def _same_each_call(tape, values, rng, rtol):
    """The compiled plan equals the interpreter, and again on other inputs (a loop reading a row
    not made yet would find the last call's value in the reused buffer)."""
    assert_same(tape, values, rtol)
    drive = prepare(tape)
    for vs in (values, [np.asarray(v * rng.uniform(0.5, 2.0, np.shape(v)), np.asarray(v).dtype) for v in values]):
        for got, want in zip(drive(vs), interpret(tape, vs), strict=True):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("n", [37, 3])
def test_an_rk4_step_runs_in_blocks_and_equals_the_interpreter(n, monkeypatch, rng):
    monkeypatch.setattr(codegen, "BLOCK_ROWS", 4)  # 37 rows: nine blocks and one of a row
    x, y = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    forward, inputs = _forward(_rk4, [x, y])
    runs = _runs(forward)
    assert runs == [codegen.Run([0, 1, 2, 3], False)]  # the four stages, one run going up
    kernels = fuse(forward).kernels()
    assert "for blk0 in range(0, k0_n0, 4):" in codegen.program(kernels, forward).text
    _same_each_call(forward, inputs, rng, rtol=1e-13)
    tape, values = _joint(lambda x, y: (_rk4(x, y) * y).sin(), [x, y], rng)
    assert _runs(tape)
    _same_each_call(tape, values, rng, rtol=1e-12)


def _up(a, b):
    # the second loop reads the first's result one row up: blocks from the last row down
    c = (a * b).sin()
    return (ngrad.cat([c[1:], b[:1]]) * a).exp() + c


def _down(a, b):
    # one row down, then two (the gradient reads the slices' gradients: unslices)
    c = (a * b).sin()
    d = (ngrad.cat([a[:1], c[:-1]]) * b).cos()
    return (d * ngrad.cat([b[:2], c[:-2]])).tanh()


def _both(a, b):
    # one row up and one row down in the same loop: that loop cannot share the blocks of c's
    c = (a * b).sin()
    return (ngrad.cat([c[1:], b[:1]]) * ngrad.cat([a[:1], c[:-1]])).exp()


@pytest.mark.parametrize("fn,runs", [(_up, [([0, 1], True)]), (_down, [([0, 1], False)]), (_both, [])])
def test_runs_go_up_or_down_as_their_reads_allow(fn, runs, monkeypatch, rng):
    monkeypatch.setattr(codegen, "BLOCK_ROWS", 8)
    a, b = rng.standard_normal(29), rng.standard_normal(29)
    tape, inputs = _forward(fn, [a, b])
    assert [(run.loops, run.descending) for run in _runs(tape)] == runs
    text = codegen.program(fuse(tape).kernels(), tape).text
    assert ("the last first" in text) == any(down for _, down in runs)
    _same_each_call(tape, inputs, rng, rtol=1e-12)
    joint, values = _joint(fn, [a, b], rng)
    _same_each_call(joint, values, rng, rtol=1e-12)


def _slices(x):
    # a concatenation's gradient is sliced, and a slice's gradient unslices it back: along the
    # rows, along axis 1, and with a step (which is not read through)
    rows = (ngrad.cat([x[:1], x[:-1]], 0) * x).sin().sum()
    cols = (ngrad.cat([x[:, 1:], x[:, :1]], 1) * x).cos().sum()
    return rows + cols + (ngrad.cat([x[::2], x[1::2]], 0) ** 2 * x).sum()


def test_an_unslice_of_a_slice_reads_the_slice_source(rng):
    """The gradient of ``x[:-1]`` through a concatenation (an unslice of the concatenation's
    gradient sliced) is read from that gradient itself, one row up (one column, on axis 1); a
    strided slice is still read as a view."""
    x = rng.standard_normal((19, 7))
    tape, values = _joint(_slices, [x], rng)
    plan = fuse(tape)
    pads = [r for k in plan.kernels() for r in k.reads.values() if r.kind == ReadKind.PAD]
    assert any(r.window[0][0] < 0 for r in pads)  # read at higher rows of their source
    assert any(r.window[1][0] < 0 for r in pads)  # and at higher columns
    _same_each_call(tape, values, rng, rtol=1e-12)


def test_blocks_larger_than_the_rows_and_no_run_without_two_loops(rng):
    x, y = rng.uniform(-1, 1, 11), rng.uniform(-1, 1, 11)  # one block of the default size
    assert_same(*_forward(_rk4, [x, y]), rtol=1e-13)
    one, _ = _forward(lambda x: (x * 2.0).sin(), [x])
    assert codegen.blocks(fuse(one).kernels()) == []
    assert "blk0" not in codegen.program(fuse(one).kernels(), one).text
