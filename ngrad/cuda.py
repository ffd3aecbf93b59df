"""``ngrad.cuda``: whether the CUDA target can be used here, and the few controls it needs.

ngrad runs tensors created with ``device='cuda'`` on the GPU through Numba's CUDA target
(``pip install 'ngrad[cuda]'``). Without the package or without a GPU, everything else works
on the CPU and ``unavailable_reason()`` says why CUDA does not.

```python
>>> import ngrad
>>> isinstance(ngrad.cuda.is_available(), bool)
True

```
"""

__all__ = ["is_available", "unavailable_reason", "device_count", "get_device_name", "current_device", "synchronize"]


def _status():
    from .engine.targets.cuda import cuda_status

    return cuda_status()


def is_available():
    """True when tensors can be put on ``'cuda'`` (a GPU, or Numba's CUDA simulator)."""
    return _status()[0]


def unavailable_reason():
    """Why ``is_available()`` is False (None when it is True).

    ```python
    >>> import ngrad
    >>> r = ngrad.cuda.unavailable_reason()
    >>> r is None or isinstance(r, str)
    True

    ```
    """
    ok, why = _status()
    return None if ok else why


def device_count():
    """The number of GPUs ngrad can use (it uses one, ``cuda:0``)."""
    return 1 if is_available() else 0


def current_device():
    return 0


def get_device_name(device=None):
    """The GPU's name (or the simulator's)."""
    ok, what = _status()
    if not ok:
        raise RuntimeError(f"CUDA is not available: {what}")
    return what


def synchronize(device=None):
    """Wait for every kernel launched on the GPU to finish (kernels run asynchronously)."""
    if is_available():
        from .engine.targets.cuda import synchronize as sync

        sync()
