"""The grad_fn objects: what ``tensor.grad_fn`` and ``next_functions`` return.

Contract: a ``BackwardNode`` is a view of one recorded node that requires grad (its name is
PyTorch's grad_fn name, from the node's annotations); ``AccumulateGrad`` stands for a leaf,
whose gradient is accumulated into its tensor's ``.grad``. Views of one node are equal and
share what PyTorch keeps on the node object: ``metadata``, hooks and pre-hooks (registered
here, run by ``ngrad.autograd.reverse``), and the values saved-tensor hooks packed for it.
``_saved_<name>`` attributes read the values PyTorch's node of that name saves, through the
unpack hook where one packed them. Nothing here computes.
"""

import math
import weakref
from typing import Any, NamedTuple

from .. import _hooks
from .meta import FREED, NO_META, SEGMENT_NODES, fn_state

__all__ = [
    "SAVED",
    "AccumulateGrad",
    "BackwardNode",
    "GradientEdge",
    "check_unpacked",
    "grad_fn_of",
    "output_nr",
    "saved_tensor",
]


def grad_fn_of(node):
    """The grad_fn object of ``node`` (``AccumulateGrad`` for a leaf): the same object for as
    long as one is alive, so ``y.grad_fn is y.grad_fn`` holds as in PyTorch."""
    state = fn_state(node)
    obj = state.obj() if state.obj is not None else None
    if obj is None:
        obj = _node_class(BackwardNode(node).name())(node) if node.differentiable else AccumulateGrad(node)
        state.obj = weakref.ref(obj)
    return obj


_classes: dict[str, type] = {}


def _node_class(name):
    """PyTorch's grad_fn classes are named after their node (``type(y.grad_fn).__name__`` is
    ``MulBackward0``, a custom Function's ``ExpBackward``): one subclass of ``BackwardNode`` per name."""
    name = name.rpartition("::")[2]
    cls = _classes.get(name)
    if cls is None:
        cls = _classes[name] = type(name, (BackwardNode,), {"__slots__": (), "__module__": __name__})
    return cls


def saved_tensor(node):
    """The tensor PyTorch hands back for a saved ``node``: the leaf's own tensor where it is
    alive and still holds the node, else a new tensor on the node."""
    from ..tensor.record import wrap

    owner = (node.meta or NO_META).owner
    t = owner() if owner is not None else None
    return t if t is not None and t._node is node else wrap(node)


def _number(node):
    """A Python number saved as a scalar (``x ** 2``'s exponent, ``2 ** x``'s base)."""
    v = node.params["value"] if node.op == "const" else node.value
    return v.item() if hasattr(v, "item") else v


# (which saved tensor, the source that must require grad for PyTorch to save it, or None)
def _src(i, unless=None):
    return ("src", i, unless)


_RESULT = ("result",)


def _sizes(i):
    return ("value", lambda n: tuple(n.srcs[i].shape))


def _param(fn):
    return ("value", fn)


_ALPHA = {"alpha": _param(lambda n: 1)}
_SELF = {"self": _src(0)}
_RES = {"result": _RESULT}
_BOTH = {"self": _src(0), "other": _src(1)}


def _mean_of(n):
    return n.op in ("mul", "div") and n.srcs[0].op == "sum"


def _log_softmax_of(n):
    return n.op == "sub" and n.srcs[1].op == "log" and n.srcs[1].srcs[0].op == "sum"


def _inserted(n):
    """The dimension a reshape inserted (``unsqueeze``)."""
    src, out = n.srcs[0].shape, n.shape
    return next(i for i in range(len(out)) if i >= len(src) or out[i] != src[i])


def _reduced(n):
    return n.srcs[0].srcs[0].shape


_MEAN = {
    "self_sym_sizes": _param(lambda n: tuple(_reduced(n))),
    "self_sym_numel": _param(lambda n: math.prod(_reduced(n))),
}

