"""Differentiation: a tape becomes a joint (forward + reverse) tape, or a tangent tape.

Contract: ``vjp(tape, wrt)`` returns a ``Joint`` whose tape takes the original inputs plus
one cotangent seed per output, and returns the original outputs followed by the cotangent
of every ``wrt`` slot that the outputs depend on (``Joint.grads`` maps each ``wrt`` entry to
its output position, or None when unused). ``wrt`` may name input slots or intermediate
slots. Reverse instructions come from the primitive table's VJP rules, so the joint tape is an
ordinary tape: it can be printed, run, batched or differentiated again. Cotangents only flow
through floating slots, and fan-out contributions are summed in exactly one place
(``_accumulate``). Codegen and runtime never learn what a gradient is.

``joint(tape, wrt)`` is ``vjp`` memoized by the tape's structure: in memory, and for long tapes
in the cache's plans too, where a new process reads a joint back in a tenth of the time that
differentiating takes.

``split(tape, wrt)`` cuts that joint in two programs, as a compiled forward whose outputs are
differentiated later needs them: a ``Split`` whose ``forward`` tape also returns the values the
reverse pass reads (PyTorch's saved tensors), and whose ``backward`` tape maps those values and
the output cotangents to the gradients.

``jvp(tape, wrt)`` is forward mode: a ``Tangent`` tape that takes the original inputs plus one
tangent per ``wrt`` input slot and returns the original outputs followed by the tangent of each
output that depends on them (``Tangent.tangents`` gives each output's position, or None).

Imports: only ``engine.ir`` (the tape and the primitive table), ``engine.config`` (``NGRAD_JIT``)
and ``engine.store`` (stored joints); never a later stage (fusion, codegen, targets, runtime), so
differentiating neither fuses, compiles nor imports Numba.
"""

from __future__ import annotations

import marshal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..ir.dtypes import DIFFERENTIABLE
from ..ir.prims import PRIMS, Params, Shape, control
from ..ir.tape import Builder, Instr, Key, Tape, Var

__all__ = ["vjp", "joint", "Joint", "split", "Split", "jvp", "Tangent"]

# what the backward program of ``split`` recomputes rather than reads: elementwise work fused into
# its loops costs less than writing the value out in the forward and reading it back
_RECOMPUTED = frozenset(["unary", "binary", "compare", "logical", "where", "cast", "movement", "const"])
STORE_MIN_INSTRS = 256  # shorter tapes differentiate faster than a stored joint is read (~50 µs)
MEMO_MAX_INSTRS = 1 << 18  # longer joints are read back from the cache's plans, not kept in memory
_FORMAT = 1  # of ``Joint.dumps``
_LITERAL_PRIMS = frozenset(["const", "reshape", "expand", "cast"])  # a literal, or a literal moved or cast
T = TypeVar("T")


