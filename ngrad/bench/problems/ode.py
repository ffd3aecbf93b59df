"""GradBench's ``ode``: a fourth-order Runge-Kutta solver differentiated through every step.

The system is y' = f(x, y) with f(x, y)_0 = x_0 and f(x, y)_i = x_i * y_{i-1}, started at
y(0) = 0 and integrated to t = 2 in ``s`` equal RK4 steps, as GradBench's C++ reference
(``cpp/gradbench/evals/ode.hpp``) does. ``primal`` is y(2); the gradient is
that of its last element with respect to x. The steps are a scan (``ngrad.scan``): the
program holds one step's four evaluations of f, whatever s is. The size is n, the length of x
(uniform on [-1, 1]); the bench uses s = 64 steps.
"""

import numpy as np

from . import Problem, scan

T_FINAL = 2.0
STEPS = 64


def rhs(T, x, y):
    """f(x, y) as x times y shifted down by one with a 1 in front (x_0 * 1 is x_0 exactly): the
    concatenation's pieces are a constant and a slice of y, which a compiled loop reads in place,
    so each evaluation of f is part of one loop (``T.cat([x[:1], x[1:] * y[:-1]])`` took a NumPy
    product and a concatenation first)."""
    return x * T.cat([T.ones_like(x[:1]), y[:-1]])


def rk4_step(T, x, y, h):
    """One RK4 step of length ``h`` from ``y``."""
    k1 = rhs(T, x, y)
    k2 = rhs(T, x, y + h / 2 * k1)
    k3 = rhs(T, x, y + h / 2 * k2)
    k4 = rhs(T, x, y + h * k3)
    return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def solve(T, x, s):
    """y(2) after ``s`` RK4 steps: a scan whose ``xs`` is each step's length, so that the loop's
    body is one program whatever ``s`` is (no constant in it depends on ``s``)."""

    def step(y, h):
        return rk4_step(T, x, y, h), ()

    y, _ = scan(T, step, T.zeros_like(x), T.full((s,), T_FINAL / s, dtype=x.dtype))
    return y


def objective(T, x, s):
    return solve(T, x, s)[-1]


def jax_system(jax, J):
    """JAX as its users write a time loop: ``lax.fori_loop`` over the steps, not an unrolled loop
    (which XLA takes minutes to compile at these lengths)."""
    steps = {}

    def make(s):
        h = T_FINAL / s

        def step(_, y, x):
            return rk4_step(J, x, y, h)

        last = lambda x: jax.lax.fori_loop(0, s, lambda i, y: step(i, y, x), J.zeros_like(x))[-1]  # noqa: E731
        return jax.jit(jax.value_and_grad(last))

    def run(inp):
        f = steps.get(inp["s"]) or steps.setdefault(inp["s"], make(inp["s"]))
        value, g = f(inp["x"])
        return float(value), {"x": np.asarray(g)}

    return run


def _rhs_np(x, u):
    return np.concatenate([x[:1], x[1:] * u[:-1]])


def _rhs_vjp(x, u, g, dx):
    """Adds g's pull-back onto x into ``dx``; returns the one onto u."""
    dx[0] += g[0]
    dx[1:] += g[1:] * u[:-1]
    du = np.zeros_like(u)
    du[:-1] = g[1:] * x[1:]
    return du


def numpy(inp):
    x, s = inp["x"], inp["s"]
    h = T_FINAL / s
    y, stages = np.zeros_like(x), []
    for _ in range(s):
        u1 = y
        k1 = _rhs_np(x, u1)
        u2 = y + h / 2 * k1
        k2 = _rhs_np(x, u2)
        u3 = y + h / 2 * k2
        k3 = _rhs_np(x, u3)
        u4 = y + h * k3
        k4 = _rhs_np(x, u4)
        stages.append((u1, u2, u3, u4))
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    dx, dy = np.zeros_like(x), np.zeros_like(x)
    dy[-1] = 1.0
    for u1, u2, u3, u4 in reversed(stages):
        g1, g2, g3, g4 = h / 6 * dy, h / 3 * dy, h / 3 * dy, h / 6 * dy
        du4 = _rhs_vjp(x, u4, g4, dx)
        g3 = g3 + h * du4
        du3 = _rhs_vjp(x, u3, g3, dx)
        g2 = g2 + h / 2 * du3
        du2 = _rhs_vjp(x, u2, g2, dx)
        g1 = g1 + h / 2 * du2
        du1 = _rhs_vjp(x, u1, g1, dx)
        dy = dy + du4 + du3 + du2 + du1
    return float(y[-1]), {"x": dx}  # y(0) = 0 does not depend on x


PROBLEMS = [
    Problem(
        "ode",
        f"RK4 solution of y' = f(x, y), {STEPS} steps, gradient of y_n(2) (GradBench ode)",
        "n, the length of x (uniform on [-1, 1])",
        [100, 1000],
        [100],
        lambda n, rng: {"x": rng.uniform(-1, 1, n), "s": STEPS},
        numpy,
        objective,
        jax=jax_system,
    ),
]
