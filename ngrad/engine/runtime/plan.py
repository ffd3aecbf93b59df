"""A compiled plan: a tape's fused plan with its generated sources and compiled functions.

Contract: ``CompiledPlan(tape)`` fuses the tape once and lays it out twice (serial, and with
big loops on their own for threads); ``compile()`` compiles (or loads) the functions of the
layout for the current thread count, after which ``ready()`` is true. ``CompiledPlan(tape,
"numpy")`` has no kernels (every step is NumPy): it is ready at once and imports no compiler.
A plan also decides, once, which matmuls write into pooled buffers (``into``), which loops may
write in place of a dying input (``in_place``) and which glue computes constants (``consts``).
Running it is ``executor.execute``; its generated driver is ``driver.driver_of``; both run
``plan.tape``, the tape it was built from with its rows lowered (``transform.lower``).
"""

import functools
import os
import pickle
import types

import numpy as np

from .. import pace
from ..backend.fuse import Glue, Kernel, fuse
from ..backend.vmath import FUNCTIONS
from ..store import on_disk, plan_name, read_plan, write_plan
from ..targets import resident
from ..transform.lower import lower
from .layout import Layout, big, dead_after_steps
from .threads import get_num_threads

__all__ = ["CompiledPlan", "plan_of", "VECTOR_MATH"]

# Kernels calling these vectorised math helpers never write into an input's buffer: aliased
# operands fail LLVM's runtime overlap check and the loop runs unvectorised (measured 2.5x
# slower with sin and cos in it). A loop of plain arithmetic is memory-bound: in place it moves
# through memory once instead of twice (logsumexp's gradient scaling: 0.83 against 1.37 ms).
VECTOR_MATH = frozenset(name[len("_v") :] for name in FUNCTIONS)


class CompiledPlan:
    """A tape's fused plan with its generated sources and compiled functions. A run of kernels
    (and the reshapes between them) compiles to ONE function: Numba spends ~0.2 s per function
    whatever its size, and one call replaces several. Glue that computes something (matmul,
    gather, one-element NumPy arithmetic) runs between segments. With threads on, big kernels
    get functions of their own instead (the ``threaded`` layout, compiled the first time threads
    are on), so that threads can run each in chunks of rows."""

    __slots__ = (
        "tape",
        "plan",
        "serial",
        "threaded",
        "pool",
        "lent",
        "consts",
        "drive",
        "trusted",
        "in_place",
        "into",
        "numpy",
    )

    def __init__(self, tape, target="cpu"):
        self.numpy = target == "numpy"  # no kernels: the driver calls NumPy only (``numpy_driver``)
        # what the plan runs: rows with a decomposition written out, so kernels fuse them
        # (NumPy runs such a row's own forward in one step); drivers and the executor read it
        self.tape = tape = tape if self.numpy else lower(tape)
        pace.step()  # planning's stages: the compile worker's pacing looks in between
        self.plan = fuse(tape, target)
        pace.step()
        self.into = _matmuls_into(self.plan, tape)
        dead = dead_after_steps(tape, self.plan)
        self.serial = Layout(self.plan, tape, dead, split=False)
        chunk = any(isinstance(st, Kernel) and big(st) for st in self.plan.steps)
        self.threaded = Layout(self.plan, tape, dead, split=True) if chunk else self.serial
        if self.numpy:  # nothing to compile: ready now
            self.serial.kernels = [None] * len(self.serial.sources)
        self.drive = None  # the generated driver, once asked for
        self.trusted = None  # the driver without input checks (``loops``: a scan's later steps)
        self.pool = {}  # (shape, dtype) -> big intermediate arrays free for the next run
        self.lent = {}  # (shape, dtype) -> results handed out, taken back once unreferenced
        # steps that may write into a dying input's buffer (see VECTOR_MATH)
        self.in_place = frozenset(
            j
            for j, st in enumerate(self.plan.steps)
            if isinstance(st, Kernel) and not any(ins.prim in VECTOR_MATH for ins in st.body)
        )
        # glue computing constants (a literal, its reshapes and broadcasts) runs once per plan
        self.consts, known = {}, set()
        for step in self.plan.steps:
            if not isinstance(step, Kernel) and (
                step.instr.prim == "const" or (step.instr.args and all(a in known for a in step.instr.args))
            ):
                known.add(step.instr.out)
                self.consts[step.instr.out] = None

    def layout(self):
        """The layout for the current thread count."""
        return self.threaded if get_num_threads() > 1 else self.serial

    def ready(self):
        """Whether the current layout's functions are compiled."""
        return self.layout().kernels is not None

    def chunks(self):
        """Whether threads are on and some loop of the plan is big enough for them: a call then
        runs step by step (``executor.execute``), not through the serial driver."""
        return get_num_threads() > 1 and self.threaded is not self.serial

    @property
    def sources(self):
        return self.layout().sources

    @property
    def kernels(self):
        return self.layout().kernels

    def functions(self):
        """How many functions the serial layout compiles (kernels of the same text share one)."""
        return len({s.text for s in self.serial.sources if s is not None})

    def missing(self):
        """How many of the layout's functions are not in the disk cache."""
        count = 0
        for s in self.layout().sources:
            if s is not None:
                pace.step()  # each text's key, and the first look reads the cache's index
                count += not on_disk(s.text)
        return count

    def compiled_here(self):
        """Whether every function of the current layout was compiled (or loaded) and has run in
        this process: another size of a structure met before, whose kernels are shared (their
        code leaves sizes out), so compiling is only handing them over."""
        for s in self.layout().sources:
            if s is not None:
                k = resident(s.text)
                if k is None or not k.ready:
                    return False
        return True

    def compile(self, lay=None):
        """Compile (or load) the functions of ``lay``, by default the current thread count's."""
        lay = lay or self.layout()
        if lay.kernels is None:
            lay.kernels = self.build(lay)

    def build(self, lay):
        """The functions of ``lay`` (None for each glue step), made without publishing them:
        each compiles (or loads) for good at its first call."""
        from ..targets.cpu import kernel

        made = []
        for s in lay.sources:
            pace.step()  # a kernel at a time: the compile worker's pacing looks in between
            made.append(None if s is None else kernel(s.text))
        return made


