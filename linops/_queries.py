"""Open-ended queries as ``functools.singledispatch`` functions.

Generic defaults live here; each operator module registers its own faster rules beside the
operator. The core query is :func:`sample` (entries at given (row, col) positions); ``diagonal``,
``trace`` and ``project`` are derived from it, so a new operator that registers ``sample`` gets
all of them at that cost.

The public functions (``to_dense``, ``sample``, ``diagonal``, ``trace``, ``project``, ``inner``)
accept anything ``aslinop`` accepts and check their arguments; the private single-dispatch
functions behind them (``_to_dense``, ``_sample``, ``_inner``) take checked operators and are
what an operator module registers. The generic rules work for any operator through products
(one product per distinct column asked for); none of them builds an m×n array except
``to_dense`` and ``inner`` of two operands that have no structure to use.
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
    """Elementwise complex conjugate conj(A) as an operator (not a transpose).

    What ``A.conj()`` and ``A.T`` (= conj(Aᴴ)) call. Operator modules register rules that
    conjugate their arrays; the default wraps A in a ``MatrixFree`` applying X ↦ conj(A conj(X)).
    """
    from ._matrixfree import MatrixFree

    return MatrixFree.conjugate_of(A)


# ----- to_dense ----------------------------------------------------------------------------------
def to_dense(A, *, allow_dense: bool = False):
    """The m×n array of A, in the backend of A's arrays.

    For debugging, tests and small operators. Cost: O(m·n) memory, plus the structure's own
    cost to fill it (a scatter for Sparse, U Vᴴ for low rank, n products for a MatrixFree).
    Refuses above 2**26 entries (64 Mi, 512 MB in float64) unless asked.

    Parameters
    ----------
    A : operator or anything :func:`aslinop` accepts
    allow_dense : bool, default False
        Build the array whatever its size.

    Returns
    -------
    array of shape (m, n)
        For a Dense, its own read-only array (copy it before editing); otherwise a new array.
        Identity and Zero give numpy arrays.

    Raises
    ------
    DensificationError
        If m·n > 2**26 and not ``allow_dense``; the message names the shape and the bytes.
    UnsupportedOperandError
        If A cannot be wrapped as an operator.

    Examples
    --------
    >>> import linops as lo, numpy as np
    >>> lo.to_dense(lo.RankOne(np.ones(2), np.array([1.0, 2.0])))
    array([[1., 2.],
           [1., 2.]])
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
    """The dense array of a checked operator; modules register cheaper rules."""
    return _dense_by_products(A)


def _leaves(A: LinearOperator) -> list:
    """The value arrays of A (not pattern indices): they decide the backend of a result."""
    from ._pytree_util import array_leaves

    return array_leaves(A, patterns=False)


def _xp_of(A: LinearOperator):
    return namespace(*_leaves(A))


