"""Rows of the primitive table: scans and selection: cumulative products and extremes, log-
cumulative sums, order statistics (median, kthvalue, quantile, mode), searchsorted, bucketize,
histc and unique, with the NumPy implementations the interpreter's math namespace takes from
``Numpy``."""

from __future__ import annotations


class Numpy:
    """The NumPy forward of each row below (part of the interpreter's math namespace)."""
