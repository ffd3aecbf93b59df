"""Containers of modules and parameters, as in ``torch.nn``: ``Sequential``, ``ModuleList``,
``ModuleDict``, ``ParameterList``, ``ParameterDict``.

Contract: each keeps its items registered on itself (modules under ``"0"``, ``"1"``... or their
keys), so the ``Module`` iterators, ``state_dict`` and ``repr`` see them; list-like containers
renumber after a deletion, as PyTorch's do.
"""

import operator
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from ...tensor import Tensor
from ..parameter import Parameter
from .module import Module, addindent

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


def _abs_index(idx, n):
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range")
    return idx % n if n else idx


class Sequential(Module):
    """Modules called in order, each on the previous one's output.

    ```python
    >>> import ngrad
    >>> from ngrad import nn
    >>> net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
    >>> len(net), type(net[1]).__name__, net(ngrad.ones(3, 2)).shape
    (3, 'ReLU', ngrad.Size([3, 1]))

    ```
    """

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        keys = list(self._modules)
        return self._modules[keys[_abs_index(idx, len(keys))]]

    def __setitem__(self, idx, module):
        keys = list(self._modules)
        setattr(self, keys[_abs_index(idx, len(keys))], module)

    def __delitem__(self, idx):
        keys = list(self._modules)
        for k in keys[idx] if isinstance(idx, slice) else [keys[_abs_index(idx, len(keys))]]:
            del self._modules[k]
        self.__dict__["_modules"] = {str(i): m for i, m in enumerate(self._modules.values())}

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __add__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)!s} is given.")
        out = Sequential()
        for m in list(self) + list(other):
            out.append(m)
        return out

    def __iadd__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)!s} is given.")
        for m in list(other):
            self.append(m)
        return self

    def __mul__(self, other):
        if not isinstance(other, int) or isinstance(other, bool):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(other)}")
        if other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")
        out = Sequential()
        for _ in range(other):  # the same module objects repeated, as PyTorch's
            for m in self:
                out.append(m)
        return out

    __rmul__ = __mul__

    def __imul__(self, other):
        if not isinstance(other, int) or isinstance(other, bool):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(other)}")
        if other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")
        mods = list(self)
        for _ in range(other - 1):
            for m in mods:
                self.append(m)
        return self

    def append(self, module):
        """Add ``module`` at the end; returns self."""
        self.add_module(str(len(self)), module)
        return self

    def insert(self, index, module):
        """Insert ``module`` before position ``index``; returns self."""
        if not isinstance(module, Module):
            raise AssertionError(f"module should be of type: {Module}")
        n = len(self._modules)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        mods = list(self._modules.values())
        mods.insert(index + n if index < 0 else index, module)
        self.__dict__["_modules"] = {str(i): m for i, m in enumerate(mods)}
        return self

    def extend(self, sequential):
        for m in sequential:
            self.append(m)
        return self

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def forward(self, input):
        for module in self._modules.values():
            input = module(input)
        return input