# ----- sample ------------------------------------------------------------------------------------
def sample(A, rows, cols):
    """The entries A[rows[k], cols[k]] as a 1-D array, without forming A.

    The core query: ``diagonal``, ``trace`` and ``project`` are built on it. Cost by operator:
    O(len) for Dense and Diagonal, O(len·log nnz) for Sparse (binary search in the pattern),
    O(len·k) for RankOne, LowRank and MaskedOuter (SDDMM), the sum of the parts' for Sum and
    Scaled; any other operator (Product, MatrixFree, user subclasses) is applied to the unit
    vectors of the distinct columns asked for, in chunks of at most 32 MB.

    Parameters
    ----------
    A : operator or anything :func:`aslinop` accepts
    rows, cols : 1-D integer arrays or lists of equal length
        Positions, in any order, repeats allowed.

    Returns
    -------
    array of shape (len(rows),)
        In the backend of A's arrays; zero where A stores nothing.

    Raises
    ------
    ShapeError
        If rows and cols are not 1-D of equal length, not integers, or out of range for
        A.shape (the message gives the range and the offending min/max).
    UnsupportedOperandError
        If A cannot be wrapped as an operator.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> G = lo.LowRank(np.array([[1.0], [2.0]]), np.array([[1.0], [10.0]]))
    >>> lo.sample(G, [1, 0, 1], [1, 1, 0])               # (U Vᴴ)[1, 1], [0, 1], [1, 0]
    array([20., 10.,  2.])
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
    """Integer dtype and 0 ≤ ix < bound, or ShapeError naming the offending extremes (one
    min/max, not a per-element loop: O(len), one host sync for device arrays)."""
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
    # group the requests by column: each distinct column costs one product with a unit
    # vector, and a chunk of columns is one matmat whose (m, chunk) result stays bounded
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
    """The main diagonal A[i, i], i < min(m, n), without forming A.

    Cost: ``sample`` at min(m, n) positions; O(n) for Dense, Diagonal, Sparse (times log nnz)
    and low rank (times k), n products with unit vectors for a MatrixFree or a Product.

    Parameters
    ----------
    A : operator or anything :func:`aslinop` accepts

    Returns
    -------
    array of shape (min(m, n),)

    Raises
    ------
    UnsupportedOperandError
        If A cannot be wrapped as an operator.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> lo.diagonal(lo.Dense(np.arange(6.0).reshape(2, 3)))
    array([0., 4.])
    """
    A = _operator(A, "diagonal")
    i = np.arange(min(A.shape))
    return _sample(A, i, i)


def trace(A):
    """The trace Σᵢ A[i, i] (over min(m, n) entries), without forming A.

    Cost: that of :func:`diagonal`. For a low-rank operator this is Σ U ∘ conj(V) summed over
    the diagonal positions, O(n·k).

    Returns
    -------
    0-d array
        In the backend of A's arrays (``float(...)`` for a python number).

    Raises
    ------
    UnsupportedOperandError
        If A cannot be wrapped as an operator.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> float(lo.trace(lo.RankOne(np.array([1.0, 2.0]), np.array([3.0, 4.0]))))  # 1·3 + 2·4
    11.0
    """
    d = diagonal(A)
    return namespace(d).sum(d)


# ----- project -----------------------------------------------------------------------------------
def project(G, like=None, *, pattern=None):
    """G restricted to a sparsity pattern, as a ``Sparse`` on that pattern.

    This is the fixed-pattern gradient: given the full gradient G of a function of a sparse A
    (typically a lazy ``RankOne(-λ, u)`` from a pullback), ``project(G, like=A)`` holds the
    derivatives with respect to A's stored values only. Cost: ``sample`` at the nnz positions;
    O(nnz·k) for RankOne and LowRank (SDDMM, bounded temporaries), O(nnz) for a Sparse on the
    same pattern, which is returned as its own values. Sums and scalings distribute. Nothing
    forms an m×n array.

    Parameters
    ----------
    G : operator or anything :func:`aslinop` accepts
    like : Sparse or scipy sparse matrix, optional
        Take its pattern (explicitly stored zeros included).
    pattern : Pattern, optional
        The pattern itself. Give exactly one of ``like`` and ``pattern``.

    Returns
    -------
    Sparse
        On that pattern, values in the backend of G's arrays.

    Raises
    ------
    TypeError
        If neither or both of ``like`` and ``pattern`` are given, if ``like`` is not sparse,
        or if ``pattern`` is not a :class:`Pattern`.
    ShapeError
        If the pattern's shape is not G's.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo
    >>> A = sp.csr_array(np.array([[4.0, 0.0], [1.0, 3.0]]))
    >>> G = lo.RankOne(np.array([1.0, 2.0]), np.array([5.0, 7.0]))    # [[5, 7], [10, 14]]
    >>> lo.project(G, like=A).values                                  # at (0,0), (1,0), (1,1)
    array([ 5., 10., 14.])
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
    """Values of G at every stored position of ``pattern``, in CSR order (no checks).

    The kernel of ``project``, ``inner`` with a Sparse and ``AffineSparse.pullback``. A Sparse
    on an equal pattern gives its own values (no copy); low-rank operators get the pattern's
    index arrays on their device, so the SDDMM runs there without a transfer."""
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
    """The Frobenius inner product ⟨G, K⟩ = Σᵢⱼ conj(Gᵢⱼ) Kᵢⱼ = tr(Gᴴ K), structure-aware.

    Conjugate-linear in G, linear in K. This contracts a gradient with a direction: for a
    family K(θ) = Σ θᵢ Kᵢ, ∂f/∂θᵢ = ⟨Kᵢ, Ā⟩ (real part for real θ). Cost by operands:

    - low rank (k) with Sparse: O(nnz·k), SDDMM on K's pattern;
    - low rank (k) with low rank (k'): O((m+n)·k·k'), two Gram matrices;
    - low rank (k) with any other operator K: one product K V (k columns);
    - Sparse with anything: ``sample`` of the other on the pattern (O(nnz) for two Sparse on
      one pattern, O(nnz·log nnz) on two);
    - Sum and Scaled operands distribute (a Scaled G contributes conj(c));
    - two operands without such structure (Dense, Product, MatrixFree): both are densified,
      subject to :func:`to_dense`'s size limit.

    Parameters
    ----------
    G, K : operators or anything :func:`aslinop` accepts
        Of one shape.

    Returns
    -------
    0-d array
        The dtype's promotion; complex whenever either operand is complex.

    Raises
    ------
    ShapeError
        If the shapes differ.
    DensificationError
        If two unstructured operands are larger than to_dense allows.
    UnsupportedOperandError
        If an operand cannot be wrapped as an operator.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo
    >>> K = sp.csr_array(np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
    >>> G = lo.RankOne(np.array([1.0, 1j]), np.array([1.0, 2.0, 3.0]))
    >>> complex(lo.inner(G, K)), complex(lo.inner(K, G))   # 1·1 + 1·3·2 + conj(1j)·2·3
    ((7-6j), (7+6j))
    """
    G = _operator(G, "inner")
    K = _operator(K, "inner")
    if G.shape != K.shape:
        raise ShapeError(f"inner: G.shape={G.shape} but K.shape={K.shape}")
    return _inner_distributed(G, K)


