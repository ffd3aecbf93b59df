"""The in-place random fills of ``Tensor`` (``uniform_``, ``normal_``, ``bernoulli_``,
``exponential_``, ``random_``) and ``Tensor.bernoulli``, as PyTorch's CPU kernels fill them.

Contract: each draws from ``generator`` (``ngrad.random.default_generator`` when None) through
``ngrad.sampling``, with PyTorch's argument checks and messages, and writes the result with
``copy_`` (so autograd sees a fill that does not depend on the old values, and a leaf that
requires grad refuses it outside ``no_grad``, as in PyTorch). Values go to the elements in the
order of their memory (a transposed tensor is filled along its storage, as PyTorch's
TensorIterator does).
"""

import numpy as np

from .. import sampling
from ..engine.ir import dtypes as D
from ..random import generator_or_default

__all__ = ["RandomOps", "zero_gradient_from"]


def _memory_order(t):
    """Dimensions from the largest stride to the smallest (the storage's row-major order)."""
    strides = t.stride()
    return sorted(range(t.dim()), key=lambda d: -strides[d])


def zero_gradient_from(value, *sources):
    """``value``, made to depend on each of ``sources`` that requires grad with a zero gradient
    (PyTorch's derivative of a draw with respect to its parameters, e.g. ``normal``'s mean)."""
    from .functions import where

    for src in sources:
        if getattr(src, "requires_grad", False):
            value = where(value.new_zeros(tuple(value.shape), dtype=D.bool_), src.to(value.dtype), value)
    return value


def _fill(t, sample, *sources):
    """Write ``sample(n)`` (a flat array) into ``t`` in memory order."""
    from ..factories import tensor

    order = _memory_order(t)
    shape = tuple(t.shape)
    flat = sample(t.numel()).astype(t.dtype.np)
    value = flat.reshape([shape[d] for d in order]).transpose(np.argsort(order))
    value = tensor(np.array(value, order="C"), dtype=t.dtype, device=t.device)
    return t.copy_(zero_gradient_from(value, *sources))


def _generator(generator):
    """The generator to draw from, unless ngrad.compile is tracing (a draw would be frozen)."""
    from ..tracing import check_random  # the tracer imports Tensor

    check_random()
    return generator_or_default(generator)


def _floating(t, name):
    if not t.dtype.is_floating_point:
        from .record import TORCH_NAME

        raise NotImplementedError(f"\"{name}\" not implemented for '{TORCH_NAME[t.dtype.short]}'")


class RandomOps:
    def uniform_(self, from_=0.0, to=1.0, *, generator=None, **kwargs):
        """Fill with samples of U[from, to) (PyTorch's numbers for the same generator state)."""
        from_ = kwargs.pop("from", from_)
        _floating(self, "check_uniform_bounds")
        if from_ > to:
            raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}")
        gen = _generator(generator)
        return _fill(self, lambda n: sampling.uniform(gen, n, self.dtype.np, from_, to))

    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        """Fill with samples of N(mean, std**2).

        ```python
        >>> import ngrad
        >>> _ = ngrad.manual_seed(0)
        >>> ngrad.empty(2).normal_(1.0, 0.5)
        tensor([1.7705, 0.8533])

        ```
        """
        _floating(self, "normal_kernel_cpu")
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        gen = _generator(generator)
        dense = self.is_contiguous()
        return _fill(self, lambda n: sampling.normal(gen, n, self.dtype.np, mean, std, dense))

    def exponential_(self, lambd=1.0, *, generator=None):
        """Fill with samples of Exp(lambd)."""
        _floating(self, "exponential_cpu")
        if not lambd > 0:
            raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
        gen = _generator(generator)
        return _fill(self, lambda n: sampling.exponential(gen, n, self.dtype.np, lambd))

    def bernoulli_(self, p=0.5, *, generator=None):
        """Fill with ones with probability ``p`` (a number, or a tensor broadcast to this shape)
        and zeros elsewhere."""
        from .record import TensorBase

        gen = _generator(generator)
        if isinstance(p, TensorBase):
            probs = np.broadcast_to(p.detach().numpy(), tuple(self.shape))
            if probs.size and (probs.min() < 0 or probs.max() > 1):
                raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
            probs = probs.transpose(_memory_order(self))
            drawn = sampling.bernoulli(gen, probs).reshape(-1)
            return _fill(self, lambda n: drawn, p)
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
        return _fill(self, lambda n: sampling.bernoulli(gen, p, n))

    def bernoulli(self, p=None, *, generator=None):
        """A new tensor of ones with probability ``self`` (or ``p``) and zeros elsewhere."""
        from ..factories import empty_like

        return empty_like(self).bernoulli_(self if p is None else p, generator=generator)

    def random_(self, from_=0, to=None, *, generator=None, **kwargs):
        """Fill with integers: in [from, to), in [0, from) when only one bound is given, or over
        the dtype's range (floats: [0, 2**mantissa digits]) without bounds."""
        from_ = kwargs.pop("from", from_)
        gen = _generator(generator)
        dtype = self.dtype.np
        if to is None and from_ == 0:
            return _fill(self, lambda n: sampling.full_range(gen, n, dtype))
        low, high = (0, from_) if to is None else (from_, to)
        if low >= high:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
        return _fill(self, lambda n: sampling.integers(gen, n, dtype, int(low), int(high)))
