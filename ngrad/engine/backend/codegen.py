"""Codegen: a fused ``Kernel`` becomes readable Python source for Numba's ``njit`` or ``cuda.jit``.

Contract: ``program(kernels, tape)`` returns ``Source``: the text of one module-level
function ``kernel`` running the kernels' loop nests in order, and each kernel's calling
convention (loop sizes, input arrays, scalars, output arrays, reduction accumulators);
``render(kernel, tape)`` is the one-kernel case. Elementwise expressions come from the primitive table's forward rows,
evaluated against ``SourceMath`` (which builds expression text instead of numbers), so the
interpreter and the compiled code share one definition. Every generated line carries the
tape instruction it came from as a comment. Sizes are arguments and never appear in the text,
so one kernel serves every batch size; literals are typed to the dtype they are used with
(float32 code stays float32). CPU text imports ``math`` and ``numpy`` only; the CUDA text
(``cuda_source.py``) renders the same element with ``render_element``. This module itself never
imports Numba.
"""

import math
import re

import numpy as np

from ..ir.dtypes import from_short
from ..ir.prims import PRIMS
from ..ir.tape import format_instr
from ..store import CODEGEN_VERSION  # bump it there whenever this module's output changes meaning
from .fuse import ReadKind

__all__ = [
    "render",
    "program",
    "render_element",
    "identity",
    "typed",
    "to_sign_of",
    "Expr",
    "SourceMath",
    "Source",
    "Part",
    "NP_TYPE",
    "CODEGEN_VERSION",
]


_NP_INFO = {"i64": np.int64, "i32": np.int32}
NP_TYPE = {"f64": "np.float64", "f32": "np.float32", "i64": "np.int64", "i32": "np.int32", "b8": "np.bool_"}


class Expr:
    """Source text of a scalar expression of a known dtype; operators build bigger expressions."""

    __slots__ = ("text", "dtype")

    def __init__(self, text, dtype):
        self.text, self.dtype = text, dtype

    def _bin(self, op, other):
        return Expr(f"({self.text} {op} {other.text})", self.dtype)

    def __add__(self, o):
        return self._bin("+", o)

    def __sub__(self, o):
        return self._bin("-", o)

    def __mul__(self, o):
        return self._bin("*", o)

    def __truediv__(self, o):
        return self._bin("/", o)

    def __neg__(self):
        return Expr(f"(-{self.text})", self.dtype)

    def __lt__(self, o):
        return Expr(f"({self.text} < {o.text})", "b8")

    def __le__(self, o):
        return Expr(f"({self.text} <= {o.text})", "b8")

    def __gt__(self, o):
        return Expr(f"({self.text} > {o.text})", "b8")

    def __ge__(self, o):
        return Expr(f"({self.text} >= {o.text})", "b8")

    def __eq__(self, o):
        return Expr(f"({self.text} == {o.text})", "b8")

    def __ne__(self, o):
        return Expr(f"({self.text} != {o.text})", "b8")

    __hash__ = None


def typed(value, dtype):
    """The source text of the literal ``value`` in ``dtype`` (``np.float32(0.5)``, ``True``)."""
    if dtype == "b8":
        return "True" if value else "False"
    if dtype[0] == "i":
        return f"{NP_TYPE[dtype]}({int(value)})"
    v = float(value)
    text = repr(v) if math.isfinite(v) else ("np.nan" if v != v else "np.inf" if v > 0 else "-np.inf")
    return f"{NP_TYPE[dtype]}({text})"


def _f(name):
    return lambda x: Expr(f"{name}({x.text})", x.dtype)


def _v(name):
    def f(x):
        if x.dtype == "f32":
            return Expr(f"np.float32({name}(np.float64({x.text})))", x.dtype)
        return Expr(f"{name}({x.text})", x.dtype)

    return staticmethod(f)


def to_sign_of(r, s, y, step):
    """``r``, a remainder of a division by ``y`` (text evaluated as often as needed), moved by
    ``step * y`` to the sign of ``s`` where it is non-zero and of the other sign."""
    zero = typed(0, s.dtype)
    flip = f"({r} != {zero} and (({r} < {zero}) != ({s.text} < {zero})))"
    return Expr(f"({r} {'+' if step > 0 else '-'} ({y.text} if {flip} else {zero}))", s.dtype)


