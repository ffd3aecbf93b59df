"""The CPU target: generated kernel source -> Numba dispatcher (``numba.njit``).

Contract: ``kernel(text)`` returns a callable compiled from the source of one generated
module (see ``codegen``), cached in memory by the text's hash and on disk under
``cache_dir()`` when ``store.usable_dir()`` trusts that folder. The module is written
atomically (a temporary file renamed into place), read back and compared before it is run, and
the compared text itself is compiled (under the file's name, registered in ``sys.modules``), so
nothing read later from disk runs; Numba's cache (``DiskCache``, in that folder's ``__pycache__``
only) reloads the machine code in a new process without compiling, and without the target
context's registries of implementations, which only a compile needs. A disk entry that is corrupt
(the module text or Numba's cache files) is deleted and rebuilt, never trusted; a cache that
cannot be used, written or that vanishes meanwhile never fails a program: kernels then compile
in memory (``cache=False``, the module run from its text). ``read_plan``/``write_plan``
(``engine/store.py``) keep other compiled artefacts (bytecode encodings) in the same versioned folder. Flags: ``nogil``,
``error_model='numpy'`` (vectorised division, IEEE results), ``fastmath={'reassoc', 'contract'}``
(not ``fastmath=True``: that breaks NaN checks). The math helpers kernels call are Numba
intrinsics emitting vmath's LLVM IR inline. ``cache_info``/``cache_clear`` report and empty the
disk cache. Only ``engine/targets/`` imports Numba; ``targets/cuda.py`` is the CUDA target.
"""

import glob
import os
import sys
import threading
import time
from types import ModuleType

import numba
import numba.core.event
from llvmlite import ir
from numba import types
from numba.core.caching import CompileResultCacheImpl, FunctionCache
from numba.core.errors import NumbaError
from numba.core.runtime import rtsys
from numba.extending import intrinsic

from ..backend import vmath
from ..config import debug_level
from ..recent import Recent
from ..store import cache_dir, cache_root, code_of, key_of, problem, usable_dir, writable, write_atomically
from . import CompileError

__all__ = [
    "kernel",
    "cache_info",
    "cache_clear",
    "stats",
    "direct",
    "key_of",
    "resident",
    "warm_up",
    "on_compile_step",
    "Kernel",
]

FLAGS = dict(nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})


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

    __hash__ = None  # type: ignore[assignment]  # comparisons build IR values: never a dict key


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
# must bump store.CODEGEN_VERSION: the kernel cache folder is versioned by it.
HELPERS = {name: _helper(fn) for name, fn in vmath.FUNCTIONS.items()}
HELPERS.update(_fmax=_extreme("llvm.maxnum"), _fmin=_extreme("llvm.minnum"), _wide_vectors=_wide_vectors)


class _Kernels(Recent):
    """The kernels in memory, the least recently used dropped past ``NGRAD_MEMORY_ENTRIES``: an
    evicted kernel's module leaves ``sys.modules`` too (a plan still holding the kernel keeps it
    working), and asking for it again builds it anew, from the disk cache when it is there."""

    def evicted(self, key, value):
        sys.modules.pop(f"ngrad_kernels.{key}", None)


_memory: dict[str, "Kernel"] = _Kernels()
_lock = threading.Lock()
stats = {"compiled": 0, "loaded": 0, "seconds": 0.0}


def _purge(key, folder=None):
    """Delete the module and Numba's files of ``key`` in ``folder`` (by default the cache folder,
    when it may be used: a refused cache is never written, not even to delete)."""
    folder = folder or usable_dir()
    if folder is None:
        return
    for p in glob.glob(os.path.join(folder, f"{key}.py")) + glob.glob(os.path.join(folder, "__pycache__", f"{key}.*")):
        try:
            os.unlink(p)
        except OSError:
            pass


def load_module(key, text):
    """The generated module ``text`` and the path of its file ``{key}.py`` in the cache folder,
    or None when it runs from memory (the cache cannot be used, is read-only and lacks it, or
    failed to write). The file is (re)written when missing, cut short or corrupt (Numba's files
    for it are dropped too), and the module is compiled from ``text`` itself, the bytes just
    compared, never from a second read of the file; its code names the file, as Numba's disk
    cache requires."""
    folder = usable_dir()
    path = None if folder is None else os.path.join(folder, f"{key}.py")
    if path is not None:
        try:
            with open(path, "rb") as f:  # the same code (comments may name other sizes)
                ok = code_of(f.read().decode("utf-8", "replace")) == code_of(text)
        except OSError:
            ok = False
        if not ok and writable(folder):
            _purge(key, folder)
            try:
                write_atomically(path, text)
            except OSError:  # the folder removed or filled meanwhile: this kernel runs from memory
                path = None
        elif not ok:  # a read-only cache without it: compiled in memory, the cache left as it is
            path = None
    name = f"ngrad_kernels.{key}"
    module = ModuleType(name)
    module.__file__ = path or f"<ngrad kernel {key}>"
    sys.modules[name] = module
    exec(compile(text, module.__file__, "exec"), module.__dict__)
    return module, path


