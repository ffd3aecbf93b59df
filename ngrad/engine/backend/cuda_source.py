"""CUDA codegen: a fused ``Kernel`` becomes the text of a ``cuda.jit`` kernel, plus the two fixed
device kernels the CUDA executor needs (filling an array, a tiled batched matmul).

Contract: ``cuda_source(kernel, tape)`` returns a ``codegen.Source`` whose text defines
``kernel``, a grid-stride loop computing one element per iteration with the same
``render_element`` lines as the CPU loops (against ``CudaMath``), and whose one ``Part`` is the
calling convention. The text imports ``numba.cuda``, which it runs on; this module itself never
imports Numba.
"""

from ..ir.tape import format_instr
from .codegen import Part, Source
from .element import render_element
from .source_math import NP_TYPE, Expr, SourceMath, dual, identity, to_sign_of, typed

__all__ = ["cuda_source", "cuda_fill_source", "cuda_matmul_source", "CudaMath", "CUDA_BLOCK", "MATMUL_TILE"]


def _c(name):
    return staticmethod(lambda x: Expr(f"math.{name}({x.text})", x.dtype))


def _libdevice(name):
    # libdevice names its float32 functions with an f suffix (floorf); NumPy scalar functions
    # (np.floor) do not exist on the device
    return staticmethod(lambda x: Expr(f"libdevice.{name}{'f' if x.dtype == 'f32' else ''}({x.text})", x.dtype))


class CudaMath(SourceMath):
    """``SourceMath`` for ``cuda.jit``: libdevice's accurate functions (through ``math``) instead
    of the CPU's vectorisable ones, which exist to make LLVM vectorise loops a GPU does not have;
    complex operands take ``cmath``'s (NumPy's scalar functions do not exist on the device)."""

    exp, log, tanh = (
        dual(_c("exp"), "cmath.exp({0})"),
        dual(_c("log"), "cmath.log({0})"),
        dual(_c("tanh"), "cmath.tanh({0})"),
    )
    expm1, log1p = dual(_c("expm1"), "(cmath.exp({0}) - 1)"), dual(_c("log1p"), "cmath.log(1 + {0})")
    sin, cos, erf = dual(_c("sin"), "cmath.sin({0})"), dual(_c("cos"), "cmath.cos({0})"), _c("erf")
    sqrt, tan = dual(_c("sqrt"), "cmath.sqrt({0})"), dual(_c("tan"), "cmath.tan({0})")
    asin, acos = dual(_c("asin"), "cmath.asin({0})"), dual(_c("acos"), "cmath.acos({0})")
    atan, sinh, cosh = (
        dual(_c("atan"), "cmath.atan({0})"),
        dual(_c("sinh"), "cmath.sinh({0})"),
        dual(_c("cosh"), "cmath.cosh({0})"),
    )
    floor, ceil, round = _libdevice("floor"), _libdevice("ceil"), _libdevice("rint")
    sincos = _libdevice("sincos")  # a pair (sin, cos)

    @staticmethod
    def div(x, y):  # the device's complex division raises nothing
        return x / y

    @staticmethod
    def sigmoid(x):
        one = typed(1, x.dtype)
        exp = "cmath.exp" if x.dtype in ("c64", "c128") else "math.exp"
        return Expr(f"({one} / ({one} + {exp}(-{x.text})))", x.dtype)

    @staticmethod
    def softplus(x):  # log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|)
        zero = typed(0, x.dtype)
        return Expr(f"(({x.text} if {x.text} > {zero} else {zero}) + math.log1p(math.exp(-abs({x.text}))))", x.dtype)

    @staticmethod
    def sign(x):  # PyTorch's: 0 at NaN and at -0.0
        one, zero = typed(1, x.dtype), typed(0, x.dtype)
        return Expr(f"({one} if {x.text} > {zero} else (-{one} if {x.text} < {zero} else {zero}))", x.dtype)

    # NumPy's ufuncs do not exist on the device: libdevice's fmod (exact), and Python's integer %
    @staticmethod
    def remainder(x, y):
        if x.dtype[0] == "f":
            return to_sign_of(f"math.fmod({x.text}, {y.text})", y, y, 1)
        return Expr(f"({x.text} % {y.text})", x.dtype)

    @staticmethod
    def fmod(x, y):
        if x.dtype[0] == "f":
            return Expr(f"math.fmod({x.text}, {y.text})", x.dtype)
        return to_sign_of(f"({x.text} % {y.text})", x, y, -1)


# Threads per block: the block-level reduction trees are sized for this many (the runtime may
# launch fewer, a power of two).
CUDA_BLOCK = 256


def _cuda_combine(prim, acc, x):
    """Lines folding ``x`` into the local ``acc`` (NaN propagates through amax/amin, as in NumPy)."""
    if prim == "sum":
        return [f"{acc} += {x}"]
    op = ">" if prim == "amax" else "<"
    return [f"if {x} {op} {acc} or {x} != {x}:", f"    {acc} = {x}"]


def _cuda_atomic(prim, arr, ix, x):
    """Lines folding ``x`` into ``arr[ix]`` across threads. Numba's float atomic max/min assume
    no NaN, so a NaN is stored plainly; their compare-and-swap loop never replaces it again."""
    if prim == "sum":
        return [f"cuda.atomic.add({arr}, {ix}, {x})"]
    fn = "max" if prim == "amax" else "min"
    return [f"if {x} != {x}:", f"    {arr}[{ix}] = {x}", "else:", f"    cuda.atomic.{fn}({arr}, {ix}, {x})"]


