"""Views: tensors that share their base's storage, functionalized over immutable values.

Contract: every tensor that PyTorch would return as a view (slicing, ``view``, ``transpose``,
``expand``, ``diagonal``, ``unbind``, ``detach``...) gets a ``ViewOf``: the storage root it
shares data with, the movement ``steps`` that derive its value from the root's value, its
PyTorch ``_base`` and layout (strides and storage offset, for ``stride()``/``is_contiguous()``)
and how it was made (in ``no_grad``, as one of several outputs, by a custom Function). Values
stay immutable and the tape stays SSA: ``write_back`` turns a write through a view into a new
value of the root (each step undone: a slice becomes a ``slice_scatter``, a reshape or permute
its inverse), and ``inplace.inplace_update`` re-derives every live view of the root from it
(``replay``), so an in-place update through any view is seen by the base and every other view. ``view_error`` holds
PyTorch's rules for in-place updates of views. ``viewing`` wraps the view methods of ``Tensor``.
"""

import math
import re
import weakref

import numpy as np

from .. import grad_mode as _grad_mode
from ..autograd.meta import NO_META, name_node, own_meta
from ..engine.ir import dtypes as D
from ..engine.ir.graph import Node, source
from ..engine.runtime.realize import KEEP_SOURCES
from .layout import contiguous_strides, dense, step_layout
from .record import TensorBase, const_node, expand_node, index_source, record_op, wrap

_gm = _grad_mode.state

# the view methods of Tensor that PyTorch defines as views whatever the strides; ``reshape``-like
# methods are views only when the strides allow it (``VIEWABLE``), and ``view`` raises otherwise
ALWAYS = (
    "__getitem__",
    "view_as",
    "squeeze",
    "unsqueeze",
    "permute",
    "transpose",
    "swapaxes",
    "swapdims",
    "t",
    "expand",
    "expand_as",
    "broadcast_to",
    "narrow",
    "select",
    "movedim",
    "moveaxis",
    "diagonal",
    "conj",
)
ALWAYS_PROPERTIES = ("T", "mT", "real", "imag")
VIEWABLE = ("reshape", "reshape_as", "flatten", "unflatten")
MULTI = {"split": "Split", "chunk": "Split", "unbind": "Unbind", "tensor_split": "TensorSplit"}
# a complex tensor's parts, its conjugate, and its pairs of reals: views of another dtype
COMPLEX_VIEWS = ("real", "imag", "conj", "view_as_real", "view_as_complex")
MOVES = ("reshape", "permute", "expand", "slice") + COMPLEX_VIEWS

NO_GRAD_VIEW = "A view was created in no_grad mode and is being modified inplace with grad mode enabled."
MULTI_OUTPUT = (
    "This view is the output of a function that returns multiple views. Such functions do not allow the output "
    "views to be modified inplace. You should replace the inplace operation by an out-of-place one."
)
AMBIGUOUS = (
    "Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by moving "
    "both the view and the inplace either both inside the no_grad block (if you don't want the inplace to be "
    "tracked) or both outside (if you want the inplace to be tracked)."
)
IN_FUNCTION = (
    "This view was created inside a custom Function (or because an input was returned as-is) and the autograd "
    "logic to handle view+inplace would override the custom backward associated with the custom Function, "
    "leading to incorrect gradients. This behavior is forbidden. You can fix this by cloning the output of the "
    "custom Function."
)
INFERENCE_VIEW = (
    "A view was created in inference mode and is being modified inplace in normal mode. Given that this use case "
    "is ambiguous and error-prone, it is forbidden. You can clarify your code by moving both the view and the "
    "inplace either both inside the inference_mode block (if you don't want the inplace to be tracked) or both "
    "outside (if you want the inplace to be tracked)."
)
OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
    "Please clone() the tensor before performing the operation."
)


