"""The CPU target: generated kernel source -> a callable of its machine code.

Contract: ``kernel(text)`` returns a callable compiled from the source of one generated
module (see ``codegen``), cached in memory by the text's hash and on disk under
``cache_dir()`` when ``store.usable_dir()`` trusts that folder. A kernel's first call of a
signature runs, in this order: the machine code kept for it as an object file (``objects``:
loaded without importing Numba), else ngrad's own compiler (``llvm``: the kernel text straight to
LLVM IR, 5-10x faster than Numba and without Numba's 0.3 s start-up; ``NGRAD_CPU_COMPILER=numba``
turns it off), else Numba's (``njit``: for the texts and signatures ``llvm`` does not handle;
its disk cache, in that folder's ``__pycache__`` only, reloads the machine code without
compiling, and without the target context's registries of implementations, which only a compile
needs), else a Numba compile; what either compiler made is then kept as an object file for the
next process. The module is
written atomically (a temporary file renamed into place), read back and compared before it is
run, and the compared text itself is compiled (under the file's name, registered in
``sys.modules``), so nothing read later from disk runs. A disk entry that is corrupt (the module
text, Numba's cache files, an object file) is deleted and rebuilt, never trusted; a cache that
cannot be used, written or that vanishes meanwhile never fails a program: kernels then compile
in memory (``cache=False``, the module run from its text). ``read_plan``/``write_plan``
(``engine/store.py``) keep other compiled artefacts (bytecode encodings) in the same versioned
folder. ``cache_info``/``cache_clear`` report and empty the disk cache. This module imports
neither Numba nor llvmlite; ``njit`` and ``objects`` do, when a kernel first needs them.
``targets/cuda.py`` is the CUDA target.
"""

import contextlib
import glob
import os
import sys
import threading
import time
from types import ModuleType

from .. import pace
from ..config import cpu_compiler, debug_level
from ..recent import Recent
from ..store import cache_dir, cache_root, code_of, key_of, problem, usable_dir, writable, write_atomically
from . import CompileError, objects

__all__ = [
    "kernel",
    "cache_info",
    "cache_clear",
    "stats",
    "direct",
    "compile_ahead",
    "quick_first",
    "upgrade",
    "key_of",
    "resident",
    "warm_up",
    "Kernel",
]


class _Kernels(Recent):
    """The kernels in memory, the least recently used dropped past ``NGRAD_MEMORY_ENTRIES``: an
    evicted kernel's module leaves ``sys.modules`` too (a plan still holding the kernel keeps it
    working), and asking for it again builds it anew, from the disk cache when it is there."""

    def evicted(self, key, value):
        sys.modules.pop(f"ngrad_kernels.{key}", None)


_memory: dict[str, "Kernel"] = _Kernels()
_lock = threading.Lock()
stats = {"compiled": 0, "loaded": 0, "seconds": 0.0}


def _purge(key, folder=None):
    """Delete the module, Numba's files and the object files of ``key`` in ``folder`` (by default
    the cache folder, when it may be used: a refused cache is never written, not even to delete)."""
    folder = folder or usable_dir()
    if folder is None:
        return
    paths = [os.path.join(folder, f"{key}.py")]
    paths += glob.glob(os.path.join(folder, "__pycache__", f"{key}.*"))
    paths += glob.glob(os.path.join(folder, "objects", f"{key}-*.o"))
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


def load_module(key, text):
    """The generated module ``text`` and the path of its file ``{key}.py`` in the cache folder,
    or None when it runs from memory (the cache cannot be used, is read-only and lacks it, or
    failed to write). The file is (re)written when missing, cut short or corrupt (Numba's files
    for it are dropped too), and the module is compiled from ``text`` itself, the bytes just
    compared, never from a second read of the file; its code names the file, as Numba's disk
    cache requires."""
    folder = usable_dir()
    path = None if folder is None else os.path.join(folder, f"{key}.py")
    if path is not None:
        try:
            with open(path, "rb") as f:  # the same code (comments may name other sizes)
                ok = code_of(f.read().decode("utf-8", "replace")) == code_of(text)
        except OSError:
            ok = False
        if not ok and writable(folder):
            _purge(key, folder)
            try:
                write_atomically(path, text)
            except OSError:  # the folder removed or filled meanwhile: this kernel runs from memory
                path = None
        elif not ok:  # a read-only cache without it: compiled in memory, the cache left as it is
            path = None
    name = f"ngrad_kernels.{key}"
    module = ModuleType(name)
    module.__file__ = path or f"<ngrad kernel {key}>"
    sys.modules[name] = module
    exec(compile(text, module.__file__, "exec"), module.__dict__)
    return module, path


