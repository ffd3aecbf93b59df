"""Dispatch: which tier runs a call of a tape, and the entry points that run it.

Contract: ``run(tape, values)`` checks every input against the tape's slot (``checks``) before
anything executes, runs the tape on the tier ``tier_for`` picks (the NumPy interpreter, a bytecode
``Machine``, a compiled plan's generated driver or its step-by-step executor; ``target="cuda"``:
the CUDA executor), and returns fresh, writable, C-contiguous arrays that share memory with no
input. ``prepare``/``inline`` give a function (or the lines of one) equal to ``run`` for calling
many times. ``tier_for`` keeps one ``tiering.Record`` per tape structure and carries out
``tiering.next_state``'s decisions. ``records`` keeps the ``NGRAD_MEMORY_ENTRIES`` most recently
used structures (``recent.Recent``): an evicted record takes its plan with it only once nobody
runs it (a driver or a thread holds the plan itself, never an index into ``records``), and a
structure seen again starts anew: its count restarts and its plan is read back from the disk
cache, so tiering only waits again for ``NGRAD_JIT_THRESHOLD`` calls.
"""

import dataclasses
import sys
import time

import numpy as np

from ..backend import bytecode
from ..config import compile_mode, debug_level, jit_mode, jit_threshold, scan_unroll
from ..ir.interpret import interpret, np_dtype
from ..ir.prims import control
from ..recent import Recent
from ..store import has_plan
from ..targets import CompileError, kernels_made
from . import background, loops, tiering
from .buffers import owned
from .checks import check, check_one
from .compile_server import encode_remote, plan_remote
from .compile_server import start as start_server
from .driver import driver_code, driver_of
from .executor import executed
from .machine import Machine, machine_for
from .plan import CompiledPlan, plan_of
from .tiering import Decision, Record, next_state, small_steps, unrolls

__all__ = ["run", "prepare", "inline", "tier_for", "records", "numpy_driver", "numpy_body"]

records: dict[tuple, tiering.Record] = Recent()  # tape structure (``Tape.key()``) -> its tiering.Record


def tier_for(tape, mode, now=False, policy=None, values=None):
    """The record of ``tape`` with its tier compiled if it is due (None under ``NGRAD_JIT=never``
    or for an empty tape): a record whose tier is not ready runs on the interpreter, and the
    caller adds that time to its ``rent``. ``now`` (``prepare``): planned and compiled at first
    sight, except under ``auto`` a plan needing more than ``prepare_functions`` new functions,
    which waits for its rent. ``policy``: the tiering rules (default ``tiering.POLICY`` with
    ``NGRAD_JIT_THRESHOLD``). ``values``: the inputs of the call asking (``run``, ``Pending``);
    with them, under ``auto`` unless ``NGRAD_COMPILE=wait``, whatever is due (encoding,
    planning, compiling: ``advance``) happens on the worker thread (``background.submit``) and
    this call runs on the interpreter; without them (``prepare``) the caller waits for it."""
    background.settle()
    if mode == "never" or not tape.instrs:
        return None
    key = tape.key()
    record = records.get(key)
    if now and values is None and record is not None and record.compiling:  # the worker has it: wait
        background.wait(record)
    if record is not None and record.tier is not None and record.tier.ready():
        return record
    policy = policy or dataclasses.replace(tiering.POLICY, threshold=jit_threshold(), unroll_max_instrs=scan_unroll())
    if record is None:
        record = records[key] = Record()
        if len(tape.instrs) >= policy.bytecode_min_instrs:
            record.small = small_steps(tape, policy)
        if unrolls(tape, policy):
            record.small = True
    if not now:  # prepare runs nothing: its call is counted when it runs
        record.seen += 1
    if record.compiling or record.failed:
        return record
    if values is not None and mode == "auto" and compile_mode() != "wait":
        decision = next_state(record, policy, mode=mode, instrs=len(tape.instrs), now=now)
        if decision is Decision.PLAN and len(tape.instrs) <= policy.plan_eager and kernels_made():
            # perhaps another size of a structure compiled before: planning takes milliseconds, and
            # when every function it needs already runs in this process, so does this call
            decision = advance(record, tape, mode, now, policy)
            tier = record.tier
            if isinstance(tier, CompiledPlan) and tier.compiled_here():
                tier.compile()
                return record
        if decision in (Decision.ENCODE, Decision.PLAN, Decision.COMPILE):
            early = None
            if decision is Decision.ENCODE and _encoded_elsewhere(tape, policy):
                early = lambda: _serve_early(tape)  # noqa: E731
            advancing = lambda copies: advance(record, tape, mode, now, policy, copies)  # noqa: E731
            background.submit(record, tape, values, advancing, early)
        return record
    if advance(record, tape, mode, now, policy) is Decision.COMPILE:
        t = time.perf_counter()
        try:
            record.tier.compile()
        except CompileError as e:
            record.failed = True
            background.warn_failed(e)
            return record
        if debug_level() >= 3:
            print(
                f"ngrad: prepared {len([k for k in record.tier.kernels if k])} kernels in "
                f"{(time.perf_counter() - t) * 1e3:.1f} ms",
                file=sys.stderr,
            )
    return record


