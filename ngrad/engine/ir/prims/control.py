"""Rows of the primitive table: control flow. One row, ``scan``: a loop whose body is a tape,
compiled once whatever the number of steps (an RNN over a sequence, an ODE solver's steps).

Contract: ``scan(*carries, *xs, *invariants; body, length, reverse, carries, xs, history)`` runs ``body``
(the canonical text of a tape, ``Tape.format()``: params stay plain strings, so keys, printing,
parsing and the cache treat them as any other) ``length`` times. The body's inputs are the
carries, one step's slice of each of ``xs`` (stacked along axis 0, ``length`` long) and the
invariants; its outputs are the next carries (their shapes and dtypes) and the step's ys. With
``reverse`` the steps run from the last slice to the first, and step ``t``'s ys still go to
position ``t``. The carries and ys share one dtype, the result's: a flat array packing the final
carries, then each y stacked over steps, then (with ``history``) the *history*, each carry as
it entered each step (``Layout``). The history is what the VJP reads: PyTorch's scan saves the
same carries; a scan recorded with no gradient to take keeps none, and its VJP (a double
backward's, say) runs the steps again to get it.

The VJP is a scan the other way over the body's joint tape (carrying the carries' cotangents
and the invariants' summed gradients, reading the history), so it is differentiable in turn;
the JVP is a scan over the body's tangent tape. Differentiating a body is
``engine.transform.differentiate``'s work, a later layer than this one: it hands its ``vjp`` and
``jvp`` to ``DIFFERENTIATE`` when it is imported, which is before any rule of a row runs.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..dtypes import DIFFERENTIABLE
from .table import Cotangents, P, Params, Shapes, Tangents, TapeError, Typed

if TYPE_CHECKING:
    from ..tape import Tape, Var

__all__ = ["DIFFERENTIATE", "STEPS", "Layout", "body_of", "layout", "parts", "roles", "text_of"]

# ``vjp`` and ``jvp`` of a whole tape, from ``engine.transform.differentiate`` (see the docstring)
DIFFERENTIATE: dict[str, Callable[..., Any]] = {}

# How the interpreter runs a scan's steps: ``STEPS["run"](text, body)`` is a function of each
# step's values, returning the body's outputs. The runtime, a later layer, puts its own there
# when it is imported (the steps of a long scan move from the interpreter to the body's NumPy
# driver, which computes the same values); without it the interpreter runs them.
STEPS: dict[str, Callable[..., Any]] = {}


_BODIES: dict[str, Tape] = {}  # body text -> its tape (bounded: cleared past _BODIES_KEPT)
_BODIES_KEPT = 256


def body_of(text: str) -> Tape:
    """The body tape of a scan's ``body`` param (parsed once per text: each step and each call
    of a compiled program reads the same ``Tape`` object)."""
    tape = _BODIES.get(text)
    if tape is None:
        from ..tape import parse

        tape = _remember(text, parse(text))
    return tape


def text_of(tape: Tape) -> str:
    """The canonical text of a body built here (``Tape.format()``). A tape whose slots are
    already numbered as its text numbers them (its inputs first, then its instructions) is what
    parsing the text would give: ``body_of`` hands it out without parsing."""
    text = tape.format()
    n = len(tape.inputs)
    if tape.inputs == list(range(n)) and all(ins.out == n + k for k, ins in enumerate(tape.instrs)):
        _remember(text, tape)
    return text


def _remember(text: str, tape: Tape) -> Tape:
    if len(_BODIES) >= _BODIES_KEPT:
        _BODIES.clear()
    return _BODIES.setdefault(text, tape)


class Layout(NamedTuple):
    """Where each part of a scan's packed result lies: (offset, shape) of every final carry,
    every stacked y (``(length, *y)``) and every carry's history (``(length, *carry)``)."""

    finals: list[tuple[int, tuple[int, ...]]]
    ys: list[tuple[int, tuple[int, ...]]]
    history: list[tuple[int, tuple[int, ...]]]
    size: int
    dtype: str


