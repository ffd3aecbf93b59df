"""Every primitive: forward against NumPy, VJP against finite differences (first and second order)."""

import re

import numpy as np
import pytest

from ngrad.engine.backend.bytecode import encode
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.ir.prims import PRIMS, TapeError
from ngrad.engine.transform.differentiate import jvp, vjp

from . import (
    cases_complex_math,
    cases_composite,
    cases_control,
    cases_fft,
    cases_linalg,
    cases_scatter,
    cases_selection,
)
from .oracles import dot_check, draw, inner, prim_tape, second_order_tape

R = np.random.default_rng(7)


def n(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, shape)


def pos(*shape):
    return R.uniform(0.5, 2.0, shape)


IDX = np.array([[2, 0, 1], [1, 1, 0]])

# (prim, args, params, differentiable argument positions)
CASES = {
    "neg": ([n(3, 4)], {}, [0]),
    "exp": ([n(3, 4)], {}, [0]),
    "log": ([pos(3, 4)], {}, [0]),
    "log1p": ([pos(3, 4)], {}, [0]),
    "expm1": ([n(3, 4)], {}, [0]),
    "sqrt": ([pos(3, 4)], {}, [0]),
    "sin": ([n(3, 4)], {}, [0]),
    "cos": ([n(3, 4)], {}, [0]),
    "tan": ([n(3, 4, lo=-1, hi=1)], {}, [0]),
    "asin": ([n(3, 4, lo=-0.8, hi=0.8)], {}, [0]),
    "acos": ([n(3, 4, lo=-0.8, hi=0.8)], {}, [0]),
    "atan": ([n(3, 4)], {}, [0]),
    "sinh": ([n(3, 4)], {}, [0]),
    "cosh": ([n(3, 4)], {}, [0]),
    "tanh": ([n(3, 4)], {}, [0]),
    "sigmoid": ([n(3, 4)], {}, [0]),
    "softplus": ([n(3, 4)], {}, [0]),
    "erf": ([n(3, 4)], {}, [0]),
    "abs": ([n(3, 4)], {}, [0]),
    "sign": ([n(3, 4)], {}, [0]),
    "floor": ([n(3, 4) + 0.5], {}, [0]),
    "ceil": ([n(3, 4) + 0.5], {}, [0]),
    "round": ([np.floor(n(3, 4)) + 0.3], {}, [0]),
    "cast": ([n(3, 4)], {"dtype": "f64"}, [0]),
    "add": ([n(3, 4), n(3, 4)], {}, [0, 1]),
    "sub": ([n(3, 4), n(3, 4)], {}, [0, 1]),
    "mul": ([n(3, 4), n(3, 4)], {}, [0, 1]),
    "div": ([n(3, 4), pos(3, 4)], {}, [0, 1]),
    "pow": ([pos(3, 4), n(3, 4)], {}, [0, 1]),
    "maximum": ([n(3, 4), n(3, 4)], {}, [0, 1]),
    "minimum": ([n(3, 4), n(3, 4)], {}, [0, 1]),
    "remainder": ([n(3, 4) * 4, n(3, 4)], {}, [0, 1]),
    "atan2": ([n(3, 4), n(3, 4)], {}, [0, 1]),
    "fmod": ([n(3, 4) * 4, n(3, 4)], {}, [0, 1]),
    "where": ([n(3, 4) > 0, n(3, 4), n(3, 4)], {}, [1, 2]),
    "sum": ([n(3, 4, 2)], {"axes": (0, 2), "keepdim": False}, [0]),
    "prod": ([pos(3, 4)], {"axes": (1,), "keepdim": True}, [0]),
    "amax": ([n(3, 4)], {"axes": (1,), "keepdim": False}, [0]),
    "amin": ([n(3, 4)], {"axes": (0, 1), "keepdim": False}, [0]),
    "cumsum": ([n(3, 4)], {"axis": 1}, [0]),
    "reshape": ([n(3, 4)], {"shape": (2, 6)}, [0]),
    "permute": ([n(2, 3, 4)], {"perm": (2, 0, 1)}, [0]),
    "expand": ([n(3, 1)], {"shape": (3, 4)}, [0]),
    "slice": ([n(5, 4)], {"starts": (1, 0), "stops": (5, 4), "steps": (2, 3)}, [0]),
    "unslice": ([n(2, 2)], {"shape": (5, 4), "starts": (1, 0), "stops": (5, 4), "steps": (2, 3)}, [0]),
    "flip": ([n(3, 4)], {"axes": (0, 1)}, [0]),
    "cat": ([n(2, 3), n(4, 3), n(1, 3)], {"axis": 0}, [0, 1, 2]),
    "index": ([n(4, 3, 2), IDX, IDX], {"axis": 0}, [0]),
    "unindex": ([n(2, 3, 2), IDX, IDX], {"shape": (4, 3, 2), "axis": 0}, [0]),
    "gather": ([n(3, 4), np.array([[0, 3, 3, 1], [2, 2, 0, 1], [1, 0, 0, 0]])], {"axis": 1}, [0]),
    "scatter_add": ([n(3, 4), np.array([[0, 3, 3, 1], [2, 2, 0, 1], [1, 0, 0, 0]])], {"axis": 1, "shape": (3, 5)}, [0]),
    "matmul": ([n(2, 3, 4), n(2, 4, 5)], {}, [0, 1]),
}

