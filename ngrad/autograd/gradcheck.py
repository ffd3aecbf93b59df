"""``gradcheck`` and ``gradgradcheck``: analytical derivatives against central finite
differences, with PyTorch's defaults, messages and ``fast_mode``."""

import warnings

import numpy as np

from .. import grad_mode
from ..tensor import Tensor
from .reverse import grad as _grad

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]


class GradcheckError(RuntimeError):
    """Raised by ``gradcheck`` and ``gradgradcheck`` when a check fails."""


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _outputs(func, inputs):
    out = func(*inputs)
    return tuple(o for o in _tuple(out) if isinstance(o, Tensor) and o.dtype.is_floating_point)


def _evaluate(func, inputs, i, values):
    """The outputs as float64 arrays with input ``i`` replaced by ``values``."""
    from ..factories import tensor

    args = list(inputs)
    args[i] = tensor(values, dtype=inputs[i].dtype, requires_grad=inputs[i].requires_grad)
    with grad_mode.enable_grad():  # the function may differentiate inside (gradgradcheck)
        return [np.asarray(o.detach().numpy(), dtype=np.float64) for o in _outputs(func, args)]


def _numerical(func, inputs, i, eps):
    """Central differences: one (numel(out), numel(in)) matrix per output."""
    x = inputs[i].detach().numpy().astype(np.float64)
    cols = []
    for j in range(x.size):
        plus, minus = x.copy().reshape(-1), x.copy().reshape(-1)
        plus[j] += eps
        minus[j] -= eps
        fp = _evaluate(func, inputs, i, plus.reshape(x.shape))
        fm = _evaluate(func, inputs, i, minus.reshape(x.shape))
        cols.append([((a - b) / (2 * eps)).reshape(-1) for a, b in zip(fp, fm)])
    return (
        [np.stack([c[k] for c in cols], axis=1) if cols else np.zeros((0, 0)) for k in range(len(cols[0]))]
        if cols
        else []
    )


def _analytical(outputs, inputs, diff):
    """One (numel(out), numel(in)) matrix per (output, differentiable input), by one batched
    reverse pass per output."""
    from ..factories import eye

    result = []
    for o in outputs:
        n = o.numel()
        row = []
        if not o.requires_grad or n == 0:
            for i in diff:
                row.append(np.zeros((n, inputs[i].numel())))
            result.append(row)
            continue
        seeds = eye(n, dtype=o.dtype).reshape((n,) + tuple(o.shape))
        gs = _grad(o, [inputs[i] for i in diff], seeds, retain_graph=True, allow_unused=True, is_grads_batched=True)
        for i, g in zip(diff, gs):
            m = inputs[i].numel()
            row.append(np.zeros((n, m)) if g is None else g.detach().numpy().astype(np.float64).reshape(n, m))
        result.append(row)
    return result


def _fail(msg, raise_exception):
    if raise_exception:
        raise GradcheckError(msg)
    return False


