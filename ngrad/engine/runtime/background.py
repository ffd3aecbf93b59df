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
unpublished, to be tried again with the next call's values. At most ``MAX_QUEUED`` jobs wait (each
holds a copy of its call's inputs); a structure refused meanwhile is offered again at its next
call. One thread, whatever the number of structures. A plan's kernels are warmed up on the
worker first as LLVM makes them without its loop vectoriser (``cpu.quick_first``, unless
somebody waits for the compiles), and made again in full one at a time whenever no job is
queued (``cpu.upgrade``). ``synchronize(timeout)`` waits until every job and every such upgrade
has finished (``ngrad.synchronize_compiles``); ``wait(record)`` until that record's job has.

Before a burst of jobs (it was idle) the worker leaves the interpreter's lock to the calls for
``START_S``, unless somebody waits for the compiles (``synchronize``, ``wait``): the calls that
asked for the jobs go first.

While a job runs, the worker defers to a busy main thread (``defer_to_calls``): at each module
it imports (Numba's import and its first compile's registries, the bulk of a job's Python on a
warm cache) and between a job's phases, it sleeps while the main thread's CPU time shows it
running, in ``SLICE_S`` steps, for at most ``DEFER_SHARE`` times the worker's own CPU time so far
and at most ``DEFER_MAX_S`` in all, once per process: a new script's first calls take the lock
first, yet a loop that never pauses gets its kernels at most ``DEFER_MAX_S`` later.

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

from ..config import compile_mode, compile_threads, cores
from ..ir.blas import limit_numpy_threads, restore_numpy_threads
from ..targets import CompileError
from .compile_server import ahead, compile_remote, copies
from .driver import warm
from .machine import Machine
from .tiering import Decision

__all__ = ["submit", "synchronize", "wait", "pending", "settle", "defer_to_calls", "MAX_QUEUED"]

MAX_QUEUED = 16
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
# The worker's deference to the main thread (``defer_to_calls``): the main thread counts as busy
# when its CPU time grew by at least BUSY of the wall time over the last BUSY_WINDOW_S or the
# last slice slept; the worker sleeps SLICE_S at a time, at most DEFER_SHARE times its own CPU
# time (it keeps half the time in a loop that never pauses) and at most DEFER_MAX_S in the
# process's life. 2 cores, fresh process, 30 calls of the 100,000-point example while its kernel
# compiles or loads, the mean of calls 2-30 per run (ms), without and with: 8.4-9.1 and 7.0-7.3
# (PyTorch eager, one thread: 3.0-3.5). Without the cap (DEFER_SHARE = 2) it was 7.9-9.4 and
# 5.3-6.1, but PyTorch's polynomial loop (benchmarks/poly_loop.py) then took 0.2 s longer in all
# (its calls are Python, which shares the lock evenly with the worker anyway, and its kernels
# came later), 0.16 s with a cap of 0.1 s a burst (it has several bursts), and within the noise
# with a cap of 0.1 s. That mean counted calls whose turn to share the lock with the worker had
# only been put off past call 30: timing a loop that goes on calling until the kernels arrive
# (``benchmarks/latency.py``), a 0.1 s cap put them off by 0.1-0.15 s (ode 0.36 s without
# deference, 0.51 with it; gmm 0.62 and 0.72-0.86; the example 0.15 and 0.19), and the slowest
# call stayed as slow (ode 16 ms, gmm 40-49, the example 12-14). 0.02 s keeps a short burst of
# calls ahead of the worker: ode 0.38, gmm 0.65-0.69, the example 0.17. A sleep inside an import
# holds the import lock: a call importing a module for the first time meanwhile waits one
# slice, and is then seen resting.
BUSY = 0.3
BUSY_WINDOW_S = 0.005
SLICE_S = 0.001
DEFER_SHARE = 1.0
DEFER_MAX_S = 0.02

_cond = threading.Condition()
_jobs: collections.deque = collections.deque()  # (record, advance, tape, values) not started yet
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


