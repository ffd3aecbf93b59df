"""The kernel cache: a fresh process with a warm disk cache compiles nothing; corrupt or
half-written entries are detected and rebuilt; the CLI reports and clears it."""

import glob
import importlib.metadata
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ngrad.cli import main

PROGRAM = r"""
import json, sys, numpy as np, ngrad
from ngrad.engine.targets import cpu as c
x = ngrad.tensor(np.linspace(-2, 2, 11), dtype=ngrad.float64, requires_grad=True)
y = (x.sin() * x.exp() + (x * x).sum()).sum()
y.backward()
out = {"value": y.item(), "grad": x.grad.tolist(), "compiled": c.stats["compiled"], "loaded": c.stats["loaded"],
       # a registry of implementations Numba installs only to type and lower a new function
       "registries": "numba.np.arraymath" in sys.modules}
if len(sys.argv) > 1:  # then a structure never compiled: Numba's compiler must still work
    z = ngrad.tensor(np.linspace(-2, 2, 11), dtype=ngrad.float64, requires_grad=True)
    (z.cos() * z.tanh()).sum().backward()
    out["new_grad"], out["compiled"] = z.grad.tolist(), c.stats["compiled"]
print(json.dumps(out))
"""


def _run(cache, *args, compiler="llvm"):
    env = dict(os.environ, NGRAD_CACHE_DIR=str(cache), NGRAD_JIT="auto", NGRAD_JIT_THRESHOLD="1", NGRAD_COMPILE="wait")
    env["NGRAD_CPU_COMPILER"] = compiler
    out = subprocess.run([sys.executable, "-c", PROGRAM, *args], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("compiler", ["llvm", "numba"])
def test_warm_cache_compiles_nothing_and_corruption_is_rebuilt(tmp_path, compiler):
    cold = _run(tmp_path, compiler=compiler)
    assert cold["compiled"] >= 1
    warm = _run(tmp_path, compiler=compiler)
    assert warm["compiled"] == 0 and warm["loaded"] == cold["compiled"]
    assert warm["grad"] == cold["grad"]
    # loading machine code skips Numba's registries (a fifth of a second; ngrad's own compiler
    # never needs them), and compiling still works after such a load
    assert cold["registries"] == (compiler == "numba") and not warm["registries"]
    more = _run(tmp_path, "new", compiler=compiler)
    assert more["compiled"] >= 1 and more["grad"] == cold["grad"]
    z = np.linspace(-2, 2, 11)
    np.testing.assert_allclose(more["new_grad"], -np.sin(z) * np.tanh(z) + np.cos(z) / np.cosh(z) ** 2, rtol=1e-12)

    # corrupt Numba's cached machine code and index (without the object files, which a warm
    # process runs first: tests/test_objects.py corrupts those): detected, rebuilt, same results
    for p in glob.glob(str(tmp_path / "*" / "objects" / "*")):
        os.unlink(p)
    for p in glob.glob(str(tmp_path / "*" / "__pycache__" / "*")):
        with open(p, "wb") as f:
            f.write(b"\x00garbage")
    again = _run(tmp_path, compiler=compiler)
    assert again["grad"] == cold["grad"] and again["value"] == cold["value"]

    # a half-written generated module: detected by comparing its text, rewritten
    for p in glob.glob(str(tmp_path / "*" / "k*.py")):
        with open(p, "w") as f:
            f.write("def kernel(")
    again = _run(tmp_path, compiler=compiler)
    assert again["grad"] == cold["grad"]
    assert _run(tmp_path, compiler=compiler)["compiled"] == 0


def test_cache_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    _run(tmp_path)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and "kernels" in out
    assert main(["cache", "clear"]) == 0
    assert not glob.glob(str(tmp_path / "*" / "k*.py"))


def test_on_disk_follows_the_cache_folder(tmp_path, monkeypatch):
    """``on_disk`` (which decides whether a plan's kernels load at once) lists the folders of
    machine code (object files, Numba's index) only when they changed: a kernel compiled, or its
    files removed, is seen at the next ask."""
    from ngrad.engine import store
    from ngrad.engine.targets import cpu as c

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    text = "def kernel(a):\n    a[0] += 2.0\n"
    assert not store.on_disk(text)
    k = c.kernel(text)
    a = np.zeros(1)
    k(a)
    assert a[0] == 2.0 and store.on_disk(text)
    assert not store.on_disk(text.replace("2.0", "3.0"))
    key = store.key_of(text)
    for p in glob.glob(os.path.join(store.cache_dir(), "__pycache__", f"{key}.*")):
        os.unlink(p)
    for p in glob.glob(os.path.join(store.cache_dir(), "objects", f"{key}-*.o")):
        os.unlink(p)
    assert not store.on_disk(text)


def test_a_plan_is_read_back_from_disk_and_a_damaged_one_made_again(tmp_path, monkeypatch, rng):
    """``plan_of`` stores a tape's plan: the next process (here: the next ask) reads it back
    instead of planning (no fusion runs), with the same kernel sources and results; a damaged
    entry, or one another size's tape stored, is planned anew."""
    from ngrad.engine import store
    from ngrad.engine.ir.interpret import interpret
    from ngrad.engine.ir.tape import Builder
    from ngrad.engine.runtime import executor, plan

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))

    def tape_of(n):
        b = Builder()
        x, w = b.input((n, 4), "f64"), b.input((4, 3), "f64")
        m = x @ w
        y = m * m + m
        return b.finish([y.sum(axes=(0, 1), keepdim=False), y])

    fused, real = [], plan.fuse
    monkeypatch.setattr(plan, "fuse", lambda *a: fused.append(1) or real(*a))
    tape = tape_of(50)
    first = plan.plan_of(tape)
    again = plan.plan_of(tape_of(50))  # an equal tape, built again
    assert len(fused) == 1 and again is not first
    assert [s and s.text for s in again.sources] == [s and s.text for s in first.sources]
    values = [rng.standard_normal((50, 4)), rng.standard_normal((4, 3))]
    want = interpret(tape, values)
    again.compile()
    for got, w in zip(executor.executed(again, values), want):
        np.testing.assert_allclose(got, w, rtol=1e-12)
    plan.plan_of(tape_of(60))  # another size: another plan
    assert len(fused) == 2
    entry = os.path.join(store.usable_dir(), "plans", plan.plan_name("c", plan._planner(), tape.key()))
    assert os.path.exists(entry)
    with open(entry, "r+b") as f:
        f.seek(40)
        f.write(b"\xff\xff")
    plan.plan_of(tape_of(50))
    assert len(fused) == 3


