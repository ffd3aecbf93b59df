"""ngrad's own compiler of CPU kernels: a generated kernel module's text to machine code through
llvmlite, without Numba.

Numba compiles a generated kernel through its whole Python front end (bytecode analysis, type
inference over its generic typing tables, lowering of every operation through its registries)
and its CPython wrapper, and a process pays 0.3 s to import it and set it up before the first
compile: three quarters of a kernel's compile time, measured. Generated kernels use a small,
explicitly typed part of Python (codegen writes every literal's dtype), so this module types and
lowers that part directly to LLVM IR (the vmath helpers inline as under Numba) and hands it to
LLVM's optimisation pipeline at Numba's level, with Numba's flags: ``error_model='numpy'``
(integer division by zero is 0, float division IEEE), ``reassoc`` on accumulations only (see
``emit.ACCUMULATE``; vmath's helpers ``reassoc`` and ``contract``), the GIL released while the kernel runs (``nogil``).

Contract: ``compile(text, sig, name, step)`` returns ``(object_code, wrapper, env)`` for the
``kernel`` function of generated module ``text`` at argument signature ``sig``
(``objects.signature``): an object file whose symbol ``wrapper`` is a CPython function
``(self, args, kws)`` as ``objects`` runs it (``env`` names an unused environment slot), the same
kind of object Numba's machine code is kept as. It raises ``Unsupported`` for any construct,
type or signature outside the part it compiles (complex numbers, non-contiguous arrays, arithmetic
of two unsigned integers, NumPy functions...): the caller then compiles the text with Numba, so nothing is ever compiled
differently from what the text says. ``step()`` is called every few statements (the compile
worker's turns with the calls, ``pace``). The semantics follow Numba's for the same text: NumPy's type
promotion of scalars (integer literals int64, float literals float64, uint64 with a signed integer
int64), Python's floor division,
modulo, ``max``/``min`` and NaN comparisons, wraparound of negative signed indices, casts on
stores.
"""

import ast
import contextlib
import ctypes
import hashlib
import sys
import threading
import time

import llvmlite.binding as ll

from .. import pace
from . import ir_text as ir
from . import objects
from .emit import F64, I8, I32, I64, MEM, PTR, REG, Array, Emitter
from .kernel_types import Unsupported, arg_type

__all__ = ["compile", "lower", "assemble", "level_of", "LEVELS", "Unsupported", "usable", "phases"]


