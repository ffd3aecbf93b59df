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
"""

import builtins
import functools
import math
import sys
import weakref

import numpy as np

from . import grad_mode as _grad_mode
from ._gc import paused
from .engine.ir import dtypes as D
from .engine.ir.graph import Node as _Node
from .engine.ir.graph import lower, replay, source, target_of
from .engine.ir.prims import PRIMS
from .engine.runtime import debug_level, inline, prepare
from .engine.runtime.realize import realize
from .engine.transform.differentiate import jvp as _jvp
from .engine.transform.differentiate import split as _split
from .tensor import Tensor, _replace, _segment_nodes, _wrap, replacements

__all__ = ["compile", "TraceError"]

_gm = _grad_mode.state


class TraceError(RuntimeError):
    """What ``ngrad.compile`` cannot trace (a value needed while tracing, random numbers...)."""


_CONCRETE = (
    "ngrad.compile: the value of a tensor that depends on the compiled function's arguments was "
    "needed while tracing (.item(), float(), bool(), int(), .numpy(), .tolist(), printing, or "
    "Python control flow such as `if loss < tol`). A compiled program cannot branch on values: "
    "compute such values outside the compiled function, use ngrad.where, pass the number as a "
    "static argument (static_argnums), or call the function without ngrad.compile."
)


class _Trace:
    """What one trace learns besides the graph: see the module docstring."""

    def __init__(self):
        self.changed = {}  # id(tensor) -> (weakref to it, its node before the trace)
        self.grads = {}  # id(tensor) -> (weakref to it, its .grad before the trace)
        self.traced = set()  # ids of nodes that hold this call's argument values
        self.arg_of = {}  # id(node) -> position of the argument it holds
        self.calls = {}  # id(node) -> getter of a runtime scalar (see runtime_scalar)
        self.statics = []  # (getter, value): Python values the trace depends on

    def note(self, t):
        """``t`` is about to get a new node (an in-place update)."""
        if id(t) not in self.changed:
            self.changed[id(t)] = (weakref.ref(t), t._node)

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
    return _wrap(n)


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


def _check_random():
    if _gm.trace is not None:
        raise TraceError(
            "ngrad.compile: random numbers drawn inside a compiled function would be drawn once, "
            "when tracing, and replayed on every call. Draw them outside and pass them as arguments."
        )


# --- arguments: nested tuples, lists and dicts of tensors, floats and static values --------------


def _flatten(tree, leaves):
    """The structure of ``tree`` (hashable) with its leaves appended to ``leaves``."""
    if isinstance(tree, Tensor):
        leaves.append(tree)
        n = tree._node
        return ("T", n.dtype, n.shape, n.requires_grad)
    t = type(tree)
    if t is float:
        leaves.append(tree)
        return ("F",)
    if t in (tuple, list):
        return (t.__name__, tuple(_flatten(x, leaves) for x in tree))
    if t is dict:
        return ("dict", tuple((k, _flatten(tree[k], leaves)) for k in tree))
    try:
        hash(tree)
    except TypeError:
        raise TypeError(
            f"ngrad.compile: an argument of type {t.__name__} is neither a tensor, a float, a "
            f"tuple/list/dict of them, nor a hashable static value"
        ) from None
    leaves.append(tree)
    return ("S", t, tree)


def _build(spec, values):
    """The inverse of ``_flatten``: a tree of ``spec``'s structure over the values in order."""
    tag = spec[0]
    if tag in ("T", "F", "S"):
        return next(values)
    if tag == "tuple":
        return tuple(_build(s, values) for s in spec[1])
    if tag == "list":
        return [_build(s, values) for s in spec[1]]
    return {k: _build(s, values) for k, s in spec[1]}


def _out_spec(tree, found):
    """Like ``_flatten`` for the function's result: tensors become positions in ``found``."""
    if isinstance(tree, Tensor):
        found.append(tree)
        return ("T",)
    t = type(tree)
    if t in (tuple, list):
        return (t.__name__, tuple(_out_spec(x, found) for x in tree))
    if t is dict:
        return ("dict", tuple((k, _out_spec(tree[k], found)) for k in tree))
    return ("S", tree)


def _out_build(spec, tensors):
    tag = spec[0]
    if tag == "T":
        return next(tensors)
    if tag == "S":
        return spec[1]
    if tag == "tuple":
        return tuple(_out_build(s, tensors) for s in spec[1])
    if tag == "list":
        return [_out_build(s, tensors) for s in spec[1]]
    return {k: _out_build(s, tensors) for k, s in spec[1]}


# --- one traced variant ---------------------------------------------------------------------------


