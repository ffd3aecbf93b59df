"""The primitive table: one row per primitive.

Contract: ``PRIMS[name]`` holds the primitive's kind, its forward expression written
against a math namespace ``m`` (NumPy for the interpreter, source strings for codegen), its
shape/dtype rule, its VJP and its JVP (tangent rule), both written in primitives of this same
table (through ``Var`` objects of a tape builder), so a derivative is again a tape that can be
printed, run, fused or differentiated again. Elementwise rows state their partial derivatives
once (``per_arg``): an elementwise Jacobian is diagonal, so the same rules give the VJP
(applied to a cotangent) and the JVP (applied to tangents, summed). Linear rows (movement,
indexing, ``sum``, ``cumsum``) are their own JVP (``LINEAR``). Dtypes inside tapes are short
names: 'b8', 'i32', 'i64', 'f32', 'f64'.

Broadcasting is not handled by any row: elementwise rows require equal shapes and dtypes,
and the single ``expand`` row broadcasts (its VJP sums back).
"""

import math
import operator

__all__ = ["Prim", "PRIMS", "TapeError", "ELEMENTWISE"]


class TapeError(ValueError):
    """A tape (or an instruction being added to one) breaks a primitive's shape/dtype rule."""


# --- shape and dtype rules, one per kind ----------------------------------------------------


def _fail(msg):
    raise TapeError(msg)


def _ew(shapes, dtypes):
    for s, d in zip(shapes[1:], dtypes[1:]):
        if s != shapes[0] or d != dtypes[0]:
            _fail(f"elementwise operands must match exactly, got {shapes[0]}:{dtypes[0]} and {s}:{d}")
    return shapes[0], dtypes[0]


def _unary(shapes, dtypes):
    return shapes[0], dtypes[0]


def _compare(shapes, dtypes):
    return _ew(shapes, dtypes)[0], "b8"


def _logical(shapes, dtypes):
    if any(d != "b8" for d in dtypes):
        _fail(f"logical operands must be b8, got {dtypes}")
    return _ew(shapes, dtypes)


def _where(shapes, dtypes):
    if dtypes[0] != "b8":
        _fail(f"where condition must be b8, got {dtypes[0]}")
    if not shapes[0] == shapes[1] == shapes[2] or dtypes[1] != dtypes[2]:
        _fail(f"where operands must match exactly, got {list(zip(shapes, dtypes))}")
    return shapes[1], dtypes[1]


def _cast(shapes, dtypes, dtype):
    return shapes[0], dtype


def _axes_ok(axes, rank):
    if list(axes) != sorted(set(axes)) or any(not 0 <= a < rank for a in axes):
        _fail(f"axes {axes} must be sorted, unique and within rank {rank}")


def _reduce(shapes, dtypes, axes, keepdim):
    s = shapes[0]
    _axes_ok(axes, len(s))
    if keepdim:
        return tuple(1 if i in axes else n for i, n in enumerate(s)), dtypes[0]
    return tuple(n for i, n in enumerate(s) if i not in axes), dtypes[0]


def _arg(shapes, dtypes, axis, keepdim):
    s = shapes[0]
    _axes_ok((axis,), len(s))
    if s[axis] == 0:
        _fail("cannot take the arg of an empty axis")
    return _reduce(shapes, dtypes, (axis,), keepdim)[0], "i64"


def _argsort(shapes, dtypes, axis, descending):
    _axes_ok((axis,), len(shapes[0]))
    return shapes[0], "i64"


def _scan(shapes, dtypes, axis):
    _axes_ok((axis,), len(shapes[0]))
    return shapes[0], dtypes[0]


def _reshape(shapes, dtypes, shape):
    if math.prod(shape) != math.prod(shapes[0]):
        _fail(f"cannot reshape {shapes[0]} to {shape}")
    return tuple(shape), dtypes[0]


def _permute(shapes, dtypes, perm):
    if sorted(perm) != list(range(len(shapes[0]))):
        _fail(f"{perm} is not a permutation of the axes of {shapes[0]}")
    return tuple(shapes[0][p] for p in perm), dtypes[0]


