"""Indexing: ``t[key]`` (basic, advanced and boolean-mask indexing) and ``t[key] = value``.

Contract: ``__getitem__`` records a slice/select (views of basic items), a reshape for ``None``
and dropped dims, then an ``index`` node for integer arrays, with PyTorch's grad_fn names and
``IndexError`` messages; index arrays computed here are checked and made non-negative before
they reach the engine. ``__setitem__`` is an in-place update (``inplace.inplace_update``) whose
new value scatters ``value`` into the kept elements (the last write of a repeated index wins).
Under ``ngrad.compile`` nothing reads the values of index or mask tensors: they are steps of the
program (``index``, an assignment by positions or a ``where``), and ``index_select`` records a
``require`` step, so bad values raise PyTorch's errors when the program runs.
"""

import math
import re

import numpy as np

from .. import grad_mode as _grad_mode
from ..engine.ir import dtypes as D
from ..engine.ir.graph import source
from .functions import cat, where
from .inplace import inplace_update
from .math_ops import require
from .record import (
    TensorBase,
    const_node,
    host_value,
    index_array,
    index_source,
    named,
    normalize_dim,
    record_op,
    reshape_node,
    to_tensor,
    wrap,
)

_gm = _grad_mode.state


def _record_slice(n, starts, stops, steps, shape, name):
    """Record a ``slice`` of node ``n`` (result ``shape``) under the grad_fn ``name``."""
    params = {"starts": tuple(starts), "stops": tuple(stops), "steps": tuple(steps)}
    return record_op("slice", (n,), params, shape, n.dtype, name)


def _basic_getitem(n, key):
    """Ints and slices only (the common case): one slice node and at most one reshape, or None."""
    shape = n.shape
    if len(key) > len(shape):
        return None
    starts, stops, steps, sl_shape, new_shape = [], [], [], [], []
    for k, size in zip(key, shape):
        tk = type(k)
        if tk is int:
            i = k + size if k < 0 else k
            if not 0 <= i < size:
                return None
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
            sl_shape.append(1)
        elif tk is slice:
            a, b, c = k.indices(size)
            if c <= 0:
                return None
            if b < a:
                b = a
            m = len(range(a, b, c))
            starts.append(a)
            stops.append(b)
            steps.append(c)
            sl_shape.append(m)
            new_shape.append(m)
        else:
            return None
    rest = shape[len(key) :]
    if rest:
        starts.extend([0] * len(rest))
        stops.extend(rest)
        steps.extend([1] * len(rest))
        sl_shape.extend(rest)
        new_shape.extend(rest)
    sl_shape, new_shape = tuple(sl_shape), tuple(new_shape)
    # PyTorch applies the items in order: the grad_fn is that of the last one that does something
    name = "SliceBackward0"
    for k, size in zip(key, shape):
        if type(k) is int:
            name = "SelectBackward0"
        elif k.indices(size) != (0, size, 1):
            name = "SliceBackward0"
    if sl_shape == shape:
        out = record_op("reshape", (n,), {"shape": shape}, shape, n.dtype, "AliasBackward0")
    else:
        out = _record_slice(n, starts, stops, steps, sl_shape, name)
    return out if new_shape == sl_shape else wrap(reshape_node(out._node, new_shape, name))


def _getitem(t, key):
    """``t[key]`` with PyTorch's indexing rules: a slice (or select) of basic items, reshaped
    for ``None`` and dropped dims, then integer-array indexing of the advanced items."""
    if not isinstance(key, tuple):
        key = (key,)
    fast = _basic_getitem(t._node, key)
    if fast is not None:
        return fast
    items = _index_items(t, key)
    return _apply_plan(t, _plan(_spread(items, t._node.shape), t._node.shape))


