"""``Module``: the base class of layers and models, with ``torch.nn.Module``'s behaviour.

Contract: assigning a ``Parameter``, a ``Buffer`` or a ``Module`` to an attribute registers it
(in ``_parameters``, ``_buffers``, ``_modules``, ordered by first assignment); the iterators
(``parameters``, ``named_modules``...) walk the tree in that order, each object once unless
``remove_duplicate=False``; ``state_dict``/``load_state_dict`` read and write parameters and
persistent buffers by dotted name with PyTorch's errors; ``__call__`` runs forward pre-hooks,
``forward`` and forward hooks; ``repr`` prints PyTorch's module tree. Walks are iterative.
"""

from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from ... import grad_mode as _grad_mode
from ..._hooks import RemovableHandle
from ...tensor import Tensor
from ...tensor.core import conversion_target
from ..parameter import Buffer, Parameter

__all__ = ["Module"]


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def typename(obj):
    """The type name PyTorch's messages use: ``ngrad.FloatTensor`` for tensors, else the class's."""
    if isinstance(obj, Tensor):
        return obj.type()
    module = type(obj).__module__
    name = type(obj).__qualname__
    return name if module in ("builtins", None) else f"{module}.{name}"


def addindent(text, spaces):
    """Indent every line of ``text`` but the first by ``spaces`` (blank lines stay empty)."""
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    pad = " " * spaces
    return "\n".join([lines[0]] + [pad + line if line else line for line in lines[1:]])


def _check_name(kind, name, module):
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {typename(name)}")
    if "." in name:
        raise KeyError(f'{kind} name can\'t contain "."' + (f", got: {name}" if kind == "module" else ""))
    if name == "":
        raise KeyError(f'{kind} name can\'t be empty string ""')


