"""The open-ended queries as ``functools.singledispatch`` generics, with fallbacks that need no
structure.

The bottom layer of the operator code: this module knows no operator type (it imports the
errors, the backend table and the walk over an operator's arrays, nothing else). Each operator's
module registers its own rules beside the operator, so everything about ``LowRank`` is in
``_lowrank``; the public entry points, which check their arguments, are in ``_queries``.

- :func:`conjugate` — conj(A) as an operator, for ``A.conj()`` and ``A.T``. The rule for an
  operator without one of its own is a ``MatrixFree`` conjugating around A's products,
  registered beside that class (``_matrixfree``).
- :func:`_to_dense` — the m×n array; fallback: A applied to the identity.
- :func:`_sample` — entries at (row, col) positions; fallback: products with the unit vectors
  of the distinct columns asked for, in chunks of at most 32 MB.
- :func:`sample_pattern` — values at every stored position of a pattern; fallback: ``_sample``
  there.
- :func:`_inner` — ⟨G, K⟩, by G's type. Two generics choose by K's type (K comes first in their
  signature, since dispatch is on the first argument): :func:`_inner_split_k` runs first and
  splits a Sum or Scaled K (rules in ``_composite``), so that G's rules see a plain K;
  :func:`_inner_by_k` serves a G without a rule from K's structure (Sparse, low rank), and
  densifies both when neither has any.
- :func:`payload_nbytes` — bytes held; fallback: an array's ``nbytes`` (the rule for operators
  is beside ``LinearOperator``).

None of the fallbacks builds an m×n array except ``_to_dense`` and the last resort of
``_inner_by_k``, which keeps :data:`DENSE_LIMIT`.

Structure queries — what ``solvers`` and ``adjoints`` branch on instead of concrete operator
types (``linops.internals`` exports them):

- :func:`structure` — 'dense', 'sparse', 'diagonal', 'lowrank' (B + one low-rank term),
  'petsc' or 'matrixfree' (the fallback): the vocabulary of the solvers' registry.
- :func:`csr_parts`, :func:`dense_array`, :func:`diagonal_of`, :func:`low_rank_split` — the
  stored arrays of a structure (None where A has no such structure).
- :func:`abs_apply` — |A| X (or |A|ᵀ X) for operators that store their entries, else None.
- :func:`adjoint_view` — the cheapest Aᴴ to apply (Sparse: its native transposed view).
- :func:`with_dtype` — A with its arrays cast (stored operators only).
- :func:`structure_key` — a hashable key, equal for operators a numeric refactorization may
  share (a Sparse's pattern, a Dense's shape), None for lazy ones.
"""

from __future__ import annotations

from functools import singledispatch

import numpy as np

from ._backend import namespace, to_numpy
from ._errors import DensificationError, UnsupportedOperandError
from ._pytree import backend_of_operator

DENSE_LIMIT = 2**26  # entries; above this to_dense refuses unless allow_dense=True
_CHUNK_BYTES = 32 * 2**20


# ----- structure queries -------------------------------------------------------------------------
@singledispatch
def structure(A) -> str:
    """How A is stored: 'dense', 'sparse', 'diagonal', 'lowrank', 'petsc'; 'matrixfree' for
    an operator known only by its products (the fallback).

    >>> import numpy as np, linops as lo
    >>> structure(lo.Dense(np.eye(2))), structure(lo.Identity(2)), structure(lo.Zero((2, 2)))
    ('dense', 'diagonal', 'matrixfree')
    """
    return "matrixfree"


@singledispatch
def csr_parts(A):
    """(values, pattern) of a sparse operator, else None."""
    return None


@singledispatch
def dense_array(A):
    """The 2-D array of a dense operator, else None."""
    return None


@singledispatch
def diagonal_of(A):
    """(d,) of a diagonal operator — None for the identity — else raises TypeError."""
    raise TypeError(f"{type(A).__name__} is not a diagonal operator (lo.Diagonal / lo.Identity)")


@singledispatch
def low_rank_split(A):
    """(B, U, V) when A = B + U Vᴴ with exactly one low-rank term, else None."""
    return None


@singledispatch
def abs_apply(A, X, adjoint: bool = False):
    """|A| X (|A|ᵀ X when ``adjoint``) for an operator that stores its entries, else None: the
    scale of the componentwise backward error of an iterative solution."""
    return None


