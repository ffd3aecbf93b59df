"""``ngrad.compile``: trace a function once, then replay its compiled program.

The first call with a new input signature runs the Python function on the real arguments with
a *trace* active. Operations record lazy nodes as always; what the trace adds is bookkeeping:
which source nodes are the call's arguments, which tensors the function updated in place
(``w -= lr * w.grad`` under ``no_grad``, optimizer state), which ``.grad`` attributes it read or
wrote (``backward()`` records its gradients instead of computing them), and that no value of a
traced tensor is asked for (Python control flow on a tensor's value would be frozen into the
program: it is an error instead). The outputs and updated values are then lowered to ONE tape,
whose inputs are read afresh on every call: the arguments, the current values of tensors that
require grad or that the function updates, and their ``.grad``. ``runtime.prepare`` compiles the
tape into a driver, so a later call is: check the signature and guards, gather input arrays, run
the driver, write back the updates.

The modules, in the order they build on each other:

- ``trace``: the trace state and the facade's hooks into it (``runtime_scalar``,
  ``static_value``, ``check_random``), ``TraceError``, and what a finished trace changed;
- ``trees``: the structures of arguments and results, and their specs;
- ``probe``: the generated straight-line replay of a program (``entry``) and its fast path;
- ``variant``: one traced program: where its inputs come from, folding and lowering, guards,
  running it, and the grad_fn of its differentiable outputs;
- ``compiled``: ``CompiledFunction`` and ``compile``: choosing a variant or tracing a new one.
"""

from .compiled import CompiledFunction as CompiledFunction
from .compiled import compile
from .probe import PROBE_CONSTS as PROBE_CONSTS
from .trace import TraceError
from .trace import check_random as check_random
from .trace import runtime_scalar as runtime_scalar
from .trace import static_value as static_value

__all__ = ["compile", "TraceError"]