# grad_fn name -> (the prim its node must be, a test of the node, or None for any; saved
# attribute -> how to read it). Composites are recognised by the shape of their last nodes.
SAVED = {
    "MeanBackward0": (_mean_of, _MEAN),
    "MeanBackward1": (
        _mean_of,
        {
            **_MEAN,
            "dim": _param(lambda n: tuple(n.srcs[0].params["axes"])),
            "keepdim": _param(lambda n: n.srcs[0].params["keepdim"]),
        },
    ),
    "SoftmaxBackward0": ("softmax", {"dim": _param(lambda n: n.params["axis"]), "result": _RESULT}),
    "LogSoftmaxBackward0": (
        _log_softmax_of,
        {"dim": _param(lambda n: n.srcs[1].srcs[0].params["axes"][0]), "result": _RESULT},
    ),
    "UnsqueezeBackward0": ("reshape", {"dim": _param(_inserted)}),
    "Log1PBackward0": ("log1p", _SELF),
    "Expm1Backward0": ("expm1", _RES),
    "TanBackward0": ("tan", _RES),
    "SinhBackward0": ("sinh", _SELF),
    "CoshBackward0": ("cosh", _SELF),
    "AsinBackward0": ("asin", _SELF),
    "AcosBackward0": ("acos", _SELF),
    "AtanBackward0": ("atan", _SELF),
    "ErfBackward0": ("erf", _SELF),
    "RsubBackward1": (None, _ALPHA),
    "WhereBackward0": ("where", {"condition": _src(0)}),
    "ProdBackward0": ("prod", {"self": _src(0), "result": _RESULT}),
    "ProdBackward1": (
        "prod",
        {
            "dim": _param(lambda n: n.params["axes"][0]),
            "keepdim": _param(lambda n: n.params["keepdim"]),
            "self": _src(0),
            "result": _RESULT,
        },
    ),
    "AmaxBackward0": (
        "amax",
        {
            "dim": _param(lambda n: tuple(n.params["axes"])),
            "keepdim": _param(lambda n: n.params["keepdim"]),
            "self": _src(0),
            "result": _RESULT,
        },
    ),
    "CatBackward0": ("cat", {"dim": _param(lambda n: n.params["axis"])}),
    "FlipBackward0": ("flip", {"dims": _param(lambda n: tuple(n.params["axes"]))}),
    "MulBackward0": ("mul", {"self": _src(0, 1), "other": _src(1, 0)}),
    "DivBackward0": ("div", {"self": _src(0, 1), "other": _src(1)}),
    "AddBackward0": (None, _ALPHA),
    "SubBackward0": (None, _ALPHA),
    "ExpBackward0": ("exp", _RES),
    "TanhBackward0": ("tanh", _RES),
    "SigmoidBackward0": ("sigmoid", _RES),
    "SqrtBackward0": ("sqrt", _RES),
    "ReluBackward0": (None, _RES),
    "LogBackward0": ("log", _SELF),
    "SinBackward0": ("sin", _SELF),
    "CosBackward0": ("cos", _SELF),
    "AbsBackward0": ("abs", _SELF),
    "PowBackward0": ("pow", {"self": _src(0), "exponent": _param(lambda n: _number(n.srcs[1]))}),
    "PowBackward1": ("pow", {"self": _src(0), "exponent": _src(1), "result": _RESULT}),
    "PowBackward2": ("pow", {"self": _param(lambda n: _number(n.srcs[0])), "exponent": _src(1), "result": _RESULT}),
    "MaximumBackward0": ("maximum", _BOTH),
    "MinimumBackward0": ("minimum", _BOTH),
    "Atan2Backward0": ("atan2", _BOTH),
    "MmBackward0": (
        "matmul",
        {"self": _src(0, 1), "mat2": _src(1, 0), "self_sym_sizes": _sizes(0), "mat2_sym_sizes": _sizes(1)},
    ),
    "SumBackward0": ("sum", {"self_sym_sizes": _sizes(0)}),
    "SumBackward1": (
        "sum",
        {
            "dim": _param(lambda n: tuple(n.params["axes"])),
            "keepdim": _param(lambda n: n.params["keepdim"]),
            "self_sym_sizes": _sizes(0),
        },
    ),
    "ViewBackward0": ("reshape", {"self_sym_sizes": _sizes(0)}),
    "ExpandBackward0": ("expand", {"self_sym_sizes": _sizes(0)}),
    "PermuteBackward0": ("permute", {"dims": _param(lambda n: tuple(n.params["perm"]))}),
    "TransposeBackward0": (
        "permute",
        {
            "dim0": _param(lambda n: min(i for i, p in enumerate(n.params["perm"]) if p != i)),
            "dim1": _param(lambda n: max(i for i, p in enumerate(n.params["perm"]) if p != i)),
        },
    ),
    "CumsumBackward0": ("cumsum", {"dim": _param(lambda n: n.params["axis"])}),
}


