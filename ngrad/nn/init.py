"""``ngrad.nn.init``: fill a tensor in place from a distribution, as ``torch.nn.init`` does.

Contract: every function writes the tensor it is given in place, outside the graph (as under
``no_grad``), and returns it; the draws come from ``generator`` (an ``ngrad.Generator``; the
default one, ``ngrad.manual_seed``, when None) with PyTorch's transforms, so ``uniform_``,
``normal_``, the xavier and kaiming fills and every layer's default initialisation give PyTorch's
numbers for the same seed (``orthogonal_`` draws PyTorch's normals, then LAPACK's QR and
NumPy's round differently in the last place). Fans and gains are PyTorch's
(``calculate_gain``, fan_in = ``size(1) * receptive field``).

```python
>>> import ngrad
>>> w = ngrad.empty(3, 5)
>>> _ = ngrad.nn.init.kaiming_uniform_(w, a=5 ** 0.5)
>>> bool((w.abs() <= 1 / 5 ** 0.5).all())
True

```
"""

import math
import warnings

import numpy as np

from .. import grad_mode as _grad_mode

__all__ = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "eye_",
    "dirac_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
]


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity (``'relu'``: sqrt(2), ``'tanh'``: 5/3,
    ``'leaky_relu'``: sqrt(2 / (1 + slope**2)), ``'selu'``: 3/4, linear and convolutions: 1).

    ```python
    >>> import ngrad
    >>> ngrad.nn.init.calculate_gain("tanh")
    1.6666666666666667

    ```
    """
    linear = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _fill(tensor, value):
    """Write ``value`` (a tensor or NumPy array of ``tensor``'s shape) into ``tensor``."""
    from ..factories import tensor as make

    if isinstance(value, np.ndarray):
        value = make(value, dtype=tensor.dtype, device=tensor.device)
    with _grad_mode.no_grad():
        tensor.copy_(value)
    return tensor


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with samples of U(a, b): PyTorch's numbers for the same generator state."""
    with _grad_mode.no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with samples of N(mean, std**2): PyTorch's numbers for the same generator state."""
    with _grad_mode.no_grad():
        return tensor.normal_(mean, std, generator=generator)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Fill with samples of N(mean, std**2) restricted to [a, b], drawn as PyTorch draws them:
    when [a, b] holds more than 30% of the mass, normals with the ones outside redrawn (a whole
    tensor of normals a round); otherwise uniforms on [a, b] accepted with probability
    pdf / peak (two tensors of uniforms a round)."""

    def cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn(
            "mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
            "The distribution of values may be incorrect.",
            stacklevel=2,
        )
    with _grad_mode.no_grad():
        if cdf((b - mean) / std) - cdf((a - mean) / std) > 0.3:
            result = _redrawn_normals(tensor, mean, std, a, b, generator)
        else:
            result = _accepted_uniforms(tensor, mean, std, a, b, generator)
    return _fill(tensor, result)


def _redrawn_normals(tensor, mean, std, a, b, generator):
    from ..factories import empty

    dt = tensor.dtype.np
    low, high = float(dt.type(a)), float(dt.type(b))  # the bounds as the tensor holds them

    def draw():
        return empty(*tensor.shape, dtype=tensor.dtype).normal_(mean, std, generator=generator).numpy()

    result = tensor.normal_(mean, std, generator=generator).numpy()
    while True:
        outside = (result < low) | (result > high)
        if not outside.any():
            return result
        result = np.where(outside, draw(), result)


def _accepted_uniforms(tensor, mean, std, a, b, generator):
    from ..factories import empty

    dt = tensor.dtype.np.type
    mode = max(a, min(mean, b))
    log_peak = -0.5 * ((mode - mean) / std) ** 2

    def uniform(low=0.0, high=1.0):
        return empty(*tensor.shape, dtype=tensor.dtype).uniform_(low, high, generator=generator).numpy()

    def log_pdf(x):  # in the tensor's dtype, operation by operation, as PyTorch's in-place chain
        z = (x - dt(mean)) / dt(std)
        return z * z * dt(-0.5) - dt(log_peak)

    with np.errstate(divide="ignore"):
        result = tensor.uniform_(a, b, generator=generator).numpy()
        pending = np.log(uniform()) > log_pdf(result)
        while pending.any():
            candidates = uniform(a, b)
            result = np.where(pending, candidates, result)
            pending = np.where(pending, np.log(uniform()) > log_pdf(candidates), pending)
    return result


def constant_(tensor, val):
    """Fill with ``val``."""
    with _grad_mode.no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def eye_(tensor):
    """Fill a 2-D tensor with the identity (ones on the diagonal)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, np.eye(*tensor.shape))


def dirac_(tensor, groups=1):
    """Fill a 3-, 4- or 5-D (convolution) weight with the Dirac delta: the identity filter."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tuple(tensor.shape)
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_per = sizes[0] // groups
    value = np.zeros(sizes)
    centre = tuple(s // 2 for s in sizes[2:])
    for g in range(groups):
        for d in range(min(out_per, sizes[1])):
            value[(g * out_per + d, d) + centre] = 1
    return _fill(tensor, value)


def _fans(tensor):
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot)."""
    fan_in, fan_out = _fans(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std  # PyTorch's order of products: the same bound to the last bit
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """N(0, std**2) with ``std = gain * sqrt(2 / (fan_in + fan_out))`` (Glorot)."""
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def _kaiming_std(tensor, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out']")
    fan = _fans(tensor)[0 if mode == "fan_in" else 1]
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-b, b) with ``b = gain * sqrt(3 / fan)`` (He); what ``Linear`` uses with ``a=sqrt(5)``."""
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """N(0, std**2) with ``std = gain / sqrt(fan)`` (He)."""
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


def orthogonal_(tensor, gain=1, generator=None):
    """Fill with a (semi-)orthogonal matrix (the trailing dimensions flattened), times ``gain``:
    the Q of a Gaussian matrix's QR decomposition, signs fixed by R's diagonal."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    from ..factories import empty

    # PyTorch's draws (normal_ of a rows x cols tensor of this dtype); its QR is LAPACK's
    flat = empty(rows, cols, dtype=tensor.dtype).normal_(0.0, 1.0, generator=generator).numpy()
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, gain * q.reshape(tuple(tensor.shape)))
