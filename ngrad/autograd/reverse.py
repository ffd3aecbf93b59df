"""Reverse mode for the facade: ``backward`` and ``grad`` with PyTorch's semantics.

Both lower the graph below the outputs to one tape (``grad`` mode: the differentiable path
is recomputed from its leaves), differentiate it into a joint tape, and either run it (one
program computes the unrealized outputs and all gradients) or, with ``create_graph=True``,
record the joint tape as new graph nodes so the gradients can be differentiated again.

Tensor hooks on non-leaf tensors and custom ``Function``s need Python between two parts of the
reverse pass. When the graph holds them, the reverse pass runs in segments: their nodes are
cut points (realized first, read as inputs), the segments run latest first, and each cut
hands its gradient on (through its hooks, or through the Function's ``backward``) as the seed
of the next segment. Every segment is an ordinary joint tape, compiled or interpreted.
A graph more than ``2 * DEEP_SEGMENT`` operations deep is cut the same way every
``DEEP_SEGMENT`` levels (``Node.grad_depth``), so that one segment's program is alive at a time
(unless the gradients are recorded: ``create_graph``, or ``ngrad.compile`` tracing).
"""

import re
import threading
import warnings

import numpy as np

from .. import grad_mode
from .._gc import paused
from ..engine.ir.graph import Node, lower, post_order, replay, source, target_of
from ..engine.runtime import run
from ..engine.runtime.realize import realize
from ..engine.transform import differentiate
from ..engine.transform.batch import batch
from ..grad_mode import Anomaly
from ..tensor.core import Tensor
from ..tensor.inplace import leaf_nodes, replace_node
from ..tensor.record import TORCH_NAME, host_value, value_of, value_on, wrap
from .anomaly_mode import check_nan
from .graph_nodes import AccumulateGrad, GradientEdge
from .meta import FREED, NO_META, PACKED, SEGMENT_NODES, own_meta
from .node_hooks import ctx_post_hooks, ctx_prehooks, node_hooks, run_post_hooks, run_prehooks, run_tensor_hooks
from .saved import reading, through_hooks, unpacked

__all__ = ["FREED", "backward", "current_pass", "grad"]


def _as_tuple(x, what):
    if isinstance(x, (Tensor, GradientEdge)):  # an edge is a tuple, but one input
        return (x,)
    if x is None:
        return ()
    try:
        return tuple(x)
    except TypeError:
        raise TypeError(f"{what} must be a Tensor or a sequence of Tensors, got {type(x).__name__}") from None


def _seeds(outputs, grad_outputs, is_grads_batched):
    """One cotangent tensor per output, PyTorch's ``_make_grads`` checks included."""
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grad_outputs)} gradients")
    seeds = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if g is None:
            if out.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if not out.dtype.is_floating_point:
                raise RuntimeError(f"grad can be implicitly created only for real scalar outputs but got {out.dtype}")
            seeds.append(wrap(source(np.ones(out.shape, out.dtype.np), out.dtype, device=None)))
            continue
        if not isinstance(g, Tensor):
            raise TypeError(f"gradients can be either Tensors or None, but got {type(g).__name__}")
        shape = g.shape[1:] if is_grads_batched else g.shape
        if shape != out.shape:
            if is_grads_batched:
                raise RuntimeError(
                    f"If `is_grads_batched=True`, we interpret the first dimension of each grad_output "
                    f"as the batch dimension. The sizes of the remaining dimensions are expected to "
                    f"match the shape of corresponding output, but a mismatch was detected: "
                    f"grad_output[{i}] has a shape of {g.shape} and output[{i}] has a shape of "
                    f"{out.shape}. If you only want some tensors in `grad_output` to be considered "
                    f"batched, consider using vmap."
                )
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape} and output[{i}] has "
                f"a shape of {out.shape}."
            )
        # a real gradient of another dtype (int, bool) is converted, as PyTorch converts it:
        # PyTorch refuses only a complex/real mismatch, and ngrad has no complex dtypes
        seeds.append(g if g.dtype is out.dtype else g.to(out.dtype))
    if is_grads_batched:
        sizes = {s.shape[0] if s.ndim else None for s in seeds}
        if len(sizes) != 1 or None in sizes:
            raise RuntimeError(
                "is_grads_batched=True requires every grad_output to have the same first (batch) dimension"
            )
    return seeds


