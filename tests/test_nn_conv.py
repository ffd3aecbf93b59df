"""Convolution and pooling (``F.conv1d/2d``, ``F.max_pool1d/2d``, ``F.avg_pool1d/2d`` and their
modules): against PyTorch in float64 (outputs, input, weight and bias gradients, second order
for convolution, max-pool indices, errors) across strides, paddings, dilations, groups and
ceil_mode where torch is installed; against a direct NumPy loop and central finite differences
without it; and compiled (``ngrad.compile``, NGRAD_JIT=always) against eager."""

import itertools
import math
import re

import numpy as np
import pytest

import ngrad
import ngrad.nn.functional as F
from ngrad import nn

RTOL = 1e-6
R = np.random.default_rng(0)
# PyTorch's warning for an even kernel with padding='same', which ngrad gives too
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")


def _np(t):
    return t.detach().numpy()


def _compare(call, arrays, torch):
    """``call(F, lib, *tensors)`` in both libraries: outputs (and indices), then the
    gradients of every floating input under a random cotangent."""
    mine = [ngrad.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    theirs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out_n, out_t = call(F, ngrad, *mine), call(torch.nn.functional, torch, *theirs)
    if isinstance(out_t, tuple):  # (values, indices)
        np.testing.assert_array_equal(out_n[1].numpy(), out_t[1].numpy())
        assert out_n[1].dtype is ngrad.int64
        out_n, out_t = out_n[0], out_t[0]
    assert tuple(out_n.shape) == tuple(out_t.shape)
    np.testing.assert_allclose(_np(out_n), _np(out_t), rtol=RTOL, atol=1e-12)
    w = R.standard_normal(tuple(out_t.shape))
    (out_n * ngrad.tensor(w)).sum().backward()
    (out_t * torch.tensor(w)).sum().backward()
    for a, b in zip(mine, theirs):
        if b.grad is not None:
            np.testing.assert_allclose(_np(a.grad), _np(b.grad), rtol=RTOL, atol=1e-12)


CONV_CASES = [
    dict(stride=s, padding=p, dilation=d, groups=g)
    for s, p, d, g in itertools.product([1, 2, (2, 1)], [0, 1, (2, 0), "same", "valid"], [1, (2, 1)], [1, 2])
    if not (p == "same" and s != 1)
][::3]


@pytest.mark.parametrize("kw", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
def test_conv_matches_pytorch(kw):
    torch = pytest.importorskip("torch")
    x, w, b = R.standard_normal((2, 4, 7, 6)), R.standard_normal((6, 4 // kw["groups"], 3, 2)), R.standard_normal(6)
    _compare(lambda F, t, x, w, b: F.conv2d(x, w, b, **kw), [x, w, b], torch)
    kw1 = {k: v[0] if isinstance(v, tuple) else v for k, v in kw.items()}
    _compare(lambda F, t, x, w, b: F.conv1d(x, w, b, **kw1), [x[:, :, 0], w[..., 0], b], torch)


def test_conv_special_shapes_match_pytorch():
    torch = pytest.importorskip("torch")
    cases = [
        (lambda F, t, x, w: F.conv2d(x, w), [(3, 5, 5), (2, 3, 2, 2)]),  # unbatched
        (lambda F, t, x, w: F.conv2d(x, w, groups=3, padding=1), [(2, 3, 5, 5), (6, 1, 3, 3)]),  # depthwise
        (lambda F, t, x, w: F.conv1d(x, w, padding="same", dilation=3), [(2, 2, 9), (3, 2, 4)]),  # odd total pad
        (lambda F, t, x, w: F.conv2d(x, w, stride=3), [(1, 2, 8, 8), (2, 2, 8, 8)]),  # kernel = input
        (lambda F, t, x, w: F.conv2d(x, w, padding=1), [(0, 2, 4, 4), (3, 2, 3, 3)]),  # empty batch
    ]
    for call, shapes in cases:
        _compare(call, [R.standard_normal(s) for s in shapes], torch)


def test_conv_double_backward_matches_pytorch():
    torch = pytest.importorskip("torch")
    x, w, b = R.standard_normal((2, 4, 5, 5)), R.standard_normal((4, 2, 3, 3)), R.standard_normal(4)
    v = R.standard_normal((2, 4, 3, 2))
    results = []
    for lib in (ngrad, torch):
        ts = [lib.tensor(a, requires_grad=True) for a in (x, w, b)]
        out = lib.nn.functional.conv2d(ts[0], ts[1], ts[2], stride=(1, 2), padding=(0, 1), dilation=(1, 2), groups=2)
        first = lib.autograd.grad((out * lib.tensor(v)).tanh().sum(), ts, create_graph=True)
        second = lib.autograd.grad(sum((g * g).sum() for g in first), ts)
        results.append([_np(g) for g in first + second])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=1e-12)


POOL_CASES = [
    dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=c)
    for k, s, p, d, c in itertools.product([2, 3, (3, 2)], [None, 2, (2, 3)], [0, 1], [1, 2], [False, True])
][::4]


@pytest.mark.parametrize("kw", POOL_CASES, ids=[str(i) for i in range(len(POOL_CASES))])
def test_max_pool_values_indices_and_gradients_match_pytorch(kw):
    torch = pytest.importorskip("torch")
    x = R.standard_normal((2, 3, 8, 7))
    x[0, 0, :2, :2] = 0.5  # a tie: PyTorch's gradient goes to the first maximum
    kw1 = {k: v[0] if isinstance(v, tuple) else v for k, v in kw.items()}
    for fn, arr, args in (("max_pool2d", x, kw), ("max_pool1d", x[:, :, 0], kw1), ("max_pool2d", x[0], kw)):
        try:
            getattr(torch.nn.functional, fn)(torch.tensor(arr), **args)
        except RuntimeError as e:  # an invalid combination: the same error
            with pytest.raises(RuntimeError, match=str(e).split(",")[0].split("(")[0]):
                getattr(F, fn)(ngrad.tensor(arr), **args)
            continue
        _compare(lambda F, t, x, fn=fn, a=args: getattr(F, fn)(x, **a, return_indices=True), [arr], torch)


AVG_CASES = [
    dict(kernel_size=k, stride=s, padding=p, ceil_mode=c, count_include_pad=i, divisor_override=o)
    for k, s, p, c, i, o in itertools.product(
        [2, 3, (3, 2)], [None, 2, (2, 3)], [0, 1], [False, True], [True, False], [None, 5]
    )
][::5]


@pytest.mark.parametrize("kw", AVG_CASES, ids=[str(i) for i in range(len(AVG_CASES))])
def test_avg_pool_matches_pytorch(kw):
    torch = pytest.importorskip("torch")
    x = R.standard_normal((2, 3, 8, 7))
    kw1 = {k: v[0] if isinstance(v, tuple) else v for k, v in kw.items() if k != "divisor_override"}
    for fn, arr, args in (("avg_pool2d", x, kw), ("avg_pool1d", x[:, :, 0], kw1), ("avg_pool1d", x[0], kw1)):
        _compare(lambda F, t, x, fn=fn, a=args: getattr(F, fn)(x, **a), [arr], torch)


def test_integer_pooling_and_convolution_match_pytorch():
    torch = pytest.importorskip("torch")
    x = R.integers(-50, 50, (2, 3, 7, 7))
    for call in (
        lambda F: F.max_pool2d(x_, 3, 2, 1, return_indices=True),
        lambda F: F.avg_pool2d(x_, 2, ceil_mode=True),
        lambda F: F.avg_pool1d(x_[:, :, 0], 3, padding=1),
        lambda F: F.conv2d(x_[:, :2], x_[:3, :1, :3, :2], groups=2, padding=1),
    ):
        x_ = ngrad.tensor(x)
        mine = call(F)
        x_ = torch.tensor(x)
        theirs = call(torch.nn.functional)
        for a, b in zip(mine if isinstance(mine, tuple) else [mine], theirs if isinstance(theirs, tuple) else [theirs]):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
            assert str(a.dtype).split(".")[1] == str(b.dtype).split(".")[1]


def _copy_weights(theirs, mine):
    sd = {k: ngrad.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()}
    assert repr(mine.load_state_dict(sd)) == "<All keys matched successfully>"


MODULES = {
    "conv2d": (lambda nn: nn.Conv2d(3, 4, 3), (2, 3, 6, 6)),
    "conv2d_all": (lambda nn: nn.Conv2d(4, 6, (3, 2), (2, 1), (1, 2), (2, 1), groups=2, bias=False), (2, 4, 7, 6)),
    "conv2d_reflect": (lambda nn: nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode="reflect"), (1, 2, 5, 6)),
    "conv2d_same_replicate": (lambda nn: nn.Conv2d(2, 2, (2, 3), padding="same", padding_mode="replicate"), (2, 5, 5)),
    "conv1d_circular": (lambda nn: nn.Conv1d(2, 3, 4, padding="same", padding_mode="circular"), (2, 2, 7)),
    "conv1d_valid": (lambda nn: nn.Conv1d(2, 4, 3, stride=2, padding="valid", groups=2, dilation=2), (3, 2, 11)),
    "cnn": (
        lambda nn: nn.Sequential(
            nn.Conv2d(2, 4, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True),
            nn.Conv2d(4, 4, 3, padding="same"),
            nn.AvgPool2d(2, padding=1, count_include_pad=False),
            nn.Flatten(),
            nn.Linear(36, 3),
        ),
        (2, 2, 7, 7),
    ),
    "cnn1d": (
        lambda nn: nn.Sequential(nn.Conv1d(1, 3, 5), nn.Tanh(), nn.MaxPool1d(3, 2, 1), nn.AvgPool1d(2, ceil_mode=True)),
        (2, 1, 16),
    ),
}


@pytest.mark.parametrize("name", list(MODULES))
def test_modules_match_pytorch(name):
    """Same weights through load_state_dict: outputs, input and every parameter's gradient, repr."""
    torch = pytest.importorskip("torch")
    make, shape = MODULES[name]
    t_mod, n_mod = make(torch.nn).double(), make(nn).double()
    _copy_weights(t_mod, n_mod)
    assert repr(n_mod) == repr(t_mod)
    x = R.standard_normal(shape)
    xt, xn = torch.tensor(x, requires_grad=True), ngrad.tensor(x, requires_grad=True)
    out_t, out_n = t_mod(xt), n_mod(xn)
    np.testing.assert_allclose(_np(out_n), _np(out_t), rtol=RTOL, atol=1e-12)
    w = R.standard_normal(tuple(out_t.shape))
    (out_t * torch.tensor(w)).sum().backward()
    (out_n * ngrad.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(xn.grad), _np(xt.grad), rtol=RTOL, atol=1e-12)
    for (k, p), (k2, q) in zip(n_mod.named_parameters(), t_mod.named_parameters()):
        assert k == k2
        np.testing.assert_allclose(_np(p.grad), _np(q.grad), rtol=RTOL, atol=1e-12, err_msg=k)


def test_pool_modules_keep_pytorch_arguments_and_repr():
    torch = pytest.importorskip("torch")
    for args in [
        "MaxPool1d(3, 1, 1, 2, True, True)",
        "MaxPool2d((3, 2), stride=(2, 1), padding=1, ceil_mode=True)",
        "AvgPool1d(3, padding=1, ceil_mode=True, count_include_pad=False)",
        "AvgPool2d((2, 3), (1, 2), 1, True, False, 4)",
    ]:
        mine, theirs = eval("nn." + args), eval("torch.nn." + args)
        assert repr(mine) == repr(theirs)
        assert mine.stride == theirs.stride and mine.padding == theirs.padding
    x = R.standard_normal((1, 2, 6))
    out, idx = nn.MaxPool1d(3, 1, 1, 2, True, True)(ngrad.tensor(x))
    t_out, t_idx = torch.nn.MaxPool1d(3, 1, 1, 2, True, True)(torch.tensor(x))
    np.testing.assert_array_equal(idx.numpy(), t_idx.numpy())


def _errors(lib):
    """Bad calls, each run in ``lib``: the exception's type and message."""
    Fn = lib.nn.functional
    x, w = lib.ones(2, 4, 8, 8), lib.ones(6, 2, 3, 3)
    calls = [
        lambda: Fn.conv2d(x, lib.ones(6, 3, 3, 3)),
        lambda: Fn.conv2d(x, w, groups=3),
        lambda: Fn.conv2d(x, lib.ones(5, 2, 3, 3), groups=2),
        lambda: Fn.conv2d(x, w, lib.ones(5), groups=2),
        lambda: Fn.conv2d(x[0, 0], w, groups=2),
        lambda: Fn.conv2d(x, w, groups=2, stride=0),
        lambda: Fn.conv2d(x, w, groups=2, padding=-1),
        lambda: Fn.conv2d(x, w, groups=2, dilation=0),
        lambda: Fn.conv2d(x, w, groups=2, padding="same", stride=2),
        lambda: Fn.conv2d(x, w, groups=2, padding="full"),
        lambda: Fn.conv2d(x, w, groups=0),
        lambda: Fn.conv2d(x, w, groups=2, stride=(1, 2, 3)),
        lambda: Fn.conv2d(x[:, :, :2, :2], w, groups=2),
        lambda: Fn.conv2d(x, w.double(), groups=2),
        lambda: Fn.conv2d(x, w, lib.ones(6).double(), groups=2),
        lambda: Fn.conv1d(x[:, :, 0], w[..., 0]),
        lambda: Fn.max_pool2d(x, 3, padding=2),
        lambda: Fn.max_pool2d(x, 3, stride=0),
        lambda: Fn.max_pool2d(x, 3, dilation=0),
        lambda: Fn.max_pool2d(x, 3, padding=-1),
        lambda: Fn.max_pool2d(x, (3, 3, 3)),
        lambda: Fn.max_pool2d(x, 3, stride=(1, 2, 3)),
        lambda: Fn.max_pool2d(x[0, 0], 3),
        lambda: Fn.max_pool2d(x[:, :, :2, :2], 3),
        lambda: Fn.max_pool1d(x[:, :, 0], 3, padding=2),
        lambda: Fn.max_pool1d(x[:, :, 0], 9),
        lambda: Fn.max_pool1d(x[0, 0, 0], 3),
        lambda: Fn.max_pool1d(x[:, :, 0], 3, dilation=0),
        lambda: Fn.max_pool1d(x[:, :, 0], (3, 3)),
        lambda: Fn.avg_pool2d(x, 3, padding=2),
        lambda: Fn.avg_pool2d(x, 3, divisor_override=0),
        lambda: Fn.avg_pool2d(x[:, :, :2, :2], 3),
        lambda: Fn.avg_pool1d(x[0, 0, 0], 3),
        lambda: Fn.avg_pool1d(x[:, :, 0], (3, 3)),
        lambda: lib.nn.Conv2d(4, 6, 3, groups=3),
        lambda: lib.nn.Conv2d(4, 6, 3, padding="full"),
        lambda: lib.nn.Conv2d(4, 6, 3, padding_mode="mirror"),
        lambda: lib.nn.Conv1d(4, 6, 3, stride=2, padding="same"),
    ]
    out = []
    for call in calls:
        with pytest.raises(Exception) as e:
            call()
        msg = str(e.value).replace("torch.", "").replace("ngrad.", "")
        # a set's printed order differs between processes: compare its sorted members
        msg = re.sub(r"\{[^}]*\}", lambda m: str(sorted(m.group(0)[1:-1].split(", "))), msg)
        out.append((e.type.__name__, msg))
    return out


def test_errors_match_pytorch():
    mine = _errors(ngrad)
    assert all(kind in ("RuntimeError", "ValueError") for kind, _ in mine)
    torch = pytest.importorskip("torch")
    for (kind, msg), (t_kind, t_msg) in zip(mine, _errors(torch)):
        assert (kind, msg) == (t_kind, t_msg)


def _direct_conv2d(x, w, stride, pad, dilation, groups):
    """A plain loop over output positions: the definition of a (cross-correlation) convolution."""
    x = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    for oc, i, j in itertools.product(range(o), range(oh), range(ow)):
        g = oc // (o // groups)
        rows = i * stride[0] + dilation[0] * np.arange(kh)
        cols = j * stride[1] + dilation[1] * np.arange(kw)
        patch = x[:, g * cg : (g + 1) * cg][:, :, rows][:, :, :, cols]
        out[:, oc, i, j] = (patch * w[oc]).sum((1, 2, 3))
    return out


def test_values_and_gradients_without_torch():
    """The core path: values against a direct loop and NumPy, gradients by finite differences
    (first and second order for convolution)."""
    x, w = R.standard_normal((2, 4, 6, 5)), R.standard_normal((6, 2, 3, 2))
    out = F.conv2d(ngrad.tensor(x), ngrad.tensor(w), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
    np.testing.assert_allclose(out.numpy(), _direct_conv2d(x, w, (2, 1), (1, 2), (1, 2), 2), rtol=1e-10)
    planes = R.standard_normal((3, 6, 6))
    expected = planes.reshape(3, 3, 2, 3, 2).max((2, 4))
    np.testing.assert_array_equal(F.max_pool2d(ngrad.tensor(planes), 2).numpy(), expected)
    np.testing.assert_allclose(
        F.avg_pool2d(ngrad.tensor(planes), 2).numpy(), planes.reshape(3, 3, 2, 3, 2).mean((2, 4))
    )
    # ceil_mode: the last window holds one column; without count_include_pad the mean is over it
    row = ngrad.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    assert F.avg_pool1d(row, 2, ceil_mode=True).tolist() == [[1.5, 3.5, 5.0]]
    assert F.avg_pool1d(row, 2, padding=1, ceil_mode=True).tolist() == [[0.5, 2.5, 4.5]]
    assert F.max_pool1d(row, 2, ceil_mode=True, return_indices=True)[1].tolist() == [[1, 3, 4]]

    def t(*shape):
        return ngrad.tensor(R.standard_normal(shape), requires_grad=True)

    conv = (
        lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2), groups=2),
        (t(1, 4, 5, 5), t(2, 2, 2, 3), t(2)),
    )
    conv1 = (lambda x, w: F.conv1d(x, w, padding="same"), (t(2, 2, 6), t(3, 2, 4)))
    cases = [
        conv,
        conv1,
        (lambda x: F.max_pool2d(x, (3, 2), stride=2, padding=1, dilation=(1, 2), ceil_mode=True), (t(2, 2, 7, 6),)),
        (lambda x: F.max_pool1d(x, 3, 2, 1), (t(2, 7),)),
        (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), (t(1, 2, 6, 5),)),
        (lambda x: F.avg_pool1d(x, 2, 1, 1), (t(2, 1, 5),)),
    ]
    for f, args in cases:
        assert ngrad.autograd.gradcheck(f, args), f
    for f, args in (conv, conv1, cases[2], cases[4]):  # and the pools, linear in their input
        assert ngrad.autograd.gradgradcheck(f, args), f