def layout(body: Tape, length: int, carries: int, history: bool = True) -> Layout:
    """The ``Layout`` of a scan of ``body`` over ``length`` steps with ``carries`` carries."""
    at = 0
    parts: list[list[tuple[int, tuple[int, ...]]]] = [[], [], []]
    outs = body.outputs
    shapes = [body.shapes[s] for s in outs[:carries]], [body.shapes[s] for s in outs[carries:]]
    kept = [(length, *s) for s in shapes[0]] if history else []
    for k, group in enumerate((shapes[0], [(length, *s) for s in shapes[1]], kept)):
        for shape in group:
            parts[k].append((at, shape))
            at += math.prod(shape)
    dtype = body.dtypes[outs[0]] if outs else "f64"
    return Layout(parts[0], parts[1], parts[2], at, dtype)


def parts(packed: Var, lay: Layout) -> tuple[list[Var], list[Var], list[Var]]:
    """The final carries, stacked ys and histories of a packed scan result, as tape values."""

    def take(offset: int, shape: tuple[int, ...]) -> Var:
        flat = packed.slice(starts=(offset,), stops=(offset + math.prod(shape),), steps=(1,))
        return flat.reshape(shape=shape)

    return tuple([take(o, s) for o, s in group] for group in (lay.finals, lay.ys, lay.history))  # type: ignore[return-value]


def roles(n_args: int, carries: int, xs: int) -> tuple[range, range, range]:
    return range(carries), range(carries, carries + xs), range(carries + xs, n_args)


def _infer(
    shapes: Shapes, dtypes: Sequence[str], body: str, length: int, reverse: bool, carries: int, xs: int, history: bool
) -> Typed:
    tape = body_of(body)
    if len(shapes) != len(tape.inputs) or not 0 <= carries <= len(tape.outputs) or xs < 0 or length < 0:
        raise TapeError(f"scan: {len(shapes)} operands for a body of {len(tape.inputs)} inputs")
    for i, s in enumerate(tape.inputs):
        want = (length, *tape.shapes[s]) if carries <= i < carries + xs else tape.shapes[s]
        if tuple(shapes[i]) != want or dtypes[i] != tape.dtypes[s]:
            got, need = f"{dtypes[i]}{list(shapes[i])}", f"{tape.dtypes[s]}{list(want)}"
            raise TapeError(f"scan: operand {i} is {got}, the body reads {need}")
    outs = tape.outputs
    for k in range(carries):
        i, o = tape.inputs[k], outs[k]
        if (tape.shapes[i], tape.dtypes[i]) != (tape.shapes[o], tape.dtypes[o]):
            got, left = f"{tape.dtypes[i]}{list(tape.shapes[i])}", f"{tape.dtypes[o]}{list(tape.shapes[o])}"
            raise TapeError(f"scan: carry {k} enters as {got}, leaves as {left}")
    if len({tape.dtypes[o] for o in outs}) > 1:
        raise TapeError("scan: the carries and ys of a body share one dtype")
    lay = layout(tape, length, carries, history)
    return (lay.size,), lay.dtype


class Numpy:
    """The NumPy forward of ``scan`` (part of the interpreter's math namespace): the body run by
    the interpreter, step by step."""

    @staticmethod
    def scan(
        *args: np.ndarray, body: str, length: int, reverse: bool, carries: int, xs: int, history: bool
    ) -> np.ndarray:
        from ..interpret import interpret

        tape = body_of(body)
        steps = STEPS.get("run")
        call = steps(body, tape) if steps is not None else lambda values: interpret(tape, values)
        return run_scan(lambda t, values: call(values), tape, args, length, reverse, carries, xs, history=history)


