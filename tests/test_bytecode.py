"""Bytecode (engine/backend/bytecode.py) against the NumPy interpreter: every primitive it takes, with
its VJP, in float32 and float64; the op corpus; NaN semantics; and the runtime and
``ngrad.compile`` running long small-array tapes (unrolled recurrences) through it, checked
against central finite differences."""

import numpy as np
import pytest

import ngrad
from ngrad.engine import runtime
from ngrad.engine.backend import bytecode
from ngrad.engine.ir.graph import lower
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.runtime import dispatch
from ngrad.engine.runtime import machine as bytecode_tier
from ngrad.engine.runtime.machine import Machine, machine_for
from ngrad.engine.runtime.plan import CompiledPlan
from ngrad.engine.runtime.tiering import POLICY
from ngrad.engine.targets.cpu import kernel
from ngrad.engine.transform.differentiate import vjp

from . import test_ops, test_prims
from .oracles import check_damaged_plan_is_made_again, fd_gradient, prim_tape
from .test_compiled import corpus_joint, prim_joint

DECLINED = {
    "index",
    "unindex",
    "gather",
    "scatter_add",  # integer index slots
    "scatter",
    "scatter_reduce",
    "cast",  # test_compiled's cast case converts between float32 and float64
    "inv",
    "solve",
    "det",
}  # LAPACK's, through NumPy: no loop of the bytecode's
# complex values and FFTs: the bytecode tier takes real tapes only
DECLINED |= {"conj", "real", "imag", "complex", "angle", "view_as_real", "view_as_complex", "fftn", "rfftn", "irfftn"}
# scans the bytecode has no row for (and cumprod's rule counts zeros in int64 slots)
DECLINED |= {"cumprod", "logcumsumexp"}
# the decompositions and triangular solves: LAPACK's, through NumPy, as inv, solve and det
DECLINED |= {"cholesky", "cholesky_info", "solve_triangular", "slogdet", "eigh", "svd", "qr", "matrix_exp"}
# a loop: its body runs as a program of its own (tiered on its own), never as rows of the outer one
DECLINED |= {"scan"}
# in float32 only: a float32 variance accumulates in float64 (PyTorch's), so its lowered tape mixes
# dtypes, which the bytecode's one-dtype arena declines
DECLINED_F32 = {"var", "std"}


@pytest.fixture(autouse=True)
def _cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def _cases(dtype, rng):
    """Every case that fits: the primitives' joint tapes, extra ones, and (float64) the corpus."""
    out = {}
    for name in sorted(test_prims.CASES):
        if name not in DECLINED and not (dtype == np.float32 and name in DECLINED_F32):
            out[name] = prim_joint(name, dtype, rng)
    x = rng.standard_normal((2, 3)).astype(dtype)
    extra = {  # cat off axis 0 (strided windows), comparisons and logic on NaN, casts via booleans
        "cat_axis1": ("cat", [x, rng.standard_normal((2, 2)).astype(dtype)], {"axis": 1}),
        "eq": ("eq", [x, np.where(x > 0, x, np.nan).astype(dtype)], {}),
        "isnan": ("isnan", [np.array([np.nan, 1, -np.inf], dtype)], {}),
        "logical_or": ("logical_or", [x > 0, x < -0.5], {}),
        "logical_not": ("logical_not", [x > 0], {}),
        "cast_b8": ("cast", [x > 0], {"dtype": "f64" if dtype == np.float64 else "f32"}),
        "cast_to_b8": ("cast", [np.array([0.0, -0.0, 2.0, np.nan], dtype)], {"dtype": "b8"}),
        "amax_nan": ("amax", [np.array([[1.0, np.nan], [3.0, -1.0]], dtype)], {"axes": (1,), "keepdim": False}),
        "maximum_nan": ("maximum", [np.array([np.nan, 1, 0], dtype), np.array([1, np.nan, 0], dtype)], {}),
        "unslice_rows": ("unslice", [x], {"shape": (5, 3), "starts": (1, 0), "stops": (3, 3), "steps": (1, 1)}),
        "unslice_1d": ("unslice", [x[0]], {"shape": (7,), "starts": (4,), "stops": (7,), "steps": (1,)}),
        "rank4": ("sum", [rng.standard_normal((2, 3, 2, 2)).astype(dtype)], {"axes": (1, 3), "keepdim": True}),
    }
    for name, (prim, args, params) in extra.items():
        out[name] = (prim_tape(prim, args, params)[0], args)
    if dtype == np.float64:
        for name in sorted(test_ops.CASES):
            tape, values = corpus_joint(name, rng)
            if bytecode.encode(tape) is not None:
                out["corpus " + name] = (tape, values)
    return out


