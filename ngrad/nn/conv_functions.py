"""Convolution and pooling as in ``torch.nn.functional``: ``conv1d``, ``conv2d``,
``max_pool1d``, ``max_pool2d``, ``avg_pool1d``, ``avg_pool2d``.

Contract: each is a composition of ngrad's differentiable operations, so it differentiates to
any order, traces under ``ngrad.compile`` and compiles like user code, with PyTorch's values,
gradients (a max pool's gradient goes to the first maximum of its window, as PyTorch's),
argument names, output sizes (``ceil_mode``, ``padding='same'``) and errors.

How: the input is padded, then each kernel offset reads one strided slice of it (all windows'
elements at that offset), so the ``K`` offsets give a ``(K, *out)`` block of columns (im2col).
A convolution multiplies the flattened weight by the columns in one 2-D matrix product (BLAS);
a max pool takes the ``argmax`` over the offsets and gathers it; an average pool sums the
offsets and divides by a divisor computed per output position. docs/nn.md gives the
measurements behind im2col and one matrix product over per-window loops.
"""

import itertools
import math
import warnings

import numpy as np

from .. import factories as _factories
from .. import tensor as _t
from ..engine.ir import dtypes as D
from .layer_functions import pad as _pad

__all__ = ["conv1d", "conv2d", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d"]

_C_TYPE = {"float32": "float", "float64": "double", "int32": "int", "int64": "long", "bool": "bool"}


def _ints(value, n, what, name):
    """``value`` (an int, or a sequence of 1 or ``n`` ints) as a tuple of ``n`` ints."""
    seq = list(value) if isinstance(value, (tuple, list)) else [value]
    for i, v in enumerate(seq):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(
                f"{name}(): argument '{what}' must be tuple of ints, but found element of type "
                f"{type(v).__name__} at pos {i}"
            )
    if len(seq) == 1:
        seq = seq * n
    if len(seq) != n:
        raise RuntimeError(
            f"expected {what} to be a single integer value or a list of {n} values to match the convolution "
            f"dimensions, but got {what}={seq}"
        )
    return tuple(int(v) for v in seq)


def _window_slices(x, first_dim, offsets, steps, sizes):
    """The slice of ``x`` each window reads at one kernel offset: along spatial dim ``i``
    (``first_dim + i``), ``sizes[i]`` elements from ``offsets[i]`` every ``steps[i]``."""
    index = [slice(None)] * first_dim
    index += [slice(o, o + s * (n - 1) + 1, s) for o, s, n in zip(offsets, steps, sizes)]
    return x[tuple(index)]


def _columns(x, first_dim, at, kernel, stride, dilation, out_sizes):
    """The windows of ``x``'s spatial dims (from ``first_dim`` on) stacked at dim ``at``: one
    slice per kernel offset, offsets in row-major order (the weight's order)."""
    parts = [
        _window_slices(x, first_dim, [k * d for k, d in zip(ks, dilation)], stride, out_sizes)
        for ks in itertools.product(*(range(k) for k in kernel))
    ]
    return _t.stack(parts, at)


def _conv_padding(padding, nd, stride, dilation, kernel, name):
    """``(left, right)`` zero padding of each spatial dim from ``padding`` (ints or
    ``'same'``/``'valid'``)."""
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * nd
        if padding != "same":
            raise RuntimeError(f"Invalid padding string: '{padding}'")
        if any(s != 1 for s in stride):
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        if any(d % 2 == 1 and k % 2 == 0 for d, k in zip(dilation, kernel)):
            warnings.warn(
                "Using padding='same' with even kernel lengths and odd dilation may require a zero-padded copy "
                "of the input be created",
                UserWarning,
                stacklevel=4,
            )
        totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return [(t // 2, t - t // 2) for t in totals]
    pads = _ints(padding, nd, "padding", name)
    if any(p < 0 for p in pads):
        raise RuntimeError("negative padding is not supported")
    return [(p, p) for p in pads]


def _check_conv(input, weight, bias, nd, groups, name):
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(
            f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {name}, but got input of size: "
            f"{list(input.shape)}"
        )
    if input.dtype is not weight.dtype:
        raise RuntimeError(
            f"Input type ({input.type()}) and weight type ({weight.type()}) should be the same or input should be "
            "a MKLDNN tensor and weight is a dense tensor"
        )
    if bias is not None and bias.dtype is not input.dtype:
        raise RuntimeError(
            f"Input type ({_C_TYPE.get(input.dtype.name, input.dtype.name)}) and bias type "
            f"({_C_TYPE.get(bias.dtype.name, bias.dtype.name)}) should be the same"
        )
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)):
        raise TypeError(f"{name}(): argument 'groups' must be int, not {type(groups).__name__}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    out_c = weight.shape[0]
    if out_c % groups:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but got weight "
            f"of size [{list(weight.shape)}] instead"
        )
    in_c = input.shape[0 if input.ndim == nd + 1 else 1]
    if weight.shape[1] * groups != in_c:
        raise RuntimeError(
            f"Given groups={groups}, weight of size {list(weight.shape)}, expected input{list(input.shape)} to have "
            f"{weight.shape[1] * groups} channels, but got {in_c} channels instead"
        )
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != out_c):
        raise RuntimeError(
            f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional with {out_c} elements, "
            f"but got bias of size {list(bias.shape)} instead"
        )


