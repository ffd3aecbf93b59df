"""Input checks: every value a tape is called with against its slot, before anything runs.

Contract: ``check(tape, values)`` raises ``ValueError``/``TypeError`` (the messages ``run``
promises) unless every input has its slot's kind, shape and dtype; kernels never see unchecked
input, since Numba does not check bounds. ``device=True`` also accepts device arrays (CUDA).
``fix_input`` is a generated driver's slow path for one input.
"""

import numpy as np

from ..ir.interpret import np_dtype

__all__ = ["check", "check_one", "check_scalars", "fix_input", "NUMBERS"]

# the runtime scalars taken as they are (what check_one accepts at once): anything else is checked
NUMBERS = frozenset([float, int, bool, np.float64, np.float32, np.int64, np.int32, np.bool_])


def check(tape, values, device=False):
    """Every input against its slot; ``device``: tensors may also be device arrays (CUDA)."""
    if len(values) != len(tape.inputs):
        raise ValueError(f"tape takes {len(tape.inputs)} inputs, got {len(values)}")
    for i, (v, kind) in enumerate(zip(values, tape.kinds)):
        if kind != "scalar" or v.__class__ not in NUMBERS:
            check_one(tape, i, v, device)


def check_scalars(tape, values):
    """The runtime scalars of ``values`` against their slots (a generated driver checks its
    arrays itself); Python and NumPy numbers are taken as they are."""
    for i, kind in enumerate(tape.kinds):
        if kind == "scalar" and values[i].__class__ not in NUMBERS:
            check_one(tape, i, values[i])


def check_one(tape, i, v, device=False):
    """Input ``i`` of ``tape`` against its slot (see ``check``)."""
    s, k = tape.inputs[i], tape.kinds[i]
    if k == "scalar":
        if not isinstance(v, (int, float, complex, bool, np.number, np.bool_, np.ndarray)) or np.ndim(v) != 0:
            raise TypeError(f"input {i} of the tape must be a scalar, got {type(v).__name__}")
        return
    if not isinstance(v, np.ndarray):
        from ..targets.cuda import is_device_array

        if not (device and is_device_array(v)):
            raise TypeError(
                f"input {i} of the tape must be {'a device array' if device else 'an ndarray'}, got {type(v).__name__}"
            )
    if v.shape != tape.shapes[s] or v.dtype != np_dtype(tape.dtypes[s]):
        raise ValueError(
            f"input {i} of the tape must be {tape.dtypes[s]}{list(tape.shapes[s])}, got {v.dtype}{list(v.shape)}"
        )


def fix_input(tape, i, v):
    """A driver's slow path for input ``i``: a contiguous, aligned copy (Numba runs a loop over an
    unaligned array, as Dask hands them over, about 15x slower), or the error ``run`` raises."""
    check_one(tape, i, v)
    return aligned(v)


def aligned(v):
    """``v`` if it is C-contiguous and aligned, else such a copy."""
    f = v.flags
    return v if f.c_contiguous and f.aligned else np.array(v, order="C")
