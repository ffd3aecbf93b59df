"""``ngrad bench --plot``: time against size, log-log, one panel per problem, one line per system.

```python
>>> import os, tempfile
>>> res = [{"problem": "lse", "size": n, "systems": {"ngrad": {"median_s": n * 1e-9}}} for n in (10, 100)]
>>> path = os.path.join(tempfile.mkdtemp(), "t.png")
>>> plot(res, path); os.path.getsize(path) > 0
True

```
"""

__all__ = ["plot"]


def plot(results, path):
    """Write a PNG of median time against size for each problem and system in ``results``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["problem"] for r in results))
    cols = min(3, len(names))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.5 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        mine = [r for r in results if r["problem"] == name]
        for system in dict.fromkeys(s for r in mine for s in r["systems"]):
            pts = [(r["size"], r["systems"][system]["median_s"]) for r in mine if system in r["systems"]]
            ax.plot(*zip(*pts), marker="o", label=system)
        ax.set(xscale="log", yscale="log", title=name, xlabel="size", ylabel="seconds (median)")
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
