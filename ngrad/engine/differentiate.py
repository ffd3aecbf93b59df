"""Differentiation: a tape becomes a joint (forward + reverse) tape, or a tangent tape.

Contract: ``vjp(tape, wrt)`` returns a ``Joint`` whose tape takes the original inputs plus
one cotangent seed per output, and returns the original outputs followed by the cotangent
of every ``wrt`` slot that the outputs depend on (``Joint.grads`` maps each ``wrt`` entry to
its output position, or None when unused). ``wrt`` may name input slots or intermediate
slots. Reverse instructions come from the primitive table's VJP rules, so the joint tape is an
ordinary tape: it can be printed, run, batched or differentiated again. Cotangents only flow
through floating slots, and fan-out contributions are summed in exactly one place
(``_accumulate``). Codegen and runtime never learn what a gradient is.

``jvp(tape, wrt)`` is forward mode: a ``Tangent`` tape that takes the original inputs plus one
tangent per ``wrt`` input slot and returns the original outputs followed by the tangent of each
output that depends on them (``Tangent.tangents`` gives each output's position, or None).
"""
from .prims import PRIMS
from .tape import Builder

__all__ = ["vjp", "Joint", "jvp", "Tangent"]


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

    __slots__ = ("tape", "seeds", "grads", "ran", "reads_saved", "saved", "contributions")


def _accumulate(ct, slot, c):
    prev = ct.get(slot)
    ct[slot] = c if prev is None else prev + c


def _appended(outputs, extra):
    """Append the values of ``extra`` that are not None to ``outputs``; return where each went
    (its index in ``outputs``, or None)."""
    at = []
    for v in extra:
        at.append(None if v is None else len(outputs))
        if v is not None:
            outputs.append(v)
    return at


def vjp(tape, wrt):
    """Append the reverse pass of ``tape`` with respect to the slots ``wrt``; see module doc."""
    floating = ("f32", "f64")
    active = {s for s in wrt if tape.dtypes[s] in floating}
    # literals of the program are not "saved tensors"; runtime scalars are (PyTorch saves the
    # wrapped number of `x * 2`, so a second backward through it fails there too)
    literal = set()
    for ins in tape.instrs:
        if ins.out in active:
            continue
        if (PRIMS[ins.prim].vjp is not None and tape.dtypes[ins.out] in floating
                and any(a in active for a in ins.args)):
            active.add(ins.out)
        if ins.prim == "const" or (ins.prim in ("reshape", "expand", "cast") and ins.args[0] in literal):
            literal.add(ins.out)

    n_forward = len(tape.shapes)
    b = Builder(tape)
    ct = {}
    seeds = []
    for s in tape.outputs:
        seed = b.input(tape.shapes[s], tape.dtypes[s])
        seeds.append(seed.slot)
        if s in active:
            _accumulate(ct, s, seed)

    ran, reads_saved, saved, contributions = [], set(), {}, []
    for i in range(len(tape.instrs) - 1, -1, -1):
        ins = tape.instrs[i]
        g = ct.get(ins.out)
        if g is None:
            continue
        need = [a in active for a in ins.args]
        if not any(need):
            continue
        first = len(b.tape.instrs)
        cts = PRIMS[ins.prim].vjp(need, g, b.var(ins.out), [b.var(a) for a in ins.args], ins.params)
        ran.append(i)
        # any forward value the rule reads is a "saved tensor" (with common-subexpression
        # elimination the rule's cos(x) may be the forward pass's own cos(x))
        read = {a for new in b.tape.instrs[first:] for a in new.args if a < n_forward and a not in literal}
        read.update(c.slot for c in cts if c is not None and c.slot < n_forward and c.slot not in literal)
        if read:
            reads_saved.add(i)
            for a in read:
                saved.setdefault(a, []).append(i)
        for k, (a, n, c) in enumerate(zip(ins.args, need, cts)):
            if n and c is not None:
                contributions.append((i, k, c.slot))
                _accumulate(ct, a, c)

    outputs = [b.var(s) for s in tape.outputs]
    grads = _appended(outputs, [ct.get(w) for w in wrt])
    j = Joint()
    j.tape, j.seeds, j.grads, j.ran, j.reads_saved = b.finish(outputs), seeds, grads, ran, reads_saved
    j.saved, j.contributions = saved, contributions
    return j


class Tangent:
    """The result of ``jvp``: ``tape``; ``inputs``: the tangent input slot of each ``wrt``
    entry; ``tangents``: for each original output, the index into ``tape.outputs`` of its
    tangent, or None when no tangent reaches it."""

    __slots__ = ("tape", "inputs", "tangents")


def jvp(tape, wrt):
    """Append the tangent pass of ``tape`` for tangents of the input slots ``wrt``; see module doc."""
    b = Builder(tape)
    tan, inputs = {}, []
    for s in wrt:
        t = b.input(tape.shapes[s], tape.dtypes[s])
        inputs.append(t.slot)
        if tape.dtypes[s] in ("f32", "f64"):
            tan[s] = t
    for ins in tape.instrs:
        rule = PRIMS[ins.prim].jvp
        if rule is None or tape.dtypes[ins.out] not in ("f32", "f64"):
            continue
        ts = [tan.get(a) for a in ins.args]
        if all(t is None for t in ts):
            continue
        t = rule(ts, b.var(ins.out), [b.var(a) for a in ins.args], ins.params)
        if t is not None:
            tan[ins.out] = t
    outputs = [b.var(s) for s in tape.outputs]
    positions = _appended(outputs, [tan.get(s) for s in tape.outputs])
    r = Tangent()
    r.tape, r.inputs, r.tangents = b.finish(outputs), inputs, positions
    return r
