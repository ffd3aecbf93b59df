"""Matrix products on MKL (``engine/ir/blas.py``): equal to NumPy's for every operand layout gemm
takes, NumPy's own call for everything else, and safe with threads, ``fork`` and a missing or
refused MKL; NumPy's OpenBLAS limited to fewer threads and given its count back."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from ngrad.engine.ir import blas

on_mkl = pytest.mark.skipif(blas.backend() != "mkl", reason="MKL is not installed (pip install 'ngrad[mkl]')")
on_openblas = pytest.mark.skipif(blas._numpy_openblas() is None, reason="NumPy's BLAS is not OpenBLAS")
TOL = {np.float64: 1e-12, np.float32: 2e-5}


@pytest.fixture
def gemm_calls(monkeypatch):
    """Every product on MKL, however small, with its gemm calls counted."""
    calls = []
    monkeypatch.setattr(blas, "MIN_WORK", 0)
    for dtype, gemm in list(blas._gemms.items()):

        def counted(*args, gemm=gemm, dtype=dtype):
            calls.append(dtype)
            return gemm(*args)

        monkeypatch.setitem(blas._gemms, dtype, counted)
    return calls


def _layouts(rng, rows, cols, dtype):
    """The same matrix stored every way gemm reads it, and as row and column slices of wider arrays."""
    a = rng.standard_normal((rows, cols)).astype(dtype)
    wide = np.zeros((rows, cols + 5), dtype)
    wide[:, 2 : cols + 2] = a
    tall = np.zeros((cols, rows + 4), dtype)
    tall[:, 1 : rows + 1] = a.T
    return {
        "C": a,
        "F": np.asfortranarray(a),
        "row slice": wide[:, 2 : cols + 2],
        "column slice": tall[:, 1 : rows + 1].T,
    }


@on_mkl
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m,k,n", [(7, 5, 3), (1, 6, 4), (6, 1, 4), (6, 4, 1), (1, 1, 1), (33, 17, 9)])
def test_products_on_mkl_equal_numpys_in_every_layout(gemm_calls, dtype, m, k, n):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    xs, ys = _layouts(rng, m, k, dtype), _layouts(rng, k, n, dtype)
    expected = xs["C"].astype(np.float64) @ ys["C"].astype(np.float64)
    for xname, x in xs.items():
        for yname, y in ys.items():
            before = len(gemm_calls)
            z = blas.matmul(x, y)
            assert len(gemm_calls) == before + 1, (xname, yname)
            assert z.dtype == dtype and z.shape == (m, n)
            np.testing.assert_allclose(z, expected, rtol=TOL[dtype], atol=TOL[dtype] * k, err_msg=f"{xname} @ {yname}")
            out = np.full((m, n + 3), np.nan, dtype)[:, 1 : n + 1]  # row-major, padded rows
            assert blas.matmul(x, y, out) is out
            np.testing.assert_allclose(out, expected, rtol=TOL[dtype], atol=TOL[dtype] * k)


@on_mkl
def test_a_dense_layers_products_run_on_mkl_at_the_default_threshold(monkeypatch):
    calls = []
    gemm = blas._gemms[np.dtype(np.float64)]
    monkeypatch.setitem(blas._gemms, np.dtype(np.float64), lambda *a: calls.append(a) or gemm(*a))
    rng = np.random.default_rng(0)
    x, w, g = rng.uniform(0, 1, (256, 784)), rng.standard_normal((784, 256)), rng.standard_normal((256, 256))
    np.testing.assert_allclose(blas.matmul(x, w), np.matmul(x, w), rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(blas.matmul(x.T, g), np.matmul(x.T, g), rtol=1e-12, atol=1e-10)
    small = rng.standard_normal((16, 16))
    np.testing.assert_allclose(blas.matmul(small, small), small @ small, rtol=1e-12, atol=1e-12)
    assert len(calls) == 2  # the 16x16 product stays on NumPy


@on_mkl
def test_nan_and_inf_propagate_as_in_numpy(gemm_calls):
    x = np.arange(12.0).reshape(3, 4)
    y = np.ones((4, 2))
    x[1, 2], y[3, 1] = np.nan, np.inf
    z = blas.matmul(x, y)
    assert gemm_calls
    np.testing.assert_array_equal(z, x @ y)


@pytest.mark.parametrize(
    "case",
    [
        "mixed dtypes",
        "ints",
        "complex",
        "vector",
        "batched",
        "strided",
        "out overlaps",
        "out column-major",
        "out of another dtype",
    ],
)
def test_everything_else_is_numpys_own_product(gemm_calls, case):
    rng = np.random.default_rng(1)
    x, y, out = rng.standard_normal((6, 5)), rng.standard_normal((5, 4)), None
    if case == "mixed dtypes":
        y = y.astype(np.float32)
    elif case == "ints":
        x, y = (x * 10).astype(np.int64), (y * 10).astype(np.int64)
    elif case == "complex":
        x = x + 1j * x
    elif case == "vector":
        y = y[:, 0]
    elif case == "batched":
        x, y = np.stack([x, 2 * x]), np.stack([y, -y])
    elif case == "strided":
        x = rng.standard_normal((12, 10))[::2, ::2]
    elif case == "out overlaps":
        x = rng.standard_normal((5, 5))
        y = x.copy()
        out = x
    elif case == "out column-major":
        out = np.empty((4, 6)).T
    elif case == "out of another dtype":
        out = np.empty((6, 4), np.float32)
    expected = np.matmul(x, y)
    z = blas.matmul(x, y) if out is None else blas.matmul(x, y, out)
    assert z is out if out is not None else z.dtype == expected.dtype
    np.testing.assert_allclose(z, expected, rtol=1e-6)
    assert not gemm_calls


def test_mismatched_shapes_raise_numpys_error():
    x, y = np.ones((300, 200)), np.ones((100, 300))
    with pytest.raises(ValueError, match="mismatch in its core dimension"):
        blas.matmul(x, y)


def test_ngrad_blas_chooses_and_refuses(monkeypatch):
    for name in ("_gemms", "_lib", "_version", "_reason"):
        monkeypatch.setattr(blas, name, getattr(blas, name))
    monkeypatch.setattr(blas, "_gemms", None)
    monkeypatch.setenv("NGRAD_BLAS", "numpy")
    assert blas.backend() == "numpy" and "NGRAD_BLAS=numpy" in blas.describe()
    np.testing.assert_allclose(blas.matmul(np.eye(200), np.ones((200, 200))), np.ones((200, 200)))

    monkeypatch.setattr(blas, "_gemms", None)
    monkeypatch.setenv("NGRAD_BLAS", "fastest")
    with pytest.raises(ValueError, match="NGRAD_BLAS must be one of auto, mkl, numpy"):
        blas.backend()

    monkeypatch.setattr(blas, "_library_path", lambda: None)
    monkeypatch.setattr(blas, "_system_library", lambda: None)
    monkeypatch.setattr(blas, "_gemms", None)
    monkeypatch.setenv("NGRAD_BLAS", "mkl")
    with pytest.raises(RuntimeError, match=r"NGRAD_BLAS=mkl, but MKL cannot be used: MKL is not installed"):
        blas.backend()
    monkeypatch.setattr(blas, "_gemms", None)
    monkeypatch.setenv("NGRAD_BLAS", "auto")
    assert blas.backend() == "numpy" and "MKL is not installed" in blas.describe()


FORK = r"""
import os, sys, numpy as np
from ngrad.engine.ir import blas
assert blas.backend() == "mkl"
blas.set_num_threads(2)
x = np.random.default_rng(0).standard_normal((400, 400))
blas.matmul(x, x)                      # libgomp's threads now exist in this process
pid = os.fork()
if pid == 0:
    import signal
    signal.alarm(20)                   # a hung child must not outlive the test
    ok = np.allclose(blas.matmul(x, x.T), x @ x.T)
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@on_mkl
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_multiplies_instead_of_hanging():
    done = subprocess.run([sys.executable, "-c", FORK], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


@on_mkl
def test_products_from_several_python_threads_at_once():
    rng = np.random.default_rng(2)
    pairs = [(rng.standard_normal((300, 200)), rng.standard_normal((200, 250))) for _ in range(4)]
    wrong = []

    def work(x, y):
        for _ in range(5):
            if not np.allclose(blas.matmul(x, y), np.matmul(x, y), rtol=1e-12, atol=1e-10):
                wrong.append(1)

    threads = [threading.Thread(target=work, args=p) for p in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


SYSTEM = r"""
import subprocess, sys, numpy as np
from ngrad.engine.ir import blas
wheel = blas._library_path()
blas._library_path = lambda: None             # as where MKL is a system library, not the wheel
blas._SYSTEM_NAMES[sys.platform] = ("libmkl_rt_absent.so", wheel)
spawned = []
subprocess.Popen.__init__ = lambda *a, **k: spawned.append(a)   # no ldconfig or compiler run
assert blas.backend() == "mkl", blas.describe()
x = np.random.default_rng(0).standard_normal((300, 200))
assert np.allclose(blas.matmul(x, x.T), x @ x.T, rtol=1e-12, atol=1e-10)
assert not spawned, spawned
"""

ABSENT = r"""
import subprocess, sys
from ngrad.engine.ir import blas
blas._library_path = lambda: None
blas._SYSTEM_NAMES[sys.platform] = ("libmkl_rt_absent.so",)
spawned = []
subprocess.Popen.__init__ = lambda *a, **k: spawned.append(a)
assert blas.backend() == "numpy" and "MKL is not installed" in blas.describe()
assert not spawned, spawned
"""


@on_mkl
def test_a_system_mkl_is_found_by_its_name_without_running_anything():
    done = subprocess.run([sys.executable, "-c", SYSTEM], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_missing_mkl_costs_no_subprocess():
    # ctypes.util.find_library runs ldconfig and the C compiler: 20 ms of every first product
    done = subprocess.run([sys.executable, "-c", ABSENT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@on_openblas
def test_numpys_openblas_is_limited_and_given_back_its_count_unless_somebody_changed_it():
    set_count, count = blas._numpy_openblas()
    start = count()
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((400, 300)), rng.standard_normal((300, 200))
    want = np.einsum("ik,kj->ij", x, y)  # not BLAS
    try:
        set_count(3)
        before = blas.limit_numpy_threads(2)
        assert before == 3 and count() == 2
        np.testing.assert_allclose(x @ y, want, rtol=1e-12, atol=1e-10)
        assert blas.limit_numpy_threads(2) is None and count() == 2  # at most 2 already: nothing to give back
        blas.restore_numpy_threads(before, 2)
        assert count() == 3
        before = blas.limit_numpy_threads(1)
        set_count(2)  # the program's own setting meanwhile stands
        blas.restore_numpy_threads(before, 1)
        assert count() == 2
        np.testing.assert_allclose(x @ y, want, rtol=1e-12, atol=1e-10)
    finally:
        set_count(start)


@on_mkl
def test_one_thread_here_runs_that_threads_products_alone_and_no_others():
    x, y = np.ones((128, 784)), np.ones((784, 256))
    seen = {}

    def alone():
        blas.one_thread_here()
        np.testing.assert_array_equal(blas.matmul(x, y), np.full((128, 256), 784.0))
        seen["alone"] = blas._lib.MKL_Get_Max_Threads()

    t = threading.Thread(target=alone)
    t.start()
    t.join()
    blas.matmul(x, y)
    assert seen["alone"] == 1
    assert blas._lib.MKL_Get_Max_Threads() == blas._default_threads


TEAMS = """
import os, sys, threading, numpy as np, ngrad
x0 = np.random.default_rng(0).standard_normal((128, 784))
w0 = np.random.default_rng(1).standard_normal((784, 256)) * 0.01
for _ in range(30):  # products on MKL in the calls and in the compile worker's warm-up
    w = ngrad.tensor(w0, requires_grad=True)
    ((ngrad.tensor(x0) @ w).tanh() @ w.T).sum().backward()
assert ngrad.synchronize_compiles(60)
print(len(os.listdir("/proc/self/task")) - len(threading.enumerate()))
"""


@on_mkl
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_the_compile_worker_starts_no_team_of_mkls_threads(tmp_path):
    """The worker's warm-up runs MKL on its own thread (``one_thread_here``): libgomp gave it a
    team of threads of its own, and with more threads in teams than cores, the calls' team
    slept after every product (0.1 ms to wake up for each: gmm's calls 0.68 ms against 0.47).
    The threads that are not Python's (BLAS's) are as many as when the calls compile."""
    counts = {}
    for mode in ("wait", "thread", "process"):
        env = dict(os.environ, NGRAD_COMPILE=mode, NGRAD_CACHE_DIR=str(tmp_path), NGRAD_BLAS="mkl", NGRAD_JIT="auto")
        done = subprocess.run([sys.executable, "-c", TEAMS], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        counts[mode] = int(done.stdout.split()[-1])
    assert counts["thread"] == counts["process"] == counts["wait"], counts
