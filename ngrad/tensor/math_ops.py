"""Arithmetic, comparison, logic and elementwise math of ``Tensor``.

Contract: a mixin of ``Tensor``. Binary operators promote types and broadcast as PyTorch does
(``record.binary``/``operands``); integer operands of floating-point math are promoted to the
default float; each node that requires grad carries PyTorch's grad_fn name.
"""

import math

import numpy as np

from .. import grad_mode as _grad_mode
from ..engine.ir import dtypes as D
from ..engine.ir.graph import Node, source
from .functions import matmul, pow, where
from .record import (
    TORCH_NAME,
    TensorBase,
    binary,
    broadcast_shapes,
    category,
    compare,
    const_node,
    float_binary,
    float_node,
    host_value,
    named,
    operands,
    record_op,
    to_tensor,
    unary,
    value_on,
    wrap,
)

_gm = _grad_mode.state


def _refuse_bool_sub(t, other):
    """PyTorch refuses ``-`` with a bool operand (``~`` or ``^`` is what is meant)."""
    if t.dtype is D.bool_ and isinstance(other, TensorBase) and other.dtype is D.bool_:
        raise RuntimeError(
            "Subtraction, the `-` operator, with two bool tensors is not supported. "
            "Use the `^` or `logical_xor()` operator instead."
        )
    raise RuntimeError(
        "Subtraction, the `-` operator, with a bool tensor is not supported. "
        "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
    )


def require(t, test, bound=0, ignore=0, rest=()):
    """Integer tensor ``t`` with a value check recorded before its use: the ``require``
    primitive, which raises PyTorch's error when the program runs if an element fails ``test``
    (``"divisor"``: a zero; ``"index_select"``, ``"index_select_dim1"``: outside ``[0, bound)``;
    ``"target"``: outside ``[0, bound)`` and not ``ignore``; ``"mask_count"``: a mask's running
    count less one, whose last entry + 1 must be ``bound``, the rows of a value of trailing shape
    ``rest``). For values that do not exist yet, under ``ngrad.compile``; elsewhere the facade
    reads the values and raises at once.

    ```python
    >>> import ngrad
    >>> f = ngrad.compile(lambda a, b: a // b)
    >>> f(ngrad.tensor([7, 8]), ngrad.tensor([2, 3]))
    tensor([3, 2])
    >>> f(ngrad.tensor([7, 8]), ngrad.tensor([2, 0]))
    Traceback (most recent call last):
    ...
    RuntimeError: ZeroDivisionError

    ```
    """
    n = t._node
    params = {"test": test} if test == "divisor" else {"test": test, "bound": bound, "ignore": ignore}
    if rest:
        params["rest"] = tuple(rest)
    return record_op("require", (n,), params, n.shape, n.dtype, None)


def check_divisor(a, b):
    """``b``, once checked for an integer division (``//``, ``%``, ``fmod``, ``div`` with a
    rounding mode) of ``a`` by it: PyTorch raises for a zero, where the hardware result is
    garbage. Only integer divisions pay for it; a divisor tensor is realized here, since its
    values decide, except under ``ngrad.compile``, where they do not exist yet and ``b`` comes
    back wrapped in a ``require`` step that checks them when the program runs. Floating-point
    division by zero gives inf or nan, as in PyTorch."""
    if b.__class__ is int and b:  # the common case, a nonzero Python int: nothing to check
        return b
    ca = a.dtype.category if isinstance(a, TensorBase) else category(a)
    cb = b.dtype.category if isinstance(b, TensorBase) else category(b)
    if ca is None or cb is None or ca == 2 or cb == 2:
        return b
    if isinstance(b, TensorBase):
        if _gm.trace is not None:
            return require(b, "divisor")
        zero = not host_value(b).all()
    else:
        zero = b == 0
    if zero:
        raise RuntimeError("ZeroDivisionError")
    return b


