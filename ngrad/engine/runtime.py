"""The runtime: the one entry point that executes tapes.

Contract: ``run(tape, values)`` checks every input against the tape's slot (shape, dtype,
kind) before anything executes (Numba does not check bounds: kernels never see unchecked
input), runs the tape, and returns fresh, writable, C-contiguous arrays that share memory with
no input.

Tiering, so a one-shot script never waits on a compiler (``NGRAD_JIT``):
``never`` runs every tape on the NumPy interpreter; ``always`` compiles every tape; ``auto``
(the default) compiles a tape structure once it has been seen ``NGRAD_JIT_THRESHOLD`` times
(default 2), or at once when its kernels are already in the disk cache. Compiled tapes run as a
plan of fused Numba kernels and NumPy glue (``fuse``, ``codegen``, ``compile``).

``NGRAD_DEBUG=1`` prints each tape before it runs, ``=2`` also the generated source, ``=3``
also per-kernel compile and run times.
"""
import os
import sys
import time

import numpy as np

from .interpret import bind, dead_after, evaluate, interpret, np_dtype

__all__ = ["run", "debug_level", "jit_mode", "set_num_threads", "get_num_threads"]

_plans = {}


def debug_level():
    try:
        return int(os.environ.get("NGRAD_DEBUG", "0") or 0)
    except ValueError:
        return 0


def jit_mode():
    mode = os.environ.get("NGRAD_JIT", "auto").strip().lower() or "auto"
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"NGRAD_JIT must be one of auto, always, never (got {mode!r})")
    return mode


def _threshold():
    try:
        return max(1, int(os.environ.get("NGRAD_JIT_THRESHOLD", "2")))
    except ValueError:
        return 2


def _check(tape, values):
    if len(values) != len(tape.inputs):
        raise ValueError(f"tape takes {len(tape.inputs)} inputs, got {len(values)}")
    for i, (s, k, v) in enumerate(zip(tape.inputs, tape.kinds, values)):
        if k == "scalar":
            if not isinstance(v, (int, float, bool, np.number, np.bool_, np.ndarray)) or np.ndim(v) != 0:
                raise TypeError(f"input {i} of the tape must be a scalar, got {type(v).__name__}")
            continue
        if not isinstance(v, np.ndarray):
            raise TypeError(f"input {i} of the tape must be an ndarray, got {type(v).__name__}")
        if v.shape != tape.shapes[s] or v.dtype != np_dtype(tape.dtypes[s]):
            raise ValueError(f"input {i} of the tape must be {tape.dtypes[s]}{list(tape.shapes[s])}, "
                             f"got {v.dtype}{list(v.shape)}")


class _Compiled:
    """A tape's fused plan, cut into segments, with their generated sources and compiled
    functions. A segment is a run of kernels (and reshapes between them) that compiles to ONE
    function (``codegen.program``): Numba spends ~0.2 s per function whatever its size, and one
    call replaces several. Glue that computes something (matmul, gather, one-element NumPy
    arithmetic) runs between segments. Each segment has a serial source and, where a kernel in it
    is ``codegen.parallel_ok`` and big enough to pay for threads, a parallel one, compiled the
    first time threads are on."""

    __slots__ = ("plan", "segments", "sources", "parallel", "kernels", "pkernels", "dead", "seen", "cached", "pool",
                 "consts")

    def __init__(self, tape):
        from .codegen import parallel_ok, program
        from .fuse import Kernel, fuse
        self.plan = fuse(tape)
        self.segments = _segments(self.plan.steps)
        self.sources, self.parallel = [], []
        for seg in self.segments:
            kerns = [self.plan.steps[k] for k in seg if isinstance(self.plan.steps[k], Kernel)]
            if not kerns:
                self.sources.append(None)
                self.parallel.append(None)
                continue
            par = [_numel(kn.shape) >= PARALLEL_MIN and parallel_ok(kn) for kn in kerns]
            self.sources.append(program(kerns, tape, [False] * len(kerns)))
            self.parallel.append(program(kerns, tape, par) if any(par) else None)
        self.kernels = self.pkernels = None
        dead = _dead_after_steps(tape, self.plan)
        self.dead = [[s for k in seg for s in dead[k]] for seg in self.segments]
        self.seen, self.cached = 0, False
        self.pool = {}  # (shape, dtype) -> big intermediate arrays free for the next run
        # glue computing constants (a literal, its reshapes and broadcasts) runs once per plan
        self.consts, known = {}, set()
        for step in self.plan.steps:
            if not isinstance(step, Kernel) and (step.instr.prim == "const" or (step.instr.args and all(
                    a in known for a in step.instr.args))):
                known.add(step.instr.out)
                self.consts[step.instr.out] = None

    def on_disk(self):
        from .compile import on_disk
        srcs = self.sources if _threads == 1 else [p or s for s, p in zip(self.sources, self.parallel)]
        return all(s is None or on_disk(s.text) for s in srcs)

    def compile(self):
        from .compile import kernel
        if self.kernels is None:
            self.kernels = [None if s is None else kernel(s.text) for s in self.sources]
        if _threads > 1 and self.pkernels is None:
            self.pkernels = [None if s is None else kernel(s.text) for s in self.parallel]


