"""The runtime: the one entry point that executes tapes.

Contract: ``run(tape, values)`` checks every input against the tape's slot (shape, dtype,
kind) before anything executes (Numba does not check bounds: kernels never see unchecked
input), runs the tape, and returns fresh, writable, C-contiguous arrays that share memory with
no input.

Tiering, so a one-shot script never waits on a compiler (``NGRAD_JIT``):
``never`` runs every tape on the NumPy interpreter; ``always`` compiles every tape; ``auto``
(the default) compiles a tape structure once it has been seen ``NGRAD_JIT_THRESHOLD`` times
(default 2), or at once when its kernels are already in the disk cache. A plan that needs more
than ``EAGER_FUNCTIONS`` new functions (an unrolled recurrence: each costs Numba a few tenths of
a second) is bought like skis: it compiles only once the time spent interpreting that tape has
reached the estimated compile time, so a loop never waits more than about twice what it would
have with perfect foresight. ``prepare`` (``ngrad.compile``) compiles at first sight, unless the
plan needs more than ``PREPARE_FUNCTIONS`` new functions. Compiled tapes run as a plan of fused
Numba kernels and NumPy glue (``fuse``, ``codegen``, ``compile``), except long tapes of small
arrays, which run as bytecode (``bytecode``; see ``BYTECODE_MIN_INSTRS``) under the same tiering.

``NGRAD_DEBUG=1`` prints each tape before it runs, ``=2`` also the generated source, ``=3``
also per-kernel compile and run times.
"""

import concurrent.futures
import math
import os
import sys
import threading
import time

import numpy as np

from ..backend.codegen import Expr, SourceMath, identity
from ..backend.fuse import SMALL_LOOP
from ..backend.vmath import FUNCTIONS
from ..config import debug_level, jit_mode
from ..config import jit_threshold as _threshold
from ..ir.interpret import bind, compute, dead_after, evaluate, interpret, matmul_into, np_dtype, unslice_into

__all__ = ["run", "prepare", "inline", "debug_level", "jit_mode", "set_num_threads", "get_num_threads"]

_plans = {}


def _check(tape, values, device=False):
    """Every input against its slot; ``device``: tensors may also be device arrays (CUDA)."""
    if len(values) != len(tape.inputs):
        raise ValueError(f"tape takes {len(tape.inputs)} inputs, got {len(values)}")
    for i, v in enumerate(values):
        _check_one(tape, i, v, device)


def _check_one(tape, i, v, device=False):
    s, k = tape.inputs[i], tape.kinds[i]
    if k == "scalar":
        if not isinstance(v, (int, float, bool, np.number, np.bool_, np.ndarray)) or np.ndim(v) != 0:
            raise TypeError(f"input {i} of the tape must be a scalar, got {type(v).__name__}")
        return
    if not isinstance(v, np.ndarray):
        from ..targets.compile import is_device_array

        if not (device and is_device_array(v)):
            raise TypeError(
                f"input {i} of the tape must be {'a device array' if device else 'an ndarray'}, got {type(v).__name__}"
            )
    if v.shape != tape.shapes[s] or v.dtype != np_dtype(tape.dtypes[s]):
        raise ValueError(
            f"input {i} of the tape must be {tape.dtypes[s]}{list(tape.shapes[s])}, got {v.dtype}{list(v.shape)}"
        )


class _Layout:
    """The plan cut into segments, each compiled to one function (``codegen.program``) or one
    glue step; ``chunked[k]``: threads run segment k in chunks of rows (see ``_row_local``)."""

    __slots__ = ("segments", "sources", "dead", "chunked", "kernels")

    def __init__(self, plan, tape, dead, split):
        from ..backend.codegen import program
        from ..backend.fuse import Kernel

        steps = plan.steps
        self.segments, self.sources, self.chunked = [], [], []
        segments = _segments(steps)
        readers = _readers(segments, steps, tape)
        for n, seg in enumerate(segments):
            kerns = [steps[k] for k in seg if isinstance(steps[k], Kernel)]
            outside = {
                s for k in seg if isinstance(steps[k], Kernel) for s in steps[k].stores if readers.get(s, {n}) != {n}
            }
            src = program(kerns, tape, _made_in(seg, steps), outside) if kerns else None
            big = split and any(_big(kn) for kn in kerns)
            if big and not _row_local(seg, steps, src, tape):
                for k in seg:  # each loop on its own, so each can be chunked (or not) alone
                    one = program([steps[k]], tape) if isinstance(steps[k], Kernel) else None
                    self.segments.append([k])
                    self.sources.append(one)
                    self.chunked.append(one is not None and _big(steps[k]) and _row_local([k], steps, one, tape))
            else:
                self.segments.append(seg)
                self.sources.append(src)
                self.chunked.append(big)
        self.dead = [[s for k in seg for s in dead[k]] for seg in self.segments]
        self.kernels = None


def _donors(gone, part, env, made):
    """Buffers this kernel may write its results into: arrays it reads only at its own index,
    that die at this step, that this run allocated, and that no other live value shares. Each
    element is read before it is overwritten, so the loop stays correct, and a gradient chain
    then moves through memory once instead of twice."""
    dying = set(gone)
    ours = {id(m) for m in made}
    candidates = []
    for (a, _), whole in zip(part.arrays, part.whole):
        arr = env.get(a)
        if whole and a in dying and arr is not None and arr.flags.c_contiguous and id(_root(arr)) in ours:
            candidates.append(arr)
    if not candidates:
        return []
    sharing = {}  # root -> how many live values use its memory
    for v in env.values():
        if isinstance(v, np.ndarray):
            r = id(_root(v))
            sharing[r] = sharing.get(r, 0) + 1
    return [arr for arr in candidates if sharing[id(_root(arr))] == 1]


# Kernels calling these vectorised math helpers never write into an input's buffer: aliased
# operands fail LLVM's runtime overlap check and the loop runs unvectorised (measured 2.5x
# slower with sin and cos in it). A loop of plain arithmetic is memory-bound: in place it moves
# through memory once instead of twice (logsumexp's gradient scaling: 0.83 against 1.37 ms).
VECTOR_MATH = frozenset(name[len("_v") :] for name in FUNCTIONS)


def _readers(segments, steps, tape):
    """slot -> the segments whose loops read it; None stands for a reader that is not a loop
    (glue, or the caller: an output)."""
    from ..backend.fuse import Glue, reads_of

    readers = {s: {None} for s in tape.outputs}
    for n, seg in enumerate(segments):
        for k in seg:
            for s in reads_of(steps[k]):
                readers.setdefault(s, set()).add(None if isinstance(steps[k], Glue) else n)
    return readers


def _made_in(seg, steps):
    """The slots a segment's own steps make."""
    from ..backend.fuse import Glue

    made = set()
    for k in seg:
        st = steps[k]
        if isinstance(st, Glue):
            made.add(st.instr.out)
        else:
            made.update(st.stores)
            made.update(ins.out for ins in st.reductions)
    return made