def _index_items(t, key):
    """Each element of ``key`` as a tagged item: ``("mask", bools)``, ``("adv", ints)``,
    ``("int", i)``, or ``(k,)`` for None, Ellipsis and slices."""
    items = []
    for k in key:
        if isinstance(k, TensorBase):
            if k.dtype is D.bool_:
                items.append(("mask", host_value(k)))
            elif k.dtype.category == 1:
                # under ngrad.compile an index tensor stays a tensor: its values may come from
                # the arguments, and the ``index`` step checks them when the program runs
                lazy = _gm.trace is not None
                items.append(("adv", k if lazy else host_value(k)))
            else:
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        elif isinstance(k, (list, np.ndarray)):
            a = np.asarray(k)
            if a.dtype == np.bool_:
                items.append(("mask", a))
            elif a.dtype.kind in "iu" or a.size == 0:
                items.append(("adv", a.astype(np.int64)))
            else:
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        elif k is None or k is Ellipsis or isinstance(k, slice):
            items.append((k,))
        elif isinstance(k, (bool, np.bool_)):
            items.append(("mask", np.asarray(k)))
        elif isinstance(k, (int, np.integer)):
            items.append(("int", int(k)))
        else:
            raise IndexError(
                f"only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables "
                f"are valid indices (got {type(k).__name__})"
            )
    return items


def _spread(items, shape):
    """``items`` with the ellipsis (or the end) replaced by full slices of the dims not indexed."""
    used = sum(
        1 if it[0] in ("int", "adv") or isinstance(it[0], slice) else (it[1].ndim if it[0] == "mask" else 0)
        for it in items
    )
    if used > len(shape):
        raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
    ell = [i for i, it in enumerate(items) if it[0] is Ellipsis]
    if len(ell) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    fill = [(slice(None),)] * (len(shape) - used)
    return items[: ell[0]] + fill + items[ell[0] + 1 :] if ell else items + fill


def _plan(items, shape):
    """The slice bounds (``starts``/``stops``/``steps``), the shape after basic indexing, where
    the advanced index arrays go and the grad_fn name, for items covering every dim of ``shape``."""
    starts, stops, steps = [], [], []
    new_shape, adv_pos, adv_arrays = [], [], []
    dim = 0
    name = "SliceBackward0"
    for it in items:
        kind = it[0]
        if kind is None:
            new_shape.append(1)
            continue
        if kind == "mask":
            m = it[1]
            if m.ndim == 0:
                new_shape.append(1)
                if not m:
                    adv_pos.append(len(new_shape) - 1)
                    adv_arrays.append(np.zeros(0, np.int64))
                continue
            if m.shape != shape[dim : dim + m.ndim]:
                for j, (a, b) in enumerate(zip(m.shape, shape[dim:])):
                    if a != b:
                        raise IndexError(
                            f"The shape of the mask {list(m.shape)} at index {j} does not match the "
                            f"shape of the indexed tensor {list(shape)} at index {dim + j}"
                        )
            for arr in np.nonzero(m):
                starts.append(0), stops.append(shape[dim]), steps.append(1)
                adv_pos.append(len(new_shape))
                adv_arrays.append(arr)
                new_shape.append(shape[dim])
                dim += 1
            continue
        n = shape[dim]
        if kind == "int":
            i = it[1] + n if it[1] < 0 else it[1]
            if not 0 <= i < n:
                raise IndexError(f"index {it[1]} is out of bounds for dimension {dim} with size {n}")
            starts.append(i), stops.append(i + 1), steps.append(1)
            name = "SelectBackward0"
        elif kind == "adv":
            starts.append(0), stops.append(n), steps.append(1)
            adv_pos.append(len(new_shape))
            adv_arrays.append(it[1])
            new_shape.append(n)
        else:
            a, b, c = kind.indices(n)
            if c <= 0:
                raise ValueError("step must be greater than zero")
            starts.append(a), stops.append(max(a, b)), steps.append(c)
            new_shape.append(len(range(a, b, c)))
        dim += 1
    return starts, stops, steps, new_shape, adv_pos, adv_arrays, name


