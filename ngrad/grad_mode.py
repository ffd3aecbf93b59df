"""Grad mode: whether operations record gradient edges. Thread-local, as in PyTorch."""

import functools
import inspect
import os
import threading
import traceback

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

    def __call__(self, func):
        if inspect.isclass(func):
            raise TypeError(f"{type(self).__name__} can only decorate functions")
        mode = self._mode
        cls = type(self)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            ctx = object.__new__(cls)
            ctx._prev, ctx._mode = [], mode
            with ctx:
                return func(*args, **kwargs)

        return wrapper


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
        self._mode = bool(mode)
        state.enabled = self._mode
        return self

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        state.enabled = self._prev.pop() if self._prev else True
        return False


def is_inference_mode_enabled():
    """True inside ``inference_mode``."""
    return state.inference


class inference_mode:
    """Context manager and decorator for code that will never be differentiated: like
    ``no_grad``, and the tensors made inside are inference tensors, which cannot be updated in
    place outside inference mode nor saved for a backward pass (PyTorch's errors).
    ``inference_mode(False)`` does nothing.

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

    ```
    """

    def __new__(cls, mode=True):
        self = super().__new__(cls)
        self._mode, self._prev = True, []
        if callable(mode):
            return self(mode)
        self._mode = bool(mode)
        return self

    def __enter__(self):
        self._prev.append((state.enabled, state.inference))
        if self._mode:
            state.enabled, state.inference = False, True
            sync_recording()

    def __exit__(self, *exc):
        state.enabled, state.inference = self._prev.pop()
        sync_recording()
        return False

    def __call__(self, func):
        mode = self._mode

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return func(*args, **kwargs)

        return wrapper