class Step:
    """One movement from a value to its view: a prim (``reshape``, ``permute``, ``expand``,
    ``slice``) or ``detach``, its params, the shape it makes and the grad_fn name it carries."""

    __slots__ = ("op", "params", "shape", "name")

    def __init__(self, op, params, shape, name):
        self.op, self.params, self.shape, self.name = op, params, shape, name

    def __repr__(self):
        return f"Step({self.op}, {self.params})"


def boundary():
    """A ``detach()`` step. Its ``tracked`` param is the value, with gradient history, that
    writes through the detached tensor gave it (None until one does): PyTorch records those
    writes on the detached tensor while its base never sees them."""
    return Step("detach", {"tracked": None}, None, None)


def untracked(steps):
    """Whether a write through ``steps`` is invisible to the root's autograd (a ``detach()``)."""
    return any(step.op == "detach" for step in steps)


class ViewOf:
    """How a view relates to its storage: ``root`` (the tensor owning the storage), ``steps``
    from the root's value, ``base`` (PyTorch's ``_base``: None for ``detach()``), ``layout``
    (strides, storage offset), ``made`` (None, ``"no_grad"``, ``"multi"``, ``"function"``,
    ``"inference"``), the grad mode it was made in, its output number and maker's name, and
    whether ``requires_grad_()`` made it a leaf (it stays one when its storage is updated)."""

    __slots__ = ("root", "steps", "base", "layout", "made", "grad", "out", "maker", "leaf")

    def __init__(self, root, steps, base, layout, made=None, out=0, maker=None):
        self.root, self.steps, self.base, self.layout = root, steps, base, layout
        self.made, self.grad, self.out, self.maker = made, _gm.enabled, out, maker
        self.leaf = False  # made a leaf that requires grad by requires_grad_()


def layout_of(t):
    """(strides, storage offset) of tensor ``t`` in elements (a view's is computed when asked)."""
    v = t._view
    if v is None:
        return t._strides or contiguous_strides(t._node.shape), 0
    if v.layout is None:
        layout, shape = layout_of(v.root), v.root._node.shape
        for step in v.steps:
            layout = step_layout(layout, shape, step) or layout
            shape = step.shape if step.shape is not None else shape
        v.layout = layout
    return v.layout


def _trivial(before, after):
    """Whether reshaping ``before`` to ``after`` is a view whatever the strides (it only adds or
    drops ones)."""
    return [s for s in before if s != 1] == [s for s in after if s != 1]


# steps ----------------------------------------------------------------------------------------------
def steps_between(parent, child):
    """The movement steps from node ``parent`` to node ``child``, or None when ``child`` is not
    made from ``parent`` by movements alone (then it is a new value, not a view)."""
    out, n = [], child
    while n is not parent:
        if n.op not in MOVES or len(n.srcs) != 1 or len(out) > 16:
            return None
        out.append(Step(n.op, n.params, n.shape, (n.meta or NO_META).name))
        n = n.srcs[0]
    out.reverse()
    return tuple(out)


def join(steps, more):
    """``steps`` followed by ``more``, two reshapes or two permutes where they meet made one (a
    loop of transposes or reshapes of a view keeps its steps few)."""
    out = list(steps)
    for step in more:
        last = out[-1] if out else None
        if last is not None and last.op == step.op == "reshape":
            out[-1] = step
        elif last is not None and last.op == step.op == "permute":
            first, then = last.params["perm"], step.params["perm"]
            perm = tuple(first[i] for i in then)
            if perm == tuple(range(len(perm))):
                out.pop()
            else:
                out[-1] = Step("permute", {"perm": perm}, step.shape, step.name)
        else:
            out.append(step)
    return tuple(out)


def apply_step(n, step):
    """Record ``step`` on node ``n``."""
    if step.op == "detach":
        cut = Node("detach", (n,), None, n.shape, n.dtype)
        tracked = step.params["tracked"]
        return cut if tracked is None else splice(tracked, cut)
    if step.op == "take":  # as_strided: the storage's elements at computed positions
        idx = index_source(step.params["index"])
        return record_op("index", (n, idx), {"axis": 0}, step.shape, n.dtype, step.name)._node
    dtype = n.dtype
    if step.op in COMPLEX_VIEWS and step.op != "conj":
        dtype = dtype.to_complex() if step.op == "view_as_complex" else dtype.to_real()
    return record_op(step.op, (n,), step.params, step.shape, dtype, step.name)._node