class _Function(Emitter):
    """One kernel function as a CPython function of the machine code: unpacks its arguments,
    releases the GIL, runs the body, frees what it allocated."""

    def __init__(self, fn, sig, name, step):
        super().__init__(fn, sig)
        self.step, self.count, self.name = step, 0, name
        # the triple ``objects`` read once: a call into llvmlite takes its lock, which first waits
        # for every LLVM compile running outside it (``_Turns``), so compile-ahead threads typing
        # a kernel here waited for the others' LLVM work to end
        self.module = ir.Module(name, objects.host()[0])

    # ---- emitting ----------------------------------------------------------------------------

    def emit(self):
        self.function = f = self.module.function(self.name, PTR, [PTR, PTR, PTR])
        self.module.variable(self.name + "_env", "global ptr null")
        entry = f.append_basic_block("entry")
        self.allocas = ir.IRBuilder(f, entry)
        body = f.append_basic_block("body")
        self.b = b = ir.IRBuilder(f, body)
        self.slots, self.values, self.arrays, self.locals, self.loops = {}, {}, {}, [], []
        self.exit = f.append_basic_block("exit")
        self.fail = f.append_basic_block("fail")
        for name, t in self.types.items():
            if isinstance(t, tuple):
                if name in self.params:
                    continue
                ptr = self._alloca(MEM[t[1]].as_pointer(), name)
                self.allocas.store(ir.Constant(ptr.type.pointee, None), ptr)
                dims = [self._alloca(I64, f"{name}.{k}") for k in range(t[2])]
                self.arrays[name] = Array(t[1], t[2], ptr, dims, True)
                self.locals.append(self.arrays[name])
            elif t is not None and name not in self.ssa:
                self.slots[name] = self._alloca(REG[t], name)
        self._unpack(f.args[1])
        self.state = b.call(self._c("PyEval_SaveThread", PTR, []), [])
        self.nested = 0
        self._block(self.fn.body)
        if not b.block.is_terminated:
            b.branch(self.exit)
        for block, failed in ((self.exit, False), (self.fail, True)):
            b.position_at_end(block)
            for arr in self.locals:
                b.call(self._c("free", ir.VoidType(), [PTR]), [b.bitcast(b.load(arr.ptr), PTR)])
            b.call(self._c("PyEval_RestoreThread", ir.VoidType(), [PTR]), [self.state])
            if failed:
                b.call(self._c("PyErr_NoMemory", PTR, []), [])
                b.ret(ir.Constant(PTR, None))
            else:
                none = self._global("_Py_NoneStruct")
                b.call(self._c("Py_IncRef", ir.VoidType(), [PTR]), [none])
                b.ret(none)
        self.allocas.branch(body)
        return self.module

    def _alloca(self, t, name):
        return self.allocas.alloca(t, name=name)

    def _c(self, name, ret, args):
        """The declared external function ``name``."""
        return self.module.declare(name, ret, args)

    def _global(self, name):
        return self.module.variable(name, "external global i8")

    def _unpack(self, args):
        """Read each argument out of the call's tuple (its kind is ``sig``'s: trusted)."""
        b = self.b
        get = self._c("PyTuple_GetItem", PTR, [PTR, I64])
        for k, (name, s) in enumerate(zip(self.params, self.sig)):
            obj = b.call(get, [args, ir.Constant(I64, k)])
            t = arg_type(s)
            if isinstance(t, tuple):
                if name not in self.types or self.types[name] != t:
                    if name in self.types:
                        raise Unsupported("an argument array rebound")
                    continue
                # an argument array's data pointer and shape are values, read once: ngrad never
                # rebinds them (only local scratch arrays live in slots)
                data = b.load(b.bitcast(b.gep(obj, [ir.Constant(I64, _OFFSETS["data"])]), PTR.as_pointer()))
                ptr = b.bitcast(data, MEM[t[1]].as_pointer())
                shape = b.load(
                    b.bitcast(b.gep(obj, [ir.Constant(I64, _OFFSETS["dims"])]), I64.as_pointer().as_pointer())
                )
                dims = [b.load(b.gep(shape, [ir.Constant(I64, d)])) for d in range(t[2])]
                self.arrays[name] = Array(t[1], t[2], ptr, dims, False)
                continue
            if s == "f8" or s == "s<f8":
                v = b.call(self._c("PyFloat_AsDouble", F64, [PTR]), [obj])
            elif s == "i8":
                v = b.call(self._c("PyLong_AsLongLong", I64, [PTR]), [obj])
            elif s == "?":
                v = b.icmp_signed("!=", b.call(self._c("PyObject_IsTrue", I32, [PTR]), [obj]), ir.Constant(I32, 0))
            else:  # a NumPy scalar: its value right after the object's header
                field = b.gep(obj, [ir.Constant(I64, _OFFSETS["scalar"])])
                v = b.load(b.bitcast(field, MEM[t].as_pointer()))
                if t == "b":
                    v = b.icmp_signed("!=", v, ir.Constant(I8, 0))
            if name in self.slots or name in self.ssa:
                self._store_name(name, (t, v))


# ---------------------------------------------------------------------------------------------
# The object layouts the wrapper reads, checked once against this process's Python and NumPy

_OFFSETS = {"data": 16, "dims": 32, "scalar": 16}
_state: dict = {}


def usable():
    """Whether this compiler runs here: Linux on a 64-bit little-endian CPU, and this process's
    objects have the layouts the wrapper reads (CPython's object header of 16 bytes, NumPy's
    array fields), checked by reading them back once; a free-threaded or otherwise different
    build compiles with Numba instead."""
    ok = _state.get("usable")
    if ok is None:
        # llvmlite before 0.44 lacks the new pass manager's pipeline, and ``objects`` reads only
        # 64-bit little-endian ELF object files: elsewhere Numba compiles
        elf = sys.platform.startswith("linux") and sys.byteorder == "little" and sys.maxsize > 2**32
        ok = _state["usable"] = elf and hasattr(ll, "create_pass_builder") and _check_layouts()
    return ok


def _check_layouts():
    import numpy as np

    try:
        if getattr(sys, "_is_gil_enabled", lambda: True)() is False:
            return False
        a = np.zeros((3, 5))
        base = id(a)
        data = ctypes.c_void_p.from_address(base + _OFFSETS["data"]).value
        dims = ctypes.c_void_p.from_address(base + _OFFSETS["dims"]).value
        if data != a.ctypes.data or list((ctypes.c_int64 * 2).from_address(dims)) != [3, 5]:
            return False
        for value, ctype in (
            (np.float32(1.5), ctypes.c_float),
            (np.int64(-7), ctypes.c_int64),
            (np.int32(9), ctypes.c_int32),
        ):
            if ctype.from_address(id(value) + _OFFSETS["scalar"]).value != value:
                return False
        return ctypes.c_bool.from_address(id(np.bool_(True)) + _OFFSETS["scalar"]).value is True
    except Exception:
        return False


