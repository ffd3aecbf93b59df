"""ngrad.random and ngrad.sampling: PyTorch's CPU generator bit for bit.

Without PyTorch: the Mersenne Twister against its published outputs, the vectorised pieces
(Fisher-Yates, fused multiply-adds) against plain loops and exact rational arithmetic, the
distributions by Kolmogorov-Smirnov tests and moments at fixed seeds, states and errors.
With PyTorch: exact equality (``np.array_equal``) of every random function for a table of
shapes, dtypes and seeds, with generator objects and the global generator interleaved, then
nn.init, dropout, the samplers and a seeded script run under ``import ngrad as torch``.
"""

import math
from fractions import Fraction

import numpy as np
import pytest

import ngrad
import ngrad.nn.functional as F
from ngrad import sampling
from ngrad.utils.data import DataLoader, RandomSampler, SubsetRandomSampler, TensorDataset, random_split

# --- the generator, without PyTorch -----------------------------------------------------------


def test_mt19937_gives_the_published_outputs_of_its_reference_seed():
    g = ngrad.Generator().manual_seed(5489)  # std::mt19937's default seed
    words = g.random32(10000)
    assert words[:5].tolist() == [3499211612, 581869302, 3890346734, 3586334585, 545404204]
    assert int(words[-1]) == 4123659995  # the C++ standard's check of the 10000th output


def test_random64_puts_the_first_word_high():
    a = ngrad.Generator().manual_seed(3)
    b = ngrad.Generator().manual_seed(3)
    w = b.random32(4).astype(np.uint64)
    assert a.random64(2).tolist() == [int(w[0] << 32 | w[1]), int(w[2] << 32 | w[3])]


def test_seeds_are_read_as_pytorch_reads_them():
    g = ngrad.Generator()
    assert g.initial_seed() == 67280421310721  # a new torch.Generator's seed
    assert g.manual_seed(-1).initial_seed() == 2**64 - 1
    # only the low 32 bits reach the twister; the state keeps all 64
    assert np.array_equal(g.manual_seed(2**32 + 7).random32(3), ngrad.Generator().manual_seed(7).random32(3))
    with pytest.raises(ValueError, match="Overflow when unpacking long"):
        ngrad.manual_seed(2**64)
    with pytest.raises(TypeError):
        ngrad.manual_seed("a")


def test_state_round_trips_and_restores_the_cached_normal():
    g = ngrad.Generator().manual_seed(11)
    ngrad.randn(3, dtype=ngrad.float64, generator=g)  # leaves a cached second normal
    state = g.get_state()
    assert state.shape == (5056,) and state.dtype == ngrad.int64
    a = [ngrad.randn(1, dtype=ngrad.float64, generator=g), ngrad.rand(700, generator=g), ngrad.randn(5, generator=g)]
    g.set_state(state)
    b = [ngrad.randn(1, dtype=ngrad.float64, generator=g), ngrad.rand(700, generator=g), ngrad.randn(5, generator=g)]
    assert all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a, b))
    # a fresh seed's state (next=0) and one 624 words later (next=624) both read back exactly
    for draws in (0, 624, 1000):
        g.manual_seed(4)
        g.random32(draws)
        assert ngrad.Generator().set_state(g.get_state()).state_bytes() == g.state_bytes()


def test_bad_states_are_refused():
    with pytest.raises(RuntimeError, match="Expected a CPUGeneratorImplState of size 5056"):
        ngrad.set_rng_state(ngrad.zeros(10, dtype=ngrad.int64))
    raw = bytearray(ngrad.Generator().state_bytes())
    raw[8:12] = (700).to_bytes(4, "little")  # left past 624
    with pytest.raises(RuntimeError, match="Invalid mt19937 state"):
        ngrad.Generator().set_state(bytes(raw))
    with pytest.raises(TypeError, match="generator"):
        ngrad.rand(2, generator=np.random.default_rng(0))


