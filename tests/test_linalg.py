"""``ngrad.linalg`` beyond the primitive cases (tests/cases_linalg.py: values, first and second
order VJPs and JVPs of every row): each function against PyTorch (values and the gradients of
random cotangents, in float64 at rtol 1e-6; eigenvectors and singular vectors through functions
their signs do not change), the compositions by finite differences of first and second order
without PyTorch, singular and degenerate matrices, forward mode, compiled programs, and the
errors with PyTorch's types and messages."""

import numpy as np
import pytest

import ngrad

from .oracles import tensor_fd_check


def t64(a, requires_grad=False):
    return ngrad.tensor(np.asarray(a, np.float64), dtype=ngrad.float64, requires_grad=requires_grad)


@pytest.fixture
def system(rng):
    return rng.standard_normal((3, 3)) + 3 * np.eye(3), rng.standard_normal(3)


def test_solve_takes_vectors_broadcast_batches_and_the_right_side(system, rng):
    A, b = system
    stack = np.stack([A, A.T, 2 * A])
    np.testing.assert_allclose(ngrad.linalg.solve(t64(A), t64(b)).numpy(), np.linalg.solve(A, b), rtol=1e-13)
    got = ngrad.linalg.solve(t64(stack), t64(b[:, None])).numpy()  # one right-hand side for every matrix
    np.testing.assert_allclose(got, np.linalg.solve(stack, np.broadcast_to(b[:, None], (3, 3, 1))), rtol=1e-13)
    B = rng.standard_normal((2, 3))
    np.testing.assert_allclose(ngrad.linalg.solve(t64(A), t64(B), left=False).numpy(), B @ np.linalg.inv(A), rtol=1e-12)
    tensor_fd_check(lambda a, v: ngrad.linalg.solve(a, v), [stack, b], rng)


def test_batched_reverse_and_forward_mode_give_the_jacobian(system):
    A, b = system
    a = t64(A, requires_grad=True)
    x = ngrad.linalg.solve(a, t64(b))
    rows = ngrad.autograd.grad(x, a, ngrad.eye(3, dtype=ngrad.float64), is_grads_batched=True)[0].numpy()
    xs = np.linalg.solve(A, b)
    inv = np.linalg.inv(A)
    expected = -np.einsum("ij,k->ijk", inv, xs)  # d x_i / d A_jk = -inv(A)_ij x_k
    np.testing.assert_allclose(rows, expected, rtol=1e-12, atol=1e-14)
    tangent = np.zeros((3, 3))
    tangent[0, 1] = 1.0
    _, jv = ngrad.func.jvp(lambda m: ngrad.linalg.det(m) * ngrad.linalg.inv(m).sum(), (t64(A),), (t64(tangent),))
    det, s = np.linalg.det(A), inv.sum()
    expected = det * inv[1, 0] * s - det * (inv @ tangent @ inv).sum()  # d det = det tr(inv dA), d inv = -inv dA inv
    np.testing.assert_allclose(jv.item(), expected, rtol=1e-12)


def test_a_compiled_newton_step_matches_numpy(rng):
    @ngrad.compile
    def newton(x, c):
        f = x * x * x + c @ x - 1.0  # a small nonlinear system F(x) = 0
        J = ngrad.autograd.functional.jacobian(lambda v: v * v * v + c @ v - 1.0, x)
        return x - ngrad.linalg.solve(J, f), ngrad.linalg.det(J)

    c = rng.standard_normal((3, 3)) + 4 * np.eye(3)
    x = np.full(3, 0.5)
    for _ in range(4):
        step, det = newton(t64(x), t64(c))
        J = 3 * np.diag(x * x) + c
        expected = x - np.linalg.solve(J, x**3 + c @ x - 1.0)
        np.testing.assert_allclose(step.numpy(), expected, rtol=1e-12)
        np.testing.assert_allclose(det.item(), np.linalg.det(J), rtol=1e-12)
        x = expected


