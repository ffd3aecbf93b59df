"""Background compiles: a tape's kernels compile on one worker thread while its calls run on the
interpreter, so no call waits for Numba; under ``NGRAD_COMPILE=process`` (the default on four or
more cores) the thread has a child process compile them into the disk cache (``compile_server``)
and only loads them, so Numba's front end, which holds the interpreter's lock, runs outside this
process.

Contract: ``submit(record, tape, values)`` hands ``record.tier`` (a ``CompiledPlan`` or a bytecode
``Machine`` that is not ready) to the worker thread and returns at once. The worker compiles (or
loads from the disk cache) the tier's functions, runs the tier once on copies of ``values``, along
the route its calls take (``driver.warm``), so that Numba specialises each function for exactly
the argument types the calls pass, and only then
publishes the functions: ``ready()`` turns true between two calls, never halfway through one, and
no call ever compiles. While a job is queued or running ``record.compiling`` is true (tiering then
keeps the structure on the interpreter). A compile that fails (``targets.CompileError``) leaves
the record on the interpreter for good (``record.failed``) with one ``RuntimeWarning`` per
process; any other error of the warm-up run (a value the program rejects) only leaves the tier
unpublished, to be tried again with the next call's values, ``REJECTED_MAX`` times in all: then
the record stays on the interpreter with the same warning. At most ``MAX_QUEUED`` jobs wait (each
holds a copy of its call's inputs); a structure refused meanwhile is offered again at its next
call. One thread, whatever the number of structures. A plan's kernels are warmed up on the
worker first as LLVM makes them without its loop vectoriser (``cpu.quick_first``, unless
somebody waits for the compiles), and made again in full one at a time whenever no job is
queued (``cpu.upgrade``). ``synchronize(timeout)`` waits until every job and every such upgrade
has finished (``ngrad.synchronize_compiles``); ``wait(record)`` until that record's job has.

Before a burst of jobs (it was idle) the worker leaves the interpreter's lock to the calls for
``START_S``, unless somebody waits for the compiles (``synchronize``, ``wait``): the calls that
asked for the jobs go first.

While a job runs, the worker takes its turns with the program's slow calls (interpreted, or on
a NumPy driver, counted by ``dispatch`` in ``calls``) at the points where long work looks in
(``pace.step``: planning's stages, each kernel's source, lowering every few dozen statements,
Numba's passes, each loop of a driver, each kernel it loads, each module it imports): while such
a call runs and the worker has used ``CALL_SHARE`` of the last one's own CPU time since it saw
the call begin, it waits until that call ends (``defer_to_calls``). A call then
shares the interpreter's lock with at most that much of the worker's Python, whatever else the
worker has to do, and the worker goes on between calls and at each new one: a loop that never
pauses still gets its kernels.

While jobs are pending the interpreter's switch interval is cut to ``SWITCH_S`` (restored when the
queue empties), and on Linux the timer slack of the thread that started the burst to 1 ns
(restored at its first call after the burst, ``settle``): the worker's Python (planning, typing
kernels and writing their IR, Numba's front end) holds the GIL, and a call that releases the GIL
for each NumPy operation waits, after each, a switch interval plus the slack the kernel adds to
that timed wait (50 µs by default) to get it back. From the burst's start, NumPy's OpenBLAS
runs on the cores the compile threads leave until the queue empties
(``blas.limit_numpy_threads``): its worker thread spins between the calls' products, and for
0.1 s after the last, on the core LLVM needs; and on one thread during the worker's warm-up
runs, whose products would take turns with the calls' at OpenBLAS's thread server. For the same
span the objects alive when it began are frozen out of the garbage collector's generations
(``gc.freeze``, unless the program froze some or turned it off): the full collections a
compile's churn sets off then skip them.
"""

import collections
import contextlib
import ctypes
import functools
import gc
import os
import sys
import threading
import time
import warnings

from .. import pace
from ..config import compile_mode, compile_threads, cores, debug_level
from ..ir.blas import limit_numpy_threads, one_thread_here, restore_numpy_threads
from ..targets import CompileError
from .compile_server import ahead, compile_remote, copies
from .driver import warm
from .machine import Machine
from .tiering import Decision

__all__ = ["submit", "synchronize", "wait", "pending", "settle", "defer_to_calls", "MAX_QUEUED"]

