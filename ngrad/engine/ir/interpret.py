"""The NumPy reference interpreter: runs any tape one instruction at a time.

Contract: ``interpret(tape, values)`` takes one value per input slot (arrays of the slot's
exact shape and dtype, or Python numbers for scalar slots) and returns one NumPy array per
output slot, of exactly the recorded shape and dtype. It is the oracle every compiled kernel
is tested against, so it favours plain, obviously-correct NumPy over speed, except where a
NumPy loop is many times slower than PyTorch's for the same call (float64 ``sin``/``cos``, see
``NumpyMath.sin``): it is also the tier a new program's first calls run on. Floating-point
exceptions follow IEEE (inf/nan results, no warnings). Slots are dropped after their last use,
so long tapes run in memory proportional to their live values.
"""

from __future__ import annotations

import math
import platform
import re
import sys
from array import array
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from . import blas
from .prims import FAMILIES, PRIMS
from .tape import Instr, Tape

__all__ = ["interpret", "NUMPY"]

_NP = {
    "b8": np.bool_,
    "i32": np.int32,
    "i64": np.int64,
    "f32": np.float32,
    "f64": np.float64,
    "c64": np.complex64,
    "c128": np.complex128,
}


_DT = {k: np.dtype(v) for k, v in _NP.items()}


def np_dtype(short: str) -> np.dtype:
    """The NumPy dtype of a short dtype name."""
    return _DT[short]