@dataclass(slots=True, eq=False)
class Joint:
    """The result of ``vjp``: the joint tape and what its extra inputs and outputs mean.

    ``seeds``: the cotangent input slot of each original output. ``grads``: for each ``wrt``
    entry, the index into ``tape.outputs`` of its cotangent, or None if it was not used.
    ``ran``: indices of the forward instructions whose VJP was emitted. ``reads_saved``: the
    subset whose VJP reads a forward value (PyTorch's "saved tensors"); ``saved``: each forward
    slot (inputs included, literals not) that the reverse pass reads -> the indices of the
    forward instructions whose VJP reads it. ``contributions``: (forward instruction, argument
    position, cotangent slot) for every cotangent a VJP rule produced, in the order they run.
    """

    tape: Tape
    seeds: list[int]
    grads: list[int | None]
    ran: list[int]
    reads_saved: set[int]
    saved: dict[int, list[int]]
    contributions: list[tuple[int, int, int]]

    def dumps(self, tape: Tape) -> bytes:
        """The bytes of this joint of ``tape``: what ``vjp`` added to it (``loads`` takes ``tape``
        back). ValueError when a parameter is something ``marshal`` does not take."""
        t, n, m = self.tape, len(tape.shapes), len(tape.instrs)
        return marshal.dumps(
            (
                _FORMAT,
                n,
                m,
                t.shapes[n:],
                t.dtypes[n:],
                [(i.out, i.prim, i.args, i.params) for i in t.instrs[m:]],
                t.outputs,
                self.seeds,
                self.grads,
                self.ran,
                self.reads_saved,
                self.saved,
                self.contributions,
            )
        )

    @staticmethod
    def loads(tape: Tape, data: bytes) -> Joint:
        """The joint of ``tape`` that ``dumps`` wrote to ``data``; ValueError unless it is one: a
        well-formed tape continuing ``tape`` (every slot defined once, before it is read)."""
        try:
            (fmt, n, m, shapes, dtypes, instrs, outputs, seeds, grads, ran, reads_saved, saved, contributions) = (
                marshal.loads(data)
            )
        except (EOFError, ValueError, TypeError) as e:
            raise ValueError(f"not a stored joint: {e}") from None
        if fmt != _FORMAT or n != len(tape.shapes) or m != len(tape.instrs):
            raise ValueError("the stored joint belongs to another tape")
        try:
            made = _continuation(n, shapes, dtypes, instrs, outputs, seeds, grads, len(tape.outputs))
        except (TypeError, ValueError) as e:  # a field of another type than dumps writes
            raise ValueError(f"the stored joint is malformed: {e}") from None
        if not (type(ran) is list and type(reads_saved) is set and type(saved) is dict and type(contributions) is list):
            raise ValueError("the stored joint is malformed: its bookkeeping has the wrong types")
        t = Tape()
        t.shapes, t.dtypes = tape.shapes + shapes, tape.dtypes + dtypes
        t.inputs, t.kinds = tape.inputs + seeds, tape.kinds + ["tensor"] * len(seeds)
        t.instrs, t.outputs = tape.instrs + made, outputs
        return Joint(t, seeds, grads, ran, reads_saved, saved, contributions)


def _continuation(
    n: int,
    shapes: list[Shape],
    dtypes: list[str],
    instrs: list[tuple[int, str, tuple[int, ...], Params]],
    outputs: list[int],
    seeds: list[int],
    grads: list[int | None],
    n_outputs: int,
) -> list[Instr]:
    """The instructions of a stored joint that continues a tape of ``n`` slots and ``n_outputs``
    outputs, checked: seeds are its first new slots, every instruction defines the next slot from
    earlier ones, outputs and gradient positions are in range (ValueError or TypeError if not)."""
    if not all(type(f) is list for f in (shapes, dtypes, instrs, outputs, seeds, grads)) or len(dtypes) != len(shapes):
        raise ValueError("a field is not a list of its length")
    if seeds != list(range(n, n + len(seeds))) or len(seeds) != n_outputs:
        raise ValueError("the seeds are not its first new slots")
    defined, made = n + len(seeds), []
    for out, prim, args, params in instrs:
        if (
            out != defined
            or prim not in PRIMS
            or type(params) is not dict
            or type(args) is not tuple
            or any(type(a) is not int or not 0 <= a < out for a in args)
        ):
            raise ValueError(f"instruction %{out} = {prim} is malformed")
        made.append(Instr(out, prim, args, params))
        defined += 1
    if (
        defined != n + len(shapes)
        or any(type(s) is not int or not 0 <= s < defined for s in outputs)
        or any(g is not None and (type(g) is not int or not 0 <= g < len(outputs)) for g in grads)
    ):
        raise ValueError("its slots are out of range")
    return made


def _accumulate(ct: dict[int, Var], slot: int, c: Var) -> None:
    prev = ct.get(slot)
    ct[slot] = c if prev is None else prev + c


def _appended(outputs: list[T], extra: Sequence[T | None]) -> list[int | None]:
    """Append the values of ``extra`` that are not None to ``outputs``; return where each went
    (its index in ``outputs``, or None)."""
    at: list[int | None] = []
    for v in extra:
        at.append(None if v is None else len(outputs))
        if v is not None:
            outputs.append(v)
    return at