def _union_loop(codes, dt):
    """One loop over every operation in ``codes``, and each code moved onto it (the text of an
    operation's branch does not depend on the set it is in, so this tests the very branches a
    tape's own loop has, at the cost of one compile instead of one per set)."""
    ops = tuple(sorted({op for c in codes for op in c.ops}))
    for c in codes:
        c.use(ops)
    return kernel(bytecode.source(ops, dt))


def _equal_the_interpreter(cases, codes, dtype):
    fn = _union_loop(list(codes.values()), "f64" if dtype == np.float64 else "f32")
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for name, (tape, values) in cases.items():
        got, ref = codes[name].run(fn, values), interpret(tape, values)
        for a, b in zip(got, ref):
            assert a.shape == b.shape and a.dtype == b.dtype, name
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_primitive_and_the_corpus_equal_the_interpreter(dtype, rng):
    # every instruction in rows of its own: the branch of each operation (pairs below)
    cases = _cases(dtype, rng)
    codes = {name: bytecode.encode(tape, pairs=False) for name, (tape, _) in cases.items()}
    assert all(c is not None for c in codes.values()), [n for n, c in codes.items() if c is None]
    used = {op for c in codes.values() for op in c.ops}
    assert any(op.startswith("mul(") and "*" in op for op in used)  # one-element reads
    assert {"place", "spread", "move", "copy", "fill", "matmul", "cumsum"} <= used
    assert dtype == np.float64 or "accumulate" not in used  # the corpus (float64) sums slice gradients
    assert dtype == np.float32 or "accumulate" in used
    _equal_the_interpreter(cases, codes, dtype)


def test_pairs_in_every_primitives_gradient_equal_the_interpreter(rng):
    # element-wise pairs in one row (the default), in float32: each pair computes in registers
    # what separate rows would round into the arena, and must round alike (float64 pairs run in
    # every recurrence test and benchmark problem)
    cases, codes = _cases(np.float32, rng), {}
    for name, (tape, _) in cases.items():
        code = bytecode.encode(tape)
        if any(op.startswith("=") for op in code.ops):  # the others run as in the test above
            codes[name] = code
    assert sum(op.startswith("=") for op in {op for c in codes.values() for op in c.ops}) >= 20
    _equal_the_interpreter({name: cases[name] for name in codes}, codes, np.float32)


def test_what_does_not_fit_is_declined(rng):
    for name in ("index", "gather", "cast"):
        assert bytecode.encode(prim_joint(name, np.float64, rng)[0]) is None, name
    assert bytecode.encode(prim_tape("sum", [np.ones((1, 2, 1, 2, 1))], {"axes": (1,), "keepdim": False})[0]) is None
    assert bytecode.encode(prim_tape("argmax", [np.ones((2, 3))], {"axis": 1, "keepdim": False})[0]) is None


def test_windows_are_reused_once_their_slot_is_dead():
    x = ngrad.ones(100, dtype=ngrad.float64, requires_grad=True)
    y = x
    for _ in range(50):
        y = (y * 0.5).sin()
    tape = lower([y.sum()._node]).tape
    code = bytecode.encode(tape)
    assert code.size < 5 * 100  # a hundred slots of 100 elements live in a few windows
    assert sorted(code.ops) == list(code.ops) and "=f64,f64* math.sin((x[i] * y))" in code.ops


