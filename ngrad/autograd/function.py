"""Custom differentiable operations: ``ngrad.autograd.Function``, as in PyTorch.

``forward`` runs under ``no_grad`` and is recorded lazily like any ngrad code. Each tensor it
returns becomes a node whose gradient is the user's ``backward``: the reverse pass runs in
segments around it (see ``ngrad.autograd.reverse``), calls ``backward`` with the gradients
of the outputs, and carries the gradients it returns on into the graph below the inputs.
``backward`` is written in ngrad operations, so with ``create_graph=True`` it is recorded and
can be differentiated again.
"""

import functools
import inspect
import warnings

from .. import grad_mode
from ..engine.ir.graph import Node
from ..engine.runtime.realize import KEEP_SOURCES
from ..grad_mode import Anomaly
from ..tensor.core import Tensor
from ..tensor.inplace import inplace_update
from ..tensor.record import wrap
from ..tensor.views import function_view, version_of
from .anomaly_mode import forward_trace
from .graph import pack_saved
from .graph_nodes import check_unpacked
from .meta import NO_META, SEGMENT_NODES, own_meta
from .reverse import FREED

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The ``ctx`` a custom Function's ``forward`` (or ``setup_context``) fills and its
    ``backward`` reads. Any attribute may be set on it; tensors should go through
    ``save_for_backward`` so in-place changes to them are detected."""

    def __init__(self):
        self.materialize_grads = True
        self.needs_input_grad = ()
        self.to_save = ()
        self._saved = None
        self._non_differentiable = set()
        self._dirty = {}
        self._freed = False
        self._input_nodes = ()
        self._outputs = ()

    def save_for_backward(self, *tensors):
        """Keep tensors (or None) for ``backward``; read them back with ``saved_tensors``."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_backward can only save variables, but argument {i} is of type {type(t).__name__}"
                )
        self.to_save = tensors

    def save_for_forward(self, *tensors):
        """Keep tensors for ``jvp`` (forward mode)."""
        self.saved_for_forward = tensors

    @property
    def saved_tensors(self):
        """The tensors given to ``save_for_backward``; an error if one of them was updated in
        place since, or if a backward pass without ``retain_graph`` has freed them."""
        if self._freed:
            raise RuntimeError(FREED)
        packed = getattr(self, "_packed", None)
        if packed is not None:  # saved through saved_tensors_hooks: what unpack returns, unchecked as in PyTorch
            return tuple(None if p is None else check_unpacked(p[1](p[0])) for p in packed)
        if self._saved is None:
            return tuple(self.to_save)
        for t, node, version in self._saved:
            if t is not None and t._node is not node:
                kind = _TYPE.get(t.dtype.short, "")
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an "
                    f"inplace operation: [torch.{kind}Tensor [{', '.join(map(str, t.shape))}]] is at "
                    f"version {t._version}; expected version {version} instead. Hint: enable anomaly "
                    f"detection with ngrad.autograd.set_detect_anomaly(True)."
                )
        return tuple(t for t, _, _ in self._saved)

    def mark_dirty(self, *args):
        """Declare inputs that ``forward`` modified in place; ``forward`` must return them. Each
        comes back as the same tensor object, its version bumped and its history continued by
        this Function (through a view, the base is rewritten as for any in-place op)."""
        self._dirty.update((id(a), a) for a in args)

    def mark_non_differentiable(self, *args):
        """Declare outputs that have no gradient: they do not require grad, and ``backward``
        receives zeros for them."""
        self._non_differentiable.update(id(a) for a in args)

    def set_materialize_grads(self, value):
        """With False, ``backward`` receives None (not zeros) for outputs no gradient reached."""
        self.materialize_grads = bool(value)

    # the reverse engine's side ---------------------------------------------------------------
    def _cut_nodes(self):
        return [spec[0] for spec in self._outputs if spec is not None and (spec[0].meta or NO_META).ctx is self]

    def _backward(self, acc, create_graph, batch=None):
        """Call ``backward`` with the accumulated output gradients; return the input nodes and
        the gradient nodes to carry on from them. ``batch``: the size of the leading batch axis
        of every gradient (``is_grads_batched``), or None."""
        grads, reached = [], False
        for spec in self._outputs:
            if spec is None:
                grads.append(None)
                continue
            node, shape, dtype = spec
            g = acc.get(node) if (node.meta or NO_META).ctx is self else None
            if g is not None:
                reached = True
                grads.append(wrap(g))
            elif self.materialize_grads:
                from ..factories import zeros

                grads.append(zeros(((batch,) if batch else ()) + shape, dtype=dtype, device=wrap(node).device))
            else:
                grads.append(None)
        if not reached:
            return [], []
        name = type(self).__name__
        res = _call_backward(self, grads)
        n = len(self._input_nodes)
        if len(res) != n:
            if len(res) > n and all(r is None for r in res[n:]):
                res = res[:n]
            else:
                raise RuntimeError(
                    f"function {name} returned an incorrect number of gradients (expected {n}, got {len(res)})"
                )
        roots, seeds = [], []
        for i, (node, g) in enumerate(zip(self._input_nodes, res)):
            if g is None:
                continue
            if node is None:
                raise RuntimeError(
                    f"function {name} returned a gradient different than None at position {i + 1}, "
                    f"but the corresponding forward input was not a Variable"
                )
            if not isinstance(g, Tensor):
                raise TypeError(
                    f"function {name} returned a gradient of type {type(g).__name__} at position "
                    f"{i + 1}; expected a Tensor or None"
                )
            if not node.requires_grad:
                continue
            want = ((batch,) if batch else ()) + node.shape
            if tuple(g.shape) != want:
                if _expandable(want, tuple(g.shape)):
                    g = g.sum_to_size(want)
                elif batch and _expandable(tuple(g.shape), want):
                    g = g.expand(want)
                else:
                    raise RuntimeError(
                        f"Function {name} returned an invalid gradient at index {i} - got "
                        f"{list(g.shape)} but expected shape compatible with {list(want)}"
                    )
            if g.dtype is not node.dtype:
                g = g.to(node.dtype)
            roots.append(node)
            seeds.append(g._node)
        return roots, seeds


