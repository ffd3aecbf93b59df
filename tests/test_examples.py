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


def test_curve_fit_with_scipy_recovers_parameters():
    mod = runpy.run_path(str(EXAMPLES / "curve_fit_scipy.py"))
    params, loss, nfev = mod["fit"]()
    np.testing.assert_allclose(params, [1.5, 0.3, 2.2, 0.4], atol=0.02)
    assert loss < 1e-3


def test_mlp_trained_with_adam_fits():
    mod = runpy.run_path(str(EXAMPLES / "mlp_adam.py"))
    first, last = mod["train"](steps=300)
    assert last < first / 50


def test_cluster_relaxed_with_lbfgs_reaches_a_stationary_point():
    mod = runpy.run_path(str(EXAMPLES / "cluster_lbfgs.py"))
    start, end, force = mod["relax"]()
    assert end < start - 10 and force < 1e-3
