"""The CUDA target: devices in the facade, CUDA kernels against the NumPy interpreter (every
primitive with its VJP, float32 and float64, and the op corpus with gradients), PTX type checks
of every generated kernel, and PyTorch's device semantics and errors.

Tests named ``test_device_*`` need a CUDA device. Without a GPU they run in a child process under
Numba's CUDA simulator (``test_simulator_runs_the_device_tests``), so CI runs them on
every commit; on a GPU machine they run directly.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import ngrad
from ngrad.engine.backend.cuda_source import cuda_fill_source, cuda_matmul_source, cuda_source
from ngrad.engine.backend.fuse import Kernel, fuse
from ngrad.engine.ir.interpret import interpret
from ngrad.engine.runtime import cuda as engine_cuda

from . import test_ops, test_prims
from .oracles import prim_tape, run_device_tests_simulated
from .test_compiled import corpus_joint, prim_joint

HAVE_CUDA = ngrad.cuda.is_available()
device = pytest.mark.skipif(
    not HAVE_CUDA,
    reason=f"no CUDA device: {ngrad.cuda.unavailable_reason()} "
    "(these run under the simulator in test_simulator_runs_the_device_tests)",
)


@pytest.fixture(autouse=True)
def _jit_always(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("NGRAD_JIT", "always")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def assert_same_on_cuda(tape, values, rtol):
    """The tape compiled for CUDA equals the interpreter (inputs handed over as device arrays)."""
    from ngrad.engine.targets.cuda import to_device

    ref = interpret(tape, values)
    dev = [to_device(v) if k == "tensor" else v for v, k in zip(values, tape.kinds)]
    got = ngrad.engine.runtime.run(tape, dev, "cuda")
    for a, b in zip(got, ref):
        a = a.copy_to_host()
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(a, b)


# --- on a CUDA device (or the simulator) -----------------------------------------------------------


@device
@pytest.mark.parametrize("name", sorted(test_prims.CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_device_every_primitive_with_its_vjp(name, dtype, rng):
    tape, values = prim_joint(name, dtype, rng)
    assert_same_on_cuda(tape, values, rtol=1e-5 if dtype == np.float32 else 1e-12)


@device
@pytest.mark.parametrize(
    "name",
    [
        "lt",
        "le",
        "gt",
        "ge",
        "eq",
        "ne",
        "logical_and",
        "logical_or",
        "logical_not",
        "isnan",
        "argmax",
        "argmin",
        "maximum",
        "minimum",
        "amax",
        "amin",
        "splice",
    ],
)
def test_device_non_differentiable_primitives_and_nan(name):
    x = np.array([[1.0, np.nan, 3.0], [2.0, 2.0, -1.0]])
    y = np.array([[1.0, 0.0, 4.0], [np.nan, 2.0, 0.0]])
    params = {}
    if name.startswith("logical"):
        args = [x > 1, y > 1][: 1 if name == "logical_not" else 2]
    elif name in ("argmax", "argmin"):
        args, params = [np.nan_to_num(x)], {"axis": 1, "keepdim": False}
    elif name in ("amax", "amin"):
        args, params = [x], {"axes": (1,), "keepdim": False}
    elif name == "isnan":
        args = [x]
    else:
        args = [x, y]
    tape, _ = prim_tape(name, args, params)
    assert_same_on_cuda(tape, args, 0)


@device
@pytest.mark.parametrize("name", sorted(test_ops.CASES))
def test_device_op_corpus_values_and_gradients(name, rng):
    tape, values = corpus_joint(name, rng)
    assert_same_on_cuda(tape, values, rtol=1e-10)


@device
@pytest.mark.parametrize("op", ["sum", "amax", "amin"])
def test_device_reductions_across_many_blocks(op, rng):
    # more elements than one block of threads: the per-block trees and the atomics combine (the
    # simulator's blocks are smaller, and its threads are Python threads: fewer elements there)
    from ngrad.engine.targets.cuda import threads_per_block

    x = rng.standard_normal(6 * threads_per_block() - 36)
    x[len(x) // 2] = 9.0
    tape, _ = prim_tape(op, [x], {"axes": (0,), "keepdim": False})
    assert_same_on_cuda(tape, [x], 1e-12)
    m = rng.standard_normal((40, 50))
    for axes in [(0,), (1,)]:
        tape, _ = prim_tape(op, [m], {"axes": axes, "keepdim": True})
        assert_same_on_cuda(tape, [m], 1e-12)


@device
def test_device_tiled_matmul_batched(rng):
    a, b = rng.standard_normal((3, 17, 20)), rng.standard_normal((3, 20, 33))
    tape, _ = prim_tape("matmul", [a, b], {})
    assert_same_on_cuda(tape, [a, b], 1e-12)


@device
def test_device_tensors_backward_matches_cpu(rng):
    data = rng.standard_normal((4, 3))
    results = []
    for dev in ("cpu", "cuda"):
        x = ngrad.tensor(data, device=dev, requires_grad=True)
        w = ngrad.tensor(data[0], device=dev, requires_grad=True)
        for _ in range(2):  # the second step runs compiled, and accumulates into .grad
            loss = ((x * w).tanh().sum(1) ** 2).mean() + (x.exp() - w).amax()
            loss.backward()
        assert x.grad.device == ngrad.device(dev) and x.grad.is_cuda == (dev == "cuda")
        results.append((loss.item(), x.grad.cpu().numpy(), w.grad.cpu().numpy()))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@device
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_device_repeated_calls_launch_directly_and_stay_right(dtype, rng):
    """Calls after the first skip Numba's dispatcher on a GPU (``targets.cuda._Launcher``): every call
    with new values, new sizes and a new seed still equals the interpreter, and the launcher
    refuses arguments that do not match its compiled signature."""
    from ngrad.engine.runtime.cuda import _programs
    from ngrad.engine.targets.cuda import _Launcher, kernel, simulated, threads_per_block, to_device

    block = threads_per_block()  # sizes of several blocks, not multiples of one (1,000 and 4,099 on a GPU)
    for i, n in enumerate((4 * block - 24, 4 * block - 24, 16 * block + 3, 4 * block - 24, 4 * block - 24)):
        data = rng.standard_normal(n).astype(dtype)
        x = ngrad.tensor(data, device="cuda", requires_grad=True)
        loss = ((x.sin() * (-(x**2) / 2).exp()) + x.tanh() * x + x.cos()).sum()
        if i < 3:  # the implicit seed (a host number) ...
            seed = 1.0
            loss.backward()
        else:  # ... and one on the device
            seed = float(rng.uniform(0.5, 2.0))
            loss.backward(ngrad.tensor(seed, dtype=loss.dtype, device="cuda"))
        ref = np.sin(data) * np.exp(-(data**2) / 2) + np.tanh(data) * data + np.cos(data)
        d = (
            np.cos(data) * np.exp(-(data**2) / 2)
            - data * np.sin(data) * np.exp(-(data**2) / 2)
            + (1 - np.tanh(data) ** 2) * data
            + np.tanh(data)
            - np.sin(data)
        )
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(loss.item(), ref.sum(dtype=np.float64), rtol=tol)
        np.testing.assert_allclose(x.grad.cpu().numpy(), seed * d, rtol=tol, atol=tol)
    if simulated():
        return
    kernels = [k for prog in _programs.values() if prog.kernels for k in prog.kernels if k is not None]
    assert kernels and all(k.launcher is not None for k in kernels)
    k = kernel(cuda_fill_source())
    a = to_device(np.zeros(5))
    k.launch(5, (5, a, np.float64(2.0)))
    k.launch(5, (5, a, np.float64(3.0)))
    assert k.launcher is not None and a.copy_to_host().tolist() == [3.0] * 5
    launcher = _Launcher.of(k.fn)
    assert not launcher(1, 32, (5, a.reshape((5, 1)), np.float64(1.0)))  # wrong rank
    assert not launcher(1, 32, (5, a, np.float32(1.0)))  # wrong scalar type
    assert not launcher(1, 32, (5, a))  # too few arguments
    assert a.copy_to_host().tolist() == [3.0] * 5


@device
def test_device_autograd_grad_and_create_graph():
    x = ngrad.tensor([0.5, -1.0, 2.0], dtype=ngrad.float64, device="cuda", requires_grad=True)
    (g,) = ngrad.autograd.grad((x**3).sum(), x, create_graph=True)
    (h,) = ngrad.autograd.grad(g.sum(), x)
    assert g.is_cuda and h.is_cuda
    np.testing.assert_allclose(h.cpu().numpy(), 6 * np.array([0.5, -1.0, 2.0]))


@device
def test_device_semantics_and_errors():
    x = ngrad.arange(6, dtype=ngrad.float64, device="cuda").reshape(2, 3)
    assert x.device == ngrad.device("cuda:0") and str(x.device) == "cuda:0" and x.is_cuda
    assert "device='cuda:0'" in repr(x)
    assert x.sum().item() == 15.0 and x.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x + ngrad.ones(2, 3, dtype=ngrad.float64)
    assert (x * ngrad.tensor(2.0, dtype=ngrad.float64)).is_cuda  # a 0-d CPU tensor joins, as in PyTorch
    with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
        x.numpy()
    c = x.cpu()
    assert c.device == ngrad.device("cpu") and x.cpu().cuda().is_cuda
    np.testing.assert_array_equal(c.numpy(), np.arange(6.0).reshape(2, 3))
    assert x.to("cpu").to(ngrad.float32).dtype is ngrad.float32
    assert ngrad.zeros_like(x).is_cuda and ngrad.randn(3, device="cuda").is_cuda
    w = ngrad.ones(3, device="cuda", requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot differentiate through a copy between devices"):
        w.cpu()
    with ngrad.no_grad():
        assert not w.cpu().requires_grad
    with pytest.raises(RuntimeError, match="different device"):
        w.grad = ngrad.ones(3)
    with pytest.raises(RuntimeError, match="requires grad"):
        w.__cuda_array_interface__  # noqa: B018


@device
def test_device_compiled_indexing_and_value_checks():
    # a compiled program of device tensors runs on the device (it failed with "got FakeCUDAArray"
    # in the simulator) and returns device tensors; its index and divisor checks raise PyTorch's errors
    cuda = {"device": "cuda"}

    @ngrad.compile
    def f(x, i, j, a, b):
        y = x * 1
        y[j] = 0.5
        return (x.gather(1, i) * 2).sum() + x.index_select(1, j).sum() + y.sum(), a // b

    x0 = np.arange(6.0).reshape(2, 3)
    for _ in range(2):  # traced, then replayed
        x = ngrad.tensor(x0, dtype=ngrad.float64, requires_grad=True, **cuda)
        i, j = ngrad.tensor([[2], [0]], **cuda), ngrad.tensor([1], **cuda)
        s, q = f(x, i, j, ngrad.tensor([7, -7], **cuda), ngrad.tensor([2, 2], **cuda))
        assert s.is_cuda and q.is_cuda
        s.backward()
        assert s.item() == 2 * (2.0 + 3.0) + (1.0 + 4.0) + (3.0 + 3 * 0.5)
        np.testing.assert_array_equal(q.cpu().numpy(), [3, -4])
        np.testing.assert_array_equal(x.grad.cpu().numpy(), [[1.0, 2.0, 3.0], [2.0, 1.0, 0.0]])
    args = [ngrad.tensor([[-1], [0]], **cuda), ngrad.tensor([1], **cuda), ngrad.tensor([1], **cuda)]
    with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 1 with size 3"):
        f(x.detach(), *args, ngrad.tensor([2, 2], **cuda))
    args[0] = ngrad.tensor([[0], [0]], **cuda)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(x.detach(), *args, ngrad.tensor([2, 0], **cuda))


@device
def test_device_cuda_array_interface_in_and_out():
    from numba import cuda

    arr = cuda.to_device(np.arange(4.0))
    t = ngrad.as_tensor(arr)
    assert t.is_cuda and t.dtype is ngrad.float64
    np.testing.assert_array_equal((t * 2).cpu().numpy(), np.arange(4.0) * 2)
    copied = ngrad.tensor(arr)
    assert copied.is_cuda
    np.testing.assert_array_equal(copied.cpu().numpy(), np.arange(4.0))
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":  # a real GPU: shared memory, no copy either way
        back = cuda.as_cuda_array(t)
        assert t.__cuda_array_interface__["data"][0] == arr.__cuda_array_interface__["data"][0]
        np.testing.assert_array_equal(back.copy_to_host(), np.arange(4.0))
        assert copied.__cuda_array_interface__["data"][0] != arr.__cuda_array_interface__["data"][0]


@device
def test_device_optimizer_loop_on_the_gpu():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((20, 3)), rng.standard_normal(20)
    finals = []
    for dev in ("cpu", "cuda"):
        w = ngrad.zeros(3, dtype=ngrad.float64, device=dev, requires_grad=True)
        A, y = ngrad.tensor(a, device=dev), ngrad.tensor(b, device=dev)
        opt = ngrad.optim.Adam([w], lr=0.1)
        for _ in range(5):
            opt.zero_grad()
            ((A @ w - y) ** 2).mean().backward()
            opt.step()
        assert w.is_cuda == (dev == "cuda")
        finals.append(w.detach().cpu().numpy())
    np.testing.assert_allclose(finals[0], finals[1], rtol=1e-12)


# --- without a device ------------------------------------------------------------------------------


def test_device_objects_follow_pytorch():
    assert ngrad.device("cuda") == ngrad.device("cuda:0") == "cuda:0"
    assert repr(ngrad.device("cuda", 0)) == "device(type='cuda', index=0)" and str(ngrad.device("cuda")) == "cuda"
    assert ngrad.device("cpu") != ngrad.device("cuda")
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda device type"):
        ngrad.device("tpu")
    assert ngrad.tensor([1.0]).device == "cpu" and not ngrad.tensor([1.0]).is_cuda


@pytest.mark.skipif(HAVE_CUDA, reason="CUDA is available here")
def test_without_cuda_the_reason_is_given():
    reason = ngrad.cuda.unavailable_reason()
    assert isinstance(reason, str) and reason
    with pytest.raises(RuntimeError, match="CUDA is not available: " + reason[:20].replace("(", r"\(")):
        ngrad.zeros(2, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        ngrad.tensor([1.0]).cuda()


def test_cuda_kernel_text_is_readable_and_size_free():
    b = ngrad.engine.ir.tape.Builder()
    x = b.input((64, 3), "f32")
    y = x.exp() * x
    tape = b.finish([y.sum(axes=(1,), keepdim=False), y.sum(axes=(0, 1), keepdim=False)])
    kernels = [k for k in fuse(tape, "cuda").steps if isinstance(k, Kernel)]
    assert len(kernels) == 1  # one loop: the partial and the full sum are both its epilogues
    text = cuda_source(kernels[0], tape).text
    assert "cuda.grid(1)" in text and "while e < n:" in text and "cuda.atomic.add" in text
    assert "# %1 = exp(%0)" in text and "cuda.shared.array(BLOCK, np.float32)" in text
    assert "64" not in text  # sizes are arguments: one kernel for every batch size


def test_cuda_sin_and_cos_of_one_value_share_sincos():
    b = ngrad.engine.ir.tape.Builder()
    x = b.input((8,), "f32")
    tape = b.finish([x.sin() * x.cos() + x.exp().sin()])
    kernels = [k for k in fuse(tape, "cuda").steps if isinstance(k, Kernel)]
    text = cuda_source(kernels[0], tape).text
    assert text.count("libdevice.sincosf(") == 1 and text.count("math.sin(") == 1  # sin(exp x) alone
    assert "math.cos(" not in text and "# %2 = cos(%0): v2 was made with it" in text


def _ptx_or_skip():
    from ngrad.engine.targets.cuda import cuda_ptx, cuda_status

    if "numba-cuda" in (cuda_status()[1] or "") and not cuda_status()[0]:
        pytest.skip("numba-cuda is not installed (pip install 'ngrad[cuda]')")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("PTX needs NVVM, which the simulator replaces")
    return cuda_ptx


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ptx_type_checks_every_primitive_kernel(dtype, rng):
    _ptx_or_skip()
    for name in sorted(test_prims.CASES):
        tape, _ = prim_joint(name, dtype, rng)
        for _text, ptx in engine_cuda.ptx(tape):
            assert ".entry" in ptx and ".visible" in ptx


def test_kernels_compile_where_numpy_has_no_row_stack():
    """NumPy 2.5 removed ``np.row_stack``, which numba-cuda 0.30 still registers an overload for
    when its target first compiles; kernels must compile anyway and NumPy must stay as it was.
    Run in a child process whose NumPy lacks the alias, as NumPy 2.5's does."""
    _ptx_or_skip()
    code = (
        "import numpy as np\n"
        "if hasattr(np, 'row_stack'):\n"
        "    del np.row_stack; np.__all__.remove('row_stack')\n"
        "from ngrad.engine.backend.cuda_source import cuda_fill_source\n"
        "from ngrad.engine.targets.cuda import cuda_ptx\n"
        "assert '.entry' in cuda_ptx(cuda_fill_source(), 'void(int64, float64[::1], float64)')\n"
        "assert not hasattr(np, 'row_stack')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("prim", ["floordiv", "remainder", "fmod"])
def test_ptx_type_checks_integer_division(prim):
    # integer operands only (never differentiated, so not in the primitive corpus)
    _ptx_or_skip()
    x, y = np.array([7, -7, 9]), np.array([2, 2, -4])
    tape, _ = prim_tape(prim, [x, y], {})
    assert all(".entry" in text for _, text in engine_cuda.ptx(tape))


def test_ptx_type_checks_the_op_corpus_and_fixed_kernels(rng):
    cuda_ptx = _ptx_or_skip()
    for name in sorted(test_ops.CASES):
        tape, _ = corpus_joint(name, rng)
        for _text, ptx in engine_cuda.ptx(tape):
            assert ".entry" in ptx
    for dt, nb in (("f64", "float64"), ("f32", "float32")):
        assert ".entry" in cuda_ptx(
            cuda_matmul_source(dt), f"void(int64, int64, int64, {nb}[:, :, ::1], {nb}[:, :, ::1], {nb}[:, :, ::1])"
        )
        assert ".entry" in cuda_ptx(cuda_fill_source(), f"void(int64, {nb}[::1], {nb})")


@pytest.mark.skipif(
    HAVE_CUDA and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="a real GPU runs the device tests directly"
)
def test_simulator_runs_the_device_tests(tmp_path):
    run_device_tests_simulated(__file__, tmp_path)
