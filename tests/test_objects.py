"""Kernels run from their machine code kept as object files (``targets/objects.py``): a warm
process needs no Numba, the machine code equals what Numba runs, and a bad entry (corrupt, made
for another CPU or signature, needing a symbol this process lacks) is never run."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ngrad.engine.targets import cpu, objects

pytestmark = pytest.mark.numba

TEXT = "def kernel(a, s, out):\n    for i in range(a.shape[0]):\n        out[i] = a[i] * s + 1.0\n"


def _values():
    a = np.linspace(-1.0, 1.0, 7)
    readonly = a.copy()
    readonly.flags.writeable = False
    raw = np.zeros(7 * 8 + 1, np.uint8)[1:].view(np.float64)
    return [
        a,
        a.astype(np.float32),
        a.astype(np.int64),
        a > 0,
        a.astype(np.complex128),
        readonly,
        raw,
        a.reshape(7, 1),
        np.ones((3, 4)),
        np.ones((3, 4)).T,
        np.ones((3, 4))[:, ::2],
        np.float64(2.0),
        np.array(2.0),
        1.5,
        3,
        True,
        1j,
        np.float32(1.5),
        np.int32(3),
        np.bool_(True),
    ]


def test_signature_tells_apart_every_pair_numba_types_apart():
    numba = pytest.importorskip("numba")
    values = _values()
    for i, a in enumerate(values):
        for b in values[i + 1 :]:
            if numba.typeof(a) != numba.typeof(b):
                assert objects.signature((a,)) != objects.signature((b,)), (a, b)
    for other in ([1.0], (1.0,), None, "x", 2**70, np.ma.masked_array([1.0])):
        assert objects.signature((other,)) is None


@pytest.fixture
def folder(tmp_path, monkeypatch):
    # Numba's machine code kept as object files (test_llvm_target.py: ngrad's own compiler's)
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NGRAD_CPU_COMPILER", "numba")
    cpu._memory.clear()
    yield tmp_path
    cpu._memory.clear()


def _entries(root):
    return sorted(str(p) for p in root.rglob("objects/*.o"))


def test_loaded_machine_code_runs_as_numbas_does(folder):
    a, out = np.linspace(0.0, 1.0, 5), np.empty(5)
    k = cpu.kernel(TEXT)
    k(a, 3.0, out)
    np.testing.assert_array_equal(out, a * 3.0 + 1.0)
    assert k._fn is not None and len(_entries(folder)) == 1  # compiled by Numba, then kept
    cpu._memory.clear()
    again = cpu.kernel(TEXT)
    out2 = np.empty(5)
    again(a, 3.0, out2)
    assert again._fn is None and len(again.loaded) == 1  # its machine code, no dispatcher
    np.testing.assert_array_equal(out2, out)
    direct = cpu.direct(again, (a, 3.0, out2))
    direct(a, -2.0, out2)
    np.testing.assert_array_equal(out2, a * -2.0 + 1.0)
    # another signature goes to Numba, which compiles it
    a32, out32 = a.astype(np.float32), np.empty(5, np.float32)
    again(a32, 2.0, out32)
    np.testing.assert_allclose(out32, a32 * 2.0 + 1.0)
    assert again.signatures() == 2


def test_cache_info_counts_the_machine_code_kept(folder, capsys):
    from ngrad.cli import main

    assert cpu.cache_info()["objects"] == 0
    a, out = np.linspace(0.0, 1.0, 5), np.empty(5)
    k = cpu.kernel(TEXT)
    k(a, 2.0, out)
    # a second signature, compiled by the dispatcher of a kernel that is ready: kept when a call
    # site asks for its machine code (a driver's first call)
    args = (a.astype(np.float32), 2.0, out.astype(np.float32))
    k(*args)
    assert cpu.cache_info()["objects"] == 1
    cpu.direct(k, args)(*args)
    np.testing.assert_allclose(args[2], args[0] * 2.0 + 1.0)
    assert cpu.cache_info()["objects"] == 2 == len(_entries(folder))
    assert main(["cache", "info"]) == 0
    assert "machine code kept for 2 kernel signatures" in capsys.readouterr().out


def test_machine_code_dropped_and_loaded_again(folder):
    a, out = np.linspace(0.0, 1.0, 5), np.empty(5)
    cpu.kernel(TEXT)(a, 2.0, out)
    base = os.path.dirname(os.path.dirname(_entries(folder)[0]))
    key = cpu.key_of(TEXT)
    sig = objects.signature((a, 2.0, out))
    for _ in range(3):  # each load owns its engine and frees it with the function
        f = objects.load(base, key, sig)
        f(a, 4.0, out)
        np.testing.assert_array_equal(out, a * 4.0 + 1.0)
        del f


def test_an_entry_for_another_cpu_or_signature_is_not_run(folder, monkeypatch):
    a, out = np.linspace(0.0, 1.0, 5), np.empty(5)
    cpu.kernel(TEXT)(a, 2.0, out)
    (path,) = _entries(folder)
    base, key = os.path.dirname(os.path.dirname(path)), cpu.key_of(TEXT)
    sig = objects.signature((a, 2.0, out))
    assert objects.load(base, key, objects.signature((a, 2, out))) is None  # int scalar: no entry
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[len(objects._MAGIC) : len(objects._MAGIC) + 4], "little")
    start = len(objects._MAGIC) + 4
    header = json.loads(data[start : start + n])
    header["host"][1] = "a-cpu-of-another-kind"
    blob = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(objects._MAGIC + len(blob).to_bytes(4, "little") + blob + data[start + n :])
    assert objects.load(base, key, sig) is None and not os.path.exists(path)  # refused and dropped


def test_a_symbol_this_process_lacks_leaves_the_kernel_to_numba(folder, monkeypatch):
    a, out = np.linspace(0.0, 1.0, 5), np.empty(5)
    cpu.kernel(TEXT)(a, 2.0, out)
    (path,) = _entries(folder)
    base, key = os.path.dirname(os.path.dirname(path)), cpu.key_of(TEXT)
    real = objects._undefined
    monkeypatch.setattr(objects, "_undefined", lambda code: real(code) + [("ngrad_no_such_symbol", False)])
    assert objects.load(base, key, objects.signature((a, 2.0, out))) is None  # LLVM would abort
    cpu._memory.clear()
    k = cpu.kernel(TEXT)
    k(a, 5.0, out)
    np.testing.assert_array_equal(out, a * 5.0 + 1.0)
    assert k._fn is not None


PROGRAM = """
import json, sys
import numpy as np
import ngrad
from ngrad.engine.targets import cpu
x0 = np.linspace(-1.0, 1.0, 301)
m0 = np.arange(12.0).reshape(3, 4) / 10
out = {}
for i in range(3):
    x = ngrad.tensor(x0, requires_grad=True)
    m = ngrad.tensor(m0, requires_grad=True)
    y = (x.sin() * x.exp()).sum() + (m @ m.T).tanh().sum() + (x.reshape(1, -1) ** 2).mean()
    y.backward()
    out = {"y": y.item(), "gx": x.grad.numpy().tolist(), "gm": m.grad.numpy().tolist()}
