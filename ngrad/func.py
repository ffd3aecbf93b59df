"""``ngrad.func``: function transforms (``grad``, ``value_and_grad``, ``vjp``, ``jvp``, ``hessian``)
and ``functional_call`` (a module run with other parameters and buffers).

Each takes a plain Python function of tensors and returns a function that computes a derivative
through ngrad's reverse mode, the way ``torch.func`` and JAX spell it. They are eager (any
Python control flow works) and compose with ``ngrad.compile``: ``ngrad.compile(
ngrad.func.value_and_grad(f))`` traces once and replays one fused program per call.
"""

from . import grad_mode as _grad_mode
from .autograd.reverse import grad as _grad
from .tensor import Tensor

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "hessian", "functional_call"]


def _argnums(argnums, n):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise RuntimeError("argnums must be non-empty")
    for a in nums:
        if not -n <= a < n:
            raise RuntimeError(f"Got argnums={argnums} but only {n} positional inputs")
    return tuple(a % n for a in nums), isinstance(argnums, int)


def _leaves(tree):
    """Tensors of a nested tuple/list/dict, in order."""
    if isinstance(tree, Tensor):
        return [tree]
    if isinstance(tree, (tuple, list)):
        return [t for x in tree for t in _leaves(x)]
    if isinstance(tree, dict):
        return [t for k in tree for t in _leaves(tree[k])]
    return []


def _rebuild(tree, values):
    if isinstance(tree, Tensor):
        return next(values)
    if isinstance(tree, (tuple, list)):
        return type(tree)(_rebuild(x, values) for x in tree)
    if isinstance(tree, dict):
        return {k: _rebuild(tree[k], values) for k in tree}
    return tree


def _fresh(tree):
    """The same tree with each tensor replaced by a detached copy that requires grad."""
    return _rebuild(tree, iter([t.detach().requires_grad_() for t in _leaves(tree)]))


def _connected(tree):
    """The same tree with each tensor replaced by a copy that requires grad and stays on the
    graph of the original (a clone where it requires grad, a detached copy elsewhere)."""
    return _rebuild(tree, iter([t.clone() if t.requires_grad else t.detach().requires_grad_() for t in _leaves(tree)]))


def _record(func, primals, has_aux):
    """Call ``func`` on fresh copies of ``primals`` that require grad: (copies, output, aux,
    output tensors, input tensors)."""
    primals = [_fresh(p) for p in primals]
    with _grad_mode.enable_grad():
        out = func(*primals)
    aux = None
    if has_aux:
        out, aux = out
    return primals, out, aux, _leaves(out), [t for p in primals for t in _leaves(p)]


def _detached(out, outs):
    return _rebuild(out, iter([t.detach() for t in outs]))


def value_and_grad(func, argnums=0, has_aux=False):
    """``f -> (lambda *args: (f(*args), gradient of f w.r.t. args[argnums]))``.

    ``func`` returns a one-element tensor (or ``(output, aux)`` with ``has_aux=True``); the
    gradient has the structure of the chosen arguments (a tuple for a tuple of argnums).

    ```python
    >>> import ngrad
    >>> vg = ngrad.func.value_and_grad(lambda x: (x ** 3).sum())
    >>> vg(ngrad.tensor([1.0, 2.0]))
    (tensor(9.), tensor([ 3., 12.]))

    ```
    """

    def wrapper(*args, **kwargs):
        nums, single = _argnums(argnums, len(args))
        args = list(args)
        # an argument that requires grad under an outer differentiation (``autograd.grad`` of
        # ``grad(f)(x)``) stays connected to it, as torch.func's levels keep it
        outer = _grad_mode.is_grad_enabled() and _grad_mode.state.trace is None
        nested = outer and any(t.requires_grad for a in nums for t in _leaves(args[a]))
        for a in nums:
            args[a] = _connected(args[a]) if nested else _fresh(args[a])
        with _grad_mode.enable_grad():
            out = func(*args, **kwargs)
        aux = None
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise RuntimeError(
                    "value_and_grad(f)(*args): output of function f should be a tuple: (output, aux) if has_aux is True"
                )
            out, aux = out
        if not isinstance(out, Tensor):
            raise RuntimeError(
                f"value_and_grad(f)(*args): Expected f(*args) to return a Tensor, got {type(out).__name__}"
            )
        if out.numel() != 1:
            raise RuntimeError(
                f"value_and_grad(f)(*args): Expected f(*args) to return a scalar Tensor, got tensor "
                f"with {out.dim()} dims. Maybe you wanted to use the vjp or jacrev APIs instead?"
            )
        wrt = [t for a in nums for t in _leaves(args[a])]
        create = nested or (
            outer and any(t.requires_grad for a in range(len(args)) if a not in nums for t in _leaves(args[a]))
        )
        grads = iter(_grad(out, wrt, allow_unused=True, materialize_grads=True, create_graph=create))
        gtrees = tuple(_rebuild(args[a], grads) for a in nums)
        value = out if create else out.detach()
        g = gtrees[0] if single else gtrees
        return ((value, aux), g) if has_aux else (value, g)

    return wrapper


