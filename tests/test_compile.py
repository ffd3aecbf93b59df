"""ngrad.compile: traced once, replayed as a compiled program, with the same results as eager
code (values, gradients, parameter updates, optimizer state), and errors where a replay could
go stale."""

import gc
import tracemalloc

import numpy as np
import pytest

import ngrad
from ngrad.engine.targets import cpu as kcompile

from .oracles import fd_gradient, np_rosenbrock


@pytest.fixture(autouse=True)
def _jit_always(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("NGRAD_JIT", "always")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def rosen(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def test_value_and_grad_replays_and_matches_finite_differences(rng):
    vg = ngrad.compile(ngrad.func.value_and_grad(rosen))
    for n in (6, 9):
        for _ in range(3):
            x = rng.uniform(-1, 1, n)
            value, g = vg(ngrad.tensor(x, dtype=ngrad.float64))
            assert value.item() == pytest.approx(np_rosenbrock(x), rel=1e-12)
            np.testing.assert_allclose(g.numpy(), fd_gradient(np_rosenbrock, x), rtol=1e-6, atol=1e-6)
    assert vg.traces == 2  # once per size, the Python function is not re-run on later calls


@pytest.mark.parametrize("fn", [lambda x: (x.tanh() * x.exp()).sum(), rosen])
def test_a_new_size_retraces_without_compiling(fn, rng):
    # slices too: their windows' bounds are kernel arguments, not text
    vg = ngrad.compile(ngrad.func.value_and_grad(fn))
    vg(ngrad.tensor(rng.standard_normal(7), dtype=ngrad.float64))
    before = kcompile.stats["compiled"] + kcompile.stats["loaded"]
    vg(ngrad.tensor(rng.standard_normal(11), dtype=ngrad.float64))
    assert kcompile.stats["compiled"] + kcompile.stats["loaded"] == before


def test_the_last_variant_runs_only_while_everything_it_checks_holds(rng):
    # a call first tries the variant of the previous call (one generated function with the
    # driver inlined); any change of dtype, size, grad requirement or grad mode must miss it
    vg = ngrad.compile(ngrad.func.value_and_grad(lambda x: (x.sin() * x).sum()))

    def check(a, t=None):
        value, g = vg(ngrad.tensor(a) if t is None else t)
        rtol = 1e-5 if a.dtype == np.float32 else 1e-12
        assert value.dtype == g.dtype == ngrad.tensor(a).dtype and g.shape == a.shape
        np.testing.assert_allclose(value.item(), (np.sin(a) * a).sum(), rtol=rtol)
        np.testing.assert_allclose(g.numpy(), np.cos(a) * a + np.sin(a), rtol=rtol, atol=1e-6)

    cases = [rng.normal(size=5), rng.normal(size=5).astype(np.float32), rng.normal(size=7), rng.normal(size=5)]
    for a in cases + cases:
        check(a)
    assert vg.traces == 3
    with ngrad.no_grad():  # the gradient is still taken, by a variant traced under no_grad
        check(cases[0])
    assert vg.traces == 4
    check(cases[0])
    # an argument outside the vectorised sin's range: the guarded kernel falls back to the interpreter
    check(np.array([1e7, -3e9, 0.5, 2.0, 1e12]))
    # a strided view and a read-only array as the tensor's value: copied, or read as they are
    base = rng.normal(size=10)
    check(base[::2], ngrad.from_numpy(base[::2]))
    frozen = rng.normal(size=5)
    frozen.flags.writeable = False
    check(frozen, ngrad.from_numpy(frozen))
    check(cases[0])
    assert vg.traces == 4


def test_indices_from_the_arguments_are_read_when_the_program_runs(rng):
    # integer index tensors stay tensors under a trace (their values are not needed to record),
    # NumPy checks them when the program runs, and an index out of range is PyTorch's IndexError
    x0 = rng.standard_normal((6, 4))

    def gather(x, rows, cols):
        y = x[rows[:, 0]] * x[rows[:, 1], cols]  # a column of rows, and two index tensors broadcast
        return (y * y).sum() + x[rows[:, 0], [0, 3, -1, 1]].sum()

    vg = ngrad.compile(ngrad.func.value_and_grad(gather))
    cols = ngrad.tensor(np.array([[1], [3], [0], [2]]))
    for rows in ([[0, 5], [2, -1], [5, 5], [1, 0]], [[3, 3], [-6, 4], [0, 1], [2, 2]]):
        r = ngrad.tensor(np.array(rows), dtype=ngrad.int32)
        value, g = vg(ngrad.tensor(x0), r, cols)
        want = ngrad.func.value_and_grad(gather)(ngrad.tensor(x0), r, cols)
        assert value.item() == pytest.approx(want[0].item(), rel=1e-12)
        np.testing.assert_allclose(g.numpy(), want[1].numpy(), rtol=1e-12)

        def f(flat):
            return gather(ngrad.tensor(flat.reshape(6, 4)), r, cols).item()

        np.testing.assert_allclose(g.numpy().ravel(), fd_gradient(f, x0.ravel()), rtol=1e-6, atol=1e-6)
    assert vg.traces == 1  # new index values: the same program
    with pytest.raises(IndexError, match="index 6 is out of bounds for dimension 0 with size 6"):
        vg(ngrad.tensor(x0), ngrad.tensor(np.array([[0, 1], [6, 0], [1, 1], [2, 2]]), dtype=ngrad.int32), cols)
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 6"):
        vg(ngrad.tensor(x0), ngrad.tensor(np.array([[0, 1], [-7, 0], [1, 1], [2, 2]]), dtype=ngrad.int32), cols)
    with pytest.raises(ngrad.TraceError):  # a mask's values decide the result's shape
        ngrad.compile(lambda x, m: x[m].sum())(ngrad.tensor(x0), ngrad.tensor(x0 > 0))


def test_one_element_constants_are_literals_of_the_program(rng):
    # Python numbers, the gradient's seed and a captured one-element tensor are folded into the
    # kernels; updating that tensor in place makes the next call trace again
    c = ngrad.tensor(3.0)
    vg = ngrad.compile(ngrad.func.value_and_grad(lambda x: ((x * 2.5 + 1) ** 2).sum() * c))
    x0 = rng.standard_normal(5)
    value, g = vg(ngrad.tensor(x0))
    (variant,) = [v for vs in vg.variants.values() for v in vs]
    assert len(variant.tape.inputs) == 1 and variant.tape.format().count("const(") >= 3
    assert value.item() == pytest.approx(((x0 * 2.5 + 1) ** 2).sum() * 3)
    np.testing.assert_allclose(g.numpy(), 2 * (x0 * 2.5 + 1) * 2.5 * 3, rtol=1e-12)
    c.mul_(2.0)
    np.testing.assert_allclose(vg(ngrad.tensor(x0))[1].numpy(), 2 * (x0 * 2.5 + 1) * 2.5 * 6, rtol=1e-12)
    assert vg.traces == 2


def _eager_step(w, A, b, lr):
    loss = ((A @ w - b) ** 2).mean()
    loss.backward()
    with ngrad.no_grad():
        w -= lr * w.grad
    w.grad = None
    return loss


def test_training_step_with_captured_parameter_equals_eager(rng):
    A = ngrad.tensor(rng.standard_normal((20, 4)))
    b = ngrad.tensor(rng.standard_normal(20))
    w = ngrad.zeros(4, dtype=ngrad.float64, requires_grad=True)
    w_ref = ngrad.zeros(4, dtype=ngrad.float64, requires_grad=True)

    @ngrad.compile
    def step(lr):
        loss = ((A @ w - b) ** 2).mean()
        loss.backward()
        with ngrad.no_grad():
            w.sub_(lr * w.grad)
        w.grad = None
        return loss

    for i in range(30):
        lr = 0.1 if i < 15 else 0.05  # a float argument is a runtime value: no retrace
        got = step(lr)
        want = _eager_step(w_ref, A, b, lr)
        assert got.item() == pytest.approx(want.item(), rel=1e-12)
    np.testing.assert_allclose(w.detach().numpy(), w_ref.detach().numpy(), rtol=1e-12)
    assert step.traces == 1 and w.is_leaf and w.requires_grad and w.grad is None


def test_gradients_accumulate_across_calls_like_eager(rng):
    x0 = rng.standard_normal(5)
    w = ngrad.tensor(x0, requires_grad=True)
    w_ref = ngrad.tensor(x0, requires_grad=True)
    f = ngrad.compile(lambda: (w.sin() * w).sum().backward())
    for _ in range(3):
        f()
        (w_ref.sin() * w_ref).sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), w_ref.grad.numpy(), rtol=1e-12)
    assert f.traces == 2  # .grad None, then .grad set: two programs, each replayed
    w.grad = None
    f()
    np.testing.assert_allclose(w.grad.numpy(), (np.sin(x0) + x0 * np.cos(x0)), rtol=1e-12)


