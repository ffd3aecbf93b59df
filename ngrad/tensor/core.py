"""The ``Tensor`` class: metadata, autograd attributes, values and conversion.

Contract: ``Tensor`` is ``TensorBase``'s layout plus the op families (``MathOps``, ``InplaceOps``,
``ReduceOps``, ``ShapeOps``, ``IndexingOps``, ``LinalgOps``) plus what no family owns: shape and
dtype queries, ``requires_grad``/``grad``/``grad_fn``/hooks/``backward``, ``detach`` and
``.data``, realizing values (``numpy``, ``item``, ``repr``...) and moving between dtypes and
devices. Importing this module registers ``Tensor`` as the class recording makes.
"""

import math
import weakref

import numpy as np

from .. import grad_mode as _grad_mode
from .._format import format_tensor
from ..autograd.graph_nodes import BackwardNode, grad_fn_of, output_nr
from ..autograd.meta import NO_META, REBASED, SEGMENT_NODES, check_rebased, inherit_leaf, own_meta
from ..engine.ir import dtypes as D
from ..engine.ir.graph import Node, source
from ..engine.runtime.realize import KEEP_SOURCES, realize
from .complex_ops import ComplexOps
from .indexing import IndexingOps
from .inplace import InplaceOps, replace_node
from .layout import Storage, contiguous_format, contiguous_strides, dense, is_contiguous, storage_key
from .linalg_ops import LinalgOps
from .math_ops import MathOps
from .random_ops import RandomOps
from .record import (
    CPU,
    CUDA,
    Size,
    TensorBase,
    cast_tensor,
    device,
    device_name,
    host_value,
    is_traced,
    normalize_dim,
    record_op,
    tensor,
    to_tensor,
    use_tensor_class,
    value_of,
    value_on,
    wrap,
)
from .reduce_ops import ReduceOps
from .scatter_ops import ScatterOps
from .select_ops import SelectOps
from .shape_ops import ShapeOps
from .views import detached_view, install, layout_of, rebind

_gm = _grad_mode.state


def conversion_target(args, kwargs):
    """``(dtype, device)`` that ``to(*args, **kwargs)`` asks for (None where it asks for neither), as
    ``Tensor.to`` and ``nn.Module.to`` read them; PyTorch's TypeError for anything else."""
    dtype, dev = kwargs.get("dtype"), kwargs.get("device")
    for a in args:
        if isinstance(a, D.DType):
            dtype = a
        elif isinstance(a, Tensor):
            dtype, dev = a.dtype, a.device
        elif isinstance(a, (str, device, int)) and not isinstance(a, bool):
            dev = a
        elif not isinstance(a, bool):  # non_blocking and copy are bools
            got = ", ".join(type(x).__name__ for x in args)
            raise TypeError(
                f"to() received an invalid combination of arguments - got ({got}), but expected "
                "one of: (ngrad.device device, ngrad.dtype dtype), (ngrad.dtype dtype), (Tensor other)"
            )
    return dtype, dev


