"""Drivers: the generated Python that runs a plan's kernels and glue for one call."""

import numpy as np
import pytest

import ngrad
from ngrad.engine import runtime
from ngrad.engine.ir.graph import lower
from ngrad.engine.runtime import buffers
from ngrad.engine.runtime.layout import PARALLEL_MIN
from ngrad.engine.transform.differentiate import vjp

from .compiled import assert_same

pytestmark = pytest.mark.usefixtures("jit_always")


def _driver_text(fn, capsys, monkeypatch):
    """``fn()``'s result and the text of the drivers generated while it ran."""
    monkeypatch.setenv("NGRAD_DEBUG", "2")
    capsys.readouterr()
    result = fn()
    monkeypatch.setenv("NGRAD_DEBUG", "0")
    return result, capsys.readouterr().err


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
    _, text = _driver_text(lambda: assert_same(tape, values, 1e-6 if dtype == "f32" else 1e-14), capsys, monkeypatch)
    assert " ** " in text and " = (-e" in text and "= G" not in text  # no interpreter dispatch
    got = runtime.prepare(tape)(values)
    assert got[2] == np.inf and all(type(a) is np.ndarray and a.dtype == np_dt for a in got)


def test_one_element_arithmetic_read_as_an_array_keeps_its_shape(capsys, monkeypatch):
    # 0-d arithmetic runs on NumPy scalars and a reshape of one to (1,) is the same scalar: a
    # concatenation of such values (GradBench ht's rotation rows) and an output of shape (1,)
    # must still see arrays of their own shapes (the concatenation got 0-d values and failed)
    from ngrad.engine.ir.tape import Builder
    from ngrad.engine.runtime.dispatch import numpy_driver

    b = Builder()
    a, c, r = b.input((), "f64"), b.input((), "f64"), b.input((), "f64", "scalar")
    rows = [(a * c - a).reshape(shape=(1,)), (a + c).reshape(shape=(1,)), (c * r).reshape(shape=(1,))]
    row = b.emit("cat", tuple(rows), {"axis": 0})
    tape = b.finish([row.reshape(shape=(1, 3)), (a / c).reshape(shape=(1,)), (a * c).reshape(shape=(1, 1))])
    values = [np.asarray(2.0), np.asarray(3.0), 0.5]
    _, text = _driver_text(lambda: assert_same(tape, values, 1e-15), capsys, monkeypatch)
    assert "(x0[()] + x1[()])" in text  # the 0-d arithmetic did run on scalars
    want = [np.array([[4.0, 5.0, 1.5]]), np.array([2.0 / 3.0]), np.array([[6.0]])]
    for drive in (runtime.prepare(tape), numpy_driver(tape)):
        got = drive(values)
        assert [g.shape for g in got] == [w.shape for w in want]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-15)


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
    # the gradient of logsumexp plus a mean, g / s * e + g / n, is written into e's buffer (e
    # dies there): same numbers, whether the plan runs through its driver (decided when the
    # driver is made) or step by step (decided at run time, as threads run it)
    x0 = rng.standard_normal(PARALLEL_MIN + 5)

    def loss(x):
        return x.logsumexp(0) + x.mean()

    def gradient():
        x = ngrad.from_numpy(x0).requires_grad_()
        y = loss(x)
        y.backward()
        return y.item(), x.grad.numpy()

    (value, grad), text = _driver_text(gradient, capsys, monkeypatch)
    e = np.exp(x0 - x0.max())
    np.testing.assert_allclose(grad, e / e.sum() + 1 / x0.size, rtol=1e-12, atol=1e-18)
    np.testing.assert_allclose(value, np.log(e.sum()) + x0.max() + x0.mean(), rtol=1e-14)
    assert "which dies here" in text, text
    donated = []
    real = buffers.donors
    monkeypatch.setattr(buffers, "donors", lambda *a: donated.extend(real(*a)) or real(*a))
    assert_same(*_joint_of(loss, x0), rtol=1e-12)
    assert donated


def test_loops_with_vectorised_math_never_write_in_place(rng, monkeypatch, capsys):
    # aliased operands would make LLVM's overlap check fail and the sin/cos loop run unvectorised
    x0 = rng.standard_normal(PARALLEL_MIN + 5)

    def loss(x):
        d = x[1:] - x[:-1]
        return (d * d).sum() + (x.cos() * x).sum()

    def gradient():
        for _ in range(3):
            x = ngrad.from_numpy(x0).requires_grad_()
            loss(x).backward()
        return x.grad.numpy()

    grad, text = _driver_text(gradient, capsys, monkeypatch)
    np.testing.assert_allclose(
        grad[1:-1],
        2 * (x0[1:-1] - x0[:-2]) - 2 * (x0[2:] - x0[1:-1]) + np.cos(x0[1:-1]) - x0[1:-1] * np.sin(x0[1:-1]),
        rtol=1e-10,
        atol=1e-12,
    )
    assert "generated driver" in text and "which dies here" not in text
    donated = []
    real = buffers.donors
    monkeypatch.setattr(buffers, "donors", lambda *a: donated.extend(real(*a)) or real(*a))
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


