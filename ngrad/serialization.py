"""``ngrad.save`` and ``ngrad.load``: tensors, state dicts and nested containers in a file that
loading cannot turn into code, and ``state_dict``\\ s saved by ``torch.save`` read without PyTorch.

Contract. ``save(obj, f)`` writes a zip archive (``f`` a path or a binary file object) holding
``ngrad/version`` (``1``), ``ngrad/tree.json`` (the structure of ``obj``) and one
``ngrad/arrays/<n>.npy`` per distinct tensor or NumPy array (NumPy's ``.npy`` format, written
and read with ``allow_pickle=False``). ``obj`` may nest dicts (``OrderedDict`` kept), lists
and tuples of tensors, ``Parameter``\\ s, NumPy arrays, ``None``, bools, ints, floats and strings;
anything else is refused when saving. Each node of the tree is a JSON object with one key naming
its kind: ``{"value": v}`` for ``None``/bool/int/float/str, ``{"tensor": n, "dtype": "float32",
"requires_grad": b, "parameter": b, "device": "cpu"}``, ``{"ndarray": n}``, ``{"list": [...]}``,
``{"tuple": [...]}`` and ``{"dict": [[key, value], ...], "ordered": b}`` (keys are nodes, so int
keys stay ints). A tensor object that appears twice is stored once and loaded as one object
(views that share storage are stored as separate values).

``load(f)`` reads that format, or the zip format of ``torch.save`` (``<name>/data.pkl`` and
``<name>/data/<key>``) through an unpickler that accepts only ``OrderedDict``, PyTorch's tensor
and parameter rebuild functions, its storage types and dtypes, and ``set``: any other global in
the pickle raises ``pickle.UnpicklingError`` before anything is built. A tensor's view of its
storage is bounds-checked before it is read.
"""

import collections
import io
import json
import os
import pickle
import tempfile
import zipfile

import numpy as np

from .engine.ir import dtypes as D
from .tensor import Tensor

__all__ = ["save", "load"]

_VERSION = "1"
_DTYPES = {
    "float32": D.float32,
    "float64": D.float64,
    "int32": D.int32,
    "int64": D.int64,
    "bool": D.bool_,
    "complex64": D.complex64,
    "complex128": D.complex128,
}


def save(obj, f, pickle_module=None, pickle_protocol=None, _use_new_zipfile_serialization=True):
    """Write ``obj`` (tensors, NumPy arrays and plain values nested in dicts, lists and tuples)
    to ``f``, a path or a writable binary file object.

    ```python
    >>> import io, ngrad
    >>> buf = io.BytesIO()
    >>> ngrad.save({"w": ngrad.ones(2), "step": 3}, buf)
    >>> _ = buf.seek(0)
    >>> ngrad.load(buf)
    {'w': tensor([1., 1.]), 'step': 3}

    ```
    """
    arrays = []
    tree = _encode(obj, arrays, {})
    if isinstance(f, (str, os.PathLike)):
        folder = os.path.dirname(os.path.abspath(f))
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                _write(out, tree, arrays)
            os.replace(tmp, f)  # a reader never sees half a file
        except BaseException:
            os.unlink(tmp)
            raise
    else:
        _write(f, tree, arrays)


def _write(f, tree, arrays):
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr("ngrad/version", _VERSION)
        z.writestr("ngrad/tree.json", json.dumps(tree))
        for i, a in enumerate(arrays):
            buf = io.BytesIO()
            np.save(buf, a, allow_pickle=False)
            z.writestr(f"ngrad/arrays/{i}.npy", buf.getvalue())