def _check_outputs(outputs):
    for i, out in enumerate(outputs):
        if not isinstance(out, Tensor):
            raise TypeError(f"outputs must be Tensors, got {type(out).__name__} at position {i}")
        if not out.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")


def _prepare(outputs, grad_outputs, inputs, retain_graph, create_graph, batched):
    """Shared argument handling of ``backward`` and ``grad``: outputs, seeds, inputs, retain_graph."""
    # an output given as a GradientEdge is the value flowing into that node: its tensor
    outs = tuple(wrap(o.node._node) if isinstance(o, GradientEdge) else o for o in _as_tuple(outputs, "tensors"))
    gos = _as_tuple(grad_outputs, "grad_tensors") if grad_outputs is not None else (None,) * len(outs)
    _check_outputs(outs)
    seeds = _seeds(outs, gos, batched)
    ins = None
    if inputs is not None:
        ins = _as_tuple(inputs, "inputs")
        for t in ins:
            if isinstance(t, GradientEdge):
                continue
            if not isinstance(t, Tensor):
                raise TypeError(f"inputs must be Tensors or GradientEdges, got {type(t).__name__}")
            if not t.requires_grad:
                raise RuntimeError("One of the differentiated Tensors does not require grad")
    return outs, seeds, ins, create_graph if retain_graph is None else retain_graph


def _host_value(n):
    v = n.value
    return v if v.__class__ is np.ndarray or (n.params and n.params.get("scalar")) else host_value(wrap(n))


def stale_error(n):
    """PyTorch's error for a saved value that an in-place operation has changed since."""
    m = n.meta or NO_META
    vc, version = m.stale.counter, m.stale.version
    # PyTorch names the node without its "Backward0" suffix here
    name = re.sub(r"Backward\d*$", "", m.name or n.op.capitalize())
    which = f", which is output 0 of {name}," if n.differentiable else ""
    return RuntimeError(
        f"one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [torch.{TORCH_NAME[n.dtype.short]}Tensor [{', '.join(map(str, n.shape))}]]"
        f"{which} is at version {vc.value}; expected version {version} instead. Hint: enable "
        f"anomaly detection to find the operation that failed to compute its gradient, with "
        f"ngrad.autograd.set_detect_anomaly(True)."
    )


def _check_saved(low, joint):
    """The reverse pass may read only values that are still what they were when recorded."""
    saved = joint.saved
    for n, s in low.slot_of.items():
        m = n.meta or NO_META
        if (m.stale is not None or m.is_inference) and s in saved:
            if m.is_inference:
                raise RuntimeError(
                    "Inference tensors cannot be saved for backward. Please do not use Tensors created in "
                    "inference mode in computation tracked by autograd. To work around this, you can make a "
                    "clone to get a normal tensor and use it in autograd, or use `ngrad.no_grad()` instead of "
                    "`ngrad.inference_mode()`."
                )
            # the in-place operation's own result read the old value legitimately
            allowed = m.stale.readers(n)
            for i in saved[s]:
                reader = low.node_of_instr.get(i)
                if id(reader) not in allowed and not through_hooks(reader):
                    raise stale_error(n)
    for i in joint.reads_saved:
        n = low.node_of_instr.get(i)
        if n is not None and (n.meta or NO_META).freed and (n.meta or NO_META).saves:
            raise RuntimeError(FREED)


