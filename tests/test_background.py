"""Background compiles (``runtime/background.py``, the default under ``NGRAD_JIT=auto``), in the
compile server's child process and on the worker thread itself: calls run on the interpreter
while the worker compiles, the results never change when the
compiled tier takes over (plans and bytecode), a compile that fails leaves the program running
with one warning, and a burst of new structures keeps one thread and a bounded queue."""

import os
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import ngrad
from ngrad.engine.config import compile_mode
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.runtime import background, compile_server, dispatch
from ngrad.engine.targets import CompileError


@pytest.fixture(autouse=True, params=["process", "thread"])
def _background(request, monkeypatch, tmp_path):
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_COMPILE", request.param)
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path / "kernels"))
    dispatch.records.clear()  # each test sees its structures new, whatever ran before
    cpu = sys.modules.get("ngrad.engine.targets.cpu")
    if cpu is not None:
        cpu._memory.clear()  # and compiles their kernels anew
    yield
    assert background.synchronize(timeout=120)
    compile_server.stop()


def _value_and_grad(x0, f):
    x = ngrad.tensor(x0, requires_grad=True)
    y = f(x)
    y.backward()
    return y.item(), x.grad.numpy()


def _reference(x0, f, monkeypatch):
    with monkeypatch.context() as m:
        m.setenv("NGRAD_JIT", "never")
        return _value_and_grad(x0, f)


def test_a_loop_gives_the_interpreters_results_before_during_and_after_its_compile(monkeypatch, rng):
    def f(x):
        return ((x.sin() * x.exp()) / (1 + x * x)).sum() + (x.tanh() ** 3).mean()

    x0 = rng.standard_normal(1000)
    want = _reference(x0, f, monkeypatch)
    before = set(dispatch.records)
    tiers = []
    for i in range(60):
        value, grad = _value_and_grad(x0, f)
        np.testing.assert_allclose(value, want[0], rtol=1e-12)
        np.testing.assert_allclose(grad, want[1], rtol=1e-12, atol=1e-15)
        new = [r for k, r in dispatch.records.items() if k not in before]
        tiers.append(any(r.tier is not None and r.tier.ready() for r in new))
        if i == 30:
            assert ngrad.synchronize_compiles(timeout=120)
    # interpreted first, compiled once the worker published the kernels, and never failed
    assert not tiers[0] and tiers[-1]
    assert not any(r.failed for k, r in dispatch.records.items() if k not in before)


def test_a_bytecode_tape_compiles_its_loop_in_the_background(monkeypatch, rng):
    def f(x):
        h = x
        for _ in range(80):  # 80 small steps: hundreds of instructions on 16 elements
            h = (h * 0.9).sin() + 0.1 * x
        return (h * h).sum()

    x0 = rng.standard_normal(16)
    want = _reference(x0, f, monkeypatch)
    for _ in range(3):
        np.testing.assert_allclose(_value_and_grad(x0, f)[1], want[1], rtol=1e-10)
    assert ngrad.synchronize_compiles(timeout=300)
    from ngrad.engine.runtime.machine import Machine

    machines = [r for r in dispatch.records.values() if isinstance(r.tier, Machine) and r.tier.ready()]
    assert machines, "the tape ran as bytecode"
    value, grad = _value_and_grad(x0, f)
    np.testing.assert_allclose(value, want[0], rtol=1e-10)
    np.testing.assert_allclose(grad, want[1], rtol=1e-10)


def test_numpys_openblas_keeps_the_cores_the_compiles_leave_while_they_run(monkeypatch, rng):
    """From the start of a burst of jobs (planning included, so that OpenBLAS's spinning threads
    are asleep when LLVM starts) until it ends, NumPy's OpenBLAS runs on the threads the compile
    threads leave (``background._blas_share``), and on one thread during the worker's warm-up
    runs (a warm-up product and a call's, each threaded, take turns at OpenBLAS's server),
    whether the kernels compile or only load; then it gets its count back."""
    from ngrad.engine.ir import blas
    from ngrad.engine.targets import cpu

    if blas._numpy_openblas() is None:
        pytest.skip("NumPy's BLAS is not OpenBLAS")
    set_count, count = blas._numpy_openblas()
    start = count()
    seen, real = [], background.warm
    monkeypatch.setattr(background, "warm", lambda *args: seen.append(count()) or real(*args))
    planned, advance = [], dispatch.advance

    def planning(*args):  # the worker's planning (a call may plan too, when it can compile at once)
        if threading.current_thread().name == "ngrad-compile":
            planned.append(count())
        return advance(*args)

    monkeypatch.setattr(dispatch, "advance", planning)

    def f(x):
        return ((x @ x.T).tanh() * 0.5 + x.sum()).sum()

    x0 = rng.standard_normal((60, 60))
    want = _reference(x0, f, monkeypatch)
    try:
        set_count(3)
        # compiled, then loaded from disk in a process that forgot it, then so with two cores left
        for share in (1, 1, 2):
            monkeypatch.setattr(background, "_blas_share", lambda threads, share=share: share)
            seen.clear()
            planned.clear()
            dispatch.records.clear()
            cpu._memory.clear()
            for _ in range(300):  # calls go on until the job is done
                got = _value_and_grad(x0, f)
                np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
                np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)
                if seen and background.pending() == 0:
                    break
                time.sleep(0.005)
            assert ngrad.synchronize_compiles(timeout=300)
            assert seen and set(seen) == {1}
            assert planned and set(planned) == {share}
            assert count() == 3
    finally:
        set_count(start)