def test_linalg_errors():
    with pytest.raises(RuntimeError, match="linalg.inv: A must be batches of square matrices, but they are 2 by 3"):
        ngrad.linalg.inv(ngrad.ones(2, 3))
    with pytest.raises(RuntimeError, match=r"Incompatible shapes of A and B for the equation AX = B \(3x3 and 2x1\)"):
        ngrad.linalg.solve(ngrad.eye(3), ngrad.ones(2))
    with pytest.raises(RuntimeError, match="linalg.det: The input tensor A must have at least 2 dimensions"):
        ngrad.linalg.det(ngrad.ones(3))
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor as input. Got Long"):
        ngrad.linalg.inv(ngrad.tensor([[1, 2], [3, 4]]))
    with pytest.raises(RuntimeError, match="Expected A and B to have the same dtype"):
        ngrad.linalg.solve(ngrad.eye(2, dtype=ngrad.float64), ngrad.ones(2))
    with pytest.raises(RuntimeError, match="linalg.inv: The input matrix is singular"):
        ngrad.linalg.inv(ngrad.zeros(2, 2)).sum().item()


# --- against PyTorch -------------------------------------------------------------------------------

R = np.random.default_rng(5)


def _spd(*shape):
    x = R.standard_normal(shape)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


def _with_singular_values(*s):
    q, p = np.linalg.qr(R.standard_normal((2, len(s), len(s))))[0]
    return q @ np.diag(s) @ p.T


# Functions of eigenvectors and singular vectors their signs do not change: absolute values of
# the entries, products of matching columns (the gradients then go through every part)


def _flat(L, *parts):
    return L.cat([p.flatten() for p in parts])


def _gauge_free_eigh(L, a):
    w, v = L.linalg.eigh(a)
    return _flat(L, w, v.abs(), (v * w.unsqueeze(-2)) @ v.mT)


def _gauge_free_svd(L, a, full):
    u, s, vh = L.linalg.svd(a, full_matrices=full)
    k = s.shape[-1]
    return _flat(L, s, u[..., :k].abs(), vh[..., :k, :].abs(), u[..., :k] @ vh[..., :k, :])


def _gauge_free_qr(L, a):
    q, r = L.linalg.qr(a)
    return _flat(L, q.abs(), r.abs(), q @ q.mT)


