"""GradBench's ``particle`` and ``saddle``: gradient descent whose objective itself contains a
derivative (Pearlmutter and Siskind's nested-AD benchmarks), in four variants each.

``argmin(f, grad, x)`` is GradBench's solver (``cpp/gradbench/gd.hpp``): step ``x - eta g``;
accept it if it lowers ``f`` (after ten accepted steps in a row ``eta`` doubles), else halve
``eta``; stop when |g| <= 1e-5 or a step moves x by at most 1e-5 (eta starts at 1e-5). Its
iterates are tensors, so an outer derivative flows through the whole descent.

Derivatives use ngrad's public autograd as a PyTorch user writes them: reverse mode (``r``) is
``ngrad.autograd.grad`` (``create_graph=True`` when the result is differentiated again); the
inner forward mode (``f``) is ``ngrad.autograd.forward_ad`` (one dual tensor per direction), and
the outer forward mode is ``ngrad.func.jvp`` (forward_ad has one level, which the inner
derivative holds). A variant ``"fr"`` is forward outside and reverse inside.

- ``particle(w0, variant)``: w minimising x_0(t_f)^2, where a particle from (0, 8) with velocity
  (0.75, 0) moves by Euler steps (dt = 0.1) under the force -grad_x p(x; w),
  p = 1/|x - (10, 10 - w)| + 1/|x - (10, 0)|, until a step would take it to y <= 0, and t_f
  extrapolates linearly to y = 0 (``evals/particle`` and GradBench's reference tools).
- ``saddle(start, variant)``: the point x minimising max_y f(x, y), f = x.x - y.y, the inner
  max by gradient ascent from ``start``, then the y maximising f(x, y): (x, y), four numbers.
"""

import ngrad
from ngrad.autograd import forward_ad

__all__ = ["argmin", "particle", "saddle"]

VARIANTS = ("ff", "fr", "rf", "rr")


def _norm(v):
    return float((v * v).sum().item()) ** 0.5


def argmin(f, grad, x):
    """GradBench's gradient descent from ``x`` (a tensor); ``f(x)`` a 0-d tensor, ``grad(x)``
    a tensor like ``x``. The values of ``f`` only steer the descent, so they are computed
    without recording a graph; the iterates carry the gradients' graphs."""
    f = _steering(f)
    fx, gx, i, eta = f(x), grad(x), 0, 1e-5
    while True:
        if _norm(gx) <= 1e-5:
            return x
        if i == 10:
            eta, i = eta * 2, 0
            continue
        x_new = x - eta * gx
        if _norm(x - x_new) <= 1e-5:
            return x
        fx_new = f(x_new)
        if fx_new < fx:
            x, fx, gx, i = x_new, fx_new, grad(x_new), i + 1
        else:
            eta, i = eta / 2, 0


def _steering(f):
    def value(x):
        with ngrad.no_grad():
            return f(x.detach()).item()

    return value


def argmax(f, grad, x):
    return argmin(lambda y: -f(y), lambda y: -grad(y), x)


def _reverse(f, x):
    """The gradient of ``f`` at ``x``; itself differentiable (nested reverse mode) where grad
    mode is on, as an outer derivative needs it."""
    if not ngrad.is_grad_enabled():
        with ngrad.enable_grad():
            x = x.detach().requires_grad_()
            (g,) = ngrad.autograd.grad(f(x), x)
        return g
    x = x if x.requires_grad else x.detach().requires_grad_()
    (g,) = ngrad.autograd.grad(f(x), x, create_graph=True)
    return g


def _forward(f, x):
    """The gradient of ``f`` at ``x`` by forward mode: one tangent per coordinate."""
    basis = ngrad.eye(x.shape[0], dtype=x.dtype)
    parts = []
    with forward_ad.dual_level():
        for e in basis:
            parts.append(forward_ad.unpack_dual(f(forward_ad.make_dual(x, e))).tangent)
    return ngrad.stack(parts)


def _outer_reverse(f):
    def grad(x):
        x = x.detach().requires_grad_()
        (g,) = ngrad.autograd.grad(f(x), x)
        return g

    return grad


def _outer_forward(f):
    def grad(x):
        basis = ngrad.eye(x.shape[0], dtype=x.dtype)
        return ngrad.stack([ngrad.func.jvp(f, (x.detach(),), (e,))[1] for e in basis])

    return grad


def _modes(variant):
    if variant not in VARIANTS:
        raise KeyError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    outer = _outer_forward if variant[0] == "f" else _outer_reverse
    inner = _forward if variant[1] == "f" else _reverse
    return outer, inner


# --- particle ------------------------------------------------------------------------------------


def potential(x, charges):
    return (1 / ((x - charges) ** 2).sum(1).sqrt()).sum()


def miss(w, inner):
    """x_0(t_f)^2 for the control ``w`` (a 1-element tensor), the force's gradient by ``inner``."""
    top = ngrad.cat([ngrad.tensor([10.0], dtype=w.dtype), 10 - w])
    charges = ngrad.stack([top, ngrad.tensor([10.0, 0.0], dtype=w.dtype)])
    x = ngrad.tensor([0.0, 8.0], dtype=w.dtype)
    xdot = ngrad.tensor([0.75, 0.0], dtype=w.dtype)
    dt = 0.1
    while True:
        xddot = -inner(lambda p: potential(p, charges), x)
        x_new = x + dt * xdot
        if x_new[1].item() <= 0:
            break
        x, xdot = x_new, xdot + dt * xddot
    t_f = -x[1] / xdot[1]
    return (x[0] + t_f * xdot[0]) ** 2


def particle(w0, variant):
    """The optimal control w from ``w0``, as a float."""
    outer, inner = _modes(variant)
    f = lambda w: miss(w, inner)  # noqa: E731
    return argmin(f, outer(f), ngrad.tensor([float(w0)], dtype=ngrad.float64)).item()


# --- saddle --------------------------------------------------------------------------------------


def cost(p1, p2):
    return (p1 * p1).sum() - (p2 * p2).sum()


def saddle(start, variant):
    """[x1, x2, y1, y2]: the saddle point found from ``start`` (two floats)."""
    outer, inner = _modes(variant)
    s = ngrad.tensor([float(v) for v in start], dtype=ngrad.float64)

    def inner_max(p1):
        f = lambda p2: cost(p1, p2)  # noqa: E731
        return argmax(f, lambda p2: inner(f, p2), s)

    def max_value(p1):
        return cost(p1, inner_max(p1))

    r1 = argmin(max_value, outer(max_value), s).detach()
    # step 2 is not nested: its derivative is taken in the outer variant's mode
    f = lambda p2: cost(r1, p2)  # noqa: E731
    r2 = argmax(f, outer(f), s)
    return ngrad.cat([r1, r2.detach()]).tolist()
