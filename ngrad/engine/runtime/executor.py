"""The executor: a compiled plan run step by step.

Contract: ``execute(plan, values)`` runs a ``CompiledPlan`` (its ``plan.tape``) on checked inputs: glue steps
through the interpreter's NumPy (matmuls and unslices into pooled buffers, constants once per
plan), each segment's buffers allocated before its function is called, big loops in chunks on
threads. It returns the outputs (not yet ``owned``); when a vectorised sin/cos met an argument
out of its range it reruns the tape on the interpreter, which is exact. ``executed`` also
compiles the plan's current layout and makes the outputs the caller's own.
"""

import sys
import time

import numpy as np

from ..backend.fuse import Glue
from ..config import debug_level
from ..ir.interpret import bind, evaluate, interpret, matmul_into, np_dtype, unslice_into
from . import buffers, loops, threads
from .buffers import accumulator, owned
from .checks import aligned
from .layout import kept, squeezed

__all__ = ["execute", "executed"]


def executed(plan, values):
    """The outputs of the compiled plan run step by step (``execute``), owned."""
    plan.compile()  # a driver made with threads off calls this once they are on
    return owned(execute(plan, values), values)


def execute(plan, values, kernels=None):
    """The outputs of ``plan`` run on ``values`` (see the module docstring). ``kernels``: the
    functions to call in place of the layout's own (a background compile runs the ones it has
    not published yet, so that each specialises on the calls' argument types)."""
    tape = plan.tape  # the caller's tape with its rows lowered, as the plan was fused
    debug = debug_level()
    env = bind(tape, values)
    n_threads = threads.get_num_threads()
    lay = plan.threaded if n_threads > 1 else plan.serial
    made = []
    take = buffers.taker(plan, made)
    steps = plan.plan.steps
    fns = lay.kernels if kernels is None else kernels
    for seg, src, fn, gone, chunked in zip(lay.segments, lay.sources, fns, lay.dead, lay.chunked):
        if src is None:  # one glue step
            ins = steps[seg[0]].instr
            env[ins.out] = _glue(plan, tape, ins, env, take)
        else:
            args, flags = _segment_args(plan, tape, seg, src, gone, env, made, take)
            t = time.perf_counter()
            if chunked:
                kernels = [steps[j] for j in seg if not isinstance(steps[j], Glue)]
                bad = threads.run_chunked(fn, kernels, src, args, n_threads, tape)
            else:
                fn(*(args if src.keep is None else [args[k] for k in src.keep]))
                bad = any(f[0] for f in flags)
            if bad:
                # an argument outside the range of a vectorised sin/cos: the interpreter is exact
                buffers.recycle(plan, made, ())
                return interpret(tape, values)
            if debug >= 3:
                shapes = ", ".join(str(steps[j].shape) for j in seg if not isinstance(steps[j], Glue))
                how = f" in {n_threads} chunks" if chunked else ""
                print(
                    f"ngrad: kernel {fn.key} over {shapes}{how}: {(time.perf_counter() - t) * 1e3:.3f} ms",
                    file=sys.stderr,
                )
        for s in gone:
            env.pop(s, None)
    results = [env[s].copy() if s in plan.consts else env[s] for s in tape.outputs]
    buffers.recycle(plan, made, results)
    return results


def _glue(plan, tape, ins, env, take):
    """The value of one glue step: a constant computed once per plan, an unslice or a matmul
    into a buffer of the plan's, or the interpreter's NumPy."""
    value = plan.consts.get(ins.out)
    if value is None and ins.prim == "unslice":  # the gradient of a slice, into a pooled buffer
        p = ins.params
        value = unslice_into(
            take(tape.shapes[ins.out], np_dtype(tape.dtypes[ins.out])),
            env[ins.args[0]],
            p["starts"],
            p["stops"],
            p["steps"],
        )
    elif value is None and ins.out in plan.into:  # see plan._matmuls_into
        shape, inverse = plan.into[ins.out]
        value = take(shape, np_dtype(tape.dtypes[ins.out]))
        if inverse is not None:
            value = value.transpose(inverse)
        with np.errstate(all="ignore"):
            matmul_into(env[ins.args[0]], env[ins.args[1]], value)
    elif value is None and ins.prim == "scan":
        value = loops.scan(ins.params, [env[a] for a in ins.args])
    elif value is None:
        with np.errstate(all="ignore"):
            value = evaluate(tape, ins, env)
        if ins.out in plan.consts:
            plan.consts[ins.out] = value
    return value


def _segment_args(plan, tape, seg, src, gone, env, made, take):
    """The arguments of a segment's function, and the guard flags its loops raise."""
    # every buffer of the segment is allocated (and every reshape taken) before its loops
    # run, so later loops of the same call can be handed the arrays earlier loops fill
    steps = plan.plan.steps
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
            arr = aligned(arr)
            args.append(arr.reshape(squeezed(arr.shape, pattern)))
        args += [env[s].reshape(-1) if late else env[s].reshape(-1)[0] for s, late in zip(part.scalars, part.late)]
        donate = len(seg) == 1 and part.stores and j in plan.in_place
        spare = buffers.donors(gone, part, env, made) if donate else []
        for s in part.stores:
            dt = np_dtype(tape.dtypes[s])
            o = next((d for d in spare if d.dtype == dt and d.shape == sizes), None)
            if o is None:
                o = take(sizes, dt)
            else:
                spare = [d for d in spare if d is not o]
            args.append(o)
            env[s] = o if o.shape == tape.shapes[s] else o.reshape(tape.shapes[s])
        for ins, fresh in zip(part.reductions, part.fresh):
            c = accumulator(ins, tape, step.shape, fresh, take)
            args.append(c.reshape(kept(c.shape, ins)))
            env[ins.out] = c if c.shape == tape.shapes[ins.out] else c.reshape(tape.shapes[ins.out])
        if part.guard:
            flags.append(np.zeros(1, np.bool_))
            args.append(flags[-1])
        if part.bounds is not None:
            args.append(part.bounds)
    return args, flags
