"""The generated replay of a traced program: ``entry`` and its fast path ``probe``.

Contract: ``make_entry(variant, ...)`` writes straight-line Python for a run-mode variant
(``ngrad.tracing.variant.Variant``: a program without differentiable outputs) and returns
``(entry, probe)``. ``entry(flat)`` reads the program's inputs, calls its driver, builds the
output tensors and the result tree; it runs once ``Variant.valid`` held. ``probe(args)``, made
for a call without keyword arguments, first checks what ``CompiledFunction.__call__`` and
``Variant.valid`` would (the signature, static values such as an optimizer's
hyperparameters, which ``.grad`` exist, captured constants updated in place) and returns
``MISS`` when any differs; the driver's code is inlined in it (``runtime.inline``), so a call
of the common case runs one generated Python function and the kernels. The generated names
start with ``_`` (the driver's do not). Both raise ``Stale`` when a tensor they read is gone.
"""

import sys

from .. import grad_mode
from ..engine.ir.dtypes import from_short
from ..engine.ir.graph import ON_RECORD, Node
from ..engine.runtime import debug_level, inline
from ..engine.runtime.realize import realize
from ..tensor.core import Tensor
from ..tensor.inplace import replacements
from .trace import Stale

__all__ = ["MISS", "PROBE_CONSTS", "define", "make_entry"]

_gm = grad_mode.state
_object_new = object.__new__
MISS = object()  # what a probe returns when its call is not the one it was made for
PROBE_CONSTS = 16  # a probe asks each captured constant whether it was replaced, up to this many


def define(name, lines, g, param="flat"):
    """Define the generated function ``name(param)`` with body ``lines`` in globals ``g``."""
    text = f"def {name}({param}):\n" + "".join(f"    {line}\n" for line in lines)
    if debug_level() >= 2:
        print(f"ngrad: generated {name}\n{text}", file=sys.stderr)
    exec(compile(text, f"<ngrad {name}>", "exec"), g)
    return g[name]


def _probe_tensor(v, node, dtype, shape, requires_grad):
    """A probe's lines checking that ``v`` is a tensor of the signature (``dtype``: the global
    holding its dtype), its node left in the local ``node``."""
    return [
        f"if {v}.__class__ is not _Tensor: return _MISS",
        f"{node} = {v}._node",
        f"if {node}.shape != {shape!r} or {node}.dtype is not {dtype} or "
        f"{node}.requires_grad != {requires_grad!r}: return _MISS",
    ]


def _probe_part(spec, e, g):
    """A probe's lines checking that the argument expression ``e`` has the structure ``spec``
    (from ``CompiledFunction._spec``: ``flatten``'s, or a static argument's) and appending its
    leaves to ``flat`` as ``flatten`` would; classes are matched exactly (a subclass misses)."""
    tag, lines = spec[0], []
    if tag in ("static", "S"):
        t, v = spec[1] if tag == "static" else spec[1:]
        name = f"_X{len(g)}"
        g[name], g[name + "t"] = v, t
        lines.append(f"if {e}.__class__ is not {name}t or {e} != {name}: return _MISS")
        return lines + ([f"flat.append({e})"] if tag == "S" else [])
    if tag == "T":
        name = f"_X{len(g)}"
        g[name] = spec[1]
        return [
            f"{name}v = {e}",
            *_probe_tensor(f"{name}v", f"{name}n", name, spec[2], spec[3]),
            f"flat.append({name}v)",
        ]
    if tag == "F":
        return [f"if {e}.__class__ is not float: return _MISS", f"flat.append({e})"]
    name = f"_X{len(g)}"
    g[name] = None  # the name is the probe's local for this container: reserved
    items = spec[1]  # tag: "tuple", "list" or "dict", the name of the builtin class
    lines += [f"{name} = {e}", f"if {name}.__class__ is not {tag} or len({name}) != {len(items)}: return _MISS"]
    if tag == "dict":
        g[name + "k"] = tuple(k for k, _ in items)
        lines.append(f"if tuple({name}) != {name}k: return _MISS")
        for k, sub in items:
            key = f"{name}_{len(g)}"
            g[key] = k
            lines += _probe_part(sub, f"{name}[{key}]", g)
    else:
        for i, sub in enumerate(items):
            lines += _probe_part(sub, f"{name}[{i}]", g)
    return lines


