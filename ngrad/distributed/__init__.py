"""``ngrad.distributed``: data-parallel gradients and independent sweeps on a Dask cluster.

Two ways a computation outgrows one process, both run on Dask's distributed scheduler (the
optional extra ``ngrad[dask]``; importing this package imports no Dask, using it does):

- ``Objective(f, data)``: ``sum(f(params, *chunk) for chunk in data)`` over a dask array,
  dataframe or list of delayed chunks, with its gradient. Each worker runs ngrad's compiled
  value-and-gradient program on the chunks it holds; values and gradients are summed by a
  tree reduction. It is a differentiable function of the parameters, so it drops into
  ``loss.backward()``, the ``ngrad.optim`` optimizers and ``ngrad.scipy.minimize``.
- ``map(fn, inputs)``: one call of ``fn`` per input on the workers, results in order, with a
  progress bar.

Programs travel as tapes (text), never as Numba objects: a worker compiles each one once, or
loads it from its disk cache (``NGRAD_CACHE_DIR``, which workers may share: see
docs/distributed.md). ``local_cluster(n)`` starts worker processes on this machine; pass
``client=`` a ``distributed.Client`` or a scheduler address for a real cluster.

The name says what the package does for the user (distributing work) and is where PyTorch
users look for it; Dask is how, and stays an implementation choice behind it.

Modules: ``cluster`` (which client), ``data`` (chunks persisted on workers, checked),
``program`` (the traced tape and its worker-side runner), ``objective`` (``Objective``),
``sweep`` (``map``).
"""

from .cluster import client_for, local_cluster
from .objective import Objective
from .sweep import map  # noqa: A004  (ngrad.distributed.map, as dask's Client.map)

__all__ = ["Objective", "map", "local_cluster", "client_for"]
