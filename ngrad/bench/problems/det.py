"""GradBench's ``det``: the determinant of an ell x ell matrix by expansion by minors, and its
gradient.

The value is the one GradBench's C++ reference (``cpp/gradbench/evals/det.hpp``, after cmpad's
``det_by_minor``) computes: the expansion along the first remaining row, over the remaining
columns in increasing order with alternating signs, recursing into each minor without sharing
minors between branches, so the floating-point work is the reference's (about e * ell!
products). It is written level by level instead of recursively: a node of the recursion at
depth d (rows 0..d-1 expanded, m = ell - d rows left) is an ordered choice of d removed columns,
in the order the recursion visits them; all nodes of one depth are one vector, and a node's m
children are m consecutive entries of the next depth's vector. ``structure(ell)`` gives, for
each depth, the set of remaining columns of every node (an id into the sorted sets of that
size), from which each level gathers its row of A. The size is ell (A uniform on [0, 1], as
GradBench's eval draws it); inputs ``A`` (ell * ell, row-major) and ``ell``.
"""

from itertools import combinations

import numpy as np

from . import Problem

_STRUCTURES = {}


def structure(ell):
    """``{m: (sets, ids)}`` for m = 2..ell: ``sets`` (C(ell, m), m) every set of m columns in
    increasing order (lexicographically sorted), ``ids`` (ell! / m!,) the set of columns left at
    each node of depth ell - m, in the recursion's order. Cached per ell."""
    if ell in _STRUCTURES:
        return _STRUCTURES[ell]
    sets, rank = {}, np.zeros(1 << ell, dtype=np.int64)
    for m in range(1, ell + 1):
        sets[m] = np.array(list(combinations(range(ell), m)), dtype=np.int64)
        rank[(1 << sets[m]).sum(1)] = np.arange(len(sets[m]))
    out, ids = {}, np.zeros(1, dtype=np.int64)
    for m in range(ell, 1, -1):
        out[m] = (sets[m], ids)
        masks = (1 << sets[m]).sum(1)
        # child j of a node drops the node's j-th remaining column: its set's rank, per (set, j)
        child = rank[masks[:, None] - (1 << sets[m])]
        ids = child[ids].reshape(-1)
    _STRUCTURES[ell] = out
    return out


def det(T, A, ell):
    """The determinant of ``A`` (a flat row-major ell * ell tensor) by expansion by minors."""
    A = A.reshape(ell, ell)
    if ell == 1:
        return A[0, 0]
    st = structure(ell)
    sets, ids = st[2]
    a, b = A[ell - 2][sets][ids], A[ell - 1][sets][ids]  # (ell!/2, 2): the last two rows of each 2x2 minor
    v = a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
    for m in range(3, ell + 1):
        sets, ids = st[m]
        e, w = A[ell - m][sets][ids], v.reshape(-1, m)  # a node's row entries and its minors' values
        v = T.sum(e[:, 0::2] * w[:, 0::2], 1) - T.sum(e[:, 1::2] * w[:, 1::2], 1)
    return v.reshape(())


def numpy(inp):
    """LAPACK's determinant; its gradient is the cofactor matrix, det(A) inv(A)^T."""
    ell = inp["ell"]
    A = inp["A"].reshape(ell, ell)
    value = np.linalg.det(A)
    return float(value), {"A": (value * np.linalg.inv(A).T).reshape(-1)}


PROBLEMS = [
    Problem(
        "det",
        "determinant by expansion by minors, e * ell! products (GradBench det)",
        "ell, the matrix's edge",
        [7, 9],
        [6],
        lambda ell, rng: {"A": rng.uniform(0, 1, ell * ell), "ell": ell},
        numpy,
        det,
        wrt=("A",),
    ),
]
