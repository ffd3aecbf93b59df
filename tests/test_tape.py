"""The tape IR: verify, canonical printing, parsing, and the batching transform."""

import numpy as np
import pytest

import ngrad
from ngrad.engine.ir.graph import lower
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.ir.tape import Builder, Instr, TapeError, parse
from ngrad.engine.transform.batch import batch
from ngrad.engine.transform.differentiate import vjp

from .oracles import check_damaged_plan_is_made_again

GOLDEN = """\
in %0 : f64[3]
in %1 : f64[] scalar
%2 = reshape(%1; shape=(1,)) : f64[1]
%3 = expand(%2; shape=(3,)) : f64[3]
%4 = mul(%0, %3) : f64[3]
%5 = exp(%4) : f64[3]
%6 = sum(%5; axes=(0,), keepdim=False) : f64[]
out %6"""


def _facade_tape():
    x = ngrad.tensor([1.0, 2.0, 3.0], dtype=ngrad.float64, requires_grad=True)
    y = (x * 0.5).exp().sum()
    return lower([y._node], grad=True).tape


def test_lowered_tape_is_golden():
    assert _facade_tape().verify().format() == GOLDEN


def test_print_parse_round_trip():
    tape = _facade_tape()
    joint = vjp(tape, [tape.inputs[0]]).tape
    for t in (tape, joint):
        text = t.format()
        again = parse(text).verify()
        assert again.format() == text
        vals = [np.array([1.0, 2.0, 3.0]), 0.5] + [np.ones(t.shapes[s]) for s in t.inputs[2:]]
        for a, b in zip(interpret(t, vals), interpret(again, vals)):
            np.testing.assert_array_equal(a, b)


def test_parse_all_param_kinds():
    text = """\
in %0 : f32[4,3]
in %1 : i64[2]
%2 = const(; dtype='f32', value=1.5) : f32[]
%3 = slice(%0; starts=(0, 1), steps=(2, 1), stops=(4, 3)) : f32[2,2]
%4 = index(%0, %1; axis=0) : f32[2,3]
%5 = cast(%4; dtype='f64') : f64[2,3]
out %3 %5 %2"""
    t = parse(text).verify()
    assert parse(t.format()).format() == t.format()


@pytest.mark.parametrize(
    "mutate,phrase",
    [
        (lambda t: t.instrs.__setitem__(0, Instr(t.instrs[0].out, "nope", t.instrs[0].args, {})), "unknown primitive"),
        (lambda t: t.shapes.__setitem__(t.instrs[-1].out, (7,)), "rule gives"),
        (lambda t: t.instrs.insert(0, t.instrs[-1]), "before it is defined"),
        (lambda t: t.instrs.append(t.instrs[0]), "written twice"),
        (lambda t: t.outputs.append(99), "never defined"),
    ],
)
def test_verify_rejects_broken_tapes(mutate, phrase):
    tape = _facade_tape()
    tape.shapes.append(())
    tape.dtypes.append("f64")
    mutate(tape)
    with pytest.raises(TapeError, match=phrase):
        tape.verify()


def test_builder_rejects_bad_shapes():
    b = Builder()
    x, y = b.input((3,), "f64"), b.input((4,), "f64")
    with pytest.raises(TapeError, match="must match exactly"):
        x + y
    with pytest.raises(TapeError, match="cannot reshape"):
        x.reshape(shape=(2, 2))
    with pytest.raises(TapeError, match="do not fit"):
        x.reshape(shape=(3, 1)).matmul(y.reshape(shape=(4, 1)))


def _batched_equals_loop(tape, seeds, size, rng, base):
    btape, flags = batch(tape, set(seeds), size)
    btape.verify()
    stacks = {s: rng.standard_normal((size,) + tape.shapes[s]) for s in seeds}

    def inputs(k):
        it = iter(base)
        return [stacks[s][k] if s in seeds else next(it) for s in tape.inputs]

    it = iter(base)
    bin_ = [stacks[s] if s in seeds else next(it) for s in tape.inputs]
    together = interpret(btape, bin_)
    for k in range(size):
        single = interpret(tape, inputs(k))
        for out, one, flag in zip(together, single, flags):
            np.testing.assert_allclose(out[k] if flag else out, one, rtol=1e-12, atol=1e-12)


def test_batch_of_reverse_passes_equals_a_loop(rng):
    x = ngrad.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    w = ngrad.tensor(rng.standard_normal((3, 5)), requires_grad=True)
    idx = ngrad.tensor([2, 0, 0])
    y = ((x @ w).tanh().cumsum(1)[:, 1:].flip(0) * x.sum(1, keepdim=True)).softmax(1)
    y = ngrad.cat([y, x[idx].amax(1, keepdim=True).expand(3, 4)], 0).gather(1, ngrad.tensor([[1, 0]] * 7))
    low = lower([y._node], grad=True)
    joint = vjp(low.tape, list(low.tape.inputs))
    _batched_equals_loop(joint.tape, joint.seeds, 3, rng, [n.value for n in low.sources])


