"""ngrad.utils.data: every epoch sees every sample once, shuffling, samplers, collation of
tensors, numbers, tuples, dicts and named tuples, random_split; against torch.utils.data's
batches, dtypes and errors where torch is installed."""

from collections import namedtuple

import numpy as np
import pytest

import ngrad
from ngrad.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
    default_collate,
    random_split,
)


def _dataset(n=23):
    return TensorDataset(ngrad.arange(n).to(ngrad.float64).reshape(n, 1) * 2, ngrad.arange(n))


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (5, False), (5, True), (23, False), (30, True)])
def test_every_epoch_sees_every_sample_once(batch_size, drop_last):
    ds = _dataset()
    loader = DataLoader(ds, batch_size=batch_size, shuffle=True, drop_last=drop_last)
    full = 23 // batch_size
    assert len(loader) == (full if drop_last else -(-23 // batch_size))
    orders = []
    for _ in range(2):
        seen = []
        for x, y in loader:
            assert x.shape == (len(y), 1) and x.dtype is ngrad.float64 and y.dtype is ngrad.int64
            np.testing.assert_array_equal(x.numpy()[:, 0], 2 * y.numpy())  # samples stay whole
            seen += y.tolist()
        orders.append(seen)
        if drop_last:
            assert len(seen) == full * batch_size and len(set(seen)) == len(seen)
        else:
            assert sorted(seen) == list(range(23))
    if batch_size < 23 and not drop_last:
        assert orders[0] != orders[1]  # a new permutation each epoch


def test_sequential_batches_and_collation_match_pytorch():
    Point = namedtuple("Point", "x y")

    class Samples(Dataset):
        def __init__(self, t):
            self.t = t

        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {
                "tensor": self.t.full((2,), float(i)),
                "pair": (i, float(i) / 2),
                "array": np.arange(3, dtype=np.float32) + i,
                "name": f"s{i}",
                "point": Point(i, True),
                "scalar": np.int32(i),
            }

    def batches(t, data):
        return list(data.DataLoader(Samples(t), batch_size=2))

    mine = batches(ngrad, ngrad.utils.data)
    assert len(mine) == 3 and mine[2]["name"] == ["s4"]
    assert mine[0]["tensor"].tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert mine[0]["pair"][0].dtype is ngrad.int64 and mine[0]["pair"][1].dtype is ngrad.float64
    assert mine[0]["array"].dtype is ngrad.float32 and mine[0]["array"].shape == (2, 3)
    assert type(mine[0]["point"]).__name__ == "Point" and mine[0]["point"].y.dtype is ngrad.bool
    torch = pytest.importorskip("torch")
    theirs = batches(torch, torch.utils.data)

    def plain(b):
        if hasattr(b, "numpy"):
            return (str(b.dtype).split(".")[-1], b.numpy().tolist())
        if isinstance(b, dict):
            return {k: plain(v) for k, v in b.items()}
        if isinstance(b, (list, tuple)):
            return (type(b).__name__, [plain(v) for v in b])
        return b

    assert [plain(b) for b in mine] == [plain(b) for b in theirs]


def test_samplers_and_their_lengths():
    ds = range(7)
    assert list(SequentialSampler(ds)) == list(range(7))
    assert sorted(RandomSampler(ds)) == list(range(7))
    draws = list(RandomSampler(ds, replacement=True, num_samples=50))
    assert len(draws) == 50 and set(draws) <= set(range(7))
    long = list(RandomSampler(ds, num_samples=10))
    assert len(long) == 10 and sorted(long[:7]) == list(range(7))
    assert sorted(SubsetRandomSampler([3, 5, 9])) == [3, 5, 9]
    assert (
        list(BatchSampler(range(7), 3, True)) == [[0, 1, 2], [3, 4, 5]] and len(BatchSampler(range(7), 3, False)) == 3
    )
    loader = DataLoader(range(10), batch_sampler=BatchSampler(range(10), 4, False))
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert list(DataLoader(range(3), batch_size=None)) == [0, 1, 2]  # no batching: samples converted only
    one = list(DataLoader(_dataset(3), batch_size=None))
    assert one[1][1].tolist() == 1 and one[1][0].shape == (1,)


def test_shuffle_with_a_generator_repeats():
    ds = _dataset(12)

    def order(seed):
        loader = DataLoader(ds, batch_size=4, shuffle=True, generator=np.random.default_rng(seed))
        return [y.tolist() for _, y in loader]

    assert order(3) == order(3) and order(3) != order(4)
    _ = ngrad.manual_seed(5)
    a = [y.tolist() for _, y in DataLoader(ds, batch_size=4, shuffle=True)]
    _ = ngrad.manual_seed(5)
    assert a == [y.tolist() for _, y in DataLoader(ds, batch_size=4, shuffle=True)]
    with pytest.raises(TypeError, match="generator must be None or a numpy.random.Generator"):
        list(DataLoader(ds, shuffle=True, generator=object()))


def test_random_split_concat_and_subset():
    parts = random_split(range(10), [3, 7], generator=np.random.default_rng(0))
    assert [len(p) for p in parts] == [3, 7] and sorted(list(parts[0]) + list(parts[1])) == list(range(10))
    fractions = random_split(range(11), [0.5, 0.3, 0.2])
    assert [len(p) for p in fractions] == [6, 3, 2]  # floor(5.5, 3.3, 2.2), the remainder dealt from the first
    with pytest.raises(ValueError, match="Sum of input lengths does not equal the length of the input dataset!"):
        random_split(range(10), [3, 3])
    cat = ConcatDataset([range(3), range(10, 12)])
    assert len(cat) == 5 and cat[3] == 10 and cat[-1] == 11 and list(_dataset(4) + _dataset(2))[5][1].item() == 1
    assert Subset(range(10, 20), [4, 2])[1] == 12
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        TensorDataset(ngrad.zeros(3), ngrad.zeros(4))
    torch = pytest.importorskip("torch")
    theirs = torch.utils.data.random_split(range(11), [0.5, 0.3, 0.2])
    assert [len(p) for p in theirs] == [len(p) for p in fractions]


def test_iterable_datasets_and_option_errors_match_pytorch():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(7))

    assert [b.tolist() for b in DataLoader(Stream(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    cases = [
        lambda d: d.DataLoader(range(3), sampler=d.SequentialSampler(range(3)), shuffle=True),
        lambda d: d.DataLoader(range(3), batch_sampler=d.BatchSampler(range(3), 2, False), batch_size=2),
        lambda d: d.DataLoader(range(3), batch_size=None, drop_last=True),
        lambda d: d.DataLoader(range(3), num_workers=-1),
        lambda d: d.BatchSampler(range(3), 0, False),
        lambda d: d.RandomSampler(range(3), num_samples=0),
    ]
    for i, case in enumerate(cases):
        with pytest.raises(ValueError) as mine:
            case(ngrad.utils.data)
        try:
            import torch
        except ImportError:
            continue
        with pytest.raises(ValueError) as theirs:
            case(torch.utils.data)
        assert str(mine.value) == str(theirs.value), i
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        default_collate([[1, 2], [3]])


def test_tensor_datasets_are_batched_by_one_indexing_with_the_same_result():
    ds = _dataset(11)
    parts = random_split(ds, [7, 4], generator=np.random.default_rng(1))
    for data in (ds, parts[0], Subset(parts[1], [3, 0, 2])):
        fast = list(DataLoader(data, batch_size=3))
        slow = list(DataLoader(data, batch_size=3, collate_fn=lambda b: default_collate(b)))
        assert len(fast) == len(slow) == -(-len(data) // 3)
        for a, b in zip(fast, slow):
            assert type(a) is list and [t.dtype for t in a] == [t.dtype for t in b]
            assert [t.tolist() for t in a] == [t.tolist() for t in b]
    assert list(DataLoader(TensorDataset(ngrad.zeros(0, 2)), batch_size=2)) == []
