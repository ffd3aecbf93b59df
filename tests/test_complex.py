"""Complex tensors: dtypes and PyTorch's promotion, factories and printing, complex arithmetic
and elementwise math, reductions and products, ``real``/``imag``/``conj``/``angle``/``polar``/
``view_as_real``/``view_as_complex``, with PyTorch's convention for gradients (the conjugate
Wirtinger derivative) in reverse mode, forward mode and ``gradcheck``; central finite
differences (real and imaginary parts perturbed) at the tape level without PyTorch; compiled
kernels against the interpreter."""

import itertools
import os

import numpy as np
import pytest

import ngrad
from ngrad.engine.ir import dtypes as D
from ngrad.engine.ir.interpret import interpret, np_dtype
from ngrad.engine.ir.shapes import TapeError
from ngrad.engine.ir.tape import Builder
from ngrad.engine.transform.differentiate import vjp

from .oracles import (
    dot_check,
    draw,
    inner,
    libraries,
    prim_tape,
    run_device_tests_simulated,
    second_order_tape,
)


def cplx(rng, *shape, lo=0.5, hi=2.0):
    """Complex values with moduli in [lo, hi] (away from the branch points and kinks at 0)."""
    return rng.uniform(lo, hi, shape) * np.exp(1j * rng.uniform(-2.5, 2.5, shape))


# --- dtypes and promotion --------------------------------------------------------------------------


def test_complex_dtypes_and_their_properties():
    c64, c128 = ngrad.complex64, ngrad.complex128
    assert ngrad.cfloat is c64 and ngrad.cdouble is c128
    assert c64.is_complex and not c64.is_floating_point and c64.is_signed and c64.itemsize == 8
    assert c64.to_real() is ngrad.float32 and ngrad.float64.to_complex() is c128
    assert ngrad.tensor([1j]).dtype is c64 and ngrad.tensor([1 + 0j], dtype=c128).dtype is c128
    assert ngrad.tensor(np.array([1j], np.complex128)).dtype is c128
    assert ngrad.tensor([1, 2.5, 1j]).is_complex() and not ngrad.tensor([1.0]).is_complex()
    assert ngrad.get_default_complex_dtype() is c64
    ngrad.set_default_dtype(ngrad.float64)
    try:
        assert ngrad.tensor([1j]).dtype is c128 and ngrad.get_default_complex_dtype() is c128
    finally:
        ngrad.set_default_dtype(ngrad.float32)
    # without torch: complex with float64 gives complex128, a Python complex the default complex
    assert D.promote(D.complex64, D.float64) is D.complex128
    assert D.result_type([D.float64], [], [D.scalar_type(3)]) is D.complex128
    assert D.result_type([D.int64], [D.complex128]) is D.complex128
    assert D.result_type([D.float32], [D.complex128]) is D.complex64


def test_promotion_matches_torch_for_every_pair_and_tier():
    torch = pytest.importorskip("torch")
    ours = [D.bool_, D.int32, D.int64, D.float32, D.float64, D.complex64, D.complex128]
    theirs = dict(zip(ours, [torch.bool, torch.int32, torch.int64, torch.float32, torch.float64]))
    theirs.update({D.complex64: torch.complex64, D.complex128: torch.complex128})
    for a, b in itertools.product(ours, ours):
        assert theirs[D.promote(a, b)] == torch.promote_types(theirs[a], theirs[b])
        for sa, sb in [((2,), ()), ((), (2,)), ((), ())]:
            x, y = ngrad.zeros(sa, dtype=a), ngrad.zeros(sb, dtype=b)
            tx, ty = torch.zeros(sa, dtype=theirs[a]), torch.zeros(sb, dtype=theirs[b])
            assert theirs[(x + y).dtype] == torch.result_type(tx, ty), (a, b, sa, sb)
        for scalar in (True, 2, 2.5, 1j):
            assert theirs[(ngrad.zeros(2, dtype=a) * scalar).dtype] == (torch.zeros(2, dtype=theirs[a]) * scalar).dtype


# --- factories, printing, conversion ------------------------------------------------------------------

