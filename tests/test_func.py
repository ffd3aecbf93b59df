"""ngrad.func transforms, in-place tensor ops, and the SciPy adapter, against finite differences,
NumPy and PyTorch."""

import numpy as np
import pytest

import ngrad

from .oracles import fd_gradient, np_rosenbrock, torch_or_skip


def f_scalar(x, y):
    return (x.sin() * y.exp()).sum() + (x**2).sum() * 0.5


def _np_f(x, y):
    return float(np.sum(np.sin(x) * np.exp(y)) + 0.5 * np.sum(x**2))


def test_grad_and_value_and_grad_against_finite_differences(rng):
    x, y = rng.standard_normal(4), rng.standard_normal(4)
    tx, ty = ngrad.tensor(x), ngrad.tensor(y)
    value, (gx, gy) = ngrad.func.value_and_grad(f_scalar, argnums=(0, 1))(tx, ty)
    assert value.item() == pytest.approx(_np_f(x, y), rel=1e-12) and not value.requires_grad
    np.testing.assert_allclose(gx.numpy(), fd_gradient(lambda a: _np_f(a, y), x), rtol=1e-6)
    np.testing.assert_allclose(gy.numpy(), fd_gradient(lambda b: _np_f(x, b), y), rtol=1e-6)
    np.testing.assert_allclose(ngrad.func.grad(f_scalar, argnums=1)(tx, ty).numpy(), gy.numpy())
    g, aux = ngrad.func.grad(lambda a: (f_scalar(a, ty), "aux"), has_aux=True)(tx)
    assert aux == "aux"
    np.testing.assert_allclose(g.numpy(), gx.numpy())
    assert not tx.requires_grad  # the arguments are not modified


def test_grad_of_nested_arguments_and_errors(rng):
    params = {"w": ngrad.tensor(rng.standard_normal(3)), "b": ngrad.tensor(0.5, dtype=ngrad.float64)}
    g = ngrad.func.grad(lambda p: ((p["w"] * 2 + p["b"]) ** 2).sum())(params)
    w, b = params["w"].numpy(), 0.5
    np.testing.assert_allclose(g["w"].numpy(), 4 * (2 * w + b))
    assert g["b"].item() == pytest.approx(float(np.sum(2 * (2 * w + b))))
    with pytest.raises(RuntimeError, match="scalar Tensor"):
        ngrad.func.grad(lambda a: a * 2)(ngrad.ones(3))
    with pytest.raises(RuntimeError, match="only 1 positional inputs"):
        ngrad.func.grad(lambda a: a.sum(), argnums=2)(ngrad.ones(3))


def test_vjp_and_jvp_against_the_jacobian(rng):
    x = rng.standard_normal(3)

    def f(a):
        return ngrad.stack([a[0] * a[1], a[1].sin() + a[2] ** 2, a.exp().sum()])

    jac = np.array([[x[1], x[0], 0], [0, np.cos(x[1]), 2 * x[2]], list(np.exp(x))])
    u, v = rng.standard_normal(3), rng.standard_normal(3)
    out, vjp_fn = ngrad.func.vjp(f, ngrad.tensor(x))
    (g,) = vjp_fn(ngrad.tensor(u))
    np.testing.assert_allclose(g.numpy(), u @ jac, rtol=1e-12)
    value, tangent = ngrad.func.jvp(f, (ngrad.tensor(x),), (ngrad.tensor(v),))
    np.testing.assert_allclose(value.numpy(), out.numpy())
    np.testing.assert_allclose(tangent.numpy(), jac @ v, rtol=1e-12)


def test_hessian(rng):
    x = rng.standard_normal(4)
    h = ngrad.func.hessian(lambda a: (a**3).sum() + a[0] * a[1])(ngrad.tensor(x))
    want = np.diag(6 * x)
    want[0, 1] = want[1, 0] = 1
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-12)


def test_transforms_match_torch_func(rng):
    torch = torch_or_skip()
    x, y = rng.standard_normal(5), rng.standard_normal(5)
    mine = ngrad.func.value_and_grad(f_scalar, argnums=(0, 1))(ngrad.tensor(x), ngrad.tensor(y))
    theirs = torch.func.grad_and_value(f_scalar, argnums=(0, 1))(torch.tensor(x), torch.tensor(y))
    assert mine[0].item() == pytest.approx(theirs[1].item(), rel=1e-12)
    for a, b in zip(mine[1], theirs[0]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


# --- in-place operations -------------------------------------------------------------------------


def test_inplace_on_a_leaf_requires_no_grad():
    w = ngrad.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        w.add_(1)
    with ngrad.no_grad():
        w -= 0.5 * ngrad.ones(3)
        w.mul_(4)
    assert w.is_leaf and w.requires_grad and w.grad_fn is None
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [4.0, 4.0, 4.0])


