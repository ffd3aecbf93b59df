"""The primitive table (``PRIMS``, in ``table``, with the machinery its rows are written in) and
the families that add their rows from their own modules, each with the NumPy forwards of its rows
(``Numpy``, part of the interpreter's math namespace).

Contract: importing this package fills ``PRIMS`` with every row; ``FAMILIES`` lists the family
modules.
"""

from . import complex_math, composite, control, fft, linalg, scatter, selection
from .table import ELEMENTWISE, PRIMS, Params, Prim, Shape, TapeError, Vjp

__all__ = ["Prim", "PRIMS", "TapeError", "ELEMENTWISE", "FAMILIES", "Shape", "Params", "Vjp"]

FAMILIES = (linalg, selection, scatter, complex_math, fft, control, composite)
