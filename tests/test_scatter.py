"""The scatter family and the structural ops: the rows' derivatives for every reduction by finite
differences (first and second order, and the JVP as the VJP's transpose), values and gradients
of every op against PyTorch (float64, random cotangents, repeated indices), PyTorch's errors,
in-place forms through views, and ``ngrad.compile`` against eager mode."""

import re
import warnings

import numpy as np
import pytest

import ngrad
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.transform.differentiate import jvp, vjp

from .oracles import dot_check, prim_tape, second_order_tape, tensor_fd_check

R = np.random.default_rng(5)
IDX = np.array([[0, 3, 3, 1], [2, 3, 0, 1], [0, 0, 3, 1]])  # into (4, 5) along 0, with repeats


def _reduce_case(reduce, include_self):
    x, src = R.uniform(0.5, 2.0, (4, 5)), R.uniform(0.5, 2.0, (3, 4))
    if reduce == "prod":  # zeros: one alone at a position, two at another, one in x
        x[1, 0], src[0, 1], src[2, 2], src[1, 2] = 0.0, 0.0, 0.0, 0.0
    params = {"axis": 0, "reduce": reduce, "include_self": include_self}
    return [x, IDX, src], params


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_row_derivatives_by_finite_differences(reduce, include_self, rng):
    args, params = _reduce_case(reduce, include_self)
    tape, _ = prim_tape("scatter_reduce", args, params)
    dot_check(tape, [0, 2], args, rng)
    h = second_order_tape(tape, [0, 2])
    extra = [rng.standard_normal(h.shapes[s]) for s in h.inputs[len(args) :]]
    dot_check(h, [0, 2], list(args) + extra, rng, rtol=1e-4, atol=1e-6)
    # the tangent rule is the transpose of the VJP
    t, joint = jvp(tape, [tape.inputs[0], tape.inputs[2]]), vjp(tape, [tape.inputs[0], tape.inputs[2]])
    us = [rng.standard_normal(args[0].shape), rng.standard_normal(args[2].shape)]
    v = rng.standard_normal((4, 5))
    ju = interpret(t.tape, list(args) + us)[t.tangents[0]]
    jtv = interpret(joint.tape, list(args) + [v])
    assert np.isclose(np.sum(v * ju), sum(np.sum(u * jtv[p]) for u, p in zip(us, joint.grads)))


def test_scatter_row_writes_the_last_of_repeated_positions_and_checks_bounds():
    x = np.zeros((2, 3))
    idx, src = np.array([[1, 0, 1], [1, 1, 0]]), np.arange(6.0).reshape(2, 3)
    tape, _ = prim_tape("scatter", [x, idx, src], {"axis": 0})
    np.testing.assert_array_equal(interpret(tape, [x, idx, src])[0], [[0, 1, 5], [3, 4, 2]])
    for bad in (2, -1):
        idx_bad = np.array([[0, bad, 0], [0, 0, 0]])
        with pytest.raises(RuntimeError, match=f"index {bad} is out of bounds for dimension 0 with size 2"):
            interpret(tape, [x, idx_bad, src])