def _fetch(kind, data, flat):
    """The current node of one program input (see ``_Variant``)."""
    if kind == "call":
        return source(np.float64(data()), D.float64, scalar=True)
    if kind == "arg":
        a = flat[data]
        return a._node if isinstance(a, Tensor) else source(np.float64(a), D.float64, scalar=True)
    if kind == "const":
        return data
    t = data(flat)
    if kind == "grad":
        if t._grad is None:
            raise _Stale()
        return t._grad._node
    return t._node


# Values computed from constants alone are computed once, when the program is made, up to this
# size each; bigger ones are recomputed by every call rather than held.
FOLD_MAX_BYTES = 1 << 26


def _fold(roots, constant):
    """Compute the constant subexpressions below ``roots`` now: nodes whose sources are all
    constant sources (``constant(node)``) or such nodes, and that something non-constant reads
    (a Vandermonde matrix of fixed points, ``sign(t)``), unless they only broadcast one-element
    constants (literals in the kernels). Their values make them sources of the tape, so a call
    no longer recomputes them. Movements (a reshape, a broadcast) are not folded, their sources
    are: a broadcast stays a broadcast read. Returns the constant sources of the graph (the
    program is stale once one is updated in place)."""
    # const: id -> whether the node is constant; wide: ids of constants with a multi-element
    # constant below them. Plain loops: this walks every node of a traced training step.
    const, wide, order, stack = {}, set(), [], [(n, False) for n in roots]
    while stack:  # post-order, iteratively: graphs can be 100,000 nodes deep
        n, done = stack.pop()
        i = id(n)
        if i in const:
            continue
        if n.value is not None:
            const[i] = c = constant(n)
            if c and np.size(n.value) > 1:
                wide.add(i)
        elif done or not n.srcs:
            c = w = n.op != "input" and not n.requires_grad
            if c:
                w = False
                for a in n.srcs:
                    if not const[id(a)]:
                        c = False
                        break
                    w = w or id(a) in wide
            const[i] = c
            if c and w:
                wide.add(i)
        else:
            stack.append((n, True))
            for a in n.srcs:
                if id(a) not in const:
                    stack.append((a, False))
            continue
        order.append(n)
    fold, seen = [], set()
    edge = [n for n in roots if const[id(n)]] + [a for n in order if not const[id(n)] for a in n.srcs if const[id(a)]]
    while edge:
        n = edge.pop()
        if id(n) in seen or n.value is not None or id(n) not in wide:
            continue
        seen.add(id(n))
        if PRIMS[n.op].kind == "movement" or math.prod(n.shape) * n.dtype.itemsize > FOLD_MAX_BYTES:
            edge.extend(n.srcs)
        else:
            fold.append(n)
    if fold:
        realize(fold)
    return [n for n in order if n.value is not None and const[id(n)]]


def _define(name, lines, g, param="flat"):
    """Define the generated function ``name(param)`` with body ``lines`` in globals ``g``."""
    text = f"def {name}({param}):\n" + "".join(f"    {line}\n" for line in lines)
    if debug_level() >= 2:
        print(f"ngrad: generated {name}\n{text}", file=sys.stderr)
    exec(builtins.compile(text, f"<ngrad {name}>", "exec"), g)  # ``compile`` is ours
    return g[name]


def _probe_tensor(v, node, dtype, shape, requires_grad):
    """A probe's lines checking that ``v`` is a tensor of the signature (``dtype``: the global
    holding its dtype), its node left in the local ``node``."""
    return [
        f"if {v}.__class__ is not _Tensor: return _MISS",
        f"{node} = {v}._node",
        f"if {node}.shape != {shape!r} or {node}.dtype is not {dtype} or "
        f"{node}.requires_grad != {requires_grad!r}: return _MISS",
    ]


