"""ngrad.nn's layers and their functional forms: against PyTorch (same weights loaded through
load_state_dict, same inputs: outputs and every parameter's and input's gradient, float64) where
torch is installed, and by finite differences (gradcheck) and hand-computed values without it.
Dropout and BatchNorm: train/eval differences and running statistics."""

import math

import numpy as np
import pytest

import ngrad
import ngrad.nn.functional as F
from ngrad import nn

RTOL = 1e-6


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


def _copy_weights(theirs, mine):
    """Load a torch module's state_dict into an ngrad module (through NumPy)."""
    sd = {k: ngrad.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()}
    assert repr(mine.load_state_dict(sd)) == "<All keys matched successfully>"


def _parity(make, inputs, *, train=True, grad_inputs=True, loss_weights=True):
    """Build the module in both libraries (float64), copy torch's weights into ngrad's, run the
    same inputs and compare outputs, input gradients and parameter gradients."""
    torch = pytest.importorskip("torch")
    t_mod = make(torch.nn, torch).double()
    n_mod = make(nn, ngrad).double()
    _copy_weights(t_mod, n_mod)
    t_mod.train(train)
    n_mod.train(train)
    t_in = [torch.tensor(x, requires_grad=grad_inputs and x.dtype.kind == "f") for x in inputs]
    n_in = [ngrad.tensor(x, requires_grad=grad_inputs and x.dtype.kind == "f") for x in inputs]
    t_out, n_out = t_mod(*t_in), n_mod(*n_in)
    np.testing.assert_allclose(_np(n_out), _np(t_out), rtol=RTOL, atol=1e-12)
    w = np.random.default_rng(1).standard_normal(tuple(t_out.shape)) if loss_weights else np.ones(t_out.shape)
    (t_out * torch.tensor(w)).sum().backward()
    (n_out * ngrad.tensor(w)).sum().backward()
    for a, b in zip(n_in, t_in):
        if b.grad is not None:
            np.testing.assert_allclose(_np(a.grad), _np(b.grad), rtol=RTOL, atol=1e-12)
    t_params = dict(t_mod.named_parameters())
    n_params = dict(n_mod.named_parameters())
    assert list(n_params) == list(t_params)
    for k, p in t_params.items():
        if p.grad is None:
            assert n_params[k].grad is None, k
        else:
            np.testing.assert_allclose(_np(n_params[k].grad), _np(p.grad), rtol=RTOL, atol=1e-12, err_msg=k)
    for (k, b), (k2, b2) in zip(n_mod.named_buffers(), t_mod.named_buffers()):
        assert k == k2
        np.testing.assert_allclose(_np(b), _np(b2), rtol=RTOL, err_msg=k)
    assert repr(n_mod) == repr(t_mod).replace("torch.", "ngrad.")
    return n_mod, t_mod


R = np.random.default_rng(0)
X = R.standard_normal((5, 4))

LAYERS = {
    "linear": (lambda nn, t: nn.Linear(4, 3), [X]),
    "linear_no_bias": (lambda nn, t: nn.Linear(4, 3, bias=False), [X]),
    "linear_3d": (lambda nn, t: nn.Linear(4, 2), [R.standard_normal((2, 3, 4))]),
    "bilinear": (lambda nn, t: nn.Bilinear(4, 2, 3), [X, R.standard_normal((5, 2))]),
    "embedding": (lambda nn, t: nn.Embedding(6, 3), [np.array([[0, 5, 2], [2, 2, 1]])]),
    "embedding_padding": (lambda nn, t: nn.Embedding(6, 3, padding_idx=2), [np.array([[0, 5, 2], [2, 2, 1]])]),
    "embedding_freq": (lambda nn, t: nn.Embedding(6, 3, scale_grad_by_freq=True), [np.array([0, 2, 2, 1])]),
    "flatten": (lambda nn, t: nn.Flatten(), [R.standard_normal((2, 3, 4))]),
    "unflatten": (lambda nn, t: nn.Unflatten(1, (2, 2)), [X]),
    "layer_norm": (lambda nn, t: nn.LayerNorm(4), [X]),
    "layer_norm_2d_no_bias": (lambda nn, t: nn.LayerNorm([3, 4], bias=False), [R.standard_normal((2, 3, 4))]),
    "layer_norm_plain": (lambda nn, t: nn.LayerNorm(4, elementwise_affine=False), [X]),
    "batch_norm_1d": (lambda nn, t: nn.BatchNorm1d(4), [X]),
    "batch_norm_1d_3d": (lambda nn, t: nn.BatchNorm1d(3, momentum=0.3), [R.standard_normal((4, 3, 5))]),
    "batch_norm_2d": (lambda nn, t: nn.BatchNorm2d(3), [R.standard_normal((2, 3, 4, 5))]),
    "batch_norm_cumulative": (lambda nn, t: nn.BatchNorm1d(4, momentum=None), [X]),
    "batch_norm_no_affine": (lambda nn, t: nn.BatchNorm1d(4, affine=False), [X]),
    "batch_norm_untracked": (lambda nn, t: nn.BatchNorm1d(4, track_running_stats=False), [X]),
    "identity": (lambda nn, t: nn.Identity(54, unused="x"), [X]),
    "mlp": (
        lambda nn, t: nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.0), nn.Linear(8, 2), nn.LogSoftmax(-1)),
        [X],
    ),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_matches_pytorch(name):
    make, inputs = LAYERS[name]
    _parity(make, inputs)


