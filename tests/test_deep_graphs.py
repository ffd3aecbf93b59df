"""Deep graphs: a backward through a long chain stays correct, and what makes it cheap in time
and memory (digest keys of long tapes, encoding deferred to a second sighting, long joints not
kept in memory, cotangents and interpreter values dropped once used) changes no result."""

import tracemalloc

import numpy as np
import pytest

import ngrad
from ngrad.autograd import reverse
from ngrad.engine.ir import tape as tape_module
from ngrad.engine.ir.interpret import interpret, last_reads
from ngrad.engine.ir.tape import NO_PARAMS, Builder
from ngrad.engine.runtime.tiering import POLICY, Decision, Record, next_state
from ngrad.engine.transform import differentiate


def _chain(x, count):
    y = x
    for i in range(count):
        y = (y * 0.999).sin() if i % 2 else y * 1.0001 + 0.001
    return y


def _chain_gradient(x0, count):
    """The same chain and its derivative in float64 NumPy, step by step."""
    y, d = x0.copy(), np.ones_like(x0)
    for i in range(count):
        if i % 2:
            d = d * 0.999 * np.cos(y * 0.999)
            y = np.sin(y * 0.999)
        else:
            d = d * 1.0001
            y = y * 1.0001 + 0.001
    return d


def _backward_peak(y):
    """The peak Python memory ``y.backward()`` adds (tracemalloc), in bytes."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        y.backward()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_a_backward_through_a_deep_chain_holds_a_few_kilobytes_an_operation():
    # (test_autograd runs a chain 100,000 deep; this one checks every step's derivative)
    x0 = np.linspace(-1.0, 1.0, 8)
    x = ngrad.tensor(x0, requires_grad=True)
    added = _backward_peak(_chain(x, 3000).sum())
    np.testing.assert_allclose(x.grad.numpy(), _chain_gradient(x0, 3000), rtol=1e-9)
    # lowering, the joint tape and the interpreter's live values: 3.4 KB an operation (5.6 KB
    # before long keys were digests, params shared and cotangents and values dropped once used)
    assert added / 3000 < 4500


def _long_tape(value, steps=tape_module.DIGEST_INSTRS, dtype_first=False):
    """A tape of ``steps`` instructions and a few, multiplying by a literal ``value`` as it is
    given (``Var`` arithmetic would convert it to the dtype's Python type)."""
    b = Builder()
    x = b.input((3,), "f64")
    params = {"dtype": "f64", "value": value} if dtype_first else {"value": value, "dtype": "f64"}
    c = b.emit("const", (), params).reshape(shape=(1,)).expand(shape=(3,))
    y = x
    for _ in range(steps // 2):
        y = (y * c).sin()
    return b.finish([y])


@pytest.mark.parametrize("other", [-0.0, 0, False, np.float64(0.0)])
def test_a_long_tape_is_keyed_by_a_digest_that_tells_literals_apart(other):
    t = _long_tape(0.0)
    assert len(t.instrs) > tape_module.DIGEST_INSTRS
    key = t.key()
    assert len(repr(key)) < 200  # a digest, not a hundred bytes an instruction
    assert key == _long_tape(0.0).key()
    assert key != _long_tape(other).key()  # the printed form differs too
    assert t.format() != _long_tape(other).format()


def test_a_long_tape_key_does_not_depend_on_the_order_params_were_given_in():
    assert _long_tape(0.5).key() == _long_tape(0.5, dtype_first=True).key()


def test_a_long_tape_with_params_marshal_refuses_is_keyed_too():
    a, b = _long_tape(np.float64(1.5)), _long_tape(np.float64(1.5))
    assert a.key() == b.key() != _long_tape(np.float64(-1.5)).key()
    assert a.key() != _long_tape(1.5).key()  # repr tells np.float64(1.5) from 1.5


def test_a_short_tape_keeps_its_structural_key():
    t = _long_tape(2.0, steps=40)
    key = t.key()
    assert key[-1] == tuple(t.outputs) and len(key) == len(t.instrs) + 2


def test_tiering_encodes_a_long_tape_only_once_it_is_seen_again():
    long_tape = POLICY.encode_eager + 1

    def decide(instrs, seen, mode="auto", now=False):
        return next_state(Record(seen=seen, small=True), POLICY, mode=mode, instrs=instrs, now=now)

    assert decide(long_tape, 1) is Decision.WAIT
    assert decide(long_tape, POLICY.threshold) is Decision.ENCODE
    assert decide(long_tape, 1, now=True) is Decision.ENCODE  # prepare encodes at first sight
    assert decide(long_tape, 1, mode="always") is Decision.ENCODE
    assert decide(POLICY.encode_eager, 1) is Decision.ENCODE


def test_a_long_joint_is_made_again_or_read_back_not_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(differentiate, "MEMO_MAX_INSTRS", 100)
    made = []
    vjp = differentiate.vjp
    monkeypatch.setattr(differentiate, "vjp", lambda *a: made.append(1) or vjp(*a))
    t = _long_tape(0.5, steps=400)
    wrt = [t.inputs[0]]
    first = differentiate.joint(t, wrt)
    assert differentiate._JOINTS[(t.key(), tuple(wrt))][0] is None
    second = differentiate.joint(t, wrt)  # made again, and stored
    third = differentiate.joint(t, wrt)  # read back
    assert len(made) == 2 and first is not second and second is not third
    assert first.tape.format() == second.tape.format() == third.tape.format()
    x = np.linspace(-1.0, 1.0, 3)
    outs = [interpret(j.tape, [x, np.ones(3)]) for j in (first, third)]
    np.testing.assert_array_equal(outs[0][1], outs[1][1])


def test_a_cotangent_of_an_intermediate_slot_survives_the_reverse_sweep():
    b = Builder()
    x = b.input((4,), "f64")
    a = x.sin()
    y = (a * a).sum(axes=(0,), keepdim=False)
    j = differentiate.vjp(b.finish([y]), [x.slot, a.slot])
    xv = np.linspace(-1.0, 1.0, 4)
    outs = interpret(j.tape, [xv, np.float64(1.0)])
    np.testing.assert_allclose(outs[j.grads[1]], 2 * np.sin(xv))
    np.testing.assert_allclose(outs[j.grads[0]], 2 * np.sin(xv) * np.cos(xv))


def test_the_interpreter_drops_values_after_their_last_reader():
    b = Builder()
    x = b.input((3,), "f64")
    unread = x.cos()  # read by nothing
    s = x.sin()
    y = s * s
    t = b.finish([y, s, x])
    last = last_reads(t)
    n = len(t.instrs)
    assert last[unread.slot] == 0 and last[s.slot] == n and last[x.slot] == n and last[y.slot] == n
    xv = np.array([0.1, 0.2, 0.3])
    ys, ss, xs = interpret(t, [xv])
    np.testing.assert_allclose(ys, np.sin(xv) ** 2)
    np.testing.assert_allclose(ss, np.sin(xv))
    assert xs is xv


def test_instructions_without_params_share_one_dict_that_stays_empty():
    x = ngrad.tensor(np.linspace(-1.0, 1.0, 5), requires_grad=True)
    _chain(x, 50).sum().backward()
    assert NO_PARAMS == {}
    b = Builder()
    v = b.input((2,), "f64")
    w = v.sin()
    assert b.tape.instrs[-1].params is NO_PARAMS and w.slot == 1


# --- a reverse pass through a graph deeper than two segments runs segment by segment


@pytest.fixture
def segments(monkeypatch):
    """Segments of 64 levels, and the number of joint tapes the passes ran (``_reverse`` calls)."""
    monkeypatch.setattr(reverse, "DEEP_SEGMENT", 64)
    calls = []
    inner = reverse._reverse
    monkeypatch.setattr(reverse, "_reverse", lambda *a, **k: calls.append(1) or inner(*a, **k))
    return calls


def test_a_deep_chain_runs_in_segments_and_keeps_every_step_derivative(segments):
    x0 = np.linspace(-1.0, 1.0, 8)
    x = ngrad.tensor(x0, requires_grad=True)
    _chain(x, 400).sum().backward()  # 800 levels: 12 segments of 64 and the one at the top
    assert len(segments) == 13
    np.testing.assert_allclose(x.grad.numpy(), _chain_gradient(x0, 400), rtol=1e-9)


def test_a_segmented_pass_holds_one_segment_at_a_time(segments, monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "never")  # no compile on the worker thread in the count
    x0 = np.linspace(-1.0, 1.0, 8)
    peaks = []
    for segment in (64, 1 << 30):  # in segments, then whole
        monkeypatch.setattr(reverse, "DEEP_SEGMENT", segment)
        x = ngrad.tensor(x0, requires_grad=True)
        peaks.append(_backward_peak(_chain(x, 3000).sum()))
        np.testing.assert_allclose(x.grad.numpy(), _chain_gradient(x0, 3000), rtol=1e-9)
    # whole, the pass holds the joint tape of every operation (3.4 KB each); in segments one
    # segment's and the walk that finds the cuts (a few hundred bytes an operation)
    assert peaks[0] < peaks[1] / 4 and peaks[0] / 3000 < 600


def _skips(x, count):
    """A deep graph that is not a chain: every 25 levels the running value also reads one from
    150 operations below (across segment ends), and two roots share the path."""
    y, kept = x, []
    for i in range(count):
        y = (y * 0.999).sin() if i % 2 else y * 1.0001 + 0.001
        kept.append(y)
        if i % 25 == 24 and i >= 150:
            y = y + 0.01 * kept[i - 150].tanh()
    return y.sum() + (kept[count // 2] * kept[count // 3]).sum()


def test_a_deep_graph_with_skips_has_the_unsegmented_gradient_and_the_finite_differences(monkeypatch, segments):
    x0 = np.linspace(-0.9, 0.8, 5)
    x = ngrad.tensor(x0, requires_grad=True)
    _skips(x, 500).backward()
    assert len(segments) > 1
    monkeypatch.setattr(reverse, "DEEP_SEGMENT", 1 << 30)
    whole = ngrad.tensor(x0, requires_grad=True)
    _skips(whole, 500).backward()
    np.testing.assert_allclose(x.grad.numpy(), whole.grad.numpy(), rtol=1e-12)
    eps, fd = 1e-6, []
    with ngrad.no_grad():
        for i in range(len(x0)):
            hi, lo = x0.copy(), x0.copy()
            hi[i] += eps
            lo[i] -= eps
            fd.append((_skips(ngrad.tensor(hi), 500).item() - _skips(ngrad.tensor(lo), 500).item()) / (2 * eps))
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6)


def test_grad_of_an_intermediate_and_a_second_backward_follow_pytorch(segments):
    x0 = np.linspace(-1.0, 1.0, 8)
    x = ngrad.tensor(x0, requires_grad=True)
    y = x
    for i in range(300):
        y = (y * 0.999).sin() if i % 2 else y * 1.0001 + 0.001
        if i == 100:
            mid = y
    out = y.sum()
    g_mid, g_x = ngrad.autograd.grad(out, (mid, x), retain_graph=True)
    # d out / d mid is the derivative of the chain's last 199 steps, taken at mid's value
    d = np.ones(8)
    v = mid.detach().numpy().copy()
    for i in range(101, 300):
        if i % 2:
            d, v = d * 0.999 * np.cos(v * 0.999), np.sin(v * 0.999)
        else:
            d, v = d * 1.0001, v * 1.0001 + 0.001
    np.testing.assert_allclose(g_mid.numpy(), d, rtol=1e-9)
    np.testing.assert_allclose(g_x.numpy(), _chain_gradient(x0, 300), rtol=1e-9)
    out.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        out.backward()


def test_a_hook_inside_a_deep_chain_runs_once_with_its_segment(segments):
    x0 = np.linspace(-1.0, 1.0, 8)
    x = ngrad.tensor(x0, requires_grad=True)
    y, seen = x, []
    for i in range(300):
        y = (y * 0.999).sin() if i % 2 else y * 1.0001 + 0.001
        if i == 150:
            y.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2)
    y.sum().backward()
    assert len(seen) == 1
    np.testing.assert_allclose(x.grad.numpy(), 2 * _chain_gradient(x0, 300), rtol=1e-9)
    torch = pytest.importorskip("torch")
    t = torch.tensor(x0, requires_grad=True)
    u = t
    for i in range(300):
        u = (u * 0.999).sin() if i % 2 else u * 1.0001 + 0.001
        if i == 150:
            u.register_hook(lambda g: g * 2)
    u.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-9)
