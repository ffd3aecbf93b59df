"""The autograd surface beyond backward/grad: hooks, in-place and version counters, custom
Function, forward mode, autograd.functional, gradcheck, anomaly detection, inference mode.
Values are checked by finite differences and, where torch is installed, against PyTorch."""

import warnings

import numpy as np
import pytest

import ngrad
import ngrad.autograd.forward_ad as fwAD
from ngrad.autograd import functional as F

from .oracles import fd_gradient, torch_or_skip


def t64(a, requires_grad=False):
    return ngrad.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


# --- hooks ---------------------------------------------------------------------------------------


def test_hooks_observe_replace_and_remove():
    x = t64([1.0, 2.0], True)
    y = x * 3
    seen = []
    h1 = y.register_hook(lambda g: seen.append(g.numpy().copy()))
    h2 = y.register_hook(lambda g: g * 2)
    (y * y).sum().backward(retain_graph=True)
    np.testing.assert_allclose(seen[0], [6.0, 12.0])
    np.testing.assert_allclose(x.grad.numpy(), [36.0, 72.0])  # 2 * 2y * 3
    h1.remove()
    h2.remove()
    x.grad = None
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [18.0, 36.0])
    assert len(seen) == 1


def test_leaf_hook_runs_before_accumulation_and_fires_in_grad():
    x = t64([1.0, -1.0], True)
    x.register_hook(lambda g: g + 1)
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])
    (g,) = ngrad.autograd.grad((x * 5).sum(), x)
    np.testing.assert_allclose(g.numpy(), [6.0, 6.0])


def test_retain_grad_sees_the_hooked_value_and_post_accumulate_hook():
    x = t64([1.0, 2.0], True)
    y = x.exp()
    y.retain_grad()
    y.register_hook(lambda g: g * 10)
    calls = []
    x.register_post_accumulate_grad_hook(lambda t: calls.append(t.grad.numpy().copy()))
    y.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [10.0, 10.0])
    np.testing.assert_allclose(calls[0], 10 * np.exp([1.0, 2.0]))


def test_hooks_on_several_nodes_of_one_graph_match_torch():
    torch = torch_or_skip()
    a = np.array([0.3, -1.2, 2.0])
    res = []
    for lib in (ngrad, torch):
        x = lib.tensor(a, requires_grad=True)
        h = x.sin()
        k = h * x
        h.register_hook(lambda g: g * 3)
        k.register_hook(lambda g: g - 1)
        out = (k.exp() + h).sum()
        out.backward()
        res.append(x.grad.numpy())
    np.testing.assert_allclose(res[0], res[1], rtol=1e-12)


def test_hook_errors():
    x = t64([1.0], True)
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require gradient"):
        t64([1.0]).register_hook(lambda g: g)
    with pytest.raises(RuntimeError, match="post accumulate grad hooks cannot be registered on non-leaf"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)
    y = x * 2
    y.register_hook(lambda g: 1)
    with pytest.raises(TypeError, match="expected Tensor, but hook returned 'int'"):
        y.sum().backward()
    y = x * 2
    y.register_hook(lambda g: ngrad.ones(2, dtype=ngrad.float64))
    with pytest.raises(RuntimeError, match="has changed the size of value"):
        y.sum().backward()


def test_hooks_with_create_graph_give_second_derivatives():
    x = t64([0.5, 1.5], True)
    y = x**3
    y.register_hook(lambda g: g * x)  # the gradient becomes 3x^2 * x
    (g,) = ngrad.autograd.grad(y.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 3 * x.detach().numpy() ** 3)
    (h,) = ngrad.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), 9 * x.detach().numpy() ** 2)


# --- in place and version counters --------------------------------------------------------------


def test_version_counter_and_saved_value_modified():
    x = t64([1.0, 2.0], True)
    y = x.exp()
    assert y._version == 0
    y.mul_(2)
    assert y._version == 1
    with pytest.raises(
        RuntimeError,
        match=r"modified by an inplace operation: \[torch.DoubleTensor \[2\]\], which "
        r"is output 0 of Exp, is at version 1; expected version 0",
    ):
        y.sum().backward()
    z = x * 1
    w = z + 1
    z.mul_(3)  # add saves nothing: the graph through the old z still differentiates
    (w + z).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 4.0])


def test_leaf_updated_under_no_grad_after_recording():
    w = t64([1.0, 2.0], True)
    loss = (w * w).sum()
    with ngrad.no_grad():
        w -= 0.1 * ngrad.ones(2, dtype=ngrad.float64)
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        loss.backward()
    assert w.is_leaf and w._version == 1
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        w.add_(1)


