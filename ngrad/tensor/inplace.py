"""In-place updates and version counters, with PyTorch's rules.

Contract: values are immutable, so an in-place op makes the tensor hold a new node
(``replace_node``, which tells an active ``ngrad.compile`` trace and marks the old node
``replaced``). ``inplace_update(t, result)`` applies PyTorch's checks (shape, dtype, leaves,
inference tensors), bumps the version counter ``t`` shares with its ``detach()`` aliases, marks
the old node ``stale`` for backward and updates every alias. ``InplaceOps`` holds the ``*_``
methods and ``+=``-style operators of ``Tensor``.
"""

import weakref

from .. import grad_mode as _grad_mode
from ..autograd.meta import NO_META, inherit_leaf, own_meta
from ..engine.ir.graph import Node, source
from .functions import pow
from .record import (
    TORCH_NAME,
    TensorBase,
    cast_node,
    const_node,
    expand_node,
    is_traced,
    realize_values,
    tensor,
    to_tensor,
    wrap,
)

_gm = _grad_mode.state

replacements = [0]


def replace_node(t, node):
    tr = _gm.trace
    if tr is not None:
        tr.note(t)
    old = t._node
    own_meta(old).replaced = True
    replacements[0] += 1
    t._node = node


def leaf_update(r, n):
    """The node of leaf ``n`` after an in-place update to value ``r``: a leaf again (same
    requires_grad, same owner). Outside a trace the value is computed now, as for
    ``requires_grad_``: a parameter must not chain every past update into its history."""
    if r.value is None and _gm.trace is None:
        realize_values([r])
    if r.value is not None and not is_traced(r):
        leaf = source(r.value, r.dtype)
    else:
        leaf = Node("detach", (r,), None, r.shape, r.dtype)
    leaf.requires_grad = True
    inherit_leaf(leaf, n)
    return leaf


class Version:
    """A version counter: how many in-place updates the value of a tensor has seen (shared by
    a tensor and its ``detach()`` aliases, as in PyTorch)."""

    __slots__ = ("value",)

    def __init__(self):
        self.value = 0


def version_counter(t):
    vc = t._vc
    if vc is None:
        vc = t._vc = Version()
    return vc


def alias(t, other, share_version):
    """Make ``other`` an alias of ``t``: an in-place update of either shows in both."""
    group = t._aliases
    if group is None:
        group = t._aliases = [weakref.ref(t)]
    group.append(weakref.ref(other))
    other._aliases = group
    if share_version:
        other._vc = version_counter(t)
    return other


def follow_alias(u, r):
    """The node of alias ``u`` after its alias was updated in place to ``r``: the same value,
    with ``u``'s own gradient semantics (a leaf stays a leaf, a non-leaf keeps its history)."""
    n = u._node
    value = r if not r.requires_grad else Node("detach", (r,), None, r.shape, r.dtype)
    if not n.requires_grad:
        return value
    if not n.differentiable:
        return leaf_update(value, n)
    with _grad_mode.enable_grad():
        return (wrap(n) + (wrap(value) - wrap(n)).detach())._node


def inplace_update(t, result):
    """Make ``t`` hold ``result`` (a tensor of ``t``'s shape); PyTorch's rules for in-place ops."""
    n = t._node
    r = result._node if isinstance(result, TensorBase) else tensor(result)._node
    if r.shape != n.shape:
        raise RuntimeError(f"output with shape {list(n.shape)} doesn't match the broadcast shape {list(r.shape)}")
    if r.dtype is not n.dtype:
        if r.dtype.category > n.dtype.category:
            raise RuntimeError(
                f"result type {TORCH_NAME[r.dtype.short]} can't be cast to the desired output "
                f"type {TORCH_NAME[n.dtype.short]}"
            )
        r = cast_node(r, n.dtype)
    if (n.meta or NO_META).is_inference and not _gm.inference:
        raise RuntimeError(
            "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a "
            "clone to get a normal tensor before doing inplace update.See "
            "https://github.com/pytorch/rfcs/pull/17 for more details."
        )
    if n.requires_grad and not n.differentiable:
        if _gm.enabled:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        new = leaf_update(r, n)
    elif n.requires_grad and not r.requires_grad:
        # under no_grad a non-leaf keeps its gradient path: new value, old history
        step = wrap(r) - wrap(n)
        with _grad_mode.enable_grad():
            new = (wrap(n) + step.detach())._node
    else:
        new = r
    vc = version_counter(t)
    # a backward that needs the old value now fails, as in PyTorch, unless the reader is this
    # operation's own result
    own_meta(n).stale = (vc, vc.value, readers_of(new, n))
    vc.value += 1
    replace_node(t, new)
    if t._aliases is not None:
        for ref in t._aliases:
            u = ref()
            if u is not None and u is not t:
                old, follow = u._node, follow_alias(u, r)
                if u._vc is vc:  # a .data alias has its own counter, and autograd does not see it
                    own_meta(old).stale = (vc, vc.value - 1, readers_of(follow, old))
                replace_node(u, follow)
    return t