def _apply_plan(t, plan):
    """Record the indexing ``_plan`` computed: a slice, a reshape, then the advanced indexing."""
    starts, stops, steps, new_shape, adv_pos, adv_arrays, name = plan
    shape = t._node.shape
    out = t
    n = t._node
    if any(a != 0 or b != s or c != 1 for a, b, c, s in zip(starts, stops, steps, shape)):
        sl_shape = tuple(len(range(a, b, c)) for a, b, c in zip(starts, stops, steps))
        out = _record_slice(n, starts, stops, steps, sl_shape, name)
    if tuple(new_shape) != out._node.shape:
        out = named(out.reshape(tuple(new_shape)), name)
    elif out is t:
        out = named(t.reshape(t.shape), "AliasBackward0")
    if adv_arrays:
        if adv_pos == list(range(adv_pos[0], adv_pos[0] + len(adv_pos))):
            out = out._advanced(adv_pos[0], adv_arrays)
        else:
            rest = [i for i in range(len(new_shape)) if i not in adv_pos]
            out = out.permute(adv_pos + rest)._advanced(0, adv_arrays)
        out = named(out, "IndexBackward0")
    return out


def _in_pytorch_words(e, key):
    """NumPy's IndexError for ``key``: PyTorch numbers the dimension of a bad index among the
    key's index arrays, where NumPy names the axis of the indexed array."""
    found = re.search(r" axis (\d+) ", str(e))
    if found is None:
        return IndexError(str(e))
    bad, axis, arrays = int(found.group(1)), 0, 0
    for k in key:
        if k is Ellipsis:
            break  # the axes it spans are not known here: NumPy's number stays
        if k is None:
            continue
        if isinstance(k, TensorBase):
            array = k.dtype is not D.bool_
        else:
            array = isinstance(k, (list, np.ndarray)) and np.asarray(k).dtype != np.bool_
        if axis == bad and array:
            return IndexError(str(e).replace(found.group(0), f" dimension {arrays} "))
        axis, arrays = axis + 1, arrays + array
    return IndexError(str(e).replace(found.group(0), f" dimension {bad} "))


def _traced_setitem(t, key, value):
    """``t[key] = value`` under ``ngrad.compile`` where ``key`` holds tensors whose values the
    program reads when it runs (so nothing here may read them): integer indices, or one boolean
    mask over leading dims. Returns False for keys the eager path handles (no tensor in them)."""
    tensors = [k for k in key if isinstance(k, TensorBase)]
    if not tensors:
        return False
    masks = [k for k in tensors if k.dtype is D.bool_]
    if not masks:
        _scatter_positions(t, key, value)
        return True
    m = masks[0]
    if len(key) != 1 or tuple(m.shape) != tuple(t.shape[: m.ndim]):
        return False  # the eager path reads the mask (a TraceError) or raises PyTorch's shape error
    if m.ndim == 0:  # all of t or nothing: the value broadcast to a leading dim of 1
        src = to_tensor(value).to(t.dtype)
        vs = tuple(src.shape)
        src = src.reshape(vs[1:]) if len(vs) > t.ndim and vs[0] == 1 else src
        inplace_update(t, named(where(m, src.expand(tuple(t.shape)), t), "IndexPutBackward0"))
        return True
    _masked_assign(t, m, value)
    return True


def _scatter_positions(t, key, value):
    """``t[key] = value`` with integer tensor indices: the flat positions ``key`` picks from an
    ``arange`` (negative entries count from the end; the ``index`` step checks the bounds), then
    the values placed there, the last write of a repeated position winning as in eager mode."""
    shape, d = t._node.shape, t.dtype
    n = math.prod(shape)
    picked = wrap(index_source(np.arange(n).reshape(shape)))[key]
    m = picked.numel()
    if m == 0:
        return
    pos = picked.reshape(-1)
    work = d if d is not D.bool_ else D.int64
    src = to_tensor(value).to(work)
    vals = (src if tuple(src.shape) == tuple(picked.shape) else src.expand(tuple(picked.shape))).reshape(-1)
    # the last of equal positions: a stable sort puts them together, in the order written
    order = pos.argsort(stable=True)
    run = pos[order]
    last = wrap(const_node(True, D.bool_)).expand((1,))
    if m > 1:
        last = cat([run[1:] != run[:-1], last])
    weight = _unindex(last.to(work), order, m)  # 1 for the write that lands, per write
    placed = _unindex(vals * weight, pos, n)
    hit = _unindex(wrap(const_node(1, work)).expand((m,)), pos, n)
    kept = where(hit == 0, t.reshape(-1).to(work), wrap(const_node(0, work)))
    inplace_update(t, named((kept + placed).reshape(shape).to(d), "IndexPutBackward0"))


