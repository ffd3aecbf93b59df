"""``ngrad.scan``: PyTorch's scan on ngrad. Values, gradients (first and second order, to the
initial carry, the sequence and captured tensors) and forward-mode tangents against the loop
written out step by step in ngrad and against central finite differences (float64), against
``torch._higher_order_ops.scan`` where PyTorch is installed, interpreted and compiled; a new
number of steps compiles nothing; PyTorch's errors for a bad body. The primitive itself runs in
every corpus of the table through ``tests/cases_control.py``."""

import numpy as np
import pytest

import ngrad
from ngrad.engine.targets import cpu

R = np.random.default_rng(5)
W0, C0, XS = R.standard_normal((3, 3)), R.standard_normal((2, 3)), R.standard_normal((5, 2, 3))


def _step(lib, w):
    def step(carry, x):
        h, s = carry["h"], carry["s"]
        h = lib.tanh(h @ w + x[0] * s)
        s = s * 0.5 + lib.sin(x[1])
        return {"h": h, "s": s}, (h.sum(-1), h * s)

    return step


def _unrolled(lib, step, init, xs, reverse=False):
    """The written-out loop: the reference every scan is checked against."""
    n = xs[0].shape[0]
    carry, ys = init, [None] * n
    for t in range(n - 1, -1, -1) if reverse else range(n):
        carry, ys[t] = step(carry, tuple(x[t] for x in xs))
    return carry, tuple(lib.stack([y[k] for y in ys]) for k in range(len(ys[0])))


def _program(lib, scan, reverse=False):
    """A loss through a scan with a dict carry, a tuple of sequences, a captured weight and two
    stacked outputs; the values it returns and the gradients of every input."""
    w = lib.tensor(W0, requires_grad=True)
    h0, s0 = lib.tensor(C0, requires_grad=True), lib.tensor(C0[::-1].copy(), requires_grad=True)
    xs = (lib.tensor(XS, requires_grad=True), lib.tensor(XS * 0.3, requires_grad=True))
    carry, (y1, y2) = scan(_step(lib, w), {"h": h0, "s": s0}, xs, reverse=reverse)
    loss = (carry["h"] ** 2).sum() + carry["s"].sum() + (y1 * y1).sum() + y2.cos().sum()
    loss.backward()
    grads = [t.grad.numpy() for t in (w, h0, s0, *xs)]
    return [loss.detach().numpy(), y1.detach().numpy(), y2.detach().numpy()] + grads


def _unrolled_scan(lib):
    return lambda f, init, xs, reverse=False: _unrolled(lib, f, init, xs, reverse)


@pytest.mark.parametrize("mode", ["never", pytest.param("always", marks=pytest.mark.numba)])
@pytest.mark.parametrize("reverse", [False, True])
def test_values_and_gradients_equal_the_written_out_loop(mode, reverse, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("NGRAD_JIT", mode)
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))
    got = _program(ngrad, ngrad.scan, reverse)
    want = _program(ngrad, _unrolled_scan(ngrad), reverse)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.fixture(autouse=True)
def _interpreted(monkeypatch):
    """The interpreter unless a test compiles on purpose (the body is called once a step, so
    tiering would compile it in any test of more than a few steps)."""
    monkeypatch.setenv("NGRAD_JIT", "never")