def test_batch_with_batched_indices(rng):
    b = Builder()
    x = b.input((4, 5, 2), "f64")
    i = b.input((3,), "i64")
    j = b.input((3,), "i64")
    g = b.input((4, 3, 2), "f64")
    y = x.index(i, j, axis=1)  # (4, 3): two index tensors, one batched
    z = x.index(i, axis=1)  # (4, 3, 2)
    u = g.unindex(i, axis=1, shape=(4, 5, 2))
    tape = b.finish([y, z, u]).verify()
    # batch the index tensor itself: each batch member uses its own indices
    btape, flags = batch(tape, {x.slot, i.slot, g.slot}, 2)
    btape.verify()
    xs = rng.standard_normal((2, 4, 5, 2))
    gs = rng.standard_normal((2, 4, 3, 2))
    iv = np.array([[0, 4, 4], [1, 2, 3]])
    jv = np.zeros(3, np.int64)
    outs = interpret(btape, [xs, iv, jv, gs])
    for k in range(2):
        single = interpret(tape, [xs[k], iv[k], jv, gs[k]])
        for o, s in zip(outs, single):
            np.testing.assert_allclose(o[k], s)


def test_structural_keys_and_cse_keep_signed_zeros_apart():
    def tape_with(v):
        b = Builder()
        x = b.input((2,), "f64")
        return b.finish([x * b.full(v, (2,), "f64")])

    assert tape_with(0.0).key() != tape_with(-0.0).key()
    assert tape_with(1.5).key() == tape_with(1.5).key()
    b = Builder()
    zero = b.emit("const", (), {"value": 0.0, "dtype": "f64"})
    negzero = b.emit("const", (), {"value": -0.0, "dtype": "f64"})
    assert zero.slot != negzero.slot and b.full(0.0, (), "f64").slot == zero.slot


def _recurrence(rng, steps=40):
    """A long tape (a few hundred instructions) and its source values."""
    x = ngrad.tensor(rng.uniform(-1, 1, 6), requires_grad=True)
    w = ngrad.tensor(rng.uniform(-1, 1, 6), requires_grad=True)
    h = x
    for _ in range(steps):
        h = (h * w).tanh() + 0.5 * h.sin()
    low = lower([(h * h).sum()._node], grad=True)
    return low.tape, [n.value for n in low.sources]


def test_a_plans_name_is_the_same_whatever_else_holds_parts_of_its_key():
    from ngrad.engine.store import plan_name

    def key():
        return (tuple(["mul", (0, 1)]), tuple([(3,), "f64"]), 2.5)

    alone, shared = key(), key()
    held = [shared[0], shared[1]]  # as a memo or an interpreter's steps hold an instruction's parts
    assert plan_name("t", (), alone) == plan_name("t", (), shared)
    assert plan_name("t", (), alone) != plan_name("t", (), key()[:2])
    del held


