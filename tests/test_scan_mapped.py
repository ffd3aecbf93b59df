"""A scan's big packed result on new memory is mapped with all its pages at once
(``loops._mapped``, from ``loops.MAPPED_MIN_BYTES``): its values are the interpreter's, the
shelf takes it back once the caller drops it (the next call maps nothing new), and a smaller
one stays NumPy's."""

import mmap
import weakref

import numpy as np
import pytest

from ngrad.engine.ir.interpret import interpret
from ngrad.engine.ir.prims import control
from ngrad.engine.ir.tape import Builder
from ngrad.engine.runtime import loops
from ngrad.engine.runtime.buffers import POOL_MIN_BYTES


def _case(n, length):
    b = Builder()
    c, x, w = (b.input((n,), "f64") for _ in range(3))
    nxt = c * w + x
    body = b.finish([nxt, (nxt * x).sum(axes=(0,), keepdim=False).reshape(shape=(1,))])
    params = {"body": control.text_of(body), "length": length, "reverse": False, "carries": 1, "xs": 1}
    params["history"] = True
    r = np.random.default_rng(n)
    return body, params, [r.standard_normal(n), r.standard_normal((length, n)), r.standard_normal(n) * 0.5]


def _on_map(a):
    """Whether ``a`` lies on memory of an ``mmap`` (through the memoryview NumPy wraps it in)."""
    return isinstance(getattr(a.base, "obj", a.base), mmap.mmap)


def _reference(body, params, args):
    p = params
    run = lambda tape, values: interpret(tape, values)  # noqa: E731
    return control.run_scan(run, body, args, p["length"], p["reverse"], p["carries"], p["xs"], p["history"])


@pytest.mark.skipif(not hasattr(mmap, "MAP_POPULATE"), reason="no MAP_POPULATE here: NumPy's memory")
def test_a_big_new_result_is_mapped_and_taken_back(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "never")
    monkeypatch.setattr(loops, "MAPPED_MIN_BYTES", POOL_MIN_BYTES)
    body, params, args = _case(3001, 5)  # (1 + 5 + 5 * 3001 + 5) doubles: 120 KiB of result
    want = _reference(body, params, args)
    first = loops.scan(params, args)
    assert _on_map(first) and first.flags.writeable
    np.testing.assert_array_equal(first, want)
    kept = weakref.ref(first)
    del first
    again = loops.scan(params, args)
    assert again is kept()  # taken back from the shelf, written whole again
    np.testing.assert_array_equal(again, want)
    held = loops.scan(params, args)  # ``again`` is still referenced: new memory, mapped
    assert _on_map(held) and not np.shares_memory(held, again)
    np.testing.assert_array_equal(held, want)


def test_a_result_below_the_bar_is_numpys(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "never")
    body, params, args = _case(3002, 5)  # below the default 4 MiB (and a size of its own)
    out = loops.scan(params, args)
    assert not _on_map(out)
    np.testing.assert_array_equal(out, _reference(body, params, args))