@pytest.mark.parametrize("reverse", [False, True])
def test_pytorch_parity(reverse):
    torch = pytest.importorskip("torch")
    from torch._higher_order_ops.scan import scan

    for a, b in zip(_program(ngrad, ngrad.scan, reverse), _program(torch, scan, reverse)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("dim", [1, -1])
def test_scanning_another_dim_stacks_the_outputs_there(dim):
    xs = R.standard_normal((2, 3, 4))

    def run(lib, scan):
        x = lib.tensor(xs, requires_grad=True)
        c, ys = scan(
            lambda c, v: (c * 0.9 + v, (c * v).exp()), lib.zeros(2, 4 if dim == 1 else 3, dtype=lib.float64), x, dim=dim
        )
        (c.sum() + ys.sum()).backward()
        return c.detach().numpy(), ys.detach().numpy(), x.grad.numpy()

    got = run(ngrad, ngrad.scan)
    moved = np.moveaxis(xs, dim, 0)
    c = np.zeros(moved.shape[1:])
    ys = []
    for v in moved:
        ys.append(np.exp(c * v))
        c = c * 0.9 + v
    np.testing.assert_allclose(got[0], c, rtol=1e-13)
    np.testing.assert_allclose(got[1], np.moveaxis(np.stack(ys), 0, dim), rtol=1e-13)
    torch = pytest.importorskip("torch")
    from torch._higher_order_ops.scan import scan

    for a, b in zip(got, run(torch, scan)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def _rnn(w, h0, xs):
    def step(h, x):
        h = ngrad.tanh(h * w[0] + x * w[1]) + h * 0.1
        return h, (h * x).sum()

    h, ys = ngrad.scan(step, h0, xs)
    return (h * h).sum() + (ys * ys).sum()


def test_first_and_second_derivatives_equal_finite_differences():
    w = ngrad.tensor(R.standard_normal((2, 4)), requires_grad=True)
    h0 = ngrad.tensor(R.standard_normal(4), requires_grad=True)
    xs = ngrad.tensor(R.standard_normal((6, 4)), requires_grad=True)
    assert ngrad.autograd.gradcheck(_rnn, (w, h0, xs))
    assert ngrad.autograd.gradgradcheck(_rnn, (w, h0, xs))


def test_forward_mode_and_hessian_vector_products_equal_the_written_out_loop():
    args = [R.standard_normal((2, 4)), R.standard_normal(4), R.standard_normal((6, 4))]
    tangents = tuple(ngrad.tensor(R.standard_normal(a.shape)) for a in args)
    primals = tuple(ngrad.tensor(a) for a in args)

    def unrolled(w, h0, xs):
        h, tot = h0, 0
        for t in range(xs.shape[0]):
            h = ngrad.tanh(h * w[0] + xs[t] * w[1]) + h * 0.1
            tot = tot + (h * xs[t]).sum() ** 2
        return (h * h).sum() + tot

    got = ngrad.func.jvp(_rnn, primals, tangents)
    want = ngrad.func.jvp(unrolled, primals, tangents)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    for a, b in zip(
        ngrad.autograd.functional.hvp(_rnn, primals, tangents)[1],
        ngrad.autograd.functional.hvp(unrolled, primals, tangents)[1],
    ):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-11)


@pytest.mark.numba
def test_a_new_number_of_steps_compiles_nothing(jit_always):
    w = ngrad.tensor(R.standard_normal((2, 4)), requires_grad=True)
    h0 = ngrad.tensor(R.standard_normal(4), requires_grad=True)
    for n in (7, 19, 300):
        if n == 19:
            compiled = cpu.stats["compiled"] + cpu.stats["loaded"]
        xs = ngrad.tensor(R.standard_normal((n, 4)))
        _rnn(w, h0, xs).backward()
        h, tot = h0.detach().numpy(), 0.0
        g = w.detach().numpy()
        for x in xs.numpy():
            h = np.tanh(h * g[0] + x * g[1]) + h * 0.1
            tot += (h * x).sum() ** 2
        np.testing.assert_allclose(w.grad.numpy().shape, (2, 4))
        w.grad = None
    assert cpu.stats["compiled"] + cpu.stats["loaded"] == compiled


def test_work_on_captured_tensors_runs_once_and_keeps_their_gradient():
    """``w[0] * 2`` reads no carry: the scan reads it as an operand, computed once outside the
    loop, and the gradient still reaches ``w`` through it."""
    w = ngrad.tensor(R.standard_normal((2, 3)), requires_grad=True)
    seen = []

    def step(h, x):
        scale = w[0] * 2
        seen.append(scale)
        return h * scale + x, h.sum()

    h, ys = ngrad.scan(step, ngrad.ones(3, dtype=ngrad.float64), ngrad.ones(4, 3, dtype=ngrad.float64))
    h.sum().backward()
    scan_node = h._node.srcs[0].srcs[0]  # h is a reshape of a slice of the scan's result
    assert scan_node.op == "scan" and seen[0]._node in scan_node.srcs  # an operand, not in the body
    a = 2 * w.detach().numpy()[0]
    # h4 = a^4 + a^3 + a^2 + a + 1 (x = 1, h0 = 1): d/dw0 = 2 (4a^3 + 3a^2 + 2a + 1)
    np.testing.assert_allclose(w.grad.numpy()[0], 2 * (4 * a**3 + 3 * a**2 + 2 * a + 1), rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy()[1], 0)


@pytest.mark.numba
def test_under_ngrad_compile_it_equals_eager(jit_always):
    w = ngrad.tensor(R.standard_normal((2, 4)), requires_grad=True)
    h0 = ngrad.tensor(R.standard_normal(4), requires_grad=True)
    xs = ngrad.tensor(R.standard_normal((9, 4)))
    eager = _rnn(w, h0, xs)
    eager.backward()
    want = eager.item(), w.grad.numpy().copy()
    w.grad = None
    f = ngrad.compile(_rnn)
    for _ in range(2):
        got = f(w, h0, xs)
        got.backward()
        np.testing.assert_allclose(got.item(), want[0], rtol=1e-12)
        np.testing.assert_allclose(w.grad.numpy(), want[1], rtol=1e-12)
        w.grad = None


def test_ten_thousand_steps():
    xs = ngrad.tensor(R.standard_normal((10_000, 2)) * 0.01, requires_grad=True)
    c, ys = ngrad.scan(lambda c, x: (c + x, c.sum()), ngrad.zeros(2, dtype=ngrad.float64), xs)
    ys.sum().backward()
    np.testing.assert_allclose(c.detach().numpy(), xs.detach().numpy().sum(0), rtol=1e-10, atol=1e-12)
    # y_t = sum of x before t, so d(sum y)/dx_t = the number of later steps
    np.testing.assert_allclose(xs.grad.numpy()[:, 0], np.arange(9_999, -1, -1))


def test_errors_follow_pytorch():
    z = ngrad.zeros(3)
    xs = ngrad.ones(2, 3)
    with pytest.raises(RuntimeError, match="All init leaves must be a Tensor"):
        ngrad.scan(lambda c, x: (c, x), 1.0, xs)
    with pytest.raises(RuntimeError, match="Expected init and carry to have same metadata"):
        ngrad.scan(lambda c, x: (ngrad.cat([c, x]), x), z, xs)
    with pytest.raises(RuntimeError, match="Expected init and carry to have same metadata"):
        ngrad.scan(lambda c, x: ((c + x).double(), x), z, xs)
    with pytest.raises(RuntimeError, match="must return a tuple"):
        ngrad.scan(lambda c, x: c + x, z, xs)
    with pytest.raises(RuntimeError, match="scan dimension > 0"):
        ngrad.scan(lambda c, x: (c + x, x), z, ngrad.ones(0, 3))
    with pytest.raises(RuntimeError, match="holds no tensor"):
        ngrad.scan(lambda c, x: (c, c), z, ())
    with pytest.raises(RuntimeError, match="slices along dim"):
        ngrad.scan(lambda c, x: (c + x[0], c), z, (xs, ngrad.ones(4, 3)))
    with pytest.raises(IndexError, match="Dimension out of range"):
        ngrad.scan(lambda c, x: (c + x, x), z, xs, dim=2)
    with pytest.raises(ngrad.TraceError, match="ngrad.scan: combine_fn needed the value"):
        ngrad.scan(lambda c, x: (c + x.sum().item(), x), z, xs)
    with pytest.raises(RuntimeError, match="wrote in place"):
        ngrad.scan(lambda c, x: (c.add_(x), x.clone()), z.clone(), xs)
    with pytest.raises(TypeError, match="share one dtype"):
        ngrad.scan(lambda c, x: (c + x, c.argmax()), z, xs)
    # writing into a tensor the step made is fine
    c, ys = ngrad.scan(lambda c, x: (c + x, ngrad.zeros(3).add_(x)), z, xs)
    np.testing.assert_array_equal(ys.numpy(), np.ones((2, 3)))


HAVE_CUDA = ngrad.cuda.is_available()


@pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device (runs under the simulator below)")
@pytest.mark.parametrize("mode", ["never", "always"])
def test_device_scan_equals_the_cpu(mode, monkeypatch, tmp_path_factory):
    """A scan of CUDA tensors (its steps run on the host) gives the CPU's values and gradients,
    and its results and gradients stay on the device."""
    monkeypatch.setenv("NGRAD_JIT", mode)
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))

    def run(device):
        w = ngrad.tensor(W0, device=device, requires_grad=True)
        h0 = ngrad.tensor(C0, device=device, requires_grad=True)
        xs = ngrad.tensor(XS, device=device, requires_grad=True)
        h, ys = ngrad.scan(lambda h, x: (ngrad.tanh(h @ w + x), (h * x).sum(-1)), h0, xs, reverse=True)
        loss = (h * h).sum() + ys.exp().sum()
        loss.backward()
        assert h.device.type == device and w.grad.device.type == device
        return [t.detach().cpu().numpy() for t in (loss, ys, w.grad, h0.grad, xs.grad)]

    for a, b in zip(run("cuda"), run("cpu")):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.numba