# name -> (function of the library and the tensors, input arrays); every input gets a gradient
PARITY = {
    "cholesky": (lambda L, a: L.linalg.cholesky(a), [_spd(2, 4, 4)]),
    "cholesky_upper_reads_upper": (lambda L, a: L.linalg.cholesky(a.triu(), upper=True), [_spd(4, 4)]),
    "cholesky_ex": (lambda L, a: L.linalg.cholesky_ex(a).L, [_spd(3, 3)]),
    "cholesky_solve": (
        lambda L, a, b: b.cholesky_solve(L.linalg.cholesky(a)),
        [_spd(2, 3, 3), R.standard_normal((3, 2))],
    ),
    "cholesky_solve_upper": (
        lambda L, a, b: b.cholesky_solve(L.linalg.cholesky(a, upper=True), upper=True),
        [_spd(3, 3), R.standard_normal((3, 2))],
    ),
    "solve_triangular": (
        lambda L, a, b: L.linalg.solve_triangular(a, b, upper=True),
        [R.standard_normal((2, 3, 3)) + 3 * np.eye(3), R.standard_normal((3, 4))],
    ),
    "solve_triangular_right_unit": (
        lambda L, a, b: L.linalg.solve_triangular(a, b, upper=False, left=False, unitriangular=True),
        [R.standard_normal((3, 3)), R.standard_normal((2, 4, 3))],
    ),
    "slogdet": (lambda L, a: L.linalg.slogdet(a)[1] * L.linalg.slogdet(a)[0], [R.standard_normal((3, 4, 4))]),
    "logdet": (lambda L, a: a.logdet(), [_spd(2, 3, 3)]),
    "det": (lambda L, a: L.linalg.det(a), [R.standard_normal((2, 4, 4))]),
    "det_singular": (
        lambda L, a: L.linalg.det(a),
        [np.outer([1.0, 2.0, 3.0], [1.0, -1.0, 0.5]) + np.diag([0, 0, 1.0])],
    ),
    "det_rank_two_short": (lambda L, a: L.linalg.det(a), [np.outer([1.0, 2.0, 3.0], [1.0, -1.0, 0.5])]),
    "eigh": (_gauge_free_eigh, [_spd(2, 4, 4)]),
    "eigh_upper": (lambda L, a: L.linalg.eigh(a, UPLO="U")[0], [R.standard_normal((4, 4))]),
    "eigvalsh_repeated": (lambda L, a: L.linalg.eigvalsh(a), [np.eye(3) * 2.0]),
    "svd_tall": (lambda L, a: _gauge_free_svd(L, a, False), [R.standard_normal((2, 5, 3))]),
    "svd_wide_full": (lambda L, a: _gauge_free_svd(L, a, True), [R.standard_normal((3, 5))]),
    "svdvals_repeated": (lambda L, a: L.linalg.svdvals(a).sum(), [_with_singular_values(2.0, 2.0, 0.5)]),
    "qr_tall": (_gauge_free_qr, [R.standard_normal((2, 5, 3))]),
    "qr_wide": (_gauge_free_qr, [R.standard_normal((3, 5))]),
    "qr_complete_square": (lambda L, a: L.linalg.qr(a, mode="complete")[1], [R.standard_normal((3, 3))]),
    "lstsq_tall": (
        lambda L, a, b: L.linalg.lstsq(a, b).solution,
        [R.standard_normal((2, 5, 3)), R.standard_normal((1, 5, 2))],
    ),
    "lstsq_vector": (lambda L, a, b: L.linalg.lstsq(a, b).solution, [R.standard_normal((5, 3)), R.standard_normal(5)]),
    "lstsq_rank_deficient": (
        lambda L, a, b: L.linalg.lstsq(a @ a.mT @ a, b).solution,  # 5 x 4 of rank 2
        [R.standard_normal((5, 2)) @ R.standard_normal((2, 4)), R.standard_normal((5, 3))],
    ),
    "lstsq_gels": (
        lambda L, a, b: L.linalg.lstsq(a, b, driver="gels").solution,
        [R.standard_normal((5, 3)), R.standard_normal((5, 2))],
    ),
    "lstsq_wide": (
        lambda L, a, b: L.linalg.lstsq(a, b).solution,
        [R.standard_normal((3, 5)), R.standard_normal((3, 2))],
    ),
    "lstsq_residuals": (
        lambda L, a, b: L.linalg.lstsq(a, b, driver="gelsd").residuals,
        [R.standard_normal((5, 3)), R.standard_normal((5, 2))],
    ),
    "pinv": (lambda L, a: L.linalg.pinv(a), [R.standard_normal((2, 5, 3))]),
    "pinv_hermitian": (lambda L, a: L.linalg.pinv(a, hermitian=True), [_spd(4, 4)]),
    "pinverse": (lambda L, a: a.pinverse(), [R.standard_normal((3, 4))]),
    "matrix_exp": (lambda L, a: L.linalg.matrix_exp(a), [R.standard_normal((2, 4, 4))]),
    "matrix_exp_large": (lambda L, a: L.linalg.matrix_exp(a), [R.standard_normal((3, 3)) * 6]),
    "matrix_power": (lambda L, a: L.linalg.matrix_power(a, 6), [R.standard_normal((2, 3, 3))]),
    "matrix_power_negative": (lambda L, a: L.linalg.matrix_power(a, -3), [R.standard_normal((3, 3)) + 3 * np.eye(3)]),
    "multi_dot": (
        lambda L, a, b, c, d: L.linalg.multi_dot([a, b, c, d]),
        [R.standard_normal(4), R.standard_normal((4, 6)), R.standard_normal((6, 2)), R.standard_normal((2, 3))],
    ),
    "matrix_norms": (
        lambda L, a: L.stack([L.linalg.matrix_norm(a, o) for o in ("fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf)]),
        [R.standard_normal((2, 3, 4))],
    ),
    "matrix_norm_dims": (
        lambda L, a: L.linalg.matrix_norm(a, "nuc", dim=(0, 2), keepdim=True),
        [R.standard_normal((3, 2, 4))],
    ),
    "norm_of_a_matrix": (lambda L, a: L.linalg.norm(a, 2) + L.linalg.norm(a, -np.inf), [R.standard_normal((3, 4))]),
    "torch_svd": (lambda L, a: (lambda u, s, v: u @ v.mT * s.sum())(*a.svd()), [R.standard_normal((4, 3))]),
}


@pytest.mark.parametrize("name", sorted(PARITY))
def test_values_and_gradients_equal_pytorchs(name):
    torch = pytest.importorskip("torch")
    fn, arrays = PARITY[name]
    results = []
    for L in (ngrad, torch):
        xs = [L.tensor(a, dtype=L.float64, requires_grad=True) for a in arrays]
        out = fn(L, *xs)
        g = np.random.default_rng(3).standard_normal(tuple(out.shape))
        # PyTorch's det gradient is its cofactor formula under create_graph (plain backward
        # multiplies by det = 0 at an exactly singular matrix and gives zeros)
        grads = L.autograd.grad(out, xs, L.tensor(g, dtype=L.float64), allow_unused=True, create_graph=True)
        results.append([out.detach().numpy()] + [None if x is None else x.detach().numpy() for x in grads])
    for mine, theirs in zip(*results):
        if theirs is None:
            assert mine is None or not np.any(mine), name
        else:
            np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-9, err_msg=name)


def test_decompositions_equal_pytorchs_up_to_signs():
    torch = pytest.importorskip("torch")
    a = R.standard_normal((2, 5, 3))
    u, s, vh = (x.numpy() for x in ngrad.linalg.svd(t64(a)))
    tu, ts, tvh = (x.numpy() for x in torch.linalg.svd(torch.tensor(a)))
    np.testing.assert_allclose(s, ts, rtol=1e-12)
    np.testing.assert_allclose(np.abs(u[..., :3]), np.abs(tu[..., :3]), rtol=1e-10)
    np.testing.assert_allclose(np.abs(vh), np.abs(tvh), rtol=1e-10)
    extra = u[..., 3:]  # the full U's complement: another basis of the same space
    np.testing.assert_allclose(
        extra @ np.swapaxes(extra, -1, -2), tu[..., 3:] @ np.swapaxes(tu[..., 3:], -1, -2), atol=1e-12
    )
    sym = _spd(3, 3)
    w, v = (x.numpy() for x in ngrad.linalg.eigh(t64(sym)))
    tw, tv = (x.numpy() for x in torch.linalg.eigh(torch.tensor(sym)))
    np.testing.assert_allclose(w, tw, rtol=1e-12)
    np.testing.assert_allclose(np.abs(v), np.abs(tv), rtol=1e-10)
    q, r = (x.numpy() for x in ngrad.linalg.qr(t64(a), mode="complete"))
    tq, tr = (x.numpy() for x in torch.linalg.qr(torch.tensor(a), mode="complete"))
    assert q.shape == tq.shape and r.shape == tr.shape
    np.testing.assert_allclose(np.abs(r), np.abs(tr), atol=1e-12)
    np.testing.assert_allclose(q @ r, a, atol=1e-12)
    factor, info = ngrad.linalg.cholesky_ex(t64(np.stack([np.eye(2), [[1.0, 2.0], [2.0, 1.0]]])))
    assert info.dtype == ngrad.int32 and info.tolist() == [0, 2]
    np.testing.assert_array_equal(factor[0].numpy(), np.eye(2))
    assert np.isnan(factor[1].numpy()).all()  # no factor: nan (PyTorch's holds LAPACK's partial one)
    sol = ngrad.linalg.lstsq(t64(a), t64(R.standard_normal((2, 5, 2))), driver="gelsd")
    assert tuple(sol.rank.shape) == (2,) and tuple(sol.singular_values.shape) == (2, 3)
    assert ngrad.linalg.lstsq(t64(a), t64(a)).residuals.numel() == 0  # gelsy: none, as PyTorch's


def test_forward_mode_equals_pytorchs():
    torch = pytest.importorskip("torch")
    a, t = _spd(2, 3, 3), R.standard_normal((2, 3, 3))
    t = t + np.swapaxes(t, -1, -2)  # a symmetric tangent, as for a symmetric input

    def f(L, x):
        w, v = L.linalg.eigh(x)
        u, s, vh = L.linalg.svd(x[..., :2], full_matrices=False)
        q, r = L.linalg.qr(x)
        return (
            L.linalg.cholesky(x).sum()
            + (w * w).sum()
            + (v * v * w.unsqueeze(-2)).sum()
            + (u @ vh * s.sum()).sum()
            + (q @ r).sum()
            + r.sum()
            + L.linalg.slogdet(x)[1].sum()
            + L.linalg.det(x).sum()
            + L.linalg.matrix_exp(x * 0.3).sum()
            + L.linalg.solve_triangular(x, x[..., :1], upper=True).sum()
        )

    mine = ngrad.func.jvp(lambda x: f(ngrad, x), (t64(a),), (t64(t),))[1].item()
    theirs = torch.func.jvp(lambda x: f(torch, x), (torch.tensor(a),), (torch.tensor(t),))[1].item()
    np.testing.assert_allclose(mine, theirs, rtol=1e-6)


# --- without PyTorch: finite differences, special matrices -------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["cholesky_solve", "logdet", "lstsq_wide", "pinv", "matrix_power_negative", "matrix_norms", "eigh", "qr_wide"],
)
def test_compositions_pass_finite_differences_of_first_and_second_order(name, rng):
    fn, arrays = PARITY[name]
    if name in ("cholesky_solve", "eigh"):  # symmetric inputs: perturbed symmetrically, as PyTorch's gradcheck does
        tensor_fd_check(lambda a, *xs: fn(ngrad, (a + a.mT) / 2, *xs), arrays, rng)
    else:
        tensor_fd_check(lambda *xs: fn(ngrad, *xs), arrays, rng)


def test_det_of_singular_matrices_has_the_cofactor_gradient():
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, -1.0, 2.0]])  # rank 2
    x = t64(a, requires_grad=True)
    ngrad.linalg.det(x).backward()
    cof = np.array(
        [[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a, i, 0), j, 1)) for j in range(3)] for i in range(3)]
    )
    np.testing.assert_allclose(x.grad.numpy(), cof, atol=1e-12)
    x = t64(np.zeros((2, 2)), requires_grad=True)
    ngrad.linalg.det(x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 2)))  # the cofactors of 0 are 0


