"""backward / grad / grad mode: PyTorch's semantics, error types and key phrases."""

import threading

import numpy as np
import pytest

import ngrad
from ngrad.autograd import backward, grad


def leaf(values, dtype=ngrad.float64):
    return ngrad.tensor(values, dtype=dtype, requires_grad=True)


def test_backward_accumulates_into_the_same_grad_object():
    x = leaf([1.0, 2.0])
    (x * x).sum().backward()
    g = x.grad
    (x * 3).sum().backward()
    assert x.grad is g
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0])


def test_implicit_grad_only_for_scalar_outputs():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()
    (x * 2)[:1].backward()  # one element, any shape: allowed
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 0.0])


def test_grad_tensors_shape_is_checked_exactly():
    x = leaf([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_output\[0\] has a shape of ngrad.Size\(\[2\]\)"):
        (x * 2).backward(ngrad.ones(2))
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(ngrad.ones(1, 3))


def test_outputs_that_do_not_require_grad():
    x = ngrad.tensor([1.0])
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad and does not have a grad_fn"):
        (x * 2).sum().backward()
    y = leaf([1.0])
    with pytest.raises(RuntimeError, match="element 1 of tensors does not require grad"):
        backward([y.sum(), x.sum()])


def test_number_of_gradients_must_match():
    x = leaf([1.0])
    with pytest.raises(RuntimeError, match="got 2 tensors and 1 gradients"):
        backward([x.sum(), (x * 2).sum()], [ngrad.tensor(1.0, dtype=ngrad.float64)])


def test_inputs_restricts_accumulation_and_reaches_non_leaves():
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    h = x * w
    loss = (h * h).sum()
    loss.backward(inputs=[w, h], retain_graph=True)
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [2 * 1 * 1 * 3, 2 * 2 * 2 * 4])
    np.testing.assert_allclose(h.grad.numpy(), [6.0, 16.0])
    with pytest.raises(RuntimeError, match="'inputs' argument to backward\\(\\) cannot be empty."):
        loss.backward(inputs=[])


def test_retain_graph_and_freed_saved_values():
    x = leaf([1.0, 2.0])
    y = x.exp().sum()
    y.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()
    # graphs whose backward needs no saved value can be run again (as in PyTorch)
    z = (x + 1).sum() + x.sum()
    z.backward()
    z.backward()
    # retain_graph keeps them
    w = (x * x).sum()
    w.backward(retain_graph=True)
    w.backward()
    # freeing is about the part that was traversed: a new consumer of a freed node fails too
    a = x.sin()
    a.sum().backward()
    with pytest.raises(RuntimeError, match="saved tensors after they have already been freed"):
        (a * 2).sum().backward()


SECOND_BACKWARD = {  # what PyTorch 2.13 does on a second backward without retain_graph
    "x*2": (lambda x: (x * 2).sum(), False),
    "x+1": (lambda x: (x + 1).sum(), True),
    "x/2": (lambda x: (x / 2).sum(), False),
    "2/x": (lambda x: (2 / x).sum(), False),
    "x**2": (lambda x: (x**2).sum(), False),
    "mean": (lambda x: x.mean(), True),
    "x.sum()*2": (lambda x: x.sum() * 2, False),
    "relu": (lambda x: x.relu().sum(), False),
    "reshape": (lambda x: x.reshape(2, 1).sum(), True),
    "x[0]": (lambda x: x[0], True),
    "x[[0]]": (lambda x: x[[0]].sum(), False),
    "cat": (lambda x: ngrad.cat([x, x]).sum(), True),
    "expand": (lambda x: x.expand(3, 2).sum(), True),
    "clamp": (lambda x: x.clamp(0, 1.5).sum(), False),
    "max": (lambda x: x.max(), False),
}


@pytest.mark.parametrize("name", sorted(SECOND_BACKWARD))
def test_second_backward_fails_exactly_when_pytorch_does(name):
    fn, ok = SECOND_BACKWARD[name]
    x = leaf([1.0, 2.0])
    y = fn(x)
    y.backward()
    if ok:
        y.backward()
        assert x.grad is not None
    else:
        with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
            y.backward()


def test_second_backward_table_matches_pytorch():
    torch = pytest.importorskip("torch")
    for name, (fn, ok) in SECOND_BACKWARD.items():
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        y = fn(x) if name != "cat" else torch.cat([x, x]).sum()
        y.backward()
        try:
            y.backward()
            assert ok, name
        except RuntimeError:
            assert not ok, name


def test_retain_graph_defaults_to_create_graph():
    x = leaf([1.5])
    y = (x**3).sum()
    (g,) = grad(y, x, create_graph=True)
    (g2,) = grad(g.sum(), x)
    np.testing.assert_allclose(g2.numpy(), [6 * 1.5])
    grad(y, x)  # the graph was retained by create_graph=True


def test_unused_inputs():
    x, z = leaf([1.0]), leaf([2.0])
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph. Set allow_unused=True"):
        grad(y, [x, z], retain_graph=True)
    gx, gz = grad(y, [x, z], allow_unused=True, retain_graph=True)
    assert gz is None and gx.item() == 2.0
    gx, gz = grad(y, [x, z], materialize_grads=True)
    np.testing.assert_array_equal(gz.numpy(), [0.0])
    with pytest.raises(ValueError, match="Expected allow_unused to be True or not passed when materialize_grads=True"):
        grad(y, [x, z], allow_unused=False, materialize_grads=True)


def test_input_that_does_not_require_grad():
    x, c = leaf([1.0]), ngrad.tensor([1.0])
    with pytest.raises(RuntimeError, match="One of the differentiated Tensors does not require grad"):
        grad((x * c).sum(), [x, c])


def test_paths_through_comparisons_are_not_differentiable():
    x = leaf([1.0, -1.0])
    y = (x > 0).float().sum() + 0 * ngrad.tensor(1.0, requires_grad=True)
    (gx,) = grad(y, x, allow_unused=True)
    assert gx is None


def test_zero_gradient_ops_still_give_a_gradient():
    x = leaf([1.5, -2.5])
    (g,) = grad(x.floor().sum() + x.sign().sum(), x)
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0])