def _broadcasts(a, b):
    """Whether shape ``a`` broadcasts to shape ``b``."""
    try:
        return np.broadcast_shapes(tuple(a), tuple(b)) == tuple(b)
    except ValueError:
        return False


def _unindex(vals, pos, n):
    """A length-``n`` vector of zeros with ``vals`` added at positions ``pos``."""
    return record_op(
        "unindex", (vals._node, pos._node), {"shape": (n,), "axis": 0}, (n,), vals.dtype, "IndexPutBackward0"
    )


def _masked_assign(t, mask, value):
    """``t[mask] = value`` for a boolean ``mask`` over the leading dims of ``t``: a ``where``.
    A value that broadcasts to the trailing dims fills every selected row; one with a row per
    selected element is read through the mask's running count, which a ``require`` step checks
    against its number of rows when the program runs (PyTorch's shape mismatch error)."""
    shape, d = t._node.shape, t.dtype
    lead, rest = math.prod(mask.shape), tuple(shape[mask.ndim :])
    src = to_tensor(value).to(d)
    rows = t.reshape((lead,) + rest)
    cond = mask.reshape((lead,) + (1,) * len(rest)).expand((lead,) + rest)
    vs = tuple(src.shape)
    if len(vs) <= len(rest) or (len(vs) == len(rest) + 1 and vs[0] == 1):
        new = where(cond, src.reshape(vs[1:] if len(vs) > len(rest) else vs).expand((lead,) + rest), rows)
    else:
        if len(vs) != len(rest) + 1 or not _broadcasts(vs[1:], rest):
            # the number of selected rows is known only when the program runs
            raise RuntimeError(
                f"shape mismatch: value tensor of shape {list(vs)} cannot be broadcast to indexing result "
                f"of shape [<selected rows>{''.join(f', {r}' for r in rest)}]"
            )
        count = mask.reshape(-1).to(D.int64).cumsum(0) - 1
        at = require(count, "mask_count", vs[0], rest=rest)
        at = where(at < 0, wrap(const_node(0, D.int64)), at)
        new = where(cond, src.expand((vs[0],) + rest)[at], rows)
    inplace_update(t, named(new.reshape(shape), "IndexPutBackward0"))