def _encode(obj, arrays, memo):
    """The JSON tree of ``obj`` (its arrays appended to ``arrays``), walked with a stack."""
    from .nn.parameter import Parameter
    from .tensor.record import host_value

    root = {}
    stack = [(obj, root)]
    while stack:
        x, node = stack.pop()
        if x is None or isinstance(x, (bool, int, float, str)) and type(x) in (bool, int, float, str):
            node["value"] = x
        elif isinstance(x, Tensor):
            if id(x) not in memo:
                memo[id(x)] = len(arrays)
                arrays.append(np.array(host_value(x.detach()), order="C"))  # ascontiguousarray makes 0-d 1-d
            node.update(
                tensor=memo[id(x)],
                dtype=x.dtype.np.name,
                requires_grad=x.requires_grad,
                parameter=isinstance(x, Parameter),
                device=x.device.type,
            )
        elif isinstance(x, np.ndarray):
            if x.dtype.kind not in "biuf":
                raise TypeError(f"ngrad.save stores NumPy arrays of numbers and bools, not of dtype {x.dtype}")
            node["ndarray"] = len(arrays)
            arrays.append(np.array(x, order="C"))
        elif isinstance(x, dict):
            items = [[{}, {}] for _ in x]
            node["dict"] = items
            node["ordered"] = isinstance(x, collections.OrderedDict)
            for (k, v), pair in zip(x.items(), items):
                stack.append((v, pair[1]))
                stack.append((k, pair[0]))
        elif isinstance(x, (list, tuple)):
            children = [{} for _ in x]
            node["list" if isinstance(x, list) else "tuple"] = children
            stack.extend(zip(x, children))
        else:
            raise TypeError(
                f"ngrad.save cannot store an object of type {type(x).__name__}: only tensors, NumPy arrays, "
                "None, bools, ints, floats and strings, in dicts, lists and tuples"
            )
    return root


def load(f, map_location=None, pickle_module=None, *, weights_only=True, mmap=None, **pickle_load_args):
    """Read what ``ngrad.save`` wrote, or a ``torch.save`` zip file of tensors and containers
    (a ``state_dict``), from a path or a readable binary file object. ``map_location``
    (``'cpu'``, ``'cuda'`` or an ``ngrad.device``) puts every tensor on that device."""
    with zipfile.ZipFile(f, "r") as z:
        names = z.namelist()
        if "ngrad/tree.json" in names:
            version = z.read("ngrad/version").decode()
            if version != _VERSION:
                raise RuntimeError(f"ngrad.load: this file has format version {version}; ngrad reads {_VERSION}")
            arrays = {}

            def array(i):
                if i not in arrays:
                    arrays[i] = np.load(io.BytesIO(z.read(f"ngrad/arrays/{i}.npy")), allow_pickle=False)
                return arrays[i]

            return _decode(json.loads(z.read("ngrad/tree.json")), array, map_location)
        pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
        if len(pkl) != 1:
            raise RuntimeError("ngrad.load: not a file written by ngrad.save or torch.save (zip format)")
        return _read_torch_zip(z, pkl[0].rsplit("/", 1)[0], map_location)


def _device(stored, map_location):
    if map_location is None:
        return stored
    if callable(map_location):
        raise TypeError("ngrad.load takes map_location as a device ('cpu', 'cuda', ngrad.device), not a function")
    return map_location


def _decode(tree, array, map_location):
    """The object a JSON tree describes (``array(n)`` reads the n-th array), walked with a stack."""
    from .factories import tensor
    from .nn.parameter import Parameter

    tensors = {}
    result = [None]
    stack = [(tree, result, 0)]
    fill = []  # containers are built once their children are
    while stack:
        node, parent, slot = stack.pop()
        if "value" in node:
            parent[slot] = node["value"]
        elif "tensor" in node:
            i = node["tensor"]
            if i not in tensors:
                dtype = _DTYPES.get(node["dtype"])
                if dtype is None:
                    raise RuntimeError(f"ngrad.load: unknown dtype {node['dtype']!r}")
                t = tensor(array(i), dtype=dtype, device=_device(node["device"], map_location))
                if node["parameter"]:
                    t = Parameter(t, requires_grad=node["requires_grad"])
                elif node["requires_grad"]:
                    t.requires_grad_()
                tensors[i] = t
            parent[slot] = tensors[i]
        elif "ndarray" in node:
            parent[slot] = array(node["ndarray"])
        elif "dict" in node:
            pairs = [[None, None] for _ in node["dict"]]
            fill.append((parent, slot, "dict", pairs, node.get("ordered", False)))
            for (k, v), pair in zip(node["dict"], pairs):
                stack.append((k, pair, 0))
                stack.append((v, pair, 1))
        elif "list" in node or "tuple" in node:
            kind = "list" if "list" in node else "tuple"
            items = [None] * len(node[kind])
            fill.append((parent, slot, kind, items, False))
            stack.extend((child, items, j) for j, child in enumerate(node[kind]))
        else:
            raise RuntimeError(f"ngrad.load: unknown node {sorted(node)}")
    for parent, slot, kind, items, ordered in reversed(fill):
        if kind == "dict":
            parent[slot] = (collections.OrderedDict if ordered else dict)((k, v) for k, v in items)
        else:
            parent[slot] = items if kind == "list" else tuple(items)
    return result[0]


