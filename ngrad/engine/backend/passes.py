"""Pass lists: each long backend transformation (fusion, bytecode encoding, loop rendering) is a
sequence of named, described passes over one small state object.

Contract: ``run_passes(what, passes, state)`` calls each ``Pass`` of ``passes`` on ``state`` in
order and returns ``state``. A pass reads and writes only that state, so each can be run and
tested on its own (tests/test_passes.py). With ``NGRAD_DEBUG`` at ``level`` or more (3 unless the
caller says otherwise) every pass prints its name and time to stderr.
"""

import sys
import time
import typing

from .. import pace
from ..config import debug_level

__all__ = ["Pass", "run_passes"]


class Pass(typing.NamedTuple):
    """One step of a pass list: its ``name``, what it decides (``description``) and the function
    that runs it on the state."""

    name: str
    description: str
    run: typing.Callable


def run_passes(what, passes, state, level=3):
    """Run ``passes`` on ``state`` in order (``what`` names the list in debug output, printed from
    ``NGRAD_DEBUG=level`` on); return ``state``."""
    timed = debug_level() >= level
    for p in passes:
        pace.step()  # a pass at a time: the compile worker's pacing looks in between
        t = time.perf_counter() if timed else 0.0
        p.run(state)
        if timed:
            print(f"ngrad: {what} pass {p.name}: {(time.perf_counter() - t) * 1e3:.3f} ms", file=sys.stderr)
    return state