def run_scan(run, body: Tape, args, length: int, reverse: bool, carries: int, xs: int, history=True, out=None):
    """A scan's packed result, the body run by ``run(body, values)`` (the interpreter, or the
    runtime's compiled program) on host arrays. Each step's ys and the carries entering it are
    copied into the result as they are made, while they are in cache (kept until the end and
    stacked, 100 steps of GradBench's ode at n = 100,000 held 80 MB of step results freshly
    mapped, page faults and all, and copied them again: 13 ms of its 82 ms gradient). ``out``: an
    array of the result's size and dtype to write it into (every element is written), else a new one."""
    from ..interpret import np_dtype

    # every step's values C-contiguous: ``run`` may be the body's compiled driver without input
    # checks, whose kernels have machine code for the layouts its warm-up met; a carry returned as
    # a strided view (GradBench's ode from its second step on) made a call compile one for 4 s
    carry, seq, inv = ([_dense(v) for v in args[r.start : r.stop]] for r in roles(len(args), carries, xs))
    order = range(length - 1, -1, -1) if reverse else range(length)
    # each step's slices, made up front (an index of a 1-d array is a number, not a 0-d array)
    slices = [[s[t, ...] for t in order] if s.ndim == 1 else list(s[::-1] if reverse else s) for s in seq]
    lay = layout(body, length, carries, history)
    if out is None:
        out = np.empty(lay.size, dtype=np_dtype(lay.dtype))
    kept, ys = ([out[o : o + math.prod(s)].reshape(s) for o, s in part] for part in (lay.history, lay.ys))
    for step in range(length):
        at = order[step]
        for h, c in zip(kept, carry):
            h[at] = c
        got = run(body, carry + [s[step] for s in slices] + inv)
        carry = [_dense(v) for v in got[:carries]]
        for y, v in zip(ys, got[carries:]):
            y[at] = v
    for (o, s), c in zip(lay.finals, carry):
        out[o : o + math.prod(s)] = c.reshape(-1)
    return out


def _dense(v):
    """``v``, or a C-contiguous copy of an array that is not."""
    return v if not isinstance(v, np.ndarray) or v.flags.c_contiguous else np.ascontiguousarray(v)


@functools.lru_cache(maxsize=128)
def reverse_body(
    text: str, carries: int, xs: int, flows: tuple[bool, ...] | None = None, need: tuple[bool, ...] | None = None
) -> tuple[str, tuple[bool, ...], tuple[bool, ...]]:
    """The body of a scan's VJP, with which invariants it sums gradients for and which xs it
    returns cotangents of. Its carries: each carry's cotangent, then one gradient sum per
    differentiable invariant; its xs: the history (the carries entering each step), the xs, the
    cotangents of the ys and of the history that reach the scan (``flows``: one flag per y, then
    per carry's history; None: all); its invariants: the forward's. Its ys: the cotangent of each
    differentiable x at that step. ``need``: which of the scan's operands want a cotangent (the
    VJP rule's flags; None: all)."""
    from ..tape import Builder

    body = body_of(text)
    ins = body.inputs
    c_in, x_in, w_in = (ins[r.start : r.stop] for r in roles(len(ins), carries, xs))
    dt = body.dtypes
    # a runtime scalar (a Python number of the step) takes no gradient
    w_kinds = body.kinds[carries + xs :]
    need = need if need is not None else (True,) * len(ins)
    w_need = need[carries + xs :]
    sums = tuple(dt[s] in DIFFERENTIABLE and k != "scalar" and n for s, k, n in zip(w_in, w_kinds, w_need))
    grads_x = tuple(dt[s] in DIFFERENTIABLE and n for s, n in zip(x_in, need[carries : carries + xs]))
    # only what takes a gradient: a runtime scalar's would be summed in every step for nothing
    wrt = list(c_in) + [s for s, d in zip(x_in, grads_x) if d] + [s for s, d in zip(w_in, sums) if d]
    joint = DIFFERENTIATE["vjp"](body, wrt)
    position = {s: k for k, s in enumerate(wrt)}
    b = Builder()
    kinds = dict(zip(ins, body.kinds))

    def new(s: int) -> Var:
        return b.input(body.shapes[s], dt[s], kinds.get(s, "tensor"))

    ct_c = [new(s) for s in c_in]
    acc = [new(s) for s, d in zip(w_in, sums) if d]
    hist, x = [new(s) for s in c_in], [new(s) for s in x_in]
    n_ys = len(body.outputs) - carries
    flows = flows if flows is not None else (True,) * (n_ys + carries)
    ct_y: list = [new(s) if f else None for s, f in zip(body.outputs[carries:], flows)]
    ct_h = [new(s) if f else None for s, f in zip(c_in, flows[n_ys:])]
    w = [new(s) for s in w_in]
    # every input made before any instruction: the tape is in its text's order (``text_of``)
    ct_y = [b.full(0, body.shapes[s], dt[s]) if v is None else v for v, s in zip(ct_y, body.outputs[carries:])]
    env = dict(zip(ins, hist + x + w))
    env.update(zip(joint.seeds, ct_c + ct_y))
    for instr in joint.tape.instrs:  # the step recomputed from its carries, then its reverse
        env[instr.out] = b.emit(instr.prim, [env[a] for a in instr.args], instr.params)

    def grad(k: int) -> Var | None:
        at = joint.grads[position[ins[k]]] if ins[k] in position else None
        return None if at is None else env[joint.tape.outputs[at]]

    new_ct = []
    for k in range(carries):
        g, h = grad(k), ct_h[k]
        if g is None:
            g = b.full(0, body.shapes[c_in[k]], dt[c_in[k]])
        new_ct.append(g if h is None else g + h)
    new_acc, j = [], 0
    for k in range(len(w_in)):
        if sums[k]:
            g = grad(carries + xs + k)
            new_acc.append(acc[j] if g is None else acc[j] + g)
            j += 1
    ys = []
    for k, s in enumerate(x_in):
        if grads_x[k]:
            g = grad(carries + k)
            ys.append(b.full(0, body.shapes[s], dt[s]) if g is None else g)
    return text_of(b.finish(new_ct + new_acc + ys)), sums, grads_x


