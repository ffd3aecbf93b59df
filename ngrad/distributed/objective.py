"""``Objective``: a function summed over data that lives on a Dask cluster, with its gradient.

Contract: ``Objective(f, data)`` stands for ``sum(f(params, *chunk) for chunk in data)``.
Made, it persists the data's chunks on the workers (``ngrad.distributed.data``) and checks
them. The first evaluation with a new parameter signature traces ``f`` on the client, once per
chunk signature (``ngrad.distributed.program``): a function that is not traceable, returns no
scalar, or reads a tensor that requires grad outside its parameters fails there, on the
client, before anything is sent. Each evaluation then sends the parameters (up to
``INLINE_BYTES`` inside each chunk's task, bigger ones once, as one task whose result the
workers fetch), runs the program on every chunk where the chunk lives (one task per worker
thread, summing its chunks in chunk order), and sums those sums by a tree reduction
(``split_every`` at a time, in the order of their first chunks). Where the chunks live
decides the order of the additions, and so the rounding (a few units in the last place),
nothing else. A worker lost mid-evaluation is Dask's to recover:
its tasks run again elsewhere and lost chunks are rebuilt from their graph, so the result is
the same. ``retries`` re-runs a task that raised (a transient failure), up to that many times.

``objective(params)`` returns a differentiable scalar tensor whose gradient is the distributed
one, so it drops into ``loss.backward()``, the ``ngrad.optim`` optimizers (``LBFGS`` closures
included) and ``ngrad.scipy.minimize``; ``value_and_grad(params)`` returns both directly, and
``submit(params)`` the future of the ``[value, *gradients]`` arrays.
"""

import numpy as np

from .. import grad_mode
from ..autograd.function import Function, once_differentiable
from ..engine.ir import dtypes as D
from ..engine.ir.graph import source
from ..tensor.record import wrap
from ..tracing import TraceError
from .cluster import client_for
from .data import persist_parts
from .program import add, evaluate_many, flatten, trace_program, unflatten

__all__ = ["Objective", "DistributedSum", "INLINE_BYTES", "hold"]

# Parameters up to this size travel inside each chunk's task; bigger ones as one shared task.
INLINE_BYTES = 1 << 16


def hold(x):
    """``x``: the task that keeps a program or a step's parameters on the cluster (recomputable,
    unlike scattered data)."""
    return x


def _refuse_trace():
    """Raise ``TraceError`` while ``ngrad.compile`` traces: the cluster is no part of a program."""
    if grad_mode.state.trace is not None:
        raise TraceError(
            "ngrad.distributed: an Objective runs on a Dask cluster and cannot be traced into an "
            "ngrad.compile program; call it outside the compiled function"
        )


def _tensor(a):
    a = np.asarray(a)
    return wrap(source(a, D.from_numpy_dtype(a.dtype)))


class DistributedSum(Function):
    """The objective as one autograd node: forward asks the cluster for value and gradients,
    backward scales the gradients it kept by the incoming gradient."""

    @staticmethod
    def forward(ctx, objective, spec, *leaves):
        value, grads = objective.evaluate_arrays(unflatten(spec, leaves))
        ctx.grads, ctx.dtypes = grads, [t.dtype for t in leaves]
        return _tensor(value)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        # each gradient in its parameter's dtype (a float32 parameter of a float64 value)
        return (None, None, *[(g * _tensor(a)).to(dt) for a, dt in zip(ctx.grads, ctx.dtypes)])


