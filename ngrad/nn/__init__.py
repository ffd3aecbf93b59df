"""``ngrad.nn``: ``Module`` and PyTorch's layers, containers, activations and losses, with
``functional``, ``init`` and ``utils``. See docs/nn.md.

```python
>>> import ngrad
>>> from ngrad import nn
>>> net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
>>> loss = nn.MSELoss()(net(ngrad.ones(4, 2)), ngrad.zeros(4, 1))
>>> loss.backward()
>>> net[0].weight.grad.shape
ngrad.Size([8, 2])

```
"""

from . import functional, init, utils
from .modules import *  # noqa: F403  (the layers, as torch.nn exports them)
from .modules import __all__ as _modules_all
from .parameter import Buffer, Parameter

__all__ = ["functional", "init", "utils", "Parameter", "Buffer", *_modules_all]