def _encoded_elsewhere(tape, policy):
    """Whether the compile server encodes ``tape`` when the worker encodes it (see ``advance``)."""
    return compile_mode() == "process" or bool(unrolls(tape, policy))


def _serve_early(tape):
    # the worker's head start (``background.submit``'s ``early``): the child starts while the
    # calls go first, unless the encoding is on disk and no child is needed (ode's kernels came
    # 0.05 s sooner, its calls meanwhile as fast as without)
    name = bytecode.plan_name(tape)
    if name is not None and not has_plan(name):
        start_server()


def advance(record, tape, mode, now, policy, values=None):
    """Carry out ``next_state``'s encoding and planning for ``record`` until it decides something
    else, and return that decision (``COMPILE``: the caller compiles the tier). ``values``: the
    compile worker's copies of the call's inputs; under ``NGRAD_COMPILE=process`` (and under
    ``thread`` for a tape whose scans are written out) the compile server then encodes a tape
    for bytecode and compiles its loop, and this process reads both back from the disk cache."""
    new = None  # a tier made here, shown once (NGRAD_DEBUG=2)
    while True:
        ready = record.tier is not None and record.tier.ready()
        decision = next_state(record, policy, mode=mode, instrs=len(tape.instrs), now=now, ready=ready)
        if decision is Decision.ENCODE:
            record.offered = True
            t = time.perf_counter()
            elsewhere = None
            # the compile server encodes where the compiles go there, and under ``thread`` a tape
            # whose scans are written out: their unrolling and encoding (lstm c = 64: 0.1 s of Python
            # alone, 0.24 s sharing the interpreter's lock with the calls) made its calls 3x slower
            if values is not None and _encoded_elsewhere(tape, policy):
                elsewhere = lambda: encode_remote(tape, policy, not record.small, values)  # noqa: E731
            machine = machine_for(tape, policy, big_steps=not record.small, elsewhere=elsewhere)
            if debug_level() >= 3:
                print(
                    f"ngrad: bytecode for {len(tape.instrs)} instrs in {(time.perf_counter() - t) * 1e3:.1f} ms "
                    f"({'encoded' if machine is not None else 'declined'})",
                    file=sys.stderr,
                )
            if machine is not None:
                record.tier = new = machine
                record.pending, record.cached = 0, machine.cached
        elif decision is Decision.PLAN:
            t = time.perf_counter()
            elsewhere = None
            # where the compiles go to the compile server, it plans too (ba's 394 instructions:
            # 10-20 ms of Python that the calls shared the interpreter's lock with, 1.5-3 ms
            # more on each of calls 8-28), and this process reads the plan back
            if values is not None and compile_mode() == "process":
                elsewhere = lambda: plan_remote(tape, values)  # noqa: E731
            plan = record.tier = new = plan_of(tape, elsewhere)
            if debug_level() >= 3:
                print(
                    f"ngrad: planned {len(tape.instrs)} instrs in {(time.perf_counter() - t) * 1e3:.1f} ms "
                    f"(fusion and source of {plan.functions()} functions)",
                    file=sys.stderr,
                )
            record.functions = plan.functions()
            if mode == "auto":
                record.pending = plan.missing()
                record.cached = record.pending == 0
        else:
            break
    if new is not None and debug_level() >= 2:
        _show(new)
    return decision