def test_programs_that_differ_only_in_sizes_share_their_kernels(tmp_path, monkeypatch, rng):
    """A kernel's code takes sizes as arguments; only its comments name them (a reshape's target
    shape), so its key ignores comments: the same program at another size compiles nothing."""
    import ngrad
    from ngrad.engine import store
    from ngrad.engine.targets import cpu as c

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NGRAD_JIT", "always")
    assert store.key_of("x = a  # %1 = reshape(%0; shape=(4, 3))\n") == store.key_of(
        "x = a  # %1 = reshape(%0; shape=(9, 3))\n"
    )
    assert store.key_of("x = a\n") != store.key_of("x = b\n")
    compiled = []
    for n in (40_000, 70_000):
        x0 = rng.standard_normal((n, 3))
        x = ngrad.tensor(x0, requires_grad=True)
        before = c.stats["compiled"]
        (x.reshape(-1).sin() * 2.0).reshape(n, 3).exp().sum().backward()
        compiled.append(c.stats["compiled"] - before)
        np.testing.assert_allclose(x.grad.numpy(), 2 * np.cos(x0) * np.exp(2 * np.sin(x0)), rtol=1e-12)
    assert compiled[0] >= 1 and compiled[1] == 0, compiled


@pytest.mark.parametrize("compiler, phases", [("llvm", "typing and IR"), ("numba", "Numba's front end")])
def test_debug_level_3_breaks_a_compile_into_its_phases(tmp_path, compiler, phases):
    program = "import ngrad\nx = ngrad.linspace(0, 1, 9, requires_grad=True)\n(x.sin() * x).sum().backward()\n"
    env = dict(os.environ, NGRAD_CACHE_DIR=str(tmp_path), NGRAD_JIT="always", NGRAD_COMPILE="wait", NGRAD_DEBUG="3")
    env["NGRAD_CPU_COMPILER"] = compiler
    err = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True).stderr
    assert "ngrad: planned" in err and "fusion and source of" in err
    assert phases in err and "LLVM" in err  # the compiler's own timers of the first compile
    assert compiler != "llvm" or "LLVM's vmath pipeline" in err  # which pipeline made sin's kernel
    again = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True).stderr
    assert "loaded from the disk cache" in again


