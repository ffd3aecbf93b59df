"""``DataLoader`` and its collation, as in ``torch.utils.data``.

Contract: iterating a ``DataLoader`` reads the dataset's samples in its sampler's order (a new
permutation each epoch with ``shuffle=True``) and yields batches made by ``collate_fn``
(``default_collate``: tensors, NumPy arrays and numbers stacked into tensors along a new first
dimension, tuples, lists, dicts and named tuples collated field by field, strings left as lists).
Samples are read in this process: ``num_workers`` is accepted and ignored, since a worker
process would only move NumPy arrays around that ngrad keeps in this one.
"""

import collections.abc
import numbers

import numpy as np

from ...engine.ir import dtypes as D
from ...tensor import Tensor
from .dataset import IterableDataset, Subset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler, draw_base_seed

__all__ = ["DataLoader", "default_collate", "default_convert"]


def default_convert(data):
    """NumPy arrays (and numbers in NumPy types) to tensors, inside containers too."""
    from ...factories import as_tensor

    if isinstance(data, np.ndarray) and data.dtype.kind in "biuf":
        return as_tensor(data)
    if isinstance(data, np.generic) and data.dtype.kind in "biuf":
        return as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return type(data)({k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, (list, tuple)):
        return type(data)(default_convert(d) for d in data)
    return data


def default_collate(batch):
    """A list of samples as one batch: tensors stacked along a new first dimension, Python
    floats as a float64 tensor and ints as an int64 tensor (as PyTorch), containers collated
    element by element.

    ```python
    >>> import ngrad
    >>> from ngrad.utils.data import default_collate
    >>> default_collate([(ngrad.tensor([1.0, 2.0]), 0), (ngrad.tensor([3.0, 4.0]), 1)])
    [tensor([[1., 2.],
            [3., 4.]]), tensor([0, 1])]

    ```
    """
    from ...factories import as_tensor, tensor
    from ...tensor import stack

    first = batch[0]
    if isinstance(first, Tensor):
        return stack(list(batch))
    if isinstance(first, np.ndarray) and first.dtype.kind in "biuf":
        return stack([as_tensor(b) for b in batch])
    if isinstance(first, np.generic) and first.dtype.kind in "biuf":
        return as_tensor(np.array(batch))
    if isinstance(first, bool):
        return tensor(batch, dtype=D.bool_)
    if isinstance(first, float):
        return tensor(batch, dtype=D.float64)
    if isinstance(first, int):
        return tensor(batch, dtype=D.int64)
    if isinstance(first, (str, bytes)):
        return batch
    if isinstance(first, collections.abc.Mapping):
        return type(first)({k: default_collate([d[k] for d in batch]) for k in first})
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(first, collections.abc.Sequence):
        if any(len(b) != len(first) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch)]
    if isinstance(first, numbers.Number):
        return tensor(batch)
    raise TypeError(
        f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {type(first)}"
    )


def _tensor_rows(dataset, indices):
    """``default_collate`` of the samples at ``indices`` of a ``TensorDataset`` (reached through
    ``Subset``\\ s), as one indexing per tensor; None for any other dataset."""
    while isinstance(dataset, Subset):
        indices = [dataset.indices[i] for i in indices]
        dataset = dataset.dataset
    if type(dataset) is not TensorDataset:
        return None
    if not indices:
        return []
    index = np.asarray(indices, dtype=np.int64)
    return [t[index] for t in dataset.tensors]


class DataLoader:
    """Batches of a dataset, in order or shuffled, as ``torch.utils.data.DataLoader``.

    ```python
    >>> import ngrad
    >>> from ngrad.utils.data import DataLoader, TensorDataset
    >>> ds = TensorDataset(ngrad.arange(5.0), ngrad.arange(5) * 10)
    >>> [y.tolist() for _, y in DataLoader(ds, batch_size=2)]
    [[0, 10], [20, 30], [40]]

    ```
    """

    def __init__(
        self,
        dataset,
        batch_size=1,
        shuffle=None,
        sampler=None,
        batch_sampler=None,
        num_workers=0,
        collate_fn=None,
        pin_memory=False,
        drop_last=False,
        timeout=0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor=None,
        persistent_workers=False,
        pin_memory_device="",
        in_order=True,
    ):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        self.dataset = dataset
        self.num_workers = num_workers
        self.timeout = timeout
        self.pin_memory = pin_memory
        self.generator = generator
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            if shuffle not in (None, False):
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified shuffle option, but got shuffle={shuffle}"
                )
            if sampler is not None:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified sampler option, but got sampler={sampler}"
                )
            if batch_sampler is not None:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified batch_sampler option, but got "
                    f"batch_sampler={batch_sampler}"
                )
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
                )
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is None and not iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self._iterable = iterable
        if collate_fn is None:
            collate_fn = default_collate if batch_size is not None or batch_sampler is not None else default_convert
        self.collate_fn = collate_fn

    def __iter__(self):
        draw_base_seed(self.generator)
        if self._iterable:
            return self._iterate_stream()
        if self.batch_sampler is not None:
            if self.collate_fn is default_collate and _tensor_rows(self.dataset, []) is not None:
                # rows of a TensorDataset (or a Subset of one) read with one index per tensor: what
                # stacking each sample gives, without a Python round trip per sample
                return (_tensor_rows(self.dataset, idx) for idx in self.batch_sampler)
            return (self.collate_fn([self.dataset[i] for i in idx]) for idx in self.batch_sampler)
        return (self.collate_fn(self.dataset[i]) for i in self.sampler)

    def _iterate_stream(self):
        if self.batch_size is None:
            yield from (self.collate_fn(s) for s in self.dataset)
            return
        batch = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.sampler)
