"""ngrad's vectorisable math: accuracy in ULP over wide ranges and special values, and that the
loops around it really compile to packed SIMD code without libm calls."""
import numpy as np
import pytest

from ngrad.engine import runtime
from ngrad.engine.compile import HELPERS

from .oracles import prim_tape

VEXP = HELPERS["_vexp"]


def ulp_error(got, ref):
    ref = np.asarray(ref)
    ok = np.isfinite(ref) & (ref != 0)
    return np.max(np.abs(got[ok] - ref[ok]) / np.spacing(np.abs(ref[ok]).astype(ref.dtype)))


def _compiled_exp(x, monkeypatch, tmp_path):
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    tape, _ = prim_tape("exp", [x], {})
    comp = runtime._Compiled(tape)
    comp.compile()
    return runtime._execute(comp, tape, [x])[0], comp


def test_exp_float64_ulp_over_the_whole_range(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-745, 710, 200_000), rng.uniform(-1, 1, 100_000),
                        rng.uniform(-1e-8, 1e-8, 10_000), np.linspace(-745.13, -708, 10_000)])
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
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-310, -1e-310, 710.0, 709.78, -745.2, -745.0,
                  -740.0, -708.5, 88.8, -103.9, 89.0], dtype=dtype)
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
    asm = "\n".join(k.fn.inspect_asm().values())
    assert "ymm" in asm or "zmm" in asm or "pd\t%xmm" in asm  # packed double-precision instructions
    assert "@exp" not in asm and "callq\texp" not in asm


def test_helper_direct_calls():
    assert VEXP(0.0) == 1.0 and VEXP(1.0) == pytest.approx(np.e, rel=1e-15)
    assert VEXP(-np.inf) == 0.0 and VEXP(np.inf) == np.inf and np.isnan(VEXP(np.nan))
