"""Compilation: generated kernel source -> Numba dispatcher. The only module that imports Numba.

Contract: ``kernel(text)`` returns a callable compiled from the source of one generated
module (see ``codegen``), cached in memory by the text's hash and on disk under
``cache_dir()``. The module is written atomically (a temporary file renamed into place), read
back and compared before it is imported, and registered in ``sys.modules`` before its body runs,
so Numba's own cache (``cache=True``) reloads the machine code in a new process without
compiling. A disk entry that is corrupt (the module text or Numba's cache files) is deleted and
rebuilt, never trusted. ``read_plan``/``write_plan`` keep other compiled artefacts (bytecode
encodings) in the same versioned folder, written atomically under a SHA-256 of their bytes, so a
damaged one reads as missing. Flags: ``nogil``, ``error_model='numpy'`` (vectorised division, IEEE
results), ``fastmath={'reassoc', 'contract'}`` (not ``fastmath=True``: that breaks NaN checks).

The CUDA target: ``kernel(text, "cuda")`` is the same for ``cuda.jit`` kernels (default IEEE
flags, cached on disk the same way), ``cuda_status()`` says whether CUDA can be used and why
not, and the ``device_*`` functions are the few device-memory operations the CUDA runtime needs
(``numba.cuda`` is imported on first use, so a CPU-only process never loads it).
"""

import glob
import hashlib
import importlib.util
import os
import sys
import threading
import time

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ..backend import vmath
from ..backend.codegen import CUDA_BLOCK
from ..config import cuda_simulated
from ..store import cache_dir, cache_root, read_plan, write_atomically, write_plan

__all__ = ["kernel", "cuda_status", "cache_dir", "cache_info", "cache_clear", "stats", "read_plan", "write_plan"]

FLAGS = dict(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})


class _IR:
    """A value inside a kernel being compiled: operators emit LLVM instructions (see ``_IRMath``)."""

    __slots__ = ("b", "v")

    def __init__(self, builder, value):
        self.b, self.v = builder, value

    def _coerce(self, other):
        if isinstance(other, _IR):
            return other.v
        if isinstance(self.v.type, ir.DoubleType):
            return ir.Constant(_F64, float(other))
        return ir.Constant(self.v.type, int(other))

    def _op(self, fop, iop, other, swap=False):
        a, c = self.v, self._coerce(other)
        a, c = (c, a) if swap else (a, c)
        return _IR(self.b, getattr(self.b, fop if isinstance(self.v.type, ir.DoubleType) else iop)(a, c))

    def _cmp(self, op, other):
        if isinstance(self.v.type, ir.DoubleType):  # ordered, except != (true for NaN, like Python's)
            cmp = self.b.fcmp_unordered if op == "!=" else self.b.fcmp_ordered
            return _IR(self.b, cmp(op, self.v, self._coerce(other)))
        return _IR(self.b, self.b.icmp_signed(op, self.v, self._coerce(other)))

    def __add__(self, o):
        return self._op("fadd", "add", o)

    def __radd__(self, o):
        return self._op("fadd", "add", o, True)

    def __sub__(self, o):
        return self._op("fsub", "sub", o)

    def __rsub__(self, o):
        return self._op("fsub", "sub", o, True)

    def __mul__(self, o):
        return self._op("fmul", "mul", o)

    def __rmul__(self, o):
        return self._op("fmul", "mul", o, True)

    def __truediv__(self, o):
        return self._op("fdiv", None, o)

    def __rtruediv__(self, o):
        return self._op("fdiv", None, o, True)

    def __and__(self, o):
        return self._op(None, "and_", o)

    def __or__(self, o):
        return self._op(None, "or_", o)

    def __lshift__(self, o):
        return self._op(None, "shl", o)

    def __neg__(self):
        return _IR(self.b, self.b.fneg(self.v))

    def __lt__(self, o):
        return self._cmp("<", o)

    def __le__(self, o):
        return self._cmp("<=", o)

    def __gt__(self, o):
        return self._cmp(">", o)

    def __ge__(self, o):
        return self._cmp(">=", o)

    def __eq__(self, o):
        return self._cmp("==", o)

    def __ne__(self, o):
        return self._cmp("!=", o)

    __hash__ = None