# --- torch.save's zip format, read without PyTorch ------------------------------------------------

_STORAGES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "BoolStorage": np.bool_,
    "HalfStorage": np.float16,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
}


class _StorageType:
    def __init__(self, name):
        self.name = name


class _TorchUnpickler(pickle.Unpickler):
    """Builds only what a state dict holds: any other global is refused (no code runs)."""

    def __init__(self, file, storage):
        super().__init__(file)
        self.storage = storage

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) in (("builtins", "set"), ("builtins", "frozenset")):
            return set if name == "set" else frozenset
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "torch._utils" and name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
            return _rebuild_parameter
        if module == "torch" and name in _STORAGES:
            return _StorageType(name)
        if module == "torch" and name in _DTYPES:
            return _DTYPES[name]
        raise pickle.UnpicklingError(
            f"ngrad.load: refusing to load the global {module}.{name} from a PyTorch checkpoint "
            "(only tensors, parameters and containers of them are read)"
        )

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"ngrad.load: unknown persistent id {pid!r}")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, _StorageType):
            raise pickle.UnpicklingError(f"ngrad.load: unsupported storage type {kind!r}")
        return self.storage(str(key), np.dtype(_STORAGES[kind.name]), numel)


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
    from .factories import tensor

    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride) or offset < 0 or any(s < 0 for s in size + stride):
        raise pickle.UnpicklingError("ngrad.load: a tensor with an invalid size or stride")
    if all(size):  # every element read lies inside the storage
        last = offset + sum((n - 1) * st for n, st in zip(size, stride))
        if last >= storage.size:
            raise pickle.UnpicklingError("ngrad.load: a tensor reads past the end of its storage")
    name = storage.dtype.name if storage.dtype != np.bool_ else "bool"
    if name not in _DTYPES:
        raise RuntimeError(f"ngrad.load: ngrad has no dtype for PyTorch's {name} tensors")
    if not all(size):
        value = np.zeros(size, dtype=storage.dtype)
    else:
        item = storage.itemsize
        view = np.lib.stride_tricks.as_strided(
            storage[offset:], shape=size, strides=[st * item for st in stride], writeable=False
        )
        value = np.array(view)
    t = tensor(value, dtype=_DTYPES[name])
    if requires_grad:
        t.requires_grad_()
    return t


def _rebuild_parameter(data, requires_grad, backward_hooks, state=None):
    from .nn.parameter import Parameter

    return Parameter(data, requires_grad)


def _read_torch_zip(z, prefix, map_location):
    """The object a ``torch.save`` zip archive holds (its pickle read by ``_TorchUnpickler``)."""
    big = f"{prefix}/byteorder" in z.namelist() and z.read(f"{prefix}/byteorder").strip() == b"big"
    storages = {}

    def storage(key, dtype, numel):
        if key not in storages:
            raw = z.read(f"{prefix}/data/{key}")
            a = np.frombuffer(raw, dtype=dtype.newbyteorder(">") if big else dtype)
            if a.size < numel:
                raise pickle.UnpicklingError(f"ngrad.load: storage {key} is shorter than its {numel} elements")
            storages[key] = a.astype(dtype)
        return storages[key]

    obj = _TorchUnpickler(io.BytesIO(z.read(f"{prefix}/data.pkl")), storage).load()
    if map_location is not None:
        obj = _moved(obj, map_location)
    return obj


def _moved(obj, device):
    """``obj`` with every tensor in it on ``device`` (parameters stay parameters)."""
    from .nn.parameter import Parameter

    if isinstance(obj, Parameter):
        return obj if obj.device.type == str(device).split(":")[0] else Parameter(obj.detach().to(device))
    if isinstance(obj, Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        out = type(obj)((k, _moved(v, device)) for k, v in obj.items())
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_moved(v, device) for v in obj)
    return obj