def test_optimizer_inside_compiled_step_and_scheduler_without_retrace(rng):
    A = rng.standard_normal((16, 3))
    b = rng.standard_normal(16)
    At, bt = ngrad.tensor(A), ngrad.tensor(b)

    def make():
        w = ngrad.zeros(3, dtype=ngrad.float64, requires_grad=True)
        opt = ngrad.optim.Adam([w], lr=0.1)
        return w, opt, ngrad.optim.lr_scheduler.ExponentialLR(opt, 0.9)

    w, opt, sched = make()
    w_ref, opt_ref, sched_ref = make()

    def loss_of(w):
        return ((At @ w - bt) ** 2).mean()

    @ngrad.compile
    def step():
        opt.zero_grad()
        loss = loss_of(w)
        loss.backward()
        opt.step()
        return loss

    for _ in range(12):
        got = step()
        sched.step()
        opt_ref.zero_grad()
        want = loss_of(w_ref)
        want.backward()
        opt_ref.step()
        sched_ref.step()
        assert got.item() == pytest.approx(want.item(), rel=1e-10)
    np.testing.assert_allclose(w.detach().numpy(), w_ref.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(opt.state[w]["exp_avg"].numpy(), opt_ref.state[w_ref]["exp_avg"].numpy(), rtol=1e-10)
    assert opt.state[w]["step"].item() == 12
    assert step.traces == 2  # the first step creates the optimizer state; then one program


def test_the_last_program_misses_when_a_hyperparameter_or_a_grad_changes(rng):
    # the program of the last call is tried first: it must notice a .grad that exists where it
    # did not (backward then accumulates) and a changed static value (an optimizer's weight decay)
    w = ngrad.zeros(3, dtype=ngrad.float64, requires_grad=True)
    x = ngrad.tensor(rng.standard_normal(3))

    @ngrad.compile
    def grad_of(x):
        (x * w).sum().backward()
        return w.grad * 1.0

    for i in range(6):
        if i % 2 == 0:
            w.grad = None
        np.testing.assert_array_equal(grad_of(x).numpy(), x.numpy() * (1 + i % 2))
    assert grad_of.traces == 2

    A, b = ngrad.tensor(rng.standard_normal((16, 3))), ngrad.tensor(rng.standard_normal(16))

    def make():
        v = ngrad.zeros(3, dtype=ngrad.float64, requires_grad=True)
        return v, ngrad.optim.SGD([v], lr=0.05)

    (v, opt), (v_ref, opt_ref) = make(), make()

    def loss_of(x, v):
        return ((x @ v - b) ** 2).mean() + v.sum()

    @ngrad.compile
    def step(x):
        opt.zero_grad()
        loss = loss_of(x, v)
        loss.backward()
        opt.step()
        return loss

    for i in range(8):
        if i == 4:
            opt.param_groups[0]["weight_decay"] = opt_ref.param_groups[0]["weight_decay"] = 0.5
            before = step.traces
        got = step(A)
        opt_ref.zero_grad()
        want = loss_of(A, v_ref)
        want.backward()
        opt_ref.step()
        assert got.item() == pytest.approx(want.item(), rel=1e-12)
    np.testing.assert_allclose(v.detach().numpy(), v_ref.detach().numpy(), rtol=1e-12)
    assert step.traces == before + 1  # one new program for the new weight decay


def test_value_control_flow_is_an_error_not_a_stale_program():
    @ngrad.compile
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(ngrad.TraceError, match="Python control flow"):
        f(ngrad.ones(3))
    with pytest.raises(ngrad.TraceError, match="random numbers"):
        ngrad.compile(lambda x: x * ngrad.randn(3))(ngrad.ones(3))
    with pytest.raises(ngrad.TraceError):
        ngrad.compile(lambda x, lr: x * (2.0 if lr > 0.5 else 1.0))(ngrad.ones(3), 0.7)


def test_gather_reads_an_index_the_program_computes_when_it_runs(rng):
    # an argmin, or an index tensor argument: read by the running program (a trace cannot read
    # it), so each call gathers its own entries, differentiably; a bad index is gather's error,
    # a RuntimeError as in eager mode
    @ngrad.compile
    def f(x, i):
        y = (x.gather(1, x.argmin(1, keepdim=True)) * 2).sum() + x.take_along_dim(i, 1).sum()
        y.backward()
        return y

    for _ in range(3):
        x0, i0 = rng.standard_normal((3, 4)), rng.integers(0, 4, (3, 2))
        x = ngrad.tensor(x0, dtype=ngrad.float64, requires_grad=True)
        y = f(x, ngrad.tensor(i0))
        np.testing.assert_allclose(y.item(), 2 * x0.min(1).sum() + np.take_along_axis(x0, i0, 1).sum(), rtol=1e-13)
        grad = np.zeros((3, 4))
        grad[np.arange(3), x0.argmin(1)] += 2
        np.add.at(grad, (np.arange(3)[:, None], i0), 1)
        np.testing.assert_array_equal(x.grad.numpy(), grad)
    for bad in (7, -1):
        with pytest.raises(RuntimeError, match=f"index {bad} is out of bounds for dimension 1 with size 4"):
            f(ngrad.zeros(3, 4, dtype=ngrad.float64, requires_grad=True), ngrad.tensor(np.full((3, 2), bad)))


def test_sort_topk_and_max_along_a_dim_compile(rng):
    # their indices are the program's own results (they failed to trace while gather read them)
    @ngrad.compile
    def f(x):
        v, i = x.sort(1, descending=True)
        y = v[:, :2].sum() + x.max(1).values.sum() + x.topk(2, 0).values.sum()
        y.backward()
        return y, i

    for _ in range(3):
        x0 = rng.standard_normal((3, 4))
        x = ngrad.tensor(x0, dtype=ngrad.float64, requires_grad=True)
        y, i = f(x)
        down = -np.sort(-x0, 1)
        np.testing.assert_allclose(
            y.item(), down[:, :2].sum() + x0.max(1).sum() + (-np.sort(-x0, 0))[:2].sum(), rtol=1e-13
        )
        np.testing.assert_array_equal(i.numpy(), np.argsort(-x0, 1, kind="stable"))
        grad = np.zeros((3, 4))
        np.put_along_axis(grad, np.argsort(-x0, 1)[:, :2], 1.0, 1)
        grad[np.arange(3), x0.argmax(1)] += 1
        np.add.at(grad, (np.argsort(-x0, 0)[:2], np.arange(4)), 1)
        np.testing.assert_array_equal(x.grad.numpy(), grad)


def test_values_independent_of_the_arguments_can_be_read():
    c = ngrad.tensor([1.0, 2.0])
    f = ngrad.compile(lambda x: x * c.sum().item())
    np.testing.assert_allclose(f(ngrad.ones(2)).numpy(), [3.0, 3.0])


def test_static_arguments_structures_and_outputs(rng):
    @ngrad.compile(static_argnums=(1,))
    def f(xs, power, scale=1.0):
        return {"y": (xs["a"] ** power) * scale, "pair": (xs["b"].sum(), power)}

    a, b = ngrad.tensor(rng.standard_normal(3)), ngrad.tensor(rng.standard_normal(2))
    out = f({"a": a, "b": b}, 2, scale=0.5)
    np.testing.assert_allclose(out["y"].numpy(), a.numpy() ** 2 * 0.5, rtol=1e-12)
    assert out["pair"][1] == 2
    out = f({"a": a, "b": b}, 3, scale=2.0)
    np.testing.assert_allclose(out["y"].numpy(), a.numpy() ** 3 * 2.0, rtol=1e-12)
    assert f.traces == 2


def test_nested_arguments_and_static_values_run_the_last_program_only_if_they_match(rng):
    # the last program is tried first with nested arguments too: each call's structure, static
    # value, float and tensor leaves are checked before it runs (else a new or older program)
    @ngrad.compile(static_argnums=(2,))
    def f(xs, pair, power):
        return (xs["a"] ** power).sum() * pair[0] + xs["b"].sum() * pair[1]

    a, b = ngrad.tensor(rng.standard_normal(3)), ngrad.tensor(rng.standard_normal(2))
    t = ngrad.tensor(1.5)
    ab = {"a": a, "b": b}
    # each call differs from the one before in one respect
    calls = [
        (ab, (0.5, t), 2),
        (ab, (0.5, t), 2),
        (ab, (0.5, t), 3),
        (ab, (2.5, t), 3),
        ({"a": a.float(), "b": b}, (2.5, t), 3),
        (ab, (2.5, t), 3),
        (ab, (t, 0.5), 3),
        (ab, (2.5, t), 3),
        (ab, (t, t), 3),
        (ab, (2.5, t), 3),
        ({"a": a[:2], "b": b}, (2.5, t), 3),
        (ab, (2.5, t), 3),
        (ab, [2.5, t], 3),
        (ab, (2.5, t), 3),
        ({"b": b, "a": a}, (2.5, t), 3),
        (ab, (2.5, t), 3),
        ({"a": a, "b": b, "c": a}, (2.5, t), 3),
        (ab, (0.5, t), 2),
    ]
    for xs, pair, power in calls:
        got, want = f(xs, pair, power), f.fn(xs, pair, power)
        assert got.dtype == want.dtype
        # float32 sums may be ordered differently in a fused loop than in NumPy
        assert got.item() == pytest.approx(want.item(), rel=1e-6 if xs["a"].dtype == ngrad.float32 else 1e-12)
    assert f.traces == 9  # one program per structure, static value and tensor signature


def test_outputs_stay_differentiable_when_their_graph_was_not_consumed(rng):
    f = ngrad.compile(lambda x, y: (x * y).sum())
    x = ngrad.tensor(rng.standard_normal(4), requires_grad=True)
    y = ngrad.tensor(rng.standard_normal(4))
    for _ in range(2):
        x.grad = None
        out = f(x, y)
        assert out.requires_grad
        out.backward()
        np.testing.assert_allclose(x.grad.numpy(), y.numpy())


class _Model:
    """Parameters captured by the compiled forward, as a module's are."""

    def __init__(self, rng):
        self.w1 = ngrad.tensor(rng.standard_normal((5, 4)) * 0.5, requires_grad=True)
        self.b1 = ngrad.tensor(rng.standard_normal(4) * 0.1, requires_grad=True)
        self.w2 = ngrad.tensor(rng.standard_normal((4, 2)) * 0.5, requires_grad=True)

    def params(self):
        return [self.w1, self.b1, self.w2]

    def __call__(self, x):
        h = ngrad.tanh(x @ self.w1 + self.b1)
        out = h @ self.w2
        return out, (h**2).sum(), out.argmax(1)


def _eager_and_compiled(model):
    return model, ngrad.compile(lambda x: model(x))


def test_differentiable_outputs_run_a_compiled_forward_and_backward(rng, monkeypatch):
    # torch.compile's idiom: the model's forward compiled, the loss and backward() outside
    model = _Model(rng)
    eager, compiled = _eager_and_compiled(model)
    x = ngrad.tensor(rng.standard_normal((6, 5)))
    target = ngrad.tensor(rng.standard_normal((6, 2)))

    def grads(f):
        for p in model.params():
            p.grad = None
        out, reg, idx = f(x)
        loss = ((out - target) ** 2).mean() + 0.1 * reg
        loss.backward()
        return loss.item(), [p.grad.numpy().copy() for p in model.params()], idx.numpy()

    want = grads(eager)
    compiled(x)  # traces
    (variant,) = [v for vs in compiled.variants.values() for v in vs]
    variant.split.forward.verify(), variant.split.backward.verify()  # well-formed tapes
    # later calls run the two programs: nothing is recorded as graph nodes again
    monkeypatch.setattr("ngrad.tracing.variant.replay", lambda *a: pytest.fail("the program was replayed as nodes"))
    out, reg, idx = compiled(x)
    assert out.grad_fn.name() == "CompiledFunctionBackward" and reg.requires_grad and not idx.requires_grad
    for _ in range(2):
        got = grads(compiled)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
        np.testing.assert_array_equal(got[2], want[2])
        for g, w in zip(got[1], want[1]):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)

    def loss_of(w1):
        h = np.tanh(x.numpy() @ w1 + model.b1.detach().numpy())
        out = h @ model.w2.detach().numpy()
        return np.mean((out - target.numpy()) ** 2) + 0.1 * np.sum(h**2)

    np.testing.assert_allclose(got[1][0], fd_gradient(loss_of, model.w1.detach().numpy()), rtol=1e-6, atol=1e-9)


