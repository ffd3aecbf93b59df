"""Matrix products: MKL's gemm where the optional ``mkl`` package is installed, NumPy's otherwise.

Contract: ``matmul(x, y, out=None)`` returns ``np.matmul(x, y)``, written into ``out`` when one
is given (an array of the product's shape and dtype), for any operands ``np.matmul`` takes.
Two-dimensional float32 and float64 products of at least ``MIN_WORK`` multiply-adds, with each
operand's rows or columns contiguous and ``out`` row-major and apart from both, run on MKL
(results equal NumPy's up to rounding); everything else runs ``np.matmul``. ``backend()`` names
what runs the large products; ``set_num_threads(n)`` sets MKL's threads, ``one_thread_here()``
the calling thread's to one; ``limit_numpy_threads(n)`` and ``restore_numpy_threads`` set those
of NumPy's OpenBLAS.

Why MKL: NumPy's wheels link OpenBLAS, which multiplies a dense layer's (1024, 784) batch by
(784, 256) weights in 4.2-4.6 ms on two cores of this project's machine, where MKL, the BLAS
PyTorch links, takes 3.3-3.6 ms; with such products most of an MLP step, that is the gap
between ngrad and PyTorch on one. MKL is loaded lazily, on the first product that would use it,
from the ``mkl`` wheel (``pip install 'ngrad[mkl]'``) or a system ``libmkl_rt``. It is an
opt-in because its threads stall where OpenBLAS's do not (after the process idles, or right
after NumPy's threaded BLAS ran): see docs/performance.md.

MKL runs its threads on libgomp (its GNU threading layer), the OpenMP runtime Numba and
PyTorch use: its default Intel runtime, loaded next to libgomp (which, most likely, answered its
thread-number queries) returned wrong products in a process that had imported PyTorch. Where
libgomp cannot be loaded, NumPy runs every product. A child process forked after MKL ran
threads would hang in libgomp on its first threaded product, so a child runs MKL on one thread.
``NGRAD_BLAS=numpy`` keeps every product on NumPy; ``NGRAD_BLAS=mkl`` makes MKL's absence an
error instead of a fallback.

>>> import numpy as np
>>> x, y = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
>>> matmul(x, y)
array([[ 3.,  3.],
       [12., 12.]])
>>> backend() in ("mkl", "numpy")
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib
import os
import sys
import threading
from typing import Any

import numpy as np

from ..config import blas_mode

__all__ = [
    "matmul",
    "backend",
    "describe",
    "set_num_threads",
    "one_thread_here",
    "MIN_WORK",
    "limit_numpy_threads",
    "restore_numpy_threads",
]

# OpenBLAS runs a product of fewer multiply-adds than this on the calling thread alone. Every
# larger one goes to MKL, though a call into MKL costs some 15 µs more (ctypes, the operands'
# checks, MKL's dispatch; 96³ took 37 µs on MKL against 28 on NumPy): when OpenBLAS's threads had
# just run a product, MKL's next one waited on libgomp's threads, 4.6 ms instead of 0.5 for a
# (128, 784) by (784, 256) product after each 120³ one.
MIN_WORK = 1 << 18

_GNU_THREADING = 3  # MKL_THREADING_GNU
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_INT_MAX = 2**31 - 1  # MKL's LP64 interface takes 32-bit dimensions

_lock = threading.Lock()
_gemms: dict[np.dtype, Any] | None = None  # {dtype: cblas gemm} once MKL is loaded; {} when it cannot be
_lib: Any = None  # MKL's ctypes library once loaded
_threads: int | None = None  # set_num_threads' count; None: MKL's default
_default_threads: int | None = None
_version = ""
_reason = "not loaded yet"
_one = threading.local()  # ``one_thread_here``'s threads: "asked", then "set" at their first product


def _mode() -> str:
    return blas_mode()


# the names a system MKL's runtime library answers to (dlopen searches LD_LIBRARY_PATH and ld.so's
# cache); ctypes.util.find_library would run ldconfig and the C compiler: 20 ms on the first large
# product of every process without MKL
_SYSTEM_NAMES = {
    "linux": ("libmkl_rt.so", "libmkl_rt.so.2", "libmkl_rt.so.3"),
    "darwin": ("libmkl_rt.dylib", "libmkl_rt.2.dylib"),
    "win32": ("mkl_rt.dll", "mkl_rt.2.dll"),
}


def _library_path() -> str | None:
    """The ``mkl`` wheel's ``libmkl_rt``, or None (then ``_open`` looks for a system one)."""
    import importlib.metadata  # here: 10 ms of import, a tenth of ngrad's and the compile server's

    try:
        files = importlib.metadata.files("mkl") or ()
    except importlib.metadata.PackageNotFoundError:
        files = ()
    for f in files:
        if f.name.startswith("libmkl_rt.so"):
            return str(f.locate())
    return None


