"""PyTorch-style text for tensors: ``tensor([2., 4.], grad_fn=<MulBackward0>)``; a complex
tensor's real and imaginary parts each get their own format, as PyTorch's
(``tensor([1.5000+2.0000e+00j, -0.0000-3.2500e-05j])``)."""

import numpy as np

LINEWIDTH = 80
THRESHOLD = 1000
EDGEITEMS = 3
PRECISION = 4


def _summarize(a):
    """The entries that are shown (with '...' cut) when the tensor is large."""
    if a.size <= THRESHOLD or a.ndim == 0:
        return a.ravel()
    parts = []
    stack = [a]
    while stack:
        x = stack.pop()
        if x.ndim == 1:
            parts.append(np.concatenate([x[:EDGEITEMS], x[-EDGEITEMS:]]) if x.shape[0] > 2 * EDGEITEMS else x)
        else:
            rows = list(range(x.shape[0]))
            if x.shape[0] > 2 * EDGEITEMS:
                rows = rows[:EDGEITEMS] + rows[-EDGEITEMS:]
            stack.extend(x[r] for r in reversed(rows))
    return np.concatenate(parts) if parts else a.ravel()[:0]


class _Formatter:
    def __init__(self, values):
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci = False
        self.width = 1
        if not self.floating:
            self.width = max((len(self._plain(v)) for v in values), default=1)
            return
        finite = values[np.isfinite(values)]
        signed = finite[finite != 0]
        nonzero = np.abs(signed)
        if finite.size and np.any(finite != np.ceil(finite)):
            self.int_mode = False
        if nonzero.size:
            hi, lo = float(nonzero.max()), float(nonzero.min())
            self.sci = hi / lo > 1000.0 or hi > 1e8 or (not self.int_mode and lo < 1e-4)
        # PyTorch pads to the widest nonzero finite value; inf/nan/0 never widen a column
        self.width = max((len(self._fmt(v)) for v in signed), default=1)

    def _plain(self, v):
        if v.dtype == np.bool_:
            return "True" if v else "False"
        return str(int(v))

    def _fmt(self, v):
        if not self.floating:
            return self._plain(v)
        v = float(v)
        if not np.isfinite(v):
            return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
        if self.sci:
            return f"{v:.{PRECISION}e}"
        if self.int_mode:
            return f"{v:.0f}."
        return f"{v:.{PRECISION}f}"

    def __call__(self, v):
        return self._fmt(v).rjust(self.width)


class _ComplexFormatter:
    """PyTorch's complex entries: the real part padded by its own format, the imaginary part
    by its own with the padding stripped, joined by its sign."""

    def __init__(self, values):
        self.re, self.im = _Formatter(values.real), _Formatter(values.imag)
        self.width = self.re.width + self.im.width + 1  # ``_render`` adds the ", " after it

    def __call__(self, v):
        imag = (self.im(v.imag) + "j").lstrip()
        return self.re(v.real) + (imag if imag[0] in "+-" else "+" + imag)


def _render(a, fmt, indent):
    if a.ndim == 0:
        return fmt(a[()])
    if a.ndim == 1:
        n = a.shape[0]
        cut = a.size > 0 and n > 2 * EDGEITEMS and _render.summarize
        items = [fmt(v) for v in (list(a[:EDGEITEMS]) + list(a[-EDGEITEMS:]) if cut else a)]
        if cut:
            items = items[:EDGEITEMS] + [" ..."] + items[EDGEITEMS:]
        per_line = max(1, (LINEWIDTH - indent) // (fmt.width + 2))
        lines = [", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    n = a.shape[0]
    rows = list(range(n))
    cut = n > 2 * EDGEITEMS and _render.summarize
    if cut:
        rows = rows[:EDGEITEMS] + [None] + rows[-EDGEITEMS:]
    sep = "," + "\n" * (a.ndim - 1) + " " * (indent + 1)
    body = [("..." if r is None else _render(a[r], fmt, indent + 1)) for r in rows]
    return "[" + sep.join(body) + "]"


_render.summarize = False


def format_tensor(a, suffixes):
    """``a``: the NumPy value; ``suffixes``: extra ``key=value`` strings (dtype, grad_fn, ...)."""
    prefix = "tensor("
    if a.size == 0:
        body = "[]"
        if a.shape != (0,):
            suffixes = [f"size={tuple(a.shape)}"] + suffixes
    else:
        _render.summarize = a.size > THRESHOLD
        values = _summarize(a)
        fmt = _ComplexFormatter(values) if a.dtype.kind == "c" else _Formatter(values)
        body = _render(a, fmt, len(prefix))
    # PyTorch's: a suffix that would pass the line width starts a new line, indented
    text = prefix + body
    out, last = [text], len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last + len(suffix) + 2 > LINEWIDTH:
            out.append(",\n" + " " * len(prefix) + suffix)
            last = len(prefix) + len(suffix)
        else:
            out.append(", " + suffix)
            last += len(suffix) + 2
    return "".join(out) + ")"
