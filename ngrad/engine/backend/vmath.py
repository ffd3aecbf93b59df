"""Vectorisable math for compiled kernels: transcendentals LLVM can auto-vectorise.

Numba calls libm once per element for ``math.exp``, which no loop vectoriser can widen. The
functions here use only arithmetic, comparisons, selects, ``rint``/``abs``/``copysign`` and 64-bit
integer bit operations, so a fused loop around them compiles to packed SIMD code (AVX2 on these
machines: no AVX-512 is needed, and no float<->int64 conversion, which AVX2 lacks).

Contract: every public function takes a math backend ``m`` and a float64 value ``x`` and returns
the result as the backend's value; it is straight-line code (``m.select``, never ``if``). Two
backends run the same text:

- ``compile`` emits each operation as one LLVM instruction inside a Numba intrinsic, so a kernel
  calling ``_vexp(x)`` contains the whole algorithm inline: no call, nothing for Numba's front end
  to compile, nothing that could keep the loop from vectorising;
- ``NumpyBackend`` below evaluates it on float64 arrays (tests and debugging).

Float32 callers evaluate in float64 and round once, which keeps them within 1 ULP.
Accuracy (tests/test_vmath.py), float64 against NumPy: ``exp`` 3 ULP over [-745, 710], ``log``
5 ULP over the whole positive range including subnormals, ``tanh`` 5 ULP, ``expm1`` 6 ULP,
``log1p`` and ``sigmoid`` 4 ULP, ``softplus`` 5 ULP, ``sin``/``cos`` 2 ULP, ``erf`` 2 ULP; special values
(+-inf, nan, +-0, overflow, underflow) exact.
"""

import numpy as np

__all__ = ["FUNCTIONS", "NumpyBackend", "TRIG_LIMIT"]

INF = float("inf")
NAN = float("nan")
SHIFT = 6755399441055744.0  # 1.5 * 2**52: for an integer-valued k, the bits of k + SHIFT hold k
SHIFT_BITS = 0x4338000000000000  # the bits of SHIFT
LOG2E = 1.4426950408889634
LN2_HI = 0.6931471803691238  # ln 2 in 32 bits: k * LN2_HI is exact for |k| < 2**20
LN2_LO = 1.9082149292705877e-10
EXP_OVERFLOW = 709.782712893384
EXP_UNDERFLOW = -745.1332191019412
TWO52 = 4503599627370496.0
SQRT2 = 1.4142135623730951


def _estrin(m, x, coefs):
    """sum(c_k x**k) by Estrin's scheme: pairs, then pairs of pairs (short dependency chains)."""
    terms, power = list(coefs), x
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] * power if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
        if len(terms) > 1:
            power = power * power
    return terms[0]


def _int(m, kf):
    """The integer k of an integer-valued float kf (|k| < 2**51) as an int64, by bits alone."""
    return m.bits(kf + SHIFT) - SHIFT_BITS


def _pow2(m, ki):
    """2.0 ** ki for an int64 ki in [-1022, 1023]."""
    return m.float((ki + 1023) << 52)


def _exp_poly(m, r):
    """exp(r) - 1 for |r| <= ln2/2: r + r**2 q(r), q of degree 9 fitted by least squares (solved in
    50-digit arithmetic, weighted for the error of exp), within 1 ULP before rounding."""
    return r + (r * r) * _estrin(m, r, EXP_Q)


EXP_Q = (
    0.5000000000000013,
    0.16666666666666685,
    0.041666666666511275,
    0.00833333333331626,
    0.00138888889479632,
    0.00019841269898062216,
    2.480148905580456e-05,
    2.755723335804189e-06,
    2.763157271097388e-07,
    2.51125147400622e-08,
)


def _reduce_ln2(m, x):
    """x = k ln2 + r with |r| <= ln2/2 (Cody-Waite, exact products): (k as float, r)."""
    kf = m.rint(x * LOG2E)
    return kf, (x - kf * LN2_HI) - kf * LN2_LO


def exp64(m, x):
    """exp(x); 2**k is applied as two factors so subnormal results are rounded once. Clamped to
    [-746, 710], overflow to inf and underflow to 0 come out of the arithmetic itself."""
    kf, r = _reduce_ln2(m, m.minimum(m.maximum(x, -746.0), 710.0))
    ki = _int(m, kf)
    half = m.lshr(ki + 2048, 1) - 1024  # floor(k / 2), without an arithmetic shift (AVX2 has none)
    y = (_exp_poly(m, r) + 1.0) * _pow2(m, half) * _pow2(m, ki - half)
    return m.select(x != x, x, y)