def _probe_part(spec, e, g):
    """A probe's lines checking that the argument expression ``e`` has the structure ``spec``
    (from ``CompiledFunction._spec``: ``_flatten``'s, or a static argument's) and appending its
    leaves to ``flat`` as ``_flatten`` would; classes are matched exactly (a subclass misses)."""
    tag, lines = spec[0], []
    if tag in ("static", "S"):
        t, v = spec[1] if tag == "static" else spec[1:]
        name = f"_X{len(g)}"
        g[name], g[name + "t"] = v, t
        lines.append(f"if {e}.__class__ is not {name}t or {e} != {name}: return _MISS")
        return lines + ([f"flat.append({e})"] if tag == "S" else [])
    if tag == "T":
        name = f"_X{len(g)}"
        g[name] = spec[1]
        return [
            f"{name}v = {e}",
            *_probe_tensor(f"{name}v", f"{name}n", name, spec[2], spec[3]),
            f"flat.append({name}v)",
        ]
    if tag == "F":
        return [f"if {e}.__class__ is not float: return _MISS", f"flat.append({e})"]
    name = f"_X{len(g)}"
    g[name] = None  # the name is the probe's local for this container: reserved
    items = spec[1]  # tag: "tuple", "list" or "dict", the name of the builtin class
    lines += [f"{name} = {e}", f"if {name}.__class__ is not {tag} or len({name}) != {len(items)}: return _MISS"]
    if tag == "dict":
        g[name + "k"] = tuple(k for k, _ in items)
        lines.append(f"if tuple({name}) != {name}k: return _MISS")
        for k, sub in items:
            key = f"{name}_{len(g)}"
            g[key] = k
            lines += _probe_part(sub, f"{name}[{key}]", g)
    else:
        for i, sub in enumerate(items):
            lines += _probe_part(sub, f"{name}[{i}]", g)
    return lines


_object_new = object.__new__
MISS = object()  # what a probe returns when its call is not the one it was made for
PROBE_CONSTS = 16  # a probe asks each captured constant whether it was replaced, up to this many


class _Stale(Exception):
    """A tensor the program reads no longer exists, or a guard failed: trace again."""


def _target(k, ref, must_live=True):
    """How a replay finds the tensor an input or effect belongs to: the k-th argument, or a
    captured tensor (None, or _Stale for an input, once it is gone)."""
    if k is not None:
        return lambda flat: flat[k]

    def get(flat):
        t = ref()
        if t is None and must_live:
            raise _Stale()
        return t

    return get


