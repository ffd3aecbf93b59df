"""The facade: ``ngrad.Tensor`` and the operations on it, with PyTorch's semantics.

An operation computes nothing: it checks its operands, infers the result's shape and dtype
(so errors are raised at the line that caused them), and records a ``Node`` of the lazy graph.
Values are computed when something needs them (``.numpy()``, ``.item()``, ``repr``,
``backward()``...). Composite operations (``sigmoid``-free ones such as ``mean``, ``softmax``,
``norm``) are written in primitives; the last node of a composite carries PyTorch's grad_fn
name. This module imports the engine; the engine never imports it.
"""

import math
import weakref
from collections import namedtuple

import numpy as np

from . import grad_mode as _grad_mode
from ._format import format_tensor
from .engine.ir import dtypes as D
from .engine.ir.graph import Node, source
from .engine.runtime.realize import realize

__all__ = ["Tensor", "Size", "device"]

_gm = _grad_mode.state
_object_new = object.__new__
_nodes_new = Node
_MAX = namedtuple("max", ["values", "indices"])
_MIN = namedtuple("min", ["values", "indices"])
_SORT = namedtuple("sort", ["values", "indices"])
_TOPK = namedtuple("topk", ["values", "indices"])
# non-leaf nodes with tensor hooks and outputs of custom Functions: while one lives, backward
# checks whether its graph needs to run in segments (see ngrad.autograd.reverse)
_segment_nodes = weakref.WeakSet()


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


_CPU = device("cpu")
_CUDA = device("cuda", 0)


def _device_name(dev):
    """The engine's name of a device argument (``'cpu'``/``'cuda'``; None stays None), checking
    that CUDA can be used before anything is put there."""
    if dev is None:
        return None
    name = device(dev).type
    if name == "cuda":
        from .engine.targets.compile import cuda_status

        ok, why = cuda_status()
        if not ok:
            raise RuntimeError(f"CUDA is not available: {why}")
    return name


def _value_on(value, dev):
    """An array value moved to device ``dev`` ('cpu' or 'cuda') if it is not there already."""
    if value.__class__ is np.ndarray:
        if dev != "cuda":
            return value
        from .engine.targets.compile import to_device

        return to_device(value if value.flags.c_contiguous else np.ascontiguousarray(value).reshape(value.shape))
    if dev == "cuda":
        return value
    from .engine.targets.compile import to_host

    return to_host(value)


def _host(t):
    """The realized value of tensor ``t`` as a NumPy array (copied from the GPU if it is there)."""
    v = _value(t)
    return v if v.__class__ is np.ndarray else _value_on(v, "cpu")


# --- helpers -------------------------------------------------------------------------------------

_PY_CATEGORY = {float: 2, int: 1, bool: 0}
_SCALAR = {"scalar": True}


def _category(v):
    """0/1/2 for a bool/int/float scalar (Python or NumPy), None for anything else."""
    c = _PY_CATEGORY.get(type(v))
    if c is not None:
        return c
    if isinstance(v, (bool, np.bool_)):
        return 0
    if isinstance(v, (int, np.integer)):
        return 1
    if isinstance(v, (float, np.floating)):
        return 2
    return None


def _is_num(v):
    return _category(v) is not None


def _scalar_dtype(v):
    c = _category(v)
    if c is None:
        raise TypeError(f"unsupported scalar type {type(v).__name__}")
    return (D.bool_, D.int64, D.get_default_dtype())[c]


def _wrap(node):
    t = _object_new(Tensor)
    t._node = node
    return t


def _new(op, srcs, params, shape, dtype, name):
    """Record ``op`` on source nodes; gradients flow when grad mode is on and a source needs them."""
    rg = False
    if _gm.enabled and dtype.is_floating_point:
        for s in srcs:
            if s.requires_grad:
                rg = True
                break
    n = _nodes_new(op, srcs, params, shape, dtype, rg)
    if rg:
        n.name = name
    return _wrap(n)


def _scalar_node(v, dtype):
    """A runtime scalar input: its value is an argument of the program, not part of its key."""
    return _nodes_new("input", (), _SCALAR, (), dtype, False, v)


_PY_TYPE = (bool, int, float)
_ALL_AXES = [tuple(range(i)) for i in range(65)]


_CONSTS = {}


def _const_node(v, dtype):
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


def _cast_node(n, dtype):
    if n.dtype is dtype:
        return n
    rg = _gm.enabled and n.requires_grad and dtype.is_floating_point
    out = Node("cast", (n,), {"dtype": dtype.short}, n.shape, dtype, rg)
    if rg:
        out.name = "ToCopyBackward0"
    return out


def _broadcast(a, b):
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


def _as_tensor(v, dtype=None):
    return v if isinstance(v, Tensor) else tensor(v, dtype=dtype)


def _operands(a, b):
    """Nodes of two operands after PyTorch's type promotion, and the common dtype."""
    if isinstance(b, Tensor):
        na, nb = a._node, b._node
        if na.dtype is nb.dtype:
            return na, nb, na.dtype
        tiers = ([], [])
        for n in (na, nb):
            tiers[0 if n.shape else 1].append(n.dtype)
        d = D.result_type(*tiers)
        return _cast_node(na, d), _cast_node(nb, d), d
    c = _category(b)
    if c is not None:
        na = a._node
        d = na.dtype
        if c > d.category:
            d = (D.bool_, D.int64, D.get_default_dtype())[c]
            na = _cast_node(na, d)
        return na, _nodes_new("input", (), _SCALAR, (), d, False, b), d
    if isinstance(b, (list, tuple, np.ndarray)):
        return _operands(a, tensor(b))
    raise TypeError(f"unsupported operand type for a tensor operation: {type(b).__name__}")


def _binary(op, a, b, name, reverse=False):
    na = a._node
    if type(b) is Tensor and b._node.dtype is na.dtype:
        nb, d = b._node, na.dtype
    else:
        c = _PY_CATEGORY.get(type(b))
        if c is None:
            na, nb, d = _operands(a, b)
        else:  # the common case: tensor op Python number, inlined because it is the hot path
            d = na.dtype
            if c > d.category:
                d = (D.bool_, D.int64, D.get_default_dtype())[c]
                na = _cast_node(na, d)
            nb = _nodes_new("input", (), _SCALAR, (), d, False, b)
    if reverse:
        na, nb = nb, na
    sa, sb = na.shape, nb.shape
    shape = sa if sa == sb or not sb else (sb if not sa else _broadcast(sa, sb))
    rg = (na.requires_grad or nb.requires_grad) and d.is_floating_point and _gm.enabled
    n = _nodes_new(op, (na, nb), None, shape, d, rg)
    if rg:
        n.name = name
    t = _object_new(Tensor)
    t._node = n
    return t


def _is_pow2(v):
    m, e = math.frexp(v)
    return abs(m) == 0.5 and -100 < e < 100  # 2**-e is exact and normal in float32 too


def _float_binary(op, a, b, name, reverse=False):
    """Like ``_binary`` but integer operands are promoted to the default float (true division)."""
    na, nb, d = _operands(a, b)
    if not d.is_floating_point:
        d = D.get_default_dtype()
        na, nb = _cast_node(na, d), _cast_node(nb, d)
    if reverse:
        na, nb = nb, na
    shape = na.shape if na.shape == nb.shape else _broadcast(na.shape, nb.shape)
    return _new(op, (na, nb), None, shape, d, name)


def _compare(op, a, b):
    na, nb, _ = _operands(a, b)
    shape = na.shape if na.shape == nb.shape else _broadcast(na.shape, nb.shape)
    return _wrap(Node(op, (na, nb), None, shape, D.bool_))


def _float_node(n):
    return n if n.dtype.is_floating_point else _cast_node(n, D.get_default_dtype())


def _unary(op, t, name):
    n = _float_node(t._node)
    return _new(op, (n,), None, n.shape, n.dtype, name)


def _named(t, name):
    if t._node.requires_grad:
        t._node.name = name
    return t


def _dim(d, ndim):
    if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
        raise TypeError(f"dim must be an int, got {type(d).__name__}")
    lo, hi = (-ndim, ndim - 1) if ndim else (-1, 0)
    if not lo <= d <= hi:
        raise IndexError(f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {d})")
    return int(d) % ndim if ndim else 0


def _dims(dim, ndim):
    """Normalize ``dim`` (None, int or sequence) to a sorted tuple of axes."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (list, tuple)):
        if len(dim) == 0:
            return tuple(range(ndim))
        axes = [_dim(d, ndim) for d in dim]
        if len(set(axes)) != len(axes):
            raise RuntimeError(f"dim {axes[0]} appears multiple times in the list of dims")
        return tuple(sorted(axes)) if ndim else ()
    return (_dim(dim, ndim),) if ndim else ()


def _reduce(op, t, dim, keepdim, name, node=None):
    n = node or t._node
    axes = _dims(dim, len(n.shape))
    shape = tuple((1 if i in axes else s) for i, s in enumerate(n.shape) if keepdim or i not in axes)
    return _new(op, (n,), {"axes": axes, "keepdim": bool(keepdim)}, shape, n.dtype, name)


def _shape_arg(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, Size)):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, Tensor):
            s = s.item()
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
            raise TypeError(f"size must be a sequence of ints, got {type(s).__name__}")
        out.append(int(s))
    return tuple(out)


def _reshape_node(n, shape, name="ViewBackward0"):
    if tuple(shape) == n.shape:
        return n
    rg = _gm.enabled and n.requires_grad
    out = Node("reshape", (n,), {"shape": tuple(shape)}, tuple(shape), n.dtype, rg)
    if rg:
        out.name = name
    return out


def _expand_node(n, shape, name="ExpandBackward0"):
    shape = tuple(shape)
    if n.shape == shape:
        return n
    if len(n.shape) < len(shape):
        n = _reshape_node(n, (1,) * (len(shape) - len(n.shape)) + n.shape)
    rg = _gm.enabled and n.requires_grad
    out = Node("expand", (n,), {"shape": shape}, shape, n.dtype, rg)
    if rg:
        out.name = name
    return out


def _traced(n):
    """Whether ``n`` holds an argument value of the ``ngrad.compile`` call being traced (a copy
    of it must stay a node of the program, not become a constant)."""
    tr = _gm.trace
    return tr is not None and id(n) in tr.traced


def _realize(nodes):
    """``realize``, except while ``ngrad.compile`` traces: then a value that depends on the traced
    arguments does not exist yet, and asking for it is an error (never a stale constant)."""
    tr = _gm.trace
    if tr is not None:
        tr.check_concrete(nodes)
    return realize(nodes)


def _value(t):
    n = t._node
    if n.value is not None and _gm.trace is None:  # the common case: nothing to compute or check
        return n.value
    return _realize([n])[0]


# In-place operations replace a tensor's node: values are immutable, so a graph recorded before
# the update keeps the value it was recorded with. Every replacement goes through ``_replace``,
# which tells an active ``ngrad.compile`` trace (the update is an effect of the compiled program)
# and marks the old node, so compiled programs that hold it as a constant notice and retrace.
_TORCH_NAME = {"f32": "Float", "f64": "Double", "i64": "Long", "i32": "Int", "b8": "Bool"}
replacements = [0]


def _replace(t, node):
    tr = _gm.trace
    if tr is not None:
        tr.note(t)
    old = t._node
    old.replaced = True
    replacements[0] += 1
    t._node = node


def _leaf_update(r, n):
    """The node of leaf ``n`` after an in-place update to value ``r``: a leaf again (same
    requires_grad, same owner). Outside a trace the value is computed now, as for
    ``requires_grad_``: a parameter must not chain every past update into its history."""
    if r.value is None and _gm.trace is None:
        _realize([r])
    if r.value is not None and not _traced(r):
        leaf = source(r.value, r.dtype)
    else:
        leaf = Node("detach", (r,), None, r.shape, r.dtype)
    leaf.requires_grad = True
    leaf.owner, leaf.hooks, leaf.post_hooks = n.owner, n.hooks, n.post_hooks
    return leaf


class _Version:
    """A version counter: how many in-place updates the value of a tensor has seen (shared by
    a tensor and its ``detach()`` aliases, as in PyTorch)."""

    __slots__ = ("value",)

    def __init__(self):
        self.value = 0


def _vc(t):
    vc = t._vc
    if vc is None:
        vc = t._vc = _Version()
    return vc


def _alias(t, other, share_version):
    """Make ``other`` an alias of ``t``: an in-place update of either shows in both."""
    group = t._aliases
    if group is None:
        group = t._aliases = [weakref.ref(t)]
    group.append(weakref.ref(other))
    other._aliases = group
    if share_version:
        other._vc = _vc(t)
    return other


def _follow(u, r):
    """The node of alias ``u`` after its alias was updated in place to ``r``: the same value,
    with ``u``'s own gradient semantics (a leaf stays a leaf, a non-leaf keeps its history)."""
    n = u._node
    value = r if not r.requires_grad else Node("detach", (r,), None, r.shape, r.dtype)
    if not n.requires_grad:
        return value
    if not n.differentiable:
        return _leaf_update(value, n)
    with _grad_mode.enable_grad():
        return (_wrap(n) + (_wrap(value) - _wrap(n)).detach())._node