@pytest.mark.parametrize("compiler, want", [("llvm", ["False", "True"]), ("numba", ["True", "False"])])
def test_the_compile_servers_warm_up_pays_its_compilers_start_up(compiler, want):
    # the child pays it before its first request: Numba's tables only where Numba compiles
    program = (
        "import sys; from ngrad.engine.targets import cpu, objects; cpu.warm_up(); "
        "print('numba.np.arraymath' in sys.modules, 'll' in objects._jit)"
    )
    env = dict(os.environ, NGRAD_CPU_COMPILER=compiler)
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == want  # (Numba imported, LLVM set up)


def test_a_drivers_code_is_read_back_from_disk_and_a_damaged_one_compiled_again(tmp_path, monkeypatch, rng):
    """A compiled plan's driver is compiled once per text and Python: the next process (here:
    the next plan of an equal tape) reads its code object back instead of compiling the text,
    and the driver gives the interpreter's results; a damaged entry is compiled again."""
    from ngrad.engine import store
    from ngrad.engine.ir.interpret import interpret
    from ngrad.engine.ir.tape import Builder
    from ngrad.engine.runtime import driver, plan

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))

    def tape_of():
        b = Builder()
        x, w = b.input((20, 4), "f64"), b.input((4, 3), "f64")
        m = (x @ w).tanh()
        return b.finish([(m * m).sum(axes=(0, 1), keepdim=False), m])

    compiled = []
    monkeypatch.setattr(driver, "compile", lambda *a: compiled.append(a[1]) or compile(*a), raising=False)
    values = [rng.standard_normal((20, 4)), rng.standard_normal((4, 3))]
    want = interpret(tape_of(), values)

    def driven():
        p = plan.CompiledPlan(tape_of())
        p.compile()
        for got, w in zip(driver.driver_of(p)(values), want):
            np.testing.assert_allclose(got, w, rtol=1e-12)
        return len(compiled)

    assert driven() == 1
    assert driven() == 1  # read back
    (entry,) = glob.glob(os.path.join(store.usable_dir(), "plans", "d*"))
    with open(entry, "r+b") as f:
        f.seek(40)
        f.write(b"\xff\xff")
    assert driven() == 2


def test_a_packages_version_is_read_from_its_dist_info_folder(tmp_path, monkeypatch):
    """The cache folder's name holds the installed Numba's version: read from the
    ``<name>-<version>.dist-info`` folder of the first ``sys.path`` entry that has one, as
    ``importlib.metadata`` reads it, and "none" for a package that is not installed."""
    from ngrad.engine import store

    (tmp_path / "fakepkg").mkdir()
    (tmp_path / "fakepkg" / "__init__.py").write_text("")
    info = tmp_path / "fakepkg-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.2.3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    store._version.cache_clear()
    try:
        assert store._version("fakepkg") == "1.2.3" == importlib.metadata.version("fakepkg")
        assert store._version("no_such_package_here") == "none"
    finally:
        store._version.cache_clear()


def test_pickling_a_plan_to_store_it_lets_the_calls_go_first_as_it_goes():
    """Storing a plan pickles it (ba's was one 4.6 ms stretch of C under the interpreter's lock,
    on the compile worker beside the calls): each object the pickler asks about is a
    ``pace.tick``, so the worker looks in at ``pace.step`` every ``TICKS`` of them."""
    import itertools

    from ngrad.engine import pace
    from ngrad.engine.ir.tape import Builder
    from ngrad.engine.runtime import compile_server, plan

    looks = itertools.count()  # called at every step for the rest of the process: harmless
    pace.on_step(looks.__next__)
    b = Builder()
    x = b.input((5,), "f64")
    y = x
    for _ in range(400):
        y = (y * 1.01).sin()
    p = plan.CompiledPlan(b.finish([y.sum(axes=(0,), keepdim=False)]))
    before = next(looks)
    compile_server.pickled(p)
    assert next(looks) - before > 2  # steps taken while pickling