NOT_DIFFERENTIABLE = {
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "logical_and",
    "logical_or",
    "logical_not",
    "isnan",
    "argmax",
    "argmin",
    "argsort",
    "const",
    "detach",
    "require",
    "floordiv",
}

for _family in (
    cases_linalg,
    cases_selection,
    cases_scatter,
    cases_complex_math,
    cases_fft,
    cases_control,
    cases_composite,
):
    assert not set(_family.CASES) & set(CASES), "a family's case repeats one of the table's"
    CASES.update(_family.CASES)
    NOT_DIFFERENTIABLE |= _family.NOT_DIFFERENTIABLE


# value of one operand, cotangent to the other: no derivative a finite difference could check
STRAIGHT_THROUGH = {"splice"}


def test_every_primitive_is_covered():
    assert set(CASES) | NOT_DIFFERENTIABLE | STRAIGHT_THROUGH == set(PRIMS)


def test_splice_has_the_value_of_its_second_operand_and_passes_the_cotangent_to_its_first(rng):
    x, y = np.array([1.0, np.inf, -2.0]), np.array([5.0, 1.0, np.nan])
    tape, _ = prim_tape("splice", [x, y], {})
    np.testing.assert_array_equal(interpret(tape, [x, y])[0], y)
    joint = vjp(tape, tape.inputs)
    g = rng.standard_normal(3)
    out = interpret(joint.tape, [x, y, g])
    assert joint.grads[1] is None
    np.testing.assert_array_equal(out[joint.grads[0]], g)


@pytest.mark.parametrize("name", sorted(CASES))
def test_vjp_first_order(name, rng):
    args, params, wrt = CASES[name]
    tape, _ = prim_tape(name, args, params)
    dot_check(tape, wrt, args, rng)


@pytest.mark.parametrize("name", sorted(CASES))
def test_vjp_second_order(name, rng):
    args, params, wrt = CASES[name]
    tape, _ = prim_tape(name, args, params)
    h = second_order_tape(tape, wrt)
    # inputs of h: the primal args, the cotangent seed v, one weight w per gradient
    extra = [draw(rng, h.shapes[s], h.dtypes[s]) for s in h.inputs[len(args) :]]
    dot_check(h, wrt, list(args) + extra, rng, rtol=1e-4, atol=1e-6)


def test_detach_blocks_the_gradient(rng):
    tape, _ = prim_tape("detach", [n(3)], {})
    joint = vjp(tape, [tape.inputs[0]])
    assert joint.grads == [None]


@pytest.mark.parametrize(
    "name,op",
    [
        ("lt", np.less),
        ("le", np.less_equal),
        ("gt", np.greater),
        ("ge", np.greater_equal),
        ("eq", np.equal),
        ("ne", np.not_equal),
    ],
)
def test_comparisons(name, op):
    a = np.array([1.0, 2.0, 3.0, np.nan])
    b = np.array([2.0, 2.0, 1.0, np.nan])
    tape, _ = prim_tape(name, [a, b], {})
    np.testing.assert_array_equal(interpret(tape, [a, b])[0], op(a, b))


def test_logical_and_arg_reductions():
    a = np.array([True, False, True])
    b = np.array([True, True, False])
    for name, op in (("logical_and", np.logical_and), ("logical_or", np.logical_or)):
        tape, _ = prim_tape(name, [a, b], {})
        np.testing.assert_array_equal(interpret(tape, [a, b])[0], op(a, b))
    tape, _ = prim_tape("logical_not", [a], {})
    np.testing.assert_array_equal(interpret(tape, [a])[0], ~a)
    x = np.array([[1.0, 5.0, 5.0], [np.nan, 0.0, 2.0]])
    tape, _ = prim_tape("isnan", [x], {})
    np.testing.assert_array_equal(interpret(tape, [x])[0], np.isnan(x))
    tape, _ = prim_tape("argmax", [x], {"axis": 1, "keepdim": False})
    np.testing.assert_array_equal(interpret(tape, [x])[0], [1, 0])
    tape, _ = prim_tape("argmin", [x], {"axis": 1, "keepdim": True})
    np.testing.assert_array_equal(interpret(tape, [x])[0], [[0], [0]])


