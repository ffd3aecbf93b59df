"""Forward-mode automatic differentiation, as ``torch.autograd.forward_ad``.

Inside ``dual_level()``, ``make_dual(x, t)`` attaches the tangent ``t`` to (a view of) ``x``.
Operations record as usual; ``unpack_dual(y)`` lowers the graph between the dual tensors and
``y`` to a tape, maps it to its tangent tape (``engine.differentiate.jvp``, the tangent rules
of the primitive table) and records that tape as new nodes: the tangent is a lazy tensor like
any other, computed in one fused program when needed, and differentiable in reverse mode.
"""

import weakref
from collections import namedtuple

from .. import grad_mode
from ..engine.ir.graph import Node, lower, post_order, replay
from ..engine.runtime.realize import KEEP_SOURCES, realize
from ..engine.transform.differentiate import jvp
from ..tensor.core import Tensor
from ..tensor.record import wrap
from .meta import NO_META, name_node, own_meta

__all__ = ["dual_level", "make_dual", "unpack_dual", "UnpackedDualTensor", "enter_dual_level", "exit_dual_level"]

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


class _Levels:
    current = None  # the active level, or None
    counter = 0
    duals = weakref.WeakSet()  # dual nodes of the active level


def enter_dual_level():
    """Enter a new forward-AD level and return it (``dual_level`` is the context manager)."""
    if _Levels.current is not None:
        raise RuntimeError(
            "Entering a new forward AD level but the current level is not valid. Make sure you did "
            "not forgot to exit the previous level."
        )
    _Levels.current = _Levels.counter
    _Levels.counter += 1
    KEEP_SOURCES[0] = True  # a value computed inside keeps the graph its tangent comes from
    return _Levels.current


def exit_dual_level(*, level=None):
    """Leave the forward-AD level: every tangent made in it is gone."""
    if _Levels.current is None or (level is not None and level != _Levels.current):
        raise RuntimeError(
            "Trying to exit a forward AD level that was not the last one that was created. This is not supported."
        )
    _Levels.current = None
    _Levels.duals = weakref.WeakSet()
    KEEP_SOURCES[0] = False


class dual_level:
    """Context manager for forward-mode AD: dual tensors made inside carry tangents until exit.

    ```python
    >>> import ngrad
    >>> import ngrad.autograd.forward_ad as fwAD
    >>> x = ngrad.tensor([0.0, 1.0])
    >>> with fwAD.dual_level():
    ...     d = fwAD.make_dual(x, ngrad.tensor([1.0, 1.0]))
    ...     y = (d * d).exp()
    ...     fwAD.unpack_dual(y).tangent
    tensor([0.0000, 5.4366])

    ```
    """

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()
        return False


def _level(level):
    if _Levels.current is None:
        return None
    if level is not None and level != _Levels.current:
        raise RuntimeError(f"Invalid level {level}: the active forward AD level is {_Levels.current}")
    return _Levels.current


def make_dual(tensor, tangent, *, level=None):
    """A view of ``tensor`` that carries ``tangent`` (same shape, floating) in forward mode;
    its gradient in reverse mode flows to ``tensor`` as usual."""
    lvl = _level(level)
    if lvl is None:
        raise RuntimeError(
            "To create a dual Tensor, you must first enter a dual level using ngrad.autograd.forward_ad.dual_level()."
        )
    if not isinstance(tensor, Tensor) or not isinstance(tangent, Tensor):
        raise TypeError("make_dual expects Tensors for both the primal and the tangent")
    if not tensor.dtype.differentiable:
        raise ValueError(f"Expected primal to be floating point or complex, but got: {tensor.dtype}")
    if not tangent.dtype.differentiable:
        raise ValueError(f"Expected tangent to be floating point or complex, but got: {tangent.dtype}")
    if tangent.shape != tensor.shape:
        raise RuntimeError(
            f"Trying to set a forward gradient that has a different size than that of the original "
            f"Tensor, this is not supported. Tensor is of size {list(tensor.shape)} while the given "
            f"forward gradient is of size {list(tangent.shape)}."
        )
    if tangent.device != tensor.device:
        raise RuntimeError(
            "Expected all tensors to be on the same device, but the tangent is on "
            f"{tangent.device} and the primal on {tensor.device}"
        )
    n = tensor._node
    dual = Node("reshape", (n,), {"shape": n.shape}, n.shape, n.dtype, n.requires_grad and grad_mode.is_grad_enabled())
    if dual.requires_grad:
        name_node(dual, "ViewBackward0")
    own_meta(dual).tangent = (lvl, tangent.to(tensor.dtype)._node)
    _Levels.duals.add(dual)
    return wrap(dual)