@pytest.mark.parametrize("name", ["batch_norm_1d", "batch_norm_2d", "batch_norm_cumulative", "layer_norm"])
def test_layer_in_eval_mode_matches_pytorch(name):
    torch = pytest.importorskip("torch")
    make, inputs = LAYERS[name]
    n_mod, t_mod = _parity(make, inputs)  # one training step moves the running statistics
    n_mod.eval(), t_mod.eval()
    x = inputs[0] * 2 + 1
    np.testing.assert_allclose(_np(n_mod(ngrad.tensor(x))), _np(t_mod(torch.tensor(x))), rtol=RTOL)


ACTIVATIONS = [
    ("ReLU", {}),
    ("Tanh", {}),
    ("Sigmoid", {}),
    ("GELU", {}),
    ("GELU", {"approximate": "tanh"}),
    ("SiLU", {}),
    ("ELU", {"alpha": 0.7}),
    ("LeakyReLU", {"negative_slope": 0.2}),
    ("Softplus", {"beta": 2.0, "threshold": 3.0}),
    ("Softmax", {"dim": 1}),
    ("LogSoftmax", {"dim": 0}),
]


@pytest.mark.parametrize("name,kwargs", ACTIVATIONS, ids=[f"{n}{k}" for n, k in ACTIVATIONS])
def test_activation_modules_match_pytorch(name, kwargs):
    _parity(lambda nn, t: getattr(nn, name)(**kwargs), [X * 2])


LOSSES = [
    ("MSELoss", {}, "float"),
    ("L1Loss", {"reduction": "sum"}, "float"),
    ("SmoothL1Loss", {"beta": 0.5}, "float"),
    ("HuberLoss", {"delta": 0.7, "reduction": "none"}, "float"),
    ("CrossEntropyLoss", {"label_smoothing": 0.1}, "class"),
    ("CrossEntropyLoss", {"weight": [1.0, 2.0, 0.5, 1.5], "ignore_index": 1}, "class"),
    ("NLLLoss", {"reduction": "sum"}, "class"),
    ("BCELoss", {"weight": [0.5, 1.0, 2.0, 1.0]}, "prob"),
    ("BCEWithLogitsLoss", {"pos_weight": [1.0, 2.0, 3.0, 0.5]}, "prob"),
]


@pytest.mark.parametrize("name,kwargs,kind", LOSSES, ids=[f"{n}{i}" for i, (n, _, _) in enumerate(LOSSES)])
def test_loss_modules_match_pytorch(name, kwargs, kind):
    if kind == "float":
        target = R.standard_normal(X.shape)
    elif kind == "class":
        target = np.array([0, 3, 1, 2, 1])
    else:
        target = R.uniform(size=X.shape)
    x = 1 / (1 + np.exp(-X)) if name == "BCELoss" else X

    def make(nn, t):
        kw = {k: t.tensor(v, dtype=t.float64) if isinstance(v, list) else v for k, v in kwargs.items()}
        return getattr(nn, name)(**kw)

    n_mod, _ = _parity(make, [x, target])
    assert [k for k, _ in n_mod.named_buffers()] == [k for k, v in kwargs.items() if isinstance(v, list)]