def _conv(input, weight, bias, stride, padding, dilation, groups, nd):
    """``conv{nd}d``: im2col of the padded input and one matrix product per group."""
    name = f"conv{nd}d"
    stride = _ints(stride, nd, "stride", name)
    dilation = _ints(dilation, nd, "dilation", name)
    if weight.ndim != nd + 2:  # PyTorch counts the convolution's dims from the weight's
        k = max(weight.ndim - 2, 0)
        raise RuntimeError(
            f"expected stride to be a single integer value or a list of {k} values to match the convolution "
            f"dimensions, but got stride={list(stride)}"
        )
    kernel = tuple(weight.shape[2:])
    pads = _conv_padding(padding, nd, stride, dilation, kernel, name)
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("non-positive dilation is not supported")
    _check_conv(input, weight, bias, nd, groups, name)
    batched = input.ndim == nd + 2
    x = input if batched else input.unsqueeze(0)
    padded = [n + a + b for n, (a, b) in zip(x.shape[2:], pads)]
    spans = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    if any(p < s for p, s in zip(padded, spans)):
        raise RuntimeError(
            f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel size: "
            f"({' x '.join(map(str, spans))}). Kernel size can't be greater than actual input size"
        )
    if any(a or b for a, b in pads):
        x = _pad(x, [v for a, b in reversed(pads) for v in (a, b)])
    n = x.shape[0]
    out_sizes = [(p - s) // st + 1 for p, s, st in zip(padded, spans, stride)]
    count = math.prod(out_sizes)
    o, cg, k = weight.shape[0], weight.shape[1], math.prod(kernel)
    # channels first, so that (channel, offset) rows meet (batch, position) columns in one product
    cols = _columns(x.transpose(0, 1), 2, 1, kernel, stride, dilation, out_sizes)  # (C, K, N, *out)
    if groups == 1:
        out = weight.reshape(o, cg * k).matmul(cols.reshape(cg * k, n * count))
    else:
        w = weight.reshape(groups, o // groups, cg * k)
        out = w.matmul(cols.reshape(groups, cg * k, n * count)).reshape(o, n * count)
    out = out.reshape([o, n, *out_sizes]).transpose(0, 1)
    if bias is not None:
        out = out + bias.reshape([1, o] + [1] * nd)
    return out if batched else out.squeeze(0)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution (cross-correlation, as PyTorch's) of ``input`` (N, C_in, L) or
    (C_in, L) with ``weight`` (C_out, C_in / groups, k): ``padding`` is an int or
    ``'same'``/``'valid'``.

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> F.conv1d(ngrad.tensor([[[1.0, 2.0, 3.0, 4.0]]]), ngrad.tensor([[[1.0, -1.0]]]), padding=1)
    tensor([[[-1., -1., -1., -1.,  4.]]])

    ```
    """
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation, as PyTorch's) of ``input`` (N, C_in, H, W) or
    (C_in, H, W) with ``weight`` (C_out, C_in / groups, kH, kW); ``stride``, ``padding``
    and ``dilation`` are ints or pairs, ``padding`` also ``'same'`` or ``'valid'``.

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> x = ngrad.arange(16.0).reshape(1, 1, 4, 4)
    >>> F.conv2d(x, ngrad.ones(1, 1, 2, 2), stride=2)
    tensor([[[[10., 18.],
              [42., 50.]]]])

    ```
    """
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2)


# --- pooling ------------------------------------------------------------------------------------


def _pool_size(size, kernel, stride, pad, dilation, ceil_mode):
    """PyTorch's pooling output size along one dim (a window must start inside the input or
    its left padding)."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _pool_ints(value, n, what, fn):
    seq = list(value) if isinstance(value, (tuple, list)) else [value]
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in seq):
        raise TypeError(f"{fn}(): argument '{what}' must be tuple of ints, but found {value!r}")
    return seq


def _pool_args(nd, fn, input, kernel_size, stride, padding, dilation):
    """Kernel, stride, padding and dilation as ``nd``-tuples, with PyTorch's messages for
    the wrong number of values."""
    args = []
    for what, value in (("kernel_size", kernel_size), ("stride", stride), ("padding", padding), ("dilation", dilation)):
        if value is None or (what == "stride" and isinstance(value, (tuple, list)) and not value):
            args.append(args[0])  # stride defaults to the kernel size
            continue
        seq = _pool_ints(value, nd, what, fn)
        if len(seq) not in (1, nd):
            if fn == "avg_pool1d":
                raise RuntimeError(f"avg_pool1d() argument '{what}' should contain one int (got {len(seq)})")
            if nd == 1:
                raise RuntimeError(
                    f"{fn}() {what} must be an int, list of ints or tuple of ints of size 1 but got size {len(seq)}"
                )
            either = "either be omitted, a single int," if what == "stride" else "either be a single int,"
            raise RuntimeError(f"{fn}: {what} must {either} or a tuple of two ints")
        args.append(tuple(int(v) for v in (seq * nd if len(seq) == 1 else seq)))
    return args


def _pool_checks(nd, fn, input, kernel, stride, pads, dilation):
    """PyTorch's checks of a pooling's arguments and input (``nd`` spatial dims)."""
    if input.ndim not in (nd + 1, nd + 2) or (input.numel() == 0 and input.shape[-nd - 1] == 0):
        if fn == "avg_pool1d":
            raise RuntimeError(
                f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional tensor for argument #1 'self' "
                "(while checking arguments for avg_pool1d)"
            )
        if nd == 1:
            raise RuntimeError(
                f"{fn}: Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size for input, but "
                f"got:{list(input.shape)}"
            )
        if input.ndim in (nd + 1, nd + 2):
            raise RuntimeError(
                "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but "
                f"got:{list(input.shape)}"
            )
        raise RuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input")
    if fn == "max_pool1d":  # max_pool1d has its own messages
        for what, vals, bad in (("kernel_size", kernel, 0), ("stride", stride, 0), ("dilation", dilation, 0)):
            if vals[0] <= bad:
                raise RuntimeError(f"max_pool1d() {what} must be greater than zero, but got {vals[0]}")
        if pads[0] < 0:
            raise RuntimeError(f"max_pool1d() padding must be non-negative, but got {pads[0]}")
        if pads[0] > kernel[0] // 2:
            raise RuntimeError(
                f"max_pool1d() padding should be at most half of kernel size, but got padding={pads[0]} and "
                f"kernel_size={kernel[0]}"
            )
        return
    if any(s == 0 for s in stride):
        raise RuntimeError("stride should not be zero")
    if any(p < 0 for p in pads):
        raise RuntimeError(f"pad must be non-negative, but got pad: {min(pads)}")
    for p, k, d in zip(pads, kernel, dilation):
        if p > ((k - 1) * d + 1) // 2:
            raise RuntimeError(
                f"pad should be at most half of effective kernel size, but got pad={p}, kernel_size={k} and "
                f"dilation={d}"
            )
    if any(k <= 0 for k in kernel):
        raise RuntimeError(f"kernel size should be greater than zero, but got {_hw('k', kernel)}")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"stride should be greater than zero, but got {_hw('d', stride)}")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {_hw('dilation', dilation)}")


