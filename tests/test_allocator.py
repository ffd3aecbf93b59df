"""The process allocator (``runtime.allocator``): memory a freed array had is reused without page
faults, unless ``NGRAD_MALLOC=system``; each case runs in a fresh process, since malloc's settings
are the process's."""

import os
import platform
import subprocess
import sys

import pytest

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# ten live arrays of 100,000 float64 values at a time, as an interpreted program's temporaries
# are, then freed; the page faults per array made once the first rounds have run
_PROBE = """
import resource
import numpy as np
import ngrad
from ngrad.engine.runtime import allocator

x = np.random.default_rng(0).standard_normal(100_000)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    live = [x * x for _ in range(10)]
    del live
before = faults()
for _ in range(20):
    live = [x * x for _ in range(10)]
    del live
print(allocator.tune(), (faults() - before) / 200)
"""


def _probe(mode=None):
    env = dict(os.environ)
    env.pop("NGRAD_MALLOC", None)
    if mode is not None:
        env["NGRAD_MALLOC"] = mode
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    outcome, faults = out.stdout.split()
    return outcome, float(faults)


@pytest.mark.skipif(not GLIBC, reason="malloc is tuned on glibc only")
def test_freed_arrays_are_reused_without_page_faults():
    outcome, faults = _probe()
    assert outcome == "tuned"
    # an array of 800 KB is 196 pages: fresh memory faults on every one of them
    assert faults < 5


@pytest.mark.skipif(not GLIBC, reason="the difference shows on glibc only")
def test_system_leaves_malloc_as_it_was():
    outcome, faults = _probe("system")
    assert outcome == "system"
    # glibc's own rules: the heap's freed top goes back to the kernel, and comes back as faults
    assert faults > 50


def test_a_wrong_setting_names_the_variable():
    env = dict(os.environ, NGRAD_MALLOC="jemalloc")
    out = subprocess.run([sys.executable, "-c", "import ngrad"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "ValueError: NGRAD_MALLOC must be one of keep, system" in out.stderr
