"""One traced program of a compiled function: its inputs, its tape, its guards, running it.

Contract: ``Variant(trace, flat, roots, ...)`` is made right after a trace, while the traced
call's graph and tensors are as the call left them. It classifies each source of the graph
below ``roots`` (the outputs, then the values of the effects) by where a later call finds it:
an argument, a runtime scalar, a ``.grad``, the current node of a captured tensor, or a
constant; folds constant subexpressions (``fold``), lowers the graph to one tape and prepares
it. A variant runs in one of three ways: *run mode* (no differentiable output: the generated
``entry``/``probe`` of ``ngrad.tracing.probe``), *split* (differentiable outputs on the CPU: a
compiled forward program, and a backward program the outputs' grad_fn, a ``Backward``, runs)
or *replay* (the program recorded as graph nodes over the current inputs). ``valid(flat)``
says whether the guards still hold for a call; a replay raises ``Stale`` when a tensor it
reads is gone.
"""

import math
import weakref

import numpy as np

from .. import grad_mode
from ..autograd.meta import NO_META, SEGMENT_NODES, own_meta
from ..autograd.reverse import FREED, stale_error
from ..engine.ir import dtypes as D
from ..engine.ir.graph import Node, lower, replay, source, target_of
from ..engine.ir.prims import PRIMS
from ..engine.runtime import prepare
from ..engine.runtime.realize import realize
from ..engine.transform import differentiate
from ..tensor.core import Tensor
from ..tensor.inplace import inplace_update, replace_node, replacements, same_leaf
from ..tensor.record import wrap
from ..tensor.views import live_views, version_of, view_of
from .probe import make_entry
from .trace import Stale
from .trees import build_result

__all__ = ["FOLD_MAX_BYTES", "Backward", "Variant", "fold"]

# Values computed from constants alone are computed once, when the program is made, up to this
# size each; bigger ones are recomputed by every call rather than held.
FOLD_MAX_BYTES = 1 << 26


def _locate(k, ref, must_live=True):
    """How a replay finds the tensor an input or effect belongs to: the k-th argument, or a
    captured tensor (None, or Stale for an input, once it is gone)."""
    if k is not None:
        return lambda flat: flat[k]

    def get(flat):
        t = ref()
        if t is None and must_live:
            raise Stale()
        return t

    return get


