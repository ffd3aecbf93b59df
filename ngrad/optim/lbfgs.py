"""L-BFGS with an optional strong-Wolfe line search, as ``torch.optim.LBFGS``.

The search direction comes from the two-loop recursion over the last ``history_size``
curvature pairs; the line search brackets a step and zooms in with cubic interpolation
(Nocedal & Wright, Algorithms 3.5 and 3.6). The bookkeeping is on flat NumPy vectors in the
parameters' dtype; every function evaluation is the user's closure, which runs ngrad programs.
"""

import math

import numpy as np

from .. import grad_mode as _grad_mode
from ..engine.ir import dtypes as D
from ..engine.ir.graph import source
from ..tensor.inplace import inplace_update
from ..tensor.record import wrap
from .optimizer import Optimizer

__all__ = ["LBFGS"]


def _cubic_min(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimizer of the cubic through two points with slopes, clamped to ``bounds``."""
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    disc = d1 * d1 - g1 * g2
    if disc < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(disc)
    if x1 <= x2:
        x = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        x = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(x, lo), hi)


def _strong_wolfe(evaluate, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """A step ``t`` along ``d`` meeting the strong Wolfe conditions: (loss, grad, t, evaluations)."""
    d_norm = np.abs(d).max()
    f_new, g_new = evaluate(t)
    evals, gtd_new = 1, float(g_new @ d)
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done, it = False, 0
    while it < max_ls:  # bracketing phase
        if f_new > f + c1 * t * gtd or (it > 1 and f_new >= f_prev):
            bracket, bf, bg, bgtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bf, bg, bgtd = [t], [f_new], [g_new], [gtd_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bf, bg, bgtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new]
            break
        lo, hi = t + 0.01 * (t - t_prev), t * 10
        t_prev, t = t, _cubic_min(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(lo, hi))
        f_prev, g_prev, gtd_prev = f_new, g_new, gtd_new
        f_new, g_new = evaluate(t)
        evals, gtd_new, it = evals + 1, float(g_new @ d), it + 1
    if it == max_ls:
        bracket, bf, bg, bgtd = [0.0, t], [f, f_new], [g, g_new], [gtd, gtd_new]

    stuck = False
    low, high = (0, 1) if bf[0] <= bf[-1] else (1, 0)
    while not done and it < max_ls:  # zoom phase
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_min(bracket[0], bf[0], bgtd[0], bracket[1], bf[1], bgtd[1])
        top, bottom = max(bracket), min(bracket)
        eps = 0.1 * (top - bottom)
        if min(top - t, t - bottom) < eps:  # too close to an end: move away unless progress was made
            if stuck or t >= top or t <= bottom:
                t = top - eps if abs(t - top) < abs(t - bottom) else bottom + eps
                stuck = False
            else:
                stuck = True
        else:
            stuck = False
        f_new, g_new = evaluate(t)
        evals, gtd_new, it = evals + 1, float(g_new @ d), it + 1
        if f_new > f + c1 * t * gtd or f_new >= bf[low]:
            bracket[high], bf[high], bg[high], bgtd[high] = t, f_new, g_new, gtd_new
            low, high = (0, 1) if bf[0] <= bf[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bf[high], bg[high], bgtd[high] = bracket[low], bf[low], bg[low], bgtd[low]
            bracket[low], bf[low], bg[low], bgtd[low] = t, f_new, g_new, gtd_new
    return bf[low], bg[low], bracket[low], evals


class LBFGS(Optimizer):
    """``torch.optim.LBFGS``: each ``step(closure)`` runs up to ``max_iter`` L-BFGS iterations;
    ``closure`` clears the gradients, computes the loss, calls ``backward()`` and returns the loss.
    ``line_search_fn='strong_wolfe'`` picks steps by a strong-Wolfe line search; without it the
    step is ``lr`` (the first one scaled by ``1 / |grad|_1``).

    ```python
    >>> import ngrad
    >>> x = ngrad.tensor([-1.2, 1.0], dtype=ngrad.float64, requires_grad=True)
    >>> opt = ngrad.optim.LBFGS([x], line_search_fn="strong_wolfe")
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = 100 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2
    ...     loss.backward()
    ...     return loss
    >>> for _ in range(10):
    ...     _ = opt.step(closure)
    >>> [round(v, 4) for v in x.tolist()]
    [1.0, 1.0]

    ```
    """

    def __init__(
        self,
        params,
        lr=1,
        max_iter=20,
        max_eval=None,
        tolerance_grad=1e-7,
        tolerance_change=1e-9,
        history_size=100,
        line_search_fn=None,
    ):
        if lr <= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        if line_search_fn not in (None, "strong_wolfe"):
            raise RuntimeError("only 'strong_wolfe' is supported")
        super().__init__(
            params,
            dict(
                lr=lr,
                max_iter=max_iter,
                max_eval=max_eval,
                tolerance_grad=tolerance_grad,
                tolerance_change=tolerance_change,
                history_size=history_size,
                line_search_fn=line_search_fn,
            ),
        )
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _flat_grad(self):
        return np.concatenate(
            [
                np.zeros(p.numel(), p.dtype.np) if p.grad is None else p.grad.detach().numpy().reshape(-1)
                for p in self._params
            ]
        )

    def _flat_params(self):
        return np.concatenate([p.detach().numpy().reshape(-1) for p in self._params])

    def _set_params(self, flat):
        k = 0
        with _grad_mode.no_grad():
            for p in self._params:
                n = p.numel()
                value = flat[k : k + n].reshape(p.shape).astype(p.dtype.np, order="C")  # keeps 0-d 0-d
                inplace_update(p, wrap(source(value, D.from_numpy_dtype(value.dtype))))
                k += n

    def step(self, closure):
        """Run up to ``max_iter`` iterations; returns the loss of the first closure call."""
        if closure is None:
            raise RuntimeError("LBFGS requires a closure that reevaluates the model and returns the loss")
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change, history = group["tolerance_grad"], group["tolerance_change"], group["history_size"]

        def evaluate():
            with _grad_mode.enable_grad():
                loss = closure()
            return float(loss), self._flat_grad(), loss

        state = self.state.setdefault(self._params[0], {"func_evals": 0, "n_iter": 0})
        loss, g, orig_loss = evaluate()
        evals = 1
        state["func_evals"] += 1
        if np.abs(g).max() <= tol_grad:
            return orig_loss
        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs", []), state.get("old_stps", []), state.get("ro", [])
        h_diag, prev_g, prev_loss = state.get("H_diag", 1.0), state.get("prev_flat_grad"), state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d, old_dirs, old_stps, ro, h_diag = -g, [], [], [], 1.0
            else:
                y, s = g - prev_g, d * t
                ys = float(y @ s)
                if ys > 1e-10:  # keep the pair only when the curvature condition holds
                    if len(old_dirs) == history:
                        old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
                    old_dirs.append(y), old_stps.append(s), ro.append(1.0 / ys)
                    h_diag = ys / float(y @ y)
                alpha = [0.0] * len(old_dirs)
                q = -g
                for i in range(len(old_dirs) - 1, -1, -1):
                    alpha[i] = float(old_stps[i] @ q) * ro[i]
                    q = q - alpha[i] * old_dirs[i]
                d = r = q * h_diag
                for i in range(len(old_dirs)):
                    beta = float(old_dirs[i] @ r) * ro[i]
                    r = r + (alpha[i] - beta) * old_stps[i]
                d = r
            prev_g, prev_loss = g.copy(), loss
            t = min(1.0, 1.0 / np.abs(g).sum()) * lr if state["n_iter"] == 1 else lr
            gtd = float(g @ d)
            if gtd > -tol_change:  # not a descent direction
                break
            ls_evals = 0
            if group["line_search_fn"] == "strong_wolfe":
                x0 = self._flat_params()

                def along(step):
                    self._set_params(x0 + step * d)
                    f_, g_, _ = evaluate()
                    return f_, g_

                # the search may spend what is left of this step's evaluation budget
                loss, g, t, ls_evals = _strong_wolfe(
                    along, t, d, loss, g, gtd, tolerance_change=tol_change, max_ls=max_eval - evals
                )
                self._set_params(x0 + t * d)
            else:
                self._set_params(self._flat_params() + t * d)
                if n_iter != max_iter:
                    loss, g, _ = evaluate()
                    ls_evals = 1
            evals += ls_evals
            state["func_evals"] += ls_evals
            if n_iter == max_iter or evals >= max_eval or np.abs(g).max() <= tol_grad:
                break
            if np.abs(d * t).max() <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        state.update(
            d=d,
            t=t,
            old_dirs=old_dirs,
            old_stps=old_stps,
            ro=ro,
            H_diag=h_diag,
            prev_flat_grad=prev_g,
            prev_loss=prev_loss,
        )
        return orig_loss
