"""Realization: compute the values of pending nodes.

Contract: ``realize(nodes)`` lowers the unrealized graph below ``nodes`` (stopping at nodes
that already hold values), runs it as one program and stores each requested node's value.
A realized node that passes no gradient on (a constant or a leaf) forgets its sources, so long chains of no-grad
computations (an ODE integrated step by step) never keep their history alive.
``realize(nodes, keep=True)`` also keeps the value of every pending node of that graph that is
still referenced from outside it (``held``): a tensor the program still holds (the coefficients of
an optimizer loop, between two ``.item()``) starts the next read from its value instead of
recomputing its whole history, so a loop's pending history stays the size of one iteration.
A loop realizes graphs of one structure again and again: the tape lowered for a structure is
kept (``Recent``), so the next graph of that structure is only walked, not lowered again; and
the structure itself is kept (``_Known``), so the next graph is matched against it node by node
(``_Known.match``: ops, params, shapes, dtypes, which node feeds which, which are values) instead
of being scanned into a key, hashed and compared; a structure matched often gets a matcher
written for it (``_written``: straight-line Python). A graph that differs anywhere is scanned.
"""

import sys
from collections import OrderedDict

from ..ir.graph import Node, lower, target_of
from ..ir.tape import params_key
from ..recent import Recent
from .dispatch import run

__all__ = ["KEEP_SOURCES", "realize", "held", "pending_count"]

# views are as cheap to recompute as to keep (and keeping an expand would materialize it): a held
# view keeps its source's value instead
_VIEWS = frozenset(["reshape", "permute", "expand", "slice", "flip", "detach"])

# the hash of a graph structure (``_scan``'s key) -> [(that key, the tape ``lower`` made of it)]:
# a lookup hashes the fresh key once and compares it once with the kept one (a ``Recent``'s own
# ``get`` does both twice, its ``move_to_end`` looking the key up again: 7 µs of the 110 of an
# iteration of PyTorch's polynomial tutorial). Only graphs of up to _MAX_KEPT nodes, so that the
# keys stay small. A loop's graphs are, with the depth bound: a chain of PENDING_DEPTH (1,024)
# operations with a Python number each is 2,049 nodes (at 2,048, such a chain was lowered again
# at every depth-bound realization)
_tapes = Recent()
_MAX_KEPT = 4096


def realize(nodes, keep=False):
    """Give every node in ``nodes`` its value; returns the values in order. ``keep``: also give
    values to the pending nodes below them that something outside the graph still references."""
    pending = [n for n in dict.fromkeys(nodes) if n.value is None]
    if not pending:
        return [n.value for n in nodes]
    if target_of(pending) == "cuda":
        if keep:
            pending += held(pending)
        groups = [[n for n in pending if n.device == "cuda"], [n for n in pending if n.device != "cuda"]]
        for group in groups:  # one program per device
            if group:
                low = lower(group)
                _store(group, run(low.tape, [s.value for s in low.sources], target_of(group)))
        return [n.value for n in nodes]
    # a lookup without ``Recent.get``'s move to the end (half a microsecond): an entry drops out
    # after ``memory_entries()`` newer ones, used or not, and is scanned back in
    seen = _seen_get(_seen, _sign(pending))
    if seen is not None:  # a graph of a structure realized before: matched, not scanned
        for known in seen:
            nodes_at = known.match(pending)
            if nodes_at is not None:
                run_of = known.runs.get(known.held(nodes_at) if keep else ())
                if run_of is not None:
                    tape, inputs, held_at = run_of
                    group = pending + [nodes_at[i] for i in held_at]
                    _store(group, run(tape, [nodes_at[i].value for i in inputs], "cpu"))
                    return [n.value for n in nodes]
                break
    scan = _scan(pending)
    structure, sources, _, _, index = scan
    roots = len(pending)
    if keep:
        pending += _held(pending, scan)
    key = (structure, tuple([index[n] for n in pending]))
    h = hash(key)
    kept = _tapes.get(h)
    tape = next((t for k, t in kept if k == key), None) if kept is not None else None
    if tape is None:
        low = lower(pending)
        tape, ordered = low.tape, low.sources
        if (
            len(structure) <= _MAX_KEPT
            and len(ordered) == len(sources)
            and all(a is b for a, b in zip(ordered, sources))
        ):
            if kept is None:
                _tapes[h] = [(key, tape)]
            else:  # another structure of the same hash
                kept.append((key, tape))
        else:
            tape = None  # not kept: not recognized either
        sources = ordered
    if tape is not None:
        _remember(pending[:roots], pending[roots:], scan, tape)
    _store(pending, run(low.tape if tape is None else tape, [s.value for s in sources], "cpu"))
    return [n.value for n in nodes]