class Objective:
    """``sum(f(params, *chunk) for chunk in data)`` and its gradient, computed on a Dask cluster.

    ``f(params, *chunk)`` returns a scalar tensor for one chunk (a tuple of tensors: the row
    block of each array of ``data``); ``params`` is a tensor or a tuple, list or dict of tensors.
    ``data``: a dask array (row blocks), a dask dataframe or series (partitions), a tuple of
    those with matching row blocks (``(X, y)``), or a list of ``dask.delayed`` objects or futures
    each giving an array or a tuple of arrays. ``client``: a ``distributed.Client``, a scheduler
    address, or None for the current client. ``f`` must be traceable by ``ngrad.compile`` (no
    Python control flow on tensor values): it is traced once per chunk shape, on the client,
    and only its tape travels. A mean is a sum divided by ``objective.rows``.

    ```python
    >>> import dask.array as da, numpy as np, ngrad
    >>> client = ngrad.distributed.local_cluster(1, processes=False)
    >>> X = da.from_array(np.arange(12.0).reshape(6, 2), chunks=(2, 2))
    >>> objective = ngrad.distributed.Objective(lambda w, x: ((x @ w) ** 2).sum(), X, client=client)
    >>> w = ngrad.tensor([1.0, -1.0], dtype=ngrad.float64, requires_grad=True)
    >>> loss = objective(w)
    >>> loss.backward()
    >>> loss, w.grad, objective.rows
    (tensor(6., dtype=ngrad.float64, grad_fn=<DistributedSumBackward>), tensor([-60., -72.], dtype=ngrad.float64), 6)
    >>> client.close(); client.cluster.close()

    ```
    """

    def __init__(self, f, data, client=None, *, split_every=8, retries=0):
        if not callable(f):
            raise TypeError(f"ngrad.distributed.Objective: f must be callable, got {type(f).__name__}")
        if not isinstance(split_every, int) or split_every < 2:
            raise ValueError(f"ngrad.distributed.Objective: split_every must be an int >= 2, got {split_every!r}")
        self.f = f
        self.client = client_for(client)
        self._owns_client = isinstance(client, str)  # made here from an address: closed by close()
        self.split_every, self.retries = split_every, retries
        self.parts, self.signatures = persist_parts(self.client, data, retries)
        self.rows = int(sum(sig[0][0][0] for sig in self.signatures))
        self._programs = {}  # (parameter signature, chunk signature) -> future of its Program

    def __repr__(self):
        return f"Objective({getattr(self.f, '__name__', 'f')}, {len(self.parts)} chunks, {self.rows} rows)"

    def _program(self, params, leaves, chunk_sig):
        """The future of the program for these parameters and one chunk signature (traced once)."""
        key = (tuple((tuple(t.shape), t.dtype.name) for t in leaves), chunk_sig)
        future = self._programs.get(key)
        if future is None:
            program = trace_program(self.f, params, [(shape, np.dtype(dt)) for shape, dt in chunk_sig])
            future = self.client.submit(hold, program, key=f"ngrad-program-{program.digest}")
            self._programs[key] = future
        return future

    def submit(self, params):
        """The future of ``[value, *gradients]`` (NumPy arrays, gradients in the order of the
        parameters' leaves) at ``params``; nothing waits for it."""
        _refuse_trace()
        leaves = []
        flatten(params, leaves)
        if not leaves:
            raise ValueError("ngrad.distributed.Objective: the parameters hold no tensor")
        programs = [self._program(params, leaves, sig) for sig in self.signatures]
        arrays = [np.asarray(t.detach().numpy(), order="C") for t in leaves]
        client = self.client
        # Small parameters ride in each chunk's task (one hop less); bigger ones are one task
        # whose result the workers fetch, once per step. A task, not scattered data: a worker
        # lost mid-step takes no only copy with it (the scheduler can run it again).
        if sum(a.nbytes for a in arrays) <= INLINE_BYTES:
            shared = arrays
        else:
            shared = client.submit(hold, arrays, pure=False)
        # steered to the worker holding the chunks, else (its holder is gone) anywhere: Dask
        # refuses allow_other_workers without workers, a race a worker dying mid-run met
        level = [
            client.submit(
                evaluate_many,
                [programs[i] for i in group],
                shared,
                *[self.parts[i] for i in group],
                **({} if worker is None else {"workers": [worker], "allow_other_workers": True}),
                pure=False,
                retries=self.retries,
            )
            for worker, group in self._groups()
        ]
        k = self.split_every
        while len(level) > 1:
            level = [
                client.submit(add, *level[i : i + k], pure=False, retries=self.retries) for i in range(0, len(level), k)
            ]
        return level[0]

    def _groups(self):
        """``(worker, chunk indices)``: the chunks each worker thread sums in one task, in
        chunk order. One task per thread rather than per chunk: the scheduler's cost per task
        (milliseconds) is paid per worker thread, not per chunk. A task is only steered to the
        worker holding its chunks: where that worker is gone, it runs wherever Dask puts it."""
        holders = self.client.who_has(self.parts)
        threads = self.client.nthreads()
        by_worker = {}
        for i, part in enumerate(self.parts):
            held = holders.get(part.key) or ()
            by_worker.setdefault(min(held) if held else None, []).append(i)
        for worker, chunks in by_worker.items():
            n = max(1, min(threads.get(worker, 1), len(chunks)))
            for t in range(n):  # contiguous runs, one per thread
                yield worker, chunks[t * len(chunks) // n : (t + 1) * len(chunks) // n]

    def evaluate_arrays(self, params):
        """``(value, gradients)`` as NumPy arrays (see ``submit``), waiting for the cluster."""
        result = self.submit(params).result()
        return result[0], result[1:]

    def value_and_grad(self, params):
        """``(value, gradient)`` at ``params``: a scalar tensor and tensors of the parameters'
        structure (no graph is recorded).

        ```python
        >>> import dask.array as da, numpy as np, ngrad
        >>> client = ngrad.distributed.local_cluster(1, processes=False)
        >>> X = da.from_array(np.ones((4, 2)), chunks=(3, 2))
        >>> objective = ngrad.distributed.Objective(lambda p, x: (x @ p["w"] + p["b"]).sum(), X, client=client)
        >>> value, grad = objective.value_and_grad({"w": ngrad.ones(2, dtype=ngrad.float64), "b": ngrad.zeros(())})
        >>> value, grad["w"], grad["b"]
        (tensor(8., dtype=ngrad.float64), tensor([4., 4.], dtype=ngrad.float64), tensor(4.))
        >>> client.close(); client.cluster.close()

        ```
        """
        leaves = []
        spec = flatten(params, leaves)
        value, grads = self.evaluate_arrays(params)
        return _tensor(value), unflatten(spec, [_tensor(g) for g in grads])

    def __call__(self, params):
        """The objective at ``params`` as a scalar tensor; ``backward()`` through it gives the
        distributed gradient (once: it has no second derivative)."""
        leaves = []
        spec = flatten(params, leaves)
        _refuse_trace()  # (ngrad.scipy.minimize then runs the objective eagerly)
        return DistributedSum.apply(self, spec, *leaves)

    def close(self):
        """Release the chunks and programs this objective holds on the cluster (and close the
        client it made, when it was given a scheduler address)."""
        for f in [*self.parts, *self._programs.values()]:
            f.release()
        self.parts, self._programs = [], {}
        if self._owns_client:
            self.client.close()
