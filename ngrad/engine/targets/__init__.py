"""Code to callables: the CPU (``njit``) and CUDA (``cuda.jit``) targets, the only modules that
import Numba."""