def _inplace(t, result):
    """Make ``t`` hold ``result`` (a tensor of ``t``'s shape); PyTorch's rules for in-place ops."""
    n = t._node
    r = result._node if isinstance(result, Tensor) else tensor(result)._node
    if r.shape != n.shape:
        raise RuntimeError(f"output with shape {list(n.shape)} doesn't match the broadcast shape {list(r.shape)}")
    if r.dtype is not n.dtype:
        if r.dtype.category > n.dtype.category:
            raise RuntimeError(
                f"result type {_TORCH_NAME[r.dtype.short]} can't be cast to the desired output "
                f"type {_TORCH_NAME[n.dtype.short]}"
            )
        r = _cast_node(r, n.dtype)
    if n.is_inference and not _gm.inference:
        raise RuntimeError(
            "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a "
            "clone to get a normal tensor before doing inplace update.See "
            "https://github.com/pytorch/rfcs/pull/17 for more details."
        )
    if n.requires_grad and not n.differentiable:
        if _gm.enabled:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        new = _leaf_update(r, n)
    elif n.requires_grad and not r.requires_grad:
        # under no_grad a non-leaf keeps its gradient path: new value, old history
        step = _wrap(r) - _wrap(n)
        with _grad_mode.enable_grad():
            new = (_wrap(n) + step.detach())._node
    else:
        new = r
    vc = _vc(t)
    # a backward that needs the old value now fails, as in PyTorch, unless the reader is this
    # operation's own result
    n.stale = (vc, vc.value, _readers(new, n))
    vc.value += 1
    _replace(t, new)
    if t._aliases is not None:
        for ref in t._aliases:
            u = ref()
            if u is not None and u is not t:
                old, follow = u._node, _follow(u, r)
                if u._vc is vc:  # a .data alias has its own counter, and autograd does not see it
                    old.stale = (vc, vc.value - 1, _readers(follow, old))
                _replace(u, follow)
    return t


def _readers(new, old):
    """Ids of the nodes an in-place update just recorded that read ``old`` (a few levels below
    ``new``: the op itself, a cast, the no_grad history splice)."""
    found, stack = set(), [(new, 0)]
    while stack:
        m, depth = stack.pop()
        if m is old or depth > 4:
            continue
        if any(s is old for s in m.srcs):
            found.add(id(m))
        stack.extend((s, depth + 1) for s in m.srcs)
    return found


def _index_array(a, size, dim):
    """NumPy index array ``a`` into dimension ``dim`` (of ``size``) checked and made non-negative."""
    if a.size and (a.min() < -size or a.max() >= size):
        bad = int(a.max() if a.max() >= size else a.min())
        raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {size}")
    return _index_source(np.where(a < 0, a + size, a))


def _index_source(arr):
    """Index arrays the facade computed: copied to the device of the graph that uses them."""
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    return source(arr, D.int64, device=None)


# --- the tensor ------------------------------------------------------------------------------------


