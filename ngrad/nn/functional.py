"""Activation and normalization functions, as in ``torch.nn.functional``."""
from ..tensor import Tensor

__all__ = ["relu", "sigmoid", "tanh", "softplus", "softmax", "log_softmax", "mse_loss"]


def relu(input):
    """``max(input, 0)``; the gradient at 0 is 0 (as in PyTorch)."""
    return input.relu()


def sigmoid(input):
    return input.sigmoid()


def tanh(input):
    return input.tanh()


def softplus(input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta * x)) / beta``, linear above ``threshold`` (as in PyTorch).

    ```python
    >>> import ngrad
    >>> ngrad.nn.functional.softplus(ngrad.tensor([0.0, 30.0]))
    tensor([ 0.6931, 30.0000])

    ```
    """
    return input.softplus(beta, threshold)


def softmax(input, dim):
    return input.softmax(dim)


def log_softmax(input, dim):
    return input.log_softmax(dim)


def mse_loss(input, target, reduction="mean"):
    """Mean (or summed, or elementwise) squared error."""
    d = input - target
    sq = d * d
    if reduction == "mean":
        return sq.mean()
    if reduction == "sum":
        return sq.sum()
    if reduction == "none":
        return sq
    raise ValueError(f"{reduction} is not a valid value for reduction")


Tensor  # re-exported type for annotations
