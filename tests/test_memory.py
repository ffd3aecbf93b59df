"""The in-memory caches stay within ``NGRAD_MEMORY_ENTRIES``: kernels, tiering records (with their
plans) and an ``ngrad.compile`` function's variants, least recently used dropped first, and
whatever was dropped is rebuilt with the same results."""

import sys

import numpy as np
import pytest

import ngrad
from ngrad.engine import runtime
from ngrad.engine.config import memory_entries
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.ir.tape import Builder
from ngrad.engine.recent import Recent
from ngrad.engine.runtime import dispatch
from ngrad.engine.targets import cpu

pytestmark = [pytest.mark.numba, pytest.mark.usefixtures("jit_always")]


@pytest.fixture
def small(monkeypatch):
    """Caches of 4 entries, empty at the start (other tests' entries kept out of the count)."""
    monkeypatch.setenv("NGRAD_MEMORY_ENTRIES", "4")
    monkeypatch.setattr(dispatch, "records", Recent())
    monkeypatch.setattr(cpu, "_memory", cpu._Kernels())


def _tapes(count):
    """``count`` tapes of distinct structures and kernels (1, 2, ... fused tanh), and values."""
    out = []
    for k in range(1, 1 + count):
        b = Builder()
        x, y = b.input((5,), "f64"), b.input((5,), "f64")
        for _ in range(k):
            x = b.emit("tanh", [x], {})
        tape = b.finish([b.emit("mul", [x, y], {})]).verify()  # one fused kernel
        out.append((tape, [np.linspace(-1.0, 1.0, 5), np.linspace(0.5, 2.0, 5)]))
    return out


def test_the_setting_defaults_to_1024_and_bounds_a_recent_dict(monkeypatch):
    monkeypatch.delenv("NGRAD_MEMORY_ENTRIES", raising=False)
    assert memory_entries() == 1024
    monkeypatch.setenv("NGRAD_MEMORY_ENTRIES", "3")
    d = Recent()
    for k in "abc":
        d[k] = k
    assert d.get("a") == "a"  # used: now the most recent
    d["d"] = "d"
    assert list(d) == ["c", "a", "d"]
    assert d.get("b") is None and "b" not in d


def test_kernels_and_plans_stay_at_the_bound_and_evicted_ones_recompute_the_same(small):
    cases = _tapes(7)
    first = [runtime.run(tape, values)[0] for tape, values in cases]
    for (tape, values), got in zip(cases, first):
        np.testing.assert_allclose(got, interpret(tape, values)[0], rtol=1e-14)
    assert len(dispatch.records) == 4 and len(cpu._memory) == 4
    assert cases[0][0].key() not in dispatch.records  # the oldest went first
    again = runtime.run(*cases[0])[0]  # rebuilt, from the disk cache
    np.testing.assert_array_equal(again, first[0])
    record = dispatch.records[cases[0][0].key()]
    assert record.tier is not None and record.tier.ready()
    assert len(dispatch.records) == 4 and len(cpu._memory) == 4


def test_an_evicted_kernel_leaves_sys_modules_and_its_holder_keeps_working(small):
    cases = _tapes(6)
    tape, values = cases[0]
    f = dispatch.prepare(tape)  # holds the plan itself, as a thread running it would
    keys = list(cpu._memory)
    for t, v in cases[1:]:
        runtime.run(t, v)
    assert keys and not any(k in cpu._memory for k in keys)
    assert not any(f"ngrad_kernels.{k}" in sys.modules for k in keys)
    np.testing.assert_allclose(f(values)[0], interpret(tape, values)[0], rtol=1e-14)


def test_a_compiled_function_keeps_its_most_recent_shapes(monkeypatch):
    monkeypatch.setenv("NGRAD_MEMORY_ENTRIES", "16")  # 16 // 8: two argument structures

    @ngrad.compile
    def f(x):
        return (x * x).sum() + x.exp().mean()

    def expect(a):
        return (a * a).sum() + np.exp(a).mean()

    arrays = [np.linspace(-1.0, 1.0, n) for n in range(2, 8)]
    for a in arrays:
        np.testing.assert_allclose(f(ngrad.tensor(a)).item(), expect(a), rtol=1e-12)
        assert len(f.variants) <= 2
    assert f.traces == len(arrays)
    np.testing.assert_allclose(f(ngrad.tensor(arrays[-1])).item(), expect(arrays[-1]), rtol=1e-12)
    assert f.traces == len(arrays)  # still kept: no new trace
    np.testing.assert_allclose(f(ngrad.tensor(arrays[0])).item(), expect(arrays[0]), rtol=1e-12)
    assert f.traces == len(arrays) + 1 and len(f.variants) == 2  # dropped, so traced again


def test_a_structure_met_again_after_eviction_starts_its_count_anew(small, monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_COMPILE", "wait")  # the second call's kernels are ready at its end
    cases = _tapes(6)
    tape, values = cases[0]
    want = [runtime.run(tape, values)[0] for _ in range(3)]
    old = dispatch.records[tape.key()]
    assert old.tier.ready() and old.seen >= 1  # compiled: at once from the disk cache, or on its second call
    for t, v in cases[1:]:
        runtime.run(t, v)
    assert tape.key() not in dispatch.records
    np.testing.assert_array_equal(runtime.run(tape, values)[0], want[-1])
    new = dispatch.records[tape.key()]
    assert new is not old and new.seen == 1


def test_threads_evicting_each_others_plans_get_right_results(monkeypatch):
    # two threads over more structures than the bound: each evicts plans and kernels the other
    # is about to run or is running, which must only drop the caches' references
    import threading

    monkeypatch.setenv("NGRAD_MEMORY_ENTRIES", "2")
    monkeypatch.setattr(dispatch, "records", Recent())
    monkeypatch.setattr(cpu, "_memory", cpu._Kernels())
    cases = _tapes(5)
    want = [interpret(t, v)[0] for t, v in cases]
    errors = []

    def work(order):
        try:
            for _ in range(8):
                for i in order:
                    np.testing.assert_allclose(runtime.run(*cases[i])[0], want[i], rtol=1e-14)
        except Exception as e:  # reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(o,)) for o in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(dispatch.records) <= 2 and len(cpu._memory) <= 2
