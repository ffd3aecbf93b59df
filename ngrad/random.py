"""``ngrad.random``: PyTorch's CPU random number generator, bit for bit.

Contract: a :class:`Generator` is a 32-bit Mersenne Twister (mt19937) seeded as PyTorch seeds its
CPU generator (``init_genrand`` of the seed's low 32 bits; ``initial_seed`` keeps all 64), with
PyTorch's cached second Box-Muller normal. Its raw stream (``random32``, ``random64``: two 32-bit
words, the first one high) is the one ``torch.Generator`` produces for the same seed, and its
state (``get_state``) has the byte layout of ``torch.get_rng_state()`` (5056 bytes), so a state
moves between PyTorch and ngrad either way. The draws themselves (uniform, normal, integers...)
are ``ngrad.sampling``'s, which apply PyTorch's CPU transforms to this stream.

The twisting runs in NumPy's ``MT19937`` bit generator, whose key is set to PyTorch's state, so
a million words cost a few milliseconds. ``default_generator`` is what every function without a
``generator=`` argument draws from; ``manual_seed``, ``seed``, ``initial_seed``,
``get_rng_state``, ``set_rng_state`` and ``fork_rng`` act on it, as in ``torch.random``.

```python
>>> import ngrad
>>> g = ngrad.Generator().manual_seed(0)
>>> _ = ngrad.manual_seed(0)
>>> bool((ngrad.rand(3, generator=g) == ngrad.rand(3)).all())
True

```
"""

import contextlib
import os
import struct

import numpy as np

__all__ = [
    "Generator",
    "default_generator",
    "manual_seed",
    "seed",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "fork_rng",
    "generator_or_default",
]

_N = 624
_STATE_BYTES = 5056
# offsets in PyTorch's CPUGeneratorImplState: the legacy POD (seed, left, seeded, next, 624
# uint64 words, three doubles and an int), then the cached float normal and its flag
_WORDS_AT = 24
_NORMAL_Y_AT = 5024
_NORMAL_VALID_AT = 5040
_FLOAT_AT = 5048


def _seed_key(seed):
    """mt19937's ``init_genrand``: the 624 words of a fresh state from a 32-bit seed."""
    key = np.empty(_N, np.uint32)
    x = seed & 0xFFFFFFFF
    key[0] = x
    for j in range(1, _N):
        x = (1812433253 * (x ^ (x >> 30)) + j) & 0xFFFFFFFF
        key[j] = x
    return key


def _nondeterministic_seed():
    return int.from_bytes(os.urandom(8), "little") & (2**63 - 1)


def _seed_value(seed):
    """A seed as PyTorch reads it: an integer in [-2**63, 2**64), negatives taken modulo 2**64."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        try:
            seed = int(seed)
        except (TypeError, ValueError):
            raise TypeError(f"manual_seed expected an int, got {type(seed).__name__}") from None
    seed = int(seed)
    if seed < -(2**63) or seed >= 2**64:
        raise ValueError("Overflow when unpacking long long")
    return seed % 2**64


class Generator:
    """A random number generator, as ``torch.Generator`` on the CPU: pass it as ``generator=``
    to ``rand``, ``randn``, ``randint``, ``randperm``, ``normal``, ``bernoulli``, the in-place
    samplers, ``nn.init`` and ``utils.data``; with the same seed it gives PyTorch's numbers.

    ```python
    >>> import ngrad
    >>> g = ngrad.Generator()
    >>> g.manual_seed(7).initial_seed()
    7
    >>> state = g.get_state()
    >>> a = ngrad.randn(4, generator=g)
    >>> _ = g.set_state(state)
    >>> bool((a == ngrad.randn(4, generator=g)).all())
    True

    ```
    """

    def __init__(self, device="cpu"):
        from .tensor.record import device as make_device

        self._device = make_device(device)
        if self._device.type != "cpu":
            raise RuntimeError("ngrad.Generator: only the CPU generator is available (got device='cuda')")
        self._bits = np.random.MT19937(0)
        # PyTorch's default seed of a new Generator (default_rng_seed_val)
        self.manual_seed(67280421310721)

    @property
    def device(self):
        return self._device

    def manual_seed(self, seed):
        """Seed the generator (any integer in [-2**63, 2**64)); returns it."""
        seed = _seed_value(seed)
        self._seed = seed
        self._bits.state = {"bit_generator": "MT19937", "state": {"key": _seed_key(seed), "pos": _N}}
        # PyTorch's fresh engine reads next=0, left=1; after 624 words it reads next=624, left=1
        self._fresh = True
        self._normal = None
        self._float_normal = None
        return self

    def seed(self):
        """Seed from the operating system's entropy; returns the seed used."""
        s = _nondeterministic_seed()
        self.manual_seed(s)
        return s

    def initial_seed(self):
        """The seed last given to ``manual_seed`` (or picked by ``seed``)."""
        return self._seed

    def get_state(self):
        """The state as PyTorch lays it out (``torch.get_rng_state()``'s 5056 bytes), as an
        int64 tensor of byte values (ngrad has no uint8): ``.numpy().astype('uint8')`` is
        PyTorch's ByteTensor."""
        from .factories import tensor

        return tensor(np.frombuffer(self.state_bytes(), np.uint8).astype(np.int64))

    def state_bytes(self):
        """``get_state`` as ``bytes``."""
        state = self._bits.state["state"]
        pos = 0 if self._fresh else int(state["pos"])
        buf = bytearray(_STATE_BYTES)
        struct.pack_into("<QiiQ", buf, 0, self._seed, _N + 1 - pos if pos else 1, 1, pos)
        buf[_WORDS_AT : _WORDS_AT + 8 * _N] = state["key"].astype("<u8").tobytes()
        if self._normal is not None:
            struct.pack_into("<d", buf, _NORMAL_Y_AT, self._normal)
            struct.pack_into("<i", buf, _NORMAL_VALID_AT, 1)
        if self._float_normal is not None:
            struct.pack_into("<f?", buf, _FLOAT_AT, self._float_normal, True)
        return bytes(buf)

    def set_state(self, new_state):
        """Restore a state from ``get_state`` (or from ``torch.get_rng_state()``: a tensor,
        NumPy array or ``bytes`` of 5056 byte values); returns the generator."""
        raw = _state_bytes_of(new_state)
        seed, left, _, pos = struct.unpack_from("<QiiQ", raw, 0)
        key = np.frombuffer(raw, "<u8", _N, _WORDS_AT)
        # PyTorch's is_valid(), and a position NumPy's engine can hold: left + next = 625 after a
        # twist, left = 1 before one
        if not (0 < left <= _N and pos <= _N) or left != 1 and left + pos != _N + 1 or np.any(key >> 32):
            raise RuntimeError("Invalid mt19937 state")
        self._seed = seed
        self._fresh = left == 1 and pos == 0
        pos = _N if left == 1 else pos
        self._bits.state = {"bit_generator": "MT19937", "state": {"key": key.astype(np.uint32), "pos": pos}}
        self._normal = struct.unpack_from("<d", raw, _NORMAL_Y_AT)[0] if raw[_NORMAL_VALID_AT] else None
        value, valid = struct.unpack_from("<f?", raw, _FLOAT_AT)
        self._float_normal = value if valid else None
        return self

    def clone_state(self):
        """An independent generator in this one's state (what ``fork_rng`` restores)."""
        twin = object.__new__(Generator)
        twin._device = self._device
        twin._bits = np.random.MT19937(0)
        return twin.set_state(self.state_bytes())

    # --- the raw stream, for ngrad.sampling ----------------------------------------------------

    def random32(self, n):
        """The next ``n`` 32-bit words (``uint32``), as PyTorch's ``random()``."""
        self._fresh = self._fresh and n == 0
        return self._bits.random_raw(n).astype(np.uint32)

    def random64(self, n):
        """The next ``n`` 64-bit words (``uint64``), as PyTorch's ``random64()``: two 32-bit
        words each, the first in the high half."""
        w = self.random32(2 * n).astype(np.uint64).reshape(n, 2)
        return (w[:, 0] << np.uint64(32)) | w[:, 1]

    def take_normal(self):
        """The cached second normal of the last scalar Box-Muller pair (None if there is none),
        emptying the cache."""
        value, self._normal = self._normal, None
        return value

    def keep_normal(self, value):
        self._normal = value

    def __repr__(self):
        return "<ngrad.Generator object>"


