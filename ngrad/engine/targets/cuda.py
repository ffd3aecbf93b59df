"""The CUDA target: generated CUDA source -> ``numba.cuda`` kernels, and device memory.

Contract: ``kernel(text)`` is ``cpu.kernel`` for ``cuda.jit`` kernels (default IEEE flags,
cached in memory and on disk the same way); a ``CudaKernel`` launches over ``n`` elements or on
an explicit grid. ``cuda_status()`` says whether CUDA can be used and why not; the ``device_*``,
``to_device``/``to_host``/``as_device`` functions are the few device-memory operations the CUDA
runtime and the facade need; ``cuda_ptx`` compiles a kernel to PTX without a GPU. ``numba.cuda``
is imported on first use, so a CPU-only process never loads it.
"""

import contextlib
import importlib.util
import threading

import numpy as np
from numba import types

from ..backend.cuda_source import CUDA_BLOCK
from ..config import cuda_simulated
from .cpu import Kernel, cached, key_of, load_module

__all__ = [
    "kernel",
    "cuda_status",
    "simulated",
    "is_device_array",
    "cupy_module",
    "device_empty",
    "from_cupy",
    "to_device",
    "to_host",
    "device_copy",
    "as_device",
    "synchronize",
    "threads_per_block",
    "CudaKernel",
    "cuda_ptx",
]

_cuda_module: list[object] = []


def _cuda():
    if not _cuda_module:
        from numba import cuda

        _cuda_module.append(cuda)
    return _cuda_module[0]


_registries = threading.Lock()
_registries_loaded: list[bool] = []


@contextlib.contextmanager
def _numpy_aliases():
    """The first compile with NumPy's ``row_stack`` alias present. numba-cuda 0.30 registers an
    overload of ``np.row_stack`` when its target first compiles, and NumPy 2.5 removed that alias,
    so every kernel failed with an AttributeError (NVIDIA/numba-cuda#907; numba-cuda is in
    maintenance mode and will not change). Once one compile has loaded those registries the
    alias is never needed again; it is removed after that compile, so NumPy stays as the user
    has it."""
    if _registries_loaded or hasattr(np, "row_stack"):
        yield
        return
    with _registries:
        np.row_stack = np.vstack  # type: ignore[attr-defined]
        try:
            yield
            _registries_loaded.append(True)
        finally:
            del np.row_stack  # type: ignore[attr-defined]


def cuda_status():
    """``(True, what)`` when CUDA kernels can run here (``what``: the device, or the simulator),
    else ``(False, why not)``."""
    if importlib.util.find_spec("numba_cuda") is None:
        return False, "the numba-cuda package is not installed (pip install 'ngrad[cuda]')"
    try:
        cuda = _cuda()
    except Exception as e:  # a broken CUDA installation must not break the CPU target
        return False, f"numba.cuda failed to import: {e}"
    if simulated():
        return True, "Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    try:
        if not cuda.is_available():
            return False, "no CUDA driver or GPU was found"
        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
        return True, f"{name} (compute capability {dev.compute_capability[0]}.{dev.compute_capability[1]})"
    except Exception as e:
        return False, f"the CUDA driver failed to initialise: {e}"


class _SIM_LIBDEVICE:
    """What generated CUDA text calls from libdevice, for Numba's simulator (same results)."""

    floor = floorf = staticmethod(np.floor)
    ceil = ceilf = staticmethod(np.ceil)
    rint = rintf = staticmethod(np.rint)
    sincos = sincosf = staticmethod(lambda x: (np.sin(x), np.cos(x)))


def simulated():
    return cuda_simulated()


def is_device_array(x):
    """True for a Numba device array (or the simulator's stand-in)."""
    return getattr(x, "__cuda_ndarray__", False) is True or type(x).__name__ == "FakeCUDAArray"


_cupy: list[object] = []


def cupy_module():
    """CuPy when it is installed and a real GPU is in use (never under the simulator), else None."""
    if not _cupy:
        mod = None
        if not simulated():
            try:
                import cupy as mod
            except Exception:
                mod = None
        _cupy.append(mod)
    return _cupy[0]


def device_empty(shape, dtype):
    """An uninitialised device array. With CuPy installed its memory comes from CuPy's pool (a
    fresh ``cudaMalloc`` per call costs more than a gradient kernel on 10^7 elements) and goes
    back there when the array dies: the Numba array keeps the CuPy array as its owner."""
    cp = cupy_module()
    if cp is not None:
        return from_cupy(cp.empty(shape, dtype))
    return _cuda().device_array(shape, dtype)


_context: list[object] = []


def from_cupy(arr):
    """A Numba device array over the memory of the C-contiguous CuPy array ``arr`` (which it
    keeps alive), for arrays ngrad itself made on the default stream its kernels run on.
    ``as_cuda_array`` does the same through the array interface, but parses it and synchronises
    the producer's stream on every call (right for arrays from users): about 20 us, against 2."""
    from numba.cuda.cudadrv import driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    if not _context:
        _context.append(_cuda().current_context())
    data = driver.MemoryPointer(_context[0], driver.binding.CUdeviceptr(arr.data.ptr), size=arr.nbytes, owner=arr)
    return DeviceNDArray(arr.shape, arr.strides, arr.dtype, gpu_data=data)


def to_device(array):
    return _cuda().to_device(array)


def to_host(array):
    return array.copy_to_host()


def device_copy(array):
    """A new device array with the same contents (device to device)."""
    out = _cuda().device_array(array.shape, array.dtype)
    out.copy_to_device(array)
    return out


