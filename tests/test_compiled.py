"""Compiled tapes (fused Numba kernels) against the NumPy interpreter: every primitive, float32
and float64, the op corpus with gradients, random programs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ngrad.engine.transform.differentiate import vjp

from . import test_ops, test_prims
from .compiled import assert_same, corpus_joint, prim_joint, random_joint
from .oracles import prim_tape
from .test_random_graphs import program

pytestmark = pytest.mark.usefixtures("jit_always")


@pytest.mark.parametrize("name", sorted(test_prims.CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_primitive_with_its_vjp(name, dtype, rng):
    tape, values = prim_joint(name, dtype, rng)
    assert_same(tape, values, rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize(
    "name",
    ["lt", "le", "gt", "ge", "eq", "ne", "logical_and", "logical_or", "logical_not", "isnan", "argmax", "argmin"]
    + ["splice"],
)
def test_non_differentiable_primitives(name):
    x = np.array([[1.0, np.nan, 3.0], [2.0, 2.0, -1.0]])
    y = np.array([[1.0, 0.0, 4.0], [np.nan, 2.0, 0.0]])
    if name.startswith("logical"):
        args = [x > 1, y > 1][: 1 if name == "logical_not" else 2]
        params = {}
    elif name in ("argmax", "argmin"):
        args, params = [np.nan_to_num(x)], {"axis": 1, "keepdim": False}
    elif name == "isnan":
        args, params = [x], {}
    else:
        args, params = [x, y], {}
    tape, _ = prim_tape(name, args, params)
    assert_same(tape, args, 0)


def test_splice_joint_compiled_equals_interpreted(rng):
    x, y = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    tape, _ = prim_tape("splice", [x, y], {})
    joint = vjp(tape, tape.inputs)
    assert_same(joint.tape, [x, y, rng.standard_normal((2, 3))], 0)


@pytest.mark.parametrize("name", sorted(test_ops.CASES))
def test_op_corpus_values_and_gradients(name, rng):
    tape, values = corpus_joint(name, rng)
    assert_same(tape, values, rtol=1e-10)


def test_nan_and_inf_semantics_survive_compilation():
    x = np.array([np.nan, 1.0, -np.inf, 0.0])
    y = np.array([1.0, np.nan, 2.0, 0.0])
    for name in ("maximum", "minimum"):
        tape, _ = prim_tape(name, [x, y], {})
        assert_same(tape, [x, y], 0)
    for name in ("amax", "amin"):
        tape, _ = prim_tape(name, [np.array([[1.0, np.nan], [3.0, -1.0]])], {"axes": (1,), "keepdim": False})
        assert_same(tape, [np.array([[1.0, np.nan], [3.0, -1.0]])], 0)
    tape, _ = prim_tape("div", [np.array([1.0, -1.0, 0.0]), np.zeros(3)], {})
    assert_same(tape, [np.array([1.0, -1.0, 0.0]), np.zeros(3)], 0)


# Hypothesis: random programs (the generator of test_random_graphs) compiled against interpreted,
# values and gradients. Few examples: each distinct program compiles new kernels.
@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(program, st.integers(0, 2**32 - 1))
@example(ops=[("u", 0, 0, 0)] * 5 + [("r", 50, 0, 0)], seed=0)  # found by Hypothesis: a no-op expand
def test_random_programs_compiled_equal_interpreted(ops, seed):
    assert_same(*random_joint(ops, seed), rtol=1e-10)
