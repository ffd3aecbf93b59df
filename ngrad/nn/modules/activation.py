"""Activations as modules (``ReLU``, ``Tanh``, ``Sigmoid``, ``GELU``, ``SiLU``, ``ELU``,
``LeakyReLU``, ``Softplus``, ``Softmax``, ``LogSoftmax``), as in ``torch.nn``.

Contract: each holds its constructor arguments, calls the matching ``ngrad.nn.functional``
function in ``forward`` (``inplace=True`` writes the result into the input) and prints its
arguments as PyTorch does.
"""

import warnings

from .. import functional as F
from .module import Module

__all__ = ["ReLU", "Tanh", "Sigmoid", "GELU", "SiLU", "ELU", "LeakyReLU", "Softplus", "Softmax", "LogSoftmax"]


def _result(input, out, inplace):
    return input.copy_(out) if inplace else out


class ReLU(Module):
    """``max(x, 0)`` elementwise.

    ```python
    >>> import ngrad
    >>> ngrad.nn.ReLU()(ngrad.tensor([-1.0, 2.0]))
    tensor([0., 2.])

    ```
    """

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return input.relu_() if self.inplace else input.relu()

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Tanh(Module):
    """``tanh(x)`` elementwise."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input.tanh()


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` elementwise."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input.sigmoid()


class GELU(Module):
    """``x * Phi(x)``; ``approximate='tanh'`` uses the tanh formula."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """``x * sigmoid(x)`` elementwise."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return _result(input, F.silu(input), self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class ELU(Module):
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input):
        return _result(input, F.elu(input, self.alpha), self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class LeakyReLU(Module):
    """``x`` where positive, ``negative_slope * x`` elsewhere."""

    def __init__(self, negative_slope=1e-2, inplace=False):
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input):
        return _result(input, F.leaky_relu(input, self.negative_slope), self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, linear above ``threshold``."""

    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


def _softmax_dim(name, ndim):
    # PyTorch's legacy choice for dim=None, with its warning
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(Module):
    """Probabilities along ``dim``.

    ```python
    >>> import ngrad
    >>> ngrad.nn.Softmax(dim=-1)(ngrad.tensor([0.0, 0.0]))
    tensor([0.5000, 0.5000])

    ```
    """

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = _softmax_dim("softmax", input.ndim) if self.dim is None else self.dim
        return input.softmax(dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """Log-probabilities along ``dim``."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = _softmax_dim("log_softmax", input.ndim) if self.dim is None else self.dim
        return input.log_softmax(dim)

    def extra_repr(self):
        return f"dim={self.dim}"
