"""Optimizer-loop benchmarks: the cost of one call when the same graph runs thousands of times.

* ``rosenbrock-100``: value and gradient of Rosenbrock, N=100, float64, per call. ngrad:
  ``ngrad.compile(ngrad.func.value_and_grad(f))``; also ngrad eager (recording every call).
* ``mlp-step``: one training step of a 784-256-10 tanh MLP, float32, batch 128, softmax cross
  entropy, SGD (ngrad: forward, backward and ``opt.step()`` in one compiled call).
* ``adam-1e5``: 1,000 Adam steps on a 1e5-parameter (diagonal) least-squares problem, float64.

Peers in the same run: PyTorch eager (its optimizers) and JAX jit (value_and_grad plus the
update in one jitted function) when installed. Times are medians over repeats after warm-up;
"first" is the first call (tracing and compiling, or loading kernels from the disk cache).

Run: python benchmarks/loops.py [--threads N]
"""

import argparse
import statistics
import time

import numpy as np

import ngrad


def _time(fn, repeat, number):
    first = time.perf_counter()
    fn()
    first = time.perf_counter() - first
    for _ in range(3):
        fn()
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - t) / number)
    return statistics.median(runs), first


def _try(name):
    try:
        return __import__(name)
    except ImportError:
        return None


def rosen(lib, x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def bench_rosenbrock(torch, jax):
    x0 = np.linspace(-1.5, 1.5, 100)
    out = {}
    vg = ngrad.compile(ngrad.func.value_and_grad(lambda x: rosen(ngrad, x)))
    xt = ngrad.tensor(x0)
    out["ngrad compile"] = _time(lambda: vg(xt), 7, 2000)
    want = vg(xt)[1].numpy()

    def eager():
        x = ngrad.tensor(x0, requires_grad=True)
        y = rosen(ngrad, x)
        y.backward()
        return y.item(), x.grad.numpy()

    out["ngrad eager"] = _time(eager, 5, 200)
    np.testing.assert_allclose(eager()[1], want, rtol=1e-12)
    if torch is not None:

        def teager():
            x = torch.tensor(x0, requires_grad=True)
            y = rosen(torch, x)
            y.backward()
            return y, x.grad

        out["torch eager"] = _time(teager, 7, 1000)
        np.testing.assert_allclose(teager()[1].numpy(), want, rtol=1e-12)
    if jax is not None:
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        f = jax.jit(jax.value_and_grad(lambda x: rosen(jnp, x)))
        xj = jnp.asarray(x0)
        out["jax jit"] = _time(lambda: jax.block_until_ready(f(xj)), 7, 2000)
        np.testing.assert_allclose(np.asarray(f(xj)[1]), want, rtol=1e-12)
    return out


def bench_mlp(torch, jax, rng):
    b, n_in, n_h, n_out, lr = 128, 784, 256, 10, 0.01
    x = rng.standard_normal((b, n_in)).astype(np.float32)
    labels = np.eye(n_out, dtype=np.float32)[rng.integers(0, n_out, b)]
    w1 = (rng.standard_normal((n_in, n_h)) / np.sqrt(n_in)).astype(np.float32)
    w2 = (rng.standard_normal((n_h, n_out)) / np.sqrt(n_h)).astype(np.float32)
    out = {}

    def loss_of(lib, xs, ys, p):
        logits = (xs @ p[0] + p[1]).tanh() @ p[2] + p[3]
        return -(ys * logits.log_softmax(1)).sum() / b

    def params(lib):
        t = [
            lib.tensor(w1),
            lib.tensor(np.zeros(n_h, np.float32)),
            lib.tensor(w2),
            lib.tensor(np.zeros(n_out, np.float32)),
        ]
        return [p.requires_grad_() for p in t]

    ps = params(ngrad)
    opt = ngrad.optim.SGD(ps, lr=lr)
    xt, yt = ngrad.tensor(x), ngrad.tensor(labels)

    @ngrad.compile
    def step(xs, ys):
        opt.zero_grad()
        loss = loss_of(ngrad, xs, ys, ps)
        loss.backward()
        opt.step()
        return loss

    out["ngrad compile"] = _time(lambda: step(xt, yt), 5, 50)
    if torch is not None:
        tp = params(torch)
        topt = torch.optim.SGD(tp, lr=lr)
        txs, tys = torch.tensor(x), torch.tensor(labels)

        def tstep():
            topt.zero_grad()
            loss = loss_of(torch, txs, tys, tp)
            loss.backward()
            topt.step()
            return loss

        out["torch eager"] = _time(tstep, 5, 50)
    if jax is not None:
        import jax.numpy as jnp

        def jloss(p, xs, ys):
            logits = jnp.tanh(xs @ p[0] + p[1]) @ p[2] + p[3]
            return -(ys * jax.nn.log_softmax(logits, 1)).sum() / b

        @jax.jit
        def jstep(p, xs, ys):
            loss, g = jax.value_and_grad(jloss)(p, xs, ys)
            return [a - lr * d for a, d in zip(p, g)], loss

        state = [[jnp.asarray(w1), jnp.zeros(n_h, jnp.float32), jnp.asarray(w2), jnp.zeros(n_out, jnp.float32)]]
        xj, yj = jnp.asarray(x), jnp.asarray(labels)

        def run():
            state[0], loss = jstep(state[0], xj, yj)
            jax.block_until_ready(loss)

        out["jax jit"] = _time(run, 5, 50)
    return out


def bench_adam(torch, jax, rng, n=100_000, steps=1000):
    a = rng.uniform(0.5, 2, n)
    y = rng.standard_normal(n)
    out = {}

    def ngrad_run():
        w = ngrad.zeros(n, dtype=ngrad.float64, requires_grad=True)
        at, yt = ngrad.tensor(a), ngrad.tensor(y)
        opt = ngrad.optim.Adam([w], lr=1e-2)

        @ngrad.compile
        def step():
            opt.zero_grad()
            loss = ((w * at - yt) ** 2).sum()
            loss.backward()
            opt.step()

        for _ in range(steps):
            step()
        return w.detach().numpy()

    out["ngrad compile"] = _time(ngrad_run, 3, 1)
    want = ngrad_run()
    if torch is not None:

        def torch_run():
            w = torch.zeros(n, dtype=torch.float64, requires_grad=True)
            at, yt = torch.tensor(a), torch.tensor(y)
            opt = torch.optim.Adam([w], lr=1e-2)
            for _ in range(steps):
                opt.zero_grad()
                ((w * at - yt) ** 2).sum().backward()
                opt.step()
            return w.detach().numpy()

        out["torch eager"] = _time(torch_run, 3, 1)
        np.testing.assert_allclose(torch_run(), want, rtol=1e-7, atol=1e-9)
    if jax is not None:
        import jax.numpy as jnp

        @jax.jit
        def jstep(w, m, v, t, aj, yj):
            g = jax.grad(lambda w: ((w * aj - yj) ** 2).sum())(w)
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            w = w - 1e-2 / (1 - 0.9**t) * m / (jnp.sqrt(v) / jnp.sqrt(1 - 0.999**t) + 1e-8)
            return w, m, v

        def jax_run():
            w = m = v = jnp.zeros(n)
            aj, yj = jnp.asarray(a), jnp.asarray(y)
            for t in range(1, steps + 1):
                w, m, v = jstep(w, m, v, float(t), aj, yj)
            return np.asarray(jax.block_until_ready(w))

        out["jax jit"] = _time(jax_run, 3, 1)
        np.testing.assert_allclose(jax_run(), want, rtol=1e-7, atol=1e-9)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    torch, jax = _try("torch"), _try("jax")
    threads = args.threads or ngrad.get_num_threads()
    ngrad.set_num_threads(threads)
    if torch is not None:
        torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    for name, res in [
        ("rosenbrock-100 value+grad per call", bench_rosenbrock(torch, jax)),
        ("mlp-step 784-256-10 f32 batch 128", bench_mlp(torch, jax, rng)),
        ("adam-1e5: 1000 steps", bench_adam(torch, jax, rng)),
    ]:
        base = res["ngrad compile"][0]
        print(f"\n{name}")
        for system, (median, first) in res.items():
            unit, scale = ("us", 1e6) if median < 1e-3 else ("ms", 1e3)
            print(
                f"  {system:14s} {median * scale:10.2f} {unit}   first {first * 1e3:9.1f} ms   "
                f"{median / base:6.2f}x ngrad compile's time"
            )


if __name__ == "__main__":
    main()
