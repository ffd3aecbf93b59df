"""The trace: what ``ngrad.compile`` learns while it runs the user's function, besides the graph.

Contract: while a call is traced, ``grad_mode.state.trace`` is a ``Trace`` and the facade reports
to it: every change of a tensor's node (``Trace.note``, from ``tensor.inplace.replace_node``),
every ``.grad`` read or write (``Trace.note_grad``), and every value it is asked for
(``Trace.check_concrete`` raises ``TraceError`` when the value depends on the arguments).
Library code reads Python state through ``runtime_scalar`` (an input the program reads on every
call) and ``static_value`` (a guard: a call that finds another value traces again);
``check_random`` refuses random draws. Once the call returns, ``effects`` says what it changed
and ``restore`` undoes that on the tensors (the program redoes it with real values). A replay
that finds a tensor gone or a guard broken raises ``Stale``: the caller traces again.
"""

import weakref

import numpy as np

from .. import grad_mode
from ..engine.ir import dtypes as D
from ..engine.ir.graph import source
from ..tensor.inplace import earlier_nodes, restore_earlier
from ..tensor.record import wrap

__all__ = ["Stale", "Trace", "TraceError", "check_random", "effects", "restore", "runtime_scalar", "static_value"]

_gm = grad_mode.state


class TraceError(RuntimeError):
    """What ``ngrad.compile`` cannot trace (a value needed while tracing, random numbers...)."""


class Stale(Exception):
    """A tensor the program reads no longer exists, or a guard failed: trace again."""


_CONCRETE = (
    "ngrad.compile: the value of a tensor that depends on the compiled function's arguments was "
    "needed while tracing (.item(), float(), bool(), int(), .numpy(), .tolist(), printing, or "
    "Python control flow such as `if loss < tol`). A compiled program cannot branch on values: "
    "compute such values outside the compiled function, use ngrad.where, pass the number as a "
    "static argument (static_argnums), or call the function without ngrad.compile."
)


class Trace:
    """What one trace learns besides the graph: see the module docstring."""

    def __init__(self):
        self.changed = {}  # id(tensor) -> (weakref to it, its node before the trace)
        self.versions = {}  # id(version counter) -> (the counter, its value before the trace)
        self.grads = {}  # id(tensor) -> (weakref to it, its .grad before the trace)
        self.traced = set()  # ids of nodes that hold this call's argument values
        self.arg_of = {}  # id(node) -> position of the argument it holds
        self.calls = {}  # id(node) -> getter of a runtime scalar (see runtime_scalar)
        self.statics = []  # (getter, value): Python values the trace depends on
        self.leaf_writes = []  # (weakref to a leaf, the node a write under no_grad gave it)
        self.earlier = {}  # id(tensor) -> its earlier nodes before the trace (tensor.inplace.replace_node)

    def note(self, t):
        """``t`` is about to get a new node (an in-place update)."""
        if id(t) not in self.changed:
            self.changed[id(t)] = (weakref.ref(t), t._node)
            self.earlier[id(t)] = earlier_nodes(t)
            vc = t._vc
            if vc is not None and id(vc) not in self.versions:  # one counter, shared by views
                self.versions[id(vc)] = (vc, vc.value)

    def note_leaf(self, t, node):
        """Leaf ``t`` now holds ``node``, a new leaf with the value a write under ``no_grad``
        gave it (see ``tensor.inplace.leaf_update``)."""
        self.leaf_writes.append((weakref.ref(t), node))

    def note_grad(self, t):
        """``t.grad`` is read or about to be written."""
        if id(t) not in self.grads:
            self.grads[id(t)] = (weakref.ref(t), t._grad)

    def check_concrete(self, nodes):
        """Raise unless every node's value is independent of the arguments (then it can be computed)."""
        stack, seen = list(nodes), set()
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if id(n) in self.traced:
                raise TraceError(_CONCRETE)
            if n.value is None:
                stack.extend(n.srcs)


def runtime_scalar(getter):
    """``getter()``, or, while ``ngrad.compile`` traces, a 0-d float64 tensor that the compiled
    program reads from ``getter()`` on every call (a learning rate a scheduler changes).

    ```python
    >>> from ngrad.tracing import runtime_scalar
    >>> runtime_scalar(lambda: 0.5)
    0.5

    ```
    """
    tr = _gm.trace
    v = getter()
    if tr is None:
        return v
    n = source(np.float64(v), D.float64, scalar=True)
    tr.traced.add(id(n))
    tr.calls[id(n)] = getter
    return wrap(n)


def static_value(getter):
    """``getter()``; while ``ngrad.compile`` traces, the program is also guarded on it: a call
    that finds another value traces again (Python state that decides the program's shape).

    ```python
    >>> from ngrad.tracing import static_value
    >>> static_value(lambda: (0.9, 0.999))
    (0.9, 0.999)

    ```
    """
    v = getter()
    tr = _gm.trace
    if tr is not None:
        tr.statics.append((getter, v))
    return v


def check_random():
    """Raise ``TraceError`` while ``ngrad.compile`` traces: a random draw would be frozen into
    the program (the factories call this before drawing)."""
    if _gm.trace is not None:
        raise TraceError(
            "ngrad.compile: random numbers drawn inside a compiled function would be drawn once, "
            "when tracing, and replayed on every call. Draw them outside and pass them as arguments."
        )


def effects(trace, flat=()):
    """What the traced call changed: (key, ref, kind, leaf, version bumps) per effect, the nodes that compute
    them, and the gradients it set to None (kind "nograd", no node). A view that changed is an
    effect only when it is an argument (``flat``): otherwise its storage root's effect covers
    it, and a root is not one when an argument views it (the argument carries the write)."""
    found, roots, clears = [], [], []
    args = {id(a) for a in flat}
    viewed = {id(a._view.root) for a in flat if getattr(a, "_view", None) is not None}
    grad_objects = {id(g) for ref, g in trace.grads.values() if g is not None}
    grad_objects.update(id(ref()._grad) for ref, g in trace.grads.values() if ref() is not None)
    for key, (ref, old) in trace.changed.items():
        t = ref()
        if t is None or t._node is old or key in grad_objects:
            continue
        if key not in args and (t._view is not None or key in viewed):
            continue
        before = trace.versions.get(id(t._vc), (None, 0))[1] if t._vc is not None else 0
        now = 0 if t._vc is None else t._vc.value  # not _version: an inference tensor's raises
        found.append((key, ref, "node", old.requires_grad and not old.differentiable, now - before))
        roots.append(t._node)
    for key, (ref, old) in trace.grads.items():
        t = ref()
        if t is None:
            continue
        g = t._grad
        if g is None:
            if old is not None:
                clears.append((key, ref, "nograd", False, 0))
        elif g is old:
            if id(g) in trace.changed and g._node is not trace.changed[id(g)][1]:
                found.append((key, ref, "grad", False, 0))
                roots.append(g._node)
        else:
            found.append((key, ref, "setgrad", False, 0))
            roots.append(g._node)
    return found, roots, clears


def restore(trace):
    """Undo what tracing did to tensors (the program will redo it with real values)."""
    for key, (ref, old) in trace.changed.items():
        t = ref()
        if t is not None:
            t._node = old
            restore_earlier(t, trace.earlier[key])
    for vc, value in trace.versions.values():  # the program's effects count the call's updates again
        vc.value = value
    for _key, (ref, old) in trace.grads.items():
        t = ref()
        if t is not None:
            t._grad = old
