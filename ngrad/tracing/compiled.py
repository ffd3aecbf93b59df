"""``CompiledFunction``, what ``ngrad.compile`` returns: choosing a traced variant, or tracing one.

Contract: a call is keyed by its signature (the structure of its arguments, their dtypes,
shapes and ``requires_grad``, static values) and the grad mode. It runs, in order of cost: the
probe of the variant that ran last (``ngrad.tracing.probe``), the first variant of its key
whose guards hold (``Variant.valid``), or a new trace (``_trace``), which runs the function
with a ``Trace`` active, restores the tensors it changed and makes a ``Variant`` of the result.
A key keeps its 8 latest variants, and a function the variants of its ``NGRAD_MEMORY_ENTRIES // 8``
most recently called keys (``Variants``; 128 by default), so one called over ever new shapes
stays bounded: a key dropped is traced again on its next call. A compiled function called while another is traced runs
its Python function, so it is inlined into the outer program.
"""

import functools

import numpy as np

from .. import grad_mode
from .._gc import paused
from ..autograd.meta import NO_META
from ..engine.config import memory_entries
from ..engine.ir import dtypes as D
from ..engine.ir.graph import source
from ..engine.recent import Recent
from ..engine.runtime.realize import realize
from ..tensor.core import Tensor
from ..tensor.record import wrap
from .probe import MISS
from .trace import Stale, Trace, effects, restore
from .trees import build, flatten, hashable, result_spec
from .variant import Variant

__all__ = ["CompiledFunction", "compile"]

_gm = grad_mode.state