PRINTED = [
    [1 + 2j, 3],
    [[1.5 + 2j, -3.25e-5j]],
    [1e10 + 1j, 2],
    [0j, 0j],
    1j,
    [float("nan") + 1j, 2 - float("inf") * 1j],
    [complex(k, k / 2) for k in range(30)],
    [complex(k * 1.25, -k / 2) for k in range(1200)],
]


@pytest.mark.parametrize("data", PRINTED, ids=range(len(PRINTED)))
def test_printing_matches_torch(data):
    torch = pytest.importorskip("torch")
    for dtype in (None, "complex128"):
        ours = ngrad.tensor(data, dtype=dtype and getattr(ngrad, dtype))
        theirs = torch.tensor(data, dtype=dtype and getattr(torch, dtype))
        assert repr(ours) == repr(theirs).replace("torch.", "ngrad.")
    z = ngrad.tensor([1 + 2j], requires_grad=True)
    assert repr(z * 2) == "tensor([2.+4.j], grad_fn=<MulBackward0>)"


def test_factories_item_numpy_and_requires_grad():
    z = ngrad.zeros(2, dtype=ngrad.complex64)
    assert z.dtype is ngrad.complex64 and z.numpy().dtype == np.complex64
    assert ngrad.ones(2, 2, dtype=ngrad.complex128, requires_grad=True).requires_grad
    assert ngrad.tensor(1 + 2j).item() == 1 + 2j and isinstance(ngrad.tensor(1 + 2j).item(), complex)
    assert ngrad.tensor([1j, 2]).tolist() == [1j, 2 + 0j]
    np.testing.assert_array_equal(ngrad.tensor([1j], requires_grad=True).detach().numpy(), [1j])
    x = ngrad.tensor([1.0, 2.0]).to(ngrad.complex64)
    assert x.dtype is ngrad.complex64 and x.tolist() == [1 + 0j, 2 + 0j]
    assert (ngrad.tensor([1 + 2j]).to(ngrad.float64)).tolist() == [1.0]  # the real part, as PyTorch's


# --- errors --------------------------------------------------------------------------------------------

REFUSED = [
    (lambda t, z: z < z, NotImplementedError, "not implemented for 'ComplexFloat'"),
    (lambda t, z: z >= 1, NotImplementedError, "not implemented for 'ComplexFloat'"),
    (lambda t, z: z.sign(), NotImplementedError, "Please use torch.sgn instead"),
    (lambda t, z: z.floor(), NotImplementedError, "floor is not supported for complex inputs"),
    (lambda t, z: t.maximum(z, z), RuntimeError, "maximum not implemented for complex tensors"),
    (lambda t, z: z.amax(), NotImplementedError, '"max_values_cpu" not implemented'),
    (lambda t, z: z.argmax(), RuntimeError, "argmax(): does not support complex input"),
    (lambda t, z: z.erf(), NotImplementedError, "not implemented for 'ComplexFloat'"),
    (lambda t, z: t.atan2(z, z), NotImplementedError, '"atan2_cpu" not implemented'),
    (lambda t, z: z.imag.imag, RuntimeError, "imag is not implemented for tensors with non-complex dtypes"),
    (lambda t, z: t.view_as_real(z.real), RuntimeError, "view_as_real is only supported for complex tensors"),
    (lambda t, z: t.view_as_complex(t.ones(2, 3)), RuntimeError, "Tensor must have a last dimension of size 2"),
    (
        lambda t, z: t.view_as_complex(t.ones(2, 2, dtype=t.int64)),
        RuntimeError,
        "but got a tensor of scalar type: Long",
    ),
    (
        lambda t, z: t.complex(t.ones(2), t.ones(2, dtype=t.float64)),
        RuntimeError,
        "Expected object of scalar type Float",
    ),
    (lambda t, z: t.complex(t.ones(2, dtype=t.int64), t.ones(2, dtype=t.int64)), RuntimeError, "Half, Float or Double"),
    (lambda t, z: t.polar(t.ones(2), t.ones(2, dtype=t.float64)), RuntimeError, "Expected object of scalar type"),
    (lambda t, z: (z * 1).sum().backward(), RuntimeError, "does not require grad"),
    (lambda t, z: t.ones(1, requires_grad=True).mul(z).sum().backward(), RuntimeError, "only for real scalar outputs"),
]