def test_only_eigenvalues_or_singular_values_have_finite_gradients_at_repeated_ones():
    x = t64(np.eye(3), requires_grad=True)
    w, v = ngrad.linalg.eigh(x)
    (w * ngrad.tensor([1.0, 2.0, 3.0], dtype=ngrad.float64)).sum().backward()
    assert np.isfinite(x.grad.numpy()).all()
    np.testing.assert_allclose(np.trace(x.grad.numpy()), 6.0)
    x = t64(np.diag([2.0, 2.0, 0.0]), requires_grad=True)
    ngrad.linalg.svdvals(x).sum().backward()  # U V^T: the identity on the repeated pair, +-1 at the zero
    np.testing.assert_allclose(x.grad.numpy()[:2, :2], np.eye(2), atol=1e-12)
    assert abs(abs(x.grad.numpy()[2, 2]) - 1) < 1e-12
    x = t64(np.eye(2), requires_grad=True)
    ngrad.linalg.eigh(x)[1][0, 1].backward()  # an eigenvector of a repeated eigenvalue: not finite, as PyTorch's
    assert not np.isfinite(x.grad.numpy()).all()


def test_solve_triangular_reads_one_triangle_and_divides_by_a_zero_pivot():
    a = np.array([[2.0, 100.0], [1.0, 4.0]])
    x = ngrad.linalg.solve_triangular(t64(a), t64([[2.0], [9.0]]), upper=False).numpy()
    np.testing.assert_allclose(x, [[1.0], [2.0]])
    y = ngrad.linalg.solve_triangular(t64([[0.0, 1.0], [0.0, 1.0]]), t64([[1.0], [1.0]]), upper=True).numpy()
    assert np.isnan(y[0, 0]) and y[1, 0] == 1.0
    big = R.standard_normal((2, 150, 150)) * 0.1 + 2 * np.eye(150)  # solved in blocks
    rhs = R.standard_normal((2, 150, 3))
    for upper in (True, False):
        tri = np.triu(big) if upper else np.tril(big)
        got = ngrad.linalg.solve_triangular(t64(big), t64(rhs), upper=upper).numpy()
        np.testing.assert_allclose(got, np.linalg.solve(tri, rhs), rtol=1e-10, atol=1e-12)


