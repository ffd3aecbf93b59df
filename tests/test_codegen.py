"""Generated kernel source: what it names, what it keeps out, the loops it writes, and its results
against the interpreter."""

import numpy as np
import pytest

import ngrad
from ngrad.engine import runtime
from ngrad.engine.backend.codegen import render
from ngrad.engine.backend.fuse import fuse
from ngrad.engine.ir.graph import lower
from ngrad.engine.runtime.plan import CompiledPlan
from ngrad.engine.transform.differentiate import vjp

from .compiled import assert_same
from .oracles import prim_tape

pytestmark = pytest.mark.usefixtures("jit_always")


def test_generated_source_names_its_tape_instructions():
    x = ngrad.tensor([1.0, 2.0], requires_grad=True)
    tape = lower([(x.exp() * 2).sum()._node]).tape
    plan = fuse(tape)
    text = render(plan.kernels()[0], tape).text
    assert "_vexp(" in text and "math.exp" not in text and "# %" in text and "= exp(%0)" in text
    assert "2" not in text.split("def kernel")[1].split(":")[0]  # no size in the signature or loops


def test_sizes_are_not_in_the_kernel():
    texts = []
    for n in (3, 1000):
        x = ngrad.ones(n, requires_grad=True)
        tape = lower([(x.sin() * x).sum()._node]).tape
        texts.append([render(k, tape).text for k in fuse(tape).kernels()])
    assert texts[0] == texts[1]


