"""The public queries: ``to_dense``, ``sample``, ``diagonal``, ``trace``, ``project``, ``inner``.

Each accepts anything ``aslinop`` accepts, checks its arguments, and hands the checked operators
to the ``functools.singledispatch`` generics of ``_generics``, where every operator module
registers its rules beside the operator. The core query is :func:`sample` (entries at given
(row, col) positions); ``diagonal``, ``trace`` and ``project`` are derived from it, so a new
operator that registers ``_sample`` gets all of them at that cost. None of them builds an m×n
array except ``to_dense`` and ``inner`` of two operands that have no structure to use.
"""

from __future__ import annotations

import numpy as np

from ._algebra import as_operator
from ._backend import namespace
from ._errors import ShapeError
from ._generics import _inner_split_k, _sample, dense_within_limit, sample_pattern
from ._operators.pattern import Pattern
from ._operators.sparse import Sparse


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
    return dense_within_limit(as_operator(A, "to_dense"), allow_dense)


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
    A = as_operator(A, "sample")
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
    A = as_operator(A, "diagonal")
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
    G = as_operator(G, "project")
    if (like is None) == (pattern is None):
        raise TypeError("project needs exactly one of like=A or pattern=P")
    if pattern is None:
        like_op = as_operator(like, "project(like=...)")
        if not isinstance(like_op, Sparse):
            raise TypeError(f"project(like=...) needs a sparse operator with a pattern, got "
                            f"{type(like_op).__name__}; pass pattern=lo.Pattern(...) instead")
        pattern = like_op.pattern
    if not isinstance(pattern, Pattern):
        raise TypeError(f"pattern must be a linops.Pattern, got {type(pattern).__name__}")
    if pattern.shape != G.shape:
        raise ShapeError(f"project: G.shape={G.shape} but pattern.shape={pattern.shape}")
    return Sparse(sample_pattern(G, pattern), pattern)


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
    G = as_operator(G, "inner")
    K = as_operator(K, "inner")
    if G.shape != K.shape:
        raise ShapeError(f"inner: G.shape={G.shape} but K.shape={K.shape}")
    return _inner_split_k(K, G)
