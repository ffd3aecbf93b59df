"""The compile server: a child process that compiles kernels into the disk cache, so Numba's
front end (Python, holding its interpreter's lock) never competes with the calls of the program.

Contract: ``compile_remote(tier, tape, values)`` asks the child (one per process, started by
the first request or before it by ``start``; it imports the engine alone and pays its
compiler's start-up before it reads a request) to compile the functions of ``tier`` (a
``CompiledPlan`` of ``tape``, laid out for the current thread count, or a bytecode
``Machine``) and run them once on ``values``, so that their machine code for exactly these
argument types is in the disk cache; the caller then loads them in milliseconds. It returns True
once the child has done so, False when no child can serve (the disk cache cannot be used, the
child could not start or died, or the run failed on these values: the caller compiles in its own
process), and raises ``targets.CompileError`` when Numba could not compile. Requests and replies
are pickled frames over the child's stdin and stdout (the child writes nothing else there); the
child ends when its stdin closes, that is with its parent.

``encode_remote(tape, policy, big_steps, values)`` asks the child to encode ``tape`` as bytecode
(``machine_for``, which keeps the encoding on disk), and to compile and run its loop once on
``values``: the caller's own ``machine_for`` then reads both back in milliseconds instead of
encoding in this process (an unrolled LSTM's 5,300 instructions: 0.12-0.18 s of Python, which
the calls of the program would share the interpreter's lock with). It returns as
``compile_remote`` does. ``plan_remote(tape, values)`` likewise has the child plan ``tape``
(``plan.plan_of`` keeps the plan on disk) before compiling and running its kernels: the caller's
own ``plan_of`` reads the plan back.

``ahead(plan, kernels, values)`` (in the child, and on the compile worker thread when no child
served) compiles a plan's kernels on several threads (``NGRAD_COMPILE_THREADS``) before the
warm-up run: ``signatures`` runs the plan's driver with stand-ins for its kernels to learn the
argument types the calls will pass, and ``cpu.compile_ahead`` makes that machine code.
"""

import dataclasses
import io
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading

import numpy as np

from .. import pace
from ..config import cache_root, compile_threads
from ..ir.tape import Tape
from ..store import usable_dir
from ..targets import CompileError
from .threads import get_num_threads, set_num_threads

__all__ = [
    "compile_remote",
    "plan_remote",
    "encode_remote",
    "pickled",
    "start",
    "stop",
    "ahead",
    "signatures",
    "copies",
    "main",
]

_HEADER = struct.Struct("<Q")
_lock = threading.Lock()
_child = {"proc": None, "dead": False}


def _forked():
    """In a child made by ``fork``: the parent's compile server is the parent's (its pipes must
    not be shared); this process starts its own when it needs one."""
    global _lock
    _lock = threading.Lock()
    _child.update(proc=None, dead=False)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forked)


def compile_remote(tier, tape, values, meanwhile=None):
    """See the module docstring; ``meanwhile()`` runs after the request is sent, while the child
    works (by default what loading the child's machine code needs in this process)."""
    from .machine import Machine

    if isinstance(tier, Machine):
        return _request(("machine", tier.code, values, 1, cache_root()), meanwhile or _loader)
    return plan_remote(tape, values, meanwhile)


def plan_remote(tape, values, meanwhile=None):
    """Ask the child to plan ``tape`` (``plan.plan_of`` keeps the plan on disk), compile its
    kernels and run them once on ``values``: the caller then reads the plan back and loads the
    kernels instead of planning in its own process. Returns as ``compile_remote`` does."""
    return _request(("plan", tape, values, get_num_threads(), cache_root()), meanwhile or _loader)


def _loader():
    # what loading the child's machine code needs in this process, done while the child works:
    # the CPU target (no Numba: the child keeps what it compiles as object files)
    from ..targets import cpu  # noqa: F401


def encode_remote(tape, policy, big_steps, values):
    """See the module docstring."""
    return _request(("encode", (tape, policy, big_steps), values, 1, cache_root()), None)


