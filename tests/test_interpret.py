"""The reference interpreter's own machinery: the steps it keeps per tape, and sums at repeated
indices (the VJP of indexing), against NumPy's ``add.at`` itself."""

import numpy as np
import pytest

from ngrad.engine.ir import interpret as I
from ngrad.engine.ir.tape import Builder


def _tape():
    b = Builder()
    x = b.input((4,), "f64")
    y = b.input((4,), "f64")
    return b, x, y


def test_steps_are_kept_and_follow_a_tape_that_grows():
    b, x, y = _tape()
    tape = b.finish([(x * y).sin()])
    xs, ys = np.linspace(-1, 1, 4), np.arange(4.0)
    first = I.interpret(tape, [xs, ys])[0]
    before = len(tape.instrs)
    steps = I._steps_of(tape)
    assert I._steps_of(tape) is steps  # kept: looked up once per tape
    np.testing.assert_array_equal(I.interpret(tape, [xs, ys])[0], first)
    np.testing.assert_array_equal(first, np.sin(xs * ys))
    # the builder goes on writing into the same tape after a run: the new instructions run too
    z = b.finish([(x * y).sin(), (x + y).exp()])
    assert z is tape and len(z.instrs) > before
    outs = I.interpret(z, [xs, ys])
    np.testing.assert_array_equal(outs[1], np.exp(xs + ys))


def test_values_are_dropped_after_their_last_reader():
    b, x, y = _tape()
    tape = b.finish([((x * y) + x).sum(axes=(0,), keepdim=False)])
    steps = I._steps_of(tape)
    dead = [s for step in steps for s in step[-1]]
    product = steps[0][3]  # the first instruction's slot, read once by the next
    assert product in dead and len(dead) == len(set(dead))
    assert not set(tape.outputs) & set(dead)


def test_a_long_tape_keeps_no_steps(monkeypatch):
    monkeypatch.setattr(I, "STEPS_MEMO_MAX", 2)
    b, x, y = _tape()
    tape = b.finish([((x * y) + x).exp()])
    np.testing.assert_allclose(I.interpret(tape, [np.ones(4), np.ones(4)])[0], np.exp(2.0))
    assert tape._last is None


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.complex128])
def test_sums_at_repeated_indices_equal_numpys_add_at(dtype, rng, monkeypatch):
    monkeypatch.setattr(I, "FLAT_ADD_MIN", 0)  # the flat sums however few the values
    for _ in range(60):
        nd = int(rng.integers(1, 4))
        shape = tuple(int(v) for v in rng.integers(1, 5, nd))
        axis = int(rng.integers(0, nd))
        m = int(rng.integers(1, nd - axis + 1))
        both = tuple(int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3))))
        idx = [
            rng.integers(-shape[axis + j], shape[axis + j], both[int(rng.integers(0, len(both) + 1)) :])
            for j in range(m)
        ]
        xshape = shape[:axis] + np.broadcast_shapes(*[i.shape for i in idx]) + shape[axis + m :]
        x = (rng.standard_normal(xshape) * 100).astype(dtype)
        if dtype is np.complex128:
            x = x + 1j * rng.standard_normal(xshape)
        want = np.zeros(shape, dtype)
        np.add.at(want, (slice(None),) * axis + tuple(idx), x)
        got = I._added(x, idx, axis, shape)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)  # the same sums, in the same order


def test_sums_at_an_index_out_of_range_raise_numpys_error(monkeypatch):
    monkeypatch.setattr(I, "FLAT_ADD_MIN", 0)
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 0 with size 4"):
        I._added(np.ones(3), [np.array([0, 5, 1])], 0, (4,))
    with pytest.raises(IndexError, match="index -5 is out of bounds for axis 1 with size 4"):
        I._added(np.ones((2, 1)), [np.array([-5])], 1, (2, 4))


def _ulps(got, ref):
    ok = np.isfinite(ref) & (ref != 0)
    return np.max(np.abs(got[ok] - ref[ok]) / np.spacing(np.abs(ref[ok])))


