"""Tiering: what the next call of a tape structure runs on, so a one-shot script never waits on a
compiler.

Contract: ``next_state(record, policy, ...)`` is a pure function of what has been seen of one
tape structure (a ``Record``: calls counted, seconds spent interpreting, functions its plan
compiles and how many are not on disk, whether bytecode was offered) and of the ``Policy``
(compile-time estimates and thresholds). It returns a ``Decision``; the caller
(``dispatch.tier_for``) carries it out, updates the record and asks again, until the decision is
to run something. Nothing here compiles, plans or reads the environment.

Under ``NGRAD_JIT=auto`` a tape compiles once it has been seen ``policy.threshold`` times
(``NGRAD_JIT_THRESHOLD``, default 2), or at once when its kernels are already in the disk
cache. A plan that needs more than ``eager_functions`` new functions (an unrolled recurrence: each
costs Numba a few tenths of a second) is bought like skis: it compiles only once the time spent
interpreting that tape has reached the estimated compile time, so a loop never waits more than
about twice what it would have with perfect foresight. ``prepare`` (``now``) compiles at first
sight, unless the plan needs more than ``prepare_functions`` new functions. Long tapes of small
arrays run as bytecode (see ``Policy``) under the same tiering.
"""

import dataclasses
import enum
import math

from ..ir.prims.control import body_of
from ..transform.unroll import unrolled_size

__all__ = ["Policy", "POLICY", "Record", "Decision", "next_state", "small_steps", "unrolls"]


@dataclasses.dataclass(frozen=True)
class Policy:
    """The tiering rules' constants (defaults: measured on this project's machines).

    ``compile_s``: Numba's compile time per function (measured 0.2 to 0.8 s); ``eager_functions``:
    how many new functions a plan may need and still compile as soon as it is seen ``threshold``
    times. Fusing and rendering cost about ``plan_s`` per instruction: tapes longer than
    ``plan_eager`` instructions are planned only once interpreting them has cost as much.

    ``prepare`` (``ngrad.compile``) compiles a plan at once, unless it needs more than
    ``prepare_functions`` new functions (ten seconds of Numba and more): then it is tiered like a
    plain ``backward()``. An unrolled 40-step recurrence through an integer gather (which bytecode
    does not take) fused into 80 functions and its traced first call took 20 s.

    Tapes of at least ``bytecode_min_instrs`` instructions whose every instruction works on at
    most ``bytecode_max_elements`` elements run as bytecode (``backend/bytecode.py``): one loop
    over all instructions, compiled once per set of operations. There, Python and Numba's
    per-function compile time are the cost, not memory traffic: an unrolled RK4 solver of 6,800
    instructions on 100 elements takes 0.08 ms per call (1.1 ms when first measured), against
    19 ms for its 1,500 fused kernels and glue steps (and minutes compiling them) or 60 ms on the
    interpreter. A slice counts the window it takes, not the array it reads: the input an unrolled
    recurrence walks through a step at a time (an LSTM's (c, b) sequence) is only copied into the
    arena, and counting it whole sent an LSTM of 300 steps to fused kernels (over ten minutes
    compiling).

    A tape with bigger steps runs as bytecode too when its fused plan would compile more than
    ``bytecode_functions`` functions: GradBench's ode at n = 5,000 fuses into 513 (the gradient of
    x gathers one term from each of its 256 evaluations): its first call had not finished after
    five minutes of Numba, where the bytecode runs it in 3.9 ms a call (the interpreter: 37 ms)
    after 0.4 s. Bytecode walks each instruction's elements at about 0.3 ns each, so at a million
    elements fused kernels would be faster per call, but only after minutes of compiling.

    A tape of more than ``encode_eager`` instructions is encoded only once it is seen
    ``threshold`` times (or ``prepare``d): its first call runs on the interpreter anyway, and
    encoding costs more than interpreting (about 7 µs an instruction against 4), in memory too.
    The backward of a graph 100,000 operations deep is such a tape (700,000 instructions, met
    once); an unrolled LSTM's 47,000 stay below, so a warm cache still runs them as bytecode at
    once.

    A tape with scans (``ngrad.scan``) whose bodies take small steps runs as bytecode with its
    scans written out (``transform.unroll``) when that makes at most ``unroll_max_instrs``
    instructions: GradBench's ode of 64 RK4 steps at n = 100, value and gradient, took 4.7 ms a
    call with each step a driver call of its own, and 0.05 ms written out. Longer ones run their
    steps as programs of their own (``runtime.loops``), whose encoding would cost more than a
    second.

    Until a tier is ready, calls run on the interpreter and then on the tape's NumPy driver
    (``dispatch.numpy_driver``: the same NumPy calls as straight-line Python, 1-1.3 µs an
    instruction on small arrays where the interpreter takes 1.3-2), made once the time spent
    interpreting the structure has reached ``numpy_driver_s`` a tape instruction. Making it
    costs 30-40 µs an instruction (a third of it Python's own ``compile``; GradBench's lstm
    bodies and PyTorch's polynomial tutorial) and saves a fifth to two fifths of the
    interpreter's time, so it is made once what it would have saved pays for it: about three
    times its cost spent interpreting. At its cost alone, lstm's second call made the drivers of
    its 2,389-instruction body and two others, 80 ms, where its kernels were ready a few calls
    later. Only the interpreter's own Python counts towards it, at most ``interpret_s`` an
    instruction a call: on big arrays the time is NumPy's, which the driver does not save.
    """

    threshold: int = 2
    compile_s: float = 0.3
    eager_functions: int = 8
    prepare_functions: int = 32
    plan_s: float = 2e-4
    plan_eager: int = 2000
    numpy_driver_s: float = 1e-4
    interpret_s: float = 2e-6
    bytecode_min_instrs: int = 256
    bytecode_max_elements: int = 4096
    bytecode_functions: int = 32
    encode_eager: int = 65536
    unroll_max_instrs: int = 65536


