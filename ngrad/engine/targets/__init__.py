"""Code to callables: the CPU (``njit``) and CUDA (``cuda.jit``) targets, the only modules that
import Numba."""

__all__ = ["CompileError"]


class CompileError(RuntimeError):
    """Numba could not compile a generated kernel (its message is Numba's). The runtime runs
    the program on the interpreter instead and says so once."""