class Kernel:
    """A compiled kernel; the first call of each signature loads its machine code from disk or
    compiles it. ``fn``: Numba's dispatcher, made when first needed (a kernel whose machine code
    was loaded as an object file needs none); ``loaded``: signature (``objects.signature``) ->
    the machine code loaded without Numba."""

    __slots__ = ("key", "text", "_fn", "ready", "loaded", "path")
    emitted = True  # whether ngrad's own compiler may compile the text (CUDA's: no)

    def __init__(self, key, text):
        self.key, self.text = key, text
        self._fn, self.loaded, self.path = None, {}, None
        self.ready = False

    @property
    def fn(self):
        if self._fn is None:
            self._fn = self.build()
        return self._fn

    def build(self):
        """The Numba dispatcher of the module's ``kernel`` (the CUDA target overrides this),
        cached on disk when its module is there."""
        from .njit import dispatcher

        module, self.path = load_module(self.key, self.text)
        return dispatcher(module, self.path)

    def inspect(self, form="asm"):
        """The assembly (``form="asm"``) or optimised LLVM IR (``"llvm"``) of each signature this
        kernel has machine code for, by signature: Numba's where Numba compiled it, else what
        ngrad's own compiler makes of the text."""
        out = {}
        if self._fn is not None:
            out.update((self._fn.inspect_asm if form == "asm" else self._fn.inspect_llvm)())
        from . import llvm

        for sig in self.loaded:
            out[sig] = llvm.compile(self.text, sig, self.key, form=form)
        return out

    def signatures(self):
        """How many argument signatures this kernel has machine code for."""
        return len(self.loaded) + (len(self._fn.signatures) if self._fn is not None else 0)

    def __call__(self, *args):
        if self.ready:
            if self._fn is not None:
                return self._fn(*args)
            f = self.loaded.get(_signature(args))
            if f is not None:
                return f(*args)
        return self.first_call(lambda fn: fn(*args), args)

    def first_call(self, call, args=None):
        """The first call of a signature: the machine code of ``args``' signature kept as an
        object file when there is one (no Numba), else through Numba's dispatcher, which loads
        it from its disk cache or compiles it (then kept as an object file for ``args``)."""
        pace.step()  # the compile worker's pacing looks in before each kernel it loads
        t = time.perf_counter()
        sig = None if args is None else _signature(args)
        how, f = "loaded from the disk cache as machine code (no Numba)", None
        if self._fn is None:
            f = _object(self.key, sig)
            if f is None and self.emitted:
                how, f = "emitted", _emitted(self, sig)
        if f is not None:
            r = f(*args)
            self.loaded[sig] = f
            self._done(how, t, how == "emitted")
            return r
        try:
            r = call(self.fn)
        except Exception:
            # a corrupt Numba cache entry can fail to load: rebuild once from the source
            from .njit import NumbaError

            _purge(self.key)
            self._fn = self.build()
            try:
                r = call(self.fn)
            except NumbaError as e:
                raise CompileError(f"{type(e).__name__} in kernel {self.key}: {str(e).splitlines()[0]}") from e
        misses = getattr(getattr(self.fn, "stats", None), "cache_misses", True)
        if args is not None and self.path is not None:
            _keep(self, args, sig)
        self._done(None, t, bool(misses))
        return r

    def _done(self, how, t, compiled):
        spent = time.perf_counter() - t
        stats["seconds"] += spent
        stats["compiled" if compiled else "loaded"] += 1
        if debug_level() >= 3:
            if how == "emitted":
                from .llvm import level_of
                from .llvm import phases as emitted

                front, back = emitted()
                quick = any(k is self for k, _, _ in getattr(_quick, "listed", None) or ())
                said = f"compiled by ngrad's emitter in {spent * 1e3:.1f} ms (typing and IR "
                said += f"{front * 1e3:.1f} ms, LLVM's {'quick' if quick else level_of(self.text)} pipeline "
                said += f"{back * 1e3:.1f} ms)" + (", quick until upgraded" if quick else "")
            elif how:
                said = f"{how} in {spent * 1e3:.1f} ms"
            else:  # Numba made it: imported already (importing it for a loaded kernel took 0.4 s)
                from .njit import phases

                said = phases(self.fn, spent, compiled)
            print(f"ngrad: kernel {self.key}: {said}", file=sys.stderr)
        self.ready = True


