"""ngrad's own CPU compiler (engine/targets/llvm.py): each construct of the kernel language gives
what the same text gives run by Python itself (the reference for its semantics) and by Numba,
random expressions agree with Python, what it does not handle goes to Numba, and a program whose
kernels it all compiles never imports Numba."""

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngrad.engine.backend import vmath
from ngrad.engine.targets import kernel_types, llvm, objects

HEADER = "import math\n\nimport numpy as np\n\n\n"


def _python(text, args):
    """Run the kernel text as Python: the reference (NumPy scalars keep their dtypes)."""
    scope = {}
    exec(compile(text, "<kernel>", "exec"), scope)
    scope["kernel"](*args)


def _emitted(text, args):
    f = objects.make(*llvm.compile(text, objects.signature(args), "k_test"))
    assert f is not None
    f(*args)


def _numba(text, args):
    from ngrad.engine.targets import njit

    scope = {}
    exec(compile(text, "<kernel>", "exec"), scope)
    scope.update(njit.HELPERS)
    njit.numba.njit(**njit.FLAGS)(scope["kernel"])(*args)


def _agree(text, make_args, runners=(_emitted,), exact=True):
    text = HEADER + text
    want = make_args()
    _python(text, want)
    for run in runners:
        got = make_args()
        run(text, got)
        for w, g in zip(want, got):
            if isinstance(w, np.ndarray):
                if exact:
                    np.testing.assert_array_equal(g, w, err_msg=run.__name__)
                else:
                    np.testing.assert_allclose(g, w, rtol=1e-14, atol=0, err_msg=run.__name__)