def _system_library() -> Any:
    """A system MKL's runtime library, loaded, or None."""
    for name in _SYSTEM_NAMES.get(sys.platform, ()):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _gomp() -> None:
    """Load libgomp for every library after it (RTLD_GLOBAL), or raise OSError saying why not."""
    try:
        ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
        return
    except OSError:
        pass
    try:
        ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise OSError(f"libgomp, the OpenMP runtime MKL must share with Numba, cannot be loaded ({e})") from None


def _open() -> tuple[Any, dict[np.dtype, Any], str]:
    """MKL's library with its gemms set up and checked, or an OSError saying why not."""
    path = _library_path()
    lib = _system_library() if path is None else None
    if path is None and lib is None:
        raise OSError("MKL is not installed (pip install 'ngrad[mkl]')")
    _gomp()  # before MKL picks its threading layer (below), which resolves against it
    if lib is None:
        lib = ctypes.CDLL(path)
    if lib.MKL_Set_Threading_Layer(_GNU_THREADING) != _GNU_THREADING:
        raise OSError("MKL did not accept libgomp as its threading layer")
    gemms = {}
    for dtype, name, scalar in (
        (np.float64, "cblas_dgemm", ctypes.c_double),
        (np.float32, "cblas_sgemm", ctypes.c_float),
    ):
        gemm = getattr(lib, name)
        gemm.argtypes = [ctypes.c_int] * 6 + [
            scalar,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_int,
            scalar,
            ctypes.c_void_p,
            ctypes.c_int,
        ]
        gemm.restype = None
        gemms[np.dtype(dtype)] = gemm
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 7)), np.asfortranarray(rng.standard_normal((7, 3)))
    z = np.empty((5, 3))
    gemms[z.dtype](
        _ROW_MAJOR, _NO_TRANS, _TRANS, 5, 3, 7, 1.0, x.ctypes.data, 7, y.ctypes.data, 7, 0.0, z.ctypes.data, 3
    )
    if not np.allclose(z, x @ y, rtol=1e-12, atol=1e-12):
        raise OSError("MKL's product disagreed with NumPy's")
    buf = ctypes.create_string_buffer(256)
    lib.MKL_Get_Version_String(buf, len(buf))
    return lib, gemms, buf.value.decode(errors="replace").strip()


def _load() -> dict[np.dtype, Any]:
    global _gemms, _lib, _version, _reason, _default_threads
    with _lock:
        if _gemms is not None:
            return _gemms
        mode = _mode()
        if mode == "numpy":
            _gemms, _reason = {}, "NGRAD_BLAS=numpy"
            return _gemms
        try:
            _lib, gemms, _version = _open()
        except (OSError, AttributeError) as e:
            if mode == "mkl":
                raise RuntimeError(f"NGRAD_BLAS=mkl, but MKL cannot be used: {e}") from None
            _gemms, _reason = {}, str(e)
            return _gemms
        _default_threads = _lib.MKL_Get_Max_Threads()
        if _threads is not None:
            _lib.MKL_Set_Num_Threads(_threads)
        os.register_at_fork(after_in_child=_one_thread_in_child)
        _gemms, _reason = gemms, ""
        return _gemms