def test_global_functions_act_on_the_default_generator():
    ngrad.manual_seed(21)
    assert ngrad.initial_seed() == 21 and ngrad.random.initial_seed() == 21
    state = ngrad.get_rng_state()
    a = ngrad.rand(4)
    ngrad.set_rng_state(state)
    assert np.array_equal(a.numpy(), ngrad.rand(4).numpy())
    s = ngrad.seed()
    assert ngrad.initial_seed() == s
    with ngrad.random.fork_rng():
        ngrad.randn(100)
    after = ngrad.rand(3)
    ngrad.manual_seed(s)
    assert np.array_equal(after.numpy(), ngrad.rand(3).numpy())


def test_generators_are_independent_of_each_other_and_of_the_default():
    ngrad.manual_seed(0)
    g = ngrad.Generator().manual_seed(0)
    a = ngrad.rand(5, generator=g)
    b = ngrad.rand(5)
    assert np.array_equal(a.numpy(), b.numpy())
    ngrad.rand(100)  # the default generator moves on; g does not
    twin = ngrad.Generator().manual_seed(0)
    ngrad.rand(5, generator=twin)
    assert np.array_equal(ngrad.rand(5, generator=g).numpy(), ngrad.rand(5, generator=twin).numpy())


# --- the vectorised pieces against plain loops and exact arithmetic ---------------------------


def _fisher_yates_loop(z):
    a = list(range(len(z) + 1))
    for i, step in enumerate(z):
        j = i + int(step)
        a[i], a[j] = a[j], a[i]
    return a


@pytest.mark.parametrize("n", [2, 3, 5, 17, 200])
def test_vectorised_fisher_yates_equals_the_swap_loop(n):
    rng = np.random.default_rng(n)
    for _ in range(40):
        z = np.array([rng.integers(0, n - i) for i in range(n - 1)])
        assert sampling._fisher_yates(z).tolist() == _fisher_yates_loop(z)


def _round32(exact):
    x = np.float32(float(exact))
    near = [np.nextafter(x, np.float32(-np.inf)), x, np.nextafter(x, np.float32(np.inf))]
    return min(near, key=lambda v: (abs(Fraction(float(v)) - exact), int(v.view(np.uint32)) & 1))


def test_fused_multiply_adds_round_once():
    rng = np.random.default_rng(0)
    n = 400
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    c = (rng.standard_normal(n) * 10.0 ** rng.integers(-12, 12, n)).astype(np.float32)
    # sums that a float64 addition rounds onto a float32 halfway point
    a2 = np.float32(1) + np.float32(2**-23) * rng.integers(0, 1024, n).astype(np.float32)
    tiny = np.full(n, np.float32(2**-60)) * np.sign(rng.standard_normal(n)).astype(np.float32)
    for x, y, z in ((a, b, c), (a2, a2, tiny)):
        got = sampling.fma32(x, y, z)
        want = [_round32(Fraction(float(u)) * Fraction(float(v)) + Fraction(float(w))) for u, v, w in zip(x, y, z)]
        assert np.array_equal(got, np.array(want, np.float32))
    u, v, w = rng.standard_normal((3, n))
    got = sampling.fma64(u, v, w)
    want = [float(Fraction(float(s)) * Fraction(float(t)) + Fraction(float(r))) for s, t, r in zip(u, v, w)]
    assert np.array_equal(got, np.array(want))


def test_avx_log_and_sincos_are_accurate_float32():
    x = np.linspace(2**-24, 1, 100001, dtype=np.float32)
    assert np.max(np.abs(sampling._log_avx(x) - np.log(x.astype(np.float64)))) < 1e-6
    t = np.linspace(0, 2 * math.pi, 100001, dtype=np.float32)
    s, c = sampling._sincos_avx(t)
    assert np.max(np.abs(s - np.sin(t.astype(np.float64)))) < 3e-7
    assert np.max(np.abs(c - np.cos(t.astype(np.float64)))) < 3e-7


# --- distributions and reproducibility, without PyTorch ---------------------------------------