def _expand(shapes, dtypes, shape):
    s = shapes[0]
    if len(s) != len(shape) or any(a != b and a != 1 for a, b in zip(s, shape)):
        _fail(f"cannot expand {s} to {shape} (equal ranks, size-1 axes only)")
    return tuple(shape), dtypes[0]


def _slice_shape(shape, starts, stops, steps):
    if not len(shape) == len(starts) == len(stops) == len(steps):
        _fail(f"slice bounds must have one entry per axis of {shape}")
    out = []
    for n, a, b, c in zip(shape, starts, stops, steps):
        if c <= 0 or not 0 <= a <= n or not 0 <= b <= n:
            _fail(f"slice {a}:{b}:{c} out of range for an axis of size {n}")
        out.append(len(range(a, b, c)))
    return tuple(out)


def _slice(shapes, dtypes, starts, stops, steps):
    return _slice_shape(shapes[0], starts, stops, steps), dtypes[0]


def _unslice(shapes, dtypes, shape, starts, stops, steps):
    if _slice_shape(tuple(shape), starts, stops, steps) != shapes[0]:
        _fail(f"unslice source {shapes[0]} does not fit the slice of {shape}")
    return tuple(shape), dtypes[0]


def _flip(shapes, dtypes, axes):
    _axes_ok(axes, len(shapes[0]))
    return shapes[0], dtypes[0]


def _cat(shapes, dtypes, axis):
    first = shapes[0]
    _axes_ok((axis,), len(first))
    for s, d in zip(shapes, dtypes):
        if d != dtypes[0] or len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != axis):
            _fail(f"cat operands must agree except on axis {axis}, got {shapes}")
    return first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1 :], dtypes[0]


def _index_shape(x, idx_shapes, idx_dtypes, axis):
    k = len(idx_shapes)
    if k == 0 or axis + k > len(x):
        _fail(f"index with {k} index tensors at axis {axis} does not fit {x}")
    if any(d != "i64" for d in idx_dtypes) or any(s != idx_shapes[0] for s in idx_shapes):
        _fail(f"index tensors must be i64 of one shape, got {list(zip(idx_shapes, idx_dtypes))}")
    return x[:axis] + idx_shapes[0] + x[axis + k :]


def _index(shapes, dtypes, axis):
    return _index_shape(shapes[0], shapes[1:], dtypes[1:], axis), dtypes[0]


def _unindex(shapes, dtypes, shape, axis):
    if _index_shape(tuple(shape), shapes[1:], dtypes[1:], axis) != shapes[0]:
        _fail(f"unindex source {shapes[0]} does not fit {shape} indexed at axis {axis}")
    return tuple(shape), dtypes[0]


def _gather(shapes, dtypes, axis):
    x, i = shapes
    _axes_ok((axis,), len(x))
    if dtypes[1] != "i64" or len(i) != len(x) or any(a != b for d, (a, b) in enumerate(zip(x, i)) if d != axis):
        _fail(f"gather index {i}:{dtypes[1]} must be i64 and match {x} except on axis {axis}")
    return i, dtypes[0]


def _scatter_add(shapes, dtypes, axis, shape):
    _gather([tuple(shape), shapes[1]], [dtypes[0], dtypes[1]], axis)
    if shapes[0] != shapes[1]:
        _fail(f"scatter_add source {shapes[0]} must match its index {shapes[1]}")
    return tuple(shape), dtypes[0]


def _matmul(shapes, dtypes):
    a, b = shapes
    if len(a) < 2 or len(a) != len(b) or a[:-2] != b[:-2] or a[-1] != b[-2] or dtypes[0] != dtypes[1]:
        _fail(f"matmul operands {a}:{dtypes[0]} and {b}:{dtypes[1]} do not fit")
    return a[:-1] + (b[-1],), dtypes[0]


def _square(shapes, dtypes):
    a = shapes[0]
    if len(a) < 2 or a[-1] != a[-2] or dtypes[0][0] != "f":
        _fail(f"{a}:{dtypes[0]} is not a stack of square float matrices")
    return a, dtypes[0]