def _show(tier):
    """Print a new tier's generated source (``NGRAD_DEBUG=2``)."""
    if isinstance(tier, Machine):
        print(f"ngrad: bytecode loop\n{tier.code.source}", file=sys.stderr)
        return
    for s in tier.sources:
        if s is not None:
            print(f"ngrad: generated kernel\n{s.text}", file=sys.stderr)


def run(tape, values, target="cpu", *, policy=None):
    """Execute ``tape`` on ``values`` after validating them; return owned output arrays.
    ``target="cuda"`` runs it on the GPU (``runtime/cuda.py``): device arrays in and out.
    ``policy``: the tiering rules (see ``tier_for``)."""
    if target == "cuda":
        from .cuda import run as run_cuda

        return run_cuda(tape, values)
    debug = debug_level()
    if debug >= 1:
        print(f"ngrad: running tape ({len(tape.instrs)} instrs)\n{tape.format()}", file=sys.stderr)
    record = tier_for(tape, jit_mode(), policy=policy, values=values)
    tier = None if record is None else record.tier
    if tier is not None and debug < 3 and not isinstance(tier, Machine) and tier.ready():
        # a driver checks its inputs itself (an array's class, shape, dtype and layout, a runtime
        # scalar's class): only their count is checked here
        drive = driver_of(tier)
        if drive is not None:
            if len(values) != len(tape.inputs):
                check(tape, values)
            return drive(values)
    check(tape, values)
    if tier is None or not tier.ready():
        return _interpreted(tape, values, record)
    if isinstance(tier, Machine):
        return tier.run(values)  # fresh arrays, sharing memory with nothing
    # a small plan runs through its driver (``prepare``): straight-line code, shapes as literals
    return executed(tier, values)


def _interpreted(tape, values, record):
    """The outputs of checked ``values`` before the tape's tier is ready, owned: from the
    interpreter, then from its NumPy driver (``numpy_driver``) once interpreting this structure
    has cost what the driver would have saved (``_due``; a scan's steps move by the same rule,
    ``numpy_body``). The time goes to the record's ``rent``, which tiering weighs against
    compiling. Under ``NGRAD_JIT=never`` (no record) the interpreter runs every call. Its
    beginning and end are told to ``background``, with its own CPU time: the compile worker
    takes its turns by them (``background.defer_to_calls``)."""
    t, cpu = time.perf_counter(), time.thread_time()
    background.call_began()
    try:
        if record is not None and record.numpy is None and _due(record, tape):
            record.numpy = numpy_driver(tape)
        if record is None or record.numpy is None:
            outs = owned(interpret(tape, values), values)
        else:
            outs = record.numpy(values)
    finally:
        spent = time.perf_counter() - t
        background.call_ended(time.thread_time() - cpu)  # its own work, not its waits for the worker
    if record is not None:
        record.rent += spent
        record.overhead += _overhead(spent, tape)
    return outs


def _due(owner, tape):
    """Whether ``owner`` (a ``Record``, a scan's ``_Body``) makes its NumPy driver of ``tape`` now:
    once the interpreter's own Python on it (``owner.overhead``, see ``_overhead``) has cost what
    making one does (``Policy.numpy_driver_s`` an instruction), unless compiles are running in
    the background. Their tiers land soon, and making a driver costs the call that does it tens
    of milliseconds (lstm's scan bodies 26 ms, a call of 13; ba 7 ms, a call of 6) to make calls
    until then a fifth faster. Its overhead then starts again, so the driver is due after as
    many calls with none running (not at once when they end: the call running then would make
    it for nothing)."""
    if owner.overhead < tiering.POLICY.numpy_driver_s * len(tape.instrs):
        return False
    if background.pending():
        owner.overhead = 0.0
        return False
    return True