def test_chained_inplace_ops_match_torch():
    torch = torch_or_skip()
    a = np.array([0.5, -1.0, 2.0])
    outs = []
    for lib in (ngrad, torch):
        x = lib.tensor(a, requires_grad=True)
        y = x * 2
        y.add_(1).mul_(2).clamp_(-1, 3)
        y[1] = 0.5
        y.sum().backward()
        outs.append((y.detach().numpy(), x.grad.numpy()))
    for m, t in zip(*outs):
        np.testing.assert_allclose(m, t, rtol=1e-12)


def test_detach_aliases_and_shares_the_version_data_does_not():
    w = t64([1.0, 2.0], True)
    d = w.detach()
    d.zero_()
    np.testing.assert_allclose(w.detach().numpy(), [0.0, 0.0])
    assert w._version == 1 and d._version == 1
    p = t64([1.0, 2.0], True)
    p.data.mul_(3)
    np.testing.assert_allclose(p.detach().numpy(), [3.0, 6.0])
    assert p._version == 0 and p.is_leaf and p.requires_grad


def test_setitem_matches_torch():
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5))
    v = rng.standard_normal((2, 5))
    for key, val in [
        ((slice(1, 3),), v),
        ((0, slice(1, None)), v[0, 1:]),
        ((slice(None), 2), 7.0),
        ((np.array([3, 0]),), v),
        ((a > 0,), 0.5),
        ((Ellipsis, None, 1), 2.0),
    ]:
        outs = []
        for lib in (ngrad, torch):
            x = lib.tensor(a, requires_grad=True)
            w = lib.tensor(val, requires_grad=True) if isinstance(val, np.ndarray) else val
            y = x * 1
            y[tuple(lib.tensor(e) if isinstance(e, np.ndarray) else e for e in key)] = w
            (y.sin() * lib.tensor(a)).sum().backward()
            outs.append((y.detach().numpy(), x.grad.numpy(), w.grad.numpy() if isinstance(val, np.ndarray) else 0))
        for m, t in zip(*outs):
            np.testing.assert_allclose(m, t, rtol=1e-12, err_msg=str(key))


def test_requires_grad_and_numpy_errors():
    x = t64([1.0], True)
    with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf variables"):
        (x * 2).requires_grad_(False)
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        x.numpy()
    with pytest.raises(RuntimeError, match="assigned grad has data of a different size"):
        x.grad = ngrad.ones(2, dtype=ngrad.float64)
    with pytest.raises(RuntimeError, match="assigned grad has data of a different type"):
        x.grad = ngrad.ones(1, dtype=ngrad.float32)


def test_inference_mode():
    w = t64([2.0], True)
    with ngrad.inference_mode():
        assert ngrad.is_inference_mode_enabled() and not ngrad.is_grad_enabled()
        y = w * 3
    assert not y.requires_grad and y.is_inference() and not w.is_inference()
    assert not ngrad.is_inference_mode_enabled()
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        y.add_(1)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (w * y).sum().backward()
    (w + y).sum().backward()  # add saves nothing
    np.testing.assert_allclose(w.grad.numpy(), [1.0])
    with ngrad.inference_mode(False):
        assert ngrad.is_grad_enabled()

    @ngrad.inference_mode()
    def f(x):
        return x * w

    assert f(t64([1.0])).is_inference()


# --- custom Function ------------------------------------------------------------------------------


