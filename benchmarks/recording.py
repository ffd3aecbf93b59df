"""Cost of recording one op in the lazy graph (no computation), best of 5 runs.

Run: python benchmarks/recording.py
"""

import time

import ngrad


def bench(label, f, n=50000):
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    print(f"{label:<12} {best:6.2f} us/op")


def main():
    x = ngrad.randn(100, dtype=ngrad.float64, requires_grad=True)
    w = ngrad.randn(100, dtype=ngrad.float64)
    m = ngrad.randn(100, 100, dtype=ngrad.float64)
    for label, f in [
        ("x * w", lambda: x * w),
        ("x + 0.5", lambda: x + 0.5),
        ("x.exp()", lambda: x.exp()),
        ("x.sum()", lambda: x.sum()),
        ("x ** 2", lambda: x**2),
        ("m @ x", lambda: m @ x),
        ("x[1:]", lambda: x[1:]),
        ("x.sigmoid()", lambda: x.sigmoid()),
    ]:
        bench(label, f)


if __name__ == "__main__":
    main()
