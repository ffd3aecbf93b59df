"""Blocking: which consecutive loops of one generated function run together in blocks of rows,
and which of their values live in buffers of one block's rows instead of arrays of all rows.

Contract: ``blocks(kernels)`` gives the runs of loops that run in blocks (each block of rows
through every loop of a run, then the next), going up or down, a run going down possibly led by
loops going up that it recomputes block by block (``Run.lead``); ``held(kernels, tape, outside,
runs)`` which values each run keeps a block at a time; ``settle(kernels, tape, outside)`` both,
with a led run split where a value its lead makes for its later loops is not held.
``hold_lines`` and ``block_head`` are the lines ``codegen.program`` writes before a run and at
the start of each block. The choices depend on windows' starts and steps, never on sizes: how
far a read goes beyond its own row is computed from the window bounds when the function runs,
so one text serves every size.
"""

import typing

from .fuse import ReadKind
from .source_math import NP_TYPE

__all__ = ["Run", "blocks", "held", "settle", "hold_lines", "block_head"]


class Run(typing.NamedTuple):
    """Consecutive loops (kernel indices) that run in blocks of rows, the blocks going up, or
    down from the last row (``descending``). ``lead``: how many of a descending run's first loops
    are a run going up whose values the later loops read at their rows plus or minus a window's
    bound: each block recomputes them over itself and the rows below and above it that the later
    loops reach (GradBench ode's reverse step: the four RK4 stages, then their gradients going
    down, in one pass instead of two, the stages never written to arrays of all rows)."""

    loops: list
    descending: bool
    lead: int = 0


def _rows_made(r, written, down):
    """Whether the kernel read ``r`` loads the slots ``written`` (stored by the loops before it in
    a run) only at rows those loops have made, the blocks running from row 0 up (``down``: reads
    at rows up to the loop's own: at its own row, an array; through a window from row 0 with step
    1; or shifted down, an unslice starting at row 0 or later, a concatenation's piece read at the
    row less the piece's start from a window starting no later than it) or from the last row down
    (reads at rows from the loop's own up: through a window of positive step, or shifted up, an
    unslice of a slice, whose start ``fuse`` makes negative)."""
    if r.kind == ReadKind.CAT:
        return all(_piece_rows(at, piece, written, down) for at, _, piece in r.pieces)
    if r.kind == ReadKind.LITERAL or r.src not in written or r.kind == ReadKind.ARRAY:
        return True
    start, _, step = r.window[0] if r.window else (0, 0, 0)
    if r.kind == ReadKind.WINDOW:
        return start == 0 and step == 1 if down else step >= 1
    if r.kind != ReadKind.PAD:
        return False
    return start >= 0 and step >= 1 if down else start <= 0 and step == 1


def _piece_rows(at, r, written, down):
    """``_rows_made`` for the piece ``r`` of a concatenation at row ``at``."""
    if r.kind == ReadKind.LITERAL or r.src not in written:
        return True
    if r.kind == ReadKind.ARRAY:  # at the row less ``at``
        return down or at == 0
    start, _, step = r.window[0]
    return r.kind == ReadKind.WINDOW and step == 1 and (start <= at if down else start >= at)


def blocks(kernels):
    """Runs of consecutive kernels that run together in blocks of ``BLOCK_ROWS`` rows (each
    block through every loop of the run, then the next block), as (indices, descending): loops
    over one axis of one extent, without reductions (a loop after one may read its sum), each
    reading what the run's loops before it store only at rows those have made: every read at
    rows up to its own (the blocks run from row 0 up) or every read at rows from its own up (the
    last block first; ``_rows_made``). A chain of loops over 100,000 rows otherwise
    streams every array from L2 or L3 at each loop: GradBench ode's RK4 step, four loops of
    which each reads the stage before it one row down, 17.5 -> 13 ms for 100 steps at
    n = 100,000, and its reverse, whose loops read the gradients of the stages one row up. The
    choice depends on no size (windows are judged by their starts and steps), so one text
    serves every size."""
    runs, run, written, ways = [], [], set(), set()
    for j, kern in enumerate(kernels):
        fits = len(kern.shape) == 1 and not kern.reductions
        if fits and run and kern.shape == kernels[run[0]].shape:
            reads = kern.reads.values()
            # a way is descending: True where every read is at rows from the loop's own up
            now = ways & {way for way in (False, True) if all(_rows_made(r, written, not way) for r in reads)}
        else:
            now = set()
        if now:
            run.append(j)
            ways = now
        else:
            runs.append((run, ways))
            run, written, ways = ([j] if fits else []), set(), {False, True}
        written |= set(kern.stores) if run else set()
    runs.append((run, ways))
    out = []
    for run in (Run(r, False not in ways) for r, ways in runs if len(r) > 1):
        last = out[-1] if out else None
        if last is not None and _leads(kernels, last, run):
            out[-1] = Run(last.loops + run.loops, True, len(last.loops))
        else:
            out.append(run)
    return out