_VMATH_CALL = re.compile(r"\b_v[a-z0-9]+\(")  # a call of a vmath helper (see ``_v``) in kernel source


class SourceMath:
    """The math namespace of the primitive table, producing Numba-compatible source text."""

    sqrt = _f("math.sqrt")
    # the vectorisable math of engine/vmath.py (float32 evaluates in float64 and rounds once)
    exp, expm1, log, log1p, tanh = _v("_vexp"), _v("_vexpm1"), _v("_vlog"), _v("_vlog1p"), _v("_vtanh")
    sigmoid, softplus = _v("_vsigmoid"), _v("_vsoftplus")
    sin, cos = _v("_vsin"), _v("_vcos")  # guarded: see GUARDED and render()
    tan, asin, acos, atan = _f("math.tan"), _f("math.asin"), _f("math.acos"), _f("math.atan")
    sinh, cosh, erf = _f("math.sinh"), _f("math.cosh"), _v("_verf")
    floor, ceil, round, sign = _f("np.floor"), _f("np.ceil"), _f("np.rint"), _f("np.sign")

    @staticmethod
    def abs(x):
        return Expr(f"abs({x.text})", x.dtype)

    @staticmethod
    def isnan(x):
        return Expr(f"({x.text} != {x.text})", "b8")

    @staticmethod
    def pow(x, y):
        return Expr(f"({x.text} ** {y.text})", x.dtype)

    @staticmethod
    def maximum(x, y):  # NaN propagates, ties keep x (NumPy's semantics)
        return Expr(f"({x.text} if ({x.text} >= {y.text} or {x.text} != {x.text}) else {y.text})", x.dtype)

    @staticmethod
    def minimum(x, y):
        return Expr(f"({x.text} if ({x.text} <= {y.text} or {x.text} != {x.text}) else {y.text})", x.dtype)

    @staticmethod
    def where(c, x, y):
        return Expr(f"({x.text} if {c.text} else {y.text})", x.dtype)

    @staticmethod
    def atan2(x, y):
        if x.dtype == "f32":
            return Expr(f"np.float32(math.atan2(np.float64({x.text}), np.float64({y.text})))", x.dtype)
        return Expr(f"math.atan2({x.text}, {y.text})", x.dtype)

    @staticmethod
    def remainder(x, y):  # NumPy's: the sign of y, NaN for a zero float divisor
        return Expr(f"np.remainder({x.text}, {y.text})", x.dtype)

    @staticmethod
    def fmod(x, y):  # the sign of x; Numba's integer np.fmod takes y's sign, so integers fix it
        if x.dtype[0] == "f":
            return Expr(f"np.fmod({x.text}, {y.text})", x.dtype)
        return to_sign_of(f"({x.text} % {y.text})", x, y, -1)

    @staticmethod
    def logical_not(x):
        return Expr(f"(not {x.text})", "b8")

    @staticmethod
    def logical_and(x, y):
        return Expr(f"({x.text} and {y.text})", "b8")

    @staticmethod
    def logical_or(x, y):
        return Expr(f"({x.text} or {y.text})", "b8")

    @staticmethod
    def cast(x, dtype):
        if dtype == "b8":
            return Expr(f"({x.text} != 0)", dtype)
        return Expr(f"{NP_TYPE[dtype]}({x.text})", dtype)


# Primitives whose vectorised version is accurate only for |x| <= TRIG_LIMIT: the kernel counts
# arguments out of range (a reduction LLVM vectorises) and the runtime re-runs the tape on the
# interpreter when any was, so a huge argument costs time, never accuracy.
GUARDED = ("sin", "cos")
TRIG_LIMIT = 1.0e6