def test_empty_stacks_and_empty_matrices():
    x = t64(R.standard_normal((2, 3, 3)), requires_grad=True)
    empty = x[:0]
    total = ngrad.linalg.svdvals(empty).sum() + ngrad.linalg.eigvalsh(empty).sum() + ngrad.linalg.cholesky(empty).sum()
    total = total + ngrad.linalg.qr(empty)[1].sum() + ngrad.linalg.matrix_exp(empty).sum()
    none = x[:, :0, :0]
    total = total + ngrad.linalg.det(none).sum() + ngrad.linalg.svdvals(none).sum()  # det of 0 x 0 is 1
    total.backward()
    assert total.item() == 2.0 and not x.grad.numpy().any()


def test_matrix_exp_of_known_matrices():
    theta = 0.7
    rot = ngrad.linalg.matrix_exp(t64([[0.0, -theta], [theta, 0.0]])).numpy()
    np.testing.assert_allclose(rot, [[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]], rtol=1e-14)
    big = ngrad.linalg.matrix_exp(t64(np.diag([20.0, -3.0]))).numpy()
    np.testing.assert_allclose(big, np.diag(np.exp([20.0, -3.0])), rtol=1e-13)
    x = t64(np.full((2, 2, 2), 3.0), requires_grad=True)
    power = ngrad.linalg.matrix_power(x, 0)  # identities, with a zero gradient, as PyTorch's
    power.sum().backward()
    np.testing.assert_array_equal(power.detach().numpy(), np.stack([np.eye(2)] * 2))
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 2, 2)))
    ints = ngrad.linalg.matrix_power(ngrad.tensor([[1, 1], [1, 0]]), 10)  # integer matrices too
    assert ints.dtype == ngrad.int64 and ints.tolist() == [[89, 55], [55, 34]]


