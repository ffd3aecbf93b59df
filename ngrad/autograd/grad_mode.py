"""Grad-mode switches, as ``torch.autograd.grad_mode``."""
from ..grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled,  # noqa: F401
                         no_grad, set_grad_enabled)
