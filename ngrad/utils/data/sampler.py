"""Samplers, as in ``torch.utils.data``: the order in which a ``DataLoader`` reads indices.

Contract: ``SequentialSampler`` yields 0..n-1; ``RandomSampler`` a new permutation each epoch
(or ``num_samples`` draws with replacement); ``SubsetRandomSampler`` a permutation of given
indices; both draw as PyTorch's do (from their ``generator``, an ``ngrad.Generator``, or from a
generator seeded by one draw of the default one), so they give PyTorch's orders for a seed;
``BatchSampler`` groups another sampler's indices into lists of ``batch_size``
(the last one shorter unless ``drop_last``).
"""

import numpy as np

from ...engine.ir.dtypes import int64
from .dataset import permutation

__all__ = ["draw_base_seed", "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "BatchSampler"]


def draw_base_seed(generator=None):
    """Draw what PyTorch's DataLoader draws when an iteration starts (its workers' base seed, one
    int64 from ``generator`` or the default generator), so that the draws after it stay PyTorch's;
    a NumPy ``generator`` is left alone."""
    if isinstance(generator, np.random.Generator):
        return None
    from ...factories import empty
    from ...random import Generator

    if generator is not None and not isinstance(generator, Generator):
        permutation(0, generator)  # its TypeError

    return int(empty((), dtype=int64).random_(generator=generator).item())


class Sampler:
    """Base class: an iterable of dataset indices (subclasses define ``__iter__``)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """Indices 0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices each epoch; with ``replacement``, ``num_samples``
    independent draws."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={self.replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        generator = self.generator
        if generator is None:
            # PyTorch seeds a fresh generator from one draw of the default one each epoch
            from ...random import Generator

            generator = Generator().manual_seed(draw_base_seed())
        if self.replacement:
            if isinstance(generator, np.random.Generator):
                return iter(generator.integers(0, n, self.num_samples).tolist())
            from ...factories import randint

            # in blocks of 32, as PyTorch draws them (the same words either way)
            return iter(randint(0, n, (self.num_samples,), generator=generator).tolist())
        order = []
        for _ in range(self.num_samples // n):
            order += permutation(n, generator)
        order += permutation(n, generator)[: self.num_samples % n]
        return iter(order)

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order each epoch."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        return (self.indices[i] for i in permutation(len(self.indices), self.generator))

    def __len__(self):
        return len(self.indices)


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler``.

    ```python
    >>> from ngrad.utils.data import BatchSampler, SequentialSampler
    >>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
    [[0, 1], [2, 3], [4]]

    ```
    """

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(int(idx) if isinstance(idx, (np.integer,)) else idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size