def _reaches(node, traced):
    """Whether the pending graph below ``node`` reads a node the trace made (an argument's)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if id(n) in traced:
            return True
        if n.value is None:
            stack.extend(n.srcs)
    return False


def _fetch(kind, data, flat):
    """The current node of one program input (see ``Variant``)."""
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
            raise Stale()
        return t._grad._node
    return t._node


def fold(roots, constant):
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
    folded, seen = [], set()
    edge = [n for n in roots if const[id(n)]] + [a for n in order if not const[id(n)] for a in n.srcs if const[id(a)]]
    while edge:
        n = edge.pop()
        if id(n) in seen or n.value is not None or id(n) not in wide:
            continue
        seen.add(id(n))
        if PRIMS[n.op].kind == "movement" or math.prod(n.shape) * n.dtype.itemsize > FOLD_MAX_BYTES:
            edge.extend(n.srcs)
        else:
            folded.append(n)
    if folded:
        realize(folded)
    return [n for n in order if n.value is not None and const[id(n)]]


class _Origins:
    """Where a later call finds each source node of a trace's graph (``of``), and the guards
    on ``.grad`` the trace read: (target, whether it had a ``.grad``). ``literals``: the
    one-element constants the last lowering made literals of the tape (``literal``)."""

    def __init__(self, trace, flat):
        self.trace = trace
        self.arg_at = {}
        for k, a in enumerate(flat):
            if isinstance(a, Tensor):
                self.arg_at.setdefault(id(a), k)
        # a tensor the call made and dropped (a view it wrote through) is nobody's input
        self.before = {id(node): (key, ref) for key, (ref, node) in trace.changed.items() if ref() is not None}
        # a captured tensor the call updates is an input of the program: its value from before
        # the call must be a source of the graph, not a pending computation folded into it (a
        # view re-derived from its base is pending until read)
        pending = [
            node
            for key, (ref, node) in trace.changed.items()
            if node.value is None and key not in self.arg_at and ref() is not None
        ]
        # made before the call: reaching neither an argument nor a value the call gave a leaf
        made = trace.traced | {id(node) for _, node in trace.leaf_writes}
        pending = [node for node in pending if not _reaches(node, made)]
        if pending:
            realize(pending)
        self.grad_before = {}
        self.guards = []
        for key, (ref, g) in trace.grads.items():
            if ref() is None:
                continue
            target = _locate(self.arg_at.get(key), ref)
            self.guards.append((target, g is not None))
            if g is not None:
                self.grad_before[id(trace.changed.get(id(g), (None, g._node))[1])] = target
        self.literals = []

    def of(self, n):
        """``(kind, data)``: one of the input kinds of ``Variant``."""
        i, trace = id(n), self.trace
        if i in trace.calls:
            return "call", trace.calls[i]
        if i in trace.traced:
            return "arg", trace.arg_of[i]
        if i in self.grad_before:
            return "grad", self.grad_before[i]
        if i in self.before:
            key, ref = self.before[i]
            return "node", self.locate(key, ref)
        owner = (n.meta or NO_META).owner
        if owner is not None and owner() is not None:
            return "node", self.locate(id(owner()), owner)
        return "const", n

    def locate(self, key, ref, must_live=True):
        """How a call finds the tensor ``ref`` (``key``: its id when traced), see ``_locate``."""
        return _locate(self.arg_at.get(key), ref, must_live)

    def constant(self, n):
        return self.of(n)[0] == "const"

    def literal(self, n):
        """Whether lowering makes the source ``n`` a literal of the tape (a Python number in
        the function, a gradient seed: kernels fold it instead of taking it per call)."""
        if np.size(n.value) == 1 and self.constant(n):
            self.literals.append(n)
            return True
        return False


class Variant:
    """A traced program: where each input comes from, the prepared tape, effects, guards and the
    output tree. Inputs are ("arg", k), ("const", node), ("node", target), ("grad", target) or
    ("call", getter) (a runtime scalar)."""

    def __init__(self, trace, flat, roots, effects, out_spec, n_out, graph, signature, parts, views=None):
        origins = _Origins(trace, flat)
        # output position -> (argument position, view steps): outputs that are an argument, or a
        # view of one, are made from the argument on every call, as the eager call returns them
        self.views = views or {}
        self.guards = origins.guards
        unique = self._unique(roots)
        # the leaves the call wrote under no_grad are outputs of the tape too, when the outputs
        # may need a gradient: a replay makes each such value a leaf of its tensor (see __call__)
        self.leaf_writes = self._leaf_writes(unique, trace, origins) if graph else []
        low = self._lower(unique, origins)
        # ... and it reaches a tensor from outside the call that requires grad, or a leaf the call wrote
        graph = graph and (bool(self.leaf_writes) or any(n.requires_grad for n in low.sources))
        self._prepare(low, unique, n_out, graph)
        self.effects = [(origins.locate(key, ref, False), kind, leaf, bumps) for key, ref, kind, leaf, bumps in effects]
        self.out_spec, self.n_out = out_spec, n_out
        self.seen = replacements[0]
        self.statics = trace.statics
        self.entry, self.probe = (
            (None, None)
            if graph or self.views
            else make_entry(self, [isinstance(a, Tensor) for a in flat], signature, parts)
        )

    def _unique(self, roots):
        """The distinct roots. A value returned twice (the gradient a step returns is also the
        .grad it sets) is computed and handed out once: ``where[k]`` is root k's place among the
        tape's outputs."""
        place, unique = {}, []
        for n in roots:
            if id(n) not in place:
                place[id(n)] = len(unique)
                unique.append(n)
        self.where = [place[id(n)] for n in roots]
        return unique

    def _leaf_writes(self, unique, trace, origins):
        """(place among the tape's outputs, how a call finds the tensor) of each value a leaf
        was given in the call (a write under ``no_grad``: ``tensor.inplace.leaf_update`` made it
        a leaf of its own, a pending ``detach``). Each is appended to ``unique``."""
        found = []
        place = {id(n): w for w, n in enumerate(unique)}
        for ref, node in trace.leaf_writes:
            if ref() is None:
                continue
            w = place.get(id(node))
            if w is None:
                w = place[id(node)] = len(unique)
                unique.append(node)
            found.append((w, origins.locate(id(ref()), ref, False)))
        return found

    def _lower(self, unique, origins):
        """Lower the graph below ``unique`` to the tape. Constant subexpressions are computed now
        and one-element constants become literals; ``consts``: every constant source the program
        used. Lowering meets every constant source too, so it runs first: only when one of them
        has more than one element can anything fold (see ``fold``), and the graph is walked
        again."""
        low = lower(unique, literal=origins.literal)
        literals = origins.literals  # what the first lowering made literals (read before any second one)
        self.consts = literals + [n for n in low.sources if origins.constant(n)]
        if len(literals) < len(self.consts):
            self.consts = fold(unique, origins.constant)
            low = lower(unique, literal=origins.literal)
        self.inputs = [origins.of(n) for n in low.sources]
        self.tape = low.tape
        return low

    def _prepare(self, low, unique, n_out, graph):
        """Choose how the variant runs (see the module docstring) and prepare its programs."""
        self.split = None
        if graph and target_of(unique) == "cpu" and not any(unique[w].requires_grad for w in self.where[n_out:]):
            # differentiable outputs: a forward program that also returns what the reverse pass
            # reads, and a backward program (compiled when first needed) that the outputs' grad_fn runs
            self.mask = tuple(n.requires_grad for n in low.sources)
            self.split = differentiate.split(low.tape, [s for s, r in zip(low.tape.inputs, self.mask) if r])
            self.backward_run = None
            position = {s: i for i, s in enumerate(low.tape.inputs)}
            self.passed = [position.get(s) for s in low.tape.outputs]  # an input returned as it is
            self.differentiable = [n.requires_grad for n in unique]
        # a program of device tensors runs on the CUDA target (the CPU driver takes only host arrays)
        self.target = where = target_of(unique) if unique else "cpu"
        self.run = (
            None
            if graph and self.split is None
            else prepare(low.tape if self.split is None else self.split.forward, where)
        )

    def valid(self, flat):
        """Whether the guards hold for the call of flat arguments ``flat``."""
        for getter, value in self.statics:
            if getter() != value:
                return False
        for target, had in self.guards:
            try:
                t = target(flat)
            except Stale:
                return False
            if (t._grad is not None) != had:
                return False
        return self.seen == replacements[0] or self.kept()

    def kept(self):
        """Whether no captured constant was updated in place (asked once the process-wide count
        of such updates moved)."""
        if any((n.meta or NO_META).replaced for n in self.consts):
            return False
        self.seen = replacements[0]
        return True

    def __call__(self, flat):
        if self.entry is not None:  # run mode
            return self.entry(flat)
        nodes = [_fetch(kind, data, flat) for kind, data in self.inputs]
        if self.split is not None and tuple(n.requires_grad for n in nodes) == self.mask:
            return self._forward(flat, nodes)
        # the inputs that require grad changed since the trace: the tape is recorded as graph
        # nodes over the current inputs
        with grad_mode.enable_grad():
            made = replay(self.tape, nodes, True)
            if self.leaf_writes:  # the values leaves were given become leaves; the rest is recorded from them
                known = {}
                for w, _ in self.leaf_writes:
                    leaf = made[w]
                    leaf.requires_grad, leaf.differentiable = True, False
                    known[self.tape.outputs[w]] = leaf
                made = replay(self.tape, nodes, True, known)
        leaves = [made[w] for w, _ in self.leaf_writes]
        made = [made[w] for w in self.where]
        written = {id(n) for n in leaves}
        # leaves hold values, as eager mode's leaf_update gives them (one program computes them all)
        values = realize(made[self.n_out :] + leaves)[: len(made) - self.n_out]
        self.apply_effects(flat, [n if id(n) in written else v for n, v in zip(made[self.n_out :], values)])
        for (_, target), leaf in zip(self.leaf_writes, leaves):
            t = target(flat)
            if t is not None and t._node is not leaf:  # an earlier value of the leaf, or its value
                own_meta(leaf).owner = weakref.ref(t)  # before apply_effects rewrote its storage
                same_leaf(t, leaf)
        return build_result(self.out_spec, iter(self._views_of(flat, [wrap(n) for n in made[: self.n_out]])))

    def _forward(self, flat, nodes):
        """Run the forward program; the differentiable outputs get a ``Backward`` as grad_fn."""
        values = [n.value if n.value is not None else realize([n])[0] for n in nodes]
        arrays = self.run(values)
        tape = self.tape
        if self.effects:
            self.apply_effects(flat, [arrays[w] for w in self.where[self.n_out :]])
        ctx = Backward(self, nodes, [arrays[i] if kind == "out" else values[i] for kind, i in self.split.saved])
        made, specs = {}, [None] * len(tape.outputs)
        for w in self.where[: self.n_out]:
            if w in made:
                continue
            slot, value = tape.outputs[w], arrays[w]
            dtype = D.from_short(tape.dtypes[slot])
            if self.passed[w] is not None:
                made[w] = nodes[self.passed[w]]
            elif self.differentiable[w]:
                n = made[w] = Node("detach", (source(value, dtype),), None, value.shape, dtype, True, value)
                m = own_meta(n)
                m.ctx, m.name = ctx, "CompiledFunctionBackward"
                SEGMENT_NODES.add(n)
                specs[w] = (n, value.shape, dtype)
            else:
                made[w] = source(value, dtype)
        ctx._outputs = tuple(specs)
        outs = [wrap(made[w]) for w in self.where[: self.n_out]]
        return build_result(self.out_spec, iter(self._views_of(flat, outs)))

    def _views_of(self, flat, outs):
        """``outs`` with the outputs that are arguments, or views of them, made from them."""
        for i, (k, steps) in self.views.items():
            outs[i] = view_of(flat[k], steps)
        return outs

    def apply_effects(self, flat, arrays):
        """Give the tensors the call updates their new values ``arrays`` (one per effect with a
        node; the rest set a ``.grad`` to None). A leaf's value a replay recorded as a leaf (see
        ``_leaf_writes``) is the node the tensor then holds, value and all."""
        for (target, kind, leaf, bumps), a in zip(self.effects, arrays):
            t = target(flat)
            if t is None:  # a tensor only the traced call held: nobody can see it
                continue
            made = a if isinstance(a, Node) else None
            a = a if made is None else made.value
            dt = D.from_numpy_dtype(a.dtype)
            if kind == "node" and (t._view is not None or live_views(t)):
                with grad_mode.no_grad():  # the storage's other views see it, autograd does not
                    inplace_update(t, wrap(source(a, dt)))
                bumps -= 1
            elif kind == "node":
                n = source(a, dt) if made is None else made
                if leaf:
                    n.requires_grad = True
                    own_meta(n).owner = weakref.ref(t)
                replace_node(t, n)
            if bumps > 0:  # the version counter counts the call's in-place updates, as eager mode's
                version_of(t).value += bumps
            elif kind == "grad":
                t._grad._node = source(a, dt)
            else:  # "setgrad"
                t._grad = wrap(source(a, dt))
        for target, _, _, _ in self.effects[len(arrays) :]:  # "nograd": set to None
            t = target(flat)
            if t is not None:
                t._grad = None


