"""The kernel cache never crashes a program and trusts only what it should (docs/cache.md).

One test per fault: each checks the value computed and the warning or message given. A cache
that cannot be used (not creatable, under a file, writable by others, owned by someone else) is
one ``RuntimeWarning`` naming the folder and the reason, and kernels compile in memory; a
corrupt entry is removed and rebuilt; a read-only cache is read, and what it lacks compiles in
memory. Tests run as root, so permission problems are simulated by patching ``os`` functions.
"""

import builtins
import glob
import os
import shutil
import stat
import subprocess
import sys
import warnings

import numpy as np
import pytest

from ngrad.cli import main
from ngrad.engine import store
from ngrad.engine.targets import cpu as c

pytestmark = pytest.mark.numba


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh process's view of an empty cache at ``tmp_path/cache``: nothing compiled in memory,
    no cache refused yet, kernels compiled by Numba."""
    root = tmp_path / "cache"
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(root))
    # the faults of Numba's files and the kernel modules it compiles from: Numba compiles here
    # (ngrad's own compiler writes object files only; test_objects.py damages those)
    monkeypatch.setenv("NGRAD_CPU_COMPILER", "numba")
    monkeypatch.setattr(c, "_memory", {})
    monkeypatch.setattr(store, "_refused", {}, raising=False)
    return root


def _text(value):
    return f"def kernel(a):\n    a[0] += {value!r}\n"


def _run(value):
    """Compile (or load) the kernel adding ``value`` and check what it computes."""
    a = np.zeros(1)
    c.kernel(_text(value))(a)
    assert a[0] == value
    return a[0]


def _files(root):
    return sorted(p for p in glob.glob(str(root / "**"), recursive=True) if os.path.isfile(p))


def _new_process(monkeypatch):
    """What a new process has in memory: no kernels, nothing refused."""
    monkeypatch.setattr(c, "_memory", {})
    monkeypatch.setattr(store, "_refused", {}, raising=False)


def _numba_path():
    """Drop the kept machine code (``objects/``), which a new process runs before it reads a
    module or Numba's files (``tests/test_objects.py`` damages those): the next run goes
    through the module and Numba's cache, whose repairs these tests check."""
    for p in glob.glob(os.path.join(store.cache_dir(), "objects", "*")):
        os.unlink(p)


def _one_warning(caught, *words):
    ours = [w for w in caught if issubclass(w.category, RuntimeWarning) and "kernel cache" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    for word in words:
        assert word in str(ours[0].message)


@pytest.mark.parametrize(("where", "reason"), [("f/cache", "Not a directory"), ("x" * 300, "File name too long")])
def test_a_cache_under_a_file_or_too_long_warns_once_and_runs_in_memory(cache, tmp_path, monkeypatch, where, reason):
    (tmp_path / "f").write_text("a file")
    root = tmp_path / where
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(root))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(1.25)
        _run(1.5)  # a second kernel: no second warning
        store.write_plan("p", b"data")
        assert store.read_plan("p") is None
    _one_warning(caught, str(root), reason)
    assert not store.on_disk(_text(1.25))


PROGRAM = r"""
import numpy as np, ngrad
x = ngrad.tensor(np.linspace(-2, 2, 11), dtype=ngrad.float64, requires_grad=True)
for _ in range(3):
    x.grad = None
    y = (x.sin() * x.exp()).sum()
    y.backward()
print(repr(y.item()), repr(x.grad.tolist()))
"""


def test_an_ordinary_loop_runs_on_with_an_unusable_cache(tmp_path):
    (tmp_path / "f").write_text("a file")
    # ``wait``: the third call's compile, and its one warning, happen before the program ends
    env = dict(os.environ, NGRAD_CACHE_DIR=str(tmp_path / "f" / "cache"), NGRAD_JIT="auto", NGRAD_COMPILE="wait")
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    value, grad = (eval(s) for s in out.stdout.strip().split(" ", 1))
    x = np.linspace(-2, 2, 11)
    np.testing.assert_allclose(value, np.sum(np.sin(x) * np.exp(x)), rtol=1e-12)
    np.testing.assert_allclose(grad, (np.cos(x) + np.sin(x)) * np.exp(x), rtol=1e-12)
    assert out.stderr.count("RuntimeWarning") == 1 and "Not a directory" in out.stderr