class _IRMath:
    """vmath's backend inside a Numba intrinsic: the helper's operations become the caller's own
    straight-line IR, so the loop around it sees no call and vectorises."""

    def __init__(self, builder):
        self.b = builder

    def _llvm(self, name, *args):
        fn = self.b.module.declare_intrinsic(name, [_F64], ir.FunctionType(_F64, [_F64] * len(args)))
        return _IR(self.b, self.b.call(fn, [a.v for a in args]))

    def select(self, c, x, y):
        f = lambda v: v if isinstance(v, _IR) else _IR(self.b, ir.Constant(_F64, float(v)))
        return _IR(self.b, self.b.select(c.v, f(x).v, f(y).v))

    def rint(self, x):
        return self._llvm("llvm.rint", x)

    def abs(self, x):
        return self._llvm("llvm.fabs", x)

    def copysign(self, x, y):
        return self._llvm("llvm.copysign", x, y)

    def minimum(self, x, c):
        return self.select(x < c, x, c)

    def maximum(self, x, c):
        return self.select(x > c, x, c)

    def bits(self, x):
        return _IR(self.b, self.b.bitcast(x.v, _I64))

    def float(self, i):
        return _IR(self.b, self.b.bitcast(i.v, _F64))

    def lshr(self, i, n):
        return _IR(self.b, self.b.lshr(i.v, ir.Constant(_I64, n)))


_F64, _I64 = ir.DoubleType(), ir.IntType(64)


def _helper(fn):
    """A Numba intrinsic computing ``fn`` (a vmath function) on a float64, emitted inline."""

    @intrinsic
    def helper(typingctx, x):
        if not isinstance(x, (types.Float, types.Integer, types.Boolean)):
            return None

        def codegen(context, builder, signature, args):
            v = context.cast(builder, args[0], signature.args[0], types.float64)
            return fn(_IRMath(builder), _IR(builder, v)).v

        return types.float64(x), codegen

    return helper


def _extreme(name):
    """A Numba intrinsic for LLVM's ``maxnum``/``minnum`` on two floats of one type, flagged
    ``nnan nsz`` so that a loop reducing with it vectorises. Kernels use it only beside a NaN
    count that replaces the result when any argument was NaN (where the flags leave it undefined)."""

    @intrinsic
    def helper(typingctx, a, b):
        if not isinstance(a, types.Float) or a != b:
            return None

        def codegen(context, builder, signature, args):
            ty = context.get_value_type(signature.return_type)
            fn = builder.module.declare_intrinsic(name, [ty], ir.FunctionType(ty, [ty, ty]))
            return builder.call(fn, args, fastmath=("nnan", "nsz"))

        return a(a, b), codegen

    return helper


@intrinsic
def _wide_vectors(typingctx):
    """Ask LLVM for 512-bit vectors in the calling kernel (a CPU without AVX-512 ignores it).

    LLVM tunes Intel's AVX-512 server cores to 256-bit vectors (its "prefer-256-bit"), which
    suits a streaming loop (10,000 float64 multiply-adds: 3.0 us at 256 bits, 4.2 us at 512)
    and the bytecode loop's short rows (lstm c=64: 96 -> 110-180 us a call at 512), but halves
    the throughput of vmath's polynomials: at 512 bits exp ran 1.2-1.4x, sin 1.5x, sigmoid 1.3x
    and erf 1.4-1.7x faster on these machines. llvmlite's FunctionAttributes accepts only LLVM's
    keyword attributes, so this string attribute goes into the set directly."""

    def codegen(context, builder, signature, args):
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return types.none(), codegen


# The math helpers kernels call (codegen's SourceMath writes their names). A change to vmath.py
# must bump codegen.CODEGEN_VERSION: the kernel cache folder is versioned by it.
HELPERS = {name: _helper(fn) for name, fn in vmath.FUNCTIONS.items()}
HELPERS.update(_fmax=_extreme("llvm.maxnum"), _fmin=_extreme("llvm.minnum"), _wide_vectors=_wide_vectors)

_memory = {}
_lock = threading.Lock()
stats = {"compiled": 0, "loaded": 0, "seconds": 0.0}


def _purge(key):
    folder = cache_dir()
    for p in glob.glob(os.path.join(folder, f"{key}.py")) + glob.glob(os.path.join(folder, "__pycache__", f"{key}.*")):
        try:
            os.unlink(p)
        except OSError:
            pass


def _load(key, text, target="cpu"):
    path = os.path.join(cache_dir(), f"{key}.py")
    try:
        with open(path) as f:
            ok = f.read() == text
    except OSError:
        ok = False
    if not ok:  # missing, half-written or corrupt: (re)write it and drop Numba's files for it
        _purge(key)
        write_atomically(path, text)
    name = f"ngrad_kernels.{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if target == "cuda":
        if simulated():  # the simulator's libdevice functions are stubs that return None
            module.__dict__["libdevice"] = _SIM_LIBDEVICE
        return _cuda().jit(cache=True)(module.kernel)
    module.__dict__.update(HELPERS)
    return numba.njit(**FLAGS)(module.kernel)


