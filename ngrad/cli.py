"""The ``ngrad`` command: ``ngrad bench`` runs the benchmark suite.

>>> from ngrad.cli import build_parser
>>> build_parser().parse_args(["bench", "--quick"]).quick
True
"""
import argparse
import json
import sys

__all__ = ["main", "build_parser"]


def build_parser():
    parser = argparse.ArgumentParser(prog="ngrad", description="ngrad: PyTorch's autograd API on a compiling engine")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="time value+gradient of standard problems against NumPy, PyTorch and JAX")
    b.add_argument("--quick", action="store_true", help="smaller sizes: the default suite in well under a minute")
    b.add_argument("--problems", default=None, help="comma-separated problem names (default: all)")
    b.add_argument("--sizes", default=None, help="comma-separated sizes, overriding each problem's defaults")
    b.add_argument("--repeat", type=int, default=20, help="timed calls per system after the first (default 20)")
    b.add_argument("--json", dest="json_path", default=None, help="write machine-readable results here")
    b.add_argument("--list", action="store_true", help="list the problems and exit")
    b.add_argument("--threads", type=int, default=None,
                   help="ngrad.set_num_threads for the run (default: every core, as PyTorch and JAX use)")
    c = sub.add_parser("cache", help="the compiled-kernel cache (NGRAD_CACHE_DIR)")
    c.add_argument("action", choices=["info", "clear"])
    return parser


def cache(args):
    from .engine.compile import cache_clear, cache_info
    if args.action == "info":
        info = cache_info()
        print(f"cache root: {info['root']}\nthis version: {info['folder']}\n"
              f"kernels: {info['kernels']}\nsize: {info['bytes'] / 1e6:.2f} MB")
    else:
        print(f"removed {cache_clear()} files")
    return 0


def _fmt(seconds):
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def bench(args):
    from rich.console import Console

    from .bench.problems import PROBLEMS

    console = Console()
    if args.list:
        for p in PROBLEMS.values():
            console.print(f"[bold]{p.name}[/bold]: {p.doc} (sizes {p.sizes})")
        return 0
    names = args.problems.split(",") if args.problems else list(PROBLEMS)
    unknown = [n for n in names if n not in PROBLEMS]
    if unknown:
        console.print(f"[red]unknown problem(s): {', '.join(unknown)}; choose from {', '.join(PROBLEMS)}[/red]")
        return 2
    sizes = [int(float(s)) for s in args.sizes.split(",")] if args.sizes else None
    import os

    import ngrad
    threads = args.threads or os.cpu_count() or 1
    before = ngrad.get_num_threads()
    ngrad.set_num_threads(threads)
    try:
        return _bench(args, console, names, sizes, threads)
    finally:
        ngrad.set_num_threads(before)


def _bench(args, console, names, sizes, threads):
    from rich.table import Table

    from .bench.problems import PROBLEMS
    from .bench.runner import machine_info, run_suite

    results = []
    with console.status("benchmarking") as status:
        for name in names:
            prob_sizes = sizes or (PROBLEMS[name].quick_sizes if args.quick else PROBLEMS[name].sizes)
            results += run_suite([name], prob_sizes, args.repeat, budget=0.5 if args.quick else 2.0,
                                 progress=lambda msg: status.update(f"benchmarking {msg}"))
    info = machine_info()
    info["ngrad_threads"] = threads
    console.print(f"value + gradient, float64, {info['platform']}; numpy {info['numpy']}, "
                  f"torch {info['torch'] or 'not installed'}, jax {info['jax'] or 'not installed'}; "
                  f"ngrad on {threads} thread{'s' if threads > 1 else ''}")
    for name in names:
        rows = [r for r in results if r["problem"] == name]
        table = Table(title=f"{name}: {PROBLEMS[name].doc}")
        table.add_column("size", justify="right")
        table.add_column("system")
        table.add_column("median", justify="right")
        table.add_column("IQR", justify="right")
        table.add_column("first call", justify="right")
        table.add_column("vs ngrad", justify="right")
        for r in rows:
            base = r["systems"]["ngrad"]["median_s"]
            for s, t in r["systems"].items():
                ratio = t["median_s"] / base
                table.add_row(f"{r['size']:,}", s, _fmt(t["median_s"]), _fmt(t["q3_s"] - t["q1_s"]),
                              _fmt(t["first_s"]), "1" if s == "ngrad" else f"{ratio:.2f}x")
        console.print(table)
    console.print("'vs ngrad' > 1 means that system is slower than ngrad. Values and gradients of all systems "
                  "were checked against each other before timing.")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"machine": info, "results": results}, f, indent=1)
        console.print(f"wrote {args.json_path}")
    return 0


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.command == "bench":
        return bench(args)
    if args.command == "cache":
        return cache(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