def _expm1_finite(m, x):
    """exp(x) - 1 for finite x <= EXP_OVERFLOW: 2**k * p + (2**k - 1), one rounding with an FMA."""
    kf, r = _reduce_ln2(m, m.minimum(m.maximum(x, -60.0), 709.8))  # below -60 the result is -1
    p = _exp_poly(m, r)
    s = _pow2(m, _int(m, m.minimum(kf, 1023.0)))
    y = s * p + (s - 1.0)
    return m.select(kf > 1023.0, 2.0 * (s * p + s), y)  # 2**1024 itself would overflow


def expm1_64(m, x):
    """exp(x) - 1 with full relative accuracy near 0."""
    y = m.select(x > EXP_OVERFLOW, INF, _expm1_finite(m, x))
    return m.select(x != x, x, y)


def tanh64(m, x):
    """tanh(x) = -e / (e + 2) with e = expm1(-2|x|): no cancellation near 0, +-1 beyond 22."""
    e = _expm1_finite(m, -2.0 * m.minimum(m.abs(x), 22.0))
    y = m.copysign(-e / (e + 2.0), x)
    return m.select(x != x, x, y)


def sigmoid64(m, x):
    """1 / (1 + exp(-x))."""
    return 1.0 / (1.0 + exp64(m, -x))


LOG_C = tuple(1.0 / (2 * k + 1) for k in range(11))  # atanh series: 1, 1/3, 1/5, ..., 1/21


def log64(m, x):
    """log(x): x = 2**k * f with f in [sqrt(1/2), sqrt(2)), log(f) = 2 atanh((f-1)/(f+1)) by its
    series; exponent and mantissa taken apart with integer bit operations."""
    sub = x < 2.2250738585072014e-308
    bits = m.bits(m.select(sub, x * 18014398509481984.0, x))  # 2**54 lifts subnormals into range
    f = m.float((bits & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000)
    kf = m.float(m.lshr(bits, 52) & 0x7FF | 0x4330000000000000) - TWO52 - m.select(sub, 1077.0, 1023.0)
    big = f > SQRT2
    f = m.select(big, f * 0.5, f)
    kf = m.select(big, kf + 1.0, kf)
    s = (f - 1.0) / (f + 1.0)
    y = kf * LN2_HI + (2.0 * s * _estrin(m, s * s, LOG_C) + kf * LN2_LO)
    y = m.select(x == 0.0, -INF, y)
    y = m.select(x == INF, INF, y)
    return m.select((x < 0.0) | (x != x), NAN, y)


def log1p64(m, x):
    """log(1 + x): log(w) for w = 1 + x, plus the first-order correction for the rounding of w."""
    w = 1.0 + x
    c = (x - (w - 1.0)) / w
    c = m.select((w == 0.0) | (w == INF), 0.0, c)  # x = -1 or +inf: c would be nan
    return log64(m, w) + c


def softplus64(m, x):
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): no overflow, no cancellation."""
    return m.maximum(x, 0.0) + log1p64(m, exp64(m, -m.abs(x)))


# sin / cos: Cody-Waite reduction by pi/2 in three 33-bit parts (exact products for |n| < 2**20),
# so results are accurate while |x| <= TRIG_LIMIT; kernels flag larger arguments and the runtime
# then runs that tape on the NumPy interpreter instead (see codegen's guards).
TRIG_LIMIT = 1.0e6
INV_PIO2 = 0.6366197723675814
PIO2_1 = 1.57079632673412561417e00
PIO2_2 = 6.07710050630396597660e-11
PIO2_3 = 2.02226624871116645580e-21
PIO2_3T = 8.47842766036889956997e-32


SIN_C = (
    -0.16666666666666666,
    0.008333333333333333,
    -0.0001984126984126984,
    2.7557319223985893e-06,
    -2.505210838544172e-08,
    1.6059043836821613e-10,
    -7.647163731819816e-13,
    2.8114572543455206e-15,
)
COS_C = (
    -0.5,
    0.041666666666666664,
    -0.001388888888888889,
    2.48015873015873e-05,
    -2.755731922398589e-07,
    2.08767569878681e-09,
    -1.1470745597729725e-11,
    4.779477332387385e-14,
)


def _sin_poly(m, y):
    z = y * y
    return y + y * z * _estrin(m, z, SIN_C)


def _cos_poly(m, y):
    z = y * y
    return 1.0 + z * _estrin(m, z, COS_C)


def _quadrant_sin(m, x, turn):
    """sin(x + turn * pi/2): the reduced argument's sin or cos, signed by the quadrant."""
    nf = m.rint(x * INV_PIO2)
    y = (((x - nf * PIO2_1) - nf * PIO2_2) - nf * PIO2_3) - nf * PIO2_3T
    q = _int(m, nf) + turn
    r = m.select((q & 1) == 0, _sin_poly(m, y), _cos_poly(m, y))  # both, then a select: no branch
    return m.select((q & 2) != 0, -r, r)


