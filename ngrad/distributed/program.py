"""The program a data-parallel objective ships to its workers: a tape, not Numba objects.

Contract: ``trace_program(f, params, signature)`` traces ``ngrad.func.value_and_grad(f)`` on the
client for one chunk signature (the shapes and dtypes of a chunk's arrays) without computing
anything: the chunk arrays are zero-strided placeholders and the graph is only recorded and
lowered. The result, a ``Program``, is the tape's canonical text (``Tape.format``), the arrays
of the tensors ``f`` captured, and where each tape input comes from (a parameter leaf, a chunk
array, a captured constant). It pickles to that text and those arrays only, so it can travel to
any worker of any machine whose ngrad reads the same tape format.

On a worker, ``evaluate(program, params, part)`` parses and prepares the tape the first time the
process meets it (``ngrad.engine.runtime.prepare``: kernels compiled then, or loaded from the
worker's disk cache, ``NGRAD_CACHE_DIR``) and keeps the prepared runner for the process's
lifetime (bounded by ``NGRAD_MEMORY_ENTRIES``), so every later step and every other chunk of the
same shape only runs kernels. ``add`` is the tree reduction's step: value and gradients summed
in a fixed order.
"""

import hashlib

import numpy as np

from .. import grad_mode
from ..engine.ir import dtypes as D
from ..engine.ir.graph import lower, source
from ..engine.ir.tape import parse
from ..engine.recent import Recent
from ..engine.runtime import prepare
from ..func import value_and_grad
from ..tensor.core import Tensor
from ..tensor.record import wrap
from ..tracing.trace import Trace, restore

__all__ = [
    "Program",
    "trace_program",
    "evaluate",
    "evaluate_many",
    "add",
    "prepared",
    "compiles",
    "flatten",
    "unflatten",
]

# process-wide (one per worker): digest -> prepared runner, and how often each digest was prepared
prepared = Recent()
compiles = {}


def flatten(tree, leaves):
    """Append the tensors of ``tree`` (a tensor, or nested tuples, lists and dicts of them) to
    ``leaves`` in order; return the structure ``unflatten`` rebuilds it from."""
    if isinstance(tree, Tensor):
        leaves.append(tree)
        return None
    if isinstance(tree, (tuple, list)):
        return (type(tree), [flatten(x, leaves) for x in tree])
    if isinstance(tree, dict):
        return (dict, [(k, flatten(tree[k], leaves)) for k in tree])
    raise TypeError(
        f"ngrad.distributed: parameters must be a tensor or a tuple, list or dict of tensors, got {type(tree).__name__}"
    )


def unflatten(spec, leaves):
    """The tree of ``spec`` (from ``flatten``) with its leaves taken in order from ``leaves``."""
    it = iter(leaves)

    def build(s):
        if s is None:
            return next(it)
        kind, items = s
        if kind is dict:
            return {k: build(v) for k, v in items}
        return kind(build(v) for v in items)

    return build(spec)


class Program:
    """A traced value-and-gradient program for one chunk signature: ``text`` (the tape),
    ``consts`` (captured arrays), ``order`` (per tape input: ``("param", i)``, ``("chunk", j)``
    or ``("const", k)``), ``digest`` (a hash of all of it: the key of the prepared runner)."""

    def __init__(self, text, consts, order):
        self.text, self.consts, self.order = text, consts, order
        h = hashlib.sha256(text.encode())
        for c in consts:
            h.update(repr((c.dtype.str, c.shape)).encode())
            h.update(np.asarray(c, order="C").tobytes())
        h.update(repr(order).encode())
        self.digest = h.hexdigest()[:32]

    def __reduce__(self):  # the text and arrays travel; a prepared runner never does
        return (Program, (self.text, self.consts, self.order))

    def runner(self):
        """The prepared tape, made once per process."""
        run = prepared.get(self.digest)
        if run is None:
            run = prepared[self.digest] = prepare(parse(self.text).verify())
            compiles[self.digest] = compiles.get(self.digest, 0) + 1
        return run


def _placeholder(shape, dtype):
    """A source node of ``shape`` holding no memory: tracing records the graph, never reads it."""
    value = np.broadcast_to(np.zeros((), dtype), shape)
    return source(value, D.from_numpy_dtype(np.dtype(dtype)))


def trace_program(f, params, signature):
    """Trace ``value_and_grad(f)(params, *chunk)`` for a chunk of ``signature`` (one
    ``(shape, dtype)`` per array) and lower it to a ``Program`` (see the module docstring).
    ``params``: the tree of parameter tensors (their shapes and dtypes are used, not values)."""
    leaves = []
    spec = flatten(params, leaves)
    trace = Trace()
    p_nodes = [_placeholder(tuple(t.shape), t.dtype.np) for t in leaves]
    c_nodes = [_placeholder(shape, dtype) for shape, dtype in signature]
    role = {}
    for i, n in enumerate(p_nodes):
        role[id(n)] = ("param", i)
    for j, n in enumerate(c_nodes):
        role[id(n)] = ("chunk", j)
    for k, n in enumerate(p_nodes + c_nodes):
        trace.traced.add(id(n))
        trace.arg_of[id(n)] = k
    p_tree = unflatten(spec, [wrap(n) for n in p_nodes])
    state = grad_mode.state
    state.trace = trace
    try:
        with grad_mode.enable_grad():
            value, grads = value_and_grad(f)(p_tree, *[wrap(n) for n in c_nodes])
    finally:
        state.trace = None
        restore(trace)
    g_leaves = []
    flatten(grads, g_leaves)

    def literal(n):  # one-element captured constants (Python numbers, seeds) become literals
        return id(n) not in role and np.size(n.value) == 1 and not n.requires_grad

    low = lower([value._node] + [g._node for g in g_leaves], literal=literal)
    consts, order = [], []
    for n in low.sources:
        if id(n) in role:
            order.append(role[id(n)])
            continue
        if n.requires_grad:
            raise ValueError(
                "ngrad.distributed: the objective reads a tensor that requires grad but is not one of its "
                f"parameters (shape {list(n.shape)}); pass it in the parameters, or detach it"
            )
        order.append(("const", len(consts)))
        consts.append(np.asarray(n.value, order="C"))
    return Program(low.tape.format(), consts, order)


def evaluate(program, params, part):
    """Run ``program`` on the parameter arrays ``params`` and the chunk arrays ``part``:
    ``[value, *gradients]`` (on a worker; the runner is prepared once per process)."""
    # a chunk fetched from another worker for this step only (Dask moved the task) arrives as an
    # unaligned view of the message: the runtime copies such an input before a kernel reads it
    values = []
    for kind, i in program.order:
        values.append(params[i] if kind == "param" else part[i] if kind == "chunk" else program.consts[i])
    return program.runner()(values)


def evaluate_many(programs, params, *parts):
    """The sum of ``evaluate`` over several chunks (one program each), in the order given."""
    total = evaluate(programs[0], params, parts[0])
    for program, part in zip(programs[1:], parts[1:]):
        for t, a in zip(total, evaluate(program, params, part)):
            t += a
    return total


def add(*results):
    """The sum of several ``[value, *gradients]`` lists, in the order given."""
    total = [np.array(a, copy=True) for a in results[0]]
    for r in results[1:]:
        for t, a in zip(total, r):
            t += a
    return total