def _overhead(spent, tape):
    """The part of an interpreted call's ``spent`` seconds that a NumPy driver could save: its
    Python, at most ``Policy.interpret_s`` an instruction; the rest is NumPy computing, which
    the driver does at the same speed (the chain at 100,000 points spent 6 ms a call in NumPy
    and made its driver at its second call, 1 ms for nothing)."""
    return min(spent, tiering.POLICY.interpret_s * len(tape.instrs))


_numpy = Recent()  # (tape structure, checked) -> its NumPy driver


def numpy_driver(tape, checked=True):
    """The generated driver of ``tape``'s NumPy plan (``CompiledPlan(tape, "numpy")``): the
    interpreter's NumPy calls as straight-line Python, every instruction's row and params bound
    once, values dropped after their last reader, a scan's body run by ``numpy_body``. No
    compiler is imported: it serves the calls that come before a structure's kernels are ready,
    at less than the interpreter's cost per instruction (1-1.3 µs against 1.3-2 on small arrays).
    ``checked=False``: without the input checks (a scan's steps).

    >>> import numpy as np
    >>> from ngrad.engine.ir.tape import Builder
    >>> b = Builder()
    >>> x = b.input((3,), "f64")
    >>> tape = b.finish([(x * x).sum(axes=(0,), keepdim=False)])
    >>> numpy_driver(tape)([np.array([1.0, 2.0, 3.0])])
    [array(14.)]
    """
    key = (tape.key(), checked)
    drive = _numpy.get(key)
    if drive is None:
        drive = _numpy[key] = driver_of(CompiledPlan(tape, "numpy"), checked)
    return drive


class _Body:
    """A scan body's steps before its kernels are ready: interpreted, then on its NumPy driver
    once interpreting them has cost what making it does (as ``_interpreted`` decides)."""

    __slots__ = ("tape", "overhead", "drive")

    def __init__(self, tape):
        self.tape, self.overhead, self.drive = tape, 0.0, None

    def __call__(self, values):
        if self.drive is not None:
            return self.drive(values)
        t = time.perf_counter()
        outs = interpret(self.tape, values)
        self.overhead += _overhead(time.perf_counter() - t, self.tape)
        if _due(self, self.tape):
            self.drive = numpy_driver(self.tape, checked=False)
        return outs


_bodies = Recent()  # body text -> its _Body


def numpy_body(text, tape):
    """How a scan's steps run its body (``tape``, of canonical text ``text``) before its kernels
    are ready, under the interpreter or a NumPy driver: a function of each step's exact values
    (see ``_Body``); under ``NGRAD_JIT=never`` the interpreter's own."""
    if jit_mode() == "never":
        return lambda values: interpret(tape, values)
    body = _bodies.get(text)
    if body is None:
        body = _bodies[text] = _Body(tape)
    return body


# the interpreter's scans run their steps here (``ir.prims.control.STEPS``): on the body's
# compiled driver once it is ready, else ``numpy_body``
control.STEPS["run"] = loops.steps


