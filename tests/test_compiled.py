"""Compiled tapes (fused Numba kernels) against the NumPy interpreter: every primitive, float32
and float64, the op corpus with gradients, and fusion decisions."""
import math

import numpy as np
import pytest

import ngrad
from ngrad.engine import runtime
from ngrad.engine.backend.codegen import render
from ngrad.engine.backend.fuse import SMALL_LOOP, fuse
from ngrad.engine.ir.graph import lower
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.transform.differentiate import vjp

from . import test_ops, test_prims
from .oracles import fd_gradient, prim_tape


@pytest.fixture(autouse=True)
def _jit_always(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("NGRAD_JIT", "always")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def compiled(tape, values):
    comp = runtime._Compiled(tape)
    comp.compile()
    return runtime._execute(comp, tape, values)


def assert_same(tape, values, rtol):
    """The plan run by the runtime and by a prepared driver (ngrad.compile's path) both equal
    the interpreter."""
    ref = interpret(tape, values)
    for got in (compiled(tape, values), runtime.prepare(tape)(values)):
        for a, b in zip(got, ref):
            assert a.shape == b.shape and a.dtype == b.dtype
            if a.dtype.kind == "f":
                np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
            else:
                np.testing.assert_array_equal(a, b)


def prim_joint(name, dtype, rng):
    """The joint tape of primitive ``name``'s test case in ``dtype``, and its input values."""
    args, params, wrt = test_prims.CASES[name]
    args = [a.astype(dtype) if a.dtype.kind == "f" else a for a in args]
    if name == "cast":
        params = {"dtype": "f64" if dtype == np.float32 else "f32"}
    tape, _ = prim_tape(name, args, params)
    joint = vjp(tape, [tape.inputs[i] for i in wrt])
    seeds = [rng.standard_normal(joint.tape.shapes[s]).astype(joint.tape.dtypes[s] == "f32" and np.float32 or np.float64)
             for s in joint.seeds]
    return joint.tape, list(args) + seeds


def corpus_joint(name, rng):
    """The joint tape of op-corpus program ``name``, and its input values."""
    fn, inputs = test_ops.CASES[name]
    xs = [ngrad.tensor(a, requires_grad=True) for a in inputs]
    out = fn(ngrad, *xs)
    low = lower([out._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node] for x in xs if x._node in low.slot_of])
    seeds = [rng.standard_normal(joint.tape.shapes[s]) for s in joint.seeds]
    return joint.tape, [n.value for n in low.sources] + seeds


