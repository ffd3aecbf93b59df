"""``ngrad.nn.utils.rnn``: sequences of different lengths for the recurrent layers, as in
``torch.nn.utils.rnn``: ``PackedSequence``, ``pack_padded_sequence``, ``pad_packed_sequence``,
``pad_sequence``, ``unpad_sequence``, ``pack_sequence``, ``unpack_sequence``.

Contract: a ``PackedSequence`` holds the steps of a batch of sequences sorted by decreasing
length, time-major: ``data`` (sum of lengths, *) has the ``batch_sizes[t]`` sequences still
running at step t one after the other, ``batch_sizes`` is an int64 tensor, and
``sorted_indices``/``unsorted_indices`` map the caller's batch order to the sorted one and back
(None when the input was already sorted). Packing, padding and unpadding are differentiable
(slices, ``cat`` and ``index_select`` of the values); lengths and indices are integer tensors.
"""

import collections

import numpy as np

from ...tensor import Tensor

__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpad_sequence",
    "pack_sequence",
    "unpack_sequence",
]


def _int64(values):
    from ...factories import tensor

    return tensor(np.asarray(values, dtype=np.int64))


def invert_permutation(permutation):
    """The permutation that undoes ``permutation`` (None stays None).

    ```python
    >>> import ngrad
    >>> from ngrad.nn.utils.rnn import invert_permutation
    >>> invert_permutation(ngrad.tensor([2, 0, 1]))
    tensor([1, 2, 0])

    ```
    """
    if permutation is None:
        return None
    return _int64(np.argsort(np.asarray(permutation.tolist(), dtype=np.int64), kind="stable"))


class PackedSequence(
    collections.namedtuple("PackedSequence_", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])
):
    """A batch of sequences of different lengths, packed (see the module's docstring). Made by
    ``pack_padded_sequence`` or ``pack_sequence``; ``RNN``, ``LSTM`` and ``GRU`` take it as input
    and return their output in it.

    ```python
    >>> import ngrad
    >>> from ngrad.nn.utils.rnn import pack_sequence
    >>> packed = pack_sequence([ngrad.tensor([1.0, 2.0, 3.0]), ngrad.tensor([4.0])])
    >>> packed.data, packed.batch_sizes
    (tensor([1., 4., 2., 3.]), tensor([2, 1, 1]))

    ```
    """

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:  # PyTorch's old form: PackedSequence((data, batch_sizes))
            data, batch_sizes = data
        if batch_sizes.device.type != "cpu":
            raise ValueError(
                "batch_sizes should always be on CPU. Instances of PackedSequence should never be created "
                "manually. They should be instantiated by functions like pack_sequence and "
                "pack_padded_sequences in nn.utils.rnn. https://pytorch.org/docs/stable/nn.html#torch.nn.utils.rnn.pack_sequence"
            )
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """The same packing with ``data.to(...)`` (indices follow its device; ``batch_sizes``
        stays on the CPU)."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        sorted_indices, unsorted_indices = self.sorted_indices, self.unsorted_indices
        if sorted_indices is not None:
            sorted_indices = sorted_indices.to(data.device)
            unsorted_indices = unsorted_indices.to(data.device)
        return type(self)(data, self.batch_sizes, sorted_indices, unsorted_indices)

    def cpu(self):
        """On the CPU."""
        return self.to("cpu")

    def cuda(self, *args, **kwargs):
        """On the CUDA device."""
        return self.to("cuda")

    def double(self):
        """With float64 data."""
        return self.to(dtype=_dtype("float64"))

    def float(self):
        """With float32 data."""
        return self.to(dtype=_dtype("float32"))

    @property
    def is_cuda(self):
        """Whether the data is on a CUDA device."""
        return self.data.is_cuda


def _dtype(name):
    import ngrad

    return getattr(ngrad, name)


def _lengths(lengths):
    if isinstance(lengths, Tensor):
        lengths = lengths.tolist()
    return np.asarray(lengths, dtype=np.int64).reshape(-1)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded batch (T, B, *) (or (B, T, *) with ``batch_first``) whose sequence b has
    ``lengths[b]`` steps. With ``enforce_sorted`` the lengths must decrease; otherwise the batch
    is sorted here and the order kept in ``sorted_indices``.

    ```python
    >>> import ngrad
    >>> from ngrad.nn.utils.rnn import pack_padded_sequence
    >>> x = ngrad.tensor([[1.0, 4.0], [0.0, 5.0], [0.0, 6.0]])  # (T=3, B=2): [1], [4, 5, 6]
    >>> p = pack_padded_sequence(x, [1, 3], enforce_sorted=False)
    >>> p.data, p.batch_sizes, p.sorted_indices
    (tensor([4., 1., 5., 6.]), tensor([2, 1, 1]), tensor([1, 0]))

    ```
    """
    lengths = _lengths(lengths)
    batch_dim = 0 if batch_first else 1
    sorted_indices = None
    if not enforce_sorted:
        order = np.argsort(-lengths, kind="stable")
        lengths = lengths[order]
        sorted_indices = _int64(order)
        input = input.index_select(batch_dim, sorted_indices)
    if input.numel() == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    x = input.transpose(0, 1) if batch_first else input
    batch = x.shape[1]
    if len(lengths) != batch:
        raise RuntimeError(
            f"Expected `len(lengths)` to be equal to batch_size, but got {len(lengths)} (batch_size={batch})"
        )
    if lengths[-1] <= 0:
        raise RuntimeError(
            "Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0"
        )
    if np.any(lengths[:-1] < lengths[1:]):
        raise RuntimeError(
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass "
            "`enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this requirement "
            "if you do not need ONNX exportability."
        )
    if lengths[0] > x.shape[0]:
        raise RuntimeError(f"Expected the longest length ({lengths[0]}) to be at most the sequence length {x.shape[0]}")
    from ...tensor import cat

    batch_sizes = [int((lengths > t).sum()) for t in range(int(lengths[0]))]
    data = cat([x[t, :b] for t, b in enumerate(batch_sizes)])
    return PackedSequence(data, _int64(batch_sizes), sorted_indices, None)


