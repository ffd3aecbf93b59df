"""The data of a data-parallel objective, as chunks that live on the workers.

Contract: ``persist_parts(client, data)`` accepts a ``dask.array.Array`` (split into row
blocks: any chunking of the other axes is merged first), a ``dask.dataframe`` ``DataFrame`` or
``Series`` (one chunk per partition, as the 2-D or 1-D array of its values), a tuple of those
whose row blocks correspond (``(X, y)``: a chunk holds one block of each), or a list of
``dask.delayed`` objects or futures, each giving one array or a tuple of arrays. It returns one
future per chunk, each a tuple of C-contiguous NumPy arrays made once on a worker and kept
there (data already persisted is read where it lives, not sent through the client), and the
chunks' signatures (shapes and dtypes), which are checked: every chunk has the same number of
arrays, the arrays of one chunk have the same number of rows, and all chunks agree on
everything but that row count. A mismatch is a ``ValueError`` naming the chunk.
"""

import numpy as np

__all__ = ["persist_parts", "signature_of"]


def _as_array(block):
    """A chunk's block as a C-contiguous, aligned and writable NumPy array (pandas objects by
    their values)."""
    if hasattr(block, "to_numpy") and not isinstance(block, np.ndarray):
        block = block.to_numpy()
    a = np.asarray(block, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
    if not (a.flags.aligned and a.flags.writeable):
        # a block received from another worker is a read-only or unaligned view of the message
        # (measured: kernels ran 4-10x slower on such views): the chunk gets its own copy, once
        a = a.copy()
    if a.dtype == object:
        raise TypeError(
            "ngrad.distributed: a chunk holds Python objects (dtype object); give numeric arrays "
            "(a dataframe's columns must all be numbers)"
        )
    return a


def make_part(*blocks):
    """One chunk, on a worker: a tuple of arrays (a single block that is a tuple is spread)."""
    if len(blocks) == 1 and isinstance(blocks[0], (tuple, list)):
        blocks = tuple(blocks[0])
    return tuple(_as_array(b) for b in blocks)


def signature_of(part):
    """The shapes and dtypes of a chunk's arrays (small: what the client is sent back)."""
    return tuple((a.shape, a.dtype.str) for a in part)


def _collection_kind(x):
    """ "array", "frame" or None: whether ``x`` is a dask array or a dask dataframe/series."""
    import dask.array as da

    if isinstance(x, da.Array):
        return "array"
    mod = type(x).__module__ or ""
    if mod.startswith("dask.dataframe") or mod.startswith("dask_expr"):
        return "frame"
    return None


def _blocks(x, kind):
    """The delayed row blocks of one dask collection."""
    if kind == "array":
        if x.ndim == 0:
            raise ValueError("ngrad.distributed: a dask array of data needs at least one axis (its rows)")
        if any(n != 1 for n in x.numblocks[1:]):
            x = x.rechunk({i: -1 for i in range(1, x.ndim)})
        return list(x.to_delayed().reshape(-1))
    return list(x.to_delayed())


def _streams(data):
    """The data as a list of chunk streams (each a list of delayed blocks or futures)."""
    from dask.delayed import Delayed
    from distributed import Future

    kind = _collection_kind(data)
    if kind is not None:
        return [_blocks(data, kind)]
    if isinstance(data, tuple) and data and all(_collection_kind(x) is not None for x in data):
        arrays = [x for x in data if _collection_kind(x) == "array"]
        rows = [x.chunks[0] for x in arrays if not any(np.isnan(c) for c in x.chunks[0])]
        for a, b in zip(rows, rows[1:]):
            if a != b:
                raise ValueError(
                    f"ngrad.distributed: mismatched chunk shapes: the row blocks of the data's arrays differ "
                    f"({list(a)} against {list(b)}); rechunk them alike, e.g. y.rechunk({{0: X.chunks[0]}})"
                )
        streams = [_blocks(x, _collection_kind(x)) for x in data]
        counts = {len(s) for s in streams}
        if len(counts) > 1:
            raise ValueError(
                f"ngrad.distributed: mismatched chunk shapes: the data's collections have "
                f"{[len(s) for s in streams]} chunks; they must have the same number of row blocks"
            )
        return streams
    if isinstance(data, (list, tuple)) and data and all(isinstance(x, (Delayed, Future)) for x in data):
        return [list(data)]
    raise TypeError(
        "ngrad.distributed: data must be a dask array, a dask dataframe or series, a tuple of them with "
        f"matching row blocks, or a non-empty list of dask.delayed objects or futures; got {type(data).__name__}"
    )


def _check(signatures):
    """Raise ``ValueError`` unless the chunks' signatures agree (see the module docstring)."""
    first = signatures[0]
    for i, sig in enumerate(signatures):
        if not sig:
            raise ValueError(f"ngrad.distributed: chunk {i} holds no arrays")
        if len(sig) != len(first):
            raise ValueError(
                f"ngrad.distributed: mismatched chunk shapes: chunk {i} holds {len(sig)} arrays, "
                f"chunk 0 holds {len(first)}"
            )
        rows = {shape[0] if shape else None for shape, _ in sig}
        if len(rows) != 1 or None in rows:
            shapes = [list(shape) for shape, _ in sig]
            raise ValueError(
                f"ngrad.distributed: mismatched chunk shapes: the arrays of chunk {i} must have the same "
                f"number of rows, got shapes {shapes}"
            )
        for j, ((shape, dtype), (shape0, dtype0)) in enumerate(zip(sig, first)):
            if shape[1:] != shape0[1:] or dtype != dtype0:
                raise ValueError(
                    f"ngrad.distributed: mismatched chunk shapes: array {j} of chunk {i} is "
                    f"{np.dtype(dtype).name}{list(shape)}, of chunk 0 {np.dtype(dtype0).name}{list(shape0)}; "
                    "chunks may differ only in their number of rows"
                )


def persist_parts(client, data, retries=0):
    """``(futures, signatures)``: one future per chunk of ``data`` (see the module docstring)."""
    from dask import delayed

    streams = _streams(data)
    part = delayed(make_part, pure=True)
    parts = client.compute([part(*blocks) for blocks in zip(*streams)], retries=retries)
    signatures = client.gather(client.map(signature_of, parts, pure=False, retries=retries))
    _check(signatures)
    return parts, signatures
