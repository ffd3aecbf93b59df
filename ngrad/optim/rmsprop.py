"""RMSprop, plain or centered, with momentum."""

from .optimizer import Optimizer, step_tensor

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """``torch.optim.RMSprop``: ``s = alpha * s + (1 - alpha) * g * g``, ``p -= lr * g / (sqrt(s)
    + eps)``; ``centered`` subtracts the squared mean gradient from ``s``; ``momentum`` keeps a
    buffer ``b = momentum * b + g / (sqrt(s) + eps)`` and steps ``p -= lr * b``.

    ```python
    >>> import ngrad
    >>> w = ngrad.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = ngrad.optim.RMSprop([w], lr=0.01)
    >>> opt.zero_grad(); (w ** 2).sum().backward(); opt.step()
    >>> w
    tensor([ 0.9000, -1.9000], requires_grad=True)

    ```
    """

    def __init__(
        self,
        params,
        lr=1e-2,
        alpha=0.99,
        eps=1e-8,
        weight_decay=0,
        momentum=0,
        centered=False,
        capturable=False,
        foreach=None,
        maximize=False,
        differentiable=False,
    ):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if alpha < 0.0:
            raise ValueError(f"Invalid alpha value: {alpha}")
        super().__init__(
            params,
            dict(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
                maximize=maximize,
            ),
        )

    def _update(self, params, h):
        from ..factories import zeros_like

        out = []
        lr, alpha, eps, wd, momentum = h["lr"], h["alpha"], h["eps"], h["weight_decay"], h["momentum"]
        for p in params:
            g = self._grad(p, h)
            step = self._state(p, "step", step_tensor)
            s = self._state(p, "square_avg", lambda: zeros_like(p).detach())
            if wd != 0:
                g = g + wd * p
            s_new = s * alpha + (1 - alpha) * g * g
            out += [(step, step + 1), (s, s_new)]
            if h["centered"]:
                ga = self._state(p, "grad_avg", lambda: zeros_like(p).detach())
                ga_new = ga.lerp(g, 1 - alpha)
                out.append((ga, ga_new))
                avg = (s_new + -1 * ga_new * ga_new).sqrt() + eps
            else:
                avg = s_new.sqrt() + eps
            if momentum > 0:
                buf = self._state(p, "momentum_buffer", lambda: zeros_like(p).detach())
                buf_new = buf * momentum + g / avg
                out += [(buf, buf_new), (p, p - lr * buf_new)]
            else:
                out.append((p, p + -lr * g / avg))
        return out