def compile(text, sig, name, step=None, form="object", parallel=False):
    """Machine code of generated module ``text``'s ``kernel`` for argument signature ``sig``:
    ``(object_code, wrapper, env)`` (see the module's contract); raises ``Unsupported``. With
    ``form="asm"`` or ``"llvm"``: the text of its assembly or of its optimised LLVM IR instead.
    ``parallel`` (``cpu.compile_ahead``'s threads): LLVM's optimisation and code generation run
    outside llvmlite's process-wide lock, which would take them in turns, so that several such
    compiles run at once (each module has an LLVM context and a target machine of its own,
    which LLVM allows to work in parallel); they take turns with llvmlite's other users, Numba
    among them, which may touch LLVM's global state under that lock (``_Turns``). Its two
    halves, ``lower`` (Python) and ``assemble`` (LLVM), may run on different threads.

    ```python
    >>> import numpy as np
    >>> from ngrad.engine.targets import llvm, objects
    >>> text = "def kernel(n, a, o):\\n    for i in range(n):\\n        o[i] = a[i] * 2.0\\n"
    >>> a, o = np.arange(3.0), np.zeros(3)
    >>> f = objects.make(*llvm.compile(text, objects.signature((3, a, o)), "k_doc"))
    >>> f(3, a, o)
    >>> o
    array([0., 2., 4.])

    ```
    """
    return assemble(lower(text, sig, name, step), form, parallel, level_of(text))


def level_of(text):
    """The pipeline (``LEVELS``) a kernel's text is made with in full."""
    return "loops" if "_short_loops()" in text else "vmath" if "_wide_vectors()" in text else "full"


def lower(text, sig, name, step=None):
    """``compile``'s first half, all Python (it holds the interpreter's lock throughout): the
    LLVM IR of ``text``'s kernel at ``sig`` before optimisation, as text, with its wrapper's
    symbol, for ``assemble``; raises ``Unsupported``."""
    if sig is None or not usable():
        raise Unsupported("signature")
    t = time.perf_counter()
    try:
        # one parse at a time: CPython's AST conversion keeps one recursion depth for all
        # threads, and compile-ahead threads parsing at once met "SystemError: AST constructor
        # recursion depth mismatch" (python/cpython#106905)
        with _parsing:
            tree = ast.parse(text)
    except SyntaxError as e:
        raise Unsupported("syntax") from e
    if step is not None:  # parsing is one stretch of C (ba's largest kernel: 1.8 ms), typing another
        step()
    kernels = [s for s in tree.body if isinstance(s, ast.FunctionDef)]
    rest = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.Import, ast.ImportFrom, ast.Expr))]
    if len(kernels) != 1 or kernels[0].name != "kernel" or rest or kernels[0].decorator_list:
        raise Unsupported("module layout")
    symbol = f"ngrad_{name}_{hashlib.sha256(repr(sig).encode()).hexdigest()[:12]}"
    fn = _Function(kernels[0], sig, symbol, step)
    fn.infer()
    if step is not None:
        step()
    text = str(fn.emit())
    _state["lowered"] = time.perf_counter() - t
    return text, symbol


# LLVM's pipelines ``assemble`` runs: (speed level, loop vectoriser, SLP vectoriser, unrolling and
# interleaving). "full": O3 and everything. "quick" (``cpu.quick_first``): O1 and none of them: ba's
# eight kernels without vmath in 0.21 s of LLVM against 0.52 in full (0.35 with O3 and no loop
# vectoriser, the quick pipeline before), its calls as fast as on that (2.9 ms against 2.6 in full):
# the unrolled copies of each loop were half of the machine code to select instructions for.
# "loops" (a kernel that says ``_short_loops()``: the bytecode loop): O1 with the loop vectoriser,
# its rows' loops as fast as in full (ode's loop: 21 µs a call) in a sixth less LLVM time (ode's
# loop of 15 operations 63 ms against 76, lstm's 154 against 189). "vmath" (a kernel that says
# ``_wide_vectors()``: vmath inside): O1 with the loop vectoriser, unrolling and interleaving, no
# SLP vectoriser; its calls as fast as in full (gmm, mlp, lse, lj, chain, the example: within
# run-to-run noise) in an eighth less LLVM time (gmm's four such kernels 156 ms against 182).
LEVELS = {
    "full": (3, True, True, True),
    "quick": (1, False, False, False),
    "loops": (1, True, False, False),
    "vmath": (1, True, False, True),
}


