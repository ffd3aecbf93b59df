"""Loops kept as loops: ``ngrad.scan``, PyTorch's ``torch._higher_order_ops.scan`` on ngrad.

Contract: ``scan(combine_fn, init, xs, dim=0, reverse=False)`` calls ``combine_fn`` once, on
placeholder tensors, to record one step as a tape (the *body*), and records one ``scan`` node
that runs that body once per slice of ``xs``. Values, gradients (to ``init``, ``xs`` and every
tensor ``combine_fn`` reads from outside) and forward-mode tangents are those of the written-out
loop; the body is compiled once whatever the number of steps, so a sequence of a new length
compiles nothing and differentiating the loop costs one body's differentiation, not one per step.
What ``combine_fn`` may not do (it runs once, on placeholders): need a value (``.item()``, Python
control flow on a tensor), draw random numbers, or write in place into tensors it did not make.
"""

import numpy as np

from . import grad_mode
from .engine.ir import dtypes as D
from .engine.ir.graph import ON_RECORD, Node, lower, source
from .engine.ir.prims.control import layout
from .engine.ir.tape import Tape
from .tensor.core import Tensor
from .tensor.record import record_op, wrap
from .tracing.trace import Trace, TraceError, restore
from .tracing.trees import build, flatten

__all__ = ["scan"]

_gm = grad_mode.state
_NAME = "ScanAutogradOpBackward"


def scan(combine_fn, init, xs, *, dim=0, reverse=False):
    """Scan ``combine_fn`` over ``xs`` along ``dim``, as ``torch._higher_order_ops.scan.scan``.

    ``combine_fn(carry, x)`` returns ``(next_carry, y)``: ``carry`` has ``init``'s structure (a
    tensor, or tuples, lists and dicts of tensors), ``x`` is one slice of ``xs`` (of the same
    kinds of structure) along ``dim``, ``next_carry`` must match ``carry`` in structure, shapes
    and dtypes. Returns ``(final_carry, ys)``, each leaf of ``ys`` the step's outputs stacked along
    ``dim``. With ``reverse`` the slices are visited from the last to the first (ys keep the
    slices' positions). ``combine_fn`` may read other tensors (weights); gradients reach them.

    ```python
    >>> import ngrad
    >>> w = ngrad.tensor([0.5, 2.0], requires_grad=True)
    >>> def step(h, x):
    ...     h = ngrad.tanh(h * w + x)
    ...     return h, h.sum()
    >>> h, ys = ngrad.scan(step, ngrad.zeros(2), ngrad.ones(4, 2))
    >>> ys.shape
    ngrad.Size([4])
    >>> ys.sum().backward()
    >>> w.grad.shape
    ngrad.Size([2])

    ```
    """
    init_leaves, xs_leaves = [], []
    init_spec, xs_spec = flatten(init, init_leaves), flatten(xs, xs_leaves)
    for what, leaves in (("init", init_leaves), ("xs", xs_leaves)):
        for v in leaves:
            if not isinstance(v, Tensor):
                raise RuntimeError(f"All {what} leaves must be a Tensor but got {v!r}")
    if not xs_leaves:
        raise RuntimeError("ngrad.scan: xs holds no tensor, so the number of steps is unknown")
    moved = [_scanned(x, dim) for x in xs_leaves]
    length = moved[0].shape[0]
    if any(x.shape[0] != length for x in moved):
        counts = [x.shape[0] for x in moved]
        raise RuntimeError(f"ngrad.scan: every xs leaf must have {length} slices along dim {dim}, got {counts}")
    body, invariants, out_spec, made = _record(combine_fn, init_spec, init_leaves, xs_spec, moved)
    args = [t._node for t in init_leaves] + [x._node for x in moved] + invariants
    dtype = D.from_short(body.dtypes[body.outputs[0]]) if body.outputs else D.float64
    # the carries entering each step are kept only for a gradient (see ``ir.prims.control``)
    history = _gm.enabled and dtype.differentiable and any(n.requires_grad for n in args)
    lay = layout(body, length, len(init_leaves), history)
    params = {"body": body.format(), "length": length, "reverse": bool(reverse)}
    params.update(carries=len(init_leaves), xs=len(moved), history=history)

    packed = record_op("scan", tuple(args), params, (lay.size,), dtype, _NAME)._node
    for n in invariants:
        stale = None if n.meta is None else n.meta.stale
        if stale is not None and id(n) in made:
            # a value the step made and then wrote in place (``slice_scatter`` into ``ones_like``):
            # the step reads it as it was, so the scan reads it as an in-place op reads its input
            stale.readers(n).add(id(packed))
    finals = [_part(packed, o, s) for o, s in lay.finals]
    ys = [_part(packed, o, s) for o, s in lay.ys]
    if dim != 0:
        ys = [y.movedim(0, _dim(dim, y.dim())) for y in ys]
    carry_spec, y_spec = out_spec
    return build(carry_spec, iter(finals)), build(y_spec, iter(ys))