CASES = {
    # names typed again on a second pass: ints that a later float assignment makes floats (as Numba
    # unifies them), and a name computed from one before that assignment
    "retyped": (
        "def kernel(a, o):\n"
        "    x = 0\n"
        "    y = 1\n"
        "    for i in range(a.shape[0]):\n"
        "        z = x * 3 + 1\n"
        "        o[i, 0] = z / 2\n"
        "        o[i, 1] = y * 2\n"
        "        y = a[i] + 0.5\n"
        "        x = x + y\n",
        lambda: (np.array([1.0, 2.0, 3.0]), np.zeros((3, 2))),
    ),
    # Python's floor division and modulo of integers, negatives included; zero divisors are NumPy's 0
    "int_division": (
        "def kernel(a, b, o):\n"
        "    for i in range(a.shape[0]):\n"
        "        o[i, 0] = a[i] // b[i] if b[i] != 0 else 0\n"
        "        o[i, 1] = a[i] % b[i] if b[i] != 0 else 0\n"
        "        o[i, 2] = (a[i] * 3 - b[i]) << 1\n"
        "        o[i, 3] = abs(a[i]) | 1\n"
        "        o[i, 4] = np.uint64(a[i] + 10) // 3 + np.uint64(a[i] + 10) % 4 * 100\n",  # Numba's: int64
        lambda: (np.array([7, -7, 7, -7, 0, 5]), np.array([2, 2, -2, -2, 3, 1]), np.zeros((6, 5), np.int64)),
    ),
    # Python's float modulo (the sign of the divisor), max/min with NaN (first argument kept),
    # comparisons with NaN (false, except !=)
    "float_semantics": (
        "def kernel(x, y, o):\n"
        "    for i in range(x.shape[0]):\n"
        "        o[i, 0] = x[i] % y[i]\n"
        "        o[i, 1] = max(x[i], y[i])\n"
        "        o[i, 2] = min(y[i], x[i], 0.5)\n"
        "        o[i, 3] = np.float64(x[i] < y[i]) + 2.0 * (x[i] != y[i]) + 4.0 * (x[i] >= y[i])\n"
        "        o[i, 4] = x[i] ** 2.0 + math.sqrt(abs(y[i]))\n"
        "        o[i, 5] = np.float64(np.int64(x[i] * 3.0))\n",
        lambda: (
            np.array([5.5, -5.5, 5.5, np.nan, 1.0, -0.0, 3.0]),
            np.array([2.0, 2.0, -2.0, 1.0, np.nan, 2.0, 3.0]),
            np.zeros((7, 6)),
        ),
    ),
    # a guarded read out of bounds must not run; and/or decide left to right; chained comparisons
    "guards": (
        "def kernel(n, a, o):\n"
        "    for i in range(-2, n + 2):\n"
        "        v = a[np.uint64(i)] if i >= 0 and i < n else np.float64(-1.0)\n"
        "        w = 1.0 if 0 <= i < n or i == -2 else 0.0\n"
        "        if not (i < 0 or i >= n):\n"
        "            o[i] = v + w\n"
        "        elif i == n:\n"
        "            o[0] += v * w\n"
        "        else:\n"
        "            o[n - 1] += 10.0 * v + w\n",
        lambda: (4, np.arange(4.0), np.zeros(4)),
    ),
    # loops: negative steps, literal tuples, while, break, continue, a negative index from the end
    "loops": (
        "def kernel(n, o):\n"
        "    s = 0\n"
        "    for i in range(n - 1, -1, -1):\n"
        "        if i == 2:\n"
        "            continue\n"
        "        s = s * 3 + i\n"
        "    for lo, hi in ((0, 2), (max(1, n - 2), n)):\n"
        "        for j in range(lo, hi):\n"
        "            o[j] += 1.5\n"
        "    k = 0\n"
        "    while True:\n"
        "        k += 1\n"
        "        if k * k > 50:\n"
        "            break\n"
        "    o[-1] = s + k\n"
        "    o[-2] += i\n",
        lambda: (6, np.zeros(6)),
    ),
    # a return from inside a loop: what was allocated is freed on the way out
    "early_return": (
        "def kernel(a, o):\n"
        "    t = np.empty((a.shape[0],), np.float64)\n"
        "    for i in range(a.shape[0]):\n"
        "        t[i] = a[i] * 2.0\n"
        "        if t[i] > 3.0:\n"
        "            o[1] = i\n"
        "            return\n"
        "        o[0] += t[i]\n"
        "    o[1] = -1.0\n",
        lambda: (np.linspace(0.0, 4.0, 9), np.zeros(2)),
    ),
    # other names for a scratch array and an argument (codegen's "stored above", "the same argument")
    "aliases": (
        "def kernel(a, o):\n"
        "    s = np.empty((a.shape[0], 2), np.float64)\n"
        "    for i in range(a.shape[0]):\n"
        "        s[i, 0] = a[i] * 2.0\n"
        "        s[i, 1] = a[i] + 1.0\n"
        "    b = s\n"
        "    c = a\n"
        "    for i in range(a.shape[0]):\n"
        "        o[i] = b[i, 0] * b[i, 1] + c[i]\n",
        lambda: (np.linspace(-1.0, 1.0, 5), np.zeros(5)),
    ),
    # arrays of several dtypes and ranks, a scratch array allocated in a loop, 0-d arrays,
    # bool arrays, int32, float32 promotion (float32 with int64 is float64)
    "arrays": (
        "def kernel(m, f, b, q, c, flag):\n"
        "    acc = np.float64(0.0)\n"
        "    for r in range(m.shape[0]):\n"
        "        t = np.empty((m.shape[1], 2), np.float64)\n"
        "        for j in range(m.shape[1]):\n"
        "            t[j, 0] = m[r, j] * f[j]\n"
        "            t[j, 1] = t[j, 0] if b[j] else -t[j, 0]\n"
        "        for j in range(len(f)):\n"
        "            acc += t[j, 1] + q[j]\n"
        "            m[r, j] = t[j, 1]\n"
        "    c[()] = acc\n"
        "    flag[0] = acc > 0\n"
        "    flag[1] = b[0] and not b[1]\n",
        lambda: (
            np.arange(12.0).reshape(3, 4),
            np.array([0.5, 1.5, -2.5, 3.0], np.float32),
            np.array([True, False, True, True]),
            np.array([1, -2, 3, 4], np.int32),
            np.zeros(()),
            np.zeros(2, bool),
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_construct_runs_as_python_runs_it(name):
    text, make = CASES[name]
    _agree(text, make)


@pytest.mark.numba
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_construct_runs_as_numba_runs_it(name):
    text, make = CASES[name]
    _agree(text, make, runners=(_numba,))


def test_math_and_the_vectorisable_helpers_match_numba_and_python():
    from ngrad.engine.backend import vmath

    body = "".join(f"        o[{k}, i] = {h}(x[i])\n" for k, h in enumerate(sorted(vmath.FUNCTIONS)))
    libm = ["math.tan", "math.atan", "math.sinh", "np.floor", "np.rint", "np.ceil"]
    body += "".join(f"        o[{len(vmath.FUNCTIONS) + k}, i] = {f}(x[i])\n" for k, f in enumerate(libm))
    text = HEADER + "def kernel(x, o):\n    _wide_vectors()\n    for i in range(x.shape[0]):\n" + body
    x = np.linspace(-3.0, 3.0, 101)
    got = np.zeros((len(vmath.FUNCTIONS) + len(libm), x.size))
    _emitted(text, (x, got))
    backend = vmath.NumpyBackend()
    for k, h in enumerate(sorted(vmath.FUNCTIONS)):
        want = np.asarray(vmath.FUNCTIONS[h](backend, x))
        np.testing.assert_allclose(got[k], want, rtol=1e-15, atol=1e-300, err_msg=h)
    for k, f in enumerate(libm):
        np.testing.assert_allclose(got[len(vmath.FUNCTIONS) + k], eval(f, {"math": np, "np": np})(x), rtol=1e-15)


def test_kernels_with_vmath_go_through_the_vmath_pipeline_and_compute_what_the_full_one_does():
    """A kernel saying ``_wide_vectors()`` is made with LLVM's "vmath" pipeline (O1 with the loop
    vectoriser, no SLP vectoriser): vectorised, and bit for bit what the full pipeline makes."""
    body = "    for i in range(x.shape[0]):\n        o[i] = _vexp(x[i]) * x[i] - _vlog(x[i] + 4.0)\n"
    text = HEADER + "def kernel(x, o):\n    _wide_vectors()\n" + body
    assert llvm.level_of(text) == "vmath"
    assert llvm.level_of(HEADER + "def kernel(x, o):\n" + body) == "full"
    x = np.linspace(-3.0, 3.0, 1001)
    lowered = llvm.lower(text, objects.signature((x, np.zeros_like(x))), "k_vmath")
    assert " = load <" in llvm.assemble(lowered, form="llvm", level="vmath")
    outs = []
    for level in ("vmath", "full"):
        outs.append(np.zeros_like(x))
        objects.make(*llvm.assemble(lowered, level=level))(x, outs[-1])
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], np.exp(x) * x - np.log(x + 4.0), rtol=1e-14)


# random expressions over int64 and float64 variables, run by Python and by the compiler
_names = st.sampled_from(["x", "y", "k", "m", "1.5", "2", "np.float64(-0.25)", "np.int64(3)"])


def _expr(depth):
    if depth == 0:
        return _names
    sub = _expr(depth - 1)
    # a comparison's result is counted as a number: arithmetic on two of them is Numba's (bools
    # promoted to int64: True + True is 2) in the kernel language, NumPy's (True, or an error
    # for -) where Python runs the text on NumPy scalars
    binary = st.tuples(sub, st.sampled_from(["+", "-", "*", "/", "<", ">=", "!="]), sub).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})" if t[1] in "+-*/" else f"np.float64({t[0]} {t[1]} {t[2]})"
    )
    choice = st.tuples(sub, sub, sub).map(lambda t: f"({t[0]} if {t[1]} > {t[2]} else {t[2]})")
    call = st.tuples(st.sampled_from(["max", "min", "abs", "np.float64"]), sub, sub).map(
        lambda t: f"{t[0]}({t[1]})" if t[0] in ("abs", "np.float64") else f"{t[0]}({t[1]}, {t[2]})"
    )
    return st.one_of(sub, binary, choice, call)


