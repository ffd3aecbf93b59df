"""The disk store: the versioned cache folder, whether it may be trusted, and the plans kept in it.

Contract: ``cache_dir()`` is the path of the folder of this ngrad, Numba and code-format version
under ``config.cache_root()``; ``usable_dir()`` creates it (private to the user, mode 0700) and
returns it only when it may be trusted: the root and the folder (and the subfolders in use) are
directories owned by this user, root or an owner named in ``NGRAD_CACHE_OWNERS``, and writable
by no group or other user, since the cache holds code ngrad runs. A cache that cannot be used
(not creatable, under a file, refused) gives one ``RuntimeWarning`` naming the folder and the
reason, and None: the caller runs in memory, and the cache is not tried again in this process.
``problem()`` states that reason without creating anything (for ``ngrad cache info``);
``writable()`` tells a read-only cache, which is still read. ``write_plan(name, data)`` stores
bytes there through a temporary file renamed into place, after a SHA-256 of them, and
``read_plan(name)`` gives them back only when the checksum holds (a damaged or half-written
plan reads as missing, so it is made again); both do nothing when the cache cannot be used;
``plan_name`` names a plan after its key and the source of the code that made it. The store
imports nothing of the pipeline, so every stage may keep what it makes here (differentiation its
joint tapes, the back end its bytecode, the targets their generated modules) and none of them
imports a later stage to do so. It never imports Numba, nor the facade: their versions come from
package metadata.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import re
import stat
import sys
import tempfile
import warnings
from collections.abc import Iterable
from types import ModuleType
from typing import Any, cast

from . import pace
from .config import cache_owners, cache_root

__all__ = [
    "CODEGEN_VERSION",
    "cache_root",
    "cache_dir",
    "usable_dir",
    "problem",
    "refused",
    "writable",
    "write_atomically",
    "read_plan",
    "has_plan",
    "write_plan",
    "plan_name",
    "key_of",
    "code_of",
    "on_disk",
]

# The format of generated kernel text: bump whenever codegen's output or backend/vmath.py changes
# meaning, so that kernels cached by an older ngrad are never loaded (the cache folder is named
# after it).
CODEGEN_VERSION = 30


@functools.cache
def _version(package: str) -> str:
    """An installed package's version from its metadata (the engine imports neither the facade,
    where ngrad's ``__version__`` lives, nor Numba); "none" when it is not installed. Read from
    the name of the ``<package>-<version>.dist-info`` folder in the first entry of ``sys.path``
    that holds one (an editable install's is in site-packages, not beside its code), else by
    ``importlib.metadata``, whose search of every path entry took 4 ms of the interpreter's lock
    on the compile worker, beside the calls (a listing of each folder: 0.3 ms).

    >>> _version("numpy") == __import__("numpy").__version__
    True
    """
    pace.step()  # reading the installed packages' metadata takes milliseconds, once
    prefix = package + "-"
    for entry in sys.path:
        try:
            found = [n for n in os.listdir(entry or ".") if n.startswith(prefix) and n.endswith(".dist-info")]
        except OSError:  # not a folder (a zip file), or gone
            continue
        if len(found) == 1:
            return found[0][len(prefix) : -len(".dist-info")]
        if found:  # several versions' metadata: importlib.metadata's choice
            break
    import importlib.metadata  # only here: its import is 10 ms

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def cache_dir() -> str:
    """The versioned folder of this ngrad, Numba and codegen version (created on demand)."""
    return os.path.join(cache_root(), f"ngrad{_version('ngrad')}-numba{_version('numba')}-codegen{CODEGEN_VERSION}")


# The roots found unusable in this process, with the reason: warned about once, then left alone.
_refused: dict[str, str] = {}


def _trusted_owners() -> set[int]:
    """This user, root (who can change any file anyway) and the owners ``NGRAD_CACHE_OWNERS``
    names (user names or numeric ids; a name this system does not know trusts no one)."""
    owners = {os.geteuid(), 0}
    for name in cache_owners():
        if name.isdigit():
            owners.add(int(name))
            continue
        try:
            import pwd

            owners.add(pwd.getpwnam(name).pw_uid)
        except (ImportError, KeyError):
            pass
    return owners


def _untrusted(path: str, owners: set[int]) -> str | None:
    """Why the existing ``path`` may not hold code ngrad runs, or None when it may."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid not in owners:
        return f"{path} is owned by user id {st.st_uid}, not by you (or root, or NGRAD_CACHE_OWNERS)"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}; chmod go-w it)"
    return None


