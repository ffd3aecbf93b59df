"""The functional forms of ``torch.nn``'s layers (``layer_norm``, ``batch_norm``, ``dropout``,
``embedding``, ``pad``, ``one_hot``, ``normalize``, ``cosine_similarity``,
``pairwise_distance``, ``bilinear``), exported by ``ngrad.nn.functional``.

Contract: each is a composition of ngrad's differentiable operations (so it differentiates to
any order, traces and compiles like user code), with PyTorch's values, gradients, argument
names and errors. ``batch_norm`` in training mode updates the running statistics it is given in
place, outside the graph, as PyTorch does.
"""

import math

import numpy as np

from .. import factories as _factories
from .. import grad_mode as _grad_mode
from .. import tensor as _t
from ..engine.ir import dtypes as D

__all__ = [
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
]


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the last ``len(normalized_shape)`` dimensions (biased variance), then
    scale by ``weight`` and shift by ``bias``.

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> F.layer_norm(ngrad.tensor([[1.0, 2.0, 3.0]]), (3,))
    tensor([[-1.2247,  0.0000,  1.2247]])

    ```
    """
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or tuple(input.shape[input.ndim - k :]) != shape or input.ndim < k:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape [*, {', '.join(map(str, shape))}], "
            f"but got input of size{list(input.shape)}"
        )
    dims = tuple(range(input.ndim - k, input.ndim))
    mean = input.mean(dims, keepdim=True)
    centered = input - mean
    var = (centered * centered).mean(dims, keepdim=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def _channel_shape(input):
    return (1, input.shape[1]) + (1,) * (input.ndim - 2)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Normalize each channel (dimension 1) of ``input`` by the batch's statistics when
    ``training`` (then ``running_mean``/``running_var``, when given, move towards them by
    ``momentum``, the variance unbiased), else by the running statistics.

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> x = ngrad.tensor([[1.0], [3.0]])
    >>> mean, var = ngrad.zeros(1), ngrad.ones(1)
    >>> F.batch_norm(x, mean, var, training=True), mean, var
    (tensor([[-1.0000],
            [ 1.0000]]), tensor([0.2000]), tensor([1.1000]))

    ```
    """
    if input.ndim < 2:
        raise ValueError(f"expected 2D or more input (got {input.ndim}D input)")
    shape = _channel_shape(input)
    dims = (0,) + tuple(range(2, input.ndim))
    if training:
        count = math.prod(input.shape[d] for d in dims)
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.shape}")
        mean = input.mean(dims, keepdim=True)
        centered = input - mean
        var = (centered * centered).mean(dims, keepdim=True)
        if running_mean is not None or running_var is not None:
            with _grad_mode.no_grad():
                if running_mean is not None:
                    running_mean.copy_(running_mean * (1 - momentum) + mean.reshape(-1).detach() * momentum)
                if running_var is not None:
                    unbiased = var.reshape(-1).detach() * (count / (count - 1))
                    running_var.copy_(running_var * (1 - momentum) + unbiased * momentum)
        out = centered * (var + eps).rsqrt()
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
        out = (input - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)`` when
    ``training``; the identity otherwise.

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> F.dropout(ngrad.ones(4), 0.5, training=False)
    tensor([1., 1., 1., 1.])

    ```
    """
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        out = input * 0.0
    else:
        # PyTorch's CPU dropout: noise = empty_like(input).bernoulli_(1 - p) / (1 - p), then
        # input * noise, so the mask and the scaled values are its own for the same seed
        from ..factories import empty_like

        noise = empty_like(input).bernoulli_(1 - p)
        out = input * (noise / (1 - p))
    if inplace:
        return input.copy_(out)
    return out


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` picked by the integer ``input`` (any shape): the result has shape
    ``input.shape + (embedding_dim,)``. The row ``padding_idx`` gets no gradient; with
    ``max_norm`` the picked rows longer than it are rescaled in ``weight`` first (in place).

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> F.embedding(ngrad.tensor([[0, 2]]), ngrad.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]))
    tensor([[[0., 1.],
             [4., 5.]]])

    ```
    """
    if input.dtype.is_floating_point or input.dtype is D.bool_:
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; "
            f"but got {input.type()} instead (while checking arguments for embedding)"
        )
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    if sparse:
        raise ValueError("ngrad has no sparse tensors: use embedding(..., sparse=False) for dense gradients")
    n = weight.shape[0]
    if padding_idx is not None:
        if padding_idx > 0 and padding_idx >= n:
            raise AssertionError("Padding_idx must be within num_embeddings")
        if padding_idx < 0:
            if padding_idx < -n:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx += n
    if max_norm is not None:
        _renorm_rows(weight, input, max_norm, norm_type)
    out = weight.index_select(0, input.reshape(-1)).reshape(tuple(input.shape) + (weight.shape[1],))
    if padding_idx is not None and out.requires_grad:
        kept = (input != padding_idx).unsqueeze(-1)
        out = _t.where(kept, out, out.detach())
    if scale_grad_by_freq and out.requires_grad:  # each row's gradient divided by its count in input
        from ..tensor.record import host_value

        idx = np.asarray(host_value(input)).reshape(-1)
        counts = np.bincount(idx, minlength=n)[idx].reshape(tuple(input.shape) + (1,))
        scale = _factories.tensor(1.0 / counts, dtype=out.dtype, device=out.device)
        out = out.detach() + (out - out.detach()) * scale
    return out


def _renorm_rows(weight, input, max_norm, norm_type):
    """PyTorch's ``embedding_renorm_``: rows picked by ``input`` whose norm exceeds
    ``max_norm`` are scaled to it (``max_norm / (norm + 1e-7)``), in place and outside the graph."""
    from ..tensor.record import host_value

    rows = np.unique(np.asarray(host_value(input)).reshape(-1))
    with _grad_mode.no_grad():
        picked = weight[rows]
        norms = picked.norm(norm_type, dim=1, keepdim=True)
        scale = _t.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        weight[rows] = picked * scale


def _pad_index(size, before, after, mode):
    """The source index of each position of a dimension padded by ``before``/``after``."""
    i = np.arange(-before, size + after)
    if mode == "replicate":
        return np.clip(i, 0, size - 1)
    if mode == "circular":
        return i % size
    period = 2 * (size - 1)  # reflect: mirror without repeating the edge
    j = np.abs(i) % period if period else np.zeros_like(i)
    return np.where(j >= size, period - j, j)


def pad(input, pad, mode="constant", value=None):
    """Pad the last ``len(pad) // 2`` dimensions: ``pad = (left_last, right_last, left_prev,
    right_prev, ...)``. ``mode`` is ``'constant'`` (``value``, default 0; negative pads
    crop), ``'reflect'``, ``'replicate'`` or ``'circular'``.

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> x = ngrad.tensor([[1.0, 2.0, 3.0]])
    >>> F.pad(x, (1, 2)), F.pad(x, (2, 1), mode="reflect")
    (tensor([[0., 1., 2., 3., 0., 0.]]), tensor([[3., 2., 1., 2., 3., 2.]]))

    ```
    """
    pad = tuple(int(v) for v in pad)
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > input.ndim:
        raise RuntimeError(
            "Padding length should be less than or equal to two times the input dimension but got "
            f"padding length {len(pad)} and input of dimension {input.ndim}"
        )
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if mode != "constant" and value not in (None, 0, 0.0):
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    out = input
    for k in range(len(pad) // 2):
        dim = input.ndim - 1 - k
        before, after = pad[2 * k], pad[2 * k + 1]
        size = out.shape[dim]
        if mode == "constant":
            out = _constant_pad(out, dim, before, after, 0.0 if value is None else value)
            continue
        if mode == "reflect" and (before >= size or after >= size):
            raise RuntimeError(
                f"Argument #4: Padding size should be less than the corresponding input dimension, but got: "
                f"padding ({before}, {after}) at dimension {dim} of input {list(input.shape)}"
            )
        if mode == "circular" and (before > size or after > size):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if mode == "circular" and min(before, after) < 0:  # PyTorch crops first, then wraps what is left
            out = out.narrow(dim, max(-before, 0), size - max(-before, 0) - max(-after, 0))
            before, after, size = max(before, 0), max(after, 0), out.shape[dim]
        if before or after:
            out = out.index_select(dim, _factories.tensor(_pad_index(size, before, after, mode)))
    return out


def _constant_pad(x, dim, before, after, value):
    if before < 0:
        x = x.narrow(dim, -before, x.shape[dim] + before)
        before = 0
    if after < 0:
        x = x.narrow(dim, 0, x.shape[dim] + after)
        after = 0
    if not before and not after:
        return x
    from ..factories import full

    def block(n):
        shape = list(x.shape)
        shape[dim] = n
        return full(shape, value, dtype=x.dtype, device=x.device)

    parts = ([block(before)] if before else []) + [x] + ([block(after)] if after else [])
    return _t.cat(parts, dim)


def one_hot(tensor, num_classes=-1):
    """An int64 tensor of shape ``tensor.shape + (num_classes,)`` with a 1 at each index.

    ```python
    >>> import ngrad
    >>> ngrad.nn.functional.one_hot(ngrad.tensor([0, 2]))
    tensor([[1, 0, 0],
            [0, 0, 1]])

    ```
    """
    if tensor.dtype is not D.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    from ..tensor.record import host_value

    v = np.asarray(host_value(tensor))
    if num_classes == -1:
        if v.size == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(v.max()) + 1
    if v.size and v.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if v.size and v.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    from ..factories import arange

    return (tensor.unsqueeze(-1) == arange(num_classes, device=tensor.device)).to(D.int64)


def normalize(input, p=2.0, dim=1, eps=1e-12):
    """``input / max(||input||_p, eps)`` along ``dim``."""
    return input / input.norm(p, dim, keepdim=True).clamp_min(eps).expand_as(input)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """The cosine of the angle between ``x1`` and ``x2`` along ``dim`` (broadcast), each norm
    clamped below at ``eps``.

    ```python
    >>> import ngrad
    >>> ngrad.nn.functional.cosine_similarity(ngrad.tensor([[1.0, 0.0]]), ngrad.tensor([[1.0, 1.0]]))
    tensor([0.7071])

    ```
    """
    n1 = x1.norm(2, dim, keepdim=True).clamp_min(eps)
    n2 = x2.norm(2, dim, keepdim=True).clamp_min(eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` over the last dimension."""
    d = x1 - x2 + eps
    return d.norm(p, -1 if d.ndim else None, keepdim=keepdim)


def bilinear(input1, input2, weight, bias=None):
    """``y_k = input1 @ weight[k] @ input2 + bias[k]`` over the last dimension of each input
    (``weight`` of shape (out, in1, in2))."""
    if weight.ndim != 3:
        raise RuntimeError(f"bilinear(): weight must be 3-dimensional, but got {weight.ndim}")
    out_f, in1, in2 = weight.shape
    if input1.shape[-1] != in1 or input2.shape[-1] != in2:
        raise RuntimeError(
            f"bilinear(): input sizes {list(input1.shape)} and {list(input2.shape)} do not match weight of "
            f"shape {list(weight.shape)}"
        )
    lead = tuple(input1.shape[:-1])
    mixed = input1.reshape(-1, in1).matmul(weight.permute(1, 0, 2).reshape(in1, out_f * in2))
    out = (mixed.reshape(-1, out_f, in2) * input2.reshape(-1, 1, in2)).sum(-1).reshape(lead + (out_f,))
    return out if bias is None else out + bias
