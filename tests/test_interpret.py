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