def _check(root: str, folder: str, create: bool) -> str | None:
    """Why the cache at ``root`` cannot be used, or None; with ``create``, missing folders are
    made (mode 0700) first, else a missing folder is fine when it could be made."""
    if not hasattr(os, "geteuid"):  # no POSIX owners (Windows): the folder is the user's profile
        return None
    owners = _trusted_owners()
    for path in (root, folder):
        try:
            if create:
                os.makedirs(path, mode=0o700, exist_ok=True)
            else:
                try:
                    os.stat(path)
                except FileNotFoundError:  # made at the first write, if it can be
                    parent = os.path.dirname(os.path.abspath(path))
                    while not os.path.exists(parent):
                        parent = os.path.dirname(parent)
                    if not os.access(parent, os.W_OK | os.X_OK):
                        return f"{path} cannot be created (permission denied in {parent})"
                    return None
            reason = _untrusted(path, owners)
        except OSError as e:
            return f"{path} cannot be created or read ({e.strerror or e})"
        if reason:
            return reason
    for sub in ("__pycache__", "plans", "objects"):  # Numba's pickles, ngrad's plans and machine code
        try:
            reason = _untrusted(os.path.join(folder, sub), owners)
        except FileNotFoundError:
            continue
        except OSError as e:
            return f"{os.path.join(folder, sub)} cannot be read ({e.strerror or e})"
        if reason:
            return reason
    return None


def usable_dir(create: bool = True) -> str | None:
    """This version's cache folder, checked (see the module's contract) and, with ``create``,
    made when missing (a reader need not make it); None, after one ``RuntimeWarning``, when it
    cannot be used: run in memory."""
    root = cache_root()
    if root in _refused:
        return None
    reason = _check(root, cache_dir(), create)
    if reason is None:
        return cache_dir()
    if _refused.setdefault(root, reason) is not reason:  # another thread warned first
        return None
    warnings.warn(
        f"ngrad's kernel cache {root} cannot be used: {reason}. ngrad runs on, compiling in memory "
        "(set NGRAD_CACHE_DIR to a folder of your own to keep compiled kernels)",
        RuntimeWarning,
        stacklevel=2,
    )
    return None


def refused() -> bool:
    """True when this process found the cache unusable (and warned): nothing is read from it."""
    return cache_root() in _refused


def problem() -> str | None:
    """Why the cache cannot be used, or None; creates nothing (``ngrad cache info``)."""
    return _refused.get(cache_root()) or _check(cache_root(), cache_dir(), create=False)


def writable(folder: str) -> bool:
    """Whether this process may write into ``folder`` (a cache may be read-only: shared, made
    by a service account; it is then only read)."""
    return os.access(folder, os.W_OK | os.X_OK)