def test_consecutive_loops_compile_to_one_function(rng):
    # forward (N, N, 3), fused forward+reverse (N, N) and reverse (N, N, 3) loops: one function,
    # one call; the loss's output scaling (NumPy glue) is moved after them
    x0 = rng.standard_normal((30, 3)) * 2
    x = ngrad.from_numpy(x0).requires_grad_()
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1) + ngrad.eye(30, dtype=ngrad.float64)
    e = ((1 / r2) ** 3 * (1 - ngrad.eye(30, dtype=ngrad.float64))).sum() / 2
    low = lower([e._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    comp = CompiledPlan(joint.tape)
    (src,) = [s for s in comp.sources if s is not None]
    assert len(src.parts) == 3 and "# loop 2" in src.text
    seeds = [np.ones(joint.tape.shapes[s]) for s in joint.seeds]
    assert_same(joint.tape, [n.value for n in low.sources] + seeds, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["f32", "f64", "i64"])
def test_remainder_and_fmod_take_the_sign_of_the_divisor_and_of_the_dividend(dtype):
    # every sign combination, zero dividends and divisors, and (floats) infinities and NaN; Numba's
    # own integer np.fmod takes the divisor's sign, so the loop must not use it
    from ngrad.engine.ir.tape import Builder

    np_dt = {"f32": np.float32, "f64": np.float64, "i64": np.int64}[dtype]
    x = np.array([-7, 7, -7, 7, 0, 5, -3, 9, 6, -6], np_dt)
    y = np.array([2, 2, -2, -2, 3, 0, 4, -4, 3, 3], np_dt)
    if dtype != "i64":
        x = np.concatenate([x * 1.25, np.array([3.0, -3.0, np.inf, np.nan], np_dt)])
        y = np.concatenate([y * 0.5, np.array([np.inf, np.inf, 2.0, 1.0], np_dt)])
    b = Builder()
    a, d = b.input(x.shape, dtype), b.input(y.shape, dtype)
    tape = b.finish([a.remainder(d), a.fmod(d)])
    with np.errstate(all="ignore"):
        expected = [np.remainder(x, y), np.fmod(x, y)]
        assert_same(tape, [x, y], 0)
        for got, want in zip(runtime.prepare(tape)([x, y]), expected):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("prim", ["amax", "amin"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_vectorised_max_and_min_keep_numpy_semantics(prim, dtype):
    """Float max/min reductions compile to LLVM's maxnum/minnum with NaN counted on the side:
    a NaN anywhere wins, infinities and all-infinite rows are exact."""
    rng = np.random.default_rng(5)
    for hole in (None, 0, 517, 999):
        x = rng.standard_normal(1000).astype(dtype)
        if hole is not None:
            x[hole] = np.nan
        x[300] = np.inf if prim == "amax" else -np.inf
        for axes, arr in (((0,), x), ((1,), x.reshape(8, 125)), ((0, 1), x.reshape(40, 25))):
            tape, _ = prim_tape(prim, [arr], {"axes": axes, "keepdim": False})
            assert_same(tape, [arr], 0)
    rows = np.full((3, 7), -np.inf if prim == "amax" else np.inf, dtype)
    tape, _ = prim_tape(prim, [rows], {"axes": (1,), "keepdim": True})
    assert_same(tape, [rows], 0)
    text = render(fuse(tape).kernels()[0], tape).text
    assert ("_fmax(" if prim == "amax" else "_fmin(") in text and "!= " in text


def _rosenbrock_joint(n, shared=False):
    x = ngrad.tensor(np.linspace(-1.5, 1.5, n), requires_grad=True)
    if shared:  # ngrad bench's form: one slice node read twice, so two slice gradients
        a, b = x[:-1], x[1:]
        y = (100 * (b - a * a) ** 2 + (1 - a) ** 2).sum()
    else:
        y = (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()
    low = lower([y._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    return joint.tape, [n.value for n in low.sources] + [np.ones(joint.tape.shapes[s]) for s in joint.seeds]


@pytest.mark.parametrize("shared", [False, True])
def test_slices_and_their_gradients_are_read_through_windows(shared):
    """Rosenbrock's value and gradient: the kernels read x at the slices' offsets, and the
    gradient sums the slice gradients (unslices) where it reads them, zero outside their windows:
    no slice or unslice step runs in NumPy (not even when the sum is a loop of one addition),
    the per-slice gradients never leave the one function (local scratch), and the text is the
    same at every size (window bounds are arguments)."""
    texts = []
    for n in (100, 1000):
        tape, values = _rosenbrock_joint(n, shared)
        comp = CompiledPlan(tape)
        assert not [st for st in comp.plan.steps if not hasattr(st, "reads") and st.instr.prim in ("slice", "unslice")]
        (src,) = [s for s in comp.serial.sources if s is not None]
        assert "= slice" in src.text and "unslice, zero outside" in src.text
        assert src.text.count("# scratch") == (2 if shared else 3) and len(src.parts[-1].stores) == 1
        texts.append(src.text)
        assert_same(tape, values, rtol=1e-12)
    assert texts[0] == texts[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_strided_and_two_dimensional_windows(dtype, rng):
    # windows with steps, on both axes, at both ends; a slice read by glue (matmul) stays a view
    x0 = rng.standard_normal((6, 9)).astype(dtype)
    x = ngrad.from_numpy(x0).requires_grad_()
    a, b = x[1:, ::2], x[:-1, 1::2]
    y = (a[:, :4] * b.sin()).sum() + (x[2:5, 3:7] ** 2).sum() + (x[::3, 2::3] @ x[:3, :2]).tanh().sum()
    low = lower([y._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    text = "".join(s.text for s in CompiledPlan(joint.tape).serial.sources if s is not None)
    assert "% 2 == 0" in text and "unslice, zero outside" in text and "= slice" in text
    seeds = [np.ones(joint.tape.shapes[s], dtype) for s in joint.seeds]
    assert_same(joint.tape, [n.value for n in low.sources] + seeds, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_reads_that_ignore_the_inner_indices_are_hoisted_out_of_the_inner_loop(rng):
    a = ngrad.tensor(rng.standard_normal((6, 1)), requires_grad=True)
    b = ngrad.tensor(rng.standard_normal((6, 7)), requires_grad=True)
    low = lower([((a.exp() * 2) * b).sum(1)._node])
    tape = low.tape
    text = render(fuse(tape).kernels()[-1], tape).text
    lines = text.splitlines()
    inner = next(k for k, ln in enumerate(lines) if ln.strip().startswith("for i1"))
    hoisted = [k for k, ln in enumerate(lines) if "(broadcast)" in ln or "exp(" in ln]
    assert hoisted and all(k < inner for k in hoisted), text
    assert_same(tape, [n.value for n in low.sources], rtol=1e-12)
