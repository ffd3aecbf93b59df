"""The backend's pass lists: each pass run on its own on a small hand-built tape, and each list run
pass by pass to the same result as its entry point (``fuse``, ``bytecode.encode``)."""

import marshal

from ngrad.engine.backend import bytecode, codegen, element, fuse
from ngrad.engine.backend.element import ElementState
from ngrad.engine.backend.fuse import FuseState, Glue, Kernel, Read, ReadKind
from ngrad.engine.backend.passes import run_passes
from ngrad.engine.backend.source_math import Expr, SourceMath
from ngrad.engine.ir.tape import Builder


def _chain(n=256):
    """exp(x) * x + 1 over (n, n): one loop of element-wise work."""
    b = Builder()
    x = b.input((n, n), "f64")
    return b.finish([x.exp() * x + 1.0])


def _state(tape, upto, target="cpu"):
    """The fusion state after the passes of ``fuse.PASSES`` before the one named ``upto``."""
    state = FuseState.of(tape, target)
    for p in fuse.PASSES:
        if p.name == upto:
            return state
        p.run(state)
    raise AssertionError(upto)


def test_pass_lists_are_named_and_described():
    for passes in (fuse.PASSES, bytecode.PASSES):
        names = [p.name for p in passes]
        assert len(set(names)) == len(names)
        assert all(p.description and callable(p.run) for p in passes)


def test_place_instrs_puts_an_elementwise_chain_in_one_kernel():
    tape = _chain()
    state = _state(tape, "order_steps")
    kernels = [st for _, st in state.placed if isinstance(st, Kernel)]
    assert len(kernels) == 1
    (k,) = kernels
    assert [i.prim for i in k.body] == ["exp", "mul", "add"]
    assert k.reads[tape.inputs[0]] == Read(ReadKind.ARRAY, tape.inputs[0], pattern=(False, False))
    assert k.stores == []  # chosen by the last pass only


def test_broadcast_and_literal_reads_are_typed_records():
    b = Builder()
    x = b.input((300, 1), "f64")
    y = b.input((300, 200), "f64")
    tape = b.finish([x.expand(shape=(300, 200)) * y * 2.0])
    state = _state(tape, "order_steps")
    (k,) = [st for _, st in state.placed if isinstance(st, Kernel)]
    kinds = {r.kind for r in k.reads.values()}
    assert ReadKind.LITERAL in kinds
    (bcast,) = [r for r in k.reads.values() if r.kind == ReadKind.ARRAY and any(r.pattern)]
    assert bcast.src == tape.inputs[0] and bcast.pattern == (False, True)
    assert bcast[0] == "array"  # still a tuple whose first field is the kind
    (lit,) = [r for r in k.reads.values() if r.kind == ReadKind.LITERAL]
    assert lit.src is None and lit.value == 2.0


def test_flatten_one_op_loops_turns_a_one_op_kernel_into_glue():
    b = Builder()
    x = b.input((4, 4), "f64")
    tape = b.finish([x.exp()])
    state = _state(tape, "flatten_one_op_loops")
    assert [type(s) for s in state.steps] == [Kernel]
    fuse.flatten_one_op_loops(state)
    assert [type(s) for s in state.steps] == [Glue]
    assert state.steps[0].instr.prim == "exp"


def test_choose_stores_stores_only_what_is_read_outside_the_kernel():
    tape = _chain()
    state = _state(tape, "choose_stores")
    fuse.choose_stores(state)
    (k,) = state.steps
    assert k.stores == list(tape.outputs)


def test_fuse_is_its_pass_list():
    tape = _chain()
    state = run_passes("fuse", fuse.PASSES, FuseState.of(tape))
    plan = fuse.fuse(tape)
    assert len(state.steps) == len(plan.steps)
    for a, b in zip(state.steps, plan.steps):
        assert type(a) is type(b)
        if isinstance(a, Kernel):
            assert (a.shape, a.reads, a.stores) == (b.shape, b.reads, b.stores)
            assert [i.out for i in a.body] == [i.out for i in b.body]


def test_share_windows_gives_a_reshape_its_arguments_window():
    b = Builder()
    x = b.input((2, 3), "f64")
    r = x.reshape(shape=(6,))
    tape = b.finish([(r * r).sum(axes=(0,), keepdim=False)])
    st = bytecode.EncodeState.of(tape, "f64")
    bytecode.share_windows(st)
    assert st.home[r.slot] == (x.slot, 0)
    assert [i.prim for i in st.instrs] == ["mul", "sum"]


def test_inline_chains_makes_one_row_of_an_elementwise_pair():
    b = Builder()
    x = b.input((5,), "f64")
    y = b.input((5,), "f64")
    tape = b.finish([y + x * x])
    st = bytecode.EncodeState.of(tape, "f64")
    for p in bytecode.PASSES:
        p.run(st)
        if p.name == "inline_chains":
            break
    assert len(st.inlined) == 1 and len(st.chains) == 1


