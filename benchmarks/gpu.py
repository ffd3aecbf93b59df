"""The CUDA benchmark: the element-wise chain ``sum(sin(x)*exp(-x**2/2) + tanh(x)*x)``, value and
gradient, on the GPU: ngrad against PyTorch CUDA eager and torch.compile (when they work here),
steady state (median of calls each synchronised; and pipelined: calls back to back, one
synchronisation) and first call, with the memory bandwidth each achieves counting the minimum
traffic of value+gradient (read x once, write the gradient once), and ngrad's kernel alone.

Run: python benchmarks/gpu.py [--sizes 1e7,1e8] [--dtype float64] [--markdown RESULTS_PART.md]
"""

import argparse
import statistics
import time

import numpy as np

import ngrad


def _median_ms(fn, sync, repeat):
    times = []
    for _ in range(repeat):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), min(times)


def _pipelined_ms(fn, sync, repeat):
    """Time per call of ``repeat`` calls issued back to back with one synchronisation at the
    end, as a training loop runs them: the host work of a call overlaps the GPU work before it."""
    sync()
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync()
    return (time.perf_counter() - t) * 1e3 / repeat


def _first_ms(fn, sync):
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t) * 1e3


def ngrad_chain(data):
    x = ngrad.tensor(data, device="cuda", requires_grad=True)

    def step():
        x.grad = None
        loss = ((x.sin() * (-(x**2) / 2).exp()) + x.tanh() * x).sum()
        loss.backward()
        return loss, x.grad

    return step, lambda: ngrad.cuda.synchronize(), lambda: (step()[0].item(), step()[1].cpu().numpy())


def ngrad_kernel_ms(step, repeat=20):
    """The GPU time of ngrad's one value+gradient kernel alone: the step's last kernel launch,
    recorded and replayed back to back (no host work between launches)."""
    from ngrad.engine.targets import cuda as engine

    seen, launch = [], engine.CudaKernel.launch

    def record(self, n, args, grid=None, block=None):
        seen.append((self, n, args))
        return launch(self, n, args, grid, block)

    engine.CudaKernel.launch = record
    try:
        step()
    finally:
        engine.CudaKernel.launch = launch
    kern, n, args = seen[-1]
    ngrad.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(repeat):
        kern.launch(n, args)
    ngrad.cuda.synchronize()
    return (time.perf_counter() - t) / repeat * 1e3


def torch_chain(data, compiled):
    import torch

    x = torch.tensor(data, device="cuda", requires_grad=True)

    def f(x):
        return ((x.sin() * (-(x**2) / 2).exp()) + x.tanh() * x).sum()

    g = torch.compile(f) if compiled else f

    def step():
        x.grad = None
        loss = g(x)
        loss.backward()
        return loss, x.grad

    return step, torch.cuda.synchronize, lambda: (step()[0].item(), step()[1].cpu().numpy())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e7,1e8")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--markdown", default=None, help="append the table to this file")
    args = ap.parse_args(argv)
    if not ngrad.cuda.is_available():
        raise SystemExit(f"CUDA is not available: {ngrad.cuda.unavailable_reason()}")
    dtype = np.dtype(args.dtype)
    device = ngrad.cuda.get_device_name()
    peak = None
    try:
        import torch

        props = torch.cuda.get_device_properties(0)
        # theoretical DRAM bandwidth: 2 transfers per clock on a bus of memory_bus_width bits
        clock = getattr(props, "memory_clock_rate", None)
        width = getattr(props, "memory_bus_width", None)
        if clock and width:
            peak = 2 * clock * 1e3 * width / 8 / 1e9
    except Exception:
        torch = None
    lines = [
        f"### Element-wise chain, value + gradient, {args.dtype}, {device}",
        "",
        "| N | system | first call (ms) | median (ms) | GB/s | vs PyTorch eager | pipelined (ms) | GB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    kernels = []
    for n in [int(float(s)) for s in args.sizes.split(",")]:
        data = np.random.default_rng(0).standard_normal(n).astype(dtype)  # the same input for every system
        systems = {"ngrad": lambda: ngrad_chain(data)}
        if torch is not None:
            systems["PyTorch eager"] = lambda: torch_chain(data, False)
            systems["torch.compile"] = lambda: torch_chain(data, True)
        rows, ref = {}, None
        for name, make in systems.items():
            try:
                step, sync, check = make()
                first = _first_ms(step, sync)
                value, grad = check()
                if ref is None:
                    ref = (value, grad)
                else:  # every system must agree before its time is shown
                    np.testing.assert_allclose(value, ref[0], rtol=1e-6 if dtype == np.float64 else 1e-3)
                    np.testing.assert_allclose(grad, ref[1], rtol=1e-6, atol=1e-6 if dtype == np.float64 else 1e-4)
                med, best = _median_ms(step, sync, args.repeat)
                rows[name] = (first, med, _pipelined_ms(step, sync, args.repeat))
                if name == "ngrad":
                    kernel_ms = ngrad_kernel_ms(step)
            except Exception as e:  # torch.compile may lack a toolchain: report, do not stop
                rows[name] = None
                print(f"{name} at N={n}: {type(e).__name__}: {str(e)[:200]}")
        eager = rows.get("PyTorch eager")
        for name, r in rows.items():
            if r is None:
                lines.append(f"| {n:.0e} | {name} | failed | | | | | |")
                continue
            gbs, pgbs = (2 * n * dtype.itemsize / (t * 1e-3) / 1e9 for t in (r[1], r[2]))
            ratio = f"{eager[1] / r[1]:.2f}x" if eager else ""
            lines.append(
                f"| {n:.0e} | {name} | {r[0]:.1f} | {r[1]:.3f} | {gbs:.0f} | {ratio} | {r[2]:.3f} | {pgbs:.0f} |"
            )
        if rows.get("ngrad"):
            kgbs = 2 * n * dtype.itemsize / (kernel_ms * 1e-3) / 1e9
            kernels.append(
                f"N={n:.0e}: ngrad's kernel alone {kernel_ms:.3f} ms, {kgbs:.0f} GB/s"
                + (f" ({kgbs / peak:.0%} of the card's)" if peak else "")
            )
    lines += [""] + [f"- {k}" for k in kernels]
    if peak:
        lines += [
            "",
            f"Theoretical DRAM bandwidth of this card: {peak:.0f} GB/s (GB/s above counts reading x "
            "and writing its gradient once).",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
