"""``ngrad.autograd``: reverse-mode differentiation with ``torch.autograd``'s API."""

from ..grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from . import anomaly_mode, forward_ad, function, functional, grad_mode, graph
from .anomaly_mode import detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from .function import Function, FunctionCtx, once_differentiable
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .reverse import backward, grad
from .variable import Variable

__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "grad_mode"]
