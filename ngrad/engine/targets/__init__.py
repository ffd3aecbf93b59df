"""Code to callables: the CPU target (``cpu``: ngrad's own compiler, ``kernel_types`` -> ``emit``
-> ``llvm``, with Numba's ``njit`` for the kernels it does not handle; ``objects`` runs machine
code of either) and the CUDA target (``cuda.jit``); the only modules that import Numba or
llvmlite."""

import sys

__all__ = ["CompileError", "resident", "kernels_made"]


class CompileError(RuntimeError):
    """Numba could not compile a generated kernel (its message is Numba's). The runtime runs
    the program on the interpreter instead and says so once."""


def _cpu():
    """The CPU target if something imported it, else None: the runtime asks what is compiled
    without importing it (and so Numba), since nothing is before it is imported. A module another
    thread is still importing is not there yet either."""
    cpu = sys.modules.get(__name__ + ".cpu")
    return cpu if getattr(cpu, "IMPORTED", False) else None


def resident(text):
    """The CPU kernel of generated module ``text`` if this process holds it (``ready`` once it
    has run), else None."""
    cpu = _cpu()
    return None if cpu is None else cpu.resident(text)


def kernels_made():
    """How many CPU kernels this process has compiled or loaded."""
    cpu = _cpu()
    return 0 if cpu is None else cpu.stats["compiled"] + cpu.stats["loaded"]
