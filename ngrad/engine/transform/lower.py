"""Lowering: the rows that carry a decomposition (``Prim.lower``) written out in simpler rows,
for the compiled targets.

Contract: ``lower(tape)`` returns ``tape`` itself when none of its instructions has a ``lower``
rule; else a new tape that computes the same values with no such instruction. Its input slots,
and every slot of ``tape`` not written by such an instruction, keep their numbers, shapes and
dtypes; each decomposition writes new slots after ``tape``'s, and the instructions and outputs
that read a lowered row's result read the decomposition's last slot instead (the row's own
slot is left undefined). So a caller that knows ``tape``'s inputs by position, or its input
slots by number, runs the lowered tape the same way, and gets its outputs in the same order.

Equal instructions are then computed once (``detach``, an identity once differentiation is
over, dropped): a row's derivative may recompute steps of its decomposition, whose values a
compiled program then keeps for the reverse pass.

Where: right before the CPU and CUDA fusion (``runtime.plan``, ``runtime.cuda``) and the
bytecode encoder see a tape, after differentiation (a row's derivative is its own, PyTorch's
formula, which the decomposition's derivative would not be). The interpreter and the NumPy
driver run the rows themselves: a row's NumPy forward takes the decomposition's steps.
"""

from __future__ import annotations

from ..ir.prims import PRIMS
from ..ir.tape import Builder, Instr, Key, Tape, params_key

__all__ = ["lower", "LOWERED"]

LOWERED = frozenset(name for name, prim in PRIMS.items() if prim.lower is not None)


def lower(tape: Tape) -> Tape:
    """``tape`` with every row that has a ``lower`` rule written in simpler rows (see above).

    >>> from ngrad.engine.ir.tape import Builder
    >>> b = Builder()
    >>> x = b.input((2, 3), "f64")
    >>> y = x.logsumexp(axes=(1,), keepdim=False)
    >>> sorted({ins.prim for ins in lower(b.finish([y])).instrs})
    ['abs', 'add', 'amax', 'const', 'eq', 'exp', 'expand', 'log', 'reshape', 'sub', 'sum', 'where']
    """
    if not any(ins.prim in LOWERED for ins in tape.instrs):
        return tape
    b = Builder()
    out = b.tape
    out.shapes, out.dtypes = list(tape.shapes), list(tape.dtypes)
    out.inputs, out.kinds = list(tape.inputs), list(tape.kinds)
    renamed: dict[int, int] = {}  # a lowered row's slot -> its decomposition's result
    for ins in tape.instrs:
        if renamed and any(a in renamed for a in ins.args):
            ins = Instr(ins.out, ins.prim, [renamed.get(a, a) for a in ins.args], ins.params)
        rule = PRIMS[ins.prim].lower
        if rule is None:
            out.instrs.append(ins)
            continue
        r = rule([b.var(a) for a in ins.args], ins.params)
        assert (r.shape, r.dtype) == (tape.shapes[ins.out], tape.dtypes[ins.out]), f"{ins.prim}: lowered {r}"
        renamed[ins.out] = r.slot
    out.outputs = [renamed.get(s, s) for s in tape.outputs]
    return _merged(out)


def _merged(tape: Tape) -> Tape:
    """``tape`` with equal instructions computed once and ``detach`` dropped (an identity once
    differentiation is over). Why: a row's derivative recomputes steps of its decomposition
    (``logsumexp``'s ``exp(x - max)``, its shift held constant by a ``detach``); merged, a
    compiled program keeps the forward's values for the reverse pass instead of computing them
    again. Output slots stay where they are, each its own instruction (callers own each
    output's array)."""
    outputs = set(tape.outputs)
    seen: dict[Key, int] = {}
    renamed: dict[int, int] = {}
    kept = []
    for ins in tape.instrs:
        if renamed and any(a in renamed for a in ins.args):
            ins = Instr(ins.out, ins.prim, [renamed.get(a, a) for a in ins.args], ins.params)
        if ins.out not in outputs:
            if ins.prim == "detach":
                renamed[ins.out] = ins.args[0]
                continue
            hit = seen.setdefault((ins.prim, ins.args, params_key(ins.params)), ins.out)
            if hit != ins.out:
                renamed[ins.out] = hit
                continue
        kept.append(ins)
    tape.instrs = kept
    return tape
