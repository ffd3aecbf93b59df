"""A concatenation read by the loops that use it (``ReadKind.CAT``): each element comes from its
piece (a literal, an array, a slice's source through its window) instead of an array NumPy
builds first; the compiled plans equal the interpreter, values and gradients."""

import numpy as np
import pytest

import ngrad
from ngrad.engine.backend.codegen import program
from ngrad.engine.backend.fuse import Glue, ReadKind, fuse
from ngrad.engine.ir.graph import lower
from ngrad.engine.ir.interpret import interpret, np_dtype
from ngrad.engine.ir.tape import parse
from ngrad.engine.runtime import layout
from ngrad.engine.transform.differentiate import vjp

from .compiled import assert_same, compiled

pytestmark = [pytest.mark.usefixtures("jit_always"), pytest.mark.numba]


def _cat_kernels(tape):
    """The kernels of ``tape``'s plan that read a concatenation; no concatenation is glue."""
    plan = fuse(tape)
    assert not [s for s in plan.steps if isinstance(s, Glue) and s.instr.prim == "cat"]
    return [k for k in plan.kernels() if any(r.kind == ReadKind.CAT for r in k.reads.values())]


def _joint(fn, arrays, rng):
    """The joint tape (value and gradient of every floating input) of ``fn`` and its inputs."""
    xs = [ngrad.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    low = lower([fn(*xs)._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node] for x in xs if x.requires_grad])
    seeds = [rng.standard_normal(joint.tape.shapes[s]).astype(np_dtype(joint.tape.dtypes[s])) for s in joint.seeds]
    return joint.tape, [n.value for n in low.sources] + seeds


def _ode_rhs(x, y):
    # GradBench ode's right-hand side: x_0, then x_i * y_{i-1}
    k = x * ngrad.cat([ngrad.ones_like(x[:1]), y[:-1]])
    return ((y + 0.25 * k) * x).sin()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_constant_and_a_slice_concatenated_are_read_in_the_loop(dtype, rng):
    x, y = rng.uniform(-1, 1, 50).astype(dtype), rng.uniform(-1, 1, 50).astype(dtype)
    tape, values = _joint(_ode_rhs, [x, y], rng)
    assert _cat_kernels(tape)
    assert_same(tape, values, rtol=1e-5 if dtype == np.float32 else 1e-13)


def test_the_ode_form_equals_the_form_with_a_product_of_slices(rng):
    # x * cat([1, y[:-1]]) is cat([x[:1], x[1:] * y[:-1]]) exactly, values and gradients
    x0, y0, g = rng.uniform(-1, 1, 40), rng.uniform(-1, 1, 40), rng.standard_normal(40)
    runs = []
    for fn in (
        lambda x, y: x * ngrad.cat([ngrad.ones_like(x[:1]), y[:-1]]),
        lambda x, y: ngrad.cat([x[:1], x[1:] * y[:-1]]),
    ):
        x, y = ngrad.tensor(x0, requires_grad=True), ngrad.tensor(y0, requires_grad=True)
        out = fn(x, y)
        out.backward(ngrad.tensor(g))
        runs.append([out.detach().numpy(), x.grad.numpy(), y.grad.numpy()])
    for got, ref in zip(*runs, strict=True):
        np.testing.assert_array_equal(got, ref)


def _axis0(a, b):
    return (ngrad.cat([a[1:], b[2:, ::2], a], 0) * 2.0).exp()


def _axis1(a, b):  # (9, 8): not unrolled
    return ngrad.cat([a, b[:, 1:6]], 1).tanh()


def _axis1_short(a, b):  # (9, 3): the innermost extent is unrolled
    return ngrad.cat([a[:, :1], b[:, :2]], 1).sin() * 3.0


def _two_readers(a, b):
    # read by the loop that sums its squares and by the next one, which divides by that sum
    c = ngrad.cat([a[:, :2], b[:, 4:]], 1)
    return c / (c * c).sum()


@pytest.mark.parametrize("fn", [_axis0, _axis1, _axis1_short, _two_readers])
def test_nd_concatenations_along_the_rows_and_a_later_axis(fn, rng):
    a, b = rng.standard_normal((9, 3)), rng.standard_normal((9, 6))
    tape, values = _joint(fn, [a, b], rng)
    kernels = _cat_kernels(tape)
    assert len(kernels) >= (2 if fn is _two_readers else 1)
    assert_same(tape, values, rtol=1e-12)


def _disjoint(a, b):
    # the widest pieces of the two concatenations share no row: no row runs without tests
    return ngrad.cat([a[:5], a[5:9], b[:3]]) * ngrad.cat([b[:3], b[3:7], a[:5]])


def _gradients_of_strided_slices(a, b):
    # an unslice with a step along the rows keeps its test inside the split loop
    return (a[::2] * b).sum() + (a[1:] * ngrad.cat([b[:1], a[:-2]])).exp().sum()


