"""``ngrad.autograd.graph``: the autograd graph's objects and hooks, as ``torch.autograd.graph``.

Contract: ``Node`` is the abstract type of every grad_fn (``tensor.grad_fn``, ``next_functions``
entries, ``AccumulateGrad``); ``GradientEdge``/``get_gradient_edge`` name the place a gradient
flows into, and ``ngrad.autograd.grad``/``backward`` accept them as ``inputs``.
``saved_tensors_hooks`` packs, at recording time, each value the new node's gradient will read
(the values ngrad's gradient rule of its primitive reads, found once per kind of node by
differentiating a one-instruction tape), and the reverse pass unpacks them when it runs that
node's gradient (see docs/autograd-graph.md for how that meets the compiled tape).
``register_multi_grad_hook``, ``allow_mutation_on_saved_tensors`` and ``increment_version``
are built on tensor hooks, saved-tensor hooks and in-place updates.
"""

import abc
import contextlib
import functools
import threading

import numpy as np

from .. import grad_mode
from ..engine.ir.graph import Node as GraphNode
from ..engine.ir.graph import lower
from ..engine.transform import differentiate
from ..tensor.core import Tensor
from ..tensor.record import wrap
from . import reverse
from .graph_nodes import BackwardNode, GradientEdge, grad_fn_of, saved_tensor
from .meta import NAMED_META, NO_META, ON_NAMED, PACKED, fn_state

__all__ = [
    "GradientEdge",
    "Node",
    "allow_mutation_on_saved_tensors",
    "disable_saved_tensors_hooks",
    "get_gradient_edge",
    "increment_version",
    "register_multi_grad_hook",
    "save_on_cpu",
    "saved_tensors_hooks",
]


class Node(abc.ABC):
    """The type of every grad_fn object: ``isinstance(y.grad_fn, ngrad.autograd.graph.Node)``.

    A grad_fn has ``name()``, ``next_functions`` (``(node, output_nr)`` pairs, one per input),
    ``metadata`` (a dict kept with the node), ``register_hook`` and ``register_prehook``, and
    ``_saved_<name>`` attributes for the values PyTorch's node of that name saves.

    ```python
    >>> import ngrad
    >>> x = ngrad.tensor([1.0, 2.0], requires_grad=True)
    >>> y = x.exp()
    >>> isinstance(y.grad_fn, ngrad.autograd.graph.Node), y.grad_fn.name()
    (True, 'ExpBackward0')
    >>> y.grad_fn._saved_result
    tensor([2.7183, 7.3891], grad_fn=<ExpBackward0>)

    ```
    """

    @abc.abstractmethod
    def name(self):
        """The node's name, such as ``'MulBackward0'``."""

    @property
    @abc.abstractmethod
    def next_functions(self):
        """``(node, output_nr)`` for each input the gradient flows on to."""

    @property
    @abc.abstractmethod
    def metadata(self):
        """A dict kept with the node."""

    @abc.abstractmethod
    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs)`` after the node ran."""

    @abc.abstractmethod
    def register_prehook(self, fn):
        """``fn(grad_outputs)`` before the node runs."""


Node.register(BackwardNode)


def get_gradient_edge(tensor):
    """The ``GradientEdge`` of ``tensor``: its grad_fn (``AccumulateGrad`` for a leaf) and its
    output number. The edge stays valid when ``tensor`` is later updated in place.

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.graph import get_gradient_edge
    >>> x = ngrad.tensor([1.0, 2.0], requires_grad=True)
    >>> h = x * 3
    >>> loss = (h * h).sum()
    >>> ngrad.autograd.grad(loss, inputs=[get_gradient_edge(h)])
    (tensor([ 6., 12.]),)

    ```
    """
    if not tensor.requires_grad:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that does not require gradients")
    n = tensor._node
    return GradientEdge(grad_fn_of(n), tensor.output_nr)


# --- saved-tensor hooks ------------------------------------------------------------------------


class _Local(threading.local):
    stack = ()  # (pack, unpack) pairs of the active saved_tensors_hooks, innermost last
    disabled = None  # the message of the innermost disable_saved_tensors_hooks
    packing = False  # a pack hook is running (what it records is not packed again)


_local = _Local()
_active = [0]  # saved_tensors_hooks contexts active, all threads together
_lock = threading.Lock()


def _activate(delta):
    with _lock:
        _active[0] += delta
        # while any thread has hooks, every node that requires grad is named through name_node
        # (no shared NodeMeta), which hands it to _pack_node
        ON_NAMED[0] = _pack_node if _active[0] else None
        if _active[0]:
            NAMED_META.clear()


class saved_tensors_hooks:
    """Call ``pack_hook(tensor)`` for every value an operation recorded in this context saves
    for its gradient, and ``unpack_hook(packed)`` when the gradient reads it, as in PyTorch.

    ``pack_hook`` runs while the operation is recorded; ``unpack_hook`` runs when a backward
    pass runs that node's gradient (once per saved value and pass), and when a ``_saved_*``
    attribute is read. What ``unpack_hook`` returns is what the gradient reads: a custom
    Function's ``ctx.saved_tensors``, and for built-in operations the reverse part of the joint
    tape, rewritten to read it (see docs/autograd-graph.md).

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.graph import saved_tensors_hooks
    >>> log = []
    >>> def pack(t):
    ...     log.append(("pack", tuple(t.shape)))
    ...     return t
    >>> def unpack(t):
    ...     log.append(("unpack", tuple(t.shape)))
    ...     return t
    >>> x = ngrad.tensor([1.0, 2.0], requires_grad=True)
    >>> with saved_tensors_hooks(pack, unpack):
    ...     y = x.exp()
    >>> y.sum().backward()
    >>> log
    [('pack', (2,)), ('unpack', (2,))]

    ```
    """

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        if _local.disabled is not None:
            raise RuntimeError(_local.disabled)
        _local.stack = _local.stack + ((self.pack_hook, self.unpack_hook),)
        _activate(1)

    def __exit__(self, *exc):
        _local.stack = _local.stack[:-1]
        _activate(-1)
        return False


class save_on_cpu(saved_tensors_hooks):
    """Saved values are kept on the CPU and moved back to their device when the gradient reads
    them, as ``torch.autograd.graph.save_on_cpu``. ``pin_memory`` is accepted (ngrad's host
    arrays need no pinning)."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        def pack(t):
            return (t.device, t.detach().cpu())

        def unpack(packed):
            dev, t = packed
            return t.to(dev)

        super().__init__(pack, unpack)


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message):
    """Inside, entering ``saved_tensors_hooks`` raises ``RuntimeError(error_message)`` (and so
    does entering this context while hooks are active), as in PyTorch.

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.graph import disable_saved_tensors_hooks, saved_tensors_hooks
    >>> with disable_saved_tensors_hooks("no hooks here"):
    ...     try:
    ...         with saved_tensors_hooks(lambda t: t, lambda t: t):
    ...             pass
    ...     except RuntimeError as e:
    ...         print(e)
    no hooks here

    ```
    """
    if _local.stack:
        raise RuntimeError(error_message)
    previous, _local.disabled = _local.disabled, error_message
    try:
        yield
    finally:
        _local.disabled = previous


