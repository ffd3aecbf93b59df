"""Recording: how the facade turns an operation on tensors into a node of the lazy graph.

Contract: an operation computes nothing. The helpers here check operands, apply PyTorch's type
promotion (``operands``) and broadcasting (``broadcast_shapes``, whose error names both shapes),
infer the result's shape and dtype and record one ``Node`` (``record_op``, ``binary``, ``unary``,
``reduction``...), so an error is raised at the line that caused it. A recorded node that
requires grad carries its PyTorch grad_fn name in its facade annotations (``ngrad.autograd.meta``).
``wrap`` makes the ``Tensor`` that holds a node, ``value_of``/``host_value`` realize one.
``TensorBase`` is the data layout of every tensor; ``ngrad.tensor.core.Tensor`` adds the operations
and registers itself with ``use_tensor_class``, so that recording makes tensors of that class.
"""

import math

import numpy as np

from .. import grad_mode as _grad_mode
from ..autograd.meta import NAMED_META, REBASED, check_rebased, name_node
from ..engine.ir import dtypes as D
from ..engine.ir import graph as _graph
from ..engine.ir.graph import Node, settle_depth, source
from ..engine.runtime.realize import realize

_gm = _grad_mode.state
_object_new = object.__new__
_nodes_new = Node


class TensorBase:
    """The data of a tensor: ``_node``, its node of the lazy graph (replaced by in-place updates).

    Recording checks ``isinstance(x, TensorBase)``; the operations live on ``Tensor``."""

    # _grad/_retains_grad default at class level: most tensors never get either
    __slots__ = ("_node", "__dict__", "__weakref__")
    _grad = None
    _retains_grad = False
    _vc = None  # the version counter, made at the first in-place update or view
    _view = None  # a ViewOf (ngrad.tensor.views) when this tensor shares another's storage
    _views = None  # on a storage root: weak references to the tensors viewing it
    _strides = None  # on a storage root laid out other than row-major (a clone of a transpose)


# the class ``wrap`` instantiates: ngrad.tensor.core.Tensor once it is built (it is made of op
# families that record, so it cannot be imported here)
_tensor_class = TensorBase


def use_tensor_class(cls):
    """Make ``wrap`` and the recording helpers return instances of ``cls`` (``Tensor``)."""
    global _tensor_class
    _tensor_class = cls


class Size(tuple):
    """The shape of a tensor: a tuple that prints as ``ngrad.Size([2, 3])``."""

    def __repr__(self):
        return f"ngrad.Size({list(self)})"

    def numel(self):
        return math.prod(self)


class device:
    """Where a tensor lives: ``'cpu'`` or ``'cuda'`` (one GPU, index 0), as in PyTorch.
    Naming a device never needs a GPU; putting a tensor there does (``ngrad.cuda.is_available``).

    ```python
    >>> import ngrad
    >>> ngrad.device("cpu")
    device(type='cpu')
    >>> ngrad.device("cuda:0")
    device(type='cuda', index=0)

    ```
    """

    __slots__ = ("type", "index")

    def __init__(self, type="cpu", index=None):
        if isinstance(type, device):
            type, index = type.type, type.index
        elif isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type
        elif isinstance(type, str) and ":" in type:
            type, _, num = type.partition(":")
            if not num.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}:{num}'")
            index = int(num)
        if type not in ("cpu", "cuda"):
            raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: {type}")
        if index is not None and (type == "cpu" and index != 0 or type == "cuda" and index != 0):
            raise RuntimeError(f"ngrad supports one GPU, cuda:0 (got {type}:{index})")
        self.type, self.index = type, index

    def __repr__(self):
        return (
            f"device(type='{self.type}')" if self.index is None else f"device(type='{self.type}', index={self.index})"
        )

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other):
        if isinstance(other, (str, int)):
            other = device(other)
        return (
            isinstance(other, device)
            and other.type == self.type
            and (self.index is None or other.index is None or self.index == other.index)
        )

    def __hash__(self):
        return hash(self.type)


CPU = device("cpu")


CUDA = device("cuda", 0)


def device_name(dev):
    """The engine's name of a device argument (``'cpu'``/``'cuda'``; None stays None), checking
    that CUDA can be used before anything is put there."""
    if dev is None:
        return None
    name = device(dev).type
    if name == "cuda":
        from ..engine.targets.cuda import cuda_status

        ok, why = cuda_status()
        if not ok:
            raise RuntimeError(f"CUDA is not available: {why}")
    return name


