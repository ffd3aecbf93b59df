"""``autograd.graph`` and the tensor surface of issue 31 part A: GradientEdge as an input of
``grad``/``backward``, grad_fn objects (``metadata``, hooks and pre-hooks, ``_saved_*``),
saved-tensor hooks (pack at recording, unpack when the gradient runs), ``register_multi_grad_hook``,
``allow_mutation_on_saved_tensors``, ``increment_version``, ``Variable``, ``var_mean``/``std_mean``,
``randint``, ``output_nr``, ``del t.grad``. Each case runs on ngrad and, where it is installed, on
PyTorch, against values worked out by hand (or finite differences)."""

import numpy as np
import pytest

from .oracles import LIBS


def t64(lib, values, grad=True):
    return lib.tensor(values, dtype=lib.float64, requires_grad=grad)


def listed(t):
    return None if t is None else np.asarray(t.detach().numpy()).tolist()


# --- GradientEdge -----------------------------------------------------------------------------


@LIBS
def test_grad_with_respect_to_an_intermediate_through_its_gradient_edge(lib):
    get_gradient_edge = lib.autograd.graph.get_gradient_edge
    x = t64(lib, [1.0, 2.0])
    h = x * 3
    loss = (h * h).sum()
    # d(sum h^2)/dh = 2h = [6, 12]; d/dx = 2h * 3 = [18, 36]
    gh, gx = lib.autograd.grad(loss, inputs=[get_gradient_edge(h), x], retain_graph=True)
    assert listed(gh) == [6.0, 12.0] and listed(gx) == [18.0, 36.0]
    # a leaf's edge is its AccumulateGrad node; backward accumulates into the leaf through it
    edge = get_gradient_edge(x)
    assert edge.node.name().endswith("AccumulateGrad") and edge.output_nr == 0
    loss.backward(inputs=[edge], retain_graph=True)
    assert listed(x.grad) == [18.0, 36.0]
    # a non-leaf's edge in backward() stops the pass there and accumulates nowhere
    loss.backward(inputs=[get_gradient_edge(h)])
    assert listed(x.grad) == [18.0, 36.0]
    with pytest.raises(RuntimeError, match="does not require gradients"):
        get_gradient_edge(lib.ones(2))


@LIBS
def test_an_edge_stays_with_the_node_it_was_taken_from(lib):
    x = t64(lib, [2.0])
    h = x * 1
    edge = lib.autograd.graph.get_gradient_edge(h)
    loss = (h * 3).sum()  # saves no tensor: writing to h afterwards is allowed
    h.mul_(10)
    assert listed(lib.autograd.grad(loss, [edge], retain_graph=True)[0]) == [3.0]
    with pytest.raises(RuntimeError, match="Tensor at index 0 appears to not have been used in the graph"):
        lib.autograd.grad(loss, [h])  # h's grad_fn is now the update's, which loss does not use


@LIBS
def test_materialize_grads_with_an_edge_or_create_graph(lib):
    x, z = t64(lib, [1.0, 2.0]), t64(lib, [5.0])
    (gx, gz) = lib.autograd.grad((x * x).sum(), [x, z], create_graph=True, materialize_grads=True)
    assert listed(gx) == [2.0, 4.0] and listed(gz) == [0.0] and gz.requires_grad and gx.requires_grad
    (gx2,) = lib.autograd.grad(gx.sum(), x, materialize_grads=True)
    assert listed(gx2) == [2.0, 2.0]
    (_, gz) = lib.autograd.grad((x * 2).sum(), [x, z], materialize_grads=True)
    assert not gz.requires_grad
    eye = lib.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=lib.float64)
    gx, gz = lib.autograd.grad(x * 2, [x, z], eye, is_grads_batched=True, materialize_grads=True)
    assert listed(gx) == [[2.0, 0.0], [0.0, 2.0]] and listed(gz) == [0.0]  # PyTorch's zeros_like(z)
    with pytest.raises(RuntimeError, match="materialize_grads cannot be used when the given input is a GradientEdge"):
        lib.autograd.grad((x * 2).sum(), [lib.autograd.graph.get_gradient_edge(z)], materialize_grads=True)


@LIBS
def test_integer_grad_outputs_are_converted(lib):
    x = t64(lib, [1.0, 2.0])
    y = x * 3
    assert listed(lib.autograd.grad(y, x, lib.tensor([1, 2]), retain_graph=True)[0]) == [3.0, 6.0]
    assert listed(lib.autograd.grad(y, x, lib.tensor([True, False]))[0]) == [3.0, 0.0]