def test_compiled_outputs_differentiate_twice_batch_and_hook_like_eager(rng):
    model = _Model(rng)
    eager, compiled = _eager_and_compiled(model)
    x = ngrad.tensor(rng.standard_normal((6, 5)))
    compiled(x)
    for f in (eager, compiled):  # create_graph: the forward is recorded over the inputs
        out, reg, _ = f(x)
        (g,) = ngrad.autograd.grad(reg + out.sum(), model.w1, create_graph=True)
        (gg,) = ngrad.autograd.grad((g**2).sum(), model.w2)
        if f is eager:
            want = g.detach().numpy(), gg.numpy()
    np.testing.assert_allclose(g.detach().numpy(), want[0], rtol=1e-12)
    np.testing.assert_allclose(gg.numpy(), want[1], rtol=1e-12, atol=1e-14)
    seeds = ngrad.tensor(rng.standard_normal((3, 6, 2)))
    got = [ngrad.autograd.grad(f(x)[0], model.b1, seeds, is_grads_batched=True)[0].numpy() for f in (eager, compiled)]
    np.testing.assert_allclose(got[1], got[0], rtol=1e-12)
    seen = []
    for f in (eager, compiled):  # a hook on an output sees and may replace its gradient
        model.b1.grad = None
        out, _, _ = f(x)
        out.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2)
        out.sum().backward()
        seen.append(model.b1.grad.numpy().copy())
    np.testing.assert_allclose(seen[2], seen[0])
    np.testing.assert_allclose(seen[3], seen[1], rtol=1e-12)


