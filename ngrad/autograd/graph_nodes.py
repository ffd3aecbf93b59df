"""The grad_fn objects: what ``tensor.grad_fn`` and ``next_functions`` return.

Contract: a ``BackwardNode`` is a read-only view of one recorded node that requires grad (its
name is PyTorch's grad_fn name, from the node's annotations); ``AccumulateGrad`` stands for a
leaf, whose gradient is accumulated into its tensor's ``.grad``. Nothing here computes.
"""

from .meta import NO_META

__all__ = ["AccumulateGrad", "BackwardNode"]


class BackwardNode:
    """What ``tensor.grad_fn`` returns: a view of one recorded operation of the graph."""

    __slots__ = ("_node",)

    def __init__(self, node):
        self._node = node

    def name(self):
        n = self._node
        name = (n.meta or NO_META).name or (n.op.capitalize() + "Backward0")
        return "torch::autograd::CopySlices" if name == "CopySlices" else name

    @property
    def next_functions(self):
        out = []
        for s in self._node.srcs:
            if s.differentiable:
                out.append((BackwardNode(s), 0))
            elif s.requires_grad:
                out.append((AccumulateGrad(s), 0))
            else:
                out.append((None, 0))
        return tuple(out)

    @property
    def metadata(self):
        return {}

    def __eq__(self, other):
        return isinstance(other, BackwardNode) and other._node is self._node

    def __hash__(self):
        return id(self._node)

    def __repr__(self):
        return f"<{self.name().rpartition(':')[2]} object at {hex(id(self._node))}>"


class AccumulateGrad(BackwardNode):
    """The ``next_functions`` entry of a leaf: gradients are accumulated into its ``.grad``."""

    __slots__ = ()

    def name(self):
        return "torch::autograd::AccumulateGrad"

    @property
    def variable(self):
        owner = (self._node.meta or NO_META).owner
        return owner() if owner else None

    @property
    def next_functions(self):
        return ()

    def __repr__(self):
        return f"<AccumulateGrad object at {hex(id(self._node))}>"
