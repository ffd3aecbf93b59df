"""The optimizer base class, with ``torch.optim.Optimizer``'s interface.

A step computes every parameter's and state tensor's new value as lazy tensor expressions and
then realizes all of them together: one program per parameter group, whose loops the compiler
fuses (one compiled function, one call). Inside ``ngrad.compile`` nothing is realized: the
updates become effects of the compiled program, the learning rate is read on every call (a
scheduler does not retrace), and the other hyperparameters guard the trace. Outside, ``step``
runs itself under ``ngrad.compile`` (CPU parameters): recording and lowering Adam's update of
three small parameters cost 0.85 ms a step, the replayed program 45 µs. A new state layout (the
first step), another set of parameters with a gradient, or a changed hyperparameter other than
the learning rate traces again.
"""

import copy

from .. import grad_mode as _grad_mode
from ..engine.ir import dtypes as D
from ..engine.runtime.realize import realize
from ..tensor.core import Tensor
from ..tensor.inplace import inplace_update
from ..tracing import runtime_scalar, static_value

__all__ = ["Optimizer", "required"]

_gm = _grad_mode.state


class _Required:
    def __repr__(self):
        return "<required parameter>"


required = _Required()


class Optimizer:
    """Base class: holds ``param_groups`` (dicts with ``'params'`` and hyperparameters) and a
    per-parameter ``state``. Subclasses implement ``_update(group, hyper)``."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = {}
        self.param_groups = []
        self._layout = 0  # bumped when the state's structure changes (a trace depends on it)
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or dicts, "
                "but got " + type(params).__name__
            )
        groups = list(params)
        if len(groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {k}: {g[k]}" for k in sorted(g) if k != "params")
        return "\n".join(lines) + "\n)"

    def add_param_group(self, param_group):
        """Add a group of parameters (a dict with ``'params'`` and optional hyperparameters)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        group = dict(param_group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {k}")
            group.setdefault(k, v)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)
        self._layout += 1

    def zero_grad(self, set_to_none=True):
        """Reset the gradients of all parameters (to None by default, as in PyTorch)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad.zero_()

    def state_dict(self):
        """The state (per parameter index) and the param groups (parameters as indices)."""
        index, groups = {}, []
        for g in self.param_groups:
            for p in g["params"]:
                index.setdefault(id(p), len(index))
            groups.append(
                {**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
            )
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                if p in self.state:
                    state[index[id(p)]] = {k: _copy(v) for k, v in self.state[p].items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Load what ``state_dict()`` returned (groups must match in number and sizes)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group that doesn't match the size of optimizer's group"
                )
        by_index = {}
        for mine, theirs in zip(self.param_groups, groups):
            for p, i in zip(mine["params"], theirs["params"]):
                by_index[i] = p
            mine.update({k: v for k, v in theirs.items() if k != "params"})
        self.state = {}
        for i, st in state_dict["state"].items():
            p = by_index[int(i)]
            self.state[p] = {k: _copy(v, None if k == "step" else p.dtype) for k, v in st.items()}
        self._layout += 1

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss if given.

        Outside ``ngrad.compile`` the update itself runs as a compiled program (see the module
        docstring), as it does inside one."""
        loss = None
        if closure is not None:
            with _grad_mode.enable_grad():
                loss = closure()
        if _gm.trace is not None or any(p._node.device == "cuda" for g in self.param_groups for p in g["params"]):
            self._step()
        else:
            if self.__dict__.get("_program") is None:
                from ..tracing import compile

                self._program = compile(self._step)
            self._program()
        return loss

    def __getstate__(self):  # the compiled update is made again where the copy is used
        return {k: v for k, v in self.__dict__.items() if k != "_program"}

    def _step(self):
        static_value(lambda: self._layout)
        with _grad_mode.no_grad():
            for _i, group in enumerate(self.param_groups):
                hyper = {k: static_value(lambda g=group, k=k: g[k]) for k in group if k not in ("params", "lr")}
                hyper["lr"] = runtime_scalar(lambda g=group: float(g["lr"]))
                params = [p for p in group["params"] if p.grad is not None]
                for p in params:
                    if p not in self.state:
                        self.state[p] = {}
                        self._layout += 1
                _commit(self._update(params, hyper))

    def _update(self, params, hyper):
        """``[(tensor, new value), ...]`` for one group's parameters and state."""
        raise NotImplementedError

    def _grad(self, p, hyper):
        g = p.grad
        if g._node.shape != p._node.shape:
            raise RuntimeError(
                f"gradient of shape {list(g.shape)} does not match its parameter of shape {list(p.shape)}"
            )
        if hyper.get("maximize"):
            g = -g
        return g

    def _state(self, p, name, make):
        st = self.state[p]
        if name not in st:
            st[name] = make()
        return st[name]


def _copy(v, dtype=None):
    """A state entry's copy (a tensor cast to ``dtype`` when given: the parameter's, as PyTorch does)."""
    if not isinstance(v, Tensor):
        return copy.deepcopy(v)
    v = v.detach().clone()
    return v if dtype is None else v.to(dtype)


def step_tensor():
    """A new step counter: float64 whatever the default dtype, so bias corrections are computed
    in double precision as PyTorch's ``step.item()`` does."""
    from ..factories import tensor

    return tensor(0.0, dtype=D.float64)


def _commit(pairs):
    """Give each tensor its new value: one program computes all of them (see module docstring)."""
    if not pairs:
        return
    if _gm.trace is None:
        realize([new._node for _, new in pairs])
    for t, new in pairs:
        inplace_update(t, new)