@pytest.mark.parametrize("k", range(len(REFUSED)))
def test_what_torch_refuses_for_complex_is_refused_the_same_way(k):
    fn, error, phrase = REFUSED[k]
    for lib in libraries():
        with pytest.raises(error, match=phrase.replace("(", r"\(").replace(")", r"\)")):
            fn(lib, lib.tensor([1 + 2j, -1j]))


# --- values and gradients against torch ----------------------------------------------------------------

# (name, function of (lib, z, w) -> tensor): z, w complex128 leaves of shape (2, 3)
OPS = {
    "mul_abs": lambda t, z, w: (z * w).abs(),
    "exp_real": lambda t, z, w: (z.exp() * w).real,
    "div_imag": lambda t, z, w: (z / w).imag,
    "log_sqrt_angle": lambda t, z, w: (z.log() + w.sqrt()).angle(),
    "trig": lambda t, z, w: z.sin() * w.cos() + z.tan() + w.tanh(),
    "hyperbolic": lambda t, z, w: z.sinh() - w.cosh(),
    "inverse_trig": lambda t, z, w: (z * 0.3).asin() + (w * 0.3).acos() + z.atan(),
    "log1p_expm1": lambda t, z, w: z.log1p() * w.expm1(),
    "pow": lambda t, z, w: z**w,
    "pow_literal": lambda t, z, w: z**2 + w**3 + z**0.5 + w**-1,
    "pow_complex_literal": lambda t, z, w: z ** (1.5 - 0.5j),
    "sigmoid_conj": lambda t, z, w: z.sigmoid() * w.conj(),
    "conj_physical": lambda t, z, w: z.conj_physical() * w.resolve_conj(),
    "reciprocal_square_rsqrt": lambda t, z, w: z.reciprocal() + w.square() + z.rsqrt(),
    "sgn": lambda t, z, w: z.sgn() * w,
    "scalars": lambda t, z, w: (z * 1j + 2.5) / (1 - 0.5j) - w * 2,
    "mixed_real": lambda t, z, w: z * z.abs() + w.real * 2 + z.imag,
    "view_as_real": lambda t, z, w: t.view_as_real(z * w) ** 2,
    "view_as_complex": lambda t, z, w: t.view_as_complex(t.view_as_real(z).flip(-1).contiguous()) * w,
    "complex": lambda t, z, w: t.complex(z.real * w.imag, z.abs()),
    "polar": lambda t, z, w: t.polar(z.abs(), w.angle()),
    "sum_mean": lambda t, z, w: z.sum(0) * w.mean(1, keepdim=True),
    "prod": lambda t, z, w: z.prod(1) + w.prod(),
    "cumsum": lambda t, z, w: z.cumsum(1) * w,
    "norm_var_std_vdot": lambda t, z, w: (
        t.linalg.vector_norm(z, dim=1) + z.var(1) + w.std(1) + z.norm(1) + t.vdot(z[0], w[1]).real
    ),
    "matmul": lambda t, z, w: z @ w.mT,
    "where": lambda t, z, w: t.where(z.abs() > 1, z, w),
    "movement": lambda t, z, w: z.t().reshape(3, 2)[1:] * w.flip(0).transpose(0, 1)[:2],
    "cat_stack": lambda t, z, w: t.cat([z, w], 0) + t.stack([w, z]).sum(0).repeat(2, 1),
}


def _leaves(lib, rng_state):
    rng = np.random.default_rng(rng_state)
    return [lib.tensor(cplx(rng, 2, 3), dtype=lib.complex128, requires_grad=True) for _ in range(2)]