@pytest.mark.cuda
@pytest.mark.skipif(
    HAVE_CUDA and __import__("os").environ.get("NUMBA_ENABLE_CUDASIM") != "1",
    reason="a real GPU runs the device tests directly",
)
def test_simulator_runs_the_device_tests(tmp_path):
    from .oracles import run_device_tests_simulated

    run_device_tests_simulated(__file__, tmp_path)


def test_a_tensor_the_step_makes_and_writes_into_keeps_its_gradient():
    """``slice_scatter`` into a tensor the step makes (an in-place write underneath): the scan
    reads the value as the write found it, as the written-out loop does (found by the GradBench
    ode's shift of its state)."""

    def grads(scan):
        x = ngrad.tensor([0.5, -0.3, 0.8], dtype=ngrad.float64, requires_grad=True)

        def step(c, h):
            return c + h * x * ngrad.slice_scatter(ngrad.ones_like(c), c[:-1], 0, 1), ()

        c, _ = scan(step, ngrad.zeros_like(x) + 1, ngrad.full((3,), 0.1, dtype=ngrad.float64))
        c.sum().backward()
        return c.detach().numpy(), x.grad.numpy()

    def unrolled(f, c, xs):
        for t in range(xs.shape[0]):
            c, _ = f(c, xs[t])
        return c, ()

    for a, b in zip(grads(ngrad.scan), grads(unrolled)):
        np.testing.assert_allclose(a, b, rtol=1e-13)


