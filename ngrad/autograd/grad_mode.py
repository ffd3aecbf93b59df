"""Grad-mode switches, as ``torch.autograd.grad_mode``: the same objects as ``ngrad.no_grad``,
``ngrad.enable_grad``, ``ngrad.set_grad_enabled`` and ``ngrad.inference_mode``."""

from ..grad_mode import (
    enable_grad,
    inference_mode,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_inference_mode_enabled"]