def test_compiled_outputs_keep_the_rules_of_a_graph(rng):
    model = _Model(rng)
    compiled = ngrad.compile(lambda x: model(x)[1])
    x = ngrad.tensor(rng.standard_normal((6, 5)))
    compiled(x)
    reg = compiled(x)
    reg.backward(retain_graph=True)
    reg.backward()  # retained: the gradient accumulates twice
    once = ngrad.autograd.grad(compiled(x), model.b1)[0].numpy()
    np.testing.assert_allclose(model.b1.grad.numpy(), 2 * once, rtol=1e-12)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        reg.backward()
    # a value the backward program reads, changed in place since the call: as eager, an error
    xs = ngrad.tensor(rng.standard_normal((6, 5)), requires_grad=True)
    for f in (lambda x: model(x)[1], compiled):
        y = xs * 1
        reg = f(y)
        with ngrad.no_grad():
            model.w1.mul_(1.5)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            reg.backward()
    # parameters that stop requiring grad: the outputs follow, as eager ones would
    model.w1.requires_grad_(False)
    out = compiled(x)
    assert out.requires_grad
    (g,) = ngrad.autograd.grad(out, model.b1)
    np.testing.assert_allclose(g.numpy(), ngrad.autograd.grad(model(x)[1], model.b1)[0].numpy(), rtol=1e-12)


