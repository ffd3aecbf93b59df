"""Datasets, as in ``torch.utils.data``: ``Dataset``, ``IterableDataset``, ``TensorDataset``,
``ConcatDataset``, ``Subset`` and ``random_split``.

Contract: a map-style dataset has ``__getitem__`` (and usually ``__len__``); ``random_split``
draws one permutation (from ``generator``, else ngrad's generator) and cuts it into the
requested lengths, given as counts or as fractions summing to 1 (remainders dealt round-robin,
as PyTorch does).
"""

import bisect
import math
import warnings

import numpy as np

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "Subset", "random_split"]


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__(index)`` and ``__len__``.
    ``a + b`` concatenates two datasets."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset read as a stream: subclasses define ``__iter__``."""

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other):
        raise TypeError("IterableDataset does not support concatenation with +")


class TensorDataset(Dataset):
    """Samples are the rows of tensors of equal first dimension: ``ds[i] = (t[i] for t in tensors)``.

    ```python
    >>> import ngrad
    >>> from ngrad.utils.data import TensorDataset
    >>> ds = TensorDataset(ngrad.arange(3), ngrad.tensor([10, 20, 30]))
    >>> len(ds), ds[1]
    (3, (tensor(1), tensor(20)))

    ```
    """

    def __init__(self, *tensors):
        if any(tensors[0].size(0) != t.size(0) for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].size(0)


class ConcatDataset(Dataset):
    """The datasets one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]).tolist())

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        i = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[i - 1] if i > 0 else 0
        return self.datasets[i][idx - start]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self):
        return len(self.indices)


def permutation(n, generator=None):
    """A random permutation of ``range(n)`` as a list, PyTorch's ``randperm(n, generator=...)``:
    from ``generator`` (an ``ngrad.Generator``; a NumPy ``Generator`` is also taken, with NumPy's
    numbers) or, when None, from ngrad's default generator (``ngrad.manual_seed``)."""
    if isinstance(generator, np.random.Generator):
        return generator.permutation(n).tolist()
    from ...factories import randperm
    from ...random import Generator

    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(
            f"generator must be None or a numpy.random.Generator (or a ngrad.Generator), got {type(generator).__name__}"
        )
    return randperm(n, generator=generator).tolist()


def random_split(dataset, lengths, generator=None):
    """Split ``dataset`` into non-overlapping random ``Subset``\\ s of the given lengths (counts
    summing to ``len(dataset)``, or fractions summing to 1).

    ```python
    >>> import ngrad
    >>> from ngrad.utils.data import random_split
    >>> a, b = random_split(range(10), [0.7, 0.3], generator=ngrad.Generator().manual_seed(0))
    >>> len(a), len(b), sorted(list(a) + list(b)) == list(range(10))
    (7, 3, True)

    ```
    """
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            counts.append(int(math.floor(n * frac)))
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, c in enumerate(counts):
            if c == 0:
                warnings.warn(
                    f"Length of split at index {i} is 0. This might result in an empty dataset.", stacklevel=2
                )
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = permutation(n, generator)
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, order[start : start + length]))
        start += length
    return out
