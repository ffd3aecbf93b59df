"""The primitive table: one row per primitive; the rows of the elementwise, reduction, movement,
indexing and product primitives (the other families add theirs from their own modules).

Contract: ``PRIMS[name]`` holds the primitive's kind, its forward expression written
against a math namespace ``m`` (NumPy for the interpreter, source strings for codegen), its
shape/dtype rule, its VJP and its JVP (tangent rule), both written in primitives of this same
table (through ``Var`` objects of a tape builder), so a derivative is again a tape that can be
printed, run, fused or differentiated again. Elementwise rows state their partial derivatives
once (``per_arg``): an elementwise Jacobian is diagonal, so the same rules give the VJP
(applied to a cotangent) and the JVP (applied to tangents, summed). Linear rows (movement,
indexing, ``sum``, ``cumsum``) are their own JVP (``LINEAR``). Dtypes inside tapes are short
names: 'b8', 'i32', 'i64', 'f32', 'f64', 'c64', 'c128'.

Complex values follow PyTorch's convention: the cotangent of a complex value is the conjugate
Wirtinger derivative of a real loss (``dL/dx + i dL/dy``), so a holomorphic row's VJP multiplies
by the conjugate of its derivative (``conj``, which adds nothing to a real tape) and its JVP by
the derivative itself (``_diagonal`` conjugates around the rule). A row whose result is real
and whose argument is complex (``abs``, ``angle``, ``real``) gets its JVP from the same rule,
as the real part of the conjugate gradient times the tangent.

Broadcasting is not handled by any row: elementwise rows require equal shapes and dtypes,
and the single ``expand`` row broadcasts (its VJP sums back).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .. import shapes as S
from ..dtypes import COMPLEX, REAL_OF
from ..shapes import TapeError

if TYPE_CHECKING:  # the builder's handles that rules compute with (tape imports this table)
    from ..tape import Var

__all__ = ["Prim", "PRIMS", "TapeError", "ELEMENTWISE", "Shape", "Params"]

Shape = tuple[int, ...]
Params = dict[str, Any]  # an instruction's literal parameters, by name
Cotangents = list["Var | None"]  # of each argument of a primitive, None where not needed
Tangents = Sequence["Var | None"]  # of each argument, None for an argument without one
Shapes = Sequence[Shape]
Dtypes = Sequence[str]
Ints = Sequence[int]
Typed = tuple[Shape, str]  # a result's shape and dtype
Infer = Callable[..., Typed]  # (shapes, dtypes, **params) -> the result's shape and dtype
Vjp = Callable[[Sequence[bool], "Var", "Var", Sequence["Var"], Params], Cotangents]
Jvp = Callable[[Tangents, "Var", Sequence["Var"], Params], "Var | None"]
Rule = Callable[..., "Var | None"]  # (g, out, *args, **params): one argument's partial, applied to g
Lower = Callable[[Sequence["Var"], Params], "Var"]  # (args, params) -> the row's value in other rows


# --- helpers the VJP rules share ---------------------------------------------------------------


def keepdim_shape(shape: Shape, axes: Ints) -> Shape:
    """``shape`` with the ``axes`` kept as size 1 (a reduction's result with ``keepdim``)."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def unreduce(g: Var, shape: Shape, axes: Ints, keepdim: bool) -> Var:
    """Broadcast a reduction's cotangent back over the reduced axes."""
    if not keepdim:
        g = g.reshape(shape=keepdim_shape(shape, axes))
    return g.expand(shape=tuple(shape))


def sum_to(g: Var, shape: Shape) -> Var:
    """The VJP of ``expand``: sum the broadcast axes back to ``shape``."""
    axes = tuple(i for i, (a, b) in enumerate(zip(shape, g.shape)) if a == 1 and b != 1)
    return g.sum(axes=axes, keepdim=True) if axes else g


def conj(v: Var) -> Var:
    """The complex conjugate of ``v``; ``v`` itself when it is real, so a real tape is unchanged."""
    return v.conj() if v.dtype in COMPLEX else v


def zeros_like(v: Var) -> Var:
    """Zeros of ``v``'s shape and dtype (a broadcast literal)."""
    return v.bld.full(0, v.shape, v.dtype)


def sole(ts: Tangents) -> Var:
    return cast("Var", ts[0])  # never None: a JVP rule runs once some tangent reaches its primitive


def _extreme_vjp(g: Var, out: Var, x: Var, axes: Ints, keepdim: bool) -> Var:
    # PyTorch spreads the cotangent evenly over ties of a full max/min/amax/amin.
    mask = x.eq(unreduce(out, x.shape, axes, keepdim)).cast(dtype=x.dtype)
    count = mask.sum(axes=axes, keepdim=True)
    gk = g if keepdim else g.reshape(shape=keepdim_shape(x.shape, axes))
    return mask * (gk / count).expand(shape=x.shape)


def _extreme_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    # the tangent averaged over ties, as the VJP spreads the cotangent over them
    t, (x,), axes, keepdim = sole(ts), args, params["axes"], params["keepdim"]
    mask = x.eq(unreduce(out, x.shape, axes, keepdim)).cast(dtype=x.dtype)
    return (t * mask).sum(axes=axes, keepdim=keepdim) / mask.sum(axes=axes, keepdim=keepdim)


def _prod_others_at_zeros(x: Var, axes: Ints) -> Var:
    """The product of the others along ``axes`` as PyTorch's prod backward takes it once a zero
    is present (exclusive cumulative products), entry by entry as IEEE multiplication gives it:
    NaN beside a NaN or beside both a zero and an infinity, a signed zero beside a zero, a
    signed infinity beside an infinity, else the product of the other magnitudes with the sign
    of the others. Reductions and element-wise steps only, so it fuses as ``out / x`` does
    (the order of the products shows only in the last bit, or where a partial product
    overflows)."""
    shape, dtype = x.shape, x.dtype
    one = x.bld.full(1, shape, dtype)

    def others(mask: Var) -> Var:  # how many of the other entries of the slice have ``mask``
        m = mask.cast(dtype=dtype)
        return unreduce(m.sum(axes=axes, keepdim=True), shape, axes, True) - m

    is0, nan = x.eq(0), x.ne(x)
    inf = x.abs().eq(x.bld.full(math.inf, shape, dtype))
    plain = is0.logical_or(nan).logical_or(inf).logical_not()
    mag = plain.where(x.abs(), one)
    magnitude = unreduce(mag.prod(axes=axes, keepdim=True), shape, axes, True) / mag
    # the sign bit, -0.0's included (1 / -0.0 is -inf)
    negative = x.lt(0).logical_or(is0.logical_and(one.div(is0.where(x, one)).lt(0)))
    sign = one - others(negative).fmod(x.bld.full(2, shape, dtype)) * 2
    zeros, infs, nans = others(is0).gt(0), others(inf).gt(0), others(nan).gt(0)
    undefined = nans.logical_or(zeros.logical_and(infs))
    nan_value, inf_value = x.bld.full(math.nan, shape, dtype), x.bld.full(math.inf, shape, dtype)
    value = zeros.where(zeros_like(x), infs.where(inf_value, magnitude))
    return undefined.where(nan_value, sign * value)


def _prod_others(x: Var, axes: Ints) -> Var:
    # PyTorch's choice, for the whole tensor: with no zero anywhere, out / x (NaN at an infinity);
    # else the product of the others (0 for a full product with two zeros or more, as its
    # backward without create_graph). The division reads 1 for x once there is a zero, so no
    # 0 / 0 reaches a second derivative.
    is0 = x.eq(0)
    every = tuple(range(len(x.shape)))
    counts = REAL_OF.get(x.dtype, x.dtype)  # zeros counted in a real dtype: CUDA orders no complex
    count = is0.cast(dtype=counts).sum(axes=every, keepdim=False)
    anyzero = count.gt(0).reshape(shape=(1,) * len(x.shape)).expand(shape=x.shape)
    safe = anyzero.where(x.bld.full(1, x.shape, x.dtype), x)
    nonzero = unreduce(safe.prod(axes=axes, keepdim=True), x.shape, axes, True) / safe
    if x.dtype in COMPLEX:  # no sign bits: the product of the nonzero others at a slice's only zero
        zeros = unreduce(is0.cast(dtype=counts).sum(axes=axes, keepdim=True), x.shape, axes, True)
        fill = is0.where(x.bld.full(1, x.shape, x.dtype), x)
        rest = unreduce(fill.prod(axes=axes, keepdim=True), x.shape, axes, True)
        at_zeros = zeros.eq(1).logical_and(is0).where(rest, zeros_like(x))
    else:
        at_zeros = _prod_others_at_zeros(x, axes)
    if tuple(axes) == every and len(x.shape):
        two = count.gt(1).reshape(shape=(1,) * len(x.shape)).expand(shape=x.shape)
        at_zeros = two.where(zeros_like(x), at_zeros)
    return anyzero.where(at_zeros, nonzero)


def _prod_vjp(g: Var, out: Var, x: Var, axes: Ints, keepdim: bool) -> Var:
    return unreduce(g, x.shape, axes, keepdim) * conj(_prod_others(x, axes))


def _prod_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    return (sole(ts) * _prod_others(args[0], params["axes"])).sum(**params)


def _matmul_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    (tx, ty), (x, y) = ts, args
    terms = [
        t for t in (tx.matmul(y) if tx is not None else None, x.matmul(ty) if ty is not None else None) if t is not None
    ]
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _pow_base(g: Var, out: Var, x: Var, y: Var) -> Var:
    c = x.bld.literal(y)
    if isinstance(c, complex):  # a complex literal exponent: real ones take the real paths
        c = c.real if c.imag == 0 else None
    if c == 0.5:  # PyTorch's x ** 0.5 is a square root: its gradient is -inf, not inf, at -0.0
        return g * 0.5 / conj(x.sqrt())
    if c is not None and c != 0:  # x ** c with a literal c: no mask needed, and c == 1, 2 need no pow
        return g * c if c == 1 else (g * conj(x * c) if c == 2 else g * c * conj(x.pow(c - 1)))
    return y.eq(0).where(zeros_like(x), g * conj(y * x.pow(y - 1)))


def _pow_exponent(g: Var, out: Var, x: Var, y: Var) -> Var:
    ye = y.real() if y.dtype in COMPLEX else y  # PyTorch's: a zero base with Re(exponent) >= 0
    return x.eq(0).logical_and(ye.ge(0)).where(zeros_like(y), g * conj(out * x.log()))


def real_result(shapes: Shapes, dtypes: Dtypes) -> Typed:
    """The shape rule of an elementwise row whose result is real (``abs``): a complex argument
    gives its real dtype."""
    return shapes[0], REAL_OF.get(dtypes[0], dtypes[0])


def _abs_vjp(g: Var, out: Var, x: Var) -> Var:
    if x.dtype not in COMPLEX:
        return g * x.sign()  # 0 at NaN: sign's
    # PyTorch's sgn: z / |z|, 0 at 0
    return g.cast(dtype=x.dtype) * out.eq(0).where(zeros_like(x), x / out.cast(dtype=x.dtype))


def _trunc(q: Var) -> Var:
    return q.sign() * q.abs().floor()


def _tie_weight(x: Var, y: Var) -> Var:
    # PyTorch's: half at a tie, none where x loses; all where either is NaN (neither loses)
    d = x.dtype
    return 1 - x.lt(y).cast(dtype=d) - x.eq(y).cast(dtype=d) * 0.5


def _cat_vjp(need: Sequence[bool], g: Var, out: Var, args: Sequence[Var], axis: int) -> Cotangents:
    res: Cotangents = []
    start = 0
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


def matrix_t(v: Var) -> Var:
    r = len(v.shape)
    return v.permute(perm=tuple(range(r - 2)) + (r - 1, r - 2))


def _inverse(perm: Ints) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


_SQRT_PI_2 = 2.0 / math.sqrt(math.pi)


# --- the table -----------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Prim:
    """One primitive: ``fwd(m, *args, **params)``, ``vjp(need, g, out, args, params)`` (the
    cotangent of each argument, None where not needed) and ``jvp(tangents, out, args, params)``
    (the tangent of the result from the arguments' tangents, None for an argument without one;
    the rule returns None when no tangent reaches the result). ``lower(args, params)``, on a row
    that has one, writes the row's value in other rows (``Var`` handles in, the result's handle
    out): a row with a derivative of its own whose value the compiled targets compute, fused,
    from simpler rows (``transform.lower``)."""

    name: str
    kind: str
    infer: Infer
    fwd: Callable[..., Any]  # (m, *args, **params), ``m`` the math namespace
    vjp: Vjp | None  # None: not differentiable
    jvp: Jvp | None
    lower: Lower | None = None

    def __repr__(self) -> str:
        return f"Prim({self.name})"


@dataclass(slots=True, eq=False, repr=False)
class PerArg:
    """A VJP of one rule per argument (``per_arg``); the rules also give elementwise JVPs."""

    rules: tuple[Rule | None, ...]

    def __call__(self, need: Sequence[bool], g: Var, out: Var, args: Sequence[Var], params: Params) -> Cotangents:
        return [r(g, out, *args, **params) if n and r is not None else None for r, n in zip(self.rules, need)]


def per_arg(*rules: Rule | None) -> PerArg:
    """Build a VJP from one rule per argument (None: not differentiable in that argument)."""
    return PerArg(rules)


def _diagonal(rules: Sequence[Rule | None]) -> Jvp:
    """The JVP of an elementwise primitive from its per-argument partials (diagonal Jacobians:
    the VJP rule applied to a tangent is that argument's JVP term)."""

    def jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var | None:
        total = None
        for r, t in zip(rules, ts):
            if r is not None and t is not None:
                if t.dtype not in COMPLEX:
                    term = r(t, out, *args, **params)
                elif out.dtype in COMPLEX:  # holomorphic: f'(z) t is the conjugate of conj(f'(z)) conj(t)
                    partial = r(t.conj(), out, *args, **params)
                    term = None if partial is None else conj(partial)
                else:  # a real result: Re(conj(G) t), G the rule's gradient of a unit cotangent
                    grad = r(out.bld.full(1, out.shape, out.dtype), out, *args, **params)
                    term = None if grad is None else (grad.conj() * t).real()
                if term is not None:  # a partial that is None contributes nothing
                    total = term if total is None else total + term
        return total

    return jvp


def _linear(name: str) -> Jvp:
    """The JVP of a primitive that is linear in its floating arguments: itself, on the tangents
    (zeros for a floating argument without one; index arguments stay as they are)."""

    def jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
        operands = [t if t is not None else (zeros_like(a) if a.dtype[0] in "fc" else a) for a, t in zip(args, ts)]
        return out.bld.emit(name, operands, params)

    return jvp


LINEAR = "linear"
PRIMS: dict[str, Prim] = {}
ELEMENTWISE = ("unary", "binary", "compare", "logical", "where", "cast")


def P(
    name: str,
    kind: str,
    infer: Infer,
    fwd: Callable[..., Any],
    vjp: Vjp | None = None,
    jvp: Jvp | str | None = None,
    lower: Lower | None = None,
) -> None:
    """Add a row to ``PRIMS`` (``jvp``: a rule, ``LINEAR``, or None: from a ``per_arg`` VJP;
    ``lower``: its value in other rows, for the compiled targets)."""
    if jvp is None and kind in ELEMENTWISE and vjp is not None:
        assert isinstance(vjp, PerArg), f"{name}: an elementwise VJP is written per argument"
        jvp = _diagonal(vjp.rules)
    elif jvp == LINEAR:
        jvp = _linear(name)
    assert not isinstance(jvp, str)
    PRIMS[name] = Prim(name, kind, infer, fwd, vjp, jvp, lower)


# elementwise unary: (m, x) -> same shape and dtype
P("neg", "unary", S.unary, lambda m, x: -x, per_arg(lambda g, out, x: -g))
P("exp", "unary", S.unary, lambda m, x: m.exp(x), per_arg(lambda g, out, x: g * conj(out)))
P("log", "unary", S.unary, lambda m, x: m.log(x), per_arg(lambda g, out, x: g / conj(x)))
P("log1p", "unary", S.unary, lambda m, x: m.log1p(x), per_arg(lambda g, out, x: g / conj(x + 1)))
P("expm1", "unary", S.unary, lambda m, x: m.expm1(x), per_arg(lambda g, out, x: g * conj(out + 1)))
P("sqrt", "unary", S.unary, lambda m, x: m.sqrt(x), per_arg(lambda g, out, x: g / conj(out * 2)))
P("sin", "unary", S.unary, lambda m, x: m.sin(x), per_arg(lambda g, out, x: g * conj(x.cos())))
P("cos", "unary", S.unary, lambda m, x: m.cos(x), per_arg(lambda g, out, x: g * -conj(x.sin())))
P("tan", "unary", S.unary, lambda m, x: m.tan(x), per_arg(lambda g, out, x: g * conj(out * out + 1)))
P("asin", "unary", S.unary, lambda m, x: m.asin(x), per_arg(lambda g, out, x: g / conj((1 - x * x).sqrt())))
P("acos", "unary", S.unary, lambda m, x: m.acos(x), per_arg(lambda g, out, x: -(g / conj((1 - x * x).sqrt()))))
P("atan", "unary", S.unary, lambda m, x: m.atan(x), per_arg(lambda g, out, x: g / conj(x * x + 1)))
P("sinh", "unary", S.unary, lambda m, x: m.sinh(x), per_arg(lambda g, out, x: g * conj(x.cosh())))
P("cosh", "unary", S.unary, lambda m, x: m.cosh(x), per_arg(lambda g, out, x: g * conj(x.sinh())))
P("tanh", "unary", S.unary, lambda m, x: m.tanh(x), per_arg(lambda g, out, x: g * conj(1 - out * out)))
P("sigmoid", "unary", S.unary, lambda m, x: m.sigmoid(x), per_arg(lambda g, out, x: g * conj((1 - out) * out)))
P("softplus", "unary", S.unary, lambda m, x: m.softplus(x), per_arg(lambda g, out, x: g * x.sigmoid()))
P("erf", "unary", S.unary, lambda m, x: m.erf(x), per_arg(lambda g, out, x: g * (-(x * x)).exp() * _SQRT_PI_2))
P("abs", "unary", real_result, lambda m, x: m.abs(x), per_arg(_abs_vjp))
P("sign", "unary", S.unary, lambda m, x: m.sign(x), per_arg(lambda g, out, x: zeros_like(g)))
P("floor", "unary", S.unary, lambda m, x: m.floor(x), per_arg(lambda g, out, x: zeros_like(g)))
P("ceil", "unary", S.unary, lambda m, x: m.ceil(x), per_arg(lambda g, out, x: zeros_like(g)))
P("round", "unary", S.unary, lambda m, x: m.round(x), per_arg(lambda g, out, x: zeros_like(g)))
P("isnan", "compare", lambda s, d: (s[0], "b8"), lambda m, x: m.isnan(x))
P("logical_not", "logical", S.logical, lambda m, x: m.logical_not(x))
P(
    "cast",
    "cast",
    S.cast,
    lambda m, x, dtype: m.cast(x, dtype),
    per_arg(lambda g, out, x, dtype: g.cast(dtype=x.dtype) if x.dtype[0] in "fc" else None),
    lambda ts, out, args, params: sole(ts).cast(dtype=out.dtype) if out.dtype[0] in "fc" else None,
)
P("detach", "unary", S.unary, lambda m, x: x)
# the value of y with the gradient path of x: an update autograd does not see (a write under
# no_grad, through detach()) keeps the old value's history; exact where x - y would round or give nan
P("splice", "binary", S.matching, lambda m, x, y: y, per_arg(lambda g, out, x, y: g, None))

# elementwise binary: equal shapes and dtypes
P("add", "binary", S.matching, lambda m, x, y: x + y, per_arg(lambda g, out, x, y: g, lambda g, out, x, y: g))
P("sub", "binary", S.matching, lambda m, x, y: x - y, per_arg(lambda g, out, x, y: g, lambda g, out, x, y: -g))
P(
    "mul",
    "binary",
    S.matching,
    lambda m, x, y: x * y,
    per_arg(lambda g, out, x, y: g * conj(y), lambda g, out, x, y: g * conj(x)),
)
P(
    "div",
    "binary",
    S.matching,
    lambda m, x, y: m.div(x, y),
    per_arg(lambda g, out, x, y: g / conj(y), lambda g, out, x, y: -g * conj(x / (y * y))),
)
P("pow", "binary", S.matching, lambda m, x, y: m.pow(x, y), per_arg(_pow_base, _pow_exponent))
P(
    "maximum",
    "binary",
    S.matching,
    lambda m, x, y: m.maximum(x, y),
    per_arg(lambda g, out, x, y: g * _tie_weight(x, y), lambda g, out, x, y: g * _tie_weight(y, x)),
)
P(
    "minimum",
    "binary",
    S.matching,
    lambda m, x, y: m.minimum(x, y),
    per_arg(lambda g, out, x, y: g * _tie_weight(y, x), lambda g, out, x, y: g * _tie_weight(x, y)),
)
P(
    "atan2",
    "binary",
    S.matching,
    lambda m, x, y: m.atan2(x, y),
    per_arg(lambda g, out, x, y: g * y / (x * x + y * y), lambda g, out, x, y: -g * x / (x * x + y * y)),
)
# x - y * floor(x / y) (the sign of y) and x - y * trunc(x / y) (the sign of x), computed exactly
P(
    "remainder",
    "binary",
    S.matching,
    lambda m, x, y: m.remainder(x, y),
    per_arg(lambda g, out, x, y: g, lambda g, out, x, y: -g * (x / y).floor()),
)
P(
    "fmod",
    "binary",
    S.matching,
    lambda m, x, y: m.fmod(x, y),
    per_arg(lambda g, out, x, y: g, lambda g, out, x, y: -g * _trunc(x / y)),
)
# the floor of x / y, exact for integers (a float quotient loses digits past 2**24 or 2**53);
# only integer operands, which are never differentiated
P("floordiv", "binary", S.matching, lambda m, x, y: m.floordiv(x, y))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    _rule = S.compare if _name in ("eq", "ne") else S.ordered
    P(_name, "compare", _rule, lambda m, x, y, _op=getattr(operator, _name): _op(x, y))  # noqa: B008
P("logical_and", "logical", S.logical, lambda m, x, y: m.logical_and(x, y))
P("logical_or", "logical", S.logical, lambda m, x, y: m.logical_or(x, y))
P(
    "where",
    "where",
    S.where,
    lambda m, c, x, y: m.where(c, x, y),
    per_arg(None, lambda g, out, c, x, y: c.where(g, zeros_like(g)), lambda g, out, c, x, y: c.where(zeros_like(g), g)),
)

# reductions and scans
P(
    "sum",
    "reduce",
    S.reduce,
    lambda m, x, axes, keepdim: m.sum(x, axes, keepdim),
    per_arg(lambda g, out, x, axes, keepdim: unreduce(g, x.shape, axes, keepdim)),
    LINEAR,
)
P("prod", "reduce", S.reduce, lambda m, x, axes, keepdim: m.prod(x, axes, keepdim), per_arg(_prod_vjp), _prod_jvp)
P("amax", "reduce", S.reduce, lambda m, x, axes, keepdim: m.amax(x, axes, keepdim), per_arg(_extreme_vjp), _extreme_jvp)
P("amin", "reduce", S.reduce, lambda m, x, axes, keepdim: m.amin(x, axes, keepdim), per_arg(_extreme_vjp), _extreme_jvp)
P("argmax", "reduce", S.arg, lambda m, x, axis, keepdim: m.argmax(x, axis, keepdim))
P("argmin", "reduce", S.arg, lambda m, x, axis, keepdim: m.argmin(x, axis, keepdim))
P("argsort", "sort", S.argsort, lambda m, x, axis, descending: m.argsort(x, axis, descending))
P(
    "cumsum",
    "scan",
    S.scan,
    lambda m, x, axis: m.cumsum(x, axis),
    per_arg(lambda g, out, x, axis: g.flip(axes=(axis,)).cumsum(axis=axis).flip(axes=(axis,))),
    LINEAR,
)

# movement
P(
    "reshape",
    "movement",
    S.reshape,
    lambda m, x, shape: m.reshape(x, shape),
    per_arg(lambda g, out, x, shape: g.reshape(shape=x.shape)),
    LINEAR,
)
P(
    "permute",
    "movement",
    S.permute,
    lambda m, x, perm: m.permute(x, perm),
    per_arg(lambda g, out, x, perm: g.permute(perm=_inverse(perm))),
    LINEAR,
)
P(
    "expand",
    "movement",
    S.expand,
    lambda m, x, shape: m.expand(x, shape),
    per_arg(lambda g, out, x, shape: sum_to(g, x.shape)),
    LINEAR,
)
P(
    "slice",
    "movement",
    S.slice,
    lambda m, x, starts, stops, steps: m.slice(x, starts, stops, steps),
    per_arg(lambda g, out, x, starts, stops, steps: g.unslice(shape=x.shape, starts=starts, stops=stops, steps=steps)),
    LINEAR,
)
P(
    "unslice",
    "movement",
    S.unslice,
    lambda m, x, shape, starts, stops, steps: m.unslice(x, shape, starts, stops, steps),
    per_arg(lambda g, out, x, shape, starts, stops, steps: g.slice(starts=starts, stops=stops, steps=steps)),
    LINEAR,
)
P(
    "flip",
    "movement",
    S.flip,
    lambda m, x, axes: m.flip(x, axes),
    per_arg(lambda g, out, x, axes: g.flip(axes=axes)),
    LINEAR,
)
P(
    "cat",
    "movement",
    S.cat,
    lambda m, *xs, axis: m.cat(xs, axis),
    lambda need, g, out, args, params: _cat_vjp(need, g, out, args, **params),
    LINEAR,
)

# indexing: integer index tensors are never differentiated
P(
    "index",
    "index",
    S.index,
    lambda m, x, *idx, axis: m.index(x, idx, axis),
    lambda need, g, out, args, params: (
        [g.unindex(*args[1:], shape=args[0].shape, axis=params["axis"]) if need[0] else None] + [None] * (len(args) - 1)
    ),
    LINEAR,
)
P(
    "unindex",
    "index",
    S.unindex,
    lambda m, x, *idx, shape, axis: m.unindex(x, idx, shape, axis),
    lambda need, g, out, args, params: (
        [g.index(*args[1:], axis=params["axis"]) if need[0] else None] + [None] * (len(args) - 1)
    ),
    LINEAR,
)
P(
    "gather",
    "index",
    S.gather,
    lambda m, x, idx, axis: m.gather(x, idx, axis),
    per_arg(lambda g, out, x, idx, axis: g.scatter_add(idx, axis=axis, shape=x.shape), None),
    LINEAR,
)
P(
    "scatter_add",
    "index",
    S.scatter_add,
    lambda m, x, idx, axis, shape: m.scatter_add(x, idx, axis, shape),
    per_arg(lambda g, out, x, idx, axis, shape: g.gather(idx, axis=axis), None),
    LINEAR,
)
# a value check: the operand itself once every element passes PyTorch's test for its use
# (``test``: a divisor has no zero, an index_select index or a class target lies in
# [0, bound), a target may also be ``ignore``, a mask's running count ends at ``bound``, the
# rows of the value it assigns), else PyTorch's error, raised when the program
# runs. Recorded where the values are not known yet (under ngrad.compile); integer operands
# only, so never differentiated; a glue step on every target, so no kernel reads out of bounds
P("require", "require", S.require, lambda m, x, **params: m.require(x, **params))

# products and sources
P(
    "matmul",
    "matmul",
    S.matmul,
    lambda m, x, y: m.matmul(x, y),
    per_arg(lambda g, out, x, y: g.matmul(conj(matrix_t(y))), lambda g, out, x, y: conj(matrix_t(x)).matmul(g)),
    _matmul_jvp,
)
P("const", "const", S.const, lambda m, value, dtype: m.const(value, dtype))
