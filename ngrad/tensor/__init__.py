"""The facade's tensor: ``ngrad.Tensor`` and the operations on it, with PyTorch's semantics.

An operation computes nothing: it checks its operands, infers the result's shape and dtype (so
errors are raised at the line that caused them), and records a ``Node`` of the lazy graph.
Values are computed when something needs them (``.numpy()``, ``.item()``, ``repr``,
``backward()``...). Composite operations (``mean``, ``softmax``, ``norm``...) are written in
primitives; the last node of a composite carries PyTorch's grad_fn name. The modules, in the
order they build on each other:

- ``record``: making a node from operands (type promotion, broadcasting, shape errors), the
  ``TensorBase`` layout, realizing values, devices;
- ``layout``: strides, storage offsets, storage identities and memory formats;
- ``views``: tensors sharing a base's storage, and how a write through one reaches the base and
  every other view (functionalization);
- ``inplace``: version counters and PyTorch's rules for in-place updates;
- ``functions``: operations with no single owning tensor (``cat``, ``stack``, ``where``...);
- ``indexing``: ``t[key]`` and ``t[key] = value``;
- ``math_ops``, ``reduce_ops``, ``shape_ops``, ``linalg_ops``: the op families of ``Tensor``;
- ``core``: the ``Tensor`` class (metadata, autograd attributes, conversion), made of them.

This package imports the engine; the engine never imports it.
"""

from .core import Tensor
from .functions import cat, concat, concatenate, matmul, meshgrid, nonzero, pow, stack, where
from .record import Size, device

__all__ = [
    "Size",
    "Tensor",
    "cat",
    "concat",
    "concatenate",
    "device",
    "matmul",
    "meshgrid",
    "nonzero",
    "pow",
    "stack",
    "where",
]
