"""Higher-level derivatives of Python functions, as ``torch.autograd.functional``.

``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``vhp`` and ``hvp`` take a function of tensors and
the point (a tensor or a tuple of tensors) and follow PyTorch's signatures, output structure
and errors. They are built on the same programs as everything else: ``jacobian(...,
vectorize=True)`` runs one batched reverse program (``is_grads_batched``), forward mode
(``strategy="forward-mode"``, ``jvp``) runs the tangent tape, and ``vhp`` and ``hvp`` are one
reverse-over-reverse program each.
"""

from .. import grad_mode
from ..engine.ir.graph import lower, replay
from ..engine.runtime.realize import realize
from ..engine.transform.batch import batch
from ..engine.transform.differentiate import jvp as _jvp_tape
from ..tensor.core import Tensor
from ..tensor.record import wrap
from . import forward_ad
from .meta import NO_META
from .reverse import grad as _grad

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp", "batched_jvp"]


def _as_tuple(x, arg, fn):
    if isinstance(x, tuple):
        is_tuple = True
    elif isinstance(x, list):
        x, is_tuple = tuple(x), True
    else:
        x, is_tuple = (x,), False
    for i, t in enumerate(x):
        if not isinstance(t, Tensor):
            if is_tuple:
                raise TypeError(
                    f"The {arg} given to {fn} must be either a Tensor or a tuple of Tensors but the value "
                    f"at index {i} has type {type(t).__name__}."
                )
            raise TypeError(
                f"The {arg} given to {fn} must be either a Tensor or a tuple of Tensors but the given "
                f"{arg} has type {type(t).__name__}."
            )
    return is_tuple, x


def _prepare(inputs, create_graph):
    """Fresh tensors that require grad at the values of ``inputs`` (with ``create_graph`` an
    input that already requires grad keeps its history, so the result can be differentiated)."""
    out = []
    for t in inputs:
        if create_graph and t.requires_grad:
            with grad_mode.enable_grad():
                out.append(t.view_as(t))
        else:
            out.append(t.detach().requires_grad_(t.dtype.differentiable))
    return tuple(out)


def _post(xs, create_graph):
    """Detach results unless a graph was asked for; keeps the tuple structure (nested too)."""
    if isinstance(xs, tuple):
        return tuple(_post(x, create_graph) for x in xs)
    if xs is None or create_graph:
        return xs
    return xs.detach()


def _unpack(xs, is_tuple):
    return xs if is_tuple else xs[0]


def _unpack2(xs, out_tuple, in_tuple):
    if not out_tuple:
        xs = xs[0]
        return xs if in_tuple else xs[0]
    return xs if in_tuple else tuple(x[0] for x in xs)


def _validate_v(v, other, is_other_tuple):
    if len(other) != len(v):
        if is_other_tuple:
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}.")
        raise RuntimeError("The given v should contain a single Tensor.")
    for i, (a, b) in enumerate(zip(v, other)):
        if a.shape != b.shape:
            prepend = f"Entry {i} in " if is_other_tuple else ""
            raise RuntimeError(f"{prepend}v has invalid size: should be {b.shape} but got {a.shape}.")


def _call(func, inputs, fn):
    with grad_mode.enable_grad():
        out = func(*inputs)
    if isinstance(out, list):
        out = tuple(out)
    is_tuple, out = _as_tuple(out, "outputs of the user-provided function", fn)
    return is_tuple, out


def _zeros_for(t):
    from ..factories import zeros_like

    return zeros_like(t)


