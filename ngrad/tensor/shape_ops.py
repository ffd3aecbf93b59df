"""Shape and movement operations of ``Tensor``: views (``reshape``, ``permute``, ``transpose``,
``squeeze``...), ``expand``, ``repeat``, ``flip``, ``roll``, ``split``, ``gather``, ``diagonal``...

Contract: a mixin of ``Tensor``; size arguments are checked with PyTorch's messages before
anything is recorded.
"""

import math

import numpy as np

from .. import grad_mode as _grad_mode
from ..engine.ir import dtypes as D
from . import views
from .functions import cat
from .record import (
    broadcast_shapes,
    expand_node,
    host_value,
    index_source,
    named,
    normalize_dim,
    normalize_dims,
    record_op,
    reshape_node,
    shape_arg,
    to_tensor,
    wrap,
)

_gm = _grad_mode.state


class ShapeOps:
    """Shape and movement operations (views, ``expand``, ``split``, ``gather``...), a mixin of ``Tensor``."""

    __slots__ = ()

    # shape and movement ---------------------------------------------------------------------------------
    def reshape(self, *shape):
        shape = shape_arg(shape)
        n = self._node
        total = math.prod(n.shape)
        if shape.count(-1) > 1:
            raise RuntimeError("only one dimension can be inferred")
        if -1 in shape:
            rest = math.prod(s for s in shape if s != -1)
            if rest == 0 or total % rest:
                raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {total}")
            shape = tuple(total // rest if s == -1 else s for s in shape)
        if any(s < 0 for s in shape) or math.prod(shape) != total:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {total}")
        if shape == n.shape:
            return record_op("reshape", (n,), {"shape": shape}, shape, n.dtype, "ViewBackward0")
        return wrap(reshape_node(n, shape))

    view = reshape

    def view_as(self, other):
        return self.reshape(other.shape)

    reshape_as = view_as

    def flatten(self, start_dim=0, end_dim=-1):
        nd = self.ndim
        if nd == 0:
            return self.reshape(1)
        s, e = normalize_dim(start_dim, nd), normalize_dim(end_dim, nd)
        if s > e:
            raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
        if s == e:
            return self
        shape = self.shape
        return self.reshape(shape[:s] + (math.prod(shape[s : e + 1]),) + shape[e + 1 :])

    def squeeze(self, dim=None):
        shape = self._node.shape
        axes = set(normalize_dims(dim, len(shape))) if dim is not None else set(range(len(shape)))
        new = tuple(s for i, s in enumerate(shape) if not (i in axes and s == 1))
        # PyTorch's overloads: squeeze(), squeeze(dim), squeeze(dims)
        which = 0 if dim is None else 1 if isinstance(dim, (int, np.integer)) else 2
        return named(self.reshape(new), f"SqueezeBackward{which}")

    def unsqueeze(self, dim):
        shape = self._node.shape
        d = normalize_dim(dim, len(shape) + 1)
        return named(self.reshape(shape[:d] + (1,) + shape[d:]), "UnsqueezeBackward0")

    def permute(self, *dims):
        dims = shape_arg(dims)
        n = self._node
        nd = len(n.shape)
        if len(dims) != nd:
            raise RuntimeError(
                f"permute(sparse_coo): number of dimensions in the tensor input does not match "
                f"the length of the desired ordering of dimensions i.e. input.dim() = {nd} is "
                f"not equal to len(dims) = {len(dims)}"
            )
        perm = tuple(normalize_dim(d, nd) for d in dims)
        if len(set(perm)) != nd:
            raise RuntimeError("permute(): duplicate dims are not allowed.")
        if perm == tuple(range(nd)):
            return record_op("reshape", (n,), {"shape": n.shape}, n.shape, n.dtype, "PermuteBackward0")
        return record_op("permute", (n,), {"perm": perm}, tuple(n.shape[p] for p in perm), n.dtype, "PermuteBackward0")

    def transpose(self, dim0, dim1):
        nd = self.ndim
        if nd == 0:
            normalize_dim(dim0, 0), normalize_dim(dim1, 0)  # only 0 and -1 name a 0-d tensor's dim
            return self
        a, b = normalize_dim(dim0, nd), normalize_dim(dim1, nd)
        perm = list(range(nd))
        perm[a], perm[b] = perm[b], perm[a]
        return named(self.permute(perm), "TransposeBackward0")

    swapaxes = swapdims = transpose

    def t(self):
        if self.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        return named(self.transpose(0, 1) if self.ndim == 2 else self.reshape(self.shape), "TBackward0")

    @property
    def T(self):
        return self.permute(tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self):
        if self.ndim < 2:
            raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. Got 1-D tensor.")
        return self.transpose(-2, -1)

    def sum_to_size(self, *size):
        """Sum over broadcast dimensions down to ``size`` (the gradient of an ``expand``).

        ```python
        >>> import ngrad
        >>> ngrad.ones(2, 3).sum_to_size(1, 3)
        tensor([[2., 2., 2.]])

        ```
        """
        shape, mine = shape_arg(size), self._node.shape
        lead = len(mine) - len(shape)
        if lead < 0 or any(a != b and a != 1 for a, b in zip(shape, mine[lead:])):
            raise RuntimeError(f"size {{{list(shape)}}} is not expandable to size {{{list(mine)}}}.")
        axes = tuple(range(lead)) + tuple(lead + i for i, a in enumerate(shape) if a == 1 and mine[lead + i] != 1)
        out = self.sum(dim=axes, keepdim=True) if axes else self
        return out.reshape(shape)

    def expand(self, *sizes):
        sizes = shape_arg(sizes)
        shape = self._node.shape
        if len(sizes) < len(shape):
            raise RuntimeError(
                f"expand(torch.FloatTensor{{{list(shape)}}}, size=[{len(sizes)}]): the number of "
                "sizes provided must be greater or equal to the number of dimensions in the tensor"
            )
        lead = len(sizes) - len(shape)
        out = []
        for i, s in enumerate(sizes):
            cur = shape[i - lead] if i >= lead else None
            if s == -1:
                if cur is None:
                    raise RuntimeError("expand: -1 is not allowed in a leading, non-existing dimension")
                s = cur
            if cur is not None and cur != s and cur != 1:
                raise RuntimeError(
                    f"The expanded size of the tensor ({s}) must match the existing size ({cur}) "
                    f"at non-singleton dimension {i}.  Target sizes: {list(sizes)}.  Tensor "
                    f"sizes: {list(shape)}"
                )
            out.append(s)
        n = self._node
        if tuple(out) == shape:
            return record_op("reshape", (n,), {"shape": shape}, shape, n.dtype, "ExpandBackward0")
        return wrap(expand_node(n, out))

    def expand_as(self, other):
        return self.expand(other.shape)

    def broadcast_to(self, *shape):
        return self.expand(*shape)

    def repeat(self, *sizes):
        sizes = shape_arg(sizes)
        shape = self._node.shape
        if len(sizes) < len(shape):
            raise RuntimeError(
                "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor"
            )
        shape = (1,) * (len(sizes) - len(shape)) + shape
        inter = tuple(v for s in shape for v in (1, s))
        big = tuple(v for r, s in zip(sizes, shape) for v in (r, s))
        out = self.reshape(inter).expand(big).reshape(tuple(r * s for r, s in zip(sizes, shape)))
        return named(out, "RepeatBackward0")

    def flip(self, *dims):
        dims = shape_arg(dims)
        n = self._node
        axes = normalize_dims(dims, len(n.shape)) if dims else ()
        if not axes:
            return self.clone()
        return record_op("flip", (n,), {"axes": axes}, n.shape, n.dtype, "FlipBackward0")

    def roll(self, shifts, dims=None):
        """Rolled by ``shifts`` along ``dims`` (ints or sequences of equal length, one shift per
        dimension, a dimension named twice rolled twice); the flattened tensor rolled, then
        reshaped, when ``dims`` is None. Elements pushed past the end come back at the start.

        ```python
        >>> import ngrad
        >>> x = ngrad.arange(6.0).reshape(2, 3)
        >>> x.roll((1, -1), (0, 1))
        tensor([[4., 5., 3.],
                [1., 2., 0.]])

        ```
        """
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        if dims is None:
            if len(shifts) != 1:
                raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:0")
            return named(self.flatten().roll(shifts, 0).reshape(self.shape), "RollBackward0")
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if not shifts:
            raise RuntimeError("`shifts` required")
        if len(shifts) != len(dims):
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
        if not self.ndim:
            raise IndexError(f"Dimension specified as {dims[0]} but tensor has no dimensions")
        out = self
        for s, d in zip(shifts, dims):
            d = normalize_dim(d, self.ndim)
            size = self.shape[d]
            if size == 0 or s % size == 0:
                continue
            s %= size
            out = cat([out.narrow(d, size - s, s), out.narrow(d, 0, size - s)], d)
        return named(out if out is not self else self.clone(), "RollBackward0")

    def narrow(self, dim, start, length):
        """The ``length`` entries from ``start`` (which may count from the end) along ``dim``;
        a range past the end is an error, as in PyTorch, not a shorter result."""
        if not self.ndim:
            raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
        d = normalize_dim(dim, self.ndim)
        size = self.shape[d]
        start, length = int(start), int(length)
        if not -size <= start <= size:
            raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})")
        if start < 0:
            start += size
        if length < 0:
            raise RuntimeError("narrow(): length must be non-negative.")
        if start + length > size:
            raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
        key = [slice(None)] * d + [slice(start, start + length)]
        return self[tuple(key)]

    def split(self, split_size_or_sections, dim=0):
        d = normalize_dim(dim, self.ndim)
        size = self.shape[d]
        if isinstance(split_size_or_sections, int):
            step = split_size_or_sections
            if step <= 0:
                raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {size}")
            sections = [min(step, size - i) for i in range(0, size, step)] or [0]
        else:
            sections = list(split_size_or_sections)
            if sum(sections) != size:
                raise RuntimeError(
                    f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's "
                    f"size at dimension {d}), but got split_sizes={sections}"
                )
        out, start = [], 0
        for s in sections:
            out.append(named(self.narrow(d, start, s), "SplitBackward0"))
            start += s
        return tuple(out)

    def chunk(self, chunks, dim=0):
        if chunks <= 0:
            raise RuntimeError("chunk expects `chunks` to be greater than 0")
        size = self.shape[normalize_dim(dim, self.ndim)]
        return self.split(max(1, -(-size // chunks)), dim)

    def unbind(self, dim=0):
        d = normalize_dim(dim, self.ndim)
        return tuple(self.select(d, i) for i in range(self.shape[d]))

    def select(self, dim, index):
        d = normalize_dim(dim, self.ndim)
        return self[(slice(None),) * d + (index,)]

    def gather(self, dim, index):
        """``out[i][j] = self[index[i][j]][j]`` for ``dim=0`` (and so on); gradients scatter-add back."""
        n, idx = self._node, to_tensor(index)
        axis = normalize_dim(dim, max(len(n.shape), 1))
        if idx.dtype is not D.int64:
            raise RuntimeError("gather(): Expected dtype int64 for index")
        if not n.shape or not idx.ndim:
            # PyTorch treats a 0-d input or index as one of size 1
            x = self.reshape(1) if not n.shape else self
            i = idx.reshape(1) if not idx.ndim else idx
            out = x.gather(axis if n.shape else 0, i)
            return named(out.reshape(idx.shape) if not idx.ndim else out, "GatherBackward0")
        if idx.ndim != len(n.shape):
            raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
        for d, (a, b) in enumerate(zip(idx.shape, n.shape)):
            if d != axis and a > b:
                raise RuntimeError(
                    f"Size does not match at dimension {d} expected index {list(idx.shape)} to be "
                    f"no larger than self {list(n.shape)} apart from dimension {axis}"
                )
        x = self
        if any(d != axis and a != b for d, (a, b) in enumerate(zip(idx.shape, n.shape))):
            x = self[tuple(slice(0, a) if d != axis else slice(None) for d, a in enumerate(idx.shape))]
        xn = x._node
        if _gm.trace is not None:
            # under ngrad.compile the index may be the program's own result (an argmax): it is
            # read when the program runs, where NumPy checks its bounds, not now
            return record_op("gather", (xn, idx._node), {"axis": axis}, tuple(idx.shape), xn.dtype, "GatherBackward0")
        iv = host_value(idx)
        # checked where the index is realized, as PyTorch checks it: a negative index is an error
        if iv.size and (iv.min() < 0 or iv.max() >= n.shape[axis]):
            raise RuntimeError(
                f"index {int(iv.max() if iv.max() >= n.shape[axis] else iv.min())} is out of "
                f"bounds for dimension {axis} with size {n.shape[axis]}"
            )
        return record_op(
            "gather", (xn, index_source(iv)), {"axis": axis}, tuple(idx.shape), xn.dtype, "GatherBackward0"
        )

    def movedim(self, source, destination):
        """Dimensions ``source`` moved to the positions ``destination`` (ints or sequences); the
        others keep their order."""
        src = [source] if isinstance(source, int) else list(source)
        dst = [destination] if isinstance(destination, int) else list(destination)
        if len(src) != len(dst):
            raise RuntimeError(
                f"movedim: Invalid source or destination dims: source ({src} dims) should contain the "
                f"same number of dims as destination ({dst} dims)"
            )
        src, dst = [normalize_dim(d, self.ndim) for d in src], [normalize_dim(d, self.ndim) for d in dst]
        if len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise RuntimeError("movedim: repeated dim in `source` or `destination`")
        rest = iter(d for d in range(self.ndim) if d not in src)
        placed = dict(zip(dst, src))
        return self.permute(*[placed[i] if i in placed else next(rest) for i in range(self.ndim)])

    moveaxis = movedim

    def diff(self, n=1, dim=-1, prepend=None, append=None):
        """The ``n``-th forward difference along ``dim`` (after joining ``prepend`` and ``append``)."""
        d = normalize_dim(dim, self.ndim)
        x = (
            cat([t for t in (prepend, self, append) if t is not None], d)
            if prepend is not None or append is not None
            else self
        )
        for _ in range(n):
            k = x.shape[d]
            if k == 0:
                break
            x = (
                x.narrow(d, 1, k - 1) - x.narrow(d, 0, k - 1)
                if x.dtype is not D.bool_
                else x.narrow(d, 1, k - 1) != x.narrow(d, 0, k - 1)
            )
        return x

    def unflatten(self, dim, sizes):
        """Dimension ``dim`` split into ``sizes`` (one of them may be -1)."""
        d = normalize_dim(dim, self.ndim)
        return self.reshape(*self.shape[:d], *sizes, *self.shape[d + 1 :])

    def tile(self, *dims):
        """Repeated ``dims`` times along each dimension (ones are prepended to the shorter of the two)."""
        dims = shape_arg(dims)
        dims = (1,) * (self.ndim - len(dims)) + dims
        x = self.reshape(*((1,) * (len(dims) - self.ndim) + tuple(self.shape))) if len(dims) > self.ndim else self
        return x.repeat(*dims)

    def take_along_dim(self, indices, dim=None):
        """``gather`` with ``indices`` and this tensor broadcast to each other except along
        ``dim`` (the flattened tensor when ``dim`` is None)."""
        idx = to_tensor(indices)
        if dim is None:
            return self.reshape(-1).gather(0, idx.reshape(-1))
        d = normalize_dim(dim, self.ndim)
        if idx.ndim != self.ndim:
            raise RuntimeError(
                "torch.take_along_dim(): input and indices should have the same number of dimensions, "
                f"but got {self.ndim} dimensions for input, and {idx.ndim} dimensions for indices"
            )
        shape = list(
            broadcast_shapes(
                tuple(s for i, s in enumerate(self.shape) if i != d),
                tuple(s for i, s in enumerate(idx.shape) if i != d),
            )
        )
        x = self.expand(*(shape[:d] + [self.shape[d]] + shape[d:]))
        return x.gather(d, idx.expand(*(shape[:d] + [idx.shape[d]] + shape[d:])))

    def as_strided(self, size, stride, storage_offset=None):
        """A view of this tensor's storage with the given ``size``, ``stride`` (in elements) and
        ``storage_offset`` (this tensor's own by default), as PyTorch's; writes through it reach
        every tensor sharing the storage.

        ```python
        >>> import ngrad
        >>> x = ngrad.arange(6.0)
        >>> w = x.as_strided((2, 3), (1, 2))
        >>> w
        tensor([[0., 2., 4.],
                [1., 3., 5.]])
        >>> w[1].zero_()
        tensor([0., 0., 0.])
        >>> x
        tensor([0., 0., 2., 0., 4., 0.])

        ```
        """
        return views.as_strided(self, size, stride, storage_offset)

    def diagonal(self, offset=0, dim1=0, dim2=1):
        """The ``offset`` diagonal of the matrices spanned by ``dim1`` and ``dim2`` (above the main
        one for ``offset > 0``), as the last dimension; a strided slice, so its gradient is the
        slice's.

        ```python
        >>> import ngrad
        >>> x = ngrad.arange(12.0).reshape(3, 4)
        >>> x.diagonal(), x.diagonal(1), x.trace()
        (tensor([ 0.,  5., 10.]), tensor([ 1.,  6., 11.]), tensor(15.))

        ```
        """
        nd = self.ndim
        d1, d2 = normalize_dim(dim1, nd), normalize_dim(dim2, nd)
        if d1 == d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        x = self.permute(*[d for d in range(nd) if d not in (d1, d2)], d1, d2)
        n, m = x.shape[-2], x.shape[-1]
        count = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
        start = offset if offset >= 0 else -offset * m
        flat = x.reshape(*x.shape[:-2], n * m)
        picked = flat[..., start : start + (count - 1) * (m + 1) + 1 : m + 1] if count else flat[..., :0]
        return named(picked, "DiagonalBackward0")