@pytest.mark.parametrize("name", sorted(OPS))
def test_values_and_gradients_of_random_cotangents_match_torch(name):
    torch = pytest.importorskip("torch")
    results = []
    for lib in (ngrad, torch):
        z, w = _leaves(lib, 5)
        out = OPS[name](lib, z, w)
        rng = np.random.default_rng(6)
        v = draw(rng, tuple(out.shape), "c128" if out.dtype.is_complex else "f64")
        grads = lib.autograd.grad(out, [z, w], lib.tensor(v), allow_unused=True)
        results.append(
            [out.detach().resolve_conj().numpy()] + [g.resolve_conj().numpy() if g is not None else None for g in grads]
        )
    for ours, theirs in zip(*results):
        assert (ours is None) == (theirs is None)
        if ours is not None:
            assert ours.dtype == theirs.dtype
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", sorted(OPS))
def test_a_real_loss_backward_gives_the_gradient_of_finite_differences(name, rng):
    """Without torch: ``.grad`` of a complex leaf is dL/dx + i dL/dy for the real loss L."""
    z, w = _leaves(ngrad, 5)
    out = OPS[name](ngrad, z, w)
    v = draw(rng, tuple(out.shape), "c128" if out.dtype.is_complex else "f64")

    def loss(zv, wv):
        with ngrad.no_grad():
            o = OPS[name](ngrad, ngrad.tensor(zv), ngrad.tensor(wv)).numpy()
        return inner(v, o)

    inner_loss = ngrad.tensor(v, dtype=out.dtype)
    (out * inner_loss.conj()).real.sum().backward() if out.dtype.is_complex else (out * inner_loss).sum().backward()
    zv, wv = z.detach().numpy(), w.detach().numpy()
    for leaf, k in ((z, 0), (w, 1)):
        u = draw(rng, (2, 3), "c128")
        eps = 1e-6
        shifted = [[zv, wv], [zv, wv]]
        shifted[0][k], shifted[1][k] = (zv, wv)[k] + eps * u, (zv, wv)[k] - eps * u
        numeric = (loss(*shifted[0]) - loss(*shifted[1])) / (2 * eps)
        analytic = 0.0 if leaf.grad is None else inner(leaf.grad.numpy(), u)
        assert np.isclose(analytic, numeric, rtol=1e-5, atol=1e-7), (name, k, analytic, numeric)


@pytest.mark.parametrize("name", ["trig", "pow", "sigmoid_conj", "polar", "view_as_complex", "matmul", "prod"])
def test_forward_mode_matches_torch(name):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    zv, wv, tz, tw = (cplx(rng, 2, 3) for _ in range(4))
    results = []
    for lib in (ngrad, torch):
        fw = lib.autograd.forward_ad
        with fw.dual_level():
            z = fw.make_dual(lib.tensor(zv), lib.tensor(tz))
            w = fw.make_dual(lib.tensor(wv), lib.tensor(tw))
            out = OPS[name](lib, z, w)
            results.append(fw.unpack_dual(out).tangent.resolve_conj().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6, atol=1e-9)


def test_gradcheck_takes_complex_inputs_and_outputs_and_catches_a_wrong_rule(rng):
    z = ngrad.tensor(cplx(rng, 2, 3), dtype=ngrad.complex128, requires_grad=True)
    w = ngrad.tensor(cplx(rng, 2, 3), dtype=ngrad.complex128, requires_grad=True)
    for name in ("trig", "polar", "mixed_real", "view_as_real", "prod"):
        fn = OPS[name]
        assert ngrad.autograd.gradcheck(lambda a, b, fn=fn: fn(ngrad, a, b), (z, w), check_forward_ad=True)
    assert ngrad.autograd.gradgradcheck(lambda a, b: OPS["pow"](ngrad, a, b), (z, w))

    class WrongConj(ngrad.autograd.Function):  # forgets the conjugate of z * w's rule
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, g * a

    class RightConj(WrongConj):
        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b.conj(), g * a.conj()

    assert WrongConj.apply(z, w).requires_grad  # a complex output of a Function is differentiable
    with pytest.raises(ngrad.autograd.GradcheckError, match="Jacobian mismatch"):
        ngrad.autograd.gradcheck(WrongConj.apply, (z, w))
    assert ngrad.autograd.gradcheck(RightConj.apply, (z, w))


# --- the table's rows on complex values, by finite differences (no torch) -------------------------------

