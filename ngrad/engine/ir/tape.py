"""The tape: ngrad's flat SSA intermediate representation.

Contract: a ``Tape`` has input slots (runtime arrays, or runtime Python scalars for values
such as a learning rate), instructions that each write one new slot from earlier slots, and
output slots. Every slot carries a shape and a dtype short name. ``verify()`` re-derives every
shape and dtype from the primitive table; ``format()`` prints the canonical form (slots
renumbered in definition order, params sorted), which ``parse`` reads back exactly; the
structural hash used by caches is taken from it. ``Builder`` appends instructions with shape
inference and hands out ``Var`` handles that the VJP rules of the primitive table compute with.
"""

from __future__ import annotations

import ast
import hashlib
import marshal
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from . import shapes as _shapes
from .prims import PRIMS, Params, Shape, TapeError

__all__ = ["Tape", "Instr", "Builder", "Var", "Key", "HashedKey", "NO_PARAMS", "parse", "TapeError"]


@dataclass(slots=True, eq=False, init=False)
class Instr:
    """``out = prim(*args; **params)`` on slot numbers. Compared by identity, as instructions
    are distinct definitions of distinct slots."""

    out: int
    prim: str
    args: tuple[int, ...]
    params: Params

    # written out rather than generated: ``args`` arrives as any sequence of slots (this is the
    # hot path of recording, and a ``__post_init__`` would add a call per instruction)
    def __init__(self, out: int, prim: str, args: Iterable[int], params: Params) -> None:
        self.out, self.prim, self.args, self.params = out, prim, tuple(args), params

    def __repr__(self) -> str:
        return f"Instr(%{self.out} = {self.prim}{tuple(self.args)} {self.params})"


Key = tuple[Any, ...]  # a hashable structural key (``Tape.key``, ``params_key``)
# the params of every instruction that has none: instructions never change their params, and a
# dict each is 64 bytes an instruction of a long tape
NO_PARAMS: Params = {}
DIGEST_INSTRS = 2048  # longer tapes are keyed by a digest of their structure (``Tape.key``)


