"""Shared oracles: central finite differences in float64, at the tape and the facade level; the
libraries a parity test runs on; the CUDA simulator run of a file's device tests."""

import os
import subprocess
import sys

import numpy as np
import pytest

import ngrad
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.ir.tape import Builder
from ngrad.engine.transform.differentiate import vjp

EPS = 1e-6


def libraries():
    """ngrad, and PyTorch where it is installed: a parity test runs the same code on each."""
    out = [ngrad]
    try:
        import torch

        out.append(torch)
    except ImportError:
        pass
    return out


LIBS = pytest.mark.parametrize("lib", libraries(), ids=lambda m: m.__name__)


def run_device_tests_simulated(path, tmp_path, skips_allowed=False):
    """The ``test_device_*`` tests of the test file ``path`` in a child process under Numba's
    CUDA simulator (without a GPU, so CI runs them on every commit): all must pass, and none
    skip unless ``skips_allowed``."""
    from ngrad.engine.targets.cuda import cuda_status

    if "not installed" in cuda_status()[1]:
        pytest.skip("numba-cuda is not installed (pip install 'ngrad[cuda]')")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("already in the simulator")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", NGRAD_CACHE_DIR=str(tmp_path / "kernels"))
    command = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider"]
    listed = subprocess.run(
        [*command, "--co", "-k", "test_device_", os.path.abspath(path)], env=env, capture_output=True, text=True
    )
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    assert ids, listed.stdout[-2000:] + listed.stderr[-2000:]
    # the simulator runs kernels in Python on one core: the tests are split over two children,
    # which run at once (CI has two cores and the parent only waits)
    cwd = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    children = []
    for k, part in enumerate((ids[0::2], ids[1::2])):
        if part:  # output to files: a child that fills a pipe nobody reads yet would hang
            log = open(tmp_path / f"simulated-{k}.log", "w+")  # noqa: SIM115  (closed below)
            children.append((subprocess.Popen([*command, *part], env=env, cwd=cwd, stdout=log, stderr=log), log))
    for child, log in children:
        child.wait(timeout=600)
        log.seek(0)
        tail = log.read()[-4000:]
        log.close()
        assert child.returncode == 0 and "failed" not in tail and " passed" in tail, tail
        assert skips_allowed or "skipped" not in tail, tail


def _short(a):
    return {
        np.dtype(np.float64): "f64",
        np.dtype(np.float32): "f32",
        np.dtype(np.int64): "i64",
        np.dtype(np.bool_): "b8",
        np.dtype(np.int32): "i32",
        np.dtype(np.complex128): "c128",
        np.dtype(np.complex64): "c64",
    }[a.dtype]


def draw(rng, shape, dtype):
    """Standard normal values of ``shape`` for a slot of ``dtype`` (a short name or a NumPy
    dtype): complex slots get independent real and imaginary parts."""
    if str(dtype) in ("c64", "c128", "complex64", "complex128"):
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return rng.standard_normal(shape)


def inner(a, b):
    """The real inner product of two arrays (complex ones as pairs of reals): the pairing of a
    cotangent with a tangent under PyTorch's convention for complex gradients."""
    return float(np.sum(np.real(np.conj(a) * b)))


def prim_tape(name, args, params):
    b = Builder()
    vs = [b.input(a.shape, _short(a)) for a in args]
    out = b.emit(name, vs, params)
    return b.finish([out]).verify(), vs


def _fd(f, args, i, u):
    plus = [a.copy() for a in args]
    minus = [a.copy() for a in args]
    plus[i] = plus[i] + EPS * u
    minus[i] = minus[i] - EPS * u
    return (f(plus) - f(minus)) / (2 * EPS)


def fd_gradient(f, x):
    """The central-difference gradient of a scalar NumPy function of one array."""
    return np.array([_fd(lambda a: f(a[0]), [x], 0, e.reshape(x.shape)) for e in np.eye(x.size)]).reshape(x.shape)


def np_rosenbrock(x):
    return float(np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))