# --- grad_fn objects --------------------------------------------------------------------------


@LIBS
def test_node_type_metadata_and_saved_values(lib):
    Node = lib.autograd.graph.Node
    x, y = t64(lib, [1.0, 2.0]), t64(lib, [3.0, 4.0])
    p = x * y
    assert isinstance(p.grad_fn, Node) and not isinstance(x, Node)
    assert p.grad_fn is p.grad_fn and (p * 2).grad_fn.next_functions[0][0] is p.grad_fn
    assert lib.autograd.graph.get_gradient_edge(p).node is p.grad_fn
    assert p.grad_fn._saved_self is x and p.grad_fn._saved_other is y
    p.grad_fn.metadata["tag"] = 7
    assert p.grad_fn.metadata == {"tag": 7}
    c = x * lib.tensor([5.0, 6.0], dtype=lib.float64)  # self is saved only for other's gradient
    assert c.grad_fn._saved_self is None and listed(c.grad_fn._saved_other) == [5.0, 6.0]
    e = x.exp()
    assert np.allclose(listed(e.grad_fn._saved_result), np.exp([1.0, 2.0]).tolist())
    assert x.sin().grad_fn._saved_self is x and (x**2).grad_fn._saved_exponent == 2
    s = x.reshape(2, 1).sum(0, keepdim=True)
    assert (s.grad_fn._saved_dim, s.grad_fn._saved_keepdim, tuple(s.grad_fn._saved_self_sym_sizes)) == (
        (0,),
        True,
        (2, 1),
    )
    m = x.reshape(1, 2).transpose(0, 1)
    assert (m.grad_fn._saved_dim0, m.grad_fn._saved_dim1) == (0, 1)
    assert (x + y).grad_fn._saved_alpha == 1
    e.sum().backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        e.grad_fn._saved_result
    with pytest.raises(AttributeError):
        p.grad_fn._saved_nothing


@LIBS
def test_node_prehook_and_hook_order_and_replacement(lib):
    x = t64(lib, [1.0, 2.0])
    h = x * 3
    out = (h * h).sum()
    calls = []
    h.register_hook(lambda g: calls.append(("tensor", listed(g))))

    def pre(grad_outputs):
        calls.append(("pre", [listed(g) for g in grad_outputs]))
        return (grad_outputs[0] * 2,)

    def post(grad_inputs, grad_outputs):
        calls.append(("post", [listed(g) for g in grad_inputs], [listed(g) for g in grad_outputs]))
        return (grad_inputs[0] + 1, None)

    h.grad_fn.register_prehook(pre)
    handle = h.grad_fn.register_hook(post)
    out.backward(retain_graph=True)
    # dout/dh = 2h = [6, 12], doubled by the pre-hook; MulBackward0 of x * 3 gives 3 * that
    assert calls == [
        ("tensor", [6.0, 12.0]),
        ("pre", [[6.0, 12.0]]),
        ("post", [[36.0, 72.0], None], [[12.0, 24.0]]),
    ]
    assert listed(x.grad) == [37.0, 73.0]
    handle.remove()
    x.grad = None
    out.backward()
    assert listed(x.grad) == [36.0, 72.0]


@LIBS
def test_accumulate_grad_node_hooks(lib):
    x = t64(lib, [1.0, 2.0])
    acc = lib.autograd.graph.get_gradient_edge(x).node
    seen = []
    acc.register_prehook(lambda go: (go[0] * 10,))
    acc.register_hook(lambda gi, go: seen.append((gi, listed(go[0]))))
    (x * 2).sum().backward()
    assert listed(x.grad) == [20.0, 20.0] and seen == [((), [20.0, 20.0])]


# --- saved-tensor hooks -----------------------------------------------------------------------


def logging_hooks(log):
    def pack(t):
        log.append(("pack", tuple(t.shape)))
        return t

    def unpack(t):
        log.append(("unpack", tuple(t.shape)))
        return t

    return pack, unpack