STRICT_REQUIRES_GRAD = {
    "outputs": (
        "Output {i} of the user-provided function does not require gradients. The outputs must be computed "
        "in a differentiable manner from the input when running in strict mode."
    ),
    "grad_inputs": (
        "The gradient with respect to input {i} is independent of the inputs of the user-provided function. "
        "This is not allowed in strict mode."
    ),
    "jacobian": (
        "While computing the hessian, found that the jacobian of the user-provided function with respect to "
        "input {i} is independent of the input. This is not allowed in strict mode. You should ensure that "
        "your function is twice differentiable and that the jacobian depends on the inputs (this would be "
        "violated by a linear function for example)."
    ),
}
STRICT_NONE = {
    "back": "The output of the user-provided function is independent of input {i}. This is not allowed in strict mode.",
    "back_trick": (
        "The gradient with respect to the input is independent of entry {i} in the grad_outputs when using "
        "the double backward trick to compute forward mode gradients. This is not allowed in strict mode."
    ),
    "double_back": (
        "The jacobian of the user-provided function is independent of input {i}. This is not allowed in strict mode."
    ),
    "double_back_trick": (
        "The hessian of the user-provided function is independent of entry {i} in the grad_jacobian. This is "
        "not allowed in strict mode as it prevents from using the double backward trick to replace forward "
        "mode AD."
    ),
}


def _require_grad(tensors, kind, strict):
    """PyTorch's strict-mode check of intermediate results: each exists and requires grad
    (``kind`` names what they are: "outputs", "grad_inputs" or "jacobian")."""
    if not strict:
        return
    for i, t in enumerate(tensors):
        if t is None:
            raise RuntimeError(STRICT_NONE["back"].format(i=i))
        if not t.requires_grad:
            raise RuntimeError(STRICT_REQUIRES_GRAD[kind].format(i=i))


