"""Unrolling: a tape's scans written out step by step, for the bytecode tier.

Contract: ``unroll(tape)`` returns a tape with the same inputs and outputs that computes the same
values with no ``scan`` instruction: each scan (``ir.prims.control``) becomes its body repeated
once per step, the slices of its sequences taken where a step reads them and its packed result
concatenated from the steps' values. ``unrolled_size(tape)`` counts the instructions that takes
without building it.

Why: a step of a recurrence on a few dozen elements costs a few microseconds as a program of its
own (a driver call), and tens of nanoseconds an instruction in the bytecode loop. A scan keeps
recording, differentiating and caching one step whatever the length; written out after that,
its steps run in one compiled loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

from .. import pace
from ..ir.prims.control import body_of, layout
from ..ir.tape import Builder, Params, Tape, Var

__all__ = ["unroll", "unrolled_size"]


def unrolled_size(tape: Tape) -> int:
    """How many instructions ``unroll(tape)`` writes, about (nested scans included)."""
    total = 0
    stack = [(tape, 1)]
    while stack:
        t, times = stack.pop()
        for ins in t.instrs:
            if ins.prim == "scan":
                n = ins.params["length"]
                total += times * (n * (len(ins.args) + 2) + 2)  # slices, packing
                stack.append((body_of(ins.params["body"]), times * n))
            else:
                total += times
    return total


def unroll(tape: Tape) -> Tape:
    """``tape`` with every scan written out (see the module docstring)."""
    b = Builder()
    env: dict[int, Any] = {}
    for s, k in zip(tape.inputs, tape.kinds):
        env[s] = b.input(tape.shapes[s], tape.dtypes[s], k)
    _emit_all(b, tape, env)
    return b.finish([_value(env[s]) for s in tape.outputs])


class _Steps:
    """A part of a scan's result, not yet an array: its steps' values (each ``shape``), stacked
    as ``stacked`` when something needs the array. A later scan that walks it reads each step's
    value itself, so the reverse scan of a gradient recomputes nothing the forward scan computed
    (its steps are equal instructions, which the builder writes once)."""

    __slots__ = ("steps", "shape", "stacked", "made")

    def __init__(self, steps: list, shape: tuple[int, ...], stacked: tuple[int, ...]) -> None:
        self.steps, self.shape, self.stacked, self.made = steps, shape, stacked, None


class _Packed:
    """A scan's packed result, not yet an array: its parts (final carries as values, stacked
    outputs as ``_Steps``) by their (offset, size) in the packed layout."""

    __slots__ = ("parts", "size", "dtype", "bld", "made")

    def __init__(self, parts: dict, size: int, dtype: str, bld: Builder) -> None:
        self.parts, self.size, self.dtype, self.bld, self.made = parts, size, dtype, bld, None


def _value(v: Any) -> Var:
    """``v`` as an array of the tape (a part or a packed result concatenated once)."""
    if isinstance(v, Var):
        return v
    if v.made is None:
        if isinstance(v, _Steps):
            rows = [s.reshape(shape=(1, *s.shape)) for s in v.steps]
            v.made = (rows[0].cat(*rows[1:], axis=0) if len(rows) > 1 else rows[0]).reshape(shape=v.stacked)
        else:
            pieces = [_value(p).reshape(shape=(n,)) for (_, n), p in sorted(v.parts.items()) if n]
            if not pieces:
                v.made = v.bld.full(0, (v.size,), v.dtype)
            else:
                v.made = pieces[0].cat(*pieces[1:], axis=0) if len(pieces) > 1 else pieces[0]
    return cast(Var, v.made)


def _emit_all(b: Builder, tape: Tape, env: dict[int, Any]) -> None:
    for ins in tape.instrs:
        pace.tick()  # ode's 7,500 instructions: 60 ms of Python on the compile worker
        args = [env[a] for a in ins.args]
        if ins.prim == "scan":
            env[ins.out] = _scan(b, args, ins.params)
            continue
        if args and not isinstance(args[0], Var):
            seen = _see_through(ins, args[0])
            if seen is not None:
                env[ins.out] = seen
                continue
        env[ins.out] = b.emit(ins.prim, [_value(a) for a in args], ins.params)


def _see_through(ins: Any, v: Any) -> Any:
    """A slice of a packed result that is one of its parts, or a reshape of a part to its
    stacked shape (what ``control.parts`` writes): the part, still unstacked; else None."""
    p = ins.params
    if ins.prim == "slice" and isinstance(v, _Packed) and len(p["starts"]) == 1 and p["steps"] == (1,):
        part = v.parts.get((p["starts"][0], p["stops"][0] - p["starts"][0]))
        if isinstance(part, _Steps):
            return _Steps(part.steps, part.shape, (math.prod(part.stacked),))
        return None if part is None else part.reshape(shape=(math.prod(part.shape),))
    if ins.prim == "reshape" and isinstance(v, _Steps) and len(p["shape"]) == 1 + len(v.shape):
        if tuple(p["shape"]) == (len(v.steps), *v.shape):
            return _Steps(v.steps, v.shape, tuple(p["shape"]))
    return None


def _scan(b: Builder, args: Sequence[Any], params: Params) -> _Packed:
    """A scan's result, its steps written out into ``b``."""
    body = body_of(params["body"])
    length, carries, xs = params["length"], params["carries"], params["xs"]
    carry = [_value(a) for a in args[:carries]]
    seq, inv = args[carries : carries + xs], [_value(a) for a in args[carries + xs :]]
    n_ys = len(body.outputs) - carries
    ys: list[list] = [[None] * length for _ in range(n_ys)]
    history: list[list] = [[None] * length for _ in range(carries if params["history"] else 0)]
    for t in range(length - 1, -1, -1) if params["reverse"] else range(length):
        x = [_step(b, s, t) for s in seq]
        for h, c in zip(history, carry):
            h[t] = c
        env = dict(zip(body.inputs, carry + x + inv))
        _emit_all(b, body, env)
        outs = [_value(env[s]) for s in body.outputs]
        carry = outs[:carries]
        for y, v in zip(ys, outs[carries:]):
            y[t] = v
    lay = layout(body, length, carries, params["history"])
    parts: dict = {}
    for (o, shape), c in zip(lay.finals, carry):
        parts[(o, math.prod(shape))] = c
    for (o, shape), steps in zip(lay.ys + lay.history, ys + history):
        parts[(o, math.prod(shape))] = _Steps(steps, tuple(shape[1:]), tuple(shape))
    return _Packed(parts, lay.size, lay.dtype, b)


def _step(b: Builder, s: Any, t: int) -> Var:
    """Step ``t``'s slice of a scanned sequence (a part's own value when it is one)."""
    if isinstance(s, _Steps) and s.stacked == (len(s.steps), *s.shape):
        return s.steps[t]
    s = _value(s)
    rest = s.shape[1:]
    one = s.slice(starts=(t,) + (0,) * len(rest), stops=(t + 1, *rest), steps=(1,) * (1 + len(rest)))
    return one.reshape(shape=rest)