def test_written_out_scans_equal_the_scans():
    """``transform.unroll`` (the bytecode tier's form of a scan) against the interpreter: the
    primitive's case, its joint and the joint of its joint."""
    from ngrad.engine.ir.interpret import interpret
    from ngrad.engine.transform.differentiate import vjp
    from ngrad.engine.transform.unroll import unroll, unrolled_size

    from .cases_control import CASES
    from .oracles import prim_tape

    args, params, _ = CASES["scan"]
    tape, _ = prim_tape("scan", args, params)
    joint = vjp(tape, tape.inputs).tape
    for t in (tape, joint, vjp(joint, joint.inputs[:3]).tape):
        values = [R.standard_normal(t.shapes[s]) for s in t.inputs]
        written = unroll(t).verify()
        assert not any(ins.prim == "scan" for ins in written.instrs)
        assert len(written.instrs) <= unrolled_size(t)
        for a, b in zip(interpret(written, values), interpret(t, values)):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


@pytest.mark.numba
def test_short_scans_of_small_steps_run_as_bytecode_and_long_ones_step_by_step(jit_always, monkeypatch):
    from ngrad.engine.runtime.dispatch import records
    from ngrad.engine.runtime.machine import Machine
    from ngrad.engine.runtime.plan import CompiledPlan

    w = ngrad.tensor(R.standard_normal((2, 4)), requires_grad=True)
    h0 = ngrad.tensor(R.standard_normal(4), requires_grad=True)
    for n, tier, most in ((40, Machine, "65536"), (1500, CompiledPlan, "65536"), (40, CompiledPlan, "0")):
        monkeypatch.setenv("NGRAD_SCAN_UNROLL", most)  # 0: every scan stays a loop
        xs = ngrad.tensor(R.standard_normal((n, 4)))
        records.clear()
        loss = _rnn(w, h0, xs)
        loss.backward()
        assert any(isinstance(r.tier, tier) for r in records.values()), n
        got = w.grad.numpy().copy()
        w.grad = None
        wd, h, tot = w.detach().requires_grad_(), h0.detach(), 0
        for t in range(n):
            h = ngrad.tanh(h * wd[0] + xs[t] * wd[1]) + h * 0.1
            tot = tot + (h * xs[t]).sum() ** 2
        ((h * h).sum() + tot).backward()
        np.testing.assert_allclose(got, wd.grad.numpy(), rtol=1e-10)