class MathOps:
    """Arithmetic, comparison, logic and elementwise math, a mixin of ``Tensor``."""

    __slots__ = ()

    # arithmetic ---------------------------------------------------------------------------------
    def __add__(self, other):
        return binary("add", self, other, "AddBackward0")

    def __radd__(self, other):
        return binary("add", self, other, "AddBackward0", reverse=True)

    def __sub__(self, other):
        if self._node.dtype is D.bool_ or isinstance(other, TensorBase) and other._node.dtype is D.bool_:
            _refuse_bool_sub(self, other)
        return binary("sub", self, other, "SubBackward0")

    def __rsub__(self, other):
        if self._node.dtype is D.bool_:
            _refuse_bool_sub(self, other)
        return binary("sub", self, other, "RsubBackward1", reverse=True)

    def __mul__(self, other):
        return binary("mul", self, other, "MulBackward0")

    def __rmul__(self, other):
        return binary("mul", self, other, "MulBackward0", reverse=True)

    def __truediv__(self, other):
        if type(other) in (float, int) and other and is_pow2(other):
            # x / 2**k == x * 2**-k exactly (both round the same real once), and a multiplication
            # vectorises where a division costs 5-10x more
            return binary("mul", self, 1.0 / other, "DivBackward0")
        return float_binary("div", self, other, "DivBackward0")

    def __rtruediv__(self, other):
        return float_binary("div", self, other, "DivBackward0", reverse=True)

    def __pow__(self, exponent):
        return pow(self, exponent)

    def __rpow__(self, base):
        n, e, d = operands(self, base)
        return record_op("pow", (e, n), None, n.shape, d, "PowBackward2")

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(to_tensor(other), self)

    def __neg__(self):
        if self.dtype is D.bool_:
            raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported.")
        n = self._node
        return record_op("neg", (n,), None, n.shape, n.dtype, "NegBackward0")

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def add(self, other, *, alpha=1):
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, *, alpha=1):
        return self - (other * alpha if alpha != 1 else other)

    def mul(self, other):
        return self * other

    multiply = mul

    def div(self, other, *, rounding_mode=None):
        if rounding_mode is None:
            return self / other
        if rounding_mode not in ("trunc", "floor"):
            raise RuntimeError(
                f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'"
            )
        other = check_divisor(self, other)
        if operands(self, other)[2].category == 1:
            # integers: exact, where a float quotient loses digits past 2**24 (float32) or 2**53.
            # x - fmod(x, y) is a multiple of y, so its floor quotient is the truncated one
            if rounding_mode == "trunc":
                return binary("floordiv", self - binary("fmod", self, other, "FmodBackward0"), other, "DivBackward0")
            return binary("floordiv", self, other, "DivBackward0")
        q = self / other
        if rounding_mode == "floor":
            q = q.floor()
        else:
            q = q.sign() * q.abs().floor()
        na, _, d = operands(self, other)
        return q.to(d) if not d.is_floating_point else q

    divide = true_divide = div

    def pow(self, exponent):
        return pow(self, exponent)

    def neg(self):
        return -self

    negative = neg

    def __floordiv__(self, other):
        return self.div(other, rounding_mode="floor")

    def __rfloordiv__(self, other):
        return to_tensor(other).div(self, rounding_mode="floor")

    def floor_divide(self, other):
        """``self // other``: the quotient rounded down (exact for integers), as PyTorch's."""
        return self.div(other, rounding_mode="floor")

    def remainder(self, other):
        """``self - other * floor(self / other)``, computed exactly: the sign of ``other`` (Python's
        ``%``). The gradient is 1 in ``self`` and ``-floor(self / other)`` in ``other``.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([-7.5, 7.5]) % 2, ngrad.tensor([-7.5, 7.5]).fmod(2)
        (tensor([0.5000, 1.5000]), tensor([-1.5000,  1.5000]))

        ```
        """
        other = check_divisor(self, other)
        return binary("remainder", self, other, "RemainderBackward0")

    def __mod__(self, other):
        return self.remainder(other)

    def __rmod__(self, other):
        divisor = check_divisor(other, self)
        return binary("remainder", divisor, other, "RemainderBackward0", reverse=True)

    def fmod(self, other):
        """``self - other * trunc(self / other)``, computed exactly: the sign of ``self`` (C's
        ``fmod``). The gradient is 1 in ``self`` and ``-trunc(self / other)`` in ``other``."""
        other = check_divisor(self, other)
        return binary("fmod", self, other, "FmodBackward0")

    def addcmul(self, tensor1, tensor2, *, value=1):
        """``self + value * tensor1 * tensor2``, evaluated left to right as PyTorch does."""
        one = isinstance(value, (int, float)) and value == 1
        return self + (tensor1 * tensor2 if one else value * tensor1 * tensor2)

    def addcdiv(self, tensor1, tensor2, *, value=1):
        """``self + value * tensor1 / tensor2``, evaluated left to right as PyTorch does."""
        one = isinstance(value, (int, float)) and value == 1
        return self + (tensor1 / tensor2 if one else value * tensor1 / tensor2)

    def lerp(self, end, weight):
        """``self + weight * (end - self)`` (for a number ``weight >= 0.5``, ``end - (end - self) *
        (1 - weight)``, PyTorch's more accurate form there)."""
        if isinstance(weight, (int, float)) and weight >= 0.5:
            return end - (end - self) * (1 - weight)
        return self + weight * (end - self)

    # comparisons and logic --------------------------------------------------------------------------
    def __lt__(self, other):
        return compare("lt", self, other)

    def __le__(self, other):
        return compare("le", self, other)

    def __gt__(self, other):
        return compare("gt", self, other)

    def __ge__(self, other):
        return compare("ge", self, other)

    def __eq__(self, other):
        if other is None:
            return False
        return compare("eq", self, other)

    def __ne__(self, other):
        if other is None:
            return True
        return compare("ne", self, other)

    lt, le, gt, ge, eq, ne = __lt__, __le__, __gt__, __ge__, __eq__, __ne__
    less, less_equal, greater, greater_equal, not_equal = lt, le, gt, ge, ne

    def _logical(self, op, other):
        other = to_tensor(other)
        if self.dtype.is_floating_point or other.dtype.is_floating_point:
            kernel = {"logical_and": "bitwise_and", "logical_or": "bitwise_or", "ne": "bitwise_xor"}[op]
            name = TORCH_NAME[D.promote(self.dtype, other.dtype).short]
            raise NotImplementedError(f"\"{kernel}_cpu\" not implemented for '{name}'")
        if self.dtype is not D.bool_ or other.dtype is not D.bool_:
            raise TypeError(f"{op} is only supported on bool tensors here, got {self.dtype} and {other.dtype}")
        a, b = self._node, other._node
        return wrap(Node(op, (a, b), None, broadcast_shapes(a.shape, b.shape), D.bool_))

    def __and__(self, other):
        return self._logical("logical_and", other)

    def __or__(self, other):
        return self._logical("logical_or", other)

    def __xor__(self, other):
        return self._logical("ne", other)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __invert__(self):
        if self.dtype.is_floating_point:
            raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
        if self.dtype is not D.bool_:
            raise TypeError("~ is only supported on bool tensors here")
        return self.logical_not()

    def logical_not(self):
        n = self._node if self.dtype is D.bool_ else (self != 0)._node
        return wrap(Node("logical_not", (n,), None, n.shape, D.bool_))

    def logical_and(self, other):
        return self.bool()._logical("logical_and", to_tensor(other).bool())

    def logical_or(self, other):
        return self.bool()._logical("logical_or", to_tensor(other).bool())

    def isnan(self):
        n = self._node
        if not n.dtype.differentiable:
            return (
                wrap(source(value_on(np.zeros(n.shape, bool), n.device), D.bool_))
                if n.value is not None
                else self != self
            )
        return wrap(Node("isnan", (n,), None, n.shape, D.bool_))

    def any(self, dim=None, keepdim=False):
        return self.bool().long().sum(dim, keepdim=keepdim) > 0

    def all(self, dim=None, keepdim=False):
        return self.logical_not().long().sum(dim, keepdim=keepdim) == 0

    # elementwise math ---------------------------------------------------------------------------------
    def log2(self):
        return named(self.log() * (1 / math.log(2)), "Log2Backward0")

    def log10(self):
        return named(self.log() * (1 / math.log(10)), "Log10Backward0")

    def rsqrt(self):
        return named(1 / self.sqrt(), "RsqrtBackward0")

    def reciprocal(self):
        return named(1 / wrap(float_node(self._node)), "ReciprocalBackward0")

    def square(self):
        return named(self * self, "PowBackward0")

    def relu(self):
        """``max(x, 0)`` as PyTorch: NaN stays NaN (gradient 1, so divergence shows), -0.0 stays
        -0.0, and the gradient at 0 is 0."""
        if not self.dtype.is_floating_point:
            n = self._node
            zero = const_node(0, n.dtype)
            mask = Node("gt", (n, zero), None, n.shape, D.bool_)
            return record_op("where", (mask, n, zero), None, n.shape, n.dtype, "ReluBackward0")
        # NaN <= 0 is false, so NaN passes; x * 0 at +-0 keeps the sign of zero with a zero gradient
        out = where(self <= 0, where(self < 0, 0.0, self * 0), self)
        return named(out, "ReluBackward0")

    def softplus(self, beta=1.0, threshold=20.0):
        x = self if beta == 1 else self * beta
        n = float_node(x._node)
        soft = record_op("softplus", (n,), None, n.shape, n.dtype, "SoftplusBackward0")
        if beta != 1:
            soft = soft / beta
        return named(where(x > threshold, self, soft), "SoftplusBackward0")

    def abs(self):
        n = self._node
        return record_op("abs", (n,), None, n.shape, n.dtype.to_real(), "AbsBackward0")

    absolute = abs

    def sign(self):
        n = self._node
        return record_op("sign", (n,), None, n.shape, n.dtype, "SignBackward0")

    def _rounding(self, op, name):
        n = self._node
        if n.dtype.category < 2:
            return self.clone()
        return record_op(op, (n,), None, n.shape, n.dtype, name)

    def floor(self):
        return self._rounding("floor", "FloorBackward0")

    def ceil(self):
        return self._rounding("ceil", "CeilBackward0")

    def round(self):
        return self._rounding("round", "RoundBackward0")

    def maximum(self, other):
        return binary("maximum", self, to_tensor(other), "MaximumBackward0")

    def minimum(self, other):
        return binary("minimum", self, to_tensor(other), "MinimumBackward0")

    def clamp(self, min=None, max=None):
        """Clamp into ``[min, max]``; the gradient passes where ``min <= x <= max`` (bounds inclusive)."""
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        # nested wheres, not maximum/minimum: the bounds are inclusive for the gradient
        out = self
        if min is not None:
            out = where(out < min, min, out)
        if max is not None:
            out = where(out > max, max, out)
        if self.dtype.is_floating_point:  # NaN stays NaN with no gradient, as PyTorch's
            out = where(self != self, self.detach(), out)
        return named(out, "ClampBackward1")

    clip = clamp

    def clamp_min(self, min):
        return self.clamp(min=min)

    def clamp_max(self, max):
        return self.clamp(max=max)

    def masked_fill(self, mask, value):
        """``value`` where the boolean ``mask`` (broadcast to this shape) is True; the gradient
        flows only where it is False (and into a tensor ``value`` from where it is True)."""
        mask = to_tensor(mask)
        if mask.dtype is not D.bool_:
            raise RuntimeError(
                f"masked_fill_ only supports boolean masks, but got mask with dtype "
                f"{TORCH_NAME[mask.dtype.short].lower()}"
            )
        if isinstance(value, TensorBase):
            if value.ndim:
                raise RuntimeError(
                    f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                    f"{value.ndim} dimension(s)."
                )
            value = value.to(self.dtype)
        out = where(mask, value, self)
        return out if out.shape == self.shape else out.expand(self.shape)  # a mask may not widen it

    def atan2(self, other):
        """The angle of the point (``other``, ``self``): ``atan(self / other)`` in the right quadrant."""
        return float_binary("atan2", self, other, "Atan2Backward0")

    arctan2 = atan2

    def logaddexp(self, other):
        """``log(exp(self) + exp(other))`` without overflow."""
        a, b = (self, to_tensor(other)) if self.dtype.is_floating_point else (self.float(), to_tensor(other))
        m = a.maximum(b)
        r = m + (-(a - b).abs()).exp().log1p()
        return where((m.abs() == math.inf) & (a == b), m, r)  # inf and inf, -inf and -inf: no inf - inf

    def exp2(self):
        return 2.0**self

    def trunc(self):
        """Rounded toward zero (the gradient is 0, as for ``floor``)."""
        # floor or ceil, not sign * floor(abs): keeps -0.0 and NaN as PyTorch does, gradient 0 at NaN
        return self.clone() if self.dtype.category < 2 else where(self < 0, self.ceil(), self.floor())

    fix = trunc

    def frac(self):
        """``self - trunc(self)`` (the gradient is 1)."""
        return self - self.trunc().detach()

    def isinf(self):
        if self.dtype.is_complex:
            return self.real.isinf() | self.imag.isinf()
        return self.abs() == math.inf if self.dtype.is_floating_point else self != self

    def isfinite(self):
        if self.dtype.is_complex:
            return self.real.isfinite() & self.imag.isfinite()
        return (self - self) == 0 if self.dtype.is_floating_point else self == self

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (the dtype's largest
        and lowest finite values by default); the gradient is zero where they were."""
        if self.dtype.is_complex:  # each part on its own, without a gradient (PyTorch's)
            if self.requires_grad and _gm.enabled:
                raise RuntimeError(
                    "nan_to_num does not support automatic differentiation for outputs with complex dtype."
                )
            parts = (self.real.nan_to_num(nan, posinf, neginf), self.imag.nan_to_num(nan, posinf, neginf))
            return record_op("complex", tuple(p._node for p in parts), None, self.shape, self.dtype, None)
        if not self.dtype.is_floating_point:
            return self.clone()
        info = np.finfo(self.dtype.np)
        posinf = float(info.max) if posinf is None else posinf
        neginf = float(info.min) if neginf is None else neginf
        return where(self.isnan(), nan, where(self == math.inf, posinf, where(self == -math.inf, neginf, self)))

    def equal(self, other):
        """True when shapes and all values are equal (a Python bool)."""
        return self.shape == other.shape and bool((self == other).all())


def is_pow2(v):
    m, e = math.frexp(v)
    return abs(m) == 0.5 and -100 < e < 100  # 2**-e is exact and normal in float32 too


_UNARY = {
    "exp": "ExpBackward0",
    "log": "LogBackward0",
    "log1p": "Log1PBackward0",
    "expm1": "Expm1Backward0",
    "sqrt": "SqrtBackward0",
    "sin": "SinBackward0",
    "cos": "CosBackward0",
    "tan": "TanBackward0",
    "asin": "AsinBackward0",
    "acos": "AcosBackward0",
    "atan": "AtanBackward0",
    "sinh": "SinhBackward0",
    "cosh": "CoshBackward0",
    "tanh": "TanhBackward0",
    "sigmoid": "SigmoidBackward0",
    "erf": "ErfBackward0",
}


def _unary_method(op, name):
    def method(self):
        return unary(op, self, name)

    method.__name__ = method.__qualname__ = op
    method.__doc__ = f"Elementwise ``{op}`` (integer tensors are promoted to the default float)."
    return method


for _op, _name in _UNARY.items():
    setattr(MathOps, _op, _unary_method(_op, _name))
MathOps.arcsin, MathOps.arccos, MathOps.arctan = MathOps.asin, MathOps.acos, MathOps.atan