class _Code:
    """The generated functions of one variant while they are written: their globals ``g``
    (names are numbered by ``len(g)``, so the order of the steps decides them), the input reads
    ``reads`` and their values' names ``vals``, and ``probed``: (index in ``reads``, the line
    that replaces it in a probe of plain tensor arguments, which has their nodes already)."""

    def __init__(self, variant):
        self.variant = variant
        self.g = {
            "_run": variant.run,
            "_ready": lambda n: realize([n])[0],
            "_Stale": Stale,
            "_apply": variant.apply_effects,
            "_Tensor": Tensor,
            "_Node": Node,
            "_new": _object_new,
            "_RECORD": ON_RECORD,
            "_GM": _gm,
            "_REPL": replacements,
            "_V": variant,
            "_MISS": MISS,
        }
        self.reads, self.vals, self.probed = [], [], []
        self.outs = [f"_o{w}" for w in range(len(variant.tape.outputs))]

    def read_inputs(self, is_tensor):
        """The lines that read each program input into ``_v{i}``."""
        g, reads = self.g, self.reads
        for i, (kind, data) in enumerate(self.variant.inputs):
            v = f"_v{i}"
            self.vals.append(v)
            if kind == "arg" and not is_tensor[data]:
                reads.append(f"{v} = flat[{data}]")
                continue
            if kind == "const":
                g[f"_C{i}"] = data.value
                reads.append(f"{v} = _C{i}")
                continue
            if kind == "call":
                g[f"_F{i}"] = data
                reads.append(f"{v} = _F{i}()")
                continue
            if kind == "arg":
                reads.append(f"_n{i} = flat[{data}]._node")
                self.probed.append((len(reads) - 1, f"_n{i} = _a{data}"))
            else:
                g[f"_T{i}"] = data
                if kind == "grad":
                    reads += [f"_n{i} = _T{i}(flat)._grad", f"if _n{i} is None: raise _Stale()", f"_n{i} = _n{i}._node"]
                else:
                    reads.append(f"_n{i} = _T{i}(flat)._node")
            reads += [f"{v} = _n{i}.value", f"if {v} is None: {v} = _ready(_n{i})"]

    def outputs(self):
        """The lines that build the output tensors ``_r{k}``, field by field (Node.__init__ and a
        wrapper call cost more than the rest of a small program's replay; outputs are sources:
        no placement to do), then apply the effects."""
        v, tail = self.variant, []
        for k in range(v.n_out):
            out = v.tape.outputs[v.where[k]]
            self.g[f"_D{k}"] = from_short(v.tape.dtypes[out])
            tail += [
                "_m = _new(_Node)",
                "_m.op = 'input'",
                "_m.srcs = ()",
                "_m.params = None",
                f"_m.shape = {tuple(v.tape.shapes[out])!r}",
                f"_m.dtype = _D{k}",
                f"_m.value = {self.outs[v.where[k]]}",
                "_m.requires_grad = _m.differentiable = False",
                "_m.meta = None",
                f"_m.device = {'cuda' if v.target == 'cuda' else 'cpu'!r}",
                "if _RECORD[0] is not None: _RECORD[0](_m)",
                f"_r{k} = _new(_Tensor)",
                f"_r{k}._node = _m",
            ]
        if v.effects:
            tail.append(f"_apply(flat, [{''.join(f'{self.outs[w]}, ' for w in v.where[v.n_out :])}])")
        return tail

    def tree(self, spec, counter):
        """The expression of the result tree ``spec`` (``result_spec``'s) over ``_r{k}``."""
        tag = spec[0]
        if tag == "T":
            return f"_r{next(counter)}"
        if tag == "S":
            name = f"_S{len(self.g)}"
            self.g[name] = spec[1]
            return name
        items = [self.tree(x, counter) for x in spec[1]] if tag != "dict" else None
        if tag == "tuple":
            return "(" + "".join(f"{x}, " for x in items) + ")"
        if tag == "list":
            return "[" + ", ".join(items) + "]"
        parts = []
        for field, sub in spec[1]:
            name = f"_K{len(self.g)}"
            self.g[name] = field
            parts.append(f"{name}: {self.tree(sub, counter)}")
        return "{" + ", ".join(parts) + "}"

    def head(self, signature, parts):
        """The probe's checks of its call (see the module docstring), leaving ``flat`` as
        ``CompiledFunction`` would make it."""
        v, g = self.variant, self.g
        sig, enabled = signature
        # a captured constant updated in place (see Variant.valid): asked of each constant when
        # there are few, since every in-place update anywhere (a training step's own) moves the count
        if len(v.consts) <= PROBE_CONSTS:
            for j, n in enumerate(v.consts):
                g[f"_CN{j}"] = n
            replaced = "".join(f" or (_CN{j}.meta is not None and _CN{j}.meta.replaced)" for j in range(len(v.consts)))
        else:  # an optimizer's own updates move the count every call: then the constants are asked
            replaced = " or (_V.seen != _REPL[0] and not _V.kept())"
        count = len(sig) if parts is None else len(parts)
        head = [
            f"if len(args) != {count} or _GM.trace is not None or _GM.enabled != {enabled!r}{replaced}: return _MISS"
        ]
        if parts is None:  # positional tensors: ``flat`` is ``args``
            head.append("flat = args")
            for k, (shape, dtype, requires_grad) in enumerate(sig):
                g[f"_P{k}"] = dtype
                head += [f"_a{k} = flat[{k}]", *_probe_tensor(f"_a{k}", f"_a{k}", f"_P{k}", shape, requires_grad)]
        else:  # nested arguments and static values: ``flat`` as ``flatten`` would make it
            head.append("flat = []")
            for k, part in enumerate(parts):
                head += _probe_part(part, f"args[{k}]", g)
        for j, (getter, value) in enumerate(v.statics):
            g[f"_SG{j}"], g[f"_SV{j}"] = getter, value
            head.append(f"if _SG{j}() != _SV{j}: return _MISS")
        for j, (target, had) in enumerate(v.guards):  # a target gone raises Stale: __call__ goes on
            g[f"_GT{j}"] = target
            head.append(f"if (_GT{j}(flat)._grad is not None) != {had!r}: return _MISS")
        return head