def _solve(shapes, dtypes):
    a, b = shapes
    _square(shapes[:1], dtypes)
    if len(b) != len(a) or b[:-2] != a[:-2] or b[-2] != a[-1] or dtypes[1] != dtypes[0]:
        _fail(f"solve operands {a}:{dtypes[0]} and {b}:{dtypes[1]} do not fit")
    return b, dtypes[0]


def _det(shapes, dtypes):
    return _square(shapes, dtypes)[0][:-2], dtypes[0]


def _const(shapes, dtypes, value, dtype):
    return (), dtype


# --- helpers the VJP rules share ---------------------------------------------------------------


def keepdim_shape(shape, axes):
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def unreduce(g, shape, axes, keepdim):
    """Broadcast a reduction's cotangent back over the reduced axes."""
    if not keepdim:
        g = g.reshape(shape=keepdim_shape(shape, axes))
    return g.expand(shape=tuple(shape))


def sum_to(g, shape):
    """The VJP of ``expand``: sum the broadcast axes back to ``shape``."""
    axes = tuple(i for i, (a, b) in enumerate(zip(shape, g.shape)) if a == 1 and b != 1)
    return g.sum(axes=axes, keepdim=True) if axes else g


def zeros_like(v):
    return v.bld.full(0, v.shape, v.dtype)


def _extreme_vjp(g, out, x, axes, keepdim):
    # PyTorch spreads the cotangent evenly over ties of a full max/min/amax/amin.
    mask = x.eq(unreduce(out, x.shape, axes, keepdim)).cast(dtype=x.dtype)
    count = mask.sum(axes=axes, keepdim=True)
    gk = g if keepdim else g.reshape(shape=keepdim_shape(x.shape, axes))
    return mask * (gk / count).expand(shape=x.shape)


def _extreme_jvp(ts, out, args, params):
    # the tangent averaged over ties, as the VJP spreads the cotangent over them
    (t,), (x,), axes, keepdim = ts, args, params["axes"], params["keepdim"]
    mask = x.eq(unreduce(out, x.shape, axes, keepdim)).cast(dtype=x.dtype)
    return (t * mask).sum(axes=axes, keepdim=keepdim) / mask.sum(axes=axes, keepdim=keepdim)


def _prod_others(x, axes):
    # Exact with zeros: with no zero, out/x; with exactly one zero, the product of the others
    # at that zero; otherwise 0. No division by zero is ever evaluated on a path that is kept.
    is0 = x.eq(0)
    safe = is0.where(x.bld.full(1, x.shape, x.dtype), x)
    nonzero_prod = unreduce(safe.prod(axes=axes, keepdim=True), x.shape, axes, True)
    zeros = unreduce(is0.cast(dtype=x.dtype).sum(axes=axes, keepdim=True), x.shape, axes, True)
    return zeros.eq(0).where(nonzero_prod / safe, (zeros.eq(1).logical_and(is0)).where(nonzero_prod, zeros_like(x)))


def _prod_vjp(g, out, x, axes, keepdim):
    return unreduce(g, x.shape, axes, keepdim) * _prod_others(x, axes)


def _prod_jvp(ts, out, args, params):
    return (ts[0] * _prod_others(args[0], params["axes"])).sum(**params)


def _matmul_jvp(ts, out, args, params):
    (tx, ty), (x, y) = ts, args
    terms = [
        t for t in (tx.matmul(y) if tx is not None else None, x.matmul(ty) if ty is not None else None) if t is not None
    ]
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _solve_vjp(need, g, out, args, params):
    a = args[0]
    gb = _matmul_t(a).solve(g)  # one solve with A^T serves both cotangents
    return [-gb.matmul(_matmul_t(out)) if need[0] else None, gb if need[1] else None]


def _solve_jvp(ts, out, args, params):
    (ta, tb), a = ts, args[0]
    terms = [t for t in (tb, -ta.matmul(out) if ta is not None else None) if t is not None]
    return a.solve(terms[0] if len(terms) == 1 else terms[0] + terms[1])


