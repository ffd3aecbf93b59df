"""The disk store: the versioned cache folder and the plans kept in it, written atomically.

Contract: ``cache_dir()`` is the folder of this ngrad, Numba and code-format version under
``config.cache_root()``; ``write_plan(name, data)`` stores bytes there through a temporary file
renamed into place, after a SHA-256 of them, and ``read_plan(name)`` gives them back only when
the checksum holds (a damaged or half-written plan reads as missing, so it is made again);
``plan_name`` names a plan after its key and the source of the code that made it. The store
imports nothing of the pipeline, so every stage may keep what it makes here (differentiation its
joint tapes, the back end its bytecode, the targets their generated modules) and none of them
imports a later stage to do so. It never imports Numba, nor the facade: their versions come from
package metadata.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import marshal
import os
import tempfile
from collections.abc import Iterable
from types import ModuleType
from typing import Any, cast

from .config import cache_root

__all__ = ["CODEGEN_VERSION", "cache_root", "cache_dir", "write_atomically", "read_plan", "write_plan", "plan_name"]

# The format of generated kernel text: bump whenever codegen's output or backend/vmath.py changes
# meaning, so that kernels cached by an older ngrad are never loaded (the cache folder is named
# after it).
CODEGEN_VERSION = 24


@functools.cache
def _version(package: str) -> str:
    """An installed package's version from its metadata (the engine imports neither the facade,
    where ngrad's ``__version__`` lives, nor Numba); "none" when it is not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def cache_dir() -> str:
    """The versioned folder of this ngrad, Numba and codegen version (created on demand)."""
    return os.path.join(cache_root(), f"ngrad{_version('ngrad')}-numba{_version('numba')}-codegen{CODEGEN_VERSION}")


def write_atomically(path: str, data: str | bytes) -> None:
    """Write ``data`` (text, or bytes) to ``path`` through a temporary file renamed into place:
    a reader sees the old file, the new one, or none."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
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
    are none or they fail their checksum (damaged, cut short, written by something else)."""
    try:
        with open(os.path.join(cache_dir(), "plans", name), "rb") as f:
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
        body = marshal.dumps(key)
        digest = _source_digest(tuple(modules))
    except (ValueError, OSError):
        return None
    return kind + hashlib.sha256(digest + body).hexdigest()[:32]


def write_plan(name: str, data: bytes) -> None:
    """Store the bytes ``data`` under ``name``: atomically, after a SHA-256 of them that
    ``read_plan`` checks. A cache that cannot be written is no error: the plan is made again
    next time."""
    try:
        write_atomically(os.path.join(cache_dir(), "plans", name), hashlib.sha256(data).digest() + data)
    except OSError:
        pass