def sin64(m, x):
    """sin(x) for |x| <= TRIG_LIMIT (larger arguments are flagged by the kernel, see codegen)."""
    return m.select(x == 0.0, x, _quadrant_sin(m, x, 0))  # keeps the sign of zero


def cos64(m, x):
    """cos(x) = sin(x + pi/2), for |x| <= TRIG_LIMIT (larger arguments are flagged, see codegen)."""
    return _quadrant_sin(m, x, 1)


# erf: x + x E(x^2) below ERF_SPLIT, 1 - exp(-x^2) R(s) above it (s maps [ERF_SPLIT, 6] onto
# [-1, 1]; erf is 1 in float64 beyond 5.93). E and R are least-squares fits on Chebyshev nodes,
# solved in 50-digit arithmetic (R weighted by exp(-x^2): the absolute error of 1 - erf is what
# shows in erf), degrees 10 and 20.
ERF_SPLIT = 0.84375
ERF_SMALL = (
    0.12837916709551256,
    -0.37612638903183404,
    0.11283791670935492,
    -0.026866170640812204,
    0.005223977576672805,
    -0.000854832380661366,
    0.00012055200434026305,
    -1.4922131300466866e-05,
    1.6401745712192974e-06,
    -1.5715227128760057e-07,
    1.072872329759789e-08,
)
ERF_LARGE = (
    0.15858842991210656,
    -0.11096146836820474,
    0.07518978389830694,
    -0.04946989885129255,
    0.031670688091839067,
    -0.0197665979413863,
    0.012038315450002737,
    -0.00718541713333287,
    0.004238849230956288,
    -0.0021275260409613916,
    0.0017474481507028254,
    -0.0011517534916087365,
    -0.002329910040682164,
    -0.004759753452639884,
    -0.0018784260941814644,
    0.005252972962933446,
    0.011688548888125937,
    0.011648003334820151,
    0.0068018722266903146,
    0.0022464843919043575,
    0.00033751772327359153,
)


def erf64(m, x):
    """erf(x), both branches evaluated and one selected (no branch, so the loop vectorises)."""
    small = x + x * _estrin(m, x * x, ERF_SMALL)
    a = m.minimum(m.abs(x), 6.0)
    s = (2.0 * a - (6.0 + ERF_SPLIT)) * (1.0 / (6.0 - ERF_SPLIT))
    large = m.copysign(1.0 - exp64(m, -(a * a)) * _estrin(m, s, ERF_LARGE), x)
    y = m.select(m.abs(x) < ERF_SPLIT, small, large)
    return m.select(x != x, x, y)


# The names kernels call them by (codegen's SourceMath writes these).
FUNCTIONS = {
    "_vexp": exp64,
    "_vexpm1": expm1_64,
    "_vtanh": tanh64,
    "_vsigmoid": sigmoid64,
    "_vlog": log64,
    "_vlog1p": log1p64,
    "_vsoftplus": softplus64,
    "_vsin": sin64,
    "_vcos": cos64,
    "_verf": erf64,
}


class NumpyBackend:
    """The backend over float64 NumPy arrays: ``fn(NumpyBackend, x)`` for any function above."""

    select = staticmethod(np.where)
    rint, abs, copysign = np.rint, np.abs, np.copysign

    @staticmethod
    def minimum(x, c):
        return np.where(x < c, x, c)

    @staticmethod
    def maximum(x, c):
        return np.where(x > c, x, c)

    @staticmethod
    def bits(x):
        return np.asarray(x, np.float64).view(np.int64)

    @staticmethod
    def float(i):
        return np.asarray(i, np.int64).view(np.float64)

    @staticmethod
    def lshr(i, n):
        return (np.asarray(i, np.int64).view(np.uint64) >> np.uint64(n)).view(np.int64)