def test_compiled_outputs_returned_inputs_and_forward_mode(rng):
    w = ngrad.tensor(rng.standard_normal(3), requires_grad=True)
    f = ngrad.compile(lambda x: (x, w * x, w * x, (w * x).sum()))
    x = ngrad.tensor(rng.standard_normal(3), requires_grad=True)
    for _ in range(2):
        a, b, c, s = f(x)
        assert a is not x and a._node is x._node  # an argument returned as it is stays itself
        x.grad = w.grad = None
        (a.sum() + 2 * b.sum() + 3 * c.sum() + s).backward()
        np.testing.assert_allclose(x.grad.numpy(), 1 + 6 * w.detach().numpy())
        np.testing.assert_allclose(w.grad.numpy(), 6 * x.detach().numpy())
    import ngrad.autograd.forward_ad as fwAD

    t = rng.standard_normal(3)
    with fwAD.dual_level():
        xd = fwAD.make_dual(x.detach(), ngrad.tensor(t))
        tangent = fwAD.unpack_dual(f(xd)[3]).tangent
    np.testing.assert_allclose(tangent.item(), float(w.detach().numpy() @ t))


def test_captured_constant_updated_in_place_is_noticed():
    c = ngrad.tensor([1.0, 2.0])
    f = ngrad.compile(lambda x: x + c)
    np.testing.assert_allclose(f(ngrad.zeros(2)).numpy(), [1.0, 2.0])
    c.add_(10.0)
    np.testing.assert_allclose(f(ngrad.zeros(2)).numpy(), [11.0, 12.0])


