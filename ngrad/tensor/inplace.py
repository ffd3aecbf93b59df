"""In-place updates and version counters, with PyTorch's rules.

Contract: values are immutable, so an in-place op makes the tensor hold a new node
(``replace_node``, which tells an active ``ngrad.compile`` trace and marks the old node
``replaced``). ``inplace_update(t, result)`` applies PyTorch's checks (shape, dtype, leaves,
inference tensors, views), writes through a view into its storage root (``views.write_back``),
bumps the version counter the root shares with its views, marks the old values ``stale`` for
backward and re-derives every live view from the root's new value. ``InplaceOps`` holds the
``*_`` methods and ``+=``-style operators of ``Tensor``.
"""

import weakref

from .. import grad_mode as _grad_mode
from ..autograd.meta import NO_META, REBASED, inherit_leaf, name_node, own_meta
from ..engine.ir import dtypes as D
from ..engine.ir.graph import Node, source
from ..engine.runtime.realize import KEEP_SOURCES
from .functions import pow, where
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
from .views import (
    OVERLAP,
    check_overlap,
    live_views,
    overlaps,
    rebase_error,
    replay,
    splice,
    untracked,
    version_of,
    view_error,
    write_back,
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
    if tr is not None and node.op == "detach" and node.value is None and node.requires_grad and not node.differentiable:
        tr.note_leaf(t, node)  # a leaf written while traced: the program makes that value a leaf again
    if old.requires_grad and not old.differentiable and node.requires_grad and not node.differentiable:
        # a leaf updated in place is the same leaf to autograd.grad: graphs recorded before the
        # update reach its old node (kept only while such a graph holds it)
        earlier = t.__dict__.get("_earlier")
        if earlier is None:
            earlier = t.__dict__["_earlier"] = []
        elif len(earlier) >= 16 and len(earlier) & (len(earlier) - 1) == 0:  # dead ones go as it doubles
            earlier[:] = [r for r in earlier if r() is not None]
        earlier.append(weakref.ref(old))
    if t._retains_grad and node.requires_grad and node.differentiable:
        # retain_grad follows the tensor to its new value, as in PyTorch
        own_meta(old).owner = None
        own_meta(node).owner = weakref.ref(t)


def earlier_nodes(t):
    """A copy of the earlier nodes leaf tensor ``t`` keeps (weak references; see ``replace_node``)."""
    return list(t.__dict__.get("_earlier") or ())


def restore_earlier(t, earlier):
    """Give ``t`` back the earlier nodes ``earlier_nodes`` copied (an ``ngrad.compile`` trace
    undoing its updates: the program's run records its own)."""
    if earlier or t.__dict__.get("_earlier"):
        t.__dict__["_earlier"] = list(earlier)


def same_leaf(t, node):
    """Make ``node`` stand for leaf tensor ``t`` in the graphs that read it, as an earlier node of
    ``t`` (see ``replace_node``): ``autograd.grad`` with respect to ``t`` reaches it."""
    earlier = t.__dict__.get("_earlier")
    if earlier is None:
        earlier = t.__dict__["_earlier"] = []
    earlier.append(weakref.ref(node))


def leaf_nodes(t):
    """The nodes that stand for tensor ``t`` in graphs: its node, and for a leaf updated in place
    the earlier nodes of that leaf that some graph still holds."""
    earlier = t.__dict__.get("_earlier")
    if not earlier:
        return [t._node]
    return [t._node] + [n for n in (r() for r in reversed(earlier)) if n is not None]


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


def root_value(n, m, tracked):
    """The node a storage root holds after an in-place update gave it value ``m``, with
    PyTorch's rules: a leaf stays a leaf; a write autograd does not see (under ``no_grad``, or
    through ``detach()``/``.data``) keeps the old gradient path; a tracked write of a value
    that needs no gradient still makes a tensor that requires grad (its gradient is zero)."""
    if n.requires_grad and not n.differentiable:
        return leaf_update(m, n)
    if not tracked and KEEP_SOURCES[0] and m is not n:
        return splice(n, m)  # forward mode: a write through detach() leaves the tangent as it was
    if not n.requires_grad or m is n:
        return m
    if not tracked or not _gm.enabled:
        with _grad_mode.enable_grad():
            return splice(n, m)
    if not m.requires_grad:
        keep = wrap(expand_node(const_node(True, D.bool_), n.shape))
        return where(keep, wrap(m), wrap(n))._node
    return m


def inplace_update(t, result, uniform=False):
    """Make ``t`` hold ``result`` (a tensor of ``t``'s shape); PyTorch's rules for in-place ops.
    ``uniform``: every element gets the same value (``fill_``), which PyTorch allows even where
    elements of ``t`` share memory (an expanded view).
    Through a view the base's value is rewritten (``views.write_back``) and every live view of
    it reads the new value."""
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
    view = t._view
    if ((view.root._node if view is not None else n).meta or NO_META).is_inference and not _gm.inference:
        raise RuntimeError(
            "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a "
            "clone to get a normal tensor before doing inplace update.See "
            "https://github.com/pytorch/rfcs/pull/17 for more details."
        )
    # a leaf, or a view requires_grad_() made one (a view of a leaf has its own error, view_error)
    if _gm.enabled and n.requires_grad and (not n.differentiable if view is None else view.leaf):
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    if view is None:
        root, m, tracked = t, r, True
    else:
        if not uniform and overlaps(t):
            raise RuntimeError(OVERLAP)
        err = view_error(t, r)
        if err is not None:
            raise err
        root, tracked = view.root, not untracked(view.steps)
        m = write_back(root._node, view.steps, r)
    old = root._node
    new = root_value(old, m, tracked)
    if view is not None and new is not m and new.op == "where":  # a constant written through a view
        name_node(new, "CopySlices")
    vc = version_of(t)
    views = live_views(root)
    # a backward that needs an old value now fails, as in PyTorch, unless the reader is this
    # operation's own result
    depth = 4 + 3 * (len(view.steps) if view is not None else 0)
    # the values earlier writes through views put into the storage are part of it too (a saved
    # exp_() output of a slice): PyTorch's one counter per storage makes them stale as well
    parts = root.__dict__.pop("_parts", ())
    if root._vc is vc:
        own_meta(old).stale = Stale(vc, new, depth, r)
        for p in parts:
            if p.requires_grad and (p.meta or NO_META).stale is None:
                own_meta(p).stale = Stale(vc, new, depth, r)
    if view is not None and r.requires_grad:
        root.__dict__["_parts"] = (r,)
    for u in views:
        if u._vc is vc and u._view is not None:  # a .data alias has its own counter, and autograd does not see it
            own_meta(u._node).stale = Stale(vc, new, depth, r)
    replace_node(root, new)  # before the bump: an ngrad.compile trace notes the version it had
    vc.value += 1
    for u in views:
        if u._view is None:  # an argument ngrad.compile traces as a value of its own
            continue
        before = u._node
        with _grad_mode.set_grad_enabled(u._view.grad):
            node = replay(new, u._view.steps)
        if u._view.leaf:
            node = leaf_update(node, u._node)
        elif u._view.made in ("no_grad", "function") and new.requires_grad and not node.requires_grad:
            node.requires_grad = True  # as when it was made (views.make_view, a custom Function's output)
        if node.requires_grad and u._view.steps and u._view.steps[-1].op != "detach":
            name_node(node, "AsStridedBackward0")  # PyTorch's grad_fn of a view its base's update regenerated
        replace_node(u, node)
        # PyTorch cannot rebuild the grad_fn of some views (made under no_grad, multiple outputs, in
        # a custom Function): using one where autograd records is an error from now on
        rebased = (before.meta or NO_META).rebased or rebase_error(u, before)
        if rebased is not None:
            own_meta(node).rebased = rebased
            REBASED[0] = True
    return t


def named_update(t, name, source=None):
    """``t`` after an in-place op that PyTorch records as one node named ``name`` (``copy_``'s
    ``CopyBackwards``, ``fill_``'s, ``zero_``'s) where ``t`` is not a view (a view's base gets
    ``CopySlices``) and the update was recorded. ``source``: a tensor whose node ``t`` may now
    share, which keeps its own name."""
    n = t._node
    if t._view is None and n.differentiable and _gm.enabled and (source is None or n is not source._node):
        name_node(n, name)
    return t


class Stale:
    """Why a node's value is stale: the version counter and the version it had when an in-place
    update replaced it, and that update's results (the storage root's new value and the op's own
    result). The readers the update itself recorded (the op reading its own input) may still read
    the old value, as PyTorch's in-place ops keep the original ``self`` they need by value
    (``x.mul_(y)`` saves a copy of ``x`` for ``y``'s gradient); they are found only when a backward
    needs them (``readers``), not on every update."""

    __slots__ = ("counter", "version", "new", "result", "depth", "allowed")

    def __init__(self, counter, new, depth, result=None):
        # weakly: a chain of updates must not keep every past value alive through its stale nodes
        self.counter, self.version, self.new, self.depth = counter, counter.value, weakref.ref(new), depth
        # the op's result too: a write through a detach() alias lives on in that alias's history
        # after later writes replaced the root's value that recorded it
        self.result = None if result is None else weakref.ref(result)
        self.allowed = None

    def readers(self, old):
        """Ids of the nodes allowed to read ``old`` (the stale node) in a backward (none once the
        update's results are gone: so are the nodes it recorded)."""
        if self.allowed is None:
            self.allowed = set()
            for ref in (self.new, self.result):
                made = None if ref is None else ref()
                if made is not None:
                    self.allowed |= readers_of(made, old, self.depth)
            self.new = self.result = None
        return self.allowed


def readers_of(new, old, depth=4):
    """Ids of the nodes an in-place update just recorded that read ``old`` (a few levels below
    ``new``: the op itself, a cast, the no_grad history splice, the scatter into a base)."""
    found, stack = set(), [(new, 0)]
    while stack:
        m, level = stack.pop()
        if m is old or level > depth:
            continue
        if any(s is old for s in m.srcs):
            found.add(id(m))
        stack.extend((s, level + 1) for s in m.srcs)
    return found


class InplaceOps:
    """PyTorch's in-place operations (``add_``, ``+=``, ``copy_``...), a mixin of ``Tensor``."""

    __slots__ = ()

    # in place -------------------------------------------------------------------------------------
    # PyTorch's in-place ops. A leaf that requires grad may be updated only under no_grad (the
    # optimizer idiom ``w -= lr * w.grad``); it stays a leaf. Through a view the base and every
    # other view see the update.
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
        check_overlap(self, other)
        return inplace_update(self, self.add(other, alpha=alpha))

    def sub_(self, other, *, alpha=1):
        check_overlap(self, other)
        return inplace_update(self, self.sub(other, alpha=alpha))

    def mul_(self, other):
        check_overlap(self, other)
        return inplace_update(self, self * other)

    def div_(self, other, *, rounding_mode=None):
        check_overlap(self, other)
        return inplace_update(self, self.div(other, rounding_mode=rounding_mode))

    def pow_(self, exponent):
        check_overlap(self, exponent)
        return inplace_update(self, pow(self, exponent))

    def neg_(self):
        return inplace_update(self, -self)

    def zero_(self):
        """Fill with zeros in place; returns self."""
        return named_update(self.fill_(0), "ZeroBackward0")

    def fill_(self, value):
        if isinstance(value, TensorBase):
            if value.dim() != 0:
                raise RuntimeError(
                    f"fill_ only supports 0-dimension value tensor but got tensor with {value.dim()} dimensions."
                )
            inplace_update(self, value.to(self.dtype).expand(self.shape), uniform=True)
            return named_update(self, "FillBackward3", value)
        inplace_update(self, wrap(expand_node(const_node(value, self.dtype), self._node.shape)), uniform=True)
        return named_update(self, "FillBackward2")

    def copy_(self, src):
        """Copy ``src`` (broadcast to this shape, cast to this dtype) into this tensor."""
        check_overlap(self, src)
        given = to_tensor(src)
        src = given.to(self.dtype)
        # expand makes a new node; clone keeps two tensors from sharing one
        inplace_update(self, src.expand(self.shape) if src.shape != self.shape else src.clone())
        return named_update(self, "CopyBackwards", given)

    def clamp_(self, min=None, max=None):
        check_overlap(self, min, max)
        return inplace_update(self, self.clamp(min, max))

    clip_ = clamp_

    def masked_fill_(self, mask, value):
        return inplace_update(self, self.masked_fill(mask, value))

    def clamp_min_(self, min):
        return inplace_update(self, self.clamp(min=min))

    def clamp_max_(self, max):
        return inplace_update(self, self.clamp(max=max))

    def addcmul_(self, tensor1, tensor2, *, value=1):
        check_overlap(self, tensor1, tensor2)
        return inplace_update(self, self.addcmul(tensor1, tensor2, value=value))

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        check_overlap(self, tensor1, tensor2)
        return inplace_update(self, self.addcdiv(tensor1, tensor2, value=value))

    def lerp_(self, end, weight):
        check_overlap(self, end, weight)
        return inplace_update(self, self.lerp(end, weight))

    def __iadd__(self, other):
        check_overlap(self, other)
        return inplace_update(self, self + other)

    def __isub__(self, other):
        check_overlap(self, other)
        return inplace_update(self, self - other)

    def __imul__(self, other):
        check_overlap(self, other)
        return inplace_update(self, self * other)

    def __itruediv__(self, other):
        check_overlap(self, other)
        return inplace_update(self, self / other)

    def __ifloordiv__(self, other):
        check_overlap(self, other)
        return inplace_update(self, self // other)


# PyTorch's in-place forms of out-of-place methods: ``x.exp_()`` is ``x`` updated to ``x.exp()``
IN_PLACE_FORMS = (
    "abs absolute negative exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal square sin cos tan asin acos "
    "atan arcsin arccos arctan sinh cosh tanh sigmoid relu erf sign floor ceil round trunc fix frac nan_to_num tril "
    "triu remainder fmod atan2 arctan2 floor_divide"
).split()


def in_place_form(name):
    """The method ``name_``: ``self`` updated in place to ``self.name(*args, **kwargs)``."""

    def method(self, *args, **kwargs):
        check_overlap(self, *args, *kwargs.values())
        return inplace_update(self, getattr(self, name)(*args, **kwargs))

    method.__name__ = method.__qualname__ = name + "_"
    method.__doc__ = f"In place: ``self`` becomes ``self.{name}(...)``; returns self."
    return method


for _name in IN_PLACE_FORMS:
    setattr(InplaceOps, _name + "_", in_place_form(_name))
