"""The backend's pass lists: each pass run on its own on a small hand-built tape, and each list run
pass by pass to the same result as its entry point (``fuse``, ``bytecode.encode``)."""

import marshal

from ngrad.engine.backend import bytecode, fuse
from ngrad.engine.backend.fuse import FuseState, Glue, Kernel, Read, ReadKind
from ngrad.engine.backend.passes import run_passes
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


def test_flatten_small_loops_turns_a_small_one_op_kernel_into_glue():
    b = Builder()
    x = b.input((4, 4), "f64")
    tape = b.finish([x.exp()])
    state = _state(tape, "flatten_small_loops")
    assert [type(s) for s in state.steps] == [Kernel]
    fuse.flatten_small_loops(state)
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