def test_a_program_of_many_constants_keeps_its_fast_path_and_notices_an_update(monkeypatch):
    from ngrad.tracing import PROBE_CONSTS, CompiledFunction

    cs = [ngrad.tensor(float(i)) for i in range(PROBE_CONSTS + 4)]
    w = ngrad.zeros(3)

    @ngrad.compile
    def f(x):
        total = x
        for c in cs:
            total = total * 0.5 + c
        w.add_(x)  # an update every call moves the process-wide count of in-place updates
        return total

    def want(x):
        total = x
        for c in cs:
            total = total * 0.5 + c.item()
        return total

    x = np.array([1.0, 2.0, 3.0])
    f(ngrad.tensor(x))
    monkeypatch.setattr(CompiledFunction, "_replay", lambda *a: pytest.fail("the last program was not taken"))
    for _ in range(3):
        np.testing.assert_allclose(f(ngrad.tensor(x)).numpy(), want(x))
    monkeypatch.undo()
    cs[-1].add_(10.0)
    np.testing.assert_allclose(f(ngrad.tensor(x)).numpy(), want(x))
    np.testing.assert_allclose(w.numpy(), 5 * x)


def test_arguments_updated_in_place_by_the_program():
    f = ngrad.compile(lambda x, d: x.add_(d))
    x = ngrad.zeros(3)
    for _ in range(3):
        f(x, 0.5)
    np.testing.assert_allclose(x.numpy(), [1.5, 1.5, 1.5])