class Tensor:
    """A multi-dimensional array that records operations for automatic differentiation.

    Tensors are made by factories (``ngrad.tensor``, ``ngrad.zeros``, ``ngrad.randn`` ...) or
    by operations on other tensors. Operations are recorded lazily and computed when a value
    is needed.

    ```python
    >>> import ngrad
    >>> x = ngrad.tensor([1.0, 2.0], requires_grad=True)
    >>> y = (x * x).sum()
    >>> y.backward()
    >>> x.grad
    tensor([2., 4.])

    ```
    """

    # _grad/_retains_grad default at class level: most tensors never get either
    __slots__ = ("_node", "__dict__", "__weakref__")
    _grad = None
    _retains_grad = False
    _vc = None  # the version counter, made at the first in-place update or detach()
    _aliases = None  # weakrefs of the tensors sharing this value (detach(), .data)
    __array_ufunc__ = None  # NumPy defers to the reflected operators: ndarray * Tensor -> Tensor
    __array_priority__ = 1000

    def __new__(cls, *args):
        if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
            return tensor(args[0], dtype=D.get_default_dtype())
        from .factories import zeros

        return zeros(*args)

    # metadata ---------------------------------------------------------------------------------
    @property
    def shape(self):
        return Size(self._node.shape)

    def size(self, dim=None):
        """The shape, or the size of one dimension."""
        s = self._node.shape
        return Size(s) if dim is None else s[_dim(dim, len(s))]

    @property
    def dtype(self):
        return self._node.dtype

    @property
    def device(self):
        return _CUDA if self._node.device == "cuda" else _CPU

    @property
    def is_cuda(self):
        return self._node.device == "cuda"

    @property
    def __cuda_array_interface__(self):
        """The GPU memory of a CUDA tensor, for CuPy, PyTorch or Numba to use without a copy."""
        if self._node.device != "cuda":
            raise AttributeError(
                "Can't get __cuda_array_interface__ on non-CUDA tensor type: cpu. "
                "If CUDA data is required use tensor.cuda() to copy tensor to device memory."
            )
        if self._node.requires_grad:
            raise RuntimeError(
                "Can't get __cuda_array_interface__ on Variable that requires grad. If gradients "
                "aren't required, use var.detach() to get Variable that doesn't require grad."
            )
        return _value(self).__cuda_array_interface__

    @property
    def ndim(self):
        return len(self._node.shape)

    def dim(self):
        return len(self._node.shape)

    def numel(self):
        return math.prod(self._node.shape)

    nelement = numel

    def is_floating_point(self):
        return self._node.dtype.is_floating_point

    def __len__(self):
        if not self._node.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._node.shape[0]

    # autograd metadata ------------------------------------------------------------------------
    @property
    def requires_grad(self):
        return self._node.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad=True):
        """Make this leaf record operations for gradients (in place); returns self."""
        n = self._node
        if n.differentiable:
            if not requires_grad:
                raise RuntimeError(
                    "you can only change requires_grad flags of leaf variables. If you want "
                    "to use a computed variable in a subgraph that doesn't require "
                    "differentiation use var_no_grad = var.detach()."
                )
            return self
        if requires_grad and not n.dtype.is_floating_point:
            raise RuntimeError("only Tensors of floating point and complex dtype can require gradients")
        if requires_grad and n.value is None and _gm.trace is None:
            # a leaf holds a value: computing it now also cuts its history (an optimizer loop's
            # `w = (w - lr * g).requires_grad_()` must not chain every past step into the graph);
            # while ngrad.compile traces, the program computes it
            realize([n])
        n.requires_grad = bool(requires_grad)
        n.owner = weakref.ref(self) if requires_grad else None
        return self

    @property
    def is_leaf(self):
        return not self._node.differentiable

    @property
    def grad_fn(self):
        n = self._node
        return BackwardNode(n) if n.differentiable else None

    @property
    def grad(self):
        if _gm.trace is not None:
            _gm.trace.note_grad(self)
        if self._grad is None and self._node.differentiable and not self._retains_grad:
            import warnings

            warnings.warn(
                "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. "
                "Its .grad attribute won't be populated during autograd.backward(). If you "
                "indeed want the .grad field to be populated for a non-leaf Tensor, use "
                ".retain_grad() on the non-leaf Tensor.",
                UserWarning,
                stacklevel=2,
            )
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(
                    f"assigned grad expected to be a Tensor or None but got grad of type {type(value).__name__}"
                )
            if value.dtype is not self.dtype:
                raise RuntimeError(f"assigned grad has data of a different type ({value.dtype} vs {self.dtype})")
            if value._node.shape != self._node.shape:
                raise RuntimeError(
                    f"assigned grad has data of a different size ({list(value.shape)} vs {list(self.shape)})"
                )
            if value.device != self.device:
                raise RuntimeError(
                    f"assigned grad has data located on a different device ({value.device} vs {self.device})"
                )
        if _gm.trace is not None:
            _gm.trace.note_grad(self)
        self._grad = value

    def retain_grad(self):
        """Keep this non-leaf tensor's gradient in ``.grad`` during ``backward`` (no-op on leaves)."""
        n = self._node
        if not n.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if n.differentiable:
            self._retains_grad = True
            n.owner = weakref.ref(self)

    @property
    def retains_grad(self):
        return self._retains_grad

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate the gradient of this tensor into the ``.grad`` of graph leaves.

        See ``ngrad.autograd.backward``; ``gradient`` is needed unless this tensor has one element.
        """
        from .autograd.reverse import backward

        backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    def detach(self):
        """A tensor with the same value that is cut from the graph (never requires grad).

        As in PyTorch it shares the value and the version counter: an in-place update of
        either one shows in both.

        ```python
        >>> import ngrad
        >>> w = ngrad.ones(2, requires_grad=True)
        >>> d = w.detach()
        >>> d.mul_(3)
        tensor([3., 3.])
        >>> w, w._version
        (tensor([3., 3.], requires_grad=True), 1)

        ```
        """
        return _alias(self, self._detached(), True)

    def _detached(self):
        n = self._node
        if n.value is not None and not _traced(n):
            return _wrap(source(n.value, n.dtype))
        return _wrap(Node("detach", (n,), None, n.shape, n.dtype))

    def detach_(self):
        if self._node.differentiable:
            self._node = self._detached()._node
        return self

    @property
    def data(self):
        """The value as a tensor outside the graph; an alias like ``detach()``, but with its
        own version counter (updates through it are not seen by autograd's checks)."""
        return _alias(self, self._detached(), False)

    @property
    def _version(self):
        """How many in-place updates this tensor's value has seen."""
        return 0 if self._vc is None else self._vc.value

    def register_hook(self, hook):
        """Register ``hook(grad)``, called with this tensor's gradient whenever it is computed
        (``backward`` and ``autograd.grad``). It may return a tensor of the same shape and
        dtype that replaces the gradient; on a leaf it runs before accumulation into ``.grad``.
        Returns a handle whose ``remove()`` unregisters it.

        ```python
        >>> import ngrad
        >>> x = ngrad.tensor([1.0, 2.0], requires_grad=True)
        >>> y = x * 3
        >>> seen = []
        >>> h = y.register_hook(lambda g: seen.append(g))
        >>> h2 = y.register_hook(lambda g: g * 2)
        >>> y.sum().backward()
        >>> seen, x.grad
        ([tensor([1., 1.])], tensor([6., 6.]))

        ```
        """
        n = self._node
        if not n.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if not callable(hook):
            raise TypeError(f"hook must be callable, got {type(hook).__name__}")
        if n.hooks is None:
            n.hooks = {}
        if n.differentiable:
            _segment_nodes.add(n)
        from ._hooks import RemovableHandle

        handle = RemovableHandle(n.hooks)
        n.hooks[handle.id] = hook
        return handle

    def register_post_accumulate_grad_hook(self, hook):
        """Register ``hook(tensor)`` on a leaf, called by ``backward`` after the gradient was
        accumulated into ``.grad`` (an optimizer can step there). Returns a removable handle.

        ```python
        >>> import ngrad
        >>> w = ngrad.tensor([1.0], requires_grad=True)
        >>> h = w.register_post_accumulate_grad_hook(lambda t: print("grad", t.grad))
        >>> (w * 5).sum().backward()
        grad tensor([5.])

        ```
        """
        n = self._node
        if not n.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if n.differentiable:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if n.post_hooks is None:
            n.post_hooks = {}
        from ._hooks import RemovableHandle

        handle = RemovableHandle(n.post_hooks)
        n.post_hooks[handle.id] = hook
        return handle

    def is_inference(self):
        """Whether this tensor was made under ``inference_mode``."""
        return self._node.is_inference

    @data.setter
    def data(self, other):
        v = _value(_as_tensor(other))
        n = self._node
        if n.differentiable:
            raise RuntimeError("setting .data is only supported on leaf tensors")
        new = source(v, D.from_numpy_dtype(v.dtype))
        new.requires_grad, new.owner, new.hooks, new.post_hooks = n.requires_grad, n.owner, n.hooks, n.post_hooks
        _replace(self, new)

    # values -------------------------------------------------------------------------------------
    def numpy(self, *, force=False):
        """The value as a NumPy array (realizing it if needed).

        ```python
        >>> import ngrad
        >>> ngrad.tensor([1, 2]).numpy()
        array([1, 2])

        ```
        """
        if self._node.device == "cuda" and not force:
            raise TypeError(
                "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
                "tensor to host memory first."
            )
        if self._node.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return np.asarray(_host(self))

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def item(self):
        """The value of a one-element tensor as a Python number."""
        n = self.numel()
        if n != 1:
            raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
        return _host(self).reshape(()).item()

    def tolist(self):
        return _host(self).tolist()

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.category != 1 or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __iter__(self):
        if not self._node.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._node.shape[0]))

    def __repr__(self):
        n = self._node
        suffixes = []
        default = D.get_default_dtype() if n.dtype.is_floating_point else D.int64
        if n.dtype is not default and n.dtype is not D.bool_:
            suffixes.append(f"dtype={n.dtype!r}")
        if n.differentiable:
            suffixes.append(f"grad_fn=<{BackwardNode(n).name()}>")
        elif n.requires_grad:
            suffixes.append("requires_grad=True")
        if n.device == "cuda":
            suffixes.insert(0, "device='cuda:0'")
        return format_tensor(np.asarray(_host(self)), suffixes)

    __str__ = __repr__

    def __format__(self, spec):
        if self.ndim == 0:
            return format(self.item(), spec)
        return format(repr(self), spec)

    __hash__ = object.__hash__

    def __reduce_ex__(self, protocol):
        return (tensor, (_host(self), self.dtype, str(self.device), self.requires_grad))

    def __deepcopy__(self, memo):
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the "
                "deepcopy protocol at the moment."
            )
        out = _wrap(source(_value_on(np.array(_host(self)), self._node.device), self.dtype))
        if self.requires_grad:
            out.requires_grad_()
        memo[id(self)] = out
        return out

    # conversion ---------------------------------------------------------------------------------
    def to(self, *args, **kwargs):
        """Convert dtype and/or device (``t.to(ngrad.float64)``, ``t.to('cuda')``, ``t.to(other)``).

        ```python
        >>> import ngrad
        >>> ngrad.tensor([1, 2]).to(ngrad.float64).to("cpu")
        tensor([1., 2.], dtype=ngrad.float64)

        ```
        """
        dtype, dev = kwargs.get("dtype"), kwargs.get("device")
        for a in args:
            if isinstance(a, D.DType):
                dtype = a
            elif isinstance(a, Tensor):
                dtype, dev = a.dtype, a.device
            elif isinstance(a, (str, device, int)) and not isinstance(a, bool):
                dev = a
        out = self
        if dev is not None:
            out = out._moved(_device_name(dev))
        if dtype is None or dtype is out.dtype:
            return out
        return _wrap_cast(out, dtype)

    def _moved(self, dev):
        """This tensor on device ``dev`` (itself if it is there): a copy of its value."""
        n = self._node
        if (n.device == "cuda") == (dev == "cuda"):
            return self
        if n.requires_grad and _gm.enabled:
            raise RuntimeError(
                f"ngrad cannot differentiate through a copy between devices: create the tensor "
                f"on {dev} (device='{dev}', requires_grad=True), or copy it before requires_grad_() "
                f"or under ngrad.no_grad()"
            )
        return _wrap(source(_value_on(_value(self), dev), n.dtype))

    def cuda(self, device=None):
        """A copy of this tensor in GPU memory (itself if it is there already)."""
        return self._moved(_device_name("cuda" if device is None else device))

    def cpu(self):
        """A copy of this tensor in host memory (itself if it is there already)."""
        return self._moved("cpu")

    def type(self, dtype=None):
        if dtype is None:
            return {
                "f32": "ngrad.FloatTensor",
                "f64": "ngrad.DoubleTensor",
                "i64": "ngrad.LongTensor",
                "i32": "ngrad.IntTensor",
                "b8": "ngrad.BoolTensor",
            }[self.dtype.short]
        return self.to(dtype)

    def type_as(self, other):
        return self.to(other.dtype)

    def float(self):
        return self.to(D.float32)

    def double(self):
        return self.to(D.float64)

    def long(self):
        return self.to(D.int64)

    def int(self):
        return self.to(D.int32)

    def bool(self):
        return self.to(D.bool_)

    def contiguous(self):
        return self

    def clone(self):
        """A copy with its own storage; gradients flow through it."""
        n = self._node
        if not n.requires_grad and n.value is not None and not _traced(n):
            if n.device == "cuda":
                from .engine.targets.compile import device_copy

                return _wrap(source(device_copy(n.value), n.dtype))
            return _wrap(source(np.array(n.value), n.dtype))
        return _new("reshape", (n,), {"shape": n.shape}, n.shape, n.dtype, "CloneBackward0")

    # arithmetic ---------------------------------------------------------------------------------
    def __add__(self, other):
        return _binary("add", self, other, "AddBackward0")

    def __radd__(self, other):
        return _binary("add", self, other, "AddBackward0", reverse=True)

    def __sub__(self, other):
        if self.dtype is D.bool_ and not isinstance(other, Tensor):
            raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported.")
        return _binary("sub", self, other, "SubBackward0")

    def __rsub__(self, other):
        return _binary("sub", self, other, "RsubBackward1", reverse=True)

    def __mul__(self, other):
        return _binary("mul", self, other, "MulBackward0")

    def __rmul__(self, other):
        return _binary("mul", self, other, "MulBackward0", reverse=True)

    def __truediv__(self, other):
        if type(other) in (float, int) and other and _is_pow2(other):
            # x / 2**k == x * 2**-k exactly (both round the same real once), and a multiplication
            # vectorises where a division costs 5-10x more
            return _binary("mul", self, 1.0 / other, "DivBackward0")
        return _float_binary("div", self, other, "DivBackward0")

    def __rtruediv__(self, other):
        return _float_binary("div", self, other, "DivBackward0", reverse=True)

    def __pow__(self, exponent):
        return pow(self, exponent)

    def __rpow__(self, base):
        n, e, d = _operands(self, base)
        return _new("pow", (e, n), None, n.shape, d, "PowBackward2")

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(_as_tensor(other), self)

    def __neg__(self):
        if self.dtype is D.bool_:
            raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported.")
        n = self._node
        return _new("neg", (n,), None, n.shape, n.dtype, "NegBackward0")

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def add(self, other, *, alpha=1):
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, *, alpha=1):
        return self - (other * alpha if alpha != 1 else other)

    def mul(self, other):
        return self * other

    multiply = mul

    def div(self, other, *, rounding_mode=None):
        if rounding_mode is None:
            return self / other
        if rounding_mode not in ("trunc", "floor"):
            raise RuntimeError(
                f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'"
            )
        q = self / other
        if rounding_mode == "floor":
            q = q.floor()
        else:
            q = q.sign() * q.abs().floor()
        na, _, d = _operands(self, other)
        return q.to(d) if not d.is_floating_point else q

    divide = true_divide = div

    def pow(self, exponent):
        return pow(self, exponent)

    def neg(self):
        return -self

    negative = neg

    def __floordiv__(self, other):
        return self.div(other, rounding_mode="floor")

    def remainder(self, other):
        """``self - other * floor(self / other)``, computed exactly: the sign of ``other`` (Python's
        ``%``). The gradient is 1 in ``self`` and ``-floor(self / other)`` in ``other``.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([-7.5, 7.5]) % 2, ngrad.tensor([-7.5, 7.5]).fmod(2)
        (tensor([0.5000, 1.5000]), tensor([-1.5000,  1.5000]))

        ```
        """
        return _binary("remainder", self, other, "RemainderBackward0")

    def __mod__(self, other):
        return self.remainder(other)

    def __rmod__(self, other):
        return _binary("remainder", self, other, "RemainderBackward0", reverse=True)

    def fmod(self, other):
        """``self - other * trunc(self / other)``, computed exactly: the sign of ``self`` (C's
        ``fmod``). The gradient is 1 in ``self`` and ``-trunc(self / other)`` in ``other``."""
        return _binary("fmod", self, other, "FmodBackward0")

    # in place -------------------------------------------------------------------------------------
    # PyTorch's in-place ops. A leaf that requires grad may be updated only under no_grad (the
    # optimizer idiom ``w -= lr * w.grad``); it stays a leaf. Views do not alias (ngrad values are
    # immutable): updating a tensor leaves tensors taken from it unchanged.
    def add_(self, other, *, alpha=1):
        """In place ``self += alpha * other``; returns self.

        ```python
        >>> import ngrad
        >>> w = ngrad.ones(2, requires_grad=True)
        >>> with ngrad.no_grad():
        ...     w.sub_(ngrad.tensor([0.5, 1.0]), alpha=2)
        tensor([ 0., -1.], requires_grad=True)
        >>> w.is_leaf
        True

        ```
        """
        return _inplace(self, self.add(other, alpha=alpha))

    def sub_(self, other, *, alpha=1):
        return _inplace(self, self.sub(other, alpha=alpha))

    def mul_(self, other):
        return _inplace(self, self * other)

    def div_(self, other, *, rounding_mode=None):
        return _inplace(self, self.div(other, rounding_mode=rounding_mode))

    def pow_(self, exponent):
        return _inplace(self, pow(self, exponent))

    def neg_(self):
        return _inplace(self, -self)

    def zero_(self):
        """Fill with zeros in place; returns self."""
        return self.fill_(0)

    def fill_(self, value):
        if isinstance(value, Tensor):
            if value.dim() != 0:
                raise RuntimeError(
                    f"fill_ only supports 0-dimension value tensor but got tensor with {value.dim()} dimensions."
                )
            return _inplace(self, value.to(self.dtype).expand(self.shape))
        return _inplace(self, _wrap(_expand_node(_const_node(value, self.dtype), self._node.shape)))

    def copy_(self, src):
        """Copy ``src`` (broadcast to this shape, cast to this dtype) into this tensor."""
        src = _as_tensor(src).to(self.dtype)
        # expand makes a new node; clone keeps two tensors from sharing one
        return _inplace(self, src.expand(self.shape) if src.shape != self.shape else src.clone())

    def clamp_(self, min=None, max=None):
        return _inplace(self, self.clamp(min, max))

    clip_ = clamp_

    def masked_fill_(self, mask, value):
        return _inplace(self, self.masked_fill(mask, value))

    def clamp_min_(self, min):
        return _inplace(self, self.clamp(min=min))

    def clamp_max_(self, max):
        return _inplace(self, self.clamp(max=max))

    def addcmul_(self, tensor1, tensor2, *, value=1):
        return _inplace(self, self.addcmul(tensor1, tensor2, value=value))

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        return _inplace(self, self.addcdiv(tensor1, tensor2, value=value))

    def lerp_(self, end, weight):
        return _inplace(self, self.lerp(end, weight))

    def __iadd__(self, other):
        return _inplace(self, self + other)

    def __isub__(self, other):
        return _inplace(self, self - other)

    def __imul__(self, other):
        return _inplace(self, self * other)

    def __itruediv__(self, other):
        return _inplace(self, self / other)

    def addcmul(self, tensor1, tensor2, *, value=1):
        """``self + value * tensor1 * tensor2``, evaluated left to right as PyTorch does."""
        one = isinstance(value, (int, float)) and value == 1
        return self + (tensor1 * tensor2 if one else value * tensor1 * tensor2)

    def addcdiv(self, tensor1, tensor2, *, value=1):
        """``self + value * tensor1 / tensor2``, evaluated left to right as PyTorch does."""
        one = isinstance(value, (int, float)) and value == 1
        return self + (tensor1 / tensor2 if one else value * tensor1 / tensor2)

    def lerp(self, end, weight):
        """``self + weight * (end - self)`` (for a number ``weight >= 0.5``, ``end - (end - self) *
        (1 - weight)``, PyTorch's more accurate form there)."""
        if isinstance(weight, (int, float)) and weight >= 0.5:
            return end - (end - self) * (1 - weight)
        return self + weight * (end - self)

    # comparisons and logic --------------------------------------------------------------------------
    def __lt__(self, other):
        return _compare("lt", self, other)

    def __le__(self, other):
        return _compare("le", self, other)

    def __gt__(self, other):
        return _compare("gt", self, other)

    def __ge__(self, other):
        return _compare("ge", self, other)

    def __eq__(self, other):
        if other is None:
            return False
        return _compare("eq", self, other)

    def __ne__(self, other):
        if other is None:
            return True
        return _compare("ne", self, other)

    lt, le, gt, ge, eq, ne = __lt__, __le__, __gt__, __ge__, __eq__, __ne__
    less, less_equal, greater, greater_equal, not_equal = lt, le, gt, ge, ne

    def _logical(self, op, other):
        other = _as_tensor(other)
        if self.dtype is not D.bool_ or other.dtype is not D.bool_:
            raise TypeError(f"{op} is only supported on bool tensors here, got {self.dtype} and {other.dtype}")
        a, b = self._node, other._node
        return _wrap(Node(op, (a, b), None, _broadcast(a.shape, b.shape), D.bool_))

    def __and__(self, other):
        return self._logical("logical_and", other)

    def __or__(self, other):
        return self._logical("logical_or", other)

    def __xor__(self, other):
        return self._logical("ne", other)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __invert__(self):
        if self.dtype is not D.bool_:
            raise TypeError("~ is only supported on bool tensors here")
        return self.logical_not()

    def logical_not(self):
        n = self._node if self.dtype is D.bool_ else (self != 0)._node
        return _wrap(Node("logical_not", (n,), None, n.shape, D.bool_))

    def logical_and(self, other):
        return self.bool()._logical("logical_and", _as_tensor(other).bool())

    def logical_or(self, other):
        return self.bool()._logical("logical_or", _as_tensor(other).bool())

    def isnan(self):
        n = self._node
        if not n.dtype.is_floating_point:
            return (
                _wrap(source(_value_on(np.zeros(n.shape, bool), n.device), D.bool_))
                if n.value is not None
                else self != self
            )
        return _wrap(Node("isnan", (n,), None, n.shape, D.bool_))

    def any(self, dim=None, keepdim=False):
        return self.bool().long().sum(dim, keepdim=keepdim) > 0

    def all(self, dim=None, keepdim=False):
        return self.logical_not().long().sum(dim, keepdim=keepdim) == 0

    # elementwise math ---------------------------------------------------------------------------------
    def log2(self):
        return _named(self.log() * (1 / math.log(2)), "Log2Backward0")

    def log10(self):
        return _named(self.log() * (1 / math.log(10)), "Log10Backward0")

    def rsqrt(self):
        return _named(1 / self.sqrt(), "RsqrtBackward0")

    def reciprocal(self):
        return _named(1 / _wrap(_float_node(self._node)), "ReciprocalBackward0")

    def square(self):
        return _named(self * self, "PowBackward0")

    def relu(self):
        n = self._node
        zero = _const_node(0, n.dtype)
        mask = Node("gt", (n, zero), None, n.shape, D.bool_)
        return _new("where", (mask, n, zero), None, n.shape, n.dtype, "ReluBackward0")

    def softplus(self, beta=1.0, threshold=20.0):
        x = self if beta == 1 else self * beta
        n = _float_node(x._node)
        soft = _new("softplus", (n,), None, n.shape, n.dtype, "SoftplusBackward0")
        if beta != 1:
            soft = soft / beta
        return _named(where(x > threshold, self, soft), "SoftplusBackward0")

    def abs(self):
        n = self._node
        return _new("abs", (n,), None, n.shape, n.dtype, "AbsBackward0")

    absolute = abs

    def sign(self):
        n = self._node
        return _new("sign", (n,), None, n.shape, n.dtype, "SignBackward0")

    def _rounding(self, op, name):
        n = self._node
        if not n.dtype.is_floating_point:
            return self.clone()
        return _new(op, (n,), None, n.shape, n.dtype, name)

    def floor(self):
        return self._rounding("floor", "FloorBackward0")

    def ceil(self):
        return self._rounding("ceil", "CeilBackward0")

    def round(self):
        return self._rounding("round", "RoundBackward0")

    def maximum(self, other):
        return _binary("maximum", self, _as_tensor(other), "MaximumBackward0")

    def minimum(self, other):
        return _binary("minimum", self, _as_tensor(other), "MinimumBackward0")

    def clamp(self, min=None, max=None):
        """Clamp into ``[min, max]``; the gradient passes where ``min <= x <= max`` (bounds inclusive)."""
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        # nested wheres, not maximum/minimum: the bounds are inclusive for the gradient
        out = self
        if min is not None:
            out = where(out < min, min, out)
        if max is not None:
            out = where(out > max, max, out)
        return _named(out, "ClampBackward1")

    clip = clamp

    def clamp_min(self, min):
        return self.clamp(min=min)

    def clamp_max(self, max):
        return self.clamp(max=max)

    # reductions -----------------------------------------------------------------------------------------
    def sum(self, dim=None, keepdim=False, *, dtype=None):
        n = self._node
        if dtype is not None:
            n = _cast_node(n, dtype)
        elif n.dtype.category < 2:
            n = _cast_node(n, D.int64)
        if dim is None and not keepdim:  # the full sum of a loss: the hot path
            return _new("sum", (n,), {"axes": _ALL_AXES[len(n.shape)], "keepdim": False}, (), n.dtype, "SumBackward0")
        return _reduce("sum", self, dim, keepdim, "SumBackward0" if dim is None else "SumBackward1", n)

    def mean(self, dim=None, keepdim=False, *, dtype=None):
        n = self._node if dtype is None else _cast_node(self._node, dtype)
        if not n.dtype.is_floating_point:
            raise RuntimeError(
                "mean(): could not infer output dtype. Input dtype must be either a floating "
                f"point or complex dtype. Got: {n.dtype.name.capitalize()}"
            )
        axes = _dims(dim, len(n.shape))
        count = math.prod(n.shape[a] for a in axes)
        s = _reduce("sum", self, dim, keepdim, "SumBackward1", n)
        out = _named(s / count if count else s * float("nan"), "MeanBackward0" if dim is None else "MeanBackward1")
        out._node.saves = False  # PyTorch's MeanBackward saves no tensor: a second backward works
        return out

    def prod(self, dim=None, keepdim=False, *, dtype=None):
        n = self._node
        if dtype is not None:
            n = _cast_node(n, dtype)
        elif n.dtype.category < 2:
            n = _cast_node(n, D.int64)
        return _reduce("prod", self, dim, keepdim, "ProdBackward0" if dim is None else "ProdBackward1", n)

    def _extreme(self, op, dim, keepdim, name):
        n = self._node
        axes = _dims(dim, len(n.shape))
        if any(n.shape[a] == 0 for a in axes) or (not axes and 0 in n.shape):
            raise RuntimeError(
                f"{op}(): Expected reduction dim to be specified for input.numel() == 0. "
                "Specify the reduction dim with the 'dim' argument."
            )
        return _reduce(op, self, dim, keepdim, name)

    def amax(self, dim=(), keepdim=False):
        return self._extreme("amax", dim, keepdim, "AmaxBackward0")

    def amin(self, dim=(), keepdim=False):
        return self._extreme("amin", dim, keepdim, "AminBackward0")

    def _arg_extreme(self, op, dim, keepdim):
        n = self._node
        if dim is None:
            n = _reshape_node(n, (math.prod(n.shape),))
            axis, keepdim = 0, False
        else:
            axis = _dim(dim, len(n.shape))
        if not n.shape:
            n = _reshape_node(n, (1,))
            axis = 0
        if n.shape[axis] == 0:
            raise IndexError(f"{op}(): Expected reduction dim {axis} to have non-zero size.")
        shape = tuple((1 if i == axis else s) for i, s in enumerate(n.shape) if keepdim or i != axis)
        if dim is not None and not self._node.shape:
            shape = ()
        return _wrap(Node(op, (n,), {"axis": axis, "keepdim": bool(keepdim)}, shape, D.int64))

    def argmax(self, dim=None, keepdim=False):
        return self._arg_extreme("argmax", dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        return self._arg_extreme("argmin", dim, keepdim)

    def _max_min(self, op, dim, keepdim, other, name, tup):
        if isinstance(dim, Tensor) and other is None:
            dim, other = None, dim
        if other is not None:
            return self.maximum(other) if op == "amax" else self.minimum(other)
        if dim is None:
            return self._extreme(op, None, False, name + "1")
        idx = self._arg_extreme("argmax" if op == "amax" else "argmin", dim, True)
        axis = _dim(dim, max(self.ndim, 1))
        vals = self.gather(axis, idx) if self.ndim else self
        if not keepdim and self.ndim:
            vals, idx = vals.squeeze(axis), idx.squeeze(axis)
        return tup(_named(vals, name + "0"), idx)

    def argsort(self, dim=-1, descending=False, stable=False):
        """The indices that sort along ``dim``. The sort is stable (equal values keep their order,
        for either direction) and NaN sorts as the largest value, as in PyTorch."""
        n = self._node
        if not n.shape:
            return _wrap(source(_value_on(np.zeros((), np.int64), n.device), D.int64))
        axis = _dim(dim, len(n.shape))
        return _wrap(Node("argsort", (n,), {"axis": axis, "descending": bool(descending)}, n.shape, D.int64))

    def sort(self, dim=-1, descending=False, stable=False):
        """``(values, indices)`` sorted along ``dim``; the gradient of the values goes back to the
        entries they came from.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([3.0, 1.0, 2.0]).sort(descending=True)
        sort(values=tensor([3., 2., 1.]), indices=tensor([0, 2, 1]))

        ```
        """
        idx = self.argsort(dim, descending)
        if not self.ndim:
            return _SORT(self.clone(), idx)
        return _SORT(_named(self.gather(_dim(dim, self.ndim), idx), "SortBackward0"), idx)

    def topk(self, k, dim=-1, largest=True, sorted=True):
        """The ``k`` largest (or smallest) entries along ``dim`` and their indices, in order."""
        d = _dim(dim, max(self.ndim, 1))
        size = self.shape[d] if self.ndim else 1
        if not 0 <= k <= size:
            raise RuntimeError("selected index k out of range")
        values, indices = self.sort(dim, descending=largest)
        if not self.ndim:
            return _TOPK(values, indices)
        return _TOPK(_named(values.narrow(d, 0, k), "TopkBackward0"), indices.narrow(d, 0, k))

    def max(self, dim=None, keepdim=False, other=None):
        """Full reduction (ties share the gradient evenly), or ``(values, indices)`` along ``dim``."""
        return self._max_min("amax", dim, keepdim, other, "MaxBackward", _MAX)

    def min(self, dim=None, keepdim=False, other=None):
        return self._max_min("amin", dim, keepdim, other, "MinBackward", _MIN)

    def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        return _named(self._var(dim, unbiased, keepdim, correction), "VarBackward0")

    def _var(self, dim, unbiased, keepdim, correction):
        if isinstance(dim, bool):
            dim, unbiased = None, dim
        if correction is None:
            correction = 1 if unbiased is None or unbiased else 0
        x = _wrap(_float_node(self._node))
        axes = _dims(dim, x.ndim)
        n = math.prod(x._node.shape[a] for a in axes)
        centered = x - x.mean(axes, keepdim=True)
        return (centered * centered).sum(axes, keepdim=keepdim) / max(0, n - correction)

    def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        return _named(self._var(dim, unbiased, keepdim, correction).sqrt(), "StdBackward0")

    def norm(self, p="fro", dim=None, keepdim=False):
        """Vector p-norm over ``dim`` (all elements by default); the gradient at 0 is 0."""
        x = _wrap(_float_node(self._node))
        if p == "fro" or p is None:
            p = 2
        if isinstance(p, str):
            raise RuntimeError(f"norm: unsupported p={p!r}")
        p = float(p)
        axes = _dims(dim, x.ndim)
        if p == math.inf:
            out = x.abs().amax(axes, keepdim)
        elif p == -math.inf:
            out = x.abs().amin(axes, keepdim)
        elif p == 0:
            out = (x != 0).to(x.dtype).sum(axes, keepdim)
        elif p == 1:
            out = x.abs().sum(axes, keepdim)
        else:
            s = (x * x).sum(axes, keepdim) if p == 2 else (x.abs() ** p).sum(axes, keepdim)
            # the double-where keeps the derivative at s == 0 finite (PyTorch gives 0 there)
            zero = s == 0
            safe = where(zero, 1.0, s)
            out = where(zero, 0.0, safe.sqrt() if p == 2 else safe ** (1.0 / p))
        return _named(out, "LinalgVectorNormBackward0")

    def logsumexp(self, dim, keepdim=False):
        x = _wrap(_float_node(self._node))
        axes = _dims(dim, x.ndim)
        m = x.detach().amax(axes, keepdim=True) if x.numel() else zeros_like_node(x, axes)
        m = where(m.abs() == math.inf, 0.0, m)
        out = (x - m).exp().sum(axes, keepdim=True).log() + m
        if not keepdim:
            out = out.squeeze(axes)
        return _named(out, "LogsumexpBackward0")

    def softmax(self, dim):
        x = _wrap(_float_node(self._node))
        axis = _dim(dim, x.ndim)
        e = (x - x.detach().amax(axis, keepdim=True)).exp()
        return _named(e / e.sum(axis, keepdim=True), "SoftmaxBackward0")

    def log_softmax(self, dim):
        x = _wrap(_float_node(self._node))
        return _named(x - x.logsumexp(dim, keepdim=True), "LogSoftmaxBackward0")

    def cumsum(self, dim, *, dtype=None):
        n = self._node
        if dtype is not None:
            n = _cast_node(n, dtype)
        elif n.dtype.category < 2:
            n = _cast_node(n, D.int64)
        if not n.shape:
            return _wrap(n) if n is not self._node else self.clone()
        return _new("cumsum", (n,), {"axis": _dim(dim, len(n.shape))}, n.shape, n.dtype, "CumsumBackward0")

    # shape and movement ---------------------------------------------------------------------------------
    def reshape(self, *shape):
        shape = _shape_arg(shape)
        n = self._node
        total = math.prod(n.shape)
        if shape.count(-1) > 1:
            raise RuntimeError("only one dimension can be inferred")
        if -1 in shape:
            rest = math.prod(s for s in shape if s != -1)
            if rest == 0 or total % rest:
                raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {total}")
            shape = tuple(total // rest if s == -1 else s for s in shape)
        if any(s < 0 for s in shape) or math.prod(shape) != total:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {total}")
        if shape == n.shape:
            return _new("reshape", (n,), {"shape": shape}, shape, n.dtype, "ViewBackward0")
        return _wrap(_reshape_node(n, shape))

    view = reshape

    def view_as(self, other):
        return self.reshape(other.shape)

    reshape_as = view_as

    def flatten(self, start_dim=0, end_dim=-1):
        nd = self.ndim
        if nd == 0:
            return self.reshape(1)
        s, e = _dim(start_dim, nd), _dim(end_dim, nd)
        if s > e:
            raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
        if s == e:
            return self
        shape = self.shape
        return self.reshape(shape[:s] + (math.prod(shape[s : e + 1]),) + shape[e + 1 :])

    def squeeze(self, dim=None):
        shape = self._node.shape
        axes = set(_dims(dim, len(shape))) if dim is not None else set(range(len(shape)))
        new = tuple(s for i, s in enumerate(shape) if not (i in axes and s == 1))
        return _named(self.reshape(new), "SqueezeBackward0")

    def unsqueeze(self, dim):
        shape = self._node.shape
        d = _dim(dim, len(shape) + 1)
        return _named(self.reshape(shape[:d] + (1,) + shape[d:]), "UnsqueezeBackward0")

    def permute(self, *dims):
        dims = _shape_arg(dims)
        n = self._node
        nd = len(n.shape)
        if len(dims) != nd:
            raise RuntimeError(
                f"permute(sparse_coo): number of dimensions in the tensor input does not match "
                f"the length of the desired ordering of dimensions i.e. input.dim() = {nd} is "
                f"not equal to len(dims) = {len(dims)}"
            )
        perm = tuple(_dim(d, nd) for d in dims)
        if len(set(perm)) != nd:
            raise RuntimeError("permute(): duplicate dims are not allowed.")
        if perm == tuple(range(nd)):
            return _new("reshape", (n,), {"shape": n.shape}, n.shape, n.dtype, "PermuteBackward0")
        return _new("permute", (n,), {"perm": perm}, tuple(n.shape[p] for p in perm), n.dtype, "PermuteBackward0")

    def transpose(self, dim0, dim1):
        nd = self.ndim
        if nd == 0:
            return self
        a, b = _dim(dim0, nd), _dim(dim1, nd)
        perm = list(range(nd))
        perm[a], perm[b] = perm[b], perm[a]
        return _named(self.permute(perm), "TransposeBackward0")

    swapaxes = swapdims = transpose

    def t(self):
        if self.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        return _named(self.transpose(0, 1) if self.ndim == 2 else self.reshape(self.shape), "TBackward0")

    @property
    def T(self):
        return self.permute(tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self):
        if self.ndim < 2:
            raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. Got 1-D tensor.")
        return self.transpose(-2, -1)

    def sum_to_size(self, *size):
        """Sum over broadcast dimensions down to ``size`` (the gradient of an ``expand``).

        ```python
        >>> import ngrad
        >>> ngrad.ones(2, 3).sum_to_size(1, 3)
        tensor([[2., 2., 2.]])

        ```
        """
        shape, mine = _shape_arg(size), self._node.shape
        lead = len(mine) - len(shape)
        if lead < 0 or any(a != b and a != 1 for a, b in zip(shape, mine[lead:])):
            raise RuntimeError(f"size {{{list(shape)}}} is not expandable to size {{{list(mine)}}}.")
        axes = tuple(range(lead)) + tuple(lead + i for i, a in enumerate(shape) if a == 1 and mine[lead + i] != 1)
        out = self.sum(dim=axes, keepdim=True) if axes else self
        return out.reshape(shape)

    def expand(self, *sizes):
        sizes = _shape_arg(sizes)
        shape = self._node.shape
        if len(sizes) < len(shape):
            raise RuntimeError(
                f"expand(torch.FloatTensor{{{list(shape)}}}, size=[{len(sizes)}]): the number of "
                "sizes provided must be greater or equal to the number of dimensions in the tensor"
            )
        lead = len(sizes) - len(shape)
        out = []
        for i, s in enumerate(sizes):
            cur = shape[i - lead] if i >= lead else None
            if s == -1:
                if cur is None:
                    raise RuntimeError("expand: -1 is not allowed in a leading, non-existing dimension")
                s = cur
            if cur is not None and cur != s and cur != 1:
                raise RuntimeError(
                    f"The expanded size of the tensor ({s}) must match the existing size ({cur}) "
                    f"at non-singleton dimension {i}.  Target sizes: {list(sizes)}.  Tensor "
                    f"sizes: {list(shape)}"
                )
            out.append(s)
        n = self._node
        if tuple(out) == shape:
            return _new("reshape", (n,), {"shape": shape}, shape, n.dtype, "ExpandBackward0")
        return _wrap(_expand_node(n, out))

    def expand_as(self, other):
        return self.expand(other.shape)

    def broadcast_to(self, *shape):
        return self.expand(*shape)

    def repeat(self, *sizes):
        sizes = _shape_arg(sizes)
        shape = self._node.shape
        if len(sizes) < len(shape):
            raise RuntimeError(
                "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor"
            )
        shape = (1,) * (len(sizes) - len(shape)) + shape
        inter = tuple(v for s in shape for v in (1, s))
        big = tuple(v for r, s in zip(sizes, shape) for v in (r, s))
        out = self.reshape(inter).expand(big).reshape(tuple(r * s for r, s in zip(sizes, shape)))
        return _named(out, "RepeatBackward0")

    def flip(self, *dims):
        dims = _shape_arg(dims)
        n = self._node
        axes = _dims(dims, len(n.shape)) if dims else ()
        if not axes:
            return self.clone()
        return _new("flip", (n,), {"axes": axes}, n.shape, n.dtype, "FlipBackward0")

    def roll(self, shifts, dims=None):
        if dims is None:
            return _named(self.flatten().roll(shifts, 0).reshape(self.shape), "RollBackward0")
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shifts) != len(dims):
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
        out = self
        for s, d in zip(shifts, dims):
            d = _dim(d, self.ndim)
            size = self.shape[d]
            if size == 0 or s % size == 0:
                continue
            s %= size
            out = cat([out.narrow(d, size - s, s), out.narrow(d, 0, size - s)], d)
        return _named(out if out is not self else self.clone(), "RollBackward0")

    def narrow(self, dim, start, length):
        d = _dim(dim, self.ndim)
        key = [slice(None)] * d + [slice(start, start + length)]
        return self[tuple(key)]

    def split(self, split_size_or_sections, dim=0):
        d = _dim(dim, self.ndim)
        size = self.shape[d]
        if isinstance(split_size_or_sections, int):
            step = split_size_or_sections
            if step <= 0:
                raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {size}")
            sections = [min(step, size - i) for i in range(0, size, step)] or [0]
        else:
            sections = list(split_size_or_sections)
            if sum(sections) != size:
                raise RuntimeError(
                    f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's "
                    f"size at dimension {d}), but got split_sizes={sections}"
                )
        out, start = [], 0
        for s in sections:
            out.append(_named(self.narrow(d, start, s), "SplitBackward0"))
            start += s
        return tuple(out)

    def chunk(self, chunks, dim=0):
        if chunks <= 0:
            raise RuntimeError("chunk expects `chunks` to be greater than 0")
        size = self.shape[_dim(dim, self.ndim)]
        return self.split(max(1, -(-size // chunks)), dim)

    def unbind(self, dim=0):
        d = _dim(dim, self.ndim)
        return tuple(self.select(d, i) for i in range(self.shape[d]))

    def select(self, dim, index):
        d = _dim(dim, self.ndim)
        return self[(slice(None),) * d + (index,)]

    def gather(self, dim, index):
        """``out[i][j] = self[index[i][j]][j]`` for ``dim=0`` (and so on); gradients scatter-add back."""
        n, idx = self._node, _as_tensor(index)
        axis = _dim(dim, max(len(n.shape), 1))
        if idx.dtype is not D.int64:
            raise RuntimeError("gather(): Expected dtype int64 for index")
        if idx.ndim != len(n.shape):
            raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
        for d, (a, b) in enumerate(zip(idx.shape, n.shape)):
            if d != axis and a > b:
                raise RuntimeError(
                    f"Size does not match at dimension {d} expected index {list(idx.shape)} to be "
                    f"no larger than self {list(n.shape)} apart from dimension {axis}"
                )
        x = self
        if any(d != axis and a != b for d, (a, b) in enumerate(zip(idx.shape, n.shape))):
            x = self[tuple(slice(0, a) if d != axis else slice(None) for d, a in enumerate(idx.shape))]
        xn = x._node
        if _gm.trace is not None:
            # under ngrad.compile the index may be the program's own result (an argmax): it is
            # read when the program runs, where NumPy checks its bounds, not now
            return _new("gather", (xn, idx._node), {"axis": axis}, tuple(idx.shape), xn.dtype, "GatherBackward0")
        iv = _host(idx)
        if iv.size and (iv.min() < -n.shape[axis] or iv.max() >= n.shape[axis]):
            raise RuntimeError(
                f"index {int(iv.max() if iv.max() >= n.shape[axis] else iv.min())} is out of "
                f"bounds for dimension {axis} with size {n.shape[axis]}"
            )
        iv = np.where(iv < 0, iv + n.shape[axis], iv)
        return _new("gather", (xn, _index_source(iv)), {"axis": axis}, tuple(idx.shape), xn.dtype, "GatherBackward0")

    def index_select(self, dim, index):
        idx = _as_tensor(index)
        if idx.ndim > 1:
            raise IndexError("index_select(): Index is supposed to be a vector")
        if idx.dtype.category != 1:
            raise RuntimeError("index_select(): Expected dtype int32/int64 for index")
        d = _dim(dim, max(self.ndim, 1))
        out = self._advanced(d, [_host(idx).reshape(-1)])
        return _named(out, "IndexSelectBackward0")

    def _advanced(self, axis, arrays):
        """Integer-array indexing of consecutive axes starting at ``axis`` (arrays broadcast).
        NumPy arrays are checked and made non-negative here; integer tensors (see ``_getitem``)
        are checked by the ``index`` primitive when it runs, negative entries counting from the
        end as NumPy counts them."""
        n = self._node
        if any(isinstance(a, Tensor) for a in arrays):
            shape = np.broadcast_shapes(*[tuple(a.shape) for a in arrays])
            nodes = []
            for k, a in enumerate(arrays):
                if not isinstance(a, Tensor):
                    a = _wrap(_index_array(np.asarray(a), n.shape[axis + k], axis + k))
                a = a.to(D.int64)
                nodes.append((a if tuple(a.shape) == shape else a.expand(shape))._node)
            shape = n.shape[:axis] + shape + n.shape[axis + len(arrays) :]
            return _new("index", (n, *nodes), {"axis": axis}, shape, n.dtype, "IndexBackward0")
        arrays = np.broadcast_arrays(*[np.asarray(a) for a in arrays])
        fixed = [_index_array(a, n.shape[axis + k], axis + k) for k, a in enumerate(arrays)]
        shape = n.shape[:axis] + arrays[0].shape + n.shape[axis + len(arrays) :]
        return _new("index", (n, *fixed), {"axis": axis}, shape, n.dtype, "IndexBackward0")

    def __getitem__(self, key):
        return _getitem(self, key)

    def __setitem__(self, key, value):
        """In-place assignment to the elements ``key`` selects (PyTorch's indexing rules;
        with repeated indices the last assignment wins). Gradients flow to ``value`` and to
        the elements of this tensor that were kept.

        ```python
        >>> import ngrad
        >>> x = ngrad.zeros(2, 3)
        >>> x[0, 1:] = ngrad.tensor([5.0, 6.0])
        >>> x[:, 0] = 1
        >>> x
        tensor([[1., 5., 6.],
                [1., 0., 0.]])

        ```
        """

        def host(k):
            if isinstance(k, Tensor):
                return _host(k)
            if isinstance(k, tuple):
                return tuple(host(e) for e in k)
            return k

        shape = self._node.shape
        n = math.prod(shape)
        try:
            picked = np.arange(n, dtype=np.int64).reshape(shape)[host(key)]
        except IndexError as e:
            raise IndexError(str(e)) from None
        sel = np.shape(picked)
        pos = np.asarray(picked, dtype=np.int64).reshape(-1)
        last = len(pos) - 1 - np.unique(pos[::-1], return_index=True)[1]  # the last write wins
        keep = np.ones(n, dtype=bool)
        keep[pos] = False
        src = _as_tensor(value).to(self.dtype)
        if src.shape != sel:
            src = src.expand(sel)
        vals = src.reshape(-1)
        if len(last) != len(pos):
            vals = vals[_wrap(_index_source(last))]
            pos = pos[last]
        where_ = _wrap(_index_source(pos))
        d = self.dtype
        placed = _new("unindex", (vals._node, where_._node), {"shape": (n,), "axis": 0}, (n,), d, "IndexPutBackward0")
        kept = where(_wrap(source(keep, D.bool_, device=None)), self.reshape(-1), _wrap(_const_node(0, d)))
        _inplace(self, (kept + placed).reshape(shape))

    # linear algebra ---------------------------------------------------------------------------------------
    def matmul(self, other):
        return matmul(self, other)

    def mm(self, other):
        if self.ndim != 2 or _as_tensor(other).ndim != 2:
            raise RuntimeError("mm: both arguments must be 2-D")
        return matmul(self, other)

    def bmm(self, other):
        if self.ndim != 3 or _as_tensor(other).ndim != 3:
            raise RuntimeError("bmm: both arguments must be 3-D")
        return matmul(self, other)

    def mv(self, vec):
        return matmul(self, vec)

    def dot(self, other):
        if self.ndim != 1 or _as_tensor(other).ndim != 1:
            raise RuntimeError(f"1D tensors expected, but got {self.ndim}D and {_as_tensor(other).ndim}D tensors")
        return matmul(self, other)

    def outer(self, other):
        return self.reshape(-1, 1) * _as_tensor(other).reshape(1, -1)

    def masked_fill(self, mask, value):
        """``value`` where the boolean ``mask`` (broadcast to this shape) is True; the gradient
        flows only where it is False (and into a tensor ``value`` from where it is True)."""
        mask = _as_tensor(mask)
        if mask.dtype is not D.bool_:
            raise RuntimeError(
                f"masked_fill_ only supports boolean masks, but got mask with dtype "
                f"{_TORCH_NAME[mask.dtype.short].lower()}"
            )
        if isinstance(value, Tensor):
            if value.ndim:
                raise RuntimeError(
                    f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                    f"{value.ndim} dimension(s)."
                )
            value = value.to(self.dtype)
        out = where(mask, value, self)
        return out if out.shape == self.shape else out.expand(self.shape)  # a mask may not widen it

    def tril(self, diagonal=0):
        """The lower triangle of the matrices in the last two dimensions (on and below the
        ``diagonal``-th diagonal), zeros above."""
        return self._triangle(diagonal, np.tri, "tril")

    def triu(self, diagonal=0):
        """The upper triangle (on and above the ``diagonal``-th diagonal), zeros below."""
        return self._triangle(diagonal, lambda n, m, k, dtype: ~np.tri(n, m, k - 1, dtype=bool), "triu")

    def _triangle(self, diagonal, tri, name):
        if self.ndim < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        n, m = self.shape[-2], self.shape[-1]
        keep = _wrap(source(_value_on(tri(n, m, diagonal, dtype=bool), self._node.device), D.bool_))
        return where(keep, self, 0)

    def atan2(self, other):
        """The angle of the point (``other``, ``self``): ``atan(self / other)`` in the right quadrant."""
        return _float_binary("atan2", self, other, "Atan2Backward0")

    arctan2 = atan2

    def logaddexp(self, other):
        """``log(exp(self) + exp(other))`` without overflow."""
        a, b = (self, _as_tensor(other)) if self.dtype.is_floating_point else (self.float(), _as_tensor(other))
        m = a.maximum(b)
        r = m + (-(a - b).abs()).exp().log1p()
        return where((m.abs() == math.inf) & (a == b), m, r)  # inf and inf, -inf and -inf: no inf - inf

    def exp2(self):
        return 2.0**self

    def trunc(self):
        """Rounded toward zero (the gradient is 0, as for ``floor``)."""
        return self.clone() if not self.dtype.is_floating_point else self.sign() * self.abs().floor()

    fix = trunc

    def frac(self):
        """``self - trunc(self)`` (the gradient is 1)."""
        return self - self.trunc().detach()

    def isinf(self):
        return self.abs() == math.inf if self.dtype.is_floating_point else self != self

    def isfinite(self):
        return (self - self) == 0 if self.dtype.is_floating_point else self == self

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (the dtype's largest
        and lowest finite values by default); the gradient is zero where they were."""
        if not self.dtype.is_floating_point:
            return self.clone()
        info = np.finfo(self.dtype.np)
        posinf = float(info.max) if posinf is None else posinf
        neginf = float(info.min) if neginf is None else neginf
        return where(self.isnan(), nan, where(self == math.inf, posinf, where(self == -math.inf, neginf, self)))

    def cross(self, other, dim=None):
        """The cross product of 3-vectors along ``dim`` (by default the first dimension of size 3)."""
        a, b = self, _as_tensor(other)
        shape = _broadcast(tuple(a.shape), tuple(b.shape))
        if dim is None:
            dim = next((d for d, s in enumerate(shape) if s == 3), None)
            if dim is None:
                raise RuntimeError("no dimension of size 3 in input")
        d = _dim(dim, len(shape))
        if shape[d] != 3:
            sizes = [t.shape[d - len(shape) + t.ndim] if d - len(shape) + t.ndim >= 0 else 1 for t in (a, b)]
            raise RuntimeError(
                f"linalg.cross: inputs dimension {dim} must have length 3. Got {sizes[0]} and {sizes[1]}"
            )
        a, b = a.expand(*shape), b.expand(*shape)
        a1, a2, a3 = a.unbind(d)
        b1, b2, b3 = b.unbind(d)
        return stack([a2 * b3 - a3 * b2, a3 * b1 - a1 * b3, a1 * b2 - a2 * b1], d)

    def movedim(self, source, destination):
        """Dimensions ``source`` moved to the positions ``destination`` (ints or sequences); the
        others keep their order."""
        src = [source] if isinstance(source, int) else list(source)
        dst = [destination] if isinstance(destination, int) else list(destination)
        if len(src) != len(dst):
            raise RuntimeError(
                f"movedim: Invalid source or destination dims: source ({src} dims) should contain the "
                f"same number of dims as destination ({dst} dims)"
            )
        src, dst = [_dim(d, self.ndim) for d in src], [_dim(d, self.ndim) for d in dst]
        if len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise RuntimeError("movedim: repeated dim in `source` or `destination`")
        rest = iter(d for d in range(self.ndim) if d not in src)
        placed = dict(zip(dst, src))
        return self.permute(*[placed[i] if i in placed else next(rest) for i in range(self.ndim)])

    moveaxis = movedim

    def diff(self, n=1, dim=-1, prepend=None, append=None):
        """The ``n``-th forward difference along ``dim`` (after joining ``prepend`` and ``append``)."""
        d = _dim(dim, self.ndim)
        x = (
            cat([t for t in (prepend, self, append) if t is not None], d)
            if prepend is not None or append is not None
            else self
        )
        for _ in range(n):
            k = x.shape[d]
            if k == 0:
                break
            x = (
                x.narrow(d, 1, k - 1) - x.narrow(d, 0, k - 1)
                if x.dtype is not D.bool_
                else x.narrow(d, 1, k - 1) != x.narrow(d, 0, k - 1)
            )
        return x

    def unflatten(self, dim, sizes):
        """Dimension ``dim`` split into ``sizes`` (one of them may be -1)."""
        d = _dim(dim, self.ndim)
        return self.reshape(*self.shape[:d], *sizes, *self.shape[d + 1 :])

    def tile(self, *dims):
        """Repeated ``dims`` times along each dimension (ones are prepended to the shorter of the two)."""
        dims = _shape_arg(dims)
        dims = (1,) * (self.ndim - len(dims)) + dims
        x = self.reshape(*((1,) * (len(dims) - self.ndim) + tuple(self.shape))) if len(dims) > self.ndim else self
        return x.repeat(*dims)

    def take_along_dim(self, indices, dim=None):
        """``gather`` with ``indices`` and this tensor broadcast to each other except along
        ``dim`` (the flattened tensor when ``dim`` is None)."""
        idx = _as_tensor(indices)
        if dim is None:
            return self.reshape(-1).gather(0, idx.reshape(-1))
        d = _dim(dim, self.ndim)
        if idx.ndim != self.ndim:
            raise RuntimeError(
                "torch.take_along_dim(): input and indices should have the same number of dimensions, "
                f"but got {self.ndim} dimensions for input, and {idx.ndim} dimensions for indices"
            )
        shape = list(
            _broadcast(
                tuple(s for i, s in enumerate(self.shape) if i != d),
                tuple(s for i, s in enumerate(idx.shape) if i != d),
            )
        )
        x = self.expand(*(shape[:d] + [self.shape[d]] + shape[d:]))
        return x.gather(d, idx.expand(*(shape[:d] + [idx.shape[d]] + shape[d:])))

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        """``beta * self + alpha * (mat1 @ mat2)``."""
        prod = _as_tensor(mat1).mm(_as_tensor(mat2))
        prod = prod if alpha == 1 else prod * alpha
        return prod + (self if beta == 1 else self * beta) if beta != 0 else prod

    def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
        from .factories import tensor

        return tensor(data, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        from .factories import zeros

        return zeros(*size, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        from .factories import ones

        return ones(*size, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
        from .factories import full

        return full(
            size, fill_value, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad
        )

    def inverse(self):
        """``ngrad.linalg.inv(self)``."""
        from .linalg import inv

        return inv(self)

    def det(self):
        """``ngrad.linalg.det(self)``."""
        from .linalg import det

        return det(self)

    def equal(self, other):
        """True when shapes and all values are equal (a Python bool)."""
        return self.shape == other.shape and bool((self == other).all())

    def diagonal(self, offset=0, dim1=0, dim2=1):
        """The ``offset`` diagonal of the matrices spanned by ``dim1`` and ``dim2`` (above the main
        one for ``offset > 0``), as the last dimension; a strided slice, so its gradient is the
        slice's.

        ```python
        >>> import ngrad
        >>> x = ngrad.arange(12.0).reshape(3, 4)
        >>> x.diagonal(), x.diagonal(1), x.trace()
        (tensor([ 0.,  5., 10.]), tensor([ 1.,  6., 11.]), tensor(15.))

        ```
        """
        nd = self.ndim
        d1, d2 = _dim(dim1, nd), _dim(dim2, nd)
        if d1 == d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        x = self.permute(*[d for d in range(nd) if d not in (d1, d2)], d1, d2)
        n, m = x.shape[-2], x.shape[-1]
        count = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
        start = offset if offset >= 0 else -offset * m
        flat = x.reshape(*x.shape[:-2], n * m)
        picked = flat[..., start : start + (count - 1) * (m + 1) + 1 : m + 1] if count else flat[..., :0]
        return _named(picked, "DiagonalBackward0")

    def trace(self):
        """The sum of the main diagonal of a matrix."""
        if self.ndim != 2:
            raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {self.ndim}")
        return _named(self.diagonal().sum(), "TraceBackward0")

    def diag(self, diagonal=0):
        """A matrix's ``diagonal`` (as ``diagonal(diagonal)``), or the square matrix holding a
        vector on its ``diagonal`` and zeros elsewhere.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([1.0, 2.0]).diag(1)
        tensor([[0., 1., 0.],
                [0., 0., 2.],
                [0., 0., 0.]])

        ```
        """
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {self.ndim}D")
        from .factories import eye, zeros

        n, k = self.shape[0], abs(diagonal)
        square = where(eye(n, dtype=D.bool_, device=self.device), self.reshape(n, 1), 0)
        if k == 0:
            return square
        pad = dict(dtype=self.dtype, device=self.device)
        if diagonal > 0:  # right of the main diagonal: zero columns before, zero rows after
            return cat([cat([zeros(n, k, **pad), square], 1), zeros(k, n + k, **pad)], 0)
        return cat([cat([zeros(k, n, **pad), square], 0), zeros(n + k, k, **pad)], 1)


# elementwise math on floats (integers are promoted to the default float): method, grad_fn name
_UNARY = {
    "exp": "ExpBackward0",
    "log": "LogBackward0",
    "log1p": "Log1PBackward0",
    "expm1": "Expm1Backward0",
    "sqrt": "SqrtBackward0",
    "sin": "SinBackward0",
    "cos": "CosBackward0",
    "tan": "TanBackward0",
    "asin": "AsinBackward0",
    "acos": "AcosBackward0",
    "atan": "AtanBackward0",
    "sinh": "SinhBackward0",
    "cosh": "CoshBackward0",
    "tanh": "TanhBackward0",
    "sigmoid": "SigmoidBackward0",
    "erf": "ErfBackward0",
}


def _unary_method(op, name):
    def method(self):
        return _unary(op, self, name)

    method.__name__ = method.__qualname__ = op
    method.__doc__ = f"Elementwise ``{op}`` (integer tensors are promoted to the default float)."
    return method


for _op, _name in _UNARY.items():
    setattr(Tensor, _op, _unary_method(_op, _name))
Tensor.arcsin, Tensor.arccos, Tensor.arctan = Tensor.asin, Tensor.acos, Tensor.atan


def zeros_like_node(x, axes):
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    return _wrap(source(_value_on(np.zeros(shape, x.dtype.np), x._node.device), x.dtype))


def _wrap_cast(t, dtype):
    return _wrap(_cast_node(t._node, dtype))


# --- functions with no single owning method ---------------------------------------------------------------


def pow(input, exponent):
    """``input ** exponent``; a Python-number exponent is part of the program (``x**2`` -> ``x*x``-able).

    The derivative in the base is 0 where the exponent is 0; in the exponent, 0 where the base
    is 0 and the exponent is non-negative (as in PyTorch).
    """
    if not isinstance(input, Tensor):
        return _as_tensor(exponent).__rpow__(input)
    n = input._node
    c = _category(exponent)
    if c is not None:
        d = n.dtype
        if c > d.category:
            d = (D.bool_, D.int64, D.get_default_dtype())[c]
            n = _cast_node(n, d)
        if d.category == 1 and exponent < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        return _new("pow", (n, _const_node(exponent, d)), None, n.shape, d, "PowBackward0")
    return _binary("pow", input, _as_tensor(exponent), "PowBackward1")


def where(condition, input=None, other=None):
    """Elementwise ``input if condition else other``, broadcasting all three.

    With only ``condition``, the indices of its non-zero entries (``nonzero(as_tuple=True)``).
    """
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    cond = _as_tensor(condition)
    if cond.dtype is not D.bool_:
        raise RuntimeError(
            f"where expected condition to be a boolean tensor, but got a tensor with dtype "
            f"{cond.dtype.name.capitalize()}"
        )
    if isinstance(input, Tensor):
        a, b, d = _operands(input, other)
    elif isinstance(other, Tensor):
        b, a, d = _operands(other, input)
    else:
        d = D.result_type((), (), (_scalar_dtype(input), _scalar_dtype(other)))
        a, b = _scalar_node(input, d), _scalar_node(other, d)
    c = cond._node
    shape = _broadcast(_broadcast(c.shape, a.shape), b.shape)
    return _new("where", (c, a, b), None, shape, d, "WhereBackward0")


def nonzero(input, *, as_tuple=False):
    """Indices of the non-zero entries (computed at once: the result's size depends on values)."""
    t = _as_tensor(input)
    v = _host(t)
    idx = np.nonzero(v) if v.ndim else np.nonzero(v.reshape(1))

    def placed(a):
        return _wrap(source(_value_on(np.ascontiguousarray(a, dtype=np.int64), t._node.device), D.int64))

    if as_tuple:
        return tuple(placed(i) for i in idx)
    return placed(np.stack(idx, axis=1) if idx else np.zeros((0, 0)))


def matmul(input, other):
    """Matrix product with NumPy/PyTorch rules for 1-D operands and broadcast batch dimensions."""
    a, b = _as_tensor(input), _as_tensor(other)
    na, nb = a._node, b._node
    sa, sb = na.shape, nb.shape
    if len(sa) == 2 and len(sb) in (1, 2) and na.dtype is nb.dtype and sa[1] == sb[0]:  # the common case
        if len(sb) == 2:
            return _new("matmul", (na, nb), None, (sa[0], sb[1]), na.dtype, "MmBackward0")
        out = _new("matmul", (na, _reshape_node(nb, (sb[0], 1))), None, (sa[0], 1), na.dtype, "MvBackward0")
        return _wrap(_reshape_node(out._node, (sa[0],), "MvBackward0"))
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}")
    sa, sb = a.shape, b.shape
    an = a._node if a.ndim > 1 else _reshape_node(a._node, (1,) + sa)
    bn = b._node if b.ndim > 1 else _reshape_node(b._node, sb + (1,))
    if an.shape[-1] != bn.shape[-2]:
        if a.ndim == 1 and b.ndim == 1:
            raise RuntimeError(
                f"inconsistent tensor size, expected tensor [{sa[0]}] and src [{sb[0]}] to have "
                f"the same number of elements, but got {sa[0]} and {sb[0]} elements respectively"
            )
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, an.shape[-2:]))} and "
            f"{'x'.join(map(str, bn.shape[-2:]))}) (operand shapes {list(sa)} and {list(sb)})"
        )
    batch = _broadcast(an.shape[:-2], bn.shape[:-2])
    an = _expand_node(an, batch + an.shape[-2:])
    bn = _expand_node(bn, batch + bn.shape[-2:])
    shape = batch + (an.shape[-2], bn.shape[-1])
    name = (
        "DotBackward0"
        if a.ndim == b.ndim == 1
        else (
            "MmBackward0"
            if a.ndim == b.ndim == 2
            else (
                "MvBackward0"
                if a.ndim == 2 and b.ndim == 1
                else "BmmBackward0"
                if a.ndim == b.ndim == 3
                else "MatmulBackward0"
            )
        )
    )
    out = _new("matmul", (an, bn), None, shape, an.dtype, name)
    final = shape
    if a.ndim == 1:
        final = final[:-2] + final[-1:]
    if b.ndim == 1:
        final = final[:-1]
    return _wrap(_reshape_node(out._node, final, name)) if final != shape else out


def cat(tensors, dim=0):
    """Concatenate along an existing dimension (dtypes promote as in PyTorch)."""
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    ref = tensors[0]
    d = _dim(dim, ref.ndim)
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = D.promote(dtype, t.dtype)
    for i, t in enumerate(tensors):
        if t.ndim != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} and {t.ndim}")
        for k, (a, b) in enumerate(zip(ref.shape, t.shape)):
            if k != d and a != b:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size {a} but "
                    f"got size {b} for tensor number {i} in the list."
                )
    nodes = tuple(_cast_node(t._node, dtype) for t in tensors)
    if len(nodes) == 1:
        return _new("reshape", nodes, {"shape": nodes[0].shape}, nodes[0].shape, dtype, "CatBackward0")
    shape = ref.shape[:d] + (sum(t.shape[d] for t in tensors),) + ref.shape[d + 1 :]
    return _new("cat", nodes, {"axis": d}, shape, dtype, "CatBackward0")


concat = concatenate = cat


def meshgrid(*tensors, indexing=None):
    """Coordinate grids from 0-d or 1-d tensors: output ``k`` varies along dimension ``k`` with
    ``indexing='ij'`` (the default); ``'xy'`` swaps the first two dimensions (Cartesian order).

    ```python
    >>> import ngrad
    >>> xs, ys = ngrad.meshgrid(ngrad.tensor([1, 2, 3]), ngrad.tensor([10, 20]), indexing="xy")
    >>> xs.shape, ys[:, 0]
    (ngrad.Size([2, 3]), tensor([10, 20]))

    ```
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    indexing = "ij" if indexing is None else indexing
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
    ts = [_as_tensor(t) for t in tensors]
    for t in ts:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t.ndim}D")
    ts = [t.reshape(-1) for t in ts]
    order = list(range(len(ts)))
    if indexing == "xy" and len(ts) > 1:
        order[0], order[1] = 1, 0
    shape = [ts[k].shape[0] for k in order]
    grids = []
    for k, t in enumerate(ts):
        axis = order.index(k)
        grids.append(t.reshape(*[-1 if i == axis else 1 for i in range(len(ts))]).expand(*shape))
    return tuple(grids)


def stack(tensors, dim=0):
    """Join tensors of one shape along a new dimension."""
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} at "
                f"entry 0 and {list(t.shape)} at entry {i}"
            )
    d = _dim(dim, tensors[0].ndim + 1)
    return _named(cat([t.unsqueeze(d) for t in tensors], d), "StackBackward0")


def _basic_getitem(n, key):
    """Ints and slices only (the common case): one slice node and at most one reshape, or None."""
    shape = n.shape
    if len(key) > len(shape):
        return None
    starts, stops, steps, sl_shape, new_shape = [], [], [], [], []
    for k, size in zip(key, shape):
        tk = type(k)
        if tk is int:
            i = k + size if k < 0 else k
            if not 0 <= i < size:
                return None
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
            sl_shape.append(1)
        elif tk is slice:
            a, b, c = k.indices(size)
            if c <= 0:
                return None
            if b < a:
                b = a
            m = len(range(a, b, c))
            starts.append(a)
            stops.append(b)
            steps.append(c)
            sl_shape.append(m)
            new_shape.append(m)
        else:
            return None
    rest = shape[len(key) :]
    if rest:
        starts.extend([0] * len(rest))
        stops.extend(rest)
        steps.extend([1] * len(rest))
        sl_shape.extend(rest)
        new_shape.extend(rest)
    sl_shape, new_shape = tuple(sl_shape), tuple(new_shape)
    name = "SelectBackward0" if len(new_shape) < len(shape) else "SliceBackward0"
    if sl_shape == shape:
        out = _new("reshape", (n,), {"shape": shape}, shape, n.dtype, "AliasBackward0")
    else:
        out = _new(
            "slice",
            (n,),
            {"starts": tuple(starts), "stops": tuple(stops), "steps": tuple(steps)},
            sl_shape,
            n.dtype,
            name,
        )
    return out if new_shape == sl_shape else _wrap(_reshape_node(out._node, new_shape, name))


def _getitem(t, key):
    if not isinstance(key, tuple):
        key = (key,)
    fast = _basic_getitem(t._node, key)
    if fast is not None:
        return fast
    items = []
    for k in key:
        if isinstance(k, Tensor):
            if k.dtype is D.bool_:
                items.append(("mask", _host(k)))
            elif k.dtype.category == 1:
                # under ngrad.compile an index tensor on the CPU stays a tensor: its values may
                # come from the arguments, and NumPy checks them when the program runs
                lazy = _gm.trace is not None and k._node.device == "cpu" and t._node.device == "cpu"
                items.append(("adv", k if lazy else _host(k)))
            else:
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        elif isinstance(k, (list, np.ndarray)):
            a = np.asarray(k)
            if a.dtype == np.bool_:
                items.append(("mask", a))
            elif a.dtype.kind in "iu" or a.size == 0:
                items.append(("adv", a.astype(np.int64)))
            else:
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        elif k is None or k is Ellipsis or isinstance(k, slice):
            items.append((k,))
        elif isinstance(k, (bool, np.bool_)):
            items.append(("mask", np.asarray(k)))
        elif isinstance(k, (int, np.integer)):
            items.append(("int", int(k)))
        else:
            raise IndexError(
                f"only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables "
                f"are valid indices (got {type(k).__name__})"
            )
    shape = t._node.shape
    used = sum(
        1 if it[0] in ("int", "adv") or isinstance(it[0], slice) else (it[1].ndim if it[0] == "mask" else 0)
        for it in items
    )
    if used > len(shape):
        raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
    ell = [i for i, it in enumerate(items) if it[0] is Ellipsis]
    if len(ell) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    fill = [(slice(None),)] * (len(shape) - used)
    items = items[: ell[0]] + fill + items[ell[0] + 1 :] if ell else items + fill

    starts, stops, steps = [], [], []
    new_shape, adv_pos, adv_arrays = [], [], []
    dim = 0
    name = "SliceBackward0"
    for it in items:
        kind = it[0]
        if kind is None:
            new_shape.append(1)
            continue
        if kind == "mask":
            m = it[1]
            if m.ndim == 0:
                new_shape.append(1)
                if not m:
                    adv_pos.append(len(new_shape) - 1)
                    adv_arrays.append(np.zeros(0, np.int64))
                continue
            if m.shape != shape[dim : dim + m.ndim]:
                for j, (a, b) in enumerate(zip(m.shape, shape[dim:])):
                    if a != b:
                        raise IndexError(
                            f"The shape of the mask {list(m.shape)} at index {j} does not match the "
                            f"shape of the indexed tensor {list(shape)} at index {dim + j}"
                        )
            for j, arr in enumerate(np.nonzero(m)):
                starts.append(0), stops.append(shape[dim]), steps.append(1)
                adv_pos.append(len(new_shape))
                adv_arrays.append(arr)
                new_shape.append(shape[dim])
                dim += 1
            continue
        n = shape[dim]
        if kind == "int":
            i = it[1] + n if it[1] < 0 else it[1]
            if not 0 <= i < n:
                raise IndexError(f"index {it[1]} is out of bounds for dimension {dim} with size {n}")
            starts.append(i), stops.append(i + 1), steps.append(1)
            name = "SelectBackward0"
        elif kind == "adv":
            starts.append(0), stops.append(n), steps.append(1)
            adv_pos.append(len(new_shape))
            adv_arrays.append(it[1])
            new_shape.append(n)
        else:
            a, b, c = kind.indices(n)
            if c <= 0:
                raise ValueError("step must be greater than zero")
            starts.append(a), stops.append(max(a, b)), steps.append(c)
            new_shape.append(len(range(a, b, c)))
        dim += 1
    out = t
    n = t._node
    if any(a != 0 or b != s or c != 1 for a, b, c, s in zip(starts, stops, steps, shape)):
        sl_shape = tuple(len(range(a, b, c)) for a, b, c in zip(starts, stops, steps))
        out = _new(
            "slice",
            (n,),
            {"starts": tuple(starts), "stops": tuple(stops), "steps": tuple(steps)},
            sl_shape,
            n.dtype,
            name,
        )
    if tuple(new_shape) != out._node.shape:
        out = _named(out.reshape(tuple(new_shape)), name)
    elif out is t:
        out = _named(t.reshape(t.shape), "AliasBackward0")
    if adv_arrays:
        if adv_pos == list(range(adv_pos[0], adv_pos[0] + len(adv_pos))):
            out = out._advanced(adv_pos[0], adv_arrays)
        else:
            rest = [i for i in range(len(new_shape)) if i not in adv_pos]
            out = out.permute(adv_pos + rest)._advanced(0, adv_arrays)
        out = _named(out, "IndexBackward0")
    return out


# --- the grad_fn view -------------------------------------------------------------------------------------


class BackwardNode:
    """What ``tensor.grad_fn`` returns: a view of one recorded operation of the graph."""

    __slots__ = ("_node",)

    def __init__(self, node):
        self._node = node

    def name(self):
        n = self._node
        return n.name or (n.op.capitalize() + "Backward0")

    @property
    def next_functions(self):
        out = []
        for s in self._node.srcs:
            if s.differentiable:
                out.append((BackwardNode(s), 0))
            elif s.requires_grad:
                out.append((AccumulateGrad(s), 0))
            else:
                out.append((None, 0))
        return tuple(out)

    @property
    def metadata(self):
        return {}

    def __eq__(self, other):
        return isinstance(other, BackwardNode) and other._node is self._node

    def __hash__(self):
        return id(self._node)

    def __repr__(self):
        return f"<{self.name()} object at {hex(id(self._node))}>"


class AccumulateGrad(BackwardNode):
    """The ``next_functions`` entry of a leaf: gradients are accumulated into its ``.grad``."""

    __slots__ = ()

    def name(self):
        return "torch::autograd::AccumulateGrad"

    @property
    def variable(self):
        return self._node.owner() if self._node.owner else None

    @property
    def next_functions(self):
        return ()

    def __repr__(self):
        return f"<AccumulateGrad object at {hex(id(self._node))}>"


def tensor(data, dtype=None, device=None, requires_grad=False):
    from .factories import tensor as make

    return make(data, dtype=dtype, device=device, requires_grad=requires_grad)
