"""``ngrad.fft``: every transform against PyTorch (values, and gradients of random cotangents, in
float64/complex128 at rtol 1e-6) over sizes ``n``/``s`` that trim and pad, dims and the three
norms; central finite differences without PyTorch (real and imaginary parts perturbed);
frequencies and shifts; PyTorch's errors; compiled programs with FFT glue."""

import numpy as np
import pytest

import ngrad

from .oracles import draw, inner, libraries

# name -> (function of (lib, x), input kind: "r" real or "c" complex, input shape)
CASES = {
    "fft": (lambda t, x: t.fft.fft(x), "c", (3, 5)),
    "fft_n_pad_ortho": (lambda t, x: t.fft.fft(x, n=8, dim=0, norm="ortho"), "c", (3, 5)),
    "fft_real_input_trim": (lambda t, x: t.fft.fft(x, n=4, norm="forward"), "r", (3, 5)),
    "ifft": (lambda t, x: t.fft.ifft(x), "c", (4, 6)),
    "ifft_forward": (lambda t, x: t.fft.ifft(x, n=7, norm="forward"), "c", (4, 6)),
    "fft2": (lambda t, x: t.fft.fft2(x), "c", (2, 3, 4)),
    "ifft2_s": (lambda t, x: t.fft.ifft2(x, s=(5, 2), norm="ortho"), "c", (2, 3, 4)),
    "fftn": (lambda t, x: t.fft.fftn(x), "c", (2, 3, 4)),
    "fftn_dims": (lambda t, x: t.fft.fftn(x, s=(4, -1), dim=(2, 0)), "c", (2, 3, 4)),
    "ifftn": (lambda t, x: t.fft.ifftn(x, norm="forward"), "c", (2, 3, 4)),
    "rfft": (lambda t, x: t.fft.rfft(x), "r", (3, 6)),
    "rfft_odd": (lambda t, x: t.fft.rfft(x, n=7, norm="ortho"), "r", (3, 6)),
    "rfft_dim0": (lambda t, x: t.fft.rfft(x, dim=0, norm="forward"), "r", (5, 2)),
    "irfft": (lambda t, x: t.fft.irfft(x), "c", (3, 5)),
    "irfft_odd_n": (lambda t, x: t.fft.irfft(x, n=9, norm="ortho"), "c", (3, 5)),
    "irfft_trim_n": (lambda t, x: t.fft.irfft(x, n=4, norm="forward"), "c", (3, 5)),
    "rfft2": (lambda t, x: t.fft.rfft2(x), "r", (2, 4, 6)),
    "irfft2": (lambda t, x: t.fft.irfft2(x, s=(3, 5)), "c", (2, 4, 4)),
    "rfftn": (lambda t, x: t.fft.rfftn(x, norm="ortho"), "r", (2, 4, 5)),
    "irfftn": (lambda t, x: t.fft.irfftn(x), "c", (2, 4, 4)),
    "irfftn_dims": (lambda t, x: t.fft.irfftn(x, s=(6, 4), dim=(0, 2), norm="forward"), "c", (3, 2, 4)),
    "hfft": (lambda t, x: t.fft.hfft(x), "c", (3, 5)),
    "hfft_n_ortho": (lambda t, x: t.fft.hfft(x, n=7, norm="ortho"), "c", (3, 5)),
    "ihfft": (lambda t, x: t.fft.ihfft(x), "r", (3, 6)),
    "hfftn": (lambda t, x: t.fft.hfftn(x, norm="forward"), "c", (2, 4, 3)),
    "ihfft2": (lambda t, x: t.fft.ihfft2(x), "r", (2, 4, 6)),
    "shifts": (lambda t, x: t.fft.ifftshift(t.fft.fftshift(t.fft.fft(x), dim=1) * 2, dim=(0,)), "c", (3, 5)),
    "spectral_loss": (lambda t, x: (t.fft.rfft(x).abs() ** 2 * t.fft.rfftfreq(6, 0.5)).sum(-1), "r", (3, 6)),
}