def test_a_scan_with_no_gradient_to_take_keeps_no_history():
    """The carries entering each step are kept only where a gradient may need them."""
    xs = R.standard_normal((50, 3))
    wv = R.standard_normal(3)
    want = np.zeros(3)
    for x in xs:
        want = np.tanh(want * wv + x)
    w = ngrad.tensor(wv, requires_grad=True)
    sizes = {}
    for name, grad in (("no_grad", False), ("grad", True)):
        with ngrad.set_grad_enabled(grad):
            h, ys = ngrad.scan(
                lambda h, x: (ngrad.tanh(h * w + x), h.sum()), ngrad.zeros(3, dtype=ngrad.float64), ngrad.tensor(xs)
            )
        sizes[name] = h._node.srcs[0].srcs[0].shape[0]  # the packed result the parts are sliced from
        np.testing.assert_allclose(h.detach().numpy(), want, rtol=1e-13)
    assert sizes == {"no_grad": 3 + 50, "grad": 3 + 50 + 50 * 3}


def test_each_step_of_an_interpreted_scan_gets_c_contiguous_values():
    """A scan the interpreter runs may run its body on the body's compiled driver without input
    checks (``loops.steps``), whose kernels have machine code for the layouts its warm-up met:
    ``run_scan`` hands every step C-contiguous values, whatever the carries a step returns or the
    xs and invariants it was given (a carry returned as a strided view made a call of GradBench's
    ode compile a kernel for a new layout for 4 s), and the result is the loop's."""
    from ngrad.engine.ir.prims.control import run_scan
    from ngrad.engine.ir.tape import Builder

    b = Builder()
    h, x, w = b.input((3,), "f64"), b.input((3,), "f64"), b.input((3,), "f64")
    body = b.finish([h * w + x])
    contiguous = []

    def run(tape, values):
        contiguous.extend(v.flags.c_contiguous for v in values)
        both = np.stack([values[0] * values[2] + values[1], values[0]], axis=1)
        return [both[:, 0]]  # the carry as a strided view

    xs = np.asfortranarray(np.arange(12.0).reshape(4, 3))  # its rows are strided
    inv = np.arange(6.0)[::2]
    got = run_scan(run, body, [np.ones(3), xs, inv], 4, False, 1, 1, history=False)
    want = np.ones(3)
    for t in range(4):
        want = want * inv + xs[t]
    assert contiguous and all(contiguous)
    np.testing.assert_array_equal(got, want)
