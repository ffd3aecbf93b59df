"""The benchmark problems and the systems that solve them.

Contract: ``PROBLEMS`` maps a name to a :class:`Problem`. ``problem.inputs(size, rng)`` builds
the data (a dict of float64 NumPy arrays and Python numbers); ``problem.system(name)`` returns a
callable ``f(inputs) -> (value, outputs)`` for ``name`` in :data:`SYSTEMS`, or None where that
system is not installed. ``value`` is a float and ``outputs`` a dict of NumPy arrays (usually the
gradient of ``value`` with respect to each input in ``problem.wrt``); every system returns the
same keys, so results can be compared before anything is timed.

Each objective is written once, in PyTorch's style, as ``objective(T, **inputs)`` with ``T`` the
module that provides the operations: ``ngrad`` itself, ``torch``, or a small adapter giving JAX
the same names. ngrad runs the code the way a user writes it (``ngrad.from_numpy``,
``requires_grad_``, ``backward``), with the step under ``ngrad.compile`` as a loop calling the
gradient many times would have it; NumPy runs a hand-written gradient of the same formula.

```python
>>> import numpy as np
>>> p = PROBLEMS["rosenbrock"]
>>> inp = p.inputs(10, np.random.default_rng(0))
>>> value, grads = p.system("ngrad")(inp)
>>> bool(np.allclose(grads["x"], p.system("numpy")(inp)[1]["x"]))
True

```
"""

import numpy as np

import ngrad

__all__ = ["PROBLEMS", "Problem", "SYSTEMS", "scan"]

SYSTEMS = ("ngrad", "numpy", "torch", "jax")


def _flatten(tree):
    """The tensors of a pytree of tuples, lists and dicts (in order), and a function that builds
    the same structure from a list of that length."""
    if isinstance(tree, (tuple, list)):
        parts = [_flatten(t) for t in tree]
        kind = type(tree)
    elif isinstance(tree, dict):
        parts = [_flatten(tree[k]) for k in tree]
        keys = list(tree)
        kind = lambda vals: dict(zip(keys, vals))  # noqa: E731
    else:
        return [tree], lambda leaves: leaves[0]
    sizes = [len(leaves) for leaves, _ in parts]

    def build(leaves):
        out, i = [], 0
        for (_, make), n in zip(parts, sizes):
            out.append(make(leaves[i : i + n]))
            i += n
        return kind(out)

    return [leaf for leaves, _ in parts for leaf in leaves], build


def scan(T, combine_fn, init, xs, unroll=1):
    """``T.scan(combine_fn, init, xs)`` where the module ``T`` has one (``ngrad.scan``: the body is
    recorded once and kept as a loop), else the loop a PyTorch user writes: ``combine_fn(carry,
    x) -> (carry, y)`` over the first dimension of every tensor of ``xs`` (a pytree), the ``y``
    stacked. Returns ``(final carry, stacked ys)``, as ``torch._higher_order_ops.scan`` does.

    ``unroll`` (as ``jax.lax.scan``'s): each step of ``T.scan``'s loop runs ``unroll`` steps of
    ``combine_fn`` (a body that many times longer, fused across steps and dispatched once for
    them); the steps left over, fewer than ``unroll``, run as a second scan of single steps, so
    that no program depends on the number of steps.

    >>> carry, ys = scan(np, lambda c, x: (c + x, (c * x,)), np.zeros(2), np.ones((3, 2)))
    >>> carry.tolist(), ys[0][:, 0].tolist()
    ([3.0, 3.0], [0.0, 1.0, 2.0])
    >>> carry, ys = scan(ngrad, lambda c, x: (c + x, c * x), ngrad.zeros(2), ngrad.ones(5, 2), unroll=2)
    >>> carry.tolist(), ys[:, 0].tolist()
    ([5.0, 5.0], [0.0, 1.0, 2.0, 3.0, 4.0])
    """
    native = getattr(T, "scan", None)
    slices, build_x = _flatten(xs)
    if native is not None:
        return _native_scan(T, native, combine_fn, init, slices, build_x, unroll)
    carry, steps, build_y = init, [], None
    for t in range(slices[0].shape[0]):
        carry, y = combine_fn(carry, build_x([s[t] for s in slices]))
        leaves, build_y = _flatten(y)
        steps.append(leaves)
    if build_y is None:  # no steps: nothing to stack (the body's outputs are unknown)
        return carry, ()
    return carry, build_y([T.stack([step[i] for step in steps]) for i in range(len(steps[0]))])