class _Variant:
    """A traced program: where each input comes from, the prepared tape, effects, guards and the
    output tree. Inputs are ("arg", k), ("const", node), ("node", target) or ("grad", target)."""

    def __init__(self, trace, flat, roots, effects, out_spec, n_out, graph, signature, parts):
        arg_at = {}
        for k, a in enumerate(flat):
            if isinstance(a, Tensor):
                arg_at.setdefault(id(a), k)
        before = {id(node): (key, ref) for key, (ref, node) in trace.changed.items()}
        grad_before = {}
        self.guards = []
        for key, (ref, g) in trace.grads.items():
            if ref() is None:
                continue
            target = _target(arg_at.get(key), ref)
            self.guards.append((target, g is not None))
            if g is not None:
                grad_before[id(trace.changed.get(id(g), (None, g._node))[1])] = target
        # a value returned twice (the gradient a step returns is also the .grad it sets) is
        # computed and handed out once: ``where[k]`` is root k's place among the tape's outputs
        place, unique = {}, []
        for n in roots:
            if id(n) not in place:
                place[id(n)] = len(unique)
                unique.append(n)
        self.where = [place[id(n)] for n in roots]

        def origin(n):
            i = id(n)
            if i in trace.calls:
                return "call", trace.calls[i]
            if i in trace.traced:
                return "arg", trace.arg_of[i]
            if i in grad_before:
                return "grad", grad_before[i]
            if i in before:
                key, ref = before[i]
                return "node", _target(arg_at.get(key), ref)
            if n.owner is not None and n.owner() is not None:
                return "node", _target(arg_at.get(id(n.owner())), n.owner)
            return "const", n

        # constant subexpressions are computed now, and a one-element constant (a Python number
        # in the function, a gradient seed) is a literal of the tape: kernels fold it instead of
        # taking it as an argument per call. ``consts``: every constant source the program used.
        # Lowering meets every constant source too, so it runs first: only when one of them has
        # more than one element can anything fold (see _fold), and the graph is walked again.
        literals = []  # what the first lowering made literals (read only before any second one)

        def constant(n):
            return origin(n)[0] == "const"

        def literal(n):
            if np.size(n.value) == 1 and constant(n):
                literals.append(n)
                return True
            return False

        low = lower(unique, literal=literal)
        self.consts = literals + [n for n in low.sources if constant(n)]
        if len(literals) < len(self.consts):
            self.consts = _fold(unique, constant)
            low = lower(unique, literal=literal)
        self.inputs = [origin(n) for n in low.sources]
        self.tape = low.tape
        # ... and it reaches a tensor from outside the call that requires grad
        graph = graph and any(n.requires_grad for n in low.sources)
        self.split = None
        if graph and target_of(unique) == "cpu" and not any(unique[w].requires_grad for w in self.where[n_out:]):
            # differentiable outputs: a forward program that also returns what the reverse pass
            # reads, and a backward program (compiled when first needed) that the outputs' grad_fn runs
            self.mask = tuple(n.requires_grad for n in low.sources)
            self.split = _split(low.tape, [s for s, r in zip(low.tape.inputs, self.mask) if r])
            self.backward_run = None
            position = {s: i for i, s in enumerate(low.tape.inputs)}
            self.passed = [position.get(s) for s in low.tape.outputs]  # an input returned as it is
            self.differentiable = [n.requires_grad for n in unique]
        self.run = (
            None if graph and self.split is None else prepare(low.tape if self.split is None else self.split.forward)
        )
        self.effects = [(_target(arg_at.get(key), ref, False), kind, leaf) for key, ref, kind, leaf in effects]
        self.out_spec, self.n_out = out_spec, n_out
        self.seen = replacements[0]
        self.statics = trace.statics
        self.entry, self.probe = (
            (None, None) if graph else self._entry([isinstance(a, Tensor) for a in flat], signature, parts)
        )

    def valid(self, flat):
        for getter, value in self.statics:
            if getter() != value:
                return False
        for target, had in self.guards:
            try:
                t = target(flat)
            except _Stale:
                return False
            if (t._grad is not None) != had:
                return False
        return self.seen == replacements[0] or self.kept()

    def kept(self):
        """Whether no captured constant was updated in place (asked once the process-wide count
        of such updates moved)."""
        if any(n.replaced for n in self.consts):
            return False
        self.seen = replacements[0]
        return True

    def _entry(self, is_tensor, signature, parts):
        """Generated functions for the replay of a run-mode program (see ``__call__``): input
        reads, the driver call, output tensors and the output tree as straight-line code.
        ``entry(flat)`` runs once ``valid`` held. ``probe(args)``, made for a call without
        keyword arguments (``signature``: its key in ``variants``, else None; ``parts``: the
        structure of its arguments, None for plain tensors), first checks what
        ``CompiledFunction.__call__`` and ``valid`` would (the signature, static values such as
        an optimizer's hyperparameters, which ``.grad`` exist) and returns ``MISS`` when any
        differs; the driver's code is inlined in it (``runtime.inline``), so a call of the common
        case runs one generated Python function and the kernels. Names here start with ``_``."""
        from .engine.ir.dtypes import from_short
        from .engine.ir.graph import ON_RECORD

        g = {
            "_run": self.run,
            "_ready": lambda n: realize([n])[0],
            "_Stale": _Stale,
            "_apply": self._apply,
            "_Tensor": Tensor,
            "_Node": _Node,
            "_new": _object_new,
            "_RECORD": ON_RECORD,
            "_GM": _gm,
            "_REPL": replacements,
            "_V": self,
            "_MISS": MISS,
        }
        reads, vals, probed = [], [], []  # probed: reads of arguments, as the probe makes them
        for i, (kind, data) in enumerate(self.inputs):
            v = f"_v{i}"
            vals.append(v)
            if kind == "arg" and not is_tensor[data]:
                reads.append(f"{v} = flat[{data}]")
                continue
            if kind == "const":
                g[f"_C{i}"] = data.value
                reads.append(f"{v} = _C{i}")
                continue
            if kind == "call":
                g[f"_F{i}"] = data
                reads.append(f"{v} = _F{i}()")
                continue
            if kind == "arg":
                reads.append(f"_n{i} = flat[{data}]._node")
                probed.append((len(reads) - 1, f"_n{i} = _a{data}"))
            else:
                g[f"_T{i}"] = data
                if kind == "grad":
                    reads += [f"_n{i} = _T{i}(flat)._grad", f"if _n{i} is None: raise _Stale()", f"_n{i} = _n{i}._node"]
                else:
                    reads.append(f"_n{i} = _T{i}(flat)._node")
            reads += [f"{v} = _n{i}.value", f"if {v} is None: {v} = _ready(_n{i})"]
        n_unique = len(self.tape.outputs)
        outs = [f"_o{w}" for w in range(n_unique)]
        tail = []
        # the output tensors, built field by field: Node.__init__ and a wrapper call cost more
        # than the rest of a small program's replay (outputs are sources: no placement to do)
        for k in range(self.n_out):
            out = self.tape.outputs[self.where[k]]
            g[f"_D{k}"] = from_short(self.tape.dtypes[out])
            tail += [
                "_m = _new(_Node)",
                "_m.op = 'input'",
                "_m.srcs = ()",
                "_m.params = None",
                f"_m.shape = {tuple(self.tape.shapes[out])!r}",
                f"_m.dtype = _D{k}",
                f"_m.value = {outs[self.where[k]]}",
                "_m.requires_grad = _m.differentiable = False",
                "if _RECORD[0] is not None: _RECORD[0](_m)",
                f"_r{k} = _new(_Tensor)",
                f"_r{k}._node = _m",
            ]
        if self.effects:
            tail.append(f"_apply(flat, [{''.join(f'{outs[w]}, ' for w in self.where[self.n_out :])}])")
        counter = iter(range(self.n_out))

        def tree(spec):
            tag = spec[0]
            if tag == "T":
                return f"_r{next(counter)}"
            if tag == "S":
                name = f"_S{len(g)}"
                g[name] = spec[1]
                return name
            items = [tree(x) for x in spec[1]] if tag != "dict" else None
            if tag == "tuple":
                return "(" + "".join(f"{x}, " for x in items) + ")"
            if tag == "list":
                return "[" + ", ".join(items) + "]"
            parts = []
            for field, sub in spec[1]:
                name = f"_K{len(g)}"
                g[name] = field
                parts.append(f"{name}: {tree(sub)}")
            return "{" + ", ".join(parts) + "}"

        tail.append(f"return {tree(self.out_spec)}")
        call = [f"_o = _run([{', '.join(vals)}])"] + [f"{o} = _o[{w}]" for w, o in enumerate(outs)]
        entry = _define("entry", reads + call + tail, g)
        if signature is None:
            return entry, None
        sig, enabled = signature
        # a captured constant updated in place (see valid): asked of each constant when there are
        # few, since every in-place update anywhere (a training step's own) moves the counter
        if len(self.consts) <= PROBE_CONSTS:
            for j, n in enumerate(self.consts):
                g[f"_CN{j}"] = n
            replaced = "".join(f" or _CN{j}.replaced" for j in range(len(self.consts)))
        else:  # an optimizer's own updates move the counter every call: then the constants are asked
            replaced = " or (_V.seen != _REPL[0] and not _V.kept())"
        count = len(sig) if parts is None else len(parts)
        head = [
            f"if len(args) != {count} or _GM.trace is not None or _GM.enabled != {enabled!r}{replaced}: return _MISS"
        ]
        if parts is None:  # positional tensors: ``flat`` is ``args``
            head.append("flat = args")
            for k, (shape, dtype, requires_grad) in enumerate(sig):
                g[f"_P{k}"] = dtype
                head += [f"_a{k} = flat[{k}]", *_probe_tensor(f"_a{k}", f"_a{k}", f"_P{k}", shape, requires_grad)]
        else:  # nested arguments and static values: ``flat`` as ``_flatten`` would make it
            head.append("flat = []")
            for k, part in enumerate(parts):
                head += _probe_part(part, f"args[{k}]", g)
        for j, (getter, value) in enumerate(self.statics):
            g[f"_SG{j}"], g[f"_SV{j}"] = getter, value
            head.append(f"if _SG{j}() != _SV{j}: return _MISS")
        for j, (target, had) in enumerate(self.guards):  # a target gone raises _Stale: __call__ goes on
            g[f"_GT{j}"] = target
            head.append(f"if (_GT{j}(flat)._grad is not None) != {had!r}: return _MISS")
        g["_entry"] = entry
        if parts is None:  # the probe has each argument's node already
            for at, line in probed:
                reads[at] = line
        code = inline(self.tape, vals, g, "return _entry(flat)")
        if code is not None:
            driver, results = code
            call = driver + [f"{o} = {r}" for o, r in zip(outs, results)]
        return entry, _define("probe", head + reads + call + tail, g, "args")

    def __call__(self, flat):
        if self.entry is not None:  # run mode
            return self.entry(flat)
        nodes = [_fetch(kind, data, flat) for kind, data in self.inputs]
        if self.split is not None and tuple(n.requires_grad for n in nodes) == self.mask:
            return self._forward(flat, nodes)
        # the inputs that require grad changed since the trace: the tape is recorded as graph
        # nodes over the current inputs
        with _grad_mode.enable_grad():
            made = replay(self.tape, nodes, True)
        made = [made[w] for w in self.where]
        self._apply(flat, realize(made[self.n_out :]))
        return _out_build(self.out_spec, iter(_wrap(n) for n in made[: self.n_out]))

    def _forward(self, flat, nodes):
        """Run the forward program; the differentiable outputs get a ``_Backward`` as grad_fn."""
        values = [n.value if n.value is not None else realize([n])[0] for n in nodes]
        arrays = self.run(values)
        tape = self.tape
        if self.effects:
            self._apply(flat, [arrays[w] for w in self.where[self.n_out :]])
        ctx = _Backward(self, nodes, [arrays[i] if kind == "out" else values[i] for kind, i in self.split.saved])
        made, specs = {}, [None] * len(tape.outputs)
        for w in self.where[: self.n_out]:
            if w in made:
                continue
            slot, value = tape.outputs[w], arrays[w]
            dtype = D.from_short(tape.dtypes[slot])
            if self.passed[w] is not None:
                made[w] = nodes[self.passed[w]]
            elif self.differentiable[w]:
                n = made[w] = _Node("detach", (source(value, dtype),), None, value.shape, dtype, True, value)
                n.ctx, n.name = ctx, "CompiledFunctionBackward"
                _segment_nodes.add(n)
                specs[w] = (n, value.shape, dtype)
            else:
                made[w] = source(value, dtype)
        ctx._outputs = tuple(specs)
        return _out_build(self.out_spec, iter(_wrap(made[w]) for w in self.where[: self.n_out]))

    def _apply(self, flat, arrays):
        for (target, kind, leaf), a in zip(self.effects, arrays):
            t = target(flat)
            if t is None:  # a tensor only the traced call held: nobody can see it
                continue
            dt = D.from_numpy_dtype(a.dtype)
            if kind == "node":
                n = source(a, dt)
                if leaf:
                    n.requires_grad = True
                    n.owner = weakref.ref(t)
                _replace(t, n)
            elif kind == "grad":
                t._grad._node = source(a, dt)
            else:  # "setgrad"
                t._grad = _wrap(source(a, dt))
        for target, _, _ in self.effects[len(arrays) :]:  # "nograd": set to None
            t = target(flat)
            if t is not None:
                t._grad = None