def _row_local(seg, steps, src, tape):
    """Whether the segment's loops can run in chunks of rows: every loop has the same outermost
    extent, and a loop reads values made earlier in the segment only by rows (a reduction over
    axis 0 is complete only after the chunks are combined, so nothing in the segment may read it)."""
    from ..backend.fuse import Glue

    kerns = [steps[k] for k in seg if not isinstance(steps[k], Glue)]
    if not kerns or any(len(kn.shape) == 0 for kn in kerns):
        return False
    n0 = kerns[0].shape[0]
    if n0 < 2 or any(kn.shape[0] != n0 for kn in kerns):
        return False
    made, whole = set(), set()  # slots made in the segment; those complete only after combining
    parts = iter(src.parts)
    for k in seg:
        step = steps[k]
        if isinstance(step, Glue):  # a reshape of a value made here
            if step.instr.args[0] in made:
                made.add(step.instr.out)
                shape = tape.shapes[step.instr.out]
                if step.instr.args[0] in whole or not shape or shape[0] != n0:
                    whole.add(step.instr.out)
            continue
        part = next(parts)
        if part.shifted:
            return False
        for (a, _), rows in zip(part.arrays, part.rows):
            if a in made and (a in whole or not rows):
                return False
        if any(sc in made for sc in part.scalars):
            return False
        made.update(part.stores)
        for ins in part.reductions:
            made.add(ins.out)
            if 0 in ins.params["axes"]:
                whole.add(ins.out)
    return True


class _Compiled:
    """A tape's fused plan with its generated sources and compiled functions. A run of kernels
    (and the reshapes between them) compiles to ONE function: Numba spends ~0.2 s per function
    whatever its size, and one call replaces several. Glue that computes something (matmul,
    gather, one-element NumPy arithmetic) runs between segments. With threads on, big kernels
    get functions of their own instead (the ``threaded`` layout, compiled the first time threads
    are on), so that threads can run each in chunks of rows."""

    __slots__ = (
        "plan",
        "serial",
        "threaded",
        "seen",
        "cached",
        "pending",
        "rent",
        "pool",
        "lent",
        "consts",
        "drive",
        "in_place",
        "into",
    )

    def __init__(self, tape):
        from ..backend.fuse import Glue, Kernel, fuse

        self.plan = fuse(tape)
        # a float matmul writes into a buffer the plan allocates (``into``: matmul slot -> the
        # buffer's shape, and the permutation that views it as the product, or None): a big one
        # comes from the pool, where fresh products cost page faults on every call (1,386 a call
        # for mlp's three, 1024x256 and 784x256; see POOL_MIN_BYTES for their cost). A product
        # read through a permute (a batched matmul moved back to the caller's axes) is laid out
        # as the permute's result, written through the inverse permutation: kernels then read it
        # contiguously, where copying the permuted view on every read cost 2 ms per
        # (1000, 25, 10) array (GradBench's gmm).
        made_by = {st.instr.out: st.instr for st in self.plan.steps if isinstance(st, Glue)}
        self.into = {
            ins.out: (tape.shapes[ins.out], None)
            for ins in made_by.values()
            if ins.prim == "matmul" and tape.dtypes[ins.out][0] == "f"
        }
        for st in self.plan.steps:
            src = made_by.get(st.instr.args[0]) if isinstance(st, Glue) and st.instr.prim == "permute" else None
            if src is not None and src.out in self.into and self.into[src.out][1] is None:
                inverse = tuple(int(d) for d in np.argsort(st.instr.params["perm"]))
                self.into[src.out] = (tape.shapes[st.instr.out], inverse)
        dead = _dead_after_steps(tape, self.plan)
        self.serial = _Layout(self.plan, tape, dead, split=False)
        big = any(isinstance(st, Kernel) and _big(st) for st in self.plan.steps)
        self.threaded = _Layout(self.plan, tape, dead, split=True) if big else self.serial
        self.seen, self.cached, self.pending, self.rent = 0, False, 0, 0.0
        self.drive = None  # the generated driver, once asked for
        self.pool = {}  # (shape, dtype) -> big intermediate arrays free for the next run
        self.lent = {}  # (shape, dtype) -> results handed out, taken back once unreferenced
        # steps that may write into a dying input's buffer (see VECTOR_MATH)
        self.in_place = frozenset(
            j
            for j, st in enumerate(self.plan.steps)
            if isinstance(st, Kernel) and not any(ins.prim in VECTOR_MATH for ins in st.body)
        )
        # glue computing constants (a literal, its reshapes and broadcasts) runs once per plan
        self.consts, known = {}, set()
        for step in self.plan.steps:
            if not isinstance(step, Kernel) and (
                step.instr.prim == "const" or (step.instr.args and all(a in known for a in step.instr.args))
            ):
                known.add(step.instr.out)
                self.consts[step.instr.out] = None

    def layout(self):
        return self.threaded if _threads > 1 else self.serial

    def ready(self):
        return self.layout().kernels is not None

    def driver(self, tape):
        """The compiled plan's generated driver (see ``prepare``), built once; None while threads
        run its loops in chunks."""
        if self.chunks():
            return None
        if self.drive is None:
            self.drive = _driver(self, tape)
        return self.drive

    def chunks(self):
        """Whether threads are on and some loop of the plan is big enough for them: a call then
        runs step by step (``_execute``), not through the serial driver."""
        return _threads > 1 and self.threaded is not self.serial

    @property
    def sources(self):
        return self.layout().sources

    @property
    def kernels(self):
        return self.layout().kernels

    def functions(self):
        """How many functions the serial layout compiles (kernels of the same text share one)."""
        return len({s.text for s in self.serial.sources if s is not None})

    def missing(self):
        """How many of the layout's functions are not in the disk cache."""
        from ..targets.compile import on_disk

        return sum(1 for s in self.layout().sources if s is not None and not on_disk(s.text))

    def compile(self, lay=None):
        """Compile (or load) the functions of ``lay``, by default the current thread count's."""
        from ..targets.compile import kernel

        lay = lay or self.layout()
        if lay.kernels is None:
            lay.kernels = [None if s is None else kernel(s.text) for s in lay.sources]


def _big(kernel):
    """Whether threads would run ``kernel`` faster: at least ``PARALLEL_MIN`` elements and
    ``PARALLEL_WORK`` element-instructions (each counting one)."""
    size = math.prod(kernel.shape) if kernel.shape else 0
    work = size * (len(kernel.body) + len(kernel.reductions))
    return kernel.shape[:1] >= (2,) and size >= PARALLEL_MIN and work >= PARALLEL_WORK


def _segments(steps):
    """Step indices grouped into segments: maximal runs of kernels with the reshapes between
    them (views, so they can be taken before the loops fill their buffers), and single steps."""
    from ..backend.fuse import Glue, Kernel

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