@pytest.mark.parametrize("name", sorted(test_prims.CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_primitive_with_its_vjp(name, dtype, rng):
    tape, values = prim_joint(name, dtype, rng)
    assert_same(tape, values, rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("name", ["lt", "le", "gt", "ge", "eq", "ne", "logical_and", "logical_or", "logical_not",
                                  "isnan", "argmax", "argmin"])
def test_non_differentiable_primitives(name):
    x = np.array([[1.0, np.nan, 3.0], [2.0, 2.0, -1.0]])
    y = np.array([[1.0, 0.0, 4.0], [np.nan, 2.0, 0.0]])
    if name.startswith("logical"):
        args = [x > 1, y > 1][:1 if name == "logical_not" else 2]
        params = {}
    elif name in ("argmax", "argmin"):
        args, params = [np.nan_to_num(x)], {"axis": 1, "keepdim": False}
    elif name == "isnan":
        args, params = [x], {}
    else:
        args, params = [x, y], {}
    tape, _ = prim_tape(name, args, params)
    assert_same(tape, args, 0)


@pytest.mark.parametrize("name", sorted(test_ops.CASES))
def test_op_corpus_values_and_gradients(name, rng):
    tape, values = corpus_joint(name, rng)
    assert_same(tape, values, rtol=1e-10)


def test_nan_and_inf_semantics_survive_compilation():
    x = np.array([np.nan, 1.0, -np.inf, 0.0])
    y = np.array([1.0, np.nan, 2.0, 0.0])
    for name in ("maximum", "minimum"):
        tape, _ = prim_tape(name, [x, y], {})
        assert_same(tape, [x, y], 0)
    for name in ("amax", "amin"):
        tape, _ = prim_tape(name, [np.array([[1.0, np.nan], [3.0, -1.0]])], {"axes": (1,), "keepdim": False})
        assert_same(tape, [np.array([[1.0, np.nan], [3.0, -1.0]])], 0)
    tape, _ = prim_tape("div", [np.array([1.0, -1.0, 0.0]), np.zeros(3)], {})
    assert_same(tape, [np.array([1.0, -1.0, 0.0]), np.zeros(3)], 0)


def test_broadcast_then_reduce_is_one_kernel_without_temporary():
    x = ngrad.tensor(np.random.default_rng(0).standard_normal((5, 3)), requires_grad=True)
    y = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    plan = fuse(lower([y._node]).tape)
    (k,) = plan.kernels()
    assert k.shape == (5, 5, 3) and k.stores == [] and len(k.reductions) == 1
    assert "(broadcast)" in render(k, plan.tape).text


def test_generated_source_names_its_tape_instructions():
    x = ngrad.tensor([1.0, 2.0], requires_grad=True)
    tape = lower([(x.exp() * 2).sum()._node]).tape
    plan = fuse(tape)
    text = render(plan.kernels()[0], tape).text
    assert "_vexp(" in text and "math.exp" not in text and "# %" in text and "= exp(%0)" in text
    assert "2" not in text.split("def kernel")[1].split(":")[0]  # no size in the signature or loops


def test_sizes_are_not_in_the_kernel():
    texts = []
    for n in (3, 1000):
        x = ngrad.ones(n, requires_grad=True)
        tape = lower([(x.sin() * x).sum()._node]).tape
        texts.append([render(k, tape).text for k in fuse(tape).kernels()])
    assert texts[0] == texts[1]


def test_facade_uses_the_compiler(monkeypatch):
    from ngrad.engine.targets import compile as comp
    before = len(comp._memory)
    x = ngrad.tensor(np.linspace(-1, 1, 7), requires_grad=True)
    y = (x.tanh() * x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.tanh(x.detach().numpy()) + x.detach().numpy() / np.cosh(x.detach().numpy()) ** 2)
    assert len(comp._memory) > before


def test_jit_never_interprets(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "never")
    tape, _ = prim_tape("exp", [np.ones(3)], {})
    assert runtime._compiled_for(tape, runtime.jit_mode()) is None


def test_auto_tier_compiles_on_repeat(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_JIT_THRESHOLD", "2")
    tape, _ = prim_tape("mul", [np.ones(4) * 3.25, np.ones(4)], {})
    runtime._plans.pop(tape.key(), None)
    first = runtime._compiled_for(tape, "auto")
    assert not first.ready() or first.cached
    assert runtime._compiled_for(tape, "auto").ready()


def test_long_tapes_plan_and_compile_once_interpreting_has_paid(monkeypatch, tmp_path, rng):
    # ski rental: a tape is planned once interpreting it has cost about what planning costs,
    # and a plan of many new functions compiles once interpreting has cost their compile time
    monkeypatch.setenv("NGRAD_JIT_THRESHOLD", "2")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))  # nothing on disk yet
    monkeypatch.setattr(runtime, "PLAN_EAGER", 0)
    monkeypatch.setattr(runtime, "PLAN_S", 1.0)
    monkeypatch.setattr(runtime, "EAGER_FUNCTIONS", 0)
    monkeypatch.setattr(runtime, "COMPILE_S", 1e3)
    tape, values = prim_joint("tanh", np.float64, rng)  # a fused loop: one function to compile
    runtime._plans.pop(tape.key(), None)
    monkeypatch.setenv("NGRAD_JIT", "auto")
    for _ in range(3):
        np.testing.assert_allclose(runtime.run(tape, values)[0], interpret(tape, values)[0])
    cold = runtime._plans[tape.key()]
    assert isinstance(cold, runtime._Cold) and cold.seen == 3 and cold.rent > 0
    cold.rent = len(tape.instrs) * runtime.PLAN_S  # planning has now been paid for
    comp = runtime._compiled_for(tape, "auto")
    assert isinstance(comp, runtime._Compiled) and not comp.ready()
    assert comp.pending >= 1 and comp.seen == 4
    comp.rent = comp.pending * runtime.COMPILE_S  # and compiling too
    assert runtime._compiled_for(tape, "auto").ready()
    np.testing.assert_allclose(runtime.run(tape, values)[0], interpret(tape, values)[0])


def test_a_traced_program_of_many_new_functions_is_tiered_not_compiled_at_once(monkeypatch, tmp_path, rng):
    """ngrad.compile compiles its program at once unless it needs more than PREPARE_FUNCTIONS new
    functions (an unrolled loop through a gather: minutes of Numba); then the traced step runs on
    the interpreter until that has cost the estimated compile time, and on kernels after."""
    monkeypatch.setenv("NGRAD_JIT", "auto")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path))  # nothing on disk yet
    monkeypatch.setattr(runtime, "PREPARE_FUNCTIONS", 2)
    idx = ngrad.tensor(rng.permutation(50))

    def loss_of(x):
        h = x
        for _ in range(3):  # a gather between steps: a function per step
            h = (h[idx] * 0.5 + x).tanh()
        return (h * h).sum()

    @ngrad.compile
    def step(x):
        loss = loss_of(x)
        loss.backward()
        return loss
    x0 = rng.uniform(-1, 1, 50)
    x = ngrad.tensor(x0, requires_grad=True)
    step(x)
    (comp,) = [c for c in runtime._plans.values() if isinstance(c, runtime._Compiled) and c.functions() > 2
               and c.pending == c.functions()]
    assert not comp.ready() and comp.rent > 0  # traced and run without compiling
    want = fd_gradient(lambda a: loss_of(ngrad.tensor(a)).item(), x0)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-8)
    comp.rent = comp.pending * runtime.COMPILE_S  # interpreting has paid for the compile
    x.grad = None
    loss = step(x)
    assert comp.ready()
    np.testing.assert_allclose(loss.item(), loss_of(ngrad.tensor(x0)).item(), rtol=1e-13)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-8)