COMPLEX_ROWS = {
    "neg": 1,
    "exp": 1,
    "log": 1,
    "log1p": 1,
    "expm1": 1,
    "sqrt": 1,
    "sin": 1,
    "cos": 1,
    "tan": 1,
    "asin": 1,
    "acos": 1,
    "atan": 1,
    "sinh": 1,
    "cosh": 1,
    "tanh": 1,
    "sigmoid": 1,
    "abs": 1,
    "add": 2,
    "sub": 2,
    "mul": 2,
    "div": 2,
    "pow": 2,
}


@pytest.mark.parametrize("name", sorted(COMPLEX_ROWS) + ["sum", "prod", "cumsum", "matmul", "cast", "where"])
def test_rows_on_complex_values_first_and_second_order(name, rng):
    xs = [cplx(rng, 3, 3) * (0.4 if name in ("asin", "acos", "tan") else 1) for _ in range(COMPLEX_ROWS.get(name, 1))]
    params, wrt = {}, list(range(len(xs)))
    if name in ("sum", "prod"):
        params = {"axes": (1,), "keepdim": False}
    elif name == "cumsum":
        params = {"axis": 0}
    elif name == "matmul":
        xs.append(cplx(rng, 3, 2))
        wrt = [0, 1]
    elif name == "cast":
        xs, params = [rng.standard_normal((3, 3))], {"dtype": "c128"}
    elif name == "where":
        xs, wrt = [rng.standard_normal((3, 3)) > 0] + [cplx(rng, 3, 3), cplx(rng, 3, 3)], [1, 2]
    tape, _ = prim_tape(name, xs, params)
    dot_check(tape, wrt, xs, rng)
    h = second_order_tape(tape, wrt)
    extra = [draw(rng, h.shapes[s], h.dtypes[s]) for s in h.inputs[len(xs) :]]
    dot_check(h, wrt, list(xs) + extra, rng, rtol=1e-4, atol=1e-6)


def test_a_real_tape_is_unchanged_by_the_complex_rules():
    """``conj`` adds nothing where values are real: the joint tape of a real program has none."""
    x = np.linspace(0.5, 2, 6).reshape(2, 3)
    for name in ("mul", "div", "exp", "pow", "matmul", "abs", "prod"):
        args = [x, x.T] if name == "matmul" else ([x, x] if name in ("mul", "div", "pow") else [x])
        params = {"axes": (1,), "keepdim": False} if name == "prod" else {}
        tape, _ = prim_tape(name, args, params)
        joint = vjp(tape, tape.inputs)
        assert not any(ins.prim == "conj" for ins in joint.tape.instrs), name
        assert all(d == "f64" or d == "b8" for d in joint.tape.dtypes), name


def test_interpreted_complex64_stays_complex64(rng):
    z = ngrad.tensor(cplx(rng, 4), dtype=ngrad.complex64, requires_grad=True)
    out = (z.exp() * z.conj() + 1j).abs()
    assert out.dtype is ngrad.float32
    out.sum().backward()
    assert z.grad.dtype is ngrad.complex64


# --- compiled kernels against the interpreter ------------------------------------------------------------


def _chain_joint(dtype, rng):
    """The joint tape of a fused chain of every complex elementwise row and reductions of
    complex values, with its input values (``dtype``: 'c64' or 'c128')."""
    real = {"c128": "f64", "c64": "f32"}[dtype]
    b = Builder()
    z, w = b.input((4, 3), dtype), b.input((4, 3), dtype)
    r = b.input((4, 3), real)
    y = (z * w).exp() + z.log() * w.sqrt() - (z * 0.5).sin() / w.cos()
    y = y + z.tanh() * w.sigmoid() + z.pow(w) + (z * 0.3).asin() + z.conj() * w.expm1() + w.log1p()
    y = y + z.real().complex(r).conj() * 1.5 + r.complex(w.real()) * 0.5
    y = y + (z * z.abs().cast(dtype=dtype)) * w.angle().cast(dtype=dtype) + z.imag().complex(w.real())
    s = y.sum(axes=(1,), keepdim=False) * z.prod(axes=(1,), keepdim=False)
    out = s.abs().sum(axes=(0,), keepdim=False) + y.real().sum(axes=(0, 1), keepdim=False)
    tape = b.finish([out, y])
    joint = vjp(tape, tape.inputs)
    values = [cplx(rng, 4, 3).astype(np_dtype(dtype)), cplx(rng, 4, 3).astype(np_dtype(dtype))]
    values.append(rng.uniform(0.5, 1.5, (4, 3)).astype(np_dtype(real)))
    seeds = [
        draw(rng, joint.tape.shapes[s], joint.tape.dtypes[s]).astype(np_dtype(joint.tape.dtypes[s]))
        for s in joint.seeds
    ]
    return joint.tape, values + seeds


