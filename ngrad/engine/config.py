"""Settings from the environment: the one module that reads ``NGRAD_*`` variables.

Contract: each function reads its variable when called (tests and users may change it between
calls), validates it, and returns a plain value; an invalid value raises a ``ValueError`` that
names the variable and its allowed values, except the debug level and the JIT threshold, which
fall back to their defaults as they always have. Every layer of the engine may import this
module; it imports nothing of the engine.

>>> import os
>>> os.environ["NGRAD_JIT"] = "never"; jit_mode()
'never'
>>> del os.environ["NGRAD_JIT"]; jit_mode()
'auto'
"""

from __future__ import annotations

import functools
import math
import os

__all__ = [
    "debug_level",
    "jit_mode",
    "jit_threshold",
    "scan_unroll",
    "compile_mode",
    "compile_threads",
    "cores",
    "blas_mode",
    "cache_root",
    "cache_owners",
    "cuda_simulated",
    "memory_entries",
    "malloc_mode",
]


# ``os.environ.get`` costs about a microsecond (the name encoded, the value decoded, through
# Mapping.get), and every call of a program reads the debug level and the JIT mode: the
# polynomial tutorial's 63 µs iteration spent 2 of them here. The variable is looked up in the
# mapping's own table under its encoded name, and a raw value is parsed once; ``os.environ``'s
# ``__setitem__``/``__delitem__`` (and so ``monkeypatch.setenv``) update that table.
_environ = os.environ
_table = _environ._data  # type: ignore[attr-defined]
_encoded: dict[str, object] = {}
_parsed: dict[tuple, object] = {}


def _raw(name: str) -> object:
    """The variable's value as ``os.environ`` holds it (encoded), or None."""
    key = _encoded.get(name)
    if key is None:
        key = _encoded[name] = _environ.encodekey(name)  # type: ignore[attr-defined]
    return _table.get(key)


def _text(raw: object) -> str | None:
    return None if raw is None else _environ.decodevalue(raw)  # type: ignore[attr-defined,arg-type]


def _remember(key: tuple, value: object) -> None:
    if len(_parsed) > 256:  # the values a long test session set and unset
        _parsed.clear()
    _parsed[key] = value


def _choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    key = (name, _raw(name), default)
    value = _parsed.get(key)
    if value is None:
        value = (_text(key[1]) or default).strip().lower() or default
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)} (got {value!r})")
        _remember(key, value)
    return value  # type: ignore[return-value]


def _int(name: str, default: int) -> int:
    key = (name, _raw(name), default)
    value = _parsed.get(key)
    if value is None:
        try:
            value = int(_text(key[1]) or default)
        except ValueError:
            value = default
        _remember(key, value)
    return value  # type: ignore[return-value]


def debug_level() -> int:
    """``NGRAD_DEBUG``: 0 quiet, 1 print tapes, 2 also generated source, 3 also timings (of kernels
    and of each backend pass), 4 also the passes rendering each element of a kernel."""
    return _int("NGRAD_DEBUG", 0)


def jit_mode() -> str:
    """``NGRAD_JIT``: ``auto`` (tiered), ``always`` (compile at once) or ``never`` (interpret)."""
    return _choice("NGRAD_JIT", "auto", ("auto", "always", "never"))


# where Linux mounts the control groups (cgroup v2 ``cpu.max``, v1 ``cpu/cpu.cfs_quota_us``)
CGROUP_ROOT = "/sys/fs/cgroup"


def _cgroup_cpus(root: str) -> float | None:
    """The CPUs a control group's quota grants this process (``docker --cpus 2``: 2.0), or None
    where no quota is set or none can be read. Version 2 first, at the process's own group and at
    the root a container sees, then version 1."""
    places = []
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    places.append(os.path.join(root, line[3:].strip().lstrip("/"), "cpu.max"))
    except OSError:
        pass
    places.append(os.path.join(root, "cpu.max"))
    for path in places:
        try:
            with open(path) as f:
                fields = (f.read().split() + ["100000"])[:2]
            if fields[0] == "max":
                return None
            share, every = int(fields[0]), int(fields[1])
        except (OSError, ValueError):
            continue
        return share / every if share > 0 and every > 0 else None
    try:
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as f:
            share = int(f.read())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as f:
            every = int(f.read())
    except (OSError, ValueError):
        return None
    return share / every if share > 0 and every > 0 else None


