"""Scans and selection (``cumprod``, ``logcumsumexp``, ``cummax``/``cummin``, ``median``,
``nanmedian``, ``kthvalue``, ``quantile``/``nanquantile``, ``mode``, ``unique``,
``unique_consecutive``, ``searchsorted``, ``bucketize``, ``histc``): values, indices and
gradients of random cotangents against PyTorch (float64, rtol 1e-6), ties and NaN as PyTorch
has them, its errors (type and phrase), finite differences without PyTorch, and ``ngrad.compile``
against eager."""

import numpy as np
import pytest

import ngrad

from .oracles import tensor_fd_check, torch_or_skip

NAN = float("nan")
R = np.random.default_rng(3)
RANDOM = R.uniform(-2.0, 2.0, (3, 6))
TIES = np.array([[2.0, 1.0, 2.0, 2.0, 3.0, 1.0], [0.5, 0.5, 0.5, 0.5, 0.5, 0.5], [4.0, -1.0, 4.0, 0.0, -1.0, 7.0]])
WITH_NAN = np.array([[5.0, 1.0, NAN, 3.0, NAN, 2.0], [NAN] * 6, [1.0, 4.0, 2.0, 2.5, 0.0, 9.0]])
INFINITIES = np.array([[-np.inf, 0.0, 1.0], [0.0, -np.inf, 1.0], [1.0, np.inf, 2.0], [-1000.0, 0.0, -2000.0]])
REPEATED_COLUMNS = np.round(RANDOM[:, :1] * TIES)  # TIES' columns 0 and 2 are equal
ZEROS = np.array([[0.7, -1.2, 0.0, 0.9, 1.1, 2.0], [0.8, 0.0, 1.3, 0.0, 0.6, 1.5], [1.1, 0.9, -0.8, 1.2, 0.7, 1.3]])


def _q(m, values):
    return m.tensor(values, dtype=m.float64)