def gradcheck(
    func,
    inputs,
    *,
    eps=1e-6,
    atol=1e-5,
    rtol=1e-3,
    raise_exception=True,
    nondet_tol=0.0,
    check_undefined_grad=True,
    check_grad_dtypes=False,
    check_batched_grad=False,
    check_backward_ad=True,
    check_forward_ad=False,
    fast_mode=False,
):
    """Check the gradients of ``func`` at ``inputs`` (the tensors that require grad) against
    central finite differences: every Jacobian entry (or, with ``fast_mode``, random
    projections ``v^T J u``) must satisfy ``|analytical - numerical| <= atol + rtol *
    |numerical|``. Returns True, or raises ``GradcheckError`` (returns False when
    ``raise_exception=False``). Use float64 inputs.

    ```python
    >>> import ngrad
    >>> x = ngrad.randn(3, dtype=ngrad.float64, requires_grad=True)
    >>> ngrad.autograd.gradcheck(lambda t: (t.sin() * t).sum(), (x,))
    True

    ```
    """
    inputs = _tuple(inputs)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not diff:
        raise ValueError(
            "gradcheck expects at least one input tensor to require gradient, but none of the them "
            "have requires_grad=True."
        )
    for i in diff:
        if inputs[i].dtype.itemsize < 8:
            warnings.warn(
                f"Input #{i} requires gradient and is not a double precision floating point or complex. "
                f"This check will likely fail if all the inputs are not of double precision floating point "
                f"or complex. ",
                UserWarning,
                stacklevel=2,
            )
    with grad_mode.enable_grad():
        outputs = _outputs(func, inputs)
    if not outputs:
        return _fail("gradcheck: the function returned no floating-point tensor to check", raise_exception)
    if fast_mode:
        ok = _fast(func, inputs, outputs, diff, eps, atol, rtol, raise_exception, check_forward_ad, check_backward_ad)
    else:
        ok = _slow(func, inputs, outputs, diff, eps, atol, rtol, raise_exception, check_forward_ad, check_backward_ad)
    if ok is not True:
        return ok
    if check_undefined_grad and check_backward_ad:
        with grad_mode.enable_grad():
            outs = [o for o in _outputs(func, inputs) if o.requires_grad]
        if outs:
            from ..factories import zeros_like

            gs = _grad(outs, [inputs[i] for i in diff], [zeros_like(o) for o in outs], allow_unused=True)
            if any(g is not None and np.any(g.detach().numpy() != 0) for g in gs):
                return _fail(
                    "Expected backward function to handle undefined output grads: zero output gradients "
                    "gave a nonzero input gradient.",
                    raise_exception,
                )
    return True


def _mismatch(kind, o, i, numerical, analytical):
    return (
        f"{kind}Jacobian mismatch for output {o} with respect to input {i},\n"
        f"numerical:{_wrap_array(numerical)}\nanalytical:{_wrap_array(analytical)}\n"
    )


def _wrap_array(a):
    from ..factories import tensor

    return tensor(a)


def _close(a, n, atol, rtol):
    return np.allclose(a, n, rtol=rtol, atol=atol)


def _slow(func, inputs, outputs, diff, eps, atol, rtol, raise_exception, check_forward_ad, check_backward_ad):
    numerical = {i: _numerical(func, inputs, i, eps) for i in diff}
    if check_backward_ad:
        analytical = _analytical(outputs, inputs, diff)
        for o in range(len(outputs)):
            for k, i in enumerate(diff):
                if not _close(analytical[o][k], numerical[i][o], atol, rtol):
                    return _fail(_mismatch("", o, i, numerical[i][o], analytical[o][k]), raise_exception)
    if check_forward_ad:
        from .functional import jacobian

        jac = jacobian(
            lambda *xs: _outputs(func, list(_replace(inputs, diff, xs))),
            tuple(inputs[i] for i in diff),
            vectorize=True,
            strategy="forward-mode",
        )
        for o in range(len(outputs)):
            for k, i in enumerate(diff):
                a = jac[o][k].numpy().astype(np.float64).reshape(outputs[o].numel(), inputs[i].numel())
                if not _close(a, numerical[i][o], atol, rtol):
                    return _fail(
                        _mismatch("Jacobian computed with forward mode mismatch: ", o, i, numerical[i][o], a),
                        raise_exception,
                    )
    return True


def _replace(inputs, diff, xs):
    args = list(inputs)
    for i, x in zip(diff, xs):
        args[i] = x
    return args


