"""Batching: run a tape on a stack of inputs in one program (vmap over a new leading axis).

Contract: ``batch(tape, batched, size)`` returns ``(new_tape, out_batched)``. Input slots in
``batched`` take arrays with an extra leading axis of length ``size``; every instruction that
depends on them is rewritten to carry that axis (axes shift by one, unbatched operands are
broadcast), everything else is left as it was. ``out_batched[i]`` says whether output ``i``
gained the leading axis. This is how ``is_grads_batched`` and vectorized Jacobians run many
reverse passes as one.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from ..ir.prims import PRIMS
from ..ir.prims.control import body_of, layout, parts
from ..ir.tape import Builder, Tape, Var

__all__ = ["batch"]


def _shift(axes: Sequence[int]) -> tuple[int, ...]:
    return tuple(a + 1 for a in axes)


def _lift(v: Var, size: int) -> Var:
    return v.reshape(shape=(1,) + v.shape).expand(shape=(size,) + v.shape)


def _batched_index(x: Var, idx: Sequence[Var], axis: int, size: int, scatter_shape: Sequence[int] | None = None) -> Var:
    """``index``/``unindex`` where the index tensors carry the batch axis too.

    The batch axis becomes one more index tensor (0..size-1), placed in front of the indexed
    axes after moving those right behind the batch axis.
    """
    k, ibatch = len(idx), idx[0].shape
    ones = x.bld.full(1, (size,), "i64")
    bidx = (ones.cumsum(axis=0) - 1).reshape(shape=(size,) + (1,) * (len(ibatch) - 1)).expand(shape=ibatch)
    if scatter_shape is None:
        rank = len(x.shape)
        perm = (
            (0,) + tuple(range(axis + 1, axis + 1 + k)) + tuple(range(1, axis + 1)) + tuple(range(axis + 1 + k, rank))
        )
        r = x.permute(perm=perm).index(bidx, *idx, axis=0)
        # r: ibatch + x.shape[1:axis+1] + rest -> move the leading-dims group back in front of ibatch
        nb, lead = len(ibatch), axis
        back = (0,) + tuple(range(nb, nb + lead)) + tuple(range(1, nb)) + tuple(range(nb + lead, len(r.shape)))
        return r.permute(perm=back)
    full = (size,) + tuple(scatter_shape)
    rank = len(full)
    perm = (0,) + tuple(range(axis + 1, axis + 1 + k)) + tuple(range(1, axis + 1)) + tuple(range(axis + 1 + k, rank))
    permuted = tuple(full[p] for p in perm)
    nb, lead = len(ibatch), axis
    # bring x (ibatch-first layout with leading dims after the batch axis) into index layout
    to_index = (
        (0,) + tuple(range(1 + lead, nb + lead)) + tuple(range(1, 1 + lead)) + tuple(range(nb + lead, len(x.shape)))
    )
    g = x.permute(perm=to_index).unindex(bidx, *idx, shape=permuted, axis=0)
    inv = [0] * rank
    for i, p in enumerate(perm):
        inv[p] = i
    return g.permute(perm=tuple(inv))


def _swap(v: Var) -> Var:
    """``v`` with its first two axes exchanged (a scan's steps and the batch axis)."""
    return v.permute(perm=(1, 0) + tuple(range(2, len(v.shape))))


def _batched_scan(args: Sequence[Var], params: dict, size: int) -> Var:
    """A ``scan`` whose operands all carry the batch axis (``args``, lifted): the body batched,
    the sequences scanned along their second axis, and the result packed as ``size`` results of
    the original layout side by side."""
    carries, xs, length = params["carries"], params["xs"], params["length"]
    body = body_of(params["body"])
    body, out_batched = batch(body, body.inputs, size)
    bb = Builder(body)
    outs = [bb.var(s) if yes else _lift(bb.var(s), size) for s, yes in zip(body.outputs, out_batched)]
    body = bb.finish(outs)
    seq = [_swap(a) if carries <= k < carries + xs else a for k, a in enumerate(args)]
    packed = args[0].bld.emit("scan", seq, dict(params, body=body.format()))
    finals, ys, hist = parts(packed, layout(body, length, carries, params["history"]))
    flat = [v.reshape(shape=(size, math.prod(v.shape[1:]))) for v in finals + [_swap(v) for v in ys + hist]]
    if not flat:
        return args[0].bld.full(0, (size, 0), packed.dtype)
    return flat[0].cat(*flat[1:], axis=1) if len(flat) > 1 else flat[0]


# kinds whose rows take a leading batch axis as they are (a value check tests every element)
_LEADING = frozenset(
    ["unary", "binary", "compare", "logical", "where", "cast", "matmul", "linalg", "require", "complex_view"]
)


def batch(tape: Tape, batched: Collection[int], size: int) -> tuple[Tape, list[bool]]:
    """Rewrite ``tape`` so the inputs in ``batched`` carry a leading axis of ``size``."""
    b = Builder()
    env: dict[int, Var] = {}
    isb: dict[int, bool] = {}
    for s, k in zip(tape.inputs, tape.kinds):
        yes = s in batched
        shape = ((size,) if yes else ()) + tape.shapes[s]
        env[s] = b.input(shape, tape.dtypes[s], "tensor" if yes else k)
        isb[s] = yes
    for ins in tape.instrs:
        args = [env[a] for a in ins.args]
        flags = [isb[a] for a in ins.args]
        p = dict(ins.params)
        if not any(flags):
            env[ins.out] = b.emit(ins.prim, args, p)
            isb[ins.out] = False
            continue
        kind, name = PRIMS[ins.prim].kind, ins.prim
        lifted = [a if f else _lift(a, size) for a, f in zip(args, flags)]
        if kind in _LEADING or name in (
            "gather",
            "scatter_add",
            "searchsorted",
            "scatter",
            "scatter_reduce",
            "cat",
        ):
            if "axis" in p:
                p["axis"] += 1
            if "shape" in p:
                p["shape"] = (size,) + tuple(p["shape"])
            r = b.emit(name, lifted, p)
        elif name in ("sum", "prod", "amax", "amin", "logsumexp", "var", "std", "fftn", "rfftn", "irfftn"):
            r = b.emit(name, args, dict(p, axes=_shift(p["axes"])))
        elif name in (
            "argmax",
            "argmin",
            "argsort",
            "softmax",
            "cumsum",
            "cumprod",
            "logcumsumexp",
            "cumargmax",
            "cumargmin",
            "argmode",
        ):
            r = b.emit(name, args, dict(p, axis=p["axis"] + 1))
        elif name in ("reshape", "expand"):
            r = b.emit(name, args, dict(p, shape=(size,) + tuple(p["shape"])))
        elif name == "permute":
            r = b.emit(name, args, dict(p, perm=(0,) + _shift(p["perm"])))
        elif name == "flip":
            r = b.emit(name, args, dict(p, axes=_shift(p["axes"])))
        elif name in ("slice", "unslice"):
            q = dict(
                p, starts=(0,) + tuple(p["starts"]), stops=(size,) + tuple(p["stops"]), steps=(1,) + tuple(p["steps"])
            )
            if name == "unslice":
                q["shape"] = (size,) + tuple(p["shape"])
            r = b.emit(name, args, q)
        elif name in ("index", "unindex"):
            if not any(flags[1:]):
                q = dict(p, axis=p["axis"] + 1)
                if name == "unindex":
                    q["shape"] = (size,) + tuple(p["shape"])
                r = b.emit(name, args, q)
            else:
                r = _batched_index(lifted[0], lifted[1:], p["axis"], size, p["shape"] if name == "unindex" else None)
        elif name == "scan":
            r = _batched_scan(lifted, p, size)
        else:
            raise ValueError(f"batch: no batching rule for primitive {name!r}")
        env[ins.out] = r
        isb[ins.out] = True
    out = b.finish([env[s] for s in tape.outputs])
    return out, [isb[s] for s in tape.outputs]
