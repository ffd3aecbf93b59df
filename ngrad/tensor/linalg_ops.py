"""Matrix products and linear algebra methods of ``Tensor`` (``mm``, ``bmm``, ``dot``, ``outer``,
``addmm``, ``inverse``, ``det``, ``logdet``, ``slogdet``, ``cholesky``, ``cholesky_solve``,
``matrix_exp``, ``matrix_power``, ``pinverse``, ``qr``, ``svd``, ``cross``, ``trace``, ``diag``,
``tril``/``triu``).

Contract: a mixin of ``Tensor``; every method records through ``record`` or the free functions
(the decompositions through ``ngrad.linalg``). ``FUNCTIONS`` names the methods ``ngrad`` also
exports as functions (``ngrad.name(input, ...)``); ``__all__`` the free functions it exports as
they are (none).
"""

from collections import namedtuple

import numpy as np

from ..engine.ir import dtypes as D
from ..engine.ir.graph import source
from .functions import cat, matmul, stack, where
from .record import broadcast_shapes, named, normalize_dim, to_tensor, value_on, wrap

__all__: list[str] = []
FUNCTIONS = "logdet slogdet cholesky cholesky_solve matrix_exp matrix_power pinverse qr svd".split()
_SVD = namedtuple("svd", ["U", "S", "V"])
_QR = namedtuple("qr", ["Q", "R"])
_SLOGDET = namedtuple("slogdet", ["sign", "logabsdet"])