@dataclass(slots=True, eq=False, repr=False)
class Tape:
    """A flat SSA program; see the module docstring. ``Tape()`` is empty; its lists are filled
    in place (by ``Builder``, ``parse``, differentiation).

    >>> from ngrad.engine.ir.tape import Builder
    >>> b = Builder()
    >>> x = b.input((3,), "f64")
    >>> y = (x * x).sum(axes=(0,), keepdim=False)
    >>> print(b.finish([y]).format())
    in %0 : f64[3]
    %1 = mul(%0, %0) : f64[3]
    %2 = sum(%1; axes=(0,), keepdim=False) : f64[]
    out %2
    """

    shapes: list[Shape] = field(default_factory=list)  # per slot
    dtypes: list[str] = field(default_factory=list)  # per slot, short names
    inputs: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # per input: "tensor" or "scalar"
    instrs: list[Instr] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    # (sizes it was computed at, key): a memoized joint tape is keyed per run
    _key: tuple[tuple[int, int, int], Key] | None = field(default=None, init=False)
    # (sizes, ``interpret.last_reads``): a scan's body is interpreted once a step
    _last: tuple[tuple[int, int, int], Any] | None = field(default=None, init=False)

    def __len__(self) -> int:
        return len(self.instrs)

    def key(self) -> Key:
        """A hashable structural key, cheaper than ``format()``. Raw slot numbers are part of it,
        so tapes with equal keys are identical (memoized results keyed by it can refer to slots).
        A tape of more than ``DIGEST_INSTRS`` instructions is keyed by a SHA-256 of that
        structure instead (equal up to a hash collision): the structure itself would hold about
        a hundred bytes per instruction for as long as a cache keeps the key."""
        at = (len(self.instrs), len(self.inputs), len(self.outputs))
        if self._key is not None and self._key[0] == at:
            return self._key[1]
        head = tuple((s, self.shapes[s], self.dtypes[s], k) for s, k in zip(self.inputs, self.kinds))
        instrs, shapes, dtypes = self.instrs, self.shapes, self.dtypes
        if len(instrs) <= DIGEST_INSTRS:
            parts: list[tuple[Any, ...]] = [head]
            for ins in instrs:
                parts.append((ins.out, ins.prim, ins.args, params_key(ins.params), shapes[ins.out], dtypes[ins.out]))
            parts.append(tuple(self.outputs))
            key: Key = HashedKey(parts)
        else:  # hashed a chunk at a time, so the structure is never whole in memory either
            h = hashlib.sha256(marshal.dumps((head, tuple(self.outputs)), 2))
            for i in range(0, len(instrs), 4096):
                chunk = instrs[i : i + 4096]
                # marshal's version 2 writes values, never references or interning, so equal
                # chunks give equal bytes; it tells -0.0 from 0.0 and 1 from 1.0 and True, as
                # params_key does, which a chunk holding params marshal does not take falls back
                # to. Params of several entries are sorted, as params_key sorts them
                try:
                    rows = [(x.out, x.prim, x.args, _sorted(x.params), shapes[x.out], dtypes[x.out]) for x in chunk]
                    data = marshal.dumps(rows, 2)
                except (ValueError, TypeError):
                    data = b"k" + marshal.dumps(
                        [(x.out, x.prim, x.args, params_key(x.params), shapes[x.out], dtypes[x.out]) for x in chunk], 2
                    )
                h.update(data)
            key = ("sha256", len(instrs), h.digest())
        self._key = (at, key)
        return key

    def verify(self) -> Tape:
        """Check SSA form and every instruction against its primitive's rule; return self."""
        defined: set[int] = set()
        for s, k in zip(self.inputs, self.kinds):
            if s in defined:
                raise TapeError(f"input slot %{s} defined twice")
            if k not in ("tensor", "scalar") or (k == "scalar" and self.shapes[s] != ()):
                raise TapeError(f"input slot %{s} has a bad kind {k!r}")
            defined.add(s)
        for ins in self.instrs:
            prim = PRIMS.get(ins.prim)
            if prim is None:
                raise TapeError(f"unknown primitive {ins.prim!r}")
            for a in ins.args:
                if a not in defined:
                    raise TapeError(f"%{ins.out} = {ins.prim} reads %{a} before it is defined")
            if ins.out in defined:
                raise TapeError(f"slot %{ins.out} written twice")
            shape, dtype = prim.infer(
                [self.shapes[a] for a in ins.args], [self.dtypes[a] for a in ins.args], **ins.params
            )
            if shape != self.shapes[ins.out] or dtype != self.dtypes[ins.out]:
                raise TapeError(
                    f"%{ins.out} = {ins.prim} is recorded as {self.dtypes[ins.out]}"
                    f"{list(self.shapes[ins.out])} but its rule gives {dtype}{list(shape)}"
                )
            defined.add(ins.out)
        for s in self.outputs:
            if s not in defined:
                raise TapeError(f"output %{s} is never defined")
        return self

    def format(self) -> str:
        """The canonical printed form (also the input of ``parse``)."""
        num: dict[int, int] = {}
        lines = []

        def ty(s: int) -> str:
            return f"{self.dtypes[s]}[{','.join(map(str, self.shapes[s]))}]"

        for s, k in zip(self.inputs, self.kinds):
            num[s] = len(num)
            lines.append(f"in %{num[s]} : {ty(s)}" + (" scalar" if k == "scalar" else ""))
        for ins in self.instrs:
            num[ins.out] = len(num)
            lines.append(f"%{num[ins.out]} = {format_instr(ins, num)} : {ty(ins.out)}")
        lines.append("out " + " ".join(f"%{num[s]}" for s in self.outputs))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


class HashedKey(tuple):  # type: ignore[type-arg]
    """A tape's structural key that hashes once: a tuple of a few hundred nested tuples costs
    microseconds to hash, and a realized loop looks its tape's record up at every iteration. It
    equals (and hashes as) the plain tuple of its items; ``marshal`` takes only the plain one
    (``store.plan_name`` converts it)."""

    h: int

    def __hash__(self) -> int:
        try:
            return self.h
        except AttributeError:
            self.h = h = tuple.__hash__(self)
            return h

    def __reduce__(self) -> tuple[Any, ...]:
        # never the cached hash: another process hashes its strings with another seed
        return HashedKey, (tuple(self),)


def _sorted(params: Params) -> Params | list[tuple[str, Any]]:
    """``params`` as ``Tape.key`` hashes them: in name order when there are several."""
    return params if len(params) < 2 else sorted(params.items())