def assemble(lowered, form="object", parallel=False, level="full"):
    """``compile``'s second half, LLVM's (each of its calls releases the interpreter's lock):
    ``lower``'s IR optimised by the pipeline ``level`` names (``LEVELS``) and made into
    ``(object_code, wrapper, env)``, or the text ``form`` names; ``parallel`` as for
    ``compile``. Every LLVM object it makes is its own and closed here, so that a parallel
    one's calls through llvmlite need not wait for the others' LLVM work (``_Turns.ours``)."""
    objects.setup()  # LLVM's one-time set-up, never one of a parallel compile's own calls
    t = time.perf_counter()
    with _turns().ours() if parallel else contextlib.nullcontext(), pace.unlocked():
        out = _assemble(*lowered, form, parallel, LEVELS[level])
    _state["last"] = (_state.get("lowered", 0.0), time.perf_counter() - t)
    return out


def _assemble(ir_text, symbol, form, parallel, level):
    tm = objects.machine()  # for this CPU, as ``objects`` loads for
    # a context of its own: the worker thread, a call compiling in wait mode and Numba may all be
    # compiling at once (llvmlite runs one LLVM call at a time, but their modules would share
    # its global context between calls)
    context = ll.create_context()
    llmod = ll.parse_assembly(ir_text, context=context)
    speed, loops, slp, unroll = level
    pto = ll.create_pipeline_tuning_options(speed_level=speed)
    pto.loop_vectorization, pto.slp_vectorization = loops, slp
    pto.loop_unrolling = pto.loop_interleaving = unroll
    pb = ll.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    try:
        if parallel:
            _unlocked(ll.ffi.lib.LLVMPY_RunNewModulePassManager, mpm, llmod, pb)
        else:
            mpm.run(llmod, pb)
        if form != "object":
            return tm.emit_assembly(llmod) if form == "asm" else str(llmod)
        code = _object_code(tm, llmod) if parallel else tm.emit_object(llmod)
    finally:
        for obj in (mpm, pb, pto, llmod, context, tm):
            obj.close()
    return code, symbol, symbol + "_env"


class _Turns:
    """Who uses LLVM now: any number of threads outside llvmlite's lock (``run``), or one
    thread inside it, never both. Registered with llvmlite's lock at the first parallel
    compile: a thread that takes the lock then waits until the calls outside it have
    returned, and a call outside waits while somebody holds it. A parallel compile's own calls
    through the lock (``ours``: parsing its IR into its own context, making its target machine
    and pipeline, closing them) touch nothing the others' work outside uses, and neither wait
    for it nor hold it up: waiting, each compile's setup waited for the LLVM work of all the
    others, and two threads compiled ba's ten kernels no faster than one."""

    def __init__(self):
        self.cond = threading.Condition()
        self.inside = self.outside = 0
        self.local = threading.local()
        ll.ffi.register_lock_callback(self._enter, self._leave)

    def _enter(self):
        local = self.local
        counted = not getattr(local, "ours", 0)
        if not hasattr(local, "entered"):
            local.entered = []
        local.entered.append(counted)
        if counted:
            with self.cond:
                self.cond.wait_for(lambda: self.outside == 0)
                self.inside += 1

    def _leave(self):
        # a thread that took the lock before this was registered leaves it once unseen; an
        # exception here would leave llvmlite's lock held for good
        entered = getattr(self.local, "entered", None)
        if entered and entered.pop():
            with self.cond:
                self.inside -= 1
                self.cond.notify_all()

    @contextlib.contextmanager
    def ours(self):
        """The calls through llvmlite's lock this thread makes meanwhile are a parallel
        compile's own (see the class)."""
        self.local.ours = getattr(self.local, "ours", 0) + 1
        try:
            yield
        finally:
            self.local.ours -= 1

    def run(self, fn, *args):
        """``fn(*args)`` for llvmlite's function ``fn``, through the C function it wraps."""
        with self.cond:
            self.cond.wait_for(lambda: self.inside == 0)
            self.outside += 1
        try:
            return getattr(fn, "_cfn", fn)(*args)
        finally:
            with self.cond:
                self.outside -= 1
                self.cond.notify_all()


def _turns():
    """The process's ``_Turns``, registered with llvmlite's lock when first needed."""
    with _turns_made:
        return _state.get("turns") or _state.setdefault("turns", _Turns())


def _unlocked(fn, *args):
    """``fn(*args)`` outside llvmlite's lock, in turns with its holders (``_Turns``)."""
    return _turns().run(fn, *args)


_turns_made = threading.Lock()
_parsing = threading.Lock()


def _object_code(tm, llmod):
    """``tm.emit_object(llmod)``, its code generation outside llvmlite's lock."""
    ffi = ll.ffi
    with ffi.OutputString() as err:
        buffer = _unlocked(ffi.lib.LLVMPY_TargetMachineEmitToMemory, tm, llmod, 1, err)
        if not buffer:
            raise RuntimeError(str(err))
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer), ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


def phases():
    """Where the last compile's time went: (typing and emitting IR in Python, LLVM) seconds."""
    return _state.get("last", (0.0, 0.0))