def _equals_the_interpreter(code, tape, values, rtol):
    """Run ``code``'s own loop on ``values`` and compare every output with the interpreter's."""
    got, ref = code.run(kernel(code.source), values), interpret(tape, values)
    for a, r in zip(got, ref):
        np.testing.assert_allclose(a, r, rtol=rtol)


def test_the_loop_depends_on_the_operations_not_on_the_tape():
    def tape_of(steps, n):
        y = x = ngrad.ones(n, dtype=ngrad.float64)
        for _ in range(steps):
            y = y * x + 1.0
        return lower([y.sum()._node]).tape

    a, b = bytecode.encode(tape_of(3, 5)), bytecode.encode(tape_of(40, 700))
    assert a.source == b.source and len(b.code) > len(a.code)
    assert "# =f64,f64,f64* ((x[i] * y[i]) + z)" in a.source and "# sum" in a.source


def _rk4(T, x, steps=40):
    """An unrolled RK4 solver of y' = x * roll(y), long enough to run as bytecode."""
    h, y = 0.05, x
    f = lambda y: T.cat([x[:1] * y[-1:], x[1:] * y[:-1]])  # noqa: E731
    for _ in range(steps):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return (T.sin(y) * y).sum()


class _NumpyT:
    cat, sin = staticmethod(np.concatenate), staticmethod(np.sin)


def test_runtime_runs_an_unrolled_recurrence_as_bytecode(monkeypatch, rng):
    monkeypatch.setenv("NGRAD_JIT", "always")
    x0 = rng.uniform(-1, 1, 12)
    x = ngrad.tensor(x0, requires_grad=True)
    loss = _rk4(ngrad, x)
    loss.backward()
    assert any(isinstance(r.tier, Machine) and r.tier.ready() for r in dispatch.records.values())
    np.testing.assert_allclose(loss.item(), _rk4(_NumpyT, x0), rtol=1e-13)
    np.testing.assert_allclose(x.grad.numpy(), fd_gradient(lambda a: _rk4(_NumpyT, a), x0), rtol=1e-6, atol=1e-8)


def _walk(T, w, seq):
    """A recurrence reading its (steps, n) input a row at a time."""
    h = seq[0] * 0
    for t in range(seq.shape[0]):
        h = T.tanh(w * h + seq[t])
    return (h * h).sum()


def test_a_long_input_read_a_row_at_a_time_still_runs_as_bytecode(monkeypatch, rng):
    """Only the slices' windows count against BYTECODE_MAX_ELEMENTS: a 300-step walk over a
    (300, 16) input runs as bytecode (it went to fused kernels, whose compile took minutes at
    an LSTM's size); a tape reading such an input whole does not."""
    monkeypatch.setenv("NGRAD_JIT", "always")
    s0 = rng.uniform(-1, 1, (300, 16))
    assert s0.size > POLICY.bytecode_max_elements
    w0 = rng.uniform(-1, 1, 16)
    w = ngrad.tensor(w0, requires_grad=True)
    seq = ngrad.tensor(s0)
    loss = _walk(ngrad, w, seq)
    low = lower([loss._node], grad=True)
    machine = machine_for(vjp(low.tape, [low.slot_of[w._node]]).tape)
    assert machine is not None
    # rows of a few dozen elements run faster on LLVM's 256-bit choice than on 512-bit vectors
    assert "_vtanh(" in machine.code.source and "_wide_vectors" not in machine.code.source
    loss.backward()
    np.testing.assert_allclose(loss.item(), _walk(np, w0, s0), rtol=1e-13)
    np.testing.assert_allclose(w.grad.numpy(), fd_gradient(lambda a: _walk(np, a, s0), w0), rtol=1e-6, atol=1e-8)
    whole = lower([(_walk(ngrad, w, seq) + seq.sum())._node])
    assert machine_for(whole.tape) is None  # the sum's row would walk 4,800 elements