def test_layers_have_pytorch_default_initialisation():
    """Distributions of the default initialisation (bounds and moments), without torch."""
    _ = ngrad.manual_seed(0)
    fc = nn.Linear(400, 300)
    w, b = fc.weight.detach().numpy(), fc.bias.detach().numpy()
    bound = 1 / math.sqrt(400)  # kaiming_uniform_(a=sqrt(5)): gain sqrt(2 / 6), times sqrt(3 / fan_in)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound
    assert np.abs(b).max() <= bound and np.abs(b).max() > 0.9 * bound
    emb = nn.Embedding(2000, 50, padding_idx=3).weight.detach().numpy()
    assert abs(emb.std() - 1) < 0.02 and abs(emb.mean()) < 0.02 and not emb[3].any()
    bil = nn.Bilinear(16, 5, 7).weight.detach().numpy()
    assert np.abs(bil).max() <= 0.25 and np.abs(bil).max() > 0.24
    bn = nn.BatchNorm2d(3)
    assert bn.num_batches_tracked.dtype is ngrad.int64 and bn.num_batches_tracked.item() == 0
    assert bn.running_var.tolist() == [1.0] * 3 and bn.weight.tolist() == [1.0] * 3
    assert fc.weight.dtype is ngrad.float32 and nn.Linear(2, 2, dtype=ngrad.float64).weight.dtype is ngrad.float64


def test_layer_gradients_pass_finite_differences():
    """The core path without torch: gradcheck of each layer's functional form in float64."""
    r = np.random.default_rng(3)

    def t(*shape):
        return ngrad.tensor(r.standard_normal(shape), requires_grad=True)

    rm, rv = ngrad.zeros(3, dtype=ngrad.float64), ngrad.ones(3, dtype=ngrad.float64)
    cases = [
        (lambda x, w, b: F.layer_norm(x, (4,), w, b), (t(3, 4), t(4), t(4))),
        (lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=True), (t(4, 3, 2), t(3), t(3))),
        (lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=False), (t(4, 3), t(3), t(3))),
        (lambda a, b, w, c: F.bilinear(a, b, w, c), (t(3, 2), t(3, 4), t(5, 2, 4), t(5))),
        (lambda w: F.embedding(ngrad.tensor([[1, 0], [1, 1]]), w), (t(3, 2),)),  # padding rows: vs torch
        (lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), (t(2, 3),)),
        (lambda x: F.pad(x, (2, 1), mode="reflect"), (t(2, 4),)),
        (lambda x: F.pad(x, (1, 3), mode="replicate"), (t(2, 3),)),
        (lambda x: F.pad(x, (1, 2), mode="circular"), (t(1, 2, 3),)),
        (lambda x: F.normalize(x, dim=1), (t(3, 4),)),
        (lambda a, b: F.cosine_similarity(a, b), (t(3, 4), t(3, 4))),
        (lambda a, b: F.pairwise_distance(a, b), (t(3, 4), t(3, 4))),
    ]
    for f, args in cases:
        assert ngrad.autograd.gradcheck(f, args), f


def test_functional_values_without_torch():
    x = ngrad.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=ngrad.float64)
    assert F.normalize(x).tolist() == [[0.6, 0.8], [0.0, 0.0]]
    assert F.one_hot(ngrad.tensor([2, 0]), 4).tolist() == [[0, 0, 1, 0], [1, 0, 0, 0]]
    assert F.pad(ngrad.tensor([[1.0, 2.0, 3.0]]), (-1, 1)).tolist() == [[2.0, 3.0, 0.0]]
    assert F.pad(ngrad.tensor([1.0, 2.0, 3.0]), (3, 0), mode="circular").tolist() == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    expected = [math.hypot(3 + 1e-6, 4 + 1e-6), 1e-6 * math.sqrt(2)]  # eps is added to the difference
    np.testing.assert_allclose(F.pairwise_distance(x, x * 0).numpy(), expected)
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        F.one_hot(ngrad.tensor([3]), 3)
    with pytest.raises(RuntimeError, match="Padding length must be divisible by 2"):
        F.pad(x, (1,))
    with pytest.raises(RuntimeError, match="Padding size should be less than the corresponding input dimension"):
        F.pad(x, (2, 0), mode="reflect")
    with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[3\], expected input with shape \[\*, 3\]"):
        F.layer_norm(x, (3,))


@pytest.mark.parametrize(
    "call",
    [
        lambda F, t, x: F.pad(x, (1, 2, 2, 1), value=1.5),
        lambda F, t, x: F.pad(x[None], (2, 1, 1, 0), mode="reflect"),
        lambda F, t, x: F.pad(x[None], (2, 3, 1, 2), mode="replicate"),
        lambda F, t, x: F.pad(x[None], (1, 2, 3, 0), mode="circular"),
        lambda F, t, x: F.normalize(x, p=3.0, dim=0),
        lambda F, t, x: F.cosine_similarity(x, x.flip(0), dim=1),
        lambda F, t, x: F.pairwise_distance(x, x * 2, p=1.5, keepdim=True),
        lambda F, t, x: F.one_hot(t.tensor([[1, 3], [0, 0]])).to(x.dtype) * x.sum(),
        lambda F, t, x: F.embedding(t.tensor([1, 1, 2]), x, max_norm=1.5),
    ],
)
def test_functional_forms_match_pytorch(call):
    torch = pytest.importorskip("torch")
    x = R.standard_normal((4, 3))
    a, b = ngrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out_a, out_b = call(F, ngrad, a), call(torch.nn.functional, torch, b)
    np.testing.assert_allclose(_np(out_a), _np(out_b), rtol=RTOL, atol=1e-12)
    w = R.standard_normal(tuple(out_b.shape))
    (out_a * ngrad.tensor(w)).sum().backward()
    (out_b * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(a.grad), _np(b.grad), rtol=RTOL, atol=1e-12)