@pytest.mark.numba
@pytest.mark.slow  # 7-14 s: one big kernel and its reverse pass a dtype
@pytest.mark.parametrize("dtype", ["c128", "c64"])
def test_compiled_complex_chains_equal_the_interpreter(dtype, jit_always, rng):
    """Compiled loops (CPU) against the interpreter, complex64 staying complex64."""
    from .compiled import assert_same

    tape, values = _chain_joint(dtype, rng)
    assert_same(tape, values, rtol=2e-4 if dtype == "c64" else 1e-11)
    assert interpret(tape, values)[0].dtype == (np.float32 if dtype == "c64" else np.float64)


HAVE_CUDA = ngrad.cuda.is_available()


@pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device (runs under the simulator below)")
@pytest.mark.parametrize("dtype", ["c128", "c64"])
def test_device_complex_chains_equal_the_interpreter(dtype, jit_always, rng):
    from .test_cuda import assert_same_on_cuda

    tape, values = _chain_joint(dtype, rng)
    assert_same_on_cuda(tape, values, rtol=2e-4 if dtype == "c64" else 1e-11)


def test_tapes_refuse_ordering_comparisons_of_complex_values():
    """CUDA has no ordering of complex numbers (NumPy's lexicographic one ran in the interpreter
    and the simulator, and a gradient that counted zeros in complex failed on the card)."""
    b = Builder()
    z = b.input((3,), "c128")
    assert z.eq(z).dtype == "b8"
    for name in ("lt", "le", "gt", "ge"):
        with pytest.raises(TapeError, match="ordering comparisons need real operands"):
            getattr(z, name)(z)


@pytest.mark.numba
@pytest.mark.cuda
@pytest.mark.slow  # a child process under the simulator
@pytest.mark.skipif(
    HAVE_CUDA and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="a real GPU runs the device tests directly"
)
def test_simulator_runs_the_device_tests(tmp_path):
    run_device_tests_simulated(__file__, tmp_path)


@pytest.mark.numba
def test_compiled_facade_program_of_complex_values_equals_the_interpreter(jit_always, monkeypatch, rng):
    zv, wv = cplx(rng, 5, 4), cplx(rng, 5, 4)
    results = []
    for mode in ("never", "always"):
        monkeypatch.setenv("NGRAD_JIT", mode)
        z = ngrad.tensor(zv, dtype=ngrad.complex128, requires_grad=True)
        w = ngrad.tensor(wv, dtype=ngrad.complex128, requires_grad=True)
        loss = ((z * w).exp().abs() + (z.conj() / w).angle() + ngrad.view_as_real(z.sin()).sum(-1)).sum()
        loss.backward()
        results.append((loss.item(), z.grad.numpy(), w.grad.numpy()))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.numba
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_compiled_complex_division_by_zero_gives_numpys_values_and_abs_its_gradient_at_zero(
    jit_always, monkeypatch, dtype
):
    # Numba's complex division raises ZeroDivisionError; a kernel computing both sides of a
    # ``where`` (abs's gradient at 0) failed where the interpreter gave the gradient
    torch = pytest.importorskip("torch")
    zv = np.array([1 + 2j, 0j, -3 + 0.5j, 0j])
    wv = np.array([0j, 0j, 2 - 1j, 1j])
    results = []
    for mode in ("never", "always"):
        monkeypatch.setenv("NGRAD_JIT", mode)
        z = ngrad.tensor(zv, dtype=getattr(ngrad, dtype), requires_grad=True)
        w = ngrad.tensor(wv, dtype=getattr(ngrad, dtype))
        q = z / w
        (z.abs() ** 2).sum().backward()
        results.append((q.detach().numpy(), z.grad.numpy()))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)  # inf and nan where NumPy's are
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-6)
    tz = torch.tensor(zv, dtype=getattr(torch, dtype), requires_grad=True)
    want = (tz / torch.tensor(wv, dtype=getattr(torch, dtype))).detach().numpy()
    (tz.abs() ** 2).sum().backward()
    np.testing.assert_allclose(results[1][0], want, rtol=1e-6)
    np.testing.assert_allclose(results[1][1], tz.grad.numpy(), rtol=1e-6)


