"""Compilation: generated kernel source -> Numba dispatcher. The only module that imports Numba.

Contract: ``kernel(text)`` returns a callable compiled from the source of one generated
module (see ``codegen``), cached in memory by the text's hash and on disk under
``cache_dir()``. The module is written atomically (a temporary file renamed into place), read
back and compared before it is imported, and registered in ``sys.modules`` before its body runs,
so Numba's own cache (``cache=True``) reloads the machine code in a new process without
compiling. A disk entry that is corrupt (the module text or Numba's cache files) is deleted and
rebuilt, never trusted. Flags: ``nogil``, ``error_model='numpy'`` (vectorised division, IEEE
results), ``fastmath={'reassoc', 'contract'}`` (not ``fastmath=True``: that breaks NaN checks).
"""
import glob
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import time

import numba
from numba import types
from numba.extending import intrinsic

from .._version import __version__ as _ngrad_version
from . import vmath
from .codegen import CODEGEN_VERSION

__all__ = ["kernel", "cache_dir", "cache_info", "cache_clear", "stats"]

FLAGS = dict(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})


@intrinsic
def _i64_as_f64(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


@intrinsic
def _f64_as_i64(typingctx, x):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


# The vectorisable math helpers, compiled once. No "reassoc" here: it would let LLVM fold the
# rounding trick (x + SHIFT) - SHIFT into x. They are not inlined at Numba level (that would put
# them under the kernel's flags); LLVM inlines them with their own per-instruction flags.
# cache=False: Numba keys a function's cache on its own bytecode only, so a helper cached beside
# vmath.py could go stale when a helper it calls changes. A kernel's cache entry already holds the
# helper code it links in, so warm processes still compile nothing. (Kernels themselves live in a
# folder versioned by CODEGEN_VERSION: bump it whenever vmath.py changes.)
_MATH_FLAGS = dict(cache=False, nogil=True, error_model="numpy", fastmath={"contract"})
vmath.i64_as_f64, vmath.f64_as_i64 = _i64_as_f64, _f64_as_i64
_PLAIN = {name: getattr(vmath, name) for name in ("scale2", "_sin_poly", "_cos_poly", "_reduce", "_quadrant_sin",
                                                   "exp64", "expm1_64", "tanh64", "log64", "sin64", "cos64")}
# Helpers that other helpers call are inlined at Numba level (same flags, so that is safe); the
# versions kernels call are flat functions LLVM inlines into the loop, which then vectorises.
for _name in ("scale2", "_sin_poly", "_cos_poly", "_reduce", "_quadrant_sin", "exp64", "expm1_64"):
    setattr(vmath, _name, numba.njit(inline="always", **_MATH_FLAGS)(_PLAIN[_name]))
HELPERS = {alias: numba.njit(**_MATH_FLAGS)(_PLAIN[name]) for alias, name in (
    ("_vexp", "exp64"), ("_vexpm1", "expm1_64"), ("_vtanh", "tanh64"), ("_vlog", "log64"),
    ("_vsin", "sin64"), ("_vcos", "cos64"))}

_memory = {}
_lock = threading.Lock()
stats = {"compiled": 0, "loaded": 0, "seconds": 0.0}


def cache_root():
    base = os.environ.get("NGRAD_CACHE_DIR")
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                            "ngrad")
    return base


def cache_dir():
    """The versioned folder of this ngrad, Numba and codegen version (created on demand)."""
    return os.path.join(cache_root(), f"ngrad{_ngrad_version}-numba{numba.__version__}-codegen{CODEGEN_VERSION}")


def _write_atomically(path, text):
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _purge(key):
    folder = cache_dir()
    for p in glob.glob(os.path.join(folder, f"{key}.py")) + glob.glob(os.path.join(folder, "__pycache__", f"{key}.*")):
        try:
            os.unlink(p)
        except OSError:
            pass


def _load(key, text):
    path = os.path.join(cache_dir(), f"{key}.py")
    try:
        with open(path) as f:
            ok = f.read() == text
    except OSError:
        ok = False
    if not ok:  # missing, half-written or corrupt: (re)write it and drop Numba's files for it
        _purge(key)
        _write_atomically(path, text)
    name = f"ngrad_kernels.{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    module.__dict__.update(HELPERS)
    return numba.njit(**FLAGS)(module.kernel)


class Kernel:
    """A compiled kernel; the first call of each signature may load from disk or compile."""

    __slots__ = ("key", "text", "fn", "ready")

    def __init__(self, key, text):
        self.key, self.text = key, text
        self.fn = _load(key, text)
        self.ready = False

    def __call__(self, *args):
        if self.ready:
            return self.fn(*args)
        t = time.perf_counter()
        try:
            r = self.fn(*args)
        except Exception:
            # a corrupt Numba cache entry can fail to load: rebuild once from the source
            _purge(self.key)
            self.fn = _load(self.key, self.text)
            r = self.fn(*args)
        dt = time.perf_counter() - t
        stats["seconds"] += dt
        stats["compiled" if self.fn.stats.cache_misses else "loaded"] += 1
        self.ready = True
        return r


def key_of(text):
    return "k" + hashlib.sha256(text.encode()).hexdigest()[:24]


def on_disk(text):
    """True when this kernel's module and Numba's cache index already exist on disk."""
    key = key_of(text)
    return bool(glob.glob(os.path.join(cache_dir(), "__pycache__", f"{key}.*.nbi")))


def kernel(text):
    """The compiled kernel for generated module ``text`` (memory, then disk, then compile)."""
    key = key_of(text)
    k = _memory.get(key)
    if k is None:
        with _lock:
            k = _memory.get(key)
            if k is None:
                k = _memory[key] = Kernel(key, text)
    return k


def cache_info():
    """Where the cache is, and how many kernels and bytes it holds."""
    folder = cache_dir()
    files = glob.glob(os.path.join(folder, "k*.py"))
    size = 0
    for root, _, names in os.walk(cache_root()):
        size += sum(os.path.getsize(os.path.join(root, n)) for n in names)
    return {"root": cache_root(), "folder": folder, "kernels": len(files), "bytes": size}


def cache_clear():
    """Delete every cached kernel of every version; returns the number of files removed."""
    import shutil
    root = cache_root()
    n = sum(len(names) for _, _, names in os.walk(root))
    shutil.rmtree(root, ignore_errors=True)
    _memory.clear()
    return n