# Loops smaller than this stay serial when threads are on: waking threads and combining
# per-chunk accumulators cost tens of microseconds, and a plan with a loop for threads runs step
# by step, not through its driver. Measured on 2 cores with 2 threads, against 1: with only an
# element count (32K) as the bar, llsq's (1024, 32) loop made the call 8x slower (0.43 against
# 0.06 ms) and kmeans' (1000, 32, 8) loops 2x; with this work bar both run serially, while the
# chain's loop of 27 instructions runs in chunks from about 155,000 elements (a million: 30%
# faster than serially; at 100,000 the two were within this machine's noise).
PARALLEL_MIN = SMALL_LOOP
PARALLEL_WORK = 1 << 22
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


# Threads: a big kernel runs in chunks of its outermost loop, one chunk per thread, each a call
# of the same serial kernel (compiled ``nogil``) on row slices of its arrays; reductions over
# axis 0 get a private accumulator per chunk, combined afterwards. No parallel compile (Numba's
# ``parallel=True`` doubles compile time) and no Numba threading layer: a plain Python pool,
# safe with concurrent Python threads, and rebuilt in a child after ``fork``.
_pool = None
_pool_lock = threading.Lock()


def _workers(n):
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers != n:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="ngrad")
        return _pool


def _forget_pool():  # after fork the pool's threads do not exist in the child
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)