def test_encode_is_its_pass_list():
    b = Builder()
    x = b.input((3, 4), "f64")
    s = b.input((), "f64", "scalar")
    tape = b.finish([(x * s.reshape(shape=(1, 1)).expand(shape=(3, 4))).exp().sum(axes=(1,), keepdim=False), x * 2.0])
    st = run_passes("encode", bytecode.PASSES, bytecode.EncodeState.of(tape, "f64"))
    # compared as loaded: marshal's bytes depend on how many references each object has
    assert marshal.loads(st.bc.dumps()) == marshal.loads(bytecode.encode(tape).dumps())
    assert st.bc.source == bytecode.encode(tape).source


def test_debug_level_3_prints_each_pass(monkeypatch, capsys):
    monkeypatch.setenv("NGRAD_DEBUG", "3")
    fuse.fuse(_chain(8))
    err = capsys.readouterr().err
    for p in fuse.PASSES:
        assert f"ngrad: fuse pass {p.name}:" in err


# codegen: a loop nest (codegen.LOOP_PASSES) and its element (element.ELEMENT_PASSES)


def _kernel(tape):
    """The one loop kernel fusion makes of ``tape`` (its stores chosen)."""
    (k,) = fuse.fuse(tape).kernels()
    return k


def _loop_state(tape, upto):
    """The loop state of ``tape``'s kernel after the passes of ``codegen.LOOP_PASSES`` before ``upto``."""
    state = codegen.LoopState(_kernel(tape), tape)
    for p in codegen.LOOP_PASSES:
        if p.name == upto:
            return state
        p.run(state)
    raise AssertionError(upto)


def _element_state(tape, math_=SourceMath, outer=None):
    """An element state of ``tape``'s kernel at indices i0, i1, ... before any pass."""
    k = _kernel(tape)
    idx = [f"i{d}" for d in range(len(k.shape))]
    return ElementState(k, tape, idx, math_, [], [], [], outer=outer)


def _sum_rows(shape):
    """x * 2 summed along axis 1 of ``shape``."""
    b = Builder()
    x = b.input(shape, "f64")
    return b.finish([(x * 2.0).sum(axes=(1,), keepdim=False)])


def test_codegen_pass_lists_are_named_and_described():
    for passes in (codegen.LOOP_PASSES, element.ELEMENT_PASSES):
        names = [p.name for p in passes]
        assert len(set(names)) == len(names)
        assert all(p.description and callable(p.run) for p in passes)


def test_choose_nest_loops_over_long_axes_and_unrolls_a_short_innermost_one():
    state = _loop_state(_sum_rows((300, 200)), "choose_nest")
    codegen.choose_nest(state)
    assert (state.unroll, state.loop_dims, state.dims) == (0, 2, [0, 1])
    assert [(c.idx, c.tag) for c in state.copies] == [(["i0", "i1"], "")]
    state = _loop_state(_sum_rows((300, 3)), "choose_nest")
    codegen.choose_nest(state)
    assert (state.unroll, state.loop_dims, state.dims) == (3, 1, [0])
    assert [(c.idx, c.tag) for c in state.copies] == [(["i0", "0"], "_0"), (["i0", "1"], "_1"), (["i0", "2"], "_2")]


def test_read_operands_hoists_a_read_that_ignores_the_inner_indices():
    b = Builder()
    x = b.input((300, 8, 1), "f64")
    y = b.input((300, 8, 16), "f64")
    tape = b.finish([x.expand(shape=(300, 8, 16)) * y * y])  # two operations: a loop at any size
    outer = [[], [], []]
    state = _element_state(tape, outer=outer)
    element.read_operands(state)
    sx, sy = tape.inputs
    (rx,) = [s for s, r in state.kernel.reads.items() if r.src == sx]  # the slot x is read as (its expansion)
    assert state.arrays == [(sy, (False, False, False)), (sx, (False, False, True))]  # in slot order
    assert outer == [[], [f"r{rx} = a1[i0, i1]  # read %{sx} (broadcast)"], []]
    assert state.body == [f"r{sy} = a0[i0, i1, i2]  # read %{sy}"]
    assert state.names[rx].text == f"r{rx}" and state.level == {f"r{rx}": 1, f"r{sy}": 2}


def test_pair_sincos_pairs_sin_and_cos_of_one_value_where_the_namespace_has_sincos():
    b = Builder()
    x = b.input((300, 200), "f64")
    tape = b.finish([x.sin() * x.cos()])
    state = _element_state(tape)
    element.pair_sincos(state)
    assert state.pair_of == {}  # the CPU namespace has no sincos

    class WithSincos(SourceMath):
        @staticmethod
        def sincos(a):
            return Expr(f"sincos({a.text})", a.dtype)

    state = _element_state(tape, WithSincos)
    element.read_operands(state)
    element.pair_sincos(state)
    sin, cos = state.kernel.body[:2]
    assert state.pair_of == {sin.out: (sin, cos), cos.out: (sin, cos)}
    element.compute_instrs(state)
    assert state.body[1].startswith(f"v{sin.out}, v{cos.out} = sincos(r{tape.inputs[0]})")
    assert state.body[2].startswith(f"# %{cos.out} = cos(")


