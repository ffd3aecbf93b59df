"""``ngrad.autograd.Variable``: PyTorch's legacy alias of ``Tensor``.

Contract: every tensor is an instance of ``Variable``; ``Variable(t, requires_grad=False)`` is a
new leaf sharing ``t``'s value (its ``detach()``), made to require grad when asked.
"""

from ..factories import tensor as _tensor
from ..tensor.core import Tensor

__all__ = ["Variable"]


class _VariableMeta(type):
    def __instancecheck__(cls, other):
        return isinstance(other, Tensor)

    def __subclasscheck__(cls, other):
        return isinstance(other, type) and issubclass(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """PyTorch's old name of a tensor in the graph, kept for old code: ``isinstance(t, Variable)``
    holds for every tensor, and ``Variable(t, requires_grad=True)`` makes a leaf of ``t``'s value.

    ```python
    >>> import ngrad
    >>> from ngrad.autograd import Variable
    >>> x = ngrad.tensor([1.0, 2.0])
    >>> v = Variable(x, requires_grad=True)
    >>> isinstance(x, Variable), v.requires_grad, v.is_leaf, x.requires_grad
    (True, True, True, False)

    ```
    """

    def __new__(cls, data=None, requires_grad=False, volatile=False):
        if data is None:
            return _tensor([])
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        out = data.detach()
        return out.requires_grad_() if requires_grad else out