_POSITIONS = {}


def _is_scalar(n):
    return n.op == "const" or (n.op == "input" and n.params is not None and n.params.get("scalar"))


def saved_positions(node):
    """Which values the gradient of ``node`` reads: source positions (last first, as PyTorch
    packs ``other`` before ``self``) then ``"result"``; Python scalars are not saved tensors.
    Found by differentiating a tape of this one node, memoized per kind of node."""
    params = repr(sorted(node.params.items())) if node.params else None
    key = (node.op, params, node.shape, node.dtype)
    key += tuple((s.shape, s.dtype, s.requires_grad, _is_scalar(s)) for s in node.srcs)
    found = _POSITIONS.get(key)
    if found is None:
        if len(_POSITIONS) > 4096:
            _POSITIONS.clear()
        found = _POSITIONS[key] = _reads(node)
    return found


def _reads(node):
    fresh = []
    for s in node.srcs:
        if _is_scalar(s):
            f = s if s.op == "const" else GraphNode("input", (), s.params, (), s.dtype, False, s.value)
        else:
            f = GraphNode("input", (), None, s.shape, s.dtype, False, np.zeros(s.shape, s.dtype.np))
            f.requires_grad = s.requires_grad
        fresh.append(f)
    mini = GraphNode(node.op, tuple(fresh), node.params, node.shape, node.dtype, True)
    low = lower([mini], grad=True)
    joint = differentiate.joint(low.tape, [low.slot_of[f] for f in fresh if f.requires_grad])
    made_by = {ins.out: ins for ins in low.tape.instrs}
    which = {low.slot_of[f]: i for i, f in enumerate(fresh) if not _is_scalar(f)}
    which[low.slot_of[mini]] = "result"
    found = set()
    for s in joint.saved:
        # broadcasting inserted reshape/expand steps: the value saved is their source's
        while s not in which and s in made_by and made_by[s].prim in ("reshape", "expand"):
            s = made_by[s].args[0]
        if s in which:
            found.add(which[s])
    srcs = [i for i in reversed(range(len(fresh))) if i in found]
    return tuple(srcs + (["result"] if "result" in found else []))


def _pack_node(node):
    """``meta.ON_NAMED``: pack what ``node``'s gradient will read with the innermost hooks."""
    if not (node.requires_grad and node.differentiable) or not _local.stack or _local.packing:
        return
    state = fn_state(node)
    if state.packed is not None:  # a composite's last node is named twice
        return
    pack, unpack = _local.stack[-1]
    packed = []
    state.packed = packed
    PACKED[0] = True
    _local.packing = True
    try:
        for which in saved_positions(node):
            t = wrap(node) if which == "result" else saved_tensor(node.srcs[which])
            packed.append((which, pack(t), unpack))
    finally:
        _local.packing = False