def make_entry(variant, is_tensor, signature, parts):
    """``(entry, probe)`` of a run-mode ``variant`` (see the module docstring): ``is_tensor[k]``
    whether flat argument k is a tensor; ``signature`` the call's key in
    ``CompiledFunction.variants`` (None for a call with keyword arguments: then no probe);
    ``parts`` the structure of its arguments, None for plain tensors."""
    code = _Code(variant)
    code.read_inputs(is_tensor)
    tail = code.outputs()
    tail.append(f"return {code.tree(variant.out_spec, iter(range(variant.n_out)))}")
    call = [f"_o = _run([{', '.join(code.vals)}])"] + [f"{o} = _o[{w}]" for w, o in enumerate(code.outs)]
    entry = define("entry", code.reads + call + tail, code.g)
    if signature is None:
        return entry, None
    head = code.head(signature, parts)
    code.g["_entry"] = entry
    reads = code.reads
    if parts is None:  # the probe has each argument's node already
        for at, line in code.probed:
            reads[at] = line
    # a CUDA program runs through its own runtime: there is no CPU driver to inline
    inlined = inline(variant.tape, code.vals, code.g, "return _entry(flat)") if variant.target == "cpu" else None
    if inlined is not None:
        driver, results = inlined
        call = driver + [f"{o} = {r}" for o, r in zip(code.outs, results)]
    return entry, define("probe", head + reads + call + tail, code.g, "args")
