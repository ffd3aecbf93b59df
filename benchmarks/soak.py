"""Soak: resident memory of a long-running process, not a timing (``docs/performance.md``).

* ``steady``: an Adam loop on a small least-squares problem, recorded eagerly each step (forward,
  ``backward()``, ``opt.step()``): one structure over and over, so memory must stay flat.
* ``structures``: a function of ``n`` for each ``n`` (a sum of ``n % 20 + 1`` tanh terms over
  ``n // 20 + 2`` elements), each run three times so its tape is compiled (``NGRAD_JIT=auto``
  compiles a structure on its second call): ever new structures, which the bounded caches
  (``NGRAD_MEMORY_ENTRIES``) keep from growing without end.
* ``shapes``: one ``ngrad.compile`` function called over ever new shapes.
* ``deep``: a chain of 100,000 operations on an 8-element leaf (``y * 1.0001 + 0.001`` and
  ``(y * 0.999).sin()`` in turn), then ``backward()``: the time of each and the peak resident
  memory over the process's before recording, per operation (sampled every 5 ms while it runs),
  after a chain of 12,000 has run (imports, and the bytecode loops of the chain and of a segment of
  its reverse pass compiled).

Each phase prints resident memory (``/proc/self/statm``, else the peak from ``resource``) at
tenths of its run and the sizes of the in-memory caches at its end. ``--quick`` runs a tenth of
the steps, 300 structures and shapes and a chain of 20,000 (about a minute on 2 cores).

Run: python benchmarks/soak.py [--quick]
"""

import argparse
import os
import resource
import threading
import time

import numpy as np

import ngrad


def rss_mb():
    """This process's resident memory in MB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # no /proc: the peak, which is what a flat run shows anyway
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def caches():
    """The sizes of the in-memory caches (kernels, tiering records)."""
    from ngrad.engine.runtime import dispatch
    from ngrad.engine.targets import cpu

    return f"kernels {len(cpu._memory)}, records {len(dispatch.records)}"


def _phase(name, count, step):
    marks = {max(1, count * k // 10) for k in range(1, 11)}
    t = time.perf_counter()
    start = rss_mb()
    row = [f"{start:.0f}"]
    for i in range(1, count + 1):
        step(i)
        if i in marks:
            row.append(f"{rss_mb():.0f}")
    print(f"{name} ({count}): RSS MB at each tenth: {' '.join(row)}")
    print(f"  grew {rss_mb() - start:+.1f} MB in {time.perf_counter() - t:.1f} s; {caches()}")


def steady(count):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 8)), rng.standard_normal(16)
    A, B = ngrad.tensor(a), ngrad.tensor(b)
    w = ngrad.tensor(np.zeros(8), requires_grad=True)
    opt = ngrad.optim.Adam([w], lr=1e-2)

    def step(_):
        opt.zero_grad()
        loss = ((A @ w - B) ** 2).mean()
        loss.backward()
        opt.step()

    _phase("steady", count, step)
    want = np.linalg.lstsq(a, b, rcond=None)[0]
    print(f"  distance to the least-squares solution: {np.abs(w.detach().numpy() - want).max():.2e}")


def structures(count):
    def step(n):
        x = ngrad.tensor(np.linspace(-1.0, 1.0, n // 20 + 2), requires_grad=True)
        for _ in range(3):
            y = sum(((x * (k + 1)).tanh() for k in range(n % 20 + 1)), ngrad.tensor(0.0)).sum()
            y.backward()
            x.grad = None

    _phase("structures", count, step)


def shapes(count):
    f = ngrad.compile(lambda x: (x.tanh() * x).sum())

    def step(n):
        f(ngrad.tensor(np.linspace(-1.0, 1.0, n)))

    _phase("shapes", count, step)
    print(f"  traces {f.traces}, argument structures kept {len(f.variants)}")


class _Peak:
    """The highest ``rss_mb()`` seen while the ``with`` block runs (a thread samples it)."""

    def __enter__(self):
        self.peak, self.done = rss_mb(), threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while not self.done.wait(0.005):
            self.peak = max(self.peak, rss_mb())

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        self.peak = max(self.peak, rss_mb())


def _chain(x, count):
    y = x
    for i in range(count):
        y = (y * 0.999).sin() if i % 2 else y * 1.0001 + 0.001
    return y


def deep(count):
    x = ngrad.randn(8, requires_grad=True)
    # imports, and the loops that run the pending chains and a reverse segment compiled (12,000
    # operations make 24,000 levels: the reverse pass runs in segments of 4,096, DEEP_SEGMENT)
    _chain(x, 12000).sum().backward()
    x.grad = None
    start = rss_mb()
    with _Peak() as peak:
        t0, c0 = time.perf_counter(), time.process_time()
        y = _chain(x, count)
        t1, c1 = time.perf_counter(), time.process_time()
        recorded = rss_mb()
        y.sum().backward()
        t2, c2 = time.perf_counter(), time.process_time()
    per_op = (peak.peak - start) * 2**20 / count / 1024
    print(
        f"deep ({count}): record {t1 - t0:.2f} s ({c1 - c0:.2f} s of CPU), backward {t2 - t1:.2f} s "
        f"({c2 - c1:.2f} s of CPU, {(t2 - t1) / count * 1e6:.0f} us an operation)"
    )
    print(
        f"  RSS {start:.0f} MB before, {recorded:.0f} MB recorded, peak {peak.peak:.0f} MB: "
        f"{per_op:.1f} KB an operation; gradient finite: {bool(np.isfinite(x.grad.numpy()).all())}"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10,000 steps, 300 structures and shapes, 20,000 deep")
    ap.add_argument("--phase", choices=("steady", "structures", "shapes", "deep"), action="append")
    args = ap.parse_args()
    steps, news = (10_000, 300) if args.quick else (100_000, 2_000)
    print(
        f"ngrad from {os.path.dirname(ngrad.__file__)}; NGRAD_MEMORY_ENTRIES={os.environ.get('NGRAD_MEMORY_ENTRIES')}"
    )
    counts = {"steady": steps, "structures": news, "shapes": news, "deep": 20_000 if args.quick else 100_000}
    for phase in args.phase or ("steady", "structures", "shapes", "deep"):
        {"steady": steady, "structures": structures, "shapes": shapes, "deep": deep}[phase](counts[phase])


if __name__ == "__main__":
    main()