# Hypothesis: random programs (the generator of test_random_graphs) compiled against interpreted,
# values and gradients. Few examples: each distinct program compiles new kernels.
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from .test_random_graphs import SHAPES, build, program  # noqa: E402


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(program, st.integers(0, 2 ** 32 - 1))
@example(ops=[("u", 0, 0, 0)] * 5 + [("r", 50, 0, 0)], seed=0)  # found by Hypothesis: a no-op expand
def test_random_programs_compiled_equal_interpreted(ops, seed):
    rng = np.random.default_rng(seed)
    xs = [ngrad.tensor(rng.uniform(-1.5, 1.5, s), requires_grad=True) for s in SHAPES[:3]]
    out = build(ops, *xs)
    low = lower([out._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node] for x in xs])
    seeds = [np.ones(joint.tape.shapes[s]) for s in joint.seeds]
    assert_same(joint.tape, [n.value for n in low.sources] + seeds, rtol=1e-10)


def test_no_op_movements_inside_a_kernel():
    """Regression (found by Hypothesis): an expand to its own shape inside a fused loop."""
    from ngrad.engine.ir.tape import parse
    tape = parse("""\
in %0 : f64[3,1]
in %1 : f64[] scalar
%2 = reshape(%1; shape=(1, 1)) : f64[1,1]
%3 = expand(%2; shape=(3, 1)) : f64[3,1]
%4 = expand(%3; shape=(3, 1)) : f64[3,1]
%5 = mul(%4, %0) : f64[3,1]
%6 = reshape(%5; shape=(3, 1)) : f64[3,1]
out %6 %3""")
    assert_same(tape.verify(), [np.arange(3.0).reshape(3, 1), 2.0], rtol=0)


@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)])
@pytest.mark.parametrize("op", ["sum", "amax", "prod"])
def test_reductions_over_an_unrolled_short_axis(axes, op, rng):
    # the trailing extent 3 is unrolled in the source; each reduction keeps its own accumulators
    x0 = rng.uniform(0.5, 1.5, (6, 5, 3))
    tape = lower([_reduce(ngrad.from_numpy(x0).exp(), op, axes)._node]).tape
    k = fuse(tape).kernels()[0]
    assert "_2 = " in render(k, tape).text  # three copies of the body
    assert_same(tape, [x0], rtol=1e-12)


def _reduce(t, op, axes):
    if op == "sum":
        return t.sum(axes)
    if op == "amax":
        return t.amax(axes)
    for a in sorted(axes, reverse=True):
        t = t.prod(a)
    return t