def _native_scan(T, native, combine_fn, init, slices, build_x, unroll):
    """``scan`` on ``T.scan``: blocks of ``unroll`` steps, then the steps left over."""
    length = slices[0].shape[0]
    whole = length - length % unroll if unroll > 1 else 0
    carry, parts, built = init, [], []  # built: the ys' structure, from a recorded step

    def block(c, chunk):
        ys = []
        for j in range(unroll):
            c, y = combine_fn(c, build_x([leaf[j] for leaf in _flatten(chunk)[0]]))
            leaves, build_y = _flatten(y)
            ys.append(leaves)
        built.append(build_y)
        return c, [T.stack([step[i] for step in ys]) for i in range(len(ys[0]))]

    if whole:
        blocks = build_x([s[:whole].reshape(whole // unroll, unroll, *s.shape[1:]) for s in slices])
        carry, ys = native(block, carry, blocks)
        parts.append([y.reshape(whole, *y.shape[2:]) for y in ys])
    if whole < length:
        carry, ys = native(combine_fn, carry, build_x([s[whole:] for s in slices]))
        leaves, build_y = _flatten(ys)
        parts.append(leaves)
        built.append(build_y)
    ys = [part[0] if len(parts) == 1 else T.cat(part) for part in zip(*parts)]
    return carry, built[-1](ys)


class Problem:
    """One benchmark problem.

    ``objective(T, **inputs)`` returns the scalar; ``wrt`` names the inputs it is differentiated
    with respect to. A problem whose outputs are not simply that gradient (kmeans' Newton
    direction, ba's sparse Jacobian) gives ``compute(T, inputs) -> (value, {name: tensor})``
    for ngrad and PyTorch (inputs in ``wrt`` already require grad) and ``jax(jax, J)``, a
    factory of the same for JAX. ``numpy(inputs)`` is the hand-written reference.
    ``size_doc`` says what the size parameter means. ``traced=False``: ngrad runs it without
    ``ngrad.compile`` (the code needs a value while it runs, such as integer indices).
    """

    def __init__(
        self,
        name,
        doc,
        size_doc,
        sizes,
        quick_sizes,
        inputs,
        numpy,
        objective=None,
        wrt=("x",),
        compute=None,
        jax=None,
        traced=True,
    ):
        self.name, self.doc, self.size_doc = name, doc, size_doc
        self.sizes, self.quick_sizes = list(sizes), list(quick_sizes)
        self.inputs, self.numpy, self.objective, self.wrt = inputs, numpy, objective, tuple(wrt)
        self.compute, self.jax, self.traced = compute, jax, traced

    def system(self, name):
        """``f(inputs) -> (value, outputs)`` for the system ``name``, or None if not installed."""
        if name == "numpy":
            return self.numpy
        if name == "ngrad":
            return _compiled(self) if self.traced else _autograd(self, ngrad, ngrad.from_numpy)
        if name == "torch":
            try:
                import torch
            except ImportError:
                return None
            return _autograd(self, torch, torch.from_numpy)
        if name == "jax":
            try:
                import jax
            except ImportError:
                return None
            jax.config.update("jax_enable_x64", True)
            return _jax(self, jax)
        raise KeyError(f"unknown system {name!r}; choose from {', '.join(SYSTEMS)}")


def _step(prob, T, t):
    """The value and outputs from the inputs ``t`` (leaves in ``prob.wrt`` require grad)."""
    if prob.compute is not None:
        return prob.compute(T, t)
    value = prob.objective(T, **t)
    value.backward()
    return value, {k: t[k].grad for k in prob.wrt}


def _autograd(prob, T, from_numpy):
    """ngrad and PyTorch share the code: leaves from NumPy, the objective, backward."""

    def run(inp):
        t = {
            k: (from_numpy(v).requires_grad_(k in prob.wrt) if isinstance(v, np.ndarray) else v) for k, v in inp.items()
        }
        value, outs = _step(prob, T, t)
        return value.item(), {k: o.detach().numpy() for k, o in outs.items()}

    return run


def _compiled(prob):
    """ngrad as a user calling the gradient in a loop writes it: the same code as PyTorch's
    (``_autograd``), with the step from the leaves to the gradients under ``ngrad.compile``, so
    later calls replay the traced program instead of recording the graph again (as JAX's
    peer runs under ``jax.jit``)."""

    def step(t, static):  # the Python numbers (sizes, hyperparameters) are static: a new value traces again
        return _step(prob, ngrad, {**t, **dict(static)})

    step = ngrad.compile(step, static_argnums=(1,))

    def run(inp):
        t = {k: ngrad.from_numpy(v).requires_grad_(k in prob.wrt) for k, v in inp.items() if isinstance(v, np.ndarray)}
        value, outs = step(t, tuple((k, v) for k, v in inp.items() if not isinstance(v, np.ndarray)))
        return value.item(), {k: o.detach().numpy() for k, o in outs.items()}

    return run


class _JaxTorch:
    """PyTorch's names for the jax.numpy functions the objectives use."""

    def __init__(self, jax):
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        self.float64 = jnp.float64

    def __getattr__(self, name):
        return getattr(self.jnp, name)

    def sum(self, x, dim=None):
        return self.jnp.sum(x, axis=dim)

    def amin(self, x, dim):
        return self.jnp.min(x, axis=dim)

    def cumprod(self, x, dim):
        return self.jnp.cumprod(x, axis=dim)

    def logsumexp(self, x, dim):
        return self.jax.nn.logsumexp(x, axis=dim)

    def sigmoid(self, x):
        return self.jax.nn.sigmoid(x)

    def cat(self, xs, dim=0):
        return self.jnp.concatenate(xs, axis=dim)

    def stack(self, xs, dim=0):
        return self.jnp.stack(xs, axis=dim)


def _jax(prob, jax):
    J = _JaxTorch(jax)
    if prob.jax is not None:
        return prob.jax(jax, J)
    steps = {}  # one jitted function per value of the static (non-array) inputs

    def run(inp):
        static = tuple((k, v) for k, v in inp.items() if not isinstance(v, np.ndarray))
        step = steps.get(static)
        if step is None:

            def f(diff, rest, _static=dict(static)):  # noqa: B006  (read-only, bound per static key)
                return prob.objective(J, **diff, **rest, **_static)

            step = steps[static] = jax.jit(jax.value_and_grad(f))
        diff = {k: inp[k] for k in prob.wrt}
        rest = {k: v for k, v in inp.items() if isinstance(v, np.ndarray) and k not in prob.wrt}
        value, grads = step(diff, rest)
        jax.block_until_ready(grads)
        return float(value), {k: np.asarray(g) for k, g in grads.items()}

    return run


def _registry():
    from . import ba, det, elementwise, gmm, kmeans, lstm, mlp, ode

    probs = {}
    for mod in (elementwise, ode, lstm, gmm, kmeans, ba, det, mlp):
        for p in mod.PROBLEMS:
            probs[p.name] = p
    return probs


PROBLEMS = _registry()
