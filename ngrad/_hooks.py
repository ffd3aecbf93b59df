"""Handles of registered hooks (what ``register_hook`` and friends return)."""

import itertools

__all__ = ["RemovableHandle"]

_ids = itertools.count()


class RemovableHandle:
    """Removes one hook from the dict it was registered in; also a context manager that
    removes it on exit.

    ```python
    >>> import ngrad
    >>> x = ngrad.tensor([1.0, 2.0], requires_grad=True)
    >>> with x.register_hook(lambda g: g * 10):
    ...     (x * x).sum().backward()
    >>> x.grad
    tensor([20., 40.])
    >>> x.grad = None
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4.])

    ```
    """

    __slots__ = ("hooks", "id")

    def __init__(self, hooks):
        self.hooks = hooks
        self.id = next(_ids)

    def remove(self):
        self.hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False