@pytest.mark.parametrize("dtype", [ngrad.float32, ngrad.float64])
@pytest.mark.parametrize("n", [15, 4000])  # the scalar and the 16-wide normal paths
def test_uniform_and_normal_pass_kolmogorov_smirnov(dtype, n):
    stats = pytest.importorskip("scipy.stats")
    g = ngrad.Generator().manual_seed(1234)
    draws = 40 if n == 15 else 1
    u = np.concatenate([ngrad.rand(n, dtype=dtype, generator=g).numpy() for _ in range(draws)])
    z = np.concatenate([ngrad.randn(n, dtype=dtype, generator=g).numpy() for _ in range(draws)])
    w = ngrad.empty(n, dtype=dtype).uniform_(-2.0, 3.0, generator=g).numpy()
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert stats.kstest(w, "uniform", args=(-2.0, 5.0)).pvalue > 1e-3
    m = ngrad.empty(n, dtype=dtype).normal_(3.0, 0.5, generator=g).numpy()
    assert stats.kstest(m, "norm", args=(3.0, 0.5)).pvalue > 1e-3


def test_init_fills_have_their_distributions():
    t = ngrad.nn.init.trunc_normal_(ngrad.empty(20000), std=2.0, a=-1.0, b=3.0).numpy()
    assert t.min() >= -1.0 and t.max() <= 3.0 and len(np.unique(t)) > 0.99 * t.size
    tail = ngrad.nn.init.trunc_normal_(ngrad.empty(20000, dtype=ngrad.float64), a=2.0, b=3.0).numpy()
    stats = pytest.importorskip("scipy.stats")
    assert stats.kstest(tail, stats.truncnorm(2.0, 3.0).cdf).pvalue > 1e-3
    q = ngrad.nn.init.orthogonal_(ngrad.empty(6, 9)).numpy()
    assert np.allclose(q @ q.T, np.eye(6), atol=1e-5)


def test_moments_of_exponential_bernoulli_and_integers():
    g = ngrad.Generator().manual_seed(99)
    e = ngrad.empty(200000, dtype=ngrad.float64).exponential_(2.0, generator=g).numpy()
    assert abs(e.mean() - 0.5) < 0.005 and abs(e.var() - 0.25) < 0.01 and e.min() >= 0
    b = ngrad.empty(200000).bernoulli_(0.3, generator=g).numpy()
    assert set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.3) < 0.005
    p = ngrad.tensor([0.0, 0.25, 1.0]).expand(50000, 3)
    drawn = ngrad.bernoulli(p, generator=g).numpy()
    assert drawn[:, 0].sum() == 0 and drawn[:, 2].all() and abs(drawn[:, 1].mean() - 0.25) < 0.01
    r = ngrad.randint(-3, 4, (70000,), generator=g).numpy()
    counts = np.bincount(r + 3, minlength=7)
    assert r.min() == -3 and r.max() == 3 and np.all(np.abs(counts / 10000 - 1) < 0.05)
    big = ngrad.randint(0, 2**40, (10000,), generator=g).numpy()  # the 64-bit reduction
    assert big.max() > 2**39 and big.min() >= 0
    assert sorted(ngrad.randperm(1000, generator=g).tolist()) == list(range(1000))


def test_same_seed_same_numbers_and_draws_interleave():
    def run():
        ngrad.manual_seed(5)
        out = [ngrad.rand(3, 4), ngrad.randn(17), ngrad.randint(10, (6,)), ngrad.randperm(9)]
        out += [ngrad.randn(2, dtype=ngrad.float64), ngrad.empty(20).normal_(), ngrad.rand_like(ngrad.ones(2, 2))]
        out += [ngrad.randn_like(ngrad.ones(3)), ngrad.randint_like(ngrad.ones(4), 3, 8), ngrad.normal(1.0, 2.0, (3,))]
        return [t.numpy() for t in out]

    a, b = run(), run()
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0][0, :3], a[0][1, :3])


def test_random_fills_check_their_arguments_as_pytorch():
    x = ngrad.empty(3)
    with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range, but found from=2 > to=1"):
        x.uniform_(2, 1)
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0, but found std -1"):
        x.normal_(0, -1)
    with pytest.raises(RuntimeError, match=r"bernoulli_ expects p to be in \[0, 1\], but got p=1.5"):
        x.bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="exponential_ expects lambda > 0.0, but found lambda=-1"):
        x.exponential_(-1)
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        x.random_(5, 2)
    with pytest.raises(NotImplementedError, match="normal_kernel_cpu"):
        ngrad.empty(2, dtype=ngrad.int64).normal_()
    leaf = ngrad.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf.uniform_()
    with ngrad.no_grad():
        leaf.uniform_()
    assert leaf.requires_grad and bool((leaf != 0).any())