def vjp(tape: Tape, wrt: Sequence[int]) -> Joint:
    """Append the reverse pass of ``tape`` with respect to the slots ``wrt``; see module doc."""
    floating = DIFFERENTIABLE
    dtypes = tape.dtypes
    active = {s for s in wrt if dtypes[s] in floating}
    # literals of the program are not "saved tensors"; runtime scalars are (PyTorch saves the
    # wrapped number of `x * 2`, so a second backward through it fails there too)
    literal = set()
    for ins in tape.instrs:  # a pass over every forward instruction: loops written out
        out, prim = ins.out, ins.prim
        if out in active:
            continue
        if dtypes[out] in floating and PRIMS[prim].vjp is not None:
            for a in ins.args:
                if a in active:
                    active.add(out)
                    break
        if prim in _LITERAL_PRIMS and (prim == "const" or ins.args[0] in literal):
            literal.add(out)

    n_forward = len(tape.shapes)
    b = Builder(tape)
    made, var = b.tape.instrs, b.var
    ct: dict[int, Var] = {}
    seeds = []
    for s in tape.outputs:
        seed = b.input(tape.shapes[s], dtypes[s])
        seeds.append(seed.slot)
        if s in active:
            _accumulate(ct, s, seed)

    ran: list[int] = []
    reads_saved: set[int] = set()
    saved: dict[int, list[int]] = {}
    contributions: list[tuple[int, int, int]] = []
    instrs = tape.instrs
    wanted = set(wrt)
    is_active = active.__contains__
    for i in range(len(instrs) - 1, -1, -1):
        ins = instrs[i]
        out = ins.out
        # every contribution to this slot's cotangent is in (later instructions made them): it is
        # dropped once used, so a long tape never holds them all
        g = ct.get(out) if out in wanted else ct.pop(out, None)
        if g is None:
            continue
        args = ins.args
        need = list(map(is_active, args))  # map, not a comprehension: no function made per instruction
        if True not in need:
            continue
        first = len(made)
        # a cotangent reaches only active slots, whose primitives have VJPs (``wrt`` aside)
        rule = PRIMS[ins.prim].vjp
        assert rule is not None
        cts = rule(need, g, var(out), list(map(var, args)), ins.params)
        ran.append(i)
        # any forward value the rule reads is a "saved tensor" (with common-subexpression
        # elimination the rule's cos(x) may be the forward pass's own cos(x))
        read = set()
        for new in made[first:]:
            new_args = new.args
            # most read only slots the reverse pass made (min of a tuple: no loop in Python)
            if new_args and min(new_args) < n_forward:
                for a in new_args:
                    if a < n_forward and a not in literal:
                        read.add(a)
        n_args, k = len(args), 0
        for c in cts:
            if c is not None:
                cs = c.slot
                if cs < n_forward and cs not in literal:
                    read.add(cs)
                if k < n_args and need[k]:  # as zip(args, need, cts) pairs them
                    contributions.append((i, k, cs))
                    _accumulate(ct, args[k], c)  # summing adds no reads
            k += 1
        if read:
            reads_saved.add(i)
            for a in read:
                at = saved.get(a)
                if at is None:
                    saved[a] = [i]
                else:
                    at.append(i)

    outputs = [b.var(s) for s in tape.outputs]
    grads = _appended(outputs, [ct.get(w) for w in wrt])
    return Joint(b.finish(outputs), seeds, grads, ran, reads_saved, saved, contributions)


_JOINTS: dict[
    tuple[Key, tuple[int, ...]], list[Any]
] = {}  # structural key -> [joint, the name to store it under once it is seen again, or None]