def _segments(steps):
    """Step indices grouped into segments: maximal runs of kernels with the reshapes between
    them (views, so they can be taken before the loops fill their buffers), and single steps."""
    from .fuse import Glue, Kernel
    segs, run = [], []

    def close():
        tail = []
        while run and isinstance(steps[run[-1]], Glue):  # a trailing reshape runs on its own
            tail.append([run.pop()])
        if run:
            segs.append(list(run))
        segs.extend(reversed(tail))
        run.clear()

    for k, step in enumerate(steps):
        if isinstance(step, Kernel) or (run and step.instr.prim == "reshape"):
            run.append(k)
        else:
            close()
            segs.append([k])
    close()
    return segs


# Loops smaller than this stay serial when threads are on: waking threads costs microseconds.
PARALLEL_MIN = 1 << 15
_threads = 1


def set_num_threads(n):
    """Use ``n`` threads for large fused loops (1, the default, keeps every kernel serial).

    >>> import ngrad
    >>> ngrad.set_num_threads(2); ngrad.get_num_threads()
    2
    >>> ngrad.set_num_threads(1)
    """
    global _threads
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"set_num_threads expects an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"Number of threads must be positive, got {n}")
    _threads = int(n)


def get_num_threads():
    """The number of threads large fused loops use (see ``set_num_threads``)."""
    return _threads


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _dead_after_steps(tape, plan):
    from .fuse import Glue
    reads = [step.instr.args if isinstance(step, Glue) else [r[1] for r in step.reads.values() if r[0] != "literal"]
             for step in plan.steps]
    return dead_after(reads, set(tape.outputs))


_IDENT = {"sum": 0, "prod": 1}


def _accumulator(ins, tape, shape, fresh, take):
    """The array a kernel reduces into: filled with the identity, unless the kernel writes every
    element itself (``fresh``, see codegen)."""
    dt = np_dtype(tape.dtypes[ins.out])
    keep = tuple(1 if d in ins.params["axes"] else n for d, n in enumerate(shape)) or (1,)
    acc = take(keep, dt)
    if fresh:
        return acc
    if ins.prim in _IDENT:
        acc.fill(_IDENT[ins.prim])
    elif dt.kind == "f":
        acc.fill(-np.inf if ins.prim == "amax" else np.inf)
    else:
        info = np.iinfo(dt) if dt.kind in "iu" else None
        acc.fill((info.min if ins.prim == "amax" else info.max) if info else ins.prim != "amax")
    return acc


# Intermediate arrays of at least this many bytes are kept by their plan for its next run: a new
# big array costs a page fault per 4 KiB on first touch (about 0.5 ms per 8 MB here, more when
# threads fault together), which a loop calling the same gradient thousands of times would pay
# on every call. Results handed to callers are always fresh arrays.
POOL_MIN_BYTES = 1 << 20


def _taker(pool, made):
    def take(shape, dt):
        free = pool.get((shape, dt))
        arr = free.pop() if free else np.empty(shape, dt)
        made.append(arr)
        return arr
    return take


def _recycle(pool, made, results):
    keep = {id(_root(r)) for r in results}
    for arr in made:
        if id(arr) not in keep and arr.nbytes >= POOL_MIN_BYTES:
            pool.setdefault((arr.shape, arr.dtype), []).append(arr)