@settings(max_examples=60, deadline=None)
@given(_expr(3), st.lists(st.floats(-4, 4, allow_nan=False), min_size=4, max_size=4), st.integers(1, 5))
def test_random_expressions_agree_with_python(expr, floats, k):
    text = (
        HEADER + "def kernel(xs, ks, o):\n    for i in range(xs.shape[0]):\n"
        "        x, y, k, m = xs[i], xs[i] * 0.5 - 1.0, ks[i], ks[i] - 3\n"
        f"        o[i] = {expr}\n"
    )
    xs, ks = np.array(floats), np.array([k, -k, 0, 2 * k])
    want, got = np.zeros(4), np.zeros(4)
    try:
        with np.errstate(all="ignore"):
            _python(text, (xs, ks, want))
    except ZeroDivisionError:  # Python raises where NumPy's error model gives inf or nan
        return
    _emitted(text, (xs, ks, got))
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13, err_msg=expr)


# integer expressions: Python's floor division and modulo (NumPy's 0 for a zero divisor), shifts,
# bitwise operations, chained comparisons, and/or/not, casts from floats (truncation)
_ints = st.sampled_from(["k", "m", "j", "3", "-2", "np.int64(7)", "np.int64(x)", "np.int64(y * 3.0)"])


def _int_expr(depth):
    if depth == 0:
        return _ints
    sub = _int_expr(depth - 1)
    ops = ["+", "-", "*", "//", "%", "&", "|", "^"]
    binary = st.tuples(sub, st.sampled_from(ops), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
    chain = st.tuples(sub, sub, sub).map(
        lambda t: f"(({t[0]}) if {t[1]} < {t[2]} <= {t[0]} or not {t[1]} else ({t[2]}))"
    )
    call = st.tuples(st.sampled_from(["max", "min", "abs"]), sub, sub, sub).map(
        lambda t: f"abs({t[1]})" if t[0] == "abs" else f"{t[0]}({t[1]}, {t[2]}, {t[3]})"
    )
    return st.one_of(sub, binary, chain, call)


@settings(max_examples=60, deadline=None)
@given(_int_expr(3), st.lists(st.integers(-9, 9), min_size=4, max_size=4), st.floats(-4, 4, allow_nan=False))
def test_random_integer_expressions_agree_with_python(expr, ints, f):
    text = (
        HEADER + "def kernel(xs, ks, o):\n    for i in range(ks.shape[0]):\n"
        "        x, y, k, m, j = xs[i], xs[i] * 0.5 - 1.0, ks[i], ks[i] - 3, ks[(i + 1) % 4]\n"
        f"        o[i] = {expr}\n"
    )
    xs, ks = np.full(4, f) + np.arange(4), np.array(ints)
    want, got = np.zeros(4, np.int64), np.zeros(4, np.int64)
    try:
        with np.errstate(all="ignore"):
            _python(text, (xs, ks, want))
    except (ZeroDivisionError, OverflowError):  # literals only: Python raises where NumPy gives 0
        return
    _emitted(text, (xs, ks, got))
    np.testing.assert_array_equal(got, want, err_msg=expr)


@pytest.mark.parametrize(
    "text, args",
    [
        ("def kernel(z, o):\n    o[0] = z[0].real\n", (np.zeros(1, complex), np.zeros(1))),  # complex numbers
        ("def kernel(a, o):\n    o[0] = a[0]\n", (np.zeros((3, 3))[:, 0], np.zeros(1))),  # a strided view
        ("def kernel(a):\n    return a[0]\n", (np.zeros(1),)),  # a value returned
        ("def kernel(a):\n    a[0] = np.sum(a)\n", (np.zeros(1),)),  # a NumPy function
    ],
)
def test_what_it_does_not_compile_is_refused_and_numba_runs_it(text, args):
    with pytest.raises(kernel_types.Unsupported):
        llvm.compile(HEADER + text, objects.signature(args), "k_refused")


@pytest.mark.numba
def test_a_refused_kernel_still_runs_through_numba(tmp_path, monkeypatch):
    from ngrad.engine.targets import cpu

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "_memory", {})

    k = cpu.kernel(HEADER + "def kernel(z, o):\n    for i in range(z.shape[0]):\n        o[i] = abs(z[i])\n")
    z, o = np.array([3 + 4j, -1j]), np.zeros(2)
    k(z, o)
    np.testing.assert_array_equal(o, [5.0, 1.0])
    assert k._fn is not None  # Numba's dispatcher ran it