def _facade_cases():
    x, src = R.standard_normal((4, 5)), R.standard_normal((3, 4))
    mask = R.random((4, 5)) > 0.5
    z, sz = x.copy(), src.copy()
    z[0, 0], sz[0, 0], sz[1, 1], sz[2, 1] = 0, 0, 0, 0
    iz = IDX.copy()
    iz[:, 1] = [2, 2, 3]
    cases = {
        "scatter": (lambda L, x, s: x.scatter(0, L.tensor(IDX), s), [x, src]),
        "scatter_dim1_short": (lambda L, x, s: x.scatter(1, L.tensor(IDX[:2, :3]), s), [x, src[:2, :3]]),
        "scatter_value": (lambda L, x: x.scatter(0, L.tensor(IDX), -2.5), [x]),
        "scatter_add": (lambda L, x, s: x.scatter_add(0, L.tensor(IDX), s), [x, src]),
        "prod_zeros_include_self": (lambda L, x, s: x.scatter_reduce(0, L.tensor(iz), s, "prod"), [z, sz]),
        "prod_zeros": (lambda L, x, s: x.scatter_reduce(0, L.tensor(iz), s, "prod", include_self=False), [z, sz]),
        "index_add": (lambda L, x, s: x.index_add(1, L.tensor([0, 4, 0]), s, alpha=-2), [x, R.standard_normal((4, 3))]),
        "index_copy": (lambda L, x, s: x.index_copy(0, L.tensor([3, 1, 0]), s), [x, R.standard_normal((3, 5))]),
        "index_fill": (lambda L, x, v: x.index_fill(1, L.tensor([0, 3, 0]), v), [x, np.array(2.5)]),
        "index_fill_number": (lambda L, x: x.index_fill(0, L.tensor([-1, 1]), -1.5), [x]),
        "index_put": (lambda L, x, v: x.index_put((L.tensor([0, 3, 0]), L.tensor([1, 2, 1])), v), [x, src[0, :3]]),
        "index_put_accumulate": (
            lambda L, x, v: x.index_put((L.tensor([[0], [3]]), L.tensor([1, 2, 1])), v, accumulate=True),
            [x, src[0, :3]],
        ),
        "index_put_mask": (
            lambda L, x, v: x.index_put((L.tensor([True, False, True, False]),), v),
            [x, R.standard_normal(5)],
        ),
        "masked_scatter": (lambda L, x, s: x.masked_scatter(L.tensor(mask), s), [x, R.standard_normal(25)]),
        "masked_scatter_broadcast": (lambda L, x, s: x[0].masked_scatter(L.tensor(mask), s), [x, src.repeat(2, 1)]),
        "masked_select": (lambda L, x: x.masked_select(L.tensor(mask[0])), [x]),
        "put": (lambda L, x, s: x.put(L.tensor([0, -1, 7, 0]), s), [x, src[0]]),
        "put_accumulate": (lambda L, x, s: x.put(L.tensor([[0, -1], [7, 0]]), s, accumulate=True), [x, src[0]]),
        "take": (lambda L, x: x.take(L.tensor([[0, -1], [7, 0]])), [x]),
    }
    a, b = R.standard_normal((5, 3)), R.standard_normal((2, 4, 3))
    near = np.concatenate([a[:2], R.standard_normal((1, 3))])  # rows equal to a's: zero distances
    cases.update(
        {
            "repeat_interleave_int": (lambda L, x: x.repeat_interleave(3, dim=1), [x]),
            "repeat_interleave_flat": (lambda L, x: x.repeat_interleave(2), [x]),
            "repeat_interleave_tensor": (
                lambda L, x: x.repeat_interleave(L.tensor([2, 0, 1, 3]), dim=0, output_size=6),
                [x],
            ),
            "repeat_interleave_one": (lambda L, x: L.repeat_interleave(x, L.tensor([2]), dim=-1), [x]),
            "kron": (lambda L, x, y: L.kron(x, y), [x[:2, :3], R.standard_normal((3, 1, 2))]),
            "block_diag": (lambda L, x, y, z: L.block_diag(x, y, z), [x[:2], R.standard_normal(3), np.array(1.5)]),
            "cartesian_prod": (lambda L, x, y: L.cartesian_prod(x, y), [x[0], x[1, :3]]),
            "combinations": (lambda L, x: L.combinations(x, 3), [x[0]]),
            "combinations_replacement": (lambda L, x: L.combinations(x, 2, with_replacement=True), [x[0, :3]]),
            "rot90": (lambda L, x: x.rot90(1, [1, 0]) * L.rot90(x, -1) + x.rot90(2)[:4, :4].sum(), [x[:4, :4]]),
            "rot90_3d": (lambda L, x: x.rot90(3, [2, 0]), [R.standard_normal((2, 3, 4))]),
            "roll": (lambda L, x: x.roll((1, -7, 2), (0, 1, 0)), [x]),
            "roll_flat": (lambda L, x: x.roll(-3), [x]),
        }
    )
    for p in (0, 0.5, 1, 1.5, 2, 3, float("inf")):
        cases[f"cdist_{p}"] = (lambda L, x, y, p=p: L.cdist(x, y, p=p), [a, near])
    cases["cdist_batched"] = (lambda L, x, y: L.cdist(x, y), [a[:4], b])
    for mode in ("constant", "reflect", "replicate", "circular"):
        for k, (shape, pad) in enumerate(
            [((2, 5), (2, 1)), ((2, 3, 4), (1, 2, 2, 0)), ((1, 2, 3, 4, 5), (1, 2, 0, 2, 2, 1))]
        ):
            cases[f"pad_{mode}_{k + 1}d"] = (
                lambda L, x, pad=pad, mode=mode: L.nn.functional.pad(x, pad, mode=mode),
                [R.standard_normal(shape)],
            )
    cases["pad_circular_negative"] = (
        lambda L, x: L.nn.functional.pad(x, (-1, 2, 1, -2), mode="circular"),
        [R.standard_normal((2, 4, 5))],
    )
    for reduce in ("sum", "mean", "amax", "amin"):
        for inc in (True, False):
            cases[f"{reduce}_{inc}"] = (
                lambda L, x, s, r=reduce, i=inc: x.scatter_reduce(1, L.tensor(IDX), s, r, include_self=i),
                [x, src],
            )
    return cases


