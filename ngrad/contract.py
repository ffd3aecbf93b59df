"""Tensor contractions: ``einsum``, ``tensordot``, ``inner``, as in PyTorch.

Each is written in the facade's own operations, so gradients (of any order), tracing and
compiling come with them. A contraction of two operands becomes one ``matmul`` (BLAS): both
operands are permuted to (batch, kept, summed) and reshaped to three dimensions, or two
without a batch. An index that only one operand carries, and nothing later needs, is summed first;
an index repeated within one operand (``'ii->i'``) takes that operand's diagonal.

```python
>>> import ngrad
>>> a, b = ngrad.arange(6.0).reshape(2, 3), ngrad.arange(12.0).reshape(3, 4)
>>> ngrad.einsum("ij,jk->ik", a, b).equal(a @ b), ngrad.einsum("ii", ngrad.eye(3))
(True, tensor(3.))

```
"""

import math
import string

from .tensor.record import normalize_dim, to_tensor

__all__ = ["einsum", "tensordot", "inner"]

_LETTERS = frozenset(string.ascii_letters)


def _parse(equation, operands):
    """Each operand's subscripts and the output's, as lists of characters: ``...`` becomes one
    private character per broadcast dimension (aligned from the right, as NumPy broadcasts)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        more = "more" if len(operands) > len(terms) else "fewer"
        raise RuntimeError(f"einsum(): {more} operands were provided than specified in the equation")
    for i, ch in enumerate(eq):
        if ch not in _LETTERS and ch not in ".,->":
            raise RuntimeError(
                f"einsum(): invalid subscript given at index {i} in the equation string, subscripts must be in [a-zA-Z]"
            )
    ell = max([op.ndim - (len(t) - 3) for t, op in zip(terms, operands) if "..." in t] + [0])
    dots = [chr(0x100 + k) for k in range(ell)]  # not letters: cannot clash with a subscript
    subs = []
    for k, (t, op) in enumerate(zip(terms, operands)):
        if "..." in t:
            head, _, tail = t.partition("...")
            if "." in head + tail:
                raise RuntimeError(f"einsum(): found '.' for operand {k} that is not part of any ellipsis")
            n = op.ndim - len(head) - len(tail)
            if n < 0:
                raise RuntimeError(
                    f"einsum(): the number of subscripts in the equation ({len(head + tail)}) is more "
                    f"than the number of dimensions ({op.ndim}) for operand {k}"
                )
            s = list(head) + dots[ell - n :] + list(tail)
        else:
            if "." in t:
                raise RuntimeError(f"einsum(): found '.' for operand {k} that is not part of any ellipsis")
            if len(t) != op.ndim:
                raise RuntimeError(
                    f"einsum(): the number of subscripts in the equation ({len(t)}) does not match the "
                    f"number of dimensions ({op.ndim}) for operand {k} and no ellipsis was given"
                )
            s = list(t)
        subs.append(s)
    if arrow:
        head, _, tail = rhs.partition("...")
        out = list(head) + (dots if "..." in rhs else []) + list(tail)
        seen = set()
        for ch in out:
            if ch in seen:
                raise RuntimeError(f"einsum(): output subscript {ch} appears more than once in the output")
            if not any(ch in s for s in subs):
                raise RuntimeError(
                    f"einsum(): output subscript {ch} does not appear in the equation for any input operand"
                )
            seen.add(ch)
    else:  # the broadcast dimensions, then the subscripts used once, in alphabetical order
        counts = {}
        for s in subs:
            for ch in s:
                counts[ch] = counts.get(ch, 0) + 1
        out = dots + sorted(ch for ch, c in counts.items() if c == 1 and ch in _LETTERS)
    return subs, out


def _distinct(x, s, k):
    """``x`` with every subscript repeated within it replaced by its diagonal (moved last)."""
    s = list(s)
    while True:
        dup = next((ch for ch in s if s.count(ch) > 1), None)
        if dup is None:
            return x, s
        i = s.index(dup)
        j = s.index(dup, i + 1)
        if x.shape[i] != x.shape[j]:
            raise RuntimeError(
                f"einsum(): subscript {dup} is repeated for operand {k} but the sizes don't match, "
                f"{x.shape[j]} != {x.shape[i]}"
            )
        x = x.diagonal(0, i, j)
        s = [c for k, c in enumerate(s) if k not in (i, j)] + [dup]


def _sum_out(x, s, keep):
    """Sum the subscripts of ``x`` that ``keep`` does not hold."""
    axes = tuple(k for k, ch in enumerate(s) if ch not in keep)
    if not axes:
        return x, s
    return x.sum(axes), [ch for ch in s if ch in keep]


def _sizes(pairs):
    """Subscript -> size over (subscripts, tensor) pairs; size-1 dimensions broadcast."""
    size = {}
    for k, (s, x) in enumerate(pairs):
        for ch, n in zip(s, x.shape):
            if size.get(ch, 1) == 1:
                size[ch] = n
            elif n not in (1, size[ch]):
                raise RuntimeError(
                    f"einsum(): subscript {ch} has size {n} for operand {k} which does not broadcast "
                    f"with previously seen size {size[ch]}"
                )
    return size


def _pair(a, sa, b, sb, keep):
    """Contract two operands with distinct subscripts into one with the subscripts in ``keep``
    that either carries: a batched matrix product."""
    size = _sizes([(sa, a), (sb, b)])
    batch = [ch for ch in sa if ch in sb and ch in keep]
    summed = [ch for ch in sa if ch in sb and ch not in keep]
    left = [ch for ch in sa if ch not in sb]
    right = [ch for ch in sb if ch not in sa]

    def arrange(x, s, order):
        x = x.permute(*[s.index(ch) for ch in order]) if order != s else x
        full = tuple(size[ch] for ch in order)
        return x.expand(*full) if tuple(x.shape) != full else x

    def n(chars):
        return math.prod(size[ch] for ch in chars)

    lead = (n(batch),) if batch else ()  # no batch: a plain matrix product (MKL takes those)
    a = arrange(a, sa, batch + left + summed).reshape(*lead, n(left), n(summed))
    b = arrange(b, sb, batch + summed + right).reshape(*lead, n(summed), n(right))
    out = a.matmul(b).reshape(*[size[ch] for ch in batch + left + right])
    return out, batch + left + right


def einsum(equation, *operands):
    """Sum the products of the operands' elements over the indices the ``equation`` does not
    keep (``'ij,jk->ik'`` is a matrix product; without ``->``, the output keeps the indices used
    once, in alphabetical order). ``...`` stands for broadcast dimensions; operands may be
    given as one list.

    ```python
    >>> import ngrad
    >>> x = ngrad.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> ngrad.einsum("ij,ij->i", x, x).sum().backward()
    >>> x.grad
    tensor([[2., 4.],
            [6., 8.]])

    ```
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    operands = [to_tensor(op) for op in operands]
    subs, out = _parse(equation, operands)
    xs = [_distinct(x, s, k) for k, (x, s) in enumerate(zip(operands, subs))]
    _sizes([(s, x) for x, s in xs])  # every operand fits before any work
    for k, (x, s) in enumerate(xs):
        later = set(out).union(*[subs[j] for j in range(len(subs)) if j != k])
        xs[k] = _sum_out(x, s, later)
    x, s = xs[0]
    for k in range(1, len(xs)):
        b, sb = xs[k]
        keep = set(out).union(*[t for _, t in xs[k + 1 :]])
        x, s = _sum_out(x, s, keep | set(sb))
        b, sb = _sum_out(b, sb, keep | set(s))
        x, s = _pair(x, s, b, sb, keep)
    x, s = _sum_out(x, s, set(out))
    return x.permute(*[s.index(ch) for ch in out]) if s != out else x


