"""The examples run, quickly, and reach what they claim."""
import runpy
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_lennard_jones_relaxes():
    mod = runpy.run_path(str(EXAMPLES / "lennard_jones.py"))
    start, end = mod["relax"](steps=60)
    assert end < start


def test_curve_fit_recovers_parameters():
    mod = runpy.run_path(str(EXAMPLES / "curve_fit.py"))
    params, loss = mod["fit"](steps=800)
    np.testing.assert_allclose(params, [2.0, 0.4, 3.0], atol=0.1)
    assert loss < 0.01