def test_one_element_kernels_run_early_so_big_loops_fuse():
    # the seed times 1/2 is computed before the (N, N) loops: forward and reverse share one loop
    x = ngrad.randn(40, 3, dtype=ngrad.float64, requires_grad=True)
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1) + ngrad.eye(40, dtype=ngrad.float64)
    e = ((1 / r2) ** 3).sum() / 2
    low = lower([e._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    plan = fuse(joint.tape)
    assert [k.shape for k in plan.kernels()].count((40, 40)) == 1


def test_results_never_share_the_plan_buffers(rng):
    x0 = rng.standard_normal(runtime.POOL_MIN_BYTES // 8 + 1)  # big enough to run from the pool
    x = ngrad.from_numpy(x0).requires_grad_()
    y = (x.exp() * x).sin()
    (y * 2).sum().backward()
    value, grad = y.detach().numpy(), x.grad.numpy()
    kept = value.copy(), grad.copy()
    for _ in range(2):  # the same plan again, on other data: its pooled buffers are reused
        z = ngrad.from_numpy(x0 * 2).requires_grad_()
        w = (z.exp() * z).sin()
        (w * 2).sum().backward()
    np.testing.assert_array_equal(value, kept[0])
    np.testing.assert_array_equal(grad, kept[1])


def test_dropped_results_are_reused_and_held_ones_never(rng, monkeypatch):
    """A plan takes a result's memory back only once nothing references it: not while the
    caller holds the array, nor while a view of it (a reshape, a slice) is alive."""
    taken = []
    real = runtime._taker
    monkeypatch.setattr(runtime, "_taker", lambda comp, made: (
        lambda shape, dt: taken.append(real(comp, made)(shape, dt)) or taken[-1]))
    x0 = rng.standard_normal(runtime.POOL_MIN_BYTES // 8 + 1)  # big enough to run from the pool

    def gradient(scale):
        x = ngrad.from_numpy(x0 * scale).requires_grad_()
        ((x.exp() * x).sin() * 2).sum().backward()
        return x.grad.numpy()
    view = gradient(1.0)[1:]  # only a view survives
    kept = view.copy()
    held = gradient(2.0)
    held_copy = held.copy()
    for k in range(4):
        gradient(3.0 + k)
    np.testing.assert_array_equal(view, kept)
    np.testing.assert_array_equal(held, held_copy)
    g = gradient(1.5)
    address = g.ctypes.data
    del g
    taken.clear()
    gradient(2.5)
    assert address in {a.ctypes.data for a in taken}  # dropped: the next run writes its memory again


def test_consecutive_loops_compile_to_one_function(rng):
    # forward (N, N, 3), fused forward+reverse (N, N) and reverse (N, N, 3) loops: one function,
    # one call; the loss's output scaling (NumPy glue) is moved after them
    x0 = rng.standard_normal((30, 3)) * 2
    x = ngrad.from_numpy(x0).requires_grad_()
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1) + ngrad.eye(30, dtype=ngrad.float64)
    e = ((1 / r2) ** 3 * (1 - ngrad.eye(30, dtype=ngrad.float64))).sum() / 2
    low = lower([e._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    comp = runtime._Compiled(joint.tape)
    (src,) = [s for s in comp.sources if s is not None]
    assert len(src.parts) == 3 and "# loop 2" in src.text
    seeds = [np.ones(joint.tape.shapes[s]) for s in joint.seeds]
    assert_same(joint.tape, [n.value for n in low.sources] + seeds, rtol=1e-12)


def test_a_repeated_gradient_allocates_no_new_big_buffers(rng, monkeypatch):
    """After a warm-up run, every big buffer of logsumexp's gradient (intermediates, the result
    the caller dropped) comes back from the plan."""
    taken = []
    real = runtime._taker
    monkeypatch.setattr(runtime, "_taker", lambda comp, made: (
        lambda shape, dt: taken.append(real(comp, made)(shape, dt)) or taken[-1]))
    x0 = rng.standard_normal(runtime.POOL_MIN_BYTES // 8 + 5)

    def gradient():
        x = ngrad.from_numpy(x0).requires_grad_()
        y = x[1:].logsumexp(0) + x[:-1].sum()
        y.backward()
        return y.item(), x.grad.numpy()
    for _ in range(3):
        value, grad = gradient()
    e = np.exp(x0[1:] - x0[1:].max())
    np.testing.assert_allclose(grad, np.concatenate([[1.0], np.ones(len(x0) - 2) + e[:-1] / e.sum(), [e[-1] / e.sum()]]),
                               rtol=1e-12)
    np.testing.assert_allclose(value, np.log(e.sum()) + x0[1:].max() + x0[:-1].sum(), rtol=1e-12)
    del grad
    before = {id(a) for a in taken if a.nbytes >= runtime.POOL_MIN_BYTES}
    taken.clear()
    gradient()
    big = [a for a in taken if a.nbytes >= runtime.POOL_MIN_BYTES]
    assert big and all(id(a) in before for a in big)


def test_matmul_products_are_written_into_the_plan_buffers(rng, monkeypatch):
    """A tanh layer's gradient: its products (forward, and both of the backward's) land in
    buffers the plan takes, so a repeated run reuses their memory, by the runtime and by the
    driver alike, and agrees with the interpreter."""
    x = ngrad.from_numpy(rng.standard_normal((64, 80)))
    w = ngrad.from_numpy(rng.standard_normal((80, 128)) / 9).requires_grad_()
    v = ngrad.from_numpy(rng.standard_normal((128, 3))).requires_grad_()
    low = lower([ngrad.matmul(ngrad.tanh(ngrad.matmul(x, w)), v).logsumexp(1).sum()._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[w._node], low.slot_of[v._node]])
    tape = joint.tape
    values = [n.value for n in low.sources] + [np.ones(tape.shapes[s]) for s in joint.seeds]
    ref = interpret(tape, values)
    comp = runtime._Compiled(tape)
    comp.compile()
    big = {s for s in comp.into if math.prod(tape.shapes[s]) * 8 >= runtime.POOL_MIN_BYTES}
    assert {tape.shapes[s] for s in big} == {(64, 128), (80, 128)}, comp.into  # h = x @ w, x.T @ dh
    drive = runtime.prepare(tape)
    real = runtime._taker
    for run in (lambda: runtime._execute(comp, tape, values), lambda: drive(values)):
        taken = []
        monkeypatch.setattr(runtime, "_taker", lambda comp, made: (
            lambda shape, dt: taken.append(real(comp, made)(shape, dt)) or taken[-1]))
        seen = []
        for _ in range(3):
            taken.clear()
            got = run()  # the results are dropped at the next assignment: their memory may come back
            for a, b in zip(got, ref):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
            seen.append({(a.shape, a.ctypes.data) for a in taken if a.shape in ((64, 128), (80, 128))})
            del got
        assert {shape for shape, _ in seen[-1]} == {(64, 128), (80, 128)}
        assert seen[-1] <= seen[-2] | seen[-3]  # no new memory for them once warm


def _driver_text(fn, capsys, monkeypatch):
    """``fn()``'s result and the text of the drivers generated while it ran."""
    monkeypatch.setenv("NGRAD_DEBUG", "2")
    capsys.readouterr()
    result = fn()
    monkeypatch.setenv("NGRAD_DEBUG", "0")
    return result, capsys.readouterr().err


@pytest.mark.parametrize("dtype", ["f32", "f64", "i64"])
def test_remainder_and_fmod_take_the_sign_of_the_divisor_and_of_the_dividend(dtype):
    # every sign combination, zero dividends and divisors, and (floats) infinities and NaN; Numba's
    # own integer np.fmod takes the divisor's sign, so the loop must not use it
    from ngrad.engine.ir.tape import Builder
    np_dt = {"f32": np.float32, "f64": np.float64, "i64": np.int64}[dtype]
    x = np.array([-7, 7, -7, 7, 0, 5, -3, 9, 6, -6], np_dt)
    y = np.array([2, 2, -2, -2, 3, 0, 4, -4, 3, 3], np_dt)
    if dtype != "i64":
        x = np.concatenate([x * 1.25, np.array([3.0, -3.0, np.inf, np.nan], np_dt)])
        y = np.concatenate([y * 0.5, np.array([np.inf, np.inf, 2.0, 1.0], np_dt)])
    b = Builder()
    a, d = b.input(x.shape, dtype), b.input(y.shape, dtype)
    tape = b.finish([a.remainder(d), a.fmod(d)])
    with np.errstate(all="ignore"):
        expected = [np.remainder(x, y), np.fmod(x, y)]
        assert_same(tape, [x, y], 0)
        for got, want in zip(runtime.prepare(tape)([x, y]), expected):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [ngrad.float64, ngrad.int64])
def test_a_one_element_loop_reads_python_numbers_as_arrays(dtype):
    # a tape of one-element values compiles to one loop; the Python numbers in it are runtime
    # scalars broadcast to (1,): the driver hands them to the loop as arrays (it passed NumPy
    # scalars, and Numba failed to type the loop on the second call)
    for k in range(4):
        t = ngrad.tensor([2 + k], dtype=dtype)
        assert (t * 3 + 1).tolist() == [3 * (2 + k) + 1]
        assert ngrad.where(t != 3, t, 0).tolist() == [0 if k == 1 else 2 + k]

    @ngrad.compile
    def f(t, c):
        return (t * c - 1) * (t > c)
    for c in (0.5, 4.0, 1.5):
        x = ngrad.tensor([1.5], dtype=ngrad.float64)
        assert f(x, c).item() == ((1.5 * c - 1) if 1.5 > c else 0.0)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_one_element_arithmetic_in_a_driver_equals_the_interpreter(dtype, capsys, monkeypatch):
    # Adam's bias corrections: 0-d glue next to a loop, as Python operators in the driver
    from ngrad.engine.ir.tape import Builder
    b = Builder()
    x, s, k = b.input((40,), dtype), b.input((), dtype), b.input((), dtype)
    t = (s + 1.0) * k - s
    u = t.pow(s) / (k - k)  # 0-d division by zero: inf, as NumPy gives
    v = -(b.full(1.0, (), dtype) - t.pow(2.5))
    y = (x * v.reshape(shape=(1,)).expand(shape=(40,))).sum(axes=(0,), keepdim=False)
    tape = b.finish([y, t, u, v])
    np_dt = np.float32 if dtype == "f32" else np.float64
    values = [np.linspace(-1, 1, 40).astype(np_dt), np.asarray(0.7, np_dt), np.asarray(1.3, np_dt)]
    _, text = _driver_text(lambda: assert_same(tape, values, 1e-6 if dtype == "f32" else 1e-14),
                           capsys, monkeypatch)
    assert " ** " in text and "asarray(-e" in text and "= G" not in text  # no interpreter dispatch
    got = runtime.prepare(tape)(values)
    assert got[2] == np.inf and all(type(a) is np.ndarray and a.dtype == np_dt for a in got)


def test_a_driver_lets_numpy_broadcast_an_expand_only_elementwise_glue_reads(rng, capsys, monkeypatch):
    # small loops of one operation run as NumPy glue: the scale * vector at the end of a
    # logsumexp's gradient reads the one-element scale as it is; an expand that is an output, or
    # that a unary operation reads (its result would keep the source's shape), is still built
    from ngrad.engine.ir.tape import Builder
    b = Builder()
    x, z = b.input((40,), "f64"), b.input((20,), "f64")
    total = (x * x).sum(axes=(0,), keepdim=True)  # (1,), complete only after x's loop
    scaled = total.expand(shape=(40,)) * x  # a loop of one product: glue reading the (1,) as is
    grown = total.expand(shape=(30,)).exp()  # unary: the expand must be built
    tape = b.finish([scaled, grown, total.expand(shape=(3,)), z + z])
    values = [rng.standard_normal(40), rng.standard_normal(20)]
    _, text = _driver_text(lambda: assert_same(tape, values, 1e-14), capsys, monkeypatch)
    assert text.count("NumPy broadcasts") == 1, text  # not for the unary read, nor the output
    got = runtime.prepare(tape)(values)
    assert [a.shape for a in got] == [(40,), (30,), (3,), (20,)]

    def gradient(x0):
        x = ngrad.from_numpy(x0).requires_grad_()
        y = x.logsumexp(0)
        y.backward()
        return y.item(), x.grad.numpy()
    for x0 in (rng.standard_normal(100), np.array([1.0, np.inf, 2.0]), np.full(4, -np.inf)):
        (value, grad), text = _driver_text(lambda: gradient(x0), capsys, monkeypatch)
        with np.errstate(all="ignore"):
            m = np.max(x0) if np.isfinite(np.max(x0)) else 0.0
            e = np.exp(x0 - m)
            np.testing.assert_allclose(grad, e / e.sum(), rtol=1e-12, atol=1e-18)
            np.testing.assert_allclose(value, np.log(e.sum()) + m, rtol=1e-14)
    assert "NumPy broadcasts" in text and "asarray(abs(" in text and "broadcast_to" not in text


def _joint_of(build, x0):
    x = ngrad.from_numpy(x0).requires_grad_()
    low = lower([build(x)._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    return joint.tape, [n.value for n in low.sources] + [np.ones(joint.tape.shapes[s]) for s in joint.seeds]


def test_a_dying_intermediate_is_reused_for_a_result(rng, monkeypatch, capsys):
    # logsumexp's gradient g / s * e is written into e's buffer (e dies there): same numbers,
    # whether the plan runs through its driver (decided when the driver is made) or step by step
    # (decided at run time, as threads run it); big enough for a loop of one operation
    x0 = rng.standard_normal(SMALL_LOOP + 5)

    def gradient():
        x = ngrad.from_numpy(x0).requires_grad_()
        y = x.logsumexp(0)
        y.backward()
        return y.item(), x.grad.numpy()
    (value, grad), text = _driver_text(gradient, capsys, monkeypatch)
    e = np.exp(x0 - x0.max())
    np.testing.assert_allclose(grad, e / e.sum(), rtol=1e-12, atol=1e-18)
    np.testing.assert_allclose(value, np.log(e.sum()) + x0.max(), rtol=1e-14)
    assert "which dies here" in text, text
    donated = []
    real = runtime._donors
    monkeypatch.setattr(runtime, "_donors", lambda *a: donated.extend(real(*a)) or real(*a))
    assert_same(*_joint_of(lambda x: x.logsumexp(0), x0), rtol=1e-12)
    assert donated


def test_loops_with_vectorised_math_never_write_in_place(rng, monkeypatch, capsys):
    # aliased operands would make LLVM's overlap check fail and the sin/cos loop run unvectorised
    x0 = rng.standard_normal(SMALL_LOOP + 5)

    def loss(x):
        d = x[1:] - x[:-1]
        return (d * d).sum() + (x.cos() * x).sum()

    def gradient():
        for _ in range(3):
            x = ngrad.from_numpy(x0).requires_grad_()
            loss(x).backward()
        return x.grad.numpy()
    grad, text = _driver_text(gradient, capsys, monkeypatch)
    np.testing.assert_allclose(grad[1:-1], 2 * (x0[1:-1] - x0[:-2]) - 2 * (x0[2:] - x0[1:-1])
                               + np.cos(x0[1:-1]) - x0[1:-1] * np.sin(x0[1:-1]), rtol=1e-10, atol=1e-12)
    assert "generated driver" in text and "which dies here" not in text
    donated = []
    real = runtime._donors
    monkeypatch.setattr(runtime, "_donors", lambda *a: donated.extend(real(*a)) or real(*a))
    assert_same(*_joint_of(loss, x0), rtol=1e-10)
    assert not donated


def test_glue_runs_after_the_literals_it_reads():
    # a two-element Rosenbrock: one-element glue (x[0] ** 2) reads the literal 2.0, whose step
    # used to be placed after it (a KeyError when the compiled plan ran)
    x = ngrad.tensor([-1.2, 1.0], dtype=ngrad.float64, requires_grad=True)
    loss = 100 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2
    low = lower([loss._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    assert_same(joint.tape, [n.value for n in low.sources] + [np.ones(())], rtol=1e-12)


def test_prepared_driver_checks_inputs_and_copies_aliased_outputs(rng):
    x = ngrad.tensor(rng.standard_normal(5), requires_grad=True)
    low = lower([(x.sin() * 2).sum()._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    run = runtime.prepare(joint.tape)
    values = [n.value for n in low.sources] + [np.ones(())]
    k = next(i for i, n in enumerate(low.sources) if n is x._node)
    bad = list(values)
    bad[k] = np.zeros(4)
    with pytest.raises(ValueError, match="must be f64\\[5\\]"):
        run(bad)
    strided = list(values)
    strided[k] = np.repeat(values[k], 2)[::2]  # not contiguous: copied, same result
    np.testing.assert_allclose(run(strided)[1], run(values)[1])
    b = ngrad.tensor(rng.standard_normal(3))
    ident = lower([b._node, b.reshape(3, 1)._node])
    outs = runtime.prepare(ident.tape)([b._node.value])
    assert not np.shares_memory(outs[0], b._node.value) and not np.shares_memory(outs[1], outs[0])


@pytest.mark.parametrize("prim", ["amax", "amin"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_vectorised_max_and_min_keep_numpy_semantics(prim, dtype):
    """Float max/min reductions compile to LLVM's maxnum/minnum with NaN counted on the side:
    a NaN anywhere wins, infinities and all-infinite rows are exact."""
    rng = np.random.default_rng(5)
    for hole in (None, 0, 517, 999):
        x = rng.standard_normal(1000).astype(dtype)
        if hole is not None:
            x[hole] = np.nan
        x[300] = np.inf if prim == "amax" else -np.inf
        for axes, arr in (((0,), x), ((1,), x.reshape(8, 125)), ((0, 1), x.reshape(40, 25))):
            tape, _ = prim_tape(prim, [arr], {"axes": axes, "keepdim": False})
            assert_same(tape, [arr], 0)
    rows = np.full((3, 7), -np.inf if prim == "amax" else np.inf, dtype)
    tape, _ = prim_tape(prim, [rows], {"axes": (1,), "keepdim": True})
    assert_same(tape, [rows], 0)
    text = render(fuse(tape).kernels()[0], tape).text
    assert ("_fmax(" if prim == "amax" else "_fmin(") in text and "!= " in text


def test_matmul_read_through_a_permute_is_written_in_the_permuted_layout(rng):
    x = ngrad.tensor(rng.standard_normal((6, 5, 3)), requires_grad=True)
    w = ngrad.tensor(rng.standard_normal((5, 3, 3)), requires_grad=True)
    z = ngrad.matmul(x.transpose(0, 1), w).transpose(0, 1)  # (6, 5, 3), as GradBench's gmm writes it
    low = lower([(z.sin() * x).sum()._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node], low.slot_of[w._node]])
    values = [n.value for n in low.sources] + [rng.standard_normal(joint.tape.shapes[s]) for s in joint.seeds]
    comp = runtime._Compiled(joint.tape)
    assert any(inverse for _, inverse in comp.into.values())  # the forward matmul and the gradient's
    assert_same(joint.tape, values, rtol=1e-12)
    lines, _ = runtime._driver_code(comp, joint.tape, [f"v[{i}]" for i in range(len(values))], {}, "return None")
    assert sum("laid out as" in line for line in lines) == 2, lines  # the driver writes them so too


def _rosenbrock_joint(n, shared=False):
    x = ngrad.tensor(np.linspace(-1.5, 1.5, n), requires_grad=True)
    if shared:  # ngrad bench's form: one slice node read twice, so two slice gradients
        a, b = x[:-1], x[1:]
        y = (100 * (b - a * a) ** 2 + (1 - a) ** 2).sum()
    else:
        y = (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()
    low = lower([y._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    return joint.tape, [n.value for n in low.sources] + [np.ones(joint.tape.shapes[s]) for s in joint.seeds]


@pytest.mark.parametrize("shared", [False, True])
def test_slices_and_their_gradients_are_read_through_windows(shared):
    """Rosenbrock's value and gradient: the kernels read x at the slices' offsets, and the
    gradient sums the slice gradients (unslices) where it reads them, zero outside their windows:
    no slice or unslice step runs in NumPy (not even when the sum is a loop of one addition),
    the per-slice gradients never leave the one function (local scratch), and the text is the
    same at every size (window bounds are arguments)."""
    texts = []
    for n in (100, 1000):
        tape, values = _rosenbrock_joint(n, shared)
        comp = runtime._Compiled(tape)
        assert not [st for st in comp.plan.steps if not hasattr(st, "reads") and st.instr.prim in ("slice", "unslice")]
        (src,) = [s for s in comp.serial.sources if s is not None]
        assert "= slice" in src.text and "unslice, zero outside" in src.text
        assert src.text.count("# scratch") == (2 if shared else 3) and len(src.parts[-1].stores) == 1
        texts.append(src.text)
        assert_same(tape, values, rtol=1e-12)
    assert texts[0] == texts[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_strided_and_two_dimensional_windows(dtype, rng):
    # windows with steps, on both axes, at both ends; a slice read by glue (matmul) stays a view
    x0 = rng.standard_normal((6, 9)).astype(dtype)
    x = ngrad.from_numpy(x0).requires_grad_()
    a, b = x[1:, ::2], x[:-1, 1::2]
    y = (a[:, :4] * b.sin()).sum() + (x[2:5, 3:7] ** 2).sum() + (x[::3, 2::3] @ x[:3, :2]).tanh().sum()
    low = lower([y._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[x._node]])
    text = "".join(s.text for s in runtime._Compiled(joint.tape).serial.sources if s is not None)
    assert "% 2 == 0" in text and "unslice, zero outside" in text and "= slice" in text
    seeds = [np.ones(joint.tape.shapes[s], dtype) for s in joint.seeds]
    assert_same(joint.tape, [n.value for n in low.sources] + seeds, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_a_value_is_stored_only_by_the_kernel_that_computes_it_first(rng):
    # gmm's shape of plan: x - mu is stored for a matmul, and later loops recompute it (cheap
    # arithmetic) rather than reload it; they must not store it again
    x = ngrad.tensor(rng.standard_normal((40, 5, 3)), requires_grad=True)
    mu = ngrad.tensor(rng.standard_normal((5, 3)), requires_grad=True)
    w = ngrad.tensor(rng.standard_normal((5, 3, 3)), requires_grad=True)
    xc = x - mu
    z = xc * mu.exp() + ngrad.matmul(xc.transpose(0, 1), w).transpose(0, 1)
    low = lower([(z * z).sum()._node], grad=True)
    joint = vjp(low.tape, [low.slot_of[n._node] for n in (x, mu, w)])
    stored = [s for k in fuse(joint.tape).kernels() for s in k.stores]
    assert len(stored) == len(set(stored))
    values = [n.value for n in low.sources] + [np.ones(joint.tape.shapes[s]) for s in joint.seeds]
    assert_same(joint.tape, values, rtol=1e-12)


def test_reads_that_ignore_the_inner_indices_are_hoisted_out_of_the_inner_loop(rng):
    a = ngrad.tensor(rng.standard_normal((6, 1)), requires_grad=True)
    b = ngrad.tensor(rng.standard_normal((6, 7)), requires_grad=True)
    low = lower([((a.exp() * 2) * b).sum(1)._node])
    tape = low.tape
    text = render(fuse(tape).kernels()[-1], tape).text
    lines = text.splitlines()
    inner = next(k for k, ln in enumerate(lines) if ln.strip().startswith("for i1"))
    hoisted = [k for k, ln in enumerate(lines) if "(broadcast)" in ln or "exp(" in ln]
    assert hoisted and all(k < inner for k in hoisted), text
    assert_same(tape, [n.value for n in low.sources], rtol=1e-12)
