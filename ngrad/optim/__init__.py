"""``ngrad.optim``: PyTorch's optimizers, each step one fused program per parameter group."""

from . import lr_scheduler
from .adam import Adam, AdamW
from .lbfgs import LBFGS
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "LBFGS", "lr_scheduler"]
