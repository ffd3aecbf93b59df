"""``gradcheck`` and ``gradgradcheck``: analytical derivatives against central finite
differences, with PyTorch's options, order of checks and messages.

Contract: the numerical Jacobian perturbs each input *in place* (through ``.data``, so its
version counter does not move) and calls the function on the original tensors, so a function
that closes over an input sees the perturbation, as in PyTorch. The analytical Jacobian is
computed twice by batched reverse passes (``is_grads_batched``) and the two must agree within
``nondet_tol`` (PyTorch's reentrancy check); forward mode builds it column by column from
``forward_ad`` duals, so custom Functions' ``jvp`` take part. Then come the optional checks:
batched gradients, batched forward gradients, and undefined (zero) output gradients.
``fast_mode`` compares ``v^T J u`` for random unit vectors instead of whole Jacobians.
"""

import warnings

import numpy as np

from .. import grad_mode
from ..tensor import Tensor
from . import forward_ad
from .reverse import grad as _grad

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]


class GradcheckError(RuntimeError):
    """Raised by ``gradcheck`` and ``gradgradcheck`` when a check fails."""


NONDET = (
    "Backward is not reentrant, i.e., running backward with same input and grad_output multiple times "
    "gives different values, although analytical gradient matches numerical gradient.The tolerance for "
    "nondeterminism was {tol}.\n\nNOTE: if the backward relies on non-deterministic operations this failure "
    "might be expected; call gradcheck/gradgradcheck with `nondet_tol=<tol>` as a keyword argument."
)
BATCHED = (
    "gradcheck or gradgradcheck failed while testing batched gradient computation: the gradients of a "
    "batch of grad_outputs computed at once (is_grads_batched=True) differ from those computed one by one. "
    "Call gradcheck/gradgradcheck with `check_batched_grad=False` to skip this check."
)
BATCHED_FORWARD = (
    "gradcheck failed while testing batched gradient computation with forward-mode AD: the tangents of a "
    "batch of input tangents computed at once differ from those computed one by one. Call gradcheck "
    "with `check_batched_forward_grad=False` to skip this check."
)
UNDEFINED_NOTE = 'Please look at "Notes about undefined output gradients" in "tools/autograd/derivatives.yaml"'
FAST_NOTE = (
    "\nThe above quantities relating the numerical and analytical jacobians are computed \nin fast mode. "
    "See: https://github.com/pytorch/pytorch/issues/53876 for more background \nabout fast mode. Below, we "
    "recompute numerical and analytical jacobians in slow mode:\n\n"
)
FAST_FAIL_SLOW_OK = (
    "Fast gradcheck failed but element-wise differences are small. This means that the\ntest might've "
    "passed in slow_mode! Call gradcheck/gradgradcheck with `fast_mode=False` as a keyword argument."
)


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _differentiable(out):
    """The outputs gradcheck checks: tensors that require grad, as in PyTorch."""
    return tuple(o for o in _tuple(out) if isinstance(o, Tensor) and o.requires_grad)