def _encodings(x0, f, monkeypatch):
    """Three calls of ``f`` (value and gradient) and its compiles, watching where bytecode is
    encoded, then one more: ``(machines, encoded, asked)``, the bytecode records made and how
    many tapes this process encoded and asked the compile server to encode. Every result equals
    the interpreter's."""
    from ngrad.engine.backend import bytecode
    from ngrad.engine.runtime.machine import Machine

    want = _reference(x0, f, monkeypatch)
    encoded, asked = [], []
    real_encode, real_remote = bytecode.encode, dispatch.encode_remote
    with monkeypatch.context() as m:
        m.setattr(bytecode, "encode", lambda tape: encoded.append(tape) or real_encode(tape))
        m.setattr(dispatch, "encode_remote", lambda *a: asked.append(a) or real_remote(*a))
        before = set(dispatch.records)
        got = [_value_and_grad(x0, f) for _ in range(3)][-1]
        assert ngrad.synchronize_compiles(timeout=300)
        for value, grad in (got, _value_and_grad(x0, f)):
            np.testing.assert_allclose(value, want[0], rtol=1e-10)
            np.testing.assert_allclose(grad, want[1], rtol=1e-10)
    new = [r for k, r in dispatch.records.items() if k not in before]
    machines = [r for r in new if isinstance(r.tier, Machine)]
    assert machines and all(r.tier.ready() and not r.failed for r in machines)
    return machines, len(encoded), len(asked)


def test_the_compile_server_encodes_bytecode_and_this_process_reads_it_back(monkeypatch, rng):
    """Under ``process`` the child encodes a bytecode tape and compiles its loop: this process
    encodes nothing (its calls would share the interpreter's lock with that Python) and asks
    the child once per structure."""
    if compile_mode() != "process":
        pytest.skip("the compile server serves NGRAD_COMPILE=process")

    def f(x):
        h = x
        for _ in range(70):
            h = (h * 0.8).cos() + 0.2 * x
        return (h * h).sum()

    monkeypatch.setattr(background, "compile_remote", lambda *a, **k: pytest.fail("asked to compile again"))
    machines, encoded, asked = _encodings(rng.standard_normal(12), f, monkeypatch)
    assert all(r.tier.cached for r in machines)
    assert (encoded, asked) == (0, len(machines))


def test_the_compile_server_plans_and_this_process_reads_the_plan_back(monkeypatch, rng):
    """Under ``process`` the child plans a new structure (fusion, layout, kernel sources: Python
    that this process's calls would share the interpreter's lock with) as well as compiling it:
    this process reads the plan back from the disk cache, asks the child once, and never asks it
    to compile that plan again. Under ``thread`` the worker plans here."""
    from ngrad.engine.runtime import plan

    monkeypatch.setitem(compile_server._child, "dead", False)  # whatever a test before left
    # as in a process that has made no kernel yet (else a small plan is made in its first call)
    monkeypatch.setattr(dispatch, "kernels_made", lambda: False)
    made, asked = [], []
    real_init, real_remote = plan.CompiledPlan.__init__, dispatch.plan_remote
    monkeypatch.setattr(plan.CompiledPlan, "__init__", lambda self, *a, **k: made.append(1) or real_init(self, *a, **k))
    monkeypatch.setattr(dispatch, "plan_remote", lambda *a, **k: asked.append(1) or real_remote(*a, **k))
    monkeypatch.setattr(background, "compile_remote", lambda *a, **k: pytest.fail("asked to compile again"))

    def f(x):
        return ((x.sin() * x.exp()) / (1 + x * x)).sum() + (x @ x.T).tanh().sum()

    x0 = rng.standard_normal((30, 30))
    want = _reference(x0, f, monkeypatch)
    before = set(dispatch.records)
    for _ in range(3):
        got = _value_and_grad(x0, f)
    assert ngrad.synchronize_compiles(timeout=120)
    new = [r for k, r in dispatch.records.items() if k not in before]
    assert new and all(r.tier is not None and r.tier.ready() for r in new)
    got = _value_and_grad(x0, f)  # on the kernels
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    if compile_mode() == "process":
        assert (len(made), len(asked)) == (0, len(new))
    else:
        assert (len(made), len(asked)) == (len(new), 0)


