"""Grad mode: whether operations record gradient edges. Thread-local, as in PyTorch."""

import functools
import inspect
import os
import threading
import traceback
import warnings

from .autograd.meta import own_meta
from .engine.ir import graph as _graph

__all__ = [
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "inference_mode",
    "is_inference_mode_enabled",
]


class _State(threading.local):
    enabled = True
    inference = False
    trace = None  # the ngrad.compile trace recording on this thread, if any


class Anomaly:
    enabled = False  # global, as in PyTorch
    check_nan = True


_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _annotate(node):
    if state.inference:
        own_meta(node).is_inference = True
    if Anomaly.enabled:
        own_meta(node).trace = [f for f in traceback.extract_stack()[:-2] if not f.filename.startswith(_PACKAGE)]


def sync_recording():
    """Annotate new nodes only while a mode needs it (recording stays cheap otherwise)."""
    _graph.ON_RECORD[0] = _annotate if (state.inference or Anomaly.enabled) else None


state = _State()


def is_grad_enabled():
    """True when new operations record gradient edges (the default).

    ```python
    >>> import ngrad
    >>> ngrad.is_grad_enabled()
    True
    >>> with ngrad.no_grad():
    ...     ngrad.is_grad_enabled()
    False

    ```
    """
    return state.enabled


def _in_mode(factory, gen):
    """Run generator ``gen`` with a fresh ``factory()`` context around each of its steps, so the
    mode holds inside it across yields and the caller's mode holds between them (sent values,
    thrown exceptions and ``close`` are passed on)."""
    try:
        with factory():
            response = gen.send(None)
        while True:
            try:
                request = yield response
            except GeneratorExit:
                with factory():
                    gen.close()
                raise
            except BaseException as e:  # thrown at us by the caller: the generator handles it
                with factory():
                    response = gen.throw(e)
            else:
                with factory():
                    response = gen.send(request)
    except StopIteration as e:
        return e.value


def decorate(factory, func):
    """``func`` run inside ``factory()`` (a fresh context manager per call), PyTorch's way: a
    generator function keeps the mode inside its body across yields, a class is wrapped as its
    constructor with PyTorch's FutureWarning, and the wrapper keeps ``func``'s metadata."""
    if inspect.isclass(func):
        warnings.warn(
            "Decorating classes is deprecated and will be disabled in future versions. You should only "
            "decorate functions or methods. To preserve the current behavior of class decoration, you can "
            "directly decorate the `__init__` method and nothing else.",
            FutureWarning,
            stacklevel=3,
        )
        cls = func

        def func(*args, **kwargs):
            return cls(*args, **kwargs)

    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def generator(*args, **kwargs):
            return (yield from _in_mode(factory, func(*args, **kwargs)))

        return generator

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with factory():
            return func(*args, **kwargs)

    return wrapper


class _Mode:
    """A context manager that is also a decorator, with or without parentheses."""

    _mode = True

    def __new__(cls, func=None):
        self = super().__new__(cls)
        self._prev = []
        if func is not None and callable(func) and cls is not set_grad_enabled:
            return self(func)
        return self

    def __enter__(self):
        self._prev.append(state.enabled)
        state.enabled = self._mode

    def __exit__(self, *exc):
        state.enabled = self._prev.pop()
        return False

    def clone(self):
        """A new context manager of the same mode (each decorated call enters its own)."""
        return type(self)()

    def __call__(self, func):
        return decorate(self.clone, func)


class no_grad(_Mode):
    """Context manager and decorator that disables gradient recording.

    ```python
    >>> import ngrad
    >>> x = ngrad.tensor([1.0], requires_grad=True)
    >>> with ngrad.no_grad():
    ...     y = x * 2
    >>> y.requires_grad
    False
    >>> @ngrad.no_grad
    ... def double(t):
    ...     return t * 2
    >>> double(x).requires_grad
    False

    ```
    """

    _mode = False


class enable_grad(_Mode):
    """Context manager and decorator that enables gradient recording (inside ``no_grad``).

    ```python
    >>> import ngrad
    >>> x = ngrad.tensor([1.0], requires_grad=True)
    >>> with ngrad.no_grad():
    ...     with ngrad.enable_grad():
    ...         y = x * 2
    >>> y.requires_grad
    True

    ```
    """

    _mode = True


class set_grad_enabled(_Mode):
    """Set grad mode on or off: as a call it takes effect at once, as a context manager it
    restores the previous mode on exit.

    ```python
    >>> import ngrad
    >>> with ngrad.set_grad_enabled(False):
    ...     ngrad.is_grad_enabled()
    False
    >>> ngrad.is_grad_enabled()
    True

    ```
    """

    def __new__(cls, mode):
        self = object.__new__(cls)
        self._prev = [state.enabled]
        self._mode = self.mode = bool(mode)
        state.enabled = self._mode
        return self

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        state.enabled = self._prev.pop() if self._prev else True
        return False

    def __call__(self, func):
        # as a decorator the switch applies to the calls only, not from here on
        state.enabled = self._prev[-1] if self._prev else True
        return decorate(self.clone, func)

    def clone(self):
        """A new switch to the same mode (it takes effect at once, as the constructor does)."""
        return type(self)(self.mode)


def is_inference_mode_enabled():
    """True inside ``inference_mode``."""
    return state.inference


class inference_mode:
    """Context manager and decorator for code that will never be differentiated: like
    ``no_grad``, and the tensors made inside are inference tensors, which cannot be updated in
    place outside inference mode nor saved for a backward pass (PyTorch's errors).
    ``inference_mode(False)`` leaves inference mode and, as PyTorch's does, turns gradient
    recording on, even inside ``inference_mode()`` or ``no_grad``. As decorators, all the
    modes of this module keep their mode inside a generator across its yields.

    ```python
    >>> import ngrad
    >>> w = ngrad.tensor([2.0], requires_grad=True)
    >>> with ngrad.inference_mode():
    ...     y = w * 3
    >>> y.requires_grad, y.is_inference()
    (False, True)
    >>> @ngrad.inference_mode()
    ... def predict(x):
    ...     return x * w
    >>> predict(ngrad.tensor([1.0]))
    tensor([2.])
    >>> with ngrad.inference_mode():
    ...     with ngrad.inference_mode(False):
    ...         (w * 3).requires_grad
    True

    ```
    """

    def __new__(cls, mode=True):
        self = super().__new__(cls)
        self.mode, self._prev = True, []
        if callable(mode):
            return self(mode)
        self.mode = bool(mode)
        return self

    def __enter__(self):
        # PyTorch's InferenceMode(mode) also sets grad mode to ``not mode``: inference_mode(False)
        # inside inference_mode() (or no_grad) records gradients again
        self._prev.append((state.enabled, state.inference))
        state.enabled, state.inference = not self.mode, self.mode
        sync_recording()

    def __exit__(self, *exc):
        state.enabled, state.inference = self._prev.pop()
        sync_recording()
        return False

    def clone(self):
        """A new context manager of the same mode."""
        return type(self)(self.mode)

    def __call__(self, func):
        return decorate(self.clone, func)