def _undo_complex(parent, op, new):
    """The value of complex ``parent`` (real, for ``view_as_complex``) once its view ``op``
    became ``new``: a new real or imaginary part joined with the part left as it was."""
    if op in ("conj", "view_as_real", "view_as_complex"):
        inverse = {"conj": "conj", "view_as_real": "view_as_complex", "view_as_complex": "view_as_real"}[op]
        return record_op(inverse, (new,), None, parent.shape, parent.dtype, None)._node
    real = parent.dtype.to_real()
    re = new if op == "real" else record_op("real", (parent,), None, parent.shape, real, None)._node
    im = new if op == "imag" else record_op("imag", (parent,), None, parent.shape, real, None)._node
    return record_op("complex", (re, im), None, parent.shape, parent.dtype, None)._node


def replay(n, steps):
    for step in steps:
        n = apply_step(n, step)
    return n


def slice_scatter_node(base, src, starts, stops, steps):
    """``base`` with the window ``starts:stops:steps`` replaced by ``src`` (a new value)."""
    shape = base.shape
    window = {"shape": shape, "starts": tuple(starts), "stops": tuple(stops), "steps": tuple(steps)}
    ones = expand_node(const_node(True, D.bool_), src.shape)
    inside = record_op("unslice", (ones,), window, shape, D.bool_, None)._node
    placed = record_op("unslice", (src,), window, shape, src.dtype, "SliceScatterBackward0")._node
    return record_op("where", (inside, placed, base), None, shape, base.dtype, "CopySlices")._node


def splice(old, new):
    """The value of ``new`` with the gradient path of ``old`` (an update autograd does not see)."""
    name = (old.meta or NO_META).name
    return record_op("splice", (old, new), None, old.shape, old.dtype, name)._node


def tracked_after(old, new):
    """The history a ``detach()`` alias keeps once a write gave it value ``new`` (``old``: the
    history it had, or None): the write's own if it requires grad; else, under ``no_grad``, the
    old history with the new value, and in grad mode the new value with a zero gradient to it.
    While forward-mode AD is active the write's value is kept as well: its tangent is the alias's."""
    if new.requires_grad or KEEP_SOURCES[0]:  # forward mode: its tangent, too, is the alias's own
        return new
    if old is None:
        return None
    if not _gm.enabled:
        with _grad_mode.enable_grad():
            return splice(old, new)
    keep = expand_node(const_node(True, D.bool_), new.shape)
    return record_op("where", (keep, new, old), None, new.shape, new.dtype, "CopySlices")._node


def undo_step(parent, step, new, ancestor=False):
    """The value of ``parent`` once its view through ``step`` became ``new``. ``ancestor``: a
    ``detach()`` step of an alias the written one was detached from (not the written alias's own)."""
    op = step.op
    if op == "slice":
        p = step.params
        if new.shape != step.shape:
            new = record_op("reshape", (new,), {"shape": step.shape}, step.shape, new.dtype, None)._node
        return slice_scatter_node(parent, new, p["starts"], p["stops"], p["steps"])
    if op == "permute":
        perm = step.params["perm"]
        inverse = tuple(sorted(range(len(perm)), key=perm.__getitem__))
        return record_op("permute", (new,), {"perm": inverse}, parent.shape, new.dtype, "PermuteBackward0")._node
    if op == "detach":  # the detached tensor keeps the write's history; its root does not see it
        old = step.params["tracked"]
        if ancestor:  # an alias detached further up: its values change, its history and tangent stay
            step.params["tracked"] = None if old is None else splice(old, new)
        else:
            step.params["tracked"] = tracked_after(old, new)
        # nor its tangent (forward mode), nor another detach() alias the written one was made from
        cut = new.requires_grad or KEEP_SOURCES[0]
        return Node("detach", (new,), None, new.shape, new.dtype) if cut else new
    if op == "take":
        idx = step.params["index"].reshape(-1)
        size = parent.shape[0]
        flat = record_op("reshape", (new,), {"shape": (idx.size,)}, (idx.size,), new.dtype, None)._node
        window = {"shape": (size,), "axis": 0}
        placed = record_op("unindex", (flat, index_source(idx)), window, (size,), new.dtype, "AsStridedScatter")._node
        keep = np.ones(size, dtype=bool)
        keep[idx] = False
        cond = source(keep, D.bool_, device=None)
        return record_op("where", (cond, parent, placed), None, parent.shape, parent.dtype, "CopySlices")._node
    if op == "expand" or op == "reshape":
        return record_op("reshape", (new,), {"shape": parent.shape}, parent.shape, new.dtype, None)._node
    if op in COMPLEX_VIEWS:
        return _undo_complex(parent, op, new)
    raise AssertionError(op)