class Variants(Recent):
    """A compiled function's variants per call key, the least recently called keys dropped past
    ``NGRAD_MEMORY_ENTRIES // 8`` (a running variant and the last call's probe stay alive)."""

    def bound(self):
        return max(1, memory_entries() // 8)


class CompiledFunction:
    """What ``ngrad.compile(fn)`` returns: call it like ``fn``. See ``ngrad.compile``."""

    def __init__(self, fn, static_argnums=(), static_argnames=()):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.static_argnums = frozenset(static_argnums)
        self.static_argnames = frozenset(static_argnames)
        self.variants = Variants()
        self.traces = 0
        self.probe = None  # the probe of the variant that ran last (see ngrad.tracing.probe)

    def __get__(self, obj, objtype=None):  # decorating a method binds like a function
        return self if obj is None else functools.partial(self, obj)

    def __call__(self, *args, **kwargs):
        probe = self.probe
        if probe is not None and not kwargs:  # the variant of the last call, if it fits again
            try:
                out = probe(args)
                if out is not MISS:
                    return out
            except Stale:
                pass
        if _gm.trace is not None:  # called while tracing another compiled function: inline
            return self.fn(*args, **kwargs)
        if not kwargs and not self.static_argnums:
            key = []
            for a in args:
                if type(a) is Tensor:
                    n = a._node
                    key.append((n.shape, n.dtype, n.requires_grad))
                else:
                    break
            else:
                return self._replay((tuple(key), _gm.enabled), list(args), args, kwargs, None)
        flat = []
        parts = self._spec(args, kwargs, flat)
        return self._replay((parts, _gm.enabled), flat, args, kwargs, parts)

    def _replay(self, key, flat, args, kwargs, parts):
        """Run the first variant of ``key`` whose guards hold, or trace a new one."""
        for v in self.variants.get(key, ()):
            if v.valid(flat):
                try:
                    out = v(flat)
                except Stale:
                    break
                self.probe = v.probe
                return out
        return self._trace(key, flat, args, kwargs, parts)

    def _spec(self, args, kwargs, flat):
        parts = []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                parts.append(("static", hashable(a)))
            else:
                parts.append(flatten(a, flat))
        for k in sorted(kwargs):
            if k in self.static_argnames:
                parts.append((k, "static", hashable(kwargs[k])))
            else:
                parts.append((k, flatten(kwargs[k], flat)))
        return tuple(parts)

    def _trace(self, key, flat, args, kwargs, parts):
        """``parts``: the per-argument structure from ``_spec``, or None for plain tensors."""
        # arguments become sources with values; their nodes are marked as traced
        lazy = [a._node for a in flat if isinstance(a, Tensor) and a._node.value is None]
        if lazy:
            realize(lazy)
        trace = Trace()
        call_flat = list(flat)
        for k, a in enumerate(flat):
            if isinstance(a, Tensor):
                trace.traced.add(id(a._node))
                trace.arg_of.setdefault(id(a._node), k)
            elif type(a) is float:  # a float is a runtime input, like a 0-d float64 tensor
                n = source(np.float64(a), D.float64, scalar=True)
                trace.traced.add(id(n))
                trace.arg_of[id(n)] = k
                call_flat[k] = wrap(n)
        if parts is None:
            call_args, call_kwargs = tuple(call_flat), {}
        else:
            call_args, call_kwargs = self._rebuild(args, kwargs, parts, call_flat)
        # The call records the whole program at once, and it is lowered and compiled in one go,
        # with the collector paused (see ngrad/_gc.py). The recorded graph is dropped before the
        # collector runs again: freed by reference counts, it is never scanned.
        # an argument that views another tensor is the program's own value while it traces: the
        # call's writes to it become an effect written through the view when the program runs
        views = [(a, a._view) for a in flat if isinstance(a, Tensor) and a._view is not None]
        for a, _ in views:
            a._view = None
        with paused():
            _gm.trace = trace
            try:
                result = self.fn(*call_args, **call_kwargs)
            except BaseException:
                _gm.trace = None
                restore(trace)
                raise
            finally:
                for a, v in views:
                    a._view = v
            _gm.trace = None
            found = []
            out_spec = result_spec(result, found)
            roots = [t._node for t in found]
            # outputs stay differentiable only when a gradient could still flow from them: their
            # graph was not consumed by a backward() in the call (see Variant for the second half)
            graph = any(n.requires_grad and not (n.meta or NO_META).freed for n in roots)
            changes, effect_roots, clears = effects(trace, flat)
            position = {id(a): k for k, a in enumerate(flat) if isinstance(a, Tensor)}
            views = {}
            for i, t in enumerate(found):  # outputs that are arguments, or views of one
                if id(t) in position:  # a new tensor that aliases the argument
                    views[i] = (position[id(t)], ())
                elif t._view is not None and id(t._view.root) in position and t._view.base is not None:
                    views[i] = (position[id(t._view.root)], t._view.steps)
            variant = Variant(
                trace,
                flat,
                roots + effect_roots,
                changes + clears,
                out_spec,
                len(roots),
                graph,
                None if kwargs else key,
                parts,
                views,
            )
            restore(trace)
            del trace, result, found, roots, changes, effect_roots, clears, call_args, call_kwargs, call_flat
        self.traces += 1
        variants = self.variants.get(key)
        if variants is None:
            variants = self.variants[key] = []
        if len(variants) >= 8:
            variants.pop(0)
        variants.append(variant)
        out = variant(flat)
        self.probe = variant.probe
        return out

    def _rebuild(self, args, kwargs, parts, call_flat):
        """The call's arguments with their leaves taken from ``call_flat`` (``parts`` as ``_spec``
        made them: positional arguments, then keyword arguments in sorted order)."""
        it = iter(call_flat)
        new_args = tuple(
            a if i in self.static_argnums else build(part, it) for i, (a, part) in enumerate(zip(args, parts))
        )
        new_kwargs = {
            k: kwargs[k] if k in self.static_argnames else build(part[1], it)
            for k, part in zip(sorted(kwargs), parts[len(args) :])
        }
        return new_args, new_kwargs


def compile(
    model=None,
    *,
    static_argnums=(),
    static_argnames=(),
    fullgraph=False,
    dynamic=None,
    backend=None,
    mode=None,
    options=None,
    disable=False,
):
    """Compile ``model`` (a function of tensors) into one program, traced once per signature.

    The first call with a new signature (argument structure, dtypes, ranks, shapes, which tensors
    require grad, grad mode) runs ``model`` once to record it; later calls replay the compiled
    program without running the Python code. Arguments may be tensors, floats (runtime values:
    a new learning rate does not retrace), nested tuples/lists/dicts of them, and hashable
    static values (ints, strings, None: part of the signature). Inside, ``backward()``,
    ``autograd.grad`` and in-place updates under ``no_grad`` work, so a whole training step can
    be one call. Tensors the function captures are read afresh on each call when they require
    grad or are updated by it; other captured tensors are constants of the program (pass data
    that changes as an argument). Asking for a traced value (``.item()``, ``if loss > 0``)
    raises ``TraceError``. The other arguments are PyTorch's and are accepted for compatibility.

    ```python
    >>> import ngrad
    >>> w = ngrad.zeros(3, dtype=ngrad.float64, requires_grad=True)
    >>> @ngrad.compile
    ... def step(x, lr):
    ...     loss = ((w - x) ** 2).sum()
    ...     loss.backward()
    ...     with ngrad.no_grad():
    ...         w.sub_(lr * w.grad)
    ...         w.grad = None
    ...     return loss
    >>> x = ngrad.tensor([1.0, 2.0, 3.0], dtype=ngrad.float64)
    >>> [round(step(x, 0.25).item(), 4) for _ in range(3)]
    [14.0, 3.5, 0.875]
    >>> w
    tensor([0.8750, 1.7500, 2.6250], dtype=ngrad.float64, requires_grad=True)

    ```
    """
    if model is None:
        return lambda fn: compile(
            fn,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
            fullgraph=fullgraph,
            dynamic=dynamic,
            backend=backend,
            mode=mode,
            options=options,
            disable=disable,
        )
    if not callable(model):
        raise TypeError(f"ngrad.compile expects a callable, got {type(model).__name__}")
    if disable:
        return model
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    return CompiledFunction(model, static_argnums, static_argnames)