def _fill_zeros(grads, refs, strict, create_graph, stage):
    """Zeros for the results nothing reached, PyTorch's strict-mode errors for them (worded
    by ``stage``: "back", "back_trick", "double_back", "double_back_trick"), and with
    ``create_graph`` for results that cannot be differentiated again."""
    res = []
    for i, (g, ref) in enumerate(zip(grads, refs)):
        if g is None:
            if strict:
                raise RuntimeError(STRICT_NONE[stage].format(i=i))
            g = _zeros_for(ref)
        elif strict and create_graph and not g.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise RuntimeError(
                f"The {what} of the user-provided function is independent of input {i}. This is not allowed in "
                f"strict mode when create_graph=True."
            )
        res.append(g)
    return tuple(res)


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T J)``: the vector-Jacobian product at ``inputs``.

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.functional import vjp
    >>> vjp(lambda x: x ** 2, ngrad.tensor([1.0, 3.0]), ngrad.tensor([1.0, 1.0]))
    (tensor([1., 9.]), tensor([2., 6.]))

    ```
    """
    with grad_mode.enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _prepare(inputs, create_graph)
        out_tuple, outputs = _call(func, inputs, "vjp")
        _require_grad(outputs, "outputs", strict)
        if v is not None:
            _, v = _as_tuple(v, "v", "vjp")
            _validate_v(v, outputs, out_tuple)
        elif len(outputs) != 1 or outputs[0].numel() != 1:
            raise RuntimeError(
                "The vector v can only be None if the user-provided function returns a single "
                "Tensor with a single element."
            )
        live = [i for i, o in enumerate(outputs) if o.requires_grad]
        grads = (None,) * len(inputs)
        if live:
            grads = _grad(
                [outputs[i] for i in live],
                inputs,
                None if v is None else [v[i] for i in live],
                create_graph=create_graph,
                allow_unused=True,
            )
        grads = _fill_zeros(grads, inputs, strict, create_graph, "back")
    return _post(_unpack(outputs, out_tuple), create_graph), _post(_unpack(grads, in_tuple), create_graph)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), J v)``: the Jacobian-vector product, by forward mode.

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.functional import jvp
    >>> jvp(lambda x: x.sin() * 2, ngrad.tensor([0.0, 1.0]), ngrad.tensor([1.0, 0.0]))
    (tensor([0.0000, 1.6829]), tensor([2., 0.]))

    ```
    """
    in_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
    if v is not None:
        _, v = _as_tuple(v, "v", "jvp")
        _validate_v(v, inputs, in_tuple)
    elif len(inputs) != 1 or inputs[0].numel() != 1:
        raise RuntimeError(
            "The vector v can only be None if the input to the user-provided function is a single "
            "Tensor with a single element."
        )
    else:
        from ..factories import ones_like

        v = (ones_like(inputs[0]),)
    inputs = _prepare(inputs, create_graph)
    # strict mode asks which outputs and inputs are connected: the outputs are recorded then
    with grad_mode.set_grad_enabled(create_graph or strict), forward_ad.dual_level():
        duals = tuple(forward_ad.make_dual(x, t) for x, t in zip(inputs, v))
        out_tuple, outputs = _call(func, duals, "jvp")
        unpacked = [forward_ad.unpack_dual(o) for o in outputs]
    if strict:
        _require_grad(outputs, "outputs", strict)
        with grad_mode.enable_grad():
            reached = _grad(outputs, duals, [_zeros_for(o) for o in outputs], retain_graph=True, allow_unused=True)
        for i, g in enumerate(reached):
            if g is None:
                raise RuntimeError(STRICT_NONE["back"].format(i=i))
    res = _fill_zeros([t for _, t in unpacked], outputs, strict, create_graph, "back_trick")
    return (
        _post(_unpack(tuple(outputs), out_tuple), create_graph),
        _post(_unpack(tuple(res), out_tuple), create_graph),
    )


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``: for output ``i`` and input ``j``, a tensor of shape
    ``outputs[i].shape + inputs[j].shape`` (tuples of tuples when either side is a tuple).

    ``vectorize=True`` computes all rows in one batched program instead of one reverse pass per
    output element; ``strategy="forward-mode"`` (which needs ``vectorize=True``) computes all
    columns in one batched tangent program.

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.functional import jacobian
    >>> jacobian(lambda x: x ** 2, ngrad.tensor([1.0, 3.0]), vectorize=True)
    tensor([[2., 0.],
            [0., 6.]])

    ```
    """
    if strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError(
            'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your function '
            'has more outputs than inputs, "forward-mode" tends to be more performant. Otherwise, prefer '
            'to use "reverse-mode".'
        )
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError(
                "torch.autograd.functional.jacobian: `create_graph=True` and "
                '`strategy="forward-mode"` are not supported together (yet). Please either '
                'set `create_graph=False` or make sure to use `strategy="reverse-mode"`.'
            )
        if strict:
            raise RuntimeError(
                'torch.autograd.functional.jacobian: `strict=True` and `strategy="forward-mode"` are not '
                'supported together (yet). Please either set `strict=False` or `strategy="reverse-mode"`.'
            )
        if not vectorize:
            raise NotImplementedError(
                "Computing Jacobian using forward-AD or forward-over-reverse Hessian is only "
                "implemented for `vectorize=True`."
            )
    with grad_mode.enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _prepare(inputs, create_graph)
        out_tuple, outputs = _call(func, inputs, "jacobian")
        _require_grad(outputs, "outputs", strict)
        if vectorize and strict:  # PyTorch checks the outputs first
            raise RuntimeError(
                "torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not supported "
                "together. Please either set `strict=False` or `vectorize=False`."
            )
        if strategy == "forward-mode":
            jac = _jacobian_forward(outputs, inputs)
        else:
            jac = tuple(_jacobian_rows(o, i, inputs, create_graph, strict, vectorize) for i, o in enumerate(outputs))
    return _post(_unpack2(jac, out_tuple, in_tuple), create_graph)


def _jacobian_rows(out, i, inputs, create_graph, strict, vectorize):
    """The Jacobian blocks of one output: one batched reverse pass, or one per element."""
    from ..factories import eye, zeros
    from ..tensor import stack

    n = out.numel()
    shape = tuple(out.shape)
    if not out.requires_grad:  # (strict mode has refused it already)
        return tuple(zeros(shape + tuple(x.shape), dtype=x.dtype) for x in inputs)
    if vectorize:
        seeds = eye(n, dtype=out.dtype, device=out.device).reshape((n,) + shape)
        grads = _grad(
            out, inputs, seeds, retain_graph=True, create_graph=create_graph, allow_unused=True, is_grads_batched=True
        )
        return tuple(
            zeros(shape + tuple(x.shape), dtype=x.dtype) if g is None else g.reshape(shape + tuple(x.shape))
            for g, x in zip(grads, inputs)
        )
    rows = [[] for _ in inputs]
    flat = out.reshape(-1)
    for k in range(n):
        grads = _grad(flat[k], inputs, retain_graph=True, create_graph=create_graph, allow_unused=True)
        for j, (g, x) in enumerate(zip(grads, inputs)):
            if g is not None and strict and create_graph and not g.requires_grad:
                raise RuntimeError(
                    f"The jacobian of the user-provided function is independent of input {j}. This is not "
                    f"allowed in strict mode when create_graph=True."
                )
            if g is None:
                if strict:
                    raise RuntimeError(
                        f"Output {i} of the user-provided function is independent of input {j}. This "
                        f"is not allowed in strict mode."
                    )
                g = zeros(tuple(x.shape), dtype=x.dtype)
            rows[j].append(g)
    return tuple(
        stack(r).reshape(shape + tuple(x.shape)) if r else zeros(shape + tuple(x.shape), dtype=x.dtype)
        for r, x in zip(rows, inputs)
    )


