"""Hypothesis-generated programs: gradients (first and second order) against finite differences,
and the lowered tape survives verify and a print/parse round trip."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ngrad
from ngrad.engine.ir.graph import lower
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.ir.tape import parse
from ngrad.engine.transform.differentiate import split, vjp

from .oracles import tensor_fd_check

SHAPES = [(3, 4), (4,), (3, 1), ()]

UNARY = [
    lambda x: x.sin(),
    lambda x: x.tanh(),
    lambda x: x.sigmoid(),
    lambda x: x * x,
    lambda x: (x * x + 1).log(),
    lambda x: (x * 0.3).exp(),
    lambda x: 1 / (x * x + 1),
    lambda x: x.softmax(-1) if x.ndim else x,
    lambda x: x.cumsum(-1) if x.ndim else x,
    lambda x: ngrad.nn.functional.softplus(x),
    lambda x: (x * x + 0.5).sqrt(),
    lambda x: x.erf(),
]
BINARY = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b * 0.5, lambda a, b: ngrad.maximum(a, b * 1.1)]
REDUCE = [
    lambda x: x.sum(-1, keepdim=True) if x.ndim else x,
    lambda x: x.mean(),
    lambda x: x.logsumexp(-1) if x.ndim else x,
    lambda x: x.amax(-1) if x.ndim else x,
    lambda x: x.norm(),
    lambda x: x.var() if x.numel() > 1 else x,
]

program = st.lists(
    st.tuples(st.sampled_from(["u", "b", "r"]), st.integers(0, 100), st.integers(0, 100), st.integers(0, 100)),
    min_size=1,
    max_size=8,
)


def build(ops, *xs):
    pool = list(xs)
    for kind, i, j, k in ops:
        a = pool[i % len(pool)]
        if kind == "u":
            pool.append(UNARY[k % len(UNARY)](a))
        elif kind == "b":
            b = pool[j % len(pool)]
            try:
                pool.append(BINARY[k % len(BINARY)](a, b))
            except RuntimeError:  # shapes that do not broadcast: skip this step
                continue
        else:
            pool.append(REDUCE[k % len(REDUCE)](a))
    return sum(p.sum() for p in pool[len(xs) :]) + sum((x * x).sum() for x in xs) * 0.1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program, st.integers(0, 2**32 - 1))
def test_random_programs_have_correct_gradients(ops, seed):
    rng = np.random.default_rng(seed)
    inputs = [rng.uniform(-1.5, 1.5, s) for s in SHAPES[:3]]
    tensor_fd_check(lambda *xs: build(ops, *xs), inputs, rng, rtol=1e-4, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(program)
def test_random_programs_lower_to_valid_tapes(ops):
    xs = [ngrad.tensor(np.ones(s), requires_grad=True) for s in SHAPES[:3]]
    tape = lower([build(ops, *xs)._node], grad=True).tape.verify()
    assert parse(tape.format()).verify().format() == tape.format()


@settings(max_examples=25, deadline=None)
@given(program, st.integers(0, 2**32 - 1))
def test_random_programs_split_into_forward_and_backward_equal_to_the_joint(ops, seed):
    # what ngrad.compile runs for differentiable outputs: forward, then backward on what it saved
    rng = np.random.default_rng(seed)
    xs = [ngrad.tensor(rng.uniform(-1.5, 1.5, s), requires_grad=True) for s in SHAPES[:3]]
    low = lower([build(ops, *xs)._node], grad=True)
    tape = low.tape
    wrt = list(tape.inputs)
    parts = split(tape, wrt)
    parts.forward.verify()
    parts.backward.verify()
    values = [n.value for n in low.sources]
    seed_value = np.asarray(rng.standard_normal())
    joint = vjp(tape, wrt)
    want = interpret(joint.tape, values + [seed_value])
    out = interpret(parts.forward, values)
    saved = [out[i] if kind == "out" else values[i] for kind, i in parts.saved]
    got = interpret(parts.backward, saved + [seed_value for _ in parts.seeds])
    np.testing.assert_allclose(out[0], want[0], rtol=1e-12)
    for at, pos in zip(parts.grads, joint.grads):
        assert (at is None) == (pos is None)
        if at is not None:
            np.testing.assert_allclose(got[at], want[pos], rtol=1e-10, atol=1e-12)
