"""``ngrad.linalg`` beyond the primitive cases (tests/test_prims.py: values, first and second
order VJPs and JVPs) and the PyTorch comparison (tests/test_ops.py): vector right-hand sides
and broadcast batches, batched reverse mode, forward mode through the facade, a compiled
Newton step, and the errors."""

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
    with pytest.raises(RuntimeError, match="the nuclear norm needs an SVD"):
        ngrad.linalg.norm(ngrad.eye(2), "nuc")
