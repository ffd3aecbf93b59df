"""The tape builder's fast paths write the tapes its plain algorithm writes.

``Builder.emit`` writes out the elementwise shape rules, hands out one handle per slot, and
``Builder.full`` finds a literal again without emitting it: tapes must not change for it (kernel
cache keys and stored joints are taken from their printed form). Here a builder that runs the
plain algorithm (every rule through its row, a fresh handle each time, every literal emitted)
differentiates and lowers the same programs, and the printed tapes are compared.
"""

import gc
import math
import weakref

import numpy as np
import pytest

import ngrad
from ngrad.engine.ir import graph
from ngrad.engine.ir.prims import PRIMS
from ngrad.engine.ir.tape import NO_PARAMS, Builder, TapeError, Var, params_key
from ngrad.engine.transform import differentiate
from ngrad.engine.transform.differentiate import jvp, vjp

from .oracles import prim_tape
from .test_prims import CASES


class PlainBuilder(Builder):
    """``Builder`` without its fast paths: what each of them must reproduce."""

    def var(self, slot):
        return Var(self, slot, self.tape.shapes[slot], self.tape.dtypes[slot])

    def emit(self, prim, args, params=None):
        params = params or NO_PARAMS
        if prim in ("reshape", "expand") and tuple(params["shape"]) == args[0].shape:
            return args[0]
        slots = tuple(a.slot for a in args)
        key = (prim, slots, params_key(params))
        hit = self._seen.get(key)
        if hit is not None:
            return self.var(hit)
        shape, dtype = PRIMS[prim].infer([a.shape for a in args], [a.dtype for a in args], **params)
        s = self.emit_known(prim, slots, params, shape, dtype)
        if prim == "const":
            self._literals[s] = params["value"]
        elif prim in ("reshape", "expand") and slots[0] in self._literals:
            self._literals[s] = self._literals[slots[0]]
        self._seen[key] = s
        return self.var(s)

    def full(self, value, shape, dtype):
        kind = {"b8": bool, "i32": int, "i64": int, "c64": complex, "c128": complex}.get(dtype, float)
        c = self.emit("const", (), {"value": kind(value), "dtype": dtype})
        return c if not shape else c.reshape(shape=(1,) * len(shape)).expand(shape=tuple(shape))


def _bookkeeping(j):
    return (j.seeds, j.grads, j.ran, j.reads_saved, j.saved, j.contributions)


def _both(monkeypatch, make):
    """``make()`` with the fast builder, then with the plain one."""
    fast = make()
    with monkeypatch.context() as m:
        m.setattr(differentiate, "Builder", PlainBuilder)
        m.setattr(graph, "Builder", PlainBuilder)
        plain = make()
    return fast, plain


@pytest.mark.parametrize("name", sorted(CASES))
def test_joint_and_tangent_tapes_of_every_primitive_are_the_plain_builders(name, monkeypatch):
    args, params, wrt = CASES[name]
    tape, _ = prim_tape(name, args, params)
    slots = [tape.inputs[i] for i in wrt]

    def make():
        j = vjp(tape, slots)
        # second order: the joint differentiated again, and forward over reverse
        jj = vjp(j.tape, list(j.tape.inputs))
        return j.tape.format(), _bookkeeping(j), jj.tape.format(), _bookkeeping(jj), jvp(j.tape, slots).tape.format()

    fast, plain = _both(monkeypatch, make)
    assert fast == plain


def _program(x, y):
    """Broadcasting, literals (-0.0 and 0.0, repeated ones), fan-out, reductions, movements."""
    a = (x * 2.0 + y).sigmoid() * (1 - x.tanh())
    b = (a - 0.0) * (a + -0.0) + a.exp().sum(1, keepdim=True) / (y * y + 1)
    c = b.t() @ x + (b[:, ::2].sum() * 2.0)
    return (c.log_softmax(-1) + a.mean() + (x.abs() + 1).log().amax(0)).sum() + (y > 0).float().sum()


def test_lowered_and_differentiated_programs_are_the_plain_builders(monkeypatch):
    rng = np.random.default_rng(0)
    x = ngrad.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    y = ngrad.tensor(rng.standard_normal(4), requires_grad=True)
    out = _program(x, y)

    def make():
        low = graph.lower([out._node], grad=True)
        t = low.tape
        floating = [s for s in t.inputs if t.dtypes[s][0] == "f"]
        j = vjp(t, floating)
        return t.format(), j.tape.format(), _bookkeeping(j), jvp(t, floating).tape.format()

    fast, plain = _both(monkeypatch, make)
    assert fast == plain
    assert "mul" in fast[1] and len(fast[1].splitlines()) > len(fast[0].splitlines())  # a real reverse pass


def test_full_finds_a_literal_again_but_keeps_distinct_literals_apart():
    b = Builder()
    x = b.input((2, 3), "f64")
    assert b.full(1, (2, 3), "f64") is b.full(1.0, [2, 3], "f64")
    zero, negative_zero = b.full(0.0, (2, 3), "f64"), b.full(-0.0, (2, 3), "f64")
    assert zero.slot != negative_zero.slot  # -0.0 is another literal (1 / -0.0 is -inf)
    assert math.copysign(1, b.literal(negative_zero)) == -1
    assert b.full(math.nan, (3,), "f64").slot == b.full(math.nan, (3,), "f64").slot  # as emit's CSE merges them
    assert b.full(1, (2, 3), "f32").dtype == "f32" and b.full(1, (2, 3), "f32").slot != b.full(1, (2, 3), "f64").slot
    assert b.full(1, (2, 3), "b8").slot != b.full(1, (2, 3), "i64").slot
    assert b.literal(b.full(1, (2, 3), "b8")) is True and type(b.literal(b.full(1, (), "i64"))) is int
    assert b.full(2, (), "f64").shape == () and b.full(2, (1, 1), "f64").shape == (1, 1)
    # a literal found again is the one the product reads: the tape holds one const per value
    y = x * 2 + x * 2.0
    tape = b.finish([y])
    assert sum(1 for i in tape.instrs if i.prim == "const" and i.params["value"] == 2.0) == 1
    assert tape.verify() is tape