class Cube(ngrad.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x**3 * k

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        assert ctx.needs_input_grad == (True, False)
        return g * 3 * x**2 * ctx.k, None


def test_custom_function_gradients_and_double_backward(rng):
    a = rng.uniform(0.5, 1.5, 4)
    x = t64(a, True)
    y = (Cube.apply(x.sin(), 2.0) * x).sum()
    (g,) = ngrad.autograd.grad(y, x, create_graph=True)
    f = lambda v: float(np.sum(2 * np.sin(v) ** 3 * v))  # noqa: E731
    np.testing.assert_allclose(g.detach().numpy(), fd_gradient(f, a), rtol=1e-6)
    (h,) = ngrad.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(
        h.numpy(),
        fd_gradient(lambda v: float(np.sum(6 * np.sin(v) ** 2 * np.cos(v) * v + 2 * np.sin(v) ** 3)), a),
        rtol=1e-5,
    )
    assert y.grad_fn is not None and "CubeBackward" in repr(Cube.apply(x, 1.0).grad_fn)


def test_custom_function_new_style_and_ctx_features():
    class Split(ngrad.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 2, (x > 0).sum()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.mark_non_differentiable(output[1])
            ctx.set_materialize_grads(False)

        @staticmethod
        def backward(ctx, g, g_count):
            assert g_count is None
            return None if g is None else g * 2

    x = t64([1.0, -2.0], True)
    y, count = Split.apply(x)
    assert y.requires_grad and not count.requires_grad and count.item() == 1
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_custom_function_errors_and_once_differentiable():
    class Wrong(ngrad.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g

    x = t64([1.0, 2.0], True)
    with pytest.raises(RuntimeError, match="returned an incorrect number of gradients \\(expected 2, got 1\\)"):
        Wrong.apply(x, x).sum().backward()

    class BadShape(ngrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return ngrad.ones(3, dtype=ngrad.float64)

    with pytest.raises(
        RuntimeError,
        match="returned an invalid gradient at index 0 - got \\[3\\] but expected shape compatible with \\[2\\]",
    ):
        BadShape.apply(x).sum().backward()

    class Once(ngrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.exp()

        @staticmethod
        @ngrad.autograd.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.exp()

    (g,) = ngrad.autograd.grad((Once.apply(x) * x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), np.exp([1.0, 2.0]) * (1 + np.array([1.0, 2.0])))
    with pytest.raises(
        RuntimeError, match="trying to differentiate twice a function that was marked with @once_differentiable"
    ):
        g.sum().backward()
    y = Cube.apply(x, 1.0)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.sum().backward()
    x2 = t64([1.0, 2.0], True)
    z = x2 * 1
    y = Cube.apply(z, 1.0)
    with ngrad.no_grad():
        z.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_custom_function_matches_torch(rng):
    torch = torch_or_skip()
    a = rng.standard_normal(5)
    res = []
    for lib in (ngrad, torch):

        class Clip(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x.clamp(-1, 1)

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * (1 - x.tanh() ** 2)  # a straight-through-like surrogate

        x = lib.tensor(a, requires_grad=True)
        (Clip.apply(x * 2) ** 2).sum().backward()
        res.append(x.grad.numpy())
        x.grad = None
        y = Clip.apply(x * 2)
        y.register_hook(lambda g: g * 10)  # the backward receives the hook's gradient
        (y**2).sum().backward()
        res.append(x.grad.numpy())
    np.testing.assert_allclose(res[0], res[2], rtol=1e-12)
    np.testing.assert_allclose(res[1], res[3], rtol=1e-12)
    np.testing.assert_allclose(res[1], 10 * res[0], rtol=1e-12)


# --- forward mode ---------------------------------------------------------------------------------


def test_forward_ad_tangents_against_finite_differences(rng):
    a, u = rng.standard_normal(5), rng.standard_normal(5)

    def f(lib_x):
        return ((lib_x.sin() * lib_x).cumsum(0) / (1 + lib_x**2)).tanh()

    with fwAD.dual_level():
        d = fwAD.make_dual(t64(a), t64(u))
        primal, tangent = fwAD.unpack_dual(f(d))
        assert fwAD.unpack_dual(primal).tangent is None
    with ngrad.no_grad():
        fd = (f(t64(a + 1e-6 * u)).numpy() - f(t64(a - 1e-6 * u)).numpy()) / 2e-6
    np.testing.assert_allclose(tangent.numpy(), fd, rtol=1e-6, atol=1e-9)
    assert fwAD.unpack_dual(f(t64(a))).tangent is None


def test_forward_ad_errors_and_reverse_over_forward():
    x = t64([0.5, 2.0], True)
    with pytest.raises(RuntimeError, match="you must first enter a dual level"):
        fwAD.make_dual(x, x)
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="different size than that of the original Tensor"):
            fwAD.make_dual(x, t64([1.0]))
        with pytest.raises(RuntimeError, match="Entering a new forward AD level"):
            fwAD.enter_dual_level()
        d = fwAD.make_dual(x, t64([1.0, 0.0]))
        t = fwAD.unpack_dual((d.sin() * d).sum()).tangent
        t.backward()
    v = 0.5
    np.testing.assert_allclose(x.grad.numpy()[0], -np.sin(v) * v + 2 * np.cos(v))


def test_custom_function_jvp():
    class Square(ngrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_forward(x)
            return x * x

        @staticmethod
        def jvp(ctx, t):
            (x,) = ctx.saved_for_forward
            return 2 * x * t

        @staticmethod
        def backward(ctx, g):
            raise AssertionError("not used")

    x = t64([1.0, 3.0], True)
    with fwAD.dual_level():
        d = fwAD.make_dual(x, t64([1.0, 1.0]))
        t = fwAD.unpack_dual(Square.apply(d).exp()).tangent
    np.testing.assert_allclose(t.detach().numpy(), 2 * np.array([1.0, 3.0]) * np.exp([1.0, 9.0]))


# --- functional --------------------------------------------------------------------------------------


def _fn(lib):
    return lambda x, y: ((x[:3] * y).sin() * x.sum(), (x**2).exp())


def _scalar(lib):
    return lambda x, y: (x[:3].sin() * y**2).sum() + (x**3).sum()


@pytest.mark.parametrize(
    "vectorize,strategy", [(False, "reverse-mode"), (True, "reverse-mode"), (True, "forward-mode")]
)
def test_jacobian_and_hessian_match_torch(vectorize, strategy, rng):
    torch = torch_or_skip()
    import torch.autograd.functional as TF

    a, b = rng.standard_normal(4), rng.standard_normal(3)
    J = F.jacobian(_fn(ngrad), (t64(a), t64(b)), vectorize=vectorize, strategy=strategy)
    T = TF.jacobian(_fn(torch), (torch.tensor(a), torch.tensor(b)), vectorize=vectorize, strategy=strategy)
    H = F.hessian(_scalar(ngrad), (t64(a), t64(b)), vectorize=vectorize, outer_jacobian_strategy=strategy)
    TH = TF.hessian(
        _scalar(torch), (torch.tensor(a), torch.tensor(b)), vectorize=vectorize, outer_jacobian_strategy=strategy
    )
    for ours, theirs in ((J, T), (H, TH)):
        for r1, r2 in zip(ours, theirs):
            for x1, x2 in zip(r1, r2):
                assert tuple(x1.shape) == tuple(x2.shape)
                np.testing.assert_allclose(x1.numpy(), x2.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_products_match_torch(rng):
    torch = torch_or_skip()
    import torch.autograd.functional as TF

    a, b = rng.standard_normal(4), rng.standard_normal(3)
    va, vb = rng.standard_normal(4), rng.standard_normal(3)
    for name in ("vhp", "hvp"):
        o1, r1 = getattr(F, name)(_scalar(ngrad), (t64(a), t64(b)), (t64(va), t64(vb)))
        o2, r2 = getattr(TF, name)(
            _scalar(torch), (torch.tensor(a), torch.tensor(b)), (torch.tensor(va), torch.tensor(vb))
        )
        np.testing.assert_allclose(o1.numpy(), o2.numpy(), rtol=1e-12)
        for x, y in zip(r1, r2):
            np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-12)
    w = rng.standard_normal(3), rng.standard_normal(4)
    o1, r1 = F.vjp(_fn(ngrad), (t64(a), t64(b)), tuple(t64(x) for x in w))
    o2, r2 = TF.vjp(_fn(torch), (torch.tensor(a), torch.tensor(b)), tuple(torch.tensor(x) for x in w))
    o3, r3 = F.jvp(_fn(ngrad), (t64(a), t64(b)), (t64(va), t64(vb)))
    o4, r4 = TF.jvp(_fn(torch), (torch.tensor(a), torch.tensor(b)), (torch.tensor(va), torch.tensor(vb)))
    for x, y in list(zip(r1, r2)) + list(zip(r3, r4)):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-12)


def test_hvp_and_vhp_against_central_differences_of_the_gradient(rng):
    """H v by central differences of the gradient (float64), without PyTorch."""
    a, b = rng.standard_normal(4), rng.standard_normal(3)
    va, vb = rng.standard_normal(4), rng.standard_normal(3)

    def gradient(x, y):
        xs, ys = t64(x).requires_grad_(), t64(y).requires_grad_()
        return [g.numpy() for g in ngrad.autograd.grad(_scalar(ngrad)(xs, ys), (xs, ys))]

    eps = 1e-6
    up, down = gradient(a + eps * va, b + eps * vb), gradient(a - eps * va, b - eps * vb)
    fd = [(u - d) / (2 * eps) for u, d in zip(up, down)]
    for name in ("hvp", "vhp"):
        out, prod = getattr(F, name)(_scalar(ngrad), (t64(a), t64(b)), (t64(va), t64(vb)))
        np.testing.assert_allclose(out.item(), (np.sin(a[:3]) * b**2).sum() + (a**3).sum(), rtol=1e-12)
        for p_, f_ in zip(prod, fd):
            np.testing.assert_allclose(p_.numpy(), f_, rtol=1e-6, atol=1e-8)


def test_functional_shapes_and_errors():
    x = t64([1.0, 2.0])
    j = F.jacobian(lambda t: t.sum(), x)
    assert tuple(j.shape) == (2,) and not j.requires_grad
    j = F.jacobian(lambda t: t * 1.0, (x,))
    assert isinstance(j, tuple) and tuple(j[0].shape) == (2, 2)
    j = F.jacobian(lambda t, u: t * 0 + 1, (x, x))  # independent of the inputs: zeros
    np.testing.assert_allclose(j[1].numpy(), np.zeros((2, 2)))
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not require gradients"):
        F.jacobian(lambda t: x * 2, x, strict=True)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is independent of input 1"):
        F.jacobian(lambda t, u: t * 2, (x, x), strict=True)
    with pytest.raises(RuntimeError, match="`strict=True` and `vectorized=True` are not supported together"):
        F.jacobian(lambda t: t, x, strict=True, vectorize=True)
    with pytest.raises(
        RuntimeError,
        match="The vector v can only be None if the user-provided function returns a "
        "single Tensor with a single element",
    ):
        F.vjp(lambda t: t * 2, x)
    with pytest.raises(RuntimeError, match="v has invalid size"):
        F.vjp(lambda t: t * 2, x, t64([1.0]))
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors"):
        F.jacobian(lambda t: t, 3.0)
    with pytest.raises(RuntimeError, match="should return a single Tensor|should contain a single element"):
        F.hessian(lambda t: t * 2, x)
    out, g = F.vjp(lambda t: (t * t).sum(), x, create_graph=True)
    assert g.requires_grad and not F.vjp(lambda t: (t * t).sum(), x)[1].requires_grad


def test_vectorized_jacobian_is_one_program(monkeypatch):
    """vectorize=True differentiates once (one batched reverse program), not once per row."""
    from ngrad.autograd import reverse

    calls = []
    real = reverse._reverse
    monkeypatch.setattr(reverse, "_reverse", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = ngrad.randn(50, dtype=ngrad.float64)
    j = F.jacobian(lambda t: t.sin().cumsum(0), x, vectorize=True)
    assert len(calls) == 1
    np.testing.assert_allclose(j.numpy(), np.tril(np.ones((50, 50))) * np.cos(x.numpy()), rtol=1e-12)
    calls.clear()
    F.jacobian(lambda t: t.sin().cumsum(0), x[:5])
    assert len(calls) == 5


# --- gradcheck and anomaly -------------------------------------------------------------------------


def test_gradcheck_and_gradgradcheck(rng):
    x = t64(rng.standard_normal(3), True)
    y = t64(rng.standard_normal((2, 3)), True)

    def f(a, b):
        return (a * b).sin().sum(0), (b**2).exp()

    for fast in (False, True):
        assert ngrad.autograd.gradcheck(f, (x, y), fast_mode=fast, check_forward_ad=True)
        assert ngrad.autograd.gradgradcheck(f, (x, y), fast_mode=fast)

    class Off(ngrad.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t.sin()

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return g * t.cos() * 1.01

    for fast in (False, True):
        with pytest.raises(
            ngrad.autograd.GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"
        ):
            ngrad.autograd.gradcheck(Off.apply, (x,), fast_mode=fast)
    assert ngrad.autograd.gradcheck(Off.apply, (x,), raise_exception=False) is False
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        ngrad.autograd.gradcheck(lambda t: t, (t64([1.0]),))
    with pytest.warns(UserWarning, match="is not a double precision"):
        ngrad.autograd.gradcheck(lambda t: t * 2, (ngrad.tensor([1.0], requires_grad=True),), eps=1e-2, atol=1e-2)


def test_detect_anomaly_names_the_op_and_where_it_was_recorded():
    x = t64([0.0, 1.0], True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ngrad.autograd.detect_anomaly():
            y = x.sqrt() * 0  # noqa: this line must appear in the message
            with pytest.raises(
                RuntimeError,
                match="Function 'SqrtBackward0' returned nan values in its 0th output(.|\\n)*test_autograd_surface.py",
            ):
                y.sum().backward()
        assert not ngrad.autograd.is_anomaly_enabled()
        ngrad.autograd.set_detect_anomaly(True)
        try:
            z = (x + 1).log() * 2
            z.sum().backward()  # no NaN: runs as usual
        finally:
            ngrad.autograd.set_detect_anomaly(False)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 1.0])
