"""``ngrad.nn``: only the functional activations exist (``ngrad.nn.functional``)."""

from . import functional

__all__ = ["functional"]
