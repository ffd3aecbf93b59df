"""PyTorch's CPU sampling transforms, applied in NumPy to a ``ngrad.random.Generator``'s stream.

Contract: each function takes a generator, a count (or parameters) and a NumPy dtype and
returns a flat NumPy array equal, bit for bit, to what PyTorch's CPU kernels write for the same
generator state, consuming the same words, so that draws interleave with PyTorch's:

- ``uniform``: float32 takes the low 24 bits of one 32-bit word, float64 the low 53 bits of a
  64-bit one, times ``2**-digits``, then ``x * (high - low) + low`` in the dtype.
- ``normal``: 16 or more contiguous values fill all of them with uniforms, turn each block of
  16 into 8 Box-Muller pairs and redraw the last 16 when the size is not a multiple of 16;
  float32 does that with the AVX2 kernel's arithmetic (Cephes polynomials, fused multiply-adds:
  what PyTorch runs on any x86-64 CPU with AVX2), float64 with libm's. Fewer values (or a
  strided tensor) come one at a time from the scalar Box-Muller, whose second value is cached
  in the generator.
- ``integers``: ``(word % range) + low``, one 32-bit word per value, a 64-bit one for ranges
  of 2**32 and more (int64 and floating dtypes).
- ``permutation``: PyTorch's Fisher-Yates swaps (``random() % (n - i)``), applied at once.
- ``bernoulli``: a float64 uniform below ``p`` for a scalar ``p`` (the kernel PyTorch runs on
  non-Intel CPUs; with MKL on Intel it samples another stream), a uniform of ``p``'s dtype for a
  tensor ``p``. ``exponential``: ``-1/lambd * log(1 - u)`` on a float64 uniform.
"""

import math

import numpy as np

__all__ = ["uniform", "normal", "integers", "full_range", "permutation", "bernoulli", "exponential"]

_F32 = np.float32
_MASK24 = np.uint32(0xFFFFFF)
_MASK53 = np.uint64(2**53 - 1)


def fma32(a, b, c):
    """``a * b + c`` rounded once to float32 (a fused multiply-add), for float32 operands: the
    product is exact in float64 and so, nearly always, is the sum; where the float64 sum landed
    exactly halfway between two floats32, its rounding error decides the last rounding."""
    p = np.multiply(a, b, dtype=np.float64)
    s = p + c
    out = s.astype(_F32)
    tie = np.flatnonzero((s.view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000))
    if tie.size:
        pt, ct = p.reshape(-1)[tie], np.broadcast_to(np.asarray(c, np.float64), s.shape).reshape(-1)[tie]
        st = s.reshape(-1)[tie]
        err = (pt - (st - (st - pt))) + (ct - (st - pt))
        nudged = np.where(err != 0, np.nextafter(st, np.where(err > 0, np.inf, -np.inf)), st)
        out.reshape(-1)[tie] = nudged.astype(_F32)
    return out


def _halves(a):
    """Veltkamp's split of float64 ``a`` into two halves whose products are exact."""
    c = a * 134217729.0
    hi = c - (c - a)
    return hi, a - hi


def fma64(a, b, c):
    """``a * b + c`` for float64 with the product's rounding error carried into the sum (Dekker's
    exact product), as a fused multiply-add rounds it."""
    a, b, c = np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(c, np.float64)
    p = a * b
    ah, al = _halves(a)
    bh, bl = _halves(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    s = p + c
    t = (p - (s - (s - p))) + (c - (s - p))
    return s + (t + e)


def _libm(fn, x):
    """``fn`` (``math.log``...) on each element of float64 ``x``: NumPy's SIMD ``log`` and
    ``log1p`` differ from the C library's, which PyTorch calls, in the last bit of a few values
    in a thousand (its ``sin`` and ``cos`` agree), so float64 draws take libm's through Python."""
    return np.fromiter(map(fn, x.reshape(-1).tolist()), np.float64, x.size).reshape(x.shape)


def _unit32(gen, n):
    return (gen.random32(n) & _MASK24).astype(_F32) * _F32(2.0**-24)


def _unit64(gen, n):
    return (gen.random64(n) & _MASK53).astype(np.float64) * 2.0**-53


def uniform(gen, n, dtype, low=0.0, high=1.0):
    """``n`` samples of U[low, high), as ``Tensor.uniform_``."""
    if np.dtype(dtype) == np.float64:
        return fma64(_unit64(gen, n), high - low, low)
    low, high = _F32(low), _F32(high)
    x = _unit32(gen, n)
    # PyTorch's kernel is built with fused multiply-adds allowed: x * (high - low) + low is one
    return fma32(x, high - low, low) if (low, high) != (0, 1) else x


# --- normal ------------------------------------------------------------------------------------

_LOG_P = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1]
_LOG_P += [-1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1]


