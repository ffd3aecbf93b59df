"""Shape and dtype rules of the primitive table, one per kind of primitive.

Contract: each rule takes the operands' shapes and short dtype names (and the instruction's
parameters by name) and returns the result's shape and dtype, or raises ``TapeError`` with a
message naming the shapes that disagree. Rules never compute values; ``prims`` names one per row.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import NoReturn

__all__ = ["TapeError", "Shape", "Typed"]

Shape = tuple[int, ...]
Shapes = Sequence[Shape]
Dtypes = Sequence[str]
Ints = Sequence[int]
Typed = tuple[Shape, str]  # a result's shape and dtype


class TapeError(ValueError):
    """A tape (or an instruction being added to one) breaks a primitive's shape/dtype rule."""


def fail(msg: str) -> NoReturn:
    raise TapeError(msg)


def matching(shapes: Shapes, dtypes: Dtypes) -> Typed:
    for s, d in zip(shapes[1:], dtypes[1:]):
        if s != shapes[0] or d != dtypes[0]:
            fail(f"elementwise operands must match exactly, got {shapes[0]}:{dtypes[0]} and {s}:{d}")
    return shapes[0], dtypes[0]


def unary(shapes: Shapes, dtypes: Dtypes) -> Typed:
    return shapes[0], dtypes[0]


def compare(shapes: Shapes, dtypes: Dtypes) -> Typed:
    return matching(shapes, dtypes)[0], "b8"


def ordered(shapes: Shapes, dtypes: Dtypes) -> Typed:
    """``compare`` for the orderings (lt, le, gt, ge): complex numbers have none (NumPy orders
    them lexicographically, CUDA and PyTorch refuse)."""
    if dtypes[0] in ("c64", "c128"):
        fail(f"ordering comparisons need real operands, got {dtypes[0]}")
    return compare(shapes, dtypes)


def logical(shapes: Shapes, dtypes: Dtypes) -> Typed:
    if any(d != "b8" for d in dtypes):
        fail(f"logical operands must be b8, got {dtypes}")
    return matching(shapes, dtypes)


def where(shapes: Shapes, dtypes: Dtypes) -> Typed:
    if dtypes[0] != "b8":
        fail(f"where condition must be b8, got {dtypes[0]}")
    if not shapes[0] == shapes[1] == shapes[2] or dtypes[1] != dtypes[2]:
        fail(f"where operands must match exactly, got {list(zip(shapes, dtypes))}")
    return shapes[1], dtypes[1]


def cast(shapes: Shapes, dtypes: Dtypes, dtype: str) -> Typed:
    return shapes[0], dtype


def axes_ok(axes: Ints, rank: int) -> None:
    prev = -1
    for a in axes:  # strictly increasing within [0, rank): sorted and unique
        if not (prev < a and 0 <= a < rank):
            fail(f"axes {axes} must be sorted, unique and within rank {rank}")
        prev = a


def reduce(shapes: Shapes, dtypes: Dtypes, axes: Ints, keepdim: bool) -> Typed:
    s = shapes[0]
    axes_ok(axes, len(s))
    if keepdim:
        return tuple([1 if i in axes else n for i, n in enumerate(s)]), dtypes[0]
    return tuple([n for i, n in enumerate(s) if i not in axes]), dtypes[0]


def arg(shapes: Shapes, dtypes: Dtypes, axis: int, keepdim: bool) -> Typed:
    s = shapes[0]
    axes_ok((axis,), len(s))
    if s[axis] == 0:
        fail("cannot take the arg of an empty axis")
    return reduce(shapes, dtypes, (axis,), keepdim)[0], "i64"


def argsort(shapes: Shapes, dtypes: Dtypes, axis: int, descending: bool) -> Typed:
    axes_ok((axis,), len(shapes[0]))
    return shapes[0], "i64"


def scan(shapes: Shapes, dtypes: Dtypes, axis: int) -> Typed:
    axes_ok((axis,), len(shapes[0]))
    return shapes[0], dtypes[0]


def reshape(shapes: Shapes, dtypes: Dtypes, shape: Ints) -> Typed:
    if math.prod(shape) != math.prod(shapes[0]):
        fail(f"cannot reshape {shapes[0]} to {shape}")
    return tuple(shape), dtypes[0]


def permute(shapes: Shapes, dtypes: Dtypes, perm: Ints) -> Typed:
    if sorted(perm) != list(range(len(shapes[0]))):
        fail(f"{perm} is not a permutation of the axes of {shapes[0]}")
    return tuple(shapes[0][p] for p in perm), dtypes[0]


def expand(shapes: Shapes, dtypes: Dtypes, shape: Ints) -> Typed:
    s = shapes[0]
    if len(s) != len(shape):
        fail(f"cannot expand {s} to {shape} (equal ranks, size-1 axes only)")
    for a, b in zip(s, shape):
        if a != b and a != 1:
            fail(f"cannot expand {s} to {shape} (equal ranks, size-1 axes only)")
    return tuple(shape), dtypes[0]


