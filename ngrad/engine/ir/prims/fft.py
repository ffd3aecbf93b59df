"""Rows of the primitive table: discrete Fourier transforms (fft, ifft, rfft, irfft and their
n-dimensional forms) on NumPy's or SciPy's FFT, with the NumPy implementations the interpreter's
math namespace takes from ``Numpy``."""

from __future__ import annotations


class Numpy:
    """The NumPy forward of each row below (part of the interpreter's math namespace)."""