def _request(request, meanwhile):
    """Send ``request`` to the child and wait for its reply (see ``compile_remote``)."""
    if _child["dead"] or usable_dir() is None:
        if meanwhile is not None:
            meanwhile()
        return False
    try:
        frame = _frame(request)
    except (pickle.PickleError, AttributeError, TypeError):  # this one cannot travel: compiled here
        if meanwhile is not None:
            meanwhile()
        return False
    with _lock:
        proc = _child["proc"] or _start()
        try:
            if proc is not None:
                proc.stdin.write(frame)
                proc.stdin.flush()
        except OSError:
            proc, _child["dead"] = None, True
        if meanwhile is not None:
            meanwhile()
        if proc is None:
            return False
        try:
            reply = _receive(proc.stdout)
        except (OSError, EOFError, pickle.PickleError, struct.error):
            _child["dead"] = True
            return False
    if reply[0] == "compile_error":
        raise CompileError(reply[1])
    return reply[0] == "ok"


def start():
    """Start the child now unless one runs or none can, without waiting for it: the compile
    worker does so before a burst's ``START_S`` when its first job will ask the child to encode,
    so that the child's start-up (0.13-0.15 s of Python and imports on another core) overlaps
    the calls' head start instead of following it."""
    if _child["dead"] or usable_dir() is None:
        return
    with _lock:
        if _child["proc"] is None:
            _start()


def stop():
    """End the child, if one runs (its next start makes a new one)."""
    with _lock:
        proc, _child["proc"] = _child["proc"], None
        if proc is not None:
            proc.stdin.close()
            proc.wait(timeout=30)


# The child imports the engine without the facade (``ngrad/__init__.py`` and all it imports: half
# a second): the engine never imports the facade, so a bare package module stands in for it.
_BOOT = (
    "import sys, types; package = types.ModuleType('ngrad'); package.__path__ = [sys.argv[1]]; "
    "sys.modules['ngrad'] = package; from ngrad.engine.runtime.compile_server import main; main()"
)


def _start():
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # the child's BLAS on one thread: its runs only warm up, and OpenBLAS's second thread spun
    # for 0.1 s after each of their products on the cores the parent's calls and LLVM share
    # (lstm's calls 9-13 took 21-25 ms instead of 13: three busy threads on two cores)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, package],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
    except OSError:
        _child["dead"] = True
        return None
    _child["proc"] = proc
    return proc


class _Pickler(pickle.Pickler):
    """Tuples of the facade's subclasses (``ngrad.Size`` in a shape or a parameter) travel as
    plain tuples: the child imports the engine alone, and the engine reads them as tuples. A
    tape travels without what this process memoized on it (its key, the interpreter's steps,
    which hold the primitives' functions): the child makes its own. Each object it is asked
    about is a ``pace.tick``: pickling ba's plan was one 4.6 ms stretch of the compile worker
    under the interpreter's lock."""

    def reducer_override(self, obj):
        pace.tick()
        if isinstance(obj, tuple) and type(obj) is not tuple and not hasattr(obj, "_fields"):
            return tuple, (tuple(obj),)
        if type(obj) is Tape:
            return _tape, tuple(getattr(obj, f.name) for f in _TAPE_FIELDS)
        return NotImplemented


_TAPE_FIELDS = [f for f in dataclasses.fields(Tape) if f.init]


def _tape(*values):
    return Tape(*values)


