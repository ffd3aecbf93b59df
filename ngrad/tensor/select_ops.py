"""Scans and selection methods of ``Tensor`` (``cumprod``, ``logcumsumexp``, ``cummax``/``cummin``,
``median``, ``kthvalue``, ``quantile``, ``mode``, ``unique``, ``searchsorted``, ``bucketize``,
``histc``). Contract: a mixin of ``Tensor``; every method records through ``record`` or the free
functions. ``FUNCTIONS`` names the methods ``ngrad`` also exports as functions
(``ngrad.name(input, ...)``); ``__all__`` the free functions it exports as they are.
"""

__all__: list[str] = []
FUNCTIONS: list[str] = []


class SelectOps:
    """Scans and selection methods, a mixin of ``Tensor``."""

    __slots__ = ()
