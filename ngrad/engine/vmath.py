"""Vectorisable math for compiled kernels: transcendentals LLVM can auto-vectorise.

Numba calls libm once per element for ``math.exp``, which no loop vectoriser can widen; these
versions use only arithmetic, comparisons, selects and integer bit operations, so a fused loop
around them compiles to packed SIMD code (AVX2 on these machines: no AVX-512 is needed, and no
float<->int64 conversion, which AVX2 lacks). The functions are plain Python over two bit-cast
helpers (``i64_as_f64``, ``f64_as_i64``) that ``compile`` injects as Numba intrinsics before
compiling them, so this module never imports Numba. Float32 callers evaluate in float64 and round
once, which keeps them within 1 ULP.

Accuracy (tests/test_vmath.py), float64 against NumPy: ``exp`` 3 ULP over [-745, 710], ``log``
5 ULP over the whole positive range including subnormals, ``tanh`` 5 ULP, ``expm1`` 6 ULP,
``sigmoid`` 4 ULP; special values (+-inf, nan, +-0, overflow, underflow) exact. Float32: 1 ULP.
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


TWO52 = 4503599627370496.0  # 2**52
SQRT2 = 1.4142135623730951


def expm1_64(x):
    """exp(x) - 1 with full relative accuracy near 0: a degree-16 series for |x| < 0.5, else exp - 1."""
    r2 = x * x
    r4 = r2 * r2
    r8 = r4 * r4
    a = (1.0 + 0.5 * x) + (0.16666666666666666 + 0.041666666666666664 * x) * r2
    b = (0.008333333333333333 + 0.001388888888888889 * x) + (0.0001984126984126984 + 2.48015873015873e-05 * x) * r2
    c = (2.7557319223985893e-06 + 2.755731922398589e-07 * x) + (2.505210838544172e-08 + 2.08767569878681e-09 * x) * r2
    d = (1.6059043836821613e-10 + 1.1470745597729725e-11 * x) + (7.647163731819816e-13 + 4.779477332387385e-14 * x) * r2
    small = x * ((a + b * r4) + (c + d * r4) * r8)
    return small if abs(x) < 0.5 else exp64(x) - 1.0


def tanh64(x):
    """tanh(x) = e / (e + 2) with e = expm1(2x): no cancellation near 0, +-1 beyond |x| > 22."""
    e = expm1_64(2.0 * min(max(x, -22.0), 22.0))
    y = e / (e + 2.0)
    return x if x != x else y


def log64(x):
    """log(x): x = 2**k * m with m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh((m-1)/(m+1)) by its
    series; exponent and mantissa taken apart with integer bit operations (no int->float conversion)."""
    sub = x < 2.2250738585072014e-308
    xs = x * 18014398509481984.0 if sub else x  # 2**54 lifts subnormals into the normal range
    bits = f64_as_i64(xs)
    ebits = (bits & 0x7FF0000000000000) >> 52
    m = i64_as_f64((bits & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000)
    kf = i64_as_f64(ebits | 0x4330000000000000) - TWO52 - (1077.0 if sub else 1023.0)
    big = m > SQRT2
    m = m * 0.5 if big else m
    kf = kf + 1.0 if big else kf
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    z2 = z * z
    z4 = z2 * z2
    z8 = z4 * z4
    p0 = (1.0 + 0.3333333333333333 * z) + (0.2 + 0.14285714285714285 * z) * z2
    p1 = (0.1111111111111111 + 0.09090909090909091 * z) + (0.07692307692307693 + 0.06666666666666667 * z) * z2
    p2 = (0.058823529411764705 + 0.05263157894736842 * z) + 0.047619047619047616 * z2
    logm = 2.0 * s * ((p0 + p1 * z4) + p2 * z8)
    y = kf * LN2_HI + (logm + kf * LN2_LO)
    y = -math.inf if x == 0.0 else y
    y = math.inf if x == math.inf else y
    return math.nan if (x < 0.0 or x != x) else y


# sin / cos: Cody-Waite reduction by pi/2 in three 33-bit parts (exact products for |n| < 2**20),
# so results are accurate while |x| <= TRIG_LIMIT; kernels flag larger arguments and the runtime
# then runs that tape on the NumPy interpreter instead (see codegen's guards).
TRIG_LIMIT = 1.0e6
INV_PIO2 = 0.6366197723675814
PIO2_1 = 1.57079632673412561417e+00
PIO2_2 = 6.07710050630396597660e-11
PIO2_3 = 2.02226624871116645580e-21
PIO2_3T = 8.47842766036889956997e-32


def _sin_poly(y):
    z = y * y
    z2 = z * z
    z4 = z2 * z2
    a = (-0.16666666666666666 + 0.008333333333333333 * z) + (-0.0001984126984126984 + 2.7557319223985893e-06 * z) * z2
    b = (-2.505210838544172e-08 + 1.6059043836821613e-10 * z) + (-7.647163731819816e-13 + 2.8114572543455206e-15 * z) * z2
    return y + y * z * (a + b * z4)


def _cos_poly(y):
    z = y * y
    z2 = z * z
    z4 = z2 * z2
    a = (-0.5 + 0.041666666666666664 * z) + (-0.001388888888888889 + 2.48015873015873e-05 * z) * z2
    b = (-2.755731922398589e-07 + 2.08767569878681e-09 * z) + (-1.1470745597729725e-11 + 4.779477332387385e-14 * z) * z2
    return 1.0 + z * (a + b * z4)


def _reduce(x):
    nf = (x * INV_PIO2 + SHIFT) - SHIFT
    y = ((x - nf * PIO2_1) - nf * PIO2_2) - nf * PIO2_3
    y = y - nf * PIO2_3T
    q = f64_as_i64(nf + SHIFT) & 3
    return y, q


def _quadrant_sin(x, turn):
    """sin(x + turn * pi/2): the reduced argument's sin or cos, signed by the quadrant."""
    y, q = _reduce(x)
    q = q + turn
    s = _sin_poly(y)  # both polynomials, then a select: branch-free, so the loop vectorises
    c = _cos_poly(y)
    r = s if (q & 1) == 0 else c
    return -r if (q & 2) != 0 else r


def sin64(x):
    """sin(x) for |x| <= TRIG_LIMIT (larger arguments are flagged by the kernel, see codegen)."""
    r = _quadrant_sin(x, 0)
    return x if x == 0.0 else r  # keeps the sign of zero


def cos64(x):
    """cos(x) = sin(x + pi/2), for |x| <= TRIG_LIMIT (larger arguments are flagged, see codegen)."""
    return _quadrant_sin(x, 1)