@LIBS
def test_pack_at_recording_and_unpack_when_the_gradient_runs(lib):
    log = []
    x, y = t64(lib, [1.0, 2.0]), t64(lib, [3.0])
    with lib.autograd.graph.saved_tensors_hooks(*logging_hooks(log)):
        a = x * y  # saves other, then self
        log.append("mul")
        b = x * 2  # a Python scalar is not a saved tensor
        log.append("scalar")
        c = a.exp()  # saves its result
        log.append("exp")
        d = (c + b).sum()
    log.append("backward")
    d.backward()
    assert log == [
        ("pack", (1,)),
        ("pack", (2,)),
        "mul",
        "scalar",
        ("pack", (2,)),
        "exp",
        "backward",
        ("unpack", (2,)),
        ("unpack", (1,)),
        ("unpack", (2,)),
    ]
    # exp(x*y) * y + 2 at x = [1, 2], y = 3
    assert np.allclose(listed(x.grad), (3 * np.exp([3.0, 6.0]) + 2).tolist())


@LIBS
def test_unpack_must_return_a_tensor_and_hooks_can_be_disabled(lib):
    graph = lib.autograd.graph
    x = t64(lib, [1.0])
    with graph.saved_tensors_hooks(lambda t: t, lambda t: 3):
        z = x.exp()
    with pytest.raises(TypeError, match="unpack_hook expected to be a Tensor but got result of type int"):
        z.sum().backward()
    with graph.disable_saved_tensors_hooks("no hooks here"):
        with pytest.raises(RuntimeError, match="no hooks here"):
            with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
    with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        with pytest.raises(RuntimeError, match="not now"):
            with graph.disable_saved_tensors_hooks("not now"):
                pass


