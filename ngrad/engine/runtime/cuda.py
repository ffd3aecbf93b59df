"""The runtime of the CUDA target.

Contract: ``run(tape, values)`` is ``dispatch.run`` for tapes whose tensors live on the GPU.
Tensor inputs are device arrays (host arrays are accepted and copied over: constants the
engine makes on the host); scalar inputs are Python or NumPy numbers. Every input is checked
against its slot before anything runs, and the outputs are fresh device arrays.

Tiering is the CPU's (``NGRAD_JIT``): a cold tape runs on the NumPy interpreter through a copy
to the host and back, a repeated one compiles. A compiled tape runs the same fusion plan as the
CPU (``fuse(tape, "cuda")``): each kernel is one ``cuda.jit`` grid-stride kernel
(``codegen.cuda_source``), launched asynchronously on the default stream. Glue steps that are
views (reshape, detach) stay on the device; matmul runs through CuPy's cuBLAS when CuPy is
installed, else through a tiled kernel; other glue (slices, gathers, scans...) runs through CuPy
when installed, else on the host with a copy each way. Reduction accumulators start filled
with their identity (``cupy.zeros``/``cupy.full``, else a small fill kernel). A one-element
input handed over on the host (the seed of ``backward()``) is a by-value kernel argument, not a
copy to the device; the program is keyed by which inputs are such numbers. Launches after a
kernel's first go straight to the driver (``targets/cuda.py``'s ``_Launcher``).
"""

import math
import sys
import time

import numpy as np

from ..backend.cuda_source import MATMUL_TILE, cuda_fill_source, cuda_matmul_source, cuda_source
from ..backend.source_math import identity
from ..config import debug_level, jit_mode, jit_threshold
from ..ir.interpret import compute, interpret, np_dtype
from ..recent import Recent
from ..transform.lower import lower
from .checks import check
from .layout import dead_after_steps, squeezed

__all__ = ["run"]

_programs: dict[tuple, object] = Recent()  # (structure, host inputs) -> program, LRU-bounded
COLD_MAX = 1 << 16  # input elements up to which a cold tape runs on the host interpreter
# glue that CuPy runs with NumPy's functions (through __array_function__ and __array_ufunc__)
_CUPY_GLUE = frozenset(
    [
        "fftn",  # cuFFT, through CuPy's numpy.fft
        "rfftn",
        "irfftn",
        "permute",
        "expand",
        "slice",
        "flip",
        "cat",
        "gather",
        "cumsum",
        "argmax",
        "argmin",
        "index",
        "matmul",
        "neg",
        "add",
        "sub",
        "mul",
        "div",
        "maximum",
        "minimum",
        "where",
        "cast",
        "lt",
        "le",
        "gt",
        "ge",
        "eq",
        "ne",
        "logical_and",
        "logical_or",
        "logical_not",
        "abs",
        "exp",
        "log",
        "sqrt",
        "sum",
        "prod",
        "amax",
        "amin",
        # decompositions CuPy's cupy.linalg takes in stacks; eigh and svd stay host glue: cuSOLVER
        # picks other signs for some eigenvectors and singular vectors than LAPACK (measured on
        # an H100), and a program must give the same values on every target
        "qr",
        "slogdet",
    ]
)


def _device(v, dtype=None):
    """``v`` as a C-contiguous device array (host values are copied over)."""
    from ..targets.cuda import is_device_array, to_device

    if is_device_array(v):
        if v.is_c_contiguous():
            return v
        return to_device(np.ascontiguousarray(v.copy_to_host()).reshape(v.shape))
    v = np.asarray(v, dtype=dtype)
    return to_device(v if v.flags.c_contiguous else np.ascontiguousarray(v))  # (which makes 0-d 1-d)


def _host(v):
    from ..targets.cuda import is_device_array

    return v.copy_to_host() if is_device_array(v) else v


class _Program:
    """A tape's CUDA plan: its steps, each kernel's source and compiled kernel, the slots that
    live on the host as numbers (runtime scalars and their reshapes), and constants made once."""

    __slots__ = ("tape", "plan", "sources", "kernels", "seen", "dead", "numbers", "consts")

    def __init__(self, tape, host=()):
        from ..backend.fuse import Glue, Kernel, fuse

        self.tape = tape = lower(tape)  # what the program runs: rows with a decomposition written out
        self.plan = fuse(tape, "cuda")
        self.numbers = {s for s, k in zip(tape.inputs, tape.kinds) if k == "scalar"} | set(host)
        for step in self.plan.steps:
            if (
                isinstance(step, Glue)
                and step.instr.prim in ("reshape", "detach")
                and step.instr.args[0] in self.numbers
            ):
                self.numbers.add(step.instr.out)
        late = frozenset(range(len(tape.shapes))) - self.numbers
        self.sources = [cuda_source(st, tape, late) if isinstance(st, Kernel) else None for st in self.plan.steps]
        self.kernels = None
        self.seen = 0
        self.dead = dead_after_steps(tape, self.plan)
        self.consts = {}

    def compile(self):
        from ..targets.cuda import kernel

        if self.kernels is None:
            self.kernels = [None if s is None else kernel(s.text) for s in self.sources]