def unexpand(parent, step, new, child):
    """The value of ``parent`` once its broadcast ``step`` became ``new``: along a broadcast
    dimension every element is the same memory, and the one written is the one the view below
    (``child``, a slice) selected (the first, for a write to the whole expanded view)."""
    starts, stops = [], []
    for d, (a, b) in enumerate(zip(parent.shape, step.shape)):
        i = child.params["starts"][d] if child is not None and child.op == "slice" and a != b else 0
        starts.append(i if a != b else 0)
        stops.append(i + 1 if a != b else b)
    params = {"starts": tuple(starts), "stops": tuple(stops), "steps": (1,) * len(starts)}
    return record_op("slice", (new,), params, parent.shape, new.dtype, None)._node


def write_back(root_node, steps, new):
    """The root's new value once the view ``steps`` derive from it holds ``new``."""
    chain = [root_node]
    for step in steps[:-1]:
        chain.append(apply_step(chain[-1], step))
    child, detached = None, False
    for step, parent in zip(reversed(steps), reversed(chain)):
        if step.op == "expand" and parent.shape != step.shape:
            new = unexpand(parent, step, new, child)
        else:
            new = undo_step(parent, step, new, detached)
        child, detached = step, detached or step.op == "detach"
    if new.requires_grad and steps and not untracked(steps):
        name_node(new, "CopySlices")
    return new


# registration ---------------------------------------------------------------------------------------
def live_views(root):
    """The live views of ``root`` (dead weak references are dropped)."""
    refs = root._views
    if not refs:
        return []
    # a tensor given another storage since (``t.data = other``) is no longer a view of this one
    out = [v for v in (r() for r in refs) if v is not None and (v._view is None or v._view.root is root)]
    if len(out) != len(refs):
        root._views = [weakref.ref(v) for v in out]
    return out


def make_view(parent, out, made=None, index=0, maker=None, check=False, layout=None):
    """Register ``out`` (a tensor the view method just returned) as a view of ``parent``.
    ``check``: ``view``'s rule, an error when the strides do not allow it. Returns whether
    ``out`` is a view (a reshape the strides do not allow is a copy)."""
    pv = parent._view
    src = parent._node
    here = steps_between(src, out._node)
    if here is None:  # not made by movements alone: a new value
        return False
    # strides decide whether a reshape is a view (of a contiguous root it always is)
    shape, strided = src.shape, False
    for k, step in enumerate(here):
        if step.op == "reshape" and (pv is not None or k or parent._strides is not None):
            strided = strided or not _trivial(shape, step.shape)
        shape = step.shape
    if layout is None and strided:
        layout, shape = layout_of(parent), src.shape
        for step in here:
            layout = step_layout(layout, shape, step) if layout is not None else None
            shape = step.shape
        if layout is None:
            if check:
                raise RuntimeError(
                    "view size is not compatible with input tensor's size and stride (at least one dimension "
                    "spans across two contiguous subspaces). Use .reshape(...) instead."
                )
            return False
    root, base = origin(parent)
    steps = here if pv is None else join(pv.steps, here)
    if _gm.inference:
        made = "inference"
    elif not _gm.enabled:
        made = "no_grad"
    elif made is None and pv is not None:
        made = pv.made
    ov = out._view
    if ov is not None and ov.root is root:
        ov.made = made or ov.made
        ov.out, ov.maker = index, maker or ov.maker
        return True
    # the root's version counter, or a .data alias's own
    attach(out, root, steps, base, layout, out._vc or version_of(parent), made, index, maker)
    if (src.meta or NO_META).is_inference:  # a view of an inference tensor is one, in any mode
        own_meta(out._node).is_inference = True
    if made == "no_grad" and src.requires_grad and not out._node.requires_grad:
        # PyTorch's view made under no_grad of a tensor that requires grad: it requires grad, as a
        # leaf without grad_fn whose gradient goes nowhere
        out._node.requires_grad = True
    return True