def _reverse(roots, seed_nodes, targets, retain_graph, create_graph, batched, cuts=(), ran=None):
    """Cotangents of ``targets`` (nodes) from the graph below ``roots`` seeded with
    ``seed_nodes``; None for a target not on a differentiable path. ``cuts``: see ``lower``.
    ``ran``: a list that collects the nodes to free, instead of freeing them now (a node can
    take part in several segments of one pass)."""
    if grad_mode.state.trace is None:
        # a target's own value is what its cotangent is taken at: computed once here, so the tape
        # starts at it (see lower's wrt) and a loop differentiating its latest value stays flat
        realize([n for n in targets if n.value is None and n.differentiable])
    low = lower(roots, grad=True, cuts=cuts, wrt=targets)
    wrt = [low.slot_of.get(n) for n in targets]
    present = [w for w in wrt if w is not None]
    joint = differentiate.joint(low.tape, present, keep=grad_mode.state.trace is not None)
    # unpack hooks run when the pass runs the gradients that read their values; what they return
    # is what those gradients read
    subs = unpacked(low, joint) if PACKED[0] else ()
    _check_saved(low, joint)
    if Anomaly.enabled and Anomaly.check_nan and not batched:
        realize(list(seed_nodes))
        check_nan(low, joint, [_host_value(n) for n in low.sources] + [_host_value(n) for n in seed_nodes])

    pos = dict(zip(present, joint.grads))
    n_out = len(roots)
    tape, extra = reading(joint.tape, len(low.tape.instrs), subs) if subs else (joint.tape, [])
    if create_graph or grad_mode.state.trace is not None:
        # recorded, not run: to differentiate again, or because ngrad.compile is tracing
        known = {s: n for n, s in low.slot_of.items() if n.value is None or n.differentiable}
        if batched:
            tape, _ = batch(tape, set(joint.seeds), seed_nodes[0].shape[0])
            known = None
        with grad_mode.set_grad_enabled(create_graph):
            nodes = replay(tape, low.sources + seed_nodes + extra, create_graph, known)
        result = [None if w is None or pos[w] is None else nodes[pos[w]] for w in wrt]
        _allow_readers(result, low.slot_of)
    else:
        if batched:
            tape, _ = batch(tape, set(joint.seeds), seed_nodes[0].shape[0])
        realize(seed_nodes + extra)
        values = [n.value for n in low.sources + seed_nodes + extra]
        values = run(tape, values, target_of(roots))
        for r, v in zip(roots, values[:n_out]):
            if r.value is None:
                r.value = v
        # a gradient lives where its tensor does (a 0-d CPU tensor can take part in a GPU graph)
        result = [
            None if w is None or pos[w] is None else source(value_on(values[pos[w]], n.device), n.dtype)
            for w, n in zip(wrt, targets)
        ]
    if not retain_graph:
        for i in joint.ran:
            n = low.node_of_instr.get(i)
            if n is not None:
                if ran is None:
                    _free(n)
                else:
                    ran.append(n)
    return result


def _free(n):
    """A pass without ``retain_graph`` ran ``n``'s gradient: its saved values are gone. A node that
    shares its grad_fn name's annotations gets their freed twin (a copy per node cost a backward
    through 100,000 operations a tenth of its time, and the memory of 100,000 copies)."""
    m = n.meta
    if m is not None and m.shared:
        twin = _FREED.get(m)
        if twin is None:
            twin = _FREED[m] = m.copy()
            twin.freed = twin.shared = True
        n.meta = twin
        return
    m = own_meta(n)
    m.freed = True
    if m.fn is not None and m.fn.packed:
        m.fn.packed = ()


_FREED = {}  # shared annotations -> their shared, freed twin


def _allow_readers(outputs, graph):
    """The gradient graph just recorded reads saved values that ``_check_saved`` let through, as
    they were (PyTorch keeps its saved copies): its readers of a value an in-place update made
    stale since are legitimate, so differentiating it again does not raise."""
    stack, seen = [n for n in outputs if n is not None], set()
    while stack:
        m = stack.pop()
        if id(m) in seen or m in graph:
            continue
        seen.add(id(m))
        for s in m.srcs:
            stale = (s.meta or NO_META).stale
            if stale is not None:
                stale.readers(s).add(id(m))
            stack.append(s)