class _Backward:
    """The grad_fn of a compiled forward's differentiable outputs: the reverse engine treats it as
    a custom Function's context (``ngrad.autograd.reverse``: its outputs are cut points, its
    ``_backward`` hands gradients on to its inputs). It holds the call's input nodes and the
    values the backward program reads; ``create_graph=True`` and batched cotangents record the
    forward as graph nodes over the inputs instead, and the gradient carries on through them."""

    materialize_grads = False  # forward mode: inputs without a tangent get none

    def __init__(self, variant, nodes, saved):
        self._variant, self._input_nodes, self._saved = variant, nodes, saved
        self._outputs = ()

    @property
    def _freed(self):
        return self._saved is None

    @_freed.setter
    def _freed(self, freed):  # a backward without retain_graph: the saved values go
        if freed:
            self._saved = None

    def _cut_nodes(self):
        return [spec[0] for spec in self._outputs if spec is not None]

    def _backward(self, acc, create_graph, batch=None):
        from .autograd.reverse import _FREED, _stale

        v, nodes = self._variant, self._input_nodes
        reached = [(spec[0], acc[spec[0]]) for spec in self._outputs if spec is not None and spec[0] in acc]
        if not reached:
            return [], []
        if self._saved is None:
            raise RuntimeError(_FREED)
        if create_graph or batch is not None:
            with _grad_mode.enable_grad():
                made = replay(v.tape, nodes, True)
            at = {spec[0]: w for w, spec in enumerate(self._outputs) if spec is not None}
            return [made[at[n]] for n, _ in reached], [g for _, g in reached]
        split = v.split
        for kind, i in split.saved:
            if kind == "in" and nodes[i].stale is not None:
                raise _stale(nodes[i])
        seeds = []
        for k in split.seeds:
            spec = self._outputs[k]
            g = acc.get(spec[0]) if spec is not None else None
            if g is None:
                shape, dtype = v.tape.shapes[v.tape.outputs[k]], D.from_short(v.tape.dtypes[v.tape.outputs[k]])
                seeds.append(np.zeros(shape, dtype.np))
            else:
                seeds.append(g.value if g.value is not None else realize([g])[0])
        if v.backward_run is None:
            v.backward_run = prepare(split.backward)
        grads = v.backward_run(self._saved + seeds)
        roots, found = [], []
        for i, at in zip([i for i, r in enumerate(v.mask) if r], split.grads):
            if at is not None:
                roots.append(nodes[i])
                found.append(source(grads[at], nodes[i].dtype))
        return roots, found

    class _cls:  # what forward mode calls (see ngrad.autograd.forward_ad._custom_jvp)
        @staticmethod
        def jvp(ctx, *tangents):
            v, nodes = ctx._variant, ctx._input_nodes
            have = [i for i, t in enumerate(tangents) if t is not None]
            tan = _jvp(v.tape, [v.tape.inputs[i] for i in have])
            made = replay(tan.tape, list(nodes) + [tangents[i]._node for i in have], _grad_mode.is_grad_enabled())
            return tuple(
                None if spec is None or tan.tangents[w] is None else _wrap(made[tan.tangents[w]])
                for w, spec in enumerate(ctx._outputs)
            )