def test_scans_written_out_are_encoded_by_the_compile_server_in_either_mode(monkeypatch, rng):
    """A scan written out for bytecode is unrolled and encoded by the child under ``thread`` too
    (that Python shared the interpreter's lock with the calls); under ``thread`` a long tape
    without scans is still encoded here."""

    def step(h, x):
        h = (h * 0.8 + x).tanh() * 0.9 + 0.1 * x
        return h, (h * h).sum()

    def scanned(x):
        h, ys = ngrad.scan(step, x[0], x)
        return (h * h).sum() + ys.sum()

    def written(x):
        h = x[0]
        for t in range(x.shape[0]):
            h, _ = step(h, x[t])
        return (h * h).sum()

    x0 = rng.standard_normal((40, 6))
    for f, remote in ((scanned, True), (written, compile_mode() == "process")):
        machines, encoded, asked = _encodings(x0, f, monkeypatch)
        assert (asked, encoded) == ((len(machines), 0) if remote else (0, len(machines)))


def test_the_compile_server_starts_while_the_calls_go_first_unless_the_encoding_is_on_disk(monkeypatch, rng):
    """A new structure whose scans the child will encode starts the child on the worker before
    the calls' head start (``START_S``), not when the encode request is sent: its start-up
    overlaps that wait. Once the encoding is on disk, a new record of the same structure starts
    no child. Results are the interpreter's throughout."""

    def step(h, x):
        h = (h * 0.7 + x).sin() * 0.9 + 0.1 * x
        return h, (h * h).sum()

    def f(x):
        h, ys = ngrad.scan(step, x[0], x)
        return (h * h).sum() + ys.sum()

    assert ngrad.synchronize_compiles(timeout=300)  # the worker idle: the next job starts a burst
    events = []
    real_start, real_remote = compile_server._start, dispatch.encode_remote
    monkeypatch.setattr(compile_server, "_start", lambda: events.append("start") or real_start())
    monkeypatch.setattr(dispatch, "encode_remote", lambda *a: events.append("encode") or real_remote(*a))
    x0 = rng.standard_normal((30, 5))
    for on_disk in (False, True):
        compile_server.stop()
        monkeypatch.setitem(compile_server._child, "dead", False)
        monkeypatch.setattr(dispatch, "records", {})  # a new record of the same structure
        events.clear()
        machines, encoded, asked = _encodings(x0, f, monkeypatch)
        assert encoded == 0
        assert events == ([] if on_disk else ["start", "encode"]), events
        assert all(r.tier.cached for r in machines)


def test_the_first_call_after_a_compile_compiles_nothing(monkeypatch, rng):
    # x[:, idx] is a NumPy result laid out with its axes permuted (not C-contiguous): the warm-up
    # runs the route the calls take, so no loop meets a layout it has no machine code for
    def f(x):
        idx = ngrad.tensor(np.arange(12).reshape(3, 4) % 5)
        y = x[:, idx]
        return (y.sin() * y + y * y).sum()

    x0 = rng.standard_normal((6, 5))
    want = _reference(x0, f, monkeypatch)
    for _ in range(3):
        _value_and_grad(x0, f)
    assert background.synchronize(timeout=120)
    plans = [r.tier for r in dispatch.records.values() if r.tier is not None and hasattr(r.tier, "layout")]
    kernels = [k for p in plans if p.ready() for k in p.layout().kernels if k is not None]
    assert kernels
    before = [k.signatures() for k in kernels]
    value, grad = _value_and_grad(x0, f)
    assert [k.signatures() for k in kernels] == before
    np.testing.assert_allclose(value, want[0], rtol=1e-12)
    np.testing.assert_allclose(grad, want[1], rtol=1e-12)