# --- real, imag, conj, view_as_real and view_as_complex are views -----------------------------------------


def _views_program(t):
    x = t.tensor([1 + 2j, 3 - 1j, 0.5j], dtype=t.complex128)
    r, i, c = x.real, x.imag, x.conj()
    seen = [r._base is x, i._base is x, c._base is x, r.stride(), i.stride(), i.storage_offset()]
    r.add_(1)
    i.mul_(2)
    v = t.view_as_real(x)
    v[0, 1] = 7.0
    seen += [x.tolist(), c.tolist(), v.stride(), x._version]
    w = t.tensor([1 + 2j, 3 - 1j], dtype=t.complex128, requires_grad=True)
    y = w * 2
    y.real.mul_(3)
    y.imag[0] = 5.0
    (y * y.conj()).real.sum().backward()
    seen += [y.tolist(), w.grad.tolist(), type(y.grad_fn).__name__]
    xr = t.tensor([[1.0, 2.0], [3.0, 4.0]])
    xc = t.view_as_complex(xr)
    xc.mul_(1j)
    seen += [xr.tolist(), xc._base is xr, xc.stride()]
    return seen


def test_parts_and_pairs_are_views_that_writes_go_through():
    expected = [True, True, True, (2,), (2,), 1]
    expected += [[2 + 7j, 4 - 2j, 1 + 1j], [2 - 7j, 4 + 2j, 1 - 1j], (2, 1), 3]
    expected += [[6 + 5j, 18 - 2j], [72 + 0j, 216 - 8j], "CopySlices"]
    expected += [[[-2.0, 1.0], [-4.0, 3.0]], True, (1,)]
    assert _views_program(ngrad) == expected


def test_views_match_torch():
    torch = pytest.importorskip("torch")
    assert _views_program(ngrad) == _views_program(torch)


def test_random_complex_tensors_are_torchs_numbers_for_the_same_seed():
    torch = pytest.importorskip("torch")
    for name in ("complex64", "complex128"):
        draws = []
        for lib in (ngrad, torch):
            lib.manual_seed(3)
            draws.append(
                (lib.randn(40, dtype=getattr(lib, name)).numpy(), lib.rand(5, dtype=getattr(lib, name)).numpy())
            )
        for ours, theirs in zip(*draws):
            assert ours.dtype == theirs.dtype
            np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_random_complex_normal_has_unit_variance_split_between_the_parts():
    ngrad.manual_seed(0)
    z = ngrad.randn(20000, dtype=ngrad.complex128).numpy()
    assert (
        abs(np.var(z.real) - 0.5) < 0.03
        and abs(np.var(z.imag) - 0.5) < 0.03
        and abs(np.mean(np.abs(z) ** 2) - 1) < 0.05
    )


def test_free_functions_of_the_parts():
    z = ngrad.tensor([1 + 2j, -3j])
    assert ngrad.real(z).tolist() == [1.0, 0.0] and ngrad.imag(z).tolist() == [2.0, -3.0]
    assert ngrad.real(z)._base is z and ngrad.conj(z).is_conj() and not ngrad.conj_physical(z).is_conj()
    assert ngrad.is_complex(z) and ngrad.angle(ngrad.tensor([-1.0])).tolist() == [pytest.approx(np.pi)]


def test_complex_tensors_save_and_load(tmp_path):
    path = tmp_path / "z.pt"
    ngrad.save(
        {"z": ngrad.tensor([1 + 2j, 3j], requires_grad=True), "c": ngrad.tensor([1j], dtype=ngrad.complex128)}, path
    )
    back = ngrad.load(path)
    assert back["z"].dtype is ngrad.complex64 and back["z"].requires_grad and back["z"].tolist() == [1 + 2j, 3j]
    assert back["c"].dtype is ngrad.complex128