class Module:
    """Base class of every layer and model: subclass it, assign parameters and submodules in
    ``__init__`` and compute in ``forward``; call the module, not ``forward``.

    ```python
    >>> import ngrad
    >>> from ngrad import nn
    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = nn.Linear(3, 2)
    ...         self.scale = nn.Parameter(ngrad.ones(1))
    ...     def forward(self, x):
    ...         return self.fc(x) * self.scale
    >>> net = Net()
    >>> [name for name, _ in net.named_parameters()]
    ['scale', 'fc.weight', 'fc.bias']
    >>> net
    Net(
      (fc): Linear(in_features=3, out_features=2, bias=True)
    )
    >>> net(ngrad.ones(4, 3)).shape
    ngrad.Size([4, 2])

    ```
    """

    training: bool
    call_super_init = False

    def __init__(self, *args, **kwargs):
        if self.call_super_init is False and bool(kwargs):
            raise TypeError(
                f"{type(self).__name__}.__init__() got an unexpected keyword argument '{next(iter(kwargs))}'"
            )
        if self.call_super_init is False and bool(args):
            raise TypeError(
                f"{type(self).__name__}.__init__() takes 1 positional argument but {len(args) + 1} were given"
            )
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = {}
        d["_forward_pre_hooks"] = OrderedDict()
        d["_forward_pre_hooks_with_kwargs"] = {}
        d["_forward_hooks"] = OrderedDict()
        d["_forward_hooks_with_kwargs"] = {}
        d["_forward_hooks_always_called"] = {}

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    # registration ---------------------------------------------------------------------------
    def register_buffer(self, name, tensor, persistent=True):
        """Add a buffer: state that is not a parameter (``state_dict`` holds it when ``persistent``)."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name("buffer", name, self)
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{typename(tensor)}' object to buffer '{name}' (torch Tensor or None required)"
            )
        if isinstance(tensor, Buffer):
            persistent = tensor.__dict__.get("persistent", persistent)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name, param):
        """Add a parameter (a ``Parameter`` or None) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name("parameter", name, self)
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is None:
            self._parameters[name] = None
            return
        if not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{typename(param)}' object to parameter '{name}' (torch.nn.Parameter or None required)"
            )
        if param.grad_fn is not None:
            raise ValueError(
                f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be created "
                f"explicitly. To express '{name}' as a function of another Tensor, compute the value in "
                "the forward() method."
            )
        self._parameters[name] = param

    def add_module(self, name, module):
        """Add a child module (or None) under ``name``."""
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{typename(module)} is not a Module subclass")
        _check_name("module", name, self)
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def __getattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if table in d and name in d[table]:
                return d[table][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        d = self.__dict__
        params = d.get("_parameters")

        def remove_from(*tables):
            for t in tables:
                if name in t:
                    if isinstance(t, set):
                        t.discard(name)
                    else:
                        del t[name]

        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(d, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{typename(value)}' as parameter '{name}' (torch.nn.Parameter or None expected)"
                )
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            if "_modules" not in d:
                raise AttributeError("cannot assign module before Module.__init__() call")
            remove_from(d, self._parameters, self._buffers, self._non_persistent_buffers_set)
            self._modules[name] = value
        elif "_modules" in d and name in self._modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{typename(value)}' as child module '{name}' (torch.nn.Module or None expected)"
                )
            self._modules[name] = value
        elif isinstance(value, Buffer) or ("_buffers" in d and name in self._buffers):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{typename(value)}' as buffer '{name}' (torch.Tensor or None expected)")
            if isinstance(value, Buffer):
                if "_buffers" not in d:
                    raise AttributeError("cannot assign buffer before Module.__init__() call")
                remove_from(d, self._parameters, self._modules)
                self.register_buffer(name, value, value.__dict__.get("persistent", True))
            else:
                self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __delattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if name in d.get(table, ()):
                del d[table][name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = list(super().__dir__()) + list(self._parameters) + list(self._modules) + list(self._buffers)
        return sorted(k for k in set(keys) if not k[:1].isdigit())

    # iteration --------------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """``(dotted name, module)`` for this module and every descendant, depth first, each once
        unless ``remove_duplicate=False``."""
        memo = set() if memo is None else memo
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if remove_duplicate:
                if m in memo:
                    continue
                memo.add(m)
            yield name, m
            kids = [(name + ("." if name else "") + k, c) for k, c in m._modules.items() if c is not None]
            stack.extend(reversed(kids))

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and m not in seen:
                seen.add(m)
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, table, prefix, recurse, remove_duplicate):
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        seen = set()
        for mod_prefix, m in mods:
            for k, v in getattr(m, table).items():
                if v is None:
                    continue
                if remove_duplicate:
                    if id(v) in seen:
                        continue
                    seen.add(id(v))
                yield mod_prefix + ("." if mod_prefix else "") + k, v

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """``(dotted name, parameter)`` of this module (and its descendants when ``recurse``)."""
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        """The parameters of this module and (``recurse``) its descendants, each once."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target):
        """The descendant at the dotted path ``target`` (``''`` is this module)."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def get_parameter(self, target):
        """The parameter at the dotted path ``target``."""
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        p = getattr(mod, name)
        if not isinstance(p, Parameter):
            raise AttributeError("`" + name + "` is not an nn.Parameter")
        return p

    def get_buffer(self, target):
        """The buffer at the dotted path ``target``."""
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        if name not in mod._buffers:
            raise AttributeError("`" + name + "` is not a buffer")
        return getattr(mod, name)

    # modes and conversions ----------------------------------------------------------------------
    def train(self, mode=True):
        """Set training mode (``Dropout`` drops, ``BatchNorm`` uses batch statistics) on this
        module and its descendants; returns self."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            m.training = mode
        return self

    def eval(self):
        """``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Reset every parameter's ``.grad`` (to None, or to zeros with ``set_to_none=False``)."""
        for p in self.parameters():
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    g = p.grad
                    if g.grad_fn is not None:
                        g = g.detach()
                    else:
                        g.requires_grad_(False)
                    p.grad = g.zero_()

    def apply(self, fn):
        """Call ``fn`` on every descendant (children first) and then on this module; returns self."""
        stack = [(self, False)]
        while stack:  # children before parents, each child once per parent (as PyTorch recurses)
            m, expanded = stack.pop()
            if expanded:
                fn(m)
            else:
                stack.append((m, True))
                stack.extend((c, False) for c in reversed(list(m.children())))
        return self

    def _apply(self, fn):
        """Replace every parameter's and buffer's value by ``fn(value)``, keeping the objects."""
        with _grad_mode.no_grad():
            for m in self.modules():
                for table in (m._parameters, m._buffers):
                    for k, t in table.items():
                        if t is None:
                            continue
                        new = fn(t)
                        if new is t:
                            continue
                        if isinstance(t, Parameter):
                            t.data = new
                            if t.grad is not None:
                                t.grad = fn(t.grad)
                        else:
                            table[k] = new
        return self

    def to(self, *args, **kwargs):
        """Move or cast parameters and buffers in place (``to(dtype)`` casts floating ones only,
        ``to(device)``); returns self."""
        dtype, dev = conversion_target(args, kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(
                f"nn.Module.to only accepts floating point or complex dtypes, but got desired dtype={dtype}"
            )

        def convert(t):
            out = t if dev is None else t.to(dev)
            if dtype is not None and t.is_floating_point():
                out = out.to(dtype)
            return out

        return self._apply(convert)

    def float(self):
        return self._apply(lambda t: t.float() if t.is_floating_point() else t)

    def double(self):
        return self._apply(lambda t: t.double() if t.is_floating_point() else t)

    def cpu(self):
        return self._apply(lambda t: t.cpu())

    def cuda(self, device=None):
        return self._apply(lambda t: t.cuda(device))

    def type(self, dst_type):
        return self._apply(lambda t: t.to(dst_type))

    # state dict -------------------------------------------------------------------------------
    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """An ordered dict of parameters and persistent buffers by dotted name (detached unless
        ``keep_vars``)."""
        if args:  # PyTorch's deprecated positional form (destination, prefix, keep_vars)
            destination, prefix, keep_vars = (list(args) + [destination, prefix, keep_vars][len(args) :])[:3]
        if destination is None:
            destination = OrderedDict()
        for mod_prefix, m in self.named_modules(prefix=prefix.rstrip("."), remove_duplicate=False):
            p = mod_prefix + "." if mod_prefix else ""
            for k, v in m._parameters.items():
                if v is not None:
                    destination[p + k] = v if keep_vars else v.detach()
            for k, v in m._buffers.items():
                if v is not None and k not in m._non_persistent_buffers_set:
                    destination[p + k] = v if keep_vars else v.detach()
        return destination

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy values from ``state_dict`` into parameters and persistent buffers. ``strict``
        raises for missing and unexpected keys; returns ``(missing_keys, unexpected_keys)``."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, errors, mine = [], [], set()
        with _grad_mode.no_grad():
            for mod_prefix, m in self.named_modules(remove_duplicate=False):
                p = mod_prefix + "." if mod_prefix else ""
                mine.update(p + k for k in m._modules)  # a key naming a child is not unexpected (as torch)
                local = [(k, v, m._parameters) for k, v in m._parameters.items() if v is not None]
                local += [
                    (k, v, m._buffers)
                    for k, v in m._buffers.items()
                    if v is not None and k not in m._non_persistent_buffers_set
                ]
                for k, v, table in local:
                    key = p + k
                    mine.add(key)
                    if key not in state_dict:
                        missing.append(key)
                        continue
                    _load_one(key, v, state_dict[key], table, k, assign, errors)
        unexpected = [k for k in state_dict if k not in mine]
        if strict:
            if unexpected:
                errors.insert(
                    0, "Unexpected key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in unexpected))
                )
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError(
                "Error(s) in loading state_dict for {}:\n\t{}".format(type(self).__name__, "\n\t".join(errors))
            )
        return _IncompatibleKeys(missing, unexpected)

    # hooks and calling ------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` (or ``hook(module, args, kwargs)`` with ``with_kwargs``) before
        ``forward``; a result other than None replaces the arguments. Returns a handle."""
        handle = RemovableHandle(self._forward_pre_hooks)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``) after
        ``forward``; a result other than None replaces the output. Returns a handle."""
        handle = RemovableHandle(self._forward_hooks)
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def __call__(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks):
            return self.forward(*args, **kwargs)
        for hid, hook in list(self._forward_pre_hooks.items()):
            if hid in self._forward_pre_hooks_with_kwargs:
                res = hook(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise RuntimeError(
                            f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got {res}."
                        )
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        try:
            out = self.forward(*args, **kwargs)
        except Exception:
            for hid, hook in list(self._forward_hooks.items()):
                if hid in self._forward_hooks_always_called:
                    self._run_forward_hook(hid, hook, args, kwargs, None)
            raise
        for hid, hook in list(self._forward_hooks.items()):
            res = self._run_forward_hook(hid, hook, args, kwargs, out)
            if res is not None:
                out = res
        return out

    def _run_forward_hook(self, hid, hook, args, kwargs, out):
        if hid in self._forward_hooks_with_kwargs:
            return hook(self, args, kwargs, out)
        return hook(self, args, out)

    # printing ---------------------------------------------------------------------------------
    def _get_name(self):
        return type(self).__name__

    def extra_repr(self):
        """The module's own settings, printed inside its parentheses (override it)."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({k}): " + addindent(repr(m), 2) for k, m in self._modules.items()]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __setstate__(self, state):
        self.__dict__.update(state)
        for k, default in (("_forward_pre_hooks_with_kwargs", {}), ("_forward_hooks_with_kwargs", {})):
            self.__dict__.setdefault(k, default)
        self.__dict__.setdefault("_forward_hooks_always_called", {})
        self.__dict__.setdefault("_non_persistent_buffers_set", set())


def _load_one(key, mine, theirs, table, name, assign, errors):
    """Copy ``theirs`` into the parameter or buffer ``mine`` (or put it in its place with
    ``assign``), appending PyTorch's message to ``errors`` when it cannot be loaded."""
    if not isinstance(theirs, Tensor):
        errors.append(
            f'While copying the parameter named "{key}", expected torch.Tensor or Tensor-like object from '
            f"checkpoint but received {type(theirs)}"
        )
        return
    if tuple(theirs.shape) != tuple(mine.shape):
        errors.append(
            f"size mismatch for {key}: copying a param with shape {theirs.shape} from checkpoint, "
            f"the shape in current model is {mine.shape}."
        )
        return
    if assign:
        if isinstance(mine, Parameter):
            if isinstance(theirs, Parameter):
                theirs.requires_grad_(mine.requires_grad)
            else:
                theirs = Parameter(theirs, requires_grad=mine.requires_grad)
        table[name] = theirs
        return
    try:
        mine.copy_(theirs.to(device=mine.device))
    except Exception as e:  # PyTorch reports a failed copy under the key's name
        errors.append(
            f'While copying the parameter named "{key}", whose dimensions in the model are {mine.shape} and '
            f"whose dimensions in the checkpoint are {theirs.shape}, an exception occurred : {e.args}."
        )