class BackwardNode:
    """What ``tensor.grad_fn`` returns: a view of one recorded operation of the graph
    (``isinstance(fn, ngrad.autograd.graph.Node)`` holds)."""

    __slots__ = ("_node", "__weakref__")

    def __init__(self, node):
        self._node = node

    def name(self):
        n = self._node
        name = (n.meta or NO_META).name or (n.op.capitalize() + "Backward0")
        # the nodes PyTorch writes by hand (not generated from derivatives.yaml) carry its namespace
        return "torch::autograd::" + name if name in ("CopySlices", "CopyBackwards") else name

    @property
    def next_functions(self):
        out = []
        ctx = (self._node.meta or NO_META).ctx
        srcs = ctx._input_nodes if ctx is not None else self._node.srcs
        for s in srcs:
            if s is None:
                continue  # a non-tensor argument of a custom Function has no edge
            if s.differentiable:
                out.append((grad_fn_of(s), output_nr(s)))
            elif s.requires_grad:
                out.append((grad_fn_of(s), 0))
            else:
                out.append((None, 0))
        return tuple(out)

    @property
    def metadata(self):
        """A dict kept with this node (the same one on every access), for the user's notes."""
        return fn_state(self._node).metadata

    def register_prehook(self, fn):
        """Register ``fn(grad_outputs) -> tuple or None``, called with the gradients flowing into
        this node (a tuple), after the tensor hooks of its output; returning a tuple replaces
        them. Returns a handle whose ``remove()`` unregisters it."""
        return self._register(fn, "prehooks")

    def register_hook(self, fn):
        """Register ``fn(grad_inputs, grad_outputs) -> tuple or None``, called once this node
        has computed the gradients of its inputs (``grad_inputs``, one per ``next_functions``
        entry, None where none flows); returning a tuple replaces them. Returns a handle."""
        return self._register(fn, "hooks")

    def _register(self, fn, kind):
        if not callable(fn):
            raise TypeError(f"hook must be callable, got {type(fn).__name__}")
        hooks = getattr(fn_state(self._node), kind)
        if self._node.differentiable and (self._node.meta or NO_META).ctx is None:
            SEGMENT_NODES.add(self._node)  # a custom Function's outputs are there already
        handle = _hooks.RemovableHandle(hooks)
        hooks[handle.id] = fn
        return handle

    def __getattr__(self, attr):
        if attr.startswith("_saved_"):
            how = self._recorded_saves().get(attr[7:])
            if how is not None:
                return self._read_saved(how)
        raise AttributeError(f"'{self.name().rpartition(':')[2]}' object has no attribute '{attr}'")

    def _recorded_saves(self):
        """The ``_saved_*`` attributes of this node (none where ngrad recorded another shape)."""
        test, saved = SAVED.get(self.name(), (None, {}))
        n = self._node
        ok = test is None or (test == n.op if isinstance(test, str) else test(n))
        return saved if ok else {}

    def __dir__(self):
        return sorted(set(super().__dir__()) | {"_saved_" + k for k in self._recorded_saves()})

    def _read_saved(self, how):
        n = self._node
        if how[0] == "value":
            return how[1](n)
        if how[0] == "src" and how[2] is not None and not n.srcs[how[2]].requires_grad:
            return None  # PyTorch saves this input only for the other input's gradient
        m = n.meta or NO_META
        if m.freed and m.saves:
            raise RuntimeError(FREED)
        which = "result" if how[0] == "result" else how[1]
        packed = m.fn.packed if m.fn is not None else None
        for w, p, unpack in packed or ():
            if w == which:
                return check_unpacked(unpack(p))
        return saved_tensor(n if which == "result" else n.srcs[which])

    def _identity(self):
        # the outputs of one custom Function share its grad_fn
        ctx = (self._node.meta or NO_META).ctx
        return self._node if ctx is None else ctx

    def __eq__(self, other):
        return isinstance(other, BackwardNode) and other._identity() is self._identity()

    def __hash__(self):
        return id(self._identity())

    def __repr__(self):
        return f"<{self.name().rpartition(':')[2]} object at {hex(id(self._node))}>"


def check_unpacked(t):
    """An unpack hook's result must be a tensor (PyTorch's TypeError otherwise)."""
    from ..tensor.record import TensorBase

    if not isinstance(t, TensorBase):
        raise TypeError(
            f"Output of saved tensor unpack_hook expected to be a Tensor but got result of type {type(t).__name__}"
        )
    return t


def output_nr(node):
    """Which output of its grad_fn ``node`` is: its position among a custom Function's outputs."""
    ctx = (node.meta or NO_META).ctx
    if ctx is None:
        return 0
    return next((i for i, spec in enumerate(ctx._outputs) if spec is not None and spec[0] is node), 0)


class GradientEdge(NamedTuple):
    """Where a gradient flows into: output ``output_nr`` of grad_fn ``node``. Accepted as an
    input of ``ngrad.autograd.grad`` and ``backward`` (the gradient of what flows there)."""

    node: Any
    output_nr: int
    ownership_token: Any = None


class AccumulateGrad(BackwardNode):
    """The ``next_functions`` entry of a leaf: gradients are accumulated into its ``.grad``.
    Its pre-hooks see the gradient before accumulation, its hooks run after it (``backward``)."""

    __slots__ = ()

    def name(self):
        return "torch::autograd::AccumulateGrad"

    @property
    def variable(self):
        owner = (self._node.meta or NO_META).owner
        return owner() if owner else None

    @property
    def next_functions(self):
        return ()

    def __repr__(self):
        return f"<AccumulateGrad object at {hex(id(self._node))}>"