def grad(func, argnums=0, has_aux=False):
    """``f -> gradient of f`` (see ``value_and_grad``).

    ```python
    >>> import ngrad
    >>> ngrad.func.grad(lambda x: (x.sin() * 2).sum())(ngrad.tensor([0.0]))
    tensor([2.])

    ```
    """
    vg = value_and_grad(func, argnums, has_aux)

    def wrapper(*args, **kwargs):
        if has_aux:
            (_, aux), g = vg(*args, **kwargs)
            return g, aux
        return vg(*args, **kwargs)[1]

    return wrapper


def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn)``; ``vjp_fn(cotangents)`` returns one gradient per primal.

    ```python
    >>> import ngrad
    >>> out, vjp_fn = ngrad.func.vjp(lambda x: x * x, ngrad.tensor([1.0, 3.0]))
    >>> vjp_fn(ngrad.tensor([1.0, 1.0]))
    (tensor([2., 6.]),)

    ```
    """
    primals, out, aux, outs, wrt = _record(func, primals, has_aux)

    def vjp_fn(cotangents, retain_graph=True, create_graph=False):
        cts = _leaves(cotangents)
        if len(cts) != len(outs):
            raise RuntimeError(f"Expected {len(outs)} cotangents, got {len(cts)}")
        grads = iter(
            _grad(
                outs,
                wrt,
                cts,
                retain_graph=retain_graph,
                create_graph=create_graph,
                allow_unused=True,
                materialize_grads=True,
            )
        )
        return tuple(_rebuild(p, grads) for p in primals)

    detached = _detached(out, outs)
    return (detached, vjp_fn, aux) if has_aux else (detached, vjp_fn)


def jvp(func, primals, tangents, has_aux=False):
    """``(func(*primals), J @ tangents)``: a forward-mode product, computed as the reverse mode
    of a reverse mode (the VJP is linear in its cotangent, so differentiating it again in the
    cotangent gives the JVP).

    ```python
    >>> import ngrad
    >>> ngrad.func.jvp(lambda x: x ** 2, (ngrad.tensor([1.0, 3.0]),), (ngrad.tensor([1.0, 0.5]),))
    (tensor([1., 9.]), tensor([2., 3.]))

    ```
    """
    from .factories import zeros_like

    if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to be tuples")
    if len(primals) != len(tangents):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have the same length")
    _, out, aux, outs, wrt = _record(func, primals, has_aux)
    with _grad_mode.enable_grad():
        dummies = [zeros_like(o).requires_grad_() for o in outs]
        gs = _grad(outs, wrt, dummies, create_graph=True, allow_unused=True, materialize_grads=True)
        tan = [t for tg in tangents for t in _leaves(tg)]
        for t, w in zip(tan, wrt):
            if t.shape != w.shape:
                raise RuntimeError(
                    f"jvp(f, primals, tangents): Expected primals and tangents to have the same "
                    f"shape, got {list(w.shape)} and {list(t.shape)}"
                )
        inner = [(g * t).sum() for g, t in zip(gs, tan) if g.requires_grad]
        total = inner[0]
        for x in inner[1:]:
            total = total + x
        jv = _grad(total, dummies, allow_unused=True, materialize_grads=True)
    value = _detached(out, outs)
    jout = _rebuild(out, iter(jv))
    return (value, jout, aux) if has_aux else (value, jout)


def hessian(func, argnums=0):
    """``f -> Hessian of f`` for a scalar ``f`` of one tensor argument: shape ``x.shape * 2``.

    ```python
    >>> import ngrad
    >>> ngrad.func.hessian(lambda x: (x ** 3).sum())(ngrad.tensor([1.0, 2.0]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])

    ```
    """
    from .factories import eye

    def wrapper(*args):
        nums, single = _argnums(argnums, len(args))
        if not single:
            raise NotImplementedError("hessian: argnums must be a single int")
        args = list(args)
        x = args[nums[0]] = args[nums[0]].detach().requires_grad_()
        with _grad_mode.enable_grad():
            out = func(*args)
            if out.numel() != 1:
                raise RuntimeError("hessian: expected func to return a scalar tensor")
            (g,) = _grad(out, x, create_graph=True)
            n = x.numel()
            basis = eye(n, dtype=x.dtype)
            (h,) = _grad(g.reshape(-1), x, basis, is_grads_batched=True, allow_unused=True, materialize_grads=True)
        return h.detach().reshape(tuple(x.shape) * 2)

    return wrapper


def _tied_names(module):
    """Every name of each parameter and buffer object that more than one name reaches."""
    names = {}
    for table in (module.named_parameters, module.named_buffers):
        for name, t in table(remove_duplicate=False):
            names.setdefault(id(t), []).append(name)
    return {n: group for group in names.values() if len(group) > 1 for n in group}


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """Call ``module`` with the parameters and buffers named in ``parameter_and_buffer_dicts``
    (a dict, or a sequence of dicts with distinct keys) in place of its own, which are put back
    afterwards. ``tie_weights``: a tensor registered under several names takes the given value
    under all of them. ``strict``: every parameter and buffer must be given, and nothing else.

    ```python
    >>> import ngrad
    >>> fc = ngrad.nn.Linear(2, 1)
    >>> w = {"weight": ngrad.ones(1, 2), "bias": ngrad.zeros(1)}
    >>> ngrad.func.functional_call(fc, w, (ngrad.tensor([[1.0, 2.0]]),))
    tensor([[3.]])

    ```
    """
    if isinstance(parameter_and_buffer_dicts, dict):
        given = dict(parameter_and_buffer_dicts)
    else:
        given = {}
        for d in parameter_and_buffer_dicts:
            for k, v in d.items():
                if k in given:
                    raise ValueError(f"{k} appeared in multiple dictionaries; behavior of functional call is ambiguous")
                given[k] = v
    if tie_weights:
        tied = _tied_names(module)
        for name in list(given):
            for other in tied.get(name, ()):
                if other in given and given[other] is not given[name]:
                    raise ValueError(
                        f"functional_call got multiple values for keys {sorted(tied[name])}, which are tied. "
                        "Consider using tie_weights=False"
                    )
                given.setdefault(other, given[name])
    if strict:
        known = [n for n, _ in module.named_parameters(remove_duplicate=False)]
        known += [n for n, _ in module.named_buffers(remove_duplicate=False)]
        errors = []
        unexpected = [k for k in given if k not in known]
        missing = [k for k in known if k not in given]
        if unexpected:
            errors.append("Unexpected key(s): {}.".format(", ".join(map(repr, unexpected))))
        if missing:
            errors.append("Missing key(s): {}.".format(", ".join(map(repr, missing))))
        if errors:
            raise RuntimeError(f"Error(s) in reparametrizing for {module._get_name()}:\n\t" + "\n\t".join(errors))
    args = args if isinstance(args, tuple) else (() if args is None else (args,))
    undo = []
    try:
        for name, value in given.items():
            path, _, attr = name.rpartition(".")
            owner = module.get_submodule(path)
            for table in (owner._parameters, owner._buffers, owner.__dict__):
                if attr in table or table is owner.__dict__:
                    undo.append((table, attr, table.get(attr, _ABSENT)))
                    table[attr] = value
                    break
        return module(*args, **(kwargs or {}))
    finally:
        for table, attr, old in reversed(undo):
            if old is _ABSENT:
                del table[attr]
            else:
                table[attr] = old


_ABSENT = object()