def test_a_compile_that_fails_warns_once_and_the_program_runs_on(monkeypatch, rng):
    from ngrad.engine.runtime.plan import CompiledPlan

    class Broken:
        def __call__(self, *args):
            raise CompileError("TypingError in kernel k0: a planted failure")

    monkeypatch.setattr(CompiledPlan, "build", lambda self, lay: [None if s is None else Broken() for s in lay.sources])
    monkeypatch.setitem(background._state, "warned", False)

    def f(x):
        return (x.cos() * x.sinh()).sum()

    x0 = rng.standard_normal(300)
    want = _reference(x0, f, monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            np.testing.assert_allclose(_value_and_grad(x0, f)[1], want[1], rtol=1e-12)
            assert background.synchronize(timeout=60)
        np.testing.assert_allclose(_value_and_grad(x0, f)[1], want[1], rtol=1e-12)
    ours = [w for w in caught if "could not compile" in str(w.message)]
    assert len(ours) == 1 and issubclass(ours[0].category, RuntimeWarning)
    assert "planted failure" in str(ours[0].message)


def test_a_warm_up_that_keeps_raising_is_tried_a_few_times_then_warned_about(monkeypatch, rng):
    """A warm-up run that raises something other than a compile error may be the values' fault
    (the next call's are tried): ``REJECTED_MAX`` tries, then the structure stays on the
    interpreter with one warning naming the error, instead of being compiled again at every call
    (a fault of the engine's own did that, silently). The results are the interpreter's."""
    if compile_mode() == "process":  # the child's run fails first: the same fault, compiled here
        monkeypatch.setitem(compile_server._child, "dead", True)
    tries = []

    def broken(*args):
        tries.append(1)
        raise ValueError("a planted fault")

    monkeypatch.setattr(background, "warm", broken)
    monkeypatch.setitem(background._state, "warned", False)

    def f(x):
        return (x.cos() * x.sinh()).sum() + (x * x.exp()).mean()

    x0 = rng.standard_normal(300)
    want = _reference(x0, f, monkeypatch)
    before = set(dispatch.records)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(8):
            np.testing.assert_allclose(_value_and_grad(x0, f)[1], want[1], rtol=1e-12)
            assert background.synchronize(timeout=60)
    new = [r for k, r in dispatch.records.items() if k not in before]
    assert new and all(r.failed for r in new if r.rejected)
    assert len(tries) == background.REJECTED_MAX * sum(1 for r in new if r.rejected)
    ours = [w for w in caught if "could not compile" in str(w.message)]
    assert len(ours) == 1 and "ValueError: a planted fault" in str(ours[0].message)


def test_the_same_failure_in_the_calling_thread_also_falls_back(monkeypatch, rng):
    from ngrad.engine.runtime.plan import CompiledPlan

    def broken(self, lay):
        raise CompileError("LoweringError in kernel k1: planted")

    monkeypatch.setenv("NGRAD_COMPILE", "wait")
    monkeypatch.setattr(CompiledPlan, "build", broken)
    monkeypatch.setitem(background._state, "warned", False)
    x0 = rng.standard_normal(50)

    def f(x):
        return (x * x.atan()).sum()

    want = _reference(x0, f, monkeypatch)
    with pytest.warns(RuntimeWarning, match="could not compile"):
        for _ in range(3):
            np.testing.assert_allclose(_value_and_grad(x0, f)[1], want[1], rtol=1e-12)


def test_many_new_structures_keep_one_thread_and_a_bounded_queue(monkeypatch, rng):
    monkeypatch.setattr(background, "MAX_QUEUED", 3)
    started = threading.active_count()
    seen = []
    for n in range(1, 13):  # 12 structures, a new program each, for a queue of 3
        x0 = rng.standard_normal((2,) * (n % 5 + 1))
        k = float(n)

        def f(x, k=k, n=n):
            y = x
            for _ in range(n % 7 + 1):
                y = (y * k).sin()
            return y.sum()

        for _ in range(2):
            _value_and_grad(x0, f)
            seen.append(background.pending())
    assert max(seen) <= background.MAX_QUEUED + 1  # the queue and the job running
    assert threading.active_count() <= started + 1
    assert background.synchronize(timeout=300)
    assert background.pending() == 0


def test_a_prepared_program_runs_interpreted_until_its_compile_is_published(monkeypatch, rng):
    """``prepare`` (``ngrad.compile``'s programs) hands the compile to the worker at the first
    call (no threshold), runs on the interpreter until the tier is published, then on its driver;
    every call gives the interpreter's result."""
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    x = b.input((64,), "f64")
    tape = b.finish([((x * x).sin() + x).sum(axes=(0,), keepdim=False)])
    v = [rng.standard_normal(64)]
    want = interpret(tape, v)
    fn = dispatch.prepare(tape)
    assert isinstance(fn, dispatch.Pending)
    np.testing.assert_allclose(fn(v)[0], want[0], rtol=1e-12)
    assert ngrad.synchronize_compiles(timeout=120)
    np.testing.assert_allclose(fn(v)[0], want[0], rtol=1e-12)
    assert fn.fn is not None and dispatch.records[tape.key()].tier.ready()
    np.testing.assert_allclose(fn(v)[0], want[0], rtol=1e-12)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="fork is POSIX")
def test_a_forked_child_compiles_on_its_own(monkeypatch, rng):
    """``fork`` copies the queue but not the worker thread nor the compile server's pipes: the
    child starts its own and its results are right. What the compiles had changed for the
    process (the switch interval, NumPy's OpenBLAS threads, the frozen heap) is the child's own
    again."""
    import gc
    import os

    from ngrad.engine.ir import blas

    def f(x):
        return (x.sin() * x.cosh()).sum()

    openblas = blas._numpy_openblas()
    switch, count = sys.getswitchinterval(), openblas and openblas[1]()
    x0 = rng.standard_normal(500)
    want = _reference(x0, f, monkeypatch)
    _value_and_grad(x0, f)
    _value_and_grad(x0, f)  # a compile is queued or running now
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        ok = False
        try:
            ok = sys.getswitchinterval() == switch and (openblas is None or openblas[1]() == count)
            ok = ok and gc.get_freeze_count() == 0
            for _ in range(3):
                got = _value_and_grad(x0, f)
            ok = ok and background.synchronize(timeout=120) and np.allclose(got[1], want[1], rtol=1e-12)
            got = _value_and_grad(x0, f)
            ok = ok and np.allclose(got[1], want[1], rtol=1e-12)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_requests_carry_the_facades_tuples_as_plain_tuples():
    """The compile server's child imports the engine alone: a shape given as ``ngrad.Size`` (a
    tuple subclass of the facade) must reach it as a tuple."""
    import io
    import pickle

    buffer = io.BytesIO()
    compile_server._send(buffer, ("plan", {"shape": ngrad.Size([2, 3])}, [ngrad.Size([4])]))
    data = buffer.getvalue()[8:]
    assert b"ngrad.tensor" not in data
    got = pickle.loads(data)
    assert got == ("plan", {"shape": (2, 3)}, [(4,)]) and type(got[1]["shape"]) is tuple


