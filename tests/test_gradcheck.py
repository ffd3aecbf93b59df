"""``gradcheck``/``gradgradcheck`` with PyTorch's options and messages: nondeterministic
backward (``nondet_tol``), undefined output gradients, batched gradients in both modes, forward
mode, ``fast_mode``, functions that close over an input (perturbed in place), no differentiable
output, the option checks; and ``autograd.functional``'s strict mode. Each case runs on ngrad and,
where installed, on PyTorch."""

import itertools
import sys

import numpy as np
import pytest

import ngrad

from .oracles import LIBS


def failure(lib):
    """GradcheckError of ``lib`` (torch.autograd.gradcheck is the function, not its module)."""
    return sys.modules[lib.__name__ + ".autograd.gradcheck"].GradcheckError


def vec(lib, values=(0.5, 1.5, -0.3), requires_grad=True):
    return lib.tensor(list(values), dtype=lib.float64, requires_grad=requires_grad)


def doubler(lib, backward=None, jvp=None):
    """A custom Function for 2x whose backward (and jvp) may be replaced."""

    def default_backward(ctx, g):
        return g * 2

    body = {
        "forward": staticmethod(lambda ctx, a: a * 2),
        "backward": staticmethod(backward or default_backward),
    }
    if jvp is not None:
        body["jvp"] = staticmethod(jvp)
    return type("Doubler", (lib.autograd.Function,), body)


@LIBS
def test_a_nondeterministic_backward_is_caught_unless_within_nondet_tol(lib):
    calls = itertools.count()
    noisy = doubler(lib, lambda ctx, g: g * (2 + next(calls) * 1e-9))
    for fast in (False, True):
        with pytest.raises(failure(lib), match="Backward is not reentrant"):
            lib.autograd.gradcheck(noisy.apply, (vec(lib),), fast_mode=fast)
        assert lib.autograd.gradcheck(noisy.apply, (vec(lib),), fast_mode=fast, nondet_tol=1e-6)


@LIBS
def test_a_function_that_closes_over_its_input_sees_the_perturbation(lib):
    y = vec(lib)
    assert lib.autograd.gradcheck(lambda a: a * y, (y,))
    assert lib.autograd.gradcheck(lambda a: (a * y).sin(), (y,), fast_mode=True)


@LIBS
def test_zero_output_gradients_must_give_zero_input_gradients(lib):
    def backward(ctx, g):
        return g * 2 + (g.abs().sum() == 0).to(g.dtype)  # right, except for a zero gradient

    leaky = doubler(lib, backward)
    for undefined in (True, False):
        with pytest.raises(failure(lib), match="backward not multiplied by grad_output"):
            lib.autograd.gradcheck(leaky.apply, (vec(lib),), check_undefined_grad=undefined)


@LIBS
def test_batched_gradients_in_both_modes(lib):
    x, w = vec(lib), vec(lib, (1.0, -2.0, 0.5))
    assert lib.autograd.gradcheck(
        lambda a, b: ((a * b).sin(), a.exp() * b),
        (x, w),
        check_batched_grad=True,
        check_forward_ad=True,
        check_batched_forward_grad=True,
    )
    assert lib.autograd.gradgradcheck(lambda a: (a**3).sin(), (x,), check_batched_grad=True)


@LIBS
def test_forward_mode_uses_a_custom_functions_jvp(lib):
    wrong = doubler(lib, jvp=lambda ctx, t: t * 3)
    for fast in (False, True):
        with pytest.raises(
            failure(lib),
            match="Jacobian computed with forward mode mismatch for output 0 with respect to input 0",
        ):
            lib.autograd.gradcheck(wrong.apply, (vec(lib),), check_forward_ad=True, fast_mode=fast)
    right = doubler(lib, jvp=lambda ctx, t: t * 2)
    assert lib.autograd.gradcheck(right.apply, (vec(lib),), check_forward_ad=True)
    with pytest.raises(NotImplementedError, match="must implement the jvp function"):
        lib.autograd.gradcheck(doubler(lib).apply, (vec(lib),), check_forward_ad=True)


@LIBS
def test_fast_mode_reports_the_slow_mode_jacobians(lib):
    wrong = doubler(lib, lambda ctx, g: g * 3)
    with pytest.raises(failure(lib)) as err:
        lib.autograd.gradcheck(wrong.apply, (vec(lib),), fast_mode=True)
    msg = str(err.value)
    assert msg.startswith("Jacobian mismatch for output 0 with respect to input 0,")
    assert "in fast mode" in msg and "recompute numerical and analytical jacobians in slow mode" in msg
    assert lib.autograd.gradcheck(wrong.apply, (vec(lib),), raise_exception=False) is False