def readers_of(new, old):
    """Ids of the nodes an in-place update just recorded that read ``old`` (a few levels below
    ``new``: the op itself, a cast, the no_grad history splice)."""
    found, stack = set(), [(new, 0)]
    while stack:
        m, depth = stack.pop()
        if m is old or depth > 4:
            continue
        if any(s is old for s in m.srcs):
            found.add(id(m))
        stack.extend((s, depth + 1) for s in m.srcs)
    return found


class InplaceOps:
    """PyTorch's in-place operations (``add_``, ``+=``, ``copy_``...), a mixin of ``Tensor``."""

    __slots__ = ()

    # in place -------------------------------------------------------------------------------------
    # PyTorch's in-place ops. A leaf that requires grad may be updated only under no_grad (the
    # optimizer idiom ``w -= lr * w.grad``); it stays a leaf. Views do not alias (ngrad values are
    # immutable): updating a tensor leaves tensors taken from it unchanged.
    def add_(self, other, *, alpha=1):
        """In place ``self += alpha * other``; returns self.

        ```python
        >>> import ngrad
        >>> w = ngrad.ones(2, requires_grad=True)
        >>> with ngrad.no_grad():
        ...     w.sub_(ngrad.tensor([0.5, 1.0]), alpha=2)
        tensor([ 0., -1.], requires_grad=True)
        >>> w.is_leaf
        True

        ```
        """
        return inplace_update(self, self.add(other, alpha=alpha))

    def sub_(self, other, *, alpha=1):
        return inplace_update(self, self.sub(other, alpha=alpha))

    def mul_(self, other):
        return inplace_update(self, self * other)

    def div_(self, other, *, rounding_mode=None):
        return inplace_update(self, self.div(other, rounding_mode=rounding_mode))

    def pow_(self, exponent):
        return inplace_update(self, pow(self, exponent))

    def neg_(self):
        return inplace_update(self, -self)

    def zero_(self):
        """Fill with zeros in place; returns self."""
        return self.fill_(0)

    def fill_(self, value):
        if isinstance(value, TensorBase):
            if value.dim() != 0:
                raise RuntimeError(
                    f"fill_ only supports 0-dimension value tensor but got tensor with {value.dim()} dimensions."
                )
            return inplace_update(self, value.to(self.dtype).expand(self.shape))
        return inplace_update(self, wrap(expand_node(const_node(value, self.dtype), self._node.shape)))

    def copy_(self, src):
        """Copy ``src`` (broadcast to this shape, cast to this dtype) into this tensor."""
        src = to_tensor(src).to(self.dtype)
        # expand makes a new node; clone keeps two tensors from sharing one
        return inplace_update(self, src.expand(self.shape) if src.shape != self.shape else src.clone())

    def clamp_(self, min=None, max=None):
        return inplace_update(self, self.clamp(min, max))

    clip_ = clamp_

    def masked_fill_(self, mask, value):
        return inplace_update(self, self.masked_fill(mask, value))

    def clamp_min_(self, min):
        return inplace_update(self, self.clamp(min=min))

    def clamp_max_(self, max):
        return inplace_update(self, self.clamp(max=max))

    def addcmul_(self, tensor1, tensor2, *, value=1):
        return inplace_update(self, self.addcmul(tensor1, tensor2, value=value))

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        return inplace_update(self, self.addcdiv(tensor1, tensor2, value=value))

    def lerp_(self, end, weight):
        return inplace_update(self, self.lerp(end, weight))

    def __iadd__(self, other):
        return inplace_update(self, self + other)

    def __isub__(self, other):
        return inplace_update(self, self - other)

    def __imul__(self, other):
        return inplace_update(self, self * other)

    def __itruediv__(self, other):
        return inplace_update(self, self / other)
