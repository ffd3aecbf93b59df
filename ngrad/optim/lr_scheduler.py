"""Learning-rate schedulers: ``StepLR``, ``ExponentialLR``, ``CosineAnnealingLR``.

Each ``step()`` writes the new rate into the optimizer's param groups. A compiled training step
(``ngrad.compile``) reads the rate on every call, so changing it never retraces.
"""

import math

__all__ = ["LRScheduler", "StepLR", "ExponentialLR", "CosineAnnealingLR"]


class LRScheduler:
    """Base class: ``last_epoch`` counts ``step()`` calls; subclasses give the closed-form rate."""

    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when resuming an optimizer"
                    )
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def get_last_lr(self):
        """The rates set by the last ``step()``."""
        return list(self._last_lr)

    def step(self):
        self.last_epoch += 1
        for g, lr in zip(self.optimizer.param_groups, self._rates()):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)

    def _rates(self):
        raise NotImplementedError


class StepLR(LRScheduler):
    """Multiply the rate by ``gamma`` every ``step_size`` steps.

    ```python
    >>> import ngrad
    >>> opt = ngrad.optim.SGD([ngrad.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = ngrad.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    >>> rates = []
    >>> for _ in range(5):
    ...     rates.append(sched.get_last_lr()[0]); opt.step(); sched.step()
    >>> rates
    [1.0, 1.0, 0.5, 0.5, 0.25]

    ```
    """

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _rates(self):
        # the recursive form PyTorch uses, so rates match it bit for bit
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [g["lr"] for g in self.optimizer.param_groups]
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]


class ExponentialLR(LRScheduler):
    """Multiply the rate by ``gamma`` every step."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _rates(self):
        if self.last_epoch == 0:
            return [g["lr"] for g in self.optimizer.param_groups]
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]


class CosineAnnealingLR(LRScheduler):
    """Anneal from the initial rate to ``eta_min`` along a half cosine over ``T_max`` steps."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):  # noqa: N803  (PyTorch's name)
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _rates(self):
        groups, e, t = self.optimizer.param_groups, self.last_epoch, self.T_max
        if e == 0:
            return [g["lr"] for g in groups]
        if (e - 1 - t) % (2 * t) == 0:
            return [
                g["lr"] + (base - self.eta_min) * (1 - math.cos(math.pi / t)) / 2
                for base, g in zip(self.base_lrs, groups)
            ]
        return [
            (1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t)) * (g["lr"] - self.eta_min)
            + self.eta_min
            for g in groups
        ]