def _det_vjp(g, out, a):
    return (g * out).reshape(shape=out.shape + (1, 1)).expand(shape=a.shape) * _matmul_t(a.inv())


def _det_jvp(ts, out, args, params):
    (t,), (a,) = ts, args  # det(A) trace(A^-1 T)
    r = len(a.shape)
    return out * (_matmul_t(a.inv()) * t).sum(axes=(r - 2, r - 1), keepdim=False)


def _pow_base(g, out, x, y):
    c = x.bld.literal(y)
    if c is not None and c != 0:  # x ** c with a literal c: no mask needed, and c == 1, 2 need no pow
        return g * c if c == 1 else (g * (x * c) if c == 2 else g * c * x.pow(c - 1))
    return y.eq(0).where(zeros_like(x), g * y * x.pow(y - 1))


def _pow_exponent(g, out, x, y):
    return x.eq(0).logical_and(y.ge(0)).where(zeros_like(y), g * out * x.log())


def _trunc(q):
    return q.sign() * q.abs().floor()


def _tie_weight(x, y):
    d = x.dtype
    return x.gt(y).cast(dtype=d) + x.eq(y).cast(dtype=d) * 0.5


def _cat_vjp(need, g, out, args, axis):
    res, start = [], 0
    for a, n in zip(args, need):
        stop = start + a.shape[axis]
        if n:
            res.append(
                g.slice(
                    starts=tuple(start if i == axis else 0 for i in range(len(g.shape))),
                    stops=tuple(stop if i == axis else s for i, s in enumerate(g.shape)),
                    steps=(1,) * len(g.shape),
                )
            )
        else:
            res.append(None)
        start = stop
    return res


def _matmul_t(v):
    r = len(v.shape)
    return v.permute(perm=tuple(range(r - 2)) + (r - 1, r - 2))


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


_SQRT_PI_2 = 2.0 / math.sqrt(math.pi)


# --- the table -----------------------------------------------------------------------------------


class Prim:
    """One primitive: ``fwd(m, *args, **params)``, ``vjp(need, g, out, args, params)`` (the
    cotangent of each argument, None where not needed) and ``jvp(tangents, out, args, params)``
    (the tangent of the result from the arguments' tangents, None for an argument without one;
    the rule returns None when no tangent reaches the result)."""

    __slots__ = ("name", "kind", "fwd", "vjp", "jvp", "infer")

    def __init__(self, name, kind, infer, fwd, vjp, jvp):
        self.name, self.kind, self.infer, self.fwd, self.vjp, self.jvp = name, kind, infer, fwd, vjp, jvp

    def __repr__(self):
        return f"Prim({self.name})"


def per_arg(*rules):
    """Build a VJP from one rule per argument (None: not differentiable in that argument)."""

    def vjp(need, g, out, args, params):
        return [r(g, out, *args, **params) if n and r is not None else None for r, n in zip(rules, need)]

    vjp.rules = rules
    return vjp


def _diagonal(rules):
    """The JVP of an elementwise primitive from its per-argument partials (diagonal Jacobians:
    the VJP rule applied to a tangent is that argument's JVP term)."""

    def jvp(ts, out, args, params):
        total = None
        for r, t in zip(rules, ts):
            if r is not None and t is not None:
                term = r(t, out, *args, **params)
                total = term if total is None else total + term
        return total

    return jvp


def _linear(name):
    """The JVP of a primitive that is linear in its floating arguments: itself, on the tangents
    (zeros for a floating argument without one; index arguments stay as they are)."""

    def jvp(ts, out, args, params):
        operands = [t if t is not None else (zeros_like(a) if a.dtype[0] == "f" else a) for a, t in zip(args, ts)]
        return out.bld.emit(name, operands, params)

    return jvp


NO_VJP = None
LINEAR = "linear"
PRIMS = {}
ELEMENTWISE = ("unary", "binary", "compare", "logical", "where", "cast")


