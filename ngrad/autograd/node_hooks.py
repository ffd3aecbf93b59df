"""Hooks the reverse pass runs where it stops at a cut point: tensor hooks, and the pre-hooks and
hooks of grad_fn objects (``ngrad.autograd.graph.Node``), with PyTorch's arguments, order and
return-value rules.

Contract: each runner takes gradient nodes and returns gradient nodes (a hook may replace them;
a wrong count, type, shape, dtype or device is PyTorch's error). ``node_hooks(v, kind)`` reads
the hooks of a node or of a custom Function context. Nothing here lowers or runs a tape.
"""

from ..tensor.core import Tensor
from ..tensor.record import wrap
from .meta import fn_state_of

__all__ = ["ctx_post_hooks", "ctx_prehooks", "node_hooks", "run_post_hooks", "run_prehooks", "run_tensor_hooks"]


def node_hooks(v, kind):
    """The grad_fn hooks (``"hooks"``) or pre-hooks (``"prehooks"``) of ``v`` (a node or a
    custom Function context), if any."""
    fn = fn_state_of(v)
    return getattr(fn, kind) if fn is not None else None


def _hook_result(hook, got, expected):
    if not isinstance(got, tuple):
        raise TypeError(f"expected tuple, but hook returned '{type(got).__name__}'")
    if len(got) != expected:
        name = getattr(hook, "__name__", repr(hook))
        raise RuntimeError(
            f"hook '{name}' has returned an incorrect number of values (got {len(got)}, but expected {expected})"
        )
    return got


def run_prehooks(n, g):
    """Run the grad_fn pre-hooks of node ``n`` on ``(gradient,)``; one may replace it."""
    hooks = node_hooks(n, "prehooks")
    if not hooks:
        return g
    grads = (wrap(g),)
    for hook in list(hooks.values()):
        r = hook(grads)
        if r is not None:
            grads = _hook_result(hook, r, 1)
    return grads[0]._node if grads[0] is not None else g


def run_post_hooks(n, g, grads):
    """Run the grad_fn hooks of node ``n`` on ``(grad_inputs, grad_outputs)`` (``grads``: one
    gradient node per source position, None where none flows), and return the sources and
    gradients to carry on from."""
    grad_inputs = tuple(None if x is None else wrap(x) for x in grads)
    for hook in list(node_hooks(n, "hooks").values()):
        r = hook(grad_inputs, (wrap(g),))
        if r is not None:
            grad_inputs = _hook_result(hook, r, len(n.srcs))
    pairs = [(s, gi._node) for s, gi in zip(n.srcs, grad_inputs) if gi is not None and s.requires_grad]
    return [s for s, _ in pairs], [gi for _, gi in pairs]


def ctx_prehooks(ctx, outputs, acc):
    """A custom Function's grad_fn pre-hooks: the gradients of all its outputs, replaceable."""
    hooks = node_hooks(ctx, "prehooks")
    if not hooks:
        return
    grads = tuple(wrap(acc[n]) if n in acc else None for n in outputs)
    for hook in list(hooks.values()):
        r = hook(grads)
        if r is not None:
            grads = _hook_result(hook, r, len(outputs))
    for n, g in zip(outputs, grads):
        if n is not None and g is not None:
            acc[n] = g._node


def ctx_post_hooks(ctx, outputs, acc, roots, seeds):
    """A custom Function's grad_fn hooks, on the gradients its ``backward`` returned for its
    tensor inputs (None where none) and those of its outputs; returns what to carry on from."""
    hooks = node_hooks(ctx, "hooks")
    if not hooks:
        return roots, seeds
    inputs = [n for n in ctx._input_nodes if n is not None]
    pending = list(zip(roots, seeds))
    grad_inputs = []
    for n in inputs:  # backward's results, matched to the inputs in order (one input may repeat)
        j = next((j for j, (r, _) in enumerate(pending) if r is n), None)
        grad_inputs.append(None if j is None else wrap(pending.pop(j)[1]))
    grad_inputs = tuple(grad_inputs)
    grad_outputs = tuple(wrap(acc[n]) if n in acc else None for n in outputs)
    for hook in list(hooks.values()):
        r = hook(grad_inputs, grad_outputs)
        if r is not None:
            grad_inputs = _hook_result(hook, r, len(inputs))
    pairs = [(n, g._node) for n, g in zip(inputs, grad_inputs) if g is not None and n.requires_grad]
    return [n for n, _ in pairs], [g for _, g in pairs]


def run_tensor_hooks(n, g):
    """Run the tensor hooks of node ``n`` on gradient node ``g``; a hook may replace it."""
    t = wrap(g)
    for hook in list(n.meta.hooks.values()):
        r = hook(t)
        if r is None:
            continue
        name = getattr(hook, "__name__", repr(hook))
        if not isinstance(r, Tensor):
            raise TypeError(f"expected Tensor, but hook returned '{type(r).__name__}'")
        if r.shape != t.shape:
            raise RuntimeError(f"hook '{name}' has changed the size of value (was {list(t.shape)} got {list(r.shape)})")
        if r.dtype is not t.dtype:
            raise RuntimeError(f"hook '{name}' has changed the type of value (was {t.dtype} got {r.dtype})")
        if r.device != t.device:
            raise RuntimeError(f"hook '{name}' has changed the device of value (was {t.device} got {r.device})")
        t = r
    return t._node