@functools.cache
def cores() -> int:
    """The cores this process may run on, read once (``os.cpu_count()`` took 22-35 µs, and a
    scan's body asked on every call): those its CPU affinity allows (``taskset``, a container's
    cpuset), fewer where a control group's CPU quota grants less (``docker --cpus``, a
    Kubernetes limit), at least one. The compile mode, the compile threads and the BLAS threads
    left to the calls while compiles run are counted from it: counted from the host's CPUs, a
    program limited to two of sixteen compiled on fifteen threads beside its calls.

    >>> cores() >= 1
    True
    """
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        n = os.cpu_count() or 1
    quota = _cgroup_cpus(CGROUP_ROOT)
    if quota is not None:
        n = min(n, max(1, math.ceil(quota)))
    return max(1, n)


def compile_mode() -> str:
    """``NGRAD_COMPILE``: where ``auto`` compiles a tape's kernels while its calls run on the
    interpreter: ``process`` (a child process compiles them into the disk cache and a worker
    thread loads them), ``thread`` (a worker thread compiles them; a tape whose scans are
    written out for bytecode is still encoded by the child), or ``wait`` (the call that needs
    them compiles them). By default ``process`` on a machine of four cores or more, else
    ``thread`` (on two cores a child competes for the same cores and delivers later)."""
    default = "process" if cores() >= 4 else "thread"
    return _choice("NGRAD_COMPILE", default, ("process", "thread", "wait"))


def compile_threads() -> int:
    """``NGRAD_COMPILE_THREADS``: how many threads the compile server compiles a plan's kernels
    on at once (``targets.cpu.compile_ahead``); by default one less than the cores (the
    program's calls keep one), at least 1 (one at a time, as its warm-up run meets them)."""
    return max(1, _int("NGRAD_COMPILE_THREADS", cores() - 1))


def cpu_compiler() -> str:
    """``NGRAD_CPU_COMPILER``: what compiles CPU kernels: ``llvm`` (default: ngrad's own emitter,
    ``targets/llvm.py``, with Numba for the kernels it does not handle) or ``numba`` (Numba
    alone)."""
    return _choice("NGRAD_CPU_COMPILER", "llvm", ("llvm", "numba"))


def jit_threshold() -> int:
    """``NGRAD_JIT_THRESHOLD``: the call of a tape structure that compiles it under ``auto``."""
    return max(1, _int("NGRAD_JIT_THRESHOLD", 2))


def scan_unroll() -> int:
    """``NGRAD_SCAN_UNROLL``: the most instructions a program's scans may make written out step by
    step to run as bytecode (``runtime.tiering.Policy.unroll_max_instrs``); 0 keeps every scan a
    loop of body calls."""
    return max(0, _int("NGRAD_SCAN_UNROLL", 65536))


def blas_mode() -> str:
    """``NGRAD_BLAS``: which library runs big matrix products: ``auto``, ``mkl`` or ``numpy``."""
    return _choice("NGRAD_BLAS", "auto", ("auto", "mkl", "numpy"))


def cache_root() -> str:
    """``NGRAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/ngrad``, else ``~/.cache/ngrad``."""
    base = os.environ.get("NGRAD_CACHE_DIR")
    if not base:
        home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(home, "ngrad")
    return base


def cache_owners() -> tuple[str, ...]:
    """``NGRAD_CACHE_OWNERS``: comma-separated users (names or numeric ids) trusted to own the
    kernel cache besides you and root, e.g. the service account of a shared read-only cache."""
    return tuple(n.strip() for n in os.environ.get("NGRAD_CACHE_OWNERS", "").split(",") if n.strip())


def cuda_simulated() -> bool:
    """Whether Numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM``, read by Numba at import)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def memory_entries() -> int:
    """``NGRAD_MEMORY_ENTRIES``: how many entries each in-memory cache keeps, least recently used
    dropped first: compiled kernels, tiering records (with their compiled plans) and CUDA programs
    keep this many (default 1024); an ``ngrad.compile`` function keeps an eighth of it (default
    128) argument structures, each with its 8 latest variants. Measured: seven compile-heavy test
    files made 372 kernels and 309 records in one process, so the benchmarks and the test suite do
    not evict at the default; a soak of 2,000 new structures stays flat once it reaches it."""
    return max(1, _int("NGRAD_MEMORY_ENTRIES", 1024))


def malloc_mode() -> str:
    """``NGRAD_MALLOC``: ``keep`` (default: glibc's malloc keeps freed memory mapped for the next
    arrays, see ``runtime.allocator``) or ``system`` (malloc is left as the process has it)."""
    return _choice("NGRAD_MALLOC", "keep", ("keep", "system"))
