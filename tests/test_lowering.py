"""Rows that carry a decomposition (``Prim.lower``, ``ngrad/engine/transform/lower.py``).

``logsumexp``, ``softmax``, ``var`` and ``std`` are primitives whose derivatives are PyTorch's
formulas (``g * exp(x - out)``, ``y * (g - sum(g * y))``, ``2 / (n - correction) * g * (x - mean)``)
to every order (a second derivative sees
``out`` as a function of ``x``), while the compiled targets compute their values from the rows
they are lowered to. Checked: the lowered tape against the row's own forward (exactly, but for
float32 exponentials, which the softmax row rounds from float64 ones), first and second
derivatives against finite differences and PyTorch, forward mode, batching (vmap), and compiled
against interpreted to second order.
"""

import math

import numpy as np
import pytest

import ngrad
from ngrad.autograd import functional as AF
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.ir.tape import Builder
from ngrad.engine.transform.lower import LOWERED, lower

from .oracles import tensor_fd_check, torch_or_skip

NAN, INF = math.nan, math.inf
EDGES = np.array([[3e38, 3e38, -1.0], [-INF, -INF, -INF], [INF, 0.0, 1.0], [NAN, 0.0, 1.0], [1e4, -1e4, 0.5]])


def _lse_tape(shape, axes, keepdim, dtype="f64"):
    b = Builder()
    x = b.input(shape, dtype)
    y = x.logsumexp(axes=axes, keepdim=keepdim)
    return b.finish([y * y, y, x.exp()])  # read by another row, an output, and a row beside it


def _softmax_tape(shape, axes, keepdim, dtype="f64"):
    b = Builder()
    x = b.input(shape, dtype)
    y = x.softmax(axis=axes[0])
    return b.finish([y * y, y, x.exp()])


def _spread_tape(row):
    def make(shape, axes, keepdim, dtype="f64"):
        b = Builder()
        x = b.input(shape, dtype)
        y = getattr(x, row)(axes=axes, correction=1, keepdim=keepdim)
        return b.finish([y * y, y, x.exp()])

    return make


TAPES = {"logsumexp": _lse_tape, "softmax": _softmax_tape, "var": _spread_tape("var"), "std": _spread_tape("std")}

# the facade's function of each row, the same for ngrad and torch
ROWS = {
    "logsumexp": lambda lib, x, dim: lib.logsumexp(x, dim),
    "softmax": lambda lib, x, dim: lib.softmax(x, dim),
    "var": lambda lib, x, dim: x.var(dim),
    "std": lambda lib, x, dim: x.std(dim, correction=0),
}


def test_a_tape_without_such_rows_is_returned_as_it_is():
    b = Builder()
    x = b.input((3,), "f64")
    tape = b.finish([(x - x.amax(axes=(0,), keepdim=True).expand(shape=(3,))).exp()])
    assert lower(tape) is tape


@pytest.mark.parametrize(
    "shape,axes,keepdim",
    [((5, 3), (1,), False), ((5, 3), (1,), True), ((2, 3, 4), (0, 2), False), ((4, 0), (1,), False), ((), (), False)],
)
@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("row", ["logsumexp", "softmax", "var", "std"])
def test_the_lowered_tape_computes_what_the_row_computes(row, shape, axes, keepdim, dtype, rng):
    if row == "softmax" and (not shape or len(axes) > 1):
        return  # one axis, of a tensor with one
    tape = TAPES[row](shape, axes, keepdim, dtype)
    low = lower(tape).verify()
    assert not {ins.prim for ins in low.instrs} & LOWERED
    assert (low.inputs, low.kinds) == (tape.inputs, tape.kinds)
    assert [low.shapes[s] for s in low.outputs] == [tape.shapes[s] for s in tape.outputs]
    x = rng.standard_normal(shape) * 30
    if shape == (5, 3):
        x = EDGES
    x = np.asarray(x, np.float64 if dtype == "f64" else np.float32)
    with np.errstate(all="ignore"):
        for got, want in zip(interpret(low, [x]), interpret(tape, [x])):
            if row == "softmax" and dtype == "f32":  # NumPy's float32 exp against the row's
                np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)
            else:
                np.testing.assert_array_equal(got, want)


def test_lowering_computes_equal_steps_once():
    # the gradient's exp(x - max), its shift held constant (detach), is the forward's
    b = Builder()
    x = b.input((4, 3), "f64")
    from ngrad.engine.transform.differentiate import vjp

    y = x.logsumexp(axes=(1,), keepdim=False)
    joint = vjp(b.finish([y]), [x.slot]).tape
    low = lower(joint)
    assert sum(ins.prim == "exp" for ins in low.instrs) == 2  # exp(x - max) and exp(max - out)
    assert not any(ins.prim == "detach" for ins in low.instrs)


@pytest.mark.parametrize("row", sorted(ROWS))
@pytest.mark.parametrize("dim", [1, 0])
def test_first_and_second_derivatives_against_finite_differences(row, dim, rng):
    f = ROWS[row]
    w = rng.standard_normal((3, 4))

    def loss(x):
        y = f(ngrad, x, dim)
        return (y * y * ngrad.tensor(w[: y.shape[0], : y.shape[1]] if y.ndim == 2 else w[0, : y.shape[0]])).sum()

    tensor_fd_check(loss, [rng.standard_normal((3, 4))], rng)


def _hessian(lib, row, x, dim):
    x = lib.tensor(x, requires_grad=True)
    y = ROWS[row](lib, x, dim)
    w = lib.tensor(np.arange(y.numel(), dtype=np.float64).reshape(y.shape) % 4 - 1.5)
    (g,) = lib.autograd.grad((y * w).sum(), x, create_graph=True)
    v = lib.tensor(np.arange(x.numel(), dtype=np.float64).reshape(x.shape) % 3 - 1.0)
    (h,) = lib.autograd.grad((g * v).sum(), x)
    return y.detach().numpy(), g.detach().numpy(), h.numpy()