CASES = _facade_cases()


def _run(lib, fn, arrays, g):
    ts = [lib.tensor(a, requires_grad=True) for a in arrays]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's deprecation of scatter's reduce=
        out = fn(lib, *ts)
    grads = lib.autograd.grad(out, ts, lib.tensor(g(tuple(out.shape))), allow_unused=True)
    return out.detach().numpy(), [None if v is None else v.numpy() for v in grads]


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_pytorch(name):
    torch = pytest.importorskip("torch")
    fn, arrays = CASES[name]
    seed = np.random.default_rng(11)
    cot = {}

    def g(shape):
        if shape not in cot:
            cot[shape] = seed.standard_normal(shape)
        return cot[shape]

    out, grads = _run(ngrad, fn, arrays, g)
    ref, ref_grads = _run(torch, fn, arrays, g)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-12)
    for a, b in zip(grads, ref_grads):
        np.testing.assert_allclose(0 if a is None else a, 0 if b is None else b, rtol=1e-6, atol=1e-12)


FD_ONLY = {  # where PyTorch has no gradient (scatter's reduce=, a source larger than the index); cdist away from 0
    "scatter_multiply": (
        lambda L, x, s: x.scatter(0, L.tensor(IDX), s, reduce="multiply"),
        [R.random((4, 5)), R.random((3, 4))],
    ),
    "cdist_3_apart": (lambda L, x, y: L.cdist(x, y, p=3), [R.standard_normal((3, 2)), R.standard_normal((4, 2))]),
    "cdist_inf_apart": (
        lambda L, x, y: L.cdist(x, y, p=float("inf")),
        [R.standard_normal((3, 2)), R.standard_normal((4, 2))],
    ),
    "scatter_add_larger_source": (
        lambda L, x, s: x.scatter_add(1, L.tensor(IDX[:2, :3]), s),
        [R.random((4, 5)), R.random((3, 4))],
    ),
}


FD = ["scatter_value", "prod_zeros", "index_add", "masked_scatter", "put_accumulate", "kron", "block_diag"]
FD += ["repeat_interleave_tensor", "combinations", "rot90", "roll", "pad_reflect_3d", "pad_circular_negative"]


@pytest.mark.parametrize("name", FD + list(FD_ONLY))
def test_gradients_by_finite_differences(name, rng):
    fn, arrays = CASES[name] if name in CASES else FD_ONLY[name]
    tensor_fd_check(lambda *ts: fn(ngrad, *ts), arrays, rng)


