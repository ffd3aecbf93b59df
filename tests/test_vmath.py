"""ngrad's vectorisable math: accuracy in ULP over wide ranges and special values, and that the
loops around it really compile to packed SIMD code without libm calls."""

import math

import numpy as np
import pytest

from ngrad.engine.backend import vmath
from ngrad.engine.ir.tape import Builder
from ngrad.engine.runtime.executor import execute
from ngrad.engine.runtime.plan import CompiledPlan


def ulp_error(got, ref):
    ref = np.asarray(ref)
    ok = np.isfinite(ref) & (ref != 0)
    return np.max(np.abs(got[ok] - ref[ok]) / np.spacing(np.abs(ref[ok]).astype(ref.dtype)))


def _compiled_exp(x, monkeypatch, tmp_path, prim="exp"):
    # prim(x) then -(-y): two more exact operations, so fusion makes a kernel (a lone operation
    # runs as NumPy glue) and the kernel's vectorised math is what the test measures
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    b = Builder()
    v = b.input(x.shape, "f32" if x.dtype == np.float32 else "f64")
    tape = b.finish([b.emit("neg", [b.emit("neg", [b.emit(prim, [v], {})], {})], {})]).verify()
    comp = CompiledPlan(tape)
    assert any(s is not None for s in comp.sources)
    comp.compile()
    return execute(comp, [x])[0], comp


def test_exp_float64_ulp_over_the_whole_range(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            rng.uniform(-745, 710, 200_000),
            rng.uniform(-1, 1, 100_000),
            rng.uniform(-1e-8, 1e-8, 10_000),
            np.linspace(-745.13, -708, 10_000),
        ]
    )
    got, _ = _compiled_exp(x, monkeypatch, tmp_path)
    with np.errstate(over="ignore"):
        ref = np.exp(x)
    assert ulp_error(got, ref) <= 3


def test_exp_float32_within_one_ulp(monkeypatch, tmp_path):
    x = np.random.default_rng(1).uniform(-104, 89, 200_000).astype(np.float32)
    got, _ = _compiled_exp(x, monkeypatch, tmp_path)
    assert got.dtype == np.float32
    with np.errstate(over="ignore"):
        ref = np.exp(x.astype(np.float64)).astype(np.float32)
    assert ulp_error(got, ref) <= 1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_exp_special_values(dtype, monkeypatch, tmp_path):
    x = np.array(
        [
            np.nan,
            np.inf,
            -np.inf,
            0.0,
            -0.0,
            1e-310,
            -1e-310,
            710.0,
            709.78,
            -745.2,
            -745.0,
            -740.0,
            -708.5,
            88.8,
            -103.9,
            89.0,
        ],
        dtype=dtype,
    )
    got, _ = _compiled_exp(x, monkeypatch, tmp_path)
    with np.errstate(all="ignore"):
        ref = np.exp(x.astype(np.float64)).astype(dtype)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    finite = np.isfinite(ref)
    assert np.array_equal(got[~finite], ref[~finite], equal_nan=True)
    assert np.all((got[finite] == ref[finite]) | (np.abs(got[finite] - ref[finite]) <= 3 * np.spacing(ref[finite])))


def test_exp_loop_vectorises_without_libm(monkeypatch, tmp_path):
    x = np.linspace(-5, 5, 64)
    _, comp = _compiled_exp(x, monkeypatch, tmp_path)
    (k,) = [k for k in comp.kernels if k is not None]
    asm = "\n".join(k.inspect("asm").values())
    assert "ymm" in asm or "zmm" in asm or "pd\t%xmm" in asm  # packed double-precision instructions
    assert "@exp" not in asm and "callq\texp" not in asm


def test_only_a_kernel_running_vmath_asks_for_512_bit_vectors(monkeypatch, tmp_path):
    # LLVM prefers 256-bit vectors on AVX-512 server cores: right for a streaming loop, half speed
    # for vmath's polynomials, so the request goes into exactly the kernels that call them
    _, comp = _compiled_exp(np.linspace(-5, 5, 64), monkeypatch, tmp_path)
    (k,) = [k for k in comp.kernels if k is not None]
    assert "_wide_vectors()" in k.text
    assert '"prefer-vector-width"="512"' in "\n".join(k.inspect("llvm").values())
    _, comp = _compiled_exp(np.linspace(-5, 5, 64), monkeypatch, tmp_path, "abs")
    (k,) = [k for k in comp.kernels if k is not None]
    assert "_wide_vectors()" not in k.text
    assert "prefer-vector-width" not in "\n".join(k.inspect("llvm").values())


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sin", "erf"])
def test_both_backends_run_one_algorithm(name, monkeypatch, tmp_path):
    # the NumPy backend evaluates vmath's text on arrays; compiled, LLVM may fuse a multiply-add
    # (one rounding less), so the two agree to a few ULP, not bitwise
    x = np.random.default_rng(2).uniform(0.01 if name == "log" else -20, 20, 10_000)
    got, _ = _compiled_exp(x, monkeypatch, tmp_path, name)
    ref = vmath.FUNCTIONS["_v" + name](vmath.NumpyBackend, x)
    assert ulp_error(got, ref) <= 4