MAX_QUEUED = 16
# warm-up runs of one structure's tier that may raise (a value the program rejects, tried again
# with the next call's) before it stays on the interpreter: a fault of the engine's own (in a
# session's change, an exception in every job) had it planned and compiled again at every call
REJECTED_MAX = 3
# A thread spinning in Python, 400 np.sin of 10,000 elements on the main thread (2 cores; alone
# 29 ms): 143 ms at 2e-4 (the slack 50 µs), 80 at 5e-5, 65 at 1e-5; with a slack of 1 ns 121, 61
# and 42 ms. The spinning thread ran at 47, 48, 46 and 45 thousand loops a second (52 alone).
# Compiling (three fresh processes each, against 2e-4 and the default slack): ba's slowest call
# 21-28 -> 18-23 ms and gmm's 6-10.5 -> 5-6 at 5e-5 with a slack of 1 ns, the kernels as soon;
# at 1e-5, 20-23 and 6-6.4 ms, the kernels 40-60 ms later (the worker's Python more often
# interrupted).
SWITCH_S = 5e-5
# Before a burst of jobs (the worker was idle) it leaves the interpreter's lock to the calls for
# this long, unless somebody waits for the compiles. A job's first half-second is Python (Numba's
# import and front end, fusion), which on two cores took the lock from the very calls that asked
# for it. Fresh process, warm cache, calls 1 / 2 / 3-6 (ms), without and with it: lstm c = 64
# 142-155 / 98-148 / 39-181 and 62-80 / 27-33 / 32-55; gmm n = 1,000 43-56 / 25-65 / 4-42 and
# 23 / 3-11 / 3-11; the 100,000-point example 26-59 / 19-50 / 10-18 and 18-20 / 11 / 4-5
# (PyTorch eager: 24 / 22, 20 / 3, 47 / 5 / 3). Kernels arrive START_S later.
START_S = 0.05
# The worker's turns with the slow calls (``defer_to_calls``): at most CALL_SHARE of the last
# slow call's own CPU time (at least SHARE_MIN_S; its wall time would count the worker's turns
# and grow with them) of the worker's own CPU time outside LLVM (``pace.unlocked``) during a
# call; then it waits for the call's end, which ``call_ended`` tells it, at most WAIT_MAX_S for
# one call. A call that releases the interpreter's lock for each NumPy operation hands it to the
# worker each time and waits for it back: ba's interpreted call (394 operations, 5.6 ms alone)
# took 17-18 ms beside a thread spinning in Python, and 19-27 ms while the worker imported
# llvmlite (13 ms of Python alone), whose C parts keep the lock 0.2 ms at a stretch whatever the
# switch interval. Against the deference this replaced (it slept while the main thread's CPU
# clock advanced, at most 20 ms a process), 2 cores, three fresh processes each, alternating:
# ba's slowest call while compiling 18-20 -> 12-15 ms (warm cache 15-19 -> 12-13), ode's 21-23
# -> 14-18 ms; its kernels 0.09 s later for ba (0.71 -> 0.80 s to steady), 0.03-0.05 s for ode.
# A share of 0.6 brought them 0.02-0.04 s sooner than 0.3 and the slowest calls back to 15-16
# (ba) and 20 ms (ode).
CALL_SHARE = 0.3
SHARE_MIN_S = 0.001
WAIT_MAX_S = 0.25

_cond = threading.Condition()
_jobs: collections.deque = collections.deque()  # (record, advance, tape, values, early) not started yet
_upgrades: collections.deque = collections.deque()  # (kernel, signature, IR): ``cpu.upgrade``'s, after every job
_state = {
    "active": 0,
    "worker": None,
    "switch": None,
    "blas": None,
    "slack": None,  # (thread, its timer slack before the burst): restored by ``settle``
    "frozen": False,
    "warned": False,
    "running": None,
    "waiters": 0,
    "ident": None,
}


def _blas_share(threads):
    """The threads NumPy's OpenBLAS keeps while ``threads`` compile: the cores they leave, at
    least one."""
    return max(1, cores() - threads)


def _limit_blas(threads=1):
    """NumPy's OpenBLAS keeps the cores that ``threads`` compile threads leave, until the queue
    empties: set as a burst of jobs starts, and lowered when a job compiles on more threads (here
    or in the compile server). OpenBLAS's own threads spin for 0.1 s after their last product
    before they sleep, so the limit comes before the compiles do: set only when the first
    compile began, gmm's calls spun them on for 0.1 s of LLVM's work, three threads on two
    cores, and took 6 ms instead of 1.3."""
    with _cond:
        share, held = _blas_share(threads), _state["blas"]
        if held is None:
            before = limit_numpy_threads(share)
            _state["blas"] = None if before is None else (before, share)
        elif share < held[1] and limit_numpy_threads(share) is not None:
            _state["blas"] = (held[0], share)