def _hw(prefix, values):
    return " ".join(f"{prefix}{axis}: {v}" for axis, v in zip("HW" if len(values) == 2 else "W", values))


def _pool_input(nd, fn, input, kernel, stride, pads, dilation, ceil_mode, fill):
    """The padded batched input, its output sizes and whether the input was batched; the
    right edge gets ``fill`` as far as ``ceil_mode``'s last windows reach."""
    batched = input.ndim == nd + 2
    x = input if batched else input.unsqueeze(0)
    sizes = list(x.shape[2:])
    out_sizes = [_pool_size(*a, ceil_mode) for a in zip(sizes, kernel, stride, pads, dilation)]
    if any(o < 1 for o in out_sizes):
        if fn == "max_pool1d":
            raise RuntimeError(f"max_pool1d() Invalid computed output size: {out_sizes[0]}")
        shape = "x".join(map(str, [x.shape[1]] + [1] * (2 - nd) + sizes))
        out = "x".join(map(str, [x.shape[1]] + [1] * (2 - nd) + out_sizes))
        raise RuntimeError(f"Given input size: ({shape}). Calculated output size: ({out}). Output size is too small")
    reach = [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(out_sizes, stride, dilation, kernel)]
    rights = [max(r - n - p, 0) for r, n, p in zip(reach, sizes, pads)]
    if any(pads) or any(rights):
        x = _pad(x, [v for p, r in reversed(list(zip(pads, rights))) for v in (p, r)], value=fill)
    return x, out_sizes, batched


