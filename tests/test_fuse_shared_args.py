"""An argument several loops of one generated function read (an input array by slot, broadcast
pattern and row slicing; a scalar) is passed once (``codegen.program``: ``Source.keep``, each
loop's name bound to the first's), by the driver, the executor and the chunks of rows on
threads alike. The compiled plans equal the interpreter, values and gradients, on two calls with
other values, serial and on two threads."""

import numpy as np
import pytest

import ngrad
from ngrad.bench.problems import ode
from ngrad.engine.backend import codegen
from ngrad.engine.backend.fuse import fuse
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.runtime import layout
from ngrad.engine.runtime.dispatch import prepare
from ngrad.engine.runtime.executor import execute
from ngrad.engine.runtime.plan import CompiledPlan

from .compiled import graph_tape

pytestmark = [pytest.mark.usefixtures("jit_always"), pytest.mark.numba]


def _signature(text):
    return text.split("def kernel(")[1].split(")")[0].split(", ")


def _same_twice(tape, values, rng):
    """The executor's run and the driver's equal the interpreter, again on other values."""
    plan = CompiledPlan(tape)
    plan.compile()
    drive = prepare(tape)
    for vs in (values, [np.asarray(v * rng.uniform(0.5, 2.0, np.shape(v)), np.asarray(v).dtype) for v in values]):
        want = interpret(tape, vs)
        for got in (execute(plan, vs), drive(vs)):
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("grad", [False, True])
def test_an_rk4_step_passes_each_array_once(grad, rng):
    n = 300
    x, y = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    tape, values = graph_tape(lambda x, y: (ode.rk4_step(ngrad, x, y, 0.125) * y).sin(), [x, y], rng, grad)
    source = codegen.program(fuse(tape).kernels(), tape, outside=set(tape.outputs))
    params = _signature(source.text)
    assert source.keep is not None and len(params) == len(source.keep)
    every = sum(len(codegen._argument_keys(j, p)) for j, p in enumerate(source.parts))
    assert len(params) < every
    # every loop reads x: one parameter, the other loops' names bound to it
    assert source.text.count("  # the same argument") == every - len(params)
    _same_twice(tape, values, rng)


def _rows(x, w):
    # loops over the rows of one function, each reading x and w, a row sum between them: on
    # threads, in chunks of rows
    a = (x * w).exp()
    return ((a / a.sum(1, keepdim=True) + x) * w).sum()


def _value_and_grad(x0, w0):
    x = ngrad.from_numpy(x0).requires_grad_()
    y = _rows(x, ngrad.from_numpy(w0))
    y.backward()
    return y.item(), x.grad.numpy()


def test_shared_arguments_of_chunks_on_threads(monkeypatch, rng):
    monkeypatch.setattr(layout, "PARALLEL_WORK", 1)
    shape = (layout.PARALLEL_MIN // 4, 8)
    x0, w0 = rng.uniform(-1, 1, shape), rng.uniform(0.5, 1, shape)
    tape, _ = graph_tape(_rows, [x0, w0], rng, True)
    funcs = CompiledPlan(tape).threaded
    assert any(s is not None and s.keep is not None and c for s, c in zip(funcs.sources, funcs.chunked))
    for scale in (1.0, 0.5):  # two calls, other values
        monkeypatch.setenv("NGRAD_JIT", "never")
        want = _value_and_grad(x0 * scale, w0)
        monkeypatch.setenv("NGRAD_JIT", "always")
        for threads in (1, 2):
            ngrad.set_num_threads(threads)
            try:
                got = _value_and_grad(x0 * scale, w0)
            finally:
                ngrad.set_num_threads(1)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-11)
            np.testing.assert_allclose(got[1], want[1], rtol=1e-11, atol=1e-13)
