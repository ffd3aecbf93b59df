"""ngrad.nn's recurrent layers (RNN, LSTM, GRU and their cells): against PyTorch (same weights
loaded through load_state_dict, same inputs and initial states: outputs, final states, the
gradients of the input, the initial states and every parameter, float64) across layers,
directions, batch_first, proj_size and unbatched input; by finite differences and a hand-written
step without torch; compiled against eager; dropout between layers in train and eval mode;
PyTorch's constructor and input-shape errors."""

import math

import numpy as np
import pytest

import ngrad
from ngrad import nn

RTOL = 1e-6


def _np(t):
    return t.detach().numpy()


def _flatten(out):
    """(output, h_n) or (output, (h_n, c_n)) as a flat list of tensors."""
    if isinstance(out, tuple):
        return [t for item in out for t in _flatten(item)]
    return [out]


def _copy_weights(theirs, mine):
    sd = {k: ngrad.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()}
    assert repr(mine.load_state_dict(sd)) == "<All keys matched successfully>"


def _parity(name, args, kwargs, x_shape, states=(), seed=0):
    """Build ``name`` in both libraries, copy torch's weights, run the same input (and initial
    states of the given shapes), compare every output and every gradient."""
    torch = pytest.importorskip("torch")
    t_mod = getattr(torch.nn, name)(*args, **kwargs).double()
    n_mod = getattr(nn, name)(*args, **kwargs).double()
    _copy_weights(t_mod, n_mod)
    assert repr(n_mod) == repr(t_mod)
    r = np.random.default_rng(seed)
    arrays = [r.standard_normal(x_shape)] + [r.standard_normal(s) for s in states]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    n_in = [ngrad.tensor(a, requires_grad=True) for a in arrays]

    def call(mod, inputs):
        if not states:
            return mod(inputs[0])
        hidden = inputs[1] if len(states) == 1 else tuple(inputs[1:])
        return mod(inputs[0], hidden)

    t_outs, n_outs = _flatten(call(t_mod, t_in)), _flatten(call(n_mod, n_in))
    assert len(t_outs) == len(n_outs)
    t_loss, n_loss = 0, 0
    for a, b in zip(n_outs, t_outs):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(_np(a), b.detach().numpy(), rtol=RTOL, atol=1e-12)
        w = r.standard_normal(tuple(b.shape))
        t_loss = t_loss + (b * torch.tensor(w)).sum()
        n_loss = n_loss + (a * ngrad.tensor(w)).sum()
    t_loss.backward()
    n_loss.backward()
    for a, b in zip(n_in, t_in):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=RTOL, atol=1e-12)
    t_params, n_params = dict(t_mod.named_parameters()), dict(n_mod.named_parameters())
    assert list(n_params) == list(t_params)
    for k, p in t_params.items():
        np.testing.assert_allclose(n_params[k].grad.numpy(), p.grad.numpy(), rtol=RTOL, atol=1e-12, err_msg=k)
    return n_mod


T, B, I, H = 5, 3, 4, 6