def _execute(comp, tape, values):
    from .fuse import Glue
    debug = debug_level()
    env = bind(tape, values)
    threads = _threads
    pkernels = comp.pkernels if threads > 1 else None
    made = []
    take = _taker(comp.pool, made)
    steps = comp.plan.steps
    for k, (seg, src, fn, gone) in enumerate(zip(comp.segments, comp.sources, comp.kernels, comp.dead)):
        if src is None:  # one glue step
            ins = steps[seg[0]].instr
            if ins.out in comp.consts:
                value = comp.consts[ins.out]
                if value is None:
                    with np.errstate(all="ignore"):
                        value = comp.consts[ins.out] = evaluate(tape, ins, env)
                env[ins.out] = value
            else:
                with np.errstate(all="ignore"):
                    env[ins.out] = evaluate(tape, ins, env)
        else:
            if pkernels is not None and pkernels[k] is not None:
                src, fn = comp.parallel[k], pkernels[k]
            # every buffer of the segment is allocated (and every reshape taken) before its loops
            # run, so later loops of the same call can be handed the arrays earlier loops fill
            args, flags, parts = [], [], iter(src.parts)
            for j in seg:
                step = steps[j]
                if isinstance(step, Glue):
                    env[step.instr.out] = evaluate(tape, step.instr, env)
                    continue
                part = next(parts)
                sizes = step.shape or (1,)
                args += sizes
                for a in part.arrays:
                    arr = env[a]
                    if not arr.flags.c_contiguous:
                        arr = np.ascontiguousarray(arr)
                    args.append(arr.reshape(sizes) if not step.shape else arr)
                args += [env[s].reshape(-1) for s in part.scalars]
                for s in part.stores:
                    o = take(sizes, np_dtype(tape.dtypes[s]))
                    args.append(o)
                    env[s] = o if o.shape == tape.shapes[s] else o.reshape(tape.shapes[s])
                for ins, fresh in zip(part.reductions, part.fresh):
                    c = _accumulator(ins, tape, step.shape, fresh, take)
                    args.append(c)
                    env[ins.out] = c if c.shape == tape.shapes[ins.out] else c.reshape(tape.shapes[ins.out])
                if part.guard:
                    flags.append(np.zeros(1, np.bool_))
                    args.append(flags[-1])
            t = time.perf_counter()
            if src.parallel:
                from .compile import parallel_lock, use_threads
                with parallel_lock:
                    use_threads(threads)
                    fn(*args)
            else:
                fn(*args)
            if any(f[0] for f in flags):
                # an argument outside the range of a vectorised sin/cos: the interpreter is exact
                _recycle(comp.pool, made, ())
                return interpret(tape, values)
            if debug >= 3:
                shapes = ", ".join(str(steps[j].shape) for j in seg if not isinstance(steps[j], Glue))
                print(f"ngrad: kernel {fn.key} over {shapes}: {(time.perf_counter() - t) * 1e3:.3f} ms",
                      file=sys.stderr)
        for s in gone:
            env.pop(s, None)
    results = [env[s].copy() if s in comp.consts else env[s] for s in tape.outputs]
    _recycle(comp.pool, made, results)
    return results


def _compiled_for(tape, mode):
    """The compiled plan to run ``tape`` with, or None to interpret it."""
    if mode == "never" or not tape.instrs:
        return None
    key = tape.key()
    comp = _plans.get(key)
    if comp is None:  # fused and rendered once per tape structure; compiled when it is due
        comp = _plans[key] = _Compiled(tape)
        comp.cached = mode == "auto" and comp.on_disk()
        if debug_level() >= 2:
            for s in comp.sources:
                if s is not None:
                    print(f"ngrad: generated kernel\n{s.text}", file=sys.stderr)
    if comp.kernels is None or (_threads > 1 and comp.pkernels is None):
        comp.seen += 1
        if mode == "auto" and comp.seen < _threshold() and not comp.cached:
            return None
        t = time.perf_counter()
        comp.compile()
        if debug_level() >= 3:
            print(f"ngrad: prepared {len([k for k in comp.kernels if k])} kernels in "
                  f"{(time.perf_counter() - t) * 1e3:.1f} ms", file=sys.stderr)
    return comp


def run(tape, values):
    """Execute ``tape`` on ``values`` after validating them; return owned output arrays."""
    _check(tape, values)
    if debug_level() >= 1:
        print(f"ngrad: running tape ({len(tape.instrs)} instrs)\n{tape.format()}", file=sys.stderr)
    comp = _compiled_for(tape, jit_mode())
    outs = interpret(tape, values) if comp is None else _execute(comp, tape, values)
    taken = {id(_root(v)) for v in values if isinstance(v, np.ndarray)}
    res = []
    for o in outs:
        # an output that is (a view of) an input or of another output is copied: callers own results
        if id(_root(o)) in taken or not o.flags.c_contiguous or not o.flags.writeable:
            o = np.array(o, order="C", copy=True)
        taken.add(id(_root(o)))
        res.append(o)
    return res


def _root(a):
    """The array that owns ``a``'s memory."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a
