"""nn.Module's machinery (registration, iteration, state_dict, modes, conversions, hooks, printed
trees), Parameter and Buffer, the containers, nn.init, nn.utils and func.functional_call: against
PyTorch's behaviour (values, exception types and messages) where torch is installed, and by their
definitions without it."""

import copy
import math
import pickle

import numpy as np
import pytest

import ngrad
from ngrad import nn


def _block(nn, t):
    """A module that uses most of the registration paths, built from ngrad.nn or torch.nn."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)
            self.scale = nn.Parameter(t.ones(2))
            self.register_buffer("steps", t.zeros(1))
            self.register_buffer("cache", t.zeros(2), persistent=False)
            self.act = nn.ReLU()
            self.shared = self.fc  # a module reached under two names
            self.tied = self.scale  # a parameter reached under two names

        def forward(self, x):
            return self.act(self.fc(x)) * self.scale

    return Block()


def both(f):
    """f(ngrad.nn, ngrad) and, with torch installed, f(torch.nn, torch)."""
    try:
        import torch
    except ImportError:
        return f(nn, ngrad), None
    return f(nn, ngrad), f(torch.nn, torch)


def _names(pairs):
    return [k for k, _ in pairs]


def test_iterators_walk_the_tree_like_pytorch():
    outer = both(lambda nn_, t: nn_.Sequential(_block(nn_, t), nn_.ModuleList([nn_.Tanh(), nn_.Linear(2, 2)])))
    a, b = outer
    queries = [
        lambda m: _names(m.named_parameters()),
        lambda m: _names(m.named_parameters(prefix="net", remove_duplicate=False)),
        lambda m: _names(m[0].named_parameters(recurse=False)),
        lambda m: _names(m.named_buffers()),
        lambda m: _names(m.named_modules()),
        lambda m: _names(m.named_modules(prefix="top", remove_duplicate=False)),
        lambda m: _names(m[0].named_children()),
        lambda m: [type(c).__name__ for c in m.modules()],
        lambda m: len(list(m.parameters())),
        lambda m: list(m.state_dict()),
        lambda m: list(m.state_dict(prefix="p.")),
    ]
    expected = [
        ["0.scale", "0.fc.weight", "0.fc.bias", "1.1.weight", "1.1.bias"],
        [
            "net.0.scale",
            "net.0.tied",
            "net.0.fc.weight",
            "net.0.fc.bias",
            "net.0.shared.weight",
            "net.0.shared.bias",
            "net.1.1.weight",
            "net.1.1.bias",
        ],
    ]
    for i, q in enumerate(queries):
        if i < len(expected):
            assert q(a) == expected[i]
        if b is not None:
            assert q(a) == q(b), i
    assert list(a.state_dict())[:5] == ["0.scale", "0.tied", "0.steps", "0.fc.weight", "0.fc.bias"]


def test_state_dict_round_trip_and_load_errors_match_pytorch():
    a, b = both(_block)
    sd = a.state_dict()
    assert "cache" not in sd and sd["scale"].requires_grad is False
    assert a.state_dict(keep_vars=True)["scale"] is a.scale
    fresh = _block(nn, ngrad)
    result = fresh.load_state_dict({k: v * 0 + 3 for k, v in sd.items()})
    assert repr(result) == "<All keys matched successfully>" and result.missing_keys == []
    assert fresh.fc.weight.tolist() == [[3.0] * 3] * 2 and fresh.tied is fresh.scale
    assert fresh.fc.weight.requires_grad and isinstance(fresh.fc.weight, nn.Parameter)
    res = fresh.load_state_dict({"fc.weight": ngrad.zeros(2, 3), "extra": ngrad.zeros(1)}, strict=False)
    assert res.unexpected_keys == ["extra"] and "fc.bias" in res.missing_keys
    assert repr(res).startswith("_IncompatibleKeys(missing_keys=['scale', 'tied', 'steps', 'fc.bias', 'shared.weight'")
    if b is not None:
        import torch

        theirs = b.load_state_dict({"fc.weight": torch.zeros(2, 3), "extra": torch.zeros(1)}, strict=False)
        assert repr(res) == repr(theirs)
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        fresh.load_state_dict([1])
    new_w = ngrad.full((2, 3), 5.0)
    old = fresh.fc.weight
    fresh.load_state_dict({"fc.weight": new_w}, strict=False, assign=True)  # the tensor itself, as a Parameter
    assert fresh.fc.weight is not old and isinstance(fresh.fc.weight, nn.Parameter) and fresh.fc.weight.requires_grad
    assert fresh.fc.weight.tolist() == [[5.0] * 3] * 2
    kept = nn.Parameter(ngrad.ones(2), requires_grad=False)
    fresh.load_state_dict({"scale": kept}, strict=False, assign=True)
    assert fresh.scale is kept and kept.requires_grad  # put in place itself, with the module's requires_grad

    def bad(nn_, t):
        m = _block(nn_, t)
        sd = {k: v for k, v in m.state_dict().items() if k != "steps"}
        sd["fc.weight"] = t.zeros(3, 3)
        sd["nope"] = t.zeros(1)
        try:
            m.load_state_dict(sd)
        except RuntimeError as e:
            return str(e)

    mine, theirs = both(bad)
    assert "size mismatch for fc.weight: copying a param with shape ngrad.Size([3, 3])" in mine
    assert 'Missing key(s) in state_dict: "steps"' in mine and 'Unexpected key(s) in state_dict: "nope"' in mine
    if theirs is not None:
        assert mine == theirs.replace("torch.", "ngrad.")


def test_registration_errors_match_pytorch():
    cases = [
        lambda nn_, t, m: setattr(m, "fc", t.zeros(1)),
        lambda nn_, t, m: setattr(m, "scale", t.zeros(1)),
        lambda nn_, t, m: m.register_buffer("a.b", t.zeros(1)),
        lambda nn_, t, m: m.register_buffer("", t.zeros(1)),
        lambda nn_, t, m: m.register_buffer("x", 3),
        lambda nn_, t, m: m.register_buffer(1, t.zeros(1)),
        lambda nn_, t, m: m.register_buffer("forward", t.zeros(1)),
        lambda nn_, t, m: m.register_parameter("w", t.zeros(1)),
        lambda nn_, t, m: m.register_parameter("w", nn_.Parameter(t.zeros(1)) * 2),
        lambda nn_, t, m: m.add_module("x", 3),
        lambda nn_, t, m: m.add_module("a.b", nn_.ReLU()),
        lambda nn_, t, m: m.nothing,
        lambda nn_, t, m: m.get_submodule("fc.weight"),
        lambda nn_, t, m: m.get_submodule("nope"),
        lambda nn_, t, m: m.get_parameter("steps"),
        lambda nn_, t, m: m.get_buffer("scale"),
        lambda nn_, t, m: m.train("yes"),
        lambda nn_, t, m: m.to(t.int64),
        lambda nn_, t, m: nn_.Module()(1),
        lambda nn_, t, m: nn_.ParameterList()(),
    ]
    for i, case in enumerate(cases):

        def run(nn_, t, case=case):
            try:
                case(nn_, t, _block(nn_, t))
            except Exception as e:
                return type(e).__name__, str(e).replace("torch.", "ngrad.")
            return None

        mine, theirs = both(run)
        assert mine is not None, i
        if theirs is not None:
            assert mine == theirs, i  # type and message, the library's name aside

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(ngrad.zeros(1))

    with pytest.raises(AttributeError, match=r"cannot assign parameters before Module.__init__\(\) call"):
        Early()


def test_assignment_moves_names_between_kinds_and_delattr():
    m = _block(nn, ngrad)
    m.fc = None  # a registered child set to None stays registered as None
    assert "fc" in m._modules and m.fc is None and "shared" in dict(m.named_children())
    m.steps = ngrad.ones(1)  # a plain tensor replaces a buffer
    assert m._buffers["steps"].tolist() == [1.0]
    m.extra = nn.Buffer(ngrad.zeros(3), persistent=False)
    assert "extra" in dict(m.named_buffers()) and "extra" not in m.state_dict()
    with pytest.raises(TypeError, match="cannot assign 'ngrad.nn.modules.layers.Linear' as parameter 'scale'"):
        m.scale = nn.Linear(1, 1)
    m.act = nn.Parameter(ngrad.zeros(1))  # a parameter replaces a module
    assert "act" not in m._modules and isinstance(m.act, nn.Parameter)
    del m.steps
    assert "steps" not in m.state_dict()
    m.plain = 3
    assert m.plain == 3 and "plain" in m.__dict__
    assert {"fc", "act", "tied", "extra", "forward"} <= set(dir(m))


def test_modes_grad_and_conversions():
    m = nn.Sequential(nn.Linear(2, 3), nn.Dropout(), nn.BatchNorm1d(3))
    assert all(x.training for x in m.modules())
    assert m.eval() is m and not any(x.training for x in m.modules())
    m.train()
    m(ngrad.randn(4, 2)).sum().backward()
    w = m[0].weight
    assert w.grad is not None
    m.zero_grad(set_to_none=False)
    assert w.grad.tolist() == [[0.0, 0.0]] * 3
    m.zero_grad()
    assert w.grad is None
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    m.requires_grad_()
    assert m.double() is m and m[0].weight is w and w.dtype is ngrad.float64 and isinstance(w, nn.Parameter)
    assert m[2].running_mean.dtype is ngrad.float64 and m[2].num_batches_tracked.dtype is ngrad.int64
    m.to(ngrad.float32)
    assert w.dtype is ngrad.float32 and m[2].num_batches_tracked.dtype is ngrad.int64
    m.float().to("cpu")
    assert w.requires_grad and w.is_leaf
    seen = []
    m.apply(lambda x: seen.append(type(x).__name__))
    assert seen == ["Linear", "Dropout", "BatchNorm1d", "Sequential"]


def test_hooks_run_in_order_and_can_replace_arguments_and_outputs():
    m = nn.Linear(2, 2)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: calls.append("pre") or (args[0] * 0,))
    h2 = m.register_forward_pre_hook(
        lambda mod, args, kwargs: calls.append("pre_kw") or ((args[0] + 1,), kwargs), with_kwargs=True, prepend=True
    )
    h3 = m.register_forward_hook(lambda mod, args, out: calls.append("post") or out * 2)
    h4 = m.register_forward_hook(lambda mod, args, kwargs, out: calls.append("post_kw"), with_kwargs=True)
    out = m(ngrad.ones(1, 2))
    assert calls == ["pre_kw", "pre", "post", "post_kw"]
    np.testing.assert_allclose(out.detach().numpy(), 2 * m.bias.detach().numpy()[None])
    for h in (h1, h2, h3, h4):
        h.remove()
    calls.clear()
    m(ngrad.ones(1, 2))
    assert calls == []

    def failing(x):
        raise ValueError("boom")

    m.forward = failing
    with m.register_forward_hook(lambda *a: calls.append("always"), always_call=True):
        with pytest.raises(ValueError, match="boom"):
            m(ngrad.ones(1, 2))
    assert calls == ["always"]


def test_printed_trees_match_pytorch():
    class Custom(nn.Module):
        def extra_repr(self):
            return "first line\nsecond line"

    def tree(nn_, t):
        return nn_.Sequential(
            nn_.Linear(2, 3, bias=False),
            nn_.ModuleList([nn_.Linear(2, 2) for _ in range(3)] + [nn_.ReLU(inplace=True), nn_.ReLU(inplace=True)]),
            nn_.ModuleDict({"drop": nn_.Dropout(0.2), "seq": nn_.Sequential()}),
            nn_.ParameterList([nn_.Parameter(t.zeros(2, 3)), t.zeros(4, dtype=t.float64)]),
            nn_.ParameterDict({"a": nn_.Parameter(t.zeros(1))}),
            nn_.Embedding(5, 2, padding_idx=1, max_norm=2.0),
            nn_.BatchNorm2d(3, momentum=None, affine=False),
            nn_.LayerNorm([2, 3]),
            nn_.Softplus(beta=2),
            nn_.CrossEntropyLoss(),
            nn_.Unflatten(1, (2, 2)),
            nn_.Identity(),
        )

    mine, theirs = both(tree)
    text = repr(mine)
    assert "(1): ModuleList(\n    (0-2): 3 x Linear(in_features=2, out_features=2, bias=True)" in text
    assert "(3-4): 2 x ReLU(inplace=True)" in text
    if theirs is not None:
        assert text == repr(theirs).replace("torch.", "ngrad.")
    outer = nn.Sequential(Custom())
    assert repr(outer) == "Sequential(\n  (0): Custom(\n    first line\n    second line\n  )\n)"


def test_parameter_and_buffer():
    data = ngrad.zeros(2)
    p = nn.Parameter(data)
    assert repr(p) == "Parameter containing:\ntensor([0., 0.], requires_grad=True)"
    assert p.is_leaf and p.requires_grad and type(p * 2) is ngrad.Tensor and isinstance(p, ngrad.Tensor)
    data.add_(1)  # a new leaf holding data's value: unlike PyTorch's, not an alias of data (docs/nn.md)
    with ngrad.no_grad():
        p.add_(1)
    assert p.tolist() == [1.0, 1.0] and data.tolist() == [1.0, 1.0] and not p._is_view()
    assert not nn.Parameter(ngrad.zeros(1), requires_grad=False).requires_grad
    assert nn.Parameter().shape == (0,)
    q = copy.deepcopy(p)
    assert type(q) is nn.Parameter and q.tolist() == [1.0, 1.0] and q.requires_grad
    r = pickle.loads(pickle.dumps(p))
    assert type(r) is nn.Parameter and r.tolist() == [1.0, 1.0]
    with pytest.raises(RuntimeError, match="floating point"):
        nn.Parameter(ngrad.tensor([1, 2]))
    b = nn.Buffer(ngrad.ones(1))
    assert isinstance(b, nn.Buffer) and type(b) is ngrad.Tensor and not isinstance(ngrad.ones(1), nn.Buffer)
    m = copy.deepcopy(_block(nn, ngrad))
    assert m.tied is m.scale and m.shared is m.fc and isinstance(m.scale, nn.Parameter)


def test_containers():
    a, b, c = nn.Linear(1, 1), nn.ReLU(), nn.Tanh()
    seq = nn.Sequential(a, b)
    seq.append(c)
    assert len(seq) == 3 and seq[-1] is c and list(seq[1:]) == [b, c] and type(seq[1:]) is nn.Sequential
    del seq[0]
    assert list(seq._modules) == ["0", "1"] and seq[0] is b
    seq.insert(0, a)
    assert list(seq) == [a, b, c] and seq.pop(1) is b and len(seq) == 2
    from collections import OrderedDict

    named = nn.Sequential(OrderedDict([("first", a), ("second", c)]))
    assert named.first is a and named[1] is c and (named + seq)[3] is c
    ml = nn.ModuleList([a])
    ml += [b]
    ml.insert(0, c)
    assert list(ml) == [c, a, b] and ml[-1] is b and list(ml[:2]) == [c, a]
    with pytest.raises(IndexError, match="index 3 is out of range"):
        ml[3]
    md = nn.ModuleDict({"x": a})
    md["y"] = b
    md.update([("z", c)])
    assert list(md) == ["x", "y", "z"] and "y" in md and md.pop("x") is a and len(md) == 2
    assert list(nn.ModuleDict(md)) == ["y", "z"]
    pl = nn.ParameterList([ngrad.zeros(1)])
    pl.append(ngrad.ones(2))
    assert all(isinstance(p, nn.Parameter) for p in pl) and len(pl) == 2 and len(list(pl.parameters())) == 2
    pd = nn.ParameterDict({"w": ngrad.zeros(1)})
    pd["v"] = nn.Parameter(ngrad.ones(1))
    assert list(pd.keys()) == ["w", "v"] and isinstance(pd["w"], nn.Parameter) and "v" in pd
    assert [k for k, _ in pd.named_parameters()] == ["w", "v"] and list(nn.ParameterDict(pd)) == ["w", "v"]
    assert pd.pop("w").shape == (1,)
    with pytest.raises(RuntimeError, match="ParameterDict should not be called."):
        pd(1)


def test_functional_call_swaps_and_restores():
    m = _block(nn, ngrad)
    x = ngrad.randn(4, 3)
    new = {"fc.weight": ngrad.ones(2, 3, requires_grad=True), "fc.bias": ngrad.zeros(2), "scale": ngrad.full((2,), 2.0)}
    out = ngrad.func.functional_call(m, new, (x,))
    expected = (x.sum(1, keepdim=True).relu() * 2).expand(4, 2)
    np.testing.assert_allclose(out.detach().numpy(), expected.numpy(), rtol=1e-6)
    out.sum().backward()
    assert new["fc.weight"].grad is not None and m.fc.weight.grad is None
    assert isinstance(m.fc.weight, nn.Parameter) and m.fc.weight.shape == (2, 3) and m.tied is m.scale
    with pytest.raises(ValueError, match="which are tied"):
        ngrad.func.functional_call(m, {"scale": ngrad.ones(2), "tied": ngrad.zeros(2)}, x)
    with pytest.raises(RuntimeError, match=r"Error\(s\) in reparametrizing for Block:\n\tMissing key\(s\)"):
        ngrad.func.functional_call(m, {"scale": ngrad.ones(2)}, x, strict=True)
    with pytest.raises(ValueError, match="appeared in multiple dictionaries"):
        ngrad.func.functional_call(m, ({"scale": ngrad.ones(2)}, {"scale": ngrad.ones(2)}), x)
    torch = pytest.importorskip("torch")
    t = _block(torch.nn, torch)
    t.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})
    tnew = {k: torch.tensor(v.detach().numpy()) for k, v in new.items()}
    theirs = torch.func.functional_call(t, tnew, (torch.tensor(x.numpy()),))
    np.testing.assert_allclose(out.detach().numpy(), theirs.detach().numpy(), rtol=1e-6)


def test_clip_grad_and_vectors():
    def setup(nn_, t):
        ps = [nn_.Parameter(t.tensor([3.0, -4.0])), nn_.Parameter(t.tensor([[12.0]]))]
        for p, g in zip(ps, ([3.0, -4.0], [[12.0]])):
            p.grad = t.tensor(g)
        return ps

    for norm_type in (2.0, 1.0, math.inf):
        ps = setup(nn, ngrad)
        total = nn.utils.clip_grad_norm_(ps, 6.5, norm_type=norm_type)
        expected = {2.0: 13.0, 1.0: 19.0, math.inf: 12.0}[norm_type]
        assert abs(total.item() - expected) < 1e-5
        scale = 6.5 / (expected + 1e-6)
        np.testing.assert_allclose(ps[0].grad.numpy(), np.array([3.0, -4.0]) * scale, rtol=1e-6)
    ps = setup(nn, ngrad)
    nn.utils.clip_grad_norm_(ps, 100.0)
    assert ps[1].grad.tolist() == [[12.0]]  # below the bound: unchanged
    nn.utils.clip_grad_value_(ps, 3.5)
    assert ps[0].grad.tolist() == [3.0, -3.5] and ps[1].grad.tolist() == [[3.5]]
    ps[0].grad = ngrad.tensor([math.inf, 0.0])
    with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
        nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)
    vec = nn.utils.parameters_to_vector(ps)
    assert vec.tolist() == [3.0, -4.0, 12.0] and vec.requires_grad
    nn.utils.vector_to_parameters(ngrad.tensor([1.0, 2.0, 3.0]), ps)
    assert ps[0].tolist() == [1.0, 2.0] and ps[1].tolist() == [[3.0]] and isinstance(ps[1], nn.Parameter)


def test_init_functions():
    _ = ngrad.manual_seed(1)
    w = ngrad.empty(300, 200)
    g = nn.init.calculate_gain("relu")
    nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert abs(w.numpy().std() - g / math.sqrt(300)) < 0.002
    nn.init.xavier_uniform_(w, gain=2.0)
    bound = 2.0 * math.sqrt(6 / 500)
    assert bound * 0.99 < np.abs(w.numpy()).max() <= bound
    nn.init.xavier_normal_(w)
    assert abs(w.numpy().std() - math.sqrt(2 / 500)) < 0.002
    nn.init.trunc_normal_(w, mean=1.0, std=2.0, a=0.0, b=1.5)
    assert w.numpy().min() >= 0.0 and w.numpy().max() <= 1.5
    nn.init.uniform_(w, -3, -2)
    assert -3 <= w.numpy().min() and w.numpy().max() < -2
    nn.init.normal_(w, 5.0, 0.5)
    assert abs(w.numpy().mean() - 5) < 0.01
    q = nn.init.orthogonal_(ngrad.empty(3, 5), gain=2.0).numpy()
    np.testing.assert_allclose(q @ q.T, 4 * np.eye(3), atol=1e-5)
    assert nn.init.eye_(ngrad.empty(2, 3)).tolist() == [[1, 0, 0], [0, 1, 0]]
    assert nn.init.constant_(ngrad.empty(2), 0.5).tolist() == [0.5, 0.5]
    p = nn.Parameter(ngrad.empty(2, 2))
    assert nn.init.zeros_(p) is p and p.requires_grad and p.is_leaf and nn.init.ones_(p).tolist() == [[1, 1]] * 2
    with pytest.raises(ValueError, match="Fan in and fan out can not be computed"):
        nn.init.xavier_uniform_(ngrad.empty(3))
    with pytest.raises(ValueError, match="Mode fan_mid not supported"):
        nn.init.kaiming_uniform_(w, mode="fan_mid")
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        nn.init.calculate_gain("gelu")
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        nn.init.kaiming_uniform_(ngrad.empty(0, 3))
    torch = pytest.importorskip("torch")
    for name, param in [("linear", None), ("tanh", None), ("relu", None), ("leaky_relu", 0.2), ("selu", None)]:
        assert nn.init.calculate_gain(name, param) == torch.nn.init.calculate_gain(name, param)


def test_module_forward_inside_compile_follows_parameter_updates():
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    f = ngrad.compile(lambda x: net(x))
    x = ngrad.randn(5, 3)
    np.testing.assert_allclose(f(x).detach().numpy(), net(x).detach().numpy(), rtol=1e-6)
    with ngrad.no_grad():
        net[0].weight.mul_(2)  # in place: the compiled program reads the new value
    np.testing.assert_allclose(f(x).detach().numpy(), net(x).detach().numpy(), rtol=1e-6)
    f(x).sum().backward()
    assert net[0].weight.grad.shape == (4, 3)


def test_sequential_and_list_operations_match_pytorch():
    def ops(nn_, t):
        a, b, c = nn_.Linear(1, 1), nn_.ReLU(), nn_.Tanh()
        out = []
        s = nn_.Sequential(a, b)
        s.insert(-1, c)
        out.append([type(m).__name__ for m in s])
        s += nn_.Sequential(c)
        doubled = nn_.Sequential(a, b) * 2
        out.append((len(s), len(doubled), doubled[2] is doubled[0], len(list(doubled.parameters())), len(2 * s)))
        s *= 3
        out.append(len(s))
        s = nn_.Sequential(a, b, c)
        del s[0:2]
        out.append(list(s._modules))
        s = nn_.Sequential(a, b, c)
        out.append((type(s.pop(0)).__name__, list(s._modules)))
        ml = nn_.ModuleList([a, b, c])
        del ml[-1]
        ml.extend([c])
        out.append([type(m).__name__ for m in ml[::-1]])
        pl = nn_.ParameterList([nn_.Parameter(t.zeros(1)) for _ in range(3)])
        out.append((len(pl[1:]), type(pl[1:]).__name__))
        bad = [
            lambda: nn_.Sequential(a) * 0,
            lambda: nn_.Sequential(a) * 1.5,
            lambda: nn_.Sequential(a) + 1,
            lambda: nn_.Sequential(a)[5],
            lambda: nn_.Sequential(a).insert(3, b),
        ]
        for f in bad:
            with pytest.raises(Exception) as e:
                f()
            out.append((e.type.__name__, str(e.value).split("<class")[0]))
        return out

    mine, theirs = both(ops)
    assert mine[0] == ["Linear", "Tanh", "ReLU"] and mine[1] == (4, 4, True, 2, 8)
    if theirs is not None:
        assert mine == theirs


def test_a_compiled_training_step_with_modules_equals_the_eager_one():
    def setup():
        _ = ngrad.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).double()
        return net, ngrad.optim.Adam(net.parameters(), lr=1e-2)

    x = ngrad.tensor(np.random.default_rng(0).standard_normal((16, 4)))
    y = x.sum(1, keepdim=True).sin()
    nets = []
    for compiled in (False, True):
        net, opt = setup()

        def step(x, y, net=net, opt=opt):
            opt.zero_grad()
            loss = nn.MSELoss()(net(x), y)
            loss.backward()
            opt.step()
            return loss

        run = ngrad.compile(step) if compiled else step
        losses = [run(x, y).item() for _ in range(4)]
        nets.append((losses, [p.detach().numpy() for p in net.parameters()]))
    np.testing.assert_allclose(nets[1][0], nets[0][0], rtol=1e-10)
    assert nets[0][0][-1] < nets[0][0][0]
    for a, b in zip(nets[1][1], nets[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-10)
