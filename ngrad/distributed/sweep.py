"""``map``: independent problems (parameter sweeps, ensembles, per-subject fits) on a Dask cluster.

Contract: ``map(fn, *iterables)`` calls ``fn`` on each item (``fn(x)``, or ``fn(x, y, ...)``
for several iterables, as the built-in ``map`` zips them) on the cluster's workers and returns
the results as a list in input order, whatever order they finish in. ``fn`` travels to the
cluster once, as one task whose result every worker reuses: a function made by
``ngrad.compile`` travels as its Python function and is compiled again on each worker, once,
so the calls a worker runs replay the same program (kernels come from the worker's disk cache,
``NGRAD_CACHE_DIR``). A call that raises makes ``map`` raise that exception; ``retries``
re-runs a failed call that many times first. A worker lost mid-sweep costs only its
unfinished calls, which Dask runs again elsewhere. ``progress=True`` shows a ``rich`` progress
bar (on standard error) while results come in.
"""

from ..tracing import CompiledFunction
from ..tracing import compile as _compile
from .cluster import client_for

__all__ = ["map", "Shipped", "call"]


class Shipped:
    """``fn`` as it travels to the workers: a compiled function by its Python function and
    compile options, compiled on first use in each process and kept there."""

    def __init__(self, fn):
        if isinstance(fn, CompiledFunction):
            self.fn, self.options = fn.fn, (tuple(fn.static_argnums), tuple(fn.static_argnames))
        else:
            self.fn, self.options = fn, None
        self.local = None

    def __reduce__(self):
        return (_unpickle, (self.fn, self.options))

    def __call__(self, *args):
        local = self.local
        if local is None:
            if self.options is None:
                local = self.fn
            else:
                local = _compile(self.fn, static_argnums=self.options[0], static_argnames=self.options[1])
            self.local = local
        return local(*args)


def _unpickle(fn, options):
    s = Shipped(fn)
    s.options = options
    return s


def call(shipped, *args):
    """One call of a sweep, on a worker."""
    return shipped(*args)


def map(fn, *iterables, client=None, progress=True, retries=0):  # noqa: A001  (the built-in's name, on purpose)
    """``[fn(*items) for items in zip(*iterables)]``, computed on a Dask cluster, in order.

    ```python
    >>> import ngrad
    >>> client = ngrad.distributed.local_cluster(1, processes=False)
    >>> def fit(target):
    ...     res = ngrad.scipy.minimize(lambda x: ((x - target) ** 2).sum(), ngrad.zeros(2), method="L-BFGS-B")
    ...     return [round(v, 4) for v in res.x.tolist()]
    >>> ngrad.distributed.map(fit, [1.0, 2.0, 3.0], client=client, progress=False)
    [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]
    >>> client.close(); client.cluster.close()

    ```
    """
    if not callable(fn):
        raise TypeError(f"ngrad.distributed.map: fn must be callable, got {type(fn).__name__}")
    if not iterables:
        raise TypeError("ngrad.distributed.map: give at least one iterable of inputs")
    items = list(zip(*iterables))
    if not items:
        return []
    owned = isinstance(client, str)  # a client made here from an address is closed here
    client = client_for(client)
    try:
        shipped = client.submit(_hold_fn, Shipped(fn), pure=False)
        futures = [client.submit(call, shipped, *args, pure=False, retries=retries) for args in items]
        if progress:
            _follow(futures)
        return client.gather(futures)
    finally:
        if owned:
            client.close()


def _hold_fn(shipped):
    return shipped


def _follow(futures):
    """Show a progress bar until every future is done; raise the first call's error at once."""
    from distributed import as_completed
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("ngrad.distributed.map", total=len(futures))
        for future in as_completed(futures):
            if future.status == "error":
                future.result()  # raises the call's exception
            bar.update(task, advance=1)