def cuda_source(kernel, tape, late=frozenset()):
    """The ``cuda.jit`` text of one fused kernel: a grid-stride loop over the kernel's elements
    (flat index ``e`` unravelled into the nd loop indices), reading its arrays with the same
    broadcast patterns as the CPU loop. A full reduction accumulates per thread, then as a tree
    in shared memory, then once per block into its accumulator with an atomic; a partial one
    adds each element into its accumulator atomically. Accumulators arrive filled with the
    reduction's identity. Parameters: the element count, the extents of axes 1.., then arrays,
    scalars (``late``: ones a kernel made, passed as one-element device arrays), stores and
    accumulators (as ``Part`` describes them)."""
    rank = max(1, len(kernel.shape))
    idx = [f"i{d}" for d in range(rank)]
    arrays, scalars, body = [], [], []
    names = render_element(kernel, tape, idx, CudaMath, arrays, scalars, body)
    head, tail = [], []
    for k, ins in enumerate(kernel.reductions):
        axes, dt, x = ins.params["axes"], tape.dtypes[ins.out], names[ins.args[0]].text
        comment = f"  # %{ins.out} = {format_instr(ins)}"
        kept = [idx[d] for d in range(len(kernel.shape)) if d not in axes]
        if kept:  # a partial reduction: straight into its accumulator
            ix = kept[0] if len(kept) == 1 else "(" + ", ".join(kept) + ")"
            lines = _cuda_atomic(ins.prim, f"c{k}", ix, x)
            body += [lines[0] + comment] + lines[1:]
            continue
        acc, sh, start = f"acc{k}", f"sh{k}", typed(identity(ins.prim, dt), dt)
        head.append(f"{acc} = {start}")
        lines = _cuda_combine(ins.prim, acc, x)
        body += [lines[0] + comment] + lines[1:]
        tail += [
            f"# block tree of %{ins.out}",
            f"{sh} = cuda.shared.array(BLOCK, {NP_TYPE[dt]})",
            f"{sh}[tid] = {acc}",
            "cuda.syncthreads()",
            "w = cuda.blockDim.x // 2",
            "while w > 0:",
            "    if tid < w:",
        ]
        tail += ["        " + ln for ln in _cuda_combine(ins.prim, f"{sh}[tid]", f"{sh}[tid + w]")]
        tail += ["    cuda.syncthreads()", "    w //= 2", "if tid == 0:"]
        tail += ["    " + ln for ln in _cuda_atomic(ins.prim, f"c{k}", "0", f"{sh}[0]")]
    unravel = []
    if rank == 1:
        unravel.append("i0 = e")
    else:
        unravel.append("q = e")
        for d in range(rank - 1, 0, -1):
            unravel += [f"i{d} = q % m{d}", f"q //= m{d}"]
        unravel.append("i0 = q")
    params = (
        ["n"]
        + [f"m{d}" for d in range(1, rank)]
        + [f"a{k}" for k in range(len(arrays))]
        + [f"S{k}" if sc in late else f"s{k}" for k, sc in enumerate(scalars)]
        + [f"o{k}" for k in range(len(kernel.stores))]
        + [f"c{k}" for k in range(len(kernel.reductions))]
    )
    out = [
        f"def kernel({', '.join(params)}):",
        "    tid = cuda.threadIdx.x",
        "    e = cuda.grid(1)",
        "    step = cuda.gridsize(1)",
    ]
    out += [f"    s{k} = S{k}[0]" for k, sc in enumerate(scalars) if sc in late]
    out += ["    " + ln for ln in head]
    out += ["    while e < n:"] + ["        " + ln for ln in unravel + body] + ["        e += step"]
    out += ["    " + ln for ln in tail]
    text = (
        "import cmath\nimport math\n\nimport numpy as np\nfrom numba import cuda\nfrom numba.cuda import libdevice\n\n"
        f"BLOCK = {CUDA_BLOCK}\n\n\n" + "\n".join(out) + "\n"
    )
    part = Part(
        list(range(1, rank)),
        arrays,
        scalars,
        [sc in late for sc in scalars],
        list(kernel.stores),
        list(kernel.reductions),
        False,
        [False] * len(kernel.reductions),
    )
    return Source(text, [part])


def cuda_fill_source():
    """A kernel setting every element of a flat device array to ``v`` (reduction identities)."""
    return (
        "from numba import cuda\n\n\ndef kernel(n, a, v):\n    e = cuda.grid(1)\n    step = cuda.gridsize(1)\n"
        "    while e < n:\n        a[e] = v\n        e += step\n"
    )


MATMUL_TILE = 16


def cuda_matmul_source(dtype):
    """A tiled batched matmul ``c[z] = a[z] @ b[z]`` for ``dtype``: each block computes one
    TILE x TILE tile of ``c``, staging tiles of ``a`` and ``b`` through shared memory (used when
    CuPy's cuBLAS is not installed)."""
    t, zero = NP_TYPE[dtype], typed(0, dtype)
    return f"""import numpy as np
from numba import cuda

TILE = {MATMUL_TILE}


def kernel(m, k, n, a, b, c):
    sa = cuda.shared.array((TILE, TILE), {t})
    sb = cuda.shared.array((TILE, TILE), {t})
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    z = cuda.blockIdx.z
    acc = {zero}
    for t in range((k + TILE - 1) // TILE):
        j = t * TILE + tx
        sa[ty, tx] = a[z, row, j] if row < m and j < k else {zero}
        j = t * TILE + ty
        sb[ty, tx] = b[z, j, col] if j < k and col < n else {zero}
        cuda.syncthreads()
        for j in range(TILE):
            acc += sa[ty, j] * sb[j, tx]
        cuda.syncthreads()
    if row < m and col < n:
        c[z, row, col] = acc
"""
