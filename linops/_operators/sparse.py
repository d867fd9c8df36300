"""Sparse: CSR values on an immutable :class:`Pattern` (values may be numpy, cupy or jax).

The structure (``Pattern``) and the numbers (``values``) are separate objects: the pattern is
host-side, hashable and shared between operators, transposes, projections and gradients; the
values are one 1-D array in the backend of choice, and the only part jax differentiates. This
module also holds Sparse's rules for the queries (``to_dense`` by scatter, ``sample`` by binary
search on the pattern, ``inner`` on the pattern).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from .._backend import backend_of, conj, dtype_of, namespace, seal, snapshot, to_numpy
from .._base import LinearOperator
from .._errors import ShapeError, UnsupportedOperandError
from .pattern import Pattern
from .._generics import (_inner, _inner_by_k, _sample, _to_dense, abs_apply, adjoint_view,
                        conjugate, csr_parts, sample_pattern, structure, structure_key,
                        with_dtype)
from .._pytree import _set, operator
from .matrixfree import MatrixFree


@operator
class Sparse(LinearOperator):
    """A CSR sparse matrix: ``values`` (nnz,) stored on the positions of ``pattern``.

    Memory O(nnz) values plus the shared pattern. Apply: O(nnz·k) for X of shape (n, k) (scipy
    on the host, cuSPARSE SpMM on cupy, a segment sum on jax). Adjoint: a Sparse on the
    transposed pattern holding conj(values) permuted, O(nnz); the transposed pattern and the
    permutation are computed once per pattern and kept.

    Parameters
    ----------
    values : array of shape (nnz,)
        numpy, cupy or jax, in the pattern's CSR order (row by row, columns increasing); or a
        torch tensor, which this operator only carries (``adjoints.torch`` computes with it).
    pattern : Pattern
        The structure; it decides the shape. Under jax it is static aux data and only
        ``values`` is a pytree leaf, so a gradient with respect to a Sparse is values on the
        same pattern.

    Raises
    ------
    TypeError
        If ``pattern`` is not a :class:`Pattern`.
    ShapeError
        If ``values`` does not have shape (pattern.nnz,).

    See Also
    --------
    Sparse.from_scipy : from any scipy sparse matrix or array.
    aslinop : also takes cupyx and jax.experimental.sparse matrices.

    Notes
    -----
    ``values`` is snapshotted (the mutation rule of ``linops._backend``): editing the array you
    passed does not change the operator. Adding two Sparse operators on one pattern adds their
    values (a Sparse again); on different patterns it gives a ``Sum``.

    Examples
    --------
    >>> import numpy as np
    >>> P = Pattern.from_coo([0, 0, 1], [0, 2, 1], (2, 3))
    >>> S = Sparse(np.array([1.0, 2.0, 3.0]), P)
    >>> S @ np.ones(3)
    array([3., 3.])
    >>> S.H.values, S.H.pattern.indices.tolist()       # the transpose, column by column
    (array([1., 3., 2.]), [0, 1, 0])
    >>> S.to_scipy().toarray()
    array([[1., 0., 2.],
           [0., 3., 0.]])
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
        _set(self, values=v, shape=self.pattern.shape, dtype=dtype_of(v))

    @classmethod
    def from_scipy(cls, S, dtype=None) -> "Sparse":
        """A Sparse from any scipy sparse matrix or array, of any format.

        The result is canonical CSR: duplicate entries are summed and column indices sorted.
        Explicitly stored zeros stay in the pattern: they are part of the structure (a
        fixed-pattern gradient has a value there). Cost: O(nnz), plus a sort if S is not
        canonical. The data is copied (the mutation rule).

        Parameters
        ----------
        S : scipy.sparse matrix or array
        dtype : dtype, optional
            Convert the values (default: S's dtype).

        Returns
        -------
        Sparse
            numpy values on the host.

        Raises
        ------
        UnsupportedOperandError
            If S is not a scipy sparse matrix or array.

        Examples
        --------
        >>> import scipy.sparse as sp
        >>> S = Sparse.from_scipy(sp.coo_array(([1.0, 2.0, 5.0], ([0, 0, 1], [1, 1, 0]))))
        >>> S.values, S.pattern.nnz                     # the two (0, 1) entries were summed
        (array([3., 5.]), 2)
        """
        if not sp.issparse(S):
            raise UnsupportedOperandError(f"Sparse.from_scipy needs a scipy sparse matrix or "
                                          f"array, got {type(S).__name__}")
        S = sp.csr_array(S, dtype=dtype)
        if not S.has_canonical_format:
            S = S.copy()
            S.sum_duplicates()
        return cls(seal(np.array(S.data)), Pattern(S.indptr, S.indices, S.shape))

    def to_scipy(self):
        """The matrix as a scipy ``csr_array``, canonical, of the same dtype.

        Always a copy that you may edit: cupy and jax values are copied to the host (one
        device-to-host transfer), the index arrays are copied out of the read-only pattern.
        Cost O(nnz).

        Examples
        --------
        >>> import numpy as np
        >>> Sparse(np.array([1.0, 2.0]), Pattern.diagonal(2)).to_scipy().toarray()
        array([[1., 0.],
               [0., 2.]])
        """
        return sp.csr_array((np.array(to_numpy(self.values)), self.pattern.indices.copy(),
                             self.pattern.indptr.copy()), shape=self.shape)

    def matmat(self, X):
        """CSR times X (n, k) in the backend of the values and X: O(nnz·k)."""
        return backend_of(self.values, X).spmm(self.values, self.pattern, X)

    def adjoint(self) -> "Sparse":
        """Aᴴ on the transposed pattern: conj(values) gathered into Pᵀ's order, O(nnz)."""
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
    # binary search on the host pattern, O(len·log nnz); positions not stored read as zero
    slot, found = A.pattern.locate(to_numpy(rows), to_numpy(cols))
    vals = A.values[be.index(slot)] if A.pattern.nnz else xp.zeros(slot.shape, dtype=A.dtype)
    return xp.where(be.index(found), vals, xp.zeros((), dtype=A.dtype))