CASES = {
    "rnn_tanh": ("RNN", (I, H), {}, (T, B, I), [(1, B, H)]),
    "rnn_relu_2_layers_bidirectional": (
        "RNN",
        (I, H),
        {"num_layers": 2, "nonlinearity": "relu", "bidirectional": True},
        (T, B, I),
        [(4, B, H)],
    ),
    "rnn_no_bias_batch_first_no_h0": ("RNN", (I, H), {"bias": False, "batch_first": True}, (B, T, I), []),
    "rnn_unbatched": ("RNN", (I, H, 2), {}, (T, I), [(2, H)]),
    "lstm": ("LSTM", (I, H), {}, (T, B, I), [(1, B, H), (1, B, H)]),
    "lstm_no_state": ("LSTM", (I, H), {"num_layers": 2}, (T, B, I), []),
    "lstm_3_layers_bidirectional_batch_first": (
        "LSTM",
        (I, H),
        {"num_layers": 3, "bidirectional": True, "batch_first": True},
        (B, T, I),
        [(6, B, H), (6, B, H)],
    ),
    "lstm_proj": ("LSTM", (I, H), {"proj_size": 2, "num_layers": 2}, (T, B, I), [(2, B, 2), (2, B, H)]),
    "lstm_proj_bidirectional_no_bias": (
        "LSTM",
        (I, H),
        {"proj_size": 3, "bidirectional": True, "bias": False},
        (T, B, I),
        [(2, B, 3), (2, B, H)],
    ),
    "lstm_unbatched_batch_first": ("LSTM", (I, H), {"batch_first": True}, (T, I), [(1, H), (1, H)]),
    "lstm_unbatched_proj_no_state": ("LSTM", (I, H), {"proj_size": 2, "bidirectional": True}, (T, I), []),
    "gru": ("GRU", (I, H), {}, (T, B, I), [(1, B, H)]),
    "gru_2_layers_bidirectional_batch_first": (
        "GRU",
        (I, H, 2),
        {"bidirectional": True, "batch_first": True},
        (B, T, I),
        [(4, B, H)],
    ),
    "gru_no_bias_unbatched": ("GRU", (I, H), {"bias": False}, (T, I), []),
    "rnn_cell": ("RNNCell", (I, H), {}, (B, I), [(B, H)]),
    "rnn_cell_relu_no_bias_unbatched": ("RNNCell", (I, H, False, "relu"), {}, (I,), [(H,)]),
    "lstm_cell": ("LSTMCell", (I, H), {}, (B, I), [(B, H), (B, H)]),
    "lstm_cell_unbatched_no_state": ("LSTMCell", (I, H), {"bias": False}, (I,), []),
    "gru_cell": ("GRUCell", (I, H), {}, (B, I), [(B, H)]),
    "gru_cell_no_state": ("GRUCell", (I, H), {}, (B, I), []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_recurrent_layer_matches_pytorch(case):
    name, args, kwargs, x_shape, states = CASES[case]
    _parity(name, args, kwargs, x_shape, states)


def test_dropout_between_layers_matches_pytorch_in_eval_mode_and_differs_in_train_mode():
    torch = pytest.importorskip("torch")
    t_mod = torch.nn.LSTM(I, H, num_layers=3, dropout=0.4).double().eval()
    n_mod = nn.LSTM(I, H, num_layers=3, dropout=0.4).double().eval()
    _copy_weights(t_mod, n_mod)
    x = np.random.default_rng(5).standard_normal((T, B, I))
    out, (h, c) = n_mod(ngrad.tensor(x))
    t_out, (t_h, t_c) = t_mod(torch.tensor(x))
    for a, b in ((out, t_out), (h, t_h), (c, t_c)):
        np.testing.assert_allclose(_np(a), b.detach().numpy(), rtol=RTOL)
    n_mod.train()
    _ = ngrad.manual_seed(0)
    train_out, (train_h, _) = n_mod(ngrad.tensor(x))
    # the first layer's final state sees no dropout; the layers above read dropped inputs
    np.testing.assert_allclose(_np(train_h)[0], t_h.detach().numpy()[0], rtol=RTOL)
    assert not np.allclose(_np(train_out), _np(out))


def test_dropout_masks_the_inputs_of_the_layers_above_only():
    """Without torch: in training mode the second layer reads the first layer's output with
    elements zeroed and the rest scaled by 1 / (1 - p); the mask is drawn once per layer
    boundary over the whole sequence."""
    _ = ngrad.manual_seed(1)
    rnn = nn.RNN(2, 200, num_layers=2, dropout=0.5, dtype=ngrad.float64)
    x = ngrad.tensor(np.random.default_rng(0).standard_normal((4, 1, 2)))
    first = nn.RNN(2, 200, dtype=ngrad.float64)
    second = nn.RNN(200, 200, dtype=ngrad.float64)
    _ = first.load_state_dict({k[:-1] + "0": v for k, v in rnn.state_dict().items() if k.endswith("l0")})
    _ = second.load_state_dict({k[:-1] + "0": v for k, v in rnn.state_dict().items() if k.endswith("l1")})
    _ = ngrad.manual_seed(7)
    out, _ = rnn(x)
    hidden, _ = first(x)
    _ = ngrad.manual_seed(7)
    keep = ngrad.nn.functional.dropout(ngrad.ones(4, 1, 200, dtype=ngrad.float64), 0.5, True)
    expected, _ = second(hidden * keep)
    np.testing.assert_allclose(_np(out), _np(expected), rtol=1e-12)
    assert 0.3 < (keep.numpy() == 0).mean() < 0.7
    rnn.eval()
    np.testing.assert_allclose(_np(rnn(x)[0]), _np(second(hidden)[0]), rtol=1e-12)


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def test_lstm_and_gru_steps_by_hand():
    """Without torch: two steps of an LSTM and a GRU written out in NumPy."""
    _ = ngrad.manual_seed(3)
    x = np.random.default_rng(2).standard_normal((2, 1, 3))
    lstm = nn.LSTM(3, 2, dtype=ngrad.float64)
    w = {k: v.numpy() for k, v in lstm.state_dict().items()}
    h, c = np.zeros((1, 2)), np.zeros((1, 2))
    outs = []
    for t in range(2):
        g = x[t] @ w["weight_ih_l0"].T + w["bias_ih_l0"] + h @ w["weight_hh_l0"].T + w["bias_hh_l0"]
        i, f, gg, o = np.split(g, 4, axis=1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(gg)
        h = _sigmoid(o) * np.tanh(c)
        outs.append(h)
    out, (h_n, c_n) = lstm(ngrad.tensor(x))
    np.testing.assert_allclose(_np(out), np.stack(outs), rtol=1e-12)
    np.testing.assert_allclose(_np(h_n)[0], h, rtol=1e-12)
    np.testing.assert_allclose(_np(c_n)[0], c, rtol=1e-12)

    gru = nn.GRU(3, 2, dtype=ngrad.float64)
    w = {k: v.numpy() for k, v in gru.state_dict().items()}
    h = np.zeros((1, 2))
    for t in range(2):
        gi = x[t] @ w["weight_ih_l0"].T + w["bias_ih_l0"]
        gh = h @ w["weight_hh_l0"].T + w["bias_hh_l0"]
        r = _sigmoid(gi[:, :2] + gh[:, :2])
        z = _sigmoid(gi[:, 2:4] + gh[:, 2:4])
        n = np.tanh(gi[:, 4:] + r * gh[:, 4:])
        h = (1 - z) * n + z * h
    np.testing.assert_allclose(_np(gru(ngrad.tensor(x))[1])[0], h, rtol=1e-12)


@pytest.mark.parametrize(
    "make,states",
    [
        (lambda: nn.LSTM(2, 2, num_layers=2, bidirectional=True, proj_size=1), [(4, 2, 1), (4, 2, 2)]),
        (lambda: nn.GRU(2, 3, batch_first=True), [(1, 3, 3)]),
        (lambda: nn.RNN(2, 3, nonlinearity="relu", bidirectional=True), [(2, 2, 3)]),
    ],
)
def test_gradients_pass_finite_differences(make, states):
    """The core path without torch: input, initial states and every parameter by gradcheck."""
    _ = ngrad.manual_seed(4)
    mod = make().double()
    names = [k for k, _ in mod.named_parameters()]
    r = np.random.default_rng(6)
    x = ngrad.tensor(r.standard_normal((3, 2, 2)), requires_grad=True)
    hs = [ngrad.tensor(r.standard_normal(s), requires_grad=True) for s in states]

    def f(x, *rest):
        hidden = rest[0] if len(hs) == 1 else tuple(rest[: len(hs)])
        params = dict(zip(names, rest[len(hs) :]))
        return _flatten(ngrad.func.functional_call(mod, params, (x, hidden)))

    params = [p.detach().clone().requires_grad_() for p in mod.parameters()]
    assert ngrad.autograd.gradcheck(f, (x, *hs, *params))


def test_default_initialisation_and_parameter_layout():
    _ = ngrad.manual_seed(0)
    lstm = nn.LSTM(10, 400, num_layers=2, bidirectional=True)
    bound = 1 / math.sqrt(400)
    for name, p in lstm.named_parameters():
        v = p.detach().numpy()
        assert np.abs(v).max() <= bound and np.abs(v).max() > 0.99 * bound, name
        assert p.dtype is ngrad.float32
    w = lstm.weight_hh_l1_reverse.detach().numpy()
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound
    assert [tuple(p.shape) for p in lstm.all_weights[3]] == [(1600, 800), (1600, 400), (1600,), (1600,)]
    assert lstm._flat_weights_names[:2] == ["weight_ih_l0", "weight_hh_l0"]
    lstm.flatten_parameters()  # a no-op kept for PyTorch scripts
    cell = nn.GRUCell(3, 100, bias=False, dtype=ngrad.float64)
    assert [k for k, _ in cell.named_parameters()] == ["weight_ih", "weight_hh"] and cell.bias_ih is None
    assert np.abs(cell.weight_ih.detach().numpy()).max() <= 0.1


def _raises(exc, match, f):
    with pytest.raises(exc, match=match):
        f()


def test_constructor_errors_are_pytorchs():
    _raises(ValueError, "dropout should be a number in range", lambda: nn.LSTM(2, 3, dropout=1.5))
    _raises(ValueError, "dropout should be a number in range", lambda: nn.LSTM(2, 3, dropout=True))
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.GRU(2, 3, dropout=0.2)
    _raises(TypeError, "hidden_size should be of type int, got: float", lambda: nn.RNN(2, 3.0))
    _raises(ValueError, "input_size must be greater than zero", lambda: nn.RNN(0, 3))
    _raises(ValueError, "num_layers must be greater than zero", lambda: nn.RNN(2, 3, 0))
    _raises(TypeError, "bias should be of type bool, got: int", lambda: nn.LSTM(2, 3, bias=1))
    _raises(ValueError, "proj_size has to be smaller than hidden_size", lambda: nn.LSTM(2, 3, proj_size=3))
    _raises(ValueError, "proj_size should be a positive integer", lambda: nn.LSTM(2, 3, proj_size=-1))
    _raises(ValueError, "proj_size argument is only supported for LSTM", lambda: nn.GRU(2, 3, proj_size=1))
    _raises(ValueError, "Unknown nonlinearity 'x'. Select from 'tanh' or 'relu'.", lambda: nn.RNN(2, 3, 1, "x"))
    _raises(RuntimeError, "Unknown nonlinearity: x", lambda: nn.RNNCell(2, 3, nonlinearity="x")(ngrad.ones(2)))


def test_input_shape_errors_are_pytorchs():
    lstm, gru, rnn = nn.LSTM(4, 3), nn.GRU(4, 3), nn.RNN(4, 3)
    x = ngrad.ones(5, 2, 4)
    _raises(ValueError, r"RNN: Expected input to be 2D or 3D, got 1D tensor instead", lambda: rnn(ngrad.ones(4)))
    _raises(ValueError, r"GRU: Expected input to be 2D or 3D, got 4D instead", lambda: gru(ngrad.ones(1, 5, 2, 4)))
    _raises(ValueError, r"LSTM: Expected input to be 2D or 3D, got 1D instead", lambda: lstm(ngrad.ones(4)))
    _raises(RuntimeError, "input.size\\(-1\\) must be equal to input_size. Expected 4, got 1", lambda: lstm(x[..., :1]))
    _raises(
        RuntimeError,
        r"Expected hidden\[0\] size \(1, 2, 3\), got \[1, 3, 3\]",
        lambda: lstm(x, (ngrad.ones(1, 3, 3), ngrad.ones(1, 2, 3))),
    )
    _raises(
        RuntimeError,
        r"Expected hidden\[1\] size \(1, 2, 3\), got \[1, 2, 4\]",
        lambda: lstm(x, (ngrad.ones(1, 2, 3), ngrad.ones(1, 2, 4))),
    )
    _raises(
        RuntimeError,
        r"hx and cx should also be 3-D but got \(2-D, 3-D\) tensors",
        lambda: lstm(x, (ngrad.ones(2, 3), ngrad.ones(1, 2, 3))),
    )
    _raises(RuntimeError, r"Expected hidden size \(1, 2, 3\), got \[2, 2, 3\]", lambda: gru(x, ngrad.ones(2, 2, 3)))
    _raises(
        RuntimeError,
        "For batched 3-D input, hx should also be 3-D but got 2-D tensor",
        lambda: rnn(x, ngrad.ones(2, 3)),
    )
    _raises(
        RuntimeError,
        "For unbatched 2-D input, hx should also be 2-D but got 3-D tensor",
        lambda: rnn(x[:, 0], ngrad.ones(1, 1, 3)),
    )
    _raises(
        ValueError,
        r"RNN input dtype \(ngrad.float64\) does not match weight dtype \(ngrad.float32\)",
        lambda: gru(x.double()),
    )
    _raises(RuntimeError, "Expected sequence length to be larger than 0 in RNN", lambda: gru(x[:0]))
    cell = nn.LSTMCell(4, 3)
    _raises(ValueError, r"LSTMCell: Expected input to be 1D or 2D, got 3D instead", lambda: cell(x))
    _raises(
        ValueError,
        r"LSTMCell: Expected hx\[1\] to be 1D or 2D, got 3D instead",
        lambda: cell(x[0], (ngrad.ones(2, 3), ngrad.ones(1, 2, 3))),
    )
    _raises(RuntimeError, "input has inconsistent input_size: got 5 expected 4", lambda: cell(ngrad.ones(2, 5)))
    _raises(
        RuntimeError,
        "Input batch size 2 doesn't match hidden1 batch size 3",
        lambda: cell(x[0], (ngrad.ones(2, 3), ngrad.ones(3, 3))),
    )
    _raises(
        RuntimeError,
        "hidden0 has inconsistent hidden_size: got 5, expected 3",
        lambda: nn.GRUCell(4, 3)(x[0], ngrad.ones(2, 5)),
    )
    _raises(ValueError, r"RNNCell: Expected hidden to be 1D or 2D, got 3D instead", lambda: nn.RNNCell(4, 3)(x[0], x))


def _training_run(make, compiled, steps=3):
    _ = ngrad.manual_seed(0)
    mod = make().double()
    opt = ngrad.optim.Adam(mod.parameters(), lr=1e-2)
    r = np.random.default_rng(8)
    x = ngrad.tensor(r.standard_normal((4, 2, 3)))
    y = ngrad.tensor(r.standard_normal((4, 2, 4)))

    def step(x, y):
        opt.zero_grad()
        out = mod(x)[0]
        loss = ((out - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    run = ngrad.compile(step) if compiled else step
    losses = [run(x, y).item() for _ in range(steps)]
    return losses, [p.detach().numpy() for p in mod.parameters()]


def _assert_same_runs(make):
    (losses, params), (c_losses, c_params) = _training_run(make, False), _training_run(make, True)
    np.testing.assert_allclose(c_losses, losses, rtol=1e-10)
    assert losses[-1] < losses[0]
    for a, b in zip(c_params, params):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_a_traced_training_step_equals_the_eager_one():
    """ngrad.compile traces the unrolled layers once and replays them (here on the interpreter):
    losses and parameters after Adam steps equal the eager run's."""
    _assert_same_runs(lambda: nn.LSTM(3, 3, num_layers=2, bidirectional=True, proj_size=2, dropout=0.5).eval())


@pytest.mark.numba
@pytest.mark.slow  # Numba compiles the traced step's kernels: seconds with an empty kernel cache
def test_a_compiled_training_step_equals_the_eager_one(jit_always, monkeypatch):
    """The traced step compiled at once against the eager run on the interpreter."""

    def make():
        return nn.GRU(3, 4)

    monkeypatch.setenv("NGRAD_JIT", "never")
    losses, params = _training_run(make, False)
    monkeypatch.setenv("NGRAD_JIT", "always")
    c_losses, c_params = _training_run(make, True)
    np.testing.assert_allclose(c_losses, losses, rtol=1e-10)
    for a, b in zip(c_params, params):
        np.testing.assert_allclose(a, b, rtol=1e-10)


LENGTHS = [3, 5, 1, 4]  # unsorted: packing sorts them


@pytest.mark.parametrize(
    "name,kwargs,states",
    [
        ("LSTM", {"num_layers": 2, "bidirectional": True, "proj_size": 2}, [(4, 4, 2), (4, 4, H)]),
        ("GRU", {"batch_first": True, "bidirectional": True}, [(2, 4, H)]),
        ("RNN", {"nonlinearity": "relu"}, []),
    ],
)
def test_packed_sequences_match_pytorch(name, kwargs, states):
    """pack_padded_sequence -> layer -> pad_packed_sequence against torch's: the padded output,
    lengths, final states and the gradients of the padded input, states and parameters."""
    torch = pytest.importorskip("torch")
    from ngrad.nn.utils import rnn as n_rnn

    t_rnn = torch.nn.utils.rnn
    t_mod = getattr(torch.nn, name)(I, H, **kwargs).double()
    n_mod = getattr(nn, name)(I, H, **kwargs).double()
    _copy_weights(t_mod, n_mod)
    batch_first = kwargs.get("batch_first", False)
    r = np.random.default_rng(9)
    x = r.standard_normal((4, 5, I) if batch_first else (5, 4, I))
    arrays = [x] + [r.standard_normal(s) for s in states]
    results = []
    for lib, R, mod in ((torch, t_rnn, t_mod), (ngrad, n_rnn, n_mod)):
        inputs = [lib.tensor(a, requires_grad=True) for a in arrays]
        packed = R.pack_padded_sequence(inputs[0], LENGTHS, batch_first=batch_first, enforce_sorted=False)
        hidden = None if not states else inputs[1] if len(states) == 1 else tuple(inputs[1:])
        out, h = mod(packed, hidden)
        assert type(out).__name__ == "PackedSequence"
        padded, lengths = R.pad_packed_sequence(out, batch_first=batch_first, padding_value=0.5, total_length=6)
        outs = [padded] + _flatten(h)
        w = np.random.default_rng(10)
        loss = sum((o * lib.tensor(w.standard_normal(tuple(o.shape)))).sum() for o in outs)
        loss.backward()
        grads = [a.grad.numpy() for a in inputs] + [p.grad.numpy() for p in mod.parameters()]
        results.append(([o.detach().numpy() for o in outs], lengths.tolist(), out.batch_sizes.tolist(), grads))
    (t_outs, t_len, t_bs, t_grads), (n_outs, n_len, n_bs, n_grads) = results
    assert n_len == t_len == LENGTHS and n_bs == t_bs
    for a, b in zip(n_outs + n_grads, t_outs + t_grads):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=1e-12)


def test_a_packed_batch_runs_each_sequence_as_if_alone():
    """Without torch: each sequence's output and final state in a packed bidirectional LSTM
    equal the LSTM run on that sequence alone (unbatched)."""
    from ngrad.nn.utils.rnn import pack_sequence, unpack_sequence

    _ = ngrad.manual_seed(5)
    lstm = nn.LSTM(2, 3, num_layers=2, bidirectional=True, dtype=ngrad.float64)
    r = np.random.default_rng(11)
    seqs = [ngrad.tensor(r.standard_normal((n, 2))) for n in (2, 4, 3)]
    out, (h_n, c_n) = lstm(pack_sequence(seqs, enforce_sorted=False))
    for k, (seq, got) in enumerate(zip(seqs, unpack_sequence(out))):
        alone, (h, c) = lstm(seq)
        np.testing.assert_allclose(_np(got), _np(alone), rtol=1e-12)
        np.testing.assert_allclose(_np(h_n)[:, k], _np(h), rtol=1e-12)
        np.testing.assert_allclose(_np(c_n)[:, k], _np(c), rtol=1e-12)


def test_padding_and_packing_helpers():
    from ngrad.nn.utils import rnn as R

    a, b = ngrad.tensor([[1.0], [2.0]]), ngrad.tensor([[3.0], [4.0], [5.0]])
    assert R.pad_sequence([a, b], batch_first=True, padding_value=-1.0).tolist() == [
        [[1.0], [2.0], [-1.0]],
        [[3.0], [4.0], [5.0]],
    ]
    assert R.pad_sequence([a, b], padding_side="left").squeeze(2).tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    packed = R.pack_sequence([b, a])
    assert packed.data.squeeze(1).tolist() == [3.0, 1.0, 4.0, 2.0, 5.0] and packed.batch_sizes.tolist() == [2, 2, 1]
    assert packed.sorted_indices is None and packed.unsorted_indices is None
    assert packed.batch_sizes.dtype is ngrad.int64 and not packed.is_cuda
    assert packed.double().data.dtype is ngrad.float64
    assert [t.tolist() for t in R.unpack_sequence(R.pack_sequence([a, b], enforce_sorted=False))] == [
        a.tolist(),
        b.tolist(),
    ]
    padded = R.pad_sequence([a, b])
    assert [t.tolist() for t in R.unpad_sequence(padded, ngrad.tensor([2, 3]))] == [a.tolist(), b.tolist()]
    assert R.invert_permutation(ngrad.tensor([1, 2, 0])).tolist() == [2, 0, 1]
    assert R.PackedSequence((packed.data, packed.batch_sizes)).batch_sizes is packed.batch_sizes
    x = ngrad.ones(3, 2, 1)
    _raises(
        RuntimeError, "`lengths` array must be sorted in decreasing order", lambda: R.pack_padded_sequence(x, [2, 3])
    )
    _raises(RuntimeError, "Length of all samples has to be greater than 0", lambda: R.pack_padded_sequence(x, [2, 0]))
    _raises(
        RuntimeError,
        r"Expected `len\(lengths\)` to be equal to batch_size, but got 3 \(batch_size=2\)",
        lambda: R.pack_padded_sequence(x, [3, 2, 1]),
    )
    _raises(RuntimeError, "at most the sequence length 3", lambda: R.pack_padded_sequence(x, [4, 2]))
    _raises(
        ValueError,
        "Expected total_length to be at least the length of the longest sequence in input, but got total_length=1",
        lambda: R.pad_packed_sequence(packed, total_length=1),
    )
    _raises(
        RuntimeError, "Expected padding_side to be one of left or right", lambda: R.pad_sequence([a], padding_side="x")
    )


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_seeded_weights_and_dropout_masks_are_pytorchs(name):
    """ngrad's generator is PyTorch's: after the same manual_seed the default initialisation
    gives the same weights bit for bit, and dropout between layers in training mode zeroes the
    same elements (outputs and gradients equal torch's)."""
    torch = pytest.importorskip("torch")
    mods = []
    for lib in (torch, ngrad):
        lib.manual_seed(1)
        mods.append(getattr(lib.nn, name)(I, H, num_layers=3, dropout=0.5, bidirectional=True).double())
        mods.append(getattr(lib.nn, name + "Cell")(I, H))
    t_mod, t_cell, n_mod, n_cell = mods
    for a, b in zip(
        list(n_mod.parameters()) + list(n_cell.parameters()), list(t_mod.parameters()) + list(t_cell.parameters())
    ):
        assert np.array_equal(_np(a), b.detach().numpy())
    x = np.random.default_rng(12).standard_normal((T, B, I))
    outs = []
    for lib, mod in ((torch, t_mod), (ngrad, n_mod)):
        lib.manual_seed(2)
        out = mod(lib.tensor(x))[0]
        out.sum().backward()
        outs.append([out.detach().numpy()] + [p.grad.numpy() for p in mod.parameters()])
    for a, b in zip(outs[1], outs[0]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
