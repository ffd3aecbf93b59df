"""Random sequences of views and in-place writes: every live tensor and a gradient against a reference.

Hypothesis draws a base (a differentiable op of a float64 leaf, or the leaf itself), then steps: take
a view (or a copy: ``reshape`` of a non-viewable layout, ``contiguous``, ``clone``) of a live tensor,
or write in place into a writable one. The reference is PyTorch where installed, else a NumPy model:
NumPy's views alias too, and each tensor is its values and, through the same views, its Jacobian
with respect to the leaf (a trailing axis), so the gradient of a weighted sum of the live tensors and
forward-mode tangents are exact; the model is checked against PyTorch. Modes: eager (reverse and
forward), one ``ngrad.compile``d function of the leaf (interpreted, and as Numba kernels), the CUDA
target (under Numba's simulator without a device). Writes follow what PyTorch allows: expanded
views are read-only, outputs of ``unbind``/``split``/``chunk`` (and their views) are never written
and are dropped once their storage is written, ``detach()`` aliases values but not history.
"""

import contextlib
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import ngrad

from .oracles import run_device_tests_simulated

try:
    import torch
except ImportError:
    torch = None

SHAPES = [(2, 3), (3, 4), (2, 3, 2), (4,), (2, 1, 3)]
DEVICE = {"ngrad": "cpu"}  # where ngrad's leaf goes: "cuda" in the device tests


class Entry:
    """A live tensor of the NumPy model: values ``v``, Jacobian ``j`` (``v.shape + (leaf size,)``)."""

    def __init__(self, v, j, storage, *, readonly=False, multi=False, root=False, detached=False):
        self.v, self.j, self.storage = v, j, storage
        self.readonly, self.multi, self.root, self.detached = readonly, multi, root, detached


# What ngrad does not do as PyTorch yet, by mode (a view op, a write op or a situation), kept out of
# the sequences the passing tests draw; each has a strict xfail test whose sequences start with it
# (``FORCED``). In the leaf modes the base is the leaf itself, written under no_grad.
KNOWN = {
    "eager": {},
    "compiled": {},
    "leaf": {},
    "compiled_leaf": {},
    "forward": {},
}

# The steps the sequences of each gap's test start with: (view, source, op, args) or (write, target, op, args).
# Gaps since closed keep theirs (``FORMER``: their mode), and a test of sequences starting with them.
FORCED = {
    "grad_outside_after_leaf_update": [("view", 0, "narrow", (0, 0, 1)), ("write", 1, "add_scalar", (0.5,))],
    "view_write_after_leaf_write": [("write", 0, "fill", (1.0,)), ("view", 0, "narrow", (0, 0, 1))]
    + [("write", 1, "add_scalar", (0.5,))],
}
# a compiled f(x) that writes its leaf argument under no_grad, then computes from it (x * x, the gradient
# taken outside), and one that writes it, then writes through a view of it
FORMER = {"grad_outside_after_leaf_update": "compiled_leaf", "view_write_after_leaf_write": "compiled_leaf"}


# --- view ops: how each is drawn, run in NumPy (on leading axes), run in a library ---------------------------
def draw_index(draw, shape):
    key = []
    for size in shape[: draw(st.integers(1, len(shape)))]:
        kind = draw(st.sampled_from(["int", "slice", "all"]))
        if kind == "int":
            key.append(draw(st.integers(-size, size - 1)))
        elif kind == "slice":
            start = draw(st.integers(0, size - 1))
            key.append((start, draw(st.integers(start + 1, size)), draw(st.sampled_from([1, 2]))))
        else:
            key.append((None, None, 1))
    return (draw(st.booleans()), tuple(key))


def index_key(args):
    lead, key = args
    key = tuple(slice(*k) if isinstance(k, tuple) else k for k in key)
    return ((None,) if lead else ()) + key


