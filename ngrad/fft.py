"""``ngrad.fft``: PyTorch's ``torch.fft`` (discrete Fourier transforms with their derivatives).

Contract: every transform takes PyTorch's arguments (``n``/``s`` sizes: an operand is trimmed or
zero-padded to them; ``dim``; ``norm`` "backward", "ortho" or "forward") and raises its errors;
integer inputs are promoted to the default dtype, real inputs of complex transforms to complex.
Each records one of the primitive table's three FFT rows (``fftn``, ``rfftn``, ``irfftn``; see
``ngrad/engine/ir/prims/fft.py``), with PyTorch's gradients; ``hfft``/``ihfft`` and their n-d
forms are conjugates of ``irfft``/``rfft``, as NumPy defines them. docs/fft.md has the details.

```python
>>> import ngrad
>>> x = ngrad.tensor([1.0, 2.0, 0.0, -1.0], requires_grad=True)
>>> X = ngrad.fft.rfft(x)
>>> X
tensor([2.+0.j, 1.-3.j, 0.+0.j], grad_fn=<FftR2CBackward0>)
>>> (X.abs() ** 2).sum().backward()
>>> x.grad
tensor([ 6., 10.,  2., -2.])

```
"""

from .engine.ir import dtypes as D
from .factories import arange
from .tensor.record import TORCH_NAME, normalize_dim, record_op, to_tensor

__all__ = [
    "fft",
    "ifft",
    "fft2",
    "ifft2",
    "fftn",
    "ifftn",
    "rfft",
    "irfft",
    "rfft2",
    "irfft2",
    "rfftn",
    "irfftn",
    "hfft",
    "ihfft",
    "hfft2",
    "ihfft2",
    "hfftn",
    "ihfftn",
    "fftfreq",
    "rfftfreq",
    "fftshift",
    "ifftshift",
]

_NORMS = ("backward", "ortho", "forward")
_DUAL = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def _norm(norm):
    norm = "backward" if norm is None else norm
    if norm not in _NORMS:
        raise RuntimeError(f'Invalid normalization mode: "{norm}"')
    return norm


def _dims_and_sizes(x, s, dim, default_all):
    """PyTorch's ``s``/``dim`` of an n-dimensional transform: normalized dims and their sizes."""
    ndim = x.ndim
    if dim is not None:
        dims = [dim] if isinstance(dim, int) else list(dim)
        dims = [normalize_dim(d, ndim) for d in dims]
        if len(set(dims)) != len(dims):
            raise RuntimeError("FFT dims must be unique")
        if s is not None and len(s) != len(dims):
            raise RuntimeError("When given, dim and shape arguments must have the same length")
    elif s is not None:
        if len(s) > ndim:
            raise RuntimeError(f"Got shape with {len(s)} values but input tensor only has {ndim} dimensions.")
        dims = list(range(ndim - len(s), ndim))
    else:
        dims = list(range(ndim)) if default_all else [normalize_dim(-2, ndim), normalize_dim(-1, ndim)]
    sizes = [x.shape[d] if s is None or s[k] == -1 else s[k] for k, d in enumerate(dims)]
    for n in sizes:
        if n < 1:
            raise RuntimeError(f"Invalid number of data points ({n}) specified")
    return dims, sizes


def _resized(x, dims, sizes):
    """``x`` trimmed or zero-padded at the end of each of ``dims`` to ``sizes`` (PyTorch's n/s)."""
    for d, n in zip(dims, sizes):
        m = x.shape[d]
        if n < m:
            x = x.narrow(d, 0, n)
        elif n > m:
            shape = list(x.shape)
            shape[d] = n - m
            x = _cat(x, x.new_zeros(shape), d)
    return x


def _cat(a, b, d):
    from .tensor import cat

    return cat([a, b], d)


def _complex_input(x):
    x = to_tensor(x)
    d = x.dtype
    if d.is_complex:
        return x
    return x.to((d if d.is_floating_point else D.get_default_dtype()).to_complex())