class _Locator:
    """Where Numba keeps one kernel's machine code: ``__pycache__`` of the checked cache folder
    and nowhere else (Numba's own locators fall back to folders ngrad has not checked, and want
    the folder writable even to read it). Its source stamp is the kernel's key, a hash of the
    text that was compared, so the file is not read again."""

    def __init__(self, py_func, py_file):
        self._py_file = self.module = py_file  # Numba reads _py_file (in its warnings)
        self._lineno = py_func.__code__.co_firstlineno
        self.path = os.path.join(os.path.dirname(py_file), "__pycache__")

    @classmethod
    def from_function(cls, py_func, py_file):
        return cls(py_func, py_file)

    def ensure_cache_path(self):
        if usable_dir() is None:  # removed and now refused: nothing is written
            raise OSError(f"the kernel cache {cache_root()} cannot be used")
        os.makedirs(self.path, mode=0o700, exist_ok=True)

    def get_cache_path(self):
        return self.path

    def get_source_stamp(self):
        return os.path.basename(self.module)

    def get_disambiguator(self):
        return str(self._lineno)


class _CacheImpl(CompileResultCacheImpl):
    _locator_classes = [_Locator]


class DiskCache(FunctionCache):
    """Numba's cache of one kernel's machine code, which never fails the program: an entry that
    cannot be loaded (cut short, corrupt: unpickling garbage raises anything) is removed and
    compiled again, and one that cannot be saved (a read-only cache, a folder removed by
    ``ngrad cache clear`` meanwhile) is kept in memory only."""

    _impl_class = _CacheImpl

    def load_overload(self, sig, target_context):
        try:
            # Numba's own load refreshes the target context first: importing and installing every
            # registry of implementations (0.2 s, 0.4 with SciPy installed, as its BLAS check
            # imports scipy.linalg), which only typing and lowering use. Machine code that is
            # loaded needs the runtime's symbols alone; a compile refreshes the context itself.
            rtsys.initialize(target_context)
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except Exception:
            # only Numba's files of this kernel: its module was just checked, and is kept
            locator = self._impl.locator
            key = os.path.splitext(os.path.basename(locator.module))[0]
            for p in glob.glob(os.path.join(glob.escape(locator.get_cache_path()), f"{key}.*")):
                try:
                    os.unlink(p)
                except OSError:
                    pass
            return None

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except OSError:
            pass


class Kernel:
    """A compiled kernel; the first call of each signature may load from disk or compile."""

    __slots__ = ("key", "text", "fn", "ready")

    def __init__(self, key, text):
        self.key, self.text = key, text
        self.fn = self.build()
        self.ready = False

    def build(self):
        """The Numba dispatcher of the module's ``kernel`` (the CUDA target overrides this),
        cached on disk when its module is there."""
        module, path = load_module(self.key, self.text)
        module.__dict__.update(HELPERS)
        fn = numba.njit(**FLAGS)(module.kernel)
        if path is not None:
            fn._cache = DiskCache(module.kernel)  # what Dispatcher.enable_caching does, with DiskCache
        return fn

    def __call__(self, *args):
        if self.ready:
            return self.fn(*args)
        return self.first_call(lambda fn: fn(*args))

    def first_call(self, call):
        """The first call, which loads the machine code from disk or compiles it."""
        t = time.perf_counter()
        try:
            r = call(self.fn)
        except Exception:
            # a corrupt Numba cache entry can fail to load: rebuild once from the source
            _purge(self.key)
            self.fn = self.build()
            try:
                r = call(self.fn)
            except NumbaError as e:
                raise CompileError(f"{type(e).__name__} in kernel {self.key}: {str(e).splitlines()[0]}") from e
        spent = time.perf_counter() - t
        stats["seconds"] += spent
        misses = getattr(getattr(self.fn, "stats", None), "cache_misses", True)
        stats["compiled" if misses else "loaded"] += 1
        if debug_level() >= 3:
            print(f"ngrad: kernel {self.key}: {_phases(self.fn, spent, bool(misses))}", file=sys.stderr)
        self.ready = True
        return r