def P(name, kind, infer, fwd, vjp=NO_VJP, jvp=None):
    if jvp is None and kind in ELEMENTWISE and vjp is not None:
        jvp = _diagonal(vjp.rules)
    elif jvp == LINEAR:
        jvp = _linear(name)
    PRIMS[name] = Prim(name, kind, infer, fwd, vjp, jvp)


# elementwise unary: (m, x) -> same shape and dtype
P("neg", "unary", _unary, lambda m, x: -x, per_arg(lambda g, out, x: -g))
P("exp", "unary", _unary, lambda m, x: m.exp(x), per_arg(lambda g, out, x: g * out))
P("log", "unary", _unary, lambda m, x: m.log(x), per_arg(lambda g, out, x: g / x))
P("log1p", "unary", _unary, lambda m, x: m.log1p(x), per_arg(lambda g, out, x: g / (x + 1)))
P("expm1", "unary", _unary, lambda m, x: m.expm1(x), per_arg(lambda g, out, x: g * (out + 1)))
P("sqrt", "unary", _unary, lambda m, x: m.sqrt(x), per_arg(lambda g, out, x: g / (out * 2)))
P("sin", "unary", _unary, lambda m, x: m.sin(x), per_arg(lambda g, out, x: g * x.cos()))
P("cos", "unary", _unary, lambda m, x: m.cos(x), per_arg(lambda g, out, x: g * -x.sin()))
P("tan", "unary", _unary, lambda m, x: m.tan(x), per_arg(lambda g, out, x: g * (out * out + 1)))
P("asin", "unary", _unary, lambda m, x: m.asin(x), per_arg(lambda g, out, x: g / (1 - x * x).sqrt()))
P("acos", "unary", _unary, lambda m, x: m.acos(x), per_arg(lambda g, out, x: -(g / (1 - x * x).sqrt())))
P("atan", "unary", _unary, lambda m, x: m.atan(x), per_arg(lambda g, out, x: g / (x * x + 1)))
P("sinh", "unary", _unary, lambda m, x: m.sinh(x), per_arg(lambda g, out, x: g * x.cosh()))
P("cosh", "unary", _unary, lambda m, x: m.cosh(x), per_arg(lambda g, out, x: g * x.sinh()))
P("tanh", "unary", _unary, lambda m, x: m.tanh(x), per_arg(lambda g, out, x: g * (1 - out * out)))
P("sigmoid", "unary", _unary, lambda m, x: m.sigmoid(x), per_arg(lambda g, out, x: g * (1 - out) * out))
P("softplus", "unary", _unary, lambda m, x: m.softplus(x), per_arg(lambda g, out, x: g * x.sigmoid()))
P("erf", "unary", _unary, lambda m, x: m.erf(x), per_arg(lambda g, out, x: g * (-(x * x)).exp() * _SQRT_PI_2))
P("abs", "unary", _unary, lambda m, x: m.abs(x), per_arg(lambda g, out, x: g * x.sign()))
P("sign", "unary", _unary, lambda m, x: m.sign(x), per_arg(lambda g, out, x: zeros_like(g)))
P("floor", "unary", _unary, lambda m, x: m.floor(x), per_arg(lambda g, out, x: zeros_like(g)))
P("ceil", "unary", _unary, lambda m, x: m.ceil(x), per_arg(lambda g, out, x: zeros_like(g)))
P("round", "unary", _unary, lambda m, x: m.round(x), per_arg(lambda g, out, x: zeros_like(g)))
P("isnan", "compare", lambda s, d: (s[0], "b8"), lambda m, x: m.isnan(x))
P("logical_not", "logical", _logical, lambda m, x: m.logical_not(x))
P(
    "cast",
    "cast",
    _cast,
    lambda m, x, dtype: m.cast(x, dtype),
    per_arg(lambda g, out, x, dtype: g.cast(dtype=x.dtype) if x.dtype[0] == "f" else None),
    lambda ts, out, args, params: ts[0].cast(dtype=out.dtype) if out.dtype[0] == "f" else None,
)
P("detach", "unary", _unary, lambda m, x: x)