class Part:
    """One kernel's calling convention inside a generated function: loop extents (``dims``: the
    axes whose extent is an argument; short inner ones are literals), input arrays (as (slot,
    broadcast pattern): the array is passed without its broadcast axes), scalars (by slot;
    ``late[k]``: passed as a one-element array because an earlier loop of the same function makes
    it), stored slots, reductions (their accumulator arrays, passed without their reduced axes),
    and ``guard``: a last one-element bool array set when an argument left the range of a guarded
    primitive. ``fresh[k]``: the kernel writes all of accumulator k itself. ``padded``: input
    array position -> whether its rows are shifted, for arrays read through a window (a slice,
    or an unslice: zero outside the window); ``shifted``: some array (passed or local) is read at
    other rows than the loop's, so the loop cannot run in chunks of rows. Stores the function
    keeps as local scratch are in neither ``stores`` nor ``arrays``. ``bounds``: None, or the
    int64 array of window starts and stops passed last."""

    __slots__ = (
        "dims",
        "arrays",
        "scalars",
        "late",
        "stores",
        "reductions",
        "guard",
        "fresh",
        "padded",
        "shifted",
        "bounds",
    )

    def __init__(
        self, dims, arrays, scalars, late, stores, reductions, guard, fresh, padded=None, shifted=False, bounds=None
    ):
        self.dims, self.late = dims, late
        self.arrays, self.scalars, self.stores, self.reductions = arrays, scalars, stores, reductions
        self.guard, self.fresh, self.padded, self.shifted = guard, fresh, padded or {}, shifted
        self.bounds = bounds

    @property
    def rows(self):
        """Per input array: indexed by the outermost loop variable (else read at row 0 only; a
        padded array whose rows are shifted is neither: see ``shifted``)."""
        return [not pattern[0] and not self.padded.get(k) for k, (_, pattern) in enumerate(self.arrays)]

    @property
    def whole(self):
        """Per input array: read only at the loop's own index (no broadcast axis, no padding)."""
        return [not any(pattern) and k not in self.padded for k, (_, pattern) in enumerate(self.arrays)]


class Source:
    """Generated text of one function and the ``Part`` of each kernel it runs, in order."""

    __slots__ = ("text", "parts")

    def __init__(self, text, parts):
        self.text, self.parts = text, parts


def _pow_literal(x, value):
    """``x ** c`` for a literal ``c``: multiplications and sqrt instead of a pow call."""
    t = x.text
    if value == 2:
        return f"({t} * {t})"
    if value == 3:
        return f"({t} * {t} * {t})"
    if value == 1:
        return t
    if value == 0.5:
        return f"math.sqrt({t})"
    if value == -1:
        return f"({typed(1, x.dtype)} / {t})"
    return None


_IDENTITY = {"sum": 0, "prod": 1}


def identity(prim, dtype):
    """The value a reduction starts from: its result over no elements."""
    if prim in _IDENTITY:
        return _IDENTITY[prim]
    if dtype == "b8":
        return prim == "amin"
    if dtype[0] == "i":
        info = np.iinfo(_NP_INFO[dtype])
        return info.min if prim == "amax" else info.max
    return -math.inf if prim == "amax" else math.inf


# Inner loop extents up to this are written into the kernel as literals (and unrolled by LLVM):
# a (N, N, 3) loop of coordinates runs twice as fast. The kernel is then specific to that extent;
# outer extents (batch sizes) never are.
SMALL_DIM = 4


def _unsigned(index):
    return f"np.uint64({index})"


def _window_index(r, slot, idx, shape, bounds, p):
    """The index expressions of a window read ``r`` (a slice: the source at start + step * i; an
    unslice: at (i - start) / step) at loop indices ``idx``, and the conditions under which an
    unslice's element is inside its window (zero outside). Starts and stops are arguments
    (``bounds``: key -> (name, value)), so one kernel serves every size (x[1:] and x[:-1] at
    n=100 and n=1000); steps are literals. A start of 0 or a stop at the end is left out, so the
    text depends on sizes only where a window is whole at one size. Indices are unsigned: Numba
    checks a signed one for negativity, which stops LLVM from vectorising the loop."""

    def bound(axis, end, value):
        return bounds.setdefault((slot, axis, end), (f"{p}w{len(bounds)}", value))[0]

    ix, inside = [], []
    for d, (i, (a, b, c), n) in enumerate(zip(idx, r.window, shape)):
        start = bound(d, 0, a) if a else None
        if r.kind == ReadKind.WINDOW:
            at = i if c == 1 else f"{i} * {c}"
            ix.append(_unsigned(f"{start} + {at}") if a else at)
            continue
        ix.append(_unsigned(f"{i} - {start}") if a else i)
        inside += ([f"{i} >= {start}"] if a else []) + ([f"{i} < {bound(d, 1, b)}"] if b < n else [])
        if c != 1:
            ix[-1] = f"{ix[-1]} // {c}"
            inside.append(f"({i} - {start or 0}) % {c} == 0")
    return ix, inside


