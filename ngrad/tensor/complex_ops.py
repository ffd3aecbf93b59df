"""Complex numbers as methods of ``Tensor`` (``real``, ``imag``, ``conj``, ``angle``, ``sgn``,
``is_complex``...) and the free functions ``ngrad.complex``, ``ngrad.polar``,
``ngrad.view_as_real``, ``ngrad.view_as_complex`` and the dtypes ``ngrad.complex64``
(``cfloat``) and ``ngrad.complex128`` (``cdouble``).

Contract: a mixin of ``Tensor``; every method records through ``record`` or the free
functions, with PyTorch's errors for bad input and its ``grad_fn`` names. Gradients of complex
values follow PyTorch's convention (the conjugate Wirtinger derivative: the ``.grad`` of a
complex leaf ``z = x + iy`` under a real loss ``L`` is ``dL/dx + i dL/dy``; see docs/complex.md).
Operations PyTorch refuses for complex tensors raise its error (``COMPLEX_REFUSED`` in
``record``). ``FUNCTIONS`` names the methods ``ngrad`` also exports as functions
(``ngrad.name(input, ...)``); ``__all__`` the free functions it exports as they are.
"""

from ..autograd.meta import name_node
from ..engine.ir import dtypes as D
from .functions import where
from .record import COMPLEX_REFUSED, TORCH_NAME, broadcast_shapes, float_node, operands, record_op, to_tensor
from .views import make_view

__all__ = [
    "complex",
    "polar",
    "view_as_real",
    "view_as_complex",
    "complex64",
    "complex128",
    "cfloat",
    "cdouble",
    "is_complex",
    "get_default_complex_dtype",
    "real",
    "imag",
    "vdot",
]
FUNCTIONS = ["conj", "conj_physical", "resolve_conj", "is_conj", "angle", "sgn"]

complex64 = cfloat = D.complex64
complex128 = cdouble = D.complex128
get_default_complex_dtype = D.get_default_complex_dtype


def _not_implemented(kernel):
    def refuse(dtype):
        return NotImplementedError(f"\"{kernel}\" not implemented for '{TORCH_NAME[dtype.short]}'")

    return refuse


def _fixed(kind, text):
    return lambda dtype: kind(text)


# PyTorch's error for each primitive it has no complex kernel for (the facade's composites reach
# one of these first: relu and clamp their maximum, sort its argsort)
COMPLEX_REFUSED.update(
    {
        "sign": _fixed(
            NotImplementedError,
            "Unlike NumPy, torch.sign is not intended to support complex numbers. Please use torch.sgn instead.",
        ),
        "floor": _fixed(NotImplementedError, "floor is not supported for complex inputs"),
        "ceil": _fixed(NotImplementedError, "ceil is not supported for complex inputs"),
        "round": _not_implemented("round_vml_cpu"),
        "erf": _not_implemented("erf_vml_cpu"),
        "softplus": _not_implemented("softplus_cpu"),
        "maximum": _fixed(RuntimeError, "maximum not implemented for complex tensors."),
        "minimum": _fixed(RuntimeError, "minimum not implemented for complex tensors."),
        "atan2": _not_implemented("atan2_cpu"),
        "remainder": _not_implemented("remainder_cpu"),
        "fmod": _not_implemented("fmod_cpu"),
        "floordiv": _not_implemented("div_floor_cpu"),
        "amax": _not_implemented("max_values_cpu"),
        "amin": _not_implemented("min_values_cpu"),
        "argmax": _fixed(RuntimeError, "argmax(): does not support complex input"),
        "argmin": _fixed(RuntimeError, "argmin(): does not support complex input"),
        "argsort": _fixed(RuntimeError, " Sort does not support complex dtypes on CPU"),
        "lt": _not_implemented("lt_cpu"),
        "le": _not_implemented("le_cpu"),
        "gt": _not_implemented("gt_cpu"),
        "ge": _not_implemented("ge_cpu"),
    }
)


def is_complex(input):
    """Whether ``input``'s dtype is complex (``complex64`` or ``complex128``).

    ```python
    >>> import ngrad
    >>> ngrad.is_complex(ngrad.tensor([1j])), ngrad.is_complex(ngrad.tensor([1.0]))
    (True, False)

    ```
    """
    return input.dtype.is_complex


def real(input):
    """``input.real``: the real part of a complex tensor (a view), a real tensor itself."""
    return input.real


def imag(input):
    """``input.imag``: the imaginary part of a complex tensor (a view)."""
    return input.imag


def vdot(input, other):
    """The dot product of two 1-D tensors with the first conjugated: ``sum(conj(input) * other)``.

    ```python
    >>> import ngrad
    >>> ngrad.vdot(ngrad.tensor([1j, 2]), ngrad.tensor([1j, 1]))
    tensor(3.+0.j)

    ```
    """
    input, other = to_tensor(input), to_tensor(other)
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors")
    return input.conj().dot(other)


def complex(real, imag):
    """The complex tensor ``real + i imag`` from two real tensors of the same floating dtype
    (``float32`` gives ``complex64``, ``float64`` ``complex128``), broadcast together.

    ```python
    >>> import ngrad
    >>> ngrad.complex(ngrad.tensor([1.0, 2.0]), ngrad.tensor([0.5, -1.0]))
    tensor([1.+0.5000j, 2.-1.0000j])

    ```
    """
    real, imag = to_tensor(real), to_tensor(imag)
    a, b = real.dtype, imag.dtype
    if not (a.is_floating_point and b.is_floating_point):
        raise RuntimeError(
            f"Expected both inputs to be Half, Float or Double tensors but got {TORCH_NAME[a.short]} and "
            f"{TORCH_NAME[b.short]}"
        )
    if a is not b:
        raise RuntimeError(
            f"Expected object of scalar type {TORCH_NAME[a.short]} but got scalar type {TORCH_NAME[b.short]} "
            "for second argument"
        )
    na, nb, _ = operands(real, imag)
    shape = na.shape if na.shape == nb.shape else broadcast_shapes(na.shape, nb.shape)
    return record_op("complex", (na, nb), None, shape, a.to_complex(), "ComplexBackward0")


