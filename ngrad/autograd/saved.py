"""Saved values in the reverse pass: unpacking what saved-tensor hooks packed, and reading it.

Contract: ``unpacked(low, joint)`` calls the unpack hooks of the values packed for the nodes
whose gradient the joint tape of ``low`` runs (latest node first, each packed value once) and
returns ``(slot, node)`` for each value a hook returned other than the recorded one: the slot the
reverse part reads and the node of the returned tensor (broadcast to the slot's shape where the
primitive broadcast its operand). ``reading(tape, n_forward, subs)`` is the joint tape whose
reverse part (the instructions after the first ``n_forward``) reads those nodes, as inputs
appended after the tape's, in place of the recorded values: the gradient is computed from what
the hooks returned, as in PyTorch. ``through_hooks(node)`` tells whether ``node`` saved its values
through hooks (then no in-place check applies to them).
"""

from .. import grad_mode
from ..engine.ir.graph import Node
from ..engine.ir.tape import Instr, Tape
from ..tensor.record import wrap
from .graph_nodes import check_unpacked
from .meta import NO_META

__all__ = ["reading", "through_hooks", "unpacked"]


def unpacked(low, joint):
    """Run the unpack hooks the pass needs; the substitutions their results call for."""
    subs = []
    for i in joint.ran:
        n = low.node_of_instr.get(i) if i in joint.reads_saved else None
        fn = (n.meta or NO_META).fn if n is not None else None
        if fn is None or not fn.packed:
            continue
        ins = low.tape.instrs[i]
        for which, packed, unpack in fn.packed:
            u = check_unpacked(unpack(packed))
            recorded = n if which == "result" else n.srcs[which]
            if u._node is recorded:
                continue  # the value itself (identity hooks, save_on_cpu on the CPU, a leaf)
            if tuple(u.shape) != recorded.shape or u.dtype is not recorded.dtype:
                raise RuntimeError(
                    f"unpack_hook returned a tensor of shape {list(u.shape)} and dtype {u.dtype} for a "
                    f"saved value of shape {list(recorded.shape)} and dtype {recorded.dtype}"
                )
            slot = ins.out if which == "result" else ins.args[which]
            node = _standing_for(u._node, recorded)
            want = low.tape.shapes[slot]
            if tuple(want) != node.shape:  # the operand was broadcast: so is what replaces it
                node = wrap(node).expand(want)._node
            subs.append((slot, node))
    return subs


def _standing_for(u, recorded):
    """What the gradient reads for ``recorded`` when its unpack hook returned ``u``: the value of
    ``u``; while recording a gradient graph (``create_graph``), one whose own gradient flows to
    ``recorded``, as PyTorch gives the unpacked tensor the saved one's place in the graph
    (``u + (recorded - recorded)``, the second term exactly zero, held constant but for its
    gradient)."""
    if not (grad_mode.is_grad_enabled() and recorded.requires_grad):
        return u
    held = wrap(Node("detach", (u,), None, u.shape, u.dtype))
    zero = wrap(recorded) - wrap(Node("detach", (recorded,), None, recorded.shape, recorded.dtype))
    return (held + zero)._node


def reading(tape, n_forward, subs):
    """``(tape, nodes)``: ``tape`` with its reverse part reading the substituted nodes, which
    feed its new inputs (``nodes``, in order, after the tape's own inputs)."""
    shapes, dtypes = list(tape.shapes), list(tape.dtypes)
    inputs, kinds = list(tape.inputs), list(tape.kinds)
    new_of, nodes = {}, []
    for slot, node in subs:
        if slot in new_of:  # two readers of one value: the first one's hook decides
            continue
        new_of[slot] = len(shapes)
        inputs.append(len(shapes))
        kinds.append("tensor")
        shapes.append(node.shape)
        dtypes.append(node.dtype.short)
        nodes.append(node)
    instrs = list(tape.instrs[:n_forward])
    for ins in tape.instrs[n_forward:]:
        args = tuple(new_of.get(a, a) for a in ins.args)
        instrs.append(ins if args == ins.args else Instr(ins.out, ins.prim, args, ins.params))
    return Tape(shapes, dtypes, inputs, kinds, instrs, list(tape.outputs)), nodes


def through_hooks(node):
    """Whether ``node`` saved its values through saved-tensor hooks: PyTorch checks no version
    of those, its gradient reads what the unpack hooks return (an updated value, or inside
    ``allow_mutation_on_saved_tensors`` the value as it was saved)."""
    fn = (node.meta or NO_META).fn if node is not None else None
    return fn is not None and bool(fn.packed)