def _parents(v):
    """Where the gradient of graph vertex ``v`` flows: a node's sources (or the context of the
    custom Function that made it); a context's tensor inputs."""
    if isinstance(v, Node):
        ctx = (v.meta or NO_META).ctx
        if ctx is not None:
            return (ctx,)
        return [s for s in v.srcs if s.requires_grad] if v.differentiable else ()
    return [n for n in v._input_nodes if n is not None and n.requires_grad]


def _units(roots, targets, deep=False):
    """The cut points below ``roots`` (non-leaf nodes with tensor or grad_fn hooks, the sources
    of a node with grad_fn hooks, custom Function contexts; with ``deep``, also every node whose
    ``grad_depth`` is a multiple of ``DEEP_SEGMENT``) from which a gradient flows on to one of
    ``targets`` (PyTorch's engine runs no other node), each before every unit its gradient flows
    into (reverse post-order, iterative)."""
    post = post_order([r for r in roots if r.requires_grad], _parents)
    wanted, needed, relays = set(targets), set(), set()
    if deep:  # segment ends, not points where Python runs: a root is where a segment starts
        starts = set(roots)
        relays.update(v for v in post if v not in starts and _deep_cut(v))
    for v in post:  # the vertices a vertex's gradient flows into come before it
        if v in wanted or any(p in needed for p in _parents(v)):
            needed.add(v)
        if isinstance(v, Node) and v.differentiable and (v.meta or NO_META).ctx is None and node_hooks(v, "hooks"):
            relays.update(s for s in v.srcs if s.differentiable)
    return [v for v in reversed(post) if v in needed and (not isinstance(v, Node) or v in relays or _is_cut(v))]


# A reverse pass through a graph deeper than two segments (``Node.grad_depth``) runs in segments of
# this many levels, cut at the nodes whose grad_depth is a multiple of it: one joint tape at a time
# is alive, so a backward through 100,000 operations peaks at the recorded graph plus one segment's
# program (it held the whole joint tape of 700,000 instructions: 3.5 KB an operation)
DEEP_SEGMENT = 4096


def _deep_cut(v):
    if not isinstance(v, Node) or not v.differentiable or (v.meta or NO_META).ctx is not None:
        return False
    level = getattr(v, "grad_depth", 0)  # (a node built field by field has none)
    return level > 0 and level % DEEP_SEGMENT == 0


def _is_deep(roots, create_graph):
    """Whether the reverse pass from ``roots`` runs in segments of ``DEEP_SEGMENT`` levels: only
    when it runs now (a recorded gradient graph, ``create_graph`` or tracing, is kept whole)."""
    if create_graph or grad_mode.state.trace is not None:
        return False
    return max((getattr(r, "grad_depth", 0) for r in roots), default=0) > 2 * DEEP_SEGMENT


def _position_grads(u, through):
    """The gradient flowing into each source position of node ``u`` (None where none does), as
    PyTorch's ``grad_inputs``; ``through(node, wrt)`` runs the reverse pass of one node. Where a
    source repeats (``x * x``) a stand-in for ``u`` (same annotations) reads it through one
    identity reshape per position (lowering keeps them apart), whose gradients are the positions'."""
    needs = [s for s in u.srcs if s.requires_grad]
    if len(set(needs)) == len(needs):
        found = dict(zip(needs, through(u, needs)))
        return [found.get(s) for s in u.srcs]
    srcs = [Node("reshape", (s,), {"shape": s.shape}, s.shape, s.dtype, True) if s.requires_grad else s for s in u.srcs]
    v = Node(u.op, tuple(srcs), u.params, u.shape, u.dtype, True)
    v.meta = u.meta
    wrt = [s for s in srcs if s.requires_grad]
    found = dict(zip(wrt, through(v, wrt)))
    return [found.get(s) for s in srcs]