def test_compiled_loop_keeps_a_flat_memory_footprint(rng):
    w = ngrad.tensor(rng.standard_normal(8), requires_grad=True)
    opt = ngrad.optim.SGD([w], lr=1e-3, momentum=0.9)

    @ngrad.compile
    def step():
        opt.zero_grad()
        loss = (w**2).sum()
        loss.backward()
        opt.step()
        return loss

    def run(n):
        for _ in range(n):
            step()

    run(2000)
    gc.collect()
    tracemalloc.start()
    run(1000)
    first = tracemalloc.get_traced_memory()[0]
    run(20000)
    grown = tracemalloc.get_traced_memory()[0] - first
    tracemalloc.stop()
    assert grown < 200_000, grown


def test_create_graph_loop_does_not_leak(rng):
    x = ngrad.tensor(rng.standard_normal(4), requires_grad=True)

    def run(n):
        for _ in range(n):
            x.grad = None
            (x**3).sum().backward(create_graph=True)  # .grad refers back into the graph
            (x.grad.sum()).item()

    run(50)
    gc.collect()
    tracemalloc.start()
    run(50)
    first = tracemalloc.get_traced_memory()[0]
    run(400)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - first
    tracemalloc.stop()
    assert grown < 200_000, grown


def test_constant_subexpressions_are_computed_once(rng):
    # a Vandermonde matrix of fixed points and sign(t) depend on no argument: the program reads
    # them as inputs instead of recomputing pow and sign per call; updating t retraces
    t = ngrad.linspace(-1, 1, 50, dtype=ngrad.float64)
    k = ngrad.arange(4, dtype=ngrad.float64)

    def residual(x):
        return ((t[:, None] ** k) * x).sum(1) - t.sign()

    vg = ngrad.compile(ngrad.func.value_and_grad(lambda x: (residual(x) * residual(x)).sum()))
    x0 = rng.standard_normal(4)

    def expect(tv):
        V = tv[:, None] ** np.arange(4)
        r = V @ x0 - np.sign(tv)
        return r @ r, 2 * V.T @ r

    for _ in range(2):
        value, g = vg(ngrad.tensor(x0))
        want = expect(t.numpy())
        assert value.item() == pytest.approx(want[0], rel=1e-12)
        np.testing.assert_allclose(g.numpy(), want[1], rtol=1e-12)
    (variant,) = [v for vs in vg.variants.values() for v in vs]
    prims = {ins.prim for ins in variant.tape.instrs}
    assert not prims & {"pow", "sign"} and "expand" in prims
    assert max(np.prod(variant.tape.shapes[s]) for s in variant.tape.inputs) == 50 * 4
    t.mul_(0.5)
    np.testing.assert_allclose(vg(ngrad.tensor(x0))[1].numpy(), expect(t.numpy())[1], rtol=1e-12)
    assert vg.traces == 2