# (how many roots, the first root's op and shape) -> up to _KNOWN_PER_SIGN ``_Known`` structures,
# the latest first: a loop's next graph is matched against the structure its last one had
_seen = Recent()
_seen_get = OrderedDict.get
_KNOWN_PER_SIGN = 4


def _sign(roots):
    """What ``_seen`` files a graph's structures under: how many roots, the first one's op and shape."""
    return (len(roots), roots[0].op, roots[0].shape)


def _kept(n):
    """The node whose value keeps held node ``n``'s: ``n``, or the pending source under its chain
    of views; None when that chain ends at a value or a constant (nothing to keep)."""
    while n.op in _VIEWS and n.srcs:
        n = n.srcs[0]
        if n.value is not None or n.op == "const":
            return None
    return n


class _Known:
    """A graph structure realized before (a ``_scan`` of it), recognized in another graph by
    walking the two together (``match``): no key is built, hashed or compared, which in
    PyTorch's polynomial tutorial costs more than walking. ``runs``: per tuple of held positions
    (see ``held``), the kept tape, the positions feeding its inputs, and those held positions."""

    __slots__ = ("key", "size", "roots", "ops", "sources", "walked", "refs", "kept", "runs", "hits", "fast")

    def __init__(self, key, roots, scan):
        parts, _, walked, refs, index = scan
        nodes = list(index)  # in position order: ``_scan`` numbers them as it meets them
        self.key, self.size, self.roots, self.runs = key, len(parts), key[1], {}
        self.hits, self.fast = 0, None  # matches so far; ``match`` as straight-line code
        ops, self.sources = [], []
        for i, n in enumerate(nodes):
            p = n.params
            if n.value is None:
                ops.append((i, n.op, _params_kept(p), params_key(p) if p else (), n.shape, n.dtype, parts[i][4]))
            else:
                self.sources.append((i, n.shape, n.dtype, parts[i][2]))
        self.ops = ops[::-1]  # from the roots down: a node's position is set before it is checked
        # per walked node: its position, the references the graph holds to it, where its value
        # is kept (-1: nowhere)
        self.walked, self.refs, self.kept = tuple([index[n] for n in walked]), [], []
        for n in walked:
            kept = _kept(n)
            self.refs.append(refs[n])
            self.kept.append(-1 if kept is None else index[kept])

    def match(self, roots):
        """The node at each position when the graph below ``roots`` has this structure, else None.
        A structure matched ``_WRITE_AFTER`` times is matched by code written for it (``_written``)."""
        if self.fast is not None:
            return self.fast(roots)
        at = self.walk(roots)
        if at is not None:
            self.hits += 1
            if self.hits >= _WRITE_AFTER and self.size <= _WRITE_MAX:
                self.fast = _written(self)
        return at

    def walk(self, roots):
        """``match``, walking the two graphs together."""
        if len(roots) != len(self.roots):
            return None
        at = [None] * self.size
        for i, r in zip(self.roots, roots):
            at[i] = r
        for i, op, params, key, shape, dtype, args in self.ops:
            n = at[i]
            if n.value is not None or n.op != op or n.shape != shape or n.dtype is not dtype:
                return None
            p = n.params
            if p is not params and (p or key) and not _same_params(p, params, key):
                return None
            srcs = n.srcs
            if len(srcs) != len(args):
                return None
            for s, j in zip(srcs, args):
                o = at[j]
                if o is None:
                    at[j] = s
                elif o is not s:
                    return None
        for i, shape, dtype, scalar in self.sources:
            n = at[i]
            p = n.params
            if n.value is None or n.shape != shape or n.dtype is not dtype or bool(p and p.get("scalar")) != scalar:
                return None
        if len(set(at)) != self.size:  # two positions, one node: another structure
            return None
        return at

    def counts(self, at):
        """The reference count of each walked node of a ``match``: the graph's (``refs``), those
        from outside it, and this count's own (``_OWN_MATCH``)."""
        return list(map(sys.getrefcount, map(at.__getitem__, self.walked)))

    def held(self, at):
        """``_held`` for a ``match``: the positions of the held values, in ``_held``'s order."""
        out, wanted = [], None
        for count, refs, kept in zip(self.counts(at), self.refs, self.kept):
            if count - refs > _OWN_MATCH and kept >= 0:
                if wanted is None:
                    wanted = set(self.roots)
                if kept not in wanted:
                    wanted.add(kept)
                    out.append(kept)
        return tuple(out)