def _one_thread_in_child() -> None:
    _lib.MKL_Set_Num_Threads(1)


def backend() -> str:
    """``"mkl"`` when large products run on MKL (loading it if needed), else ``"numpy"``.

    >>> backend() in ("mkl", "numpy")
    True
    """
    return "mkl" if (_gemms if _gemms is not None else _load()) else "numpy"


def describe() -> str:
    """What runs the large products, in words: MKL's version, or why NumPy runs them."""
    return f"MKL ({_version})" if backend() == "mkl" else f"NumPy's BLAS ({_reason})"


def one_thread_here() -> None:
    """Run the MKL products the calling thread makes on that thread alone from now on
    (``mkl_set_num_threads_local``, taken at its next product on MKL, which may be loaded only
    then), whatever ``set_num_threads`` says for the others. The compile worker's warm-ups do:
    libgomp gives each thread that starts a threaded product a team of threads of its own, and
    with more threads in teams than cores, every team's threads sleep right after a product
    instead of spinning for the next, so each product of the calls waited about 0.1 ms for its
    team to wake up (two cores: gmm's steady state 0.68 ms a call against 0.47, mlp's 1.62
    against 1.14).

    >>> import threading
    >>> t = threading.Thread(target=one_thread_here); t.start(); t.join()
    """
    if getattr(_one, "state", None) is None:
        _one.state = "asked"


def set_num_threads(n: int | None) -> int | None:
    """Run MKL's products on ``n`` threads, or on MKL's default (one per core) for None.
    Returns the previous setting.

    >>> before = set_num_threads(1); set_num_threads(before) == 1
    True
    """
    global _threads
    before, _threads = _threads, None if n is None else int(n)
    if _lib is not None:
        _lib.MKL_Set_Num_Threads(_default_threads if _threads is None else _threads)
    return before


# the thread-count functions of NumPy's OpenBLAS, by the names NumPy's wheels (scipy-openblas,
# 64-bit integers), older wheels and system builds give them
_OPENBLAS_NAMES = tuple(
    (f"{p}openblas_set_num_threads{s}", f"{p}openblas_get_num_threads{s}")
    for p, s in (("scipy_", "64_"), ("scipy_", ""), ("", "64_"), ("", ""))
)


@functools.cache
def _numpy_openblas() -> tuple[Any, Any] | None:
    """NumPy's OpenBLAS thread-count ``(setter, getter)``, or None where NumPy's BLAS is another
    library or cannot be reached (looked up once). Through NumPy's own extension module, whose
    handle resolves the symbols of the libraries it links (POSIX ``dlsym``), so no file is
    searched."""
    found = None
    try:
        try:
            umath = importlib.import_module("numpy._core._multiarray_umath")
        except ImportError:  # NumPy 1.x
            umath = importlib.import_module("numpy.core._multiarray_umath")
        lib = ctypes.CDLL(umath.__file__)
        for setter, getter in _OPENBLAS_NAMES:
            try:
                found = (getattr(lib, setter), getattr(lib, getter))
                break
            except AttributeError:
                continue
    except (OSError, ImportError, AttributeError):
        found = None
    if found is not None:
        found[0].argtypes, found[0].restype, found[1].restype = [ctypes.c_int], None, ctypes.c_int
    return found


def limit_numpy_threads(n: int) -> int | None:
    """Run NumPy's OpenBLAS products on at most ``n`` threads, process-wide. Returns the count
    before, for ``restore_numpy_threads``, or None when nothing changed (NumPy's BLAS is not
    OpenBLAS, or it ran on ``n`` threads or fewer already). The compile worker limits it while
    it compiles on the cores OpenBLAS would share (see docs/performance.md).

    >>> before = limit_numpy_threads(1)
    >>> restore_numpy_threads(before, 1)
    """
    found = _numpy_openblas()
    if found is None:
        return None
    before = found[1]()
    if before <= n:
        return None
    found[0](n)
    return before