def test_embedding_max_norm_renormalizes_the_rows_it_reads():
    w = ngrad.tensor([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]], dtype=ngrad.float64)
    emb = nn.Embedding.from_pretrained(w, max_norm=1.0)
    out = emb(ngrad.tensor([0, 1]))
    np.testing.assert_allclose(out.numpy(), [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)
    np.testing.assert_allclose(emb.weight.detach().numpy()[2], [6.0, 8.0])  # not read: unchanged
    assert not emb.weight.requires_grad


def test_dropout_differs_between_train_and_eval():
    _ = ngrad.manual_seed(0)
    drop = nn.Dropout(0.25)
    x = ngrad.ones(20000, dtype=ngrad.float64, requires_grad=True)
    y = drop(x)
    kept = y.detach().numpy() != 0
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_allclose(y.detach().numpy()[kept], 1 / 0.75)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, 1 / 0.75, 0.0))  # the same mask
    drop.eval()
    assert drop(x) is x
    assert nn.Dropout(1.0)(x).detach().numpy().max() == 0
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        nn.Dropout(1.5)


def test_batch_norm_running_statistics_by_hand():
    bn = nn.BatchNorm1d(2, momentum=None, dtype=ngrad.float64)
    batches = [np.array([[1.0, 2.0], [3.0, 6.0]]), np.array([[0.0, 1.0], [2.0, 1.0], [4.0, 1.0]])]
    for b in batches:
        bn(ngrad.tensor(b))
    assert bn.num_batches_tracked.item() == 2
    # momentum=None: the plain average of the batch means and unbiased variances
    np.testing.assert_allclose(bn.running_mean.numpy(), np.mean([b.mean(0) for b in batches], axis=0))
    np.testing.assert_allclose(bn.running_var.numpy(), np.mean([b.var(0, ddof=1) for b in batches], axis=0))
    bn.eval()
    x = np.array([[1.0, 1.0]])
    expected = (x - bn.running_mean.numpy()) / np.sqrt(bn.running_var.numpy() + 1e-5)
    np.testing.assert_allclose(bn(ngrad.tensor(x)).detach().numpy(), expected)
    assert bn.num_batches_tracked.item() == 2  # eval mode tracks nothing
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        bn.train()(ngrad.ones(1, 2, dtype=ngrad.float64))
    with pytest.raises(ValueError, match=r"expected 4D input \(got 2D input\)"):
        nn.BatchNorm2d(2)(ngrad.ones(3, 2))


def test_loss_modules_keep_pytorch_constructor_arguments():
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        assert nn.MSELoss(size_average=False).reduction == "sum"
    with pytest.warns(UserWarning):
        assert nn.L1Loss(reduce=False).reduction == "none"
    loss = nn.CrossEntropyLoss(weight=ngrad.ones(3), label_smoothing=0.2, ignore_index=0)
    assert (loss.label_smoothing, loss.ignore_index, loss.reduction) == (0.2, 0, "mean")
    assert "weight" in loss.state_dict()
    x = ngrad.tensor([[1.0, 2.0, 0.5]])
    assert loss(x, ngrad.tensor([0])).isnan().item()  # every target ignored: NaN, as PyTorch


def test_module_parameter_gradients_pass_finite_differences():
    """Without torch: every parameter gradient of a small model, through functional_call."""
    _ = ngrad.manual_seed(2)
    net = nn.Sequential(
        nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 4), nn.LayerNorm(4), nn.ELU(), nn.Linear(4, 2), nn.LogSoftmax(1)
    ).double()
    names = [k for k, _ in net.named_parameters()]
    x = ngrad.tensor(np.random.default_rng(4).standard_normal((5, 3)))

    def f(*params):
        return ngrad.func.functional_call(net, dict(zip(names, params)), (x,))

    params = tuple(p.detach().clone().requires_grad_() for p in net.parameters())
    assert ngrad.autograd.gradcheck(f, params)