_TYPE = {"f32": "Float", "f64": "Double", "i64": "Long", "i32": "Int", "b8": "Bool"}


def _call_backward(ctx, grads):
    """The user's ``backward`` on ``grads``, as a tuple. Under anomaly detection a gradient
    holding NaN is an error naming the node and the output, and any failure first warns with
    the traceback of the forward call that made the node, as PyTorch does."""
    try:
        res = _user_backward(ctx._cls)(ctx, *grads)
        if not isinstance(res, tuple):
            res = (res,)
        if Anomaly.enabled and Anomaly.check_nan:
            for i, g in enumerate(res):
                if isinstance(g, Tensor) and g.dtype.differentiable and bool(g.detach().isnan().any()):
                    raise RuntimeError(f"Function '{type(ctx).__name__}' returned nan values in its {i}th output.")
    except Exception:
        if Anomaly.enabled:
            trace = next(((s[0].meta or NO_META).trace for s in ctx._outputs if s is not None), None)
            warnings.warn(forward_trace(type(ctx).__name__, trace), UserWarning, stacklevel=2)
        raise
    return res


def _user_backward(cls):
    """The reverse rule a Function defines: ``backward``, or its alias ``vjp`` (not both)."""
    backward, vjp = cls.backward, cls.vjp
    if backward is not Function.backward and vjp is not Function.vjp and backward is not vjp:
        raise RuntimeError(
            "Implementing both 'backward' and 'vjp' for a custom Function is not allowed. You should "
            "only implement one of them."
        )
    return vjp if vjp is not Function.vjp else backward


def _expandable(shape, to):
    if len(shape) > len(to):
        return False
    return all(a == b or a == 1 for a, b in zip(shape[::-1], to[::-1]))


class Function:
    """Base class of custom differentiable operations, as ``torch.autograd.Function``.

    Subclasses define static ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)``
    (or ``forward(*args)`` plus ``setup_context(ctx, inputs, output)``), and are called
    through ``apply``. ``backward`` returns one gradient per ``forward`` argument (None for
    non-tensors and inputs that need none); ``jvp`` may be defined for forward mode.

    ```python
    >>> import ngrad
    >>> class Cube(ngrad.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x ** 3
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         (x,) = ctx.saved_tensors
    ...         return g * 3 * x ** 2
    >>> x = ngrad.tensor([1.0, 2.0], requires_grad=True)
    >>> y = Cube.apply(x)
    >>> y
    tensor([1., 8.], grad_fn=<CubeBackward>)
    >>> (g,) = ngrad.autograd.grad(y.sum(), x, create_graph=True)
    >>> g, ngrad.autograd.grad(g.sum(), x)[0]
    (tensor([ 3., 12.], grad_fn=<MulBackward0>), tensor([ 6., 12.]))

    ```
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._backward_cls = type(cls.__name__ + "Backward", (FunctionCtx,), {"_cls": cls})

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            "Legacy autograd function with non-static forward method is deprecated. Please use new-style "
            "autograd function with static forward method. (Example: "
            "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)"
        )

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom "
            "autograd.Function to use it with backward mode AD."
        )

    vjp = backward

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError(
            "You must implement the jvp function for custom autograd.Function to use it with forward mode AD."
        )

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run ``forward`` on ``args`` and attach ``backward`` to the tensors it returns."""
        ctx = cls._backward_cls()
        new_style = cls.setup_context is not Function.setup_context
        if new_style:  # setup_context sees the defaults of forward's arguments, as in PyTorch
            bound = inspect.signature(cls.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, bound.kwargs
        enabled = grad_mode.is_grad_enabled()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad and enabled for a in args)
        ctx._input_nodes = tuple(a._node if isinstance(a, Tensor) else None for a in args)
        with grad_mode.no_grad():
            if new_style:
                out = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args, **kwargs)
        ctx._forward_inputs = args
        is_tuple = isinstance(out, tuple)
        outs = out if is_tuple else (out,)
        _check_dirty(ctx, outs)
        track = any(ctx.needs_input_grad)
        if not track and not KEEP_SOURCES[0]:  # nothing to differentiate, in either mode
            for o in outs:
                if isinstance(o, Tensor) and id(o) in ctx._dirty:
                    version_of(o).value += 1
                elif isinstance(o, Tensor) and o._view is not None:  # still PyTorch's view made in a Function
                    function_view(o, None, cls.__name__)
            return out
        result, specs = _attach(ctx, args, outs, track)
        ctx._outputs = tuple(specs)
        ctx._saved = [(t, t._node, t._version) if t is not None else (None, None, 0) for t in ctx.to_save]
        ctx._packed = pack_saved(ctx.to_save)
        return tuple(result) if is_tuple else result[0]