def test_amax_without_self_gives_no_share_to_an_excluded_tie():
    # out[0] = max(src) = src[0], alone: its derivative is 1 even though the excluded x[0] equals it
    x = ngrad.tensor([3.0, 5.0], requires_grad=True)
    src = ngrad.tensor([3.0, 1.0], requires_grad=True)
    out = x.scatter_reduce(0, ngrad.tensor([0, 0]), src, "amax", include_self=False)
    gx, gs = ngrad.autograd.grad(out.sum(), [x, src])
    assert gs.tolist() == [1.0, 0.0] and gx.tolist() == [0.0, 1.0]


ERRORS = [
    lambda L: L.zeros(3, 4).scatter(0, L.tensor([[5]]), L.ones(1, 1)),
    lambda L: L.zeros(3, 4).scatter(0, L.tensor([[-1]]), L.ones(1, 1)),
    lambda L: L.zeros(3, 4).scatter(0, L.tensor([0]), L.ones(1, 1)),
    lambda L: L.zeros(3, 4).scatter(0, L.zeros(3, 6, dtype=L.long), L.ones(4, 5)),
    lambda L: L.zeros(3, 4).scatter(0, L.tensor([[0]]), L.ones(1, 1, dtype=L.float64)),
    lambda L: L.zeros(3, 4).scatter(0, L.tensor([[0.0]]), L.ones(1, 1)),
    lambda L: L.zeros(3, 4).scatter_reduce(0, L.tensor([[0]]), L.ones(1, 1), "foo"),
    lambda L: L.zeros(3, 4).scatter(0, L.tensor([[0]]), L.ones(1, 1), reduce="foo"),
    lambda L: L.zeros(3, 4).scatter(2, L.tensor([[0]]), L.ones(1, 1)),
    lambda L: L.zeros(3, 4).scatter_add(0, L.tensor([[0]]), 1.0),
    lambda L: L.zeros(3, 4).index_add(0, L.tensor([0, 5]), L.ones(2, 4)),
    lambda L: L.zeros(3, 4).index_add(0, L.tensor([0.0, 1]), L.ones(2, 4)),
    lambda L: L.zeros(3, 4).index_add(0, L.tensor([0, 1]), L.ones(3, 4)),
    lambda L: L.zeros(3, 4).index_add(0, L.tensor([0, 1]), L.ones(2, 5)),
    lambda L: L.zeros(3, 4).index_add(0, L.tensor([[0, 1]]), L.ones(2, 4)),
    lambda L: L.zeros(3, 4).index_add(0, L.tensor([0, 1]), L.ones(2, 4, dtype=L.float64)),
    lambda L: L.zeros(3, 4).index_copy(0, L.tensor([0, 5]), L.ones(2, 4)),
    lambda L: L.zeros(3, 4).index_copy(0, L.tensor([0, 1]), L.ones(3, 4)),
    lambda L: L.zeros(3, 4).index_copy(0, L.tensor([0, 1]).int(), L.ones(2, 4)),
    lambda L: L.zeros(3, 4).index_fill(0, L.tensor([0, 5]), 1.0),
    lambda L: L.zeros(3, 4).index_fill(0, L.tensor([0, 1]).int(), 1.0),
    lambda L: L.zeros(3, 4).index_fill(0, L.tensor([0, 1]), L.tensor([1.0, 2])),
    lambda L: L.zeros(3, 4).index_fill(0, L.tensor([[0, 1]]), 1.0),
    lambda L: L.zeros(3, 4).put(L.tensor([0, 12]), L.ones(2)),
    lambda L: L.zeros(3, 4).put(L.tensor([0, -13]), L.ones(2)),
    lambda L: L.zeros(3, 4).put(L.tensor([0, 1]), L.ones(3)),
    lambda L: L.zeros(3, 4).put(L.tensor([0, 1]).int(), L.ones(2)),
    lambda L: L.zeros(3, 4).put(L.tensor([0, 1]), L.ones(2, dtype=L.float64)),
    lambda L: L.zeros(3, 4).take(L.tensor([0, 12])),
    lambda L: L.zeros(3, 4).take(L.tensor([0, 1]).int()),
    lambda L: L.zeros(3, 4).masked_select(L.tensor([1, 0, 1, 0])),
    lambda L: L.zeros(3, 4).masked_select(L.ones(5, dtype=L.bool)),
    lambda L: L.zeros(3, 4).masked_scatter(L.ones(3, 4, dtype=L.bool), L.ones(5)),
    lambda L: L.zeros(3, 4).masked_scatter(L.ones(4, dtype=L.int64), L.ones(12)),
    lambda L: L.zeros(3, 4).masked_scatter(L.ones(4, dtype=L.bool), L.ones(12, dtype=L.float64)),
    lambda L: L.zeros(3, 4).index_put((L.tensor([0, 5]),), L.ones(4)),
    lambda L: L.zeros(3, 4).index_put((L.tensor([0, 1]),), L.ones(3)),
    lambda L: L.zeros(3, 4).index_put((L.tensor([0, 1]),), L.ones(4, dtype=L.float64)),
    lambda L: L.zeros(3, 4).index_put((L.tensor([0.0, 1]),), L.ones(4)),
    lambda L: L.zeros(3, 4).index_put((None, L.tensor([0, 1])), L.ones(1)),
    lambda L: L.zeros(2, 3).repeat_interleave(L.tensor([1, 2]), dim=1),
    lambda L: L.zeros(2, 3).repeat_interleave(L.tensor([1, -2]), dim=0),
    lambda L: L.zeros(2, 3).repeat_interleave(-1),
    lambda L: L.zeros(2, 3).repeat_interleave(L.tensor([[1, 2]]), dim=0),
    lambda L: L.zeros(2, 3).repeat_interleave(L.tensor([1, 2]), dim=0, output_size=4),
    lambda L: L.zeros(2, 3).repeat_interleave(2, dim=0, output_size=5),
    lambda L: L.repeat_interleave(L.tensor([[1, 0, 2]])),
    lambda L: L.combinations(L.arange(3.0), -1),
    lambda L: L.combinations(L.zeros(2, 3)),
    lambda L: L.cartesian_prod(L.arange(2.0), L.arange(3)),
    lambda L: L.cartesian_prod(L.zeros(2, 3)),
    lambda L: L.block_diag(L.ones(2, 2, 2)),
    lambda L: L.zeros(2, 3).rot90(1, [0]),
    lambda L: L.zeros(2, 3).rot90(1, [0, 0]),
    lambda L: L.zeros(2, 3).rot90(1, [0, 2]),
    lambda L: L.arange(3.0).rot90(),
    lambda L: L.cdist(L.ones(3), L.ones(3)),
    lambda L: L.cdist(L.ones(3, 2).long(), L.ones(3, 2)),
    lambda L: L.cdist(L.ones(3, 2), L.ones(3, 2).long()),
    lambda L: L.cdist(L.ones(3, 2), L.ones(3, 3)),
    lambda L: L.cdist(L.ones(3, 2), L.ones(3, 2), p=-1),
    lambda L: L.cdist(L.ones(3, 2), L.ones(3, 2), compute_mode="foo"),
    lambda L: L.cdist(L.ones(2, 3, 2), L.ones(4, 3, 2)),
    lambda L: L.cdist(L.ones(3, 2), L.ones(3, 2).double()),
    lambda L: L.zeros(2, 3).roll((1, 2)),
    lambda L: L.zeros(2, 3).roll([], []),
    lambda L: L.zeros(2, 3).roll(1, (0, 1)),
    lambda L: L.zeros(()).roll(1, 0),
    lambda L: L.nn.functional.pad(L.zeros(2, 3), (3, 1), mode="reflect"),
    lambda L: L.nn.functional.pad(L.zeros(2, 3), (4, 1), mode="circular"),
    lambda L: L.nn.functional.pad(L.zeros(2, 3), (1, 1), mode="reflect", value=1.0),
    lambda L: L.nn.functional.pad(L.zeros(2, 3), (1,), mode="reflect"),
    lambda L: L.nn.functional.pad(L.zeros(2, 3), (1, 1), mode="foo"),
]


