"""Custom ``autograd.Function`` details with PyTorch's semantics: ``mark_dirty``,
``mark_non_differentiable``, ``set_materialize_grads``, ``once_differentiable``, ``setup_context``
with default arguments, inputs returned as they are, one tensor returned twice, Functions with
only ``vjp`` or only ``jvp``, and grad_fn names. Each case runs on ngrad against values worked
out by hand, and on PyTorch too where it is installed (same values, same errors)."""

import numpy as np
import pytest

from .oracles import LIBS


def vec(lib, values, requires_grad=False):
    return lib.tensor(values, dtype=lib.float64, requires_grad=requires_grad)


def scale_in_place(lib, dirty=True, factor=2.0):
    class Scale(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(factor)
            if dirty:
                ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * factor

    return Scale


@LIBS
def test_mark_dirty_returns_the_input_bumps_its_version_and_continues_its_history(lib):
    a = vec(lib, [1.0, 2.0], True)
    b = a.clone()
    v0 = b._version
    c = scale_in_place(lib).apply(b)
    assert c is b
    assert b._version - v0 == 2  # the write in forward, then mark_dirty
    assert b.grad_fn.name() == "ScaleBackward"
    (c * c).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [8.0, 16.0])  # d/da (2a)^2 = 8a


@LIBS
def test_mark_dirty_on_a_view_rewrites_the_base(lib):
    a = vec(lib, [1.0, 2.0, 3.0], True)
    b = a.clone()
    v = b[:2]
    c = scale_in_place(lib).apply(v)
    assert c is v
    assert b.grad_fn.name() == "torch::autograd::CopySlices"
    assert c.grad_fn.name() == "AsStridedBackward0"
    np.testing.assert_allclose(b.detach().numpy(), [2.0, 4.0, 3.0])
    (b * b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [8.0, 16.0, 6.0])


@LIBS
def test_mark_dirty_errors(lib):
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used in an in-place"):
        scale_in_place(lib).apply(vec(lib, [1.0], True))

    class NotReturned(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mark_dirty(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(RuntimeError, match="marked as dirty during the forward method were not returned"):
        NotReturned.apply(vec(lib, [1.0], True).clone())


@LIBS
def test_mark_dirty_without_gradients_still_counts_the_write(lib):
    b = vec(lib, [1.0, 2.0])
    c = scale_in_place(lib).apply(b)
    assert c is b and b._version == 2 and not c.requires_grad


@LIBS
def test_non_differentiable_outputs_and_unmaterialized_grads(lib):
    class TwoOut(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            y, z = x * 2, x * 3
            ctx.mark_non_differentiable(z)
            return y, z

        @staticmethod
        def backward(ctx, gy, gz):
            assert gz is None  # not materialized: no zeros for an output nothing reached
            return gy * 2

    x = vec(lib, [1.0, 3.0], True)
    y, z = TwoOut.apply(x)
    assert y.requires_grad and not z.requires_grad and z.grad_fn is None
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


@LIBS
def test_an_input_returned_as_is_is_a_new_view_of_it(lib):
    class Ident(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 3

    x = vec(lib, [1.0, 3.0], True)
    y = Ident.apply(x)
    assert y is not x and y._base is x and y.grad_fn.name() == "IdentBackward"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


@LIBS
def test_one_tensor_returned_twice_is_one_object_whose_gradient_is_the_last_outputs(lib):
    class Twice(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 2
            return y, y

        @staticmethod
        def backward(ctx, g1, g2):
            return g1 * 2 + g2 * 20

    x = vec(lib, [1.0, 3.0], True)
    a, b = Twice.apply(x)
    assert a is b
    (a.sum() + 2 * b.sum()).backward()
    # the tensor is output 1: it receives the whole gradient 3; output 0 gets zeros
    np.testing.assert_allclose(x.grad.numpy(), [60.0, 60.0])


@LIBS
def test_an_input_returned_twice_is_two_views_with_their_own_gradients(lib):
    class Both(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x, x

        @staticmethod
        def backward(ctx, g1, g2):
            return g1 * 2 + g2 * 20

    x = vec(lib, [1.0, 2.0], True)
    a, b = Both.apply(x)
    assert a is not b and a._base is x and b._base is x
    (a.sum() + 2 * b.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), [42.0, 42.0])


@LIBS
def test_setup_context_sees_forwards_default_arguments(lib):
    class Scale(lib.autograd.Function):
        @staticmethod
        def forward(x, k=3.0):
            return x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    x = vec(lib, [1.0, 3.0], True)
    Scale.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


@LIBS
def test_a_function_with_only_vjp_or_only_jvp(lib):
    class OnlyVjp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def vjp(ctx, g):
            return g * 5

    class OnlyJvp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def jvp(ctx, t):
            return t * 5

    x = vec(lib, [1.0, 3.0], True)
    y = OnlyVjp.apply(x)
    assert y.grad_fn.name() == "OnlyVjpBackward"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0])
    fw = lib.autograd.forward_ad
    with fw.dual_level():
        out = OnlyJvp.apply(fw.make_dual(vec(lib, [1.0, 3.0]), vec(lib, [1.0, 2.0])))
        np.testing.assert_allclose(fw.unpack_dual(out).tangent.numpy(), [5.0, 10.0])
        assert not out.requires_grad
    with pytest.raises(NotImplementedError, match="must implement either the backward or vjp method"):
        OnlyJvp.apply(vec(lib, [1.0], True)).sum().backward()


@LIBS
def test_defining_both_backward_and_vjp_is_refused(lib):
    class Both(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g

        @staticmethod
        def vjp(ctx, g):
            return g

    with pytest.raises(RuntimeError, match="Implementing both 'backward' and 'vjp'"):
        Both.apply(vec(lib, [1.0], True)).sum().backward()


@LIBS
def test_once_differentiable_backward_runs_without_recording(lib):
    class Square(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**2

        @staticmethod
        @lib.autograd.function.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 * x

    x = vec(lib, [1.0, 3.0], True)
    (g,) = lib.autograd.grad(Square.apply(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [2.0, 6.0])
    assert not g.requires_grad
    assert Square.backward.__name__ == "backward"
    go = vec(lib, [1.0, 1.0], True)  # a cotangent that requires grad: the result does too, and fails
    (g,) = lib.autograd.grad(Square.apply(x), x, go, create_graph=True)
    assert g.grad_fn.name() == "torch::autograd::Error"
    np.testing.assert_allclose(g.detach().numpy(), [2.0, 6.0])
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that was marked with"):
        g.sum().backward()


@LIBS
def test_a_backward_that_cannot_reach_the_requested_inputs_is_not_run(lib):
    calls = []

    class Rec(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            calls.append(1)
            return g * 2

    x, w = vec(lib, [1.0, 3.0], True), vec(lib, [1.0, 3.0], True)
    lib.autograd.grad((Rec.apply(x) * w).sum(), w)
    assert calls == []