@sample_pattern.register
def _(G: Sparse, pattern):
    if G.pattern == pattern:
        return G.values  # its own values, no copy
    return _sample(G, pattern.rows, pattern.indices)


@_inner.register
def _(G: Sparse, K: LinearOperator):
    xp = backend_of(G.values).xp
    if isinstance(K, Sparse) and K.pattern == G.pattern:
        kv = K.values
    else:  # K's values at G's stored positions (zero where K has none)
        kv = sample_pattern(K, G.pattern)
    return xp.sum(xp.conj(G.values) * kv)


@_inner_by_k.register
def _(K: Sparse, G: LinearOperator):
    # ⟨G, K⟩ for a G without a rule: G's values at K's stored positions
    g = sample_pattern(G, K.pattern)
    xp = namespace(g, K.values)
    return xp.sum(xp.conj(g) * K.values)


@structure.register
def _(A: Sparse):
    return "sparse"


@csr_parts.register
def _(A: Sparse):
    return A.values, A.pattern


@abs_apply.register
def _(A: Sparse, X, adjoint: bool = False):
    be = backend_of(A.values)
    v, ax = be.xp.abs(A.values), be.xp.abs(X)
    return be.spmm_adjoint(v, A.pattern, ax) if adjoint else be.spmm(v, A.pattern, ax)


@adjoint_view.register
def _(A: Sparse):
    """Aᴴ through the backend's native transposed view of the CSR arrays: no sorted transposed
    pattern (a sort and 16 bytes per stored entry), O(nnz) per product."""
    be = backend_of(A.values)
    return MatrixFree((A.shape[1], A.shape[0]), A.dtype,
                      lambda X: be.spmm_adjoint(A.values, A.pattern, X), lambda X: A @ X)


@with_dtype.register
def _(A: Sparse, dtype):
    return Sparse(A.values.astype(dtype), A.pattern)


@structure_key.register
def _(A: Sparse):
    return ("sparse", A.pattern)
