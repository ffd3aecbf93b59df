"""Layouts: strides, storage offsets and storage identities, as PyTorch reports them.

Contract: pure functions of shapes and strides (in elements): the row-major strides of a shape
(``contiguous_strides``), ATen's rule for viewing strided memory with another shape
(``view_strides``), the layout after one movement step (``step_layout``), ``is_contiguous`` and
``dense``; plus ``Storage``/``storage_key`` (what ``untyped_storage()`` and ``data_ptr()`` are
built on) and PyTorch's memory formats. ``ngrad.tensor.views`` keeps each view's layout with them.
"""

import math


class MemoryFormat:
    """PyTorch's memory formats: ``ngrad.contiguous_format`` and ``ngrad.preserve_format``."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"ngrad.{self.name}"


contiguous_format = MemoryFormat("contiguous_format")


preserve_format = MemoryFormat("preserve_format")


# layout ---------------------------------------------------------------------------------------------
def contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def view_strides(old_shape, old_strides, new_shape):
    """The strides of ``old`` viewed as ``new_shape`` without a copy, or None when some dimension
    would span two non-contiguous pieces (ATen's ``computeStride``)."""
    if math.prod(old_shape) == 0 or not old_shape:
        return contiguous_strides(new_shape)
    new = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk = old_strides[-1]
    tensor_numel = view_numel = 1
    for d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[d]
        if d == 0 or (old_shape[d - 1] != 1 and old_strides[d - 1] != tensor_numel * chunk):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new[view_d] = view_numel * chunk
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk = old_strides[d - 1]
                tensor_numel = view_numel = 1
    return tuple(new) if view_d == -1 else None


def step_layout(layout, shape, step):
    """The layout after ``step`` of a tensor of ``shape`` laid out as ``layout``; None when the
    step is a reshape the strides do not allow."""
    strides, offset = layout
    op, p = step.op, step.params
    if op == "detach":
        return layout
    if op == "take":
        return p["layout"]
    if op == "permute":
        return tuple(strides[i] for i in p["perm"]), offset
    if op == "slice":
        offset += sum(a * s for a, s in zip(p["starts"], strides))
        return tuple(s * c for s, c in zip(strides, p["steps"])), offset
    if op == "expand":
        return tuple(0 if a != b else s for s, a, b in zip(strides, shape, step.shape)), offset
    if op in ("real", "imag", "view_as_real"):  # in elements of half the size
        doubled = tuple(2 * s for s in strides) + ((1,) if op == "view_as_real" else ())
        return doubled, 2 * offset + (op == "imag")
    if op == "view_as_complex":
        return tuple(s // 2 for s in strides[:-1]), offset // 2
    if op == "conj":
        return layout
    new = view_strides(shape, strides, step.shape)
    return None if new is None else (new, offset)


def is_contiguous(shape, strides):
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return math.prod(shape) == 0
        expected *= size
    return True


_next_key = [1 << 32]


def storage_key(root):
    """A stable number per storage root (``data_ptr``'s base): distinct roots never share one."""
    key = root.__dict__.get("_storage_key")
    if key is None:
        key = root.__dict__["_storage_key"] = _next_key[0]
        _next_key[0] += 1 << 32
    return key


class Storage:
    """What ``untyped_storage()`` returns: the storage of a tensor, compared by identity."""

    __slots__ = ("_root",)

    def __init__(self, root):
        self._root = root

    def data_ptr(self):
        return storage_key(self._root)

    def nbytes(self):
        n = self._root._node
        return math.prod(n.shape) * n.dtype.np.itemsize

    def size(self):
        return self.nbytes()

    def __eq__(self, other):
        return isinstance(other, Storage) and other._root is self._root

    def __hash__(self):
        return id(self._root)


def dense(shape, strides):
    """Whether the elements fill a block of storage without gaps or repeats (any dim order)."""
    expected = 1
    for size, stride in sorted(zip(shape, strides), key=lambda p: p[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True
