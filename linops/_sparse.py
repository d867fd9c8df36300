"""Sparse: CSR values on an immutable :class:`Pattern` (values may be numpy, cupy or jax)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ._backend import backend_name, namespace, spmm, to_numpy
from ._base import LinearOperator, _set, operator
from ._errors import ShapeError, UnsupportedOperandError
from ._pattern import Pattern
from ._queries import _inner, _sample, _to_dense, conjugate, sample_pattern


@operator
class Sparse(LinearOperator):
    """CSR matrix: ``values`` (nnz,) on ``pattern``. Apply: O(nnz·k) (scipy / cuSPARSE SpMM /
    jax segment_sum). Adjoint: conj(values) permuted onto the transposed pattern, O(nnz).

    The values array is the differentiable leaf (a jax pytree leaf); the pattern is static.

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
        v = self.values
        if not hasattr(v, "shape") or tuple(v.shape) != (self.pattern.nnz,):
            raise ShapeError(f"Sparse values must have shape (nnz,)=({self.pattern.nnz},), got "
                             f"values.shape={tuple(getattr(v, 'shape', ()))}")
        _set(self, shape=self.pattern.shape, dtype=np.dtype(v.dtype))

    @classmethod
    def from_scipy(cls, S, dtype=None) -> "Sparse":
        """From any scipy sparse matrix/array (any format); duplicates are summed, indices sorted."""
        import scipy.sparse as sp

        if not sp.issparse(S):
            raise UnsupportedOperandError(f"Sparse.from_scipy needs a scipy sparse matrix or "
                                          f"array, got {type(S).__name__}")
        S = sp.csr_array(S, dtype=dtype)
        if not S.has_canonical_format:
            S = S.copy()
            S.sum_duplicates()
        return cls(np.array(S.data), Pattern(S.indptr, S.indices, S.shape))

    def to_scipy(self):
        """scipy ``csr_array`` (host copy for cupy/jax values)."""
        import scipy.sparse as sp

        return sp.csr_array((to_numpy(self.values), self.pattern.indices.copy(),
                             self.pattern.indptr.copy()), shape=self.shape)

    def matmat(self, X):
        return spmm(self.values, self.pattern, X)

    def adjoint(self) -> "Sparse":
        pt, _ = self.pattern.transpose()
        xp = namespace(self.values)
        return Sparse(xp.conj(self.values)[self.pattern.on(xp, "perm_T")], pt)


def _ix(ix: np.ndarray, xp):
    """Ad-hoc index arrays (not the pattern's own) move to the device for cupy (one copy)."""
    return xp.asarray(ix) if backend_name(xp) == "cupy" else ix


@conjugate.register
def _(A: Sparse):
    return Sparse(namespace(A.values).conj(A.values), A.pattern)


@_to_dense.register
def _(A: Sparse):
    xp = namespace(A.values)
    p = A.pattern
    out = xp.zeros(A.shape, dtype=A.dtype)
    if backend_name(xp) == "jax":
        return out.at[p.rows, p.indices].set(A.values)
    out[p.on(xp, "rows"), p.on(xp, "indices")] = A.values
    return out


@_sample.register
def _(A: Sparse, rows, cols):
    xp = namespace(A.values)
    slot, found = A.pattern.locate(to_numpy(rows), to_numpy(cols))
    vals = A.values[_ix(slot, xp)] if A.pattern.nnz else xp.zeros(slot.shape, dtype=A.dtype)
    return xp.where(_ix(found, xp), vals, xp.zeros((), dtype=A.dtype))


@_inner.register
def _(G: Sparse, K: LinearOperator):
    xp = namespace(G.values)
    if isinstance(K, Sparse):
        if K.pattern == G.pattern:
            kv = K.values
        else:  # intersection: K's values at G's stored positions (zero where K has none)
            kv = sample_pattern(K, G.pattern)
        return xp.sum(xp.conj(G.values) * kv)
    k = sample_pattern(K, G.pattern)
    return xp.sum(xp.conj(G.values) * k)