def params_key(params: Params) -> Key:
    """A hashable form of params in which equal keys mean identical literals: values compare by
    ``repr``, so -0.0 is not 0.0 and 1 is not 1.0 or True (``==`` would merge them). Tuples of
    ints (shapes, axes) are safe as they are and skip the ``repr`` (a tuple never equals a str)."""
    if not params:
        return ()
    if len(params) == 1:  # most params (shape, dtype, axis), keyed on every emit
        [(k, v)] = params.items()
        if v.__class__ is tuple:
            for e in v:
                if e.__class__ is not int:
                    return ((k, repr(v)),)
            return ((k, v),)
        return ((k, repr(v)),)
    key: list[tuple[str, Any]] = []
    for k in sorted(params):
        v = params[k]
        if v.__class__ is tuple:
            for e in v:
                if e.__class__ is not int:
                    v = repr(v)
                    break
        else:
            v = repr(v)
        key.append((k, v))
    return tuple(key)


def format_params(params: Params) -> str:
    """``k=v, ...`` in name order, values by ``repr`` (the printed form of an instruction's params)."""
    return ", ".join(f"{k}={params[k]!r}" for k in sorted(params))


def format_instr(ins: Instr, num: dict[int, int] | None = None) -> str:
    """``prim(%a, %b; k=v)``, slots renumbered through ``num`` when given."""
    args = ", ".join(f"%{num[a] if num else a}" for a in ins.args)
    if ins.params:
        args = f"{args}; {format_params(ins.params)}" if args else format_params(ins.params)
    return f"{ins.prim}({args})"


_LINE = re.compile(r"^%(\d+) = (\w+)\((.*)\) : (\w+)\[([\d,]*)\]$")
_INPUT = re.compile(r"^in %(\d+) : (\w+)\[([\d,]*)\]( scalar)?$")


def _shape(text: str) -> Shape:
    return tuple(int(t) for t in text.split(",")) if text else ()


def parse(text: str) -> Tape:
    """Read a tape from its canonical printed form; ``parse(t.format()).format() == t.format()``."""
    tape = Tape()

    def define(n: int, shape: Shape, dtype: str) -> None:
        if n != len(tape.shapes):
            raise TapeError(f"slots must be numbered in order, got %{n}")
        tape.shapes.append(shape)
        tape.dtypes.append(dtype)

    for line in text.strip().splitlines():
        line = line.strip()
        if m := _INPUT.match(line):
            define(int(m[1]), _shape(m[3]), m[2])
            tape.inputs.append(int(m[1]))
            tape.kinds.append("scalar" if m[4] else "tensor")
        elif m := _LINE.match(line):
            body = m[3]
            if ";" in body:
                argtext, _, paramtext = body.partition(";")
            elif body.startswith("%"):
                argtext, paramtext = body, ""
            else:
                argtext, paramtext = "", body
            args = [int(a.strip()[1:]) for a in argtext.split(",") if a.strip()]
            params = _params(paramtext)
            define(int(m[1]), _shape(m[5]), m[4])
            tape.instrs.append(Instr(int(m[1]), m[2], args, params))
        elif line.startswith("out"):
            tape.outputs = [int(t[1:]) for t in line[3:].split()]
        else:
            raise TapeError(f"cannot parse tape line {line!r}")
    return tape


def _params(text: str) -> Params:
    text = text.strip()
    if not text:
        return {}
    call = cast(ast.Call, ast.parse(f"f({text})", mode="eval").body)
    return cast(Params, {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords})


# --- building tapes --------------------------------------------------------------------------------


class Var:
    """A slot of a tape under construction; arithmetic on it appends instructions.

    Python numbers combined with a ``Var`` become ``const`` instructions (literals that are
    part of the program), broadcast to the ``Var``'s shape and dtype. Every primitive but
    ``const`` is also a method: ``x.sum(axes=(0,), keepdim=False)`` emits ``sum``.
    """

    __slots__ = ("bld", "slot", "shape", "dtype")

    bld: Builder
    slot: int
    shape: Shape
    dtype: str

    def __init__(self, bld: Builder, slot: int, shape: Shape, dtype: str) -> None:
        self.bld, self.slot, self.shape, self.dtype = bld, slot, shape, dtype

    if TYPE_CHECKING:  # the primitive methods are set below, one per row of the table

        def __getattr__(self, name: str) -> Callable[..., Var]: ...

    def _lift(self, v: Var | float) -> Var:
        return v if isinstance(v, Var) else self.bld.full(v, self.shape, self.dtype)

    # the operators are written out, each one call into ``emit``: VJP rules are mostly these
    def __add__(self, o: Var | float) -> Var:
        return self.bld.emit("add", (self, o if isinstance(o, Var) else self.bld.full(o, self.shape, self.dtype)))

    def __radd__(self, o: float) -> Var:
        return self.bld.emit("add", (self.bld.full(o, self.shape, self.dtype), self))

    def __sub__(self, o: Var | float) -> Var:
        return self.bld.emit("sub", (self, o if isinstance(o, Var) else self.bld.full(o, self.shape, self.dtype)))

    def __rsub__(self, o: float) -> Var:
        return self.bld.emit("sub", (self.bld.full(o, self.shape, self.dtype), self))

    def __mul__(self, o: Var | float) -> Var:
        return self.bld.emit("mul", (self, o if isinstance(o, Var) else self.bld.full(o, self.shape, self.dtype)))

    def __rmul__(self, o: float) -> Var:
        return self.bld.emit("mul", (self.bld.full(o, self.shape, self.dtype), self))

    def __truediv__(self, o: Var | float) -> Var:
        return self.bld.emit("div", (self, o if isinstance(o, Var) else self.bld.full(o, self.shape, self.dtype)))

    def __rtruediv__(self, o: float) -> Var:
        return self.bld.emit("div", (self.bld.full(o, self.shape, self.dtype), self))

    def __neg__(self) -> Var:
        return self.bld.emit("neg", (self,))

    def __matmul__(self, o: Var) -> Var:
        return self.bld.emit("matmul", (self, o))

    def __repr__(self) -> str:
        return f"Var(%{self.slot}: {self.dtype}{list(self.shape)})"


