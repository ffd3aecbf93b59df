"""Kernels run from their machine code without importing Numba.

A process that finds its kernels in the disk cache needs none of Numba's compiler: importing
Numba took 0.12-0.15 s of Python (it holds the interpreter's lock, so on two cores the calls
that wait for those kernels ran 2-3x slower meanwhile), then each kernel's cache entry is
unpickled into Numba's objects. The machine code Numba made is an object file whose only outside
references are the Python C API, the C library's math, and the helpers of three of Numba's C
extension modules. Loaded here with llvmlite (0.02 s once, 0.7 ms a kernel), it runs exactly as
under Numba: the same wrapper, called as ``cpu.direct`` calls it.

Contract: ``signature(args)`` is what Numba's typing sees of a call's arguments (arrays: dtype,
rank, layout, writeable, aligned; Python and NumPy scalars: their class and dtype), or None for
an argument of any other kind. ``save(folder, key, sig, object_code, wrapper, env)`` keeps the
object file Numba made for kernel ``key`` at that signature, with a header that names the CPU it
was made for and a hash of its bytes; ``load(folder, key, sig)`` returns a callable running it,
or None: no entry, an entry made for another CPU or signature, a corrupt one (deleted), a symbol
it needs that this process cannot resolve, or a platform whose object files this module does not
read (only 64-bit little-endian ELF). ``make(object_code, wrapper, env)`` runs an object file just
made (ngrad's own compiler, ``llvm``, makes the same kind: a CPython wrapper ``(self, args,
kws)``). A callable is only ever called with arguments of exactly its signature (``cpu.Kernel``
checks it): the machine code trusts them. Numba imported later in the same process shares the
extension modules loaded here.
"""

import builtins
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import struct
import sys
import threading
from types import ModuleType

import numpy as np

from .. import pace
from ..store import write_atomically

__all__ = ["signature", "save", "load", "saved", "host"]

_MAGIC = b"ngrad-object-1\n"
_SCALARS = {float: "f8", bool: "?", complex: "c16"}
_lock = threading.Lock()
_jit: dict = {}  # the loader's once-per-process state (see ``setup``)


def signature(args):
    """What Numba types ``args`` as, as a tuple, or None when one is of a kind not handled here.

    >>> import numpy as np
    >>> signature((np.zeros((2, 3)), 1.5, 3))
    (('<f8', 2, 'C', True, True), 'f8', 'i8')
    """
    out = []
    for a in args:
        c = a.__class__
        if c is np.ndarray:
            f = a.flags
            layout = "C" if f.c_contiguous else "F" if f.f_contiguous else "A"
            out.append((a.dtype.str, a.ndim, layout, f.writeable, f.aligned))
        elif c is int:
            if not -(2**63) <= a < 2**63:  # Numba types larger ones otherwise
                return None
            out.append("i8")
        elif c in _SCALARS:
            out.append(_SCALARS[c])
        elif isinstance(a, np.generic) and c.__module__ == "numpy" and a.dtype.kind in "biufc":
            out.append("s" + a.dtype.str)
        else:
            return None
    return tuple(out)


def saved(folder, key, sig):
    """Whether an object file of kernel ``key`` at ``sig`` is in ``folder`` (unchecked)."""
    return os.path.exists(_path(folder, key, sig))


def _path(folder, key, sig):
    tag = hashlib.sha256(repr((sig, host())).encode()).hexdigest()[:16]
    return os.path.join(folder, "objects", f"{key}-{tag}.o")


def host():
    """The CPU the machine code is for, as Numba's codegen names it: ``(triple, CPU name,
    features)``, read once."""
    known = _jit.get("host")
    if known is None:
        preload()
        import llvmlite.binding as ll

        known = _jit["host"] = (ll.get_process_triple(), ll.get_host_cpu_name(), ll.get_host_cpu_features().flatten())
    return known


