"""Convolution layers with PyTorch's constructors, default initialisation and printed form:
``Conv1d`` and ``Conv2d``.

Contract: parameters are created as in ``torch.nn`` (``weight`` of shape (out_channels,
in_channels / groups, *kernel_size) and ``bias`` of shape (out_channels,), both drawn by
``reset_parameters`` from PyTorch's distributions), the attributes (``kernel_size``,
``stride``, ``padding``, ``dilation``, ``groups``, ``padding_mode``...) are PyTorch's tuples,
``forward`` calls ``ngrad.nn.functional.conv1d``/``conv2d`` (after ``F.pad`` for a
``padding_mode`` other than ``'zeros'``), and ``extra_repr`` prints what PyTorch's prints.
"""

import math

from ... import factories
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

__all__ = ["Conv1d", "Conv2d"]

_PADDING_MODES = {"zeros", "reflect", "replicate", "circular"}
_PADDING_STRINGS = {"same", "valid"}


def _tuple(value, n):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


class _ConvNd(Module):
    """What ``Conv1d`` and ``Conv2d`` share: arguments, parameters, padding and printing."""

    _dims = 0

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups=1,
        bias=True,
        padding_mode="zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        n = self._dims
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        kernel_size, stride, dilation = _tuple(kernel_size, n), _tuple(stride, n), _tuple(dilation, n)
        if isinstance(padding, str):
            if padding not in _PADDING_STRINGS:
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {_PADDING_STRINGS}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        else:
            padding = _tuple(padding, n)
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {_PADDING_MODES}, but got padding_mode='{padding_mode}'")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.transposed, self.output_padding = False, (0,) * n
        self.groups, self.padding_mode = groups, padding_mode
        if padding == "same":  # the left pad takes the smaller half of an odd total, as PyTorch
            pads = []
            for d, k in zip(reversed(dilation), reversed(kernel_size)):
                total = d * (k - 1)
                pads += [total // 2, total - total // 2]
            self._reversed_padding_repeated_twice = pads
        elif padding == "valid":
            self._reversed_padding_repeated_twice = [0, 0] * n
        else:
            self._reversed_padding_repeated_twice = [p for p in reversed(padding) for _ in range(2)]
        shape = (out_channels, in_channels // groups, *kernel_size)
        self.weight = Parameter(factories.empty(shape, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(factories.empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        """``weight`` and ``bias`` from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in being
        ``in_channels / groups * prod(kernel_size)`` (PyTorch's kaiming_uniform_ with a = sqrt(5))."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = math.prod(self.weight.shape[1:])
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _conv_forward(self, input, weight, bias):
        conv = F.conv1d if self._dims == 1 else F.conv2d
        if self.padding_mode != "zeros":
            padded = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv(padded, weight, bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * len(self.padding):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """1-D convolution over (N, C_in, L) or (C_in, L) inputs: ``weight`` (C_out, C_in / groups,
    k), ``padding`` an int or ``'same'``/``'valid'``, ``padding_mode`` ``'zeros'``,
    ``'reflect'``, ``'replicate'`` or ``'circular'``.

    ```python
    >>> import ngrad
    >>> conv = ngrad.nn.Conv1d(2, 4, 3, padding="same", padding_mode="circular")
    >>> conv, conv(ngrad.ones(8, 2, 10)).shape
    (Conv1d(2, 4, kernel_size=(3,), stride=(1,), padding=same, padding_mode=circular), ngrad.Size([8, 4, 10]))

    ```
    """

    _dims = 1


class Conv2d(_ConvNd):
    """2-D convolution over (N, C_in, H, W) or (C_in, H, W) inputs: ``weight`` (C_out,
    C_in / groups, kH, kW); ``kernel_size``, ``stride``, ``padding`` and ``dilation`` are ints
    or pairs (``padding`` also ``'same'`` or ``'valid'``).

    ```python
    >>> import ngrad
    >>> conv = ngrad.nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
    >>> conv, conv(ngrad.ones(4, 3, 28, 28)).shape
    (Conv2d(3, 16, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False), ngrad.Size([4, 16, 14, 14]))

    ```
    """

    _dims = 2
