"""The bytecode loop: the source text of the one compiled function that runs encoded rows.

Contract: ``source(ops, dt)`` returns the text of ``kernel(code, vals, f)``, a loop over the rows
of ``code`` that runs each row's operation (one of ``ops``, sorted names as ``bytecode.encode``
writes them) on the arena ``f`` of dtype ``dt``. An operation's name says everything its branch
needs (an element-wise primitive with its parameters and operand dtypes, a chain's expression),
so the text depends on the set of operations only, never on a tape's length. Element-wise
branches render the primitive table's forward expressions against ``LoopMath``. Its
``_short_loops()`` asks ngrad's compiler (``targets.emit``) to vectorise each row's loop without
interleaving it: LLVM's default copies every loop body four times over, which GradBench's ode
(rows of 100 elements) ran 3% faster at the price of 40% more LLVM time (119 against 72 ms
for its loop of 15 operations), and lstm (rows of 14-24) no faster at all.
"""

import functools
import re

from ..ir.prims import PRIMS
from .source_math import Expr, SourceMath, typed

__all__ = ["source", "LoopMath"]


class LoopMath(SourceMath):
    """The fused kernels' math, except sin and cos: libm's, exact for every argument (the kernels'
    vectorised versions need a range guard that a single loop over all instructions cannot use)."""

    @staticmethod
    def sin(x):
        return Expr(f"np.float32(math.sin({x.text}))" if x.dtype == "f32" else f"math.sin({x.text})", x.dtype)

    @staticmethod
    def cos(x):
        return Expr(f"np.float32(math.cos({x.text}))" if x.dtype == "f32" else f"math.cos({x.text})", x.dtype)


# The arena is indexed with unsigned integers (``_at``). A signed index makes Numba check for a
# negative one on every element, which keeps LLVM from vectorising (measured 6x slower on rows of
# 100 products); views of the arena (``f[o:o + n]``) cost reference counting on every row, which
# Numba fails to prune from a loop of many branches (lstm c=256's loop: 1.12 ms with views, 0.44
# ms without), and lowering them was a third of the loop's compile time.
_ND = [
    "s0, s1, s2, s3 = code[k, 6], code[k, 7], code[k, 8], code[k, 9]",
    "t0, t1, t2, t3 = code[k, 10], code[k, 11], code[k, 12], code[k, 13]",
    "d0, d1, d2, d3 = code[k, 14], code[k, 15], code[k, 16], code[k, 17]",
    "for i0 in range(s0):",
    "    for i1 in range(s1):",
    "        for i2 in range(s2):",
    "            p = a + i0 * t0 + i1 * t1 + i2 * t2",
    "            q = o + i0 * d0 + i1 * d1 + i2 * d2",
    "            for i3 in range(s3):",
]


def _at(base, index="i"):
    """The arena's element at ``base + index``."""
    return f"f[np.uint64({base} + {index})]"


_SRC, _DST = _at("p", "i3 * t3"), _at("q", "i3 * d3")
# the first line of a flat loop over a row's windows: its iterations are independent, since a
# row's result window is placed before its operands' are freed (``bytecode._result_window``):
# apart from each other, or the very same window. ngrad's compiler then vectorises the loop
# without LLVM's runtime overlap checks (ode's loop: a fifth less LLVM time). The strided
# loops (``_ND``: a reduction's inner loop adds into one element) and matmul's are not marked.
_FREE = "    _independent()"
_COMBINE = {
    "sum": [f"{_DST} += {_SRC}"],
    "prod": [f"{_DST} *= {_SRC}"],
    "amax": [f"v = {_SRC}", f"if v > {_DST} or v != v:", f"    {_DST} = v"],
    "amin": [f"v = {_SRC}", f"if v < {_DST} or v != v:", f"    {_DST} = v"],
}
_FILL = ["v = vals[k]", "for i in range(n):", _FREE, f"    {_at('o')} = v"]
_OPERAND = re.compile(r"\b([xyz])\[i\]")