def save(folder, key, sig, object_code, wrapper, env):
    """Keep ``object_code`` (Numba's object file of kernel ``key`` at signature ``sig``, whose
    CPython wrapper and environment have the symbol names ``wrapper`` and ``env``) in ``folder``;
    an entry already there is kept, and an error writing it is ignored (the kernel is then
    compiled or loaded by Numba next time)."""
    if sig is None:
        return
    path = _path(folder, key, sig)
    if os.path.exists(path) or _undefined(object_code) is None:
        return
    header = {"sig": repr(sig), "host": list(host()), "wrapper": wrapper, "env": env}
    header["sha256"] = hashlib.sha256(object_code).hexdigest()
    blob = json.dumps(header).encode()
    try:
        write_atomically(path, _MAGIC + struct.pack("<I", len(blob)) + blob + object_code)
    except OSError:
        pass


def load(folder, key, sig):
    """A callable running kernel ``key``'s machine code for signature ``sig`` from ``folder``,
    or None (see the module's contract)."""
    if sig is None or folder is None:
        return None
    path = _path(folder, key, sig)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        header, code = _parsed(data, sig)
    except (ValueError, KeyError, TypeError, struct.error):  # cut short or corrupt: made again
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    with _lock:
        return _loaded(header["wrapper"], header["env"], code)


def make(code, wrapper, env):
    """A callable running object file ``code`` (see ``load``), whose CPython wrapper and
    environment slot have the symbol names ``wrapper`` and ``env``, or None when a symbol it
    needs cannot be resolved."""
    with _lock:
        return _loaded(wrapper, env, code)


def _parsed(data, sig):
    if not data.startswith(_MAGIC):
        raise ValueError("not an object entry")
    (n,) = struct.unpack_from("<I", data, len(_MAGIC))
    start = len(_MAGIC) + 4
    header = json.loads(data[start : start + n])
    code = data[start + n :]
    if header["sha256"] != hashlib.sha256(code).hexdigest() or header["sig"] != repr(sig):
        raise ValueError("corrupt object entry")
    if tuple(header["host"]) != host():
        raise ValueError("made for another CPU")
    return header, code


def _loaded(wrapper, env_name, code):
    """The callable of a checked entry, or None when a symbol it needs cannot be resolved."""
    ll, dyn = setup()
    if any(not weak and not _resolve(ll, name) for name, weak in _undefined(code) or ()):
        return None  # LLVM would abort the process on an unresolved symbol: Numba loads this one
    engine = ll.create_mcjit_compiler(ll.parse_assembly(""), machine())  # it owns its machine
    objfile = ll.ObjectFileRef.from_data(code)
    engine.add_object_file(objfile)
    engine.finalize_object()
    env = dyn.Environment({})
    slot = engine.get_global_value_address(env_name)
    address = engine.get_function_address(wrapper)
    if not slot or not address:
        return None
    import ctypes

    ctypes.c_void_p.from_address(slot).value = id(env)
    holder = _jit["module"]
    keep = (engine, env)
    return dyn.make_function(holder, "kernel", "a kernel loaded from its machine code", address, env, keep)


def setup():
    """llvmlite, with the symbols Numba's machine code calls, and Numba's NRT and function
    extension modules: from ``sys.modules`` when Numba is imported, else loaded from Numba's
    package folder under their own names (so that an import of Numba later uses them)."""
    if "ll" in _jit:
        return _jit["ll"], _jit["dyn"]
    import ctypes

    preload()
    import llvmlite.binding as ll

    ll.initialize_native_target()
    ll.initialize_native_asmprinter()
    nrt = _extension("numba.core.runtime._nrt_python")
    dyn = _extension("numba._dynfunc")
    helper = _extension("numba._helperlib")
    table = {"_Py_NoneStruct": id(None)}
    for name, address in nrt.c_helpers.items():
        table[name if name.startswith("_") else "NRT_" + name] = address
    for helpers in (helper.c_helpers, dyn.c_helpers):
        for name, address in helpers.items():
            table["numba_" + name] = address
    for name, address in helper.c_helpers.items():  # the C library's math, as Numba binds it
        table.setdefault(name, address)
    for obj in vars(builtins).values():
        if isinstance(obj, type) and issubclass(obj, BaseException):
            table["PyExc_" + obj.__name__] = id(obj)
    _jit["table"] = table
    _jit["libraries"] = (ctypes.pythonapi, ctypes.CDLL(None))  # the C API, then the process's
    _jit["module"] = ModuleType("ngrad_kernels")
    _jit["dyn"], _jit["ll"] = dyn, ll
    return ll, dyn