def render_element(kernel, tape, idx, math_, arrays, scalars, body, p="", tag="", bounds=None, outer=None):
    """Append to ``body`` the lines computing one element of ``kernel`` at loop indices ``idx``
    (reads, its instructions against the math namespace ``math_``, stores); return the expression
    of every slot it defines. ``arrays`` and ``scalars`` collect the kernel's parameters;
    ``bounds`` (key -> (name, value)) the window starts and stops, which are arguments too.

    ``outer``: a loop nest's lists of lines run inside loop d before loop d + 1 starts (d = 0,
    1, ...; the last list is the innermost body's head). A read that does not use the inner
    indices (a broadcast operand), and arithmetic on such reads only, goes into the list of the
    deepest loop it depends on: the stores of the inner loop might alias any array as far as
    LLVM knows, so it would not hoist those loads itself (gmm's (n, k, d) loops reading (n, k)
    and (k, d) operands: 0.70 -> 0.50 ms measured)."""
    names = {}
    level = {}  # name -> the deepest loop its value depends on (-1: none)
    depth_of = {i: d for d, i in enumerate(idx) if outer is None or d < len(outer)}  # not an unrolled copy's literal

    def emit(line, name, deps):
        d = max(deps, default=-1)
        level[name] = d
        if outer is None or d >= len(outer) - 1:
            body.append(line)
        else:
            outer[max(d, 0)].append(line)  # never before every loop: a zero extent runs nothing

    for slot in sorted(kernel.reads):
        r = kernel.reads[slot]
        dtype = tape.dtypes[slot]
        if r.kind == ReadKind.LITERAL:
            names[slot] = Expr(typed(r.value, dtype), dtype)
        elif r.kind == ReadKind.SCALAR:
            if r.src not in scalars:
                scalars.append(r.src)
            names[slot] = Expr(f"{p}s{scalars.index(r.src)}", dtype)
        elif r.kind in (ReadKind.WINDOW, ReadKind.PAD):
            src, pattern = r.src, tuple(False for _ in tape.shapes[r.src]) or (False,)
            if (src, pattern) not in arrays:
                arrays.append((src, pattern))
            ix, inside = _window_index(r, slot, idx, kernel.shape, bounds, p)
            v = f"{p}r{slot}{tag}"
            load = f"{p}a{arrays.index((src, pattern))}[{', '.join(ix) or '0'}]"
            if inside:
                load += f" if {' and '.join(inside)} else {typed(0, dtype)}"
            what = "slice" if r.kind == ReadKind.WINDOW else "unslice, zero outside"
            emit(f"{v} = {load}  # read %{src} as %{slot} = {what}", v, [depth_of.get(i, -1) for i in idx])
            names[slot] = Expr(v, dtype)
        else:
            src, pattern = r.src, tuple(r.pattern) or (False,)
            if (src, pattern) not in arrays:
                arrays.append((src, pattern))
            # the array arrives without its broadcast (extent 1) axes: fewer indices to lower
            used = [idx[d] for d in range(len(pattern)) if not pattern[d]]
            v = f"{p}r{slot}{tag}"
            emit(
                f"{v} = {p}a{arrays.index((src, pattern))}[{', '.join(used) or '0'}]  # read %{src}"
                + (" (broadcast)" if any(pattern) else ""),
                v,
                [depth_of.get(i, -1) for i in used],
            )
            names[slot] = Expr(v, dtype)
    # sin and cos of one value share their range reduction when the target has sincos (about
    # 13% of the element-wise chain's value+gradient kernel in float64 on an H100)
    pair_of = {}  # out slot -> (sin instr, cos instr) computed together
    if getattr(math_, "sincos", None) is not None:
        first = {}
        for ins in kernel.body:
            if ins.prim in ("sin", "cos"):
                first.setdefault((ins.prim, ins.args[0]), ins)
        for (prim, a), sin in first.items():
            cos = first.get(("cos", a))
            if prim == "sin" and cos is not None:
                pair_of[sin.out] = pair_of[cos.out] = (sin, cos)
    for ins in kernel.body:
        args = [names[a] for a in ins.args]
        pair = pair_of.get(ins.out)
        if pair is not None:
            v = f"{p}v{ins.out}{tag}"
            sin, cos = pair
            deps = [level.get(a.text, -1) for a in args]
            if (cos if ins is sin else sin).out in names:
                emit(f"# %{ins.out} = {format_instr(ins)}: {v} was made with it", v, deps)
            else:
                emit(
                    f"{p}v{sin.out}{tag}, {p}v{cos.out}{tag} = {math_.sincos(args[0]).text}"
                    f"  # %{sin.out} = {format_instr(sin)}; %{cos.out} = {format_instr(cos)}",
                    v,
                    deps,
                )
            names[ins.out] = Expr(v, tape.dtypes[ins.out])
            continue
        text = None
        exponent = kernel.reads.get(ins.args[1]) if ins.prim == "pow" else None
        if exponent is not None and exponent.kind == ReadKind.LITERAL:
            text = _pow_literal(args[0], exponent.value)
        if ins.prim in ("reshape", "expand"):  # fusion only puts no-op movements in a loop
            text = args[0].text
        if text is None:
            text = PRIMS[ins.prim].fwd(math_, *args, **ins.params).text
        v = f"{p}v{ins.out}{tag}"
        emit(f"{v} = {text}  # %{ins.out} = {format_instr(ins)}", v, [level.get(a.text, -1) for a in args])
        names[ins.out] = Expr(v, tape.dtypes[ins.out])
    for k, slot in enumerate(kernel.stores):
        body.append(f"{p}o{k}[{', '.join(idx)}] = {names[slot].text}  # store %{slot}")
    return names