@pytest.mark.numba
@pytest.mark.slow  # about 12 s with an empty kernel cache on 2 cores
def test_a_compiled_gaussian_process_loss_and_gradient_equal_numpys(jit_always, rng):
    x, y = rng.uniform(-2, 2, 6), rng.standard_normal(6)

    def loss(log_scale, data, targets):
        k = (-((data[:, None] - data[None, :]) ** 2) * log_scale.exp()).exp() + 0.1 * ngrad.eye(6, dtype=ngrad.float64)
        chol = ngrad.linalg.cholesky(k)
        alpha = targets[:, None].cholesky_solve(chol)
        return (targets[:, None] * alpha).sum() + 2 * chol.diagonal().log().sum() + ngrad.linalg.eigvalsh(k).amax()

    def reference(scale):
        k = np.exp(-((x[:, None] - x[None, :]) ** 2) * np.exp(scale)) + 0.1 * np.eye(6)
        return y @ np.linalg.solve(k, y) + np.linalg.slogdet(k)[1] + np.linalg.eigvalsh(k)[-1]

    compiled = ngrad.compile(lambda s, d, t: (loss(s, d, t), ngrad.autograd.grad(loss(s, d, t), s)[0]))
    for scale in (0.3, -0.5):
        value, grad = compiled(t64(scale, requires_grad=True), t64(x), t64(y))
        np.testing.assert_allclose(value.item(), reference(scale), rtol=1e-10)
        np.testing.assert_allclose(grad.item(), (reference(scale + 1e-6) - reference(scale - 1e-6)) / 2e-6, rtol=1e-6)


# --- errors ----------------------------------------------------------------------------------------