def test_a_cache_that_cannot_be_created_warns_and_runs_in_memory(cache, monkeypatch):
    real = os.mkdir

    def denied(path, *args, **kwargs):
        if str(path).startswith(str(cache)):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", denied)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(2.25)
    _one_warning(caught, str(cache), "Permission denied")
    assert not cache.exists()


def test_the_cache_is_made_private_to_the_user(cache):
    _run(2.5)
    folder = store.cache_dir()
    for path in (str(cache), folder, os.path.join(folder, "__pycache__")):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700, path


def _read_only(monkeypatch, root):
    """Make every write under ``root`` fail as it would for a user without write permission."""
    under = lambda p: isinstance(p, (str, os.PathLike)) and os.path.abspath(p).startswith(str(root))
    real_open, real_os_open, real_mkdir, real_access = builtins.open, os.open, os.mkdir, os.access

    def deny(path):
        raise PermissionError(13, "Permission denied", str(path))

    def open_(path, mode="r", *args, **kwargs):
        if under(path) and any(m in mode for m in "wax+"):
            deny(path)
        return real_open(path, mode, *args, **kwargs)

    def os_open(path, flags, *args, **kwargs):
        if under(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            deny(path)
        return real_os_open(path, flags, *args, **kwargs)

    def mkdir(path, *args, **kwargs):
        if under(path) and not os.path.isdir(path):
            deny(path)
        return real_mkdir(path, *args, **kwargs)

    def access(path, mode, *args, **kwargs):
        return False if under(path) and mode & os.W_OK else real_access(path, mode, *args, **kwargs)

    def refuse(real):
        return lambda path, *args, **kwargs: deny(path) if under(path) else real(path, *args, **kwargs)

    for name in ("unlink", "remove", "rmdir", "replace", "rename"):
        monkeypatch.setattr(os, name, refuse(getattr(os, name)))
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "access", access)


def test_a_read_only_cache_is_read_and_what_it_lacks_compiles_in_memory(cache, monkeypatch, capsys):
    _run(3.25)  # the administrator fills the shared cache
    _run(3.75)
    key = c.key_of(_text(3.75))
    made = glob.glob(os.path.join(store.cache_dir(), "__pycache__", key + ".*"))
    for p in made + glob.glob(os.path.join(store.cache_dir(), "objects", key + "-*.o")):
        os.unlink(p)  # a module without Numba's files or machine code: compiled, and not saved
    before = _files(cache)
    _new_process(monkeypatch)
    _read_only(monkeypatch, cache)
    stats = dict(c.stats)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a read-only cache is a supported setting: no warning
        _run(3.25)
        _run(3.5)  # not in the cache
        _run(3.75)
        store.write_plan("p", b"data")
    assert c.stats["loaded"] == stats["loaded"] + 1 and c.stats["compiled"] == stats["compiled"] + 2
    assert _files(cache) == before
    assert main(["cache", "info"]) == 0
    assert "read-only" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["root", "folder", "__pycache__", "objects"])
def test_a_folder_writable_by_others_is_refused(cache, monkeypatch, where, capsys):
    _run(4.25)
    before = _files(cache)
    path = {"root": str(cache), "folder": store.cache_dir()}.get(where) or os.path.join(store.cache_dir(), where)
    os.chmod(path, 0o775)
    _new_process(monkeypatch)
    stats = dict(c.stats)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(4.25)  # on disk, but not trusted: compiled again, in memory
        _run(4.5)
    _one_warning(caught, str(cache), path, "writable by group or others")
    assert c.stats["compiled"] == stats["compiled"] + 2
    assert _files(cache) == before
    assert main(["cache", "info"]) == 1
    assert "writable by group or others" in capsys.readouterr().out