def test_compiled_function_of_complex_values_equals_eager(rng):
    def power(z, w):
        return (ngrad.fft.fft(z * w).abs() ** 2).sum()

    zv, wv = cplx(rng, 8), cplx(rng, 8)
    results = []
    for fn in (ngrad.compile(power), power):
        z = ngrad.tensor(zv, dtype=ngrad.complex128, requires_grad=True)
        for _ in range(2):  # the compiled function's second call runs its traced program
            z.grad = None
            loss = fn(z, ngrad.tensor(wv, dtype=ngrad.complex128))
            loss.backward()
        results.append((loss.item(), z.grad.numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-12)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-12)


# --- the complex-valued example --------------------------------------------------------------------------

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "qubit_control.py")


def test_qubit_control_example_reaches_the_target_state():
    import runpy

    example = runpy.run_path(EXAMPLE)
    _, history = example["optimize"](steps=80)
    assert history[0] > 0.5 and history[-1] < 2e-3


def test_qubit_control_gradient_matches_torch():
    torch = pytest.importorskip("torch")
    with open(EXAMPLE) as f:
        source = f.read()
    grads = []
    for name, text in (("ngrad", source), ("torch", source.replace("import ngrad as torch", "import torch"))):
        scope = {"__name__": f"qubit_{name}"}
        exec(compile(text, EXAMPLE, "exec"), scope)
        lib = ngrad if name == "ngrad" else torch
        amplitudes = lib.tensor(np.random.default_rng(2).standard_normal((6, 2)), requires_grad=True)
        loss = scope["infidelity"](amplitudes)
        loss.backward()
        grads.append((loss.item(), amplitudes.grad.numpy()))
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=1e-10)
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-8, atol=1e-12)


def test_isinf_isfinite_isnan_of_complex_values_match_torch():
    values = [complex(float("nan"), 1), complex(1, float("inf")), 2j, complex(-float("inf"), float("nan"))]
    z = ngrad.tensor(values)
    assert z.isinf().tolist() == [False, True, False, True]
    assert z.isfinite().tolist() == [False, False, True, False]
    assert z.isnan().tolist() == [True, False, False, True]
    with pytest.raises(NotImplementedError):
        z.trunc()


def test_nan_to_num_of_complex_values_replaces_each_part():
    z = ngrad.tensor([complex(float("nan"), 1), complex(1, float("inf")), 2j])
    out = z.nan_to_num(nan=0.5, posinf=7.0)
    assert out.dtype is ngrad.complex64 and out.tolist() == [0.5 + 1j, 1 + 7j, 2j]
    with pytest.raises(RuntimeError, match="does not support automatic differentiation for outputs with complex"):
        z.clone().requires_grad_().nan_to_num()


def test_assigning_the_parts_writes_through_them():
    z = ngrad.tensor([1 + 2j, 3j])
    z.real = ngrad.tensor([5.0, 6.0])
    z.imag = ngrad.tensor(7.0)
    assert z.tolist() == [5 + 7j, 6 + 7j] and z._version == 2
    w = ngrad.tensor([1 + 2j], requires_grad=True)
    y = w * 1
    y.real = ngrad.tensor([3.0], requires_grad=True)
    assert y.tolist() == [3 + 2j] and type(y.grad_fn).__name__ == "CopySlices"
    with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex dtypes"):
        ngrad.ones(2).imag = ngrad.ones(2)


def test_functional_api_takes_complex_inputs_as_torch():
    torch = pytest.importorskip("torch")
    zv = np.array([1 + 2j, 0.5 - 1j])
    results = []
    for lib in (ngrad, torch):
        f = lib.autograd.functional
        jac = f.jacobian(lambda z: (z * z).abs(), lib.tensor(zv))
        vjp = f.vjp(lambda z: (z * z).exp(), lib.tensor(zv), lib.tensor(zv))[1]
        jvp = f.jvp(lambda z: (z * z).exp(), lib.tensor(zv), lib.tensor(zv))[1]
        results.append([jac.numpy(), vjp.numpy(), jvp.numpy()])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10)