class Backward:
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
        v, nodes = self._variant, self._input_nodes
        reached = [(spec[0], acc[spec[0]]) for spec in self._outputs if spec is not None and spec[0] in acc]
        if not reached:
            return [], []
        if self._saved is None:
            raise RuntimeError(FREED)
        for k in v.split.outputs_read:  # an output updated in place since: eager mode's error
            spec = self._outputs[k] if k < len(self._outputs) else None
            if spec is not None and (spec[0].meta or NO_META).stale is not None:
                raise stale_error(spec[0])
        if create_graph or batch is not None:
            with grad_mode.enable_grad():
                made = replay(v.tape, nodes, True)
            at = {spec[0]: w for w, spec in enumerate(self._outputs) if spec is not None}
            return [made[at[n]] for n, _ in reached], [g for _, g in reached]
        for kind, i in v.split.saved:
            if kind == "in" and (nodes[i].meta or NO_META).stale is not None:
                raise stale_error(nodes[i])
        seeds = []
        for k in v.split.seeds:
            spec = self._outputs[k]
            g = acc.get(spec[0]) if spec is not None else None
            if g is None:
                shape, dtype = v.tape.shapes[v.tape.outputs[k]], D.from_short(v.tape.dtypes[v.tape.outputs[k]])
                seeds.append(np.zeros(shape, dtype.np))
            else:
                seeds.append(g.value if g.value is not None else realize([g])[0])
        if v.backward_run is None:
            v.backward_run = prepare(v.split.backward)
        grads = v.backward_run(self._saved + seeds)
        roots, found = [], []
        for i, at in zip([i for i, r in enumerate(v.mask) if r], v.split.grads):
            if at is not None:
                roots.append(nodes[i])
                found.append(source(grads[at], nodes[i].dtype))
        return roots, found

    class _cls:  # what forward mode calls (see ngrad.autograd.forward_ad._custom_jvp)
        @staticmethod
        def jvp(ctx, *tangents):
            v, nodes = ctx._variant, ctx._input_nodes
            have = [i for i, t in enumerate(tangents) if t is not None]
            tan = differentiate.jvp(v.tape, [v.tape.inputs[i] for i in have])
            made = replay(tan.tape, list(nodes) + [tangents[i]._node for i in have], grad_mode.is_grad_enabled())
            return tuple(
                None if spec is None or tan.tangents[w] is None else wrap(made[tan.tangents[w]])
                for w, spec in enumerate(ctx._outputs)
            )