def value_on(value, dev):
    """An array value moved to device ``dev`` ('cpu' or 'cuda') if it is not there already."""
    if value.__class__ is np.ndarray:
        if dev != "cuda":
            return value
        from ..engine.targets.cuda import to_device

        return to_device(value if value.flags.c_contiguous else np.ascontiguousarray(value).reshape(value.shape))
    if dev == "cuda":
        return value
    from ..engine.targets.cuda import to_host

    return to_host(value)


def host_value(t):
    """The realized value of tensor ``t`` as a NumPy array (copied from the GPU if it is there)."""
    v = value_of(t)
    return v if v.__class__ is np.ndarray else value_on(v, "cpu")


_PY_CATEGORY = {float: 2, int: 1, bool: 0, complex: 3}


_SCALAR = {"scalar": True}


def category(v):
    """0/1/2/3 for a bool/int/float/complex scalar (Python or NumPy), None for anything else."""
    c = _PY_CATEGORY.get(type(v))
    if c is not None:
        return c
    if isinstance(v, (bool, np.bool_)):
        return 0
    if isinstance(v, (int, np.integer)):
        return 1
    if isinstance(v, (float, np.floating)):
        return 2
    if isinstance(v, (complex, np.complexfloating)):
        return 3
    return None


def is_number(v):
    return category(v) is not None


def scalar_dtype(v):
    c = category(v)
    if c is None:
        raise TypeError(f"unsupported scalar type {type(v).__name__}")
    return D.scalar_type(c)


def wrap(node):
    t = _object_new(_tensor_class)
    t._node = node
    return t


# PyTorch's error, by primitive, for one it has no complex kernel for (``complex_ops`` fills it)
COMPLEX_REFUSED = {}


def record_op(op, srcs, params, shape, dtype, name):
    """Record ``op`` on source nodes; gradients flow when grad mode is on and a source needs them."""
    if dtype.category == 3 and op in COMPLEX_REFUSED:  # the refused keep their operand's dtype
        raise COMPLEX_REFUSED[op](dtype)
    rg = False
    if _gm.enabled and dtype.differentiable:
        for s in srcs:
            if s.requires_grad:
                rg = True
                break
    n = _nodes_new(op, srcs, params, shape, dtype, rg)
    if rg:
        if REBASED[0]:  # a view whose grad_fn PyTorch cannot rebuild (see tensor.views.rebase_error)
            check_rebased(srcs)
        shared = NAMED_META.get(name)
        if shared is not None and n.meta is None:  # name_node inlined: the hot path of recording
            n.meta = shared
        else:
            name_node(n, name)
    return wrap(n)


def scalar_node(v, dtype):
    """A runtime scalar input: its value is an argument of the program, not part of its key."""
    return _nodes_new("input", (), _SCALAR, (), dtype, False, v)


_PY_TYPE = (bool, int, float, complex)


_CONSTS = {}


def const_node(v, dtype):
    """A literal that is part of the program (it is in the tape and its cache key).

    Nodes are shared per (value, dtype); lowering dedupes literals by value as well, so the
    tape is the same whether or not a node came from this cache.
    """
    v = _PY_TYPE[dtype.category](v)
    key = (repr(v), dtype)  # repr, not ==: -0.0 is a different literal from 0.0
    n = _CONSTS.get(key)
    if n is None:
        if len(_CONSTS) > 4096:
            _CONSTS.clear()
        n = _CONSTS[key] = Node("const", (), {"value": v, "dtype": dtype.short}, (), dtype)
    return n


def cast_node(n, dtype):
    if n.dtype is dtype:
        return n
    rg = _gm.enabled and n.requires_grad and dtype.differentiable
    out = Node("cast", (n,), {"dtype": dtype.short}, n.shape, dtype, rg)
    if rg:
        if REBASED[0]:
            check_rebased((n,))
        name_node(out, "ToCopyBackward0")
    return out


def broadcast_shapes(a, b):
    if a == b or not b:
        return a
    if not a:
        return b
    la, lb = len(a), len(b)
    n = la if la > lb else lb
    out = []
    for i in range(n):
        x = a[i - n + la] if i - n + la >= 0 else 1
        y = b[i - n + lb] if i - n + lb >= 0 else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise RuntimeError(
                f"The size of tensor a ({x}) must match the size of tensor b ({y}) at "
                f"non-singleton dimension {i} (shapes {list(a)} and {list(b)})"
            )
    return tuple(out)


