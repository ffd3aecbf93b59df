"""The facade: factories, dtypes and promotion, printing, conversions and shape errors."""

import math

import numpy as np
import pytest

import ngrad


def test_factories_and_default_dtypes():
    assert ngrad.tensor([1.0, 2.0]).dtype is ngrad.float32
    assert ngrad.tensor([1, 2]).dtype is ngrad.int64
    assert ngrad.tensor([True]).dtype is ngrad.bool
    assert ngrad.tensor(np.arange(3.0)).dtype is ngrad.float64
    assert ngrad.tensor([1, 2.5]).dtype is ngrad.float32
    assert ngrad.zeros(2, 3).shape == (2, 3) and ngrad.ones((2,)).sum().item() == 2
    assert ngrad.full((2,), 7).dtype is ngrad.int64 and ngrad.full((2,), 7.0).dtype is ngrad.float32
    np.testing.assert_array_equal(ngrad.eye(2, 3).numpy(), np.eye(2, 3))
    np.testing.assert_array_equal(ngrad.arange(1, 7, 2).numpy(), [1, 3, 5])
    assert ngrad.arange(0, 1, 0.25).dtype is ngrad.float32 and len(ngrad.arange(0, 1, 0.25)) == 4
    np.testing.assert_allclose(ngrad.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5), rtol=1e-7)
    z = ngrad.zeros_like(ngrad.ones(2, dtype=ngrad.float64))
    assert z.dtype is ngrad.float64 and ngrad.ones_like(z).sum().item() == 2
    ngrad.manual_seed(3)
    a = ngrad.randn(4, dtype=ngrad.float64)
    ngrad.manual_seed(3)
    assert ngrad.equal(a, ngrad.randn(4, dtype=ngrad.float64))
    r = ngrad.rand(1000)
    assert 0 <= r.min().item() and r.max().item() < 1
    assert ngrad.Tensor([1, 2]).dtype is ngrad.float32


def test_from_numpy_shares_memory_and_rejects_unknown_dtypes():
    a = np.arange(3.0)
    t = ngrad.from_numpy(a)
    a[0] = 10
    assert t[0].item() == 10
    with pytest.raises(TypeError, match="can't convert np.ndarray of type numpy.float16"):
        ngrad.from_numpy(np.zeros(2, np.float16))


def test_ragged_data_is_an_error():
    with pytest.raises(ValueError, match="expected sequence of length 2 at dim 1"):
        ngrad.tensor([[1, 2], [3]])


@pytest.mark.parametrize(
    "a,b,expected",
    [
        (ngrad.ones(2, dtype=ngrad.int64), 2.5, ngrad.float32),
        (ngrad.ones(2, dtype=ngrad.int32), 2, ngrad.int32),
        (ngrad.ones(2, dtype=ngrad.float32), ngrad.ones(2, dtype=ngrad.float64), ngrad.float64),
        (ngrad.ones(2, dtype=ngrad.float32), ngrad.tensor(1.0, dtype=ngrad.float64), ngrad.float32),
        (ngrad.ones(2, dtype=ngrad.int64), ngrad.tensor(1.0, dtype=ngrad.float64), ngrad.float64),
        (ngrad.ones(2, dtype=ngrad.bool), 3, ngrad.int64),
        (ngrad.ones(2, dtype=ngrad.float32), 2, ngrad.float32),
    ],
)
def test_type_promotion(a, b, expected):
    assert (a * b).dtype is expected and (b * a).dtype is expected


