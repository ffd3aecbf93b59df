"""Shared helpers of the compiler tests: a tape run compiled (by the runtime and by a prepared
driver) against the interpreter, and the joint tapes of the primitive and op corpora."""

import numpy as np

import ngrad
from ngrad.engine.ir.graph import lower
from ngrad.engine.ir.interpret import interpret, np_dtype
from ngrad.engine.runtime import prepare
from ngrad.engine.runtime.executor import execute
from ngrad.engine.runtime.plan import CompiledPlan
from ngrad.engine.transform.differentiate import vjp

from . import test_ops, test_prims
from .oracles import draw, prim_tape
from .test_random_graphs import SHAPES, build


def compiled(tape, values):
    comp = CompiledPlan(tape)
    comp.compile()
    return execute(comp, values)


def assert_same(tape, values, rtol):
    """The plan run by the runtime and by a prepared driver (ngrad.compile's path) both equal
    the interpreter."""
    ref = interpret(tape, values)
    for got in (compiled(tape, values), prepare(tape)(values)):
        for a, b in zip(got, ref):
            assert a.shape == b.shape and a.dtype == b.dtype
            if a.dtype.kind in "fc":
                np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
            else:
                np.testing.assert_array_equal(a, b)


def graph_tape(fn, arrays, rng, grad):
    """The tape of ``fn`` on tensors of ``arrays`` (with ``grad``, its joint tape: value and
    gradient of every input) and its inputs, random seeds included."""
    xs = [ngrad.tensor(a, requires_grad=grad) for a in arrays]
    low = lower([fn(*xs)._node], grad=grad)
    if not grad:
        return low.tape, [n.value for n in low.sources]
    joint = vjp(low.tape, [low.slot_of[x._node] for x in xs])
    seeds = [rng.standard_normal(joint.tape.shapes[s]).astype(np_dtype(joint.tape.dtypes[s])) for s in joint.seeds]
    return joint.tape, [n.value for n in low.sources] + seeds


def prim_joint(name, dtype, rng):
    """The joint tape of primitive ``name``'s test case in ``dtype``, and its input values."""
    args, params, wrt = test_prims.CASES[name]
    cdtype = np.complex64 if dtype == np.float32 else np.complex128
    args = [a.astype(dtype) if a.dtype.kind == "f" else (a.astype(cdtype) if a.dtype.kind == "c" else a) for a in args]
    if name == "cast":
        params = {"dtype": "f64" if dtype == np.float32 else "f32"}
    if name == "scan" and dtype == np.float32:  # the body's dtypes are spelled in its text
        params = dict(params, body=params["body"].replace("f64", "f32"))
    tape, _ = prim_tape(name, args, params)
    joint = vjp(tape, [tape.inputs[i] for i in wrt])
    seeds = [
        draw(rng, joint.tape.shapes[s], joint.tape.dtypes[s]).astype(np_dtype(joint.tape.dtypes[s]))
        for s in joint.seeds
    ]
    return joint.tape, list(args) + seeds


def corpus_joint(name, rng):
    """The joint tape of op-corpus program ``name``, and its input values."""
    fn, inputs = test_ops.CASES[name]
    xs = [ngrad.tensor(a, requires_grad=True) for a in inputs]
    out = fn(ngrad, *xs)
    low = lower([out._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node] for x in xs if x._node in low.slot_of])
    seeds = [rng.standard_normal(joint.tape.shapes[s]) for s in joint.seeds]
    return joint.tape, [n.value for n in low.sources] + seeds


def random_joint(ops, seed):
    """The joint tape of random program ``ops`` (``test_random_graphs``) on inputs drawn from
    ``seed``, and its input values (cotangents of ones)."""
    rng = np.random.default_rng(seed)
    xs = [ngrad.tensor(rng.uniform(-1.5, 1.5, s), requires_grad=True) for s in SHAPES[:3]]
    out = build(ops, *xs)
    low = lower([out._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node] for x in xs])
    seeds = [np.ones(joint.tape.shapes[s]) for s in joint.seeds]
    return joint.tape, [n.value for n in low.sources] + seeds