def batched_jvp(outputs, inputs, tangents):
    """Tangents of ``outputs`` (tensors computed from ``inputs``) for a batch of input
    tangents, as one batched tangent program: ``tangents[k]`` has shape ``(B,) +
    inputs[k].shape`` (or is None); returns one ``(B,) + outputs[i].shape`` tensor per output,
    or None where no tangent reaches it. Custom Functions' ``jvp`` cannot be batched this way:
    a graph through one is an error (compute its tangents one by one with ``forward_ad``)."""
    roots = [o._node for o in outputs]
    sources = [x._node for x in inputs]
    depends = forward_ad.dependents(roots, set(sources))
    custom = next((n for n in depends if (n.meta or NO_META).ctx is not None), None)
    if custom is not None:
        raise RuntimeError(
            f"batched forward-mode derivatives do not go through the custom Function node "
            f"{custom.meta.name}: its jvp is called on one tangent at a time (use forward_ad, or "
            f"jacobian(..., strategy='reverse-mode'))"
        )
    realize(sources)
    low = lower(roots, cuts=set(sources), recompute=depends)
    wrt, seeds, size = [], [], None
    for x, t in zip(inputs, tangents):
        slot = low.slot_of.get(x._node)
        if t is not None and slot is not None and slot in low.tape.inputs:
            wrt.append(slot)
            seeds.append(t._node)
            size = t.shape[0]
    tan = _jvp_tape(low.tape, wrt) if wrt else None
    if tan is None or not any(p is not None for p in tan.tangents):
        return [None] * len(outputs)
    tape, batched = batch(tan.tape, set(tan.inputs), size)
    nodes = replay(tape, low.sources + seeds, False)
    return [wrap(nodes[p]) if p is not None and batched[p] else None for p in tan.tangents]


def _jacobian_forward(outputs, inputs):
    """All Jacobian columns as one batched tangent program (basis tangents of every input)."""
    from ..factories import eye, zeros
    from ..tensor import cat

    sizes = [x.numel() for x in inputs]
    total = sum(sizes)
    tangents, start = [], 0
    for x, n in zip(inputs, sizes):
        block = cat(
            [zeros((start, n), dtype=x.dtype), eye(n, dtype=x.dtype), zeros((total - start - n, n), dtype=x.dtype)]
        )
        tangents.append(block.reshape((total,) + tuple(x.shape)))
        start += n
    result = []
    for o, t in zip(outputs, batched_jvp(outputs, inputs, tangents)):
        row, start = [], 0
        for x, n in zip(inputs, sizes):
            shape = tuple(o.shape) + tuple(x.shape)
            if t is None:
                row.append(zeros(shape, dtype=o.dtype))
            else:
                block = t[start : start + n]  # (n, *out)
                k = len(x.shape)
                perm = tuple(range(k, k + o.ndim)) + tuple(range(k))
                row.append(block.reshape(tuple(x.shape) + tuple(o.shape)).permute(perm))
            start += n
        result.append(tuple(row))
    return tuple(result)