class LinalgOps:
    """Matrix products and linear algebra methods, a mixin of ``Tensor``."""

    __slots__ = ()

    # linear algebra ---------------------------------------------------------------------------------------
    def matmul(self, other):
        return matmul(self, other)

    def mm(self, other):
        if self.ndim != 2 or to_tensor(other).ndim != 2:
            raise RuntimeError("mm: both arguments must be 2-D")
        return matmul(self, other)

    def bmm(self, other):
        if self.ndim != 3 or to_tensor(other).ndim != 3:
            raise RuntimeError("bmm: both arguments must be 3-D")
        return matmul(self, other)

    def mv(self, vec):
        return matmul(self, vec)

    def dot(self, other):
        if self.ndim != 1 or to_tensor(other).ndim != 1:
            raise RuntimeError(f"1D tensors expected, but got {self.ndim}D and {to_tensor(other).ndim}D tensors")
        return matmul(self, other)

    def outer(self, other):
        return self.reshape(-1, 1) * to_tensor(other).reshape(1, -1)

    def tril(self, diagonal=0):
        """The lower triangle of the matrices in the last two dimensions (on and below the
        ``diagonal``-th diagonal), zeros above."""
        return self._triangle(diagonal, np.tri, "tril")

    def triu(self, diagonal=0):
        """The upper triangle (on and above the ``diagonal``-th diagonal), zeros below."""
        return self._triangle(diagonal, lambda n, m, k, dtype: ~np.tri(n, m, k - 1, dtype=bool), "triu")

    def _triangle(self, diagonal, tri, name):
        if self.ndim < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        n, m = self.shape[-2], self.shape[-1]
        keep = wrap(source(value_on(tri(n, m, diagonal, dtype=bool), self._node.device), D.bool_))
        return where(keep, self, 0)

    def cross(self, other, dim=None):
        """The cross product of 3-vectors along ``dim`` (by default the first dimension of size 3)."""
        a, b = self, to_tensor(other)
        shape = broadcast_shapes(tuple(a.shape), tuple(b.shape))
        if dim is None:
            dim = next((d for d, s in enumerate(shape) if s == 3), None)
            if dim is None:
                raise RuntimeError("no dimension of size 3 in input")
        d = normalize_dim(dim, len(shape))
        if shape[d] != 3:
            sizes = [t.shape[d - len(shape) + t.ndim] if d - len(shape) + t.ndim >= 0 else 1 for t in (a, b)]
            raise RuntimeError(
                f"linalg.cross: inputs dimension {dim} must have length 3. Got {sizes[0]} and {sizes[1]}"
            )
        a, b = a.expand(*shape), b.expand(*shape)
        a1, a2, a3 = a.unbind(d)
        b1, b2, b3 = b.unbind(d)
        return stack([a2 * b3 - a3 * b2, a3 * b1 - a1 * b3, a1 * b2 - a2 * b1], d)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        """``beta * self + alpha * (mat1 @ mat2)``."""
        prod = to_tensor(mat1).mm(to_tensor(mat2))
        prod = prod if alpha == 1 else prod * alpha
        return prod + (self if beta == 1 else self * beta) if beta != 0 else prod

    def inverse(self):
        """``ngrad.linalg.inv(self)``."""
        from ..linalg import inv

        return inv(self)

    def det(self):
        """``ngrad.linalg.det(self)``."""
        from ..linalg import det

        return det(self)

    def logdet(self):
        """The log of the determinant of each square matrix: nan where it is negative, -inf
        where it is zero (``ngrad.linalg.slogdet``'s log|det| with its sign)."""
        from ..linalg import logdet

        return logdet(self)

    def slogdet(self):
        """``(sign, logabsdet)`` of each square matrix (``ngrad.linalg.slogdet``)."""
        from ..linalg import slogdet

        return _SLOGDET(*slogdet(self))

    def cholesky(self, upper=False):
        """``ngrad.linalg.cholesky(self, upper=upper)``."""
        from ..linalg import cholesky

        return cholesky(self, upper=upper)

    def cholesky_solve(self, input2, upper=False):
        """``X`` with ``A @ X = self`` for ``A = L @ L.mT`` given its factor ``input2`` (upper:
        ``L.mT @ L``)."""
        from ..linalg import cholesky_solve

        return cholesky_solve(self, input2, upper)

    def matrix_exp(self):
        """``ngrad.linalg.matrix_exp(self)``."""
        from ..linalg import matrix_exp

        return matrix_exp(self)

    def matrix_power(self, n):
        """``ngrad.linalg.matrix_power(self, n)``."""
        from ..linalg import matrix_power

        return matrix_power(self, n)

    def pinverse(self, rcond=1e-15):
        """The pseudo-inverse, singular values at or below ``rcond`` times the largest read as
        zero (``ngrad.linalg.pinv(self, rtol=rcond)``)."""
        from ..linalg import pinv

        return pinv(self, rtol=rcond)

    def qr(self, some=True):
        """``(Q, R)``: ``ngrad.linalg.qr`` in mode 'reduced' (``some=True``) or 'complete'."""
        from ..linalg import qr

        return _QR(*qr(self, "reduced" if some else "complete"))

    def svd(self, some=True, compute_uv=True):
        """``(U, S, V)`` (V, not Vh: the old ``torch.svd``'s convention), reduced with
        ``some=True``; with ``compute_uv=False``, U and V are zero matrices (m x m and n x n) and
        S alone carries a gradient."""
        from ..factories import zeros
        from ..linalg import svd

        U, S, Vh = svd(self, full_matrices=compute_uv and not some)
        if compute_uv:
            return _SVD(U, S, Vh.mT)
        pad, (*batch, m, n) = dict(dtype=self.dtype, device=self.device), self.shape
        return _SVD(zeros(*batch, m, m, **pad), S, zeros(*batch, n, n, **pad))

    def trace(self):
        """The sum of the main diagonal of a matrix."""
        if self.ndim != 2:
            raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {self.ndim}")
        return named(self.diagonal().sum(), "TraceBackward0")

    def diag(self, diagonal=0):
        """A matrix's ``diagonal`` (as ``diagonal(diagonal)``), or the square matrix holding a
        vector on its ``diagonal`` and zeros elsewhere.

        ```python
        >>> import ngrad
        >>> ngrad.tensor([1.0, 2.0]).diag(1)
        tensor([[0., 1., 0.],
                [0., 0., 2.],
                [0., 0., 0.]])

        ```
        """
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {self.ndim}D")
        from ..factories import eye, zeros

        n, k = self.shape[0], abs(diagonal)
        square = where(eye(n, dtype=D.bool_, device=self.device), self.reshape(n, 1), 0)
        if k == 0:
            return square
        pad = dict(dtype=self.dtype, device=self.device)
        if diagonal > 0:  # right of the main diagonal: zero columns before, zero rows after
            return cat([cat([zeros(n, k, **pad), square], 1), zeros(k, n + k, **pad)], 0)
        return cat([cat([zeros(k, n, **pad), square], 0), zeros(n + k, k, **pad)], 1)
