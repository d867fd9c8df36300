"""MaskedOuter: U Vᴴ sampled on a sparsity pattern, kept lazy."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ._backend import namespace, to_numpy
from ._base import LinearOperator, _set, operator
from ._errors import ShapeError
from ._pattern import Pattern
from ._queries import _inner, _sample, _to_dense, conjugate
from ._sddmm import sddmm
from ._sparse import _ix


@operator
class MaskedOuter(LinearOperator):
    """P ∘ (U Vᴴ): the entries of U Vᴴ on ``pattern``, zero elsewhere.

    Memory O((m+n)·k) (the pattern is shared). Apply: SDDMM then SpMM, O(nnz·k).
    Adjoint: MaskedOuter(V, U, Pᵀ). ``to_sparse()`` materialises the nnz values.
    """

    U: Any
    V: Any
    pattern: Pattern
    shape: tuple[int, int] = None
    dtype: Any = None
    _leaves: ClassVar = ("U", "V")

    def __post_init__(self):
        U, V = self.U, self.V
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
        from ._sparse import Sparse

        p = self.pattern
        xp = namespace(self.U, self.V)
        return Sparse(sddmm(self.U, self.V, p.on(xp, "rows"), p.on(xp, "indices")), p)

    def matmat(self, X):
        return self.to_sparse().matmat(X)

    def adjoint(self) -> "MaskedOuter":
        pt, _ = self.pattern.transpose()
        return MaskedOuter(self.V, self.U, pt)


@conjugate.register
def _(A: MaskedOuter):
    xp = namespace(A.U, A.V)
    return MaskedOuter(xp.conj(A.U), xp.conj(A.V), A.pattern)


@_to_dense.register
def _(A: MaskedOuter):
    return _to_dense(A.to_sparse())


@_sample.register
def _(A: MaskedOuter, rows, cols):
    xp = namespace(A.U, A.V)
    _, found = A.pattern.locate(to_numpy(rows), to_numpy(cols))
    vals = sddmm(A.U, A.V, rows, cols)
    return xp.where(_ix(found, xp), vals, xp.zeros((), dtype=vals.dtype))


@_inner.register
def _(G: MaskedOuter, K: LinearOperator):
    return _inner(G.to_sparse(), K)