class IndexingOps:
    """Indexing (``t[key]``, ``t[key] = v``, ``index_select``), a mixin of ``Tensor``."""

    __slots__ = ()

    def index_select(self, dim, index):
        idx = to_tensor(index)
        if idx.ndim > 1:
            raise IndexError("index_select(): Index is supposed to be a vector")
        if idx.dtype.category != 1:
            raise RuntimeError("index_select(): Expected dtype int32/int64 for index")
        d = normalize_dim(dim, max(self.ndim, 1))
        size = self.shape[d] if self.ndim else 1
        # PyTorch's CPU kernel for dim 1 of a matrix or more has its own bounds error
        test = "index_select_dim1" if d == 1 and self.ndim > 1 else "index_select"
        if _gm.trace is not None:
            # under ngrad.compile the index may come from the arguments: checked when the program runs
            if not self.ndim and idx.numel() != 1:
                raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {idx.numel()} value(s)")
            checked = require(idx.reshape(-1).to(D.int64), test, size)
            out = self._advanced(d, [checked]) if self.ndim else self.reshape(1)._advanced(0, [checked]).reshape(())
            return named(out, "IndexSelectBackward0")
        iv = host_value(idx).reshape(-1)
        # checked where the index is realized: unlike t[idx], index_select counts nothing from the end
        if iv.size and (iv.min() < 0 or iv.max() >= size):
            if test == "index_select_dim1":
                bad = iv[(iv < 0) | (iv >= size)][0]
                raise RuntimeError(f"INDICES element is out of DATA bounds, id={bad} axis_dim={size}")
            raise IndexError("index out of range in self")
        if not self.ndim:  # a 0-d tensor is one entry, and so is the result
            if iv.size != 1:
                raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {iv.size} value(s)")
            return named(self.reshape(()), "IndexSelectBackward0")
        out = self._advanced(d, [iv])
        return named(out, "IndexSelectBackward0")

    def _advanced(self, axis, arrays):
        """Integer-array indexing of consecutive axes starting at ``axis`` (arrays broadcast).
        NumPy arrays are checked and made non-negative here; integer tensors (see ``_getitem``)
        are checked by the ``index`` primitive when it runs, negative entries counting from the
        end as NumPy counts them."""
        n = self._node
        if any(isinstance(a, TensorBase) for a in arrays):
            shape = np.broadcast_shapes(*[tuple(a.shape) for a in arrays])
            nodes = []
            for k, a in enumerate(arrays):
                if not isinstance(a, TensorBase):  # PyTorch numbers the dim among the index tensors
                    a = wrap(index_array(np.asarray(a), n.shape[axis + k], k))
                a = a.to(D.int64)
                nodes.append((a if tuple(a.shape) == shape else a.expand(shape))._node)
            shape = n.shape[:axis] + shape + n.shape[axis + len(arrays) :]
            return record_op("index", (n, *nodes), {"axis": axis}, shape, n.dtype, "IndexBackward0")
        arrays = np.broadcast_arrays(*[np.asarray(a) for a in arrays])
        fixed = [index_array(a, n.shape[axis + k], k) for k, a in enumerate(arrays)]
        shape = n.shape[:axis] + arrays[0].shape + n.shape[axis + len(arrays) :]
        return record_op("index", (n, *fixed), {"axis": axis}, shape, n.dtype, "IndexBackward0")

    def __getitem__(self, key):
        return _getitem(self, key)

    def __setitem__(self, key, value):
        """In-place assignment to the elements ``key`` selects (PyTorch's indexing rules;
        with repeated indices the last assignment wins). Gradients flow to ``value`` and to
        the elements of this tensor that were kept.

        ```python
        >>> import ngrad
        >>> x = ngrad.zeros(2, 3)
        >>> x[0, 1:] = ngrad.tensor([5.0, 6.0])
        >>> x[:, 0] = 1
        >>> x
        tensor([[1., 5., 6.],
                [1., 0., 0.]])

        ```
        """

        basic = key if isinstance(key, tuple) else (key,)
        if all(k is None or k is Ellipsis or type(k) in (int, slice) for k in basic):
            # a view of the selected elements, written through: PyTorch's copy_ into a view
            self[key].copy_(value)
            return

        if _gm.trace is not None and _traced_setitem(self, basic, value):
            return

        def host(k):
            if isinstance(k, TensorBase):
                return host_value(k)
            if isinstance(k, tuple):
                return tuple(host(e) for e in k)
            return k

        shape = self._node.shape
        n = math.prod(shape)
        try:
            picked = np.arange(n, dtype=np.int64).reshape(shape)[host(key)]
        except IndexError as e:
            raise _in_pytorch_words(e, basic) from None
        sel = np.shape(picked)
        pos = np.asarray(picked, dtype=np.int64).reshape(-1)
        last = len(pos) - 1 - np.unique(pos[::-1], return_index=True)[1]  # the last write wins
        keep = np.ones(n, dtype=bool)
        keep[pos] = False
        src = to_tensor(value).to(self.dtype)
        if src.shape != sel:
            src = src.expand(sel)
        vals = src.reshape(-1)
        if len(last) != len(pos):
            vals = vals[wrap(index_source(last))]
            pos = pos[last]
        where_ = wrap(index_source(pos))
        d = self.dtype
        placed = record_op(
            "unindex", (vals._node, where_._node), {"shape": (n,), "axis": 0}, (n,), d, "IndexPutBackward0"
        )
        kept = where(wrap(source(keep, D.bool_, device=None)), self.reshape(-1), wrap(const_node(0, d)))
        inplace_update(self, named((kept + placed).reshape(shape), "IndexPutBackward0"))