def _dim(dim, ndim):
    if not -ndim <= dim < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {dim})")
    return dim % ndim


def _scanned(x, dim):
    """``x`` with its scanned dimension first."""
    if x.dim() == 0:
        raise RuntimeError("All xs leaves must at least have 'dim' number of dimensions and scan dimension > 0")
    d = _dim(dim, x.dim())
    if x.shape[d] == 0:
        raise RuntimeError("All xs leaves must at least have 'dim' number of dimensions and scan dimension > 0")
    return x if d == 0 else x.movedim(d, 0)


def _part(packed, offset, shape):
    """One part of the packed result: a new tensor (not a view: the result is never written)."""
    size = int(np.prod(shape))
    window = {"starts": (offset,), "stops": (offset + size,), "steps": (1,)}
    flat = record_op("slice", (packed,), window, (size,), packed.dtype, _NAME)
    return record_op("reshape", (flat._node,), {"shape": tuple(shape)}, tuple(shape), packed.dtype, _NAME)


def _probe(t, shape):
    """A placeholder for one carry or one slice of xs while the body is recorded."""
    node = source(np.zeros(shape, dtype=t._node.dtype.np), t._node.dtype)
    node.device = t._node.device
    return wrap(node)


def _record(combine_fn, init_spec, init_leaves, xs_spec, moved):
    """Record one step: the body tape (inputs: carries, slices, invariants), the outer nodes of
    its invariants, the (carry, y) specs of its result and the number of ys."""
    probes = [_probe(t, t._node.shape) for t in init_leaves] + [_probe(x, x._node.shape[1:]) for x in moved]
    made, outer = set(), _gm.trace
    hook = ON_RECORD[0]

    def note(node, hook=hook):
        made.add(id(node))
        if hook is not None:
            hook(node)

    trace = Trace()
    trace.traced = {id(p._node) for p in probes} | (outer.traced if outer is not None else set())
    # grad mode stays as the caller has it: work on captured tensors that is hoisted out of the
    # loop (``_body``) keeps its path to them, and the body itself is lowered as plain math
    ON_RECORD[0], _gm.trace = note, trace
    try:
        carry = build(init_spec, iter(probes[: len(init_leaves)]))
        result = combine_fn(carry, build(xs_spec, iter(probes[len(init_leaves) :])))
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise RuntimeError("ngrad.scan: combine_fn must return a tuple (next_carry, y)")
        carry_out, y_out = [], []
        specs = flatten(result[0], carry_out), flatten(result[1], y_out)
        # the nodes now: undoing the trace's in-place updates puts a tensor the step wrote back
        nodes = [t._node if isinstance(t, Tensor) else t for t in carry_out + y_out]
    except TraceError as e:
        raise TraceError(
            "ngrad.scan: combine_fn needed the value of a tensor computed from its carry or its slice of xs "
            "(.item(), float(), printing, or Python control flow on a tensor). Its body is recorded once, "
            "on placeholders: use ngrad.where instead of branching."
        ) from e
    finally:
        ON_RECORD[0], _gm.trace = hook, outer
        restore(trace)
    for ref, old in trace.changed.values():
        if id(old) not in made and ref() is not None:
            raise RuntimeError(
                "ngrad.scan: combine_fn wrote in place into a tensor it did not create (its carry, its "
                "slice of xs, or a tensor from outside); return new tensors instead"
            )
    n_carry = len(carry_out)
    _check_carry(init_leaves, nodes[:n_carry], init_spec, specs[0])
    for y in nodes[n_carry:]:
        if not isinstance(y, Node):
            raise RuntimeError(f"ngrad.scan: every leaf of combine_fn's y must be a Tensor, got {y!r}")
    dtypes = {n.dtype for n in nodes}
    if len(dtypes) > 1:
        names = sorted(str(d) for d in dtypes)
        raise TypeError(f"ngrad.scan: the carries and ys of combine_fn must share one dtype, got {', '.join(names)}")
    body, invariants = _body(probes, nodes)
    return body, invariants, specs, made


