"""Every facade operation: gradients by finite differences (first and second order) and,
where PyTorch is installed, values and gradients against PyTorch (float64, rtol 1e-6).

Each case is written once as ``fn(lib, *xs)`` and runs with ``lib`` = ngrad or torch.
"""

import numpy as np
import pytest

import ngrad

from .oracles import tensor_fd_check

R = np.random.default_rng(3)


def r(*shape):
    return R.standard_normal(shape)


def p(*shape):
    return R.uniform(0.5, 2.0, shape)


def u(*shape):
    return R.uniform(-0.8, 0.8, shape)


CASES = {
    "add_broadcast": (lambda L, a, b: a + b, [r(3, 1), r(4)]),
    "sub_scalar": (lambda L, a: 2.5 - a - 1, [r(3)]),
    "mul_broadcast": (lambda L, a, b: a * b * 3, [r(2, 3, 1), r(3, 4)]),
    "div": (lambda L, a, b: a / b / 2 + 1 / b, [r(3, 4), p(4)]),
    "pow_scalar": (lambda L, a: a**2 + a**3 - a**0.5, [p(5)]),
    "pow_tensor": (lambda L, a, b: a**b, [p(5), r(5)]),
    "rpow": (lambda L, a: 2.0**a, [r(5)]),
    "neg_abs": (lambda L, a: -a.abs() + abs(a), [r(5)]),
    "exp_log": (lambda L, a: a.exp() + a.abs().log() + a.exp().log1p() + a.expm1(), [r(5)]),
    "sqrt_rsqrt": (lambda L, a: a.sqrt() + a.rsqrt() + a.reciprocal() + a.square(), [p(5)]),
    "trig": (lambda L, a: a.sin() + a.cos() + a.tan() + a.atan(), [u(6)]),
    "inverse_trig": (lambda L, a: a.asin() + a.acos(), [u(6)]),
    "hyperbolic": (lambda L, a: a.sinh() + a.cosh() + a.tanh(), [r(6)]),
    "sigmoid_relu": (lambda L, a: a.sigmoid() + a.relu() * 2, [r(6)]),
    "softplus": (
        lambda L, a: L.nn.functional.softplus(a) + L.nn.functional.softplus(a * 10, beta=2, threshold=5),
        [r(6)],
    ),
    "erf": (lambda L, a: a.erf(), [r(6)]),
    "rounding": (lambda L, a: a.floor() + a.ceil() + a.round() + a.sign() + a, [r(6) * 3 + 0.25]),
    "maximum_minimum": (lambda L, a, b: L.maximum(a, b) * 2 + L.minimum(a, b), [r(3, 4), r(4)]),
    "remainder_fmod": (
        lambda L, a, b: a % b + L.fmod(a, b) * 2 + a.remainder(1.5) + L.fmod(a, -0.7) + (a % 2) * b,
        [r(3, 4) * 4, r(4)],
    ),
    "clamp": (lambda L, a: a.clamp(-0.5, 0.7) + a.clamp(min=0.1) + a.clamp(max=-0.2), [r(8)]),
    "clamp_tensor": (lambda L, a, lo, hi: a.clamp(lo, hi), [r(8), r(8) - 1, r(8) + 1]),
    "where": (lambda L, a, b: L.where(a > 0, a * 2, b), [r(3, 4), r(4)]),
    "sum_dims": (lambda L, a: a.sum() + a.sum(1).sum() + a.sum((0, 2), keepdim=True).sum(), [r(2, 3, 4)]),
    "mean_dims": (lambda L, a: a.mean((-1, 0)) * a.mean(), [r(2, 3, 4)]),
    "prod": (lambda L, a: a.prod(1) + a.prod(), [r(3, 4)]),
    "amax_amin": (lambda L, a: a.amax(1) + a.amin((0, 1), keepdim=True).sum() + a.amax(), [r(3, 4)]),
    "max_min_dim": (lambda L, a: a.max(1)[0] + a.min(0, keepdim=True)[0].sum() + a.max() + a.min(), [r(3, 4)]),
    "var_std": (
        lambda L, a: a.var() + a.var(1, correction=0) + a.std(0).sum() + a.std(1, keepdim=True).sum(),
        [r(3, 4)],
    ),
    "norm": (lambda L, a: a.norm() + a.norm(1) + a.norm(3, dim=1).sum() + a.norm(float("inf"), 0).sum(), [r(3, 4)]),
    "logsumexp": (lambda L, a: a.logsumexp(1) + a.logsumexp((0, 1)), [r(3, 4)]),
    "softmax": (lambda L, a: a.softmax(1) * a.log_softmax(0), [r(3, 4)]),
    "cumsum": (lambda L, a: a.cumsum(1) * a.cumsum(0), [r(3, 4)]),
    "matmul_2d": (lambda L, a, b: a @ b, [r(3, 4), r(4, 2)]),
    "matmul_vectors": (lambda L, a, b, c: (a @ b) * c + (b @ c).sum(), [r(4), r(4, 3), r(3)]),
    "matmul_batched": (lambda L, a, b: L.matmul(a, b), [r(2, 1, 3, 4), r(5, 4, 2)]),
    "einsum": (
        lambda L, a, b, c: (
            L.einsum("ij,jk->ik", a, b).sum(0)
            + L.einsum("ii", a[:, :3])
            + L.einsum("ij,ij->j", a, a)[:4]
            + L.einsum("...j,jk,k->...", a, b, c)[1]
            + L.einsum("bij,jk", L.stack([a, a * 2]), b).sum((0, 1))
            + L.einsum("iij->j", L.stack([a[:, :2]] * 3, 2)[:2]).sum()
            + L.einsum("i,j->ij", c, c).sum(1)
        ),
        [r(3, 4), r(4, 4), r(4)],
    ),
    "tensordot_inner": (
        lambda L, a, b: (
            L.tensordot(a, b, dims=([1, 2], [1, 0]))
            + L.tensordot(a, b.permute(1, 0, 2), 2).sum()
            + L.inner(a[0], b[:, 0].t()).sum(0)
        ),
        [r(2, 3, 4), r(4, 3, 2)],
    ),
    "linalg": (
        lambda L, a, b: (
            L.linalg.inv(a) @ L.linalg.solve(a, b)
            + L.linalg.det(a) * L.linalg.solve(a, b[:, 0])[:, None]
            + L.linalg.solve(L.stack([a, a.t()]), b).sum(0)
            + a.inverse().det()
            + L.linalg.vector_norm(b, 3, 0)
        ),
        [r(3, 3) + 3 * np.eye(3), r(3, 2)],
    ),
    "dot_mm": (lambda L, a, b: a.dot(b) + a.outer(b).sum(), [r(4), r(4)]),
    "reshape_view": (lambda L, a: a.reshape(4, -1).view(2, 2, 3).flatten(1) * 2, [r(3, 4)]),
    "squeeze_unsqueeze": (lambda L, a: a.unsqueeze(0).unsqueeze(-1).squeeze() * a.squeeze(1).unsqueeze(1), [r(3, 1)]),
    "transpose_permute": (
        lambda L, a: a.transpose(0, 2).permute(1, 0, 2) * 2 + a.permute(0, 2, 1).permute(2, 1, 0),
        [r(2, 3, 4)],
    ),
    "t_mT": (lambda L, a: a.t() @ a + a.mT @ a, [r(3, 2)]),
    "expand_repeat": (lambda L, a: a.expand(2, 3, 4) * a.repeat(2, 1, 4), [r(3, 1)]),
    "slicing": (lambda L, a: a[1:, ::2] * 2 + a[0, 0:5:2] + a[..., -1:].sum() + a[None, :, 1][0, 1:3].sum(), [r(3, 5)]),
    "int_indexing": (lambda L, a: a[[0, 2, 2]] + a[L.tensor([1, 0, 0])], [r(3, 4)]),
    "mixed_indexing": (
        lambda L, a: a[:, [1, 1, 2]].sum() + a[[0, 1], :, [2, 0]].sum() + a[1, [0, 2]].sum(),
        [r(2, 3, 4)],
    ),
    "bool_indexing": (lambda L, a: a[a > 0].sum() + a[L.tensor([True, False, True])].sum(), [r(3, 4)]),
    "cat_stack": (
        lambda L, a, b: L.cat([a, b, a], 1).sum(0) + L.stack([a, a * 2], 2).sum((0, 2)).sum(),
        [r(2, 3), r(2, 1)],
    ),
    "split_chunk": (lambda L, a: a.split(2, 1)[1].sum() + a.split([1, 3], 1)[1].sum() + a.chunk(2)[0].sum(), [r(3, 4)]),
    "flip_roll": (lambda L, a: a.flip(0) * a.roll(1, 1) + a.roll(2), [r(3, 4)]),
    "sort_topk": (
        lambda L, a: (
            a.sort(1)[0] * L.arange(4.0)
            + a.sort(0, descending=True).values[:, :1]
            + a.topk(2, 0, largest=False).values.sum(0)
            + L.sort(a.t())[0].t()
        ),
        [r(3, 4)],
    ),
    "gather_index_select": (
        lambda L, a: (
            a.gather(1, L.tensor([[0, 0], [3, 1], [2, 2]])).sum()
            + a.index_select(0, L.tensor([2, 0, 2])).sum() * a.sum()
        ),
        [r(3, 4)],
    ),
    "atan2_logaddexp_exp2": (lambda L, a, b: L.atan2(a, b) + L.logaddexp(a, b) * 2 + a.exp2(), [r(3, 4), r(3, 4)]),
    "trunc_frac_nan_to_num": (lambda L, a: (a * 3).frac() + (a * 3).trunc() + a.nan_to_num(posinf=1.0) * 2, [r(3, 4)]),
    "masked_fill_tril_triu": (
        lambda L, a: (
            a.masked_fill(L.tensor([[True, False, False, True]] * 3), -1.5)
            + a.tril()
            + a.triu(1) * 2
            + L.stack([a, a]).tril(-1)[1]
        ),
        [r(3, 4)],
    ),
    "cross_movedim_diff": (
        lambda L, a, b: L.cross(a, b, dim=1).movedim(0, 1).diff(1, 1).sum(1) + a.diff(2, 0, prepend=b[:1]).sum(0),
        [r(5, 3), r(5, 3)],
    ),
    "take_tile_addmm_unflatten": (
        lambda L, a, m: (
            L.take_along_dim(a, L.tensor([[0], [3], [1]]), 1)
            + a.tile(2)[:, 3:4]
            + L.addmm(a[:, :2], m, m[:, :2], beta=0.5, alpha=2).sum(1, keepdim=True)
            + a.unflatten(1, (2, 2)).sum(2)[:, :1]
        ),
        [r(3, 4), r(3, 3)],
    ),
    "meshgrid": (lambda L, a, b: (lambda g: g[0] * g[1] + g[1])(L.meshgrid(a, b, indexing="xy")), [r(4), r(3)]),
    "diagonal_trace_diag": (
        lambda L, a, v: (
            L.diag(v, 1)[1:, 1:] * a[0, :, :3].trace()
            + L.diag(v) * a.diagonal(1, 1, 2)[0].sum()
            + L.diag(a[1], -1).sum()
            + a.diagonal(-1, -1, 0).sum()
            + L.diag(v, -2)[2:, :3]
        ),
        [r(2, 3, 4), r(3)],
    ),
    "unbind_select": (lambda L, a: a.unbind(1)[2] * a.select(0, 1).sum(), [r(3, 4)]),
    "mse_loss": (lambda L, a, b: L.nn.functional.mse_loss(a, b), [r(5), r(5)]),
    "activations": (
        lambda L, a: (
            L.nn.functional.gelu(a)
            + L.nn.functional.gelu(a, approximate="tanh")
            + L.nn.functional.silu(a)
            + L.nn.functional.elu(a, 0.7)
            + L.nn.functional.leaky_relu(a, 0.2)
            + L.nn.functional.logsigmoid(a * 3)
        ),
        [r(3, 4)],
    ),
    "linear": (
        lambda L, a, w, b: L.nn.functional.linear(a, w, b) + L.nn.functional.linear(a, w[0]).sum(),
        [r(5, 4), r(3, 4), r(3)],
    ),
    "cross_entropy": (
        lambda L, a: (
            L.nn.functional.cross_entropy(
                a,
                L.tensor([0, 3, -100, 1, 3]),
                weight=L.tensor([0.5, 2.0, 1.0, 1.5], dtype=L.float64),
                label_smoothing=0.2,
            )
            + L.nn.functional.cross_entropy(a, L.tensor([2, 2, 0, 1, 3]), reduction="sum")
        ),
        [r(5, 4)],
    ),
    "cross_entropy_kdim": (
        lambda L, a: L.nn.functional.cross_entropy(
            a, L.tensor([[[0, 3], [1, 1], [2, 0]], [[3, 3], [0, 1], [2, 2]]]), reduction="none", label_smoothing=0.1
        ),
        [r(2, 4, 3, 2)],
    ),
    "cross_entropy_probabilities": (
        lambda L, a, t: (
            L.nn.functional.cross_entropy(a, t.softmax(1), label_smoothing=0.3)
            + L.nn.functional.cross_entropy(a[0], t[1].softmax(0))
        ),
        [r(3, 4), r(3, 4)],
    ),
    "nll_loss": (
        lambda L, a: (
            L.nn.functional.nll_loss(a, L.tensor([1, 0, 3]), reduction="sum")
            + L.nn.functional.nll_loss(a.log_softmax(1), L.tensor([1, 1, 2]), ignore_index=1)
        ),
        [r(3, 4)],
    ),
    "binary_cross_entropy": (
        lambda L, a, t: (
            L.nn.functional.binary_cross_entropy(a.sigmoid(), t)
            + L.nn.functional.binary_cross_entropy(
                a.sigmoid(), t, weight=L.tensor([0.5, 1.0, 2.0, 1.5], dtype=L.float64), reduction="sum"
            )
        ),
        [r(3, 4), R.uniform(0.1, 0.9, (3, 4))],
    ),
    "binary_cross_entropy_with_logits": (
        lambda L, a, t: (
            L.nn.functional.binary_cross_entropy_with_logits(
                a * 5, t, pos_weight=L.tensor([0.5, 1.0, 2.0, 1.5], dtype=L.float64)
            )
            + L.nn.functional.binary_cross_entropy_with_logits(a, t, reduction="none").sum()
        ),
        [r(3, 4), R.uniform(0, 1, (3, 4))],
    ),
    "regression_losses": (
        lambda L, a, b: (
            L.nn.functional.l1_loss(a, b)
            + L.nn.functional.smooth_l1_loss(a, b, beta=0.7)
            + L.nn.functional.huber_loss(a, b, delta=0.6, reduction="sum")
        ),
        [r(4, 3), r(4, 3)],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_finite_differences(name, rng):
    fn, inputs = CASES[name]
    tensor_fd_check(lambda *xs: fn(ngrad, *xs), inputs, rng)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_pytorch(name):
    torch = pytest.importorskip("torch")
    fn, inputs = CASES[name]
    ng = [ngrad.tensor(a, dtype=ngrad.float64, requires_grad=True) for a in inputs]
    th = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in inputs]
    out_n, out_t = fn(ngrad, *ng), fn(torch, *th)
    assert tuple(out_n.shape) == tuple(out_t.shape)
    np.testing.assert_allclose(out_n.detach().numpy(), out_t.detach().numpy(), rtol=1e-6, atol=1e-12)
    v = np.random.default_rng(0).standard_normal(tuple(out_t.shape))
    out_n.backward(ngrad.tensor(v))
    out_t.backward(torch.tensor(v))
    for a, b in zip(ng, th):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6, atol=1e-12)
