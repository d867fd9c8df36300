"""MaskedOuter: U Vᴴ sampled on a sparsity pattern, kept lazy.

The cotangent of a sparse matrix's values in graph learning and of fixed-pattern gradients:
the entries of a low-rank product, but only where a sparse matrix stores entries. Kept as the
factors plus the (shared) pattern; its values are computed by the SDDMM kernel when needed, so
nothing of size m×n ever exists.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .._backend import backend_of, conj, is_array, seal, snapshot, to_numpy
from .._base import LinearOperator
from .._errors import ShapeError
from .pattern import Pattern
from .._generics import _inner, _sample, _to_dense, conjugate
from .._pytree import _set, operator
from .._sddmm import sddmm
from .sparse import Sparse


@operator
class MaskedOuter(LinearOperator):
    """P ∘ (U Vᴴ): the entries of U Vᴴ at the positions of ``pattern``, zero elsewhere.

    Memory O((m+n)·k); the pattern is shared, not copied. Apply: SDDMM for the nnz values, then
    a sparse product, O(nnz·k) — recomputed at every application, so call :meth:`to_sparse`
    once to apply the same operator many times. Adjoint: ``MaskedOuter(V, U, Pᵀ)``, O(1) after
    the pattern's transpose is known. ``sample``, ``project`` and ``inner`` cost O(k) per entry.

    Parameters
    ----------
    U : array of shape (m, k) or (m,)
    V : array of shape (n, k) or (n,)
        numpy, cupy or jax, one backend; 1-D factors are taken as one column.
    pattern : Pattern
        Of shape (m, n).

    Raises
    ------
    TypeError
        If ``pattern`` is not a :class:`Pattern`.
    ShapeError
        If the factors' ranks differ or (m, n) is not ``pattern.shape``.

    Notes
    -----
    U and V are snapshotted (the mutation rule of ``linops._backend``); they must be arrays
    (a list fails with AttributeError, not a linops error).

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> P = lo.Pattern.from_coo([0, 1, 1], [1, 0, 2], (2, 3))
    >>> M = MaskedOuter(np.array([1.0, 2.0]), np.array([1.0, 2.0, 3.0]), P)
    >>> lo.to_dense(M)                        # u vᴴ = [[1, 2, 3], [2, 4, 6]] on P
    array([[0., 2., 0.],
           [2., 0., 6.]])
    >>> M.to_sparse().values
    array([2., 2., 6.])
    """

    U: Any
    V: Any
    pattern: Pattern
    shape: tuple[int, int] = None
    dtype: Any = None
    _leaves: ClassVar = ("U", "V")

    def __post_init__(self):
        U, V = snapshot(self.U), snapshot(self.V)
        for name, x in (("U", U), ("V", V)):
            if not is_array(x) or x.ndim not in (1, 2):
                raise ShapeError(f"MaskedOuter needs 1-D or 2-D arrays U and V, got {name} of "
                                 f"type {type(x).__name__} with shape "
                                 f"{tuple(getattr(x, 'shape', ()))}")
        if U.ndim == 1:
            U = U[:, None]
        if V.ndim == 1:
            V = V[:, None]
        if not isinstance(self.pattern, Pattern):
            raise TypeError(f"MaskedOuter needs a linops.Pattern, got {type(self.pattern).__name__}")
        if U.shape[1] != V.shape[1] or (U.shape[0], V.shape[0]) != self.pattern.shape:
            raise ShapeError(f"MaskedOuter: U.shape={tuple(U.shape)}, V.shape={tuple(V.shape)} "
                             f"do not fit pattern.shape={self.pattern.shape}")
        _set(self, U=U, V=V, shape=self.pattern.shape, dtype=np.result_type(U.dtype, V.dtype))

    def to_sparse(self):
        """The operator as a Sparse on its pattern: the nnz values by SDDMM, O(nnz·k).

        Examples
        --------
        >>> import numpy as np, linops as lo
        >>> M = MaskedOuter(np.ones(2), np.array([1.0, 2.0]), lo.Pattern.diagonal(2))
        >>> M.to_sparse()
        Sparse(shape=(2, 2), dtype=float64)
        """
        p = self.pattern
        be = backend_of(self.U, self.V)
        return Sparse(seal(sddmm(self.U, self.V, p.on(be, "rows"), p.on(be, "indices"))), p)

    def matmat(self, X):
        """SDDMM then SpMM: O(nnz·k) for the values plus O(nnz·p) for X of shape (n, p)."""
        return self.to_sparse().matmat(X)

    def adjoint(self) -> "MaskedOuter":
        """Pᵀ ∘ (V Uᴴ): the factors swap onto the transposed pattern (computed once per
        pattern); no values are computed."""
        pt, _ = self.pattern.transpose()
        return MaskedOuter(self.V, self.U, pt)


@conjugate.register
def _(A: MaskedOuter):
    return MaskedOuter(conj(A.U), conj(A.V), A.pattern)


@_to_dense.register
def _(A: MaskedOuter):
    return _to_dense(A.to_sparse())


@_sample.register
def _(A: MaskedOuter, rows, cols):
    # SDDMM at the requested positions only, masked by membership in the pattern
    be = backend_of(A.U, A.V)
    _, found = A.pattern.locate(to_numpy(rows), to_numpy(cols))
    vals = sddmm(A.U, A.V, rows, cols)
    return be.xp.where(be.index(found), vals, be.xp.zeros((), dtype=vals.dtype))


@_inner.register
def _(G: MaskedOuter, K: LinearOperator):
    return _inner(G.to_sparse(), K)
