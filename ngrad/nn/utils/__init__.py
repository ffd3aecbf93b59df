"""``ngrad.nn.utils``: gradient clipping and parameters as one vector, as in ``torch.nn.utils``.

Contract: ``clip_grad_norm_`` and ``clip_grad_value_`` rescale or clamp the ``.grad`` of the given
parameters in place (outside the graph) with PyTorch's formulas and errors;
``parameters_to_vector`` concatenates the flattened parameters (differentiably) and
``vector_to_parameters`` writes slices of a vector back into their values. ``rnn`` packs
and pads sequences of different lengths for the recurrent layers.
"""

import math

from ... import grad_mode as _grad_mode
from ...tensor import Tensor
from . import rnn

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]


def _grads(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False):
    """The ``norm_type`` norm of the norms of ``tensors`` (the norm of their concatenation)."""
    from ...factories import tensor

    if isinstance(tensors, Tensor):
        tensors = [tensors]
    tensors = list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return tensor(0.0)
    with _grad_mode.no_grad():
        norms = [t.detach().norm(norm_type) for t in tensors]
        first = norms[0]
        total = first.reshape(1) if len(norms) == 1 else _stack(norms)
        total = total.norm(norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it cannot be "
            "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
            "`error_if_nonfinite=False`"
        )
    return total


def _stack(ts):
    from ...tensor import stack

    return stack([t.to(ts[0].dtype) for t in ts])


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scale the gradients of ``parameters`` so that their total ``norm_type`` norm is at most
    ``max_norm`` (by ``max_norm / (total + 1e-6)`` when above); returns the total norm before.

    ```python
    >>> import ngrad
    >>> w = ngrad.tensor([3.0, 4.0], requires_grad=True)
    >>> (w * w).sum().backward()
    >>> ngrad.nn.utils.clip_grad_norm_([w], max_norm=1.0), w.grad
    (tensor(10.), tensor([0.6000, 0.8000]))

    ```
    """
    grads = _grads(parameters)
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    if not grads:
        return total
    with _grad_mode.no_grad():
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient of ``parameters`` to [-clip_value, clip_value] in place."""
    clip_value = float(clip_value)
    with _grad_mode.no_grad():
        for g in _grads(parameters):
            g.clamp_(min=-clip_value, max=clip_value)


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one vector.

    ```python
    >>> import ngrad
    >>> ngrad.nn.utils.parameters_to_vector([ngrad.ones(2, 2), ngrad.zeros(1)])
    tensor([1., 1., 1., 1., 0.])

    ```
    """
    from ...tensor import cat

    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Write consecutive slices of ``vec`` into the values of ``parameters`` (as ``.data``)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    offset = 0
    for p in parameters:
        n = p.numel()
        p.data = vec[offset : offset + n].reshape(p.shape).detach().to(p.dtype)
        offset += n