# name -> (function of (library, x), input); every output is compared, floating ones differentiated
CASES = {
    "cumprod": (lambda m, x: m.cumprod(x, 1), RANDOM),
    "cumprod_zeros": (lambda m, x: x.cumprod(1), ZEROS),
    "cumprod_dim0": (lambda m, x: x.cumprod(0), ZEROS),
    "logcumsumexp": (lambda m, x: m.logcumsumexp(x, 1), RANDOM * 300),
    "logcumsumexp_dim0": (lambda m, x: x.logcumsumexp(0), RANDOM),
    "logcumsumexp_infinities": (lambda m, x: x.logcumsumexp(1), INFINITIES),
    "cummax": (lambda m, x: m.cummax(x, 1), TIES),
    "cummax_nan": (lambda m, x: x.cummax(1), WITH_NAN),
    "cummin": (lambda m, x: m.cummin(x, 0), TIES),
    "cummin_nan": (lambda m, x: x.cummin(1), WITH_NAN),
    "median": (lambda m, x: m.median(x, 1), RANDOM),
    "median_ties": (lambda m, x: x.median(1, keepdim=True), TIES),
    "median_nan": (lambda m, x: x.median(1), WITH_NAN),
    "median_full": (lambda m, x: m.median(x), RANDOM),
    "median_full_ties": (lambda m, x: x.median(), TIES),
    "median_full_nan": (lambda m, x: x.median(), WITH_NAN),
    "median_empty": (lambda m, x: x.median(), np.zeros((2, 0))),
    "unique_consecutive_empty": (lambda m, x: x.unique_consecutive(dim=1, return_inverse=True), np.zeros((2, 0))),
    "nanmedian": (lambda m, x: m.nanmedian(x[::2], 1), WITH_NAN),
    "nanmedian_full": (lambda m, x: x.nanmedian(), WITH_NAN),
    "nanmedian_full_ties": (lambda m, x: x.nanmedian(), TIES),
    "kthvalue": (lambda m, x: m.kthvalue(x, 2, 1), RANDOM),
    "kthvalue_keepdim": (lambda m, x: x.kthvalue(3, 0, keepdim=True), RANDOM),
    "kthvalue_nan": (lambda m, x: x.kthvalue(6), np.array([[5.0, 1.0, NAN, 3.0, 0.0, 2.0], [NAN] * 6])),
    "mode": (lambda m, x: m.mode(x, 1), TIES),
    "mode_dim0": (lambda m, x: x.mode(0, keepdim=True), np.round(RANDOM)),
    "quantile": (lambda m, x: m.quantile(x, 0.3, dim=1), RANDOM),
    "quantile_full": (lambda m, x: x.quantile(_q(m, [0.0, 0.25, 0.5, 0.8, 1.0])), RANDOM),
    "quantile_keepdim": (lambda m, x: x.quantile(_q(m, [0.1, 0.9]), dim=0, keepdim=True), RANDOM),
    "quantile_full_keepdim": (lambda m, x: x.quantile(0.4, keepdim=True), RANDOM),
    "quantile_nan": (lambda m, x: x.quantile(_q(m, [0.2, 0.7]), dim=1), WITH_NAN),
    "nanquantile": (lambda m, x: m.nanquantile(x, _q(m, [0.2, 0.7]), dim=1), WITH_NAN),
    "nanquantile_full": (lambda m, x: x.nanquantile(0.65), WITH_NAN),
    "searchsorted": (lambda m, x: m.searchsorted(m.tensor([-1.0, 0.0, 0.5, 1.5]), x), RANDOM),
    "searchsorted_rows": (lambda m, x: m.searchsorted(x.sort(1).values, x.flip(1), right=True), RANDOM),
    "searchsorted_side": (lambda m, x: m.searchsorted(m.tensor([0.5, 2.0]), x, side="right", out_int32=True), TIES),
    "searchsorted_sorter": (
        lambda m, x: m.searchsorted(x[0], x[1:], sorter=x[0].argsort()[None].expand(2, 6).contiguous()[0]),
        RANDOM,
    ),
    "searchsorted_number": (lambda m, x: m.searchsorted(m.tensor([1, 2, 3]), 2.5), RANDOM),
    "bucketize_number": (lambda m, x: m.bucketize(2.0, m.tensor([1.0, 2.0, 3.0], dtype=m.float64), right=True), RANDOM),
    "bucketize": (lambda m, x: m.bucketize(x, m.tensor([-1.0, 0.0, 0.5, 2.0])), TIES),
    "bucketize_right": (lambda m, x: m.bucketize(x, m.tensor([0.5, 2.0]), right=True, out_int32=True), TIES),
    "histc": (lambda m, x: m.histc(x, bins=5), RANDOM),
    "histc_range": (lambda m, x: x.histc(bins=4, min=-1, max=2), TIES),
    "histc_nan": (lambda m, x: x.histc(bins=3, min=0, max=9), WITH_NAN),
    "unique": (lambda m, x: m.unique(x, return_inverse=True, return_counts=True), TIES),
    "unique_nan": (lambda m, x: x.unique(return_counts=True), WITH_NAN),
    "unique_dim": (
        lambda m, x: x.unique(dim=1, return_inverse=True, return_counts=True),
        np.round(RANDOM[:, :1] * TIES),
    ),
    "unique_unsorted": (lambda m, x: x.unique(sorted=False), TIES),
    "unique_consecutive": (lambda m, x: m.unique_consecutive(x, return_inverse=True, return_counts=True), TIES),
    "unique_consecutive_dim": (lambda m, x: x.unique_consecutive(dim=0, return_counts=True), TIES[[0, 0, 1, 1, 0]]),
}


def _outputs(r):
    return list(r) if isinstance(r, tuple) else [r]


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_indices_and_gradients_match_pytorch(name, rng):
    torch = torch_or_skip()
    fn, a = CASES[name]
    x = ngrad.tensor(a, dtype=ngrad.float64, requires_grad=True)
    xt = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    ours, theirs = _outputs(fn(ngrad, x)), _outputs(fn(torch, xt))
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert tuple(o.shape) == tuple(t.shape) and str(o.dtype)[6:] == str(t.dtype)[6:], (o, t)
        np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy(), rtol=1e-6, atol=1e-12)
        assert o.requires_grad == t.requires_grad
    # unique's values are on the graph, but their backward raises (the test below)
    diff = [(o, t) for o, t in zip(ours, theirs) if o.requires_grad and not name.startswith("unique")]
    if diff:
        gs = [rng.standard_normal(tuple(t.shape)) for _, t in diff]
        (g,) = ngrad.autograd.grad([o for o, _ in diff], [x], [ngrad.tensor(c) for c in gs])
        (gt,) = torch.autograd.grad([t for _, t in diff], [xt], [torch.tensor(c) for c in gs])
        np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-6, atol=1e-12)
        if "quantile" not in name:  # PyTorch's quantile is a composite: its last node has no name of its own
            assert diff[0][0].grad_fn.name() == diff[0][1].grad_fn.name()


