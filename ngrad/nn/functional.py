"""Activations, losses, ``linear`` and the layers' functional forms (from ``layer_functions``),
as in ``torch.nn.functional``: compositions of ngrad's operations, so they differentiate (to any
order), trace and compile like code a user writes.

```python
>>> import ngrad
>>> import ngrad.nn.functional as F
>>> logits = ngrad.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]], requires_grad=True)
>>> loss = F.cross_entropy(logits, ngrad.tensor([0, 2]))
>>> loss.backward()
>>> round(loss.item(), 4), logits.grad.shape
(0.1755, ngrad.Size([2, 3]))

```
"""

import math

import numpy as np

from .. import grad_mode as _grad_mode
from .. import tensor as _t
from ..tensor.math_ops import require
from ..tensor.record import host_value
from .conv_functions import avg_pool1d, avg_pool2d, conv1d, conv2d, max_pool1d, max_pool2d
from .layer_functions import (
    batch_norm,
    bilinear,
    cosine_similarity,
    dropout,
    embedding,
    layer_norm,
    normalize,
    one_hot,
    pad,
    pairwise_distance,
)

__all__ = [
    "relu",
    "leaky_relu",
    "elu",
    "gelu",
    "silu",
    "sigmoid",
    "logsigmoid",
    "tanh",
    "softplus",
    "softmax",
    "log_softmax",
    "linear",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "nll_loss",
    "cross_entropy",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "layer_norm",
    "batch_norm",
    "dropout",
    "embedding",
    "pad",
    "one_hot",
    "normalize",
    "cosine_similarity",
    "pairwise_distance",
    "bilinear",
    "conv1d",
    "conv2d",
    "max_pool1d",
    "max_pool2d",
    "avg_pool1d",
    "avg_pool2d",
]


def relu(input):
    """``max(input, 0)``; the gradient at 0 is 0 (as in PyTorch)."""
    return input.relu()


def leaky_relu(input, negative_slope=0.01):
    """``input`` where positive, ``negative_slope * input`` elsewhere (gradient ``negative_slope`` at 0)."""
    return _t.where(input > 0, input, input * negative_slope)


def elu(input, alpha=1.0):
    """``input`` where positive, ``alpha * (exp(input) - 1)`` elsewhere."""
    return _t.where(input > 0, input, input.clamp(max=0).expm1() * alpha)


def gelu(input, approximate="none"):
    """``x * Phi(x)`` with Phi the standard normal CDF; ``approximate='tanh'`` uses PyTorch's
    tanh formula.

    ```python
    >>> import ngrad
    >>> ngrad.nn.functional.gelu(ngrad.tensor([-1.0, 0.0, 1.0]))
    tensor([-0.1587,  0.0000,  0.8413])

    ```
    """
    if approximate == "none":
        return input * ((input * (1 / math.sqrt(2))).erf() + 1) * 0.5
    if approximate == "tanh":
        inner = (input + input * input * input * 0.044715) * math.sqrt(2 / math.pi)
        return input * (inner.tanh() + 1) * 0.5
    raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate!r}")


def silu(input):
    """``x * sigmoid(x)`` (swish)."""
    return input * input.sigmoid()


def sigmoid(input):
    return input.sigmoid()


def logsigmoid(input):
    """``log(sigmoid(x)) = -softplus(-x)``, finite for large negative ``x``."""
    return -(-input).softplus()


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


def softmax(input, dim, *, dtype=None):
    """``input.softmax(dim, dtype)``: probabilities along ``dim`` (``input`` converted to ``dtype``)."""
    return input.softmax(dim, dtype)