# elementwise binary: equal shapes and dtypes
P("add", "binary", _ew, lambda m, x, y: x + y, per_arg(lambda g, out, x, y: g, lambda g, out, x, y: g))
P("sub", "binary", _ew, lambda m, x, y: x - y, per_arg(lambda g, out, x, y: g, lambda g, out, x, y: -g))
P("mul", "binary", _ew, lambda m, x, y: x * y, per_arg(lambda g, out, x, y: g * y, lambda g, out, x, y: g * x))
P(
    "div",
    "binary",
    _ew,
    lambda m, x, y: x / y,
    per_arg(lambda g, out, x, y: g / y, lambda g, out, x, y: -g * x / (y * y)),
)
P("pow", "binary", _ew, lambda m, x, y: m.pow(x, y), per_arg(_pow_base, _pow_exponent))
P(
    "maximum",
    "binary",
    _ew,
    lambda m, x, y: m.maximum(x, y),
    per_arg(lambda g, out, x, y: g * _tie_weight(x, y), lambda g, out, x, y: g * _tie_weight(y, x)),
)
P(
    "minimum",
    "binary",
    _ew,
    lambda m, x, y: m.minimum(x, y),
    per_arg(lambda g, out, x, y: g * _tie_weight(y, x), lambda g, out, x, y: g * _tie_weight(x, y)),
)
P(
    "atan2",
    "binary",
    _ew,
    lambda m, x, y: m.atan2(x, y),
    per_arg(lambda g, out, x, y: g * y / (x * x + y * y), lambda g, out, x, y: -g * x / (x * x + y * y)),
)
# x - y * floor(x / y) (the sign of y) and x - y * trunc(x / y) (the sign of x), computed exactly
P(
    "remainder",
    "binary",
    _ew,
    lambda m, x, y: m.remainder(x, y),
    per_arg(lambda g, out, x, y: g, lambda g, out, x, y: -g * (x / y).floor()),
)
P(
    "fmod",
    "binary",
    _ew,
    lambda m, x, y: m.fmod(x, y),
    per_arg(lambda g, out, x, y: g, lambda g, out, x, y: -g * _trunc(x / y)),
)
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    P(_name, "compare", _compare, lambda m, x, y, _op=getattr(operator, _name): _op(x, y))  # noqa: B008
P("logical_and", "logical", _logical, lambda m, x, y: m.logical_and(x, y))
P("logical_or", "logical", _logical, lambda m, x, y: m.logical_or(x, y))
P(
    "where",
    "where",
    _where,
    lambda m, c, x, y: m.where(c, x, y),
    per_arg(None, lambda g, out, c, x, y: c.where(g, zeros_like(g)), lambda g, out, c, x, y: c.where(zeros_like(g), g)),
)

# reductions and scans
P(
    "sum",
    "reduce",
    _reduce,
    lambda m, x, axes, keepdim: m.sum(x, axes, keepdim),
    per_arg(lambda g, out, x, axes, keepdim: unreduce(g, x.shape, axes, keepdim)),
    LINEAR,
)
P("prod", "reduce", _reduce, lambda m, x, axes, keepdim: m.prod(x, axes, keepdim), per_arg(_prod_vjp), _prod_jvp)
P("amax", "reduce", _reduce, lambda m, x, axes, keepdim: m.amax(x, axes, keepdim), per_arg(_extreme_vjp), _extreme_jvp)
P("amin", "reduce", _reduce, lambda m, x, axes, keepdim: m.amin(x, axes, keepdim), per_arg(_extreme_vjp), _extreme_jvp)
P("argmax", "reduce", _arg, lambda m, x, axis, keepdim: m.argmax(x, axis, keepdim))
P("argmin", "reduce", _arg, lambda m, x, axis, keepdim: m.argmin(x, axis, keepdim))
P("argsort", "sort", _argsort, lambda m, x, axis, descending: m.argsort(x, axis, descending))
P(
    "cumsum",
    "scan",
    _scan,
    lambda m, x, axis: m.cumsum(x, axis),
    per_arg(lambda g, out, x, axis: g.flip(axes=(axis,)).cumsum(axis=axis).flip(axes=(axis,))),
    LINEAR,
)