def _scan_vjp(need: Sequence[bool], g: Var, out: Var, args: Sequence[Var], params: Params) -> Cotangents:
    text, length, reverse, carries, xs = (params[k] for k in ("body", "length", "reverse", "carries", "xs"))
    body = body_of(text)
    lay = layout(body, length, carries, params["history"])
    g_final, g_ys, g_hist = _cotangent_parts(g, lay)
    if not params["history"]:  # recorded with no gradient to take: run the steps again for it
        out = g.bld.emit("scan", args, dict(params, history=True))
    _, _, hist = parts(out, layout(body, length, carries))
    g_hist = g_hist or [None] * carries
    c, x, w = (list(args[r.start : r.stop]) for r in roles(len(args), carries, xs))
    flows = tuple(v is not None for v in g_ys + g_hist)
    rtext, sums, grads_x = reverse_body(text, carries, xs, flows, tuple(need))
    zeros = [a.bld.full(0, a.shape, a.dtype) for a, d in zip(w, sums) if d]
    g_final = [a.bld.full(0, a.shape, a.dtype) if v is None else v for v, a in zip(g_final, c)]
    g_parts = [v for v in g_ys + g_hist if v is not None]
    rargs = g_final + zeros + hist + x + g_parts + w
    n_carry, n_xs = carries + len(zeros), carries + xs + len(g_parts)
    # the reverse scan keeps no history: a second backward runs its steps again
    rparams = {"body": rtext, "length": length, "reverse": not reverse, "carries": n_carry, "xs": n_xs}
    packed = g.bld.emit("scan", rargs, dict(rparams, history=False))
    finals, ct_xs, _ = parts(packed, layout(body_of(rtext), length, n_carry, False))
    sums_of = iter(finals[carries:])
    ct_x = iter(ct_xs)
    return (
        finals[:carries] + [next(ct_x) if d else None for d in grads_x] + [next(sums_of) if d else None for d in sums]
    )