class Kernel:
    """A compiled kernel; the first call of each signature may load from disk or compile."""

    __slots__ = ("key", "text", "fn", "ready")
    target = "cpu"

    def __init__(self, key, text):
        self.key, self.text = key, text
        self.fn = _load(key, text, self.target)
        self.ready = False

    def __call__(self, *args):
        if self.ready:
            return self.fn(*args)
        return self._first(lambda fn: fn(*args))

    def _first(self, call):
        """The first call, which loads the machine code from disk or compiles it."""
        t = time.perf_counter()
        try:
            r = call(self.fn)
        except Exception:
            # a corrupt Numba cache entry can fail to load: rebuild once from the source
            _purge(self.key)
            self.fn = _load(self.key, self.text, self.target)
            r = call(self.fn)
        stats["seconds"] += time.perf_counter() - t
        misses = getattr(getattr(self.fn, "stats", None), "cache_misses", True)
        stats["compiled" if misses else "loaded"] += 1
        self.ready = True
        return r


def direct(kernel, args):
    """The machine code Numba made for exactly the types of ``args``, called without the
    dispatcher's per-call typing of every argument (about 0.2 µs of a small kernel's 0.5). Only
    for a call site whose argument types cannot change between calls: the machine code trusts
    them. Flags that do not change the code it runs (read-only, alignment on this hardware) may
    differ. The dispatcher itself when there is no such entry.

    ```python
    >>> import numpy as np
    >>> from ngrad.engine.targets.compile import direct, kernel
    >>> k = kernel("def kernel(a):\\n    a[0] += 1.0\\n")
    >>> a = np.zeros(2)
    >>> k(a)
    >>> direct(k, (a,))(a)
    >>> a
    array([2., 0.])

    ```
    """
    fn = kernel.fn
    try:
        return fn.overloads[tuple(fn.typeof_pyval(a) for a in args)].entry_point
    except (AttributeError, KeyError, TypeError, ValueError):
        return fn


def key_of(text):
    return "k" + hashlib.sha256(text.encode()).hexdigest()[:24]


def loaded(text):
    """True when ``kernel(text)`` was asked for in this process (its machine code is here, or
    comes with its first call)."""
    return key_of(text) in _memory


# (Numba's cache folder, its modification time) and the keys with an index file there: listed
# again only when the folder changed, since a glob per kernel scanned the whole folder (6 ms a
# kernel with 3,800 files in it; 85 ms of a 0.4 s first call of ba)
_indexed = [((None, None), frozenset())]


def on_disk(text):
    """True when this kernel's module and Numba's cache index already exist on disk."""
    folder = os.path.join(cache_dir(), "__pycache__")
    try:
        stamp = (folder, os.stat(folder).st_mtime_ns)
    except OSError:
        return False
    seen, keys = _indexed[0]
    if seen != stamp:
        try:
            with os.scandir(folder) as entries:  # Numba's index files: {key}.{function}-{line}.py{version}.nbi
                keys = frozenset(e.name.split(".", 1)[0] for e in entries if e.name.endswith(".nbi"))
        except OSError:
            return False
        _indexed[0] = (stamp, keys)
    return key_of(text) in keys


def kernel(text, target="cpu"):
    """The compiled kernel for generated module ``text`` (memory, then disk, then compile);
    ``target="cuda"``: a ``CudaKernel``."""
    key = key_of(text)
    k = _memory.get(key)
    if k is None:
        with _lock:
            k = _memory.get(key)
            if k is None:
                k = _memory[key] = (CudaKernel if target == "cuda" else Kernel)(key, text)
    return k


def cache_info():
    """Where the cache is, and how many kernels, plans (``write_plan``: bytecode encodings, joint
    tapes, the list of compiled loops) and bytes it holds."""
    folder = cache_dir()
    files = glob.glob(os.path.join(folder, "k*.py"))
    plans = glob.glob(os.path.join(folder, "plans", "*"))
    size = 0
    for root, _, names in os.walk(cache_root()):
        size += sum(os.path.getsize(os.path.join(root, n)) for n in names)
    return {"root": cache_root(), "folder": folder, "kernels": len(files), "plans": len(plans), "bytes": size}


def cache_clear():
    """Delete every cached kernel of every version; returns the number of files removed."""
    import shutil

    root = cache_root()
    n = sum(len(names) for _, _, names in os.walk(root))
    shutil.rmtree(root, ignore_errors=True)
    _memory.clear()
    return n


# --- the CUDA target ---------------------------------------------------------------------------

_cuda_module = []


def _cuda():
    if not _cuda_module:
        from numba import cuda

        _cuda_module.append(cuda)
    return _cuda_module[0]


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


_cupy = []


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


_context = []


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

    __slots__ = ("launcher",)
    target = "cuda"
    MAX_BLOCKS = 8192

    def __init__(self, key, text):
        super().__init__(key, text)
        self.launcher = None

    def launch(self, n, args, grid=None, block=None):
        if grid is None:
            block = threads_per_block()
            grid = max(1, min(-(-n // block), self.MAX_BLOCKS))
        if self.launcher is not None and self.launcher(grid, block, args):
            return None
        if self.ready:
            r = self.fn[grid, block](*args)
        else:
            r = self._first(lambda fn: fn[grid, block](*args))
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
    return cuda.compile_ptx(module.kernel, signature, cc=cc)[0]