# --- the compiled function ------------------------------------------------------------------------


class CompiledFunction:
    """What ``ngrad.compile(fn)`` returns: call it like ``fn``. See ``ngrad.compile``."""

    def __init__(self, fn, static_argnums=(), static_argnames=()):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.static_argnums = frozenset(static_argnums)
        self.static_argnames = frozenset(static_argnames)
        self.variants = {}
        self.traces = 0
        self.probe = None  # the probe of the variant that ran last (see _Variant._entry)

    def __get__(self, obj, objtype=None):  # decorating a method binds like a function
        return self if obj is None else functools.partial(self, obj)

    def __call__(self, *args, **kwargs):
        probe = self.probe
        if probe is not None and not kwargs:  # the variant of the last call, if it fits again
            try:
                out = probe(args)
                if out is not MISS:
                    return out
            except _Stale:
                pass
        if _gm.trace is not None:  # called while tracing another compiled function: inline
            return self.fn(*args, **kwargs)
        if not kwargs and not self.static_argnums:
            key = []
            for a in args:
                if type(a) is Tensor:
                    n = a._node
                    key.append((n.shape, n.dtype, n.requires_grad))
                else:
                    break
            else:
                return self._replay((tuple(key), _gm.enabled), list(args), args, kwargs, None)
        flat = []
        parts = self._spec(args, kwargs, flat)
        return self._replay((parts, _gm.enabled), flat, args, kwargs, parts)

    def _replay(self, key, flat, args, kwargs, parts):
        """Run the first variant of ``key`` whose guards hold, or trace a new one."""
        for v in self.variants.get(key, ()):
            if v.valid(flat):
                try:
                    out = v(flat)
                except _Stale:
                    break
                self.probe = v.probe
                return out
        return self._trace(key, flat, args, kwargs, parts)

    def _spec(self, args, kwargs, flat):
        parts = []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                parts.append(("static", _hashable(a)))
            else:
                parts.append(_flatten(a, flat))
        for k in sorted(kwargs):
            if k in self.static_argnames:
                parts.append((k, "static", _hashable(kwargs[k])))
            else:
                parts.append((k, _flatten(kwargs[k], flat)))
        return tuple(parts)

    def _trace(self, key, flat, args, kwargs, parts):
        """``parts``: the per-argument structure from ``_spec``, or None for plain tensors."""
        # arguments become sources with values; their nodes are marked as traced
        lazy = [a._node for a in flat if isinstance(a, Tensor) and a._node.value is None]
        if lazy:
            realize(lazy)
        trace = _Trace()
        call_flat = list(flat)
        for k, a in enumerate(flat):
            if isinstance(a, Tensor):
                trace.traced.add(id(a._node))
                trace.arg_of.setdefault(id(a._node), k)
            elif type(a) is float:  # a float is a runtime input, like a 0-d float64 tensor
                n = source(np.float64(a), D.float64, scalar=True)
                trace.traced.add(id(n))
                trace.arg_of[id(n)] = k
                call_flat[k] = _wrap(n)
        if parts is None:
            call_args, call_kwargs = tuple(call_flat), {}
        else:
            call_args, call_kwargs = self._rebuild(args, kwargs, parts, call_flat)
        # The call records the whole program at once, and it is lowered and compiled in one go,
        # with the collector paused (see ngrad/_gc.py). The recorded graph is dropped before the
        # collector runs again: freed by reference counts, it is never scanned.
        with paused():
            _gm.trace = trace
            try:
                result = self.fn(*call_args, **call_kwargs)
            except BaseException:
                _gm.trace = None
                _restore(trace)
                raise
            _gm.trace = None
            found = []
            out_spec = _out_spec(result, found)
            roots = [t._node for t in found]
            # outputs stay differentiable only when a gradient could still flow from them: their
            # graph was not consumed by a backward() in the call (see _Variant for the second half)
            graph = any(n.requires_grad and not n.freed for n in roots)
            effects, effect_roots, clears = _effects(trace)
            variant = _Variant(
                trace,
                flat,
                roots + effect_roots,
                effects + clears,
                out_spec,
                len(roots),
                graph,
                None if kwargs else key,
                parts,
            )
            _restore(trace)
            del trace, result, found, roots, effects, effect_roots, clears, call_args, call_kwargs, call_flat
        self.traces += 1
        variants = self.variants.setdefault(key, [])
        if len(variants) >= 8:
            variants.pop(0)
        variants.append(variant)
        out = variant(flat)
        self.probe = variant.probe
        return out

    def _rebuild(self, args, kwargs, parts, call_flat):
        """The call's arguments with their leaves taken from ``call_flat`` (``parts`` as ``_spec``
        made them: positional arguments, then keyword arguments in sorted order)."""
        it = iter(call_flat)
        new_args = tuple(
            a if i in self.static_argnums else _build(part, it) for i, (a, part) in enumerate(zip(args, parts))
        )
        new_kwargs = {
            k: kwargs[k] if k in self.static_argnames else _build(part[1], it)
            for k, part in zip(sorted(kwargs), parts[len(args) :])
        }
        return new_args, new_kwargs