def _phases(fn, spent, compiled):
    """Where a first call's time went (``NGRAD_DEBUG=3``): Numba's front end (typing and
    lowering, Python) and LLVM (optimisation and machine code), from Numba's own timers."""
    if not compiled:
        return f"loaded from the disk cache in {spent * 1e3:.1f} ms"
    timers = {}
    for overload in getattr(fn, "overloads", {}).values():
        for name, seconds in (getattr(overload, "metadata", None) or {}).get("timers", {}).items():
            timers[name] = timers.get(name, 0.0) + seconds
    total, llvm = timers.get("compiler_lock", spent), timers.get("llvm_lock", 0.0)
    return (
        f"compiled in {spent * 1e3:.1f} ms (Numba's front end {(total - llvm) * 1e3:.1f} ms, LLVM {llvm * 1e3:.1f} ms)"
    )


def direct(kernel, args):
    """The machine code Numba made for exactly the types of ``args``, called without the
    dispatcher's per-call typing of every argument (about 0.2 µs of a small kernel's 0.5). Only
    for a call site whose argument types cannot change between calls: the machine code trusts
    them. Flags that do not change the code it runs (read-only, alignment on this hardware) may
    differ. The dispatcher itself when there is no such entry.

    ```python
    >>> import numpy as np
    >>> from ngrad.engine.targets.cpu import direct, kernel
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


def resident(text):
    """The kernel of ``text`` if this process holds it (``ready`` once it has run), else None."""
    return _memory.get(key_of(text))


def kernel(text):
    """The compiled CPU kernel for generated module ``text`` (memory, then disk, then compile)."""
    return cached(text, Kernel)


def warm_up():
    """Pay Numba's once-per-process compile start-up (the tables of implementations it installs
    at its first compile: about 0.35 s, 0.5 with SciPy installed) before the first compile: the
    compile server does this before it reads a request. Loading a kernel from the disk cache
    needs none of it (``DiskCache.load_overload``)."""
    from numba.core.registry import cpu_target

    cpu_target.target_context.refresh()


class _Steps(numba.core.event.Listener):
    """Calls its function as each of Numba's compiler passes starts."""

    def __init__(self, fn):
        self.fn = fn

    def on_start(self, event):
        self.fn()

    def on_end(self, event):
        pass


_steps: dict = {}


def on_compile_step(fn):
    """Have ``fn()`` called (in the compiling thread) as each of Numba's compiler passes starts:
    typing, rewriting and lowering run as a few dozen passes a function, so ``fn`` (the compile
    worker's ``defer_to_calls``) gets a look every few milliseconds of a compile. Registering
    the same function again does nothing.

    ```python
    >>> import numba
    >>> from ngrad.engine.targets.cpu import on_compile_step
    >>> passes = []
    >>> def count():
    ...     passes.append(1)
    >>> on_compile_step(count)
    >>> numba.njit(lambda a: a + 1.0)(2.0)
    3.0
    >>> len(passes) > 10
    True

    ```
    """
    with _lock:
        if fn not in _steps:
            _steps[fn] = _Steps(fn)
            numba.core.event.register("numba:run_pass", _steps[fn])


def cached(text, make):
    """The kernel of ``text`` kept in memory, made once by ``make(key, text)`` (a ``Kernel``
    class of some target: CPU and CUDA texts differ, so one table holds both)."""
    key = key_of(text)
    k = _memory.get(key)
    if k is None:
        with _lock:
            k = _memory.get(key)
            if k is None:
                k = _memory[key] = make(key, text)
    return k


def cache_info():
    """Where the cache is, how many kernels, plans (``write_plan``: bytecode encodings, joint
    tapes, the list of compiled loops) and bytes it holds, whether this process may write it,
    and ``problem``: why it cannot be used (then ngrad compiles in memory), or None."""
    folder = cache_dir()
    files = glob.glob(os.path.join(folder, "k*.py"))
    plans = glob.glob(os.path.join(folder, "plans", "*"))
    size = 0
    for root, _, names in os.walk(cache_root()):
        for n in names:
            try:
                size += os.path.getsize(os.path.join(root, n))
            except OSError:  # removed meanwhile by another process
                pass
    return {
        "root": cache_root(),
        "folder": folder,
        "kernels": len(files),
        "plans": len(plans),
        "bytes": size,
        "writable": os.path.isdir(folder) and writable(folder),
        "problem": problem(),
    }


def cache_clear():
    """Delete the cached kernels and plans of every version (the ``ngrad*`` folders under the
    root, not the root itself, which may be a folder of the user's holding other files);
    returns the number of files removed. Compiled kernels in memory are dropped too."""
    import shutil

    n = 0
    for folder in glob.glob(os.path.join(glob.escape(cache_root()), "ngrad*-numba*-codegen*")):
        if os.path.isdir(folder) and not os.path.islink(folder):
            n += sum(len(names) for _, _, names in os.walk(folder))
            shutil.rmtree(folder, ignore_errors=True)
    _memory.clear()
    return n


# the last statement: ``targets._cpu`` hands this module out only once it is whole (a compile on
# the worker thread imports it, Numba first, while calls on other threads ask what it holds)
IMPORTED = True