def _blas_ready(x: np.ndarray) -> np.ndarray:
    """``x`` if BLAS can read each of its matrices where they lie (rows or columns contiguous),
    else a C-contiguous copy: NumPy's matmul otherwise runs its plain loop, 2x slower at gmm's
    (25, 10, 10) matrices than the copy plus BLAS. Other arrays (CuPy's, on the CUDA target's
    glue) pass as they are."""
    if x.__class__ is not np.ndarray or x.ndim < 2 or x.dtype.kind not in "fc":
        return x
    size, (r, c), (m, n) = x.itemsize, x.strides[-2:], x.shape[-2:]
    if (c == size and r % size == 0 and r // size >= n) or (r == size and c % size == 0 and c // size >= m):
        return x
    return np.ascontiguousarray(x)


def matmul_into(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(x, y, out=out)`` with every operand in a layout BLAS takes (see ``_blas_ready``;
    an ``out`` whose matrices are not row-major gets the product copied in), through ``blas``."""
    x, y = _blas_ready(x), _blas_ready(y)
    if out is None:
        return blas.matmul(x, y)
    if (
        out.ndim >= 2
        and out.dtype.kind in "fc"
        and (out.strides[-1] != out.itemsize or out.strides[-2] < out.shape[-1] * out.itemsize)
    ):
        out[...] = blas.matmul(x, y)
        return out
    return blas.matmul(x, y, out)


def _index_error(e: IndexError, first: int) -> IndexError:
    """NumPy's IndexError for indices a compiled program computed or was given, in PyTorch's
    words: PyTorch numbers the dimension among the index tensors (``first``: the axis of the
    first), where NumPy names the axis of the indexed array."""
    text = re.sub(r" axis (\d+) ", lambda m: f" dimension {int(m.group(1)) - first} ", str(e))
    return IndexError(text)


# values from which ``_added`` sums over flat positions: below, its own dozen NumPy calls cost
# more than NumPy's loop (36 rows of 6: 20 µs against 4; 1,000 rows of 8: 43 against 83)
FLAT_ADD_MIN = 2048


def _added(x: np.ndarray, idx: Sequence[np.ndarray], axis: int, shape: Sequence[int]) -> np.ndarray:
    """Zeros of ``shape`` with ``x`` added at ``(:,) * axis + idx`` (``np.add.at``), repeated
    positions summed in order. Where the index leaves whole axes and ``x`` is big, as one
    ``add.at`` over flat positions: NumPy's loop over such an index is several times slower
    than its one-dimensional one (kmeans' gradient, 10,000 rows of 8 summed into 10: 0.80 ms
    against 0.25). Indices out of range raise NumPy's IndexError, negative ones count from the
    end."""
    out = np.zeros(shape, x.dtype)
    m = len(idx)
    if x.size < FLAT_ADD_MIN or m >= len(shape) or not all(np.asarray(i).dtype.kind in "iu" for i in idx):
        np.add.at(out, (slice(None),) * axis + tuple(idx), x)  # type: ignore[arg-type]
        return out
    idx = np.broadcast_arrays(*idx) if m > 1 else [np.asarray(idx[0])]
    ib = idx[0].ndim
    steps = np.cumprod((1,) + tuple(shape[:0:-1]))[::-1]  # elements per step along each axis
    flat = np.zeros((1,) * x.ndim, np.intp)
    for d in range(axis):  # whole axes in front
        flat = flat + (np.arange(shape[d]) * steps[d]).reshape((-1,) + (1,) * (x.ndim - 1 - d))
    for j, i in enumerate(idx):
        n = shape[axis + j]
        if i.size and (i.min() < -n or i.max() >= n):
            bad = int(i.max() if i.max() >= n else i.min())
            raise IndexError(f"index {bad} is out of bounds for axis {axis + j} with size {n}")
        i = np.where(i < 0, i + n, i) * steps[axis + j]
        flat = flat + i.reshape((1,) * axis + i.shape + (1,) * (x.ndim - axis - ib))
    for d in range(axis + m, len(shape)):  # whole axes behind
        flat = flat + (np.arange(shape[d]) * steps[d]).reshape((-1,) + (1,) * (len(shape) - 1 - d))
    np.add.at(out.reshape(-1), np.broadcast_to(flat, x.shape).reshape(-1), x.reshape(-1))
    return out


def _svml_tan() -> bool:
    """Whether NumPy's float64 ``tan`` is a vector loop (SVML: NumPy's Linux x86-64 builds, on a
    CPU with AVX512_SKX), while its ``sin`` and ``cos`` stay C's scalar ones (NumPy left them out
    of SVML for their accuracy)."""
    core = getattr(np, "_core", None) or np.core  # NumPy 1.x: np.core
    features = getattr(core._multiarray_umath, "__cpu_features__", {})
    return sys.platform == "linux" and platform.machine() == "x86_64" and bool(features.get("AVX512_SKX"))


# float64 sin and cos through tan where that is a vector loop (``NumpyMath.sin``), from this size on
# (below it their extra ufunc calls cost more than C's sin saves)
TAN_TRIG_MIN = 512 if _svml_tan() else None


# a reduction over a last axis of k <= COLUMNS_MAX elements runs as one ufunc call a column
# (``_by_columns``) when it has at least max(32 k, 4 k**2) rows: each call costs 0.4-0.7 µs more
# than the reduction's share of the rows (measured break-even: 64 rows of 2 or 3 elements, 128
# of 4, 256 of 8, 256-512 of 11, 1,024 of 16)
COLUMNS_MAX = 16
_COLUMNS_SIZE = (1 << 62, 1 << 62) + tuple(k * max(32 * k, 4 * k * k) for k in range(2, COLUMNS_MAX + 1))
COLUMNS_MIN = min(_COLUMNS_SIZE)  # smaller arrays are reduced by NumPy without the call


def _by_columns(ufunc: np.ufunc, x: np.ndarray, axes: tuple[int, ...], keepdim: bool) -> np.ndarray | None:
    """``ufunc``'s reduction of a float array ``x`` over its last axis, when that axis is short
    and the rows many (see ``COLUMNS_MAX``), as ``ufunc`` applied column after column; else
    None. NumPy's reduction runs an inner loop per row, which over a short contiguous axis is
    mostly overhead: the sum
    over the last axis of a (2, 10000, 3) array took 220 µs, its columns added 13 µs (of
    (1000, 25, 10): 354 and 176 µs; of (1000, 25, 16): 361 and 280). The order is NumPy's own
    below 8 elements (one after the other), a rounding apart above."""
    k = x.shape[-1] if x.ndim > 1 else 0
    if k > COLUMNS_MAX or x.size < _COLUMNS_SIZE[k] or axes != (x.ndim - 1,) or x.dtype.kind not in "fc":
        return None
    r = ufunc(x[..., 0], x[..., 1])
    for j in range(2, k):
        ufunc(r, x[..., j], out=r)
    return r[..., None] if keepdim else r


class NumpyMath(*(family.Numpy for family in FAMILIES)):  # type: ignore[misc]
    """The math namespace the primitive table's forward expressions are evaluated against (the
    rows of ``prims``' family modules bring their own, ``Numpy``)."""

    exp, log, log1p, expm1, sqrt = np.exp, np.log, np.log1p, np.expm1, np.sqrt
    tan, asin, acos, atan = np.tan, np.arcsin, np.arccos, np.arctan
    sinh, cosh, tanh, abs = np.sinh, np.cosh, np.tanh, np.abs
    floor, ceil, round, isnan = np.floor, np.ceil, np.round, np.isnan
    maximum, minimum, where = np.maximum, np.minimum, np.where
    remainder, fmod, atan2, floordiv, div = np.remainder, np.fmod, np.arctan2, np.floor_divide, np.true_divide
    logical_not, logical_and, logical_or = np.logical_not, np.logical_and, np.logical_or
    matmul = staticmethod(matmul_into)

    @staticmethod
    def pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``x ** y``; a constant exponent of 2, 3, -1, 0.5 or -0.5 is computed as the generated
        kernels and PyTorch compute it (products, a reciprocal, a square root; -0.5 is -inf at -0.0,
        where C's pow gives inf). NumPy's float32 ``power`` by 3 is also 100x slower than ``x*x*x``."""
        if y.__class__ is np.ndarray and y.size and not any(y.strides) and x.dtype.kind == "f":
            c = y.flat[0]
            if c == 2:
                return x * x
            if c == 3:
                return x * x * x
            if c == -1:
                return 1 / x
            if c == 0.5:
                return np.sqrt(x)
            if c == -0.5:
                return 1 / np.sqrt(x)
        return np.power(x, y)

    @staticmethod
    def sin(x: np.ndarray) -> np.ndarray:
        """sin; of a large float64 array where NumPy's ``tan`` is a vector loop, by the half-angle
        tangent, ``2t / (1 + t*t)`` with ``t = tan(x/2)``: 0.18 ms for 100,000 elements against
        C's 0.83 (PyTorch on one thread: 0.27), within 2 ULP of C's over the whole range (the
        tangent of half an argument is accurate next to its poles, and ``t*t`` stays finite: no
        double comes within 1e-19 of an odd multiple of pi), with the same NaN at infinities."""
        if TAN_TRIG_MIN is None or x.dtype != np.float64 or x.size < TAN_TRIG_MIN:
            return np.sin(x)
        t = np.tan(x * 0.5)
        return (t + t) / (t * t + 1.0)

    @staticmethod
    def cos(x: np.ndarray) -> np.ndarray:
        """cos; where ``sin`` uses the half-angle tangent, as ``sin(x) / tan(x)`` (0.30 ms for
        100,000 elements against C's 0.85, within 4 ULP: both factors are accurate relative to
        themselves, next to the zeros of cos too, where ``1 - t*t`` would cancel), and 1 where
        ``|x| < 2**-27`` (0/0 at zero; cos rounds to 1 there)."""
        if TAN_TRIG_MIN is None or x.dtype != np.float64 or x.size < TAN_TRIG_MIN:
            return np.cos(x)
        with np.errstate(invalid="ignore"):
            c = NumpyMath.sin(x) / np.tan(x)
        np.copyto(c, 1.0, where=np.abs(x) < 2**-27)
        return c

    @staticmethod
    def sign(x: np.ndarray) -> np.ndarray:
        """PyTorch's sign: 0 at NaN, where NumPy's is NaN."""
        return np.nan_to_num(np.sign(x), nan=0)

    @staticmethod
    def sigmoid(x: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-x))

    @staticmethod
    def softplus(x: np.ndarray) -> np.ndarray:
        return np.logaddexp(0, x)

    @staticmethod
    def erf(x: np.ndarray) -> np.ndarray:
        return np.vectorize(math.erf, otypes=[x.dtype])(x)

    @staticmethod
    def cast(x: np.ndarray, dtype: str) -> np.ndarray:
        if x.dtype.kind == "c" and dtype[0] != "c":  # PyTorch discards the imaginary part
            x = x.real
        return x.astype(np_dtype(dtype))

    @staticmethod
    def sum(x: np.ndarray, axes: tuple[int, ...], keepdim: bool) -> np.ndarray:
        r = _by_columns(np.add, x, axes, keepdim) if x.size >= COLUMNS_MIN else None
        return np.sum(x, axis=axes, keepdims=keepdim, dtype=x.dtype) if r is None else r

    @staticmethod
    def prod(x: np.ndarray, axes: tuple[int, ...], keepdim: bool) -> np.ndarray:
        r = _by_columns(np.multiply, x, axes, keepdim) if x.size >= COLUMNS_MIN else None
        return np.prod(x, axis=axes, keepdims=keepdim, dtype=x.dtype) if r is None else r

    @staticmethod
    def amax(x: np.ndarray, axes: tuple[int, ...], keepdim: bool) -> np.ndarray:
        if not axes:
            return x
        r = _by_columns(np.maximum, x, axes, keepdim) if x.size >= COLUMNS_MIN else None
        return np.amax(x, axis=axes, keepdims=keepdim) if r is None else r

    @staticmethod
    def amin(x: np.ndarray, axes: tuple[int, ...], keepdim: bool) -> np.ndarray:
        if not axes:
            return x
        r = _by_columns(np.minimum, x, axes, keepdim) if x.size >= COLUMNS_MIN else None
        return np.amin(x, axis=axes, keepdims=keepdim) if r is None else r

    @staticmethod
    def argmax(x: np.ndarray, axis: int, keepdim: bool) -> np.ndarray:
        return np.argmax(x, axis=axis, keepdims=keepdim).astype(np.int64)

    @staticmethod
    def argmin(x: np.ndarray, axis: int, keepdim: bool) -> np.ndarray:
        return np.argmin(x, axis=axis, keepdims=keepdim).astype(np.int64)

    @staticmethod
    def argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
        """A stable sort's indices; NaN sorts as the largest value. Descending: the ascending
        sort of the reversed axis, reversed, so that equal values still keep their order."""
        if not descending:
            return np.argsort(x, axis=axis, kind="stable").astype(np.int64)
        r = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        return (x.shape[axis] - 1 - np.flip(r, axis)).astype(np.int64)

    @staticmethod
    def cumsum(x: np.ndarray, axis: int) -> np.ndarray:
        return np.cumsum(x, axis=axis, dtype=x.dtype)

    @staticmethod
    def reshape(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
        return x.reshape(shape) if x.__class__ is np.ndarray else np.reshape(x, shape)

    @staticmethod
    def permute(x: np.ndarray, perm: Sequence[int]) -> np.ndarray:
        return np.transpose(x, perm)

    @staticmethod
    def expand(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
        """A read-only broadcast view of ``x``: built from ``x``'s buffer with zero strides where
        it is broadcast (4x faster than ``np.broadcast_to``, which an interpreted loop calls for
        every Python number it meets), through ``np.broadcast_to`` when ``x`` exports no buffer
        (a non-contiguous view, a CuPy array)."""
        try:
            lead = len(shape) - x.ndim
            strides = (0,) * lead + tuple(
                0 if n == 1 and m != 1 else st for n, m, st in zip(x.shape, shape[lead:], x.strides)
            )
            r = np.ndarray(tuple(shape), x.dtype, x, 0, strides)
        except (TypeError, ValueError, BufferError, AttributeError):
            return np.broadcast_to(x, shape)
        r.flags.writeable = False
        return r

    @staticmethod
    def slice(x: np.ndarray, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> np.ndarray:
        return x[tuple(map(slice, starts, stops, steps))]

    @staticmethod
    def unslice(
        x: np.ndarray, shape: Sequence[int], starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]
    ) -> np.ndarray:
        return unslice_into(np.empty(shape, x.dtype), x, starts, stops, steps)

    @staticmethod
    def flip(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return np.flip(x, axes)

    @staticmethod
    def cat(xs: Sequence[np.ndarray], axis: int) -> np.ndarray:
        return np.concatenate(xs, axis=axis)

    @staticmethod
    def index(x: np.ndarray, idx: Sequence[np.ndarray], axis: int) -> np.ndarray:
        """``x`` indexed by the arrays ``idx`` from ``axis`` on (negative entries count from the
        end). NumPy checks the bounds; CuPy (the CUDA target's glue) wraps silently, so its
        indices are checked here."""
        if x.__class__ is not np.ndarray:
            for k, i in enumerate(idx):
                n = x.shape[axis + k]
                if i.size and (i.min() < -n or i.max() >= n):
                    bad = int(i.max() if i.max() >= n else i.min())
                    raise IndexError(f"index {bad} is out of bounds for dimension {k} with size {n}")
        try:
            return x[(slice(None),) * axis + tuple(idx)]
        except IndexError as e:
            raise _index_error(e, axis) from None

    @staticmethod
    def unindex(x: np.ndarray, idx: Sequence[np.ndarray], shape: Sequence[int], axis: int) -> np.ndarray:
        return _added(x, idx, axis, shape)

    @staticmethod
    def gather(x: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
        """``take_along_axis`` with PyTorch's bounds: a negative index is an error too (NumPy
        would count it from the end), a RuntimeError naming the index. NumPy checks the upper
        bound itself; CuPy (the CUDA target's glue) wraps silently, so it is checked here."""
        n = x.shape[axis]
        if idx.size and (idx.min() < 0 or (idx.__class__ is not np.ndarray and idx.max() >= n)):
            bad = int(idx.min() if idx.min() < 0 else idx.max())
            raise RuntimeError(f"index {bad} is out of bounds for dimension {axis} with size {n}")
        try:
            return np.take_along_axis(x, idx, axis=axis)
        except IndexError:
            bad = int(idx[idx >= n].reshape(-1)[0])
            raise RuntimeError(f"index {bad} is out of bounds for dimension {axis} with size {n}") from None

    @staticmethod
    def require(x: np.ndarray, test: str, bound: int = 0, ignore: int = 0, rest: Sequence[int] = ()) -> np.ndarray:
        """``x`` itself if every element passes ``test`` (see the ``require`` row), else PyTorch's
        error for it. Works on CuPy arrays too (the CUDA target's glue)."""
        if test == "divisor":
            if not x.all():
                raise RuntimeError("ZeroDivisionError")
            return x
        if test == "mask_count":  # x: a mask's running count less one; its last entry + 1 is the count
            count = int(x.reshape(-1)[-1]) + 1 if x.size else 0
            if count != bound:
                raise RuntimeError(
                    f"shape mismatch: value tensor of shape {[bound, *rest]} cannot be broadcast to "
                    f"indexing result of shape {[count, *rest]}"
                )
            return x
        if not x.size or (0 <= x.min() and x.max() < bound):
            return x
        out = (x < 0) | (x >= bound)
        if test == "target":
            out &= x != ignore
            if out.any():
                raise IndexError(f"Target {int(x[out].reshape(-1)[0])} is out of bounds.")
            return x
        if test == "index_select_dim1":
            raise RuntimeError(
                f"INDICES element is out of DATA bounds, id={int(x[out].reshape(-1)[0])} axis_dim={bound}"
            )
        raise IndexError("index out of range in self")

    @staticmethod
    def scatter_add(x: np.ndarray, idx: np.ndarray, axis: int, shape: Sequence[int]) -> np.ndarray:
        out = np.zeros(shape, x.dtype)
        grid = list(np.ogrid[tuple(slice(n) for n in idx.shape)])
        grid[axis] = idx
        np.add.at(out, tuple(grid), x)
        return out

    @staticmethod
    def const(value: float, dtype: str) -> np.ndarray:
        return np.asarray(value, dtype=np_dtype(dtype))


NUMPY = NumpyMath  # the class itself: plain attribute access never binds self


def unslice_into(
    out: np.ndarray, x: np.ndarray, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]
) -> np.ndarray:
    """``out`` (any contents) set to ``x`` inside the window and zero around it (the runtime
    passes a pooled buffer: a fresh one costs a page fault per 4 KiB)."""
    if any(st != 1 for st in steps):
        out.fill(0)
    else:  # a contiguous window: zero only the slabs around it
        for d, (a, b) in enumerate(zip(starts, stops)):
            lead = (slice(None),) * d
            out[lead + (slice(0, a),)] = 0
            out[lead + (slice(b, None),)] = 0
    out[tuple(map(slice, starts, stops, steps))] = x
    return out


def dead_after(reads: Sequence[Iterable[int]], keep: Container[int]) -> list[list[int]]:
    """For steps that read the given slots, the slots that can be dropped after each step
    (read for the last time there and not in ``keep``)."""
    last: dict[int, int] = {}
    for i, slots in enumerate(reads):
        for a in slots:
            last[a] = i
    dead: list[list[int]] = [[] for _ in reads]
    for s, i in last.items():
        if s not in keep:
            dead[i].append(s)
    return dead


def bind(tape: Tape, values: Iterable[Any]) -> dict[int, np.ndarray]:
    """The environment of a run: input slot -> value (runtime scalars as 0-d arrays)."""
    return {
        s: np.asarray(v, dtype=np_dtype(tape.dtypes[s])) if k == "scalar" else v
        for s, k, v in zip(tape.inputs, tape.kinds, values)
    }


def evaluate(tape: Tape, ins: Instr, env: Mapping[int, np.ndarray]) -> np.ndarray:
    """One instruction with NumPy, as an array of exactly its slot's dtype (callers set errstate)."""
    return compute(tape, ins, [env[a] for a in ins.args])


def compute(tape: Tape, ins: Instr, args: Sequence[np.ndarray]) -> np.ndarray:
    """``evaluate`` on operand arrays given in order (no environment)."""
    r = PRIMS[ins.prim].fwd(NUMPY, *args, **ins.params)
    if type(r) is not np.ndarray or r.dtype != _NP[tape.dtypes[ins.out]]:
        r = np.asarray(r, dtype=np_dtype(tape.dtypes[ins.out]))
    return r


def last_reads(tape: Tape) -> array:
    """For each slot, the index of the last instruction that reads it: its defining
    instruction's when none does, ``len(tape.instrs)`` for outputs (never dropped), -1 for inputs
    nothing reads. An array of machine integers: a Python int each would cost 32 bytes a slot."""
    instrs = tape.instrs
    last = array("q", [-1]) * len(tape.shapes)
    for i, ins in enumerate(instrs):
        last[ins.out] = i
        for a in ins.args:
            last[a] = i
    for s in tape.outputs:
        last[s] = len(instrs)
    return last


# (row's forward, args, params, out slot, its dtype, slots dead after it)
_Step = tuple[Any, tuple[int, ...], Mapping[str, Any], int, np.dtype, tuple[int, ...]]

# tapes up to this many instructions keep their steps (about 160 bytes an instruction): the ones
# run again and again (a loop's, a scan's body) are that small, and a long one (the backward of a
# deep graph) runs once and would hold them as long as it lives
STEPS_MEMO_MAX = 65536


def _steps_of(tape: Tape) -> list[_Step]:
    """The tape as the interpreter runs it: per instruction its row's forward, arguments and
    params, its slot and that slot's dtype, and the slots dead after it (read for the last time
    there, or never read); memoized on a tape of up to ``STEPS_MEMO_MAX`` instructions while its
    sizes stay what they were. Looking all of it up once instead of at every instruction makes a
    small-array instruction cost 1.3-2 µs instead of 1.9-2.4."""
    at = (len(tape.instrs), len(tape.shapes), len(tape.outputs))
    memo = tape._last
    if memo is not None and memo[0] == at:
        return memo[1]
    last = last_reads(tape)
    steps: list[_Step] = []
    for i, ins in enumerate(tape.instrs):
        dead = tuple(a for a in ins.args if last[a] == i)
        if last[ins.out] == i:
            dead += (ins.out,)
        steps.append((PRIMS[ins.prim].fwd, ins.args, ins.params, ins.out, _DT[tape.dtypes[ins.out]], dead))
    if len(steps) <= STEPS_MEMO_MAX:
        tape._last = (at, steps)
    return steps


def interpret(tape: Tape, values: Sequence[Any]) -> list[np.ndarray]:
    """Run ``tape`` on ``values`` (one per input slot) with NumPy; return the output arrays."""
    env: list[Any] = [None] * len(tape.shapes)  # slot -> value, None once dead
    for s, v in bind(tape, values).items():
        env[s] = v
    ndarray = np.ndarray
    with np.errstate(all="ignore"):
        for fwd, args, params, out, dtype, dead in _steps_of(tape):
            r = fwd(NUMPY, *[env[a] for a in args], **params)
            if r.__class__ is not ndarray or (r.dtype is not dtype and r.dtype != dtype):
                r = np.asarray(r, dtype=dtype)
            env[out] = r
            for a in dead:
                env[a] = None
    return [env[s] for s in tape.outputs]