def _input(lib, kind, shape, seed=3):
    rng = np.random.default_rng(seed)
    value = draw(rng, shape, "c128" if kind == "c" else "f64")
    return lib.tensor(value, dtype=lib.complex128 if kind == "c" else lib.float64, requires_grad=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(name):
    torch = pytest.importorskip("torch")
    fn, kind, shape = CASES[name]
    results = []
    for lib in (ngrad, torch):
        x = _input(lib, kind, shape)
        out = fn(lib, x)
        v = draw(np.random.default_rng(4), tuple(out.shape), "c128" if out.dtype.is_complex else "f64")
        (g,) = lib.autograd.grad(out, [x], lib.tensor(v))
        results.append((out.detach().resolve_conj().numpy(), g.resolve_conj().numpy()))
    for ours, theirs in zip(*results):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_against_finite_differences(name, rng):
    """Without torch: <u, J^T v> against central differences along u (complex: both parts)."""
    fn, kind, shape = CASES[name]
    x = _input(ngrad, kind, shape)
    out = fn(ngrad, x)
    v = draw(rng, tuple(out.shape), "c128" if out.dtype.is_complex else "f64")
    (g,) = ngrad.autograd.grad(out, [x], ngrad.tensor(v))
    u = draw(rng, shape, "c128" if kind == "c" else "f64")
    x0 = x.detach().numpy()

    def f(a):
        with ngrad.no_grad():
            return inner(v, fn(ngrad, ngrad.tensor(a)).resolve_conj().numpy())

    numeric = (f(x0 + 1e-6 * u) - f(x0 - 1e-6 * u)) / 2e-6
    assert np.isclose(inner(g.numpy(), u), numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["fft_n_pad_ortho", "rfft_odd", "irfft_odd_n", "hfft", "fftn_dims"])
def test_gradcheck_first_and_second_order_and_forward_mode(name):
    fn, kind, shape = CASES[name]
    x = _input(ngrad, kind, shape)
    assert ngrad.autograd.gradcheck(lambda a: fn(ngrad, a), (x,), check_forward_ad=True)
    assert ngrad.autograd.gradgradcheck(lambda a: fn(ngrad, a).abs() ** 2, (x,))


def test_forward_mode_matches_torch():
    torch = pytest.importorskip("torch")
    results = []
    for lib in (ngrad, torch):
        fw = lib.autograd.forward_ad
        rng = np.random.default_rng(9)
        with fw.dual_level():
            x = fw.make_dual(lib.tensor(rng.standard_normal((3, 6))), lib.tensor(rng.standard_normal((3, 6))))
            z = fw.make_dual(lib.tensor(draw(rng, (3, 4), "c128")), lib.tensor(draw(rng, (3, 4), "c128")))
            out = lib.fft.irfft(lib.fft.rfft(x, norm="ortho") * lib.fft.fft(z, n=4), n=5)
            results.append(fw.unpack_dual(out).tangent.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6, atol=1e-9)


def test_dtypes_follow_torch():
    f32, c64 = ngrad.tensor([1.0, 2.0, 3.0]), ngrad.tensor([1 + 1j, 2, 3])
    assert ngrad.fft.fft(f32).dtype is ngrad.complex64 and ngrad.fft.rfft(f32).dtype is ngrad.complex64
    assert ngrad.fft.fft(ngrad.arange(4)).dtype is ngrad.complex64
    assert ngrad.fft.irfft(c64).dtype is ngrad.float32 and ngrad.fft.hfft(c64).dtype is ngrad.float32
    assert ngrad.fft.fft(f32.double()).dtype is ngrad.complex128
    np.testing.assert_allclose(ngrad.fft.ifft(ngrad.fft.fft(c64)).numpy(), c64.numpy(), rtol=1e-6)
    x = ngrad.tensor([1.0, 2.0], requires_grad=True)
    names = [type(y.grad_fn).__name__ for y in (ngrad.fft.fft(x), ngrad.fft.rfft(x), ngrad.fft.irfft(x))]
    assert names == ["FftC2CBackward0", "FftR2CBackward0", "FftC2RBackward0"]


def test_frequencies_and_shifts():
    np.testing.assert_allclose(ngrad.fft.fftfreq(5, 0.1).numpy(), np.fft.fftfreq(5, 0.1), rtol=1e-6)
    np.testing.assert_allclose(ngrad.fft.fftfreq(6).numpy(), np.fft.fftfreq(6), rtol=1e-6)
    np.testing.assert_allclose(ngrad.fft.rfftfreq(7, 2.0).numpy(), np.fft.rfftfreq(7, 2.0), rtol=1e-6)
    assert ngrad.fft.fftfreq(4, dtype=ngrad.float64).dtype is ngrad.float64
    a = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(ngrad.fft.fftshift(ngrad.tensor(a)).numpy(), np.fft.fftshift(a))
    np.testing.assert_array_equal(ngrad.fft.ifftshift(ngrad.tensor(a), dim=1).numpy(), np.fft.ifftshift(a, axes=1))
    np.testing.assert_array_equal(ngrad.fft.fftshift(ngrad.tensor(a), dim=(0,)).numpy(), np.fft.fftshift(a, axes=0))


ERRORS = [
    (lambda t: t.fft.fft(t.ones(4), norm="xyz"), RuntimeError, 'Invalid normalization mode: "xyz"'),
    (lambda t: t.fft.fft(t.ones(4), n=0), RuntimeError, r"Invalid number of data points \(0\) specified"),
    (lambda t: t.fft.rfft(t.ones(4, dtype=t.complex64)), RuntimeError, "rfft expects a real input tensor"),
    (lambda t: t.fft.ihfft(t.ones(4, dtype=t.complex64)), RuntimeError, "ihfft expects a real input tensor"),
    (lambda t: t.fft.fft(t.ones(4), dim=3), IndexError, "Dimension out of range"),
    (lambda t: t.fft.fftn(t.ones(4), s=(2, 3)), RuntimeError, "Got shape with 2 values"),
    (lambda t: t.fft.irfft(t.ones(4, dtype=t.complex64), n=0), RuntimeError, "Invalid number of data points"),
    (lambda t: t.fft.fftn(t.ones(4, 4), s=(2, 2), dim=(0, 0)), RuntimeError, "FFT dims must be unique"),
    (lambda t: t.fft.fft2(t.ones(4)), IndexError, "Dimension out of range"),
]


@pytest.mark.parametrize("k", range(len(ERRORS)))
def test_errors_match_torch(k):
    fn, error, phrase = ERRORS[k]
    for lib in libraries():
        with pytest.raises(error, match=phrase):
            fn(lib)


@pytest.mark.numba
def test_compiled_program_with_fft_glue_equals_the_interpreter(jit_always, monkeypatch, rng):
    """A loss whose elementwise parts fuse around the FFT glue steps, value and gradient, run
    compiled (the second call) and interpreted."""
    xv = rng.standard_normal((4, 16))
    results = []
    for mode in ("never", "always"):
        monkeypatch.setenv("NGRAD_JIT", mode)
        x = ngrad.tensor(xv, requires_grad=True)
        spectrum = ngrad.fft.rfft(x.sin() * 2, norm="ortho")
        loss = (spectrum.abs() ** 2 * ngrad.fft.rfftfreq(16)).sum() + ngrad.fft.irfft(spectrum * 1j, n=16).sum()
        loss.backward()
        results.append((loss.item(), x.grad.numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-12)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-10, atol=1e-12)