def joint(tape: Tape, wrt: Sequence[int], keep: bool = False) -> Joint:
    """``vjp(tape, wrt)``, memoized by ``tape``'s structure: an optimizer loop differentiates the
    same tape on every step, and slot numbers of equal-keyed tapes are equal. The result is
    shared: callers do not change it.

    The joint of a tape of ``STORE_MIN_INSTRS`` or more is also kept in the cache's plans
    (``store.write_plan``, not under ``NGRAD_JIT=never``), named after the tape's key, ``wrt``
    and the code that differentiates, for a new process to read back; one that fails its checks
    is made again and replaced. It is stored at once when ``keep`` (a program ``ngrad.compile``
    traces, made to be called again), otherwise the second time its structure is differentiated,
    as a tape compiles the second time it runs: structures met once (an adaptive solver's varying
    step counts) leave nothing on disk. A joint of more than ``MEMO_MAX_INSTRS`` instructions
    is not kept in memory: it is read back from the plans (or made again) each time.

    >>> from ngrad.engine.ir.tape import Builder
    >>> b = Builder()
    >>> x = b.input((3,), "f64")
    >>> tape = b.finish([(x * x).sum(axes=(0,), keepdim=False)])
    >>> j = joint(tape, [x.slot])
    >>> j is joint(tape, [x.slot]), len(j.tape.outputs)
    (True, 2)
    """
    key = (tape.key(), tuple(wrt))
    entry = _JOINTS.get(key)
    j = None if entry is None else entry[0]
    if j is None:
        name = stored = None
        if len(tape.instrs) >= STORE_MIN_INSTRS:
            from ..config import jit_mode

            if jit_mode() != "never":  # which touches no cache (nor imports Numba)
                name = _joint_name(key)
        if name:
            from ..store import read_plan

            data = read_plan(name)
            if data:
                try:
                    j, stored = Joint.loads(tape, data), True
                except ValueError:
                    pass
        if j is None:
            j = vjp(tape, wrt)
        if entry is None:
            if len(_JOINTS) > 512:
                _JOINTS.clear()
            # made whole before it is shared: another thread may look it up meanwhile. A long
            # joint is not kept: a graph 100,000 operations deep would hold 700,000 instructions
            # long after its backward; the cache's plans hold it once it is seen again
            kept = j if len(j.tape.instrs) <= MEMO_MAX_INSTRS else None
            entry = _JOINTS[key] = [kept, None if stored else name]
            if not keep:
                return j
    assert entry is not None  # found above, or just made
    if entry[1] is not None:
        name, entry[1] = entry[1], None
        from ..store import write_plan

        try:
            write_plan(name, j.dumps(tape))
        except ValueError:
            pass
    return j


def _joint_name(key: tuple[Key, tuple[int, ...]]) -> str | None:
    """The name a joint is stored under (see ``store.plan_name``): from ``key`` and the code
    that makes joints; None when it cannot be stored."""
    from ..ir import prims, shapes, tape
    from ..store import plan_name

    return plan_name("j", (sys.modules[__name__], prims, shapes, tape), key)


@dataclass(slots=True, eq=False)
class Split:
    """The result of ``split``. ``forward``: the tape with outputs appended (its inputs and
    instructions are the tape's). ``backward``: a tape whose inputs are the saved values, then
    the cotangents of some outputs; its outputs are gradients. ``saved``: where each saved value
    comes from, ``("out", i)`` (``forward.outputs[i]``) or ``("in", i)`` (the tape's input i).
    ``seeds``: the tape outputs whose cotangents ``backward`` takes, in its input order.
    ``grads``: for each ``wrt`` entry, the index into ``backward.outputs`` of its gradient, or
    None when no output depends on it. ``outputs_read``: the tape outputs whose values the
    gradient rules read (PyTorch's saved tensors), whether or not ``backward`` recomputes them:
    an in-place update of one of them must make the backward fail, as it does in eager mode."""

    forward: Tape
    backward: Tape
    saved: list[tuple[str, int]]
    seeds: list[int]
    grads: list[int | None]
    outputs_read: list[int]