def plan_of(tape, elsewhere=None):
    """``CompiledPlan(tape)``, read back from the disk cache when a process made it before (by
    the same code: see ``_planner``), else made and stored there. Planning ba's 394 instructions
    (fusion, layout, kernel sources) takes 10 ms of Python, reading its plan back 0.6 ms: a warm
    process's calls share the interpreter's lock with the rest. ``elsewhere()``, when given, has
    another process (the compile server) plan and store one that is not on disk yet (True when
    it did), to be read back here; when it did not, this process plans.

    >>> from ngrad.engine.ir.tape import Builder
    >>> b = Builder()
    >>> x = b.input((3,), "f64")
    >>> tape = b.finish([(x * x).sum(axes=(0,), keepdim=False)])
    >>> [s.text == t.text for s, t in zip(plan_of(tape).sources, CompiledPlan(tape).sources) if s]
    [True]
    """
    from .compile_server import pickled

    name = plan_name("c", _planner(), tape.key())
    data = name and read_plan(name)
    if not data and name and elsewhere is not None and elsewhere():
        data = read_plan(name)
    if data:
        try:
            plan = pickle.loads(data)
            if isinstance(plan, CompiledPlan) and plan.serial.kernels is None:
                return plan
        except Exception:  # noqa: BLE001  (a damaged entry passes no checksum; anything else: made again)
            pass
    plan = CompiledPlan(tape)
    if name:
        pace.step()  # pickling ticks (``compile_server._Pickler``), and starts a turn
        try:
            write_plan(name, pickled(plan))
        except (pickle.PickleError, TypeError, AttributeError, ValueError, RecursionError):  # not stored
            pass
    return plan


@functools.cache
def _planner():
    """The code a plan depends on, as modules naming their files: every module of the IR (the
    primitives' rows included), of the backend (fusion, codegen) and of the transforms
    (lowering), and the plan's and the layout's own."""
    engine = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = [os.path.join(engine, "runtime", "plan.py"), os.path.join(engine, "runtime", "layout.py")]
    for part in ("ir", os.path.join("ir", "prims"), "backend", "transform"):
        folder = os.path.join(engine, part)
        files += sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".py"))
    modules = []
    for path in files:
        module = types.ModuleType(path)
        module.__file__ = path
        modules.append(module)
    return tuple(modules)


def _matmuls_into(plan, tape):
    """matmul slot -> the shape of the buffer it writes into, and the permutation that views it
    as the product (or None)."""
    # a float matmul writes into a buffer the plan allocates (``into``: matmul slot -> the
    # buffer's shape, and the permutation that views it as the product, or None): a big one
    # comes from the pool, where fresh products cost page faults on every call (1,386 a call
    # for mlp's three, 1024x256 and 784x256; see POOL_MIN_BYTES for their cost). A product
    # read through a permute (a batched matmul moved back to the caller's axes) is laid out
    # as the permute's result, written through the inverse permutation: kernels then read it
    # contiguously, where copying the permuted view on every read cost 2 ms per
    # (1000, 25, 10) array (GradBench's gmm).
    made_by = {st.instr.out: st.instr for st in plan.steps if isinstance(st, Glue)}
    into = {
        ins.out: (tape.shapes[ins.out], None)
        for ins in made_by.values()
        if ins.prim == "matmul" and tape.dtypes[ins.out][0] == "f"
    }
    for st in plan.steps:
        src = made_by.get(st.instr.args[0]) if isinstance(st, Glue) and st.instr.prim == "permute" else None
        if src is not None and src.out in into and into[src.out][1] is None:
            inverse = tuple(int(d) for d in np.argsort(st.instr.params["perm"]))
            into[src.out] = (tape.shapes[st.instr.out], inverse)
    return into
