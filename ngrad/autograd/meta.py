"""Autograd's annotations of graph nodes: what the facade knows about a node that the engine does not.

Contract: the engine's ``Node`` has one slot for the facade, ``meta``: None (the common case: a
node with no annotation) or a ``NodeMeta``. Read an annotation with ``(node.meta or NO_META).x``;
write one through ``own_meta(node)``, which gives the node its own, writable ``NodeMeta``.
Recording names grad_fns with ``name_node``: nodes that carry nothing but a grad_fn name share
one read-only ``NodeMeta`` per name (``shared``), so naming costs no allocation per node.
``SEGMENT_NODES`` holds the nodes backward must cut its graph at (see ``ngrad.autograd.reverse``).
"""

import weakref

FREED = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they "
    "have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
    "graph a second time or if you need to access saved tensors after calling backward."
)

__all__ = [
    "FREED",
    "NAMED_META",
    "NO_META",
    "ON_NAMED",
    "PACKED",
    "REBASED",
    "SEGMENT_NODES",
    "FnState",
    "NodeMeta",
    "check_rebased",
    "fn_state",
    "fn_state_of",
    "inherit_leaf",
    "name_node",
    "own_meta",
]


class NodeMeta:
    """The facade's annotations of one node.

    ``name``: PyTorch's grad_fn name (None: derived from the prim); ``hooks``/``post_hooks``:
    tensor hooks and the post-accumulate hooks of a leaf (id -> callable); ``ctx``: the custom
    Function context that produced the node; ``tangent``: (level, tangent node) of a dual tensor
    made by ``forward_ad.make_dual``; ``stale``: a ``Stale`` (``ngrad.tensor.inplace``) once an
    in-place op made the value stale; ``is_inference``: made under ``inference_mode``; ``trace``:
    where it was recorded, under anomaly detection; ``owner``: weakref of the tensor whose
    ``.grad`` receives its gradient; ``saves``: False for composites whose PyTorch counterpart
    saves no tensor (``mean``); ``replaced``: a tensor held the node and was updated in place;
    ``freed``: a backward without ``retain_graph`` consumed it; ``fn``: the ``FnState`` of its
    grad_fn (metadata, node hooks, packed saved values); ``rebased``: PyTorch's message for a view
    that may not be used once its storage was modified in place (see ``check_rebased``);
    ``shared``: read-only, shared between nodes (see ``own_meta``).
    """

    __slots__ = (
        "name",
        "hooks",
        "post_hooks",
        "ctx",
        "tangent",
        "stale",
        "is_inference",
        "trace",
        "owner",
        "saves",
        "replaced",
        "freed",
        "fn",
        "rebased",
        "shared",
    )

    def __init__(self, name=None, shared=False):
        self.name = name
        self.hooks = self.post_hooks = self.ctx = self.tangent = self.stale = self.trace = self.owner = None
        self.fn = self.rebased = None
        self.is_inference = self.replaced = self.freed = False
        self.saves = True
        self.shared = shared

    def copy(self):
        """A writable copy of these annotations."""
        out = NodeMeta()
        for field in NodeMeta.__slots__:
            setattr(out, field, getattr(self, field))
        out.shared = False
        return out


class FnState:
    """What a grad_fn object (``ngrad.autograd.graph.Node``) keeps across accesses: its
    ``metadata`` dict, its pre-hooks and hooks (id -> callable, registration order), and the
    values saved-tensor hooks packed for it (``packed``: ``(which, packed, unpack)`` triples,
    ``which`` a source position or ``"result"``), and a weak reference to the grad_fn object
    while one is alive (``obj``: every access returns that object, as PyTorch's does)."""

    __slots__ = ("metadata", "prehooks", "hooks", "packed", "obj")

    def __init__(self):
        self.metadata, self.prehooks, self.hooks, self.packed, self.obj = {}, {}, {}, None, None


def fn_state(node):
    """The ``FnState`` of ``node``'s grad_fn, made on first use. The outputs of one custom
    Function share one grad_fn, as in PyTorch: its state is kept on their context."""
    ctx = (node.meta or NO_META).ctx
    if ctx is not None:
        state = ctx.__dict__.get("_fn_state")
        if state is None:
            state = ctx._fn_state = FnState()
        return state
    m = own_meta(node)
    if m.fn is None:
        m.fn = FnState()
    return m.fn


def fn_state_of(v):
    """The ``FnState`` of the grad_fn of ``v`` (a graph node, or a custom Function context), or
    None if nothing made one."""
    if hasattr(v, "_input_nodes"):  # a custom Function's context
        return v.__dict__.get("_fn_state")
    m = v.meta or NO_META
    if m.ctx is not None:
        return m.ctx.__dict__.get("_fn_state")
    return m.fn


# the annotations of a node that has none; never written
NO_META = NodeMeta(shared=True)

# one shared NodeMeta per grad_fn name (read directly by the hottest recording paths)
NAMED_META = {}

SEGMENT_NODES = weakref.WeakSet()
"""Non-leaf nodes with tensor hooks and outputs of custom Functions: while one lives, backward
checks whether its graph needs to run in segments."""


def own_meta(node):
    """The writable annotations of ``node`` (made, or copied from shared ones, on first write)."""
    m = node.meta
    if m is None:
        m = node.meta = NodeMeta()
    elif m.shared:
        m = node.meta = m.copy()
    return m


# Set by ngrad.autograd.graph while saved-tensor hooks are active anywhere (NAMED_META is then
# kept empty, so recording names every node through ``name_node``): called with each node named,
# once it is complete, so the hooks can pack what its grad_fn saves.
ON_NAMED = [None]

# Set once saved-tensor hooks packed a value: from then on the reverse pass looks for values to
# unpack in the nodes it runs.
PACKED = [False]


# Set once a view was made unusable by an in-place update of its storage (``rebased``): from then
# on recording checks the sources of what it records (until then it pays nothing for this).
REBASED = [False]


def check_rebased(nodes):
    """PyTorch's error when one of ``nodes`` is a view that was made in ``no_grad`` mode, as one
    of several outputs (``unbind``, ``split``) or by a custom Function, and whose storage an
    in-place operation has modified since: its grad_fn cannot be rebuilt, so using it where
    autograd records (or asking for its ``grad_fn``) is an error."""
    for n in nodes:
        m = n.meta
        if m is not None and m.rebased is not None:
            raise RuntimeError(m.rebased)


def name_node(node, name):
    """Give ``node`` PyTorch's grad_fn ``name`` (recording calls this for every node that
    requires grad, so a node with no other annotation shares its ``NodeMeta``)."""
    if ON_NAMED[0] is not None:
        own_meta(node).name = name
        ON_NAMED[0](node)
        return
    m = node.meta
    if m is None or m.shared:  # every shared NodeMeta but NO_META (never set on a node) is a name
        shared = NAMED_META.get(name)
        if shared is None:
            shared = NAMED_META[name] = NodeMeta(name, shared=True)
        node.meta = shared
    else:
        m.name = name


def inherit_leaf(node, old):
    """Give ``node``, the new node of a leaf tensor, the owner and hooks of its old node ``old``."""
    m = old.meta
    if m is not None and (m.owner is not None or m.hooks is not None or m.post_hooks is not None):
        own = own_meta(node)
        own.owner, own.hooks, own.post_hooks = m.owner, m.hooks, m.post_hooks
    if m is not None and m.fn is not None:  # the leaf's AccumulateGrad node is the same node
        own_meta(node).fn = m.fn
