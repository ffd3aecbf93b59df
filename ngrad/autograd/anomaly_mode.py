"""Anomaly detection, as ``torch.autograd.detect_anomaly``: while it is on, every recorded
operation keeps the traceback of the line that made it, and each backward pass is also run
instruction by instruction by the NumPy interpreter: the first gradient rule that produces a
NaN raises a ``RuntimeError`` naming the operation and where it was recorded."""

import functools
import traceback
import warnings

from ..grad_mode import Anomaly, sync_recording
from .meta import NO_META

__all__ = [
    "detect_anomaly",
    "set_detect_anomaly",
    "is_anomaly_enabled",
    "is_anomaly_check_nan_enabled",
    "forward_trace",
]


def is_anomaly_enabled():
    """Whether anomaly detection is on."""
    return Anomaly.enabled


def is_anomaly_check_nan_enabled():
    """Whether anomaly detection checks gradients for NaN."""
    return Anomaly.check_nan


class set_detect_anomaly:
    """Turn anomaly detection on or off: at once as a call, restored on exit as a context manager."""

    def __init__(self, mode, check_nan=True):
        self._prev = (Anomaly.enabled, Anomaly.check_nan)
        Anomaly.enabled, Anomaly.check_nan = bool(mode), bool(check_nan)
        sync_recording()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        Anomaly.enabled, Anomaly.check_nan = self._prev
        sync_recording()
        return False


class detect_anomaly:
    """Context manager and decorator that turns anomaly detection on (slow: for debugging).

    ```python
    >>> import ngrad
    >>> x = ngrad.tensor([0.0, 1.0], requires_grad=True)
    >>> with ngrad.autograd.detect_anomaly():
    ...     y = x.sqrt() * 0
    ...     try:
    ...         y.sum().backward()
    ...     except RuntimeError as e:
    ...         print(str(e).splitlines()[0])
    Function 'SqrtBackward0' returned nan values in its 0th output.

    ```
    """

    def __init__(self, check_nan=True):
        self.check_nan = check_nan
        self._prev = []
        warnings.warn(
            "Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
            "enabled for debugging.",
            UserWarning,
            stacklevel=2,
        )

    def __enter__(self):
        self._prev.append((Anomaly.enabled, Anomaly.check_nan))
        Anomaly.enabled, Anomaly.check_nan = True, self.check_nan
        sync_recording()

    def __exit__(self, *exc):
        Anomaly.enabled, Anomaly.check_nan = self._prev.pop()
        sync_recording()
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return wrapper


def forward_trace(name, trace):
    """PyTorch's warning for a node whose backward failed under anomaly detection: where the
    forward call that made it was recorded (``trace``: frames, or None when anomaly detection
    was off while it was recorded)."""
    if not trace:
        return (
            f"Error detected in {name}. No forward pass information available. Enable detect anomaly "
            f"during forward pass for more information."
        )
    return f"Error detected in {name}. Traceback of forward call that caused the error:\n" + "".join(
        traceback.format_list(trace)
    )


def check_nan(low, joint, values):
    """Run the joint tape by the interpreter and raise at the first gradient rule whose
    cotangent holds a NaN (``values``: one array per tape input)."""
    import numpy as np

    from ..engine.ir.interpret import bind, evaluate

    tape = joint.tape
    env = bind(tape, values)
    with np.errstate(all="ignore"):
        for ins in tape.instrs:
            env[ins.out] = evaluate(tape, ins, env)
    for i, k, slot in joint.contributions:
        v = env.get(slot)
        if v is not None and v.dtype.kind == "f" and np.isnan(v).any():
            node = low.node_of_instr.get(i)
            meta = (node.meta if node is not None else None) or NO_META
            name = (meta.name or node.op.capitalize() + "Backward0") if node is not None else tape.instrs[i].prim
            where = "".join(traceback.format_list(meta.trace)) if meta.trace else ""
            warnings.warn(forward_trace(name, meta.trace), UserWarning, stacklevel=4)
            raise RuntimeError(
                f"Function '{name}' returned nan values in its {k}th output."
                + (f"\nThe forward operation was recorded at:\n{where}" if where else "")
            )