def _give_blas_back():
    """Undo ``_limit_blas`` (under ``_cond``, or in a forked child)."""
    if _state["blas"] is not None:
        restore_numpy_threads(*_state["blas"])
        _state["blas"] = None


@contextlib.contextmanager
def _blas_alone():
    """The worker's warm-up run with NumPy's OpenBLAS on one thread (process-wide, for that
    run): a product of the calls and one of the run each on several threads, at once, take turns
    at OpenBLAS's thread server, the waiting one spinning: a warm mlp's call met its warm-up
    run's products and took 31-36 ms (1.4 alone)."""
    before = limit_numpy_threads(1)
    try:
        yield
    finally:
        restore_numpy_threads(before, 1)


def _freeze_heap():
    """At the start of a burst of jobs (under ``_cond``): the objects alive now leave the
    collector's generations for its permanent one (``gc.freeze``) until the burst ends, unless
    the program froze some itself or turned the collector off. A compile makes hundreds of
    thousands of objects (syntax trees, LLVM IR); the full collections their churn sets off
    traversed every object of the process, the program's, NumPy's and llvmlite's modules, and
    held the interpreter's lock for 17-20 ms (ba, gmm on two cores) in the middle of the calls."""
    if gc.isenabled() and not gc.get_freeze_count():
        gc.freeze()
        _state["frozen"] = True


def _thaw_heap():
    """Undo ``_freeze_heap`` (under ``_cond``, or in a forked child): the objects frozen are
    collected as usual again (``gc.unfreeze``)."""
    if _state["frozen"]:
        gc.unfreeze()
        _state["frozen"] = False


# the slow calls (interpreted, or on a NumPy driver) begun and ended, the CPU seconds the last one
# took, and whether the worker waits for one to end: ``dispatch`` counts them (``call_began``,
# ``call_ended``), ``defer_to_calls`` reads them
calls = {"begun": 0, "ended": 0, "cpu": 0.0, "waiting": False}
_ends = threading.Condition(threading.Lock())
# threads of the program may run slow calls at once, and an end lost between two would have the
# worker wait for a call that never ends: CPython 3.11 does not switch threads inside ``+= 1`` on
# a list's item, a free-threaded interpreter may
_counting = threading.Lock()


def call_began():
    """``dispatch``: a slow call begins."""
    with _counting:
        calls["begun"] += 1


def call_ended(cpu_s):
    """``dispatch``: a slow call that took ``cpu_s`` of its thread's CPU ended; the worker, if it
    waits for a call's end, is woken."""
    with _counting:
        calls["ended"] += 1
        calls["cpu"] = cpu_s
    if calls["waiting"]:
        _wake()


def _wake():
    with _ends:
        _ends.notify_all()


def _until_ended(began, seconds):
    """Wait (on the worker) until slow call number ``began`` has ended, at most ``seconds``;
    return the seconds waited. The flag goes up before the count is looked at, and
    ``call_ended`` counts the end before it looks at the flag: one of the two sees the other."""
    t = time.perf_counter()
    with _ends:
        calls["waiting"] = True
        try:
            _ends.wait_for(lambda: calls["ended"] >= began, seconds)
        finally:
            calls["waiting"] = False
    return time.perf_counter() - t


# the clock and the wait ``defer_to_calls`` uses (tests replace them)
_clocks = {"own": pace.locked_cpu, "wait": _until_ended}
# the slow call the worker last saw begin, its CPU time then, how long it waited for that call,
# and how long it has waited in all (``NGRAD_DEBUG=3``)
_turn = {"call": 0, "own": 0.0, "waited": 0.0, "total": 0.0}


def defer_to_calls():
    """On the worker, during a job: while a slow call runs and the worker has had its share of
    it (see the module docstring), wait until that call ends; on any other thread, or while
    somebody waits for the compiles, return at once. Returns the seconds it waited.

    >>> defer_to_calls()  # not the worker
    0.0
    """
    if threading.get_ident() != _state["ident"]:  # a call compiling for itself defers to nobody
        return 0.0
    clocks, turn = _clocks, _turn
    spent = 0.0
    while _state["waiters"] == 0:
        began, last = calls["begun"], calls["cpu"]
        if began <= calls["ended"]:  # no slow call runs
            break
        own = clocks["own"]()
        if began != turn["call"]:  # a new call: a new share of it
            turn.update(call=began, own=own, waited=0.0)
            break
        if own - turn["own"] < max(CALL_SHARE * last, SHARE_MIN_S) or turn["waited"] >= WAIT_MAX_S:
            break
        waited = clocks["wait"](began, WAIT_MAX_S - turn["waited"])
        spent += waited
        turn["waited"] += waited
        turn["total"] += waited
    return spent


