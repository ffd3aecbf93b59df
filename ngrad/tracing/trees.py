"""The structures of a compiled function's arguments and results, and their specs.

Contract: arguments are nested tuples, lists and dicts of tensors, floats and hashable static
values. ``flatten`` appends a tree's leaves to a list in order and returns its *spec*, a
hashable description that is part of the call's signature: ``("T", dtype, shape,
requires_grad)`` for a tensor, ``("F",)`` for a float, ``("S", type, value)`` for a static
value, ``(container name, specs)`` for a tuple or list and ``("dict", ((key, spec), ...))`` for
a dict (keys in insertion order). ``build`` is its inverse. A result's spec (``result_spec``)
is the same with ``("T",)`` for each tensor and ``("S", value)`` for anything else; the
generated replay (``ngrad.tracing.probe``) reads both formats.
"""

from ..tensor.core import Tensor

__all__ = ["build", "build_result", "flatten", "hashable", "result_spec"]


def flatten(tree, leaves):
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
        return (t.__name__, tuple(flatten(x, leaves) for x in tree))
    if t is dict:
        return ("dict", tuple((k, flatten(tree[k], leaves)) for k in tree))
    try:
        hash(tree)
    except TypeError:
        raise TypeError(
            f"ngrad.compile: an argument of type {t.__name__} is neither a tensor, a float, a "
            f"tuple/list/dict of them, nor a hashable static value"
        ) from None
    leaves.append(tree)
    return ("S", t, tree)


def build(spec, values):
    """The inverse of ``flatten``: a tree of ``spec``'s structure over the values in order."""
    tag = spec[0]
    if tag in ("T", "F", "S"):
        return next(values)
    if tag == "tuple":
        return tuple(build(s, values) for s in spec[1])
    if tag == "list":
        return [build(s, values) for s in spec[1]]
    return {k: build(s, values) for k, s in spec[1]}


def result_spec(tree, found):
    """Like ``flatten`` for the function's result: tensors become positions in ``found``."""
    if isinstance(tree, Tensor):
        found.append(tree)
        return ("T",)
    t = type(tree)
    if t in (tuple, list):
        return (t.__name__, tuple(result_spec(x, found) for x in tree))
    if t is dict:
        return ("dict", tuple((k, result_spec(tree[k], found)) for k in tree))
    return ("S", tree)


def build_result(spec, tensors):
    """The inverse of ``result_spec``: the result's tree over ``tensors`` in order."""
    tag = spec[0]
    if tag == "T":
        return next(tensors)
    if tag == "S":
        return spec[1]
    if tag == "tuple":
        return tuple(build_result(s, tensors) for s in spec[1])
    if tag == "list":
        return [build_result(s, tensors) for s in spec[1]]
    return {k: build_result(s, tensors) for k, s in spec[1]}


def hashable(v):
    """The spec part of a static argument ``v``: (its type, itself)."""
    try:
        hash(v)
    except TypeError:
        raise TypeError(f"ngrad.compile: static argument of type {type(v).__name__} must be hashable") from None
    return (type(v), v)