@pytest.mark.parametrize("debug", ["0", "3"])
def test_a_program_of_emitted_kernels_never_imports_numba(tmp_path, debug):
    # NGRAD_DEBUG=3 says how each kernel was made: that must not import Numba either (it did,
    # for its Numba phases, and put 0.4 s of import into the timelines it prints)
    code = (
        "import sys, numpy as np, ngrad\n"
        "x = ngrad.tensor(np.linspace(0.1, 2.0, 1000), requires_grad=True)\n"
        "y = (x.sin() * x.exp() / (1 + x * x)).sum()\n"
        "y.backward()\n"
        "want = np.cos(x.detach().numpy()) * np.exp(x.detach().numpy())\n"
        "print('numba' in sys.modules, ngrad.engine.targets.kernels_made())\n"
    )
    env = dict(os.environ, NGRAD_CACHE_DIR=str(tmp_path), NGRAD_JIT="always", NGRAD_CPU_COMPILER="llvm")
    env["NGRAD_DEBUG"] = debug
    for how in ("compiled by ngrad's emitter", "loaded from the disk cache as machine code"):
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        out = run.stdout.split()
        assert out[0] == "False" and int(out[1]) >= 1, out
        assert list((tmp_path).rglob("objects/*.o"))  # kept for the next process
        assert (how in run.stderr) == (debug == "3"), run.stderr[-2000:]


