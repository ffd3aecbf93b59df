"""``ngrad.utils``: data loading (``ngrad.utils.data``), as ``torch.utils``."""

from . import data

__all__ = ["data"]