def origin(t):
    """``t``'s storage root, and what a view of ``t`` reports as its ``_base`` (PyTorch's: the
    root, or the ``detach()`` alias it was taken from)."""
    v = t._view
    if v is None:
        return t, t
    return v.root, (t if v.base is None else v.base)


def attach(out, root, steps, base, layout, counter, made=None, index=0, maker=None):
    """Make ``out`` a view of ``root``'s storage through ``steps`` with version ``counter``."""
    out._view = ViewOf(root, steps, base, layout, made, index, maker)
    out._vc = counter
    remember(root, out)


def remember(root, view):
    """Add ``view`` to ``root``'s live views; dead references are dropped as the list doubles."""
    refs = root._views
    if refs is None:
        refs = root._views = []
    elif len(refs) >= 16 and len(refs) & (len(refs) - 1) == 0:
        live_views(root)
        refs = root._views
    refs.append(weakref.ref(view))


def function_view(out, given, maker):
    """Mark ``out``, an output of the custom Function ``maker`` that shares storage with one of
    its inputs (``given``, returned as it is, or None when ``out`` is a view made in
    ``forward``), as PyTorch does: modifying it in place is an error."""
    if given is not None:
        root, base = origin(given)
        v = given._view
        attach(out, root, () if v is None else v.steps, base, layout_of(given), version_of(root))
    out._view.made, out._view.maker = "function", maker


def view_of(t, steps):
    """A new view of ``t`` through movement ``steps`` (recorded from ``t``'s value now)."""
    out = wrap(replay(t._node, steps))
    root, base = origin(t)
    pv = t._view
    attach(out, root, steps if pv is None else join(pv.steps, steps), base, None, version_of(t))
    return out


def detached_view(t, out, share_version):
    """Register ``out`` (``t.detach()`` or ``t.data``) as sharing ``t``'s storage."""
    pv = t._view
    root = origin(t)[0]
    steps = (boundary(),) if pv is None else pv.steps + (boundary(),)
    attach(out, root, steps, None, layout_of(t), version_of(root) if share_version else Version())
    if (t._node.meta or NO_META).is_inference:  # as a view of an inference tensor is one
        own_meta(out._node).is_inference = True
    return out


def rebind(t, other):
    """``t.data = other`` after ``t`` took ``other``'s value: ``t`` now shares ``other``'s storage
    (PyTorch's ``set_data``) and no longer the one it shared before; it keeps its version counter
    and stays a leaf."""
    root = origin(other)[0]
    if root is t:  # its own storage (x.data = x[1:]): nothing else to share
        return
    pv = other._view
    steps = (boundary(),) if pv is None else pv.steps + (boundary(),)
    attach(t, root, steps, None, layout_of(other), version_of(t))
    t._view.leaf = t._node.requires_grad


class Version:
    """A version counter: how many in-place updates a storage has seen (shared by a base, its
    views and its ``detach()`` aliases, as in PyTorch; ``.data`` has its own)."""

    __slots__ = ("value",)

    def __init__(self):
        self.value = 0


def version_of(t):
    vc = t._vc
    if vc is None:
        vc = t._vc = Version()
    return vc