@pytest.mark.parametrize("k", range(len(ERRORS)))
def test_errors_have_pytorchs_type_and_message(k):
    torch = pytest.importorskip("torch")
    with pytest.raises(Exception) as theirs, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ERRORS[k](torch)
    with pytest.raises(type(theirs.value), match=re.escape(str(theirs.value))):
        ERRORS[k](ngrad)


INPLACE = [
    lambda L, v, w: v.index_add_(0, L.tensor([0, 3]), w * 2),
    lambda L, v, w: v[:2].scatter_(0, L.tensor([1]), w[:1] * 5) is not None and v,
    lambda L, v, w: v.scatter_reduce_(0, L.tensor([2, 2]), w, "prod", include_self=False),
    lambda L, v, w: v.scatter_add_(0, L.tensor([1, 1]), w),
    lambda L, v, w: v.index_copy_(0, L.tensor([3, 0]), w),
    lambda L, v, w: v.index_fill_(0, L.tensor([2]), w[1]),
    lambda L, v, w: v.index_put_((L.tensor([1, 1]),), w, accumulate=True),
    lambda L, v, w: v.masked_scatter_(L.tensor([True, False, False, True]), w),
    lambda L, v, w: v.put_(L.tensor([-1, 0]), w),
]


@pytest.mark.parametrize("k", range(len(INPLACE)))
def test_in_place_forms_through_views_reach_the_base(k):
    torch = pytest.importorskip("torch")
    res = []
    for L in (torch, ngrad):
        base = L.arange(12.0, dtype=L.float64).reshape(3, 4) * 1.0
        w = L.tensor([1.5, -2.0], dtype=L.float64, requires_grad=True)
        base.t()[1].mul_(1.0)  # a column view's write first: the row below is a view of a CopySlices base
        view = base[1]
        assert INPLACE[k](L, view, w) is view
        weights = L.arange(12.0, dtype=L.float64).reshape(3, 4).sin()
        (grad,) = L.autograd.grad((base * weights).sum(), w)
        res.append((base.detach().numpy(), view.detach().numpy(), grad.numpy(), base._version))
    for a, b in zip(res[0], res[1]):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_compiled_equals_eager_with_indices_as_arguments():
    def f(x, i, s):
        a = x.scatter_reduce(0, i, s, "amax", include_self=False) + x.scatter(0, i, s)
        b = a.index_fill(1, i[0, :2], 3.0).index_put((i[1], i[2]), s[0], accumulate=True)
        c = b.put(i[0] - 2, s[1]).take(i - 1)
        return (c * c).sum() + b.masked_scatter(b > 0, s.reshape(-1).repeat(2)).sum()

    x = ngrad.tensor(R.standard_normal((4, 5)), requires_grad=True)
    s = ngrad.tensor(R.standard_normal((3, 4)), requires_grad=True)
    i = ngrad.tensor(IDX)
    eager = f(x, i, s)
    ge = ngrad.autograd.grad(eager, [x, s])
    compiled = ngrad.compile(f)
    for _ in range(2):
        out = compiled(x, i, s)
        gc = ngrad.autograd.grad(out, [x, s])
        np.testing.assert_allclose(out.item(), eager.item(), rtol=1e-12)
        for a, b in zip(gc, ge):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)
    # under compile the index values are read when the program runs: still PyTorch's error
    with pytest.raises(RuntimeError, match="index 7 is out of bounds for dimension"):
        compiled(x, ngrad.tensor(np.full((3, 4), 7)), s)


