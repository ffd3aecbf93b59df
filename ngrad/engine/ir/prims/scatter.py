"""Rows of the primitive table: the scatter family (scatter, scatter_reduce, index_add, index_copy,
index_fill, index_put, masked_scatter, put, take) and the structural ops built beside it, with
the NumPy implementations the interpreter's math namespace takes from ``Numpy``."""

from __future__ import annotations


class Numpy:
    """The NumPy forward of each row below (part of the interpreter's math namespace)."""