def _scalar_function(func, fn, strict):
    def f(*inputs):
        out = func(*inputs)
        is_tuple, t = _as_tuple(
            tuple(out) if isinstance(out, list) else out, "outputs of the user-provided function", fn
        )
        _require_grad(t, "outputs", strict)
        if is_tuple or not isinstance(out, Tensor):
            raise RuntimeError(f"The function given to {fn} should return a single Tensor")
        if out.numel() != 1:
            raise RuntimeError(f"The Tensor returned by the function given to {fn} should contain a single element")
        return out.squeeze()

    return f


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a scalar function: for inputs ``i`` and ``j``, a tensor of shape
    ``inputs[i].shape + inputs[j].shape`` (a tuple of tuples for tuple inputs).

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.functional import hessian
    >>> hessian(lambda x: (x ** 3).sum(), ngrad.tensor([1.0, 2.0]), vectorize=True)
    tensor([[ 6.,  0.],
            [ 0., 12.]])

    ```
    """
    in_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode".')
    f = _scalar_function(func, "hessian", strict)

    def gradient(*xs):
        out = f(*xs)
        if not out.requires_grad:
            return tuple(_zeros_for(x) for x in xs)
        jac = _grad(out, xs, create_graph=True, allow_unused=True)
        jac = tuple(_zeros_for(x) if g is None else g for g, x in zip(jac, xs))  # zeros that need no grad
        _require_grad(jac, "jacobian", strict)
        return jac

    res = jacobian(
        gradient,
        inputs,
        create_graph=create_graph,
        strict=strict,
        vectorize=vectorize,
        strategy=outer_jacobian_strategy,
    )
    return res if in_tuple else res[0][0]


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T H)`` for a scalar function: reverse over reverse, one program.

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.functional import vhp
    >>> vhp(lambda x: (x ** 3).sum(), ngrad.tensor([1.0, 2.0]), ngrad.tensor([1.0, 1.0]))
    (tensor(9.), tensor([ 6., 12.]))

    ```
    """
    return _hessian_product(func, inputs, v, create_graph, strict, "vhp")


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), H v)`` for a scalar function.

    The Hessian of a twice continuously differentiable function is symmetric, so ``H v`` is
    ``v^T H``: ``hvp`` runs the reverse-over-reverse program of ``vhp`` (about two gradient
    evaluations), where forward over reverse costs about 2.6 and PyTorch's double-backward
    trick three. The two can differ only on the measure-zero sets where ``func`` is not twice
    differentiable (the kink of ``abs``, ties of ``maximum``).

    ```python
    >>> import ngrad
    >>> from ngrad.autograd.functional import hvp
    >>> hvp(lambda x: (x ** 3).sum(), ngrad.tensor([1.0, 2.0]), ngrad.tensor([1.0, 0.0]))
    (tensor(9.), tensor([6., 0.]))

    ```
    """
    return _hessian_product(func, inputs, v, create_graph, strict, "hvp")


def _hessian_product(func, inputs, v, create_graph, strict, fn):
    in_tuple, inputs = _as_tuple(inputs, "inputs", fn)
    if v is not None:
        _, v = _as_tuple(v, "v", fn)
        _validate_v(v, inputs, in_tuple)
    elif len(inputs) != 1 or inputs[0].numel() != 1:
        raise RuntimeError(
            "The vector v can only be None if the input to the user-provided function is a single "
            "Tensor with a single element."
        )
    else:
        from ..factories import ones_like

        v = (ones_like(inputs[0]),)
    f = _scalar_function(func, fn, strict)
    inputs = _prepare(inputs, create_graph)
    with grad_mode.enable_grad():
        out = f(*inputs)
        grads = (None,) * len(inputs)
        if out.requires_grad:
            grads = _grad(out, inputs, create_graph=True, allow_unused=True)
        _require_grad(grads, "jacobian", strict)
        live = [(g, t) for g, t in zip(grads, v) if g is not None and g.requires_grad]
        res = (None,) * len(inputs)
        if live:
            res = _grad(
                [g for g, _ in live], inputs, [t for _, t in live], create_graph=create_graph, allow_unused=True
            )
        # PyTorch's hvp is a double-backward trick; its strict errors name that stage
        res = _fill_zeros(res, inputs, strict, create_graph, "double_back" if fn == "vhp" else "double_back_trick")
    return _post(out, create_graph), _post(_unpack(res, in_tuple), create_graph)