def test_type_promotion_matches_pytorch():
    torch = pytest.importorskip("torch")
    dts = ["bool", "int32", "int64", "float32", "float64"]
    for x in dts:
        for y in dts:
            for zd in (False, True):
                tn = ngrad.ones(2, dtype=getattr(ngrad, x)) + ngrad.ones(() if zd else 2, dtype=getattr(ngrad, y))
                tt = torch.ones(2, dtype=getattr(torch, x)) + torch.ones(() if zd else 2, dtype=getattr(torch, y))
                assert tn.dtype.name == str(tt.dtype).split(".")[1], (x, y, zd)
            for s in (True, 2, 2.5):
                assert (ngrad.ones(2, dtype=getattr(ngrad, x)) * s).dtype.name == str(
                    (torch.ones(2, dtype=getattr(torch, x)) * s).dtype
                ).split(".")[1]
    assert (ngrad.tensor([1, 2]) / 2).dtype is ngrad.float32


def test_shape_errors_name_both_shapes():
    with pytest.raises(
        RuntimeError,
        match=r"size of tensor a \(3\) must match the size of tensor b \(4\) at "
        r"non-singleton dimension 1 \(shapes \[2, 3\] and \[4\]\)",
    ):
        ngrad.ones(2, 3) + ngrad.ones(4)
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
        ngrad.ones(2, 3) @ ngrad.ones(4, 5)
    with pytest.raises(RuntimeError, match="shape '\\[5\\]' is invalid for input of size 6"):
        ngrad.ones(2, 3).reshape(5)
    with pytest.raises(IndexError, match="Dimension out of range"):
        ngrad.ones(2, 3).sum(2)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        ngrad.ones(3)[3]
    with pytest.raises(IndexError, match="index 5 is out of bounds"):
        ngrad.ones(3)[[0, 5]]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 1"):
        ngrad.ones(3)[0, 0]
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0"):
        ngrad.cat([ngrad.ones(2, 3), ngrad.ones(2, 4)])
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        ngrad.stack([ngrad.ones(2), ngrad.ones(3)])
    with pytest.raises(
        RuntimeError, match=r"einsum\(\): subscript j has size 4 for operand 1 which does not broadcast"
    ):
        ngrad.einsum("ij,jk->ik", ngrad.ones(2, 3), ngrad.ones(4, 4))
    with pytest.raises(RuntimeError, match=r"einsum\(\): output subscript k does not appear in the equation"):
        ngrad.einsum("ij->k", ngrad.ones(2, 2))
    with pytest.raises(RuntimeError, match=r"einsum\(\): the number of subscripts in the equation .3. does not match"):
        ngrad.einsum("ijk", ngrad.ones(2, 2))
    with pytest.raises(
        RuntimeError, match=r"einsum\(\): subscript i is repeated for operand 0 but the sizes don't match"
    ):
        ngrad.einsum("ii", ngrad.ones(2, 3))
    with pytest.raises(RuntimeError, match=r"einsum\(\): fewer operands were provided than specified in the equation"):
        ngrad.einsum("ij,jk", ngrad.ones(2, 2))
    with pytest.raises(RuntimeError, match="contracted dimensions need to match"):
        ngrad.tensordot(ngrad.ones(2, 3), ngrad.ones(2, 3), dims=1)
    with pytest.raises(RuntimeError, match="masked_fill_ only supports boolean masks, but got mask with dtype long"):
        ngrad.ones(3).masked_fill(ngrad.tensor([1, 0, 1]), 0.0)
    with pytest.raises(RuntimeError, match="tril: input tensor must have at least 2 dimensions"):
        ngrad.ones(3).tril()
    with pytest.raises(RuntimeError, match=r"movedim: Invalid source or destination dims"):
        ngrad.ones(2, 3).movedim((0, 1), 0)
    with pytest.raises(RuntimeError, match='indexing must be one of "xy" or "ij"'):
        ngrad.meshgrid(ngrad.ones(2), indexing="ji")
    with pytest.raises(RuntimeError, match="input and indices should have the same number of dimensions"):
        ngrad.ones(2, 3).take_along_dim(ngrad.tensor([0, 1]), 1)
    with pytest.raises(RuntimeError, match="inputs dimension 1 must have length 3"):
        ngrad.ones(2, 4).cross(ngrad.ones(2, 4), dim=1)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        ngrad.ones(2, 3).topk(4)
    with pytest.raises(RuntimeError, match="trace: expected a matrix, but got tensor with dim 1"):
        ngrad.ones(3).trace()
    with pytest.raises(RuntimeError, match="diagonal dimensions cannot be identical 1, -2"):
        ngrad.ones(2, 3, 4).diagonal(0, 1, -2)
    with pytest.raises(RuntimeError, match=r"diag\(\): Supports 1D or 2D tensors. Got 3D"):
        ngrad.diag(ngrad.ones(2, 2, 2))
    with pytest.raises(RuntimeError, match="out of bounds"):
        ngrad.ones(2, 3).gather(1, ngrad.tensor([[0, 3], [0, 0]]))
    with pytest.raises(RuntimeError, match="where expected condition to be a boolean tensor"):
        ngrad.where(ngrad.ones(2), ngrad.ones(2), ngrad.zeros(2))