def test_kernels_compile_on_several_threads_at_once():
    import concurrent.futures

    def one(k):
        body = f"    for i in range(a.shape[0]):\n        o[i] = a[i] * {k}.0 + _vexp(a[i])\n"
        text = HEADER + "def kernel(a, o):\n" + body
        a, o = np.linspace(0.0, 1.0, 50), np.zeros(50)
        f = objects.make(*llvm.compile(text, objects.signature((a, o)), f"k_thread{k}"))
        f(a, o)
        return np.allclose(o, a * k + np.exp(a), rtol=1e-14)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(one, range(24)))


def test_names_become_values_only_where_their_binding_dominates_every_use():
    """A name bound once whose uses all follow the binding becomes an LLVM value; one read in a
    loop's next iteration, after the loop or after the ``if`` that binds it stays in memory, and
    both give what Python gives (Numba refuses such text: codegen never writes it)."""
    import ast

    text = (
        "def kernel(a, o, n):\n"
        "    for i in range(n):\n"
        "        if i > 0:\n"
        "            o[i] = t + last\n"
        "        t = a[i]\n"
        "        last = t + 1.0\n"
        "        u = t - 0.25\n"
        "        o[i] += u\n"
        "    o[0] = t + i\n"
        "    if a[1] > 0.0:\n"
        "        v = a[2]\n"
        "    if a[1] > 0.0:\n"
        "        o[1] = v\n"
    )

    def make():
        return np.linspace(-1.0, 1.0, 6) + 0.5, np.zeros(6), 6

    _agree(text, make)
    tree = ast.parse(HEADER + text)
    fn = llvm._Function(
        next(s for s in tree.body if isinstance(s, ast.FunctionDef)), objects.signature(make()), "k", None
    )
    fn.infer()
    assert fn.ssa == {"n", "u"}


def test_parallel_compiles_outside_llvmlites_lock_make_the_same_machine_code():
    """``parallel=True`` (``cpu.compile_ahead``) runs LLVM's optimisation and code generation of
    several modules at once, in turns with compiles under llvmlite's lock running meanwhile:
    each object file is byte for byte the one a compile alone makes, and runs."""
    import concurrent.futures

    texts = {name: HEADER + text for name, (text, _) in CASES.items()}
    sigs = {name: objects.signature(make()) for name, (_, make) in CASES.items()}
    alone = {name: llvm.compile(texts[name], sigs[name], f"k_par_{name}") for name in CASES}

    def together(job):
        name, parallel = job
        return name, llvm.compile(texts[name], sigs[name], f"k_par_{name}", parallel=parallel)

    jobs = [(name, k % 3 != 0) for k, name in enumerate(sorted(CASES) * 3)]  # a third under the lock
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            made = list(pool.map(together, jobs))
            assert all(code == alone[name] for name, code in made)
    made = dict(made)
    for name, (_, make) in CASES.items():
        want, got = make(), make()
        _python(texts[name], want)
        objects.make(*made[name])(*got)
        for g, w in zip(got, want):
            if isinstance(w, np.ndarray):
                np.testing.assert_array_equal(g, w)