def _check_dirty(ctx, outs):
    """PyTorch's checks of ``mark_dirty``: every dirty tensor is returned, none is a leaf that
    requires grad (checked only while gradients are recorded)."""
    if not ctx._dirty:
        return
    returned = {id(o) for o in outs if isinstance(o, Tensor)}
    if any(k not in returned for k in ctx._dirty):
        raise RuntimeError(
            "Some elements marked as dirty during the forward method were not returned as output. The "
            "inputs that are modified inplace must all be outputs of the Function."
        )
    for t, n in zip(ctx._forward_inputs, ctx._input_nodes):
        if id(t) in ctx._dirty and grad_mode.is_grad_enabled() and n.requires_grad and t._view is None:
            if not n.differentiable:
                raise RuntimeError("a leaf Variable that requires grad has been used in an in-place operation.")


def _attach(ctx, args, outs, track):
    """Give each tensor ``forward`` returned a node whose gradient is ``ctx``'s ``backward``
    (and whose tangent is its ``jvp``). ``track``: some input requires grad, so the outputs do.
    Returns the outputs to hand back and one (node, shape, dtype) per output (None for others)."""
    name = getattr(ctx._cls, "node_name", None) or type(ctx).__name__
    inputs = {id(a) for a in args if isinstance(a, Tensor)}
    position = {id(o): i for i, o in enumerate(outs)}  # a tensor returned twice is its last output
    result, specs = [], []
    for i, o in enumerate(outs):
        if not isinstance(o, Tensor):
            result.append(o)
            specs.append(None)
            continue
        raw = o._node
        differentiable = track and id(o) not in ctx._non_differentiable and raw.dtype.differentiable
        node = Node("detach", (raw,), None, raw.shape, raw.dtype, differentiable)
        meta = own_meta(node)
        meta.ctx, meta.name = ctx, name
        if differentiable:
            SEGMENT_NODES.add(node)
        specs.append((node, raw.shape, raw.dtype))
        if id(o) in inputs and id(o) not in ctx._dirty:  # an input returned as it is: a new view of it each time
            out = wrap(node)
            function_view(out, o, name)
            result.append(out)
        elif position[id(o)] != i:  # an earlier position of a tensor returned twice: no gradient reaches it
            result.append(o)
        elif id(o) in ctx._dirty:  # modified in place: the same tensor, its history continued here
            with grad_mode.enable_grad():
                inplace_update(o, wrap(node))
            result.append(o)
        else:
            o._node = node
            if o._view is not None:  # a view made in forward
                function_view(o, None, name)
            result.append(o)
    return result, specs


class _DelayedError(Function):
    """Stands in for the gradient of a ``once_differentiable`` backward: differentiating it fails."""

    node_name = "torch::autograd::Error"  # PyTorch's grad_fn there (printed as grad_fn=<Error>)

    @staticmethod
    def forward(ctx, value, *inputs):
        return value.clone()

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")


def once_differentiable(backward):
    """Decorate a custom Function's ``backward`` that is not itself differentiable: it runs
    under ``no_grad``, and differentiating its result (``create_graph=True``) is an error."""

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with grad_mode.no_grad():
            out = backward(ctx, *grads)
        if not grad_mode.is_grad_enabled():
            return out
        deps = [g for g in grads if isinstance(g, Tensor) and g.requires_grad]
        if not deps:
            return out
        if isinstance(out, tuple):
            return tuple(_DelayedError.apply(o, *deps) if isinstance(o, Tensor) else o for o in out)
        return _DelayedError.apply(out, *deps) if isinstance(out, Tensor) else out

    return wrapper