def test_values_item_tolist_bool():
    t = ngrad.tensor([[1.5, 2.0], [3.0, 4.0]])
    assert t.tolist() == [[1.5, 2.0], [3.0, 4.0]]
    assert t[1, 0].item() == 3.0 and isinstance(ngrad.tensor(3).item(), int)
    with pytest.raises(RuntimeError, match="a Tensor with 4 elements cannot be converted to Scalar"):
        t.item()
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        bool(t > 0)
    assert bool(ngrad.tensor([2.0]) > 1) and float(ngrad.tensor(2.5)) == 2.5 and int(ngrad.tensor(3.9)) == 3
    assert np.asarray(t).shape == (2, 2) and len(t) == 2 and [r.shape for r in t] == [(2,), (2,)]
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(ngrad.tensor(1.0))
    assert f"{ngrad.tensor(2.0):.2f}" == "2.00"
    assert (np.ones(2) * ngrad.tensor([1.0, 2.0])).tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    "make,text",
    [
        (lambda: ngrad.tensor([2.0, 4.0]), "tensor([2., 4.])"),
        (lambda: ngrad.tensor(3.0), "tensor(3.)"),
        (lambda: ngrad.tensor([1e-5, 1.0]), "tensor([1.0000e-05, 1.0000e+00])"),
        (lambda: ngrad.tensor([1.2345678, 100.0]), "tensor([  1.2346, 100.0000])"),
        (lambda: ngrad.zeros(0, 3), "tensor([], size=(0, 3))"),
        (lambda: ngrad.arange(3), "tensor([0, 1, 2])"),
        (lambda: ngrad.tensor([True, False]), "tensor([ True, False])"),
        (lambda: ngrad.tensor([1, 2], dtype=ngrad.int32), "tensor([1, 2], dtype=ngrad.int32)"),
        (lambda: ngrad.tensor([[1.5, 2], [3, 4]]), "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]])"),
        (lambda: ngrad.tensor([math.inf, math.nan, 1.0]), "tensor([inf, nan, 1.])"),
        (lambda: ngrad.tensor([1e10, 1.0]), "tensor([1.0000e+10, 1.0000e+00])"),
        (lambda: ngrad.tensor([1.0, 2.0], dtype=ngrad.float64), "tensor([1., 2.], dtype=ngrad.float64)"),
        (lambda: ngrad.tensor([1.0, 2.0], requires_grad=True) * 2, "tensor([2., 4.], grad_fn=<MulBackward0>)"),
        (lambda: ngrad.tensor([1.0], requires_grad=True), "tensor([1.], requires_grad=True)"),
        (
            lambda: ngrad.arange(2000.0),
            "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n        1.9990e+03])",
        ),
        (
            lambda: ngrad.arange(40.0) * 1.5,
            "tensor([ 0.0000,  1.5000,  3.0000,  4.5000,  6.0000,  7.5000,  9.0000, 10.5000,\n"
            "        12.0000, 13.5000, 15.0000, 16.5000, 18.0000, 19.5000, 21.0000, 22.5000,\n"
            "        24.0000, 25.5000, 27.0000, 28.5000, 30.0000, 31.5000, 33.0000, 34.5000,\n"
            "        36.0000, 37.5000, 39.0000, 40.5000, 42.0000, 43.5000, 45.0000, 46.5000,\n"
            "        48.0000, 49.5000, 51.0000, 52.5000, 54.0000, 55.5000, 57.0000, 58.5000])",
        ),
    ],
)
def test_repr_like_pytorch(make, text):
    assert repr(make()) == text