class _Deferring:
    """A finder on ``sys.meta_path`` that defers to the calls before each module the worker
    imports, and finds nothing itself (not an ``importlib.abc`` subclass: importing that costs
    every ``import ngrad`` 20 ms)."""

    def find_spec(self, name, path=None, target=None):
        defer_to_calls()
        return None


def _forked():
    """In a child made by ``fork``: no worker thread came along, so neither do its jobs."""
    global _cond, _ends, _counting
    _cond, _ends, _counting = threading.Condition(), threading.Condition(threading.Lock()), threading.Lock()
    for record in [job[0] for job in _jobs] + [_state["running"]]:
        if record is not None:  # offered again at their next call here
            record.compiling = False
    _jobs.clear()
    _upgrades.clear()
    if _state["switch"] is not None:  # what the compiles had changed, the child's own again
        sys.setswitchinterval(_state["switch"])
        _give_blas_back()
        _thaw_heap()
    _give_slack_back()  # the forking thread's, inherited
    _state.update(
        active=0, worker=None, switch=None, blas=None, frozen=False, slack=None, running=None, waiters=0, ident=None
    )
    _turn.update(call=0, own=0.0, waited=0.0, total=0.0)  # a process of its own calls
    calls.update(begun=0, ended=0, cpu=0.0, waiting=False)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forked)


def pending():
    """How many jobs are queued or running."""
    return _state["active"]


def settle():
    """On the thread that started a burst of jobs, once none is pending: its timer slack as it
    was (the worker cannot set another thread's). Every call runs it: a global's test."""
    if _state["slack"] is not None and _state["active"] == 0:
        _give_slack_back()


def _give_slack_back():
    """Undo the burst's timer slack, when this is the thread it was set on."""
    slack = _state["slack"]
    if slack is not None and slack[0] == threading.get_ident():
        _state["slack"] = None
        _timer_slack(slack[1])


@functools.cache
def _prctl():
    # one library object for the process: each makes a class of its functions
    return ctypes.CDLL(None, use_errno=True).prctl


def _timer_slack(ns):
    """Set the calling thread's timer slack to ``ns`` nanoseconds and return what it was (Linux's
    ``prctl``); None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = _prctl()
        before = prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0)
        if before <= 0 or prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return before


_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30


def submit(record, tape, values, advance, early=None):
    """On the worker thread: ``advance(copies)`` (the record's encoding and planning, as tiering
    decides them, given copies of ``values``), then, when it returns ``Decision.COMPILE``, compile
    and warm ``record.tier``
    (see the module docstring); False when the queue is full (nothing was queued). ``early()``,
    when given, runs on the worker before the calls' ``START_S`` if this job starts a burst:
    what may start meanwhile (the compile server, for a job that will ask it to encode)."""
    with _cond:
        if record.compiling:
            return True
        if len(_jobs) >= MAX_QUEUED:
            return False
        record.compiling = True
        _jobs.append((record, advance, tape, copies(values), early))
        if _state["active"] == 0:
            _state["switch"] = sys.getswitchinterval()
            sys.setswitchinterval(SWITCH_S)
            if _state["slack"] is None:
                before = _timer_slack(1)
                _state["slack"] = None if before is None else (threading.get_ident(), before)
            _freeze_heap()  # after ctypes made its objects (the first time, dropping some)
            _limit_blas()
        _state["active"] += 1
        worker = _state["worker"]
        if worker is None or not worker.is_alive():
            worker = _state["worker"] = threading.Thread(target=_work, name="ngrad-compile", daemon=True)
            worker.start()
        _cond.notify_all()
    return True


def synchronize(timeout=None):
    """Wait until no compile is queued or running; False if ``timeout`` seconds passed first."""
    return _waiting(lambda: _state["active"] == 0, timeout)


def wait(record, timeout=None):
    """Wait until ``record``'s compile (if any) has finished; False if ``timeout`` passed first."""
    return _waiting(lambda: not record.compiling, timeout)


def _waiting(done, timeout):
    """Wait for ``done()``; the worker starts its jobs without ``START_S`` meanwhile."""
    with _cond:
        _state["waiters"] += 1
        _cond.notify_all()
        try:
            return _cond.wait_for(done, timeout)
        finally:
            _state["waiters"] -= 1