out["numba"] = "numba" in sys.modules
out["stats"] = dict(cpu.stats)
print(json.dumps(out))
"""


def _run(tmp_path, compiler):
    env = dict(os.environ, NGRAD_CACHE_DIR=str(tmp_path), NGRAD_JIT="always", NGRAD_COMPILE="wait")
    env["NGRAD_CPU_COMPILER"] = compiler
    proc = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def _expected():
    x0 = np.linspace(-1.0, 1.0, 301)
    m0 = np.arange(12.0).reshape(3, 4) / 10
    t = np.tanh(m0 @ m0.T)
    d = 1 - t**2
    gx = np.cos(x0) * np.exp(x0) + np.sin(x0) * np.exp(x0) + 2 * x0 / x0.size
    return gx, (d + d.T) @ m0


@pytest.mark.parametrize("compiler", ["llvm", "numba"])
def test_a_warm_process_runs_its_kernels_without_importing_numba(tmp_path, compiler):
    first = _run(tmp_path, compiler)
    assert first["numba"] == (compiler == "numba") and first["stats"]["compiled"] >= 1
    second = _run(tmp_path, compiler)
    assert not second["numba"], "a warm process imported Numba"
    assert second["stats"]["compiled"] == 0 and second["stats"]["loaded"] >= 1
    assert second["y"] == first["y"] and second["gx"] == first["gx"] and second["gm"] == first["gm"]
    gx, gm = _expected()
    np.testing.assert_allclose(second["gx"], gx, rtol=1e-12)
    np.testing.assert_allclose(second["gm"], gm, rtol=1e-12)


@pytest.mark.parametrize("compiler", ["llvm", "numba"])
def test_corrupt_object_files_are_rebuilt(tmp_path, compiler):
    first = _run(tmp_path, compiler)
    entries = _entries(tmp_path)
    assert entries
    for i, path in enumerate(entries):
        with open(path, "r+b") as f:
            data = f.read()
            f.seek(0)
            if i % 2:
                f.truncate(len(data) // 2)  # cut short
            else:  # a flipped byte in the machine code
                f.write(data[:-40] + bytes([data[-40] ^ 0xFF]) + data[-39:])
    second = _run(tmp_path, compiler)  # the damaged entries are dropped: compiled again (or Numba loads them)
    assert second["gx"] == first["gx"] and second["numba"] == (compiler == "numba")
    assert second["stats"]["compiled"] >= (compiler == "llvm")
    third = _run(tmp_path, compiler)  # and kept again as machine code
    assert third["gx"] == first["gx"] and not third["numba"]