def test_dict_inputs():
    x, y = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    g = grad((x * y).sum(), {"a": x, "b": y})
    assert list(g) == ["a", "b"]
    np.testing.assert_array_equal(g["a"].numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(g["b"].numpy(), [1.0, 2.0])


def test_is_grads_batched_computes_jacobian_rows():
    x = leaf([0.5, 1.0, 2.0])
    y = x.sin() * x.sum()
    (jac,) = grad(y, x, ngrad.eye(3, dtype=ngrad.float64), is_grads_batched=True)
    xv = np.array([0.5, 1.0, 2.0])
    expected = np.diag(np.cos(xv) * xv.sum()) + np.sin(xv)[:, None]
    np.testing.assert_allclose(jac.numpy(), expected, rtol=1e-12)
    with pytest.raises(RuntimeError, match="is_grads_batched=True"):
        grad(x.sin() * 2, x, ngrad.ones(3), is_grads_batched=True)


def test_is_grads_batched_with_create_graph():
    x = leaf([0.5, 1.0])
    y = x**3
    (jac,) = grad(y, x, ngrad.eye(2, dtype=ngrad.float64), is_grads_batched=True, create_graph=True)
    (h,) = grad(jac.sum(), x)
    np.testing.assert_allclose(h.numpy(), 6 * np.array([0.5, 1.0]))


def test_retain_grad_and_non_leaf_grad_warning():
    x = leaf([1.0, 2.0])
    h = x * 3
    h.retain_grad()
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [6.0, 12.0])
    k = x * 2
    (k * 1).sum().backward()
    with pytest.warns(UserWarning, match="is not a leaf Tensor is being accessed"):
        assert k.grad is None


def test_gradients_take_the_input_dtype():
    x32 = ngrad.tensor([1.0, 2.0], requires_grad=True)
    x64 = leaf([1.0, 2.0])
    (x32.double() * x64).sum().backward()
    assert x32.grad.dtype is ngrad.float32 and x64.grad.dtype is ngrad.float64


def test_integer_tensors_cannot_require_grad():
    with pytest.raises(RuntimeError, match="only Tensors of floating point and complex dtype can require gradients"):
        ngrad.tensor([1, 2]).requires_grad_()
    with pytest.raises(RuntimeError, match="floating point"):
        ngrad.tensor([1, 2], requires_grad=True)


def test_requires_grad_flags_of_non_leaves():
    x = leaf([1.0])
    y = x * 2
    with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf variables"):
        y.requires_grad_(False)
    assert y.requires_grad_() is y


def test_create_graph_higher_derivatives_of_exp_and_tanh():
    x = leaf(0.3)
    g = x.exp()
    for _ in range(4):
        (g,) = grad(g, x, create_graph=True)
    assert np.isclose(g.item(), np.exp(0.3))
    t = x.tanh()
    derivs = []
    for _ in range(3):
        (t,) = grad(t, x, create_graph=True)
        derivs.append(t.item())
    th = np.tanh(0.3)
    s2 = 1 - th**2
    np.testing.assert_allclose(derivs, [s2, -2 * th * s2, -2 * s2 * (1 - 3 * th**2)], rtol=1e-12)


