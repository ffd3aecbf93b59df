"""Fusion: partition a tape into steps, each a fused loop (``Kernel``) or one NumPy call (``Glue``).

Contract: ``fuse(tape)`` returns a ``Plan`` whose steps, run in order, compute every output
of the tape. A ``Kernel`` is one nd loop over an iteration shape: it reads arrays (with a
broadcast pattern, so an ``expand`` never materializes its result), runtime scalars and literals,
evaluates a run of elementwise instructions per element, stores the values that are needed
elsewhere, and accumulates reductions over its iteration space as epilogues (so
``((x[:, None] - x[None]) ** 2).sum(-1)`` never builds its N x N x 3 temporary). Everything
else (movement, indexing, scans, matmul through BLAS) is a ``Glue`` step run by NumPy.

An elementwise instruction joins the latest kernel of its shape when all its operands are
available at that kernel's position (computed before it, or by it, but not by one of its
reductions, which are complete only after the loop).
"""
from .prims import PRIMS

__all__ = ["fuse", "Plan", "Kernel", "Glue"]

FUSED = ("unary", "binary", "compare", "logical", "where", "cast")
EPILOGUES = ("sum", "prod", "amax", "amin")


class Glue:
    """One instruction run by the NumPy interpreter's implementation."""

    __slots__ = ("instr",)

    def __init__(self, instr):
        self.instr = instr


class Kernel:
    """A fused loop. ``reads``: slot -> ("array", src, pattern) | ("scalar", src) | ("literal", value);
    ``body``: elementwise instructions in order; ``reductions``: epilogue instructions;
    ``stores``: slots written to full-size output arrays (filled in by ``fuse``)."""

    __slots__ = ("shape", "reads", "body", "reductions", "stores", "defined")

    def __init__(self, shape):
        self.shape = shape
        self.reads, self.body, self.reductions, self.stores = {}, [], [], []
        self.defined = set()


class Plan:
    """The steps of a fused tape, in execution order."""

    __slots__ = ("tape", "steps")

    def __init__(self, tape, steps):
        self.tape, self.steps = tape, steps

    def kernels(self):
        return [s for s in self.steps if isinstance(s, Kernel)]


def _ones(shape):
    return all(d == 1 for d in shape)


def fuse(tape):
    """Partition ``tape`` into kernels and glue steps; see the module docstring."""
    steps = []
    where = {s: (-1, False) for s in tape.inputs}  # slot -> (step, produced by an epilogue)
    literal = {}
    latest = {}  # shape -> index of the latest kernel of that shape

    def available(slot, k):
        step, epi = where[slot]
        return step < k or (step == k and not epi)

    def kernel_for(shape, deps):
        k = latest.get(shape)
        if k is not None and all(d in literal or available(d, k) for d in deps):
            return k
        steps.append(Kernel(shape))
        latest[shape] = len(steps) - 1
        return len(steps) - 1

    def read(kern, k, slot):
        """Make ``slot`` (of the kernel's shape) readable inside kernel ``k``."""
        if slot in kern.defined:
            return
        if slot in literal:
            kern.reads[slot] = ("literal", literal[slot])
        else:
            kern.reads[slot] = ("array", slot, tuple(False for _ in kern.shape))
        kern.defined.add(slot)

    for ins in tape.instrs:
        prim = PRIMS[ins.prim]
        shape = tape.shapes[ins.out]
        if ins.prim == "const":
            literal[ins.out] = ins.params["value"]
        elif ins.prim in ("reshape", "expand") and ins.args[0] in literal:
            literal[ins.out] = literal[ins.args[0]]
        if ins.prim == "expand" and ins.args[0] not in literal:
            src = ins.args[0]
            k = kernel_for(shape, [src])
            kern = steps[k]
            if _ones(tape.shapes[src]):
                kern.reads[ins.out] = ("scalar", src)
            else:
                kern.reads[ins.out] = ("array", src, tuple(a == 1 and b != 1 for a, b in zip(tape.shapes[src], shape)))
            kern.defined.add(ins.out)
            where[ins.out] = (k, False)
        elif ins.out in literal and ins.prim != "const":
            where[ins.out] = (-1, False)  # a broadcast literal: kernels inline it, glue steps rebuild it
            steps.append(Glue(ins))
            where[ins.out] = (len(steps) - 1, False)
        elif prim.kind in FUSED:
            k = kernel_for(shape, ins.args)
            kern = steps[k]
            for a in ins.args:
                read(kern, k, a)
            kern.body.append(ins)
            kern.defined.add(ins.out)
            where[ins.out] = (k, False)
        elif ins.prim in EPILOGUES:
            src = ins.args[0]
            k, _ = where[src]
            kern = steps[k] if k >= 0 and isinstance(steps[k], Kernel) else None
            if kern is None or src not in kern.defined or kern.shape != tape.shapes[src] or where[src][1]:
                k = kernel_for(tape.shapes[src], [src])
                kern = steps[k]
                read(kern, k, src)
            kern.reductions.append(ins)
            where[ins.out] = (k, True)
        else:
            steps.append(Glue(ins))
            where[ins.out] = (len(steps) - 1, False)

    # a value defined in a kernel is stored when anything outside that kernel reads it
    needed = set(tape.outputs)
    for i, step in enumerate(steps):
        if isinstance(step, Glue):
            needed.update(step.instr.args)
        else:
            for slot, r in step.reads.items():
                if r[0] != "literal":
                    needed.add(r[1])
            for ins in step.body:
                needed.update(a for a in ins.args if a not in step.defined)
    for step in steps:
        if isinstance(step, Kernel):
            step.stores = [s for s in _defined_order(step) if s in needed and s not in literal]
    return Plan(tape, steps)


def _defined_order(kern):
    """Slots a kernel defines, in a deterministic order: reads (by slot), then body results."""
    return sorted(s for s, r in kern.reads.items() if r[0] != "literal" and r[1] != s) + [i.out for i in kern.body]