def _max_pool(nd, fn, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    kernel, stride, pads, dilation = _pool_args(nd, fn, input, kernel_size, stride, padding, dilation)
    _pool_checks(nd, fn, input, kernel, stride, pads, dilation)
    fill = -math.inf if input.is_floating_point() else np.iinfo(input.dtype.name).min
    x, out_sizes, batched = _pool_input(nd, fn, input, kernel, stride, pads, dilation, ceil_mode, fill)
    windows = _columns(x, 2, 2, kernel, stride, dilation, out_sizes)  # (N, C, K, *out)
    k = math.prod(kernel)
    # the first maximum (or the first NaN) of each window, as PyTorch picks it; selected by a
    # mask, not a gather: an eager gather reads its index on the host, which would run the
    # forward once for the index and again in the backward pass
    offsets = _factories.arange(k, device=input.device).reshape([1, 1, k] + [1] * nd)
    chosen = windows.argmax(2, keepdim=True) == offsets
    out = _t.where(chosen, windows, 0).sum(2)
    if not batched:
        out = out.squeeze(0)
    if not return_indices:
        return out
    # each offset's position in the unpadded input, flattened over the spatial dims
    sizes = list(input.shape[-nd:])
    grids = np.meshgrid(*(np.arange(n) for n in out_sizes), indexing="ij")
    flat = np.zeros((k, *out_sizes), np.int64)
    for i, ks in enumerate(itertools.product(*(range(k) for k in kernel))):
        pos = np.zeros(out_sizes, np.int64)
        for g, j, s, p, d, n in zip(grids, ks, stride, pads, dilation, sizes):
            pos = pos * n + (g * s - p + j * d)
        flat[i] = pos
    table = _factories.tensor(flat, device=input.device)
    indices = _t.where(chosen, table, 0).sum(2)
    return out, indices if batched else indices.squeeze(0)


def _avg_divisor(sizes, kernel, stride, pads, out_sizes, count_include_pad):
    """PyTorch's divisor of each output position: the window's size clipped to the padded
    input (``count_include_pad``) or to the input."""
    divisor = np.ones(out_sizes)
    for axis, (n, k, s, p, o) in enumerate(zip(sizes, kernel, stride, pads, out_sizes)):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        counts = end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0)
        shape = [1] * len(out_sizes)
        shape[axis] = o
        divisor = divisor * counts.reshape(shape)
    return divisor


