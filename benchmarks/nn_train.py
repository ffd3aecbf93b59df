"""ngrad.nn training-step benchmarks, against PyTorch eager in the same run.

* ``mlp``: one training step (forward, cross entropy, backward, Adam step) of a 784-256-10
  ReLU MLP, float32, batch 128.
* ``cnn``: the same step for a small Conv2d network, float32, batch 32 of 3x28x28 images:
  Conv2d(3, 16, 3, padding=1), ReLU, MaxPool2d(2), Conv2d(16, 32, 3, padding=1), ReLU,
  MaxPool2d(2), Flatten, Linear(1568, 10).
* ``calls``: Module call overhead per layer: a Sequential of 20 Identity layers and one of 20
  Linear(4, 4) layers on a (1, 4) input, in microseconds per layer (ngrad's call records the
  operations; "+ result" also computes the output, as PyTorch's call does).
* ``conv``: why convolution runs as im2col and one matrix product: the forward of each layer
  of ``cnn`` as im2col (strided slices, then one BLAS product, in NumPy) against a direct
  fused loop compiled by Numba (``--no-conv`` skips it).

Each ngrad network starts from the PyTorch network's weights (load_state_dict), and the first
losses are checked to agree before any time is taken. ngrad runs eagerly (recording every call)
and as ``ngrad.compile(step)`` (the step traced once, replayed as one program). Times are
the best and the median of rounds in which every system runs once in turn, after warm-up.

Run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/nn_train.py
"""

import os

# PyTorch and ngrad's MKL each run their threads on their own OpenMP runtime; by default an
# idle OpenMP thread spins, so on a 2-core machine the threads one system left spinning took
# the cores from the other's next call (PyTorch's CNN step measured 14 to 295 ms from run to
# run). Sleeping idle threads make every system's times repeatable; set before either loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import ngrad  # noqa: E402


def _interleaved_ms(fns, rounds=15, warmup=3):
    """``{name: (best, median)}`` ms of each function, called in turn round after round so
    that a busy machine slows every system alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    runs = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            runs[name].append(time.perf_counter() - t)
    return {name: (min(r) * 1e3, statistics.median(r) * 1e3) for name, r in runs.items()}


def mlp(nn):
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn(nn):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 7 * 7, 10),
    )


def bench_step(torch, make, x_shape, batch):
    """Median ms of one training step: PyTorch eager, ngrad eager, ngrad.compile."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, *x_shape)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    t_net = make(torch.nn)
    state = {k: v.detach().numpy().copy() for k, v in t_net.state_dict().items()}
    t_opt = torch.optim.Adam(t_net.parameters(), lr=1e-3)
    tx, ty = torch.tensor(x), torch.tensor(y)

    def t_step():
        t_opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(t_net(tx), ty)
        loss.backward()
        t_opt.step()
        return loss.item()

    first = {"PyTorch eager": t_step()}
    steps = {"PyTorch eager": t_step}
    nx, ny = ngrad.tensor(x), ngrad.tensor(y)
    for compiled in (False, True):
        net = make(ngrad.nn)
        net.load_state_dict({k: ngrad.tensor(v) for k, v in state.items()})
        opt = ngrad.optim.Adam(net.parameters(), lr=1e-3)

        def step(x, y, net=net, opt=opt):
            opt.zero_grad()
            loss = ngrad.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            return loss

        run = ngrad.compile(step) if compiled else step
        name = "ngrad.compile" if compiled else "ngrad eager"
        first[name] = run(nx, ny).item()
        steps[name] = lambda run=run: run(nx, ny).item()
    for name, loss in first.items():
        assert abs(loss - first["PyTorch eager"]) < 1e-4 * abs(loss) + 1e-5, (name, loss, first)
    return _interleaved_ms(steps)


def bench_calls(torch):
    """Best microseconds per layer of a 20-layer Sequential's call, without gradients."""
    out = {}
    layers = {"Identity": lambda nn: nn.Identity(), "Linear(4, 4)": lambda nn: nn.Linear(4, 4)}
    for kind, make in layers.items():
        t_net, n_net = (lib.nn.Sequential(*[make(lib.nn) for _ in range(20)]) for lib in (torch, ngrad))
        tx, nx = torch.ones(1, 4), ngrad.ones(1, 4)
        with torch.no_grad(), ngrad.no_grad():
            times = _interleaved_ms(
                {"torch": lambda: t_net(tx), "ngrad": lambda: n_net(nx), "ngrad + result": lambda: n_net(nx).numpy()},
                rounds=300,
            )
        out[kind] = {name: best * 1e3 / 20 for name, (best, _) in times.items()}
    return out


