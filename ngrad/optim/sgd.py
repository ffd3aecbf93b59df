"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""

from .optimizer import Optimizer, required

__all__ = ["SGD"]


class SGD(Optimizer):
    """``torch.optim.SGD``: ``p -= lr * d`` where ``d`` is the gradient (plus ``weight_decay * p``),
    or its momentum buffer ``b = momentum * b + (1 - dampening) * d`` (Nesterov: ``d + momentum * b``).

    ```python
    >>> import ngrad
    >>> w = ngrad.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = ngrad.optim.SGD([w], lr=0.1, momentum=0.9)
    >>> for _ in range(2):
    ...     opt.zero_grad()
    ...     (w ** 2).sum().backward()
    ...     opt.step()
    >>> w
    tensor([ 0.4600, -0.9200], requires_grad=True)

    ```
    """

    def __init__(
        self,
        params,
        lr=1e-3,
        momentum=0,
        dampening=0,
        weight_decay=0,
        nesterov=False,
        *,
        maximize=False,
        foreach=None,
        differentiable=False,
        fused=None,
    ):
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(
            params,
            dict(
                lr=lr,
                momentum=momentum,
                dampening=dampening,
                weight_decay=weight_decay,
                nesterov=nesterov,
                maximize=maximize,
            ),
        )

    def _update(self, params, h):
        from ..factories import zeros_like

        out = []
        lr, momentum, wd = h["lr"], h["momentum"], h["weight_decay"]
        for p in params:
            d = self._grad(p, h)
            if wd != 0:
                d = d + wd * p
            if momentum != 0:
                if "momentum_buffer" in self.state[p]:
                    buf = self.state[p]["momentum_buffer"]
                    new_buf = buf * momentum + (1 - h["dampening"]) * d
                else:  # the first step starts the buffer at the gradient
                    buf = self._state(p, "momentum_buffer", lambda: zeros_like(p).detach())
                    new_buf = d
                out.append((buf, new_buf))
                d = d + momentum * new_buf if h["nesterov"] else new_buf
            out.append((p, p - lr * d))
        return out