def test_a_recurrence_on_big_arrays_runs_as_bytecode_rather_than_hundreds_of_functions(monkeypatch, rng):
    """An RK4 solver on 4,100 elements: too big a step for BYTECODE_MAX_ELEMENTS, but its fused
    plan would compile over a hundred functions (minutes of Numba), so it runs as bytecode."""
    monkeypatch.setattr(CompiledPlan, "compile", lambda *a: pytest.fail("compiled the fused plan"))
    x0 = rng.uniform(-1, 1, POLICY.bytecode_max_elements + 4)
    x = ngrad.tensor(x0, requires_grad=True)
    low = lower([_rk4(ngrad, x, steps=10)._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    assert machine_for(joint.tape) is None
    assert CompiledPlan(joint.tape).functions() > POLICY.bytecode_functions
    plan = dispatch.tier_for(joint.tape, "always").tier
    assert isinstance(plan, Machine)
    values = [n.value for n in low.sources] + [np.ones(joint.tape.shapes[s]) for s in joint.seeds]
    for a, r in zip(plan.run(values), interpret(joint.tape, values)):
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-12)
    loss = _rk4(ngrad, x, steps=10)
    loss.backward()  # the same through autograd (the plan is the one above)
    np.testing.assert_allclose(loss.item(), _rk4(_NumpyT, x0, steps=10), rtol=1e-13)
    some = rng.choice(len(x0), 3, replace=False)  # finite differences at three coordinates
    for i in some:
        e = np.zeros_like(x0)
        e[i] = 1e-6
        fd = (_rk4(_NumpyT, x0 + e, steps=10) - _rk4(_NumpyT, x0 - e, steps=10)) / 2e-6
        np.testing.assert_allclose(x.grad.numpy()[i], fd, rtol=1e-6, atol=1e-8)


def test_compile_replays_an_unrolled_recurrence_through_bytecode(rng):
    @ngrad.compile
    def step(x):
        loss = _rk4(ngrad, x)
        loss.backward()
        return loss

    for _ in range(3):  # the trace, then replays
        x0 = rng.uniform(-1, 1, 12)
        x = ngrad.tensor(x0, requires_grad=True)
        loss = step(x)
        np.testing.assert_allclose(loss.item(), _rk4(_NumpyT, x0), rtol=1e-13)
        np.testing.assert_allclose(x.grad.numpy(), fd_gradient(lambda a: _rk4(_NumpyT, a), x0), rtol=1e-6, atol=1e-8)


def test_an_encoding_is_kept_on_disk_and_a_damaged_one_is_made_again(monkeypatch, tmp_path, rng):
    import marshal
    import os

    from ngrad.engine.store import cache_dir

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    low = lower([_rk4(ngrad, ngrad.tensor(rng.uniform(-1, 1, 12)))._node])
    tape, values = low.tape, [n.value for n in low.sources]
    ref = interpret(tape, values)
    made = []
    real = bytecode.encode
    monkeypatch.setattr(bytecode, "encode", lambda t: made.append(t) or real(t))

    def machine():
        m = machine_for(tape)
        m.compile()
        for a, r in zip(m.run(values), ref):
            np.testing.assert_allclose(a, r, rtol=1e-13)
        return m.code

    first = machine()
    path = os.path.join(cache_dir(), "plans", bytecode.plan_name(tape))
    stored = open(path, "rb").read()
    again = machine()  # a new process would do the same: nothing in memory is consulted
    assert len(made) == 1 and again.ops == first.ops and np.array_equal(again.code, first.code)
    check_damaged_plan_is_made_again(path, machine)  # encoded again, and replaced
    assert len(made) == 5
    # a checksum that holds is not enough: every offset the loop is given is checked too
    fields = list(marshal.loads(stored[32:]))
    fields[6] = [(i, o + first.size, n) for i, o, n in first.tensors]  # inputs outside the arena
    with pytest.raises(ValueError, match="out of range"):
        bytecode.Bytecode.loads(marshal.dumps(tuple(fields)))


def test_loop_ops_picks_a_loop_that_holds_the_operations_or_grows_a_close_one():
    a, b = ("add(f64,f64)", "mul(f64,f64)", "sum"), ("copy", "neg(f64)")
    assert bytecode.loop_ops(("sum", "add(f64,f64)"), [b, a]) == a  # the first that holds them
    assert bytecode.loop_ops(a, []) == a
    assert bytecode.loop_ops(b, [a]) == b  # nothing in common: a loop of its own
    near = ("add(f64,f64)", "mul(f64,f64)", "pad", "sum")  # three of four known: the union
    assert bytecode.loop_ops(near, [b, a]) == ("add(f64,f64)", "mul(f64,f64)", "pad", "sum")
    assert bytecode.loop_ops(("add(f64,f64)", "copy", "pad", "sum"), [a]) == ("add(f64,f64)", "copy", "pad", "sum")
    big = tuple(f"op{i}" for i in range(bytecode.LOOP_MAX_OPS))
    assert bytecode.loop_ops(big[1:] + ("other",), [big]) == big[1:] + ("other",)  # the union is too big


def test_a_tape_runs_on_a_loop_compiled_for_another_that_holds_its_operations(monkeypatch, tmp_path, rng):
    import os

    from ngrad.engine.targets import cpu as compile_

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(bytecode_tier, "loops", {})
    monkeypatch.setattr(compile_, "_memory", {})  # loops compiled by other tests are in another cache
    x = ngrad.tensor(rng.uniform(-1, 1, 12), requires_grad=True)
    low = lower([_rk4(ngrad, x)._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]]).tape
    forward = lower([_rk4(ngrad, x.detach())._node]).tape
    shorter = lower([_rk4(ngrad, x.detach(), steps=10)._node]).tape
    own = {name: bytecode.encode(t).ops for name, t in (("joint", joint), ("forward", forward), ("shorter", shorter))}
    # the forward pass has one operation the gradient's loop lacks (sin and a product in one row)
    assert len(set(own["forward"]) - set(own["joint"])) == 1 and own["shorter"] == own["forward"]

    def machine(tape):
        values = [rng.uniform(-1, 1, tape.shapes[s]) for s in tape.inputs]
        m = machine_for(tape)
        m.compile()
        for a, r in zip(m.run(values), interpret(tape, values)):
            np.testing.assert_allclose(a, r, rtol=1e-12)
        return m

    assert machine(joint).code.ops == own["joint"]
    union = tuple(sorted(set(own["joint"]) | set(own["forward"])))
    assert machine(forward).code.ops == union  # close enough to grow the gradient's loop
    # a new process: nothing in memory, the loops and the list of their operations on disk
    for memory in (bytecode_tier.loops, compile_._memory):
        memory.clear()
    compiled = compile_.stats["compiled"]
    m = machine(shorter)
    assert m.code.ops == union and m.cached and compile_.stats["compiled"] == compiled
    # a damaged list is ignored (each tape gets a loop of its own again) and written anew
    path = tmp_path / os.path.basename(compile_.cache_dir()) / "plans" / bytecode.loops_name()
    import hashlib
    import marshal

    body = marshal.dumps({"f64": [("add(f64,f64)", 1), "sum"], "f32": "sum"})  # intact, but not op sets
    for damaged in (b"", b"x" * 40, path.read_bytes()[:-3], hashlib.sha256(body).digest() + body):
        path.write_bytes(damaged)
        bytecode_tier.loops.clear()
        assert machine(shorter).code.ops == own["shorter"]
        assert bytecode_tier.read_loops()  # readable again