def test_compile_ahead_lowers_on_its_thread_one_kernel_ahead_of_llvms_threads(tmp_path, monkeypatch):
    """``cpu.compile_ahead``: the calling thread types and lowers each kernel (Python, which the
    program's calls share the interpreter's lock with), never more than one ahead of the LLVM
    threads, and LLVM's part runs on those threads; every kernel is then on disk."""
    import threading

    from ngrad.engine.store import usable_dir
    from ngrad.engine.targets import cpu

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    sig = objects.signature((np.zeros(4),))
    kernels = [
        cpu.kernel(f"def kernel(a):\n    for i in range(4):\n        a[i] = a[i] * {k}.5 + {k}.0\n") for k in range(6)
    ]
    caller, seen, lock = threading.get_ident(), [], threading.Lock()
    state = {"lowered": 0, "assembled": 0}
    real_lower, real_assemble = llvm.lower, llvm.assemble

    def lower(*args, **kw):
        with lock:
            seen.append(("lower", threading.get_ident(), state["lowered"] - state["assembled"]))
        out = real_lower(*args, **kw)
        with lock:
            state["lowered"] += 1
        return out

    def assemble(*args, **kw):
        seen.append(("assemble", threading.get_ident(), None))
        threading.Event().wait(0.02)  # LLVM's part takes longer than lowering
        out = real_assemble(*args, **kw)
        with lock:
            state["assembled"] += 1
        return out

    monkeypatch.setattr(llvm, "lower", lower)
    monkeypatch.setattr(llvm, "assemble", assemble)
    assert cpu.compile_ahead([(k, sig) for k in kernels], threads=2) == 6
    assert [who for what, who, _ in seen if what == "lower"] == [caller] * 6
    assert caller not in {who for what, who, _ in seen if what == "assemble"}
    assert max(ahead for what, _, ahead in seen if what == "lower") <= 2  # the threads', and one more
    folder = usable_dir()
    assert folder is not None and all(objects.saved(folder, k.key, sig) for k in kernels)


def test_a_parallel_compile_does_not_wait_for_llvm_work_outside_the_lock_and_others_do():
    """While one thread's LLVM work runs outside llvmlite's lock (``llvm._Turns``), a parallel
    compile (``cpu.compile_ahead``'s threads) types, emits, parses, optimises and generates its
    own kernel: none of its calls wait for that work (its typing read the process's triple
    through llvmlite, and its parsing and set-up took the lock, each waiting for all the LLVM
    work outside to end: two threads compiled ba's ten kernels no faster than one). A compile
    under the lock still waits for it, and a thread leaving llvmlite's lock that it took before
    the turns were registered is no error."""
    import threading

    text, make = CASES[sorted(CASES)[0]]
    text = HEADER + text
    sig = objects.signature(make())
    alone = llvm.compile(text, sig, "k_turns")  # the process's first compile sets LLVM up
    inside, release = threading.Event(), threading.Event()

    def llvm_work():  # stands for LLVM's optimisation, run as ``compile(parallel=True)`` runs it
        inside.set()
        release.wait(30)

    def compile_in_thread(parallel):
        made = []
        t = threading.Thread(target=lambda: made.append(llvm.compile(text, sig, "k_turns", parallel=parallel)))
        t.start()
        return t, made

    busy = threading.Thread(target=llvm._unlocked, args=(llvm_work,))
    busy.start()
    try:
        assert inside.wait(30)
        parallel, made = compile_in_thread(True)
        parallel.join(30)
        assert made == [alone] and busy.is_alive()  # done while the LLVM work outside still ran
        locked, made_locked = compile_in_thread(False)
        locked.join(0.5)
        assert locked.is_alive() and not made_locked  # waits for it
    finally:
        release.set()
        busy.join(30)
    locked.join(30)
    assert made_locked == [alone]
    turns = llvm._turns()
    left = threading.Thread(target=turns._leave)
    left.start()
    left.join(30)
    assert turns.inside == 0 and turns.outside == 0


@pytest.mark.numba
def test_a_compiler_failure_warns_and_numba_compiles_the_kernel(tmp_path, monkeypatch):
    from ngrad.engine.targets import cpu

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NGRAD_CPU_COMPILER", "llvm")
    monkeypatch.setattr(cpu, "_memory", {})

    def broken(*args, **kwargs):
        raise RuntimeError("LLVM IR parsing error")

    monkeypatch.setattr(llvm, "compile", broken)
    k = cpu.kernel(HEADER + "def kernel(a):\n    a[0] += 2.0\n")
    a = np.zeros(1)
    with pytest.warns(RuntimeWarning, match="Numba compiles it"):
        k(a)
    assert a[0] == 2.0 and k._fn is not None