def diagonal_layout(t, offset=0, dim1=0, dim2=1):
    """PyTorch's layout of ``t.diagonal(offset, dim1, dim2)``."""
    strides, start = layout_of(t)
    nd = len(strides)
    d1, d2 = dim1 % nd, dim2 % nd
    shape = t._node.shape
    count = max(0, min(shape[d1], shape[d2] - offset) if offset >= 0 else min(shape[d1] + offset, shape[d2]))
    if count:
        start += offset * strides[d2] if offset >= 0 else -offset * strides[d1]
    rest = tuple(s for i, s in enumerate(strides) if i not in (d1, d2))
    return rest + (strides[d1] + strides[d2],), start


LAYOUTS = {"diagonal": diagonal_layout}


# set while a view method runs: the view methods it calls make intermediate values, not views
_nested = [False]


def viewing(fn, name):
    """Wrap the view method ``name`` so that its results share ``self``'s storage."""
    multi = MULTI.get(name)
    check = name == "view"
    known = LAYOUTS.get(name)
    copies = name in VIEWABLE

    def method(self, *args, **kwargs):
        if _nested[0]:
            return fn(self, *args, **kwargs)
        _nested[0] = True
        try:
            out = fn(self, *args, **kwargs)
        finally:
            _nested[0] = False
        if multi is not None:
            for i, o in enumerate(out):
                if o is not self:
                    make_view(self, o, "multi", i, multi)
        elif isinstance(out, TensorBase) and out is not self:
            layout = known(self, *args, **kwargs) if known is not None else None
            if not make_view(self, out, check=check, layout=layout) and copies and out._node.requires_grad:
                name_node(out._node, "UnsafeViewBackward0")  # PyTorch's reshape that copies
        return out

    method.__name__, method.__qualname__, method.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    method.__wrapped__ = fn
    return method


def install(cls):
    """Make the view methods of ``cls`` (``Tensor``) return views."""
    for name in ALWAYS + VIEWABLE + tuple(MULTI) + ("view",):
        fn = cls.__dict__.get(name) or getattr(cls, name, None)
        if fn is not None:
            setattr(cls, name, viewing(fn, name))
    for name in ALWAYS_PROPERTIES:
        prop = getattr(cls, name, None)
        if isinstance(prop, property):
            setattr(cls, name, property(viewing(prop.fget, name), prop.fset, doc=prop.__doc__))


def view_error(t, r):
    """PyTorch's error for an in-place update of view ``t`` to value ``r``, or None."""
    v = t._view
    if v is None or v.base is None or not _gm.enabled:
        return None
    base = v.base._node
    if not (base.requires_grad or r.requires_grad or t._node.requires_grad):
        return None
    if v.made == "inference" and not _gm.inference:
        return RuntimeError(INFERENCE_VIEW)
    if v.made in ("no_grad", "multi", "function"):
        name = t._node.requires_grad and re.sub(r"Backward\d*$", "", v.maker or (t._node.meta or NO_META).name or "")
        head = f"Output {v.out} of {name} is a view and is being modified inplace." if name else NO_GRAD_VIEW
        tail = {"no_grad": AMBIGUOUS, "multi": MULTI_OUTPUT, "function": IN_FUNCTION}[v.made]
        if v.made == "no_grad":
            head = NO_GRAD_VIEW
        return RuntimeError(f"{head} {tail}")
    if base.requires_grad and not base.differentiable:
        return RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
    return None


REBASED_HEAD = "its base or another view of its base has been modified inplace"