def _state_bytes_of(state):
    if isinstance(state, (bytes, bytearray)):
        raw = bytes(state)
    else:
        arr = state.detach().numpy() if hasattr(state, "detach") else np.asarray(state)
        if arr.dtype.kind not in "iub" or arr.size and (arr.min() < 0 or arr.max() > 255):
            raise TypeError(f"expected a state of byte values (a get_state() result), got dtype {arr.dtype}")
        raw = arr.astype(np.uint8).tobytes()
    if len(raw) != _STATE_BYTES:
        raise RuntimeError(
            f"Expected a CPUGeneratorImplState of size {_STATE_BYTES} but found the input RNG state size "
            f"to be {len(raw)}"
        )
    return raw


default_generator = Generator()
default_generator.seed()


def generator_or_default(generator):
    """``generator`` if it is a ``Generator``, ``default_generator`` for None; TypeError else."""
    if generator is None:
        return default_generator
    if isinstance(generator, Generator):
        return generator
    raise TypeError(f"expected a ngrad.Generator as generator, but got {type(generator).__name__}")


def manual_seed(seed):
    """Seed the default generator; returns it. The numbers that follow are PyTorch's after
    ``torch.manual_seed`` with the same seed.

    ```python
    >>> import ngrad
    >>> _ = ngrad.manual_seed(0)
    >>> a = ngrad.rand(2)
    >>> _ = ngrad.manual_seed(0)
    >>> bool((a == ngrad.rand(2)).all())
    True

    ```
    """
    return default_generator.manual_seed(seed)


def seed():
    """Seed the default generator from the operating system's entropy; returns the seed."""
    return default_generator.seed()


def initial_seed():
    """The default generator's seed."""
    return default_generator.initial_seed()


def get_rng_state():
    """The default generator's state (see ``Generator.get_state``)."""
    return default_generator.get_state()


def set_rng_state(new_state):
    """Restore the default generator's state (from ``get_rng_state`` or PyTorch's)."""
    default_generator.set_state(new_state)


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices", device_type="cuda"):
    """Within the block, draw as usual; afterwards the default generator is back where it was
    (ngrad has one generator, the CPU's: ``devices`` and ``device_type`` are accepted and unused).

    ```python
    >>> import ngrad
    >>> _ = ngrad.manual_seed(1)
    >>> with ngrad.random.fork_rng():
    ...     _ = ngrad.rand(5)
    >>> a = ngrad.rand(1)
    >>> _ = ngrad.manual_seed(1)
    >>> bool((a == ngrad.rand(1)).all())
    True

    ```
    """
    if not enabled:
        yield
        return
    saved = default_generator.state_bytes()
    try:
        yield
    finally:
        default_generator.set_state(saved)