def _cotangent_parts(g: Var, lay: Layout) -> tuple[list, list, list]:
    """``parts(g, lay)``, None for a part no cotangent reaches: read through the sum of
    ``unslice``s that the slices taking a scan's parts apart differentiate into, so that a part
    nobody reads costs no zeros of the packed size and no additions in every step."""
    windows: dict[tuple[int, int], Var] = {}
    instrs = g.bld.tape.instrs
    stack, whole = [g.slot], True
    while stack and whole:
        slot = stack.pop()
        at = bisect.bisect_left(instrs, slot, key=lambda i: i.out)  # slots grow along the tape
        ins = instrs[at] if at < len(instrs) and instrs[at].out == slot else None
        if ins is not None and ins.prim == "add":
            stack.extend(ins.args)
        elif ins is not None and ins.prim == "unslice" and ins.params["steps"] == (1,):
            span = (ins.params["starts"][0], ins.params["stops"][0] - ins.params["starts"][0])
            v = g.bld.var(ins.args[0])
            windows[span] = v + windows[span] if span in windows else v
        else:
            whole = False
    spans = {(o, math.prod(s)) for o, s in lay.finals + lay.ys + lay.history}
    if not whole or not set(windows) <= spans:
        return parts(g, lay)
    return tuple(  # type: ignore[return-value]
        [None if (o, math.prod(s)) not in windows else windows[(o, math.prod(s))].reshape(shape=s) for o, s in group]
        for group in (lay.finals, lay.ys, lay.history)
    )


@functools.lru_cache(maxsize=128)
def tangent_body(text: str, carries: int, xs: int) -> str:
    """The body of a scan's JVP: carries (the carries, their tangents), xs (the xs, their
    tangents), invariants (the invariants, their tangents); ys the ys, then their tangents."""
    from ..tape import Builder

    body = body_of(text)
    ins = body.inputs
    tangent = DIFFERENTIATE["jvp"](body, ins)
    b = Builder()
    groups = roles(len(ins), carries, xs)
    env = {}
    for r in groups:
        for k in r:
            env[ins[k]] = b.input(body.shapes[ins[k]], body.dtypes[ins[k]], body.kinds[k])
        for k in r:
            env[tangent.inputs[k]] = b.input(body.shapes[ins[k]], body.dtypes[ins[k]], body.kinds[k])
    for instr in tangent.tape.instrs:
        env[instr.out] = b.emit(instr.prim, [env[a] for a in instr.args], instr.params)
    outs = body.outputs

    def out_tangent(k: int) -> Var:
        at = tangent.tangents[k]
        s = outs[k]
        return b.full(0, body.shapes[s], body.dtypes[s]) if at is None else env[tangent.tape.outputs[at]]

    values = [env[s] for s in outs]
    tangents = [out_tangent(k) for k in range(len(outs))]
    return text_of(b.finish(values[:carries] + tangents[:carries] + values[carries:] + tangents[carries:]))


def _scan_jvp(ts: Tangents, out: Var, args: Sequence[Var], params: Params) -> Var:
    text, length, reverse, carries, xs = (params[k] for k in ("body", "length", "reverse", "carries", "xs"))
    body = body_of(text)
    tangents = [a.bld.full(0, a.shape, a.dtype) if t is None else t for t, a in zip(ts, args)]
    groups = roles(len(args), carries, xs)
    targs = [v for r in groups for v in [args[k] for k in r] + [tangents[k] for k in r]]
    n_ys = len(body.outputs) - carries
    ttext = tangent_body(text, carries, xs)
    tparams = {"body": ttext, "length": length, "reverse": reverse, "carries": 2 * carries, "xs": 2 * xs}
    packed = out.bld.emit("scan", targs, dict(tparams, history=params["history"]))
    tb = body_of(ttext)
    finals, ys, hist = parts(packed, layout(tb, length, 2 * carries, params["history"]))
    pieces = finals[carries:] + ys[n_ys:] + hist[carries:]
    flat = [p.reshape(shape=(math.prod(p.shape),)) for p in pieces]
    if not flat:
        return out.bld.full(0, out.shape, out.dtype)
    return flat[0].cat(*flat[1:], axis=0) if len(flat) > 1 else flat[0]


P("scan", "control", _infer, lambda m, *args, **params: m.scan(*args, **params), _scan_vjp, _scan_jvp)