@pytest.mark.parametrize("fn", [_disjoint, _gradients_of_strided_slices, _ode_rhs])
def test_rows_where_every_row_test_holds_run_without_tests(fn, rng):
    a, b = (
        (rng.standard_normal(13), rng.standard_normal(7))
        if fn is _gradients_of_strided_slices
        else (
            rng.standard_normal(12),
            rng.standard_normal(12),
        )
    )
    tape, values = _joint(fn, [a, b], rng)
    kernels = _cat_kernels(tape)
    text = program(kernels, tape).text
    assert "# rows outside" in text
    if fn is _ode_rhs:  # in the split loop the concatenation is one unconditional load
        inner = text.split("# rows outside")[1].split("\n    for ")[1]
        assert "= cat of" in inner and " if " not in inner
    assert_same(tape, values, rtol=1e-12)


LITERALS_AND_EMPTY = """\
in %0 : {t}[0]
in %1 : {t}[1]
in %2 : {t}[6]
in %3 : {t}[9]
%4 = const(; dtype='{t}', value=2) : {t}[]
%5 = reshape(%4; shape=(1,)) : {t}[1]
%6 = expand(%5; shape=(2,)) : {t}[2]
%7 = cat(%0, %1, %6, %0, %2, %0; axis=0) : {t}[9]
%8 = {op}(%7, %3) : {t}[9]
out %8"""


@pytest.mark.parametrize("t,op", [("f64", "mul"), ("f32", "sub"), ("i64", "add"), ("i32", "maximum")])
def test_pieces_of_length_0_and_1_and_literal_pieces(t, op, rng):
    tape = parse(LITERALS_AND_EMPTY.format(t=t, op=op)).verify()
    (k,) = _cat_kernels(tape)
    (r,) = [r for r in k.reads.values() if r.kind == ReadKind.CAT]
    assert [(a, b, p.kind) for a, b, p in r.pieces] == [
        (0, 1, ReadKind.ARRAY),
        (1, 3, ReadKind.LITERAL),
        (3, 9, ReadKind.ARRAY),
    ]
    dt = np.dtype({"f": "float", "i": "int"}[t[0]] + t[1:])
    values = [(rng.standard_normal(n) * 10).astype(dt) for n in (0, 1, 6, 9)]
    assert_same(tape, values, rtol=1e-6)


def test_bool_and_int_pieces(rng):
    def fn(m, i, x):
        mask = ngrad.cat([m[:3], m[3:].logical_not()])
        ints = ngrad.cat([i[::2], i[1::2]])
        return ngrad.where(mask, x, -x) * ints

    m, i, x = rng.uniform(size=8) < 0.5, rng.integers(-5, 5, 8), rng.standard_normal(8)
    tape, values = _joint(fn, [m, i, x], rng)
    assert len(_cat_kernels(tape)) >= 1
    assert_same(tape, values, rtol=1e-13)


def test_negative_zeros_of_the_pieces_are_kept(rng):
    # a sum of zero-padded pieces would turn -0.0 into +0.0; PyTorch's cat keeps the sign
    def fn(a, b):
        return ngrad.cat([a, b[1:4]]) * 1.0

    a = np.array([-0.0, 0.0, -0.0])
    b = np.array([1.0, -0.0, 2.0, -0.0, 0.0, 3.0])
    tape, values = _joint(fn, [a, b], rng)
    values = values[:2] + [np.ones_like(v) for v in values[2:]]
    ref = interpret(tape, values)
    np.testing.assert_array_equal(np.signbit(ref[0]), [True, False, True, True, False, True])
    for got, want in zip(compiled(tape, values), ref, strict=True):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def _value_and_grads(fn, arrays):
    xs = [ngrad.tensor(v, requires_grad=True) for v in arrays]
    y = fn(*xs)
    y.backward()
    return [y.item()] + [x.grad.numpy() for x in xs]


def test_rows_read_at_shifted_indices_are_never_run_in_chunks(monkeypatch, rng):
    # along the rows a piece is read at the row less its start: a chunk would need others' rows;
    # along axis 1 rows stay the loop's, and chunks of rows agree with the interpreter
    monkeypatch.setattr(layout, "PARALLEL_WORK", 1)
    n = layout.PARALLEL_MIN // 16
    a, b = rng.standard_normal((n, 16)), rng.standard_normal((n, 32))

    def rows(a, b):
        return (ngrad.cat([a, b[:, :16]], 0) * 2.0).sin().sum()

    def cols(a, b):
        return (ngrad.cat([a, b[:, 3:19]], 1) * 2.0).sin().sum()

    for fn, shifted in ((rows, True), (cols, False)):
        tape = lower([fn(ngrad.tensor(a), ngrad.tensor(b))._node]).tape
        (k,) = _cat_kernels(tape)
        assert program([k], tape).parts[0].shifted is shifted
        ngrad.set_num_threads(2)
        try:
            got = _value_and_grads(fn, [a, b])
        finally:
            ngrad.set_num_threads(1)
        monkeypatch.setenv("NGRAD_JIT", "never")
        ref = _value_and_grads(fn, [a, b])
        monkeypatch.setenv("NGRAD_JIT", "always")
        assert got[0] == pytest.approx(ref[0], rel=1e-12)
        for g, r in zip(got[1:], ref[1:], strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-14)