def _hashable(v):
    try:
        hash(v)
    except TypeError:
        raise TypeError(f"ngrad.compile: static argument of type {type(v).__name__} must be hashable") from None
    return (type(v), v)


def _effects(trace):
    """What the traced call changed: (key, ref, kind, leaf) per effect, the nodes that compute
    them, and the gradients it set to None (kind "nograd", no node)."""
    effects, roots, clears = [], [], []
    grad_objects = {id(g) for ref, g in trace.grads.values() if g is not None}
    grad_objects.update(id(ref()._grad) for ref, g in trace.grads.values() if ref() is not None)
    for key, (ref, old) in trace.changed.items():
        t = ref()
        if t is None or t._node is old or key in grad_objects:
            continue
        effects.append((key, ref, "node", old.requires_grad and not old.differentiable))
        roots.append(t._node)
    for key, (ref, old) in trace.grads.items():
        t = ref()
        if t is None:
            continue
        g = t._grad
        if g is None:
            if old is not None:
                clears.append((key, ref, "nograd", False))
        elif g is old:
            if id(g) in trace.changed and g._node is not trace.changed[id(g)][1]:
                effects.append((key, ref, "grad", False))
                roots.append(g._node)
        else:
            effects.append((key, ref, "setgrad", False))
            roots.append(g._node)
    return effects, roots, clears