def _check_carry(init_leaves, carry_nodes, init_spec, carry_spec):
    if len(carry_nodes) != len(init_leaves) or _shape_free(init_spec) != _shape_free(carry_spec):
        raise RuntimeError("ngrad.scan: Expected init and carry to have the same structure")
    for k, (a, nb) in enumerate(zip(init_leaves, carry_nodes)):
        if not isinstance(nb, Node):
            raise RuntimeError(f"ngrad.scan: every leaf of the carry must be a Tensor, got {nb!r}")
        na = a._node
        if na.shape != nb.shape or na.dtype is not nb.dtype:
            raise RuntimeError(
                f"ngrad.scan: Expected init and carry to have same metadata but found: carry {k} differs: "
                f"{na.dtype}{list(na.shape)} vs {nb.dtype}{list(nb.shape)}"
            )


def _shape_free(spec):
    """A tree spec without the leaves' metadata (structure only)."""
    if spec[0] in ("T", "F", "S"):
        return "leaf"
    if spec[0] == "dict":
        return ("dict", tuple((k, _shape_free(s)) for k, s in spec[1]))
    return (spec[0], tuple(_shape_free(s) for s in spec[1]))


def _body(probes, roots):
    """The body tape over the probes' slots first, then the invariants; and the invariants'
    outer nodes. Work that reads no probe is computed once, before the loop, not in every step."""
    probe_nodes = {id(p._node) for p in probes}
    reaches, frontier = {}, []
    stack = list(roots)
    while stack:  # which pending nodes read a probe (iterative post-order)
        n = stack[-1]
        if id(n) in reaches:
            stack.pop()
            continue
        if n.value is not None or not n.srcs:
            reaches[id(n)] = id(n) in probe_nodes
            stack.pop()
            continue
        todo = [s for s in n.srcs if id(s) not in reaches]
        if todo:
            stack.extend(todo)
            continue
        reaches[id(n)] = any(reaches[id(s)] for s in n.srcs)
        stack.pop()
        if reaches[id(n)]:
            frontier.extend(s for s in n.srcs if s.value is None and s.srcs and not reaches[id(s)])
    frontier.extend(r for r in roots if r.value is None and r.srcs and not reaches[id(r)])
    hoisted = {n: None for n in frontier if _has_source(n)}
    low = lower(roots, reads=hoisted)
    slot = dict(zip(map(id, low.sources), low.tape.inputs))
    tape = low.tape
    body = Tape()
    # shapes as tuples: a device array's shape may be its own sequence type (the CUDA simulator's)
    body.shapes = [tuple(int(d) for d in shape) for shape in tape.shapes]
    body.dtypes, body.instrs, body.outputs = tape.dtypes, tape.instrs, tape.outputs
    for p in probes:
        s = slot.get(id(p._node))
        if s is None:  # a carry or slice the step never reads
            s = len(body.shapes)
            body.shapes.append(tuple(p._node.shape))
            body.dtypes.append(p._node.dtype.short)
        body.inputs.append(s)
        body.kinds.append("tensor")
    invariants = []
    for n, s, k in zip(low.sources, tape.inputs, tape.kinds):
        if id(n) not in probe_nodes:
            body.inputs.append(s)
            body.kinds.append(k)
            invariants.append(n)
    return body.verify(), invariants


def _has_source(n):
    """Whether a value (not only literals) lies below pending node ``n``."""
    stack, seen = [n], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v.value is not None:
            return True
        stack.extend(v.srcs)
    return False