def test_inplace_values_dtype_and_shape_rules(rng):
    a = rng.standard_normal((2, 3))
    b, c = rng.standard_normal(3), rng.uniform(1, 2, (2, 3))
    t = ngrad.tensor(a)
    t.add_(ngrad.tensor(b), alpha=2).mul_(3).addcmul_(ngrad.tensor(c), ngrad.tensor(c), value=0.5)
    t.addcdiv_(ngrad.tensor(b), ngrad.tensor(c), value=-2).clamp_(-1.0, 1.0).lerp_(ngrad.tensor(c), 0.25)
    want = np.clip(((a + 2 * b) * 3 + 0.5 * c * c) + (-2 * b) / c, -1, 1)
    np.testing.assert_allclose(t.numpy(), want + 0.25 * (c - want), rtol=1e-12)
    t.zero_()
    np.testing.assert_array_equal(t.numpy(), np.zeros((2, 3)))
    t.fill_(2.5).copy_(ngrad.tensor(b))
    np.testing.assert_array_equal(t.numpy(), np.broadcast_to(b, (2, 3)))
    i = ngrad.zeros(2, dtype=ngrad.int64)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        i.add_(0.5)
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
        ngrad.zeros(3).add_(ngrad.ones(2, 3))


def test_inplace_on_non_leaf_keeps_history():
    x = ngrad.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.add_(x * x)  # recorded: y = 3x + x^2
    with ngrad.no_grad():
        y.mul_(100)  # not recorded: the value changes, the gradient path does not
    np.testing.assert_allclose(y.detach().numpy(), [400.0, 1000.0])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0])


def test_inplace_matches_torch(rng):
    torch = torch_or_skip()
    a, b = rng.standard_normal(4), rng.uniform(1, 2, 4)
    outs = []
    for lib in (ngrad, torch):
        x = lib.tensor(a, requires_grad=True)
        y = x * 2
        y.sub_(lib.tensor(b), alpha=0.5).div_(lib.tensor(b)).pow_(2)
        y.sum().backward()
        outs.append((y.detach().numpy(), x.grad.numpy()))
    for m, t in zip(*outs):
        np.testing.assert_allclose(m, t, rtol=1e-12)


# --- SciPy ---------------------------------------------------------------------------------------


def test_scipy_minimize_and_hessian_vector_products(rng):
    pytest.importorskip("scipy")

    def rosen(x):
        return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()

    x0 = ngrad.tensor(np.tile([-1.2, 1.0], 5), dtype=ngrad.float64)
    for method in ("L-BFGS-B", "trust-ncg"):
        res = ngrad.scipy.minimize(rosen, x0, method=method, options={"gtol": 1e-9} if method == "trust-ncg" else None)
        assert res.success and isinstance(res.x, ngrad.Tensor)
        np.testing.assert_allclose(res.x.numpy(), np.ones(10), atol=1e-4)
    x = rng.uniform(-1, 1, 10)
    fg = ngrad.scipy.value_and_grad(rosen, x)
    value, g = fg(x)
    assert value == pytest.approx(np_rosenbrock(x), rel=1e-12)
    np.testing.assert_allclose(g, fd_gradient(np_rosenbrock, x), rtol=1e-6, atol=1e-6)
    p = rng.standard_normal(10)
    hp = ngrad.scipy.hessp(rosen, x)(x, p)
    eps = 1e-6
    np.testing.assert_allclose(hp, (fg(x + eps * p)[1] - fg(x - eps * p)[1]) / (2 * eps), rtol=1e-5, atol=1e-5)


def test_grad_nests_inside_an_outer_autograd_grad():
    """``grad(f)(x)`` for an ``x`` that requires grad stays on ``x``'s graph, as torch.func's
    levels keep it: its own gradient is the second derivative (here 6x, and the gradient of a
    gradient of a sum, against finite differences of the first)."""
    x = ngrad.tensor(2.0, dtype=ngrad.float64, requires_grad=True)
    g = ngrad.func.grad(lambda t: t**3)(x)
    assert g.requires_grad and abs(g.item() - 12.0) < 1e-12
    (h,) = ngrad.autograd.grad(g, x)
    assert abs(h.item() - 12.0) < 1e-12  # d/dx 3x^2 at 2
    y0 = np.array([0.3, -1.2, 2.0])
    y = ngrad.tensor(y0, requires_grad=True)

    def first(v):
        return ngrad.func.grad(lambda t: (t.sin() * t).sum())(ngrad.tensor(v)).numpy()

    gy = ngrad.func.grad(lambda t: (t.sin() * t).sum())(y)
    (hy,) = ngrad.autograd.grad(gy.sum(), y)
    eps = 1e-6
    numeric = [(first(y0 + eps * e).sum() - first(y0 - eps * e).sum()) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(hy.numpy(), numeric, rtol=1e-6)
    # without an outer differentiation the result is a plain value, as before
    assert not ngrad.func.grad(lambda t: (t * t).sum())(ngrad.tensor([1.0, 2.0])).requires_grad
