"""Grad modes as PyTorch has them: ``no_grad``, ``enable_grad``, ``set_grad_enabled`` and
``inference_mode`` as decorators of functions, generators (their mode holds inside across
yields, values sent and exceptions thrown in included) and classes (PyTorch's FutureWarning);
``inference_mode(False)`` nested inside ``inference_mode()``. Each case runs on ngrad and, where
it is installed, on PyTorch."""

import pytest

from .oracles import LIBS


def modes(lib):
    return (lib.is_grad_enabled(), lib.is_inference_mode_enabled())


@LIBS
@pytest.mark.parametrize(
    "name, inside", [("no_grad", (False, False)), ("enable_grad", (True, False)), ("inference_mode", (False, True))]
)
def test_a_decorated_generator_keeps_its_mode_across_yields(lib, name, inside):
    @getattr(lib, name)()
    def gen(n):
        """Yields the modes it sees."""
        total = 0
        for _ in range(n):
            try:
                got = yield modes(lib)
                total += got or 0
            except ValueError:
                yield ("thrown", modes(lib))
        return total

    outside = not inside[0]
    with lib.set_grad_enabled(outside):
        it = gen(3)
        seen = [next(it)]
        assert modes(lib) == (outside, False)  # the caller's mode between steps
        seen.append(it.send(5))
        seen.append(it.throw(ValueError("x")))
        assert modes(lib) == (outside, False)
        with pytest.raises(StopIteration) as stop:
            it.send(None)
            it.send(7)
    assert seen == [inside, inside, ("thrown", inside)]
    assert stop.value.value == 12
    assert gen.__name__ == "gen" and gen.__doc__ == "Yields the modes it sees."


@LIBS
def test_decorators_keep_metadata_with_or_without_parentheses(lib):
    @lib.no_grad
    def f(x):
        """Doubles."""
        return x * 2

    @lib.inference_mode()
    def g(x):
        return x * 2

    @lib.set_grad_enabled(False)
    def h(x):
        return x * 2

    assert lib.is_grad_enabled()  # set_grad_enabled as a decorator applies to the calls only
    x = lib.ones(2, requires_grad=True)
    assert not f(x).requires_grad and not g(x).requires_grad and not h(x).requires_grad
    assert (f.__name__, f.__doc__, g.__name__, h.__name__) == ("f", "Doubles.", "g", "h")


@LIBS
@pytest.mark.parametrize("name", ["no_grad", "enable_grad", "inference_mode"])
def test_decorating_a_class_warns_and_wraps_its_constructor(lib, name):
    with pytest.warns(FutureWarning, match="Decorating classes is deprecated"):

        @getattr(lib, name)()
        class Box:
            def __init__(self):
                self.modes = modes(lib)

    assert (
        Box().modes == {"no_grad": (False, False), "enable_grad": (True, False), "inference_mode": (False, True)}[name]
    )


@LIBS
def test_inference_mode_false_inside_inference_mode_records_again(lib):
    seen = []
    w = lib.ones(2, requires_grad=True)
    with lib.inference_mode():
        seen.append(modes(lib))
        with lib.inference_mode(False):
            seen.append(modes(lib))
            y = w * 2
        seen.append(modes(lib))
    with lib.no_grad(), lib.inference_mode(False):
        seen.append(modes(lib))
    assert seen == [(False, True), (True, False), (False, True), (True, False)]
    assert y.requires_grad and not y.is_inference()
    assert lib.inference_mode(False).mode is False and lib.set_grad_enabled(True).mode is True


@LIBS
def test_the_modes_are_one_object_under_each_name(lib):
    grad_mode = lib.autograd.grad_mode
    for name in ("no_grad", "enable_grad", "set_grad_enabled", "inference_mode"):
        assert getattr(grad_mode, name) is getattr(lib, name) is getattr(lib.autograd, name)


@LIBS
def test_inference_tensors_cannot_be_saved_or_updated_outside(lib):
    with lib.inference_mode():
        a = lib.ones(3)
    assert a.is_inference()
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        a.add_(1)
    with pytest.raises(RuntimeError, match="Setting requires_grad=True on inference tensor outside InferenceMode"):
        a.requires_grad_()
    x = lib.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (x * a).sum().backward()
    b = a.clone()
    (x * b).sum().backward()
    assert not b.is_inference()


# --- anomaly mode --------------------------------------------------------------------------------


def anomaly_state(lib):
    mod = lib.autograd.anomaly_mode
    enabled = getattr(lib, "is_anomaly_enabled", None) or mod.is_anomaly_enabled
    check_nan = getattr(lib, "is_anomaly_check_nan_enabled", None) or mod.is_anomaly_check_nan_enabled
    return enabled(), check_nan()


def nan_function(lib):
    class NanGrad(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * 2 + y

        @staticmethod
        def backward(ctx, g):
            return g * 2, g * float("nan")

    return NanGrad


@LIBS
def test_anomaly_mode_names_the_custom_node_and_output_and_shows_its_forward_call(lib):
    x = lib.tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"), lib.autograd.detect_anomaly():
        out = nan_function(lib).apply(x, x * 1)  # the line the warning must show
        with pytest.warns(UserWarning) as caught:
            with pytest.raises(RuntimeError, match=r"Function 'NanGradBackward' returned nan values in its 1th output"):
                out.sum().backward()
    messages = [str(w.message) for w in caught]
    trace = [m for m in messages if m.startswith("Error detected in NanGradBackward. Traceback of forward call")]
    assert trace and "the line the warning must show" in trace[0]
    with lib.autograd.detect_anomaly(check_nan=False):
        y = x * 1
        nan_function(lib).apply(x, y).sum().backward()
    assert x.grad is not None


@LIBS
def test_anomaly_mode_reports_the_forward_call_of_a_backward_that_raises(lib):
    class Boom(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise ValueError("boom")

    x = lib.tensor([1.0], requires_grad=True)
    with pytest.warns(UserWarning), lib.autograd.detect_anomaly():
        y = Boom.apply(x)  # recorded here
        with pytest.warns(UserWarning, match="Error detected in BoomBackward") as caught:
            with pytest.raises(ValueError, match="boom"):
                y.sum().backward()
    assert any("recorded here" in str(w.message) for w in caught)


@LIBS
def test_nested_anomaly_modes_restore_what_they_found(lib):
    seen = []
    with pytest.warns(UserWarning), lib.autograd.detect_anomaly():
        seen.append(anomaly_state(lib))
        with lib.autograd.set_detect_anomaly(False):
            seen.append(anomaly_state(lib)[0])
            with lib.autograd.detect_anomaly(check_nan=False):
                seen.append(anomaly_state(lib))
            seen.append(anomaly_state(lib))
        seen.append(anomaly_state(lib))
    seen.append(anomaly_state(lib))
    assert seen == [(True, True), False, (True, False), (False, True), (True, True), (False, True)]