def test_compute_instrs_writes_a_literal_power_as_a_product():
    b = Builder()
    x = b.input((300, 200), "f64")
    tape = b.finish([x.pow(2.0) + 1.0])
    state = _element_state(tape)
    element.read_operands(state)
    element.compute_instrs(state)
    (sx,) = tape.inputs
    pw, add = state.kernel.body
    assert state.body[1] == f"v{pw.out} = (r{sx} * r{sx})  # %{pw.out} = pow(%{sx}, %{pw.args[1]})"
    assert state.body[2].startswith(f"v{add.out} = (v{pw.out} + np.float64(1.0))  # %{add.out} = add(")
    element.store_slots(state)
    assert state.body[3] == f"o0[i0, i1] = v{add.out}  # store %{add.out}"


def test_accumulate_reductions_keeps_a_row_sum_in_a_local():
    state = _loop_state(_sum_rows((300, 200)), "accumulate_reductions")
    codegen.accumulate_reductions(state)
    (c,) = state.copies
    (ins,) = state.kernel.reductions
    assert c.pre[0] == ["acc0 = np.float64(0.0)"] and c.post[0] == ["c0[i0] = acc0"]
    assert c.body[-1].startswith(f"acc0 += v{ins.args[0]}  # %{ins.out} = sum(")
    assert state.fresh == [True]  # the local starts from the identity: no fill needed


def test_accumulate_reductions_counts_nan_beside_a_float_max():
    b = Builder()
    x = b.input((300, 200), "f64")
    tape = b.finish([x.amax(axes=(0, 1), keepdim=False)])
    state = _loop_state(tape, "accumulate_reductions")
    codegen.accumulate_reductions(state)
    (c,) = state.copies
    assert c.pre[-1] == ["acc0 = np.float64(-np.inf)", "nan0 = False"]
    assert c.post[-1] == ["c0[()] = np.nan if nan0 else acc0"]
    assert c.body[-1].startswith(f"acc0 = _fmax(acc0, r{tape.inputs[0]})\n{{ind}}nan0 |= ")


def test_guard_ranges_counts_sin_arguments_and_sets_the_flag():
    b = Builder()
    x = b.input((300, 200), "f64")
    tape = b.finish([x.sin() * x])  # two operations: a loop at any size
    state = _loop_state(tape, "guard_ranges")
    codegen.guard_ranges(state)
    r = f"r{tape.inputs[0]}"
    assert state.guards == [r]
    assert state.body == [f"bad += (abs({r}) > 1000000.0)  # range guard of sin/cos"]
    assert (state.pre[-1], state.post[-1]) == (["bad = 0"], ["flag[0] = bad > 0"])


def test_bind_parameters_write_nest_and_describe_part():
    tape = _sum_rows((300, 200))
    state = _loop_state(tape, "bind_parameters")
    codegen.bind_parameters(state)
    assert state.params == ["n0", "n1", "a0", "c0"] and state.lines == []
    codegen.write_nest(state)
    assert state.lines[:3] == ["for i0 in range(n0):", "    acc0 = np.float64(0.0)", "    for i1 in range(n1):"]
    assert state.lines[-1] == "    c0[i0] = acc0"
    codegen.describe_part(state)
    part = state.part
    assert part.dims == [0, 1] and part.arrays == [(tape.inputs[0], (False, False))]
    assert part.stores == [] and part.reductions == state.kernel.reductions and not part.guard


def _as_program(state):
    """The text ``program`` makes of one loop state (no vmath call inside)."""
    body = ["    " + ln for text in state.lines for ln in text.split("\n")]
    return (
        "import math\n\nimport numpy as np\n\n\n" + "\n".join([f"def kernel({', '.join(state.params)}):"] + body) + "\n"
    )


def test_the_loop_passes_render_what_render_renders():
    b = Builder()
    x = b.input((300, 3), "f64")
    y = b.input((300, 1), "f64")
    tapes = [
        _sum_rows((300, 200)),
        _sum_rows((300, 3)),
        b.finish([(x * y.expand(shape=(300, 3))).amin(axes=(0,), keepdim=False)]),
    ]
    for tape in tapes:
        state = run_passes("loops", codegen.LOOP_PASSES, codegen.LoopState(_kernel(tape), tape))
        src = codegen.render(_kernel(tape), tape)
        assert _as_program(state) == src.text
        (part,) = src.parts
        for name in codegen.Part.__slots__:
            assert repr(getattr(state.part, name)) == repr(getattr(part, name)), name


def test_the_element_passes_render_what_render_element_renders():
    b = Builder()
    x = b.input((300, 200), "f64")
    tape = b.finish([(x.exp() * x.sin()).sum(axes=(1,), keepdim=False)])
    state = run_passes("element", element.ELEMENT_PASSES, _element_state(tape))
    arrays, scalars, body = [], [], []
    names = element.render_element(state.kernel, tape, ["i0", "i1"], SourceMath, arrays, scalars, body)
    assert (state.body, state.arrays, state.scalars) == (body, arrays, scalars)
    assert {s: e.text for s, e in state.names.items()} == {s: e.text for s, e in names.items()}
