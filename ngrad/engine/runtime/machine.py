"""The bytecode tier: a tape run as one compiled loop over its encoded instructions.

Contract: ``machine_for(tape, policy)`` is the ``Machine`` of a tape that should run as bytecode
(``tiering.Policy``: long enough, and small steps unless ``big_steps``), read back from the disk
cache or encoded and stored, else None. A ``Machine`` compiles its loop with ``compile()`` and
runs checked inputs with ``run(values)``, returning fresh arrays. Loops are shared: a tape runs
on a loop compiled before (in this process or on disk) that holds its operations.
"""

import marshal
import sys

from ..backend import bytecode
from ..backend.bytecode import Bytecode, loop_ops, loops_name, plan_name, source
from ..config import debug_level
from ..store import on_disk, read_plan, write_plan
from ..targets import resident
from ..transform.unroll import unroll
from .tiering import POLICY, small_steps, unrolls

__all__ = ["Machine", "machine_for", "loops", "read_loops"]


class Machine:
    """A tape run as bytecode: its encoding and the compiled loop once it is due (tiered like a
    compiled plan of one function; ``cached``: the loop is on disk)."""

    __slots__ = ("code", "fn", "cached")

    def __init__(self, code):
        share_loop(code)
        self.code, self.fn = code, None
        self.cached = on_disk(code.source)

    def ready(self):
        """Whether the loop is compiled."""
        return self.fn is not None

    @property
    def kernels(self):
        return [self.fn]

    def compile(self):
        """Compile (or load) the loop."""
        if self.fn is None:
            self.fn = self.build()

    def build(self):
        """The loop's function, made without publishing it: it compiles (or loads) for good at
        its first call."""
        from ..targets.cpu import kernel

        return kernel(self.code.source)

    def run(self, values):
        """The outputs on checked ``values``: fresh arrays, sharing memory with nothing."""
        return self.code.run(self.fn, values)


# The op sets of the bytecode loops compiled on this machine, most recent first, per arena dtype:
# kept in memory and in the cache's plans (``bytecode.loops_name``), so a tape whose operations a
# compiled loop holds runs on it (``bytecode.loop_ops``) instead of compiling a loop of its own.
loops: dict[str, list[tuple]] = {}
_LOOPS_KEPT = 32


def read_loops():
    """The op sets stored in the cache, or {} when there are none or the file fails its checks."""
    name = loops_name()
    data = name and read_plan(name)
    if not data:
        return {}
    try:
        stored = marshal.loads(data)
        return {
            dt: [tuple(ops) for ops in sets if type(ops) is tuple and all(type(op) is str for op in ops)]
            for dt, sets in stored.items()
            if dt in ("f32", "f64") and type(sets) is list
        }
    except (TypeError, ValueError, EOFError, AttributeError):
        return {}


def share_loop(code):
    """Move the encoding ``code`` onto the loop ``bytecode.loop_ops`` picks among those compiled
    before (in this process, or on disk and still there), and remember the one it runs on."""
    dt = code.arena()
    if not loops:
        loops.update(read_loops())
    known = loops.setdefault(dt, [])
    usable = [ops for ops in known if resident(text := source(ops, dt)) is not None or on_disk(text)]
    ops = loop_ops(code.ops, usable)
    if ops != code.ops:
        code.use(ops)
    if known[:1] != [ops]:
        known[:] = [ops] + [k for k in known if k != ops][: _LOOPS_KEPT - 1]
        merged = read_loops()
        for d, sets in loops.items():
            merged[d] = sets + [k for k in merged.get(d, []) if k not in sets][: _LOOPS_KEPT - len(sets)]
        name = loops_name()
        if name:
            write_plan(name, marshal.dumps(merged))


def machine_for(tape, policy=POLICY, big_steps=False, elsewhere=None):
    """The bytecode of ``tape`` when it should run as bytecode (``big_steps``: whatever its
    arrays' sizes), else None. Encodings are kept on disk next to the kernels: encoding costs
    about 10 µs an instruction (half a second for an unrolled LSTM's 47,000), reading one back
    a hundredth of that. One that fails its checks is encoded again and replaced.
    ``elsewhere()``, when given, has another process (the compile server) encode and store one
    that is not on disk yet (True when it did), to be read back here."""
    scans = unrolls(tape, policy)
    if scans is False:
        return None
    if not scans and (len(tape.instrs) < policy.bytecode_min_instrs or not (big_steps or small_steps(tape, policy))):
        return None
    name = plan_name(tape)  # a tape with scans is stored under its own, short key
    data = name and read_plan(name)
    if not data and name and elsewhere is not None and elsewhere():
        loops.clear()  # read again from disk, with the loop the other process compiled for it
        data = read_plan(name)
    if data:
        try:
            return Machine(Bytecode.loads(data))
        except ValueError:
            if debug_level():
                print(f"ngrad: stored encoding {name} failed its checks; encoding again", file=sys.stderr)
    code = bytecode.encode(unroll(tape) if scans else tape)  # through the module, so tests can watch it
    if code is None:
        return None
    if name:
        write_plan(name, code.dumps())
    return Machine(code)
