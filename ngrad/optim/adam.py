"""Adam and AdamW (decoupled weight decay), with AMSGrad."""

from .optimizer import Optimizer, step_tensor

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """``torch.optim.Adam``: moment estimates ``m = lerp(m, g, 1 - beta1)``,
    ``v = beta2 * v + (1 - beta2) * g * g``, and ``p -= lr / (1 - beta1**t) * m / (sqrt(v) /
    sqrt(1 - beta2**t) + eps)``; ``weight_decay`` adds ``weight_decay * p`` to the gradient.

    ```python
    >>> import ngrad
    >>> w = ngrad.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = ngrad.optim.Adam([w], lr=0.1)
    >>> opt.zero_grad(); (w ** 2).sum().backward(); opt.step()
    >>> w
    tensor([ 0.9000, -1.9000], requires_grad=True)

    ```
    """

    _decoupled = False

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0,
        amsgrad=False,
        *,
        maximize=False,
        foreach=None,
        capturable=False,
        differentiable=False,
        fused=None,
    ):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(
            params,
            dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize),
        )

    def _update(self, params, h):
        from ..factories import zeros_like

        out = []
        lr, (beta1, beta2), eps, wd = h["lr"], h["betas"], h["eps"], h["weight_decay"]
        for p in params:
            g = self._grad(p, h)
            step = self._state(p, "step", step_tensor)
            m = self._state(p, "exp_avg", lambda: zeros_like(p).detach())
            v = self._state(p, "exp_avg_sq", lambda: zeros_like(p).detach())
            if wd != 0:
                if self._decoupled:
                    p_now = p * (1 - lr * wd)
                else:
                    g = g + wd * p
                    p_now = p
            else:
                p_now = p
            t = step + 1
            m_new = m.lerp(g, 1 - beta1)
            v_new = v * beta2 + (1 - beta2) * g * g
            bias1 = 1 - beta1**t
            bias2 = 1 - beta2**t
            step_size = lr / bias1
            if h["amsgrad"]:
                vmax = self._state(p, "max_exp_avg_sq", lambda: zeros_like(p).detach())
                vmax_new = vmax.maximum(v_new)
                out.append((vmax, vmax_new))
                denom = vmax_new.sqrt() / bias2**0.5 + eps
            else:
                denom = v_new.sqrt() / bias2**0.5 + eps
            out += [(step, t), (m, m_new), (v, v_new), (p, p_now + -step_size * m_new / denom)]
        return out


class AdamW(Adam):
    """``torch.optim.AdamW``: Adam with decoupled weight decay ``p *= 1 - lr * weight_decay``
    (default ``weight_decay=1e-2``)."""

    _decoupled = True

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=1e-2,
        amsgrad=False,
        *,
        maximize=False,
        foreach=None,
        capturable=False,
        differentiable=False,
        fused=None,
    ):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)