class Mul:
    @staticmethod
    def make(lib):
        class MulFn(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                ctx.save_for_backward(x, None, y)
                return x * y

            @staticmethod
            def backward(ctx, g):
                a, none, b = ctx.saved_tensors
                assert none is None
                return g * b, g * a

        return MulFn


@LIBS
def test_custom_function_saved_tensors_are_what_unpack_returns(lib):
    log = []
    x, y = t64(lib, [1.0, 2.0]), t64(lib, [3.0, 4.0])

    def pack(t):
        log.append(("pack", listed(t)))
        return t * 10

    def unpack(t):
        log.append(("unpack", listed(t)))
        return t

    with lib.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = Mul.make(lib).apply(x, y)
    out.sum().backward()
    assert log == [("pack", [1.0, 2.0]), ("pack", [3.0, 4.0]), ("unpack", [10.0, 20.0]), ("unpack", [30.0, 40.0])]
    assert listed(x.grad) == [30.0, 40.0] and listed(y.grad) == [10.0, 20.0]


@LIBS
def test_save_on_cpu_round_trips(lib):
    x = t64(lib, [0.5, 1.5])
    with lib.autograd.graph.save_on_cpu():
        y = (x.sin() * x).sum()
    y.backward()
    assert np.allclose(listed(x.grad), (np.cos([0.5, 1.5]) * [0.5, 1.5] + np.sin([0.5, 1.5])).tolist())


# --- multi-grad hooks, mutation of saved values, versions -------------------------------------


@LIBS
def test_register_multi_grad_hook_all_and_any(lib):
    graph = lib.autograd.graph
    a, b = t64(lib, 2.0), t64(lib, 3.0)
    seen = []
    handle = graph.register_multi_grad_hook((a, b), lambda gs: seen.append([type(gs)] + [listed(g) for g in gs]))
    (a * 5).backward()
    (a * b).backward()
    assert seen == [[list, 5.0, None], [list, 3.0, 2.0]]
    handle.remove()
    (a * b).backward()
    assert len(seen) == 2
    first = []
    graph.register_multi_grad_hook((a, b), lambda g: first.append(listed(g)), mode="any")
    (a * b).backward()
    (b * 7).backward()
    assert first == [3.0, 7.0]
    with pytest.raises(ValueError, match="Expects mode to be one of"):
        graph.register_multi_grad_hook((a, b), print, mode="x")
    with pytest.raises(AssertionError, match="Expected gradient function to be set"):
        graph.register_multi_grad_hook((t64(lib, 1.0), lib.ones(1)), print)
    # non-leaf tensors, and a backward restricted by inputs= (PyTorch's documented example)
    a, b = t64(lib, [[1.0, 2.0, 3.0]]), t64(lib, [[4.0, 5.0, 6.0]])
    c, d = a * b, a * b
    got = []
    graph.register_multi_grad_hook((a, b, c, d), lambda gs: got.append([g is not None for g in gs]))
    c.sum().backward(retain_graph=True)
    c.sum().backward(inputs=(a,))
    assert got == [[True, True, True, False], [True, False, True, False]]


@LIBS
def test_allow_mutation_on_saved_tensors(lib):
    graph = lib.autograd.graph
    with graph.allow_mutation_on_saved_tensors():
        a = t64(lib, [1.0, 2.0])
        b = a.clone()
        out = (b**2).sum()
        b.sin_()
        out.backward()
    assert listed(a.grad) == [2.0, 4.0]  # 2b with b as it was saved
    with graph.allow_mutation_on_saved_tensors():
        a = t64(lib, [1.0, 2.0])
        b = a.clone()
        out = (b**2).sum()
        b.sin_()
    with pytest.raises(AssertionError, match="Trying to backward outside"):
        out.backward()
    with pytest.raises(RuntimeError, match="cannot be nested"):
        with graph.allow_mutation_on_saved_tensors():
            with graph.allow_mutation_on_saved_tensors():
                pass


@LIBS
def test_increment_version_invalidates_saved_values(lib):
    a = t64(lib, [1.0, 2.0])
    b = a * 1
    out = (b * b).sum()
    lib.autograd.graph.increment_version(b)
    assert b._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()
    (b * 2).sum().backward()  # recorded after the bump: fine
    assert listed(a.grad) == [2.0, 2.0]


# --- tensor and top-level surface -------------------------------------------------------------


@LIBS
def test_variable_is_the_tensor_alias(lib):
    Variable = lib.autograd.Variable
    x = lib.tensor([1.0, 2.0])
    v = Variable(x, requires_grad=True)
    assert isinstance(x, Variable) and v.requires_grad and v.is_leaf and not x.requires_grad
    assert listed(Variable(x)) == [1.0, 2.0] and listed(Variable()) == []
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got list"):
        Variable([1.0])


@LIBS
@pytest.mark.parametrize("kind", ["var", "std"])
def test_var_mean_and_std_mean(lib, kind):
    data = [[1.0, 3.0, 4.0], [2.0, 2.0, 8.0]]
    f = getattr(lib, kind + "_mean")
    arr = np.array(data)
    spread = np.var if kind == "var" else np.std
    for kwargs, ddof, axis in [
        ({}, 1, None),
        ({"dim": 1, "correction": 0}, 0, 1),
        ({"dim": 0, "unbiased": False}, 0, 0),
    ]:
        s, m = f(lib.tensor(data, dtype=lib.float64), **kwargs)
        assert np.allclose(listed(s), spread(arr, axis=axis, ddof=ddof)) and np.allclose(listed(m), arr.mean(axis))
    s, m = f(lib.tensor(data, dtype=lib.float64), 1, True, keepdim=True)
    assert tuple(s.shape) == (2, 1) and np.allclose(listed(m), arr.mean(1, keepdims=True))
    # gradient of sum(spread) + sum(mean) over dim 1 against central differences
    x = t64(lib, data)
    s, m = f(x, dim=1)
    (s.sum() + 2 * m.sum()).backward()
    assert s.grad_fn.name() == kind.capitalize() + "MeanBackward0"

    def value(a):
        return spread(a, axis=1, ddof=1).sum() + 2 * a.mean(1).sum()

    eps, fd = 1e-6, np.zeros_like(arr)
    for i in np.ndindex(arr.shape):
        up, down = arr.copy(), arr.copy()
        up[i] += eps
        down[i] -= eps
        fd[i] = (value(up) - value(down)) / (2 * eps)
    assert np.allclose(listed(x.grad), fd, atol=1e-6)
    with pytest.raises(TypeError):
        f(x, unbiased=True, correction=1)


@LIBS
def test_randint_signatures(lib):
    assert tuple(lib.randint(3, (4,)).shape) == (4,) and lib.randint(3, (4,)).dtype == lib.int64
    assert listed(lib.randint(5, 6, (2,))) == [5, 5] and listed(lib.randint(5, 6, size=(2,))) == [5, 5]
    assert listed(lib.randint(low=2, high=3, size=(1,))) == [2] and lib.randint(high=2, size=(3,)).max() < 2
    assert lib.randint(3, (2,), dtype=lib.float32).dtype == lib.float32
    with pytest.raises(TypeError):
        lib.randint(5)
    with pytest.raises(TypeError, match="must be tuple of ints, not int"):
        lib.randint(5, 3)
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        lib.randint(5, 2, (3,))


@LIBS
def test_tensor_surface(lib):
    x = t64(lib, [1.0, 2.0])
    x.grad = lib.ones(2, dtype=lib.float64)
    del x.grad
    assert x.grad is None and x.output_nr == 0 and (x * 2).output_nr == 0
    assert x.numpy(force=True).tolist() == [1.0, 2.0]
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        x.numpy()
    assert not lib.is_inference(x) and not x.is_inference()
    with lib.inference_mode():
        t = lib.ones(2) + 1
    assert lib.is_inference(t)

    class Two(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2, a * 3

        @staticmethod
        def backward(ctx, g1, g2):
            return g1 * 2 + g2 * 3

    p, q = Two.apply(x)
    assert (p.output_nr, q.output_nr) == (0, 1)
    assert q.grad_fn.next_functions[0][0].name().endswith("AccumulateGrad")


@LIBS
def test_custom_function_grad_fn_is_shared_and_its_hooks_see_all_outputs(lib):
    class F(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, k, y):
            return x * k * y, x + y

        @staticmethod
        def backward(ctx, g1, g2):
            return g1 * 2 + g2, None, g1 * 3 + g2

    x, y = t64(lib, [1.0, 2.0]), t64(lib, [3.0, 4.0])
    a, b = F.apply(x, 5, y)
    assert a.grad_fn == b.grad_fn and len(a.grad_fn.next_functions) == 2  # the int has no edge
    calls = []
    a.grad_fn.register_prehook(lambda go: calls.append(("pre", [listed(g) for g in go])))

    def post(gi, go):
        calls.append(("post", [listed(g) for g in gi], [listed(g) for g in go]))
        return (gi[0] * 0, gi[1])

    b.grad_fn.register_hook(post)
    (a.sum() + 10 * b.sum()).backward()
    # backward gets (1, 10): x's gradient 1 * 2 + 10 = 12 (zeroed by the hook), y's 1 * 3 + 10 = 13
    assert calls == [
        ("pre", [[1.0, 1.0], [10.0, 10.0]]),
        ("post", [[12.0, 12.0], [13.0, 13.0]], [[1.0, 1.0], [10.0, 10.0]]),
    ]
    assert listed(x.grad) == [0.0, 0.0] and listed(y.grad) == [13.0, 13.0]


@LIBS
def test_gradient_edges_as_outputs(lib):
    get_gradient_edge = lib.autograd.graph.get_gradient_edge
    x = t64(lib, [1.0, 2.0])
    h = x * 3
    # the value flowing into h's node, seeded with ones: d(3x)/dx = 3
    assert listed(lib.autograd.grad(get_gradient_edge(h), x, lib.ones(2, dtype=lib.float64), retain_graph=True)[0]) == [
        3.0,
        3.0,
    ]
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        lib.autograd.grad(get_gradient_edge(h), x, retain_graph=True)
    assert listed(lib.autograd.grad((h * h).sum(), get_gradient_edge(h))[0]) == [6.0, 12.0]  # one edge, not a tuple
    lib.autograd.backward([get_gradient_edge(h)], [lib.ones(2, dtype=lib.float64)])
    assert listed(x.grad) == [3.0, 3.0]


@LIBS
def test_saved_values_of_composite_nodes(lib):
    x = t64(lib, [[1.0, 2.0], [3.0, 4.0]])
    m = x.mean(1, keepdim=True).grad_fn
    assert (m._saved_dim, m._saved_keepdim, tuple(m._saved_self_sym_sizes), m._saved_self_sym_numel) == (
        (1,),
        True,
        (2, 2),
        4,
    )
    assert x.mean().grad_fn._saved_self_sym_numel == 4
    s = x.softmax(1)
    assert s.grad_fn._saved_dim == 1 and np.allclose(listed(s.grad_fn._saved_result), listed(s))
    ls = x.log_softmax(0)
    assert ls.grad_fn._saved_dim == 0 and np.allclose(listed(ls.grad_fn._saved_result), listed(ls))
    assert x.unsqueeze(1).grad_fn._saved_dim == 1
    saved = sorted(a for a in dir(x.mean(0).grad_fn) if a.startswith("_saved"))
    assert saved == ["_saved_dim", "_saved_keepdim", "_saved_self_sym_numel", "_saved_self_sym_sizes"]


@LIBS
def test_gradients_read_what_unpack_returns(lib):
    x, y = t64(lib, [1.0, 2.0]), t64(lib, [3.0])
    w = lib.tensor([[1.0], [2.0]], dtype=lib.float64)
    with lib.autograd.graph.saved_tensors_hooks(lambda t: t * 10, lambda t: t):
        a = x * y  # x's gradient reads y (30), y's reads x ([10, 20])
        b = x * w  # w is broadcast: x's gradient sums 10 * w over rows, 30
        c = x.exp()  # its gradient reads 10 * exp(x)
    (a.sum() + b.sum()).backward()
    assert listed(x.grad) == [60.0, 60.0] and listed(y.grad) == [30.0]
    (g,) = lib.autograd.grad(c.sum(), x, create_graph=True)
    assert np.allclose(listed(g), (10 * np.exp([1.0, 2.0])).tolist())
    # the unpacked value stands where the saved one was: its gradient flows to exp's result
    assert np.allclose(listed(lib.autograd.grad(g.sum(), x)[0]), (10 * np.exp([1.0, 2.0])).tolist())


@LIBS
def test_values_saved_through_hooks_are_not_version_checked(lib):
    x, y = t64(lib, [1.0, 2.0]), t64(lib, [3.0, 4.0])
    with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        a = x * y
    with lib.no_grad():
        x.mul_(2)
    a.sum().backward()
    assert listed(y.grad) == [2.0, 4.0] and listed(x.grad) == [3.0, 4.0]  # y's reads x as updated


@LIBS
def test_node_hooks_with_a_repeated_input_under_create_graph_and_on_unneeded_branches(lib):
    x = t64(lib, [1.0, 2.0])
    y = x * x
    seen = []
    y.grad_fn.register_hook(lambda gi, go: seen.append([listed(g) for g in gi] + [gi[0].requires_grad]))
    (g,) = lib.autograd.grad(y.sum(), x, create_graph=True)
    # one gradient per position (x each), their sum 2x, and a graph to differentiate again
    assert seen == [[[1.0, 2.0], [1.0, 2.0], True]] and listed(g) == [2.0, 4.0]
    assert listed(lib.autograd.grad(g.sum(), x)[0]) == [2.0, 2.0]
    a, b = t64(lib, [1.0]), t64(lib, [2.0])
    p, q = a * 3, b * 4
    calls = []
    q.grad_fn.register_hook(lambda gi, go: calls.append("q node"))
    q.register_hook(lambda g: calls.append("q tensor"))
    p.grad_fn.register_prehook(lambda go: calls.append("p node"))
    assert listed(lib.autograd.grad((p + q).sum(), a)[0]) == [3.0]
    assert calls == ["p node"]  # q's branch leads to no requested input: nothing of it runs


@LIBS
def test_saved_values_of_more_nodes(lib):
    x = t64(lib, [[0.1, 0.2], [0.3, 0.4]])
    y = t64(lib, [[0.5, 0.6], [0.7, 0.8]])
    assert x.log1p().grad_fn._saved_self is x and x.erf().grad_fn._saved_self is x
    assert np.allclose(listed(x.expm1().grad_fn._saved_result), np.expm1([[0.1, 0.2], [0.3, 0.4]]))
    cond = x > 0.2
    assert listed(lib.where(cond, x, y).grad_fn._saved_condition) == [[False, False], [True, True]]
    p = x.prod(1).grad_fn
    assert (p._saved_dim, p._saved_keepdim, p._saved_self is x) == (1, False, True)
    assert np.allclose(listed(p._saved_result), [0.1 * 0.2, 0.3 * 0.4])
    m = x.amax(1).grad_fn
    assert (m._saved_dim, m._saved_keepdim) == ((1,), False) and np.allclose(listed(m._saved_result), [0.2, 0.4])
    assert lib.cat([x, y], 1).grad_fn._saved_dim == 1 and x.flip(0).grad_fn._saved_dims == (0,)
    assert (1 - x).grad_fn._saved_alpha == 1


@LIBS
def test_grad_fn_classes_are_named_after_their_nodes(lib):
    class Triple(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 3

        @staticmethod
        def backward(ctx, g):
            return g * 3

    x = t64(lib, [1.0, 2.0])
    y = (x * 2).exp()
    c = x.clone()
    c[0] = 5.0
    fns = [y.grad_fn, y.grad_fn.next_functions[0][0], Triple.apply(x).grad_fn, c.grad_fn]
    fns.append(fns[1].next_functions[0][0])
    names = [type(f).__name__ for f in fns]
    assert names == ["ExpBackward0", "MulBackward0", "TripleBackward", "CopySlices", "AccumulateGrad"]
    assert all(isinstance(f, lib.autograd.graph.Node) for f in fns)
    assert type(y.grad_fn) is not type(fns[1]) and type(fns[1]) is type((x * 3).grad_fn)