def test_bad_input_is_rejected_before_the_loop_runs():
    x = ngrad.ones(10, dtype=ngrad.float64, requires_grad=True)
    y = x
    for _ in range(300):
        y = y * 1.001
    tape = lower([y.sum()._node]).tape
    call = runtime.prepare(tape)
    good = [np.ones(10)] + [1.001] * (len(tape.inputs) - 1)
    np.testing.assert_allclose(call(good)[0], 10 * 1.001**300)
    with pytest.raises(ValueError, match=r"must be f64\[10\]"):
        call([np.ones(11)] + good[1:])
    with pytest.raises(ValueError, match="must be f64"):
        call([np.ones(10, np.float32)] + good[1:])
    with pytest.raises(ValueError, match="inputs"):
        call(good[:-1])


def test_contiguous_windows_take_the_flat_operations():
    x = np.arange(6.0).reshape(2, 3)
    ops = lambda prim, args, params: bytecode.encode(prim_tape(prim, args, params)[0]).ops  # noqa: E731
    assert ops("unslice", [x], {"shape": (5, 3), "starts": (1, 0), "stops": (3, 3), "steps": (1, 1)}) == ("place",)
    assert ops("unslice", [x], {"shape": (2, 6), "starts": (0, 0), "stops": (2, 6), "steps": (1, 2)}) == (
        "fill",
        "move",
    )
    assert ops("slice", [x], {"starts": (1, 0), "stops": (2, 3), "steps": (1, 1)}) == ()  # part of its window
    assert ops("slice", [x], {"starts": (0, 1), "stops": (2, 3), "steps": (1, 1)}) == ("move",)
    assert ops("expand", [x[:1]], {"shape": (4, 3)}) == ("move",)
    assert ops("expand", [x[:1, :1]], {"shape": (4, 3)}) == ("spread",)