def test_another_size_of_a_compiled_structure_runs_compiled_at_its_first_call(monkeypatch, rng):
    # its kernels leave sizes out, so they already run in this process: the call plans (in
    # milliseconds) and runs them, instead of interpreting while the worker hands them over
    def f(x):
        return ((x.sin() * x.exp()) / (1 + x * x)).sum()

    for _ in range(3):
        _value_and_grad(rng.standard_normal(1000), f)
    assert ngrad.synchronize_compiles(timeout=120)
    for n in (3000, 40000):
        x0 = rng.standard_normal(n)
        before = set(dispatch.records)
        got = _value_and_grad(x0, f)
        new = [r for k, r in dispatch.records.items() if k not in before]
        assert new and all(r.tier is not None and r.tier.ready() for r in new)
        want = _reference(x0, f, monkeypatch)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-15)


def test_kernels_on_disk_load_without_the_compile_server(monkeypatch, rng):
    def f(x):
        return (x.sin() * x.cos() + 2.0).sum()

    x0 = rng.standard_normal(500)
    for _ in range(3):
        _value_and_grad(x0, f)
    assert ngrad.synchronize_compiles(timeout=120)
    compile_server.stop()
    dispatch.records.clear()  # a new process, as far as this structure knows: its kernels are on disk
    sys.modules["ngrad.engine.targets.cpu"]._memory.clear()
    for _ in range(3):
        got = _value_and_grad(x0, f)
    assert ngrad.synchronize_compiles(timeout=120)
    assert compile_server._child["proc"] is None  # loaded here, whatever NGRAD_COMPILE says
    assert all(r.tier.ready() for r in dispatch.records.values() if r.tier is not None)
    want = _reference(x0, f, monkeypatch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-15)


def test_a_burst_of_jobs_leaves_the_calls_alone_first_unless_somebody_waits(monkeypatch):
    from ngrad.engine.runtime.tiering import Decision, Record

    monkeypatch.setattr(background, "START_S", 30.0)
    assert background.synchronize(timeout=120)  # the worker idle: the next job starts a burst
    ran = threading.Event()
    record = Record()
    assert background.submit(record, None, [], lambda copies: ran.set() or Decision.WAIT)
    assert not ran.wait(0.3)  # the calls have the interpreter's lock to themselves first
    assert background.wait(record, timeout=20)  # one waiting for it starts it at once
    assert ran.is_set() and not record.compiling


def test_a_burst_of_jobs_freezes_the_heap_until_it_ends_unless_the_program_froze_it(monkeypatch):
    """While jobs run, the objects alive at the burst's start sit in the collector's permanent
    generation (a full collection then skips them; it held the lock for 17-20 ms); the burst's
    end thaws them. A heap the program froze itself, or a collector it turned off, is left
    alone."""
    import gc

    from ngrad.engine.runtime.tiering import Decision, Record

    monkeypatch.setattr(background, "START_S", 0.0)
    assert background.synchronize(timeout=120) and gc.get_freeze_count() == 0
    seen, go = [], threading.Event()

    def job(copies):
        seen.append(gc.get_freeze_count())
        go.wait(20)
        return Decision.WAIT

    assert background.submit(Record(), None, [], job)
    while not seen:
        time.sleep(0.001)
    frozen_garbage = [[]]
    frozen_garbage[0].append(frozen_garbage)  # a cycle made before the burst: not collected in it
    del frozen_garbage
    # still frozen after a full collection (objects frozen may die meanwhile: pytest-xdist's own
    # thread runs too, the more often for the short switch interval of a burst)
    assert gc.collect() >= 0 and seen[0] > 1000 and 0.9 * seen[0] < gc.get_freeze_count() <= seen[0]
    go.set()
    assert background.synchronize(timeout=120)
    assert gc.get_freeze_count() == 0  # thawed: everything is collected as usual again
    gc.freeze()  # the program's own freeze
    try:
        mine = gc.get_freeze_count()
        assert background.submit(Record(), None, [], lambda copies: seen.append(gc.get_freeze_count()) or Decision.WAIT)
        assert background.synchronize(timeout=120)
        # neither added to (objects frozen may die meanwhile) nor thawed
        assert seen[-1] <= mine and 0.9 * mine < gc.get_freeze_count() <= mine
    finally:
        gc.unfreeze()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timer slack is Linux's")
def test_a_burst_sharpens_its_callers_timer_slack_until_its_first_call_after():
    """The thread that starts a burst of jobs waits for the interpreter's lock after each NumPy
    operation with a timer slack of 1 ns (the kernel's default 50 µs more than doubled those
    waits); its first call after the burst puts the slack back."""
    import ctypes

    from ngrad.engine.runtime.tiering import Decision, Record

    slack = lambda: ctypes.CDLL(None).prctl(30, 0, 0, 0, 0)  # noqa: E731  (PR_GET_TIMERSLACK)
    assert background.synchronize(timeout=120)
    x = ngrad.arange(4.0)
    float((x * 2).sum())  # a call: anything an earlier test left is settled
    before, go = slack(), threading.Event()

    def job(copies):
        go.wait(20)
        return Decision.WAIT

    assert background.submit(Record(), None, [], job)
    assert slack() == 1
    go.set()
    assert background.synchronize(timeout=120)
    assert slack() == 1  # until the caller's next call
    float((x - 0.125).exp().sum())  # a structure seen once: nothing compiles, no burst starts
    assert slack() == before and background.pending() == 0