def test_cumprod_second_derivatives_at_zeros_match_pytorch(rng):
    torch = torch_or_skip()
    a = np.concatenate([ZEROS, [[0.0, 2.0, 0.0, 0.0, 1.5, -1.0]]])
    g, w = rng.standard_normal(a.shape), rng.standard_normal(a.shape)
    results = []
    for m in (ngrad, torch):
        x = m.tensor(a, requires_grad=True)
        (gx,) = m.autograd.grad(x.cumprod(1), x, m.tensor(g), create_graph=True)
        (hx,) = m.autograd.grad((gx * m.tensor(w)).sum(), x)
        results.append((gx.detach().numpy(), hx.numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-12)


def test_tied_and_nan_indices_take_the_stable_sort_where_pytorch_leaves_them_open():
    # PyTorch documents the index among equal values as implementation-defined (its CPU
    # kthvalue uses nth_element); ngrad's is the stable sort's, and the value is PyTorch's.
    x = ngrad.tensor([3.0, 1.0, 2.0, 1.0, 1.0])
    assert x.kthvalue(2).indices.item() == 3 and x.kthvalue(2).values.item() == 1.0
    assert x.median(0).indices.item() == 4
    assert ngrad.tensor([NAN, NAN, NAN, NAN]).nanmedian(0).indices.item() == 0


@pytest.mark.parametrize(
    "fn, x",
    [
        (lambda x: x.cumprod(1), ZEROS),
        (lambda x: x.cumprod(0), ZEROS),
        (lambda x: x.logcumsumexp(1), RANDOM),
        (lambda x: x.cummax(1).values, RANDOM),
        (lambda x: x.median(1).values, RANDOM),
        (lambda x: x.median(), RANDOM),
        (lambda x: x.kthvalue(2, 0).values, RANDOM),
        (lambda x: x.quantile(ngrad.tensor([0.3, 0.75], dtype=ngrad.float64), dim=1), RANDOM),
        (lambda x: x.nanquantile(0.4, interpolation="midpoint"), RANDOM),
    ],
)
def test_gradients_match_finite_differences(fn, x, rng):
    tensor_fd_check(fn, [x], rng)


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_interpolations_match_pytorch(interpolation, rng):
    torch = torch_or_skip()
    a = np.concatenate([RANDOM, WITH_NAN[:1]])
    q = [0.0, 0.1, 0.25, 0.5, 0.625, 0.9, 1.0]
    for op in ("quantile", "nanquantile"):
        x = ngrad.tensor(a, requires_grad=True)
        xt = torch.tensor(a, requires_grad=True)
        ours = getattr(x, op)(ngrad.tensor(q, dtype=ngrad.float64), dim=1, interpolation=interpolation)
        theirs = getattr(xt, op)(torch.tensor(q, dtype=torch.float64), dim=1, interpolation=interpolation)
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-6)
        g = rng.standard_normal(tuple(theirs.shape))
        (gx,) = ngrad.autograd.grad(ours, x, ngrad.tensor(g))
        (gxt,) = torch.autograd.grad(theirs, xt, torch.tensor(g))
        np.testing.assert_allclose(gx.numpy(), gxt.numpy(), rtol=1e-6, atol=1e-12)


def test_float32_and_integer_inputs_keep_pytorchs_dtypes():
    torch = torch_or_skip()
    ints = [[3, 1, 2], [0, 5, 5]]
    for fn in (
        lambda m, x: m.cumprod(x, 1),
        lambda m, x: m.cumprod(x, 1, dtype=m.float64),
        lambda m, x: x.cummax(1),
        lambda m, x: x.median(),
        lambda m, x: x.median(1),
        lambda m, x: x.mode(1),
        lambda m, x: x.kthvalue(2, 1),
        lambda m, x: x.unique(return_counts=True),
    ):
        for ours, theirs in zip(_outputs(fn(ngrad, ngrad.tensor(ints))), _outputs(fn(torch, torch.tensor(ints)))):
            assert str(ours.dtype)[6:] == str(theirs.dtype)[6:]
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    a = RANDOM.astype(np.float32)
    for fn in (lambda m, x: x.logcumsumexp(1), lambda m, x: x.histc(bins=7), lambda m, x: x.quantile(0.3, dim=0)):
        ours, theirs = fn(ngrad, ngrad.tensor(a)), fn(torch, torch.tensor(a))
        assert str(ours.dtype)[6:] == str(theirs.dtype)[6:]
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