def _loops(kernel, tape, p, late, scratch=frozenset(), bound=None):
    """The parameters and lines of one kernel's loop nest, every name prefixed with ``p``.
    ``scratch``: stores the function allocates itself; ``bound``: slot -> the local array an
    earlier loop of the function stored it in (read from there, not passed)."""
    bound = bound or {}
    rank = max(1, len(kernel.shape))
    shape = kernel.shape or (1,)
    # A short innermost extent (xyz coordinates) is unrolled here: its copies of the body become
    # straight-line code, and a reduction along another axis gets one local per copy.
    unroll = shape[-1] if rank > 1 and shape[-1] <= SMALL_DIM else 0
    loop_dims = rank - 1 if unroll else rank
    arrays, scalars = [], []
    body = []
    guards = []  # arguments of guarded primitives, checked by one line (one reduction) per element
    # A reduction accumulates in a local inside the deepest loop its accumulator index depends on
    # (outside the whole nest for a full reduction): a load and store per element (the arrays
    # might alias) would keep LLVM from vectorising and from keeping the sum in a register. Such
    # an accumulator starts from the reduction's identity, so its array needs no initial fill.
    pre = {d: [] for d in range(-1, rank)}  # lines run inside loop d, before loop d + 1 starts
    post = {d: [] for d in range(-1, rank)}  # lines run inside loop d, after loop d + 1 ends
    fresh = [True] * len(kernel.reductions)  # accumulator arrays the kernel overwrites whole

    bounds = {}
    for copy in range(max(unroll, 1)):
        idx = [f"{p}i{d}" for d in range(loop_dims)] + ([str(copy)] if unroll else [])
        tag = f"_{copy}" if unroll else ""
        names = render_element(
            kernel, tape, idx, SourceMath, arrays, scalars, body, p, tag, bounds, [pre[d] for d in range(loop_dims)]
        )
        for ins in kernel.body:
            if ins.prim in GUARDED and names[ins.args[0]].text not in guards:
                guards.append(names[ins.args[0]].text)
        for k, ins in enumerate(kernel.reductions):
            axes = ins.params["axes"]
            # the accumulator arrives without its reduced axes (a full reduction's is 0-d)
            ix = ", ".join(idx[d] for d in range(len(kernel.shape)) if d not in axes) or "()"
            x = names[ins.args[0]].text
            depth = max([d for d in range(loop_dims) if d not in axes and d < len(kernel.shape)], default=-1)
            across = unroll and rank - 1 in axes  # the unrolled copies add into one local
            acc = f"{p}c{k}[{ix}]"
            local = depth < loop_dims - 1 or across
            # a float max/min in a local: LLVM's maxnum/minnum, which it vectorises (5x on a
            # vector), with NaN counted on the side (maxnum would skip it; NumPy propagates it)
            extreme = local and ins.prim in ("amax", "amin") and tape.dtypes[ins.out][0] == "f"
            if local:
                acc = f"{p}acc{k}" + (tag if unroll and not across else "")
                nan = f"{p}nan{k}" + (tag if unroll and not across else "")
                whole = all(d > depth for d in axes)  # the local sees every term of its element
                fresh[k] = fresh[k] and whole
                if copy == 0 or not across:
                    start = (
                        typed(identity(ins.prim, tape.dtypes[ins.out]), tape.dtypes[ins.out])
                        if whole
                        else f"{p}c{k}[{ix}]"
                    )
                    pre[depth].append(f"{acc} = {start}")
                    if extreme:
                        pre[depth].append(f"{nan} = {'False' if whole else f'{start} != {start}'}")
                        post[depth].append(f"{p}c{k}[{ix}] = np.nan if {nan} else {acc}")
                    else:
                        post[depth].append(f"{p}c{k}[{ix}] = {acc}")
            else:
                fresh[k] = False
            if ins.prim == "sum":
                line = f"{acc} += {x}"
            elif ins.prim == "prod":
                line = f"{acc} *= {x}"
            elif extreme:
                line = f"{acc} = {'_fmax' if ins.prim == 'amax' else '_fmin'}({acc}, {x})\n{{ind}}{nan} |= {x} != {x}"
            elif ins.prim == "amax":
                line = f"if {x} > {acc} or {x} != {x}:\n{{ind}}    {acc} = {x}"
            else:
                line = f"if {x} < {acc} or {x} != {x}:\n{{ind}}    {acc} = {x}"
            body.append(f"{line}  # %{ins.out} = {format_instr(ins)}")
    guard = bool(guards)
    if guard:
        test = " | ".join(f"(abs({g}) > {TRIG_LIMIT!r})" for g in guards)
        body.append(f"{p}bad += {test}  # range guard of sin/cos")
        pre[-1].append(f"{p}bad = 0")
        post[-1].append(f"{p}flag[0] = {p}bad > 0")
    dims = [d for d in range(loop_dims) if d == 0 or shape[d] > SMALL_DIM]  # extents not in the text
    params = (
        [f"{p}n{d}" for d in dims]
        + [f"{p}a{k}" for k, (a, _) in enumerate(arrays) if a not in bound]
        + [f"{p}S{k}" if sc in late else f"{p}s{k}" for k, sc in enumerate(scalars)]
        + [f"{p}o{k}" for k, st in enumerate(kernel.stores) if st not in scratch]
        + [f"{p}c{k}" for k in range(len(kernel.reductions))]
        + ([f"{p}flag"] if guard else [])
        + ([f"{p}w"] if bounds else [])
    )
    extents = "".join(f"{p}n{d}, " if d in dims else f"{shape[d]}, " for d in range(rank))
    out = [
        f"{p}o{k} = np.empty(({extents}), {NP_TYPE[tape.dtypes[st]]})  # scratch %{st}"
        for k, st in enumerate(kernel.stores)
        if st in scratch
    ]
    out += [f"{p}a{k} = {bound[a]}  # %{a}, stored above" for k, (a, _) in enumerate(arrays) if a in bound]
    out += [
        f"{name} = {p}w[{k}]  # {'start' if end == 0 else 'stop'} of %{slot}'s window on axis {axis}"
        for k, ((slot, axis, end), (name, _)) in enumerate(bounds.items())
    ]
    # a scalar made by an earlier loop of the same function arrives as a one-element array, read
    # once that loop has run; any other is a plain argument
    out += [f"{p}s{k} = {p}S{k}[0]" for k, sc in enumerate(scalars) if sc in late]
    ind = ""
    for d in range(loop_dims):
        out += [ind + ln for ln in pre[d - 1]]
        if d > 0 and shape[d] <= SMALL_DIM:
            loop = f"range({shape[d]})"  # a short extent LLVM unrolls
        else:
            loop = f"range({p}n{d})"
        out.append(f"{ind}for {p}i{d} in {loop}:")
        ind += "    "
    out += [ind + ln for ln in pre[loop_dims - 1]]
    for ln in body:
        out.append(ind + ln.replace("{ind}", ind))
    if not body:
        out.append(ind + "pass")
    out += [ind + ln for ln in post[loop_dims - 1]]
    for d in range(loop_dims - 1, -1, -1):
        ind = ind[:-4]
        out += [ind + ln for ln in post[d - 1]]
    windowed = {r.src for r in kernel.reads.values() if r.kind in (ReadKind.WINDOW, ReadKind.PAD)}
    shifted = {
        r.src
        for r in kernel.reads.values()
        if r.kind in (ReadKind.WINDOW, ReadKind.PAD) and r.window and tuple(r.window[0]) != (0, shape[0], 1)
    }
    passed = [(a, pattern) for a, pattern in arrays if a not in bound]
    padded = {k: a in shifted for k, (a, pattern) in enumerate(passed) if a in windowed and not any(pattern)}
    part = Part(
        dims,
        passed,
        scalars,
        [sc in late for sc in scalars],
        [st for st in kernel.stores if st not in scratch],
        list(kernel.reductions),
        guard,
        fresh,
        padded,
        bool(shifted),
        np.array([v for _, v in bounds.values()], np.int64) if bounds else None,
    )
    return params, out, part