def prepare(tape, target="cpu", checked=True):
    """A function ``f(values)`` equal to ``run(tape, values, target)``, for calling many times.

    The plan is compiled now (unless ``NGRAD_JIT=never``, or under ``auto`` it needs more than
    ``prepare_functions`` new functions: then ``run`` tiers it; under ``auto`` with
    ``NGRAD_COMPILE`` other than ``wait`` it compiles on the worker thread from the first call on, which
    runs on the interpreter meanwhile: ``Pending``) and unrolled into a generated Python
    *driver*: input checks, allocations and kernel calls as straight-line code with every shape
    a literal, so a call costs little more than the kernels and NumPy calls themselves. Big
    buffers come from the plan's pool (``POOL_MIN_BYTES``), and a loop writes in place of a
    value that dies there where the executor would (decided once, when the driver is made).
    With threads on, a plan with loops big enough for them runs through ``run``'s step-by-step
    path, which cuts those loops into chunks. ``checked=False`` leaves the input checks out of a
    compiled plan's driver: for callers that pass exact, contiguous arrays (a scan's steps).
    """
    if target == "cuda":
        return lambda values: run(tape, values, target)
    if _in_background(tape):
        return Pending(tape)
    record = tier_for(tape, jit_mode(), now=True)
    return _prepared(tape, None if record is None else record.tier, checked)


def _in_background(tape):
    """Whether ``prepare`` leaves the compile of ``tape`` to the worker thread: under ``auto``
    unless ``NGRAD_COMPILE=wait``, when its tier is not ready yet."""
    if jit_mode() != "auto" or compile_mode() == "wait" or not tape.instrs:
        return False
    record = records.get(tape.key())
    return record is None or record.tier is None or not record.tier.ready()


def _prepared(tape, tier, checked=True):
    """The function ``prepare`` gives for ``tier`` (a driver once it is compiled)."""
    if isinstance(tier, Machine):
        return _checked(tape, tier)
    drive = driver_of(tier, checked) if tier is not None and tier.ready() else None
    if drive is None:
        return lambda values: run(tape, values)
    return drive


class Pending:
    """``prepare``'s function while the tape compiles in the background: its first call hands the
    compile to the worker thread (at first sight, as ``prepare`` compiles: no threshold), and
    until the compiled tier is published each call runs on the interpreter; from then on it
    calls the tier's driver."""

    __slots__ = ("tape", "fn")

    def __init__(self, tape):
        self.tape, self.fn = tape, None

    def __call__(self, values):
        fn = self.fn
        if fn is not None:
            return fn(values)
        tape = self.tape
        record = tier_for(tape, jit_mode(), now=True, values=values)
        tier = None if record is None else record.tier
        if tier is not None and tier.ready():
            self.fn = fn = _prepared(tape, tier)
            return fn(values)
        check(tape, values)
        return _interpreted(tape, values, record)


def _checked(tape, machine):
    """``machine.run`` behind the input checks of ``run`` (on tensors: a runtime scalar that is
    not a number fails when the arena takes it)."""
    tensors = [
        (i, tape.shapes[s], np_dtype(tape.dtypes[s]))
        for i, (s, k) in enumerate(zip(tape.inputs, tape.kinds))
        if k != "scalar"
    ]
    count = len(tape.inputs)

    def call(values):
        if len(values) != count:
            check(tape, values)
        for i, shape, dt in tensors:
            v = values[i]
            if v.__class__ is not np.ndarray or v.shape != shape or v.dtype != dt:
                check_one(tape, i, v)
        return machine.run(values)

    return call


def inline(tape, inputs, g, fallback):
    """The body of ``prepare(tape)``'s driver for a caller's generated function (``ngrad.compile``
    puts it in the function that also checks the call's signature and builds its tensors):
    ``inputs[i]`` is the expression of input i (checked like ``run`` checks it); ``g`` the
    globals the code runs in (every name the driver adds to it starts with a letter, and its
    locals too: the caller's names start with ``_``); ``fallback`` the statement run when the
    driver cannot finish the call (a sin/cos argument out of range; threads are on and the plan
    has loops big enough for them), before anything it did is seen. Returns the lines and the
    expression of each output, or None when the tape runs without a driver (not compiled yet,
    bytecode, or threads on for its loops)."""
    if _in_background(tape):  # a generated caller calls ``prepare``'s function until then
        return None
    record = tier_for(tape, jit_mode(), now=True)
    tier = None if record is None else record.tier
    if not isinstance(tier, CompiledPlan) or not tier.ready() or tier.chunks():
        return None
    return driver_code(tier, inputs, g, fallback)