def pack_saved(tensors):
    """For a custom Function's ``save_for_backward``: ``(packed, unpack)`` for each tensor (None
    for None) with the innermost active hooks, or None when no hooks are active."""
    if not _local.stack:
        return None
    pack, unpack = _local.stack[-1]
    PACKED[0] = True
    return [None if t is None else (pack(t), unpack) for t in tensors]


# --- hooks on several tensors ------------------------------------------------------------------


class _MultiHandle:
    """Removes every tensor hook one ``register_multi_grad_hook`` call registered."""

    __slots__ = ("handles",)

    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """Call ``fn`` once per backward pass from the gradients of several tensors.

    ``mode="all"``: ``fn(grads)`` with a list of one entry per tensor (None for those the pass
    computed no gradient for), once all of them are known. ``mode="any"``: ``fn(grad)`` with the first
    gradient computed among the tensors. Returns a handle whose ``remove()`` unregisters it.

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.graph import register_multi_grad_hook
    >>> a = ngrad.tensor(2.0, requires_grad=True)
    >>> b = ngrad.tensor(3.0, requires_grad=True)
    >>> seen = []
    >>> h = register_multi_grad_hook((a, b), lambda grads: seen.append(grads))
    >>> (a * 5).backward()
    >>> seen
    [[tensor(5.), None]]

    ```
    """
    if mode not in ("all", "any"):
        raise ValueError(f"Expects mode to be one of ('all', 'any') but got {mode}")
    tensors = tuple(tensors)
    if mode == "any":
        fired = set()

        @functools.wraps(fn)
        def first(grad):
            p = reverse.current_pass()
            if id(p) in fired:
                return
            fired.add(id(p))
            p.at_end.append(lambda: fired.discard(id(p)))
            fn(grad)

        return _MultiHandle([t.register_hook(first) for t in tensors if t.requires_grad])

    if not all(t.requires_grad for t in tensors):  # PyTorch looks up every grad_fn first
        raise AssertionError("Expected gradient function to be set")
    buffers = {}

    def collector(i):
        def hook(grad):
            p = reverse.current_pass()
            buf = buffers.get(id(p))
            if buf is None:
                buf = buffers[id(p)] = [None] * len(tensors)

                def finish():
                    fn(buffers.pop(id(p)))

                p.at_end.append(finish)
            buf[i] = grad

        return hook

    return _MultiHandle([t.register_hook(collector(i)) for i, t in enumerate(tensors)])


# --- mutation of saved values ------------------------------------------------------------------


class _AllowMutation(saved_tensors_hooks):
    """The state of one ``allow_mutation_on_saved_tensors`` context: values saved inside keep
    the value they had when saved, whatever is written into their tensors afterwards."""

    active = None  # the context open on this process, if any

    def __init__(self):
        self.open = False  # backward may unpack only while the context is open

        def pack(t):
            return wrap(t._node)  # the node is immutable: it keeps the value as saved

        def unpack(t):
            if not self.open:
                raise AssertionError(
                    "Trying to backward outside of the 'allow_mutation_on_saved_tensors' context"
                    "in which the graph was originally recorded."
                )
            return t

        super().__init__(pack, unpack)


@contextlib.contextmanager
def allow_mutation_on_saved_tensors():
    """Inside, tensors saved for a gradient may be updated in place: the gradient uses the
    values they had when saved (ngrad's graph nodes are immutable, so nothing is copied).
    Record and run the backward inside the same context, as in PyTorch.

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.graph import allow_mutation_on_saved_tensors
    >>> with allow_mutation_on_saved_tensors():
    ...     a = ngrad.tensor([1.0, 2.0], requires_grad=True)
    ...     b = a.clone()
    ...     out = (b ** 2).sum()
    ...     _ = b.sin_()
    ...     out.backward()
    >>> a.grad
    tensor([2., 4.])

    ```
    """
    if _AllowMutation.active is not None:
        raise RuntimeError("allow_mutation_on_saved_tensors contexts cannot be nested")
    ctx = _AllowMutation()
    with ctx:
        _AllowMutation.active, ctx.open = ctx, True
        try:
            yield ctx
        finally:
            _AllowMutation.active, ctx.open = None, False


def increment_version(tensor):
    """Bump the version counter of ``tensor`` (or of each tensor of an iterable), as an in-place
    update would: a gradient that reads a value saved before then raises PyTorch's error.
    Inference tensors have no version counter and are left alone.

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.graph import increment_version
    >>> t = ngrad.zeros(2)
    >>> increment_version(t)
    >>> t._version
    1

    ```
    """
    from ..tensor.inplace import inplace_update

    for t in (tensor,) if isinstance(tensor, Tensor) else tensor:
        if (t._node.meta or NO_META).is_inference:
            continue
        with grad_mode.no_grad():
            inplace_update(t, t.clone())