def test_a_driver_takes_numbers_and_checks_anything_else_as_a_runtime_scalar(rng):
    # run() hands Python and NumPy numbers straight to a driver; a 0-d array is checked and
    # taken, a str or a list is the tape's TypeError (a driver's dtype.type() would parse "2.5")
    x = ngrad.tensor(rng.standard_normal(6))
    low = lower([(x * 2.5 + 1.0)._node])
    assert "scalar" in low.tape.kinds
    values = [n.value for n in low.sources]
    want = runtime.run(low.tape, values)[0]
    assert runtime.dispatch.tier_for(low.tape, "always").tier.ready()
    k = low.tape.kinds.index("scalar")
    for number in (2.5, np.float64(2.5), np.asarray(2.5), np.float32(2.5)):
        same = list(values)
        same[k] = number
        np.testing.assert_allclose(runtime.run(low.tape, same)[0], runtime.run(low.tape, values)[0])
    for bad in ("2.5", [2.5], None):
        wrong = list(values)
        wrong[k] = bad
        with pytest.raises(TypeError, match="must be a scalar"):
            runtime.run(low.tape, wrong)
    np.testing.assert_allclose(runtime.run(low.tape, values)[0], want)


@pytest.mark.parametrize("path", ["driver", "executor"])
def test_an_unaligned_input_runs_the_aligned_specialisation(path, monkeypatch):
    """Numba specialises a loop for unaligned arrays (as Dask hands them over) and runs it ~15x
    slower: the runtime copies such an input, and the kernel keeps its one specialisation."""
    from ngrad.engine.runtime import dispatch

    if path == "executor":  # NGRAD_DEBUG=3 runs plans step by step, without their drivers
        monkeypatch.setenv("NGRAD_DEBUG", "3")
    x = np.linspace(-1.0, 1.0, 300)
    buf = np.zeros(x.nbytes + 1, np.uint8)
    unaligned = buf[1:].view(np.float64)
    unaligned[:] = x
    assert not unaligned.flags.aligned
    low = lower([(ngrad.tensor(x).sin() * ngrad.tensor(x).cos())._node])
    want = runtime.run(low.tape, [x, x])[0]
    got = runtime.run(low.tape, [unaligned, unaligned])[0]
    np.testing.assert_array_equal(got, want)
    kernels = [k for k in dispatch.records[low.tape.key()].tier.kernels if k]
    assert kernels and all(k.signatures() == 1 for k in kernels)


def test_the_signatures_a_driver_learns_with_stand_ins_are_those_its_run_loads(rng, tmp_path, monkeypatch):
    """``compile_server.signatures`` runs the driver with stand-ins that fill arrays with zeros (the
    glue between kernels, a gather's integer indices among it, computes from those); what it
    finds, compiled ahead on two threads (``cpu.compile_ahead``), is exactly what the warm-up
    run then needs: every kernel loads from disk, none compiles, and the results are the
    interpreter's."""
    from ngrad.engine.ir.interpret import interpret
    from ngrad.engine.runtime.compile_server import signatures
    from ngrad.engine.runtime.driver import driver_of, warm
    from ngrad.engine.runtime.plan import CompiledPlan
    from ngrad.engine.targets import cpu

    from .compiled import graph_tape

    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path / "kernels"))
    cpu._memory.clear()
    idx = ngrad.tensor(np.array([3, 0, 2, 2, 1]))
    scale = ngrad.tensor(np.linspace(0.5, 1.5, 4))  # a constant array the plan keeps

    def f(x, w):
        h = (x.sin() * x * scale + 1.0) @ w  # a matmul between two kernels
        g = h.exp()[idx] * h[idx].cos()  # integer gathers of a kernel's result
        edges = (x[1:, :] * x[:-1, :]).sum() + (x[:, 2:] - x[:, :-2]).pow(2).sum()  # windows the plan keeps
        return (g.tanh() * 2.0 + g * g).sum() + (x * x).mean() + edges

    tape, values = graph_tape(f, [rng.standard_normal((5, 4)), rng.standard_normal((4, 6))], rng, grad=True)
    plan = CompiledPlan(tape)
    lay = plan.layout()
    kernels = plan.build(lay)
    assert sum(k is not None for k in kernels) >= 3
    before = [np.copy(v) for v in values]
    seen = signatures(plan, kernels, values)
    assert all(np.array_equal(a, b) for a, b in zip(values, before))  # on copies
    assert {id(k) for k, _ in seen} == {id(k) for k in kernels if k is not None}
    assert cpu.compile_ahead(seen, threads=2) == len({(k.key, s) for k, s in seen})
    compiled = cpu.stats["compiled"]
    warm(plan, kernels, values)
    assert cpu.stats["compiled"] == compiled  # all loaded: the signatures were the run's own
    assert {(k.key, s) for k, s in seen} == {(k.key, s) for k in kernels if k is not None for s in k.loaded}
    # the same plan, as the worker publishes it: what the stand-ins were given but do not own
    # (the plan's window bounds, its constants) is as it was
    for got, want in zip(driver_of(plan)(values), interpret(tape, values)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
