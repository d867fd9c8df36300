"""MaskedOuter: U Vᴴ sampled on a sparsity pattern, kept lazy."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ._backend import backend_of, to_numpy
from ._base import LinearOperator, _set, conj, operator, seal, snapshot
from ._errors import ShapeError
from ._pattern import Pattern
from ._queries import _inner, _sample, _to_dense, conjugate
from ._sddmm import sddmm


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
        U, V = snapshot(self.U), snapshot(self.V)
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
        be = backend_of(self.U, self.V)
        return Sparse(seal(sddmm(self.U, self.V, p.on(be, "rows"), p.on(be, "indices"))), p)

    def matmat(self, X):
        return self.to_sparse().matmat(X)

    def adjoint(self) -> "MaskedOuter":
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
    be = backend_of(A.U, A.V)
    _, found = A.pattern.locate(to_numpy(rows), to_numpy(cols))
    vals = sddmm(A.U, A.V, rows, cols)
    return be.xp.where(be.index(found), vals, be.xp.zeros((), dtype=vals.dtype))


@_inner.register
def _(G: MaskedOuter, K: LinearOperator):
    return _inner(G.to_sparse(), K)