def restore_numpy_threads(before: int | None, n: int) -> None:
    """Undo ``limit_numpy_threads(n)``, which returned ``before``: OpenBLAS runs on ``before``
    threads again, unless somebody set another count meanwhile. Safe while another thread's
    product runs: OpenBLAS splits a product by the count it read when the product began, and
    setting a count up to the threads it started before only changes that number."""
    found = _numpy_openblas()
    if before is not None and found is not None and found[1]() == n:
        found[0](before)


def _operand(a: np.ndarray) -> tuple[int, int] | None:
    """``(transpose flag, leading dimension)`` of a matrix whose rows or columns are contiguous
    at a stride gemm takes, else None."""
    (rows, cols), (rs, cs), size = a.shape, a.strides, a.itemsize
    if (cols == 1 or cs == size) and (rows == 1 or (rs % size == 0 and rs // size >= cols)):
        return _NO_TRANS, rs // size if rows > 1 else cols
    if (rows == 1 or rs == size) and (cols == 1 or (cs % size == 0 and cs // size >= rows)):
        return _TRANS, cs // size if cols > 1 else rows
    return None


def matmul(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(x, y, out=out)``, on MKL where the module docstring says.

    >>> import numpy as np
    >>> x = np.random.default_rng(0).standard_normal((64, 48))
    >>> out = np.empty((48, 48))
    >>> r = matmul(x.T, x, out)
    >>> r is out and bool(np.allclose(out, x.T @ x))
    True
    """
    call = _gemm_call(x, y, out)
    if call is None:
        return np.matmul(x, y) if out is None else np.matmul(x, y, out=out)
    gemm, c, args = call
    gemm(*args)
    return c


def _gemm_call(x: np.ndarray, y: np.ndarray, out: np.ndarray | None) -> tuple[Any, np.ndarray, tuple[Any, ...]] | None:
    """``(gemm, result array, gemm's arguments)`` for a product MKL takes, else None."""
    gemms = _gemms if _gemms is not None else _load()
    gemm = (
        gemms
        and x.__class__ is np.ndarray
        and y.__class__ is np.ndarray
        and x.ndim == 2
        and y.ndim == 2
        and x.dtype == y.dtype
        and gemms.get(x.dtype)
    )
    if not gemm:
        return None
    (m, k), (k2, n) = x.shape, y.shape
    if k != k2 or m * n * k < MIN_WORK or max(m, n, k) > _INT_MAX:
        return None
    a, b = _operand(x), _operand(y)
    if out is None:
        c = np.empty((m, n), x.dtype)
    elif (
        out.__class__ is np.ndarray
        and out.dtype == x.dtype
        and out.shape == (m, n)
        and out.flags.writeable
        and out.strides[1] == out.itemsize
        and out.strides[0] >= n * out.itemsize
        and out.strides[0] % out.itemsize == 0
        and not np.may_share_memory(out, x)
        and not np.may_share_memory(out, y)
    ):
        c = out
    else:
        return None
    ldc = c.strides[0] // c.itemsize
    if (
        a is None
        or b is None
        or max(a[1], b[1], ldc) > _INT_MAX
        or not x.flags.aligned
        or not y.flags.aligned
        or not c.flags.aligned
    ):
        return None
    if getattr(_one, "state", None) == "asked":
        _lib.MKL_Set_Num_Threads_Local(1)
        _one.state = "set"
    return (
        gemm,
        c,
        (_ROW_MAJOR, a[0], b[0], m, n, k, 1.0, x.ctypes.data, a[1], y.ctypes.data, b[1], 0.0, c.ctypes.data, ldc),
    )