def bench_conv_choice():
    """Forward of each conv layer of ``cnn``: im2col + one BLAS product against a direct loop."""
    import numba

    from ngrad.engine.ir import blas

    @numba.njit(fastmath={"reassoc", "contract"}, error_model="numpy")
    def direct(x, w, out):  # stride 1, zero padding 1, as the benchmark's layers
        n_, c_, h_, w_ = x.shape
        o_, kh, kw = w.shape[0], w.shape[2], w.shape[3]
        out[:] = 0.0
        for n in range(n_):
            for o in range(o_):
                for c in range(c_):
                    for a in range(kh):
                        for b in range(kw):
                            wv = w[o, c, a, b]
                            for i in range(max(0, 1 - a), min(h_, h_ + 1 - a)):
                                for j in range(max(0, 1 - b), min(w_, w_ + 1 - b)):
                                    out[n, o, i, j] += wv * x[n, c, i + a - 1, j + b - 1]
        return out

    def im2col(x, w):
        n, c, h, wd = x.shape
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).transpose(1, 0, 2, 3)
        cols = np.stack([xp[:, :, a : a + h, b : b + wd] for a in range(3) for b in range(3)], 1)
        out = blas.matmul(w.reshape(w.shape[0], c * 9), cols.reshape(c * 9, n * h * wd))
        return out.reshape(w.shape[0], n, h, wd).transpose(1, 0, 2, 3)

    rng = np.random.default_rng(0)
    out = {}
    for n, c, o, size in [(32, 3, 16, 28), (32, 16, 32, 14)]:
        x = rng.standard_normal((n, c, size, size)).astype(np.float32)
        w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
        buf = np.empty((n, o, size, size), np.float32)
        np.testing.assert_allclose(direct(x, w, buf), im2col(x, w), rtol=1e-3, atol=1e-3)
        times = _interleaved_ms({"im2col": lambda x=x, w=w: im2col(x, w), "direct": lambda: direct(x, w, buf)})
        out[(n, c, o, size)] = (times["im2col"][0], times["direct"][0])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-conv", action="store_true", help="skip the im2col against direct-loop comparison")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(2)
    print(f"ngrad {ngrad.__version__}, PyTorch {torch.__version__}, NumPy {np.__version__}, float32")
    print("\nTraining steps: best (median) of 15 rounds, each system once a round; ratios of the best")
    print(
        "\n| step | PyTorch eager (ms) | ngrad eager (ms) | ngrad.compile (ms) | eager / PyTorch | compile / PyTorch |"
    )
    print("|---|---|---|---|---|---|")
    for name, make, shape, batch in (
        ("mlp 784-256-10, batch 128", mlp, (784,), 128),
        ("cnn 3-16-32, batch 32", cnn, (3, 28, 28), 32),
    ):
        t = bench_step(torch, make, shape, batch)
        (pt, ptm), (eager, eagerm), (comp, compm) = t["PyTorch eager"], t["ngrad eager"], t["ngrad.compile"]
        print(
            f"| {name} | {pt:.2f} ({ptm:.2f}) | {eager:.2f} ({eagerm:.2f}) | {comp:.2f} ({compm:.2f}) | "
            f"{eager / pt:.2f}x | {comp / pt:.2f}x |"
        )
    print("\nModule calls, no_grad, best of 300 rounds")
    print("\n| Sequential of 20 | PyTorch call (us/layer) | ngrad call (us/layer) | ngrad call + result (us/layer) |")
    print("|---|---|---|---|")
    calls = bench_calls(torch)
    for kind, row in calls.items():
        print(f"| {kind} | " + " | ".join(f"{row[k]:.2f}" for k in ("torch", "ngrad", "ngrad + result")) + " |")
    if not args.no_conv:
        print("\n| conv forward (N, C_in, C_out, HxW), 3x3, best of 15 | im2col + BLAS (ms) | direct Numba loop (ms) |")
        print("|---|---|---|")
        for (n, c, o, size), (cols, loop) in bench_conv_choice().items():
            print(f"| ({n}, {c}, {o}, {size}x{size}) | {cols:.2f} | {loop:.2f} |")


if __name__ == "__main__":
    main()