def _children():
    """This process's child processes (Linux), or None where /proc cannot tell."""
    import glob
    import os

    files = glob.glob(f"/proc/{os.getpid()}/task/*/children")
    if not files:
        return None
    return {int(p) for f in files for p in open(f).read().split()}


def test_one_compile_server_serves_every_structure_and_interpreted_tapes_reach_it(monkeypatch, rng):
    """The structures' tapes were interpreted first (the interpreter memoizes its steps on a
    tape, with the primitives' functions in them): they still travel, to one child."""
    if compile_mode() != "process":
        pytest.skip("the compile server serves NGRAD_COMPILE=process")
    before = _children()
    served = []
    for module, name in ((background, "compile_remote"), (dispatch, "plan_remote")):
        real = getattr(compile_server, name)
        monkeypatch.setattr(module, name, lambda *a, real=real, **k: served.append(real(*a, **k)) or served[-1])
    for k in range(4):  # four structures

        def f(x, k=k):
            y = x.sin() * (k + 1.5)
            for _ in range(k):
                y = y.cos()
            return y.exp().sum()

        x0 = rng.standard_normal(100 + k)
        want = _reference(x0, f, monkeypatch)
        for _ in range(3):
            got = _value_and_grad(x0, f)
        assert ngrad.synchronize_compiles(timeout=120)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    assert served and all(served)  # the child compiled them all
    proc = compile_server._child["proc"]
    assert proc is not None and proc.poll() is None and not compile_server._child["dead"]
    if before is not None:
        assert _children() - before == {proc.pid}


def test_the_compile_servers_blas_runs_on_one_thread(monkeypatch, rng):
    """The child's runs only warm its functions up: its BLAS gets one thread, so that no thread
    of OpenBLAS spins after their products on the cores the program's calls and LLVM share."""
    if compile_mode() != "process" or _children() is None:
        pytest.skip("the compile server serves NGRAD_COMPILE=process; its threads are read from /proc")

    def f(x):
        return (x @ x).tanh().sum()

    x0 = rng.standard_normal((160, 160))
    want = _reference(x0, f, monkeypatch)
    for _ in range(3):
        got = _value_and_grad(x0, f)
    assert ngrad.synchronize_compiles(timeout=120)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10)
    proc = compile_server._child["proc"]
    assert proc is not None and proc.poll() is None
    threads = __import__("os").listdir(f"/proc/{proc.pid}/task")
    assert len(threads) == 1, threads


def test_a_request_that_cannot_travel_is_compiled_here_and_the_server_lives_on(rng):
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    x = b.input((8,), "f64")
    tape = b.finish([(x * x).sum(axes=(0,), keepdim=False)])
    tape._last = ((0, 0, 0), lambda: None)  # a memo of this process only: left behind
    buffer = __import__("io").BytesIO()
    compile_server._send(buffer, ("plan", tape))
    got = __import__("pickle").loads(buffer.getvalue()[8:])[1]
    assert got.format() == tape.format() and got._last is None
    ran = []
    values = [rng.standard_normal(8), lambda: None]  # a value pickle refuses
    assert compile_server.compile_remote(None, tape, values, meanwhile=lambda: ran.append(1)) is False
    assert ran == [1] and not compile_server._child["dead"]


class _Calls:
    """A fake main thread and worker for ``defer_to_calls``: the worker has used ``own`` seconds of
    CPU; waiting for the main thread's current slow call to end takes ``lasts`` seconds and ends
    it (None: it never ends, and the wait runs out)."""

    def __init__(self, monkeypatch, lasts=None, last_call_s=0.01):
        self.own, self.waits, self.lasts = 0.0, [], lasts
        monkeypatch.setattr(background, "_clocks", {"own": lambda: self.own, "wait": self.wait})
        monkeypatch.setattr(background, "_turn", {"call": 0, "own": 0.0, "waited": 0.0, "total": 0.0})
        monkeypatch.setattr(background, "calls", {"begun": 0, "ended": 0, "cpu": last_call_s, "waiting": False})
        monkeypatch.setitem(background._state, "ident", threading.get_ident())  # this test is the worker

    def begin(self):
        background.calls["begun"] += 1

    def end(self, seconds):
        background.calls["ended"] += 1
        background.calls["cpu"] = seconds

    def wait(self, began, seconds):
        self.waits.append((began, seconds))
        if self.lasts is None:
            return seconds
        self.end(0.01)
        return self.lasts


