"""Complex numbers as methods of ``Tensor`` (``real``, ``imag``, ``conj``, ``angle``,
``view_as_real``...). Contract: a mixin of ``Tensor``; every method records through ``record``
or the free functions. ``FUNCTIONS`` names the methods ``ngrad`` also exports as functions
(``ngrad.name(input, ...)``); ``__all__`` the free functions it exports as they are.
"""

__all__: list[str] = []
FUNCTIONS: list[str] = []


class ComplexOps:
    """Complex numbers methods, a mixin of ``Tensor``."""

    __slots__ = ()