def _host_numbers(tape, values):
    """The one-element tensor inputs handed over as host arrays (a backward seed, a constant
    made on the host): kernels take them by value, which spares a copy to the device."""
    return tuple(
        s
        for s, k, v in zip(tape.inputs, tape.kinds, values)
        if k == "tensor" and v.__class__ is np.ndarray and v.size == 1
    )


def _program_for(tape, mode, host):
    if mode == "never" or not tape.instrs:
        return None
    key = (tape.key(), host)
    prog = _programs.get(key)
    if prog is None:
        prog = _programs[key] = _Program(tape, host)
        if debug_level() >= 2:
            for s in prog.sources:
                if s is not None:
                    print(f"ngrad: generated CUDA kernel\n{s.text}", file=sys.stderr)
    if prog.kernels is None:
        prog.seen += 1
        # a cold tape interprets on the host only while it is small: a copy each way plus NumPy
        # costs seconds on 10^8 elements, a CUDA compile about half a second
        if (
            mode == "auto"
            and prog.seen < jit_threshold()
            and sum(math.prod(tape.shapes[s]) for s in tape.inputs) < COLD_MAX
        ):
            return None
        prog.compile()
    return prog


def run(tape, values):
    """Execute ``tape`` on the GPU (see the module docstring); return fresh device arrays."""
    from ..targets.cuda import device_copy, is_device_array

    check(tape, values, device=True)
    if debug_level() >= 1:
        print(f"ngrad: running tape on cuda ({len(tape.instrs)} instrs)\n{tape.format()}", file=sys.stderr)
    prog = _program_for(tape, jit_mode(), _host_numbers(tape, values))
    if prog is None:
        outs = interpret(tape, [_host(v) for v in values])
        return [_device(o) for o in outs]
    outs = _execute(prog, values)
    taken = {id(v) for v in values}
    res = []
    for o in outs:
        if not is_device_array(o):
            o = _device(o)
        elif id(o) in taken or _shares(o, values, res):
            o = device_copy(o)
        taken.add(id(o))
        res.append(o)
    return res


def _shares(o, values, res):
    """Whether ``o`` is a view of an input or of another output (callers own their results)."""
    ptr = _pointer(o)
    return ptr is not None and any(_pointer(v) == ptr for v in list(values) + res)


def _pointer(a):
    try:
        return a.device_ctypes_pointer.value  # a Numba device array: no interface dict to build
    except AttributeError:
        try:
            return a.__cuda_array_interface__["data"][0]
        except Exception:
            return None


def _execute(prog, values):
    from ..targets.cuda import device_empty

    tape = prog.tape
    debug = debug_level()
    env = dict(zip(tape.inputs, values))
    for s, k in zip(tape.inputs, tape.kinds):
        if k == "tensor" and s not in prog.numbers:
            env[s] = _device(env[s])
    for step, src, kern, gone in zip(prog.plan.steps, prog.sources, prog.kernels, prog.dead):
        if src is None:
            env[step.instr.out] = _glue(prog, tape, step.instr, env)
        else:
            part = src.parts[0]
            shape = step.shape or (1,)
            n = math.prod(shape)
            args = [n] + [shape[d] for d in part.dims]
            for a, pattern in part.arrays:
                arr = env[a] if a not in prog.numbers else _device(env[a], np_dtype(tape.dtypes[a]))
                args.append(_shaped(arr, squeezed(tape.shapes[a], pattern)))
            for s, late in zip(part.scalars, part.late):
                v = env[s]
                args.append(_shaped(_device(v), (1,)) if late else _number(v, tape.dtypes[s]))
            for s in part.stores:
                o = device_empty(shape, np_dtype(tape.dtypes[s]))
                args.append(o)
                env[s] = _shaped(o, tape.shapes[s])
            for ins in part.reductions:
                kept = tuple(n_ for d, n_ in enumerate(step.shape) if d not in ins.params["axes"]) or (1,)
                c = _filled(kept, tape.dtypes[ins.out], identity(ins.prim, tape.dtypes[ins.out]))
                args.append(c)
                env[ins.out] = _shaped(c, tape.shapes[ins.out])
            t = time.perf_counter()
            kern.launch(n, args)
            if debug >= 3:
                from ..targets.cuda import synchronize

                synchronize()
                print(
                    f"ngrad: CUDA kernel {kern.key} over {step.shape}: {(time.perf_counter() - t) * 1e3:.3f} ms",
                    file=sys.stderr,
                )
        for s in gone:
            env.pop(s, None)
    return [env[s] for s in tape.outputs]


def _shaped(arr, shape):
    return arr if arr.shape == shape else arr.reshape(shape)


def _number(v, dtype):
    """A kernel's by-value scalar: a Python or NumPy number, or a one-element host array."""
    t = np_dtype(dtype).type
    return t(v.reshape(-1)[0]) if v.__class__ is np.ndarray else t(v)


_fills: list[object] = []


