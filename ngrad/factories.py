"""Tensor factories (``tensor``, ``zeros``, ``arange``, and the random ones: ``rand``, ``randn``,
``randint``, ``randperm``, ``normal``, ``bernoulli``, drawing from ``ngrad.random``'s generators)."""

import collections
import math

import numpy as np

from . import sampling
from .engine.ir import dtypes as D
from .engine.ir.graph import source
from .random import generator_or_default, initial_seed, manual_seed, seed
from .tensor.core import Tensor
from .tensor.random_ops import zero_gradient_from
from .tensor.record import TORCH_NAME, device_name, host_value, shape_arg, value_of, value_on, wrap
from .tracing import check_random

__all__ = [
    "tensor",
    "as_tensor",
    "from_numpy",
    "zeros",
    "ones",
    "empty",
    "full",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "eye",
    "arange",
    "linspace",
    "rand",
    "randn",
    "randint",
    "rand_like",
    "randn_like",
    "randperm",
    "randint_like",
    "normal",
    "bernoulli",
    "manual_seed",
    "seed",
    "initial_seed",
    "is_tensor",
    "numel",
]


def _leaf(value, dtype, requires_grad, device=None):
    """A leaf holding ``value`` (a host array), on ``device`` (an engine name, None for the CPU)."""
    t = wrap(source(value_on(value, device), dtype))
    if requires_grad:
        t.requires_grad_()
    return t


def _infer(data):
    """The ngrad dtype PyTorch would pick for nested Python data."""
    kinds = set()
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, Tensor):
            kinds.add(x.dtype.category)
        elif isinstance(x, (bool, np.bool_)):
            kinds.add(0)
        elif isinstance(x, (int, np.integer)):
            kinds.add(1)
        elif isinstance(x, (float, np.floating)):
            kinds.add(2)
        elif isinstance(x, (complex, np.complexfloating)):
            kinds.add(3)
        else:
            raise TypeError(f"Could not infer dtype of {type(x).__name__}")
    top = max(kinds, default=2)
    return D.scalar_type(top)