class ModuleList(Module):
    """A list of modules, registered so that their parameters are the list's.

    ```python
    >>> from ngrad import nn
    >>> layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    >>> layers.append(nn.ReLU())
    ModuleList(
      (0-2): 3 x Linear(in_features=2, out_features=2, bias=True)
      (3): ReLU()
    )
    >>> len(list(layers.parameters()))
    6

    ```
    """

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self += modules

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_abs_index(idx, len(self)))]

    def __setitem__(self, idx, module):
        setattr(self, str(_abs_index(idx, len(self))), module)

    def __delitem__(self, idx):
        keys = list(self._modules)
        for k in keys[idx] if isinstance(idx, slice) else [str(_abs_index(idx, len(keys)))]:
            del self._modules[k]
        self.__dict__["_modules"] = {str(i): m for i, m in enumerate(self._modules.values())}

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        out = ModuleList()
        for m in list(self) + list(other):
            out.append(m)
        return out

    def insert(self, index, module):
        """Insert ``module`` before position ``index``."""
        mods = list(self._modules.values())
        mods.insert(index, module)
        self.__dict__["_modules"] = {}
        for i, m in enumerate(mods):
            self.add_module(str(i), m)

    def append(self, module):
        """Add ``module`` at the end; returns self."""
        self.add_module(str(len(self)), module)
        return self

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def extend(self, modules):
        """Add every module of an iterable at the end; returns self."""
        if not isinstance(modules, Iterable):
            raise TypeError("ModuleList.extend should be called with an iterable, but got " + type(modules).__name__)
        offset = len(self)
        for i, m in enumerate(modules):
            self.add_module(str(offset + i), m)
        return self

    def __repr__(self):
        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        blocks = []  # runs of equal reprs print once: "(0-2): 3 x Linear(...)", as PyTorch's
        for i, r in enumerate(reprs):
            if blocks and blocks[-1][2] == r:
                blocks[-1][1] = i
            else:
                blocks.append([i, i, r])
        lines = []
        for start, end, r in blocks:
            line = f"({start}): {r}" if start == end else f"({start}-{end}): {end - start + 1} x {r}"
            lines.append(addindent(line, 2))
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """A dict of modules, registered under their keys (insertion order kept)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def clear(self):
        self._modules.clear()

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules):
        """Add the modules of a mapping or an iterable of ``(key, module)`` pairs."""
        _update_pairs(self, modules, "ModuleDict", "ModuleDict")


def _param_line(k, p, type_name):
    if not isinstance(p, Tensor):
        return f"  ({k}): Object of type: {type(p).__name__}"
    size = "x".join(str(s) for s in p.size())
    dev = f" ({p.device})" if p.device.type == "cuda" else ""
    kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
    return f"  ({k}): {kind} containing: [{type_name(p)} of size {size}{dev}]"


class ParameterList(Module):
    """A list of parameters (tensors put in it become ``Parameter``\\ s), registered on the list.

    ```python
    >>> import ngrad
    >>> from ngrad import nn
    >>> ps = nn.ParameterList([ngrad.zeros(2, 3)])
    >>> ps
    ParameterList(  (0): Parameter containing: [ngrad.float32 of size 2x3])

    ```
    """

    def __init__(self, values=None):
        super().__init__()
        self.__dict__["_size"] = 0
        if values is not None:
            self += values

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            out = type(self)()
            for i in range(*idx.indices(len(self))):
                out.append(self[i])
            return out
        return getattr(self, str(_abs_index(idx, len(self))))

    def __setitem__(self, idx, param):
        idx = _abs_index(idx, len(self))
        if isinstance(param, Tensor) and not isinstance(param, Parameter):
            param = Parameter(param)
        setattr(self, str(idx), param)

    def __len__(self):
        return self._size

    def __iter__(self):
        return iter(self[i] for i in range(len(self)))

    def __iadd__(self, parameters):
        return self.extend(parameters)

    def append(self, value):
        """Add ``value`` at the end (a tensor becomes a ``Parameter``); returns self."""
        self.__dict__["_size"] += 1
        self[len(self) - 1] = value
        return self

    def extend(self, values):
        if not isinstance(values, Iterable) or isinstance(values, Tensor):
            raise TypeError("ParameterList.extend should be called with an iterable, but got " + type(values).__name__)
        for v in values:
            self.append(v)
        return self

    def extra_repr(self):
        return "\n".join(_param_line(k, p, lambda t: repr(t.dtype)) for k, p in enumerate(self))

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """A dict of parameters (tensors put in it become ``Parameter``\\ s), registered under their keys."""

    def __init__(self, parameters=None):
        super().__init__()
        self.__dict__["_keys"] = {}
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key):
        return getattr(self, key)

    def __setitem__(self, key, value):
        self._keys[key] = None
        if isinstance(value, Tensor) and not isinstance(value, Parameter):
            value = Parameter(value)
        setattr(self, key, value)

    def __delitem__(self, key):
        del self._keys[key]
        delattr(self, key)

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __reversed__(self):
        return reversed(list(self._keys))

    def __contains__(self, key):
        return key in self._keys

    def copy(self):
        return ParameterDict(OrderedDict((k, self[k]) for k in self._keys))

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self):
        for k in list(self._keys):
            del self[k]

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def popitem(self):
        k = list(self._keys)[-1]
        v = self[k]
        del self[k]
        return k, v

    def get(self, key, default=None):
        return self[key] if key in self else default

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def update(self, parameters):
        """Add the entries of a mapping or an iterable of ``(key, value)`` pairs."""
        _update_pairs(self, parameters, "ParametersDict", "ParameterDict")  # PyTorch's two spellings

    def extra_repr(self):
        return "\n".join(_param_line(k, p, lambda t: t.type()) for k, p in self.items())

    def __call__(self, input):
        raise RuntimeError("ParameterDict should not be called.")


def _update_pairs(target, items, update_name, element_name):
    """``ModuleDict``/``ParameterDict.update``: a mapping (or a dict of the same kind) entry by
    entry, else an iterable of ``(key, value)`` pairs, with PyTorch's errors for anything else."""
    if not isinstance(items, Iterable):
        raise TypeError(
            f"{update_name}.update should be called with an iterable of key/value pairs, but got {type(items).__name__}"
        )
    if isinstance(items, (Mapping, type(target))):
        for k, v in items.items():
            target[k] = v
        return
    for j, pair in enumerate(items):
        if not isinstance(pair, Iterable):
            raise TypeError(f"{element_name} update sequence element #{j} should be Iterable; is{type(pair).__name__}")
        if not len(pair) == 2:
            raise ValueError(f"{element_name} update sequence element #{j} has length {len(pair)}; 2 is required")
        target[pair[0]] = pair[1]