@pytest.mark.parametrize(
    "name", ["prod_zeros_include_self", "amax_False", "mean_True", "scatter", "index_put", "cdist_3"]
)
def test_forward_mode_matches_finite_differences(name, rng):
    # PyTorch's own forward mode of scatter_reduce 'prod' with include_self disagrees with these
    import ngrad.autograd.forward_ad as fwAD

    fn, arrays = CASES[name]
    us = [rng.standard_normal(a.shape) for a in arrays]
    with fwAD.dual_level():
        duals = [fwAD.make_dual(ngrad.tensor(a), ngrad.tensor(u)) for a, u in zip(arrays, us)]
        tangent = fwAD.unpack_dual(fn(ngrad, *duals)).tangent.numpy()
    eps = 1e-6
    plus = fn(ngrad, *[ngrad.tensor(a + eps * u) for a, u in zip(arrays, us)]).numpy()
    minus = fn(ngrad, *[ngrad.tensor(a - eps * u) for a, u in zip(arrays, us)]).numpy()
    np.testing.assert_allclose(tangent, (plus - minus) / (2 * eps), rtol=1e-5, atol=1e-7)


EDGES = [
    lambda L: L.zeros(()).scatter(0, L.tensor(0), L.tensor(5.0)),
    lambda L: L.zeros(3).scatter_add(0, L.tensor(0), L.tensor(5.0)),
    lambda L: L.zeros(3, 4).scatter_add(1, L.zeros(0, dtype=L.long), L.ones(3, 4)),
    lambda L: L.zeros(()).index_add(0, L.tensor([0]), L.tensor(5.0)),
    lambda L: L.zeros(3).index_fill(0, L.tensor(1), 5.0),
    lambda L: L.tensor([1, 2, 3]).scatter_reduce(0, L.tensor([0, 0]), L.tensor([5, -8]), "mean", include_self=False),
    lambda L: L.tensor([1, 2, 3]).scatter_reduce(0, L.tensor([0, 0]), L.tensor([5, -7]), "amin", include_self=False),
    lambda L: L.tensor([True, False]).scatter(0, L.tensor([1]), L.tensor([True])),
    lambda L: L.tensor([1, 2, 3]).put(L.tensor([0, 0]), L.tensor([5, 7]), accumulate=True),
    lambda L: L.tensor([1.0, 2, 3]).take(L.zeros(0, 2, dtype=L.long)),
    lambda L: L.tensor([1.0, 2, 3]).masked_scatter(L.tensor([False, False, False]), L.zeros(0)),
    lambda L: L.zeros(2, 3).index_put((L.tensor([0, 1]), L.tensor([[0], [2]])), L.tensor([1.0, 2])),
    lambda L: L.zeros(2, 3).index_copy(1, L.tensor([0, 0]), L.tensor([[1.0, 2], [3, 4]])),
    lambda L: L.zeros(3, dtype=L.int64).index_add(0, L.tensor([0, 0]), L.tensor([1, 2]), alpha=3),
    lambda L: L.ones(3).scatter(0, L.tensor([0, 0]), 3.0, reduce="multiply"),
    lambda L: L.combinations(L.arange(4.0), 5),
    lambda L: L.block_diag(L.ones(0, 2), L.ones(2, 0)),
    lambda L: L.block_diag(L.ones(2, 2, dtype=L.int64), L.ones(1, 1)),
    lambda L: L.repeat_interleave(L.tensor([1, 0, 2]).int()),
    lambda L: L.cdist(L.ones(1, 3, 2), L.ones(4, 5, 2)),
]