@pytest.mark.parametrize(
    "shapes, dtypes, phrase",
    [
        (((2, 3), (3, 2)), ("f64", "f64"), "elementwise operands must match exactly"),
        (((2, 3), (2, 3)), ("f64", "f32"), "elementwise operands must match exactly"),
    ],
)
def test_the_written_out_elementwise_rule_raises_the_rows_error(shapes, dtypes, phrase):
    b = Builder()
    u, v = (b.input(s, d) for s, d in zip(shapes, dtypes))
    with pytest.raises(TapeError, match=phrase):
        u + v
    with pytest.raises(TapeError, match=phrase):
        b.emit("mul", (u, v))
    assert b.tape.instrs == []  # nothing written for a refused instruction


def test_three_operand_and_unary_rows_keep_their_own_rules():
    b = Builder()
    c, x = b.input((2,), "b8"), b.input((2,), "f64")
    assert b.emit("where", (c, x, x)).dtype == "f64"
    with pytest.raises(TapeError, match="where condition must be b8"):
        b.emit("where", (x, x, x))
    assert x.sin().shape == (2,) and x.neg().slot == (-x).slot


def test_one_handle_per_slot_and_the_builder_is_freed_without_a_collection():
    b = Builder()
    x = b.input((3,), "f64")
    y = x.exp()
    assert b.var(y.slot) is y and b.var(x.slot) is x and (x.exp()) is y
    tape = b.finish([y * 2])
    # a builder used on after finish still writes and finds instructions
    assert (x.exp()).slot == y.slot and b.emit("log", (y,)).slot == len(tape.shapes) - 1
    b.finish([y])
    ref = weakref.ref(b)
    del b, x, y
    enabled = gc.isenabled()
    gc.disable()
    try:
        assert ref() is None  # handles refer back to the builder: finish lets go of them
    finally:
        if enabled:
            gc.enable()
    assert tape.verify() is tape


@pytest.mark.parametrize(
    "prim, shape, params, phrase",
    [
        (
            "slice",
            (5, 4),
            {"starts": (1, 0), "stops": (6, 4), "steps": (2, 3)},
            "slice 1:6:2 out of range for an axis of size 5",
        ),
        (
            "slice",
            (5, 4),
            {"starts": (1, -1), "stops": (5, 4), "steps": (1, 1)},
            "slice -1:4:1 out of range for an axis of size 4",
        ),
        (
            "slice",
            (5, 4),
            {"starts": (0, 0), "stops": (5, 4), "steps": (1, 0)},
            "slice 0:4:0 out of range for an axis of size 4",
        ),
        ("slice", (5,), {"starts": (0, 0), "stops": (5,), "steps": (1,)}, "slice bounds must have one entry per axis"),
        ("sum", (2, 3), {"axes": (1, 0), "keepdim": False}, r"axes \(1, 0\) must be sorted, unique and within rank 2"),
        ("sum", (2, 3), {"axes": (0, 0), "keepdim": True}, "must be sorted, unique"),
        ("sum", (2, 3), {"axes": (2,), "keepdim": True}, "within rank 2"),
        ("sum", (2, 3), {"axes": (-1,), "keepdim": True}, "within rank 2"),
        ("expand", (2, 3), {"shape": (2, 3, 1)}, "equal ranks, size-1 axes only"),
        ("expand", (2, 3), {"shape": (4, 3)}, "equal ranks, size-1 axes only"),
    ],
)
def test_shape_rules_refuse_bad_params_with_their_messages(prim, shape, params, phrase):
    b = Builder()
    x = b.input(shape, "f64")
    with pytest.raises(TapeError, match=phrase):
        b.emit(prim, (x,), params)


def test_shape_rules_measure_slices_and_reductions_as_numpy_does():
    b = Builder()
    x = b.input((5, 4, 3), "f64")
    for starts, stops, steps in [
        ((1, 0, 0), (5, 4, 3), (2, 3, 1)),
        ((0, 4, 1), (5, 4, 3), (4, 1, 5)),
        ((5, 0, 0), (5, 1, 3), (1, 1, 2)),
    ]:
        want = np.zeros((5, 4, 3))[tuple(slice(a, z, s) for a, z, s in zip(starts, stops, steps))].shape
        assert x.slice(starts=starts, stops=stops, steps=steps).shape == want
    for axes in [(), (0,), (1, 2), (0, 1, 2)]:
        assert x.sum(axes=axes, keepdim=False).shape == np.zeros((5, 4, 3)).sum(axis=axes).shape
        assert x.sum(axes=axes, keepdim=True).shape == np.zeros((5, 4, 3)).sum(axis=axes, keepdims=True).shape
    assert b.emit(
        "expand", (x.slice(starts=(0, 0, 0), stops=(1, 4, 3), steps=(1, 1, 1)),), {"shape": (5, 4, 3)}
    ).shape == (5, 4, 3)