_PLAIN = frozenset([int, bool, str, type(None), float, complex])


def _params_kept(params):
    """``params`` when ``_same_params`` compares them itself, ``_KEYED`` when ``params_key`` must
    (a value of another kind: a node, an array, a tuple of floats), None for none. Kept as they
    are, not copied: a recorded node's params never change (a detach's, which the facade
    updates, hold a node: never plain), and so a graph sharing them (a literal's, a full sum's)
    is recognized by their identity."""
    if not params:
        return None
    for v in params.values():
        c = v.__class__
        if c not in _PLAIN and not (c is tuple and all(e.__class__ is int for e in v)):
            return _KEYED
    return params


_KEYED: dict[str, object] = {}  # ``_params_kept``'s mark of params compared by ``params_key`` (no node's params are it)


# a structure matched this many times gets a matcher of its own (``_written``): straight-line
# code, each position a local variable, what is already known about sharing left out. For the
# polynomial tutorial's 44 nodes 7.7 µs where ``_Known.walk`` takes 18 (a loaded machine), and
# writing it takes 3-6 ms: about what 400 matches save, so a loop pays for it at most once over.
# Up to _WRITE_MAX nodes: a depth-bound chain's structure is matched too seldom to pay
_WRITE_AFTER = 256
_WRITE_MAX = 512


def _written(known):
    """A function doing what ``known.walk`` does, written for ``known``'s structure: the same
    checks in the same order, the sharing ``walk`` finds at run time known as it is written."""
    g = {"same": _same_params}
    lines = ["def match(roots):", f"    if len(roots) != {len(known.roots)}:", "        return None"]
    lines += [f"    n{i} = roots[{k}]" for k, i in enumerate(known.roots)]
    bound = set(known.roots)
    for i, op, params, key, shape, dtype, args in known.ops:
        g[f"S{i}"], g[f"D{i}"], g[f"P{i}"], g[f"K{i}"] = shape, dtype, params, key
        n = f"n{i}"
        lines.append(f"    if {n}.value is not None or {n}.op != {op!r} or {n}.shape != S{i} or {n}.dtype is not D{i}:")
        lines.append("        return None")
        if params is None and not key:
            lines.append(f"    if {n}.params:")
        else:
            lines.append(f"    p = {n}.params")
            lines.append(f"    if p is not P{i} and not same(p, P{i}, K{i}):")
        lines.append("        return None")
        lines.append(f"    s = {n}.srcs")
        lines.append(f"    if len(s) != {len(args)}:")
        lines.append("        return None")
        for k, j in enumerate(args):
            if j in bound:
                lines.append(f"    if n{j} is not s[{k}]:")
                lines.append("        return None")
            else:
                lines.append(f"    n{j} = s[{k}]")
                bound.add(j)
    for i, shape, dtype, scalar in known.sources:
        g[f"S{i}"], g[f"D{i}"] = shape, dtype
        n = f"n{i}"
        lines.append(f"    if {n}.value is None or {n}.shape != S{i} or {n}.dtype is not D{i}:")
        lines.append("        return None")
        lines.append(f"    p = {n}.params")
        lines.append(f"    if {'not ' if scalar else ''}(p and p.get('scalar')):")
        lines.append("        return None")
    lines.append(f"    at = [{', '.join(f'n{i}' for i in range(known.size))}]")
    lines.append(f"    if len(set(at)) != {known.size}:")
    lines.append("        return None")
    lines.append("    return at")
    exec(compile("\n".join(lines), f"<ngrad match of {known.size} nodes>", "exec"), g)
    return g["match"]


def _same_params(p, q, key):
    """Whether params ``p`` equal those a ``_Known`` kept (``q``, from ``_params_kept``; ``key``, their
    ``params_key``) as ``params_key`` compares: same values of the same classes, floats by
    ``repr`` (-0.0 is not 0.0)."""
    if not p:
        return not key
    if q is _KEYED:
        return params_key(p) == key
    if p != q:
        return False
    for k, v in p.items():
        w = q[k]
        c = v.__class__
        if c is not w.__class__:
            return False
        if c is tuple:
            for e, f in zip(v, w):
                if e.__class__ is not f.__class__:
                    return False
        elif (c is float or c is complex) and repr(v) != repr(w):
            return False
    return True