def _work():
    _state["ident"] = threading.get_ident()
    pace.on_step(defer_to_calls)
    if not any(isinstance(f, _Deferring) for f in sys.meta_path):
        sys.meta_path.insert(0, _Deferring())
    idle = True  # no job queued when the last one ended: the next one starts a burst
    while True:
        with _cond:
            _cond.wait_for(lambda: bool(_jobs) or bool(_upgrades))
            early = _jobs[0][4] if idle and _jobs else None
        if early is not None:
            try:
                early()
            except Exception:  # noqa: BLE001  (only a head start: the job itself does it, or says why not)
                pass
        with _cond:  # the jobs queued meanwhile are after the one seen
            upgrade = None if _jobs else _upgrades.popleft()  # a new structure's tier first
            if upgrade is None:
                if idle:  # the calls go first: a burst of jobs starts once they had START_S
                    _cond.wait_for(lambda: _state["waiters"] > 0, START_S)
                record, advance, tape, values, _ = _jobs.popleft()
                _state["running"] = record
        t, waited = time.perf_counter(), _turn["total"]
        try:
            if upgrade is not None:
                _upgrade(upgrade)
            else:
                if advance(values) is Decision.COMPILE:
                    _compile(record, record.tier, tape, values)
                if debug_level() >= 3:
                    print(
                        f"ngrad: compile job of {len(tape.instrs)} instrs: {(time.perf_counter() - t) * 1e3:.1f} ms, "
                        f"{(_turn['total'] - waited) * 1e3:.1f} of them waiting for the calls' turns",
                        file=sys.stderr,
                    )
        except Exception as e:  # noqa: BLE001  (encoding or planning failed: the interpreter runs it)
            record.failed = True
            warn_failed(e)
        finally:
            with _cond:
                if upgrade is None:
                    record.compiling = False
                    _state["running"] = None
                _state["active"] -= 1
                idle = _state["active"] == 0
                if idle and _state["switch"] is not None:
                    sys.setswitchinterval(_state["switch"])
                    _give_blas_back()
                    _thaw_heap()
                _cond.notify_all()


def _upgrade(item):
    """One kernel made quick first (``cpu.quick_first``) made again in full; one that fails keeps
    its quick machine code, which is correct."""
    from ..targets.cpu import upgrade

    _limit_blas()
    try:
        upgrade([item])
    except Exception:  # noqa: BLE001  (the disk cache refused it, say: the quick code stays)
        pass


def _compile(record, tier, tape, values):
    """Build, warm and publish ``tier``'s functions; a failed compile marks ``record``."""
    one_thread_here()  # its runs' products: no team of MKL's threads for this thread (see there)
    try:
        # the child's machine code is then loaded from disk here; a tier already on disk needs no
        # child (starting one cost a warm process 0.6-0.9 s before its first kernel)
        made = record.cached
        if not made:  # compile-ahead's threads for a plan of several new kernels, else one
            many = not isinstance(tier, Machine) and record.pending > 1
            _limit_blas(min(compile_threads(), record.pending) if many else 1)
        if compile_mode() == "process" and not made:
            made = compile_remote(tier, tape, values)
        defer_to_calls()
        if isinstance(tier, Machine):
            fn = tier.build()
            defer_to_calls()
            with _blas_alone():
                tier.code.run(fn, values)
            tier.fn = fn
        else:
            lay = tier.layout()
            if lay.kernels is None:
                kernels = tier.build(lay)
                if not made:  # on several threads where there are cores to spare
                    ahead(tier, kernels, values)
                defer_to_calls()
                # its driver is written here too, not by the first call after publication (0.3 to
                # 0.5 ms of GradBench's hello, its first evaluations after define); its new
                # kernels first without LLVM's loop vectoriser, unless somebody waits for them
                # (``cpu.quick_first``), made in full after every job queued meanwhile
                from ..targets.cpu import quick_first

                with quick_first() if _state["waiters"] == 0 else contextlib.nullcontext([]) as listed:
                    with _blas_alone():
                        warm(tier, kernels, values)
                lay.kernels = kernels
                with _cond:
                    _upgrades.extend(listed)
                    _state["active"] += len(listed)
    except CompileError as e:
        record.failed = True
        warn_failed(e)
    except Exception as e:  # noqa: BLE001  (a value the program rejects: the next call tries again)
        record.rejected += 1
        if record.rejected >= REJECTED_MAX:  # not the values, then: the interpreter runs it, said once
            record.failed = True
            warn_failed(f"{type(e).__name__}: {e}")


def warn_failed(error):
    """Say once per process that a compile failed and its program runs on the interpreter."""
    if not _state["warned"]:
        _state["warned"] = True
        warnings.warn(
            f"ngrad could not compile a program's kernels ({error}); it runs on the interpreter",
            RuntimeWarning,
            stacklevel=3,
        )