def render(kernel, tape):
    """The source text of one fused kernel (see the module docstring)."""
    return program([kernel], tape)


# A value one loop stores and only later loops of the same function read is allocated by the
# function (Numba: tens of nanoseconds) instead of passed in (NumPy: a few hundred), up to this
# size; bigger ones come from the runtime's buffer pool, where they cost no page faults.
SCRATCH_MAX_BYTES = 1 << 15


def program(kernels, tape, late=frozenset(), outside=None):
    """One function running several kernels' loops in order (``late``: the slots its own loops
    make). One compile instead of one per kernel: Numba spends about 0.2 s on every function
    whatever its size. Kernel j's names carry the prefix ``k{j}_``. ``outside``: the slots read
    by anything but this function's loops (None: all); a small store no one outside reads is
    local scratch (see ``SCRATCH_MAX_BYTES``)."""
    scratch = set()
    if outside is not None:
        denied = set(outside)
        for kern in kernels:
            for r in kern.reads.values():  # a local array is read at the loop's index or through a window
                if r.kind == ReadKind.SCALAR or (
                    r.kind == ReadKind.ARRAY and (any(r.pattern) or tape.shapes[r.src] != kern.shape)
                ):
                    denied.add(r.src)
            for st in kern.stores:
                if (
                    st in scratch
                    or math.prod(kern.shape) * from_short(tape.dtypes[st]).itemsize > SCRATCH_MAX_BYTES
                    or (kern.shape or (1,)) != (tape.shapes[st] or (1,))
                ):
                    denied.add(st)  # stored twice (recomputed by a later loop), big, or reshaped
                scratch.add(st)
        scratch -= denied
    params, lines, parts, bound = [], [], [], {}
    for j, kern in enumerate(kernels):
        p = f"k{j}_" if len(kernels) > 1 else ""
        ps, ls, part = _loops(kern, tape, p, late, scratch, bound)
        for k, st in enumerate(kern.stores):
            if st in scratch:
                bound[st] = f"{p}o{k}"
        params += ps
        if len(kernels) > 1:
            lines.append(f"# loop {j}")
        lines += ls
        parts.append(part)
    body = ["    " + ln for text in lines for ln in text.split("\n")]
    if any(_VMATH_CALL.search(ln) for ln in body):
        body.insert(0, "    _wide_vectors()  # vmath inside: 512-bit vectors where the CPU has them")
    out = [f"def kernel({', '.join(params)}):"] + body
    text = "import math\n\nimport numpy as np\n\n\n" + "\n".join(out) + "\n"
    return Source(text, parts)