def _branch(op, dt):
    """The lines running one operation (indented under its ``if op == ...``)."""
    zero = typed(0, dt)
    if op == "copy":
        return ["for i in range(n):", _FREE, f"    {_at('o')} = {_at('a')}"]
    if op == "accumulate":  # rows: x at a (maybe the result's own window) plus a window of c
        # elements at b, added from code[k, 6] on
        return [
            "if o != a:",
            "    for i in range(n):",
            "    " + _FREE,
            f"        {_at('o')} = {_at('a')}",
            "w = o + code[k, 6]",
            "for i in range(c):",
            _FREE,
            f"    {_at('w')} += {_at('b')}",
        ]
    if op == "pad":  # rows: zeros around the window that starts at b and is c long
        return [
            "for i in range(b):",
            _FREE,
            f"    {_at('o')} = {zero}",
            "for i in range(b + c, n):",
            _FREE,
            f"    {_at('o')} = {zero}",
        ]
    if op == "place":  # rows: the window starts at b and is c long
        return [
            "for i in range(b):",
            _FREE,
            f"    {_at('o')} = {zero}",
            "w = o + b",
            "for i in range(c):",
            _FREE,
            f"    {_at('w')} = {_at('a')}",
            "for i in range(b + c, n):",
            _FREE,
            f"    {_at('o')} = {zero}",
        ]
    if op == "spread":
        return ["v = f[a]", "for i in range(n):", _FREE, f"    {_at('o')} = v"]
    if op in ("const", "fill"):
        return _FILL
    if op == "move":
        return _ND + [f"                {_DST} = {_SRC}"]
    if op in _COMBINE:
        return _FILL + _ND + ["                " + line for line in _COMBINE[op]]
    if op == "matmul":  # rows: batch s0, m s1, k s2, n s3; contiguous operands, o apart from both
        # row by row of the result, adding row q of b times a[i, q]: every inner loop walks
        # contiguous memory (a column of b, walked per element, made an LSTM's products 6-10x
        # slower than NumPy's); each element still adds its products in the order of q
        return [
            "s0, s1, s2, s3 = code[k, 6], code[k, 7], code[k, 8], code[k, 9]",
            "for p in range(s0):",
            "    for i in range(s1):",
            "        ro = (p * s1 + i) * s3",
            "        for j in range(s3):",
            f"            {_at('o', 'ro + j')} = {zero}",
            "        for q in range(s2):",
            f"            v = {_at('a', '(p * s1 + i) * s2 + q')}",
            "            rb = (p * s2 + q) * s3",
            "            for j in range(s3):",
            f"                {_at('o', 'ro + j')} += v * {_at('b', 'rb + j')}",
        ]
    if op == "cumsum":  # rows: shape (1, outer s0, along s1, inner s2)
        return [
            "s0, s1, s2 = code[k, 7], code[k, 8], code[k, 9]",
            "for p in range(s0):",
            "    for j in range(s2):",
            f"        acc = {zero}",
            "        for q in range(s1):",
            "            at = (p * s1 + q) * s2 + j",
            f"            acc += {_at('a', 'at')}",
            f"            {_at('o', 'at')} = acc",
        ]
    if op.startswith(("=", "+=")):  # a chain of element-wise primitives (see _chain_op), or one
        # added into the result's window
        assign = "+=" if op.startswith("+=") else "="
        head, _, text = op[len(assign) :].partition(" ")
        return _elementwise(head.split(","), assign, text)
    # an element-wise primitive (see _element_op for its name)
    head, _, out = op.partition("->")
    name, _, rest = head.partition("(")
    dtypes = rest[:-1].split(",") if rest[:-1] else []
    prim, _, params = name.partition("[")
    kw = eval(f"dict({params[:-1]})") if params else {}  # noqa: S307 - text _element_op wrote
    args = []
    for v, d in zip("xyz", dtypes):
        ref = v if d.endswith("*") else f"{v}[i]"
        d = d.rstrip("*")
        args.append(Expr(f"({ref} != 0)" if d == "b8" else ref, d))
    e = PRIMS[prim].fwd(LoopMath, *args, **kw)
    return _elementwise(dtypes, "=", f"(1 if {e.text} else 0)" if out == "b8" else e.text)


def _elementwise(dtypes, assign, text):
    """The lines of an element-wise row: ``text`` reads operand x, y, z as ``x[i]`` (from the
    windows at a, b, c) or, for a dtype marked "*", as ``x`` (the one element there)."""
    lines = [f"{v} = f[{w}]" for v, w, d in zip("xyz", "abc", dtypes) if d.endswith("*")]
    text = _OPERAND.sub(lambda m: _at("abc"["xyz".index(m.group(1))]), text)
    return lines + ["for i in range(n):", _FREE, f"    {_at('o')} {assign} {text}"]


@functools.lru_cache(maxsize=64)
def source(ops, dt):
    """The loop running rows of the operations ``ops`` (sorted names) on an arena of dtype ``dt``."""
    lines = [
        f'"""ngrad bytecode loop over a {dt} arena: {len(ops)} operations."""',
        "import math",
        "",
        "import numpy as np",
        "",
        "",
        "def kernel(code, vals, f):",
        "    _short_loops()  # rows are a few dozen elements: vectors, but no interleaved copies of them",
        "    for k in range(code.shape[0]):",
        "        op, n, o, a, b, c = code[k, 0], code[k, 1], code[k, 2], code[k, 3], code[k, 4], code[k, 5]",
    ]
    for j, op in enumerate(ops):
        lines.append(f"        {'if' if j == 0 else 'elif'} op == {j}:  # {op}")
        lines += ["            " + line for line in _branch(op, dt)]
    return "\n".join(lines) + "\n"
