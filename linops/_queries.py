"""Open-ended queries as ``functools.singledispatch`` functions.

Generic defaults live here; each operator module registers its own faster rules beside the
operator. The core query is :func:`sample` (entries at given (row, col) positions); ``diagonal``,
``trace`` and ``project`` are derived from it, so a new operator that registers ``sample`` gets
all of them at that cost.
"""

from __future__ import annotations

from functools import singledispatch

import numpy as np

from ._backend import backend_of, namespace, to_numpy
from ._base import LinearOperator
from ._errors import DensificationError, ShapeError, UnsupportedOperandError

DENSE_LIMIT = 2**26  # entries; above this to_dense refuses unless allow_dense=True
_CHUNK_BYTES = 32 * 2**20


def _operator(A, what: str) -> LinearOperator:
    from ._convert import aslinop

    try:
        return aslinop(A)
    except UnsupportedOperandError as e:
        raise UnsupportedOperandError(f"{what}: {e}") from None


# ----- conjugate (pushed to leaves) -------------------------------------------------------------
@singledispatch
def conjugate(A: LinearOperator) -> LinearOperator:
    """Elementwise complex conjugate conj(A) as an operator (not a transpose)."""
    from ._matrixfree import MatrixFree

    return MatrixFree.conjugate_of(A)


# ----- to_dense ----------------------------------------------------------------------------------
def to_dense(A, *, allow_dense: bool = False):
    """The m×n array of A. Cost: O(m·n) memory; refuses above 2**26 entries.

    Raises :class:`DensificationError` naming the shape and the bytes it would take unless
    ``allow_dense=True``.

    >>> import linops as lo, numpy as np
    >>> lo.to_dense(lo.RankOne(np.ones(2), np.ones(2)))
    array([[1., 1.],
           [1., 1.]])
    """
    A = _operator(A, "to_dense")
    m, n = A.shape
    if m * n > DENSE_LIMIT and not allow_dense:
        gb = m * n * np.dtype(A.dtype).itemsize / 1e9
        raise DensificationError(
            f"to_dense of a {m}×{n} operator ({type(A).__name__}) would allocate {gb:.3g} GB "
            f"(limit {DENSE_LIMIT} entries); pass allow_dense=True if you mean it, or use "
            f"project/sample/inner, which stay lazy")
    return _to_dense(A)


def _dense_by_products(A: LinearOperator):
    """A applied to the identity: the generic (unoptimised) dense form."""
    xp = _xp_of(A)
    return A.matmat(xp.eye(A.shape[1], dtype=A.dtype))


@singledispatch
def _to_dense(A: LinearOperator):
    return _dense_by_products(A)


def _leaves(A: LinearOperator) -> list:
    from ._pytree_util import array_leaves

    return array_leaves(A, patterns=False)


def _xp_of(A: LinearOperator):
    return namespace(*_leaves(A))


# ----- sample ------------------------------------------------------------------------------------
def sample(A, rows, cols):
    """Entries A[rows[k], cols[k]] as a 1-D array, without forming A.

    Cost depends on the operator: O(len) for Dense/Diagonal, O(len·log) for Sparse, O(len·k)
    (SDDMM) for low rank, one lazy product per distinct column otherwise.
    """
    A = _operator(A, "sample")
    if not hasattr(rows, "shape"):
        rows = np.asarray(rows)
    if not hasattr(cols, "shape"):
        cols = np.asarray(cols)
    if rows.shape != cols.shape or rows.ndim != 1:
        raise ShapeError(f"sample needs 1-D rows and cols of equal length, got "
                         f"rows.shape={tuple(rows.shape)} and cols.shape={tuple(cols.shape)}")
    _check_index_range(rows, A.shape[0], "rows", A.shape)
    _check_index_range(cols, A.shape[1], "cols", A.shape)
    return _sample(A, rows, cols)


def _check_index_range(ix, bound, name, shape):
    if ix.shape[0] == 0:
        return
    if not np.issubdtype(np.dtype(ix.dtype), np.integer):
        raise ShapeError(f"sample: {name} must be integers, got dtype={ix.dtype}")
    lo_, hi = int(ix.min()), int(ix.max())
    if lo_ < 0 or hi >= bound:
        raise ShapeError(f"sample: {name} out of range [0, {bound}) for shape={shape}: "
                         f"min={lo_}, max={hi}")


@singledispatch
def _sample(A: LinearOperator, rows, cols):
    """Generic rule: apply A to the unit vectors of the distinct columns, in bounded chunks."""
    be = backend_of(*_leaves(A))
    xp = be.xp
    rows_h, cols_h = to_numpy(rows), to_numpy(cols)
    ucols, inv = np.unique(cols_h, return_inverse=True)
    m = A.shape[0]
    chunk = max(1, _CHUNK_BYTES // max(1, m * np.dtype(A.dtype).itemsize))
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(0, len(ucols) + 1))
    parts_idx, parts_val = [], []
    for s in range(0, len(ucols), chunk):
        cs = ucols[s:s + chunk]
        E = np.zeros((A.shape[1], len(cs)), dtype=np.dtype(A.dtype))
        E[cs, np.arange(len(cs))] = 1
        Y = A.matmat(be.from_host(E))
        sel = order[bounds[s]:bounds[min(s + chunk, len(ucols))]]
        parts_idx.append(sel)
        parts_val.append(Y[be.index(rows_h[sel]), be.index(inv[sel] - s)])
    if not parts_idx:
        return xp.zeros((0,), dtype=A.dtype)
    perm = np.argsort(np.concatenate(parts_idx))
    vals = parts_val[0] if len(parts_val) == 1 else xp.concatenate(parts_val)
    return vals[be.index(perm)]