def test_a_long_tapes_joint_is_kept_on_disk_and_a_damaged_one_is_made_again(monkeypatch, tmp_path, rng):
    import os

    from ngrad.engine.store import cache_dir
    from ngrad.engine.transform import differentiate

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NGRAD_JIT", "auto")  # NGRAD_JIT=never keeps nothing on disk
    monkeypatch.setattr(differentiate, "_JOINTS", {})
    tape, values = _recurrence(rng)
    assert len(tape.instrs) >= differentiate.STORE_MIN_INSTRS
    wrt = list(tape.inputs)
    made = []
    real = differentiate.vjp
    monkeypatch.setattr(differentiate, "vjp", lambda t, w: made.append(t) or real(t, w))
    seeds = [np.ones(())]
    want = interpret(real(tape, wrt).tape, values + seeds)

    def joint():
        differentiate._JOINTS.clear()  # what a new process has in memory
        j = differentiate.joint(tape, wrt)
        assert differentiate.joint(tape, wrt) is j  # and then it is held in memory
        for a, b in zip(interpret(j.tape.verify(), values + seeds), want):
            np.testing.assert_array_equal(a, b)
        return j

    first = joint()
    path = os.path.join(cache_dir(), "plans", differentiate._joint_name((tape.key(), tuple(wrt))))
    again = joint()
    assert len(made) == 1 and again.tape.format() == first.tape.format()
    for field in ("seeds", "grads", "ran", "reads_saved", "saved", "contributions"):
        assert getattr(again, field) == getattr(first, field), field
    check_damaged_plan_is_made_again(path, joint)  # differentiated again, and replaced
    assert len(made) == 5
    # a checksum that holds is not enough: the tape it continues and its slots are checked too
    other, _ = _recurrence(rng, steps=41)
    with pytest.raises(ValueError, match="another tape"):
        differentiate.Joint.loads(other, first.dumps(tape))
    with pytest.raises(ValueError, match="not a stored joint"):
        differentiate.Joint.loads(tape, b"\x00garbage")
    import marshal

    fields = list(marshal.loads(first.dumps(tape)))
    out, prim, args, params = fields[5][3]
    fields[5][3] = (out, prim, (out,) + args[1:], params)  # reads itself
    with pytest.raises(ValueError, match="malformed"):
        differentiate.Joint.loads(tape, marshal.dumps(tuple(fields)))
    fields = list(marshal.loads(first.dumps(tape)))
    fields[8] = ["x"] * len(fields[8])  # gradient positions of another type
    with pytest.raises(ValueError, match="malformed"):
        differentiate.Joint.loads(tape, marshal.dumps(tuple(fields)))
    fields = list(marshal.loads(first.dumps(tape)))
    fields[10] = list(fields[10])  # the saved-tensor readers as a list, not a set
    with pytest.raises(ValueError, match="malformed"):
        differentiate.Joint.loads(tape, marshal.dumps(tuple(fields)))
    # a short tape differentiates faster than a file is read: nothing is stored for it
    b = Builder()
    x = b.input((3,), "f64")
    short = b.finish([(x * x).sum(axes=(0,), keepdim=False)])
    before = set(os.listdir(os.path.dirname(path)))
    differentiate.joint(short, [x.slot], keep=True)
    assert set(os.listdir(os.path.dirname(path))) == before
    monkeypatch.setenv("NGRAD_JIT", "never")  # nor for any tape under NGRAD_JIT=never
    os.unlink(path)
    joint()
    assert set(os.listdir(os.path.dirname(path))) == before - {os.path.basename(path)}


def test_backward_stores_a_joint_it_meets_again_or_traces_and_reads_it_back(monkeypatch, tmp_path, rng):
    import glob
    import os

    from ngrad.engine.store import cache_dir
    from ngrad.engine.transform import differentiate

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setattr(differentiate, "_JOINTS", {})
    x0, w0 = rng.uniform(0.5, 1, 6), rng.uniform(0.5, 1, 6)

    def loss(x, w):
        h = x
        for _ in range(80):  # a tape of over 256 instructions
            h = h + 0.05 * (h * w).sin()
        return (h * h).sum()

    def grads():
        x, w = ngrad.tensor(x0, requires_grad=True), ngrad.tensor(w0, requires_grad=True)
        loss(x, w).backward()
        return x.grad.numpy(), w.grad.numpy()

    def stored():
        return glob.glob(os.path.join(cache_dir(), "plans", "j*"))

    first = grads()
    assert all(np.abs(g).min() > 0.1 for g in first), first
    assert not stored()  # a structure met once leaves nothing on disk ...
    for a, b in zip(grads(), first):  # ... one met again is stored (this call runs compiled)
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert len(stored()) == 1
    differentiate._JOINTS.clear()  # what a new process has in memory
    real = differentiate.vjp
    monkeypatch.setattr(differentiate, "vjp", lambda t, w: pytest.fail("differentiated again"))
    for a, b in zip(grads(), first):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    # a backward that ngrad.compile traces is stored the first time: the program is made to be reused
    os.unlink(stored()[0])
    differentiate._JOINTS.clear()
    monkeypatch.setattr(differentiate, "vjp", real)
    step = ngrad.compile(lambda x, w: ngrad.autograd.grad(loss(x, w), (x, w)))
    x, w = ngrad.tensor(x0, requires_grad=True), ngrad.tensor(w0, requires_grad=True)
    for a, b in zip(step(x, w), first):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-12)
    assert len(stored()) == 1


def test_nothing_is_stored_when_the_code_that_names_plans_cannot_be_read(monkeypatch, tmp_path, rng):
    import os

    from ngrad.engine import store as compile_
    from ngrad.engine.backend import bytecode
    from ngrad.engine.transform import differentiate

    def unreadable(modules):
        raise OSError("no source")

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setattr(differentiate, "_JOINTS", {})
    monkeypatch.setattr(compile_, "_source_digest", unreadable)
    tape, values = _recurrence(rng)
    assert bytecode.plan_name(tape) is None and bytecode.loops_name() is None
    j = differentiate.joint(tape, list(tape.inputs), keep=True)
    for a, b in zip(
        interpret(j.tape, values + [np.ones(())]), interpret(vjp(tape, list(tape.inputs)).tape, values + [np.ones(())])
    ):
        np.testing.assert_array_equal(a, b)
    assert not os.path.exists(os.path.join(compile_.cache_dir(), "plans"))
