"""Numba's side of the CPU target: generated kernel source to a Numba dispatcher, the math
helpers kernels call (Numba intrinsics emitting vmath's LLVM IR inline), and Numba's disk cache
of one kernel's machine code.

Contract: ``dispatcher(module, path)`` is ``numba.njit`` of the generated module's ``kernel``
with ngrad's flags, cached by Numba under ``path``'s folder when ``path`` is given (``DiskCache``);
the machine code of each signature it compiles or loads is offered to ``captured`` (see
``DiskCache``), which ``cpu.Kernel`` keeps as an object file (``objects``) so that a later process
runs it without importing Numba. ``warm_up()`` pays Numba's compile start-up; ``phases`` says
where a first call's time went. Imported only when a kernel must be compiled or loaded by Numba:
importing Numba is 0.12-0.15 s of Python. Flags: ``nogil``, ``error_model='numpy'`` (vectorised
division, IEEE results), ``fastmath={'reassoc'}`` (not ``fastmath=True``: that breaks NaN checks;
not ``contract``: a value fusion recomputes in another kernel must keep its bits, see
``emit.ACCUMULATE``).
"""

import glob
import os

import numba
import numba.core.event
from llvmlite import ir
from numba import types
from numba.core.caching import CompileResultCacheImpl, FunctionCache
from numba.core.errors import NumbaError
from numba.core.runtime import rtsys
from numba.extending import intrinsic

from .. import pace
from ..backend import vmath
from ..store import cache_root, usable_dir
from .ir_values import IRMath

__all__ = [
    "dispatcher",
    "captured",
    "warm_up",
    "phases",
    "NumbaError",
    "DiskCache",
    "HELPERS",
    "FLAGS",
]

FLAGS = dict(nogil=True, error_model="numpy", fastmath={"reassoc"})


def _helper(fn):
    """A Numba intrinsic computing ``fn`` (a vmath function) on a float64, emitted inline."""

    @intrinsic
    def helper(typingctx, x):
        if not isinstance(x, (types.Float, types.Integer, types.Boolean)):
            return None

        def codegen(context, builder, signature, args):
            v = context.cast(builder, args[0], signature.args[0], types.float64)
            m = IRMath(builder, ir)
            return fn(m, m.value(v)).v

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


@intrinsic
def _ignored(typingctx):
    """The hints only ngrad's own compiler reads (``emit``): ``_short_loops()`` (loops vectorised
    without interleaving, see ``backend/bytecode_loop.py``) and ``_independent()`` (no iteration
    of the loop reads what another writes). Numba runs its own pipeline on the kernel, unchanged."""

    def codegen(context, builder, signature, args):
        return context.get_dummy_value()

    return types.none(), codegen


def _complex_divide(a, b):
    """NumPy's complex division (Smith's method; a zero divisor gives each part divided by +0.0,
    inf or nan), where Numba's ``a / b`` raises ZeroDivisionError: a kernel computing both sides
    of a ``where`` (the gradient of ``abs`` at 0) must not fail where NumPy gives a value."""
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    abs_br, abs_bi = abs(br), abs(bi)
    if abs_br >= abs_bi:
        if abs_br == 0.0 and abs_bi == 0.0:
            return complex(ar / abs_br, ai / abs_br)
        rat = bi / br
        scl = 1.0 / (br + bi * rat)
        return complex((ar + ai * rat) * scl, (ai - ar * rat) * scl)
    rat = br / bi
    scl = 1.0 / (bi + br * rat)
    return complex((ar * rat + ai) * scl, (ai * rat - ar) * scl)


# The math helpers kernels call (codegen's SourceMath writes their names). A change to vmath.py
# must bump store.CODEGEN_VERSION: the kernel cache folder is versioned by it.
HELPERS = {name: _helper(fn) for name, fn in vmath.FUNCTIONS.items()}
HELPERS.update(
    _fmax=_extreme("llvm.maxnum"),
    _fmin=_extreme("llvm.minnum"),
    _wide_vectors=_wide_vectors,
    _short_loops=_ignored,
    _independent=_ignored,
)
HELPERS["_cdiv"] = numba.njit(inline="always", nogil=True, error_model="numpy", fastmath={"reassoc"})(_complex_divide)


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
    """Numba's reduction of a compile result to what its cache keeps, which also hands the
    machine code to ``captured``: the object file, its CPython wrapper's and environment's
    symbol names, by argument types (``CompileResult._reduce``'s order: the library's state
    first, then the function descriptor)."""

    _locator_classes = [_Locator]

    def __init__(self, py_func):
        super().__init__(py_func)
        self.captured = {}

    def reduce(self, cres):
        payload = super().reduce(cres)
        self._capture(payload, cres.signature)
        return payload

    def rebuild(self, target_context, payload):
        cres = super().rebuild(target_context, payload)
        self._capture(payload, cres.signature)
        return cres

    def _capture(self, payload, signature):
        libdata, fndesc = payload[0], payload[1]
        name, kind, data = libdata
        if kind == "object":
            self.captured[tuple(signature.args)] = (data[0], fndesc.llvm_cpython_wrapper_name, fndesc.env_name)


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


def captured(fn, args):
    """The machine code ``fn`` (a ``dispatcher``) compiled or loaded for the types of ``args``:
    (object file, wrapper symbol, environment symbol), handed out once (its caller keeps it on
    disk), or None (no disk cache, not yet, or handed out already)."""
    cache = getattr(fn, "_cache", None)
    if not isinstance(cache, DiskCache):
        return None
    try:
        return cache._impl.captured.pop(tuple(fn.typeof_pyval(a) for a in args), None)
    except (TypeError, ValueError):
        return None


def dispatcher(module, path):
    """The Numba dispatcher of generated ``module``'s ``kernel``, cached on disk when its file
    ``path`` is in the cache folder (None: compiled in memory)."""
    module.__dict__.update(HELPERS)
    fn = numba.njit(**FLAGS)(module.kernel)
    if path is not None:
        fn._cache = DiskCache(module.kernel)  # what Dispatcher.enable_caching does, with DiskCache
    return fn


def phases(fn, spent, compiled):
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


# Numba's passes are points of ``pace.step``: typing, rewriting and lowering run as a few dozen
# passes a function, so the compile worker's pacing looks in every few milliseconds of a compile
numba.core.event.register("numba:run_pass", _Steps(pace.step))