def _method(name: str) -> Callable[..., Var]:
    def method(self: Var, *args: Var | float, **params: Any) -> Var:
        if not args:  # most are: movements, reductions, unary functions
            return self.bld.emit(name, (self,), params)
        return self.bld.emit(name, (self, *[self._lift(a) for a in args]), params)

    method.__name__ = name
    return method


for _name in PRIMS:
    if _name not in ("const",):
        setattr(Var, _name, _method(_name))


_SAME, _MATCHING = _shapes.unary, _shapes.matching  # the shape rules ``Builder.emit`` writes out
_new = object.__new__
_LITERAL_OF = frozenset(["const", "reshape", "expand"])  # instructions whose result may be a literal


# the Python type a literal of each dtype is held as (float for the others)
_PYTHON_TYPE: dict[str, type] = {"b8": bool, "i32": int, "i64": int, "c64": complex, "c128": complex}


class Builder:
    """Appends instructions to a tape, inferring each result's shape and dtype; an instruction
    equal to one already on the tape is not written again (common-subexpression elimination).

    ``Builder(tape)`` continues an existing tape (the forward part of a joint tape).

    >>> b = Builder()
    >>> x = b.input((2,), "f64")
    >>> (x * 2).slot == (x * 2).slot  # the second product is the first one, found again
    True
    """

    def __init__(self, tape: Tape | None = None) -> None:
        self.tape = Tape()
        self._literals: dict[int, Any] = {}
        self._seen: dict[Key, int] = {}  # (prim, args, params) -> slot: every primitive is pure, so equal means same
        # handles made so far, by slot, and ``full``'s results by (repr of the value, dtype,
        # shape): both are functions of instructions already written, which never change. They
        # point back at the builder, so ``finish`` lets go of them
        self._vars: dict[int, Var] = {}
        self._fulls: dict[tuple[str, str, Shape], Var] = {}
        if tape is not None:
            t = self.tape
            t.shapes, t.dtypes = list(tape.shapes), list(tape.dtypes)
            t.inputs, t.kinds = list(tape.inputs), list(tape.kinds)
            t.instrs = list(tape.instrs)
            seen = self._seen
            for ins in t.instrs:  # as ``emit`` keys and notes them: a joint tape starts here
                prim, args = ins.prim, ins.args
                seen.setdefault((prim, args, params_key(ins.params) if ins.params else ()), ins.out)
                if prim in _LITERAL_OF:
                    self._note_literal(prim, args, ins.params, ins.out)

    def _note_literal(self, prim: str, slots: tuple[int, ...], params: Params, s: int) -> None:
        """Note slot ``s`` of a ``_LITERAL_OF`` instruction: a const's value, or the value its
        moved operand holds when that is a literal."""
        if prim == "const":
            self._literals[s] = params["value"]
        elif slots[0] in self._literals:
            self._literals[s] = self._literals[slots[0]]

    def literal(self, v: Var) -> Any:
        """The Python value of ``v`` if it is a literal broadcast to its shape, else None."""
        return self._literals.get(v.slot)

    def _new(self, shape: Shape, dtype: str) -> int:
        t = self.tape
        t.shapes.append(shape)
        t.dtypes.append(dtype)
        return len(t.shapes) - 1

    def var(self, slot: int) -> Var:
        """The handle of an existing ``slot`` (one per slot: handles never change)."""
        v = self._vars.get(slot)
        if v is None:
            t = self.tape
            v = self._vars[slot] = Var(self, slot, t.shapes[slot], t.dtypes[slot])
        return v

    def input(self, shape: Iterable[int], dtype: str, kind: str = "tensor") -> Var:
        """A new input slot (``kind`` "tensor", or "scalar" for a runtime Python number)."""
        s = self._new(tuple(shape), dtype)
        self.tape.inputs.append(s)
        self.tape.kinds.append(kind)
        return self.var(s)

    def emit_known(self, prim: str, slots: Iterable[int], params: Params, shape: Shape, dtype: str) -> int:
        """Append an instruction on operand ``slots`` whose result type is already known, and
        return its slot (lowering trusts the graph, whose nodes inferred it when recorded;
        ``Tape.verify`` re-derives it). No shape inference, no common-subexpression lookup."""
        t = self.tape
        t.shapes.append(shape)
        t.dtypes.append(dtype)
        s = len(t.shapes) - 1
        t.instrs.append(Instr(s, prim, slots, params))
        return s

    def emit(self, prim: str, args: Sequence[Var], params: Params | None = None) -> Var:
        """Append ``prim`` on ``args`` with its inferred result type (or find it already there)."""
        # every VJP and JVP rule emits here, several times an instruction: the common cases are
        # written out (one or two operands, no params, the elementwise shape rules)
        if not params:
            params, pk = NO_PARAMS, ()
        else:
            if (prim == "reshape" or prim == "expand") and tuple(params["shape"]) == args[0].shape:
                return args[0]  # a no-op movement is never written down
            pk = params_key(params)
        n = len(args)
        if n == 2:
            a, c = args
            slots: tuple[int, ...] = (a.slot, c.slot)
        elif n == 1:
            a = c = args[0]
            slots = (a.slot,)
        else:
            a = c = args[0] if n else None  # type: ignore[assignment]
            slots = tuple([v.slot for v in args])
        key = (prim, slots, pk)
        hit = self._seen.get(key)
        if hit is not None:  # common subexpression: a VJP re-deriving cos(x) reuses the forward's
            v = self._vars.get(hit)
            return v if v is not None else self.var(hit)
        infer = PRIMS[prim].infer
        if infer is _MATCHING and n == 2 and a.shape == c.shape and a.dtype == c.dtype:
            shape, dtype = a.shape, a.dtype
        elif infer is _SAME and n:
            shape, dtype = a.shape, a.dtype
        elif n == 1:  # the row's rule (which also raises the errors)
            shape, dtype = infer([a.shape], [a.dtype], **params)
        elif n == 2:
            shape, dtype = infer([a.shape, c.shape], [a.dtype, c.dtype], **params)
        else:
            shape, dtype = infer([v.shape for v in args], [v.dtype for v in args], **params)
        t = self.tape
        shapes = t.shapes
        shapes.append(shape)
        t.dtypes.append(dtype)
        s = len(shapes) - 1
        # Instr(...) and Var(...) without their __init__ calls, a third of the cost of each
        ins = _new(Instr)
        ins.out = s
        ins.prim = prim
        ins.args = slots
        ins.params = params
        t.instrs.append(ins)
        if prim in _LITERAL_OF:  # a literal, or a literal moved
            self._note_literal(prim, slots, params, s)
        self._seen[key] = s
        self._vars[s] = v = _new(Var)
        v.bld = self
        v.slot = s
        v.shape = shape
        v.dtype = dtype
        return v

    def full(self, value: float, shape: Shape, dtype: str) -> Var:
        """``value`` broadcast to ``shape``: a const (one per literal and dtype, by ``emit``'s
        common-subexpression elimination), then expand."""
        value = _PYTHON_TYPE.get(dtype, float)(value)
        # keyed as the const's params are (by repr: -0.0 is not 0.0), so a hit is what emitting
        # the const, reshape and expand again would find
        key = (repr(value), dtype, shape if type(shape) is tuple else tuple(shape))
        v = self._fulls.get(key)
        if v is None:
            v = self.emit("const", (), {"value": value, "dtype": dtype})
            if shape:
                v = v.reshape(shape=(1,) * len(shape)).expand(shape=tuple(shape))
            self._fulls[key] = v
        return v

    def finish(self, outputs: Iterable[Var]) -> Tape:
        """The tape, with ``outputs`` as its outputs."""
        self.tape.outputs = [o.slot for o in outputs]
        self._vars, self._fulls = {}, {}  # they refer back to the builder: freed with it, without a collection
        return self.tape