def _restore(trace):
    """Undo what tracing did to tensors (the program will redo it with real values)."""
    for _key, (ref, old) in trace.changed.items():
        t = ref()
        if t is not None:
            t._node = old
    for _key, (ref, old) in trace.grads.items():
        t = ref()
        if t is not None:
            t._grad = old


def compile(
    model=None,
    *,
    static_argnums=(),
    static_argnames=(),
    fullgraph=False,
    dynamic=None,
    backend=None,
    mode=None,
    options=None,
    disable=False,
):
    """Compile ``model`` (a function of tensors) into one program, traced once per signature.

    The first call with a new signature (argument structure, dtypes, ranks, shapes, which tensors
    require grad, grad mode) runs ``model`` once to record it; later calls replay the compiled
    program without running the Python code. Arguments may be tensors, floats (runtime values:
    a new learning rate does not retrace), nested tuples/lists/dicts of them, and hashable
    static values (ints, strings, None: part of the signature). Inside, ``backward()``,
    ``autograd.grad`` and in-place updates under ``no_grad`` work, so a whole training step can
    be one call. Tensors the function captures are read afresh on each call when they require
    grad or are updated by it; other captured tensors are constants of the program (pass data
    that changes as an argument). Asking for a traced value (``.item()``, ``if loss > 0``)
    raises ``TraceError``. The other arguments are PyTorch's and are accepted for compatibility.

    ```python
    >>> import ngrad
    >>> w = ngrad.zeros(3, dtype=ngrad.float64, requires_grad=True)
    >>> @ngrad.compile
    ... def step(x, lr):
    ...     loss = ((w - x) ** 2).sum()
    ...     loss.backward()
    ...     with ngrad.no_grad():
    ...         w.sub_(lr * w.grad)
    ...         w.grad = None
    ...     return loss
    >>> x = ngrad.tensor([1.0, 2.0, 3.0], dtype=ngrad.float64)
    >>> [round(step(x, 0.25).item(), 4) for _ in range(3)]
    [14.0, 3.5, 0.875]
    >>> w
    tensor([0.8750, 1.7500, 2.6250], dtype=ngrad.float64, requires_grad=True)

    ```
    """
    if model is None:
        return lambda fn: compile(
            fn,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
            fullgraph=fullgraph,
            dynamic=dynamic,
            backend=backend,
            mode=mode,
            options=options,
            disable=disable,
        )
    if not callable(model):
        raise TypeError(f"ngrad.compile expects a callable, got {type(model).__name__}")
    if disable:
        return model
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    return CompiledFunction(model, static_argnums, static_argnames)