def _check_ragged(data):
    queue = collections.deque([(data, 0)])  # breadth first, in order: the first list seen sets the length
    lengths = {}
    while queue:
        x, depth = queue.popleft()
        if isinstance(x, (list, tuple)):
            if depth in lengths and lengths[depth] != len(x):
                raise ValueError(f"expected sequence of length {lengths[depth]} at dim {depth} (got {len(x)})")
            lengths[depth] = len(x)
            queue.extend((y, depth + 1) for y in x)
        elif depth in lengths and lengths[depth] is not None:
            raise ValueError(f"expected sequence of length {lengths[depth]} at dim {depth} (got a scalar)")
        else:
            lengths[depth] = None


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new leaf tensor holding a copy of ``data`` (nested lists, numbers, arrays or tensors).

    Python floats become ``ngrad.float32`` (the default dtype), ints ``int64``, bools ``bool``;
    NumPy arrays keep their dtype.

    ```python
    >>> import ngrad
    >>> ngrad.tensor([1.0, 2.0], requires_grad=True)
    tensor([1., 2.], requires_grad=True)
    >>> ngrad.tensor([[1, 2], [3, 4]]).dtype
    ngrad.int64

    ```
    """
    dev = device_name(device)
    if isinstance(data, Tensor):
        value = np.array(host_value(data))
        d = dtype or data.dtype
        if dev is None:
            dev = data._node.device
    elif _on_gpu(data):
        return _from_cuda(data, dtype, dev, requires_grad, copy=True)
    elif isinstance(data, np.ndarray):
        d = dtype or D.from_numpy_dtype(data.dtype)
        value = np.array(data, dtype=d.np, order="C")
    elif isinstance(data, np.generic):
        d = dtype or D.from_numpy_dtype(data.dtype)
        value = np.array(data, dtype=d.np)
    else:
        _check_ragged(data)
        d = dtype or _infer(data)
        if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flat(data)):
            data = _to_plain(data)
        value = np.array(data, dtype=d.np, order="C")
    if requires_grad and not d.differentiable:
        raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
    return _leaf(value, d, requires_grad, dev)


def _on_gpu(data):
    """An object in GPU memory ngrad can take over: ``__cuda_array_interface__`` (or the CUDA
    simulator's device arrays)."""
    return not isinstance(data, (np.ndarray, Tensor)) and (
        hasattr(data, "__cuda_array_interface__") or type(data).__name__ == "FakeCUDAArray"
    )


def _from_cuda(data, dtype, dev, requires_grad, copy):
    """A tensor on the GPU from an object exposing ``__cuda_array_interface__`` (a CuPy array, a
    PyTorch CUDA tensor, a Numba device array): shared memory unless ``copy``."""
    from .engine.targets.cuda import as_device, device_copy, is_device_array

    device_name("cuda")
    arr = data if is_device_array(data) else as_device(data)
    d = D.from_numpy_dtype(np.dtype(arr.dtype))
    if not arr.is_c_contiguous() or copy:
        arr = device_copy(arr) if arr.is_c_contiguous() else value_on(np.ascontiguousarray(arr.copy_to_host()), "cuda")
    t = wrap(source(arr, d))
    if dtype is not None and dtype is not d:
        t = t.to(dtype)
    if dev == "cpu":
        t = t.cpu()
    if requires_grad:
        if not t.dtype.differentiable:
            raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
        t.requires_grad_()
    return t


def _flat(data):
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        else:
            yield x


def _to_plain(data):
    if isinstance(data, (list, tuple)):
        return [_to_plain(x) for x in data]
    return value_of(data).item() if isinstance(data, Tensor) else data


def as_tensor(data, dtype=None, device=None):
    """Like ``tensor`` but returns ``data`` itself when it already is a tensor of that dtype and
    device, and shares memory with a NumPy array or, on the GPU, with any object exposing
    ``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors)."""
    if (
        isinstance(data, Tensor)
        and (dtype is None or dtype is data.dtype)
        and (device is None or data.device == device)
    ):
        return data
    if _on_gpu(data):
        return _from_cuda(data, dtype, device_name(device), False, copy=False)
    if isinstance(data, Tensor):
        return data.to(dtype=dtype, device=device)
    if (
        isinstance(data, np.ndarray)
        and (dtype is None or dtype.np == data.dtype)
        and data.flags.c_contiguous
        and device_name(device) != "cuda"
    ):
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(ndarray):
    """A tensor sharing memory with a NumPy array (float64/32, int64/32, bool).

    ```python
    >>> import numpy as np, ngrad
    >>> ngrad.from_numpy(np.arange(3.0))
    tensor([0., 1., 2.], dtype=ngrad.float64)

    ```
    """
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    d = D.from_numpy_dtype(ndarray.dtype)
    a = ndarray if ndarray.flags.c_contiguous and ndarray.dtype.isnative else np.ascontiguousarray(ndarray)
    return wrap(source(a, d))


def _allocated(shape, dtype, make):
    """``make()``, the host array of a new tensor of ``shape`` and ``dtype``, with PyTorch's errors
    for a size that overflows or memory that cannot be had (NumPy's would reach the user)."""
    if any(s < 0 for s in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(shape)}: {list(shape)}")
    nbytes = math.prod(shape) * dtype.np.itemsize
    if nbytes >= 2**63:
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(shape)}")
    try:
        return make()
    except MemoryError:
        raise RuntimeError(
            f"DefaultCPUAllocator: can't allocate memory: you tried to allocate {nbytes} bytes."
        ) from None


def _dtype_arg(dtype):
    """``dtype``, or the default float for None; PyTorch's TypeError for anything but a dtype."""
    if dtype is None:
        return D.get_default_dtype()
    if not isinstance(dtype, D.DType):
        raise TypeError(f"argument 'dtype' must be ngrad.dtype, not {type(dtype).__name__}")
    return dtype


def _filled(size, value, dtype, requires_grad, device):
    device = device_name(device)
    shape = shape_arg(size)
    dtype = _dtype_arg(dtype)
    return _leaf(_allocated(shape, dtype, lambda: np.full(shape, value, dtype=dtype.np)), dtype, requires_grad, device)


def _random_dtype(dtype, kernel):
    """``dtype`` (the default float if None), refused as PyTorch refuses a non-floating one."""
    dtype = _dtype_arg(dtype)
    if not dtype.differentiable:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{TORCH_NAME[dtype.short]}'")
    return dtype


def zeros(*size, dtype=None, device=None, requires_grad=False):
    """A tensor of zeros.

    ```python
    >>> import ngrad
    >>> ngrad.zeros(2, 3).shape
    ngrad.Size([2, 3])

    ```
    """
    return _filled(size, 0, dtype, requires_grad, device)


def ones(*size, dtype=None, device=None, requires_grad=False):
    """A tensor of ones."""
    return _filled(size, 1, dtype, requires_grad, device)


empty = zeros


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    """A tensor filled with ``fill_value`` (its dtype inferred from the value unless given).

    ```python
    >>> import ngrad
    >>> ngrad.full((2,), 7)
    tensor([7, 7])

    ```
    """
    if dtype is None:
        dtype = _infer([fill_value])
    return _filled((size,) if isinstance(size, int) else tuple(size), fill_value, dtype, requires_grad, device)