def test_the_worker_takes_a_share_of_each_slow_call_then_waits_for_its_end(monkeypatch):
    c = _Calls(monkeypatch, lasts=0.004, last_call_s=0.01)
    assert background.defer_to_calls() == 0.0 and not c.waits  # no call runs: on at once
    c.begin()
    assert background.defer_to_calls() == 0.0  # it sees the call begin
    c.own += 0.3 * 0.01 - 1e-4  # within its share of it (CALL_SHARE of the last call's 10 ms)
    assert background.defer_to_calls() == 0.0 and not c.waits
    c.own += 2e-4  # past it: waits for this call's end
    assert background.defer_to_calls() == 0.004 and c.waits == [(1, background.WAIT_MAX_S)]
    assert background.defer_to_calls() == 0.0 and len(c.waits) == 1  # between calls it runs on
    c.begin()  # the next call: a share of its own, however much the worker has used before
    c.own += 1.0
    assert background.defer_to_calls() == 0.0
    c.own += 0.0031
    assert background.defer_to_calls() > 0.0 and c.waits[-1][0] == 2


def test_one_call_holds_the_worker_back_a_bounded_time(monkeypatch):
    c = _Calls(monkeypatch, lasts=None, last_call_s=0.0)
    c.begin()
    background.defer_to_calls()
    c.own += background.SHARE_MIN_S  # the share of a call after one of no time: SHARE_MIN_S
    # a call that never ends (a program stopped in a debugger, a count off by a thread): it
    # holds the worker back WAIT_MAX_S in all, then never again
    assert background.defer_to_calls() == background.WAIT_MAX_S
    assert background.defer_to_calls() == 0.0 and len(c.waits) == 1


def test_the_worker_does_not_wait_for_calls_when_somebody_waits_for_it_or_elsewhere(monkeypatch):
    c = _Calls(monkeypatch, lasts=None)
    c.begin()
    background.defer_to_calls()
    c.own += 1.0
    monkeypatch.setitem(background._state, "waiters", 1)  # synchronize_compiles: no waiting
    assert background.defer_to_calls() == 0.0
    monkeypatch.setitem(background._state, "waiters", 0)
    monkeypatch.setitem(background._state, "ident", -1)  # a thread compiling for itself
    assert background.defer_to_calls() == 0.0 and not c.waits


def test_the_worker_waiting_for_a_call_is_woken_by_its_end(monkeypatch):
    """The real wait: a thread waiting for call 1 wakes when ``dispatch`` counts its end, not
    when the wait runs out, whichever of the two looks first."""
    monkeypatch.setattr(background, "calls", {"begun": 1, "ended": 0, "cpu": 0.01, "waiting": False})
    for end_first in (False, True):
        background.calls.update(begun=1, ended=0, cpu=0.01, waiting=False)
        if end_first:
            background.calls["ended"] = 1
        waited = []
        t = threading.Thread(target=lambda: waited.append(background._until_ended(1, 30.0)))
        t.start()
        deadline = time.perf_counter() + 10
        while not end_first and not background.calls["waiting"] and time.perf_counter() < deadline:
            time.sleep(0.001)
        if not end_first:
            background.call_ended(0.01)  # as dispatch ends a call: count, then look at the flag
        t.join(10)
        assert not t.is_alive() and waited[0] < 5.0 and background.calls["waiting"] is False


def test_interpreted_calls_are_counted_for_the_worker_even_when_they_raise(monkeypatch, rng):
    monkeypatch.setenv("NGRAD_JIT", "never")
    begun, ended = background.calls["begun"], background.calls["ended"]
    x = ngrad.tensor(rng.standard_normal(50), requires_grad=True)
    (x.sin() * x).sum().backward()
    assert background.calls["begun"] > begun and background.calls["begun"] - begun == background.calls["ended"] - ended
    assert background.calls["cpu"] > 0.0

    def fails(tape, values):
        raise FloatingPointError("a value the program rejects")

    monkeypatch.setattr(dispatch, "interpret", fails)
    with pytest.raises(FloatingPointError):
        (ngrad.tensor(rng.standard_normal(5)).exp() * 2).sum().item()
    assert background.calls["begun"] - begun == background.calls["ended"] - ended > 1


def test_a_loop_that_never_pauses_still_gets_its_kernels(monkeypatch, rng):
    """The worker defers to the calls only for a share of its job: a tight loop of calls (the
    main thread always busy) sees the compiled tier without waiting for it, and the same values."""

    def f(x):
        return (x.sin() * x.exp() + x.cos()).sum()

    x0 = rng.standard_normal(20_000)
    want = _reference(x0, f, monkeypatch)
    before = set(dispatch.records)
    t = time.perf_counter()
    while time.perf_counter() - t < 120:
        got = _value_and_grad(x0, f)
        new = [r for k, r in dispatch.records.items() if k not in before]
        if new and all(r.tier is not None and r.tier.ready() for r in new):
            break
    assert new and all(r.tier is not None and r.tier.ready() for r in new)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-15)