@singledispatch
def adjoint_view(A):
    """Aᴴ as the cheapest operator to apply; ``A.adjoint()`` unless A has a better view."""
    return A.adjoint()


@singledispatch
def with_dtype(A, dtype):
    """A with its stored arrays cast to ``dtype``; TypeError for an operator that stores none
    (a lazy operator cannot be cast without evaluating it)."""
    raise TypeError(f"A has dtype {A.dtype}; linear solves need a floating or complex operator")


@singledispatch
def structure_key(A):
    """Hashable description of A's structure: equal keys allow a numeric refactorization;
    None (never equal) for operators without a comparable structure."""
    return getattr(A, "structure_key", None)


# ----- conjugate ---------------------------------------------------------------------------------
@singledispatch
def conjugate(A):
    """Elementwise complex conjugate conj(A) as an operator (not a transpose).

    What ``A.conj()`` and ``A.T`` (= conj(Aᴴ)) call. Operator modules register rules that
    conjugate their arrays; an operator without one becomes a ``MatrixFree`` applying
    X ↦ conj(A conj(X)) (that rule is registered by ``_matrixfree``).

    Raises
    ------
    TypeError
        If A is not an operator.
    """
    raise TypeError(f"conjugate needs a linops operator, got {type(A).__name__}")


# ----- to_dense ----------------------------------------------------------------------------------
def dense_within_limit(A, allow_dense: bool = False):
    """``_to_dense(A)`` of a checked operator, refusing above :data:`DENSE_LIMIT` entries
    unless ``allow_dense``: DensificationError naming the shape and the bytes."""
    m, n = A.shape
    if m * n > DENSE_LIMIT and not allow_dense:
        gb = m * n * np.dtype(A.dtype).itemsize / 1e9
        raise DensificationError(
            f"to_dense of a {m}×{n} operator ({type(A).__name__}) would allocate {gb:.3g} GB "
            f"(limit {DENSE_LIMIT} entries); pass allow_dense=True if you mean it, or use "
            f"project/sample/inner, which stay lazy")
    return _to_dense(A)


def _dense_by_products(A):
    """A applied to the identity: the generic (unoptimised) dense form."""
    xp = backend_of_operator(A).xp
    return A.matmat(xp.eye(A.shape[1], dtype=A.dtype))


@singledispatch
def _to_dense(A):
    """The dense array of a checked operator; modules register cheaper rules."""
    return _dense_by_products(A)


# ----- sample ------------------------------------------------------------------------------------
@singledispatch
def _sample(A, rows, cols):
    """Entries A[rows[k], cols[k]] of a checked operator at checked positions.

    Generic rule: apply A to the unit vectors of the distinct columns, in bounded chunks."""
    be = backend_of_operator(A)
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


@singledispatch
def sample_pattern(G, pattern):
    """Values of G at every stored position of ``pattern``, in CSR order (no checks).

    The kernel of ``project``, ``inner`` with a Sparse and ``AffineSparse.pullback``. A Sparse
    on an equal pattern gives its own values (no copy); low-rank operators take the pattern's
    index arrays on their device, so the SDDMM runs there without a transfer (both rules beside
    their types)."""
    return _sample(G, pattern.rows, pattern.indices)


# ----- inner -------------------------------------------------------------------------------------
@singledispatch
def _inner_split_k(K, G):
    """⟨G, K⟩ of two checked operators of one shape; note the order: dispatch is on K.

    Runs before G's rules: a Sum or Scaled K is split here (rules in ``_composite``), so that
    each rule registered on G's type sees a plain K (G's own Sum/Scaled rules split G)."""
    return _inner(G, K)


@singledispatch
def _inner(G, K):
    """⟨G, K⟩ by G's type; a G without a rule is served by K's structure (:func:`_inner_by_k`)."""
    return _inner_by_k(K, G)


@singledispatch
def _inner_by_k(K, G):
    """⟨G, K⟩ for a G without a rule, by K's type (dispatch on K, which comes first).

    Sparse and low-rank K register rules; two operands without such structure (Dense, Product,
    MatrixFree) are both densified, within :data:`DENSE_LIMIT`."""
    Gd, Kd = dense_within_limit(G), dense_within_limit(K)
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