def unpack_dual(tensor, *, level=None):
    """``(primal, tangent)`` of ``tensor`` at the active level; the tangent is None when no
    dual tensor reaches it (or outside ``dual_level``)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"unpack_dual expects a Tensor, got {type(tensor).__name__}")
    lvl = _level(level)
    if lvl is None or not _Levels.duals:
        return UnpackedDualTensor(tensor, None)
    t = _tangents([tensor._node], lvl, {})[0]
    if t is None:
        return UnpackedDualTensor(tensor, None)
    n = tensor._node
    primal = Node(
        "reshape", (n,), {"shape": n.shape}, n.shape, n.dtype, n.requires_grad and grad_mode.is_grad_enabled()
    )
    own_meta(primal).tangent = (lvl, None)  # a view without the tangent
    return UnpackedDualTensor(wrap(primal), wrap(t))


def dependents(roots, sources):
    """The nodes below ``roots`` that lie on a path from one of ``sources`` (sources included)."""
    depends = set()
    for n in post_order(roots, lambda n: () if n in sources else n.srcs):
        if n in sources or any(s in depends for s in n.srcs):
            depends.add(n)
    return depends


def _tangent_parents(n):
    """Where a tangent comes from: nothing for a dual tensor, a custom Function's inputs, else
    the sources."""
    m = n.meta or NO_META
    if m.tangent is not None:
        return ()
    return n.srcs if m.ctx is None else [s for s in m.ctx._input_nodes if s is not None]


def _tangents(roots, lvl, memo):
    """Tangent nodes of ``roots`` (None where no tangent reaches one). ``memo``: tangents of
    custom Function outputs already computed through their ``jvp``."""
    depends, order = set(), []
    for n in post_order(roots, _tangent_parents):  # which nodes lie on a path from a dual tensor
        m = n.meta or NO_META
        if m.tangent is not None:
            if m.tangent[0] == lvl and m.tangent[1] is not None:
                depends.add(n)
        elif m.ctx is not None:
            if any(s in depends for s in _tangent_parents(n)):
                depends.add(n)
                order.append(n)
        elif any(s in depends for s in n.srcs):
            depends.add(n)
    if not any(r in depends for r in roots):
        return [None] * len(roots)
    for c in order:  # custom Functions: their own jvp, innermost first
        if c not in memo:
            _custom_jvp(c.meta.ctx, lvl, memo)
    sources = [n for n in depends if (n.meta or NO_META).tangent is not None or (n.meta or NO_META).ctx is not None]
    realize([s for s in sources if s.value is None])
    low = lower(roots, cuts=set(sources), recompute=depends)
    tangent_of = {}
    for s in sources:
        tangent = (s.meta or NO_META).tangent
        t = tangent[1] if tangent is not None else memo.get(s)
        if t is not None and s in low.slot_of:  # a dual below a custom Function is not lowered
            tangent_of[low.slot_of[s]] = t
    wrt = [s for s in low.tape.inputs if s in tangent_of]
    tan = jvp(low.tape, wrt)
    nodes = replay(tan.tape, low.sources + [tangent_of[s] for s in wrt], grad_mode.is_grad_enabled())
    return [None if p is None else nodes[p] for p in tan.tangents]


def _custom_jvp(ctx, lvl, memo):
    """Tangents of a custom Function's outputs from its ``jvp`` and its inputs' tangents."""
    from ..factories import zeros

    inputs = [n for n in ctx._input_nodes]
    found = _tangents([n for n in inputs if n is not None], lvl, memo)
    it = iter(found)
    tangents = []
    for n in inputs:
        if n is None:
            tangents.append(None)
            continue
        t = next(it)
        tangents.append(
            wrap(t) if t is not None else (zeros(n.shape, dtype=n.dtype) if ctx.materialize_grads else None)
        )
    with grad_mode.no_grad():
        out = type(ctx)._cls.jvp(ctx, *tangents)
    outs = out if isinstance(out, tuple) else (out,)
    specs = [s for s in ctx._outputs]
    if len(outs) != len(specs):
        raise RuntimeError(
            f"function {type(ctx).__name__} returned an incorrect number of tangents (expected "
            f"{len(specs)}, got {len(outs)})"
        )
    for spec, t in zip(specs, outs):
        if spec is not None and t is not None:
            node = spec[0]
            if tuple(t.shape) != node.shape:
                raise RuntimeError(
                    f"Function {type(ctx).__name__} jvp returned a tangent of shape "
                    f"{list(t.shape)} for an output of shape {list(node.shape)}"
                )
            memo[node] = t.to(node.dtype)._node