def _like(t, value, dtype, requires_grad, device):
    return _filled(t.shape, value, dtype or t.dtype, requires_grad, t.device if device is None else device)


def zeros_like(input, *, dtype=None, device=None, requires_grad=False):
    return _like(input, 0, dtype, requires_grad, device)


def ones_like(input, *, dtype=None, device=None, requires_grad=False):
    return _like(input, 1, dtype, requires_grad, device)


empty_like = zeros_like


def full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False):
    return _like(input, fill_value, dtype, requires_grad, device)


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False):
    """The identity matrix (``n`` x ``m``)."""
    device = device_name(device)
    dtype = dtype or D.get_default_dtype()
    m = n if m is None else m
    for name, k in (("n", n), ("m", m)):
        if k < 0:
            raise RuntimeError(f"{name} must be greater or equal to 0, got {k}")
    return _leaf(_allocated((n, m), dtype, lambda: np.eye(n, m, dtype=dtype.np)), dtype, requires_grad, device)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """Values from ``start`` to ``end`` (exclusive) by ``step``; int64 unless a bound is a float.

    ```python
    >>> import ngrad
    >>> ngrad.arange(3)
    tensor([0, 1, 2])

    ```
    """
    device = device_name(device)
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if end != start and (end > start) != (step > 0):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dtype is None:
        dtype = _infer([start, end, step])
    n = max(0, math.ceil((end - start) / step))
    return _leaf(
        (start + step * np.arange(n, dtype=np.float64)).astype(dtype.np)
        if dtype.is_floating_point
        else np.arange(start, end, step, dtype=dtype.np),
        dtype,
        requires_grad,
        device,
    )


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False):
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive."""
    device = device_name(device)
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dtype = dtype or D.get_default_dtype()
    return _leaf(np.linspace(start, end, steps).astype(dtype.np), dtype, requires_grad, device)


# --- randomness: PyTorch's CPU generator and transforms (ngrad.random, ngrad.sampling) ------------------


def _draw(generator):
    """The generator to draw from, unless ngrad.compile is tracing (a draw would be frozen)."""
    check_random()
    return generator_or_default(generator)


def _random_leaf(shape, dtype, device, requires_grad, sample):
    """A leaf of ``shape`` filled by ``sample(n)`` (a flat NumPy array of ``n`` values)."""
    value = _allocated(shape, dtype, lambda: sample(math.prod(shape)).astype(dtype.np).reshape(shape))
    return _leaf(value, dtype, requires_grad, device)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform samples from [0, 1): PyTorch's numbers for the same seed (float32: 24 random
    bits a value, float64: 53).

    ```python
    >>> import ngrad
    >>> _ = ngrad.manual_seed(0)
    >>> ngrad.rand(3)
    tensor([0.4963, 0.7682, 0.0885])

    ```
    """
    device = device_name(device)
    dtype, shape = _random_dtype(dtype, "check_uniform_bounds"), shape_arg(size)
    gen = _draw(generator)
    if dtype.is_complex:  # PyTorch's: real and imaginary parts drawn in turn, each from [0, 1)
        real = dtype.to_real().np
        return _random_leaf(
            shape, dtype, device, requires_grad, lambda n: sampling.uniform(gen, 2 * n, real).view(dtype.np)
        )
    return _random_leaf(shape, dtype, device, requires_grad, lambda n: sampling.uniform(gen, n, dtype.np))


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Standard normal samples: PyTorch's numbers for the same seed.

    ```python
    >>> import ngrad
    >>> _ = ngrad.manual_seed(0)
    >>> ngrad.randn(3)
    tensor([ 1.5410, -0.2934, -2.1788])

    ```
    """
    device = device_name(device)
    dtype, shape = _random_dtype(dtype, "normal_kernel_cpu"), shape_arg(size)
    gen = _draw(generator)
    if dtype.is_complex:  # PyTorch's: real and imaginary parts in turn, each of variance 1/2
        real = dtype.to_real().np
        scale = math.sqrt(0.5)  # in double precision, rounded once, as PyTorch scales
        return _random_leaf(
            shape,
            dtype,
            device,
            requires_grad,
            lambda n: (sampling.normal(gen, 2 * n, real) * scale).astype(real).view(dtype.np),
        )
    return _random_leaf(shape, dtype, device, requires_grad, lambda n: sampling.normal(gen, n, dtype.np))


def randint(*args, size=None, low=None, high=None, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform integers in [low, high), with PyTorch's signatures: ``randint(high, size)``,
    ``randint(low, high, size)`` (``low`` defaults to 0) and their keyword forms.

    ```python
    >>> import ngrad
    >>> ngrad.randint(3, (4,)).shape, ngrad.randint(5, 6, size=(2,)), ngrad.randint(high=2, size=(1,)).dtype
    (ngrad.Size([4]), tensor([5, 5]), ngrad.int64)

    ```
    """
    if len(args) > 3:
        raise TypeError(f"randint() takes from 2 to 3 positional arguments but {len(args)} were given")
    if len(args) == 3:
        low, high, size = args
    elif len(args) == 2 and size is None:
        high, size = args
    elif len(args) == 2:
        low, high = args
    elif len(args) == 1 and high is None:
        high = args[0]
    elif len(args) == 1:
        low = args[0]
    if high is None or size is None:
        raise TypeError(
            "randint() received an invalid combination of arguments: expected (int high, tuple of ints size) "
            "or (int low, int high, tuple of ints size)"
        )
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"randint(): argument 'size' must be tuple of ints, not {type(size).__name__}")
    low = 0 if low is None else low
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    dtype = dtype or D.int64
    device = device_name(device)
    gen = _draw(generator)
    sample = lambda n: sampling.integers(gen, n, dtype.np, int(low), int(high))  # noqa: E731
    return _random_leaf(shape_arg((size,)), dtype, device, requires_grad, sample)