def polar(abs, angle):
    """The complex tensor ``abs * (cos(angle) + i sin(angle))`` from two real tensors of the same
    floating dtype.

    ```python
    >>> import math, ngrad
    >>> ngrad.polar(ngrad.tensor([2.0]), ngrad.tensor([math.pi / 2]))
    tensor([-8.7423e-08+2.j])

    ```
    """
    abs, angle = to_tensor(abs), to_tensor(angle)
    complex(abs, angle)  # PyTorch's checks of the two dtypes
    out = complex(abs * angle.cos(), abs * angle.sin())
    if out._node.requires_grad:
        name_node(out._node, "PolarBackward0")
    return out


def view_as_real(input):
    """The complex tensor ``input`` as a real one with a last dimension of 2 (real, imaginary).

    ```python
    >>> import ngrad
    >>> ngrad.view_as_real(ngrad.tensor([1 + 2j, 3j]))
    tensor([[1., 2.],
            [0., 3.]])

    ```
    """
    n = input._node
    if not n.dtype.is_complex:
        raise RuntimeError("view_as_real is only supported for complex tensors")
    out = record_op("view_as_real", (n,), None, n.shape + (2,), n.dtype.to_real(), "ViewAsRealBackward0")
    make_view(input, out)
    return out


def view_as_complex(input):
    """The real tensor ``input``, whose last dimension is 2 (real, imaginary), as a complex one.

    ```python
    >>> import ngrad
    >>> ngrad.view_as_complex(ngrad.tensor([[1.0, 2.0], [0.0, 3.0]]))
    tensor([1.+2.j, 0.+3.j])

    ```
    """
    n = input._node
    if not n.dtype.is_floating_point:
        raise RuntimeError(
            "view_as_complex is only supported for half, float and double tensors, but got a tensor of "
            f"scalar type: {TORCH_NAME[n.dtype.short]}"
        )
    if not n.shape or n.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    out = record_op("view_as_complex", (n,), None, n.shape[:-1], n.dtype.to_complex(), "ViewAsComplexBackward0")
    make_view(input, out)
    return out


class ComplexOps:
    """Complex numbers methods, a mixin of ``Tensor``."""

    __slots__ = ()

    def is_complex(self):
        """Whether this tensor's dtype is complex."""
        return self._node.dtype.is_complex

    @property
    def real(self):
        """The real part (a real tensor; a real tensor's is itself).

        ```python
        >>> import ngrad
        >>> ngrad.tensor([1 + 2j]).real
        tensor([1.])

        ```
        """
        n = self._node
        if not n.dtype.is_complex:
            return self
        return record_op("real", (n,), None, n.shape, n.dtype.to_real(), "RealBackward0")

    @property
    def imag(self):
        """The imaginary part (a real tensor); PyTorch's error for a real tensor.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([1 + 2j]).imag
        tensor([2.])

        ```
        """
        n = self._node
        if not n.dtype.is_complex:
            raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
        return record_op("imag", (n,), None, n.shape, n.dtype.to_real(), "ImagBackward0")

    @real.setter
    def real(self, value):
        self.real.copy_(value)  # a write through the view: the tensor's real part becomes value

    @imag.setter
    def imag(self, value):
        self.imag.copy_(value)

    def conj(self):
        """The complex conjugate (a real tensor's is itself); ``is_conj()`` is True on the
        result, as on PyTorch's lazily conjugated view.

        ```python
        >>> import ngrad
        >>> z = ngrad.tensor([1 + 2j]).conj()
        >>> z, z.is_conj()
        (tensor([1.-2.j]), True)

        ```
        """
        n = self._node
        if not n.dtype.is_complex:
            return self
        out = record_op("conj", (n,), None, n.shape, n.dtype, "ConjBackward0")
        out._conj = True
        return out

    def conj_physical(self):
        """The complex conjugate, computed (``is_conj()`` is False); a real tensor's is a copy."""
        n = self._node
        if not n.dtype.is_complex:
            return self.clone()
        return record_op("conj", (n,), None, n.shape, n.dtype, "ConjPhysicalBackward0")

    def resolve_conj(self):
        """This tensor with its conjugate bit resolved: a new tensor when ``is_conj()``, else itself."""
        if not self.is_conj():
            return self
        return self.clone()

    def is_conj(self):
        """Whether this tensor is a conjugate made by ``conj()`` (PyTorch's conjugate bit)."""
        return self.__dict__.get("_conj", False)

    def angle(self):
        """The argument of each element, ``atan2(imag, real)`` (real: 0 or pi; integers give the
        default float).

        ```python
        >>> import ngrad
        >>> ngrad.tensor([1j, -1.0 + 0j]).angle()
        tensor([1.5708, 3.1416])

        ```
        """
        n = float_node(self._node)
        return record_op("angle", (n,), None, n.shape, n.dtype.to_real(), "AngleBackward0")

    def sgn(self):
        """``z / |z|`` (0 at 0) for a complex tensor; the sign for a real one.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([3 + 4j, 0j]).sgn()
        tensor([0.6000+0.8000j, 0.0000+0.0000j])

        ```
        """
        if not self._node.dtype.is_complex:
            return self.sign()
        a = self.abs()
        zero = a == 0
        out = where(zero, 0.0, self / where(zero, 1.0, a))
        if out._node.requires_grad:
            name_node(out._node, "SgnBackward0")
        return out
