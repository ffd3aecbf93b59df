"""Activation checkpointing, as ``torch.utils.checkpoint``: ``checkpoint`` and
``checkpoint_sequential``.

Contract: ``checkpoint(function, *args)`` returns what ``function(*args)`` returns, and every
output tensor that requires grad is a *rematerialization boundary* of the reverse pass. ngrad's
reverse pass runs the joint tape of the graph below the loss (forward values recomputed from the
values it starts from, then the cotangents), and a boundary cuts that tape in two: the values at
the boundary are computed by the forward program and kept, the part above runs as one joint
program, and the part below (the checkpointed function's own operations) runs as another, which
recomputes the function's forward from its inputs only while its gradient is computed. So the
activations inside a checkpointed block are alive only during its own segment of the backward,
which is what lowers the peak memory (measured in docs/checkpoint.md).

``function`` runs once, when ``checkpoint`` is called; the recorded graph is what the backward
recomputes. Random numbers drawn inside it are drawn once, so the recomputation sees the forward's
values whatever ``preserve_rng_state`` says, and the generator is left where the plain call
leaves it. ``use_reentrant=True`` keeps PyTorch's differences of that form: outputs require grad
only when an input does, ``autograd.grad`` and ``backward(inputs=...)`` are refused, and the
grad_fn is ``CheckpointFunctionBackward``.
"""

import sys
import warnings
import weakref

from .. import grad_mode
from ..autograd import reverse
from ..autograd.meta import SEGMENT_NODES, own_meta
from ..engine.ir.graph import Node
from ..tensor.core import Tensor
from ..tensor.record import wrap

__all__ = ["checkpoint", "checkpoint_sequential", "noop_context_fn"]

REENTRANT_GRAD = (
    "When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() or passing an `inputs` "
    "parameter to .backward(). To resolve this error, you can either set use_reentrant=False, or call "
    ".backward() without passing the `inputs` argument."
)


def noop_context_fn():
    """The default ``context_fn``: two contexts that do nothing."""
    import contextlib

    return contextlib.nullcontext(), contextlib.nullcontext()


class _Boundary:
    """The reverse engine's view of one ``checkpoint`` call, shaped as a custom Function's
    context: its outputs are cut points, and its "backward" hands each output's gradient on to
    the tensor ``function`` produced, so the segment below recomputes the function's forward."""

    materialize_grads = False

    def __init__(self, raw, reentrant):
        self._input_nodes = tuple(raw)  # what the gradient flows into: the function's own outputs
        self._outputs = self._tensors = ()
        self._freed = False
        self._reentrant = reentrant

    def _cut_nodes(self):
        return [spec[0] for spec in self._outputs if spec is not None]

    def _backward(self, acc, create_graph, batch=None):
        if self._reentrant and _called_by_grad():
            raise RuntimeError(REENTRANT_GRAD)
        roots, seeds = [], []
        for raw, spec, ref in zip(self._input_nodes, self._outputs, self._tensors):
            # the gradient at a boundary whose tensor is gone cannot be asked for (a requested
            # tensor is alive during the call): drop it here rather than keep it to the pass's end
            g = None if spec is None else (acc.get(spec[0]) if ref() is not None else acc.pop(spec[0], None))
            if g is not None and raw.requires_grad:
                if raw.value is None:  # the reverse pass stores its roots' values: share the cut's array
                    raw.value = spec[0].value
                roots.append(raw)
                seeds.append(g)
        return roots, seeds

    class _cls:  # what forward mode calls: a boundary passes tangents through unchanged
        @staticmethod
        def jvp(ctx, *tangents):
            return tangents