def as_device(obj):
    """A device array sharing the memory of an object exposing ``__cuda_array_interface__``."""
    cuda = _cuda()
    if simulated():
        return cuda.to_device(np.asarray(obj))
    return cuda.as_cuda_array(obj)  # synchronises the producer's stream (CUDA array interface v3)


def synchronize():
    _cuda().synchronize()


def threads_per_block():
    """The simulator runs each thread as a Python thread: its blocks are kept small."""
    return 32 if simulated() else CUDA_BLOCK


class CudaKernel(Kernel):
    """A ``cuda.jit`` kernel launched over ``n`` elements (grid-stride: at most ``MAX_BLOCKS``
    blocks, each thread takes every ``gridsize``-th element), or on an explicit grid.

    The first launch goes through Numba's dispatcher, which types the arguments and compiles
    (or loads) the kernel. Later launches whose arguments match that compiled signature skip
    the dispatcher (about 45 us of Python per launch) and hand the packed arguments straight to
    the driver (``_Launcher``, about 8 us); anything else goes through the dispatcher again."""

    emitted = False  # CUDA source: Numba compiles it

    __slots__ = ("launcher",)
    MAX_BLOCKS = 8192

    def __init__(self, key, text):
        super().__init__(key, text)
        self.launcher = None

    def build(self):
        module, path = load_module(self.key, self.text)
        if simulated():  # the simulator's libdevice functions are stubs that return None
            module.__dict__["libdevice"] = _SIM_LIBDEVICE
        # Numba caches only a function whose source file exists: a module run from memory compiles in memory
        return _cuda().jit(cache=path is not None)(module.kernel)

    def launch(self, n, args, grid=None, block=None):
        if grid is None:
            block = threads_per_block()
            grid = max(1, min(-(-n // block), self.MAX_BLOCKS))
        if self.launcher is not None and self.launcher(grid, block, args):
            return None
        if self.ready:
            r = self.fn[grid, block](*args)
        else:
            with _numpy_aliases():
                r = self.first_call(lambda fn: fn[grid, block](*args))
        if self.launcher is None and not simulated():
            self.launcher = _Launcher.of(self.fn)
        return r


class _Launcher:
    """Launches one compiled overload of a ``cuda.jit`` kernel with arguments packed the way
    Numba's ``_Kernel.launch`` packs them (an array is meminfo, parent, size, itemsize, data
    pointer, shape, strides; a number is a ctypes value of its type). ``__call__`` checks every
    argument against the overload's types first and returns False, launching nothing, on any
    mismatch, so a launch through it can never read memory as the wrong type or rank."""

    __slots__ = ("kernel", "params", "configs", "stream", "launch", "config_type")

    @classmethod
    def of(cls, dispatcher):
        """A launcher for ``dispatcher``'s only overload; None when it has several, or when this
        numba-cuda's internals are not the ones this class was written against."""
        try:
            if len(dispatcher.overloads) != 1:
                return None
            return cls(next(iter(dispatcher.overloads.values())))
        except Exception:
            return None

    def __init__(self, overload):
        import ctypes

        from cuda.core import LaunchConfig, launch
        from numba.cuda.cudadrv import driver
        from numba.cuda.cudadrv.devicearray import DeviceNDArray
        from numba.np.numpy_support import as_dtype

        self.kernel = overload._codelibrary.get_cufunc().kernel
        self.stream = driver._to_core_stream(0)
        self.launch, self.config_type, self.configs = launch, LaunchConfig, {}
        self.params = []
        for ty in overload.argument_types:
            if isinstance(ty, types.Array):
                if ty.layout != "C":
                    raise TypeError(ty)
                self.params.append((DeviceNDArray, ty.ndim, as_dtype(ty.dtype)))
            elif isinstance(ty, types.Boolean):
                self.params.append((bool, None, (bool, np.bool_)))
            elif isinstance(ty, (types.Integer, types.Float)):
                ctype = getattr(ctypes, {"float64": "c_double", "float32": "c_float"}.get(str(ty), f"c_{ty}"))
                self.params.append((ctype, None, np.dtype(str(ty)).type))
            else:
                raise TypeError(ty)

    def __call__(self, grid, block, args):
        if len(args) != len(self.params):
            return False
        packed = []
        for (kind, ndim, dt), a in zip(self.params, args):
            if ndim is not None:
                if a.__class__ is not kind or a.ndim != ndim or a.dtype != dt or not a.is_c_contiguous():
                    return False
                packed += [0, 0, a.size, dt.itemsize, a.device_ctypes_pointer.value or 0, *a.shape, *a.strides]
            elif kind is bool:
                if not isinstance(a, dt):
                    return False
                packed.append(bool(a))
            else:
                if a.__class__ is not dt and not (isinstance(a, int) and issubclass(dt, np.integer)):
                    return False
                packed.append(kind(a))
        config = self.configs.get((grid, block))
        if config is None:
            config = self.configs[(grid, block)] = self.config_type(grid=grid, block=block, shmem_size=0)
        self.launch(self.stream, config, self.kernel, *packed)
        return True


def cuda_ptx(text, signature, cc=(9, 0)):
    """Type-check and compile generated CUDA ``text`` to PTX for ``signature`` (a string such as
    ``"void(int64, float64[::1])"``); needs the CUDA toolkit's NVVM, not a GPU."""
    cuda = _cuda()
    key = key_of(text)
    name = f"ngrad_ptx.{key}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(text, f"<{key}>", "exec"), module.__dict__)
    with _numpy_aliases():
        return cuda.compile_ptx(module.kernel, signature, cc=cc)[0]


def kernel(text):
    """The compiled ``cuda.jit`` kernel for generated CUDA module ``text`` (a ``CudaKernel``)."""
    return cached(text, CudaKernel)