def slice_shape(shape: Shape, starts: Ints, stops: Ints, steps: Ints) -> Shape:
    if not len(shape) == len(starts) == len(stops) == len(steps):
        fail(f"slice bounds must have one entry per axis of {shape}")
    # checked and measured without a loop in Python (differentiation slices on every step)
    if shape and not (
        min(steps) > 0
        and min(starts) >= 0
        and min(stops) >= 0
        and all(map(operator.le, starts, shape))
        and all(map(operator.le, stops, shape))
    ):
        for n, a, b, c in zip(shape, starts, stops, steps):
            if c <= 0 or not 0 <= a <= n or not 0 <= b <= n:
                fail(f"slice {a}:{b}:{c} out of range for an axis of size {n}")
    return tuple(map(len, map(range, starts, stops, steps)))


def slice(shapes: Shapes, dtypes: Dtypes, starts: Ints, stops: Ints, steps: Ints) -> Typed:
    return slice_shape(shapes[0], starts, stops, steps), dtypes[0]


def unslice(shapes: Shapes, dtypes: Dtypes, shape: Ints, starts: Ints, stops: Ints, steps: Ints) -> Typed:
    if slice_shape(tuple(shape), starts, stops, steps) != shapes[0]:
        fail(f"unslice source {shapes[0]} does not fit the slice of {shape}")
    return tuple(shape), dtypes[0]


def flip(shapes: Shapes, dtypes: Dtypes, axes: Ints) -> Typed:
    axes_ok(axes, len(shapes[0]))
    return shapes[0], dtypes[0]


def cat(shapes: Shapes, dtypes: Dtypes, axis: int) -> Typed:
    first = shapes[0]
    axes_ok((axis,), len(first))
    for s, d in zip(shapes, dtypes):
        if d != dtypes[0] or len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != axis):
            fail(f"cat operands must agree except on axis {axis}, got {shapes}")
    return first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1 :], dtypes[0]


def index_shape(x: Shape, idx_shapes: Sequence[Shape], idx_dtypes: Sequence[str], axis: int) -> Shape:
    k = len(idx_shapes)
    if k == 0 or axis + k > len(x):
        fail(f"index with {k} index tensors at axis {axis} does not fit {x}")
    if any(d != "i64" for d in idx_dtypes) or any(s != idx_shapes[0] for s in idx_shapes):
        fail(f"index tensors must be i64 of one shape, got {list(zip(idx_shapes, idx_dtypes))}")
    return x[:axis] + idx_shapes[0] + x[axis + k :]


def index(shapes: Shapes, dtypes: Dtypes, axis: int) -> Typed:
    return index_shape(shapes[0], shapes[1:], dtypes[1:], axis), dtypes[0]


def unindex(shapes: Shapes, dtypes: Dtypes, shape: Ints, axis: int) -> Typed:
    if index_shape(tuple(shape), shapes[1:], dtypes[1:], axis) != shapes[0]:
        fail(f"unindex source {shapes[0]} does not fit {shape} indexed at axis {axis}")
    return tuple(shape), dtypes[0]


def gather(shapes: Shapes, dtypes: Dtypes, axis: int) -> Typed:
    x, i = shapes
    axes_ok((axis,), len(x))
    if dtypes[1] != "i64" or len(i) != len(x) or any(a != b for d, (a, b) in enumerate(zip(x, i)) if d != axis):
        fail(f"gather index {i}:{dtypes[1]} must be i64 and match {x} except on axis {axis}")
    return i, dtypes[0]


def scatter_add(shapes: Shapes, dtypes: Dtypes, axis: int, shape: Ints) -> Typed:
    gather([tuple(shape), shapes[1]], [dtypes[0], dtypes[1]], axis)
    if shapes[0] != shapes[1]:
        fail(f"scatter_add source {shapes[0]} must match its index {shapes[1]}")
    return tuple(shape), dtypes[0]


REQUIREMENTS = ("divisor", "index_select", "index_select_dim1", "target", "mask_count")


def require(shapes: Shapes, dtypes: Dtypes, test: str, bound: int = 0, ignore: int = 0, rest: Ints = ()) -> Typed:
    if test not in REQUIREMENTS or dtypes[0] not in ("i32", "i64"):
        fail(f"require {test!r} of {dtypes[0]}: the tests are {REQUIREMENTS}, of integer operands")
    return shapes[0], dtypes[0]


def matmul(shapes: Shapes, dtypes: Dtypes) -> Typed:
    a, b = shapes
    if len(a) < 2 or len(a) != len(b) or a[:-2] != b[:-2] or a[-1] != b[-2] or dtypes[0] != dtypes[1]:
        fail(f"matmul operands {a}:{dtypes[0]} and {b}:{dtypes[1]} do not fit")
    return a[:-1] + (b[-1],), dtypes[0]


def const(shapes: Shapes, dtypes: Dtypes, value: float, dtype: str) -> Typed:
    return (), dtype