def _called_by_grad():
    """Whether the reverse pass running now is ``autograd.grad`` or ``backward(inputs=...)``
    (PyTorch's ``_is_checkpoint_valid`` is False for both)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code is reverse.grad.__code__:
            return True
        if code is reverse.backward.__code__:
            return frame.f_locals.get("inputs") is not None
        frame = frame.f_back
    return False


def _flatten(out):
    """The tensors of ``out`` (a tensor, or a tuple, list or dict holding some) and a function
    that rebuilds ``out`` from replacements for them."""
    if isinstance(out, Tensor):
        return [out], lambda new: new[0]
    if isinstance(out, (tuple, list)):
        pos = [i for i, o in enumerate(out) if isinstance(o, Tensor)]

        def rebuild(new):
            items = list(out)
            for i, t in zip(pos, new):
                items[i] = t
            return type(out)(items) if type(out) in (tuple, list) else type(out)(*items)

        return [out[i] for i in pos], rebuild
    if isinstance(out, dict):
        keys = [k for k, v in out.items() if isinstance(v, Tensor)]

        def rebuild_dict(new):
            d = dict(out)
            d.update(zip(keys, new))
            return d

        return [out[k] for k in keys], rebuild_dict
    return [], lambda new: out


def _name(node):
    name = node.meta.name if node.meta is not None else None
    return name or node.op.capitalize() + "Backward0"


def _bound(out, args, reentrant):
    """``out`` with each tensor that requires grad (and is not an argument returned as it is)
    replaced by a boundary node reading it."""
    tensors, rebuild = _flatten(out)
    given = {id(a) for a in args if isinstance(a, Tensor)}
    chosen = [t for t in tensors if t.requires_grad and id(t) not in given]
    if not chosen:
        return out
    ctx = _Boundary([t._node for t in chosen], reentrant)
    specs, new, by_id = [], [], {}
    for t in chosen:
        raw = t._node
        node = Node("detach", (raw,), None, raw.shape, raw.dtype, True)
        meta = own_meta(node)
        meta.ctx = ctx
        # PyTorch's names: the reentrant form is a Function, the other keeps the op's own node
        meta.name = "CheckpointFunctionBackward" if reentrant else _name(raw)
        SEGMENT_NODES.add(node)
        specs.append((node, raw.shape, raw.dtype))
        by_id[id(t)] = wrap(node)
    ctx._outputs = tuple(specs)
    ctx._tensors = tuple(weakref.ref(by_id[id(t)]) for t in chosen)
    for t in tensors:
        new.append(by_id.get(id(t), t))
    return rebuild(new)


def checkpoint(
    function,
    *args,
    use_reentrant=None,
    context_fn=noop_context_fn,
    determinism_check="default",
    debug=False,
    early_stop=True,
    **kwargs,
):
    """Run ``function(*args, **kwargs)`` so that the backward recomputes its activations instead
    of keeping them: the values inside it are alive only while its own part of the gradient is
    computed. Gradients are the same as without ``checkpoint``.

    ``use_reentrant`` should be passed (PyTorch warns when it is not, and then uses True);
    ``preserve_rng_state`` is accepted (the recomputation always sees the forward's random
    values); ``context_fn`` gives two context managers, the first entered around ``function``.

    ```python
    >>> import ngrad
    >>> from ngrad.utils.checkpoint import checkpoint
    >>> w = ngrad.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    >>> x = ngrad.tensor([[1.0, 2.0]], requires_grad=True)
    >>> y = checkpoint(lambda h: (h @ w).tanh(), x, use_reentrant=False)
    >>> y.sum().backward()
    >>> w.grad
    tensor([[4.9347e-04, 7.8645e-01],
            [9.8693e-04, 1.5729e+00]])

    ```
    """
    if use_reentrant is None:
        warnings.warn(
            "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. Starting in "
            "PyTorch 2.9, calling checkpoint without use_reentrant will raise an exception. use_reentrant=False "
            "is recommended, but if you need to preserve the current default behavior, you can pass "
            "use_reentrant=True. Refer to docs for more details on the differences between the two variants.",
            stacklevel=2,
        )
        use_reentrant = True
    kwargs.pop("preserve_rng_state", True)
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
        if context_fn is not noop_context_fn or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when use_reentrant=False.")
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)
            with grad_mode.no_grad():
                return function(*args)
        with grad_mode.enable_grad():
            return _bound(function(*args), args, True)
    forward_context, _ = context_fn()
    with forward_context:
        out = function(*args, **kwargs)
    return _bound(out, args, False) if grad_mode.is_grad_enabled() else out


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Run the modules or functions of ``functions`` (a list, or an ``nn.Sequential``) one after
    the other on ``input``, in ``segments`` chunks; every chunk but the last is checkpointed.

    ```python
    >>> import ngrad
    >>> from ngrad.utils.checkpoint import checkpoint_sequential
    >>> x = ngrad.tensor([0.5, 1.0], requires_grad=True)
    >>> layers = [ngrad.tanh, lambda h: h * 3, ngrad.sin, lambda h: h + 1]
    >>> y = checkpoint_sequential(layers, 2, x, use_reentrant=False)
    >>> y.sum().backward()
    >>> x.grad
    tensor([ 0.4327, -0.8251])

    ```
    """
    if use_reentrant is None:
        warnings.warn(
            "torch.utils.checkpoint.checkpoint_sequential: the use_reentrant parameter should be passed "
            "explicitly. In version 2.9 we will raise an exception if use_reentrant is not passed. "
            "use_reentrant=False is recommended, but if you need to preserve the current default behavior, "
            "you can pass use_reentrant=True. Refer to docs for more details on the differences between the "
            "two variants.",
            stacklevel=2,
        )
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
    if hasattr(functions, "children") and not isinstance(functions, (list, tuple)):
        functions = list(functions.children())

    def run(start, end):
        def forward(h):
            for j in range(start, end + 1):
                h = functions[j](h)
            return h

        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant, preserve_rng_state=preserve)
    return run(end + 1, len(functions) - 1)(input)