def test_hessian_vector_product_via_double_backward():
    a = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]])
    A = ngrad.tensor(a)
    x = leaf([1.0, -1.0, 0.5])
    v = ngrad.tensor([0.3, 0.2, -0.1], dtype=ngrad.float64)
    f = 0.5 * (x @ (A @ x)) + (x**4).sum()
    (g,) = grad(f, x, create_graph=True)
    (hv,) = grad(g, x, v)
    xv = np.array([1.0, -1.0, 0.5])
    np.testing.assert_allclose(hv.numpy(), a @ v.numpy() + 12 * xv**2 * v.numpy(), rtol=1e-12)


def test_create_graph_accumulation_is_out_of_place():
    x = leaf([2.0])
    (x**2).sum().backward(create_graph=True)
    first = x.grad
    assert first.requires_grad
    (x**2).sum().backward(create_graph=True)
    assert x.grad is not first
    np.testing.assert_allclose(x.grad.detach().numpy(), [8.0])


def test_backward_on_realized_output_recomputes_what_it_needs():
    x = leaf([0.5, 1.5])
    y = (x.sin() * x).sum()
    value = y.item()
    y.backward()
    assert value == pytest.approx(np.sum(np.sin([0.5, 1.5]) * [0.5, 1.5]))
    np.testing.assert_allclose(x.grad.numpy(), np.cos([0.5, 1.5]) * [0.5, 1.5] + np.sin([0.5, 1.5]))


def test_grad_mode_context_managers_and_decorators():
    x = leaf([1.0])
    with ngrad.no_grad():
        assert not (x * 2).requires_grad
        with ngrad.enable_grad():
            assert (x * 2).requires_grad
    assert ngrad.is_grad_enabled()

    @ngrad.no_grad()
    def f():
        return x * 2

    @ngrad.no_grad
    def g():
        return x * 2

    assert not f().requires_grad and not g().requires_grad
    prev = ngrad.set_grad_enabled(False)
    assert not ngrad.is_grad_enabled()
    ngrad.set_grad_enabled(True)
    assert ngrad.is_grad_enabled() and prev is not None
    with ngrad.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert ngrad.is_grad_enabled()


def test_grad_mode_is_thread_local():
    seen = []
    with ngrad.no_grad():
        t = threading.Thread(target=lambda: seen.append(ngrad.is_grad_enabled()))
        t.start()
        t.join()
    assert seen == [True]


def test_no_grad_results_are_constants_in_a_later_graph():
    x = leaf([1.0, 2.0])
    with ngrad.no_grad():
        c = x * 3
    y = (c * x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 6.0])


def test_detach_stops_gradients():
    x = leaf([1.0, 2.0])
    y = (x.detach() * x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0])


def test_grad_fn_names_and_next_functions():
    x = leaf([1.0])
    y = x * 2
    assert y.grad_fn.name() == "MulBackward0"
    (acc, _), (none, _) = y.grad_fn.next_functions
    assert acc.variable is x and none is None
    assert x.grad_fn is None and x.is_leaf and not y.is_leaf
    assert repr(y) == "tensor([2.], dtype=ngrad.float64, grad_fn=<MulBackward0>)"


def test_grad_assignment_is_checked():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="assigned grad has data of a different size"):
        x.grad = ngrad.zeros(3, dtype=ngrad.float64)
    with pytest.raises(RuntimeError, match="assigned grad has data of a different type"):
        x.grad = ngrad.zeros(2)
    x.grad = ngrad.ones(2, dtype=ngrad.float64)
    (x * 1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_numpy_on_a_tensor_that_requires_grad():
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        leaf([1.0]).numpy()


def test_deep_graph_of_100000_ops():
    x = ngrad.tensor(0.5, dtype=ngrad.float64, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.0000001 + 1e-9
    y.backward()
    assert np.isclose(x.grad.item(), 1.0000001**100_000)
    assert np.isfinite(y.item())
    del y  # freeing a 100,000-deep chain must not overflow the C stack


def test_deep_no_grad_chain_realized_step_by_step_keeps_no_history():
    y = ngrad.tensor(1.0, dtype=ngrad.float64)
    for _ in range(1000):
        y = y * 0.999
        y.item()
    assert y._node.srcs == ()


def test_optimizer_style_rebinding_keeps_no_history():
    w = ngrad.tensor([1.0, 2.0], dtype=ngrad.float64, requires_grad=True)
    for _ in range(50):
        (g,) = grad((w * w).sum(), w)
        with ngrad.no_grad():
            w = (w - 0.1 * g).requires_grad_()
        assert w.is_leaf and w._node.srcs == ()
    np.testing.assert_allclose(w.detach().numpy(), np.array([1.0, 2.0]) * 0.8**50)


def test_second_backward_fails_when_the_rule_reuses_a_forward_value():
    """sin's VJP needs cos(x); here the forward pass computed cos(x) too, and common-subexpression
    elimination reuses it: it is still a saved value, as in PyTorch (SinBackward0 saves x)."""
    x = leaf([0.3, 0.7])
    y = (x.sin() + x.cos()).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()