@pytest.mark.parametrize(
    "test, params, bad, error, phrase",
    [
        ("divisor", {}, [3, 0, 1], RuntimeError, "ZeroDivisionError"),
        ("index_select", {"bound": 3}, [0, -1], IndexError, "index out of range in self"),
        ("index_select", {"bound": 3}, [3, 0], IndexError, "index out of range in self"),
        ("index_select_dim1", {"bound": 3}, [0, 7, -1], RuntimeError, "id=7 axis_dim=3"),
        ("target", {"bound": 3, "ignore": -100}, [0, -100, -2], IndexError, "Target -2 is out of bounds."),
    ],
)
def test_require_passes_its_operand_or_raises_pytorchs_error(test, params, bad, error, phrase):
    params = dict(params, test=test)
    tape, _ = prim_tape("require", [np.array(bad, np.int64)], params)
    with pytest.raises(error, match=re.escape(phrase)):
        interpret(tape, [np.array(bad, np.int64)])
    good = np.array({"divisor": [1, -2, 3], "target": [2, -100, 0]}.get(test, [0, 1, 2]), np.int64)
    np.testing.assert_array_equal(interpret(tape, [good])[0], good)
    with pytest.raises(TapeError, match="integer"):
        prim_tape("require", [np.zeros(2)], params)
    # the bytecode tier takes float tapes only: a check always runs as a NumPy step of a plan
    assert encode(tape) is None


def test_floordiv_is_exact_floor_division_of_integers():
    x = np.array([2**53 + 1, -(2**62) - 3, 7, -7, 16777217], np.int64)
    y = np.array([1, 5, -2, 2, 3], np.int64)
    tape, _ = prim_tape("floordiv", [x, y], {})
    assert interpret(tape, [x, y])[0].tolist() == [a // b for a, b in zip(x.tolist(), y.tolist())]


def test_gather_refuses_negative_indices_as_pytorch_does():
    x = np.arange(6.0).reshape(2, 3)
    for idx, bad in (([[-1], [0]], -1), ([[0], [3]], 3)):
        tape, _ = prim_tape("gather", [x, np.array(idx)], {"axis": 1})
        with pytest.raises(RuntimeError, match=f"index {bad} is out of bounds for dimension 1 with size 3"):
            interpret(tape, [x, np.array(idx)])


def test_argsort_is_stable_both_ways_with_nan_largest():
    x = np.array([[2.0, np.nan, 1.0, 2.0, -1.0, 1.0], [0.0, 0.0, 0.0, 3.0, 3.0, np.nan]])
    up, _ = prim_tape("argsort", [x], {"axis": 1, "descending": False})
    down, _ = prim_tape("argsort", [x], {"axis": 1, "descending": True})
    np.testing.assert_array_equal(interpret(up, [x])[0], [[4, 2, 5, 0, 3, 1], [0, 1, 2, 3, 4, 5]])
    np.testing.assert_array_equal(interpret(down, [x])[0], [[1, 0, 3, 2, 5, 4], [5, 3, 4, 0, 1, 2]])
    assert interpret(down, [x])[0].dtype == np.int64


def test_const_and_dtype_preservation():
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    x = b.input((3,), "f32")
    y = (x * 2.5 + 1).exp()
    tape = b.finish([y, b.full(7, (), "i64")]).verify()
    out = interpret(tape, [np.ones(3, np.float32)])
    assert out[0].dtype == np.float32 and out[1].dtype == np.int64 and out[1] == 7
    np.testing.assert_allclose(out[0], np.exp(np.float32(3.5)), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_jvp_against_finite_differences(name, rng):
    """The tangent rule: J u from the tangent tape equals central differences along u."""
    args, params, wrt = CASES[name]
    tape, _ = prim_tape(name, args, params)
    t = jvp(tape, [tape.inputs[i] for i in wrt])
    t.tape.verify()
    us = [draw(rng, args[i].shape, args[i].dtype) for i in wrt]
    res = interpret(t.tape, list(args) + us)
    analytic = res[t.tangents[0]] if t.tangents[0] is not None else np.zeros_like(res[0])

    def f(eps):
        shifted = list(args)
        for i, u in zip(wrt, us):
            shifted[i] = args[i] + eps * u
        return interpret(tape, shifted)[0]

    numeric = (f(1e-6) - f(-1e-6)) / 2e-6
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", sorted(CASES))
def test_jvp_is_the_transpose_of_vjp(name, rng):
    """<v, J u> from the tangent tape equals <J^T v, u> from the joint tape, to rounding."""
    args, params, wrt = CASES[name]
    tape, _ = prim_tape(name, args, params)
    t, joint = jvp(tape, [tape.inputs[i] for i in wrt]), vjp(tape, [tape.inputs[i] for i in wrt])
    us = [draw(rng, args[i].shape, args[i].dtype) for i in wrt]
    out = interpret(tape, args)[0]
    v = draw(rng, out.shape, out.dtype)
    ju = interpret(t.tape, list(args) + us)
    jtv = interpret(joint.tape, list(args) + [v])
    lhs = 0.0 if t.tangents[0] is None else inner(v, ju[t.tangents[0]])
    rhs = sum(inner(jtv[p], u) for u, p in zip(us, joint.grads) if p is not None)
    assert np.isclose(lhs, rhs, rtol=1e-10, atol=1e-12)


def test_every_differentiable_primitive_has_a_tangent_rule():
    assert {name for name, p in PRIMS.items() if p.jvp is not None} == set(CASES) | STRAIGHT_THROUGH