_signature = objects.signature


def _object(key, sig):
    """Kernel ``key``'s machine code for ``sig`` kept as an object file, or None."""
    if sig is None:
        return None
    folder = usable_dir(create=False)
    if folder is None or not os.path.isdir(os.path.join(folder, "objects")):
        return None
    return objects.load(folder, key, sig)


def _emitted(kernel, sig):
    """Kernel ``kernel``'s machine code for ``sig`` from ngrad's own compiler (``llvm``), kept as
    an object file; None when that compiler is off or does not handle the text or signature
    (Numba compiles it then)."""
    if sig is None or cpu_compiler() != "llvm":
        return None
    objects.preload()
    from . import llvm

    listed = getattr(_quick, "listed", None)
    quick = listed is not None and llvm.level_of(kernel.text) == "full"  # vmath's: made in full at once
    try:
        if quick:
            lowered = llvm.lower(kernel.text, sig, kernel.key, pace.step)
            made = llvm.assemble(lowered, level="quick")
        else:
            made = llvm.compile(kernel.text, sig, kernel.key, pace.step)
    except llvm.Unsupported as e:
        if debug_level() >= 3:
            print(f"ngrad: kernel {kernel.key}: compiled by Numba ({e})", file=sys.stderr)
        return None
    except Exception as e:  # LLVM refused the IR: a bug of ngrad's, which Numba works around
        import warnings

        first = (str(e).splitlines() or [""])[0]
        warnings.warn(
            f"ngrad's compiler failed on kernel {kernel.key} ({type(e).__name__}: {first}); "
            "Numba compiles it. Please report this.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    f = objects.make(*made)
    if f is not None and quick:  # kept on disk once made in full (``upgrade``)
        listed.append((kernel, sig, lowered))
    elif f is not None:  # no module was written for it: the folder may not exist yet
        _save(kernel.key, sig, made, create=True)
    return f


_quick = threading.local()  # ``quick_first``'s list on the thread warming a plan up


@contextlib.contextmanager
def quick_first():
    """Within the block, the kernels ngrad's compiler makes on this thread are made quick
    (``llvm.assemble(level="quick")``: LLVM's O1 pipeline, no vectorisers, unrolling or
    interleaving; ba's eight such kernels in 0.21 s of LLVM against 0.52 in full), and listed
    in the list it yields, for ``upgrade`` to make again in full. A kernel with vmath inside
    (codegen's ``_wide_vectors()``), whose polynomials the vectoriser makes 2-7x faster, is made
    in full at once. The compile worker warms a new plan up so (see ``runtime.background``): its
    calls get the quick machine code sooner (ba 2.9 ms a call against 2.6 in full) and the full
    one later, made by LLVM alone from the IR already written. Nothing quick is kept on disk.

    ```python
    >>> import os, tempfile
    >>> import numpy as np
    >>> from ngrad.engine.targets import cpu
    >>> before = os.environ.get("NGRAD_CACHE_DIR")
    >>> os.environ["NGRAD_CACHE_DIR"] = tempfile.mkdtemp()
    >>> k = cpu.kernel("def kernel(a):\\n    for i in range(a.shape[0]):\\n        a[i] = a[i] * 3.0 + 1.0\\n")
    >>> a = np.ones(4)
    >>> with cpu.quick_first() as listed:
    ...     k(a)
    >>> a, len(listed)
    (array([4., 4., 4., 4.]), 1)
    >>> cpu.upgrade(listed)
    1
    >>> k(a); a
    array([13., 13., 13., 13.])
    >>> if before is None:
    ...     del os.environ["NGRAD_CACHE_DIR"]
    ... else:
    ...     os.environ["NGRAD_CACHE_DIR"] = before

    ```
    """
    listed: list = []
    _quick.listed = listed
    try:
        yield listed
    finally:
        _quick.listed = None


def upgrade(listed):
    """Make each ``(kernel, signature, IR)`` that ``quick_first`` listed again with LLVM's whole
    pipeline from its IR (LLVM's work alone: the interpreter's lock is free meanwhile but for
    moments), keep it on disk and put it in the kernel's place: a call running on the quick
    machine code meanwhile finishes on it, the next runs the new. Returns how many it replaced;
    one that fails keeps its quick machine code."""
    from . import llvm

    done = 0
    for kernel, sig, lowered in listed:
        t = time.perf_counter()
        try:
            made = llvm.assemble(lowered, level=llvm.level_of(kernel.text))
        except Exception:  # noqa: BLE001  (the quick machine code stays, and is correct)
            continue
        f = objects.make(*made)
        if f is not None:
            _save(kernel.key, sig, made, create=True)
            kernel.loaded[sig] = f
            done += 1
            if debug_level() >= 3:
                spent = (time.perf_counter() - t) * 1e3
                print(
                    f"ngrad: kernel {kernel.key}: upgraded by LLVM's whole pipeline in {spent:.1f} ms", file=sys.stderr
                )
    return done


def compile_ahead(calls, threads):
    """Compile the machine code of each ``(kernel, signature)`` of ``calls`` that is not on disk
    yet with ngrad's own compiler into the disk cache, the largest first: this thread types
    them and writes their IR (``llvm.lower``), a kernel ahead of LLVM's work on them
    (``llvm.assemble``), which runs on up to ``threads`` threads at once (``parallel``); the
    compile worker's step before its warm-up run, which then loads them.
    Returns how many it compiled. A kernel outside that compiler's language, or that fails, is
    left to the warm-up run, which compiles it (with Numba) or reports its error.

    ```python
    >>> import os, tempfile
    >>> import numpy as np
    >>> from ngrad.engine.targets import cpu, objects
    >>> before = os.environ.get("NGRAD_CACHE_DIR")
    >>> os.environ["NGRAD_CACHE_DIR"] = tempfile.mkdtemp()
    >>> ks = [cpu.kernel(f"def kernel(a):\\n    a[0] *= {k}.5\\n") for k in (1, 2)]
    >>> sig = objects.signature((np.zeros(1),))
    >>> cpu.compile_ahead([(k, sig) for k in ks], threads=2)
    2
    >>> cpu.compile_ahead([(k, sig) for k in ks], threads=2)  # on disk now
    0
    >>> a = np.ones(1); ks[1](a); a  # the machine code made ahead, loaded from disk
    array([2.5])
    >>> if before is None:
    ...     del os.environ["NGRAD_CACHE_DIR"]
    ... else:
    ...     os.environ["NGRAD_CACHE_DIR"] = before

    ```
    """
    folder = usable_dir(create=True)
    if cpu_compiler() != "llvm" or folder is None or not writable(folder):
        return 0
    todo = {(k.key, sig): k for k, sig in calls if k.emitted and sig is not None}
    todo = {ks: k for ks, k in todo.items() if not objects.saved(folder, *ks)}
    if not todo:
        return 0
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    from . import llvm

    objects.setup()  # once, before the threads
    t = time.perf_counter()
    threads = max(1, threads)
    jobs = []
    with ThreadPoolExecutor(threads, thread_name_prefix="ngrad-llvm") as pool:
        # this thread lowers each kernel (Python) and the pool's threads run LLVM on them, at
        # most one kernel lowered ahead of them: lowering on the pool's threads, the calls
        # would take turns with the interpreter's lock with every one of them
        for (key, sig), k in sorted(todo.items(), key=lambda item: -len(item[1].text)):
            running = {job for _, _, job in jobs if not job.done()}
            if len(running) > threads:
                wait(running, return_when=FIRST_COMPLETED)
            try:
                lowered = llvm.lower(k.text, sig, key, pace.step)
            except Exception:  # noqa: BLE001  (the warm-up run compiles it, or says why not)
                continue
            jobs.append((key, sig, pool.submit(llvm.assemble, lowered, parallel=True)))
    made = []
    for key, sig, job in jobs:
        try:
            made.append((key, sig, job.result()))
        except Exception:  # noqa: BLE001  (LLVM refused it: the warm-up run compiles it or says why)
            pass
    for key, sig, code in made:
        _save(key, sig, code, create=True)
    if debug_level() >= 3:
        spent = (time.perf_counter() - t) * 1e3
        print(f"ngrad: compiled {len(made)} kernels ahead on {threads} threads in {spent:.1f} ms", file=sys.stderr)
    return len(made)


def _keep(kernel, args, sig):
    """Keep the machine code Numba just loaded or compiled for ``args`` (of signature ``sig``) as
    an object file."""
    from .njit import captured

    made = captured(kernel.fn, args)
    if made is not None:
        _save(kernel.key, sig, made, create=False)


def _save(key, sig, made, create):
    """Keep ``made`` (object code, wrapper and environment symbols) of kernel ``key`` at ``sig``
    in the cache folder, when this process may write it (``create``: make the folder if need be)."""
    folder = usable_dir(create=create)
    if folder is not None and writable(folder):
        objects.save(folder, key, sig, *made)


def direct(kernel, args):
    """The machine code made for exactly the types of ``args``, called without the
    dispatcher's per-call typing of every argument (about 0.2 µs of a small kernel's 0.5). Only
    for a call site whose argument types cannot change between calls: the machine code trusts
    them. Flags that do not change the code it runs (read-only, alignment on this hardware) may
    differ. The kernel itself when there is no such entry.

    ```python
    >>> import numpy as np
    >>> from ngrad.engine.targets.cpu import direct, kernel
    >>> k = kernel("def kernel(a):\\n    a[0] += 1.0\\n")
    >>> a = np.zeros(2)
    >>> k(a)
    >>> direct(k, (a,))(a)
    >>> a
    array([2., 0.])

    ```
    """
    fn = kernel._fn
    if fn is None:
        f = kernel.loaded.get(_signature(args)) if kernel.loaded else None
        return f if f is not None else kernel
    try:
        entry = fn.overloads[tuple(fn.typeof_pyval(a) for a in args)].entry_point
    except (AttributeError, KeyError, TypeError, ValueError):
        return fn
    if kernel.path is not None:  # another call site's signature, compiled by the dispatcher
        _keep(kernel, args, _signature(args))
    return entry


def resident(text):
    """The kernel of ``text`` if this process holds it (``ready`` once it has run), else None."""
    return _memory.get(key_of(text))


def kernel(text):
    """The compiled CPU kernel for generated module ``text`` (memory, then disk, then compile)."""
    return cached(text, Kernel)


def warm_up():
    """Pay the compiler's once-per-process start-up before the first compile: LLVM's set-up
    for ngrad's own compiler, Numba's tables (``njit.warm_up``) when Numba compiles everything.
    The compile server does this before it reads a request."""
    if cpu_compiler() == "llvm":
        from .llvm import usable

        objects.setup()
        usable()
        return
    from .njit import warm_up as numba_warm_up

    numba_warm_up()


def cached(text, make):
    """The kernel of ``text`` kept in memory, made once by ``make(key, text)`` (a ``Kernel``
    class of some target: CPU and CUDA texts differ, so one table holds both)."""
    key = key_of(text)
    k = _memory.get(key)
    if k is None:
        with _lock:
            k = _memory.get(key)
            if k is None:
                k = _memory[key] = make(key, text)
    return k


def cache_info():
    """Where the cache is, how many kernels (a module Numba compiles from, or machine code of
    ngrad's own compiler), object files of their machine code (``objects``: one per kernel and
    argument signature), plans (``write_plan``: bytecode encodings, joint tapes,
    the list of compiled loops) and bytes it holds, whether this process may write it, and
    ``problem``: why it cannot be used (then ngrad compiles in memory), or None."""
    folder = cache_dir()
    files = glob.glob(os.path.join(folder, "k*.py"))
    plans = glob.glob(os.path.join(folder, "plans", "*"))
    machine = glob.glob(os.path.join(folder, "objects", "*.o"))
    size = 0
    for root, _, names in os.walk(cache_root()):
        for n in names:
            try:
                size += os.path.getsize(os.path.join(root, n))
            except OSError:  # removed meanwhile by another process
                pass
    return {
        "root": cache_root(),
        "folder": folder,
        "kernels": len(
            {os.path.basename(p)[:-3] for p in files} | {os.path.basename(p).split("-", 1)[0] for p in machine}
        ),
        "objects": len(machine),
        "plans": len(plans),
        "bytes": size,
        "writable": os.path.isdir(folder) and writable(folder),
        "problem": problem(),
    }


def cache_clear():
    """Delete the cached kernels and plans of every version (the ``ngrad*`` folders under the
    root, not the root itself, which may be a folder of the user's holding other files);
    returns the number of files removed. Compiled kernels in memory are dropped too."""
    import shutil

    n = 0
    for folder in glob.glob(os.path.join(glob.escape(cache_root()), "ngrad*-numba*-codegen*")):
        if os.path.isdir(folder) and not os.path.islink(folder):
            n += sum(len(names) for _, _, names in os.walk(folder))
            shutil.rmtree(folder, ignore_errors=True)
    _memory.clear()
    return n


# the last statement: ``targets._cpu`` hands this module out only once it is whole (a compile on
# the worker thread imports it while calls on other threads ask what it holds)
IMPORTED = True