R = np.random.default_rng(5)
# (primitive, NumPy reference, float64 inputs, ULP bound for float64)
FUNCS = {
    "log": (
        np.log,
        np.concatenate(
            [
                np.exp(R.uniform(-700, 700, 100_000)),
                R.uniform(0.5, 2, 100_000),
                np.array([5e-324, 1e-310, 2.2250738585072014e-308]),
            ]
        ),
        5,
    ),
    "tanh": (np.tanh, np.concatenate([R.uniform(-25, 25, 100_000), R.uniform(-1e-6, 1e-6, 10_000)]), 5),
    "expm1": (np.expm1, np.concatenate([R.uniform(-3, 3, 100_000), R.uniform(-1e-8, 1e-8, 10_000)]), 6),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), R.uniform(-700, 700, 100_000), 4),
    "log1p": (
        np.log1p,
        np.concatenate(
            [R.uniform(-1, 3, 100_000), R.uniform(-1e-8, 1e-8, 10_000), np.exp(R.uniform(-700, 700, 100_000))]
        ),
        4,
    ),
    "softplus": (
        lambda x: np.logaddexp(0.0, x),
        np.concatenate([R.uniform(-50, 50, 100_000), R.uniform(-700, 700, 10_000)]),
        5,
    ),
    "sin": (
        np.sin,
        np.concatenate([R.uniform(-10, 10, 100_000), R.uniform(-1e6, 1e6, 100_000), R.uniform(-1e-5, 1e-5, 10_000)]),
        2,
    ),
    "erf": (
        np.vectorize(math.erf),
        np.concatenate([R.uniform(-7, 7, 100_000), R.uniform(-1e-8, 1e-8, 10_000), R.uniform(0.8, 0.9, 10_000)]),
        2,
    ),
    "cos": (np.cos, np.concatenate([R.uniform(-10, 10, 100_000), R.uniform(-1e6, 1e6, 100_000)]), 2),
}


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_float64_ulp(name, monkeypatch, tmp_path):
    ref_fn, x, bound = FUNCS[name]
    got, comp = _compiled_exp(x, monkeypatch, tmp_path, name)
    with np.errstate(all="ignore"):
        assert ulp_error(got, ref_fn(x)) <= bound
    asm = "\n".join(a for k in comp.kernels if k is not None for a in k.inspect("asm").values())
    assert "ymm" in asm or "zmm" in asm or "pd\t%xmm" in asm


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_float32_within_one_ulp(name, monkeypatch, tmp_path):
    ref_fn, x, _ = FUNCS[name]
    x32 = x[np.abs(x) < 80].astype(np.float32) if name != "log" else x[(x > 1e-37) & (x < 1e37)].astype(np.float32)
    got, _ = _compiled_exp(x32, monkeypatch, tmp_path, name)
    assert got.dtype == np.float32
    with np.errstate(all="ignore"):
        assert ulp_error(got, ref_fn(x32.astype(np.float64)).astype(np.float32)) <= 1


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_special_values(name, monkeypatch, tmp_path):
    ref_fn, _, _ = FUNCS[name]
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-310, -1e-310, 5e-324, 1.0, -1.0, 710.0, -746.0])
    got, _ = _compiled_exp(x, monkeypatch, tmp_path, name)
    with np.errstate(all="ignore"):
        ref = ref_fn(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)])
    np.testing.assert_allclose(got[finite], ref[finite], rtol=2e-15, atol=0)


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_huge_trig_arguments_fall_back_to_the_exact_interpreter(name, monkeypatch, tmp_path):
    x = np.array([0.5, 1e7, -3e300, 2.0, 1e6 + 1])
    got, comp = _compiled_exp(x, monkeypatch, tmp_path, name)
    assert any(s is not None and any(p.guard for p in s.parts) for s in comp.sources)
    np.testing.assert_array_equal(got, getattr(np, name)(x))


def test_sin_keeps_the_sign_of_zero(monkeypatch, tmp_path):
    got, _ = _compiled_exp(np.array([-0.0, 0.0]), monkeypatch, tmp_path, "sin")
    assert np.signbit(got[0]) and not np.signbit(got[1])
