"""Bad calls raise what PyTorch raises, in eager mode.

``CASES`` is a table of (call, exception type, key phrase): each call takes the library (``ngrad``
or ``torch``) as its argument, so the same line runs on both; ``test_ngrad_raises`` checks ngrad
and ``test_torch_raises`` checks the table itself against PyTorch (same type, and the key phrase
in PyTorch's message). The value tests at the end are calls that ngrad used to refuse (or get
wrong) where PyTorch returns a result.
"""

import numpy as np
import pytest

import ngrad

from .oracles import torch_or_skip


def _set_requires_grad(m, flag):
    t = m.tensor([1.0])
    t.requires_grad = flag


def _backward_int_grad(m):
    x = m.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).backward(m.tensor([1, 2]))
    return x.grad


def _f(m):
    return m.nn.functional


M22 = [[1.0, 2.0], [3.0, 4.0]]

# (id, call, exception type, key phrase of the message)
CASES = [
    # negative or too large indices that used to wrap around or be truncated
    (
        "index_select_neg",
        lambda m: m.tensor([1.0, 2.0]).index_select(0, m.tensor([-1])),
        IndexError,
        "index out of range in self",
    ),
    (
        "index_select_big",
        lambda m: m.tensor([1.0, 2.0]).index_select(0, m.tensor([2])),
        IndexError,
        "index out of range in self",
    ),
    (
        "index_select_argmax",
        lambda m: m.tensor([1.0, 2.0]).index_select(0, m.tensor([3.0, 1.0]).argmax().reshape(1) - 2),
        IndexError,
        "index out of range in self",
    ),
    (
        "gather_neg",
        lambda m: m.tensor(M22).gather(1, m.tensor([[-1], [0]])),
        RuntimeError,
        "index -1 is out of bounds for dimension 1 with size 2",
    ),
    (
        "gather_argmax",
        lambda m: m.tensor([[1.0, 2.0]]).gather(1, m.tensor([[3.0, 1.0]]).argmax(1, keepdim=True) - 2),
        RuntimeError,
        "index -2 is out of bounds for dimension 1 with size 2",
    ),
    (
        "gather_0d_bad",
        lambda m: m.tensor(2.5).gather(0, m.tensor(1)),
        RuntimeError,
        "index 1 is out of bounds for dimension 0 with size 1",
    ),
    (
        "cross_entropy_neg",
        lambda m: _f(m).cross_entropy(m.tensor(M22), m.tensor([0, -2])),
        IndexError,
        "Target -2 is out of bounds.",
    ),
    (
        "cross_entropy_big",
        lambda m: _f(m).cross_entropy(m.tensor(M22), m.tensor([0, 2])),
        IndexError,
        "Target 2 is out of bounds.",
    ),
    (
        "cross_entropy_1d",
        lambda m: _f(m).cross_entropy(m.tensor([1.0, 2.0]), m.tensor(-1)),
        IndexError,
        "Target -1 is out of bounds.",
    ),
    (
        "nll_loss_neg",
        lambda m: _f(m).nll_loss(m.tensor(M22), m.tensor([0, -2])),
        IndexError,
        "Target -2 is out of bounds.",
    ),
    (
        "narrow_past_end",
        lambda m: m.tensor([1.0, 2.0, 3.0]).narrow(0, 1, 5),
        RuntimeError,
        "start (1) + length (5) exceeds dimension size (3).",
    ),
    (
        "narrow_neg_start_past_end",
        lambda m: m.tensor([1.0, 2.0, 3.0]).narrow(0, -1, 2),
        RuntimeError,
        "start (2) + length (2) exceeds dimension size (3).",
    ),
    (
        "narrow_start",
        lambda m: m.tensor([1.0, 2.0, 3.0]).narrow(0, 4, 0),
        IndexError,
        "start out of range (expected to be in range of [-3, 3], but got 4)",
    ),
    (
        "narrow_length",
        lambda m: m.tensor([1.0, 2.0, 3.0]).narrow(0, 1, -1),
        RuntimeError,
        "length must be non-negative",
    ),
    (
        "index_select_0d_many",
        lambda m: m.tensor(2.0).index_select(0, m.tensor([0, 0])),
        RuntimeError,
        "Index to scalar can have only 1 value, got 2 value(s)",
    ),
    # integer division by zero
    ("floordiv_zero", lambda m: m.tensor([1, 2]) // m.tensor([0, 1]), RuntimeError, "ZeroDivisionError"),
    ("floordiv_zero_scalar", lambda m: m.tensor([1, 2]) // 0, RuntimeError, "ZeroDivisionError"),
    ("rfloordiv_zero", lambda m: 5 // m.tensor([0, 1]), RuntimeError, "ZeroDivisionError"),
    ("remainder_zero", lambda m: m.tensor([1, 2]) % m.tensor([0, 1]), RuntimeError, "ZeroDivisionError"),
    ("remainder_zero_scalar", lambda m: m.tensor([1, 2]) % 0, RuntimeError, "ZeroDivisionError"),
    ("rmod_zero", lambda m: 5 % m.tensor([0, 1]), RuntimeError, "ZeroDivisionError"),
    ("fmod_zero", lambda m: m.tensor([1, 2]).fmod(0), RuntimeError, "ZeroDivisionError"),
    (
        "div_floor_zero",
        lambda m: m.tensor([1, 2]).div(m.tensor([0, 1]), rounding_mode="floor"),
        RuntimeError,
        "ZeroDivisionError",
    ),
    (
        "div_trunc_zero",
        lambda m: m.tensor([1, 2]).div(m.tensor([0, 1]), rounding_mode="trunc"),
        RuntimeError,
        "ZeroDivisionError",
    ),
    # dtype checks
    (
        "var_int",
        lambda m: m.tensor([1, 2]).var(),
        RuntimeError,
        "std and var only support floating point and complex dtypes",
    ),
    (
        "std_bool",
        lambda m: m.tensor([True]).std(),
        RuntimeError,
        "std and var only support floating point and complex dtypes",
    ),
    ("softmax_int", lambda m: m.tensor([1, 2]).softmax(0), NotImplementedError, "not implemented for 'Long'"),
    ("F_softmax_int", lambda m: _f(m).softmax(m.tensor([1, 2]), 0), NotImplementedError, "not implemented for 'Long'"),
    ("log_softmax_bool", lambda m: m.tensor([True]).log_softmax(0), NotImplementedError, "not implemented for 'Bool'"),
    (
        "norm_int",
        lambda m: m.tensor([1, 2]).norm(),
        RuntimeError,
        "Expected a floating point or complex tensor as input. Got Long",
    ),
    ("randn_int", lambda m: m.randn(2, dtype=m.int64), NotImplementedError, "not implemented for 'Long'"),
    ("zeros_dtype_str", lambda m: m.zeros(2, dtype="float32"), TypeError, "argument 'dtype' must be"),
    ("rand_int", lambda m: m.rand(2, dtype=m.int64), NotImplementedError, "not implemented for 'Long'"),
    ("argmax_bool", lambda m: m.tensor([True, False]).argmax(), RuntimeError, "argmax(): does not support bool input"),
    ("argmin_bool", lambda m: m.tensor([True, False]).argmin(0), RuntimeError, "argmin(): does not support bool input"),
    ("to_dict", lambda m: m.tensor([1.0]).to({}), TypeError, "to() received an invalid combination of arguments"),
    ("to_list", lambda m: m.tensor([1.0]).to([1]), TypeError, "to() received an invalid combination of arguments"),
    (
        "to_object",
        lambda m: m.tensor([1.0]).to(object()),
        TypeError,
        "to() received an invalid combination of arguments",
    ),
    ("requires_grad_str", lambda m: _set_requires_grad(m, "a"), RuntimeError, "requires_grad must be a bool"),
    (
        "sum_0d_dim",
        lambda m: m.tensor(1.0).sum(1),
        IndexError,
        "Dimension out of range (expected to be in range of [-1, 0], but got 1)",
    ),
    (
        "mean_0d_dim",
        lambda m: m.tensor(1.0).mean(-2),
        IndexError,
        "Dimension out of range (expected to be in range of [-1, 0], but got -2)",
    ),
    ("amax_0d_dim", lambda m: m.tensor(1.0).amax(1), IndexError, "Dimension out of range"),
    (
        "transpose_0d",
        lambda m: m.tensor(1.0).transpose(0, 1),
        IndexError,
        "Dimension out of range (expected to be in range of [-1, 0], but got 1)",
    ),
    # internal errors, and NumPy's messages, that reached the user
    (
        "cat_0d",
        lambda m: m.cat([m.tensor(1.0), m.tensor(2.0)]),
        RuntimeError,
        "zero-dimensional tensor (at position 0) cannot be concatenated",
    ),
    (
        "cat_1d_0d",
        lambda m: m.cat([m.tensor([1.0]), m.tensor(2.0)]),
        RuntimeError,
        "zero-dimensional tensor (at position 1) cannot be concatenated",
    ),
    (
        "bool_sub_bool",
        lambda m: m.tensor([True]) - m.tensor([False]),
        RuntimeError,
        "Subtraction, the `-` operator, with two bool tensors is not supported",
    ),
    (
        "bool_sub_int",
        lambda m: m.tensor([True]) - m.tensor([1]),
        RuntimeError,
        "Subtraction, the `-` operator, with a bool tensor is not supported",
    ),
    (
        "int_rsub_bool",
        lambda m: 1 - m.tensor([True]),
        RuntimeError,
        "Subtraction, the `-` operator, with a bool tensor is not supported",
    ),
    ("zeros_overflow", lambda m: m.zeros(2**62), RuntimeError, "Storage size calculation overflowed"),
    ("ones_overflow", lambda m: m.ones(2**31, 2**31), RuntimeError, "Storage size calculation overflowed"),
    ("zeros_no_memory", lambda m: m.zeros(2**40), RuntimeError, "can't allocate memory"),
    ("randn_negative", lambda m: m.randn(-1), RuntimeError, "Trying to create tensor with negative dimension -1: [-1]"),
    ("randperm_negative", lambda m: m.randperm(-1), RuntimeError, "Trying to create tensor with negative dimension"),
    ("eye_negative", lambda m: m.eye(-1), RuntimeError, "n must be greater or equal to 0, got -1"),
    ("eye_negative_m", lambda m: m.eye(2, -1), RuntimeError, "m must be greater or equal to 0, got -1"),
    (
        "arange_wrong_sign",
        lambda m: m.arange(0, 5, -1),
        RuntimeError,
        "upper bound and lower bound inconsistent with step sign",
    ),
    (
        "arange_backward",
        lambda m: m.arange(5, 0),
        RuntimeError,
        "upper bound and lower bound inconsistent with step sign",
    ),
    (
        "and_float",
        lambda m: m.tensor([1.0]) & m.tensor([True]),
        NotImplementedError,
        "\"bitwise_and_cpu\" not implemented for 'Float'",
    ),
    (
        "xor_double",
        lambda m: m.tensor([1.0], dtype=m.float64) ^ m.tensor([1]),
        NotImplementedError,
        "\"bitwise_xor_cpu\" not implemented for 'Double'",
    ),
    ("invert_float", lambda m: ~m.tensor([1.0]), TypeError, "~ (operator.invert) is only implemented on integer"),
    (
        "randint_empty_range",
        lambda m: m.randint(5, 2, (3,)),
        RuntimeError,
        "random_ expects 'from' to be less than 'to', but got from=5 >= to=2",
    ),
    (
        "randint_high_size",
        lambda m: m.randint(0, (3,)),
        RuntimeError,
        "random_ expects 'from' to be less than 'to', but got from=0 >= to=0",
    ),
]

IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("name, call, exc, phrase", CASES, ids=IDS)
def test_ngrad_raises(name, call, exc, phrase):
    with pytest.raises(exc) as info:
        call(ngrad)
    assert phrase in str(info.value)
    # nothing from NumPy's or ngrad's insides: the exception is one PyTorch would raise
    assert type(info.value).__module__ == "builtins"


@pytest.mark.parametrize("name, call, exc, phrase", CASES, ids=IDS)
def test_torch_raises(name, call, exc, phrase):
    torch = torch_or_skip()
    with pytest.raises(exc) as info:
        call(torch)
    assert phrase in str(info.value)


# calls PyTorch answers with a value: (id, call), compared with PyTorch's result
VALUES = [
    ("softmax_empty", lambda m: _f(m).softmax(m.zeros(0), 0)),
    ("softmax_empty_rows", lambda m: m.zeros(2, 0).softmax(0)),
    ("log_softmax_empty", lambda m: m.zeros(0).log_softmax(0)),
    ("softmax_int_dtype", lambda m: m.tensor([1, 2]).softmax(0, dtype=m.float32)),
    ("index_select_0d", lambda m: m.tensor(2.0).index_select(0, m.tensor([0]))),
    ("gather_0d", lambda m: m.tensor(2.5).gather(0, m.tensor(0))),
    ("gather_0d_1d_index", lambda m: m.tensor(2.5).gather(0, m.tensor([0, 0]))),
    ("backward_int_grad", _backward_int_grad),
    ("narrow_to_end", lambda m: m.tensor([1.0, 2.0, 3.0]).narrow(0, -2, 2)),
    ("narrow_empty_at_end", lambda m: m.tensor([1.0, 2.0, 3.0]).narrow(0, 3, 0)),
    ("cross_entropy_ignored", lambda m: _f(m).cross_entropy(m.tensor(M22), m.tensor([0, -100]))),
    ("index_select_last", lambda m: m.tensor([1.0, 2.0]).index_select(0, m.tensor([1, 0]))),
    ("floordiv_nonzero", lambda m: m.tensor([-7, 7]) // m.tensor([2, -2])),
    ("float_floordiv_zero", lambda m: m.tensor([1.0, -1.0]) // 0),
    # exact: a float quotient loses digits past 2**24 (float32) or 2**53
    ("floordiv_big", lambda m: m.tensor([16777217, -(2**53) - 3, 2**62 + 1]) // m.tensor([1, 2, -3])),
    (
        "div_trunc_big",
        lambda m: m.tensor([16777217, -(2**53) - 3, 2**62 + 1]).div(m.tensor([1, 2, -3]), rounding_mode="trunc"),
    ),
    ("floordiv_int32_scalar", lambda m: m.tensor([-16777219, 7], dtype=m.int32) // 2),
    ("floor_divide", lambda m: m.floor_divide(m.tensor([16777217, -7]), m.tensor([1, 2]))),
    ("advanced_index_neg", lambda m: m.tensor([1.0, 2.0])[m.tensor([-1])]),
    ("arange_empty", lambda m: m.arange(3, 3)),
    ("arange_down", lambda m: m.arange(3, 0, -1)),
    ("eye_empty", lambda m: m.eye(0, 2)),
    ("sum_0d_dim0", lambda m: m.tensor(2.0).sum(0)),
    ("transpose_0d_ok", lambda m: m.tensor(2.0).transpose(0, -1)),
]


@pytest.mark.parametrize("name, call", VALUES, ids=[v[0] for v in VALUES])
def test_value_like_torch(name, call):
    torch = torch_or_skip()
    got, want = call(ngrad), call(torch)
    assert tuple(got.shape) == tuple(want.shape)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


# --- value checks inside a compiled function ---------------------------------------------------
# (id, function of the library and its tensors, arguments as lists, exception type, key phrase):
# the values exist only when the program runs, so the ``require`` step, gather and index check
# them there; the table runs eagerly on PyTorch too
F64, I64 = "float64", "int64"
COMPILED = [
    ("gather_neg", lambda m, x, i: x.gather(1, i), [(M22, F64), ([[-1], [0]], I64)], RuntimeError, "index -1 is out"),
    ("gather_big", lambda m, x, i: x.gather(1, i), [(M22, F64), ([[0], [2]], I64)], RuntimeError, "index 2 is out"),
    (
        "index_select_neg",
        lambda m, x, i: x.index_select(0, i),
        [([1.0, 2.0], F64), ([-1], I64)],
        IndexError,
        "index out of range in self",
    ),
    (
        "index_select_dim1",
        lambda m, x, i: x.index_select(1, i),
        [(M22, F64), ([0, 5], I64)],
        RuntimeError,
        "INDICES element is out of DATA bounds, id=5 axis_dim=2",
    ),
    (
        "index_select_computed",
        lambda m, x, i: x.index_select(0, x.argmax().reshape(1) - 2 + i),
        [([1.0, 2.0], F64), ([0], I64)],
        IndexError,
        "index out of range in self",
    ),
    (
        "index_big",
        lambda m, x, i: x[i],
        [(M22, F64), ([2], I64)],
        IndexError,
        "index 2 is out of bounds for dimension 0 with size 2",
    ),
    ("floordiv_zero", lambda m, a, b: a // b, [([1, 2], I64), ([0, 1], I64)], RuntimeError, "ZeroDivisionError"),
    ("floor_divide_zero", lambda m, a, b: m.floor_divide(a, b), [([3], I64), ([0], I64)], RuntimeError, "Zero"),
    ("remainder_zero", lambda m, a, b: a % b, [([1, 2], I64), ([1, 0], I64)], RuntimeError, "ZeroDivisionError"),
    ("rmod_zero", lambda m, a, b: 7 % (b * a), [([1, 2], I64), ([1, 0], I64)], RuntimeError, "ZeroDivisionError"),
    ("fmod_zero", lambda m, a, b: a.fmod(b), [([1, 2], I64), ([0, 0], I64)], RuntimeError, "ZeroDivisionError"),
    (
        "div_trunc_zero",
        lambda m, a, b: a.div(b, rounding_mode="trunc"),
        [([1, 2], I64), ([3, 0], I64)],
        RuntimeError,
        "ZeroDivisionError",
    ),
    (
        "div_floor_computed_zero",
        lambda m, a, b: a.div(b - b, rounding_mode="floor"),
        [([1, 2], I64), ([3, 4], I64)],
        RuntimeError,
        "ZeroDivisionError",
    ),
]


def _put(m, x, k, v):
    y = x * 1
    y[k] = v
    return y


COMPILED += [
    ("setitem_big", _put, [(M22, F64), ([2], I64), ([1.0, 2.0], F64)], IndexError, "index 2 is out of bounds"),
    (
        "setitem_mask_count",
        _put,
        [(M22, F64), ([[True, False], [True, True]], "bool"), ([1.0, 2.0], F64)],
        RuntimeError,
        "shape mismatch: value tensor of shape [2] cannot be broadcast to indexing result of shape [3]",
    ),
]
MODES = ["interpreted", pytest.param("compiled", marks=pytest.mark.numba)]


def _args(m, spec):
    return [m.tensor(v, dtype=getattr(m, d)) for v, d in spec]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name, fn, spec, exc, phrase", COMPILED, ids=[c[0] for c in COMPILED])
def test_compiled_function_raises(name, fn, spec, exc, phrase, mode, request):
    if mode == "compiled":
        request.getfixturevalue("jit_always")
    f = ngrad.compile(lambda *a: fn(ngrad, *a))
    for _ in range(2):  # the first call traces, the second replays the program
        with pytest.raises(exc) as info:
            f(*_args(ngrad, spec))
        assert phrase in str(info.value) and type(info.value).__module__ == "builtins"


@pytest.mark.parametrize("name, fn, spec, exc, phrase", COMPILED, ids=[c[0] for c in COMPILED])
def test_compiled_table_is_torchs(name, fn, spec, exc, phrase):
    torch = torch_or_skip()
    with pytest.raises(exc) as info:
        fn(torch, *_args(torch, spec))
    assert phrase in str(info.value)


@pytest.mark.parametrize("mode", MODES)
def test_compiled_checks_pass_good_values_and_gradients(mode, request):
    # the same programs on values PyTorch accepts: the results and gradients, call after call
    if mode == "compiled":
        request.getfixturevalue("jit_always")
    w = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])

    @ngrad.compile
    def f(x, i, a, b):
        y = (x.index_select(1, i) * ngrad.tensor(w)).sum() + x[i.flip(0) - 2].sum()
        return y, a // b, a % b, a.fmod(b), a.div(b, rounding_mode="trunc")

    big = [7, -(2**53) - 3]  # exact past float64's 53 bits
    for i0, b0 in (([1, 0], [2, -3]), ([1, 1], [5, 1]), ([0, 1], [-1, 7])):
        x = ngrad.tensor(np.arange(6.0).reshape(3, 2), requires_grad=True)
        a, b = ngrad.tensor(big), ngrad.tensor(b0)
        y, q, r, fm, tr = f(x, ngrad.tensor(i0), a, b)
        y.backward()
        xs, iv = np.arange(6.0).reshape(3, 2), np.array(i0)
        grad = np.zeros((3, 2))
        np.add.at(grad, (slice(None), iv), w)
        np.add.at(grad, (iv[::-1] - 2 + 3,), 1)  # negative indices count from the end, as in PyTorch
        assert y.item() == pytest.approx((xs[:, iv] * w).sum() + xs[iv[::-1] - 2].sum())
        np.testing.assert_array_equal(x.grad.numpy(), grad)
        assert q.tolist() == [p // d for p, d in zip(big, b0)] and r.tolist() == [p % d for p, d in zip(big, b0)]
        trunc = [abs(p) // abs(d) * (1 if (p < 0) == (d < 0) else -1) for p, d in zip(big, b0)]
        assert tr.tolist() == trunc and fm.tolist() == [p - d * t for p, d, t in zip(big, b0, trunc)]
    assert f.traces == 1


def _assign(x, key):
    y = x * 1
    y[key] = 1.5
    return y


def _index_sweep():
    """(id, call of library, x and index tensor, the index) for index_select, gather, advanced
    indexing and assignment along each dim of a 2 x 3 x 4 tensor, indices from below -size to
    past the end: PyTorch raises for some, counts others from the end, per op."""
    for d, n in enumerate((2, 3, 4)):
        lead = (slice(None),) * d
        for v in (-n - 1, -n, -1, 0, n - 1, n, n + 2):
            idx = np.zeros((2, 3, 4), np.int64)
            idx[0, 0, 0] = v
            yield f"index_select{d}{v}", lambda m, x, i, d=d: x.index_select(d, i), [v]
            yield f"gather{d}{v}", lambda m, x, i, d=d: x.gather(d, i), idx
            yield f"advanced{d}{v}", lambda m, x, i, lead=lead: x[lead + (i,)], [v, 0]
            yield f"assign{d}{v}", lambda m, x, i, lead=lead: _assign(x, lead + (i,)), [v]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_indices_in_every_dim_raise_or_wrap_as_pytorch(compiled):
    torch = torch_or_skip()
    x0 = np.arange(24.0).reshape(2, 3, 4)
    for name, fn, i in _index_sweep():
        outcome = []
        for m in (torch, ngrad):
            x, ii = m.tensor(x0), m.tensor(np.asarray(i))
            f = ngrad.compile(lambda x, i, fn=fn: fn(ngrad, x, i)) if compiled and m is ngrad else None
            try:
                r = f(x, ii) if f else fn(m, x, ii)
                outcome.append(("value", r.detach().numpy().tolist()))
            except Exception as e:  # noqa: BLE001 - compared with PyTorch's
                outcome.append((type(e).__name__, str(e)))
        assert outcome[0] == outcome[1], name