def dot_check(tape, wrt_pos, args, rng, rtol=1e-5, atol=1e-7):
    """<u, J^T v> against <v, J u> by central differences for each input in ``wrt_pos``."""
    joint = vjp(tape, [tape.inputs[i] for i in wrt_pos])
    joint.tape.verify()
    outs = interpret(tape, args)
    vs = [draw(rng, o.shape, o.dtype) for o in outs]
    res = interpret(joint.tape, list(args) + vs)
    for k, i in enumerate(wrt_pos):
        u = draw(rng, args[i].shape, args[i].dtype)
        pos = joint.grads[k]
        analytic = 0.0 if pos is None else inner(res[pos], u)

        def f(a):
            return sum(inner(v, o) for v, o in zip(vs, interpret(tape, a)))

        numeric = _fd(f, args, i, u)
        assert np.isclose(analytic, numeric, rtol=rtol, atol=atol), (i, analytic, numeric)
    return joint


def second_order_tape(tape, wrt_pos):
    """The tape of h(x, v, w) = <w, J^T(x) v>: differentiating it checks second derivatives."""
    joint = vjp(tape, [tape.inputs[i] for i in wrt_pos])
    b = Builder(joint.tape)
    total = None
    for k, _i in enumerate(wrt_pos):
        pos = joint.grads[k]
        if pos is None:
            continue
        g = b.var(joint.tape.outputs[pos])
        w = b.input(g.shape, g.dtype)
        term = (g * w).sum(axes=tuple(range(len(g.shape))), keepdim=False)
        total = term if total is None else total + term
    return b.finish([total]).verify()


def torch_or_skip():
    return pytest.importorskip("torch")


def tensor_fd_check(fn, inputs, rng, rtol=1e-5, atol=1e-7, second=True):
    """Check ngrad.autograd.grad of ``fn`` (float64 tensors in, tensor out) by finite differences,
    and its second derivative through create_graph=True."""
    xs = [ngrad.tensor(a, dtype=ngrad.float64, requires_grad=True) for a in inputs]
    out = fn(*xs)
    v = rng.standard_normal(tuple(out.shape))
    vt = ngrad.tensor(v)
    grads = ngrad.autograd.grad(out, xs, vt, create_graph=second, allow_unused=True)

    def f(arrs):
        with ngrad.no_grad():
            return float(np.sum(v * fn(*[ngrad.tensor(a) for a in arrs]).numpy()))

    for i, g in enumerate(grads):
        u = rng.standard_normal(inputs[i].shape)
        analytic = 0.0 if g is None else float(np.sum(u * g.detach().numpy()))
        numeric = _fd(f, [np.asarray(a, np.float64) for a in inputs], i, u)
        assert np.isclose(analytic, numeric, rtol=rtol, atol=atol), (i, analytic, numeric)
    if second:
        ws = [rng.standard_normal(inputs[i].shape) for i in range(len(inputs))]
        h = sum((g * ngrad.tensor(w)).sum() for g, w in zip(grads, ws) if g is not None and g.requires_grad)
        if isinstance(h, ngrad.Tensor) and h.requires_grad:
            hg = ngrad.autograd.grad(h, xs, allow_unused=True)

            def hf(arrs):
                zs = [ngrad.tensor(a, requires_grad=True) for a in arrs]
                gs = ngrad.autograd.grad(fn(*zs), zs, vt, allow_unused=True)
                return sum(float(np.sum(g.numpy() * w)) for g, w in zip(gs, ws) if g is not None)

            for i, g in enumerate(hg):
                u = rng.standard_normal(inputs[i].shape)
                analytic = 0.0 if g is None else float(np.sum(u * g.numpy()))
                numeric = _fd(hf, [np.asarray(a, np.float64) for a in inputs], i, u)
                assert np.isclose(analytic, numeric, rtol=1e-4, atol=1e-6), ("second", i, analytic, numeric)


def check_damaged_plan_is_made_again(path, make):
    """Damage the stored plan at ``path`` four ways (cut in half, one bit flipped, emptied,
    garbage); after each, ``make()`` must make it again and store exactly what was there."""
    with open(path, "rb") as f:
        stored = f.read()
    for damaged in (stored[: len(stored) // 2], stored[:40] + bytes([stored[40] ^ 1]) + stored[41:], b"", b"x" * 10):
        with open(path, "wb") as f:
            f.write(damaged)
        make()
        with open(path, "rb") as f:
            assert f.read() == stored