def test_a_scratch_array_that_cannot_be_allocated_raises_memory_error():
    # malloc fails: what was allocated is freed, the GIL taken back, and Python sees MemoryError
    text = HEADER + (
        "def kernel(n, o):\n"
        "    t = np.empty((4,), np.float64)\n"
        "    t[0] = 1.0\n"
        "    s = np.empty((n, n), np.float64)\n"
        "    for i in range(min(n, 3)):\n"
        "        s[i, i] = t[0] + i\n"
        "    acc = 0.0\n"
        "    for i in range(min(n, 3)):\n"
        "        acc += s[i, i] * o[1]\n"
        "    o[0] = acc\n"
    )
    o = np.array([0.0, 1.0])
    f = objects.make(*llvm.compile(text, objects.signature((2, o)), "k_nomem"))
    f(2, o)
    assert o[0] == 3.0
    for n in (2**31, 2**40, -5):  # 2**62 elements, an overflowing size, a negative one
        with pytest.raises(MemoryError):
            f(n, o)
    f(3, o)  # and it runs again afterwards
    assert o[0] == 6.0


def test_short_loops_are_vectorised_without_interleaving_and_give_the_same_results():
    """``_short_loops()`` (the bytecode loop's): every loop of the kernel carries LLVM's
    interleave count 1, and the kernel goes through the "loops" pipeline (O1, the loop
    vectoriser alone), so its one vectorised body reads each operand once per iteration instead
    of in several interleaved and unrolled copies; results are Python's and Numba's, which
    ignores the hint."""
    body = "    for i in range(x.shape[0]):\n        o[i] = x[i] * y[i] + 1.5\n"
    plain = HEADER + "def kernel(x, y, o):\n" + body
    short = HEADER + "def kernel(x, y, o):\n    _short_loops()\n" + body
    x, y = np.linspace(-2.0, 2.0, 103), np.linspace(1.0, 3.0, 103)
    sig = objects.signature((x, y, np.zeros(103)))
    lowered = llvm.lower(short, sig, "k_short")[0]
    assert '!"llvm.loop.interleave.count", i32 1' in lowered
    assert "llvm.loop.interleave.count" not in llvm.lower(plain, sig, "k_plain")[0]

    def vector_loads(text):  # loads of whole vectors in the optimised IR
        return sum(1 for line in text.splitlines() if " = load <" in line)

    assert vector_loads(llvm.compile(short, sig, "k_short", form="llvm")) == 2  # x[i:i+w], y[i:i+w]
    assert vector_loads(llvm.compile(plain, sig, "k_plain", form="llvm")) > 2
    # a loop no vectoriser takes (a recurrence): the full pipeline unrolls it, "loops" does not
    recur = "def kernel(x, y, o):\n    _short_loops()\n    for i in range(1, x.shape[0]):\n"
    recur = HEADER + recur + "        o[i] = o[i - 1] * x[i] + y[i]\n"
    lowered = llvm.lower(recur, sig, "k_recur")

    def scalar_loads(level):
        return sum(" = load double" in ln for ln in llvm.assemble(lowered, form="llvm", level=level).splitlines())

    assert scalar_loads("loops") <= 3 < 8 <= scalar_loads("full")  # x[i], y[i] (and o[i - 1]) once
    want, unhinted = np.zeros(103), np.zeros(103)
    _python(plain, (x, y, want))
    _emitted(plain, (x, y, unhinted))
    for run in (_emitted, _numba):
        got = np.zeros(103)
        run(short, (x, y, got))
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-15)  # a fused multiply-add rounds once
    got = np.zeros(103)
    _emitted(short, (x, y, got))
    np.testing.assert_array_equal(got, unhinted)