def tensordot(a, b, dims=2):
    """Contract the last ``dims`` dimensions of ``a`` with the first ``dims`` of ``b``, or the
    dimension lists ``dims = (dims_a, dims_b)`` pairwise.

    ```python
    >>> import ngrad
    >>> ngrad.tensordot(ngrad.ones(2, 3, 4), ngrad.ones(3, 4, 5)).shape
    ngrad.Size([2, 5])

    ```
    """
    a, b = to_tensor(a), to_tensor(b)
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
        if len(da) != len(db):
            raise RuntimeError("both dimension lists should have same length")
        da, db = [normalize_dim(d, a.ndim) for d in da], [normalize_dim(d, b.ndim) for d in db]
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise RuntimeError(
                f"contracted dimensions need to match, but first has size {a.shape[i]} in dim {i} "
                f"and second has size {b.shape[j]} in dim {j}"
            )
    sa = [chr(0x100 + k) for k in range(a.ndim)]
    sb = [chr(0x200 + k) for k in range(b.ndim)]
    for i, j in zip(da, db):
        sb[j] = sa[i]
    keep = [ch for k, ch in enumerate(sa) if k not in da] + [ch for k, ch in enumerate(sb) if k not in db]
    x, s = _pair(a, sa, b, sb, set(keep))
    return x.permute(*[s.index(ch) for ch in keep]) if s != keep else x


def inner(input, other):
    """Sum of products over the last dimension of both (a product when one is 0-d)."""
    input, other = to_tensor(input), to_tensor(other)
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    return tensordot(input, other, ([-1], [-1]))