def _same(a, b, row):
    """``a`` equals ``b`` to 1e-12; a var or std Hessian's rounding residues where the exact value
    is 0 (std's at [3e38, 3e38, -1]: 6.5e-55 against -1.3e-54, beside entries of 1.8e-39) are
    compared at their row's scale."""
    finite = np.where(np.isfinite(b), np.abs(b), 0.0)
    atol = 1e-12 * finite.max(axis=-1, keepdims=True) if row in ("var", "std") and b.ndim else 1e-300
    assert np.isclose(a, b, rtol=1e-12, atol=atol, equal_nan=True).all(), (a, b)


@pytest.mark.parametrize("row", sorted(ROWS))
@pytest.mark.parametrize("values", ["ordinary", "edges"])
def test_value_gradient_and_hessian_follow_pytorch(row, values, rng):
    torch = torch_or_skip()
    x = rng.standard_normal((4, 5)) if values == "ordinary" else EDGES
    with np.errstate(all="ignore"):
        got = _hessian(ngrad, row, x, 1)
    want = _hessian(torch, row, x, 1)
    for a, b in zip(got, want):
        _same(a, b, row)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    "row,dim,keepdim",
    [("logsumexp", 1, False), ("logsumexp", -1, True), ("logsumexp", (0, 2), False), ("logsumexp", 0, False)]
    + [("softmax", 1, None), ("softmax", -1, None), ("softmax", 0, None)]
    + [("var", 1, False), ("var", (0, 2), True), ("std", -1, False), ("std", (0, 1), True)],
)
def test_values_and_gradients_follow_pytorch(row, dtype, dim, keepdim, rng):
    torch = torch_or_skip()
    x = rng.standard_normal((3, 4, 2)) * 5
    results = []
    for lib in (ngrad, torch):
        t = lib.tensor(x, dtype=getattr(lib, dtype), requires_grad=True)
        if row in ("var", "std"):
            y = getattr(t, row)(dim, keepdim=keepdim)
        else:
            y = lib.logsumexp(t, dim, keepdim=keepdim) if row == "logsumexp" else lib.softmax(t, dim)
        (y * y * y).sum().backward()
        results.append((y.detach().numpy(), t.grad.numpy()))
    # float32: a softmax gradient is a difference of terms of order 1
    rtol, atol = (1e-12, 1e-15) if dtype == "float64" else (1e-5, 1e-6)
    for a, b in zip(*results):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("row", sorted(ROWS))
def test_forward_mode_and_batched_jacobians_follow_pytorch(row, rng):
    torch = torch_or_skip()
    f = ROWS[row]
    x, t = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    _, got = AF.jvp(lambda a: f(ngrad, a, 1), ngrad.tensor(x), ngrad.tensor(t))
    _, want = torch.autograd.functional.jvp(lambda a: f(torch, a, 1), torch.tensor(x), torch.tensor(t))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-15)
    # vectorize=True batches the reverse pass: the row's batching rule
    got = AF.jacobian(lambda a: f(ngrad, a, 1), ngrad.tensor(x), vectorize=True)
    want = torch.autograd.functional.jacobian(lambda a: f(torch, a, 1), torch.tensor(x))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-15)
    got = AF.hessian(lambda a: f(ngrad, a, 0).reshape(-1)[0], ngrad.tensor(x[0]), vectorize=True)
    want = torch.autograd.functional.hessian(lambda a: f(torch, a, 0).reshape(-1)[0], torch.tensor(x[0]))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.numba
@pytest.mark.parametrize("row", sorted(ROWS))
def test_compiled_derivatives_equal_interpreted_ones(row, monkeypatch, tmp_path, rng):
    x = np.concatenate([rng.standard_normal((6, 5)), np.pad(EDGES, ((0, 0), (0, 2)), constant_values=-2.0)])
    with np.errstate(all="ignore"):
        want = _hessian(ngrad, row, x, 1)
        monkeypatch.setenv("NGRAD_JIT", "always")
        monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
        got = _hessian(ngrad, row, x, 1)
    for a, b in zip(got, want):
        _same(a, b, row)


def _scanned(xs, w):
    """Value and gradients of a scan whose steps use both rows."""
    xs, w = ngrad.tensor(xs, requires_grad=True), ngrad.tensor(w, requires_grad=True)

    def step(c, x):
        z = c + x * w
        c = ngrad.softmax(z, 0) + ngrad.logsumexp(z, 0)
        return c, c.sum()

    c, ys = ngrad.scan(step, ngrad.zeros(3, dtype=ngrad.float64), xs)
    loss = (ys * ys).sum() + c.sum()
    gx, gw = ngrad.autograd.grad(loss, (xs, w))
    return loss.item(), gx.numpy(), gw.numpy()


@pytest.mark.numba
@pytest.mark.parametrize("unroll", ["0", "65536"])
def test_scans_of_the_rows_compile_as_loops_and_as_bytecode(unroll, monkeypatch, tmp_path, rng):
    # a scan's body is a program of its own (runtime.plan lowers it); written out step by step
    # it runs as bytecode (the encoder lowers it)
    xs, w = rng.standard_normal((6, 3)), rng.standard_normal(3)
    want = _scanned(xs, w)
    monkeypatch.setenv("NGRAD_JIT", "always")
    monkeypatch.setenv("NGRAD_SCAN_UNROLL", unroll)
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    for got_part, want_part in zip(_scanned(xs, w), want):
        np.testing.assert_allclose(got_part, want_part, rtol=1e-12)
