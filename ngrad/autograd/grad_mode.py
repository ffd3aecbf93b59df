"""Grad-mode switches, as ``torch.autograd.grad_mode``."""

from ..grad_mode import (
    is_inference_mode_enabled,  # noqa: F401
)