def preload():
    """Map llvmlite's LLVM library into the process with the interpreter's lock released, before
    ``llvmlite.binding`` is imported: Python's own ``dlopen`` (ctypes) holds the lock while the
    dynamic loader maps and relocates its 170 MB, which stalled a call on the main thread for
    6-10 ms while the worker thread started its first compile. A foreign call through ctypes
    releases the lock; the import then finds the library already loaded."""
    if _jit.get("preloaded") or "llvmlite.binding" in sys.modules:
        return
    _jit["preloaded"] = True
    import ctypes

    try:
        spec = importlib.util.find_spec("llvmlite")
        folder = os.path.join(spec.submodule_search_locations[0], "binding")
        name = next(n for n in sorted(os.listdir(folder)) if n.startswith("libllvmlite"))
        libc = ctypes.CDLL(None)
        libc.dlopen.restype, libc.dlopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_int]
        with pace.unlocked():  # 6 ms of the loader's work, none of the calls' time
            libc.dlopen(os.path.join(folder, name).encode(), os.RTLD_NOW | ctypes.DEFAULT_MODE)
    except (ImportError, AttributeError, OSError, StopIteration, TypeError):
        pass  # llvmlite's import loads it as usual


def machine():
    """A target machine for the CPU the code was made for, as Numba's JIT makes it (an engine
    takes ownership of its machine and frees it with itself: one each)."""
    ll = setup()[0]
    triple, cpu, features = host()
    return ll.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, reloc="static", codemodel="jitdefault"
    )


def _resolve(ll, name):
    """Whether ``name`` has an address for LLVM: one it knows, one of Numba's helpers, or one of
    this process's symbols (the C API, the C library), added to LLVM's table when first needed."""
    if ll.address_of_symbol(name):
        return True
    address = _jit["table"].get(name)
    if address is None:
        import ctypes

        for lib in _jit["libraries"]:
            try:
                address = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                break
            except AttributeError:
                continue
    if not address:
        return False
    ll.add_symbol(name, address)
    return True


def _extension(name):
    """Numba's C extension module ``name``, without importing Numba's package."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("numba is not installed")
    folder = os.path.join(spec.submodule_search_locations[0], *name.split(".")[1:-1])
    last = name.rsplit(".", 1)[1]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(folder, last + suffix)
        if os.path.exists(path):
            loader = importlib.machinery.ExtensionFileLoader(name, path)
            module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path, loader=loader))
            loader.exec_module(module)
            sys.modules[name] = module
            return module
    raise ImportError(f"{name} not found")


def _undefined(code):
    """The symbols an object file uses and does not define, as (name, weak) pairs; None when it
    is not a 64-bit little-endian ELF file."""
    if code[:4] != b"\x7fELF" or code[4] != 2 or code[5] != 1:
        return None
    (shoff,) = struct.unpack_from("<Q", code, 0x28)
    entsize, count = struct.unpack_from("<HH", code, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", code, shoff + i * entsize) for i in range(count)]
    out = []
    for _, kind, _, _, offset, size, link, _, _, symsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, symsize):
            name_at, info, _, shndx = struct.unpack_from("<IBBH", code, at)
            if shndx == 0 and name_at:
                end = code.index(b"\0", strings + name_at)
                out.append((code[strings + name_at : end].decode(), info >> 4 == 2))
    return out
