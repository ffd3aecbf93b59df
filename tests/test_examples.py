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


def test_ode_parameters_are_recovered():
    mod = runpy.run_path(str(EXAMPLES / "ode_fit.py"))
    theta, loss, evals = mod["fit"]()
    np.testing.assert_allclose(theta, [1.1, 0.4, 0.4, 0.1], rtol=0.05)
    assert loss < 0.01 and evals <= 40


def test_logistic_regression_reaches_the_optimum():
    mod = runpy.run_path(str(EXAMPLES / "logistic_regression.py"))
    w, b, w_true, accuracy = mod["fit"]()
    # stationarity of the penalised likelihood, computed independently with NumPy
    X, y, _ = mod["data"]()
    X, y = X.numpy(), y.numpy()
    p = 1 / (1 + np.exp(-(X @ w + b)))
    grad_w = X.T @ (p - y) / len(y) + 2e-4 * w
    assert np.abs(grad_w).max() < 2e-5 and abs(np.mean(p - y)) < 2e-5  # from about 0.1 at w = 0
    np.testing.assert_allclose(w, w_true, atol=0.2)
    assert accuracy > 0.6


def test_pytorch_style_regression_with_modules_and_a_data_loader_fits():
    mod = runpy.run_path(str(EXAMPLES / "regression_nn.py"))
    first, last, held_out = mod["train"](epochs=25)
    assert last < first / 20 and held_out < 0.02  # the noise alone is 0.0025


def test_lstm_learns_to_continue_sine_waves():
    mod = runpy.run_path(str(EXAMPLES / "lstm_sequence.py"))
    first, last, held_out, repeat = mod["train"]()
    assert last < first / 20 and held_out < repeat / 10


def test_a_1d_cnn_tells_waveforms_apart():
    mod = runpy.run_path(str(EXAMPLES / "cnn1d.py"))
    first, last, accuracy = mod["train"]()
    assert last < first / 5 and accuracy > 0.9  # chance is 1/3