def test_a_folder_owned_by_another_user_is_refused_unless_trusted(cache, monkeypatch):
    _run(5.25)
    real = os.stat

    def foreign(path, *args, **kwargs):
        st = real(path, *args, **kwargs)
        if not isinstance(path, (str, os.PathLike)) or os.path.abspath(path) != str(cache):
            return st
        fields = list(st[:10])
        fields[4] = 4242  # st_uid
        return os.stat_result(fields)

    monkeypatch.setattr(os, "stat", foreign)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # a user, not root (whom ngrad also trusts)
    _new_process(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(5.25)
    _one_warning(caught, str(cache), "owned by user id 4242")
    # the owner named as trusted (a shared cache's service account): used, and loaded from
    monkeypatch.setenv("NGRAD_CACHE_OWNERS", "nosuchuser, 4242")
    _new_process(monkeypatch)
    loaded = c.stats["loaded"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run(5.25)
    assert c.stats["loaded"] == loaded + 1


def test_random_bytes_in_a_cached_module_are_replaced(cache, monkeypatch):
    _run(6.25)
    (path,) = glob.glob(os.path.join(store.cache_dir(), "k*.py"))
    with open(path, "wb") as f:
        f.write(b"\xff\xfe\x00" + os.urandom(64))
    _numba_path()
    _new_process(monkeypatch)
    _run(6.25)
    with open(path) as f:
        assert f.read() == _text(6.25)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_damaged_numba_index_and_data_are_removed_and_rebuilt(cache, monkeypatch, damage):
    _run(7.25)
    files = glob.glob(os.path.join(store.cache_dir(), "__pycache__", "*"))
    assert any(p.endswith(".nbi") for p in files) and any(p.endswith(".nbc") for p in files)
    for p in files:
        with open(p, "rb") as f:
            data = f.read()
        with open(p, "wb") as f:
            f.write(data[: len(data) // 2] if damage == "truncate" else b"\x80\x04garbage" + data[-40:])
    _numba_path()
    _new_process(monkeypatch)
    compiled = c.stats["compiled"]
    _run(7.25)
    assert c.stats["compiled"] == compiled + 1
    _new_process(monkeypatch)  # rebuilt: the next process loads it
    loaded = c.stats["loaded"]
    _run(7.25)
    assert c.stats["loaded"] == loaded + 1


def test_the_cache_removed_while_a_kernel_compiles(cache, monkeypatch):
    """What ``ngrad cache clear`` in another shell does to a process compiling."""
    real = c.write_atomically

    def then_clear(path, data):
        real(path, data)
        shutil.rmtree(cache)

    monkeypatch.setattr(c, "write_atomically", then_clear)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run(8.25)
    monkeypatch.setattr(c, "write_atomically", real)
    _new_process(monkeypatch)
    _run(8.25)  # the next process finds the module missing and writes it again


def test_the_module_run_is_the_text_that_was_checked(cache, monkeypatch):
    """The file is compared with the expected text, and that text is run: a file swapped after
    the check (by whoever can write the folder) is never read again."""
    _run(9.25)
    (path,) = glob.glob(os.path.join(store.cache_dir(), "k*.py"))
    real = builtins.open
    swapped = []

    def open_then_swap(file, *args, **kwargs):
        f = real(file, *args, **kwargs)
        if file == path and not swapped:
            swapped.append(True)
            with real(path + ".new", "w") as g:
                g.write(_text(666.0))
            os.replace(path + ".new", path)
        return f

    _numba_path()
    _new_process(monkeypatch)
    monkeypatch.setattr(builtins, "open", open_then_swap)
    _run(9.25)
    assert swapped


def test_cache_info_on_an_unusable_cache_exits_non_zero_with_the_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(store, "_refused", {}, raising=False)
    (tmp_path / "f").write_text("a file")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path / "f" / "cache"))
    assert main(["cache", "info"]) == 1
    out = capsys.readouterr().out
    assert "unusable" in out and "Not a directory" in out and str(tmp_path / "f") in out
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path / ("x" * 300)))
    assert main(["cache", "info"]) == 1
    assert "File name too long" in capsys.readouterr().out
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path / "new"))  # missing but creatable: fine
    assert main(["cache", "info"]) == 0
    assert not (tmp_path / "new").exists()  # and info creates nothing


def test_cache_clear_removes_only_ngrads_folders(cache):
    _run(10.25)
    (cache / "notes.txt").write_text("the user's file")
    assert c.cache_clear() >= 2
    assert os.listdir(cache) == ["notes.txt"]
