"""Loops of one function run in blocks of rows (``codegen.blocks``): each block of rows goes
through every loop of a run before the next block, when each loop reads what the run's loops
before it store only at rows they have made (its own, or lower: a concatenation's piece, an
unslice). The compiled plans equal the interpreter, values and gradients, with blocks smaller
than the arrays (a last block cut short) and larger; a loop reading a value of the run at a
higher row starts a run of its own."""

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
    for vs in (values, [v * rng.uniform(0.5, 2.0, np.shape(v)) for v in values]):
        for got, want in zip(drive(vs), interpret(tape, vs), strict=True):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("n", [37, 3])
def test_an_rk4_step_runs_in_blocks_and_equals_the_interpreter(n, monkeypatch, rng):
    monkeypatch.setattr(codegen, "BLOCK_ROWS", 4)  # 37 rows: nine blocks and one of a row
    x, y = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    forward, inputs = _forward(_rk4, [x, y])
    runs = _runs(forward)
    assert [len(r) for r in runs] == [4]  # the four stages, one run
    kernels = fuse(forward).kernels()
    assert "for blk0 in range(0, k0_n0, 4):" in codegen.program(kernels, forward).text
    _same_each_call(forward, inputs, rng, rtol=1e-13)
    tape, values = _joint(lambda x, y: (_rk4(x, y) * y).sin(), [x, y], rng)
    assert _runs(tape)
    _same_each_call(tape, values, rng, rtol=1e-12)


def _up(a, b):
    # the second loop reads the first's result one row up: it cannot run in the same blocks
    c = (a * b).sin()
    return (ngrad.cat([c[1:], b[:1]]) * a).exp() + c


def _down(a, b):
    # one row down, then two (the gradient reads the slices' gradients: unslices)
    c = (a * b).sin()
    d = (ngrad.cat([a[:1], c[:-1]]) * b).cos()
    return (d * ngrad.cat([b[:2], c[:-2]])).tanh()


def test_a_read_of_a_higher_row_starts_a_run_of_its_own(monkeypatch, rng):
    monkeypatch.setattr(codegen, "BLOCK_ROWS", 8)
    a, b = rng.standard_normal(29), rng.standard_normal(29)
    tape, inputs = _forward(_up, [a, b])
    kernels = fuse(tape).kernels()
    reader = next(j for j, k in enumerate(kernels) if any(r.kind == ReadKind.CAT for r in k.reads.values()))
    assert not any(reader in run and run[0] < reader for run in codegen.blocks(kernels))
    _same_each_call(tape, inputs, rng, rtol=1e-12)
    down, _ = _forward(_down, [a, b])
    assert [len(r) for r in _runs(down)] == [2]  # sin, then cos and tanh through rows down
    for fn in (_up, _down):
        joint, values = _joint(fn, [a, b], rng)
        _same_each_call(joint, values, rng, rtol=1e-12)


def test_blocks_larger_than_the_rows_and_no_run_without_two_loops(rng):
    x, y = rng.uniform(-1, 1, 11), rng.uniform(-1, 1, 11)  # one block of the default size
    assert_same(*_forward(_rk4, [x, y]), rtol=1e-13)
    one, _ = _forward(lambda x: (x * 2.0).sin(), [x])
    assert codegen.blocks(fuse(one).kernels()) == []
    assert "blk0" not in codegen.program(fuse(one).kernels(), one).text