def split(tape: Tape, wrt: Sequence[int]) -> Split:
    """The joint of ``tape`` (``joint(tape, wrt)``) as two tapes; see ``Split``.

    The backward tape reads the seeds and the forward values the reverse instructions need. As
    PyTorch's compiler partitions a joint graph, only inputs and the results of matrix products,
    reductions, scans and indexing are saved (outputs of the forward tape); elementwise
    instructions and movements between them and the reverse pass are recomputed in the backward
    tape, where they fuse into its loops, so the forward program stays as fused as one that
    saves nothing.

    >>> from ngrad.engine.ir.tape import Builder
    >>> b = Builder()
    >>> x = b.input((3,), "f64")
    >>> s = split(b.finish([x.sin().sum(axes=(0,), keepdim=False)]), [x.slot])
    >>> print(s.backward.format())
    in %0 : f64[3]
    in %1 : f64[]
    %2 = reshape(%1; shape=(1,)) : f64[1]
    %3 = expand(%2; shape=(3,)) : f64[3]
    %4 = cos(%0) : f64[3]
    %5 = mul(%3, %4) : f64[3]
    out %5
    >>> s.saved, s.seeds, s.grads  # x itself is saved, the cotangent of output 0 is read
    ([('in', 0)], [0], [0])
    >>> s.backward.verify() is s.backward and s.forward.verify() is s.forward
    True
    """
    j = joint(tape, wrt, keep=True)  # ngrad.compile splits the programs it keeps
    n, m = len(tape.shapes), len(tape.instrs)
    reverse = j.tape.instrs[m:]
    outs = [j.tape.outputs[g] if g is not None else None for g in j.grads]
    made_by = {ins.out: ins for ins in tape.instrs}
    stack = [a for ins in reverse for a in ins.args if a < n] + [g for g in outs if g is not None and g < n]
    need: set[int] = set()
    copied: set[int] = set()  # saved forward slots; forward slots the backward recomputes
    while stack:
        s = stack.pop()
        if s in need or s in copied:
            continue
        ins = made_by.get(s)
        if ins is not None and PRIMS[ins.prim].kind in _RECOMPUTED:
            copied.add(s)
            stack.extend(ins.args)
        else:
            need.add(s)
    position = {s: i for i, s in enumerate(tape.inputs)}
    forward = Tape()
    forward.shapes, forward.dtypes = list(tape.shapes), list(tape.dtypes)
    forward.inputs, forward.kinds, forward.instrs = list(tape.inputs), list(tape.kinds), list(tape.instrs)
    forward.outputs = list(tape.outputs)
    at = {s: i for i, s in reversed(list(enumerate(tape.outputs)))}
    back, remap = Tape(), {}
    saved: list[tuple[str, int]] = []

    def define(s: int) -> int:
        remap[s] = len(back.shapes)
        back.shapes.append(j.tape.shapes[s])
        back.dtypes.append(j.tape.dtypes[s])
        return remap[s]

    for s in sorted(need):  # slot order is definition order: inputs, then instructions
        if s in position:
            saved.append(("in", position[s]))
            back.kinds.append(tape.kinds[position[s]])
        else:
            if s not in at:
                at[s] = len(forward.outputs)
                forward.outputs.append(s)
            saved.append(("out", at[s]))
            back.kinds.append("tensor")
        back.inputs.append(define(s))
    used = {a for ins in reverse for a in ins.args} | set(outs)
    seeds = [k for k, s in enumerate(j.seeds) if s in used]
    for k in seeds:
        back.inputs.append(define(j.seeds[k]))
        back.kinds.append("tensor")
    for ins in tape.instrs:
        if ins.out in copied:
            back.instrs.append(Instr(define(ins.out), ins.prim, [remap[a] for a in ins.args], ins.params))
    for ins in reverse:
        back.instrs.append(Instr(define(ins.out), ins.prim, [remap[a] for a in ins.args], ins.params))
    back.outputs = [remap[g] for g in outs if g is not None]
    read = [k for k, s in enumerate(tape.outputs) if s in j.saved]
    return Split(forward, back, saved, seeds, _appended([], outs), read)


@dataclass(slots=True, eq=False)
class Tangent:
    """The result of ``jvp``: ``tape``; ``inputs``: the tangent input slot of each ``wrt``
    entry; ``tangents``: for each original output, the index into ``tape.outputs`` of its
    tangent, or None when no tangent reaches it."""

    tape: Tape
    inputs: list[int]
    tangents: list[int | None]


def jvp(tape: Tape, wrt: Sequence[int]) -> Tangent:
    """Append the tangent pass of ``tape`` for tangents of the input slots ``wrt``; see module doc."""
    b = Builder(tape)
    tan: dict[int, Var] = {}
    inputs = []
    for s in wrt:
        t = b.input(tape.shapes[s], tape.dtypes[s])
        inputs.append(t.slot)
        if tape.dtypes[s] in DIFFERENTIABLE:
            tan[s] = t
    var, dtypes = b.var, tape.dtypes
    for ins in tape.instrs:
        rule = PRIMS[ins.prim].jvp
        if rule is None or dtypes[ins.out] not in DIFFERENTIABLE:
            continue
        ts = list(map(tan.get, ins.args))
        for tv in ts:
            if tv is not None:
                break
        else:  # no tangent reaches it
            continue
        tangent = rule(ts, var(ins.out), list(map(var, ins.args)), ins.params)
        if tangent is not None:
            tan[ins.out] = tangent
    outputs = [b.var(s) for s in tape.outputs]
    positions = _appended(outputs, [tan.get(s) for s in tape.outputs])
    return Tangent(b.finish(outputs), inputs, positions)


# a scan's rules differentiate its body with these (``ir.prims.control.DIFFERENTIATE``)
control.DIFFERENTIATE.update(vjp=vjp, jvp=jvp)