def _fast(func, inputs, outputs, diff, eps, atol, rtol, raise_exception, check_forward_ad, check_backward_ad):
    """Random projections: v^T J u by reverse (and forward) mode against the central difference
    of f along u, dotted with v."""
    from ..factories import tensor

    rng = np.random.default_rng(0)
    for _k, i in enumerate(diff):
        x = inputs[i].detach().numpy().astype(np.float64)
        u = rng.uniform(-1, 1, x.shape)
        u /= max(np.linalg.norm(u), 1e-30)
        fp = _evaluate(func, inputs, i, x + eps * u)
        fm = _evaluate(func, inputs, i, x - eps * u)
        for o, out in enumerate(outputs):
            v = rng.uniform(-1, 1, tuple(out.shape))
            v /= max(np.linalg.norm(v), 1e-30)
            numerical = float(np.sum(v * (fp[o] - fm[o]) / (2 * eps)))
            if check_backward_ad:
                g = (
                    _grad(out, inputs[i], tensor(v, dtype=out.dtype), retain_graph=True, allow_unused=True)[0]
                    if out.requires_grad
                    else None
                )
                analytical = 0.0 if g is None else float(np.sum(u * g.detach().numpy()))
                if not np.isclose(analytical, numerical, rtol=rtol, atol=atol):
                    return _fail(
                        _mismatch("", o, i, np.float64(numerical), np.float64(analytical))
                        + "\nThe above quantities relating the numerical and analytical jacobians are "
                        "computed in fast mode (v^T J u for random unit vectors u and v). Run with "
                        "fast_mode=False to see the full Jacobians.",
                        raise_exception,
                    )
            if check_forward_ad:
                from .functional import jvp

                args = list(inputs)
                _, t = jvp(
                    lambda xi: _outputs(func, _replace(args, [i], [xi]))[o],
                    inputs[i].detach(),
                    tensor(u, dtype=inputs[i].dtype),
                )
                analytical = float(np.sum(v * t.numpy()))
                if not np.isclose(analytical, numerical, rtol=rtol, atol=atol):
                    return _fail(
                        _mismatch(
                            "Jacobian computed with forward mode mismatch: ",
                            o,
                            i,
                            np.float64(numerical),
                            np.float64(analytical),
                        ),
                        raise_exception,
                    )
    return True


def gradgradcheck(
    func,
    inputs,
    grad_outputs=None,
    *,
    eps=1e-6,
    atol=1e-5,
    rtol=1e-3,
    gen_non_contig_grad_outputs=False,
    raise_exception=True,
    nondet_tol=0.0,
    check_undefined_grad=True,
    check_grad_dtypes=False,
    check_batched_grad=False,
    check_fwd_over_rev=False,
    check_rev_over_rev=True,
    fast_mode=False,
):
    """Check second derivatives: ``gradcheck`` of the function that maps the inputs and the
    output cotangents to the input gradients (``create_graph=True``). Random cotangents are
    drawn when ``grad_outputs`` is None.

    ```python
    >>> import ngrad
    >>> x = ngrad.randn(3, dtype=ngrad.float64, requires_grad=True)
    >>> ngrad.autograd.gradgradcheck(lambda t: (t ** 3).sum(), (x,))
    True

    ```
    """
    from ..factories import tensor

    inputs = _tuple(inputs)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    with grad_mode.enable_grad():
        outputs = _outputs(func, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(1)
        grad_outputs = tuple(
            tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype, requires_grad=True) for o in outputs
        )
    else:
        grad_outputs = _tuple(grad_outputs)
    n = len(inputs)

    def first(*args):
        xs, gos = args[:n], args[n:]
        outs = _outputs(func, xs)
        live = [(o, g) for o, g in zip(outs, gos) if o.requires_grad]
        gs = _grad(
            [o for o, _ in live],
            [xs[i] for i in diff],
            [g for _, g in live],
            create_graph=True,
            allow_unused=True,
            materialize_grads=True,
        )
        return tuple(gs)

    return gradcheck(
        first,
        tuple(inputs) + tuple(grad_outputs),
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
        check_undefined_grad=check_undefined_grad,
        check_forward_ad=check_fwd_over_rev,
        check_backward_ad=check_rev_over_rev,
        fast_mode=fast_mode,
    )