def _remember(roots, held, scan, tape):
    """Keep ``tape`` for graphs of ``scan``'s structure realizing ``roots`` and ``held``."""
    structure, sources, _, _, index = scan
    if len(structure) > _MAX_KEPT:
        return
    sign = _sign(roots)
    key = (structure, tuple([index[r] for r in roots]))
    known_list = _seen.get(sign)
    known = next((k for k in known_list if k.key == key), None) if known_list is not None else None
    if known is None:
        known = _Known(key, roots, scan)
        if known_list is None:
            _seen[sign] = [known]
        else:
            known_list.insert(0, known)
            del known_list[_KNOWN_PER_SIGN:]
    held_at = tuple([index[n] for n in held])
    known.runs[held_at] = (tape, tuple([index[s] for s in sources]), held_at)


# Set while forward-mode AD is active (the facade's dual_level): tangents are computed through the
# graph, so a realized node keeps its sources
KEEP_SOURCES = [False]


def _store(group, outs):
    keep = KEEP_SOURCES[0]
    for n, v in zip(group, outs):
        n.value = v
        n.depth = 0
        if not n.differentiable and not keep:
            n.srcs = ()


def _scan(roots):
    """Walk the pending graph below ``roots`` in ``lower``'s order. Returns its structure (what
    ``lower`` makes a tape of: ops, params, types, edges, and the types of the sources), the
    source nodes in ``lower``'s input order, the pending nodes other than the roots and constants,
    how many times sources of pending nodes reference each of those, and each node's position."""
    parts, sources, walked, refs, index = [], [], [], {}, {}
    rooted = set(roots)
    stack = [(r, False) for r in reversed(roots)]
    pop, push = stack.pop, stack.append
    while stack:
        n, ready = pop()
        if n in index:
            continue
        if n.value is not None:
            index[n] = len(parts)
            p = n.params
            parts.append((n.shape, n.dtype, bool(p and p.get("scalar"))))
            sources.append(n)
            continue
        if not ready:
            push((n, True))
            for s in reversed(n.srcs):
                if s not in index:
                    push((s, False))
            continue
        index[n] = len(parts)
        args = []
        for s in n.srcs:
            args.append(index[s])
            if s.value is None:
                refs[s] = refs.get(s, 0) + 1
        p = n.params
        parts.append((n.op, params_key(p) if p else (), n.shape, n.dtype, tuple(args)))
        if n not in rooted and n.op != "const":
            walked.append(n)
    return tuple(parts), sources, walked, refs, index


def _outside(scan):
    """How many references to each pending node of a ``_scan`` come from outside the walked graph
    (a tensor, another graph), plus the scan's own (``_OWN``, the same for every node): CPython's
    reference count less the references of the graph's sources."""
    walked, refs = scan[2], scan[3]
    return [sys.getrefcount(n) - refs[n] for n in walked]


def _calibrate():
    """The count ``_outside`` gives a node that nothing outside the graph holds."""
    leaf = Node("input", (), None, (), None, value=0)
    root = Node("neg", (Node("neg", (leaf,), None, (), None),), None, (), None)
    scan = _scan([root])
    return _outside(scan)[0]


_OWN = _calibrate()


def _calibrate_match():
    """The count ``_Known.counts`` gives a node that nothing outside the graph holds, less the
    graph's own references."""
    leaf = Node("input", (), None, (), None, value=0)
    root = Node("neg", (Node("neg", (leaf,), None, (), None),), None, (), None)
    scan = _scan([root])
    known = _Known((scan[0], (scan[4][root],)), [root], scan)
    del scan  # a match holds no scan: its containers' references are not counted
    return known.counts(known.match([root]))[0] - known.refs[0]


_OWN_MATCH = _calibrate_match()


def _held(roots, scan):
    """``held``, given the ``_scan`` of ``roots`` (alive while counting: its containers hold
    the references ``_OWN`` counts)."""
    out, wanted = [], set(roots)
    for n, extra in zip(scan[2], _outside(scan)):
        if extra <= _OWN:
            continue
        n = _kept(n)
        if n is not None and n not in wanted:
            wanted.add(n)
            out.append(n)
    return out


def held(roots):
    """The pending nodes below ``roots`` (not themselves roots) that something outside the graph
    realizing ``roots`` still references (a live tensor, another pending graph), in a
    deterministic order: the outputs a loop keeps besides what it reads, the same every iteration.

    A view is not kept: its pending source is, so the view is one cheap op over a value."""
    roots = [r for r in dict.fromkeys(roots) if r.value is None]
    return _held(roots, _scan(roots))


def pending_count(roots):
    """How many nodes below ``roots`` (included) wait for a value, constants aside: the size of
    the program that reading them now would run."""
    roots = [r for r in dict.fromkeys(roots) if r.value is None]
    return len(_scan(roots)[2]) + len(roots)