def _filled(shape, dtype, value):
    """A fresh device array of ``shape`` holding ``value`` (a reduction's identity): one CuPy
    call when CuPy is installed, else the fill kernel."""
    from ..targets.cuda import cupy_module, device_empty, from_cupy, kernel

    dt = np_dtype(dtype)
    cp = cupy_module()
    if cp is not None:
        return from_cupy(cp.zeros(shape, dt) if value == 0 else cp.full(shape, value, dt))
    if not _fills:
        _fills.append(kernel(cuda_fill_source()))
    c = device_empty(shape, dt)
    n = math.prod(shape)
    _fills[0].launch(n, (n, c.reshape(-1), dt.type(value)))
    return c


def _glue(prog, tape, ins, env):
    """One glue step on the device (see the module docstring)."""
    from ..targets.cuda import cupy_module, from_cupy

    out, prim = ins.out, ins.prim
    if prim == "const":
        v = prog.consts.get(out)
        if v is None:
            v = prog.consts[out] = _device(compute(tape, ins, []))
        return v
    args = [env[a] for a in ins.args]
    if prim in ("reshape", "detach"):
        if ins.args[0] in prog.numbers:  # a number stays on the host
            return args[0].reshape(ins.params["shape"]) if args[0].__class__ is np.ndarray else args[0]
        return args[0] if prim == "detach" else _device(args[0]).reshape(ins.params["shape"])
    dt = np_dtype(tape.dtypes[out])
    cp = cupy_module()
    if prim == "require":  # a value check: its result is its operand, where it already lies
        from ..ir.interpret import NUMPY

        a = args[0]
        on_host = a.__class__ is np.ndarray or np.isscalar(a) or cp is None
        NUMPY.require(np.asarray(_host(a)) if on_host else cp.asarray(a), **ins.params)
        return a
    if cp is not None and prim in _CUPY_GLUE:
        from ..ir.interpret import NUMPY
        from ..ir.prims import PRIMS

        xs = [
            cp.asarray(a) if a.__class__ is not np.ndarray and not np.isscalar(a) else cp.asarray(np.asarray(a))
            for a in args
        ]
        r = PRIMS[prim].fwd(NUMPY, *xs, **ins.params)
        return from_cupy(cp.ascontiguousarray(cp.asarray(r, dtype=dt)))
    if prim == "matmul":
        return _matmul(tape, ins, [_device(a) for a in args])
    if prim == "scan":  # its steps run on the host, the body compiled there (``loops``)
        from .loops import scan

        return _device(scan(ins.params, [np.asarray(_host(a)) for a in args]))
    with np.errstate(all="ignore"):
        r = compute(tape, ins, [np.asarray(_host(a)) for a in args])
    return _device(r)


def _matmul(tape, ins, args):
    """Batched matmul through the tiled kernel (``codegen.cuda_matmul_source``)."""
    from ..targets.cuda import device_empty, kernel

    a, b = args
    shape = tape.shapes[ins.out]
    (m, k), n = tape.shapes[ins.args[0]][-2:], tape.shapes[ins.args[1]][-1]
    z = math.prod(shape[:-2])
    out = device_empty((z, m, n), np_dtype(tape.dtypes[ins.out]))
    if z and m and n:
        kern = kernel(cuda_matmul_source(tape.dtypes[ins.out]))
        grid = (-(-n // MATMUL_TILE), -(-m // MATMUL_TILE), z)
        kern.launch(0, (m, k, n, a.reshape((z, m, k)), b.reshape((z, k, n)), out), grid, (MATMUL_TILE, MATMUL_TILE))
    return out.reshape(shape)


_NUMBA_TYPE = {
    "f64": "float64",
    "f32": "float32",
    "i64": "int64",
    "i32": "int32",
    "b8": "boolean",
    "c64": "complex64",
    "c128": "complex128",
}


def _array_type(dtype, rank):
    return f"{_NUMBA_TYPE[dtype]}[{', '.join([':'] * (rank - 1) + ['::1'])}]"


def signature(kernel, part, tape):
    """The Numba signature a compiled kernel is launched with (what ``_execute`` passes)."""
    shape = kernel.shape or (1,)
    types = ["int64"] * (1 + len(part.dims))
    types += [_array_type(tape.dtypes[a], len(squeezed(tape.shapes[a], p))) for a, p in part.arrays]
    types += [
        _array_type(tape.dtypes[s], 1) if late else _NUMBA_TYPE[tape.dtypes[s]]
        for s, late in zip(part.scalars, part.late)
    ]
    types += [_array_type(tape.dtypes[s], len(shape)) for s in part.stores]
    types += [
        _array_type(tape.dtypes[ins.out], max(1, len(kernel.shape) - len(ins.params["axes"])))
        for ins in part.reductions
    ]
    return f"void({', '.join(types)})"


def ptx(tape):
    """Type-check every CUDA kernel of ``tape``'s plan by compiling it to PTX (no GPU needed,
    only the CUDA toolkit's NVVM); returns ``(source text, PTX)`` per kernel."""
    from ..targets.cuda import cuda_ptx

    prog = _Program(tape)
    out = []
    for step, src in zip(prog.plan.steps, prog.sources):
        if src is not None:
            out.append((src.text, cuda_ptx(src.text, signature(step, src.parts[0], prog.tape))))
    return out
