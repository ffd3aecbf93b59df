"""Layout: how a fused plan is cut into compiled functions, and the shapes kernels are called with.

Contract: ``Layout(plan, tape, dead, split)`` groups the plan's steps into segments, each one
generated function (``codegen.program``) or one glue step, and marks the segments threads may run
in chunks of rows (``split``: big kernels get functions of their own). ``squeezed``, ``kept`` and
``keepdims`` are the shapes codegen's calling convention passes arrays and accumulators in;
``dead_after_steps`` says which slots die after each step of a plan.
"""

import math

from .. import pace
from ..backend.codegen import program
from ..backend.fuse import Glue, Kernel, reads_of
from ..ir.interpret import dead_after

__all__ = ["Layout", "PARALLEL_MIN", "PARALLEL_WORK", "big", "dead_after_steps", "squeezed", "kept", "keepdims"]

# Loops smaller than this stay serial when threads are on: waking threads and combining
# per-chunk accumulators cost tens of microseconds, and a plan with a loop for threads runs step
# by step, not through its driver. Measured on 2 cores with 2 threads, against 1: with only an
# element count (32K) as the bar, llsq's (1024, 32) loop made the call 8x slower (0.43 against
# 0.06 ms) and kmeans' (1000, 32, 8) loops 2x; with this work bar both run serially, while the
# chain's loop of 27 instructions runs in chunks from about 155,000 elements (a million: 30%
# faster than serially; at 100,000 the two were within this machine's noise).
PARALLEL_MIN = 1 << 15  # elements
PARALLEL_WORK = 1 << 22


class Layout:
    """The plan cut into segments, each compiled to one function (``codegen.program``) or one
    glue step; ``chunked[k]``: threads run segment k in chunks of rows (see ``_row_local``)."""

    __slots__ = ("segments", "sources", "dead", "chunked", "kernels")

    def __init__(self, plan, tape, dead, split):
        steps = plan.steps
        self.segments, self.sources, self.chunked = [], [], []
        segments = _segments(steps)
        readers = _readers(segments, steps, tape)
        for n, seg in enumerate(segments):
            pace.step()  # a kernel's source at a time: the compile worker's pacing looks in between
            kerns = [steps[k] for k in seg if isinstance(steps[k], Kernel)]
            outside = {
                s for k in seg if isinstance(steps[k], Kernel) for s in steps[k].stores if readers.get(s, {n}) != {n}
            }
            src = program(kerns, tape, _made_in(seg, steps), outside) if kerns else None
            chunk = split and any(big(kn) for kn in kerns)
            if chunk and not _row_local(seg, steps, src, tape):
                for k in seg:  # each loop on its own, so each can be chunked (or not) alone
                    one = program([steps[k]], tape) if isinstance(steps[k], Kernel) else None
                    self.segments.append([k])
                    self.sources.append(one)
                    self.chunked.append(one is not None and big(steps[k]) and _row_local([k], steps, one, tape))
            else:
                self.segments.append(seg)
                self.sources.append(src)
                self.chunked.append(chunk)
        self.dead = [[s for k in seg for s in dead[k]] for seg in self.segments]
        self.kernels = None


def big(kernel):
    """Whether threads would run ``kernel`` faster: at least ``PARALLEL_MIN`` elements and
    ``PARALLEL_WORK`` element-instructions (each counting one)."""
    size = math.prod(kernel.shape) if kernel.shape else 0
    work = size * (len(kernel.body) + len(kernel.reductions))
    return kernel.shape[:1] >= (2,) and size >= PARALLEL_MIN and work >= PARALLEL_WORK


def _readers(segments, steps, tape):
    """slot -> the segments whose loops read it; None stands for a reader that is not a loop
    (glue, or the caller: an output)."""
    readers = {s: {None} for s in tape.outputs}
    for n, seg in enumerate(segments):
        for k in seg:
            for s in reads_of(steps[k]):
                readers.setdefault(s, set()).add(None if isinstance(steps[k], Glue) else n)
    return readers


def _made_in(seg, steps):
    """The slots a segment's own steps make."""
    made = set()
    for k in seg:
        st = steps[k]
        if isinstance(st, Glue):
            made.add(st.instr.out)
        else:
            made.update(st.stores)
            made.update(ins.out for ins in st.reductions)
    return made


def _row_local(seg, steps, src, tape):
    """Whether the segment's loops can run in chunks of rows: every loop has the same outermost
    extent, and a loop reads values made earlier in the segment only by rows (a reduction over
    axis 0 is complete only after the chunks are combined, so nothing in the segment may read it)."""
    kerns = [steps[k] for k in seg if not isinstance(steps[k], Glue)]
    if not kerns or any(len(kn.shape) == 0 for kn in kerns):
        return False
    n0 = kerns[0].shape[0]
    if n0 < 2 or any(kn.shape[0] != n0 for kn in kerns):
        return False
    made, whole = set(), set()  # slots made in the segment; those complete only after combining
    parts = iter(src.parts)
    for k in seg:
        step = steps[k]
        if isinstance(step, Glue):  # a reshape of a value made here
            if step.instr.args[0] in made:
                made.add(step.instr.out)
                shape = tape.shapes[step.instr.out]
                if step.instr.args[0] in whole or not shape or shape[0] != n0:
                    whole.add(step.instr.out)
            continue
        part = next(parts)
        if part.shifted:
            return False
        for (a, _), rows in zip(part.arrays, part.rows):
            if a in made and (a in whole or not rows):
                return False
        if any(sc in made for sc in part.scalars):
            return False
        made.update(part.stores)
        for ins in part.reductions:
            made.add(ins.out)
            if 0 in ins.params["axes"]:
                whole.add(ins.out)
    return True


def _segments(steps):
    """Step indices grouped into segments: maximal runs of kernels with the reshapes between
    them (views, so they can be taken before the loops fill their buffers), and single steps."""
    segs, run = [], []

    def close():
        tail = []
        while run and isinstance(steps[run[-1]], Glue):  # a trailing reshape runs on its own
            tail.append([run.pop()])
        if run:
            segs.append(list(run))
        segs.extend(reversed(tail))
        run.clear()

    for k, step in enumerate(steps):
        if isinstance(step, Kernel) or (run and step.instr.prim == "reshape"):
            run.append(k)
        else:
            close()
            segs.append([k])
    close()
    return segs


def dead_after_steps(tape, plan):
    """For each step of ``plan``, the slots no later step (nor the caller) reads."""
    return dead_after([reads_of(step) for step in plan.steps], set(tape.outputs))


def squeezed(shape, pattern):
    """``shape`` without the axes a kernel reads broadcast (codegen passes arrays that way)."""
    return tuple(n for n, b in zip(shape, pattern) if not b) or (1,)


def kept(shape, ins):
    """An accumulator's shape without the reduced axes (codegen indexes it that way; a full
    reduction's accumulator is 0-d)."""
    return tuple(n for d, n in enumerate(shape) if d not in ins.params["axes"])


def keepdims(shape, ins):
    """The shape of reduction ``ins``'s result over a loop of ``shape``, reduced axes kept as 1."""
    return tuple(1 if d in ins.params["axes"] else n for d, n in enumerate(shape)) or (1,)