def test_quick_machine_code_is_one_scalar_copy_of_each_loop_body_and_computes_the_same():
    """``assemble(level="quick")`` (``cpu.quick_first``'s): LLVM's O1 pipeline without
    vectorisers, unrolling or interleaving, so one scalar copy of each loop body where the full
    pipeline makes interleaved vector ones; both compute what Python does."""
    text = HEADER + "def kernel(x, y, o):\n    for i in range(x.shape[0]):\n        o[i] = x[i] * y[i] + 1.5\n"
    x, y = np.linspace(-2.0, 2.0, 103), np.linspace(1.0, 3.0, 103)
    sig = objects.signature((x, y, np.zeros(103)))
    lowered = llvm.lower(text, sig, "k_quick")

    def loads(quick):  # loads of vectors and of single doubles in the optimised IR
        lines = llvm.assemble(lowered, form="llvm", level="quick" if quick else "full").splitlines()
        return sum(" = load <" in ln for ln in lines), sum(" = load double" in ln for ln in lines)

    assert loads(True) == (0, 2)  # x[i] and y[i], once each
    assert loads(False)[0] > 2  # interleaved copies of the vector body
    want = np.zeros(103)
    _python(text, (x, y, want))
    for quick in (True, False):
        got = np.zeros(103)
        objects.make(*llvm.assemble(lowered, level="quick" if quick else "full"))(x, y, got)
        np.testing.assert_array_equal(got, want)  # no multiply-add fused: IEEE, as Python


def test_a_loop_saying_independent_is_vectorised_without_overlap_checks():
    """``_independent()`` first in a loop's body (the bytecode loop's flat row loops): its array
    accesses form an access group the loop declares parallel, so LLVM vectorises it with no
    runtime check that the arrays overlap; results are Python's, and Numba's, which ignores it."""

    def text(hint):
        body = "    for i in range(x.shape[0]):\n" + ("        _independent()\n" if hint else "")
        return HEADER + "def kernel(x, y, o):\n" + body + "        o[i] = x[i] * y[i] + 1.5\n"

    x, y = np.linspace(-2.0, 2.0, 103), np.linspace(1.0, 3.0, 103)
    sig = objects.signature((x, y, np.zeros(103)))
    plain, hinted = (llvm.compile(text(h), sig, f"k_indep{h}", form="llvm") for h in (False, True))
    assert "vector.memcheck" in plain and "llvm.access.group" not in plain
    assert "vector.memcheck" not in hinted and "llvm.loop.parallel_accesses" in hinted and " = load <" in hinted
    want = np.zeros(103)
    _python(text(False), (x, y, want))
    for run in (_emitted, _numba):
        got = np.zeros(103)
        run(text(True), (x, y, got))
        np.testing.assert_array_equal(got, want)


def _machine_code(text):
    """``text``'s LLVM IR optimised for this CPU, as assembly without the names LLVM keeps."""
    import re

    import llvmlite.binding as ll

    objects.setup()
    tm = objects.machine()
    mod = ll.parse_assembly(text)
    pb = ll.create_pass_builder(tm, ll.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    asm = tm.emit_assembly(mod)
    return [line for line in asm.splitlines() if not re.match(r"\s*(\.file|\.ident|#)", line)]


@pytest.mark.parametrize("name", sorted(vmath.FUNCTIONS))
def test_ir_text_writes_the_code_llvmlites_builder_builds(name):
    """``ir_text`` stands in for llvmlite's IR builder in ngrad's compiler: vmath's helper
    ``name`` built through each, on the same ``IRMath``, optimises to the same machine code (its
    polynomials, selects, bit casts, shifts, comparisons and intrinsic calls)."""
    from llvmlite import ir as llvmlite_ir

    from ngrad.engine.targets import ir_text
    from ngrad.engine.targets.ir_values import IRMath

    texts = []
    for layer in (llvmlite_ir, ir_text):
        f64 = layer.DoubleType()
        if layer is ir_text:
            module = ir_text.Module("m", objects.host()[0])
            fn = module.function("f", f64, [f64])
            b = ir_text.IRBuilder(fn, fn.append_basic_block("entry"))
        else:
            module = llvmlite_ir.Module("m")
            module.triple = objects.host()[0]
            fn = llvmlite_ir.Function(module, llvmlite_ir.FunctionType(f64, [f64]), name="f")
            b = llvmlite_ir.IRBuilder(fn.append_basic_block("entry"))
        m = IRMath(b, layer)
        b.ret(vmath.FUNCTIONS[name](m, m.value(fn.args[0])).v)
        texts.append(str(module))
    assert texts[0] != texts[1]  # two writings of the IR...
    assert _machine_code(texts[0]) == _machine_code(texts[1])  # ...and one machine code