def test_random_draws_are_refused_while_compiling():
    @ngrad.compile
    def f(x):
        return x + ngrad.rand(3)

    with pytest.raises(ngrad.TraceError, match="random"):
        f(ngrad.ones(3))


# --- exact equality with PyTorch ---------------------------------------------------------------

SHAPES = [(0,), (1,), (15,), (16,), (17,), (1000,), (3, 7), (40, 25)]
SEEDS = [0, 1, 2**33 + 5]
DTYPES = ["float32", "float64"]


def _calls(lib, shape, dtype, gen):
    """One call of each random function, written once for both libraries."""
    dt = getattr(lib, dtype)
    return [
        lambda: lib.rand(*shape, dtype=dt, generator=gen),
        lambda: lib.randn(*shape, dtype=dt, generator=gen),
        lambda: lib.randint(-4, 9, shape, generator=gen),
        lambda: lib.randint(2**40, shape, generator=gen),
        lambda: lib.randint(0, 5, shape, dtype=lib.int32, generator=gen),
        lambda: lib.randperm(shape[-1], generator=gen),
        lambda: lib.empty(*shape, dtype=dt).uniform_(-0.37, 1.3, generator=gen),
        lambda: lib.empty(*shape, dtype=dt).normal_(0.3, 2.5, generator=gen),
        lambda: lib.empty(*shape, dtype=dt).bernoulli_(0.3, generator=gen),
        lambda: lib.empty(*shape, dtype=dt).exponential_(1.7, generator=gen),
        lambda: lib.empty(*shape, dtype=dt).random_(generator=gen),
        lambda: lib.empty(*shape, dtype=lib.int64).random_(generator=gen),
        lambda: lib.empty(*shape, dtype=dt).random_(3, 11, generator=gen),
        lambda: lib.bernoulli(lib.full(shape, 0.4, dtype=dt), generator=gen),
        lambda: lib.normal(lib.zeros(*shape, dtype=dt), lib.ones(*shape, dtype=dt) * 2, generator=gen),
        lambda: lib.normal(1.5, lib.ones(*shape, dtype=dt) * 0.5, generator=gen),
        lambda: lib.normal(-1.0, 3.0, shape, generator=gen, dtype=dt),
        lambda: lib.rand_like(lib.ones(*shape, dtype=dt), generator=gen),
        lambda: lib.randn_like(lib.ones(*shape, dtype=dt), generator=gen),
        lambda: lib.randint_like(lib.ones(*shape, dtype=dt), 2, 30, generator=gen),
    ]


