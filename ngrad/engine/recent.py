"""In-memory caches with a bound: the one container the engine keeps compiled things in.

Contract: a ``Recent`` is a dict that keeps its ``bound()`` most recently used entries (by
default ``config.memory_entries()``, read at each assignment), so a process that meets ever new
shapes stays within a fixed budget. It imports only ``config``; every layer may use it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .config import memory_entries

__all__ = ["Recent"]


class Recent(OrderedDict[Any, Any]):
    """A dict that keeps its ``memory_entries()`` (or ``bound()``) most recently used entries:
    ``get`` and assignment mark an entry used, and an assignment past the bound drops the least
    recently used ones (``evicted`` is told of each). Dropping an entry only drops this reference:
    whoever holds the value (a thread running a plan, a driver) keeps it working. Each step is
    one operation under the GIL, and a key another thread removed meanwhile is no error."""

    def bound(self) -> int:
        """How many entries this cache keeps (read at each assignment, so tests may change it)."""
        return memory_entries()

    def get(self, key: Any, default: Any = None) -> Any:  # type: ignore[override]
        value = super().get(key, default)
        if value is not default:
            try:
                self.move_to_end(key)
            except KeyError:  # dropped by another thread meanwhile: the caller still has it
                pass
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        bound = self.bound()
        while len(self) > bound:
            try:
                old, dropped = self.popitem(last=False)
            except KeyError:
                break
            self.evicted(old, dropped)

    def evicted(self, key: Any, value: Any) -> None:
        """Called with each entry dropped past the bound (nothing by default)."""