def diagonal(A):
    """The main diagonal (length min(m, n)) without forming A. Cost: that of ``sample``."""
    A = _operator(A, "diagonal")
    i = np.arange(min(A.shape))
    return _sample(A, i, i)


def trace(A):
    """Sum of the diagonal. Cost: that of ``diagonal``."""
    d = diagonal(A)
    return namespace(d).sum(d)


# ----- project -----------------------------------------------------------------------------------
def project(G, like=None, *, pattern=None):
    """G restricted to a sparsity pattern, as a ``Sparse`` on that pattern (fixed-pattern gradient).

    Give ``like=A`` (a Sparse operator or scipy sparse matrix: its pattern) or ``pattern=P``.
    RankOne/LowRank use the SDDMM kernel (O(nnz·k), bounded temporaries); nothing forms an m×n
    array. Sums distribute.
    """
    from ._pattern import Pattern
    from ._sparse import Sparse

    G = _operator(G, "project")
    if (like is None) == (pattern is None):
        raise TypeError("project needs exactly one of like=A or pattern=P")
    if pattern is None:
        like_op = _operator(like, "project(like=...)")
        if not isinstance(like_op, Sparse):
            raise TypeError(f"project(like=...) needs a sparse operator with a pattern, got "
                            f"{type(like_op).__name__}; pass pattern=lo.Pattern(...) instead")
        pattern = like_op.pattern
    if not isinstance(pattern, Pattern):
        raise TypeError(f"pattern must be a linops.Pattern, got {type(pattern).__name__}")
    if pattern.shape != G.shape:
        raise ShapeError(f"project: G.shape={G.shape} but pattern.shape={pattern.shape}")
    return Sparse(sample_pattern(G, pattern), pattern)


def sample_pattern(G: LinearOperator, pattern):
    """Values of G at every stored position of ``pattern`` (CSR order)."""
    from ._sparse import Sparse

    if isinstance(G, Sparse) and G.pattern == pattern:
        return G.values
    from ._lowrank import LOW_RANK

    if isinstance(G, LOW_RANK):  # device-resident pattern indices for the GPU SDDMM
        be = backend_of(*_leaves(G))
        return _sample(G, pattern.on(be, "rows"), pattern.on(be, "indices"))
    return _sample(G, pattern.rows, pattern.indices)


# ----- inner -------------------------------------------------------------------------------------
def inner(G, K):
    """Frobenius inner product ⟨G, K⟩ = Σᵢⱼ conj(Gᵢⱼ) Kᵢⱼ, structure-aware.

    LowRank×Sparse: O(nnz·k); LowRank×LowRank: O((m+n)k²); Sparse×Sparse: pattern
    intersection; LowRank×anything: one product K @ V. Densifies only two dense operands.
    """
    G = _operator(G, "inner")
    K = _operator(K, "inner")
    if G.shape != K.shape:
        raise ShapeError(f"inner: G.shape={G.shape} but K.shape={K.shape}")
    return _inner_distributed(G, K)


def _inner_distributed(G, K):
    from ._composite import Scaled, Sum

    if isinstance(K, Sum):
        out = _inner_distributed(G, K.terms[0])
        for t in K.terms[1:]:
            out = out + _inner_distributed(G, t)
        return out
    if isinstance(K, Scaled):
        return K.c * _inner_distributed(G, K.A)
    return _inner(G, K)


@singledispatch
def _inner(G: LinearOperator, K: LinearOperator):
    from ._lowrank import LowRank, RankOne
    from ._sparse import Sparse

    if isinstance(K, Sparse):
        g = sample_pattern(G, K.pattern)
        xp = namespace(g, K.values)
        return xp.sum(xp.conj(g) * K.values)
    if isinstance(K, (LowRank, RankOne)):
        v = _inner(K, G)
        return namespace(v).conj(v)
    Gd, Kd = to_dense(G), to_dense(K)
    xp = namespace(Gd, Kd)
    return xp.sum(xp.conj(Gd) * Kd)


# ----- payload_nbytes ----------------------------------------------------------------------------
@singledispatch
def payload_nbytes(A) -> int:
    """Bytes of the arrays an operator holds (its memory footprint, for accounting)."""
    if hasattr(A, "nbytes"):
        return int(A.nbytes)
    raise UnsupportedOperandError(f"payload_nbytes: unsupported type {type(A).__name__}")


@payload_nbytes.register
def _(A: LinearOperator) -> int:
    from ._pytree_util import array_leaves

    return sum(int(a.size) * np.dtype(a.dtype).itemsize for a in array_leaves(A))