def _same(a, b):
    return a.dtype.itemsize == b.dtype.itemsize and np.array_equal(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_random_function_equals_torch(shape, dtype):
    torch = pytest.importorskip("torch")
    for seed in SEEDS:
        for use_generator in (False, True):
            ngrad.manual_seed(seed)
            torch.manual_seed(seed)
            g = ngrad.Generator().manual_seed(seed + 1) if use_generator else None
            tg = torch.Generator().manual_seed(seed + 1) if use_generator else None
            for i, (ours, theirs) in enumerate(zip(_calls(ngrad, shape, dtype, g), _calls(torch, shape, dtype, tg))):
                a, b = ours().numpy(), theirs().numpy()
                assert _same(a, b), (seed, use_generator, i)
                # the global generator and the object interleave: draw from the other one too
                assert _same(ngrad.rand(3).numpy(), torch.rand(3).numpy()), (seed, i)
            assert ngrad.get_rng_state().numpy().astype(np.uint8).tobytes() == torch.get_rng_state().numpy().tobytes()
            if use_generator:
                assert g.state_bytes() == tg.get_state().numpy().tobytes()


def test_strided_fills_follow_memory_order_as_torch():
    torch = pytest.importorskip("torch")
    ngrad.manual_seed(8)
    torch.manual_seed(8)
    for shape in ((3, 4), (5, 20), (2, 3, 9)):
        for name, args in (("uniform_", (-1.0, 2.0)), ("normal_", (0.5, 2.0)), ("bernoulli_", (0.6,))):
            a = getattr(ngrad.empty(*shape).transpose(0, -1), name)(*args)
            b = getattr(torch.empty(*shape).transpose(0, -1), name)(*args)
            assert np.array_equal(a.numpy(), b.numpy()), (shape, name)


def test_states_move_between_torch_and_ngrad():
    torch = pytest.importorskip("torch")
    torch.manual_seed(77)
    torch.randn(5, dtype=torch.float64)  # a cached normal in the state
    torch.rand(1000)
    ngrad.set_rng_state(torch.get_rng_state())
    assert np.array_equal(ngrad.randn(3, dtype=ngrad.float64).numpy(), torch.randn(3, dtype=torch.float64).numpy())
    torch.set_rng_state(torch.tensor(ngrad.get_rng_state().numpy().astype(np.uint8)))
    assert np.array_equal(ngrad.randn(40).numpy(), torch.randn(40).numpy())


def test_init_functions_and_default_initialisations_equal_torch():
    torch = pytest.importorskip("torch")
    ngrad.manual_seed(3)
    torch.manual_seed(3)
    for shape in ((5, 7), (16, 3, 3, 3), (1000, 20)):
        for name, kwargs in (
            ("uniform_", {"a": -0.2, "b": 0.7}),
            ("normal_", {"mean": 0.1, "std": 0.3}),
            ("xavier_uniform_", {"gain": 1.7}),
            ("xavier_normal_", {}),
            ("kaiming_uniform_", {"a": math.sqrt(5)}),
            ("kaiming_normal_", {"mode": "fan_out", "nonlinearity": "relu"}),
            ("trunc_normal_", {"mean": 0.2, "std": 1.5, "a": -1.0, "b": 2.5}),  # normals, redrawn
            ("trunc_normal_", {"a": 1.0, "b": 3.0}),  # uniforms, accepted by the density
        ):
            for dt in ("float32", "float64"):
                a = getattr(ngrad.nn.init, name)(ngrad.empty(*shape, dtype=getattr(ngrad, dt)), **kwargs)
                b = getattr(torch.nn.init, name)(torch.empty(*shape, dtype=getattr(torch, dt)), **kwargs)
                assert np.array_equal(a.numpy(), b.numpy()), (shape, name, dt)
    g, tg = ngrad.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    a = ngrad.nn.init.kaiming_uniform_(ngrad.empty(6, 4), generator=g)
    assert np.array_equal(a.numpy(), torch.nn.init.kaiming_uniform_(torch.empty(6, 4), generator=tg).numpy())
    layers = [("Linear", (13, 6)), ("Bilinear", (3, 4, 5)), ("Embedding", (9, 4)), ("LayerNorm", (4,))]
    # the layers other parts of ngrad.nn add (they initialise through nn.init), where present
    more = [("Conv1d", (3, 4, 3)), ("Conv2d", (3, 4, (2, 3))), ("RNN", (5, 6)), ("LSTM", (5, 6, 2)), ("GRU", (5, 6))]
    layers += [(name, args) for name, args in more if hasattr(ngrad.nn, name)]
    for name, args in layers:
        ours, theirs = getattr(ngrad.nn, name)(*args), getattr(torch.nn, name)(*args)
        for (k, p), (k2, q) in zip(ours.named_parameters(), theirs.named_parameters()):
            assert k == k2 and np.array_equal(p.detach().numpy(), q.detach().numpy()), k
    # orthogonal_: PyTorch's normals, then QR by LAPACK in both, rounded differently
    a = ngrad.nn.init.orthogonal_(ngrad.empty(6, 9, dtype=ngrad.float64), gain=2.0).numpy()
    b = torch.nn.init.orthogonal_(torch.empty(6, 9, dtype=torch.float64), gain=2.0).numpy()
    assert np.allclose(a, b, rtol=0, atol=1e-12)
    assert np.array_equal(ngrad.rand(3).numpy(), torch.rand(3).numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_masks_equal_torch(dtype):
    torch = pytest.importorskip("torch")
    ngrad.manual_seed(6)
    torch.manual_seed(6)
    for shape, p in (((7,), 0.5), ((40, 13), 0.1), ((3, 5, 8), 0.9)):
        x = ngrad.randn(*shape, dtype=getattr(ngrad, dtype))
        y = torch.randn(*shape, dtype=getattr(torch, dtype))
        assert np.array_equal(F.dropout(x, p).numpy(), torch.nn.functional.dropout(y, p).numpy())
        a, b = ngrad.nn.Dropout(p), torch.nn.Dropout(p)
        assert np.array_equal(a(x).numpy(), b(y).numpy())
        a.eval()
        assert a(x) is x


def test_samplers_and_random_split_equal_torch():
    torch = pytest.importorskip("torch")
    data = ngrad.arange(23.0)
    ngrad.manual_seed(12)
    torch.manual_seed(12)
    for _ in range(2):  # two epochs: each draws a new permutation and a base seed
        ours = [b[0].tolist() for b in DataLoader(TensorDataset(data), batch_size=5, shuffle=True)]
        tdata = torch.utils.data.TensorDataset(torch.arange(23.0))
        theirs = [b[0].tolist() for b in torch.utils.data.DataLoader(tdata, batch_size=5, shuffle=True)]
        assert ours == theirs
    assert list(RandomSampler(range(10), replacement=True, num_samples=70)) == list(
        torch.utils.data.RandomSampler(range(10), replacement=True, num_samples=70)
    )
    g, tg = ngrad.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert list(SubsetRandomSampler([3, 5, 7, 9], generator=g)) == list(
        torch.utils.data.SubsetRandomSampler([3, 5, 7, 9], generator=tg)
    )
    loader = DataLoader(TensorDataset(data), batch_size=4, shuffle=True, generator=g)
    tdata = torch.utils.data.TensorDataset(torch.arange(23.0))
    tloader = torch.utils.data.DataLoader(tdata, batch_size=4, shuffle=True, generator=tg)
    assert [b[0].tolist() for b in loader] == [b[0].tolist() for b in tloader]
    splits = random_split(range(30), [0.5, 0.3, 0.2])
    tsplits = torch.utils.data.random_split(range(30), [0.5, 0.3, 0.2])
    assert [list(s) for s in splits] == [list(s) for s in tsplits]
    assert np.array_equal(ngrad.rand(4).numpy(), torch.rand(4).numpy())


SCRIPT = """
def script(torch):
    torch.manual_seed(2024)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Dropout(0.25), torch.nn.Linear(8, 1))
    x = torch.randn(32, 4)
    y = x.sum(1, keepdim=True) + 0.1 * torch.randn(32, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    record = [p.detach().clone() for p in model.parameters()]
    for _ in range(2):
        for xb, yb in loader:
            record += [xb, model[2](torch.ones(3, 8))]
            loss = ((model(xb) - yb) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            record.append(loss.detach())
    return [r.numpy() for r in record]
"""


def test_a_seeded_script_gives_torchs_numbers_under_import_ngrad_as_torch():
    torch = pytest.importorskip("torch")
    scope = {}
    exec(SCRIPT, scope)
    ours, theirs = scope["script"](ngrad), scope["script"](torch)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a.ndim == 0:  # losses: the same data, masks and weights; float32 arithmetic may differ
            assert np.allclose(a, b, rtol=1e-5), i
        else:  # initial weights, shuffled batches, dropout masks: drawn, so bit for bit
            assert np.array_equal(a, b), i


def test_draws_give_their_parameters_zero_gradients_as_in_pytorch():
    mean = ngrad.zeros(3, requires_grad=True)
    std = ngrad.ones(3, requires_grad=True)
    p = ngrad.full((3,), 0.5, requires_grad=True)
    out = ngrad.normal(mean, std).sum() + ngrad.bernoulli(p).sum() + ngrad.normal(mean, 2.0).sum()
    out.backward()
    assert mean.grad.tolist() == [0.0] * 3 and std.grad.tolist() == [0.0] * 3 and p.grad.tolist() == [0.0] * 3
    x = ngrad.ones(2, requires_grad=True)
    y = x * 2
    y.uniform_()
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0]