POLICY = Policy()  # the runtime's rules; ``threshold`` is replaced by NGRAD_JIT_THRESHOLD


@dataclasses.dataclass(eq=False)
class Record:
    """What has been seen of one tape structure. ``tier``: None until planned, then a
    ``CompiledPlan`` or a ``Machine``; ``seen``: calls counted (a ``prepare`` is not a call);
    ``rent``: seconds the interpreter spent on them; ``overhead``: the part of ``rent`` that
    was the interpreter's own Python (``dispatch._overhead``); ``small``: whether every step is small
    (``small_steps``; None when the tape is too short for bytecode); ``offered``: bytecode was
    tried; ``functions``: how many functions the fused plan compiles, once planned; ``pending``:
    how many are not on disk; ``cached``: the tier's code is all on disk (under ``auto``);
    ``compiling``: the worker thread is encoding, planning or compiling its tier (``background``);
    ``failed``: its compile failed, so it stays on the interpreter (``dispatch.tier_for`` reads
    both); ``rejected``: warm-up runs of its tier that raised (``background``); ``numpy``: the
    NumPy driver serving its calls meanwhile."""

    tier: object = None
    seen: int = 0
    rent: float = 0.0
    overhead: float = 0.0
    small: bool | None = None
    offered: bool = False
    functions: int | None = None
    pending: int = 0
    cached: bool = False
    compiling: bool = False
    failed: bool = False
    rejected: int = 0
    numpy: object = None  # the NumPy driver that serves calls until the tier is ready (``dispatch``)


class Decision(enum.Enum):
    """What ``next_state`` asks the caller to do."""

    ENCODE = "encode"  # offer the tape to bytecode (it may decline), then ask again
    PLAN = "plan"  # fuse and render it, then ask again
    WAIT = "wait"  # interpret it, unplanned, adding the time to its rent
    INTERPRET = "interpret"  # interpret it, planned but not compiled, adding the time to its rent
    COMPILE = "compile"  # compile its tier, then run it
    RUN = "run"  # run its tier, which is ready


def next_state(record, policy, *, mode, instrs, now=False, ready=False):
    """The decision for a call of a tape of ``instrs`` instructions under ``NGRAD_JIT=mode``
    (``now``: ``prepare``, which compiles at first sight; ``ready``: the record's tier is
    compiled), given what ``record`` has seen, this call already counted."""
    if mode == "never" or not instrs:
        return Decision.WAIT
    if record.tier is None:
        if record.small and not record.offered:
            if mode == "auto" and not now and instrs > policy.encode_eager and record.seen < policy.threshold:
                return Decision.WAIT
            return Decision.ENCODE
        if (
            mode == "auto"
            and not now
            and instrs > policy.plan_eager
            and (record.seen < policy.threshold or record.rent < policy.plan_s * instrs)
        ):
            return Decision.WAIT
        return Decision.PLAN
    # a tape of small steps was offered to bytecode when first seen: encoding it again would only
    # decline it again; one of big steps is offered once its plan proves to need many functions
    if record.small is False and not record.offered and (record.functions or 0) > policy.bytecode_functions:
        return Decision.ENCODE
    if ready:
        return Decision.RUN
    eager = policy.prepare_functions if now else policy.eager_functions
    if (
        mode == "auto"
        and not record.cached
        and (
            (record.seen < policy.threshold and not now)
            or (record.pending > eager and record.rent < policy.compile_s * record.pending)
        )
    ):
        return Decision.INTERPRET
    return Decision.COMPILE


def unrolls(tape, policy=POLICY):
    """Whether ``tape`` holds scans that run as bytecode written out (see ``Policy``); None when
    it holds none."""
    bodies = [body_of(ins.params["body"]) for ins in tape.instrs if ins.prim == "scan"]
    if not bodies:
        return None
    size = unrolled_size(tape)
    return policy.bytecode_min_instrs <= size <= policy.unroll_max_instrs and all(
        small_steps(b, policy) for b in bodies
    )


def small_steps(tape, policy=POLICY):
    """Whether every instruction of ``tape`` reads and writes at most
    ``policy.bytecode_max_elements`` elements, a slice counting only its result."""
    sizes = [math.prod(s) for s in tape.shapes]
    limit = policy.bytecode_max_elements
    if max(sizes, default=0) <= limit:
        return True
    big = {s for s, n in enumerate(sizes) if n > limit}
    return not any(ins.out in big or (ins.prim != "slice" and not big.isdisjoint(ins.args)) for ins in tape.instrs)
