"""Pooling layers with PyTorch's constructors and printed form: ``MaxPool1d``, ``MaxPool2d``,
``AvgPool1d``, ``AvgPool2d``.

Contract: the constructor keeps its arguments as PyTorch's modules do (``stride`` defaults to
``kernel_size``; ``AvgPool1d`` stores one-tuples), ``forward`` calls the matching
``ngrad.nn.functional`` pooling, and ``extra_repr`` prints what PyTorch's prints. No
parameters.
"""

from .. import functional as F
from .module import Module

__all__ = ["MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d"]


class _MaxPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self):
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class MaxPool1d(_MaxPoolNd):
    """The maximum of each window along the last dim of (N, C, L) or (C, L) inputs (padding
    counts as -inf); with ``return_indices`` also the maxima's positions.

    ```python
    >>> import ngrad
    >>> pool = ngrad.nn.MaxPool1d(2)
    >>> pool, pool(ngrad.tensor([[[1.0, 5.0, 2.0, 4.0]]]))
    (MaxPool1d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False), tensor([[[5., 4.]]]))

    ```
    """

    def forward(self, input):
        return F.max_pool1d(
            input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, self.return_indices
        )


class MaxPool2d(_MaxPoolNd):
    """The maximum of each ``kernel_size`` window of (N, C, H, W) or (C, H, W) inputs; with
    ``return_indices`` also each maximum's flat position ``h * W + w`` in its plane.

    ```python
    >>> import ngrad
    >>> pool = ngrad.nn.MaxPool2d(3, stride=2, ceil_mode=True)
    >>> pool, pool(ngrad.ones(1, 2, 8, 8)).shape
    (MaxPool2d(kernel_size=3, stride=2, padding=0, dilation=1, ceil_mode=True), ngrad.Size([1, 2, 4, 4]))

    ```
    """

    def forward(self, input):
        return F.max_pool2d(
            input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, self.return_indices
        )


class AvgPool1d(Module):
    """The mean of each window along the last dim of (N, C, L) or (C, L) inputs.

    ```python
    >>> import ngrad
    >>> pool = ngrad.nn.AvgPool1d(2)
    >>> pool, pool(ngrad.tensor([[1.0, 3.0, 5.0, 7.0]]))
    (AvgPool1d(kernel_size=(2,), stride=(2,), padding=(0,)), tensor([[2., 6.]]))

    ```
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size = _single(kernel_size)
        self.stride = _single(stride if stride is not None else kernel_size)
        self.padding = _single(padding)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """The mean of each ``kernel_size`` window of (N, C, H, W) or (C, H, W) inputs, divided by
    the window's size (``count_include_pad``: padding included) or ``divisor_override``.

    ```python
    >>> import ngrad
    >>> pool = ngrad.nn.AvgPool2d(2, padding=1, count_include_pad=False)
    >>> pool, pool(ngrad.ones(1, 3, 3)).shape
    (AvgPool2d(kernel_size=2, stride=2, padding=1), ngrad.Size([1, 2, 2]))

    ```
    """

    def __init__(
        self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
    ):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return F.avg_pool2d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


def _single(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)
