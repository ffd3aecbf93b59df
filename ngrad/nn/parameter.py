"""``Parameter`` and ``Buffer``: the tensors a ``Module`` registers when they are assigned to it.

Contract: ``Parameter(data, requires_grad=True)`` is a ``Tensor`` subclass, a new leaf holding
``data``'s value (that requires grad unless told otherwise), printed as ``Parameter containing:``
and the tensor. Operations on it return plain tensors. Unlike PyTorch's, it does not alias
``data``'s storage: an in-place write to one is not seen by the other. (A parameter made as an
alias would be a view to ngrad, and every optimizer update of a view writes its storage root and
derives the view again: about 20 µs per parameter and step, for a sharing nobody uses once the
initial tensor is dropped.) ``Buffer(data, persistent=True)`` marks a tensor to be registered as a module buffer;
as in PyTorch it is a plain ``Tensor`` for which ``isinstance(t, Buffer)`` is true.
"""

import numpy as np

from .. import grad_mode as _grad_mode
from ..engine.ir.graph import source
from ..tensor import Tensor
from ..tensor.record import value_of, wrap

__all__ = ["Parameter", "Buffer"]


class Parameter(Tensor):
    """A tensor that a ``Module`` registers as a parameter when assigned as an attribute.

    ```python
    >>> import ngrad
    >>> p = ngrad.nn.Parameter(ngrad.zeros(2))
    >>> p
    Parameter containing:
    tensor([0., 0.], requires_grad=True)
    >>> type(p * 2).__name__, p.is_leaf
    ('Tensor', True)

    ```
    """

    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            from ..factories import empty

            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(): argument 'data' must be Tensor, not {type(data).__name__}")
        if _grad_mode.state.trace is None:
            t = wrap(source(value_of(data), data.dtype))  # values are immutable: the array is shared, not copied
        else:  # ngrad.compile traces: the value may not exist yet
            t = data.detach().clone()
        t.__class__ = cls
        if requires_grad:
            t.requires_grad_(True)
        return t

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        out = type(self)(self.data.clone(), self.requires_grad)
        memo[id(self)] = out
        return out

    def __reduce_ex__(self, protocol):
        from ..tensor.record import host_value

        return (rebuild_parameter, (np.asarray(host_value(self)), self.dtype, str(self.device), self.requires_grad))


def rebuild_parameter(value, dtype, device, requires_grad):
    """The ``Parameter`` a pickled one describes (what ``Parameter.__reduce_ex__`` names)."""
    from ..factories import tensor

    return Parameter(tensor(value, dtype=dtype, device=device), requires_grad)


class _BufferMeta(type):
    # a Buffer is a plain Tensor flagged as one (PyTorch's design): isinstance reads the flag
    def __instancecheck__(cls, instance):
        if cls is Buffer:
            return isinstance(instance, Tensor) and instance.__dict__.get("_is_buffer", False)
        return super().__instancecheck__(instance)


class Buffer(Tensor, metaclass=_BufferMeta):
    """A tensor that a ``Module`` registers as a buffer when assigned as an attribute
    (``persistent=False`` leaves it out of ``state_dict``).

    ```python
    >>> import ngrad
    >>> m = ngrad.nn.Module()
    >>> m.count = ngrad.nn.Buffer(ngrad.zeros(1))
    >>> list(m.state_dict())
    ['count']

    ```
    """

    __slots__ = ()

    def __new__(cls, data=None, *, persistent=True):
        if data is None:
            from ..factories import empty

            data = empty(0)
        t = data.detach()
        if data.requires_grad:
            t.requires_grad_(True)
        t.__dict__["_is_buffer"] = True
        t.__dict__["persistent"] = persistent
        return t
