"""Vectorisable math for compiled kernels: transcendentals LLVM can auto-vectorise.

Numba calls libm once per element for ``math.exp``, which no loop vectoriser can widen; these
versions use only arithmetic, comparisons, selects and integer bit operations, so a fused loop
around them compiles to packed SIMD code (AVX2 on these machines: no AVX-512 is needed, and no
float<->int64 conversion, which AVX2 lacks). The functions are plain Python over two bit-cast
helpers (``i64_as_f64``, ``f64_as_i64``) that ``compile`` injects as Numba intrinsics before
compiling them, so this module never imports Numba. Float32 callers evaluate in float64 and round
once, which keeps them within 1 ULP.

Accuracy (tests/test_vmath.py): ``exp64`` within 3 ULP of NumPy over [-745, 710]; exact at
+-inf, nan, overflow (inf), underflow (0) and through the subnormal range.
"""
import math

SHIFT = 6755399441055744.0  # 1.5 * 2**52: adding it rounds to an integer kept in the low mantissa bits
LOG2E = 1.4426950408889634
LN2_HI = 0.6931471803691238
LN2_LO = 1.9082149292705877e-10
EXP_OVERFLOW = 709.782712893384
EXP_UNDERFLOW = -745.1332191019412


def i64_as_f64(bits):  # replaced by a Numba intrinsic (a bit cast) in compile.py
    raise NotImplementedError("vmath functions only run compiled")


def f64_as_i64(x):  # replaced by a Numba intrinsic (a bit cast) in compile.py
    raise NotImplementedError("vmath functions only run compiled")


def scale2(kf):
    """2 ** kf for an integer-valued float kf in [-1022, 1023], with no float<->int conversion."""
    return i64_as_f64((f64_as_i64(kf + SHIFT) + 1023) << 52)


def exp64(x):
    """exp(x): x = k ln2 + r with |r| <= ln2/2, exp(r) by a degree-13 polynomial in Estrin form
    (short dependency chains), 2**k applied as two factors so subnormal results stay exact."""
    xc = min(max(x, -745.2), 709.8)
    kf = (xc * LOG2E + SHIFT) - SHIFT
    r = (xc - kf * LN2_HI) - kf * LN2_LO
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    s0 = (1.0 + r) + (0.5 + 0.16666666666666666 * r) * r2
    s1 = (0.041666666666666664 + 0.008333333333333333 * r) + (0.001388888888888889 + 0.0001984126984126984 * r) * r2
    s2 = (2.48015873015873e-05 + 2.7557319223985893e-06 * r) + (2.755731922398589e-07 + 2.505210838544172e-08 * r) * r2
    p = (s0 + s1 * r4) + (s2 + 2.08767569878681e-09 * r4) * r8
    k1 = math.floor(kf * 0.5)
    y = p * scale2(k1) * scale2(kf - k1)
    y = math.inf if x > EXP_OVERFLOW else y
    y = 0.0 if x < EXP_UNDERFLOW else y
    return x if x != x else y