_COMBINE = {"sum": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


def _run_chunked(fn, kernels, src, args, threads, tape):
    """Call ``fn`` (the function of a row-local segment) on ``threads`` chunks of rows."""
    n0 = kernels[0].shape[0]
    k = min(threads, n0)
    bounds = [n0 * i // k for i in range(k + 1)]
    calls = [[] for _ in bounds[1:]]
    flags = []
    combine = []  # (full accumulator, primitive, its private copy in each chunk)
    at = 0
    for step, part in zip(kernels, src.parts):
        # a part's arguments: sizes, arrays, scalars, stores, accumulators, flag (codegen.Part)
        rank = len(part.dims)
        na, ns, no, nc = len(part.arrays), len(part.scalars), len(part.stores), len(part.reductions)
        arrays = args[at + rank : at + rank + na]
        scalars = args[at + rank + na : at + rank + na + ns]
        stores = args[at + rank + na + ns : at + rank + na + ns + no]
        accs = args[at + rank + na + ns + no : at + rank + na + ns + no + nc]
        at += rank + na + ns + no + nc + (1 if part.guard else 0) + (part.bounds is not None)
        privates = []
        for ins, fresh, c in zip(part.reductions, part.fresh, accs):
            if 0 in ins.params["axes"]:
                mine = [
                    _accumulator(ins, tape, step.shape, fresh, lambda shape, dt: np.empty(shape, dt)) for _ in calls
                ]
                mine = [m.reshape(_kept(m.shape, ins)) for m in mine]
                combine.append((c, ins.prim, mine))
                privates.append(mine)
            else:
                privates.append([c[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])])
        for j, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            calls[j] += [
                *[hi - lo if d == 0 else step.shape[d] for d in part.dims],
                *[a[lo:hi] if r else a for a, r in zip(arrays, part.rows)],
                *scalars,
                *[o[lo:hi] for o in stores],
                *[p[j] for p in privates],
            ]
            if part.guard:
                flags.append(np.zeros(1, np.bool_))
                calls[j].append(flags[-1])
            if part.bounds is not None:  # a chunked loop has no window along its rows
                calls[j].append(part.bounds)
    first = calls[0]
    if not fn.ready:  # the first call compiles (or loads from disk): once, in this thread
        fn(*first)
        first = None
    futures = [_workers(threads).submit(fn, *c) for c in calls[1:]]
    if first is not None:
        fn(*first)  # the calling thread takes a chunk too
    for f in futures:
        f.result()
    for full, prim, mine in combine:
        out = mine[0]
        for p in mine[1:]:
            _COMBINE[prim](out, p, out=out)
        full[...] = out
    return any(f[0] for f in flags)


def _dead_after_steps(tape, plan):
    from ..backend.fuse import reads_of

    return dead_after([reads_of(step) for step in plan.steps], set(tape.outputs))


def _squeezed(shape, pattern):
    """``shape`` without the axes a kernel reads broadcast (codegen passes arrays that way)."""
    return tuple(n for n, b in zip(shape, pattern) if not b) or (1,)


def _kept(shape, ins):
    """An accumulator's shape without the reduced axes (codegen indexes it that way; a full
    reduction's accumulator is 0-d)."""
    return tuple(n for d, n in enumerate(shape) if d not in ins.params["axes"])


def _keepdims(shape, ins):
    """The shape of reduction ``ins``'s result over a loop of ``shape``, reduced axes kept as 1."""
    return tuple(1 if d in ins.params["axes"] else n for d, n in enumerate(shape)) or (1,)


def _accumulator(ins, tape, shape, fresh, take):
    """The array a kernel reduces into: filled with the identity, unless the kernel writes every
    element itself (``fresh``, see codegen)."""
    dt = np_dtype(tape.dtypes[ins.out])
    acc = take(_keepdims(shape, ins), dt)
    if not fresh:
        acc.fill(identity(ins.prim, tape.dtypes[ins.out]))
    return acc


# Arrays of at least this many bytes are kept by their plan for its next run: a new array costs
# a page fault per 4 KiB on first touch (measured here: 0.5 to 10 ms per 8 MB, depending on the
# kernel's huge-page compaction), which a loop calling the same gradient thousands of times would
# pay on every call. Intermediates go back to the plan's pool when the run ends. Results belong
# to the caller: the plan keeps watching a few of them (``LENT_MAX`` per shape and dtype) and
# takes one back only once nothing else references it (the caller dropped it, and no view of it
# is alive), so the next run writes into memory that is already mapped.
POOL_MIN_BYTES = 1 << 16
LENT_MAX = 2


def _refcount(arrays, i):
    return sys.getrefcount(arrays[i])


# what ``_refcount`` reports for an array referenced only by its list (interpreter-dependent)
_UNREFERENCED = _refcount([np.empty(1)], 0)


def _reclaim(arrays):
    """An array of ``arrays`` that nothing else references, removed from the list; or None."""
    for i in range(len(arrays)):
        if _refcount(arrays, i) <= _UNREFERENCED:
            return arrays.pop(i)
    return None


_lent_lock = threading.Lock()


def _taker(comp, made):
    pool, lent = comp.pool, comp.lent

    def take(shape, dt):
        key = (shape, dt)
        free = pool.get(key)
        arr = free.pop() if free else None
        if arr is None and key in lent:
            with _lent_lock:
                arr = _reclaim(lent[key])
        if arr is None:
            arr = np.empty(shape, dt)
        made.append(arr)
        return arr

    return take


def _recycle(comp, made, results):
    keep = {id(_root(r)) for r in results}
    for arr in made:
        if arr.nbytes < POOL_MIN_BYTES:
            continue
        key = (arr.shape, arr.dtype)
        if id(arr) not in keep:
            comp.pool.setdefault(key, []).append(arr)
            continue
        with _lent_lock:
            watched = comp.lent.setdefault(key, [])
            if len(watched) >= LENT_MAX:  # stop watching results the caller still holds
                unused = [i for i in range(len(watched)) if _refcount(watched, i) <= _UNREFERENCED]
                watched[:] = [watched[i] for i in unused]
            if len(watched) < LENT_MAX:
                watched.append(arr)


def _execute(comp, tape, values):
    from ..backend.fuse import Glue

    debug = debug_level()
    env = bind(tape, values)
    threads = _threads
    lay = comp.threaded if threads > 1 else comp.serial
    made = []
    take = _taker(comp, made)
    steps = comp.plan.steps
    for seg, src, fn, gone, chunked in zip(lay.segments, lay.sources, lay.kernels, lay.dead, lay.chunked):
        if src is None:  # one glue step
            ins = steps[seg[0]].instr
            value = comp.consts.get(ins.out)
            if value is None and ins.prim == "unslice":  # the gradient of a slice, into a pooled buffer
                p = ins.params
                value = unslice_into(
                    take(tape.shapes[ins.out], np_dtype(tape.dtypes[ins.out])),
                    env[ins.args[0]],
                    p["starts"],
                    p["stops"],
                    p["steps"],
                )
            elif value is None and ins.out in comp.into:  # see _Compiled.into
                shape, inverse = comp.into[ins.out]
                value = take(shape, np_dtype(tape.dtypes[ins.out]))
                if inverse is not None:
                    value = value.transpose(inverse)
                with np.errstate(all="ignore"):
                    matmul_into(env[ins.args[0]], env[ins.args[1]], value)
            elif value is None:
                with np.errstate(all="ignore"):
                    value = evaluate(tape, ins, env)
                if ins.out in comp.consts:
                    comp.consts[ins.out] = value
            env[ins.out] = value
        else:
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
                args += [sizes[d] for d in part.dims]
                for a, pattern in part.arrays:
                    arr = env[a]
                    if not arr.flags.c_contiguous:
                        arr = np.ascontiguousarray(arr)
                    args.append(arr.reshape(_squeezed(arr.shape, pattern)))
                args += [
                    env[s].reshape(-1) if late else env[s].reshape(-1)[0] for s, late in zip(part.scalars, part.late)
                ]
                donate = len(seg) == 1 and part.stores and j in comp.in_place
                donors = _donors(gone, part, env, made) if donate else []
                for s in part.stores:
                    dt = np_dtype(tape.dtypes[s])
                    o = next((d for d in donors if d.dtype == dt and d.shape == sizes), None)
                    if o is None:
                        o = take(sizes, dt)
                    else:
                        donors = [d for d in donors if d is not o]
                    args.append(o)
                    env[s] = o if o.shape == tape.shapes[s] else o.reshape(tape.shapes[s])
                for ins, fresh in zip(part.reductions, part.fresh):
                    c = _accumulator(ins, tape, step.shape, fresh, take)
                    args.append(c.reshape(_kept(c.shape, ins)))
                    env[ins.out] = c if c.shape == tape.shapes[ins.out] else c.reshape(tape.shapes[ins.out])
                if part.guard:
                    flags.append(np.zeros(1, np.bool_))
                    args.append(flags[-1])
                if part.bounds is not None:
                    args.append(part.bounds)
            t = time.perf_counter()
            if chunked:
                bad = _run_chunked(
                    fn, [steps[j] for j in seg if not isinstance(steps[j], Glue)], src, args, threads, tape
                )
            else:
                fn(*args)
                bad = any(f[0] for f in flags)
            if bad:
                # an argument outside the range of a vectorised sin/cos: the interpreter is exact
                _recycle(comp, made, ())
                return interpret(tape, values)
            if debug >= 3:
                shapes = ", ".join(str(steps[j].shape) for j in seg if not isinstance(steps[j], Glue))
                how = f" in {threads} chunks" if chunked else ""
                print(
                    f"ngrad: kernel {fn.key} over {shapes}{how}: {(time.perf_counter() - t) * 1e3:.3f} ms",
                    file=sys.stderr,
                )
        for s in gone:
            env.pop(s, None)
    results = [env[s].copy() if s in comp.consts else env[s] for s in tape.outputs]
    _recycle(comp, made, results)
    return results


# Numba's compile time per function (measured 0.2 to 0.8 s), and how many new functions a plan
# may need and still compile as soon as it is seen the threshold number of times. Fusing and
# rendering cost about PLAN_S per instruction: longer tapes are planned only once interpreting
# them has cost as much.
COMPILE_S = 0.3
EAGER_FUNCTIONS = 8
# ``prepare`` (``ngrad.compile``) compiles a plan at once, unless it needs more than
# PREPARE_FUNCTIONS new functions (ten seconds of Numba and more): then it is tiered like a plain
# ``backward()``. An unrolled 40-step recurrence through an integer gather (which bytecode does
# not take) fused into 80 functions and its traced first call took 20 s.
PREPARE_FUNCTIONS = 32
PLAN_S = 2e-4
PLAN_EAGER = 2000


# Tapes of at least BYTECODE_MIN_INSTRS instructions whose every instruction works on at most
# BYTECODE_MAX_ELEMENTS elements run as bytecode (``engine/bytecode.py``): one loop over all
# instructions, compiled once per set of operations. There, Python and Numba's per-function
# compile time are the cost, not memory traffic: an unrolled RK4 solver of 6,800 instructions
# on 100 elements takes 0.08 ms per call (1.1 ms when first measured), against 19 ms for its
# 1,500 fused kernels and glue steps (and minutes compiling them) or 60 ms on the interpreter.
# A slice counts the window it takes, not the array it reads: the input an unrolled recurrence
# walks through a step at a time (an LSTM's (c, b) sequence) is only copied into the arena, and
# counting it whole sent an LSTM of 300 steps to fused kernels (over ten minutes compiling).
#
# A tape with bigger steps runs as bytecode too when its fused plan would compile more than
# BYTECODE_FUNCTIONS functions: GradBench's ode at n = 5,000 fuses into 513 (the gradient of x
# gathers one term from each of its 256 evaluations): its first call had not finished after
# five minutes of Numba, where the bytecode runs it in 3.9 ms a call (the interpreter: 37 ms)
# after 0.4 s. Bytecode walks each instruction's elements at about 0.3 ns each, so at a million
# elements fused kernels would be faster per call, but only after minutes of compiling.
BYTECODE_MIN_INSTRS = 256
BYTECODE_MAX_ELEMENTS = 4096
BYTECODE_FUNCTIONS = 32


def _small_steps(tape):
    """Whether every instruction of ``tape`` reads and writes at most BYTECODE_MAX_ELEMENTS
    elements, a slice counting only its result."""
    sizes = [math.prod(s) for s in tape.shapes]
    if max(sizes, default=0) <= BYTECODE_MAX_ELEMENTS:
        return True
    big = {s for s, n in enumerate(sizes) if n > BYTECODE_MAX_ELEMENTS}
    return not any(ins.out in big or (ins.prim != "slice" and not big.isdisjoint(ins.args)) for ins in tape.instrs)


class _Machine:
    """A tape run as bytecode: its encoding and the compiled loop once it is due (tiered like a
    ``_Compiled`` plan of one function; ``cached``: the loop is on disk)."""

    __slots__ = ("code", "fn", "seen", "rent", "cached", "pending")

    def __init__(self, code):
        from ..targets.compile import on_disk

        _share_loop(code)
        self.code, self.fn, self.seen, self.rent, self.pending = code, None, 0, 0.0, 0
        self.cached = on_disk(code.source)

    def ready(self):
        return self.fn is not None

    @property
    def kernels(self):
        return [self.fn]

    def compile(self):
        from ..targets.compile import kernel

        if self.fn is None:
            self.fn = kernel(self.code.source)

    def run(self, values):
        return self.code.run(self.fn, values)


# The op sets of the bytecode loops compiled on this machine, most recent first, per arena dtype:
# kept in memory and in the cache's plans (``bytecode.loops_name``), so a tape whose operations a
# compiled loop holds runs on it (``bytecode.loop_ops``) instead of compiling a loop of its own.
_loops = {}
_LOOPS_KEPT = 32


def _read_loops():
    """The op sets stored in the cache, or {} when there are none or the file fails its checks."""
    import marshal

    from ..backend.bytecode import loops_name
    from ..store import read_plan

    name = loops_name()
    data = name and read_plan(name)
    if not data:
        return {}
    try:
        stored = marshal.loads(data)
        return {
            dt: [tuple(ops) for ops in sets if type(ops) is tuple and all(type(op) is str for op in ops)]
            for dt, sets in stored.items()
            if dt in ("f32", "f64") and type(sets) is list
        }
    except (TypeError, ValueError, EOFError, AttributeError):
        return {}


def _share_loop(code):
    """Move the encoding ``code`` onto the loop ``bytecode.loop_ops`` picks among those compiled
    before (in this process, or on disk and still there), and remember the one it runs on."""
    import marshal

    from ..backend.bytecode import loop_ops, loops_name, source
    from ..store import write_plan
    from ..targets.compile import loaded, on_disk

    dt = code.arena()
    if not _loops:
        _loops.update(_read_loops())
    known = _loops.setdefault(dt, [])
    usable = [ops for ops in known if loaded(text := source(ops, dt)) or on_disk(text)]
    ops = loop_ops(code.ops, usable)
    if ops != code.ops:
        code.use(ops)
    if known[:1] != [ops]:
        known[:] = [ops] + [k for k in known if k != ops][: _LOOPS_KEPT - 1]
        merged = _read_loops()
        for d, sets in _loops.items():
            merged[d] = sets + [k for k in merged.get(d, []) if k not in sets][: _LOOPS_KEPT - len(sets)]
        name = loops_name()
        if name:
            write_plan(name, marshal.dumps(merged))


def _machine(tape, big_steps=False):
    """The bytecode of ``tape`` when it should run as bytecode (``big_steps``: whatever its
    arrays' sizes), else None. Encodings are kept on disk next to the kernels: encoding costs
    about 10 µs an instruction (half a second for an unrolled LSTM's 47,000), reading one back
    a hundredth of that. One that fails its checks is encoded again and replaced."""
    if len(tape.instrs) < BYTECODE_MIN_INSTRS or not (big_steps or _small_steps(tape)):
        return None
    from ..backend.bytecode import Bytecode, encode, plan_name
    from ..store import read_plan, write_plan

    name = plan_name(tape)
    data = name and read_plan(name)
    if data:
        try:
            return _Machine(Bytecode.loads(data))
        except ValueError:
            if debug_level():
                print(f"ngrad: stored encoding {name} failed its checks; encoding again", file=sys.stderr)
    code = encode(tape)
    if code is None:
        return None
    if name:
        write_plan(name, code.dumps())
    return _Machine(code)


class _Cold:
    """A long tape not planned yet: how often it ran and how long the interpreter took."""

    __slots__ = ("seen", "rent")

    def __init__(self):
        self.seen, self.rent = 0, 0.0

    def ready(self):
        return False


def _show(comp):
    """Print a new plan's generated source (``NGRAD_DEBUG=2``)."""
    if isinstance(comp, _Machine):
        print(f"ngrad: bytecode loop\n{comp.code.source}", file=sys.stderr)
        return
    for s in comp.sources:
        if s is not None:
            print(f"ngrad: generated kernel\n{s.text}", file=sys.stderr)


def _compiled_for(tape, mode, now=False):
    """The plan of ``tape`` (None under ``NGRAD_JIT=never``), compiled if it is due: a plan whose
    ``kernels`` are still None runs on the interpreter, and the caller adds that time to its
    ``rent``. ``now`` (``prepare``): planned and compiled at first sight, except under ``auto`` a
    plan needing more than ``PREPARE_FUNCTIONS`` new functions, which waits for its rent."""
    if mode == "never" or not tape.instrs:
        return None
    key = tape.key()
    comp = _plans.get(key)
    if comp is None:
        comp = _machine(tape)
        if comp is not None:
            _plans[key] = comp
            if debug_level() >= 2:
                _show(comp)
    if comp is None or isinstance(comp, _Cold):  # fused and rendered once per tape structure
        cold = comp
        if mode == "auto" and not now and len(tape.instrs) > PLAN_EAGER:
            cold = cold or _plans.setdefault(key, _Cold())
            cold.seen += 1
            if cold.seen < _threshold() or cold.rent < PLAN_S * len(tape.instrs):
                return cold
        comp = _Compiled(tape)
        # a tape of small steps was offered to bytecode when first seen: encoding it again
        # would only decline it again
        if comp.functions() > BYTECODE_FUNCTIONS and not _small_steps(tape):
            comp = _machine(tape, big_steps=True) or comp
        _plans[key] = comp
        if cold is not None:  # it carries on counting (this call is counted below)
            comp.seen, comp.rent = cold.seen - 1, cold.rent
        if mode == "auto" and isinstance(comp, _Compiled):
            comp.pending = comp.missing()
            comp.cached = comp.pending == 0
        if debug_level() >= 2:
            _show(comp)
    if not comp.ready():
        if not now:  # prepare runs nothing: its call is counted when it runs
            comp.seen += 1
        eager = PREPARE_FUNCTIONS if now else EAGER_FUNCTIONS
        if (
            mode == "auto"
            and not comp.cached
            and (
                (comp.seen < _threshold() and not now)
                or (comp.pending > eager and comp.rent < COMPILE_S * comp.pending)
            )
        ):
            return comp
        t = time.perf_counter()
        comp.compile()
        if debug_level() >= 3:
            print(
                f"ngrad: prepared {len([k for k in comp.kernels if k])} kernels in "
                f"{(time.perf_counter() - t) * 1e3:.1f} ms",
                file=sys.stderr,
            )
    return comp


def run(tape, values, target="cpu"):
    """Execute ``tape`` on ``values`` after validating them; return owned output arrays.
    ``target="cuda"`` runs it on the GPU (``engine/cuda.py``): device arrays in and out."""
    if target == "cuda":
        from .cuda import run as run_cuda

        return run_cuda(tape, values)
    _check(tape, values)
    if debug_level() >= 1:
        print(f"ngrad: running tape ({len(tape.instrs)} instrs)\n{tape.format()}", file=sys.stderr)
    comp = _compiled_for(tape, jit_mode())
    if comp is None or not comp.ready():
        t = time.perf_counter()
        outs = interpret(tape, values)
        if comp is not None:
            comp.rent += time.perf_counter() - t
    elif isinstance(comp, _Machine):
        return comp.run(values)  # fresh arrays, sharing memory with nothing
    else:
        # a small plan runs through its driver (``prepare``): straight-line code, shapes as literals
        drive = comp.driver(tape)
        if drive is not None and debug_level() < 3:
            return drive(values)
        return _executed(comp, tape, values)
    return _owned(outs, values)


def _executed(comp, tape, values):
    """The outputs of the compiled plan ``comp`` run step by step (``_execute``), owned."""
    comp.compile()  # a driver made with threads off calls this once they are on
    return _owned(_execute(comp, tape, values), values)


def _owned(outs, values):
    taken = {id(_root(v)) for v in values if isinstance(v, np.ndarray)}
    res = []
    for o in outs:
        # an output that is (a view of) an input or of another output is copied: callers own results
        if id(_root(o)) in taken or not o.flags.c_contiguous or not o.flags.writeable:
            o = np.array(o, order="C", copy=True)
        taken.add(id(_root(o)))
        res.append(o)
    return res


def prepare(tape, target="cpu"):
    """A function ``f(values)`` equal to ``run(tape, values, target)``, for calling many times.

    The plan is compiled now (unless ``NGRAD_JIT=never``, or under ``auto`` it needs more than
    ``PREPARE_FUNCTIONS`` new functions: then ``run`` tiers it) and unrolled into a generated Python
    *driver*: input checks, allocations and kernel calls as straight-line code with every shape
    a literal, so a call costs little more than the kernels and NumPy calls themselves. Big
    buffers come from the plan's pool (``POOL_MIN_BYTES``), and a loop writes in place of a
    value that dies there where ``_execute`` would (decided once, when the driver is made).
    With threads on, a plan with loops big enough for them runs through ``run``'s step-by-step
    path, which cuts those loops into chunks.
    """
    if target == "cuda":
        return lambda values: run(tape, values, target)
    mode = jit_mode()
    comp = _compiled_for(tape, mode, now=True)
    if isinstance(comp, _Machine):
        return _checked(tape, comp)
    drive = comp.driver(tape) if comp is not None and comp.ready() else None
    if drive is None:
        return lambda values: run(tape, values)
    return drive


def _checked(tape, machine):
    """``machine.run`` behind the input checks of ``run`` (on tensors: a runtime scalar that is
    not a number fails when the arena takes it)."""
    tensors = [
        (i, tape.shapes[s], np_dtype(tape.dtypes[s]))
        for i, (s, k) in enumerate(zip(tape.inputs, tape.kinds))
        if k != "scalar"
    ]
    count = len(tape.inputs)

    def call(values):
        if len(values) != count:
            _check(tape, values)
        for i, shape, dt in tensors:
            v = values[i]
            if v.__class__ is not np.ndarray or v.shape != shape or v.dtype != dt:
                _check_one(tape, i, v)
        return machine.run(values)

    return call


# prims whose kernel text (the primitive table's forward against codegen.SourceMath) is Python
# operators only, which NumPy values evaluate with NumPy's semantics and keep their dtype
_SCALAR_OPS = frozenset(["add", "sub", "mul", "div", "neg", "pow", "abs", "eq", "ne", "lt", "le", "gt", "ge"])

# elementwise prims whose NumPy implementation broadcasts its operands
_BROADCASTING = frozenset(["binary", "compare", "logical", "where"])

# prims whose NumPy result may share memory with an operand (their results are not fresh)
_SHARES = frozenset(["reshape", "permute", "expand", "slice", "flip", "detach"])


def _driver(comp, tape):
    """The driver of a compiled plan (see ``prepare``)."""
    # the plan run step by step: the exact route when a vectorised sin/cos met an argument out
    # of its range (``_execute`` falls back to the interpreter), and with threads on
    g = {"execute": lambda values: _executed(comp, tape, values)}
    lines, outs = _driver_code(
        comp, tape, [f"values[{i}]" for i in range(len(tape.inputs))], g, "return execute(values)"
    )
    text = "def drive(values):\n" + "".join(f"    {line}\n" for line in lines + [f"return [{', '.join(outs)}]"])
    if debug_level() >= 2:
        print(f"ngrad: generated driver\n{text}", file=sys.stderr)
    exec(compile(text, f"<ngrad driver {len(tape.instrs)} instrs>", "exec"), g)
    return g["drive"]


def inline(tape, inputs, g, fallback):
    """The body of ``prepare(tape)``'s driver for a caller's generated function (``ngrad.compile``
    puts it in the function that also checks the call's signature and builds its tensors):
    ``inputs[i]`` is the expression of input i (checked like ``run`` checks it); ``g`` the
    globals the code runs in (every name the driver adds to it starts with a letter, and its
    locals too: the caller's names start with ``_``); ``fallback`` the statement run when the
    driver cannot finish the call (a sin/cos argument out of range; threads are on and the plan
    has loops big enough for them), before anything it did is seen. Returns the lines and the
    expression of each output, or None when the tape runs without a driver (not compiled yet,
    bytecode, or threads on for its loops)."""
    comp = _compiled_for(tape, jit_mode(), now=True)
    if not isinstance(comp, _Compiled) or not comp.ready() or comp.chunks():
        return None
    return _driver_code(comp, tape, inputs, g, fallback)


def _driver_code(comp, tape, inputs, g, fallback):
    """Lines and output expressions of a driver (see ``_driver`` and ``inline``)."""
    from ..backend.fuse import Glue
    from ..ir.prims import PRIMS

    steps = comp.plan.steps
    lay = comp.serial
    comp.compile(lay)
    g.update(
        {
            "ndarray": np.ndarray,
            "empty": np.empty,
            "zeros": np.zeros,
            "asarray": np.asarray,
            "contiguous": np.ascontiguousarray,
            "errstate": np.errstate,
            "bool_": np.bool_,
            "taker": lambda made: _taker(comp, made),
            "recycle": lambda made, res: _recycle(comp, made, res),
            "matmul_into": matmul_into,
        }
    )
    lines = []
    # slot -> variable; variables holding fresh arrays; slot -> the variable owning its memory;
    # slots that may not be C-contiguous; variables holding a runtime scalar as a NumPy scalar
    var, fresh, root, loose, scalar = {}, set(), {}, set(), set()
    pooled = [False]  # some buffer comes from the plan's pool (see POOL_MIN_BYTES)
    allocated = set()  # variables holding a C-contiguous buffer the driver allocated for a loop

    def dtype_name(s):
        name = f"D{s}"
        g[name] = np_dtype(tape.dtypes[s])
        return name

    def alloc(shape, s):
        """An expression making a buffer for slot ``s``: a big one from the plan's pool, where
        its pages are already mapped; a small one from malloc, which keeps such memory itself."""
        if math.prod(shape) * np_dtype(tape.dtypes[s]).itemsize >= POOL_MIN_BYTES:
            pooled[0] = True
            return f"take({tuple(shape)!r}, {dtype_name(s)})"
        return f"empty({tuple(shape)!r}, {dtype_name(s)})"

    for i, (s, kind) in enumerate(zip(tape.inputs, tape.kinds)):
        v = var[s] = f"x{s}"
        root[s] = v
        if kind == "scalar":
            lines.append(f"{v} = {dtype_name(s)}.type({inputs[i]})  # in %{s} scalar")
            scalar.add(v)
        else:
            lines.append(f"{v} = {inputs[i]}  # in %{s}")
            lines.append(
                f"if {v}.__class__ is not ndarray or {v}.shape != {tape.shapes[s]!r} or "
                f"{v}.dtype is not {dtype_name(s)} or not {v}.flags.c_contiguous:"
            )
            lines.append(f"    {v} = fix({i}, {v})")
    g["fix"] = lambda i, v: _fix_input(tape, i, v)
    if comp.threaded is not comp.serial:  # loops big enough for threads: once threads are on,
        g["plan"] = comp  # they run in chunks (``_execute``); the driver is serial
        lines.append("if plan.chunks():")
        lines.append(f"    {fallback}")

    consts = comp.consts  # constants (literals and their reshapes), computed once per plan
    for step in steps:
        if isinstance(step, Glue) and step.instr.out in consts and consts[step.instr.out] is None:
            consts[step.instr.out] = evaluate(tape, step.instr, consts)

    implicit = _implicit_expands(steps, tape)

    def glue_line(ins):
        out = ins.out
        v = var[out] = f"e{out}"
        if out in consts:
            g[f"C{out}"] = consts[out]
            root[out] = f"C{out}"
            return f"{v} = C{out}  # %{out} = {ins.prim} (constant)"
        a0 = ins.args[0] if ins.args else None
        if out in implicit:
            var[out], root[out] = var[a0], root.get(a0, var[a0])
            if a0 in loose:
                loose.add(out)
            return f"# %{out} = expand(%{a0}): NumPy broadcasts {var[a0]} where it is read"
        if ins.prim in ("reshape", "detach") and var[a0] in scalar:
            # a runtime scalar stays a NumPy scalar until something needs it as an array
            var[out] = var[a0]
            root[out] = root[a0]
            return f"# %{out} = {ins.prim}(%{a0}) is {var[a0]}"
        if ins.prim == "detach":
            var[out], root[out] = var[a0], root[a0]
            if a0 in loose:
                loose.add(out)
            return f"# %{out} = detach(%{a0}) is {var[a0]}"
        args = [f"asarray({var[a]})" if var[a] in scalar else var[a] for a in ins.args]
        if out in comp.into:  # see _Compiled.into
            shape, inverse = comp.into[out]
            buf = v if inverse is None else f"p{out}"
            how = "into a buffer of the plan's" if inverse is None else "laid out as its permute's result"
            lines.append(f"{buf} = {alloc(shape, out)}  # %{out} = matmul, {how}")
            root[out] = buf
            fresh.add(buf)
            if inverse is not None:
                loose.add(out)
                lines.append(f"{v} = {buf}.transpose({inverse!r})")
            return f"matmul_into({args[0]}, {args[1]}, {v})"
        if ins.prim == "reshape":
            expr = f"{args[0]}.reshape({ins.params['shape']!r})"
        elif ins.prim == "slice":
            expr = f"{args[0]}[{_index_text(ins.params)}]"
        elif ins.prim == "unslice":
            lines.append(f"{v} = zeros({ins.params['shape']!r}, {dtype_name(out)})  # %{out} = unslice")
            root[out] = v
            fresh.add(v)
            return f"{v}[{_index_text(ins.params)}] = {args[0]}"
        elif (
            ins.prim in _SCALAR_OPS
            and math.prod(tape.shapes[out]) == 1
            and tape.dtypes[a0] in ("f32", "f64")
            and all(tape.dtypes[a] == tape.dtypes[a0] for a in ins.args)
        ):
            # one-element arithmetic (bias corrections, a logsumexp's max): Python's operators
            # on NumPy values take 0.1 µs where the interpreter's dispatch takes 2
            text = PRIMS[ins.prim].fwd(SourceMath, *[Expr(var[a], tape.dtypes[a]) for a in ins.args], **ins.params)
            expr = f"asarray{text.text}" if text.text.startswith("(") else f"asarray({text.text})"
        else:
            g[f"G{out}"] = lambda *arrays, ins=ins: compute(tape, ins, arrays)
            expr = f"G{out}({', '.join(args)})"
        if ins.prim in _SHARES:
            root[out] = root.get(ins.args[0], v)
            if ins.prim != "reshape" or ins.args[0] in loose:
                loose.add(out)
        else:
            root[out] = v
            fresh.add(v)
        return f"{v} = {expr}  # %{out} = {ins.prim}"

    def array_arg(a, shape):
        v = var[a]
        if v in scalar:  # a runtime scalar (a Python number) that a one-element loop reads as an array
            return f"asarray({v}).reshape({tuple(shape)!r})"
        if a in loose:
            lines.append(f"if not {v}.flags.c_contiguous: {v} = contiguous({v})")
        return v if tuple(shape) == tuple(tape.shapes[a]) else f"{v}.reshape({tuple(shape)!r})"

    live = set(tape.inputs)  # the slots whose values are alive now

    def donors(j, part, gone):
        """Buffers a one-loop segment may write its stores into, as ``_donors`` decides at run
        time: arrays this driver made that the loop reads only at its own index, whose values
        die here and that no other live value shares (NumPy's results are not candidates: their
        layout follows their operands')."""
        if j not in comp.in_place or not part.stores:
            return []
        sharing = {}
        for s in live:
            sharing[root[s]] = sharing.get(root[s], 0) + 1
        return [
            a
            for (a, _), whole in zip(part.arrays, part.whole)
            if whole and a in gone and root[a] in allocated and var[a] == root[a] and sharing[root[a]] == 1
        ]

    quiet = False  # some NumPy glue computes: no floating-point warnings (one errstate per call)
    for n_seg, (seg, src, fn, gone) in enumerate(zip(lay.segments, lay.sources, lay.kernels, lay.dead)):
        gone = set(gone)
        if src is None:
            ins = steps[seg[0]].instr
            line = glue_line(ins)
            quiet = quiet or (
                not line.startswith("#")
                and ins.out not in consts
                and PRIMS[ins.prim].kind not in ("movement", "index", "cast")
            )
            lines.append(line)
            live.add(ins.out)
            live -= gone
            continue
        args, guards, parts = [], [], iter(src.parts)
        for j in seg:
            step = steps[j]
            if isinstance(step, Glue):
                lines.append(glue_line(step.instr))
                live.add(step.instr.out)
                continue
            part = next(parts)
            sizes = step.shape or (1,)
            args += [str(sizes[d]) for d in part.dims]
            for a, pattern in part.arrays:
                args.append(array_arg(a, _squeezed(tape.shapes[a], pattern)))
            for s_, late in zip(part.scalars, part.late):
                v = var[s_]
                if v in scalar:
                    args.append(f"asarray({v}).reshape(-1)" if late else v)
                else:
                    args.append(f"{v}.reshape(-1)" if late else f"{v}.reshape(-1)[0]")
            spare = donors(j, part, gone) if len(seg) == 1 else []
            for st in part.stores:
                d = next(
                    (a for a in spare if tape.dtypes[a] == tape.dtypes[st] and tape.shapes[a] == tuple(sizes)), None
                )
                if d is None:
                    o = f"o{st}"
                    lines.append(f"{o} = {alloc(sizes, st)}  # store %{st}")
                    fresh.add(o)
                    allocated.add(o)
                else:  # written in place of a value that dies here (see ``donors``)
                    spare.remove(d)
                    o = var[d]
                    lines.append(f"# store %{st} into {o}, the buffer of %{d}, which dies here")
                args.append(o)
                var[st] = o if tuple(sizes) == tuple(tape.shapes[st]) else f"{o}.reshape({tape.shapes[st]!r})"
                root[st] = o
                live.add(st)
            for ins, isfresh in zip(part.reductions, part.fresh):
                c = f"r{ins.out}"
                keep = _keepdims(step.shape, ins)
                kept = _kept(keep, ins)
                made = () if not kept else keep  # a full reduction's 0-d accumulator: no reshape
                lines.append(f"{c} = {alloc(made, ins.out)}  # %{ins.out} = {ins.prim}")
                if not isfresh:
                    g[f"I{ins.out}"] = identity(ins.prim, tape.dtypes[ins.out])
                    lines.append(f"{c}.fill(I{ins.out})")
                live.add(ins.out)
                args.append(c if kept == made else f"{c}.reshape({kept!r})")
                fresh.add(c)
                var[ins.out] = c if made == tuple(tape.shapes[ins.out]) else f"{c}.reshape({tape.shapes[ins.out]!r})"
                root[ins.out] = c
            if part.guard:
                guards.append(f"b{len(guards)}_{j}")
                lines.append(f"{guards[-1]} = zeros(1, bool_)")
                args.append(guards[-1])
            if part.bounds is not None:
                g[f"W{n_seg}_{j}"] = part.bounds
                args.append(f"W{n_seg}_{j}")
        name = f"K{n_seg}"
        g[name] = _warming(fn, g, name)
        lines.append(f"{name}({', '.join(args)})")
        if guards:
            # an argument outside the range of a vectorised sin/cos: the interpreter is exact
            lines.append(f"if {' or '.join(b + '[0]' for b in guards)}:")
            lines.append(f"    {fallback}")
        live -= gone
    if quiet:  # entering errstate costs about a microsecond: once, around everything
        lines = ["with errstate(all='ignore'):"] + ["    " + line for line in lines]
    outs, taken = [], set()
    for s in tape.outputs:
        v = var[s]
        if v in scalar:
            v = f"asarray({v})"
        elif root.get(s) not in fresh or root.get(s) in taken:  # an input, a constant, or shared
            v = f"{v}.copy()"
        taken.add(root.get(s))
        outs.append(v)
    if pooled[0]:
        # big buffers come from the plan's pool and go back to it (the results are watched
        # until the caller drops them; see ``_recycle``)
        lines = ["made = []", "take = taker(made)"] + lines
        lines.append(f"y = [{', '.join(outs)}]")
        lines.append("recycle(made, y)")
        outs = [f"y[{k}]" for k in range(len(outs))]
    return lines, outs


def _implicit_expands(steps, tape):
    """The expands a driver need not build: each read only by elementwise NumPy glue whose
    result keeps its shape when that operand is the expand's source instead (NumPy broadcasts
    it). ``np.broadcast_to`` costs 4 us, about twice the one-element-by-vector product it feeds
    at the end of a logsumexp's gradient."""
    from ..backend.fuse import Glue, reads_of
    from ..ir.prims import PRIMS

    readers = {}
    for step in steps:
        for a in reads_of(step):
            readers.setdefault(a, []).append(step)
    implicit = {}  # expand slot -> its source
    outputs = set(tape.outputs)

    def keeps_shape(ins):
        shapes = [tape.shapes[implicit.get(a, a)] for a in ins.args]
        return tuple(np.broadcast_shapes(*shapes)) == tuple(tape.shapes[ins.out])

    for step in steps:
        if not isinstance(step, Glue) or step.instr.prim != "expand" or step.instr.out in outputs:
            continue
        ins = step.instr
        users = readers.get(ins.out, ())
        if not users or not all(isinstance(u, Glue) and PRIMS[u.instr.prim].kind in _BROADCASTING for u in users):
            continue
        implicit[ins.out] = ins.args[0]
        if not all(keeps_shape(u.instr) for u in users):
            del implicit[ins.out]
    return implicit


def _index_text(params):
    return ", ".join(f"{a}:{b}:{c}" for a, b, c in zip(params["starts"], params["stops"], params["steps"]))


def _warming(kernel, g, name):
    """The kernel's first calls go through its wrapper (load or compile, cache repair); once it
    is ready, the driver calls the machine code for these argument types (``compile.direct``):
    a driver's arguments are inputs it checked (class, shape, dtype, layout), arrays it made and
    literals, so their types are the same on every call."""

    def call(*args):
        r = kernel(*args)
        if kernel.ready:
            from ..targets.compile import direct

            g[name] = direct(kernel, args)
        return r

    return call


def _fix_input(tape, i, v):
    """A driver's slow path for input ``i``: a contiguous copy, or the error ``run`` raises."""
    _check_one(tape, i, v)
    return np.ascontiguousarray(v)


def _root(a):
    """The array that owns ``a``'s memory."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a