@LIBS
def test_gradgradcheck_catches_a_wrong_second_derivative(lib):
    class Square(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * 2 * a.detach()  # right first derivative, no second

    x = vec(lib)
    assert lib.autograd.gradcheck(Square.apply, (x,))
    with pytest.raises(failure(lib), match="Jacobian mismatch for output 0 with respect to input 0"):
        lib.autograd.gradgradcheck(Square.apply, (x,))


@LIBS
def test_outputs_and_options_are_checked_as_in_pytorch(lib):
    with pytest.raises(failure(lib), match="Numerical gradient for function expected to be zero"):
        lib.autograd.gradcheck(lambda a: a.detach() * 2, (vec(lib),))
    assert lib.autograd.gradcheck(lambda a: (a * 2, a.argmax()), (vec(lib),))
    with pytest.raises(ValueError, match="but none of them have requires_grad=True"):
        lib.autograd.gradcheck(lambda a: a * 2, (vec(lib, requires_grad=False),))
    with pytest.raises(AssertionError, match="at least one of check_forward_ad or check_backward_ad"):
        lib.autograd.gradcheck(lambda a: a, (vec(lib),), check_backward_ad=False)
    with pytest.raises(AssertionError, match="check_batched_forward_grad=True requires check_forward_ad"):
        lib.autograd.gradcheck(lambda a: a, (vec(lib),), check_batched_forward_grad=True)
    with pytest.warns(UserWarning, match="is not a double precision floating point"):
        lib.autograd.gradcheck(lambda a: a * 2, (lib.tensor([1.0, 2.0], requires_grad=True),), atol=1e-1)


def test_the_numerical_jacobian_of_a_float32_input_matches_pytorchs():
    """In place perturbation rounds as PyTorch's does: same numerical Jacobian in float32."""
    torch = pytest.importorskip("torch")
    found = []
    for lib in (ngrad, torch):
        with pytest.raises(failure(lib)) as err, pytest.warns(UserWarning):
            lib.autograd.gradcheck(lambda a: a * 2, (lib.tensor([1.0, 2.0], requires_grad=True),))
        found.append(str(err.value).split("numerical:")[1].split("analytical")[0].split("dtype")[0])
    assert found[0] == found[1]


def test_batched_forward_mode_through_a_custom_function_is_a_clear_error():
    right = doubler(ngrad, jvp=lambda ctx, t: t * 2)
    with pytest.raises(failure(ngrad), match="do not go through the custom Function"):
        ngrad.autograd.gradcheck(right.apply, (vec(ngrad),), check_forward_ad=True, check_batched_forward_grad=True)
    np.testing.assert_allclose(
        ngrad.autograd.functional.jacobian(lambda a: a * 2, vec(ngrad), vectorize=True, strategy="forward-mode"),
        2 * np.eye(3),
    )


# --- autograd.functional in strict mode ----------------------------------------------------------

STRICT_CASES = {  # name: (function of two inputs, scalar version for hessian/hvp/vhp)
    "independent": (lambda a, b: a * 2, lambda a, b: (a**2).sum()),
    "detached": (lambda a, b: a.detach() * 2 + b.detach(), lambda a, b: (a.detach() ** 2).sum()),
    "linear": (lambda a, b: a * 2 + b, lambda a, b: (a * 2 + b).sum()),
}


def strict_error(lib, fn, case, create_graph):
    """The message of ``lib.autograd.functional.<fn>(..., strict=True)`` on ``case``, or None."""
    F = lib.autograd.functional
    x, y, v = vec(lib, (1.0, 2.0), False), vec(lib, (3.0, 4.0), False), vec(lib, (1.0, 1.0), False)
    plain, scalar = STRICT_CASES[case]
    f = scalar if fn in ("hessian", "hvp", "vhp") else plain
    try:
        if fn in ("jacobian", "hessian"):
            getattr(F, fn)(f, (x, y), strict=True, create_graph=create_graph)
        elif fn == "vjp":
            F.vjp(f, (x, y), v, strict=True, create_graph=create_graph)
        else:
            getattr(F, fn)(f, (x, y), (v, v), strict=True, create_graph=create_graph)
    except RuntimeError as e:
        return str(e)
    return None


@pytest.mark.parametrize("fn", ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"])
def test_strict_mode_messages_are_pytorchs(fn):
    found = {(c, g): strict_error(ngrad, fn, c, g) for c in STRICT_CASES for g in (False, True)}
    # standalone: what PyTorch's documentation of strict mode promises, worded as PyTorch does
    assert "does not require gradients" in found[("detached", False)]
    if fn in ("vjp", "jacobian", "jvp"):
        assert found[("linear", False)] is None  # a linear function is fine without create_graph
        assert (
            "independent of input 0. This is not allowed in strict mode when create_graph=True"
            in (found[("linear", True)])
        )
    else:
        assert (
            "found that the jacobian of the user-provided function with respect to input 0"
            in (found[("linear", False)])
        )
    torch = pytest.importorskip("torch")
    assert found == {(c, g): strict_error(torch, fn, c, g) for c in STRICT_CASES for g in (False, True)}


def test_strict_mode_refuses_vectorize_and_forward_mode_as_pytorch_does():
    F = ngrad.autograd.functional
    x = vec(ngrad, (1.0, 2.0))
    with pytest.raises(RuntimeError, match=r"`strict=True` and `vectorized=True` are not supported together"):
        F.jacobian(lambda a: a * 2, x, strict=True, vectorize=True)
    with pytest.raises(RuntimeError, match=r'`strict=True` and `strategy="forward-mode"` are not supported'):
        F.jacobian(lambda a: a * 2, x, strict=True, vectorize=True, strategy="forward-mode")
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not require gradients"):
        F.jacobian(lambda a: a.detach(), x, strict=True, vectorize=True)  # the outputs are checked first
