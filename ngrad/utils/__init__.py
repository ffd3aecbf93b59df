"""``ngrad.utils``: data loading (``ngrad.utils.data``) and activation checkpointing
(``ngrad.utils.checkpoint``), as ``torch.utils``."""

from . import checkpoint, data

__all__ = ["checkpoint", "data"]