def write_atomically(path: str, data: str | bytes) -> None:
    """Write ``data`` (text, or bytes) to ``path`` through a temporary file renamed into place:
    a reader sees the old file, the new one, or none. Missing folders are made private (0700)."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_plan(name: str) -> bytes | None:
    """The bytes stored under ``name`` by ``write_plan`` in this version's cache; None when there
    are none, they fail their checksum (damaged, cut short, written by something else) or the
    cache cannot be used."""
    folder = usable_dir(create=False)
    if folder is None:
        return None
    try:
        with open(os.path.join(folder, "plans", name), "rb") as f:
            data = f.read()
    except OSError:
        return None
    body = data[32:]
    return body if len(data) >= 32 and hashlib.sha256(body).digest() == data[:32] else None


@functools.cache
def _source_digest(modules: tuple[ModuleType, ...]) -> bytes:
    h = hashlib.sha256()
    for module in modules:
        with open(cast(str, module.__file__), "rb") as f:  # ngrad's own modules, read from files
            h.update(f.read())
    return h.digest()


def _plain(key: Any) -> Any:
    """``key`` with the tuple subclasses in it (``tape.HashedKey``, down to two levels: a key, or
    a tuple holding keys) made plain tuples, which is all ``marshal`` takes."""
    if isinstance(key, tuple):
        if type(key) is not tuple:
            return tuple(key)
        if any(isinstance(e, tuple) and type(e) is not tuple for e in key):
            return tuple(tuple(e) if isinstance(e, tuple) else e for e in key)
    return key


def plan_name(kind: str, modules: Iterable[ModuleType], key: Any) -> str | None:
    """The name a plan of ``kind`` (a prefix) made from ``key`` by the code of ``modules`` is
    stored under: a hash of both, so a plan is read back only by code that makes the same (and
    ``read_plan``'s checksum holds). None when ``key`` holds a value ``marshal`` does not take or
    the sources cannot be read: such a plan is not stored.

    >>> import sys
    >>> plan_name("x", (sys.modules[__name__],), ("a", 1))[:1], len(plan_name("x", (), 0))
    ('x', 33)
    """
    try:
        # version 2 writes values only: the default marks objects referenced elsewhere, so equal
        # keys gave other bytes (another name) as soon as something else held a part of them
        body = marshal.dumps(_plain(key), 2)
        digest = _source_digest(tuple(modules))
    except (ValueError, OSError):
        return None
    return kind + hashlib.sha256(digest + body).hexdigest()[:32]


def has_plan(name: str) -> bool:
    """Whether something is stored under ``name`` in this version's cache (unchecked: a file
    that ``read_plan`` then refuses is made again)."""
    folder = usable_dir(create=False)
    return folder is not None and os.path.exists(os.path.join(folder, "plans", name))


def write_plan(name: str, data: bytes) -> None:
    """Store the bytes ``data`` under ``name``: atomically, after a SHA-256 of them that
    ``read_plan`` checks. A cache that cannot be used or written is no error: the plan is made
    again next time."""
    folder = usable_dir()
    if folder is None:
        return
    try:
        write_atomically(os.path.join(folder, "plans", name), hashlib.sha256(data).digest() + data)
    except OSError:
        pass


_COMMENT = re.compile(r"[ \t]+#[^\n]*")


def code_of(text: str) -> str:
    """Generated source without its comments: each line's comment names the tape instruction it
    came from, with that instruction's sizes, where the code itself takes sizes as arguments."""
    return _COMMENT.sub("", text)


@functools.lru_cache(maxsize=128)
def key_of(text: str) -> str:
    """The name of a generated module's file in the cache: a hash of its code (``code_of``), so
    programs that differ only in sizes share one kernel and compile once. Remembered for the
    texts seen last: stripping the comments of ba's largest kernel (112 KB) takes 0.7 ms of one
    regular expression, which holds the interpreter's lock throughout, and a plan asks for each
    of its kernels' keys twice (whether it is on disk, then the kernel itself)."""
    return "k" + hashlib.sha256(code_of(text).encode()).hexdigest()[:24]


# (the folders of machine code and their modification times) and the keys with an entry there:
# listed again only when a folder changed, since a glob per kernel scanned the whole folder (6 ms a
# kernel with 3,800 files in it; 85 ms of a 0.4 s first call of ba)
_indexed: list[tuple[object, frozenset[str]]] = [(None, frozenset())]


def on_disk(text: str) -> bool:
    """True when machine code of the kernel of generated module ``text`` is on disk: an object
    file (``targets/objects.py``, what ngrad's own compiler writes and Numba's code is kept as) or
    Numba's cache index for it (read without importing Numba, so deciding to load costs no Numba
    start-up)."""
    if refused():
        return False
    # Numba's index files: {key}.{function}-{line}.py{version}.nbi; object files: {key}-{tag}.o
    folders = (
        (os.path.join(cache_dir(), "__pycache__"), ".nbi", "."),
        (os.path.join(cache_dir(), "objects"), ".o", "-"),
    )
    stamp: list[int | None] = []
    for folder, _, _ in folders:
        try:
            stamp.append(os.stat(folder).st_mtime_ns)
        except OSError:
            stamp.append(None)
    seen, keys = _indexed[0]
    if seen != stamp:
        found: set[str] = set()
        for (folder, suffix, sep), mtime in zip(folders, stamp):
            if mtime is None:
                continue
            try:
                with os.scandir(folder) as entries:
                    found.update(e.name.split(sep, 1)[0] for e in entries if e.name.endswith(suffix))
            except OSError:
                continue
        keys = frozenset(found)
        _indexed[0] = (stamp, keys)
    return key_of(text) in keys