def _put(x, k, v):
    y = x * 1
    y[k] = v
    return y


@pytest.mark.parametrize(
    "key, value",
    [
        ([1], [7.0, 8.0, 9.0]),  # a row
        ([-1, 0], [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),  # rows, one counted from the end
        ([[True, False, True], [False, True, False]], 7.0),  # a mask and a number
        ([[True, False, True], [False, True, False]], [1.0, 2.0, 3.0]),  # a value per selected element
        ([False, True], [1.0, 2.0, 3.0]),  # a mask of rows, the value broadcast along them
        (True, [7.0]),  # a 0-d mask: all or nothing
    ],
)
def test_setitem_with_an_index_or_mask_argument_traces_and_replays(key, value, rng):
    # the key's values are read when the program runs (the first call used to raise TraceError);
    # values and gradients (of x's kept elements and of the value) as PyTorch's, call after call
    torch = pytest.importorskip("torch")
    f = ngrad.compile(_put)
    for _ in range(3):
        x0, w = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
        v0 = np.asarray(value) * rng.uniform(1, 2)
        tx, tv = torch.tensor(x0, requires_grad=True), torch.tensor(v0, requires_grad=True)
        ty = _put(tx, torch.tensor(key), tv)
        (ty * torch.tensor(w)).sum().backward()
        x, v = ngrad.tensor(x0, requires_grad=True), ngrad.tensor(v0, requires_grad=True)
        y = f(x, ngrad.tensor(key), v)
        (y * ngrad.tensor(w)).sum().backward()
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-15)
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-15)
        np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-15)
    assert f.traces == 1


def test_setitem_with_repeated_indices_keeps_the_last_write_as_in_eager_mode():
    f = ngrad.compile(_put)
    x, v = ngrad.zeros(3, requires_grad=True), ngrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for key in ([2, 0, 2], [1, 1, 1]):
        y = f(x, ngrad.tensor(key), v)
        want = _put(x, ngrad.tensor(key), v)  # eager
        np.testing.assert_array_equal(y.detach().numpy(), want.detach().numpy())
        (gy,) = ngrad.autograd.grad(y.sum() * 1, v)
        (gw,) = ngrad.autograd.grad(want.sum() * 1, v)
        np.testing.assert_array_equal(gy.numpy(), gw.numpy())
