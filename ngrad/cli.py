"""The ``ngrad`` command: ``ngrad bench`` runs the benchmark suite; ``ngrad cache info|clear``
reports on the kernel cache (exit status 1 when it cannot be used) and empties it.

```python
>>> from ngrad.cli import build_parser
>>> build_parser().parse_args(["bench", "--quick"]).quick
True

```
"""

import argparse
import json
import os
import sys

__all__ = ["main", "build_parser"]


def build_parser():
    parser = argparse.ArgumentParser(prog="ngrad", description="ngrad: PyTorch's autograd API on a compiling engine")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser(
        "bench",
        help="time value+gradient of standard problems against NumPy, PyTorch and JAX",
        description="Times value+gradient of automatic-differentiation problems in ngrad against "
        "a hand-written NumPy gradient, PyTorch eager and JAX jit (when installed), "
        "after checking that all agree. 'ngrad bench gradbench-tool' instead speaks "
        "GradBench's tool protocol on stdin/stdout.",
    )
    b.add_argument("mode", nargs="?", choices=["gradbench-tool"], help="run as a GradBench tool instead")
    b.add_argument("--quick", action="store_true", help="one small size per problem: the suite in under a minute")
    b.add_argument("--problems", default=None, help="comma-separated problem names (default: all; see --list)")
    b.add_argument("--sizes", default=None, help="comma-separated sizes, overriding each problem's defaults")
    b.add_argument("--repeat", type=int, default=20, help="timed calls per system after warm-up (default 20)")
    b.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for every system (default: every core this process may use, as PyTorch and JAX use)",
    )
    b.add_argument("--json", dest="json_path", default=None, help="write machine-readable results here")
    b.add_argument(
        "--plot", dest="plot_path", default=None, help="write a PNG of time against size per system (needs matplotlib)"
    )
    b.add_argument("--list", action="store_true", help="list the problems and exit")
    c = sub.add_parser("cache", help="the compiled-kernel cache (NGRAD_CACHE_DIR)")
    c.add_argument("action", choices=["info", "clear"])
    return parser


def cache(args):
    from .engine.targets.cpu import cache_clear, cache_info

    if args.action == "info":
        info = cache_info()
        print(
            f"cache root: {info['root']}\nthis version: {info['folder']}\n"
            f"kernels: {info['kernels']} (machine code kept for {info['objects']} kernel signatures)\n"
            f"plans: {info['plans']}\nsize: {info['bytes'] / 1e6:.2f} MB"
        )
        if info["problem"]:
            print(f"unusable: {info['problem']}; ngrad compiles in memory (see docs/cache.md)")
            return 1
        if os.path.isdir(info["folder"]) and not info["writable"]:
            print("read-only: kernels in it are loaded, others compile in memory")
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

    if args.mode == "gradbench-tool":
        from .bench.gradbench import serve

        return serve(sys.stdin, sys.stdout)
    from .bench.problems import PROBLEMS

    console = Console()
    if args.list:
        for p in PROBLEMS.values():
            console.print(
                f"[bold]{p.name}[/bold]: {p.doc}; size = {p.size_doc}; sizes {p.sizes}, --quick {p.quick_sizes}"
            )
        return 0
    names = args.problems.split(",") if args.problems else list(PROBLEMS)
    unknown = [n for n in names if n not in PROBLEMS]
    if unknown:
        console.print(f"[red]unknown problem(s): {', '.join(unknown)}; choose from {', '.join(PROBLEMS)}[/red]")
        return 2
    try:
        sizes = [int(float(s)) for s in args.sizes.split(",")] if args.sizes else None
    except ValueError:
        console.print(f"[red]--sizes takes comma-separated numbers such as 1e4,1e5 (got {args.sizes!r})[/red]")
        return 2
    if args.plot_path:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            console.print("[red]--plot needs matplotlib: pip install 'ngrad[bench]'[/red]")
            return 2
    from .bench.runner import pin_threads
    from .engine.config import cores

    threads = args.threads or cores()
    restore = pin_threads(threads)
    try:
        return _bench(args, console, names, sizes, threads)
    finally:
        restore()


def _bench(args, console, names, sizes, threads):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from .bench.problems import PROBLEMS
    from .bench.runner import count_steps, machine_info, run_suite

    results = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    # Redrawn only between timings, so that no thread of the runner's own wakes during a timed call.
    with Progress(*columns, console=console, transient=True, auto_refresh=False) as bar:
        task = bar.add_task("benchmarking", total=count_steps(names, sizes, args.quick))
        for name in names:
            results += run_suite(
                [name],
                sizes,
                args.repeat,
                budget=0.5 if args.quick else 2.0,
                quick=args.quick,
                progress=lambda msg, done: bar.update(task, description=msg, advance=done, refresh=True),
            )
    info = machine_info()
    info["threads"] = threads
    console.print(
        f"value + gradient, float64, {info['platform']}, {threads} thread{'s' if threads > 1 else ''} "
        f"per system; numpy {info['numpy']}, torch {info['torch'] or 'not installed'}, "
        f"jax {info['jax'] or 'not installed'}; ngrad's matrix products on "
        f"{'MKL' if info['ngrad_blas'].startswith('MKL') else 'NumPy'}; "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}"
    )
    for name in names:
        rows = [r for r in results if r["problem"] == name]
        table = Table(title=f"{name}: {PROBLEMS[name].doc}", title_justify="left")
        table.add_column(f"size ({PROBLEMS[name].size_doc.split(',')[0]})", justify="right")
        table.add_column("system")
        table.add_column("median", justify="right")
        table.add_column("IQR", justify="right")
        table.add_column("first call", justify="right")
        table.add_column("vs ngrad", justify="right")
        for r in rows:
            base = r["systems"]["ngrad"]["median_s"]
            for s, t in r["systems"].items():
                table.add_row(
                    f"{r['size']:,}",
                    s,
                    _fmt(t["median_s"]),
                    _fmt(t["q3_s"] - t["q1_s"]),
                    _fmt(t["first_s"]),
                    "1" if s == "ngrad" else f"{t['median_s'] / base:.2f}x",
                )
        console.print(table)
    console.print(
        "'vs ngrad' is the system's median over ngrad's: above 1 means ngrad is faster. 'first call' "
        "includes compiling for JAX; ngrad's ran on its interpreter while its kernels compiled in the "
        "background, and its median was timed once they were in use. All values and gradients were "
        "checked against the NumPy reference before timing."
    )
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"machine": info, "results": results}, f, indent=1)
        console.print(f"wrote {args.json_path}")
    if args.plot_path:
        from .bench.plot import plot

        plot(results, args.plot_path)
        console.print(f"wrote {args.plot_path}")
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