def _inner_distributed(G, K):
    """Split a Sum or Scaled second operand here, so that each rule registered on G's type
    sees a plain K (G's own Sum/Scaled rules split the first operand)."""
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
    """⟨G, K⟩ for a G without a rule: use K's structure if it has some, else densify."""
    from ._lowrank import LowRank, RankOne
    from ._sparse import Sparse

    if isinstance(K, Sparse):
        g = sample_pattern(G, K.pattern)
        xp = namespace(g, K.values)
        return xp.sum(xp.conj(g) * K.values)
    if isinstance(K, (LowRank, RankOne)):
        # ⟨G, K⟩ = conj(⟨K, G⟩): let the low-rank rule do the work
        v = _inner(K, G)
        return namespace(v).conj(v)
    Gd, Kd = to_dense(G), to_dense(K)
    xp = namespace(Gd, Kd)
    return xp.sum(xp.conj(Gd) * Kd)


# ----- payload_nbytes ----------------------------------------------------------------------------
@singledispatch
def payload_nbytes(A) -> int:
    """Bytes of the arrays an operator holds: its memory footprint, for accounting.

    Counts every value array and the index arrays of patterns (indptr and indices; a pattern
    shared by two operators is counted for each), not cached derived arrays. Identity, Zero and
    MatrixFree hold none (0). For a plain array, its ``nbytes``. O(number of arrays).

    Parameters
    ----------
    A : LinearOperator or array

    Returns
    -------
    int

    Raises
    ------
    UnsupportedOperandError
        For anything else (this query does not wrap its argument with ``aslinop``).

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> n = 1000
    >>> lo.payload_nbytes(lo.RankOne(np.ones(n), np.ones(n)))   # 2n float64, not n²
    16000
    >>> lo.payload_nbytes(lo.Identity(n))
    0
    """
    if hasattr(A, "nbytes"):
        return int(A.nbytes)
    raise UnsupportedOperandError(f"payload_nbytes: unsupported type {type(A).__name__}")


@payload_nbytes.register
def _(A: LinearOperator) -> int:
    from ._pytree_util import array_leaves

    return sum(int(a.size) * np.dtype(a.dtype).itemsize for a in array_leaves(A))