def pickled(obj):
    """``obj`` pickled as requests travel (see ``_Pickler``): what ``plan.plan_of`` stores."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def _frame(obj):
    """``obj`` pickled, with its length in front."""
    data = pickled(obj)
    return _HEADER.pack(len(data)) + data


def _send(stream, obj):
    stream.write(_frame(obj))
    stream.flush()


def _receive(stream):
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the compile server ended")
    (n,) = _HEADER.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("the compile server ended")
    return pickle.loads(data)


def _serve(request):
    """Compile and run one request's functions (in the child)."""
    from ..targets.cpu import kernel
    from .driver import warm
    from .plan import plan_of

    kind, what, values, n_threads, root = request
    os.environ["NGRAD_CACHE_DIR"] = root  # the parent's cache, wherever it points now
    if kind == "encode":
        from .machine import machine_for

        machine = machine_for(*what)  # kept on disk, its loop moved onto one compiled before
        if machine is None:  # not bytecode: the parent plans it
            return
        kind, what = "machine", machine.code
    if kind == "machine":
        fn = kernel(what.source)
        what.run(fn, values)
        return
    set_num_threads(n_threads)
    plan = plan_of(what)
    lay = plan.layout()
    kernels = plan.build(lay)
    ahead(plan, kernels, values)
    warm(plan, kernels, values)  # the parent's calls' argument types


def ahead(plan, kernels, values):
    """Make the machine code ``plan``'s ``kernels`` (its layout's, not yet published) need for
    calls on ``values`` on ``compile_threads()`` threads, into the disk cache, for the warm-up
    run to load: nothing where that is 1 or there is one kernel (the run compiles them one at a
    time)."""
    threads = compile_threads()
    if threads > 1 and len({id(k) for k in kernels if k is not None}) > 1:
        from ..targets.cpu import compile_ahead

        compile_ahead(signatures(plan, kernels, values), threads)


def copies(values):
    """A call's inputs as a warm-up or stand-in run reads them: arrays copied (the caller may
    update its own in place meanwhile; stand-ins overwrite theirs), with their writeable flag,
    which a kernel's signature holds."""
    out = []
    for v in values:
        if isinstance(v, np.ndarray):
            c = v.copy()
            c.flags.writeable = v.flags.writeable
            v = c
        out.append(v)
    return out


def signatures(plan, kernels, values):
    """``[(kernel, signature)]``: each of ``kernels`` (``plan``'s layout's, not yet published)
    with the argument signature (``objects.signature``) its driver passes it on ``values``,
    learnt by running the driver on copies of them with stand-ins that record their arguments
    and fill with zeros the writeable arrays among them that the run made (the glue between
    computes, quietly, from those; what the plan keeps, its windows' bounds and constants, is
    left alone): as far as that run got; [] where threads run the loops in chunks (``ahead``
    compiles what it finds)."""
    from ..targets.objects import signature
    from .buffers import root
    from .driver import driver_of

    seen: list = []
    kept: set = set()

    def stand_in(kernel):
        def call(*args):
            seen.append((kernel, signature(args)))
            for a in args:
                if isinstance(a, np.ndarray) and a.flags.writeable and id(root(a)) not in kept:
                    a.fill(0)

        call.ready = False  # type: ignore[attr-defined]
        return call

    drive = driver_of(plan, kernels=[k and stand_in(k) for k in kernels], keep=False)
    if drive is not None:  # the arrays the driver holds from one call to the next
        for v in drive.__globals__.values():
            for a in v if isinstance(v, (list, tuple)) else (v,):
                if isinstance(a, np.ndarray):
                    kept.add(id(root(a)))
    try:
        with np.errstate(all="ignore"):
            if drive is not None:
                drive(copies(values))
    except Exception:  # noqa: BLE001  (zeros a program rejects: what was seen so far)
        pass
    return seen


def main():
    """The child's loop: one reply per request until stdin closes."""
    from ..targets.cpu import warm_up

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; the child ends with its stdin
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but replies on the protocol's stream
    warm_up()
    while True:
        try:
            request = _receive(inp)
        except (EOFError, OSError, KeyboardInterrupt):
            return
        try:
            _serve(request)
            reply = ("ok",)
        except CompileError as e:
            reply = ("compile_error", str(e))
        except Exception as e:  # noqa: BLE001  (the parent compiles it itself and sees the error)
            reply = ("error", f"{type(e).__name__}: {e}")
        try:
            _send(out, reply)
        except OSError:  # the parent has ended: so does the child, quietly
            return