def to_tensor(v, dtype=None):
    return v if isinstance(v, TensorBase) else tensor(v, dtype=dtype)


def operands(a, b):
    """Nodes of two operands after PyTorch's type promotion, and the common dtype."""
    if isinstance(b, TensorBase):
        na, nb = a._node, b._node
        if na.dtype is nb.dtype:
            return na, nb, na.dtype
        tiers = ([], [])
        for n in (na, nb):
            tiers[0 if n.shape else 1].append(n.dtype)
        d = D.result_type(*tiers)
        return cast_node(na, d), cast_node(nb, d), d
    c = category(b)
    if c is not None:
        na = a._node
        d = na.dtype
        if c > d.category:
            d = D.result_type((d,), (), (D.scalar_type(c),))
            na = cast_node(na, d)
        return na, _nodes_new("input", (), _SCALAR, (), d, False, b), d
    if isinstance(b, (list, tuple, np.ndarray)):
        return operands(a, tensor(b))
    raise TypeError(f"unsupported operand type for a tensor operation: {type(b).__name__}")


def binary(op, a, b, name, reverse=False):
    na = a._node
    if type(b) is _tensor_class and b._node.dtype is na.dtype:
        nb, d = b._node, na.dtype
    else:
        c = _PY_CATEGORY.get(type(b))
        if c is None:
            na, nb, d = operands(a, b)
        else:  # the common case: tensor op Python number, inlined because it is the hot path
            d = na.dtype
            if c > d.category:
                d = D.result_type((d,), (), (D.scalar_type(c),))
                na = cast_node(na, d)
            nb = _nodes_new("input", (), _SCALAR, (), d, False, b)
    if reverse:
        na, nb = nb, na
    if d.category == 3 and op in COMPLEX_REFUSED:
        raise COMPLEX_REFUSED[op](d)
    sa, sb = na.shape, nb.shape
    shape = sa if sa == sb or not sb else (sb if not sa else broadcast_shapes(sa, sb))
    rg = (na.requires_grad or nb.requires_grad) and d.differentiable and _gm.enabled
    n = _nodes_new(op, (na, nb), None, shape, d, rg)
    if rg:
        if REBASED[0]:
            check_rebased((na, nb))
        shared = NAMED_META.get(name)
        if shared is not None and n.meta is None:  # name_node inlined: the hot path of recording
            n.meta = shared
        else:
            name_node(n, name)
    t = _object_new(_tensor_class)
    t._node = n
    return t


def float_binary(op, a, b, name, reverse=False):
    """Like ``binary`` but integer operands are promoted to the default float (true division)."""
    na, nb, d = operands(a, b)
    if not d.differentiable:
        d = D.get_default_dtype()
        na, nb = cast_node(na, d), cast_node(nb, d)
    if reverse:
        na, nb = nb, na
    shape = na.shape if na.shape == nb.shape else broadcast_shapes(na.shape, nb.shape)
    return record_op(op, (na, nb), None, shape, d, name)


def compare(op, a, b):
    na, nb, d = operands(a, b)
    if d.category == 3 and op in COMPLEX_REFUSED:
        raise COMPLEX_REFUSED[op](d)
    shape = na.shape if na.shape == nb.shape else broadcast_shapes(na.shape, nb.shape)
    return wrap(Node(op, (na, nb), None, shape, D.bool_))


def float_node(n):
    return n if n.dtype.differentiable else cast_node(n, D.get_default_dtype())


def unary(op, t, name):
    n = float_node(t._node)
    return record_op(op, (n,), None, n.shape, n.dtype, name)


def named(t, name):
    if t._node.requires_grad:
        name_node(t._node, name)
    return t


def normalize_dim(d, ndim):
    if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
        raise TypeError(f"dim must be an int, got {type(d).__name__}")
    lo, hi = (-ndim, ndim - 1) if ndim else (-1, 0)
    if not lo <= d <= hi:
        raise IndexError(f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {d})")
    return int(d) % ndim if ndim else 0