def _real_input(x, name):
    x = to_tensor(x)
    d = x.dtype
    if d.is_complex:
        raise RuntimeError(f"{name} expects a real input tensor, but got {TORCH_NAME[d.short]}")
    return x if d.is_floating_point else x.to(D.get_default_dtype())


def _c2c(input, s, dim, norm, inverse, default_all=True):
    x = _complex_input(input)
    dims, sizes = _dims_and_sizes(x, s, dim, default_all)
    x = _resized(x, dims, sizes)
    n = x._node
    params = {"axes": tuple(dims), "norm": _norm(norm), "inverse": inverse}
    return record_op("fftn", (n,), params, n.shape, n.dtype, "FftC2CBackward0")


def _r2c(input, s, dim, norm, name, default_all=True):
    x = _real_input(input, name)
    dims, sizes = _dims_and_sizes(x, s, dim, default_all)
    x = _resized(x, dims, sizes)
    n = x._node
    shape = list(n.shape)
    shape[dims[-1]] = shape[dims[-1]] // 2 + 1
    params = {"axes": tuple(dims), "norm": _norm(norm)}
    return record_op("rfftn", (n,), params, tuple(shape), n.dtype.to_complex(), "FftR2CBackward0")


def _c2r(input, s, dim, norm, default_all=True):
    x = _complex_input(input)
    dims, sizes = _dims_and_sizes(x, s, dim, default_all)
    last = dims[-1]
    if s is None or s[-1] == -1:
        sizes[-1] = 2 * (x.shape[last] - 1)
    n_last = sizes[-1]
    if n_last < 1:
        raise RuntimeError(f"Invalid number of data points ({n_last}) specified")
    x = _resized(x, dims, sizes[:-1] + [n_last // 2 + 1])
    n = x._node
    shape = list(n.shape)
    shape[last] = n_last
    params = {"axes": tuple(dims), "norm": _norm(norm), "n": n_last}
    return record_op("irfftn", (n,), params, tuple(shape), n.dtype.to_real(), "FftC2RBackward0")


def _one(n, dim):
    return None if n is None else (n,), dim


def fft(input, n=None, dim=-1, norm=None):
    """The one-dimensional discrete Fourier transform of ``input`` along ``dim``.

    ```python
    >>> import ngrad
    >>> ngrad.fft.fft(ngrad.tensor([1.0, 0.0, -1.0, 0.0]))
    tensor([0.+0.j, 2.+0.j, 0.+0.j, 2.+0.j])

    ```
    """
    return _c2c(input, *_one(n, dim), norm, False)


def ifft(input, n=None, dim=-1, norm=None):
    """The inverse of ``fft`` (scaled by 1/n with the default ``norm="backward"``)."""
    return _c2c(input, *_one(n, dim), norm, True)


def fft2(input, s=None, dim=(-2, -1), norm=None):
    """The two-dimensional transform over ``dim`` (the last two by default)."""
    return _c2c(input, s, dim, norm, False)


def ifft2(input, s=None, dim=(-2, -1), norm=None):
    """The inverse of ``fft2``."""
    return _c2c(input, s, dim, norm, True)


def fftn(input, s=None, dim=None, norm=None):
    """The n-dimensional transform over ``dim`` (every dimension, or the last ``len(s)``)."""
    return _c2c(input, s, dim, norm, False)


def ifftn(input, s=None, dim=None, norm=None):
    """The inverse of ``fftn``."""
    return _c2c(input, s, dim, norm, True)


def rfft(input, n=None, dim=-1, norm=None):
    """The transform of a real ``input``: its ``n // 2 + 1`` non-negative frequencies (the others
    are their conjugates)."""
    return _r2c(input, *_one(n, dim), norm, "rfft")


def irfft(input, n=None, dim=-1, norm=None):
    """The inverse of ``rfft``: ``n`` real values (``2 * (m - 1)`` by default for ``m`` frequencies)
    from a half spectrum, whose imaginary parts at frequency 0 (and n / 2) are ignored.

    ```python
    >>> import ngrad
    >>> ngrad.fft.irfft(ngrad.fft.rfft(ngrad.tensor([1.0, 2.0, 3.0, 4.0])))
    tensor([1., 2., 3., 4.])

    ```
    """
    return _c2r(input, *_one(n, dim), norm)


def rfft2(input, s=None, dim=(-2, -1), norm=None):
    """``rfftn`` over two dimensions (the last two by default)."""
    return _r2c(input, s, dim, norm, "rfftn")


def irfft2(input, s=None, dim=(-2, -1), norm=None):
    """The inverse of ``rfft2``."""
    return _c2r(input, s, dim, norm)


def rfftn(input, s=None, dim=None, norm=None):
    """The n-dimensional transform of a real ``input``, halved along the last of ``dim``."""
    return _r2c(input, s, dim, norm, "rfftn")


def irfftn(input, s=None, dim=None, norm=None):
    """The inverse of ``rfftn``."""
    return _c2r(input, s, dim, norm)


def hfft(input, n=None, dim=-1, norm=None):
    """The transform of a Hermitian-symmetric signal given by its first half: real output,
    ``irfft`` of the conjugate with the dual normalization."""
    return _c2r(_complex_input(input).conj(), *_one(n, dim), _DUAL[_norm(norm)])


def ihfft(input, n=None, dim=-1, norm=None):
    """The inverse of ``hfft``: the conjugate of ``rfft`` with the dual normalization."""
    return _r2c(input, *_one(n, dim), _DUAL[_norm(norm)], "ihfft").conj()


def hfft2(input, s=None, dim=(-2, -1), norm=None):
    """``hfftn`` over two dimensions (the last two by default)."""
    return hfftn(input, s, dim, norm)


def ihfft2(input, s=None, dim=(-2, -1), norm=None):
    """The inverse of ``hfft2``."""
    return ihfftn(input, s, dim, norm)


def hfftn(input, s=None, dim=None, norm=None):
    """The n-dimensional ``hfft``: ``irfftn`` of the conjugate with the dual normalization."""
    return _c2r(_complex_input(input).conj(), s, dim, _DUAL[_norm(norm)])


def ihfftn(input, s=None, dim=None, norm=None):
    """The inverse of ``hfftn``: the conjugate of ``rfftn`` with the dual normalization."""
    return _r2c(input, s, dim, _DUAL[_norm(norm)], "ihfftn").conj()


def fftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False):
    """The sample frequencies of an ``n``-point transform with sample spacing ``d``: ``[0, 1, ...,
    n // 2 - 1 or (n - 1) // 2, -(n // 2), ..., -1] / (d * n)``.

    ```python
    >>> import ngrad
    >>> ngrad.fft.fftfreq(5, 0.1)
    tensor([ 0.,  2.,  4., -4., -2.])

    ```
    """
    k = arange(n, dtype=dtype or D.get_default_dtype(), device=device)
    k = k - (k >= (n + 1) // 2).to(k.dtype) * n
    out = (k / (d * n)).detach()
    return out.requires_grad_() if requires_grad else out


def rfftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False):
    """The non-negative sample frequencies of an ``n``-point ``rfft``: ``[0, 1, ..., n // 2] / (d * n)``."""
    out = (arange(n // 2 + 1, dtype=dtype or D.get_default_dtype(), device=device) / (d * n)).detach()
    return out.requires_grad_() if requires_grad else out


def _shift(input, dim, sign):
    x = to_tensor(input)
    dims = list(range(x.ndim)) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    dims = [normalize_dim(d, x.ndim) for d in dims]
    if not dims:
        return x
    shifts = [(x.shape[d] // 2 if sign > 0 else -(x.shape[d] // 2)) for d in dims]
    return x.roll(shifts, dims)


def fftshift(input, dim=None):
    """``input`` with the zero frequency moved to the middle of each of ``dim`` (every dimension
    by default): a roll by half of each size.

    ```python
    >>> import ngrad
    >>> ngrad.fft.fftshift(ngrad.fft.fftfreq(4))
    tensor([-0.5000, -0.2500,  0.0000,  0.2500])

    ```
    """
    return _shift(input, dim, 1)


def ifftshift(input, dim=None):
    """The inverse of ``fftshift``."""
    return _shift(input, dim, -1)
