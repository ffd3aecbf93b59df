"""Rows of the primitive table: complex numbers: complex, real, imag, conj, angle, polar and the
elementwise math of complex64 and complex128, with the NumPy implementations the interpreter's
math namespace takes from ``Numpy``."""

from __future__ import annotations


class Numpy:
    """The NumPy forward of each row below (part of the interpreter's math namespace)."""