class Tensor(
    MathOps,
    InplaceOps,
    ReduceOps,
    ShapeOps,
    IndexingOps,
    LinalgOps,
    SelectOps,
    ScatterOps,
    ComplexOps,
    RandomOps,
    TensorBase,
):
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

    __slots__ = ()
    __array_ufunc__ = None  # NumPy defers to the reflected operators: ndarray * Tensor -> Tensor
    __array_priority__ = 1000

    def __new__(cls, *args):
        if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
            return tensor(args[0], dtype=D.get_default_dtype())
        from ..factories import zeros

        return zeros(*args)

    # metadata ---------------------------------------------------------------------------------
    @property
    def shape(self):
        return Size(self._node.shape)

    def size(self, dim=None):
        """The shape, or the size of one dimension."""
        s = self._node.shape
        return Size(s) if dim is None else s[normalize_dim(dim, len(s))]

    @property
    def dtype(self):
        return self._node.dtype

    @property
    def device(self):
        return CUDA if self._node.device == "cuda" else CPU

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
        return value_of(self).__cuda_array_interface__

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
        if not isinstance(flag, (bool, np.bool_)):
            raise RuntimeError("requires_grad must be a bool")
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
        if requires_grad and not n.dtype.differentiable:
            raise RuntimeError("only Tensors of floating point and complex dtype can require gradients")
        if requires_grad and (n.meta or NO_META).is_inference and not _gm.inference:
            raise RuntimeError("Setting requires_grad=True on inference tensor outside InferenceMode is not allowed.")
        if requires_grad and n.value is None and _gm.trace is None:
            # a leaf holds a value: computing it now also cuts its history (an optimizer loop's
            # `w = (w - lr * g).requires_grad_()` must not chain every past step into the graph);
            # while ngrad.compile traces, the program computes it
            realize([n])
        n.requires_grad = bool(requires_grad)
        if requires_grad or n.meta is not None:
            own_meta(n).owner = weakref.ref(self) if requires_grad else None
        if self._view is not None:  # a view made a leaf (x.detach().requires_grad_()) stays one
            self._view.leaf = bool(requires_grad)
        return self

    @property
    def is_leaf(self):
        if REBASED[0]:
            check_rebased((self._node,))
        return not self._node.differentiable

    @property
    def grad_fn(self):
        n = self._node
        if REBASED[0]:
            check_rebased((n,))
        return grad_fn_of(n) if n.differentiable else None

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

    @grad.deleter
    def grad(self):
        self.grad = None

    @property
    def output_nr(self):
        """Which output of its ``grad_fn`` this tensor is (0 for leaves and single-output ops)."""
        return output_nr(self._node)

    def retain_grad(self):
        """Keep this non-leaf tensor's gradient in ``.grad`` during ``backward`` (no-op on leaves)."""
        n = self._node
        if not n.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if n.differentiable:
            self._retains_grad = True
            own_meta(n).owner = weakref.ref(self)

    @property
    def retains_grad(self):
        return self._retains_grad

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate the gradient of this tensor into the ``.grad`` of graph leaves.

        See ``ngrad.autograd.backward``; ``gradient`` is needed unless this tensor has one element.
        """
        from ..autograd.reverse import backward

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
        return detached_view(self, self._detached(), True)

    def _detached(self):
        n = self._node
        if n.value is not None and not is_traced(n):
            return wrap(source(n.value, n.dtype))
        return wrap(Node("detach", (n,), None, n.shape, n.dtype))

    def detach_(self):
        """Cut this tensor from the graph in place (not allowed on a view, as in PyTorch)."""
        if self._is_view():
            raise RuntimeError(
                "Can't detach views in-place. Use detach() instead. If you are using DistributedDataParallel (DDP) "
                "for training, and gradient_as_bucket_view is set as True, gradients are views of DDP buckets, and "
                "hence detach_() cannot be called on these gradients. To fix this error, please refer to the "
                "Optimizer.zero_grad() function in torch/optim/optimizer.py as the solution."
            )
        if self._node.differentiable:
            self._node = self._detached()._node
        return self

    @property
    def data(self):
        """The value as a tensor outside the graph; an alias like ``detach()``, but with its
        own version counter (updates through it are not seen by autograd's checks)."""
        return detached_view(self, self._detached(), False)

    @property
    def _version(self):
        """How many in-place updates this tensor's value has seen."""
        if (self._node.meta or NO_META).is_inference:
            raise RuntimeError("Inference tensors do not track version counter.")
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
        m = own_meta(n)
        if m.hooks is None:
            m.hooks = {}
        if n.differentiable:
            SEGMENT_NODES.add(n)
        from .._hooks import RemovableHandle

        handle = RemovableHandle(m.hooks)
        m.hooks[handle.id] = hook
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
        m = own_meta(n)
        if m.post_hooks is None:
            m.post_hooks = {}
        from .._hooks import RemovableHandle

        handle = RemovableHandle(m.post_hooks)
        m.post_hooks[handle.id] = hook
        return handle

    def is_inference(self):
        """Whether this tensor was made under ``inference_mode``."""
        return (self._node.meta or NO_META).is_inference

    @data.setter
    def data(self, other):
        other = to_tensor(other)
        v = value_of(other)
        n = self._node
        if n.differentiable:
            raise RuntimeError("setting .data is only supported on leaf tensors")
        new = source(v, D.from_numpy_dtype(v.dtype))
        new.requires_grad = n.requires_grad
        inherit_leaf(new, n)
        replace_node(self, new)
        rebind(self, other)

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
        return np.asarray(host_value(self))

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def item(self):
        """The value of a one-element tensor as a Python number."""
        n = self.numel()
        if n != 1:
            raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
        return host_value(self).reshape(()).item()

    def tolist(self):
        return host_value(self).tolist()

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
        default = D.get_default_complex_dtype() if n.dtype.is_complex else default
        if n.dtype is not default and n.dtype is not D.bool_:
            suffixes.append(f"dtype={n.dtype!r}")
        if n.differentiable:
            suffixes.append(f"grad_fn=<{BackwardNode(n).name().rpartition(':')[2]}>")
        elif n.requires_grad:
            suffixes.append("requires_grad=True")
        if n.device == "cuda":
            suffixes.insert(0, "device='cuda:0'")
        return format_tensor(np.asarray(host_value(self)), suffixes)

    __str__ = __repr__

    def __format__(self, spec):
        if self.ndim == 0:
            return format(self.item(), spec)
        return format(repr(self), spec)

    __hash__ = object.__hash__

    def __reduce_ex__(self, protocol):
        return (tensor, (host_value(self), self.dtype, str(self.device), self.requires_grad))

    def __deepcopy__(self, memo):
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the "
                "deepcopy protocol at the moment."
            )
        out = wrap(source(value_on(np.array(host_value(self)), self._node.device), self.dtype))
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
        dtype, dev = conversion_target(args, kwargs)
        out = self
        if dev is not None:
            out = out._moved(device_name(dev))
        if dtype is None or dtype is out.dtype:
            return out
        return cast_tensor(out, dtype)

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
        return wrap(source(value_on(value_of(self), dev), n.dtype))

    def cuda(self, device=None):
        """A copy of this tensor in GPU memory (itself if it is there already)."""
        return self._moved(device_name("cuda" if device is None else device))

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

    def contiguous(self, memory_format=None):
        """This tensor if its elements are laid out in row-major order, else a copy that is."""
        return self if self.is_contiguous() else self.clone(memory_format=contiguous_format)

    # storage --------------------------------------------------------------------------------------
    @property
    def _base(self):
        """The tensor this view shares storage with (None unless this is a view), as in PyTorch."""
        v = self._view
        return None if v is None else v.base

    def _is_view(self):
        v = self._view
        return v is not None and v.base is not None

    def stride(self, dim=None):
        """The step in elements between neighbours along each dimension of the storage, as in
        PyTorch (a view's strides are its base's, sliced, permuted or expanded).

        ```python
        >>> import ngrad
        >>> x = ngrad.zeros(2, 3)
        >>> x.stride(), x.t().stride(), x.t().is_contiguous()
        ((3, 1), (1, 3), False)

        ```
        """
        strides = layout_of(self)[0]
        return strides if dim is None else strides[normalize_dim(dim, max(len(strides), 1))]

    def storage_offset(self):
        return layout_of(self)[1]

    def is_contiguous(self, memory_format=None):
        return is_contiguous(self._node.shape, layout_of(self)[0])

    def data_ptr(self):
        """An address that identifies this tensor's first element in its storage: equal for
        tensors that share storage and start at the same element. ngrad's values are
        immutable arrays, so this is an identity, not an address to read memory from."""
        v = self._view
        root = self if v is None else v.root
        return storage_key(root) + self.storage_offset() * self.element_size()

    def element_size(self):
        """Bytes per element."""
        return self._node.dtype.np.itemsize

    @property
    def itemsize(self):
        return self._node.dtype.np.itemsize

    def untyped_storage(self):
        v = self._view
        return Storage(self if v is None else v.root)

    def clone(self, *, memory_format=None):
        """A copy with its own storage; gradients flow through it. As in PyTorch, the copy of a
        tensor whose elements fill a block of memory in another order (a transpose) keeps that
        order (``stride()``), unless ``memory_format=ngrad.contiguous_format``."""
        n = self._node
        if not n.requires_grad and n.value is not None and not is_traced(n) and not KEEP_SOURCES[0]:
            if n.device == "cuda":
                from ..engine.targets.cuda import device_copy

                out = wrap(source(device_copy(n.value), n.dtype))
            else:
                out = wrap(source(np.array(n.value), n.dtype))
        else:
            out = record_op("reshape", (n,), {"shape": n.shape}, n.shape, n.dtype, "CloneBackward0")
        if memory_format is not contiguous_format and (self._view is not None or self._strides is not None):
            strides = layout_of(self)[0]
            if strides != contiguous_strides(n.shape) and dense(n.shape, strides):
                out._strides = strides
        return out

    def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
        from ..factories import tensor

        return tensor(data, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        from ..factories import zeros

        return zeros(*size, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        from ..factories import ones

        return ones(*size, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
        from ..factories import full

        return full(
            size, fill_value, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad
        )


install(Tensor)
use_tensor_class(Tensor)