def rand_like(input, *, generator=None, dtype=None, device=None, requires_grad=False):
    """``rand`` of ``input``'s shape (and dtype and device unless given)."""
    device = input.device if device is None else device
    dtype = dtype or input.dtype
    return rand(input.shape, generator=generator, dtype=dtype, device=device, requires_grad=requires_grad)


def randn_like(input, *, generator=None, dtype=None, device=None, requires_grad=False):
    """``randn`` of ``input``'s shape (and dtype and device unless given)."""
    device = input.device if device is None else device
    dtype = dtype or input.dtype
    return randn(input.shape, generator=generator, dtype=dtype, device=device, requires_grad=requires_grad)


def randint_like(input, low=0, high=None, *, generator=None, dtype=None, device=None, requires_grad=False):
    """``randint`` of ``input``'s shape: ``randint_like(input, high)`` or ``(input, low, high)``."""
    if high is None:
        low, high = 0, low
    device = input.device if device is None else device
    return randint(
        low,
        high,
        tuple(input.shape),
        generator=generator,
        dtype=dtype or input.dtype,
        device=device,
        requires_grad=requires_grad,
    )


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False):
    """A random permutation of ``0 .. n-1``: PyTorch's for the same seed.

    ```python
    >>> import ngrad
    >>> _ = ngrad.manual_seed(0)
    >>> ngrad.randperm(5)
    tensor([4, 0, 1, 3, 2])

    ```
    """
    dtype = dtype or D.int64
    gen = _draw(generator)
    return _random_leaf((n,), dtype, device_name(device), requires_grad, lambda _: sampling.permutation(gen, n))


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, device=None, requires_grad=False):
    """Normal samples, as ``torch.normal``: ``normal(mean, std, size)`` for numbers, else one
    sample per element of the broadcast tensors ``mean`` and ``std`` (standard normals, times
    ``std``, plus ``mean``).

    ```python
    >>> import ngrad
    >>> ngrad.normal(2.0, 0.0, size=(2,))
    tensor([2., 2.])

    ```
    """
    if not isinstance(mean, Tensor) and not isinstance(std, Tensor):
        if size is None:
            raise TypeError("normal() received an invalid combination of arguments: numbers need a size")
        out = empty(*shape_arg((size,)), dtype=dtype, device=device)
        return out.normal_(mean, std, generator=generator).requires_grad_(requires_grad)
    ref = mean if isinstance(mean, Tensor) else std
    shape = ref.shape if not (isinstance(mean, Tensor) and isinstance(std, Tensor)) else None
    if shape is None:
        from .tensor.record import broadcast_shapes

        shape = broadcast_shapes(tuple(mean.shape), tuple(std.shape))
    out = empty(*shape, dtype=ref.dtype, device=ref.device).normal_(0.0, 1.0, generator=generator)
    detached = [v.detach() if isinstance(v, Tensor) else v for v in (mean, std)]
    # PyTorch's gradient of a draw with respect to mean and std is zero
    return zero_gradient_from(out * detached[1] + detached[0], mean, std)


def bernoulli(input, p=None, *, generator=None):
    """Ones with probability ``input`` (per element), else zeros, in ``input``'s dtype; with a
    number ``p``, probability ``p`` for every element of ``input``'s shape.

    ```python
    >>> import ngrad
    >>> ngrad.bernoulli(ngrad.tensor([0.0, 1.0]))
    tensor([0., 1.])

    ```
    """
    out = empty_like(input)
    return out.bernoulli_(input if p is None else p, generator=generator)


def is_tensor(obj):
    return isinstance(obj, Tensor)


def numel(input):
    return input.numel()