def _as64(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def _perturbed(func, inputs, i, delta, outputs):
    """The values of ``outputs``' positions of ``func(*inputs)`` (float64 arrays) with input
    ``i`` moved by ``delta`` in place, then restored."""
    from ..factories import tensor

    x = inputs[i]
    base = x.detach().numpy().copy()
    with grad_mode.no_grad():
        x.data.copy_(tensor(base + delta, dtype=x.dtype))
    try:
        with grad_mode.enable_grad():  # the function may differentiate inside (gradgradcheck)
            out = [o for o in _tuple(func(*inputs)) if isinstance(o, Tensor)]
        return [_as64(out[k]) for k in outputs]
    finally:
        with grad_mode.no_grad():
            x.data.copy_(tensor(base, dtype=x.dtype))


def _positions(func_out):
    """Positions (among the tensors returned) of the outputs that require grad."""
    tensors = [o for o in _tuple(func_out) if isinstance(o, Tensor)]
    return [k for k, o in enumerate(tensors) if o.requires_grad]


def _fresh(func, inputs):
    """The differentiable outputs recorded again: the perturbations gave the inputs new nodes,
    and a custom Function's saved tensors must be the inputs' current ones."""
    with grad_mode.enable_grad():
        return _differentiable(func(*inputs))


def _numerical(func, inputs, i, eps, positions):
    """Central differences: one (numel(out), numel(in)) matrix per output position."""
    x = inputs[i]
    n = x.numel()
    cols = []
    for j in range(n):
        d = np.zeros(n)
        d[j] = eps
        d = d.reshape(tuple(x.shape))
        plus = _perturbed(func, inputs, i, d, positions)
        minus = _perturbed(func, inputs, i, -d, positions)
        cols.append([((a - b) / (2 * eps)).reshape(-1) for a, b in zip(plus, minus)])
    sizes = [int(np.prod(a.shape)) for a in _perturbed(func, inputs, i, 0.0, positions)] if not cols else None
    if not cols:
        return [np.zeros((s, 0)) for s in sizes]
    return [np.stack([c[k] for c in cols], axis=1) for k in range(len(positions))]


def _reverse_rows(output, inputs, diff):
    """The Jacobian blocks of one output, by one batched reverse pass: one (numel(out),
    numel(in)) matrix per differentiable input."""
    from ..factories import eye

    n = output.numel()
    if n == 0:
        return [np.zeros((0, inputs[i].numel())) for i in diff]
    seeds = eye(n, dtype=output.dtype).reshape((n,) + tuple(output.shape))
    gs = _grad(output, [inputs[i] for i in diff], seeds, retain_graph=True, allow_unused=True, is_grads_batched=True)
    return [
        np.zeros((n, inputs[i].numel())) if g is None else _as64(g).reshape(n, inputs[i].numel())
        for i, g in zip(diff, gs)
    ]


def _same(a, b, nondet_tol):
    """PyTorch's reentrancy test, ``max |a - b| <= nondet_tol``, allowing the last bits in which
    ngrad's tiers (interpreter, bytecode, compiled loops) may round one program differently."""
    return np.allclose(a, b, rtol=1e-13, atol=nondet_tol)


def _analytical(outputs, inputs, diff, nondet_tol):
    """Reverse-mode Jacobian blocks ``[output][k]``, computed twice: PyTorch's reentrancy check."""
    result = []
    for o in outputs:
        first = _reverse_rows(o, inputs, diff)
        second = _reverse_rows(o, inputs, diff)
        for a, b in zip(first, second):
            if not _same(a, b, nondet_tol):
                raise GradcheckError(NONDET.format(tol=nondet_tol))
        result.append(first)
    return result


def _forward_columns(func, inputs, i, positions, tangent=None):
    """Forward-mode derivatives of the outputs at ``positions`` along input ``i``: with
    ``tangent`` (an array) one ``J u`` per output, else the whole Jacobian column by column."""
    from ..factories import tensor

    x = inputs[i]
    n = x.numel()
    dirs = [tangent] if tangent is not None else [np.eye(n)[j].reshape(tuple(x.shape)) for j in range(n)]
    cols = []
    for d in dirs:
        args = list(inputs)
        with forward_ad.dual_level():
            args[i] = forward_ad.make_dual(x.detach(), tensor(d, dtype=x.dtype))
            out = [o for o in _tuple(func(*args)) if isinstance(o, Tensor)]
            found = []
            for k in positions:
                t = forward_ad.unpack_dual(out[k]).tangent
                found.append(np.zeros(int(np.prod(out[k].shape))) if t is None else _as64(t).reshape(-1))
        cols.append(found)
    if tangent is not None:
        return cols[0]
    return [np.stack([c[k] for c in cols], axis=1) if cols else None for k in range(len(positions))]


def _mismatch(o, i, numerical, analytical, forward=False, dtype=None):
    """PyTorch's message; the Jacobians are printed in the input's dtype, as PyTorch's are."""
    from ..factories import tensor

    mode = "computed with forward mode " if forward else ""
    return (
        f"Jacobian {mode}mismatch for output {o:d} with respect to input {i:d},\n"
        f"numerical:{tensor(numerical, dtype=dtype)}\nanalytical:{tensor(analytical, dtype=dtype)}\n"
    )


def _slow(func, inputs, outputs, positions, diff, tol, forward, backward):
    eps, atol, rtol, nondet_tol = tol
    numerical = {i: _numerical(func, inputs, i, eps, positions) for i in diff}
    if backward:
        analytical = _analytical(_fresh(func, inputs), inputs, diff, nondet_tol)
        for o in range(len(outputs)):
            for k, i in enumerate(diff):
                if not np.allclose(analytical[o][k], numerical[i][o], rtol=rtol, atol=atol):
                    raise GradcheckError(_mismatch(o, i, numerical[i][o], analytical[o][k], dtype=inputs[i].dtype))
    if forward:
        for i in diff:
            columns = _forward_columns(func, inputs, i, positions)
            for o in range(len(outputs)):
                if not np.allclose(columns[o], numerical[i][o], rtol=rtol, atol=atol):
                    raise GradcheckError(_mismatch(o, i, numerical[i][o], columns[o], True, inputs[i].dtype))


def _unit(rng, shape):
    u = rng.uniform(-1, 1, shape)
    return u / max(np.linalg.norm(u), 1e-30)


def _fast(func, inputs, outputs, positions, diff, tol, forward, backward):
    """``v^T J u`` for random unit ``u`` (per input) and ``v`` (per output), numerically and by
    reverse (``(v^T J) . u``, twice: the reentrancy check) and forward mode (``v . (J u)``)."""
    from ..factories import tensor

    eps, atol, rtol, nondet_tol = tol
    rng = np.random.default_rng(0)
    us = {i: _unit(rng, tuple(inputs[i].shape)) for i in diff}
    vs = [_unit(rng, tuple(o.shape)) for o in outputs]
    for i in diff:
        plus = _perturbed(func, inputs, i, eps * us[i], positions)
        minus = _perturbed(func, inputs, i, -eps * us[i], positions)
        jvps = _forward_columns(func, inputs, i, positions, us[i]) if forward else None
        for o, out in enumerate(_fresh(func, inputs)):
            numerical = float(np.sum(vs[o] * (plus[o] - minus[o]) / (2 * eps)))
            # PyTorch scales atol by the sums of u and v: they weigh every Jacobian entry
            bound = atol * float(us[i].sum()) * float(vs[o].sum())
            found = []
            if backward:
                vjps = [
                    _grad(out, inputs[i], tensor(vs[o], dtype=out.dtype), retain_graph=True, allow_unused=True)[0]
                    for _ in range(2)
                ]
                dots = [0.0 if g is None else float(np.sum(us[i] * _as64(g))) for g in vjps]
                if not _same(np.float64(dots[0]), np.float64(dots[1]), nondet_tol):
                    raise GradcheckError(NONDET.format(tol=nondet_tol))
                found.append((dots[0], False))
            if jvps is not None:
                found.append((float(np.sum(vs[o].reshape(-1) * jvps[o])), True))
            for analytical, fwd in found:
                if not np.isclose(analytical, numerical, rtol=rtol, atol=abs(bound)):
                    raise GradcheckError(
                        _mismatch(o, i, np.float64(numerical), np.float64(analytical), fwd)
                        + _slow_report(func, inputs, outputs, positions, i, o, tol, fwd)
                    )


def _slow_report(func, inputs, outputs, positions, i, o, tol, forward):
    """PyTorch's fast-mode failure message: the whole Jacobians, recomputed in slow mode."""
    from ..factories import tensor

    eps, atol, rtol, _ = tol
    numerical = _numerical(func, inputs, i, eps, positions)[o]
    if forward:
        analytical = _forward_columns(func, inputs, i, positions)[o]
    else:
        analytical = _reverse_rows(_fresh(func, inputs)[o], inputs, [i])[0]
    msg = (
        FAST_NOTE + f"Numerical:\n {tensor(numerical)}\nAnalytical:\n{tensor(analytical)}\n\n"
        f"The max per-element difference (slow mode) is: {np.max(np.abs(numerical - analytical), initial=0.0)}.\n"
    )
    if np.allclose(analytical, numerical, rtol=rtol, atol=atol):
        msg += FAST_FAIL_SLOW_OK
    return msg


def _batched_grad(output, o, inputs, diff):
    """PyTorch's ``check_batched_grad``: two random cotangents at once against one by one."""
    from ..factories import tensor, zeros
    from ..tensor import stack

    rng = np.random.default_rng(1)
    vs = [tensor(rng.standard_normal(tuple(output.shape)), dtype=output.dtype) for _ in range(2)]
    xs = [inputs[i] for i in diff]

    def filled(gs):
        return [zeros(tuple(x.shape), dtype=x.dtype) if g is None else g for g, x in zip(gs, xs)]

    each = [filled(_grad(output, xs, v, retain_graph=True, allow_unused=True)) for v in vs]
    try:
        at_once = _grad(output, xs, stack(vs), retain_graph=True, allow_unused=True, is_grads_batched=True)
    except RuntimeError as e:
        raise GradcheckError(f"While computing batched gradients, got: {e}\n\n{BATCHED}") from e
    for k, res in enumerate(at_once):
        exp = stack([g[k] for g in each])
        res = zeros(tuple(exp.shape), dtype=exp.dtype) if res is None else res
        if not np.allclose(_as64(res), _as64(exp)):
            raise GradcheckError(f"For output {o} and input {k}:\n\n{BATCHED}\n\nGot:\n{res}\n\nExpected:\n{exp}")


def _batched_forward(func, inputs, positions, diff):
    """``check_batched_forward_grad``: a batch of two random tangents in one tangent program
    against one forward-mode pass each."""
    from ..factories import tensor
    from ..tensor import stack
    from .functional import batched_jvp

    rng = np.random.default_rng(2)
    for i in diff:
        x = inputs[i]
        ts = [rng.standard_normal(tuple(x.shape)) for _ in range(2)]
        each = [_forward_columns(func, inputs, i, positions, t) for t in ts]
        with grad_mode.enable_grad():
            outs = [o for o in _tuple(func(*inputs)) if isinstance(o, Tensor)]
        try:
            at_once = batched_jvp([outs[k] for k in positions], [x], [tensor(np.stack(ts), dtype=x.dtype)])
        except RuntimeError as e:
            raise GradcheckError(f"While computing batched gradients, got: {e}\n\n{BATCHED_FORWARD}") from e
        for o in range(len(positions)):
            exp = np.stack([e[o] for e in each])
            got = np.zeros_like(exp) if at_once[o] is None else _as64(at_once[o]).reshape(exp.shape)
            if not np.allclose(got, exp):
                raise GradcheckError(
                    f"For output {o} and input {i}:\n\n{BATCHED_FORWARD}\n\nGot:\n{tensor(got)}\n\n"
                    f"Expected:\n{stack([tensor(e) for e in exp])}"
                )


def _times_grad_output(outputs, inputs, diff):
    """PyTorch's check that gradients scale with the output gradients: zeros give zeros."""
    from ..factories import zeros_like

    gs = _grad(
        list(outputs), [inputs[i] for i in diff], [zeros_like(o) for o in outputs], retain_graph=True, allow_unused=True
    )
    for g, i in zip(gs, diff):
        if g is not None and tuple(g.shape) != tuple(inputs[i].shape):
            raise GradcheckError("grad is incorrect size")
        if g is not None and np.any(_as64(g) != 0):
            raise GradcheckError("backward not multiplied by grad_output")


def _undefined(outputs, inputs, diff):
    """``check_undefined_grad``: zero gradients for every output must give zero (or no)
    gradients for the inputs. ngrad materializes undefined output gradients as zeros, which is
    also what PyTorch hands a custom Function's ``backward`` unless it set
    ``set_materialize_grads(False)``."""
    from ..factories import zeros_like

    def warn():
        warnings.warn(
            "Backwards compatibility: New undefined gradient support checking feature is enabled by default, "
            "but it may break existing callers of this function. If this is true for you, you can call this "
            'function with "check_undefined_grad=False" to disable the feature',
            stacklevel=3,
        )

    try:
        gs = _grad(list(outputs), [inputs[i] for i in diff], [zeros_like(o) for o in outputs], allow_unused=True)
    except RuntimeError as e:
        warn()
        raise GradcheckError(f"Expected backward function to handle undefined output grads. {UNDEFINED_NOTE}") from e
    if any(g is not None and np.any(_as64(g) != 0) for g in gs):
        warn()
        raise GradcheckError(
            "Expected all input grads to be undefined or zero when all output grads are undefined or zero. "
            + UNDEFINED_NOTE
        )


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
    check_batched_forward_grad=False,
    check_forward_ad=False,
    check_backward_ad=True,
    fast_mode=False,
    masked=None,
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
    >>> ngrad.autograd.gradcheck(lambda t: t * x, (x,))  # closes over x: perturbed in place
    True

    ```
    """
    if not (check_forward_ad or check_backward_ad):
        raise AssertionError("Expected at least one of check_forward_ad or check_backward_ad to be True")
    if check_batched_grad and not check_backward_ad:
        raise AssertionError("Setting check_batched_grad=True requires check_backward_ad to be True")
    if check_batched_forward_grad and not check_forward_ad:
        raise AssertionError("Setting check_batched_forward_grad=True requires check_forward_ad to be True")
    func, inputs = _real_views(func, _tuple(inputs))
    try:
        return _gradcheck(
            func,
            inputs,
            (eps, atol, rtol, nondet_tol),
            check_undefined_grad,
            check_batched_grad,
            check_batched_forward_grad,
            check_forward_ad,
            check_backward_ad,
            fast_mode,
        )
    except GradcheckError:
        if raise_exception:
            raise
        return False


def _real_views(func, inputs):
    """``func`` and ``inputs`` with each complex tensor as its real view (a last dimension of 2),
    inputs and outputs both, when any is complex: PyTorch's gradient of a complex input is the
    gradient with respect to its real and imaginary parts, so checking the real function checks
    it, each part perturbed on its own as PyTorch's gradcheck perturbs them."""
    if not any(isinstance(t, Tensor) and t.dtype.is_complex for t in inputs):
        with grad_mode.enable_grad():
            out = func(*inputs)
        if not any(isinstance(o, Tensor) and o.dtype.is_complex for o in _tuple(out)):
            return func, inputs
    from ..tensor.complex_ops import view_as_complex, view_as_real

    complex_at = {i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.dtype.is_complex}
    real_inputs = tuple(
        view_as_real(t.detach()).clone().requires_grad_(t.requires_grad) if i in complex_at else t
        for i, t in enumerate(inputs)
    )

    def real_func(*args):
        out = func(*(view_as_complex(a) if i in complex_at else a for i, a in enumerate(args)))
        if isinstance(out, Tensor):
            return view_as_real(out) if out.dtype.is_complex else out
        return type(out)(view_as_real(o) if isinstance(o, Tensor) and o.dtype.is_complex else o for o in out)

    return real_func, real_inputs


def _gradcheck(func, inputs, tol, undefined, batched, batched_forward, forward, backward, fast_mode):
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not diff:
        raise ValueError(
            "gradcheck expects at least one input tensor to require gradient, but none of them have requires_grad=True."
        )
    for i in diff:
        if inputs[i].dtype.itemsize < 8:
            warnings.warn(
                f"Input #{i} requires gradient and is not a double precision floating point or complex. This "
                f"check will likely fail if all the inputs are not of double precision floating point or complex. ",
                UserWarning,
                stacklevel=3,
            )
    with grad_mode.enable_grad():
        func_out = func(*inputs)
    positions = _positions(func_out)
    outputs = _differentiable(func_out)
    if not outputs:  # then every numerical derivative must be zero
        for i in diff:
            every = [o for o in _tuple(func_out) if isinstance(o, Tensor)]
            for jac in _numerical(func, inputs, i, tol[0], list(range(len(every)))):
                if np.any(np.abs(jac) > tol[3]):
                    raise GradcheckError("Numerical gradient for function expected to be zero")
        return True
    check = _fast if fast_mode else _slow
    check(func, inputs, outputs, positions, diff, tol, forward, backward)
    if batched_forward:
        _batched_forward(func, inputs, positions, diff)
    if not backward:
        return True
    outputs = _fresh(func, inputs)
    _times_grad_output(outputs, inputs, diff)
    if batched:
        for o, out in enumerate(outputs):
            _batched_grad(out, o, inputs, diff)
    if undefined:
        _undefined(outputs, inputs, diff)
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
    masked=False,
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
        outputs = _differentiable(func(*inputs))
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
        outs = _differentiable(func(*xs))
        gs = _grad(outs, [xs[i] for i in diff], gos, create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)

    return gradcheck(
        first,
        tuple(inputs) + tuple(grad_outputs),
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
        nondet_tol=nondet_tol,
        check_undefined_grad=check_undefined_grad,
        check_batched_grad=check_batched_grad,
        check_forward_ad=check_fwd_over_rev,
        check_backward_ad=check_rev_over_rev,
        fast_mode=fast_mode,
    )