def rebase_error(u, old):
    """PyTorch's error for using view ``u`` (its grad_fn) once an in-place update of its storage
    (through its base, another view or ``u`` itself, in any grad mode) changed it, or None for a
    view it allows: one made in ``no_grad`` mode, as one of several outputs or by a custom
    Function, of a storage that requires grad. ``old``: ``u``'s node before the update."""
    v = u._view
    if v is None or v.base is None or v.made not in ("no_grad", "multi", "function"):
        return None
    had_fn = old.differentiable
    if not (had_fn or v.base._node.requires_grad):  # PyTorch checks only these
        return None
    name = re.sub(r"Backward\d*$", "", v.maker or (old.meta or NO_META).name or "")
    if v.made == "no_grad" or not had_fn:
        made_in = f"Output {v.out} of {name} is a view of a view which was" if had_fn else "A view was"
        head = f"{made_in} created in no_grad mode and {REBASED_HEAD} with grad mode enabled."
    else:
        head = f"Output {v.out} of {name} is a view and {REBASED_HEAD}."
    return f"{head} {dict(no_grad=AMBIGUOUS, multi=MULTI_OUTPUT, function=IN_FUNCTION)[v.made]}"


def overlaps(t):
    """Whether two elements of view ``t`` share one memory location (an expanded dimension, or
    ``as_strided`` strides that meet)."""
    strides, _ = layout_of(t)
    if any(s == 0 and n > 1 for s, n in zip(strides, t._node.shape)):
        return True
    takes = [s for s in t._view.steps if s.op == "take"]
    return bool(takes) and len(np.unique(takes[-1].params["index"])) != takes[-1].params["index"].size


def as_strided(t, size, stride, storage_offset=None):
    """``t.as_strided(size, stride, storage_offset)``: a view of ``t``'s storage whose element
    ``i`` is the storage's element ``storage_offset + sum(i[k] * stride[k])``, as in PyTorch."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError("mismatch in length of strides and shape")
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(size)}: {list(size)}")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got strides: {list(stride)}")
    pv = t._view
    root, base = origin(t)
    offset = layout_of(t)[1] if storage_offset is None else int(storage_offset)
    if offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {offset}")
    total, item = math.prod(root._node.shape), t._node.dtype.itemsize
    need = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if math.prod(size) else 0
    if need > total:
        raise RuntimeError(
            f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, and itemsize {item} "
            f"requiring a storage size of {need * item} are out of bounds for storage of size {total * item}"
        )
    index = np.full(size, offset, dtype=np.int64)
    for k, (n, s) in enumerate(zip(size, stride)):
        index += (np.arange(n, dtype=np.int64) * s).reshape((n,) + (1,) * (len(size) - k - 1))
    steps = (Step("reshape", {"shape": (total,)}, (total,), "ViewBackward0"),)
    if root._strides is not None:  # the storage holds the root's elements in the order of its strides
        order = tuple(sorted(range(len(root._strides)), key=lambda d: -root._strides[d]))
        moved = tuple(root._node.shape[d] for d in order)
        steps = (Step("permute", {"perm": order}, moved, "PermuteBackward0"),) + steps
    steps += (Step("take", {"index": index, "layout": (stride, offset)}, size, "AsStridedBackward0"),)
    if pv is not None and untracked(pv.steps):
        steps = (boundary(),) + steps
    out = wrap(replay(root._node, steps))
    attach(out, root, steps, base, (stride, offset), version_of(root))
    return out


INPUT_OVERLAP = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory "
    "location. Please clone() the tensor before performing the operation."
)


def check_overlap(out, *inputs):
    """PyTorch's error when an input of an in-place operation on ``out`` shares some, but not
    all, of ``out``'s memory (``x[1:].add_(x[:-1])``); like PyTorch, only tensors that fill a
    dense block are compared (anything else is allowed)."""
    if out._view is None and not out._views:
        return
    root = origin(out)[0]
    shape = out._node.shape
    for t in inputs:
        if not isinstance(t, TensorBase) or t is out:
            continue
        if origin(t)[0] is not root or not math.prod(shape) or not t.numel():
            continue
        (sa, a0), (sb, b0) = layout_of(out), layout_of(t)
        if not (dense(shape, sa) and dense(t._node.shape, sb)):
            continue
        a1, b1 = a0 + math.prod(shape), b0 + t.numel()
        if (a0 == b0 and a1 == b1 and sa != sb) or ((a0, a1) != (b0, b1) and a0 < b1 and b0 < a1):
            raise RuntimeError(INPUT_OVERLAP)