def _is_cut(v):
    """A node the pass must stop at: tensor hooks, or grad_fn hooks (a custom Function's output
    only for tensor hooks: its grad_fn hooks run around its context's backward)."""
    if not v.differentiable:
        return False
    m = v.meta or NO_META
    return bool(m.hooks) or (m.ctx is None and bool(node_hooks(v, "hooks") or node_hooks(v, "prehooks")))


class _Pass:
    """One backward pass (PyTorch's graph task): ``at_end`` holds callables run when it ends."""

    __slots__ = ("at_end",)

    def __init__(self):
        self.at_end = []


_passes = threading.local()


def current_pass():
    """The innermost backward pass running on this thread (None outside one)."""
    stack = getattr(_passes, "stack", None)
    return stack[-1] if stack else None


def _gradients(roots, seed_nodes, targets, retain_graph, create_graph, batched):
    """Gradient nodes of ``targets`` (None where none reaches one), tensor hooks applied."""
    stack = getattr(_passes, "stack", None)
    if stack is None:
        stack = _passes.stack = []
    this = _Pass()
    stack.append(this)
    try:
        with paused():  # see ngrad/_gc.py
            return _gradients_of(roots, seed_nodes, targets, retain_graph, create_graph, batched)
    finally:
        stack.pop()
        for f in this.at_end:
            f()


def _gradients_of(roots, seed_nodes, targets, retain_graph, create_graph, batched):
    deep = _is_deep(roots, create_graph)
    units = _units(roots, targets, deep) if SEGMENT_NODES or deep else None
    if units:
        result = _segmented(roots, seed_nodes, targets, units, retain_graph, create_graph, batched, deep)
    else:
        result = _reverse(roots, seed_nodes, targets, retain_graph, create_graph, batched)
    for i, (n, g) in enumerate(zip(targets, result)):
        if g is not None and (n.meta or NO_META).hooks and not n.differentiable:
            result[i] = run_tensor_hooks(n, g)
    return result


def _segmented(roots, seed_nodes, targets, units, retain_graph, create_graph, batched, deep=False):
    """The reverse pass in segments between the cut points ``units`` (see module doc; ``deep``:
    some of them cut a deep graph, ``_units``)."""
    cuts = set()
    for u in units:
        cuts.update((u,) if isinstance(u, Node) else u._cut_nodes())
    if deep:  # lowest first, each its own program: none holds more than a segment's graph
        for u in reversed(units):
            if isinstance(u, Node) and u.value is None:
                realize([u])
    realize([c for c in cuts if c.value is None])
    acc, final, ran = {}, {}, []
    wanted = set(targets)

    def segment(rs, seeds, done=None):
        lowered, lowered_seeds = [], []
        for r, g in zip(rs, seeds):
            if (r in cuts and r is not done) or (not r.differentiable and r in wanted):
                # a cut's gradient waits for its unit; a leaf's is the seed itself (no program)
                acc[r] = g if r not in acc else (wrap(acc[r]) + wrap(g))._node
            elif not r.differentiable:
                continue  # a leaf nobody asked for
            else:
                lowered.append(r)
                lowered_seeds.append(g)
        if lowered:
            want = [n for n in dict.fromkeys(list(targets) + list(cuts)) if n is not done]
            res = _reverse(lowered, lowered_seeds, want, retain_graph, create_graph, batched, cuts - {done}, ran)
            for n, g in zip(want, res):
                if g is not None:
                    acc[n] = g if n not in acc else (wrap(acc[n]) + wrap(g))._node

    segment(roots, seed_nodes)
    for u in units:
        if isinstance(u, Node):
            g = acc.get(u)
            if g is not None:
                m = u.meta or NO_META
                final[u] = g = run_tensor_hooks(u, g) if m.hooks else g
                g = run_prehooks(u, g)
                if m.ctx is not None:  # an output of a custom Function: its backward reads this
                    acc[u] = g
                elif node_hooks(u, "hooks"):
                    # the gradients of its sources (cut points too), through the grad_fn's hooks
                    def through(v, wrt):
                        return _reverse([v], [g], wrt, retain_graph, create_graph, batched, cuts - {u}, ran)

                    segment(*run_post_hooks(u, g, _position_grads(u, through)))
                else:
                    segment([u], [g], u)
        else:
            outputs = [spec[0] if spec is not None else None for spec in u._outputs]
            ctx_prehooks(u, outputs, acc)
            roots, seeds = u._backward(acc, create_graph, seed_nodes[0].shape[0] if batched else None)
            segment(*ctx_post_hooks(u, outputs, acc, roots, seeds))
            if not retain_graph:
                u._freed = True
    for n in ran:
        _free(n)
    return [final.get(t, acc.get(t)) for t in targets]