def test_a_plans_kernels_compile_on_threads_and_results_stay(monkeypatch, rng):
    """``NGRAD_COMPILE_THREADS=2``: the child (``process``) or the worker (``thread``) learns the
    kernels' signatures with stand-ins and compiles them on two threads before its warm-up run;
    the calls' results never change, and the run compiles nothing itself."""
    from ngrad.engine.targets import cpu

    monkeypatch.setenv("NGRAD_COMPILE_THREADS", "2")
    made = []
    real = cpu.compile_ahead
    monkeypatch.setattr(cpu, "compile_ahead", lambda calls, threads: made.append(real(calls, threads)) or made[-1])
    assert ngrad.synchronize_compiles(timeout=300)  # nothing left of an earlier test counts below
    compiled = cpu.stats["compiled"]
    idx = ngrad.tensor(np.array([4, 0, 2, 2, 1, 3]))

    def f(x):
        h = (x.sin() * x + 1.0) @ x.T
        g = h.exp()[idx] * h[idx].cos()
        edges = (x[1:, :] * x[:-1, :]).sum() + (x[:, 2:] - x[:, :-2]).pow(2).sum()  # windows the plan keeps
        return (g.tanh() * 2.0 + g * g).sum() + (x * x).mean() + edges

    x0 = rng.standard_normal((5, 5))
    want = _reference(x0, f, monkeypatch)
    before = set(dispatch.records)
    for _ in range(4):
        got = _value_and_grad(x0, f)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)
    assert ngrad.synchronize_compiles(timeout=300)
    new = [r for k, r in dispatch.records.items() if k not in before and r.tier is not None]
    assert new and all(r.tier.ready() and not r.failed for r in new)
    if compile_mode() == "thread":  # in this process: ahead, then every kernel loaded
        assert made and sum(made) >= 3 and cpu.stats["compiled"] == compiled
    got = _value_and_grad(x0, f)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)


def test_a_new_plan_runs_quick_machine_code_first_and_the_full_one_after(monkeypatch, rng):
    """On the worker thread (one compile thread), a new plan's kernels are published first as
    LLVM made them without its loop vectoriser (``cpu.quick_first``), none of them on disk;
    once every job is done the worker makes them again in full from the same IR, keeps them on
    disk and swaps them in (``cpu.upgrade``). Results are the interpreter's throughout, and a
    kernel with vmath inside is made in full at once."""
    if compile_mode() != "thread":
        pytest.skip("the worker thread compiles under NGRAD_COMPILE=thread")
    from ngrad.engine.store import usable_dir
    from ngrad.engine.targets import cpu, objects

    monkeypatch.setenv("NGRAD_COMPILE_THREADS", "1")
    assert ngrad.synchronize_compiles(timeout=300)
    held, quick, was = threading.Event(), [], {}
    real = cpu.upgrade

    def upgrade(listed):
        for k, sig, _ in listed:
            quick.append((k, sig))
            was[k.key, sig] = k.loaded[sig]
        held.wait(120)
        return real(listed)

    monkeypatch.setattr(cpu, "upgrade", upgrade)
    idx = ngrad.tensor(np.array([3, 0, 2, 2, 1]))

    def f(x):
        h = (x * x + 1.0) @ x.T  # kernels of + and * on either side of a product
        return (h[idx] * h[idx] - h[idx] * 0.5).sum() + x.sin().sum()  # sin: vmath

    x0 = rng.standard_normal((5, 5))
    want = _reference(x0, f, monkeypatch)
    before = set(dispatch.records)
    try:
        for _ in range(200):
            got = _value_and_grad(x0, f)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
            np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)
            new = [r for k, r in dispatch.records.items() if k not in before and r.tier is not None]
            if quick and new and all(r.tier.ready() for r in new):
                break
            time.sleep(0.01)
        assert quick, "published with quick machine code, the upgrade waiting"
        folder = usable_dir()
        assert not any(objects.saved(folder, k.key, sig) for k, sig in quick)
        assert all("_wide_vectors()" not in k.text for k, _ in quick)
        vmath = [k for r in new for k in r.tier.kernels if k is not None and "_wide_vectors()" in k.text]
        assert vmath and all(objects.saved(folder, k.key, s) for k in vmath for s in k.loaded)
    finally:
        held.set()
    assert ngrad.synchronize_compiles(timeout=300)
    assert len(quick) >= 2
    for k, sig in quick:
        assert objects.saved(folder, k.key, sig) and k.loaded[sig] is not was[k.key, sig]
    got = _value_and_grad(x0, f)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)


def test_debug_level_3_says_how_long_each_compile_job_waited_for_the_calls(tmp_path):
    if compile_mode() != "thread":
        pytest.skip("the child process sets its own mode: one run is enough")
    program = (
        "import ngrad\n"
        "x = ngrad.linspace(0, 1, 50_000, requires_grad=True)\n"
        "for _ in range(30):\n"
        "    (x.sin() * x.exp()).sum().backward()\n"
        "ngrad.synchronize_compiles()\n"
    )
    env = dict(os.environ, NGRAD_CACHE_DIR=str(tmp_path), NGRAD_COMPILE="thread", NGRAD_DEBUG="3")
    env.pop("NGRAD_JIT", None)
    err = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True).stderr
    lines = [line for line in err.splitlines() if line.startswith("ngrad: compile job of")]
    assert lines and all("waiting for the calls' turns" in line for line in lines)