def _main_cpu():
    """The main thread's CPU time in seconds, or None where the platform cannot tell."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(threading.main_thread().ident))
    except (AttributeError, OSError):
        return None


# the clocks ``defer_to_calls`` reads (tests replace them)
_clocks = {"main": _main_cpu, "own": time.thread_time, "now": time.perf_counter, "sleep": time.sleep}
# the worker's CPU time when it started, seconds it has slept; the last look at the main thread
# (its CPU time, the wall time) and whether it was busy then
_pace = {"start": None, "slept": 0.0, "cpu": None, "wall": 0.0, "busy": False}


def _new_job():
    clocks = _clocks
    if _pace["start"] is None:
        _pace["start"] = clocks["own"]()
    _pace.update(cpu=clocks["main"](), wall=clocks["now"](), busy=False)


def defer_to_calls():
    """On the worker, during a job: sleep while the main thread is busy (see the module
    docstring), unless somebody waits for the compiles; returns the seconds slept."""
    if threading.get_ident() != _state["ident"]:  # a call compiling for itself defers to nobody
        return 0.0
    clocks, pace = _clocks, _pace
    slept = 0.0
    while _state["waiters"] == 0:
        cpu, now = clocks["main"](), clocks["now"]()
        if cpu is None or pace["cpu"] is None:
            break
        span = now - pace["wall"]
        if slept or span >= BUSY_WINDOW_S:  # a new look: over the last window, or the slice slept
            pace["busy"] = cpu - pace["cpu"] >= BUSY * span
            pace["cpu"], pace["wall"] = cpu, now
        allowed = min(DEFER_MAX_S, DEFER_SHARE * (clocks["own"]() - pace["start"]))
        if not pace["busy"] or pace["slept"] + SLICE_S > allowed:
            break
        clocks["sleep"](SLICE_S)
        pace["slept"] += SLICE_S
        slept += SLICE_S
    return slept


class _Deferring:
    """A finder on ``sys.meta_path`` that defers to the calls before each module the worker
    imports, and finds nothing itself (not an ``importlib.abc`` subclass: importing that costs
    every ``import ngrad`` 20 ms)."""

    def find_spec(self, name, path=None, target=None):
        defer_to_calls()
        return None


def _forked():
    """In a child made by ``fork``: no worker thread came along, so neither do its jobs."""
    global _cond
    _cond = threading.Condition()
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
    _pace.update(start=None, slept=0.0)  # a process of its own first calls


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


def submit(record, tape, values, advance):
    """On the worker thread: ``advance(copies)`` (the record's encoding and planning, as tiering
    decides them, given copies of ``values``), then, when it returns ``Decision.COMPILE``, compile
    and warm ``record.tier``
    (see the module docstring); False when the queue is full (nothing was queued)."""
    with _cond:
        if record.compiling:
            return True
        if len(_jobs) >= MAX_QUEUED:
            return False
        record.compiling = True
        _jobs.append((record, advance, tape, copies(values)))
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
    if not any(isinstance(f, _Deferring) for f in sys.meta_path):
        sys.meta_path.insert(0, _Deferring())
    idle = True  # no job queued when the last one ended: the next one starts a burst
    while True:
        with _cond:
            _cond.wait_for(lambda: bool(_jobs) or bool(_upgrades))
            upgrade = None if _jobs else _upgrades.popleft()  # a new structure's tier first
            if upgrade is None:
                if idle:  # the calls go first: a burst of jobs starts once they had START_S
                    _cond.wait_for(lambda: _state["waiters"] > 0, START_S)
                record, advance, tape, values = _jobs.popleft()
                _state["running"] = record
        try:
            if upgrade is not None:
                _upgrade(upgrade)
            else:
                _new_job()
                if advance(values) is Decision.COMPILE:
                    _compile(record, record.tier, tape, values)
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
    try:
        # the child's machine code is then loaded from disk here; a tier already on disk needs no
        # child (starting one cost a warm process 0.6-0.9 s before its first kernel)
        made = record.cached
        if not made:  # compile-ahead's threads for a plan of several new kernels, else one
            many = not isinstance(tier, Machine) and record.pending > 1
            _limit_blas(min(compile_threads(), record.pending) if many else 1)
        if compile_mode() == "process" and not made:
            made = compile_remote(tier, tape, values, meanwhile=_warm_up)
        _defer_in_compiles()
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
    except Exception:  # noqa: BLE001  (a value the program rejects: the next call tries again)
        pass


def _defer_in_compiles():
    """Numba told to defer to the calls at each of its compiler passes, once it is imported
    (the import itself defers module by module; a job whose kernels all load as machine code
    never imports it)."""
    from ..targets import cpu

    cpu.on_compile_step(defer_to_calls)
    defer_to_calls()


def _warm_up():
    # what loading the child's machine code needs here: the CPU target (no Numba: the child
    # keeps what it compiles as object files, see targets/objects.py)
    from ..targets import cpu  # noqa: F401


def warn_failed(error):
    """Say once per process that a compile failed and its program runs on the interpreter."""
    if not _state["warned"]:
        _state["warned"] = True
        warnings.warn(
            f"ngrad could not compile a program's kernels ({error}); it runs on the interpreter",
            RuntimeWarning,
            stacklevel=3,
        )