def log_softmax(input, dim, *, dtype=None):
    """``input.log_softmax(dim, dtype)``: log-probabilities along ``dim``."""
    return input.log_softmax(dim, dtype)


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` (``weight`` of shape (out_features, in_features))."""
    out = input.matmul(weight.t() if weight.ndim == 2 else weight)
    return out if bias is None else out + bias


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _same_shape(input, target):
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(
            f"Using a target size ({_t.Size(target.shape)}) that is different to the input size "
            f"({_t.Size(input.shape)}) is deprecated. Please ensure they have the same size."
        )


def mse_loss(input, target, reduction="mean"):
    """Mean (or summed, or elementwise) squared error."""
    d = input - target
    return _reduce(d * d, reduction)


def l1_loss(input, target, reduction="mean"):
    """Mean (or summed, or elementwise) absolute error; the gradient at 0 is 0."""
    return _reduce((input - target).abs(), reduction)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """``0.5 d**2 / beta`` where ``|d| < beta``, ``|d| - 0.5 beta`` elsewhere (``d = input - target``)."""
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(_t.where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """``0.5 d**2`` where ``|d| <= delta``, ``delta (|d| - 0.5 delta)`` elsewhere."""
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    d = (input - target).abs()
    return _reduce(_t.where(d <= delta, d * d * 0.5, (d - 0.5 * delta) * delta), reduction)


def _weighted_mean(loss, w):
    """``loss.sum() / w.sum()``: NaN when every target is ignored, with zero gradients (as
    PyTorch's), not the NaN gradients of 0 / 0."""
    total = w.sum()
    empty = total == 0
    return loss.sum() / _t.where(empty, 1.0, total) + _t.where(empty, math.nan, 0.0).to(loss.dtype)


def _class_rows(input, target, name):
    """``input`` (N, C, d1, ...) or (C,) as rows of C scores, ``target`` of class indices as
    one index per row, and the shape of the per-element loss."""
    if target.dtype.is_floating_point or target.dtype.category == 0:
        raise RuntimeError(f"expected target dtype to be Long, but got {target.dtype}")
    if input.ndim == 0:
        raise ValueError("input tensor should be 1D or 2D or more")
    if input.ndim == 1:
        if target.ndim != 0:
            raise RuntimeError(f"{name}: 0D or 1D target tensor expected, multi-target not supported")
        return input.reshape(1, -1), target.reshape(1), ()
    if tuple(target.shape[:1]) != tuple(input.shape[:1]):
        raise ValueError(
            f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
            f"({target.shape[0] if target.ndim else 1})."
        )
    if tuple(target.shape) != tuple(input.shape[:1]) + tuple(input.shape[2:]):
        raise RuntimeError(f"Expected target size {list(input.shape[:1] + input.shape[2:])}, got {list(target.shape)}")
    c = input.shape[1]
    rows = input if input.ndim == 2 else input.permute(0, *range(2, input.ndim), 1).reshape(-1, c)
    return rows, target.reshape(-1), tuple(target.shape)


def _check_targets(target, tgt, classes, ignore_index):
    """``tgt`` (the flattened ``target``), once checked: PyTorch's error for a class index outside
    [0, classes) that is not ``ignore_index``, raised when the targets are realized (reading the
    scores realizes them anyway). Under ``ngrad.compile`` a target may not exist yet: ``tgt``
    comes back behind a ``require`` step that checks it when the program runs."""
    if not target.numel():
        return tgt
    if _grad_mode.state.trace is not None:
        return require(tgt, "target", classes, ignore_index)
    v = host_value(target)
    if v.min() >= 0 and v.max() < classes:  # the common case: no target ignored or out of range
        return tgt
    bad = v[(v != ignore_index) & ((v < 0) | (v >= classes))]
    if bad.size:
        raise IndexError(f"Target {int(bad[0])} is out of bounds.")
    return tgt


def _picked(rows, target, weight, ignore_index):
    """Per row: the score at the target class, the target class's weight (0 where ignored), and
    1.0 where the row counts (0.0 where its target is ``ignore_index``)."""
    kept = target != ignore_index
    valid = kept.to(rows.dtype)
    safe = _t.where(kept, target, 0)  # an index to read even where ignored
    score = rows[np.arange(rows.shape[0]), safe]
    if weight is None:
        return score, valid, valid
    if weight.ndim != 1 or weight.shape[0] != rows.shape[1]:
        raise RuntimeError(
            f"weight tensor should be defined either for all {rows.shape[1]} classes or "
            f"no classes but got weight tensor of shape: {list(weight.shape)}"
        )
    return score, valid * weight[safe], valid


def _indexed_loss(logp, target, weight, ignore_index, reduction, smoothing, name):
    """nll_loss, and cross_entropy's for class indices (with its label smoothing)."""
    rows, tgt, shape = _class_rows(logp, target, name)
    tgt = _check_targets(target, tgt, rows.shape[1], ignore_index)  # target: its value is there
    score, w, valid = _picked(rows, tgt, weight, ignore_index)
    loss = -score * w
    if smoothing > 0:  # the uniform part: every class's (weighted) score, ignored rows out
        spread = -(rows if weight is None else rows * weight).sum(1) * valid
        loss = loss * (1 - smoothing) + spread * (smoothing / rows.shape[1])
    if reduction == "mean":
        return _weighted_mean(loss, w)
    if reduction == "none":
        return loss.reshape(shape)
    return _reduce(loss, reduction)


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """The negative log-likelihood of class indices ``target`` under log-probabilities ``input``
    (N, C) or (N, C, d1, ...) or (C,). ``weight`` rescales each class; targets equal to
    ``ignore_index`` add nothing, and ``'mean'`` divides by the weights of the rest.

    ```python
    >>> import ngrad
    >>> logp = ngrad.tensor([[-0.1, -2.5], [-1.2, -0.4]])
    >>> ngrad.nn.functional.nll_loss(logp, ngrad.tensor([0, -100]))
    tensor(0.1000)

    ```
    """
    return _indexed_loss(input, target, weight, ignore_index, reduction, 0.0, "nll_loss")


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """``nll_loss(log_softmax(input, 1), target)`` for class indices, or ``-sum(target *
    log_softmax(input, 1))`` over classes when ``target`` holds probabilities (a float tensor of
    ``input``'s shape). ``label_smoothing`` mixes the target with the uniform distribution over
    the C classes, as PyTorch does.

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> x = ngrad.tensor([[1.0, 2.0, 3.0]])
    >>> F.cross_entropy(x, ngrad.tensor([2])), F.cross_entropy(x, ngrad.tensor([[0.0, 0.0, 1.0]]))
    (tensor(0.4076), tensor(0.4076))

    ```
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    dim = 0 if input.ndim == 1 else 1
    logp = input.log_softmax(dim)
    c = input.shape[dim] if input.ndim else 1
    if target.dtype.is_floating_point:  # class probabilities
        _same_shape(input, target)
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / c
        terms = logp * target
        if weight is not None:
            terms = terms * weight.reshape((c,) + (1,) * (input.ndim - 2))
        loss = -terms.sum(dim)
        if reduction == "mean":
            return loss.sum() / (input.numel() // c)
        return _reduce(loss, reduction)
    return _indexed_loss(logp, target, weight, ignore_index, reduction, label_smoothing, "cross_entropy")


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """``-(t log p + (1 - t) log(1 - p))`` for probabilities ``input``, each log clamped at -100
    (as PyTorch clamps it, so p = 0 or 1 gives a finite loss)."""
    _same_shape(input, target)
    loss = -(target * input.log().clamp(min=-100) + (1 - target) * (1 - input).log().clamp(min=-100))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean", pos_weight=None):
    """``binary_cross_entropy(sigmoid(input), target)`` computed stably from the logits:
    ``(1 - t) x + (1 + (pw - 1) t) softplus(-x)``, with ``pos_weight`` pw weighting the positives."""
    _same_shape(input, target)
    soft = (-input).softplus()
    if pos_weight is None:
        loss = (1 - target) * input + soft
    else:
        loss = (1 - target) * input + (1 + (pos_weight - 1) * target) * soft
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)