def _leads(kernels, up, down):
    """Whether the run ``up`` can lead the run ``down`` right after it (see ``Run.lead``): one
    going up, the other down, over the same rows (``settle`` keeps the lead only where the values
    it makes for the later loops are held, read at their rows plus or minus a window's bound)."""
    if up.descending or up.lead or not down.descending or up.loops[-1] + 1 != down.loops[0]:
        return False
    return kernels[up.loops[0]].shape == kernels[down.loops[0]].shape


def rows_read(r, kern, tape):
    """(slot, whether it is read at its row plus or minus a bound, through no broadcast) for
    each array the kernel read ``r`` loads."""
    if r.kind == ReadKind.ARRAY:
        yield r.src, not any(r.pattern) and tape.shapes[r.src] == kern.shape
    elif r.kind in (ReadKind.WINDOW, ReadKind.PAD, ReadKind.SCALAR):
        yield r.src, r.kind != ReadKind.SCALAR and len(r.window) == 1 and r.window[0][2] == 1
    elif r.kind == ReadKind.CAT:
        for _, _, piece in r.pieces:
            if piece.kind != ReadKind.LITERAL:
                yield piece.src, piece.kind == ReadKind.ARRAY or piece.window[0][2] == 1


def held(kernels, tape, outside, runs):
    """slot -> its run (an index of ``runs``), for the values a run keeps in buffers of one
    block's rows and the rows beyond it its loops read: stored once, by a loop of the run, and
    read only by the run's later loops, each at its row plus or minus a window's bound (an array
    at the loop's row, a window or an unslice of step 1, a concatenation's piece). Nothing else
    reads them (``outside``: None, all), so no array of all rows is written and read back:
    GradBench ode's RK4 step keeps its first three stages so, and its reverse step the last
    three stages' gradients (gradient at n = 100,000, s = 100, best of 15 calls: 57 -> 51.5 ms;
    the forward steps 18.3 -> 17.0, the reverse 38 -> 34)."""
    if outside is None:
        return {}
    run_of = {j: k for k, run in enumerate(runs) for j in run.loops}
    home, denied = {}, set(outside)
    for j, kern in enumerate(kernels):
        for st in kern.stores:
            if st in home or j not in run_of or tape.shapes[st] != kern.shape:
                denied.add(st)  # stored twice (recomputed by a later loop), outside a run, or reshaped
            home.setdefault(st, j)
    for j, kern in enumerate(kernels):
        for r in kern.reads.values():
            for src, shifted in rows_read(r, kern, tape):
                if src in home and (not shifted or run_of.get(j) != run_of.get(home[src]) or j <= home[src]):
                    denied.add(src)
    return {st: run_of[j] for st, j in home.items() if st not in denied}


def settle(kernels, tape, outside):
    """``(runs, held)`` for ``kernels`` (``blocks`` and ``held``), a led run split into its two
    runs where a value of its lead that a later loop of it reads is not held: only a held
    value's reads say how far below the block they reach, and so how many rows the lead
    recomputes."""
    runs = blocks(kernels)
    while True:
        keep = held(kernels, tape, outside, runs)
        bad = next((k for k, run in enumerate(runs) if run.lead and not _lead_held(kernels, tape, run, keep)), None)
        if bad is None:
            return runs, keep
        run = runs[bad]
        runs[bad : bad + 1] = [Run(run.loops[: run.lead], False), Run(run.loops[run.lead :], True)]


def _lead_held(kernels, tape, run, keep):
    mine = {st for j in run.loops[: run.lead] for st in kernels[j].stores}
    return all(
        src not in mine or src in keep
        for j in run.loops[1:]
        for r in kernels[j].reads.values()
        for src, _ in rows_read(r, kernels[j], tape)
    )