def normalize_dims(dim, ndim):
    """Normalize ``dim`` (None, int or sequence) to a sorted tuple of axes."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (list, tuple)):
        if len(dim) == 0:
            return tuple(range(ndim))
        axes = [normalize_dim(d, ndim) for d in dim]
        if len(set(axes)) != len(axes):
            raise RuntimeError(f"dim {axes[0]} appears multiple times in the list of dims")
        return tuple(sorted(axes)) if ndim else ()
    axis = normalize_dim(dim, ndim)  # checked for a 0-d tensor too: only 0 and -1 name its dim
    return (axis,) if ndim else ()


def shape_arg(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, Size)):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, TensorBase):
            s = s.item()
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
            raise TypeError(f"size must be a sequence of ints, got {type(s).__name__}")
        out.append(int(s))
    return tuple(out)


def reshape_node(n, shape, name="ViewBackward0"):
    if tuple(shape) == n.shape:
        return n
    rg = _gm.enabled and n.requires_grad
    out = Node("reshape", (n,), {"shape": tuple(shape)}, tuple(shape), n.dtype, rg)
    if rg:
        if REBASED[0]:
            check_rebased((n,))
        name_node(out, name)
    return out


def expand_node(n, shape, name="ExpandBackward0"):
    shape = tuple(shape)
    if n.shape == shape:
        return n
    if len(n.shape) < len(shape):
        n = reshape_node(n, (1,) * (len(shape) - len(n.shape)) + n.shape)
    rg = _gm.enabled and n.requires_grad
    out = Node("expand", (n,), {"shape": shape}, shape, n.dtype, rg)
    if rg:
        if REBASED[0]:
            check_rebased((n,))
        name_node(out, name)
    return out


def is_traced(n):
    """Whether ``n`` holds an argument value of the ``ngrad.compile`` call being traced (a copy
    of it must stay a node of the program, not become a constant)."""
    tr = _gm.trace
    return tr is not None and id(n) in tr.traced


def realize_values(nodes):
    """``realize``, except while ``ngrad.compile`` traces: then a value that depends on the traced
    arguments does not exist yet, and asking for it is an error (never a stale constant)."""
    tr = _gm.trace
    if tr is not None:
        tr.check_concrete(nodes)
        return realize(nodes)
    return realize(nodes, keep=True)  # what the program still holds is realized with what it reads


def _realize_deep(node):
    """``Node``'s hook for a node that ends a chain of more than ``PENDING_DEPTH`` pending nodes:
    realize it, with the values still held (see ``realize``), unless ``ngrad.compile`` is
    tracing (its program is the whole graph) or the chain is shorter than recorded. A movement
    waits for the next computation: it may be a view, which must still reach its base's value
    through its sources (``views.make_view``), and it costs nothing to keep pending."""
    if _gm.trace is None and node.op not in _MOVEMENTS and settle_depth(node) > _graph.PENDING_DEPTH:
        realize([node], keep=True)


_MOVEMENTS = frozenset(["reshape", "permute", "expand", "slice"])


_graph.ON_DEEP[0] = _realize_deep


def value_of(t):
    n = t._node
    if n.value is not None and _gm.trace is None:  # the common case: nothing to compute or check
        return n.value
    return realize_values([n])[0]


TORCH_NAME = {
    "f32": "Float",
    "f64": "Double",
    "i64": "Long",
    "i32": "Int",
    "b8": "Bool",
    "c64": "ComplexFloat",
    "c128": "ComplexDouble",
}


def index_array(a, size, dim):
    """NumPy index array ``a`` into dimension ``dim`` (of ``size``) checked and made non-negative."""
    if a.size and (a.min() < -size or a.max() >= size):
        bad = int(a.max() if a.max() >= size else a.min())
        raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {size}")
    return index_source(np.where(a < 0, a + size, a))


def index_source(arr):
    """Index arrays the facade computed: copied to the device of the graph that uses them."""
    # ascontiguousarray would make a 0-d index (a 0-d integer tensor's) one of shape (1,)
    arr = np.require(arr, dtype=np.int64, requirements="C")
    return source(arr, D.int64, device=None)


def cast_tensor(t, dtype):
    return wrap(cast_node(t._node, dtype))


def tensor(data, dtype=None, device=None, requires_grad=False):
    from ..factories import tensor as make

    return make(data, dtype=dtype, device=device, requires_grad=requires_grad)