def test_pieces_of_a_concatenation_are_made_in_place(rng):
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    x, y = b.input((1, 4), "f64"), b.input((1, 3), "f64")
    made = x * x  # read only by the concatenation: made in its place
    kept = y.exp()  # read twice: copied
    out = b.emit("cat", [made, kept, y], {"axis": 1})
    tape = b.finish([out, (kept * 2.0).sum(axes=(0, 1), keepdim=False)])
    code = bytecode.encode(tape)
    copies = sum(code.ops[op] == "copy" for op in code.code[:, bytecode.OP])
    assert copies == 2  # exp(y) and y; x * x was written into the result
    values = [rng.standard_normal((1, 4)), rng.standard_normal((1, 3)), 2.0]
    values = values[: len(tape.inputs)]
    _equals_the_interpreter(code, tape, values, 1e-15)


def test_a_slice_gradient_is_added_into_the_sum_that_reads_it(rng):
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    x, g = b.input((7,), "f64"), b.input((3,), "f64")
    placed = g.unslice(shape=(7,), starts=(2,), stops=(5,), steps=(1,))
    tape = b.finish([(x + placed) * x])
    code = bytecode.encode(tape)
    assert "accumulate" in code.ops and "place" not in code.ops
    values = [rng.standard_normal(7), rng.standard_normal(3)]
    _equals_the_interpreter(code, tape, values, 1e-15)


def test_a_slice_gradient_is_added_in_place_into_a_value_that_dies_there(rng):
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    x, g = b.input((7,), "f64"), b.input((3,), "f64")
    placed = [h.unslice(shape=(7,), starts=(2,), stops=(5,), steps=(1,)) for h in (g, g * g)]
    dies, lives = x.exp(), x.sin()
    tape = b.finish([(dies + placed[0]) * 2.0, (lives + placed[1]) * lives])
    code = bytecode.encode(tape)
    rows = code.code[code.code[:, bytecode.OP] == code.ops.index("accumulate")]
    # [op, n, out, a, ...]: exp(x) is not read again, so the sum is made in its window; sin(x) is
    assert sorted(rows[:, 2] == rows[:, 3]) == [False, True]
    values = [rng.standard_normal(7), rng.standard_normal(3)]
    _equals_the_interpreter(code, tape, values, 1e-15)