def hold_lines(keep, r, run, halo, home, tape, names, rows):
    """The lines before run ``r`` (a ``Run``) allocating the buffers of the values it holds
    (``keep``: slot -> run): ``h{r}``, the farthest any of its reads of them goes from its own
    row (computed from the window bounds: ``halo``, loop -> its reads' (slot, signed distance);
    ``home``: slot -> the loop storing it), is how many rows beyond a block they hold besides the
    block's own (below it going up, above it going down), or all rows (``loc{r}`` false: nothing
    is copied between blocks) when that is more than a block. A lead loop ``j`` recomputes
    ``hd{r}_{j}`` rows below the block and ``hu{r}_{j}`` above it: as far as the later loops
    reading its values reach, each from as far beyond the block as it recomputes itself."""
    n = f"k{run.loops[0]}_n0"
    lead = run.loops[: run.lead]
    out, below, above = [], [], []
    for j in reversed(lead):
        reads = [(c, d) for c in run.loops if c > j for src, d in halo[c] if home.get(src) == j]
        down = [_plus(f"hd{r}_{c}", _minus(d)) if c in lead else _minus(d) for c, d in reads]
        up = [_plus(f"hu{r}_{c}", d) if c in lead else d for c, d in reads]
        out.append(f"hd{r}_{j} = max(0, {', '.join(down)})" if down else f"hd{r}_{j} = 0")
        out.append(f"hu{r}_{j} = max(0, {', '.join(up)})" if up else f"hu{r}_{j} = 0")
        below.append(f"hd{r}_{j}")
        above.append(f"hu{r}_{j}")
    later = [(src, d) for c in run.loops[run.lead :] for src, d in halo[c] if home.get(src) not in lead]
    most = sorted({f"abs({d.lstrip('-')})" for src, d in later if d != "0"})
    if lead:
        most.insert(0, f"max({', '.join(below)}) + max({', '.join(above)})")
    out.append(f"h{r} = max(0, {', '.join(most)})" if most else f"h{r} = 0")
    out.append(f"loc{r} = h{r} <= {rows}")
    out.append(f"hn{r} = {rows} + h{r} if loc{r} else {n}  # rows held")
    if lead:
        out.append(f"hb{r} = max({', '.join(below)})  # the rows below the block a lead's buffers start at")
    for st, k in keep.items():
        if k == r:
            out.append(f"{names[st]} = np.empty(hn{r}, {NP_TYPE[tape.dtypes[st]]})  # %{st}, a block at a time")
    return out


def _minus(d):
    """The negation of the distance expression ``d`` (a name, ``-name`` or a parenthesised difference)."""
    return d[1:] if d.startswith("-") else "0" if d == "0" else f"-{d}"


def _plus(a, d):
    return a if d == "0" else f"{a} - {d[1:]}" if d.startswith("-") else f"{a} + {d}"


def block_head(keep, r, run, kernels, rows):
    """The lines at the start of each block of run ``r``: the row its held buffers start at, the
    rows beyond the block its loops read, moved from where the block before left them, and the
    rows each lead loop recomputes (every row at the first block when its buffers hold all
    rows, none after)."""
    down, n = run.descending, f"k{run.loops[0]}_n0"
    out = [f"off{r} = {'blk0' if down else f'blk0 - h{r}'} if loc{r} else 0"]
    if run.lead:
        out.append(f"offu{r} = blk0 - hb{r} if loc{r} else 0")
        for j in run.loops[: run.lead]:
            out.append(f"k{j}_b0 = max(0, blk0 - hd{r}_{j}) if loc{r} else (0 if blk1 == {n} else blk1)")
            out.append(f"k{j}_b1 = min({n}, blk1 + hu{r}_{j}) if loc{r} else blk1")
    bufs = [f"k{j}_o{k}" for j in run.loops[run.lead :] for k, st in enumerate(kernels[j].stores) if keep.get(st) == r]
    if bufs:
        out.append(f"for blkt in range(h{r} if loc{r} else 0):  # the rows {'above' if down else 'below'} the block")
        out += [f"    {b}[{rows} + blkt] = {b}[blkt]" if down else f"    {b}[blkt] = {b}[blkt + {rows}]" for b in bufs]
    return out