ERRORS = [
    lambda m: m.quantile(m.tensor([1, 2]), 0.5),
    lambda m: m.quantile(m.tensor([1.0, 2.0]), 1.5),
    lambda m: m.quantile(m.tensor([1.0, 2.0]), m.tensor([0.5, 1.5])),
    lambda m: m.quantile(m.tensor([1.0, 2.0]), m.tensor([0.5], dtype=m.float64)),
    lambda m: m.quantile(m.tensor([1.0, 2.0]), m.tensor([[0.5]])),
    lambda m: m.quantile(m.tensor([]), 0.5),
    lambda m: m.nanquantile(m.tensor([1.0, 2.0]), 0.5, interpolation="cubic"),
    lambda m: m.quantile(m.tensor([1.0, 2.0]), 0.5, dim=3),
    lambda m: m.median(m.zeros(2, 0), 1),
    lambda m: m.kthvalue(m.tensor([1.0, 2.0]), 3),
    lambda m: m.kthvalue(m.tensor([1.0, 2.0]), 0),
    lambda m: m.mode(m.zeros(1, 0), 1),
    lambda m: m.nanmedian(m.zeros(2, 0), 1),
    lambda m: m.kthvalue(m.zeros(2, 0), 1, 1),
    lambda m: m.unique(m.zeros(2, 0), dim=0),
    lambda m: m.unique_consecutive(m.tensor(5.0), dim=0),
    lambda m: m.logcumsumexp(m.tensor([1, 2]), 0),
    lambda m: m.cumprod(m.tensor([1.0]), 1),
    lambda m: m.searchsorted(m.tensor(1.0), m.tensor([1.5])),
    lambda m: m.searchsorted(m.tensor([1.0, 3.0]), m.tensor([2.0]), side="middle"),
    lambda m: m.searchsorted(m.tensor([1.0, 3.0]), m.tensor([2.0]), side="left", right=True),
    lambda m: m.searchsorted(m.tensor([[1.0, 3.0], [2.0, 4.0]]), m.tensor([2.0])),
    lambda m: m.searchsorted(m.tensor([1.0, 3.0]), m.tensor([2.0]), sorter=m.tensor([0.0, 1.0])),
    lambda m: m.searchsorted(m.tensor([1.0, 3.0]), m.tensor([2.0]), sorter=m.tensor([0])),
    lambda m: m.bucketize(m.tensor([1.0]), m.tensor([[1.0, 2.0]])),
    lambda m: m.histc(m.tensor([1, 2]), bins=3),
    lambda m: m.histc(m.tensor([1.0, 2.0]), bins=0),
    lambda m: m.histc(m.tensor([1.0, 2.0]), bins=3, min=3, max=1),
    lambda m: m.histc(m.tensor([1.0, float("inf")]), bins=3),
    lambda m: m.unique(m.tensor([[1, 2]]), dim=2),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors_match_pytorchs_type_and_message(i):
    torch = torch_or_skip()
    with pytest.raises(Exception) as theirs:
        ERRORS[i](torch)
    with pytest.raises(type(theirs.value)) as ours:
        ERRORS[i](ngrad)
    assert str(ours.value) == str(theirs.value).split("\n")[0]


def test_unique_realizes_its_input_and_its_backward_raises_as_pytorchs():
    x = ngrad.tensor([[3.0, 1.0], [3.0, 1.0]], requires_grad=True)
    values, inverse = (x * 2).unique(return_inverse=True)
    assert values.tolist() == [2.0, 6.0] and inverse.tolist() == [[1, 0], [1, 0]]
    for fn, grad_fn, kernel in (
        (lambda x: x.unique(), "Unique2Backward0", "_unique2"),
        (lambda x: x.unique(dim=0), "UniqueDimBackward0", "unique_dim"),
        (lambda x: x.unique_consecutive(), "UniqueConsecutiveBackward0", "unique_consecutive"),
    ):
        out = fn(x)
        assert out.requires_grad and out.grad_fn.name() == grad_fn
        with pytest.raises(NotImplementedError, match=f"the derivative for '{kernel}' is not implemented."):
            out.sum().backward()
    with ngrad.no_grad():
        assert not x.unique().requires_grad


def test_value_dependent_sizes_refuse_to_trace_and_an_explicit_histc_range_compiles():
    x = ngrad.tensor([3.0, 1.0, 3.0])
    for fn in (lambda x: x.unique(), lambda x: x.unique_consecutive(), lambda x: x.histc(bins=3)):
        with pytest.raises(ngrad.TraceError):
            ngrad.compile(fn)(x)
    hist = ngrad.compile(lambda x: x.histc(bins=3, min=0, max=4))
    assert hist(x).tolist() == [1.0, 0.0, 2.0] and hist(ngrad.tensor([0.5, 1.0, 3.9])).tolist() == [2.0, 0.0, 1.0]


def test_compiled_functions_match_eager():
    def f(x, b):
        q = x.quantile(0.3, dim=1) + x.nanmedian(1).values * x.kthvalue(2, 1).values
        s = x.cumprod(1).sum() + x.logcumsumexp(0).sum() + x.cummin(1).values.sum() + x.mode(1).values.sum()
        return q.sum() + s, ngrad.bucketize(x, b) + ngrad.searchsorted(b, x.detach(), right=True)

    compiled = ngrad.compile(f)
    b = ngrad.tensor([-1.0, 0.0, 1.0], dtype=ngrad.float64)
    for a in (RANDOM, np.round(RANDOM) * 0.5):
        x, xc = (ngrad.tensor(a, requires_grad=True) for _ in range(2))
        (eager, idx), (out, idxc) = f(x, b), compiled(xc, b)
        np.testing.assert_allclose(out.detach().numpy(), eager.detach().numpy(), rtol=1e-12)
        np.testing.assert_array_equal(idxc.numpy(), idx.numpy())
        eager.backward()
        out.backward()
        np.testing.assert_allclose(xc.grad.numpy(), x.grad.numpy(), rtol=1e-12)


FORWARD = [
    (lambda x: x.cumprod(1), ZEROS),
    (lambda x: x.logcumsumexp(1), RANDOM),
    (lambda x: x.cummax(1).values, TIES),
    (lambda x: x.median(), TIES),
    (lambda x: x.nanmedian(1).values, WITH_NAN[[0, 2]]),
    (lambda x: x.kthvalue(2, 0).values, RANDOM),
    (lambda x: x.mode(1).values, TIES),
    (lambda x: x.quantile(0.3, dim=1, interpolation="midpoint"), RANDOM),
]


@pytest.mark.parametrize("i", range(len(FORWARD)))
def test_forward_mode_derivatives(i, rng):
    fn, a = FORWARD[i]
    t = rng.standard_normal(a.shape)
    with ngrad.autograd.forward_ad.dual_level():
        out = fn(ngrad.autograd.forward_ad.make_dual(ngrad.tensor(a), ngrad.tensor(t)))
        tangent = ngrad.autograd.forward_ad.unpack_dual(out).tangent.numpy()
    try:
        import torch
    except ImportError:  # without PyTorch: central differences, where no tie makes them one-sided
        if i < 2:
            eps = 1e-6
            numeric = (fn(ngrad.tensor(a + eps * t)).numpy() - fn(ngrad.tensor(a - eps * t)).numpy()) / (2 * eps)
            np.testing.assert_allclose(tangent, numeric, rtol=1e-5, atol=1e-8)
        return
    with torch.autograd.forward_ad.dual_level():
        out = fn(torch.autograd.forward_ad.make_dual(torch.tensor(a), torch.tensor(t)))
        expected = torch.autograd.forward_ad.unpack_dual(out).tangent.numpy()
    np.testing.assert_allclose(tangent, expected, rtol=1e-6, atol=1e-12)


# --- compiled plans and the CUDA target -----------------------------------------------------------


def _selection_program(x):
    """One loss over every row of the family and the selections built on them."""
    b = ngrad.tensor([-1.0, 0.0, 1.0], dtype=ngrad.float64)
    w = ngrad.tensor(RANDOM)
    terms = (
        x.cumprod(1) * w,
        x.logcumsumexp(0) * w,
        x.cummax(1).values * w,
        x.cummin(0).values * w,
        x.median(1).values,
        x.mode(1).values,
        x.kthvalue(2, 0).values,
        x.quantile(ngrad.tensor([0.3, 0.8], dtype=ngrad.float64), dim=1),
        ngrad.bucketize(x, b).double(),
        ngrad.searchsorted(x.detach().sort(1).values, w, right=True).double(),
    )
    return sum(t.sum() for t in terms)


def _selection_joint(rng):
    from ngrad.engine.ir.graph import lower
    from ngrad.engine.transform.differentiate import vjp

    x = ngrad.tensor(ZEROS, requires_grad=True)
    low = lower([_selection_program(x)._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    return joint.tape, [n.value for n in low.sources] + [rng.standard_normal(joint.tape.shapes[s]) for s in joint.seeds]


@pytest.mark.numba
@pytest.mark.slow
@pytest.mark.usefixtures("jit_always")
def test_compiled_plans_of_the_family_equal_the_interpreter(rng):
    from .compiled import assert_same

    tape, values = _selection_joint(rng)
    assert_same(tape, values, rtol=1e-12)


@pytest.mark.skipif(not ngrad.cuda.is_available(), reason="a CUDA device (or the simulator, below)")
def test_device_the_family_runs_on_the_cuda_target(rng, monkeypatch, tmp_path):
    from ngrad.engine.ir.interpret import interpret
    from ngrad.engine.targets.cuda import to_device

    monkeypatch.setenv("NGRAD_JIT", "always")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))
    tape, values = _selection_joint(rng)
    dev = [to_device(v) if k == "tensor" else v for v, k in zip(values, tape.kinds)]
    for got, ref in zip(ngrad.engine.runtime.run(tape, dev, "cuda"), interpret(tape, values)):
        np.testing.assert_allclose(got.copy_to_host(), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.skipif(ngrad.cuda.is_available(), reason="a real GPU runs the device test directly")
def test_simulator_runs_the_device_test(tmp_path):
    from .oracles import run_device_tests_simulated

    run_device_tests_simulated(__file__, tmp_path)


def test_batched_cotangents_equal_one_at_a_time(rng):
    # the rows' batching rules (engine/transform/batch.py): is_grads_batched through each of them
    x = ngrad.tensor(ZEROS, requires_grad=True)
    for fn in (
        lambda x: x.cumprod(1),
        lambda x: x.logcumsumexp(0),
        lambda x: x.cummax(1).values,
        lambda x: x.mode(1).values,
        lambda x: x.quantile(0.3, dim=1) * ngrad.bucketize(x, ngrad.tensor([0.0, 1.0])).sum(1),
    ):
        y = fn(x)
        seeds = ngrad.tensor(rng.standard_normal((3, *y.shape)))
        (batched,) = ngrad.autograd.grad(y, x, seeds, is_grads_batched=True, retain_graph=True)
        for i in range(3):
            (one,) = ngrad.autograd.grad(y, x, seeds[i], retain_graph=True)
            np.testing.assert_allclose(batched[i].numpy(), one.numpy(), rtol=1e-12, atol=1e-12)


def test_quantile_gradient_reaches_q_as_pytorchs(rng):
    torch = torch_or_skip()
    a, seed = RANDOM, rng.standard_normal((3, 3))
    grads = []
    for m in (ngrad, torch):
        x, q = m.tensor(a, requires_grad=True), m.tensor([0.13, 0.5, 0.77], dtype=m.float64, requires_grad=True)
        grads.append([g.numpy() for g in m.autograd.grad(x.quantile(q, dim=1), (x, q), m.tensor(seed))])
    for ours, theirs in zip(*grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-12)


def test_tapes_hold_plain_tuples_so_the_compile_server_can_read_them(rng):
    # the compile server's child unpickles tapes without importing the facade: a Size among the
    # shapes would make it import ngrad.tensor (a circular import there)
    import pickle
    import pickletools

    tape, _ = _selection_joint(rng)
    names = {a for _, a, _ in pickletools.genops(pickle.dumps(tape)) if isinstance(a, str) and a.startswith("ngrad")}
    assert names <= {"ngrad.engine.ir.tape"}, names