def _accumulate(t, g, create_graph):
    """Add a gradient into ``t.grad``: in place into the same object unless building a graph."""
    trace = grad_mode.state.trace
    if trace is not None:
        trace.note_grad(t)
    if t._grad is None:
        t._grad = wrap(g)
    elif create_graph:
        with grad_mode.enable_grad():
            t._grad = t._grad + wrap(g)
    elif trace is not None:
        replace_node(t._grad, (t._grad + wrap(g))._node)
    else:
        old = t._grad
        if old._node.device == "cuda":  # device arrays have no arithmetic: add on the device
            with grad_mode.no_grad():
                total = realize([(old.detach() + wrap(g))._node])[0]
        else:
            total = value_of(old) + realize([g])[0]
        replace_node(old, source(total, old.dtype))


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of the graph's leaves.

    ``grad_tensors`` holds one cotangent per tensor (None is allowed for one-element tensors);
    ``inputs`` restricts which tensors get ``.grad`` (non-leaf tensors included).

    ```python
    >>> import ngrad
    >>> x = ngrad.tensor([1.0, 2.0], requires_grad=True)
    >>> ngrad.autograd.backward((x * x).sum())
    >>> x.grad
    tensor([2., 4.])

    ```
    """
    if grad_variables is not None:
        grad_tensors = grad_variables
    if inputs is not None and len(_as_tuple(inputs, "inputs")) == 0:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    outputs, seeds, owners, retain_graph = _prepare(tensors, grad_tensors, inputs, retain_graph, create_graph, False)
    if owners is None:
        low_nodes = _leaves_and_retained(outputs)
        owners = [n.meta.owner() for n in low_nodes]
        pairs = [(t, n) for t, n in zip(owners, low_nodes) if t is not None]
    else:
        pairs = []
        for t in owners:
            if isinstance(t, GradientEdge):  # a leaf's accumulates into it; a non-leaf's goes nowhere
                pairs.append((t.node.variable if isinstance(t.node, AccumulateGrad) else None, t.node._node))
            else:
                pairs.extend((t, n) for n in leaf_nodes(t))
    with grad_mode.set_grad_enabled(create_graph):
        result = _gradients(
            [o._node for o in outputs],
            [s._node for s in seeds],
            [n for _, n in pairs],
            retain_graph,
            create_graph,
            False,
        )
        for (t, n), g in zip(pairs, result):
            if g is not None and t is not None:
                g = run_prehooks(n, g)
                _accumulate(t, g, create_graph)
                if node_hooks(n, "hooks"):
                    for hook in list(node_hooks(n, "hooks").values()):
                        hook((), (wrap(g),))
                post_hooks = (n.meta or NO_META).post_hooks
                if post_hooks:
                    for hook in list(post_hooks.values()):
                        hook(t)


def _leaves_and_retained(outputs):
    """Leaf nodes (and retain_grad nodes) reachable from the outputs, in a deterministic order."""
    seen, found = set(), []
    stack = [o._node for o in outputs]
    while stack:
        n = stack.pop()
        if id(n) in seen or not n.requires_grad:
            continue
        seen.add(id(n))
        owner = (n.meta or NO_META).owner
        if owner is not None and owner() is not None:
            t = owner()
            if not n.differentiable or t._retains_grad:
                found.append(n)
        # first sources last on the stack: leaves are found (and their hooks run) in the order
        # PyTorch's engine reaches them, first input first
        for p in reversed(_parents(n)):
            stack.extend((p,) if isinstance(p, Node) else [x for x in reversed(p._input_nodes) if x is not None])
    return found


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph=False,
    only_inputs=True,
    allow_unused=None,
    is_grads_batched=False,
    materialize_grads=False,
):
    """The gradients of ``outputs`` with respect to ``inputs``, returned (not accumulated).

    ``inputs`` may be a tensor, a sequence of tensors, or a dict of them (then a dict is
    returned). ``is_grads_batched=True`` treats the first dimension of every grad_output as
    a batch of cotangents and computes all of them in one batched reverse program.

    ```python
    >>> import ngrad
    >>> x = ngrad.tensor(3.0, requires_grad=True)
    >>> (dx,) = ngrad.autograd.grad(x ** 3, x, create_graph=True)
    >>> dx, ngrad.autograd.grad(dx, x)[0]
    (tensor(27., grad_fn=<MulBackward0>), tensor(18.))

    ```
    """
    if materialize_grads and allow_unused is False:
        raise ValueError(
            "Expected allow_unused to be True or not passed when materialize_grads=True, but got: allow_unused=False."
        )
    if allow_unused is None:
        allow_unused = materialize_grads
    if not only_inputs:
        warnings.warn(
            "only_inputs argument is deprecated and is ignored now (defaults to True). To accumulate "
            "gradient for other parts of the graph, please use torch.autograd.backward.",
            FutureWarning,
            stacklevel=2,
        )
    keys = None
    if isinstance(inputs, dict):
        keys, inputs = list(inputs.keys()), list(inputs.values())
    if len(_as_tuple(inputs, "inputs")) == 0:
        raise RuntimeError("grad requires non-empty inputs.")
    outs, seeds, ins, retain_graph = _prepare(
        outputs, grad_outputs, inputs, retain_graph, create_graph, is_grads_batched
    )
    # a leaf updated in place is one leaf: graphs recorded before the update reach its older nodes
    # (a GradientEdge names the one node it was taken from)
    nodes = [[t.node._node] if isinstance(t, GradientEdge) else leaf_nodes(t) for t in ins]
    with grad_mode.set_grad_enabled(create_graph):
        found = _gradients(
            [o._node for o in outs],
            [s._node for s in seeds],
            [n for group in nodes for n in group],
            retain_graph,
            create_graph,
            is_grads_batched,
        )
        result, at = [], 0
        for group in nodes:
            parts = [g for g in found[at : at + len(group)] if g is not None]
            at += len(group)
            total = parts[0] if parts else None
            for g in parts[1:]:
                total = (wrap(total) + wrap(g))._node
            result.append(total)
    res = []
    for i, (t, g) in enumerate(zip(ins, result)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                    "Set allow_unused=True if this is the desired behavior."
                )
            if materialize_grads:
                if isinstance(t, GradientEdge):
                    raise RuntimeError("materialize_grads cannot be used when the given input is a GradientEdge")
                # PyTorch's zeros_like(input), with no batch axis even under is_grads_batched
                zero = wrap(source(value_on(np.zeros(t.shape, t.dtype.np), t._node.device), t.dtype))
                res.append(zero.requires_grad_() if create_graph else zero)
            else:
                res.append(None)
        else:
            res.append(wrap(g))
    if keys is not None:
        return dict(zip(keys, res))
    return tuple(res)