def test_conv_modules_have_pytorch_default_initialisation():
    _ = ngrad.manual_seed(0)
    conv = nn.Conv2d(8, 64, (5, 4), groups=2)
    fan_in = 4 * 5 * 4  # in_channels / groups * kernel area
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) gives 1/sqrt(fan_in), the bias the same
    w, b = conv.weight.detach().numpy(), conv.bias.detach().numpy()
    assert w.shape == (64, 4, 5, 4) and w.dtype == np.float32
    assert bound * 0.99 < np.abs(w).max() <= bound and abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound
    assert bound * 0.9 < np.abs(b).max() <= bound
    conv1 = nn.Conv1d(3, 2, 3, bias=False, dtype=ngrad.float64)
    assert conv1.bias is None and conv1.weight.dtype is ngrad.float64 and list(conv1.state_dict()) == ["weight"]
    assert (conv.kernel_size, conv.stride, conv.padding, conv.dilation) == ((5, 4), (1, 1), (0, 0), (1, 1))
    assert (conv.transposed, conv.output_padding, conv.groups, conv.padding_mode) == (False, (0, 0), 2, "zeros")


@pytest.mark.numba
@pytest.mark.slow  # about 25 s of compiling with an empty kernel cache
def test_compiled_cnn_training_step_equals_eager(jit_always):
    """A Conv2d/MaxPool2d/AvgPool2d/Conv1d network's training step under ngrad.compile with
    every tape compiled: the same losses and parameters as the eager steps."""

    def setup():
        _ = ngrad.manual_seed(0)
        net = nn.Sequential(
            nn.Conv2d(2, 4, 3, padding=1, padding_mode="reflect"),
            nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True),
            nn.Conv2d(4, 3, 2, stride=2, groups=1),
            nn.AvgPool2d(2, padding=1, count_include_pad=False),
            nn.Flatten(),
            nn.Linear(12, 2),
        ).double()
        return net, ngrad.optim.Adam(net.parameters(), lr=1e-2)

    x = ngrad.tensor(R.standard_normal((3, 2, 9, 9)))
    y = ngrad.tensor([0, 1, 1])
    runs = []
    for compiled in (False, True):
        net, opt = setup()

        def step(x, y, net=net, opt=opt):
            opt.zero_grad()
            loss = nn.CrossEntropyLoss()(net(x), y)
            loss.backward()
            opt.step()
            return loss

        run = ngrad.compile(step) if compiled else step
        losses = [run(x, y).item() for _ in range(3)]
        runs.append((losses, [p.detach().numpy() for p in net.parameters()]))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-10)
    for a, b in zip(runs[1][1], runs[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    pooled = ngrad.compile(lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True))
    out, idx = pooled(x[:, 0, 0])
    ref_out, ref_idx = F.max_pool1d(x[:, 0, 0], 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(out.numpy(), ref_out.numpy())
    np.testing.assert_array_equal(idx.numpy(), ref_idx.numpy())


def test_conv_modules_start_from_pytorch_weights_after_the_same_seed():
    torch = pytest.importorskip("torch")
    for make in (
        lambda nn: nn.Conv2d(3, 8, 3),
        lambda nn: nn.Conv1d(4, 6, 5, groups=2),
        lambda nn: nn.Conv2d(2, 4, (3, 2), bias=False),
    ):
        _ = ngrad.manual_seed(7), torch.manual_seed(7)
        mine, theirs = make(nn), make(torch.nn)
        for (k, a), (k2, b) in zip(mine.state_dict().items(), theirs.state_dict().items()):
            assert k == k2
            np.testing.assert_array_equal(a.numpy(), b.numpy())