def test_a_product_is_added_into_a_slice_of_a_value_that_dies_there_in_one_row(rng):
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    x, g, h = b.input((7,), "f64"), b.input((3,), "f64"), b.input((3,), "f64")
    t, u = x.exp(), x.sin()

    def placed(v):
        return v.unslice(shape=(7,), starts=(2,), stops=(5,), steps=(1,))

    fused = (t + placed(g * h)) * 2.0  # dx[2:5] += g * h: t's window, one row
    u2 = u.slice(starts=(1,), stops=(4,), steps=(1,))
    apart = (u + placed(u2 * g)) * 3.0  # the product reads u's own window: a row of its own
    tape = b.finish([fused, apart])
    code = bytecode.encode(tape)
    ops = [code.ops[op] for op in code.code[:, bytecode.OP]]
    assert ops.count("+=f64,f64 (x[i] * y[i])") == 1 and ops.count("accumulate") == 1
    assert ops.count("mul(f64,f64)") == 1
    values = [rng.standard_normal(7), rng.standard_normal(3), rng.standard_normal(3)]
    _equals_the_interpreter(code, tape, values, 1e-15)


def test_a_product_added_into_a_value_read_again_later_is_added_into_a_copy(rng):
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    a, g, h, c = b.input((7,), "f64"), b.input((3,), "f64"), b.input((3,), "f64"), b.input((7,), "f64")
    x = a.exp()
    t = x * 2.0  # read once, by the last sum: computed there, so it reads x after the fold
    y = x + (g * h).unslice(shape=(7,), starts=(2,), stops=(5,), steps=(1,))
    tape = b.finish([y * 3.0, t + c])
    code = bytecode.encode(tape)
    assert "+=f64,f64 (x[i] * y[i])" in code.ops and "copy" in code.ops
    values = [rng.standard_normal(7), rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal(7)]
    _equals_the_interpreter(code, tape, values, 1e-15)


def test_a_value_only_an_unslice_reads_is_made_in_its_window(rng):
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    x = b.input((3,), "f64")
    shared = x * 2.0

    def placed(v):
        return v.unslice(shape=(6,), starts=(1,), stops=(4,), steps=(1,))

    tape = b.finish([placed(x * x), placed(shared) * shared.sum(axes=(0,), keepdim=True).expand(shape=(6,))])
    code = bytecode.encode(tape)
    ops = [code.ops[op] for op in code.code[:, bytecode.OP]]
    assert ops.count("pad") == 1 and ops.count("place") == 1  # x * x made in place; 2x is read twice
    values = [rng.standard_normal(3)]
    _equals_the_interpreter(code, tape, values, 1e-15)


def test_windows_of_sixty_four_elements_or_more_start_on_a_cache_line(rng):
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    s, x, y = b.input((3,), "f64"), b.input((64,), "f64"), b.input((65,), "f64")
    tape = b.finish([s.exp(), x.sin(), y.cos()])
    code = bytecode.encode(tape)
    starts = {i: at for i, at, _ in code.tensors}
    assert starts[0] == 0 and starts[1] % bytecode.ALIGN == 0 and starts[2] % bytecode.ALIGN == 0
    assert [o % bytecode.ALIGN for o, n, *_ in code.outputs if n >= 64] == [0, 0]
    values = [rng.standard_normal(3), rng.standard_normal(64), rng.standard_normal(65)]
    _equals_the_interpreter(code, tape, values, 1e-15)


def test_an_element_wise_pair_runs_as_one_row(rng):
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    x, y, z = b.input((50,), "f64"), b.input((50,), "f64"), b.input((50,), "f64")
    t = x * y  # read once, by the sum below: computed in its row, with no window of its own
    u = (z * 2.0).exp()  # made between them: it must not take x's or y's window
    shared = z - x  # read twice: a row of its own
    tape = b.finish([t + u, shared * shared + shared])
    code = bytecode.encode(tape)
    assert "=f64,f64,f64 ((x[i] * y[i]) + z[i])" in code.ops and "sub(f64,f64)" in code.ops
    # rows: the literal 2, exp(z * 2), z - x, x * y + exp(...), and shared * shared + shared
    assert "mul(f64,f64)" not in code.ops and len(code.code) == 5
    values = [rng.standard_normal(50) for _ in range(3)]
    _equals_the_interpreter(code, tape, values, 1e-14)  # a multiply-add may round once (fused)