def test_repr_of_3d_matches_pytorch_layout():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(0).standard_normal((3, 4, 5))
    expected = repr(torch.tensor(a)).replace("torch.", "ngrad.")
    assert repr(ngrad.tensor(a)) == expected


def test_conversions():
    t = ngrad.tensor([1.7, -2.2])
    assert t.double().dtype is ngrad.float64 and t.long().tolist() == [1, -2] and t.float() is t
    assert t.to(ngrad.float64).dtype is ngrad.float64 and t.to("cpu") is t and t.bool().tolist() == [True, True]
    assert t.device == ngrad.device("cpu") and str(t.device) == "cpu"
    if not ngrad.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            t.to("cuda")
    c = t.clone()
    assert ngrad.equal(c, t) and c is not t


def test_indexing_forms_against_numpy():
    a = np.arange(60.0).reshape(3, 4, 5)
    t = ngrad.tensor(a)
    keys = [
        (1,),
        (slice(None), 2),
        (Ellipsis, 1),
        (None, 0),
        (slice(1, None), slice(None, None, 2), 3),
        ([0, 2],),
        (slice(None), [1, 3]),
        ([0, 1], slice(None), [4, 0]),
        (a[:, 0, 0] > 10,),
        (np.array([[0, 1], [2, 2]]),),
        (slice(None), [[1], [2]], [0, 4]),
    ]
    for k in keys:
        np.testing.assert_array_equal(t[k].numpy(), a[k], err_msg=str(k))


def test_lazy_ops_raise_at_the_offending_line():
    x = ngrad.ones(3)
    y = x * 2  # nothing computed yet
    assert y._node.value is None
    with pytest.raises(RuntimeError):
        y + ngrad.ones(4)


def test_module_level_functions():
    x = ngrad.tensor([[1.0, -2.0], [3.0, 4.0]])
    assert ngrad.sum(x).item() == 6.0 and ngrad.exp(ngrad.tensor(0.0)).item() == 1.0
    assert ngrad.allclose(
        ngrad.matmul(x, x), ngrad.tensor(np.array([[1.0, -2], [3, 4]]) @ np.array([[1.0, -2], [3, 4]]))
    )
    assert ngrad.where(x > 0)[0].tolist() == [0, 1, 1]
    assert ngrad.argmax(x).item() == 3 and ngrad.argmax(x, 1).tolist() == [0, 1]
    assert ngrad.transpose(x, 0, 1).tolist() == [[1.0, 3.0], [-2.0, 4.0]]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("divisor", [2, 0.25, -8.0, 3.0, 1e-30])
def test_division_by_a_number_is_exact(dtype, divisor):
    # a power-of-two divisor is recorded as a multiplication by its reciprocal: bitwise the same
    x0 = np.concatenate([np.random.default_rng(0).standard_normal(50), [0.0, -0.0, np.inf, np.nan, 1e-310]]).astype(
        dtype
    )
    x = ngrad.from_numpy(x0).requires_grad_()
    y = x / divisor
    assert y.grad_fn.name() == "DivBackward0"
    with np.errstate(all="ignore"):
        ref = x0 / dtype(divisor)
    np.testing.assert_array_equal(y.detach().numpy(), ref)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(x0, dtype(1) / dtype(divisor)))