# movement
P(
    "reshape",
    "movement",
    _reshape,
    lambda m, x, shape: m.reshape(x, shape),
    per_arg(lambda g, out, x, shape: g.reshape(shape=x.shape)),
    LINEAR,
)
P(
    "permute",
    "movement",
    _permute,
    lambda m, x, perm: m.permute(x, perm),
    per_arg(lambda g, out, x, perm: g.permute(perm=_inverse(perm))),
    LINEAR,
)
P(
    "expand",
    "movement",
    _expand,
    lambda m, x, shape: m.expand(x, shape),
    per_arg(lambda g, out, x, shape: sum_to(g, x.shape)),
    LINEAR,
)
P(
    "slice",
    "movement",
    _slice,
    lambda m, x, starts, stops, steps: m.slice(x, starts, stops, steps),
    per_arg(lambda g, out, x, starts, stops, steps: g.unslice(shape=x.shape, starts=starts, stops=stops, steps=steps)),
    LINEAR,
)
P(
    "unslice",
    "movement",
    _unslice,
    lambda m, x, shape, starts, stops, steps: m.unslice(x, shape, starts, stops, steps),
    per_arg(lambda g, out, x, shape, starts, stops, steps: g.slice(starts=starts, stops=stops, steps=steps)),
    LINEAR,
)
P(
    "flip",
    "movement",
    _flip,
    lambda m, x, axes: m.flip(x, axes),
    per_arg(lambda g, out, x, axes: g.flip(axes=axes)),
    LINEAR,
)
P(
    "cat",
    "movement",
    _cat,
    lambda m, *xs, axis: m.cat(xs, axis),
    lambda need, g, out, args, params: _cat_vjp(need, g, out, args, **params),
    LINEAR,
)

# indexing: integer index tensors are never differentiated
P(
    "index",
    "index",
    _index,
    lambda m, x, *idx, axis: m.index(x, idx, axis),
    lambda need, g, out, args, params: (
        [g.unindex(*args[1:], shape=args[0].shape, axis=params["axis"]) if need[0] else None] + [None] * (len(args) - 1)
    ),
    LINEAR,
)
P(
    "unindex",
    "index",
    _unindex,
    lambda m, x, *idx, shape, axis: m.unindex(x, idx, shape, axis),
    lambda need, g, out, args, params: (
        [g.index(*args[1:], axis=params["axis"]) if need[0] else None] + [None] * (len(args) - 1)
    ),
    LINEAR,
)
P(
    "gather",
    "index",
    _gather,
    lambda m, x, idx, axis: m.gather(x, idx, axis),
    per_arg(lambda g, out, x, idx, axis: g.scatter_add(idx, axis=axis, shape=x.shape), None),
    LINEAR,
)
P(
    "scatter_add",
    "index",
    _scatter_add,
    lambda m, x, idx, axis, shape: m.scatter_add(x, idx, axis, shape),
    per_arg(lambda g, out, x, idx, axis, shape: g.gather(idx, axis=axis), None),
    LINEAR,
)

# linear algebra (inv, solve, det: stacks of matrices, LAPACK through NumPy, run as glue) and sources
P(
    "inv",
    "linalg",
    _square,
    lambda m, a: m.inv(a),
    per_arg(lambda g, out, a: -_matmul_t(out).matmul(g).matmul(_matmul_t(out))),
    lambda ts, out, args, params: -out.matmul(ts[0]).matmul(out),
)
P("solve", "linalg", _solve, lambda m, a, b: m.solve(a, b), _solve_vjp, _solve_jvp)
P("det", "linalg", _det, lambda m, a: m.det(a), per_arg(_det_vjp), _det_jvp)
P(
    "matmul",
    "matmul",
    _matmul,
    lambda m, x, y: m.matmul(x, y),
    per_arg(lambda g, out, x, y: g.matmul(_matmul_t(y)), lambda g, out, x, y: _matmul_t(x).matmul(g)),
    _matmul_jvp,
)
P("const", "const", _const, lambda m, value, dtype: m.const(value, dtype))