def _full(shape, value, like):
    from ...factories import full

    return full(shape, value, dtype=like.dtype, device=like.device)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """Undo ``pack_padded_sequence``: ``(padded, lengths)``, padded (T, B, *) (or (B, T, *))
    in the caller's batch order, T the longest length or ``total_length``, the padding
    ``padding_value``; lengths an int64 tensor.

    ```python
    >>> import ngrad
    >>> from ngrad.nn.utils.rnn import pack_sequence, pad_packed_sequence
    >>> p = pack_sequence([ngrad.tensor([1.0]), ngrad.tensor([2.0, 3.0])], enforce_sorted=False)
    >>> pad_packed_sequence(p, batch_first=True, padding_value=-1.0)
    (tensor([[ 1., -1.],
            [ 2.,  3.]]), tensor([1, 2]))

    ```
    """
    from ...tensor import cat, stack

    data = sequence.data
    sizes = [int(b) for b in sequence.batch_sizes.tolist()]
    steps = len(sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError(
                "Expected total_length to be at least the length of the longest sequence in input, but got "
                f"total_length={total_length} and max sequence length being {steps}"
            )
        steps = total_length
    batch, rest = sizes[0], tuple(data.shape[1:])
    rows, offset = [], 0
    for b in sizes:
        step = data[offset : offset + b]
        offset += b
        rows.append(step if b == batch else cat([step, _full((batch - b, *rest), padding_value, data)]))
    rows += [_full((batch, *rest), padding_value, data)] * (steps - len(sizes))
    padded = stack(rows)
    lengths = np.array([sum(1 for b in sizes if b > i) for i in range(batch)], dtype=np.int64)
    if batch_first:
        padded = padded.transpose(0, 1)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(0 if batch_first else 1, sequence.unsorted_indices)
        lengths = lengths[np.asarray(sequence.unsorted_indices.tolist(), dtype=np.int64)]
    return padded, _int64(lengths)


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack tensors (L_i, *) of different lengths into (max L, B, *) (or (B, max L, *)),
    padded with ``padding_value`` on the ``padding_side`` (``'right'`` or ``'left'``).

    ```python
    >>> import ngrad
    >>> from ngrad.nn.utils.rnn import pad_sequence
    >>> pad_sequence([ngrad.tensor([1.0, 2.0]), ngrad.tensor([3.0])], batch_first=True)
    tensor([[1., 2.],
            [3., 0.]])

    ```
    """
    from ...tensor import cat, stack

    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    if isinstance(sequences, Tensor):
        sequences = sequences.unbind(0)
    sequences = list(sequences)
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        if s.shape[0] == longest:
            padded.append(s)
            continue
        fill = _full((longest - s.shape[0], *s.shape[1:]), padding_value, s)
        padded.append(cat([s, fill] if padding_side == "right" else [fill, s]))
    return stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences ``pad_sequence`` stacked: sequence b is its first ``lengths[b]``
    steps."""
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[b, : int(n)] for b, n in enumerate(_lengths(lengths))]


def pack_sequence(sequences, enforce_sorted=True):
    """Pack a list of tensors (L_i, *): ``pack_padded_sequence(pad_sequence(sequences),
    lengths)``."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of tensors ``pack_sequence`` packed, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