def _log_avx(x):
    """avx_mathfun's ``log256_ps`` (Cephes' logf) with the multiply-adds GCC fuses in it."""
    bits = x.view(np.int32)
    e = ((bits >> 23) - 127).astype(_F32) + _F32(1)
    x = ((bits & ~0x7F800000) | _F32(0.5).view(np.int32)).view(_F32)
    small = x < _F32(0.707106781186547524)
    x = (x - _F32(1)) + np.where(small, x, _F32(0))
    e = e - np.where(small, _F32(1), _F32(0))
    z = x * x
    y = np.full_like(x, _F32(_LOG_P[0]))
    for p in _LOG_P[1:]:
        y = fma32(y, x, _F32(p))
    y = fma32(y * x, z, e * _F32(-2.12194440e-4))
    y = fma32(-z, _F32(0.5), y)
    return fma32(e, _F32(0.693359375), x + y)


def _sincos_avx(x):
    """avx_mathfun's ``sincos256_ps`` for 0 <= x (Cephes' sinf/cosf), fused as GCC fuses it."""
    j = ((x * _F32(1.27323954473516)).astype(np.int32) + 1) & ~1
    y = j.astype(_F32)
    for dp in (-0.78515625, -2.4187564849853515625e-4, -3.77489497744594108e-8):
        x = fma32(y, _F32(dp), x)
    z = x * x
    c = fma32(np.full_like(z, _F32(2.443315711809948e-5)), z, _F32(-1.388731625493765e-3))
    c = fma32(c, z, _F32(4.166664568298827e-2)) * z
    c = fma32(c, z, -(z * _F32(0.5))) + _F32(1)
    s = fma32(np.full_like(z, _F32(-1.9515295891e-4)), z, _F32(8.3321608736e-3))
    s = fma32(fma32(s, z, _F32(-1.6666654611e-1)) * z, x, x)
    first = (j & 2) == 0
    sin, cos = np.where(first, s, c), np.where(first, c, s)
    return np.where((j & 4) != 0, -sin, sin), np.where((~(j - 2) & 4) != 0, -cos, cos)


def _box_muller16(u, mean, std, dtype):
    """PyTorch's ``normal_fill_16`` over rows of 16 uniforms: the first 8 of a row are 1 - u1,
    the last 8 the angles; the row becomes 8 cosines then 8 sines."""
    out = np.empty_like(u)
    if dtype == np.float32:
        radius = np.sqrt(_F32(-2) * _log_avx(_F32(1) - u[:, :8]))
        sin, cos = _sincos_avx(_F32(2 * math.pi) * u[:, 8:])
        out[:, :8] = fma32(radius * cos, _F32(std), _F32(mean))
        out[:, 8:] = fma32(radius * sin, _F32(std), _F32(mean))
    else:
        radius = np.sqrt(-2 * _libm(math.log, 1 - u[:, :8]))
        theta = 2.0 * math.pi * u[:, 8:]
        out[:, :8] = fma64(radius * np.cos(theta), std, mean)
        out[:, 8:] = fma64(radius * np.sin(theta), std, mean)
    return out


def _normal_fill(gen, n, dtype, mean, std):
    draw = _unit64 if dtype == np.float64 else _unit32
    u = draw(gen, n)
    out = np.empty(n, dtype)
    full = n // 16 * 16
    out[:full] = _box_muller16(u[:full].reshape(-1, 16), mean, std, dtype).reshape(-1)
    if n % 16:
        out[n - 16 :] = _box_muller16(draw(gen, 16).reshape(1, 16), mean, std, dtype).reshape(-1)
    return out


def _normal_scalar(gen, n, mean, std):
    """PyTorch's ``normal_distribution<double>`` drawn ``n`` times: a pair of float64 uniforms
    gives ``r cos`` now and ``r sin`` for the next draw (kept in the generator)."""
    raw = np.empty(n, np.float64)
    start = 0
    if n:
        cached = gen.take_normal()
        if cached is not None:
            raw[0], start = cached, 1
    pairs = (n - start + 1) // 2
    u = _unit64(gen, 2 * pairs).reshape(pairs, 2)
    r = np.sqrt(-2.0 * _libm(math.log1p, -u[:, 1]))
    theta = 2.0 * math.pi * u[:, 0]
    both = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1).reshape(-1)
    raw[start:] = both[: n - start]
    if (n - start) % 2:
        gen.keep_normal(float(both[-1]))
    return fma64(raw, std, mean)


