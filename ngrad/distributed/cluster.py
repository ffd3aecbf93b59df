"""Which Dask cluster ngrad's distributed work runs on.

Contract: ``client_for(client)`` turns what a user passes as ``client=`` into a
``distributed.Client``: a client as it is, a scheduler address (``"tcp://host:8786"``) a new
client connected to it, None the current default client (the one most recently made, or the
one of the worker a task runs on). ``local_cluster(n_workers)`` starts a ``LocalCluster`` of
worker processes with one thread each (ngrad's kernels are single-threaded by default, and a
process per core keeps Python's GIL out of the way) and returns its client. Dask itself is
imported here, on first use, never by ``import ngrad``; without it the error says what to
install.
"""

__all__ = ["client_for", "local_cluster", "require_dask"]

_MISSING = (
    "ngrad.distributed needs Dask's distributed scheduler: pip install 'ngrad[dask]' "
    "(or pip install 'dask[distributed]')"
)


def require_dask():
    """Import ``distributed``, or raise ``ModuleNotFoundError`` saying what to install."""
    try:
        import distributed
    except ImportError as e:
        raise ModuleNotFoundError(_MISSING) from e
    return distributed


def client_for(client=None):
    """The ``distributed.Client`` that ``client`` names (see the module docstring)."""
    distributed = require_dask()
    if isinstance(client, distributed.Client):
        return client
    if isinstance(client, str):
        return distributed.Client(client)
    if client is None:
        try:
            return distributed.get_client()
        except ValueError as e:
            raise ValueError(
                "ngrad.distributed: no Dask client is running; pass client= (a Client or a scheduler "
                "address), create one with distributed.Client(...), or use ngrad.distributed.local_cluster()"
            ) from e
    raise TypeError(
        "ngrad.distributed: client must be a distributed.Client, a scheduler address or None, "
        f"got {type(client).__name__}"
    )


def local_cluster(n_workers=2, threads_per_worker=1, **kwargs):
    """A client of a new ``LocalCluster`` of ``n_workers`` worker processes on this machine.

    Extra keyword arguments go to ``distributed.LocalCluster`` (``memory_limit``, ``env``,
    ``processes=False`` for threads in this process...). Close the client and its cluster with
    ``client.close(); client.cluster.close()``.

    ```python
    >>> import ngrad
    >>> client = ngrad.distributed.local_cluster(1, processes=False)
    >>> len(client.scheduler_info()["workers"])
    1
    >>> client.close(); client.cluster.close()

    ```
    """
    distributed = require_dask()
    kwargs.setdefault("dashboard_address", ":0")  # any free port: two clusters never collide
    kwargs.setdefault("processes", True)
    cluster = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, **kwargs)
    return distributed.Client(cluster)
