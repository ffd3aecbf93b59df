"""``ngrad.utils.data``: datasets, samplers and ``DataLoader``, as ``torch.utils.data``.
See docs/data.md.

```python
>>> import ngrad
>>> from ngrad.utils.data import DataLoader, TensorDataset
>>> ds = TensorDataset(ngrad.randn(10, 3), ngrad.randn(10, 1))
>>> x, y = next(iter(DataLoader(ds, batch_size=4, shuffle=True)))
>>> x.shape, y.shape
(ngrad.Size([4, 3]), ngrad.Size([4, 1]))

```
"""

from .dataloader import DataLoader, default_collate, default_convert
from .dataset import ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "ConcatDataset",
    "Subset",
    "random_split",
    "DataLoader",
    "default_collate",
    "default_convert",
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "BatchSampler",
]
