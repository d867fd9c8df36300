"""Sparse: CSR values on an immutable :class:`Pattern` (values may be numpy, cupy or jax)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ._backend import backend_of, to_numpy
from ._base import LinearOperator, _set, conj, operator, seal, snapshot
from ._errors import ShapeError, UnsupportedOperandError
from ._pattern import Pattern
from ._queries import _inner, _sample, _to_dense, conjugate, sample_pattern


@operator
class Sparse(LinearOperator):
    """CSR matrix: ``values`` (nnz,) on ``pattern``. Apply: O(nnz·k) (scipy / cuSPARSE SpMM /
    jax segment_sum). Adjoint: conj(values) permuted onto the transposed pattern, O(nnz).

    The values array is the differentiable leaf (a jax pytree leaf); the pattern is static.
    ``values`` is snapshotted (see the mutation rule in ``linops._backend``).

    >>> import scipy.sparse as sp
    >>> S = Sparse.from_scipy(sp.eye(3, format="csr"))
    >>> S.pattern.nnz, S.shape
    (3, (3, 3))
    """

    values: Any
    pattern: Pattern
    shape: tuple[int, int] = None
    dtype: Any = None
    _leaves: ClassVar = ("values",)

    def __post_init__(self):
        if not isinstance(self.pattern, Pattern):
            raise TypeError(f"Sparse needs a linops.Pattern, got {type(self.pattern).__name__}")
        v = snapshot(self.values)
        if not hasattr(v, "shape") or tuple(v.shape) != (self.pattern.nnz,):
            raise ShapeError(f"Sparse values must have shape (nnz,)=({self.pattern.nnz},), got "
                             f"values.shape={tuple(getattr(v, 'shape', ()))}")
        _set(self, values=v, shape=self.pattern.shape, dtype=np.dtype(v.dtype))

    @classmethod
    def from_scipy(cls, S, dtype=None) -> "Sparse":
        """From any scipy sparse matrix/array (any format); duplicates are summed, indices sorted.
        The data is copied (the mutation rule)."""
        import scipy.sparse as sp

        if not sp.issparse(S):
            raise UnsupportedOperandError(f"Sparse.from_scipy needs a scipy sparse matrix or "
                                          f"array, got {type(S).__name__}")
        S = sp.csr_array(S, dtype=dtype)
        if not S.has_canonical_format:
            S = S.copy()
            S.sum_duplicates()
        return cls(seal(np.array(S.data)), Pattern(S.indptr, S.indices, S.shape))

    def to_scipy(self):
        """scipy ``csr_array`` (a copy; a host copy for cupy/jax values)."""
        import scipy.sparse as sp

        return sp.csr_array((np.array(to_numpy(self.values)), self.pattern.indices.copy(),
                             self.pattern.indptr.copy()), shape=self.shape)

    def matmat(self, X):
        return backend_of(self.values, X).spmm(self.values, self.pattern, X)

    def adjoint(self) -> "Sparse":
        pt, _ = self.pattern.transpose()
        be = backend_of(self.values)
        return Sparse(be.seal(conj(self.values)[self.pattern.on(be, "perm_T")]), pt)


@conjugate.register
def _(A: Sparse):
    return Sparse(conj(A.values), A.pattern)


@_to_dense.register
def _(A: Sparse):
    be = backend_of(A.values)
    p = A.pattern
    return be.scatter(A.shape, p.on(be, "rows"), p.on(be, "indices"), A.values, A.dtype)


@_sample.register
def _(A: Sparse, rows, cols):
    be = backend_of(A.values)
    xp = be.xp
    slot, found = A.pattern.locate(to_numpy(rows), to_numpy(cols))
    vals = A.values[be.index(slot)] if A.pattern.nnz else xp.zeros(slot.shape, dtype=A.dtype)
    return xp.where(be.index(found), vals, xp.zeros((), dtype=A.dtype))


@_inner.register
def _(G: Sparse, K: LinearOperator):
    xp = backend_of(G.values).xp
    if isinstance(K, Sparse) and K.pattern == G.pattern:
        kv = K.values
    else:  # K's values at G's stored positions (zero where K has none)
        kv = sample_pattern(K, G.pattern)
    return xp.sum(xp.conj(G.values) * kv)
