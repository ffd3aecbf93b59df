"""Grad-mode switches, as ``torch.autograd.grad_mode``."""
from ..grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