def factorings(n):
    shapes = [(n,), (1, n), (n, 1)] + [(a, n // a) for a in range(2, n) if n % a == 0]
    return shapes + [(a, 1, n // a) for a in range(2, n) if n % a == 0]


def reshape_args(draw, shape):
    return (draw(st.sampled_from(factorings(int(np.prod(shape))))),)


def perm_args(draw, shape):
    return (tuple(draw(st.permutations(range(len(shape))))),)


def two_dims(draw, shape):
    d0 = draw(st.integers(0, len(shape) - 1))
    return d0, draw(st.integers(0, len(shape) - 1).filter(lambda d: d != d0))


def diagonal_args(draw, shape):
    d1, d2 = two_dims(draw, shape)
    offset = draw(st.integers(-(shape[d1] - 1), shape[d2] - 1))
    return offset, d1, d2


def split_args(draw, shape, kind):
    """(dim, size or count, which output): the output of unbind/split/chunk that is kept."""
    dim = draw(st.integers(0, len(shape) - 1))
    n = draw(st.integers(1, shape[dim]))
    step = {"unbind": 1, "split": n, "chunk": -(-shape[dim] // n)}[kind]
    return dim, n, draw(st.integers(0, -(-shape[dim] // step) - 1))


def expand_args(draw, shape):
    target = tuple(draw(st.integers(2, 3)) if s == 1 else s for s in shape)
    lead = draw(st.booleans()) or 1 not in shape  # something is always broadcast
    return ((draw(st.integers(2, 3)),) if lead else ()) + target


def as_strided_args(draw, shape):
    n = int(np.prod(shape))
    p, q, c = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    stride = (q * c, c) if draw(st.booleans()) else (c, p * c)
    last = (p - 1) * stride[0] + (q - 1) * stride[1]
    if last >= n:
        return None
    return (p, q), stride, draw(st.integers(0, n - 1 - last))


def narrow_args(draw, shape):
    dim = draw(st.integers(0, len(shape) - 1))
    start = draw(st.integers(0, shape[dim] - 1))
    return dim, start, draw(st.integers(1, shape[dim] - start))


def unflatten_args(draw, shape):
    dims = [d for d, s in enumerate(shape) if s > 1 and any(s % a == 0 for a in range(2, s))]
    if not dims:
        return None
    dim = draw(st.sampled_from(dims))
    a = draw(st.sampled_from([a for a in range(2, shape[dim]) if shape[dim] % a == 0]))
    return dim, (a, shape[dim] // a)


def draw_view(draw, shape):
    """(op name, arguments) of a view op valid for ``shape``, or None."""
    nd = len(shape)
    ops = ["detach", "contiguous", "clone", "unsqueeze", "reshape", "as_strided", "expand"]
    if nd >= 1:
        ops += ["flatten", "index", "narrow", "select", "unbind", "split", "chunk", "unflatten"]
    if nd >= 2:
        ops += ["transpose", "permute", "movedim", "mT", "diagonal"] + (["t"] if nd == 2 else [])
    if 1 in shape:
        ops += ["squeeze"]
    op = draw(st.sampled_from(ops))
    args = {
        "index": lambda: draw_index(draw, shape),
        "reshape": lambda: reshape_args(draw, shape),
        "flatten": lambda: tuple(sorted(draw(st.lists(st.integers(0, nd - 1), min_size=2, max_size=2)))),
        "permute": lambda: perm_args(draw, shape),
        "transpose": lambda: two_dims(draw, shape),
        "movedim": lambda: two_dims(draw, shape),
        "diagonal": lambda: diagonal_args(draw, shape),
        "unsqueeze": lambda: (draw(st.integers(0, nd)),),
        "squeeze": lambda: (draw(st.sampled_from([None] + [d for d, s in enumerate(shape) if s == 1])),),
        "select": lambda: (lambda d: (d, draw(st.integers(-shape[d], shape[d] - 1))))(draw(st.integers(0, nd - 1))),
        "narrow": lambda: narrow_args(draw, shape),
        "unbind": lambda: split_args(draw, shape, "unbind"),
        "split": lambda: split_args(draw, shape, "split"),
        "chunk": lambda: split_args(draw, shape, "chunk"),
        "expand": lambda: expand_args(draw, shape),
        "as_strided": lambda: as_strided_args(draw, shape),
        "unflatten": lambda: unflatten_args(draw, shape),
    }.get(op, lambda: ())()
    return None if args is None else (op, args)


def logical_perm(op, args, nd):
    if op == "permute":
        return list(args[0])
    perm = list(range(nd))
    a, b = (nd - 2, nd - 1) if op in ("t", "mT") else args
    if op == "movedim":
        perm.insert(b, perm.pop(a))
    else:
        perm[a], perm[b] = perm[b], perm[a]
    return perm


def view_shape(op, args, shape):
    """The target shape of the reshaping ops."""
    if op == "reshape":
        return args[0]
    if op == "flatten":
        a, b = args
        return shape[:a] + (int(np.prod(shape[a : b + 1])),) + shape[b + 1 :]
    dim, sizes = args
    return shape[:dim] + sizes + shape[dim + 1 :]


def np_view(op, args, a, nd):
    """``op`` on the leading ``nd`` axes of ``a`` (trailing Jacobian axes ride along) as a NumPy
    view; ValueError where a reshape needs a copy."""
    every = (slice(None),) * (args[0] if op in ("select", "narrow", "unbind", "split", "chunk") else 0)
    if op == "index":  # a trailing Ellipsis keeps a 0-d result a view, not a NumPy scalar
        return a[index_key(args) + (Ellipsis,)]
    if op in ("transpose", "permute", "movedim", "t", "mT"):
        return a.transpose(logical_perm(op, args, nd) + list(range(nd, a.ndim)))
    if op == "unsqueeze":
        return np.expand_dims(a, args[0])
    if op == "squeeze":
        return np.squeeze(a, axis=tuple(d for d in range(nd) if a.shape[d] == 1) if args[0] is None else args[0])
    if op in ("select", "unbind"):
        return a[every + (args[-1], Ellipsis)]
    if op == "narrow":
        return a[every + (slice(args[1], args[1] + args[2]),)]
    if op in ("split", "chunk"):
        dim, n, k = args
        step = n if op == "split" else -(-a.shape[dim] // n)
        return a[every + (slice(k * step, (k + 1) * step),)]
    if op == "expand":
        return np.broadcast_to(a, args + a.shape[nd:])
    if op == "diagonal":
        offset, d1, d2 = args
        start = [slice(None)] * a.ndim
        start[d2 if offset >= 0 else d1] = slice(abs(offset), None)
        b = a[tuple(start)]
        keep = [d for d in range(nd) if d not in (d1, d2)]
        shape = [b.shape[d] for d in keep] + [min(b.shape[d1], b.shape[d2])] + list(a.shape[nd:])
        strides = [b.strides[d] for d in keep] + [b.strides[d1] + b.strides[d2]] + list(a.strides[nd:])
        return np.lib.stride_tricks.as_strided(b, shape, strides)
    return np.reshape(a, view_shape(op, args, a.shape[:nd]) + a.shape[nd:], copy=False)


def np_dense(a):
    """Whether ``a``'s elements fill one block of memory, in some order of its dimensions."""
    expected = a.itemsize
    for size, stride in sorted(zip(a.shape, a.strides), key=lambda p: p[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def model_view(e, op, args, storage):
    """The entry ``op`` makes of entry ``e``; ``storage`` numbers a copy's new storage."""
    nd, n = e.v.ndim, e.j.shape[-1]
    if op == "detach":
        return Entry(e.v, np.zeros(e.j.shape), e.storage, readonly=e.readonly, multi=e.multi, detached=True)
    if op == "contiguous" and e.v.flags.c_contiguous:
        return e
    if op == "as_strided":
        size, stride, offset = args
        v = np.lib.stride_tricks.as_strided(e.v.reshape(-1)[offset:], size, [s * 8 for s in stride])
        j = e.j.reshape(-1, n)[offset:]
        return Entry(v, np.lib.stride_tricks.as_strided(j, size + (n,), [s * n * 8 for s in stride] + [8]), e.storage)
    if op in ("contiguous", "clone"):
        # torch's clone keeps the layout of a dense tensor (preserve_format); contiguous is row-major
        order = "K" if op == "clone" and np_dense(e.v) else "C"
        return Entry(e.v.copy(order=order), e.j.copy(order=order), storage)
    try:
        v = np_view(op, args, e.v, nd)
    except ValueError:  # a reshape of a layout no view can express copies, as torch's
        shape = view_shape(op, args, e.v.shape)
        return Entry(e.v.reshape(shape).copy(), e.j.reshape(shape + (n,)).copy(), storage)
    multi, readonly = e.multi or op in ("unbind", "split", "chunk"), e.readonly or op == "expand"
    return Entry(v, np_view(op, args, e.j, nd), e.storage, readonly=readonly, multi=multi, detached=e.detached)


SCALARS = [-1.5, 0.5, 2.0, 3.0]
# add_live and copy_live read another live tensor that shares no element with the written one (torch
# rejects some overlaps, and leaves others undefined); add_live_sum adds any live tensor's sum.
WRITES = ["add_scalar", "mul_scalar", "add_leaf", "mul_leaf", "copy_leaf", "add_live", "copy_live", "add_live_sum"]
WRITES += ["sin", "fill", "zero", "setitem", "setitem_index", "setitem_mask"]


def draw_write(draw, shape, n, avoid):
    """(op, arguments) of a write into a tensor of ``shape`` (``copy_leaf`` needs at most ``n`` elements;
    none of ``avoid``)."""
    ops = [w for w in WRITES if (shape or "setitem" not in w) and (w != "copy_leaf" or np.prod(shape) <= n)]
    ops = [w for w in ops if w not in avoid]
    op = draw(st.sampled_from(ops))
    if op == "setitem":
        return op, (draw_index(draw, shape), draw(st.sampled_from(SCALARS)))
    if op == "setitem_mask":
        return op, (draw(st.sampled_from([0.0, 1.0, 2.5])), draw(st.sampled_from(SCALARS)))
    if op == "setitem_index":  # repeated indices write the same value: the result is defined
        index = draw(st.lists(st.integers(-shape[0], shape[0] - 1), min_size=1, max_size=3))
        return op, (tuple(index), draw(st.sampled_from(SCALARS)))
    return op, (draw(st.sampled_from(SCALARS)),)


def model_write(e, op, args, leaf, source=None):
    """Write into entry ``e`` (values and Jacobian, through NumPy views) as torch would; ``source``:
    the entry a ``*_live`` op reads."""
    n, total = leaf.size, leaf.sum()
    c = args[-1]
    if op == "add_live_sum":
        e.v += source.v.sum()
        e.j += source.j.reshape(-1, n).sum(0)
    elif op in ("add_live", "copy_live"):
        v, j = source.v.copy(), source.j.copy()  # read before the write: no aliasing between them
        e.v[...] = v + (e.v if op == "add_live" else 0.0)
        e.j[...] = j + (e.j if op == "add_live" else 0.0)
    elif op == "add_scalar":
        e.v += c
    elif op == "mul_scalar":
        e.v *= c
        e.j *= c
    elif op == "add_leaf":
        e.v += np.sin(total * c)
        e.j += np.cos(total * c) * c
    elif op == "sin":  # sin_ keeps its input for the backward: later writes may follow it
        e.j[...] = e.j * np.cos(e.v)[..., None]
        e.v[...] = np.sin(e.v)
    elif op == "mul_leaf":
        s, ds = np.cos(total * c), -np.sin(total * c) * c
        e.j[...] = e.j * s + e.v[..., None] * ds
        e.v *= s
    elif op == "copy_leaf":
        m = e.v.size
        e.v[...] = (leaf.reshape(-1)[:m] * c).reshape(e.v.shape)
        e.j[...] = (np.eye(n)[:m] * c).reshape(e.j.shape)
    elif op in ("fill", "zero"):
        e.v[...] = 0.0 if op == "zero" else c
        e.j[...] = 0.0
    else:
        key = {"setitem_mask": lambda: e.v > args[0], "setitem_index": lambda: np.array(args[0])}.get(
            op, lambda: index_key(args[0])
        )()
        e.v[key] = c
        e.j[key] = 0.0


def plan(data, leaf, avoid, force=None, leaf_base=False):
    """Draw a sequence and run it on the NumPy model: (steps, live entries by id). ``avoid``: the
    ``KNOWN`` gaps left out (and "no_grad": no write under no_grad); ``force``: a gap the sequence starts
    with; ``leaf_base``: the base is the leaf itself, written only under no_grad (an optimizer's
    updates), else a differentiable op of it."""
    n = leaf.size
    scale = 1.0 if leaf_base else 1.5
    root = Entry(
        leaf * scale + (0.0 if leaf_base else 0.25), scale * np.eye(n).reshape(leaf.shape + (n,)), 0, root=True
    )
    live, steps = {0: root}, [("root", "leaf" if leaf_base else "product")]
    if leaf_base:  # the leaf's values change: writes of values computed from it would read them
        avoid = (*avoid, "add_leaf", "mul_leaf", "copy_leaf")

    def view(src, op, args):
        new = max(live) + 1
        live[new] = model_view(live[src], op, args, storage=len(steps) + 1)
        steps.append(("view", new, src, op, args))

    def write(target, op, args, quiet=None):
        if op == "add_live_sum":
            args = (data.draw(st.sampled_from(list(live))),)
        elif op.endswith("_live"):
            shape = live[target].v.shape
            fits = [i for i, e in live.items() if e.v.ndim <= len(shape) and not np.shares_memory(e.v, live[target].v)]
            fits = [i for i in fits if all(a in (1, b) for a, b in zip(live[i].v.shape[::-1], shape[::-1]))]
            if not fits:
                return
            args = (data.draw(st.sampled_from(fits)),)
        if quiet is None:
            quiet = leaf_base or ("no_grad" not in avoid and data.draw(st.integers(0, 4), label="no_grad") == 0)
        kept = live[target].j.copy()
        model_write(live[target], op, args, leaf, live[args[0]] if "_live" in op else None)
        if quiet:  # under no_grad the values change and the history does not
            live[target].j[...] = kept
        steps.append(("write", target, op, args, quiet))
        for i in [i for i, e in live.items() if e.multi and e.storage == live[target].storage]:
            del live[i]  # PyTorch forbids using a multiple-output view once its storage is written
            steps.append(("drop", i))

    for kind, i, op, *args in FORCED.get(force, ()):
        (view if kind == "view" else write)(i, op, *args)
    for _ in range(data.draw(st.integers(1, 10), label="length")):
        if data.draw(st.booleans(), label="view"):
            src = data.draw(st.sampled_from(list(live)), label="source")
            drawn = draw_view(data.draw, live[src].v.shape)
            if drawn is not None and drawn[0] not in avoid and (drawn[0] != "as_strided" or live[src].root):
                view(src, *drawn)
        else:
            no_detached, no_root = "write_to_detached" in avoid, leaf_base and "view_write_after_leaf_write" in avoid
            fits = [i for i, e in live.items() if not (e.readonly or e.multi or (e.detached and no_detached))]
            if fits := [i for i in fits if not (no_root and (i == 0 or (live[i].detached and live[i].storage == 0)))]:
                target = data.draw(st.sampled_from(fits))
                write(target, *draw_write(data.draw, live[target].v.shape, n, avoid))
    return steps, live


def weight(i, shape):
    return np.cos(np.arange(int(np.prod(shape))) * 0.37 + i).reshape(shape)


def model_outputs(live, leaf):
    grad = sum((weight(i, e.v.shape)[..., None] * e.j).reshape(-1, leaf.size).sum(0) for i, e in live.items())
    return [e.v.copy() for e in live.values()], grad.reshape(leaf.shape)


def lib_view(lib, op, args, t):
    simple = {"detach": t.detach, "contiguous": t.contiguous, "clone": t.clone, "t": t.t}
    if op in simple:
        return simple[op]()
    if op == "index":
        return t[index_key(args)]
    if op == "mT":
        return t.mT
    if op == "squeeze":
        return t.squeeze() if args[0] is None else t.squeeze(args[0])
    if op in ("unbind", "split", "chunk"):
        dim, n, k = args
        return (t.unbind(dim) if op == "unbind" else getattr(t, op)(n, dim=dim))[k]
    if op in ("permute", "expand"):
        return getattr(t, op)(*(args[0] if op == "permute" else args))
    if op == "diagonal":
        return t.diagonal(offset=args[0], dim1=args[1], dim2=args[2])
    return getattr(t, op)(*args)


def lib_write(lib, t, op, args, leaf, live):
    c = args[-1]
    if op == "add_live_sum":
        t.add_(live[c].sum())
    elif op in ("add_live", "copy_live"):
        (t.add_ if op == "add_live" else t.copy_)(live[c])
    elif op == "setitem":
        t[index_key(args[0])] = c
    elif op == "setitem_mask":
        t[t > args[0]] = c
    elif op == "setitem_index":
        t[lib.tensor(args[0], device=t.device)] = c
    elif op in ("add_leaf", "mul_leaf"):
        s = lib.sin(leaf.sum() * c) if op == "add_leaf" else lib.cos(leaf.sum() * c)
        t.add_(s) if op == "add_leaf" else t.mul_(s)
    elif op == "copy_leaf":
        t.copy_((leaf.reshape(-1)[: t.numel()] * c).reshape(t.shape))
    elif op == "sin":
        t.sin_()
    else:
        {"add_scalar": t.add_, "mul_scalar": t.mul_, "fill": t.fill_, "zero": lambda c: t.zero_()}[op](c)


def replay(lib, steps, leaf):
    """The sequence in ``lib`` (torch or ngrad): the live tensors by id."""
    live = {0: leaf if steps[0][1] == "leaf" else leaf * 1.5 + 0.25}
    for step in steps[1:]:
        if step[0] == "view":
            _, new, src, op, args = step
            live[new] = lib_view(lib, op, args, live[src])
        elif step[0] == "write":
            with lib.no_grad() if step[4] else contextlib.nullcontext():
                lib_write(lib, live[step[1]], step[2], step[3], leaf, live)
            if lib is torch:
                _refresh_views(live)
        else:
            del live[step[1]]
    return live


def _refresh_views(live):
    """Read every live tensor's ``grad_fn``, as PyTorch's own checks of a view should: PyTorch brings
    a view's autograd state up to date when ``grad_fn`` is read, and until then an in-place op on it
    may see stale state. A view of a detached tensor made before an in-place op gave that tensor a
    history (``v = t.detach(); w = v.mT; v.add_(x.sin())``) then raised "a leaf Variable that
    requires grad is being used in an in-place operation" on ``w.add_(1)``, and not once
    ``w.grad_fn`` had been read (PyTorch 2.13; Hypothesis found it). ngrad answers as the latter."""
    for t in live.values():
        try:
            t.grad_fn
        except RuntimeError:  # a view PyTorch forbids once its base was written: the next use raises
            pass


def run_lib(lib, steps, leaf, live=None):
    """Every live tensor (``live``, else the sequence's), and the gradient of their weighted sum with
    respect to ``leaf``."""
    live = replay(lib, steps, leaf) if live is None else live
    total = sum((lib.tensor(weight(i, t.shape), device=leaf.device) * t).sum() for i, t in live.items())
    (grad,) = lib.autograd.grad(total, leaf, allow_unused=True)
    return list(live.values()), grad


def run_forward(lib, steps, leaf, tangent):
    """Forward mode: every live tensor's primal and tangent (zeros where it has none) when the leaf's
    tangent is ``tangent``."""
    fwad = lib.autograd.forward_ad
    with fwad.dual_level():
        primal, direction = (
            lib.tensor(a, dtype=lib.float64, device=DEVICE["ngrad"] if lib is ngrad else "cpu") for a in (leaf, tangent)
        )
        out = [fwad.unpack_dual(t) for t in replay(lib, steps, fwad.make_dual(primal, direction)).values()]
        primals = [host(u.primal) for u in out]
        return primals, [np.zeros(p.shape) if u.tangent is None else host(u.tangent) for p, u in zip(primals, out)]


def model_forward(live, tangent):
    return [e.v.copy() for e in live.values()], [(e.j @ tangent.reshape(-1)) for e in live.values()]


def host(t):
    return None if t is None else t.detach().cpu().numpy()


def assert_same(want, got, steps, rtol=1e-10):
    (wv, wg), (gv, gg) = want, got
    assert len(wv) == len(gv), steps
    for i, (a, b) in enumerate(zip(wv, gv)):
        a, b = (x if isinstance(x, np.ndarray) else host(x) for x in (a, b))
        assert a.shape == b.shape, (i, a.shape, b.shape, steps)
        np.testing.assert_allclose(b, a, rtol=rtol, atol=1e-12, err_msg=f"live tensor {i} after {steps}")
    wg, gg = (x if isinstance(x, np.ndarray) else host(x) for x in (wg, gg))
    np.testing.assert_allclose(gg, wg, rtol=rtol, atol=1e-12, err_msg=f"gradient after {steps}")


def assert_same_forward(want, got, steps, rtol=1e-10):
    assert len(want[0]) == len(got[0]), steps
    for kind, w, g in [("primal", *pair) for pair in zip(want[0], got[0])] + [
        ("tangent", *pair) for pair in zip(want[1], got[1])
    ]:
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12, err_msg=f"{kind} after {steps}")


def gaps(*modes):
    return tuple(g for mode in modes for g in KNOWN[mode])


def draw_case(data, avoid=tuple(KNOWN["eager"]), force=None, leaf_base=False):
    shape = data.draw(st.sampled_from(SHAPES), label="shape")
    leaf = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed")).uniform(-1.5, 1.5, shape)
    steps, live = plan(data, leaf, avoid, force, leaf_base)
    return leaf, steps, live


def reference(leaf, steps, live):
    """PyTorch's answer where installed, the NumPy model's otherwise."""
    if torch is None:
        return model_outputs(live, leaf)
    return run_lib(torch, steps, torch.tensor(leaf, dtype=torch.float64, requires_grad=True))


def ngrad_leaf(leaf):
    return ngrad.tensor(leaf, dtype=ngrad.float64, device=DEVICE["ngrad"], requires_grad=True)


def run_compiled(steps, leaf, outside=True):
    """The sequence as one compiled function of the leaf, called twice (the second call replays),
    the gradient taken inside it; then (``outside``) compiled without the gradient, taken outside
    (through the program's backward)."""
    f = ngrad.compile(lambda x: run_lib(ngrad, steps, x))
    out = [f(ngrad_leaf(leaf)) for _ in range(2)]
    if not outside:
        return out
    g = ngrad.compile(lambda x: replay(ngrad, steps, x))
    return out + [run_lib(ngrad, steps, x, g(x)) for x in (ngrad_leaf(leaf), ngrad_leaf(leaf))]


# Sequences that once went wrong, kept as they are (steps as ``plan`` writes them after the root).
FIXED = {
    # PyTorch's mul_ keeps the original self it needs for the other factor's gradient by value: the
    # later no_grad write to the storage and the copy_ into it must not make the backward fail
    "mul_through_detached_then_root_rewritten": [
        ("view", 1, 0, "detach", ()),
        ("write", 0, "add_scalar", (-1.5,), True),
        ("write", 1, "mul_leaf", (-1.5,), False),
        ("write", 0, "add_scalar", (-1.5,), True),
        ("write", 0, "copy_leaf", (2.0,), False),
    ],
}


def model_of(leaf, steps):
    """The NumPy model's live entries after ``steps`` (a fixed sequence, the base a product)."""
    n = leaf.size
    live = {0: Entry(leaf * 1.5 + 0.25, 1.5 * np.eye(n).reshape(leaf.shape + (n,)), 0, root=True)}
    for k, step in enumerate(steps):
        if step[0] == "view":
            _, new, src, op, args = step
            live[new] = model_view(live[src], op, args, storage=k + 2)
        else:
            _, target, op, args, quiet = step
            kept = live[target].j.copy()
            model_write(live[target], op, args, leaf, live[args[0]] if "_live" in op else None)
            if quiet:
                live[target].j[...] = kept
    return live


def test_views_written_through_their_storage_refuse_autograd_use():
    # without PyTorch (test_view_parity compares the messages with it): an output of unbind, a view
    # of one and a view made under no_grad cannot be used where autograd records once their storage
    # was written, whatever the grad mode of the write; their values stay readable
    for quiet in (False, True):
        b = ngrad.tensor(np.arange(6.0).reshape(3, 2), requires_grad=True) * 2
        rows = b.unbind(0)
        part = rows[1][:1]
        with ngrad.no_grad():
            tail = b[1:]
        with ngrad.no_grad() if quiet else contextlib.nullcontext():
            b.add_(1.0)
        for use, phrase in [
            (lambda: rows[0] * 2, "Output 0 of Unbind is a view and its base or another view"),
            (lambda: part.sum(), "returns multiple views"),
            (lambda: tail.exp(), "A view was created in no_grad mode and its base or another view"),
        ]:
            with pytest.raises(RuntimeError, match=phrase):
                use()
        np.testing.assert_array_equal(rows[0].detach().numpy(), [1.0, 3.0])
        with ngrad.no_grad():
            np.testing.assert_array_equal((tail * 1).numpy(), [[5.0, 7.0], [9.0, 11.0]])


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_sequences_match_the_reference(name):
    leaf = np.random.default_rng(7).uniform(-1.5, 1.5, (3,))
    steps = [("root", "product"), *FIXED[name]]
    live = model_of(leaf, FIXED[name])
    want = reference(leaf, steps, live)
    if torch is not None:  # the model agrees with PyTorch, so the model alone is a reference without it
        assert_same(want, model_outputs(live, leaf), steps, rtol=1e-9)
    for got in [run_lib(ngrad, steps, ngrad_leaf(leaf)), *run_compiled(steps, leaf)]:
        assert_same(want, got, steps)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_eager_sequences_match_the_reference(data):
    leaf, steps, live = draw_case(data)
    assert_same(reference(leaf, steps, live), run_lib(ngrad, steps, ngrad_leaf(leaf)), steps)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_grad_writes_to_a_leaf_and_its_views(data):
    # an optimizer's updates: the leaf stays a leaf, its views and copies follow, gradients see the new values
    leaf, steps, live = draw_case(data, avoid=gaps("eager", "leaf"), leaf_base=True)
    assert_same(reference(leaf, steps, live), run_lib(ngrad, steps, ngrad_leaf(leaf)), steps)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_compiled_no_grad_writes_to_a_leaf_and_its_views(data):
    # the gradient taken inside the compiled function, and outside it through its outputs
    leaf, steps, live = draw_case(data, avoid=gaps("eager", "compiled", "leaf", "compiled_leaf"), leaf_base=True)
    want = reference(leaf, steps, live)
    for got in run_compiled(steps, leaf):
        assert_same(want, got, steps)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_compiled_sequences_match_the_reference(data):
    leaf, steps, live = draw_case(data, avoid=gaps("eager", "compiled"))
    want = reference(leaf, steps, live)
    for got in run_compiled(steps, leaf):
        assert_same(want, got, steps)


@pytest.mark.numba
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_compiled_kernels_sequences_match_the_reference(data, jit_always):
    leaf, steps, live = draw_case(data, avoid=gaps("eager", "compiled"))
    want = reference(leaf, steps, live)
    for got in run_compiled(steps, leaf):
        assert_same(want, got, steps)


def gap_params():
    """(mode, gap) of every forced start: the known gaps as strict xfails, the closed ones plain."""
    known = [
        pytest.param(mode, g, marks=pytest.mark.xfail(strict=True, reason=why), id=f"{mode}-{g}")
        for mode, gaps in KNOWN.items()
        for g, why in gaps.items()
    ]
    return known + [pytest.param(mode, g, id=f"{mode}-{g}") for g, mode in sorted(FORMER.items())]


@pytest.mark.parametrize("mode, gap", gap_params())
# no shrinking: a known gap fails on purpose
@settings(
    max_examples=10, deadline=None, derandomize=True, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
)
@given(data=st.data())
def test_sequences_starting_with_a_gap(data, mode, gap):
    # every sequence starts with the gap, and derandomized runs draw the same ones: strict, not flaky
    avoid = [g for gaps in KNOWN.values() for g in gaps if g != gap] + (["no_grad"] if mode == "forward" else [])
    leaf, steps, live = draw_case(data, avoid=avoid, force=gap, leaf_base=mode in ("leaf", "compiled_leaf"))
    if mode == "forward":
        tangent = np.cos(np.arange(leaf.size) + 0.5).reshape(leaf.shape)
        want = model_forward(live, tangent) if torch is None else run_forward(torch, steps, leaf, tangent)
        assert_same_forward(want, run_forward(ngrad, steps, leaf, tangent), steps)
        return
    want = reference(leaf, steps, live)
    compiled = mode.startswith("compiled")
    for got in run_compiled(steps, leaf) if compiled else [run_lib(ngrad, steps, ngrad_leaf(leaf))]:
        assert_same(want, got, steps)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_forward_mode_tangents_follow_the_writes(data):
    leaf, steps, live = draw_case(data, avoid=(*gaps("eager", "forward"), "no_grad"))  # tangents ignore no_grad
    tangent = np.cos(np.arange(leaf.size) + 0.5).reshape(leaf.shape)
    want = model_forward(live, tangent) if torch is None else run_forward(torch, steps, leaf, tangent)
    assert_same_forward(want, run_forward(ngrad, steps, leaf, tangent), steps)


@pytest.mark.skipif(torch is None, reason="the NumPy model is checked against PyTorch")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_numpy_model_matches_pytorch(data):
    leaf, steps, live = draw_case(data, avoid=())
    assert_same(reference(leaf, steps, live), model_outputs(live, leaf), steps, rtol=1e-9)
    if any(step[0] == "write" and step[4] for step in steps):
        return  # the model's Jacobian skips no_grad writes; forward mode does not
    tangent = np.cos(np.arange(leaf.size) + 0.5).reshape(leaf.shape)
    assert_same_forward(run_forward(torch, steps, leaf, tangent), model_forward(live, tangent), steps, rtol=1e-9)


HAVE_CUDA = ngrad.cuda.is_available()
SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


@pytest.mark.numba
@pytest.mark.cuda
@pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device (test_simulator_runs_the_device_tests runs these)")
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_device_sequences_match_the_reference(data, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("NGRAD_JIT", "always")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))
    monkeypatch.setitem(DEVICE, "ngrad", "cuda")
    leaf, steps, live = draw_case(data)
    assert_same(reference(leaf, steps, live), run_lib(ngrad, steps, ngrad_leaf(leaf)), steps)


@pytest.mark.numba
@pytest.mark.cuda
@pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device (test_simulator_runs_the_device_tests runs these)")
@pytest.mark.parametrize("name", ["alias_getitem_slice", "grad_transpose", "setitem_advanced_keys_with_gradients"])
def test_device_view_parity_cases(name, monkeypatch, tmp_path_factory):
    """A few of test_view_parity.py's cases, ngrad's tensors on the CUDA target (torch's on the CPU)."""
    from . import test_view_parity as parity  # skips without torch

    monkeypatch.setenv("NGRAD_JIT", "always")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))
    monkeypatch.setitem(parity.DEVICE, "ngrad", "cuda")
    parity.same(parity.CASES[name](torch), parity.CASES[name](ngrad))


@pytest.mark.numba
@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.skipif(HAVE_CUDA or SIMULATED, reason="a GPU runs the device tests directly; or already simulated")
def test_simulator_runs_the_device_tests(tmp_path):
    """This file's ``test_device_*`` tests in a child process under Numba's CUDA simulator."""
    run_device_tests_simulated(__file__, tmp_path, skips_allowed=torch is None)  # no torch: parity cases skip
