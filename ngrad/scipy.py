"""``ngrad.scipy``: SciPy's optimizers on ngrad gradients.

``value_and_grad(fun, like)`` turns a function of one tensor into the callable that
``scipy.optimize.minimize(..., jac=True)`` expects (flat float64 arrays in, ``(float, array)``
out); ``hessp(fun, like)`` gives Hessian-vector products for ``Newton-CG`` and ``trust-*``;
``minimize(fun, x0, method=...)`` wires both and returns SciPy's result with ``x`` as a tensor.
The gradient program is compiled with ``ngrad.compile`` when ``fun`` can be traced (no Python
control flow on tensor values), so each evaluation costs little more than its kernels; a
function that cannot be traced runs eagerly, with the same results.
"""

import numpy as np

from . import grad_mode as _grad_mode
from .autograd.reverse import grad as _grad
from .engine.ir import dtypes as D
from .factories import tensor
from .func import value_and_grad as _value_and_grad
from .tensor import Tensor
from .tracing import TraceError
from .tracing import compile as _compile

__all__ = ["value_and_grad", "hessp", "minimize"]


def _shape_of(like):
    return tuple(like.shape) if isinstance(like, Tensor) else tuple(np.shape(like))


def _from_flat(x, shape):
    """SciPy's flat float64 vector as a tensor of the function's argument shape."""
    return tensor(np.asarray(x, dtype=np.float64).reshape(shape), dtype=D.float64)


class _Fallback:
    """``ngrad.compile(fn)``, or ``fn`` itself once tracing it has failed."""

    def __init__(self, fn):
        self.fn, self.compiled = fn, _compile(fn)

    def __call__(self, *args):
        if self.compiled is not None:
            try:
                return self.compiled(*args)
            except TraceError:
                self.compiled = None
        return self.fn(*args)


def value_and_grad(fun, like, args=()):
    """A function ``f(x) -> (fun(x), dfun/dx)`` on flat float64 NumPy arrays, for SciPy.

    ``like`` gives the shape of ``fun``'s tensor argument (a tensor or an array); extra
    ``args`` are passed through to ``fun``.

    ```python
    >>> import numpy as np, ngrad
    >>> f = ngrad.scipy.value_and_grad(lambda x: (x ** 2).sum(), np.zeros(2))
    >>> f(np.array([1.0, 2.0]))
    (5.0, array([2., 4.]))

    ```
    """
    shape = _shape_of(like)
    vg = _Fallback(_value_and_grad(lambda x, *a: fun(x, *a)))

    def f(x):
        value, g = vg(_from_flat(x, shape), *args)
        return float(value.item()), g.numpy().reshape(-1).astype(np.float64)

    return f


def hessp(fun, like, args=()):
    """A function ``hp(x, p) -> H(x) @ p`` on flat float64 arrays (double reverse mode: the
    gradient of ``<grad fun(x), p>``), for ``Newton-CG`` and the ``trust-*`` methods.

    ```python
    >>> import numpy as np, ngrad
    >>> hp = ngrad.scipy.hessp(lambda x: (x ** 3).sum(), np.zeros(2))
    >>> hp(np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    array([ 6., 12.])

    ```
    """
    shape = _shape_of(like)

    def product(x, p, *a):
        x = x.detach().requires_grad_()
        with _grad_mode.enable_grad():
            (g,) = _grad(fun(x, *a), x, create_graph=True)
            (h,) = _grad((g * p).sum(), x, allow_unused=True, materialize_grads=True)
        return h.detach()

    hv = _Fallback(product)

    def hp(x, p):
        return hv(_from_flat(x, shape), _from_flat(p, shape), *args).numpy().reshape(-1).astype(np.float64)

    return hp


_HESSP = {"newton-cg", "trust-ncg", "trust-krylov", "trust-constr"}


def minimize(fun, x0, args=(), method=None, bounds=None, constraints=(), tol=None, callback=None, options=None):
    """``scipy.optimize.minimize`` of ``fun(x, *args)`` (a scalar tensor) from the tensor ``x0``.

    Gradients come from ngrad (``jac=True``), Hessian-vector products for the methods that use
    them. Returns SciPy's ``OptimizeResult`` whose ``x`` is a float64 tensor of ``x0``'s shape.

    ```python
    >>> import ngrad
    >>> res = ngrad.scipy.minimize(lambda x: ((x - 3) ** 2).sum(), ngrad.zeros(2), method="BFGS")
    >>> res.success, [round(v, 5) for v in res.x.tolist()]
    (True, [3.0, 3.0])

    ```
    """
    from scipy import optimize

    x0t = x0 if isinstance(x0, Tensor) else tensor(x0, dtype=D.float64)
    shape = tuple(x0t.shape)
    start = x0t.detach().numpy().astype(np.float64).reshape(-1)
    kwargs = dict(
        args=(),
        method=method,
        jac=True,
        bounds=bounds,
        constraints=constraints,
        tol=tol,
        callback=callback,
        options=options,
    )
    if method is not None and method.lower() in _HESSP:
        kwargs["hessp"] = hessp(fun, x0t, args)
    res = optimize.minimize(value_and_grad(fun, x0t, args), start, **kwargs)
    res.x = tensor(np.asarray(res.x).reshape(shape), dtype=D.float64)
    return res