def test_errors_have_pytorchs_types_and_messages():
    bad = t64([[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(
        ngrad.linalg.LinAlgError,
        match=r"linalg.cholesky: The factorization could not be completed because "
        r"the input is not positive-definite \(the leading minor of order 2 is not positive-definite\).",
    ):
        ngrad.linalg.cholesky(bad).numpy()
    with pytest.raises(ngrad.linalg.LinAlgError, match=r"linalg.cholesky_ex: The factorization could not be"):
        ngrad.linalg.cholesky_ex(bad, check_errors=True).L.numpy()
    with pytest.raises(RuntimeError, match=r"\(Batch element 1\): The factorization"):
        ngrad.linalg.cholesky(ngrad.stack([ngrad.eye(2, dtype=ngrad.float64), bad])).numpy()
    with pytest.raises(
        RuntimeError, match="linalg.cholesky: A must be batches of square matrices, but they are 2 by 3"
    ):
        ngrad.linalg.cholesky(ngrad.ones(2, 3))
    with pytest.raises(
        RuntimeError, match="linalg.eigh: Expected a floating point or complex tensor as input. Got Long"
    ):
        ngrad.linalg.eigh(ngrad.tensor([[1, 2], [3, 4]]))
    with pytest.raises(RuntimeError, match="Expected UPLO argument to be 'L' or 'U', but got X"):
        ngrad.linalg.eigh(ngrad.eye(2), UPLO="X")
    with pytest.raises(RuntimeError, match="linalg.svd: The input tensor A must have at least 2 dimensions."):
        ngrad.linalg.svd(ngrad.ones(3))
    with pytest.raises(RuntimeError, match=r"Incompatible shapes of A and B for the equation AX = B \(2x2 and 3x1\)"):
        ngrad.linalg.solve_triangular(ngrad.eye(2), ngrad.ones(3, 1), upper=True)
    with pytest.raises(RuntimeError, match="qr received unrecognized mode 'x'"):
        ngrad.linalg.qr(ngrad.eye(2), mode="x")
    x = t64(R.standard_normal((5, 3)), requires_grad=True)
    with pytest.raises(RuntimeError, match="not differentiable when mode='complete' and nrows > ncols"):
        ngrad.linalg.qr(x, mode="complete")[0].sum().backward()
    with pytest.raises(
        RuntimeError, match="multi_dot\\(\\): tensors 0 and 1 with shapes \\[2, 3\\] and \\[2, 3\\] cannot be"
    ):
        ngrad.linalg.multi_dot([ngrad.ones(2, 3), ngrad.ones(2, 3)])
    with pytest.raises(RuntimeError, match="linalg.matrix_norm: Order 3 not supported."):
        ngrad.linalg.matrix_norm(ngrad.ones(2, 2), 3)
    with pytest.raises(RuntimeError, match="If dim is not specified but ord is, the input must be 1D or 2D. Got 3D."):
        ngrad.linalg.norm(ngrad.ones(2, 2, 2), 2)
    with pytest.raises(RuntimeError, match="linalg.matrix_norm: dim must be a 2-tuple. Got 0 1 2"):
        ngrad.linalg.matrix_norm(ngrad.ones(2, 2, 2), dim=(0, 1, 2))
    with pytest.raises(RuntimeError, match="linalg.matrix_norm: dim must be a 2-tuple. Got 0"):
        ngrad.linalg.norm(ngrad.ones(2, 2), "fro", dim=0)
    with pytest.raises(RuntimeError, match="linalg.matrix_norm: The input tensor A must have at least 2 dimensions."):
        ngrad.linalg.norm(ngrad.ones(3), "fro")
    with pytest.raises(TypeError, match="must be int, not float"):
        ngrad.linalg.matrix_power(ngrad.eye(2), 1.5)
    with pytest.raises(RuntimeError, match="parameter `driver` should be one of"):
        ngrad.linalg.lstsq(ngrad.ones(3, 2), ngrad.ones(3, 1), driver="foo")
    assert issubclass(ngrad.linalg.LinAlgError, RuntimeError)


def test_jacobians_by_batched_cotangents_equal_pytorchs():
    torch = pytest.importorskip("torch")
    a = _spd(3, 3)

    def f(L, x):
        w, v = L.linalg.eigh(x)
        q, r = L.linalg.qr(x)
        parts = [w, v.abs(), L.linalg.svdvals(x), r.abs(), L.linalg.cholesky(x), L.linalg.matrix_exp(x * 0.1)]
        parts += [L.linalg.slogdet(x)[1].reshape(1), L.linalg.solve_triangular(x, x, upper=True)]
        return L.cat([p.flatten() for p in parts])

    jacobians = []
    for L in (ngrad, torch):
        x = L.tensor(a, dtype=L.float64, requires_grad=True)
        out = f(L, x)
        (j,) = L.autograd.grad(out, x, L.eye(out.shape[0], dtype=L.float64), is_grads_batched=True)
        jacobians.append(j.numpy())
    np.testing.assert_allclose(jacobians[0], jacobians[1], rtol=1e-6, atol=1e-10)