def _avg_pool(nd, fn, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    kernel, stride, pads, dilation = _pool_args(nd, fn, input, kernel_size, stride, padding, 1)
    _pool_checks(nd, fn, input, kernel, stride, pads, dilation)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    x, out_sizes, batched = _pool_input(nd, fn, input, kernel, stride, pads, dilation, ceil_mode, 0)
    total = None
    for ks in itertools.product(*(range(k) for k in kernel)):
        part = _window_slices(x, 2, ks, stride, out_sizes)
        total = part if total is None else total + part
    if divisor_override is not None:
        divisor = np.full(out_sizes, divisor_override)
    else:
        sizes = list(input.shape[-nd:])
        divisor = _avg_divisor(sizes, kernel, stride, pads, out_sizes, count_include_pad)
    dtype = input.dtype if input.is_floating_point() else D.int64
    d = _factories.tensor(divisor, dtype=dtype, device=input.device)
    out = total / d if input.is_floating_point() else total.div(d, rounding_mode="trunc").to(input.dtype)
    return out if batched else out.squeeze(0)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """The maximum of each window of ``kernel_size`` along the last dim of ``input`` (N, C, L)
    or (C, L); with ``return_indices`` also each maximum's position in the input row.

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> F.max_pool1d(ngrad.tensor([[[1.0, 5.0, 2.0, 4.0, 3.0]]]), 2, return_indices=True)
    (tensor([[[5., 4.]]]), tensor([[[1, 3]]]))

    ```
    """
    return _max_pool(1, "max_pool1d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """The maximum of each ``kernel_size`` window of ``input`` (N, C, H, W) or (C, H, W)
    (padding counts as -inf); with ``return_indices`` also each maximum's flat position
    ``h * W + w`` in its input plane.

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> F.max_pool2d(ngrad.arange(16.0).reshape(1, 4, 4), 2)
    tensor([[[ 5.,  7.],
             [13., 15.]]])

    ```
    """
    return _max_pool(2, "max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """The mean of each window of ``kernel_size`` along the last dim of ``input`` (N, C, L)
    or (C, L), zero padding counted when ``count_include_pad``.

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> F.avg_pool1d(ngrad.tensor([[1.0, 2.0, 3.0, 4.0]]), 2, padding=1, count_include_pad=False)
    tensor([[1.0000, 2.5000, 4.0000]])

    ```
    """
    return _avg_pool(1, "avg_pool1d", input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    """The mean of each ``kernel_size`` window of ``input`` (N, C, H, W) or (C, H, W): the
    sum divided by the window's size (clipped to the padded input, or to the input when not
    ``count_include_pad``), or by ``divisor_override``.

    ```python
    >>> import ngrad
    >>> import ngrad.nn.functional as F
    >>> F.avg_pool2d(ngrad.arange(16.0).reshape(1, 4, 4), 2)
    tensor([[[ 2.5000,  4.5000],
             [10.5000, 12.5000]]])

    ```
    """
    return _avg_pool(
        2, "avg_pool2d", input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )
