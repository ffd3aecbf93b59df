"""The scatter family as methods of ``Tensor`` (``scatter``, ``scatter_add``, ``scatter_reduce``,
``index_add``, ``index_copy``, ``index_fill``, ``index_put``, ``masked_scatter``,
``masked_select``, ``put``, ``take``, with their in-place forms) and the structural ops beside
them (``repeat_interleave``, ``kron``, ``rot90``...). Contract: a mixin of ``Tensor``; every
method records through ``record`` or the free functions. ``FUNCTIONS`` names the methods
``ngrad`` also exports as functions (``ngrad.name(input, ...)``); ``__all__`` the free functions
it exports as they are.
"""

__all__: list[str] = []
FUNCTIONS: list[str] = []


class ScatterOps:
    """The scatter family methods, a mixin of ``Tensor``."""

    __slots__ = ()