@pytest.mark.parametrize("name, bound", [("sin", 2), ("cos", 4)])
def test_float64_sin_and_cos_by_the_half_angle_tangent_keep_cs_accuracy(name, bound, monkeypatch):
    # forced on whatever NumPy's tan is here: the identities' accuracy is the tangent's, and C's
    # (NumPy's own sin and cos loops) is the reference
    monkeypatch.setattr(I, "TAN_TRIG_MIN", 512)
    rng = np.random.default_rng(7)
    k = np.arange(1.0, 100_001.0) * (np.pi / 2)  # next to every zero and pole up to 1.6e5
    parts = [rng.uniform(-s, s, 100_000) for s in (1.0, 10.0, 1e5, 1e16, 1e300)]
    parts += [k, np.nextafter(k, 0), np.nextafter(k, np.inf), -k]
    parts.append(np.exp(rng.uniform(-745, 709, 100_000)) * rng.choice([-1.0, 1.0], 100_000))  # subnormal to huge
    x = np.concatenate(parts)
    got, ref = getattr(I.NUMPY, name)(x), getattr(np, name)(x)
    assert _ulps(got, ref) <= bound
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -(2.0**-30)] * 100)
    with np.errstate(invalid="ignore"):
        got, ref = getattr(I.NUMPY, name)(special), getattr(np, name)(special)
    np.testing.assert_array_equal(got, ref)  # NaN where C's is NaN, cos 1 at zero
    np.testing.assert_array_equal(np.signbit(got), np.signbit(ref))  # sin(-0.0) is -0.0


def test_sin_and_cos_are_cs_own_below_the_size_or_off_float64(monkeypatch):
    monkeypatch.setattr(I, "TAN_TRIG_MIN", 512)
    x = np.linspace(-10, 10, 511)
    for name in ("sin", "cos"):
        np.testing.assert_array_equal(getattr(I.NUMPY, name)(x), getattr(np, name)(x))
        x32 = np.linspace(-10, 10, 4096, dtype=np.float32)
        np.testing.assert_array_equal(getattr(I.NUMPY, name)(x32), getattr(np, name)(x32))
    monkeypatch.setattr(I, "TAN_TRIG_MIN", None)  # NumPy's tan is C's too: nothing to gain
    x = np.linspace(-10, 10, 4096)
    np.testing.assert_array_equal(I.NUMPY.sin(x), np.sin(x))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("k", [2, 3, 7, 8, 10, 16, 17])
def test_reductions_over_a_short_last_axis_equal_numpys(dtype, k, rng):
    x = rng.standard_normal((40, 9, k)).astype(dtype)
    if dtype == np.complex128:
        x = x + 1j * rng.standard_normal(x.shape)
    x[3, 4, k // 2] = np.nan  # propagates through every reduction of its row
    # NumPy's real loops take one element after the other below 8 elements (pairwise above, and
    # its complex loops pair them otherwise): a rounding apart there
    exact = k < 8 and dtype != np.complex128
    tol = 1e-5 if dtype == np.float32 else 1e-13
    for name, ref in (("sum", np.sum), ("prod", np.prod), ("amax", np.amax), ("amin", np.amin)):
        if dtype == np.complex128 and name in ("amax", "amin"):
            continue
        for keepdim in (False, True):
            got = getattr(I.NUMPY, name)(x, (2,), keepdim)
            want = ref(x, axis=2, keepdims=keepdim)
            assert got.shape == want.shape and got.dtype == want.dtype and got.flags.c_contiguous
            if exact or name in ("amax", "amin"):
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol * k)
    # other axes, and small arrays, are NumPy's own reductions
    np.testing.assert_array_equal(I.NUMPY.sum(x, (1,), False), np.sum(x, axis=1))
    np.testing.assert_array_equal(I.NUMPY.sum(x[:2, :2], (2,), False), np.sum(x[:2, :2], axis=2))