@pytest.mark.parametrize("k", range(len(EDGES)))
def test_edge_cases_match_pytorch(k):
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = EDGES[k](torch)
    out = EDGES[k](ngrad)
    assert tuple(out.shape) == tuple(ref.shape) and str(out.dtype)[6:] == str(ref.dtype)[6:]
    np.testing.assert_array_equal(out.numpy(), ref.numpy())


def test_batched_cotangents_equal_one_at_a_time(rng):
    # is_grads_batched runs the rows with a leading batch axis (ngrad/engine/transform/batch.py)
    x = ngrad.tensor(rng.standard_normal((4, 5)), requires_grad=True)
    s = ngrad.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    i = ngrad.tensor(IDX)
    out = x.scatter_reduce(0, i, s, "prod", include_self=False) + x.scatter(1, i, s) * 2
    seeds = rng.standard_normal((3, 4, 5))
    batched = ngrad.autograd.grad(out, [x, s], ngrad.tensor(seeds), is_grads_batched=True, retain_graph=True)
    for k in range(3):
        one = ngrad.autograd.grad(out, [x, s], ngrad.tensor(seeds[k]), retain_graph=True)
        for b, o in zip(batched, one):
            np.testing.assert_allclose(b.numpy()[k], o.numpy(), rtol=1e-12, atol=1e-14)