def normal(gen, n, dtype, mean=0.0, std=1.0, contiguous=True):
    """``n`` samples of N(mean, std**2), as ``Tensor.normal_`` on a tensor of ``n`` elements
    (``contiguous``: laid out densely; a strided one takes the scalar path)."""
    dtype = np.dtype(dtype).type
    if n >= 16 and contiguous:
        return _normal_fill(gen, n, dtype, mean, std)
    return _normal_scalar(gen, n, mean, std).astype(dtype)


# --- integers, permutations, bernoulli, exponential --------------------------------------------


def integers(gen, n, dtype, low, high):
    """``n`` integers in [low, high) as ``Tensor.random_(low, high)`` (and ``randint``)."""
    span = high - low
    wide = span >= 2**32 and np.dtype(dtype) in (np.int64, np.float32, np.float64)
    words = gen.random64(n) if wide else gen.random32(n).astype(np.uint64)
    # PyTorch adds in unsigned 64-bit arithmetic and reads the sum as int64
    value = (words % np.uint64(span) + np.uint64(low % 2**64)).view(np.int64)
    return value.astype(dtype)


def full_range(gen, n, dtype):
    """``Tensor.random_()`` without bounds: [0, 2**63) for int64, [0, 2**31) for int32, 0 or 1 for
    bool, [0, 2**digits] for floats."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return (gen.random32(n) & np.uint32(1)).astype(np.bool_)
    if dtype == np.int64:
        return (gen.random64(n) % np.uint64(2**63)).astype(np.int64)
    if dtype == np.float64:
        return (gen.random64(n) % np.uint64(2**53 + 1)).astype(np.float64)
    modulus = 2**31 if dtype == np.int32 else 2**24 + 1
    return (gen.random32(n).astype(np.uint64) % np.uint64(modulus)).astype(dtype)


def _fisher_yates(z):
    """The permutation ``for i: swap(a[i], a[i + z[i]])`` makes of ``a = arange(len(z) + 1)``,
    without a loop. Position ``p`` receives, at step ``k`` with target ``k + z[k] == p``, the value
    that step ``k`` found at ``k``; so a value is found by following, from a step, the latest
    earlier step that targeted it (pointer doubling), and ``a[i]`` is what the latest step
    before ``i`` that targeted ``i``'s own target left there."""
    steps = len(z)
    n = steps + 1
    k = np.arange(steps)
    target = k + z
    by_target = np.lexsort((k, target))  # steps grouped by target, in order within each group
    sorted_target = target[by_target]
    earlier = np.full(steps, -1)
    same = sorted_target[1:] == sorted_target[:-1]
    earlier[by_target[1:][same]] = by_target[:-1][same]
    # parent(p): the latest step k < p with target p (a step may target itself: skip it)
    last = np.full(n, -1)
    ends = np.append(~same, True)
    last[sorted_target[ends]] = by_target[ends]
    parent = last.copy()
    selfish = parent[:steps] == k
    parent[:steps][selfish] = earlier[selfish]
    found = np.where(parent >= 0, parent, np.arange(n))
    while True:
        nxt = found[found]
        if np.array_equal(nxt, found):
            break
        found = nxt
    out = np.empty(n, np.int64)
    out[:steps] = np.where(earlier >= 0, found[np.maximum(earlier, 0)], target)
    out[steps] = found[steps]
    return out


def permutation(gen, n):
    """A random permutation of ``range(n)`` (int64), as ``randperm(n)``."""
    if n < 2**32 // 20:
        if n < 2:
            return np.arange(n, dtype=np.int64)
        z = gen.random32(n - 1).astype(np.int64) % np.arange(n, 1, -1)
        return _fisher_yates(z)
    # PyTorch's large-n branch: the inside-out shuffle on 64-bit words (sizes past 2e8: a loop)
    out = np.empty(n, np.int64)
    words = gen.random64(n)
    for i in range(n):
        j = int(words[i] % np.uint64(i + 1))
        out[i] = out[j]
        out[j] = i
    return out


def bernoulli(gen, p, n=None):
    """Booleans: ``n`` draws with probability ``p`` (a number), or one per element of ``p`` (an
    array of probabilities, float32 or float64)."""
    if n is not None:
        return _unit64(gen, n) < p
    p = np.asarray(p)
    flat = p.reshape(-1)
    u = _unit64(gen, flat.size) if p.dtype == np.float64 else _unit32(gen, flat.size)
    return (u < flat.astype(u.dtype)).reshape(p.shape)


def exponential(gen, n, dtype, lambd=1.0):
    """``n`` samples of Exp(lambd), as ``Tensor.exponential_``."""
    u = _unit64(gen, n)
    # a float32 result does not see the last bit of the float64 logarithm: NumPy's is enough
    log1p = _libm(math.log1p, -u) if np.dtype(dtype) == np.float64 else np.log1p(-u)
    return (-1.0 / lambd * log1p).astype(dtype)
