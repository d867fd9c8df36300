"""Simplification at construction: the rules behind ``+``, ``*`` and ``@``.

- sums flatten, zeros drop, low-rank terms merge into one LowRank (RankOne + RankOne ->
  LowRank), Sparse terms on one pattern add their values;
- scalings merge (c·(d·A) = (cd)·A) and are absorbed by low-rank factors (c·u vᴴ = (c u) vᴴ);
- identities drop from products, zeros absorb, products flatten; any product with a low-rank
  factor stays low rank with the smaller rank (U Vᴴ B = U (Bᴴ V)ᴴ).

Why at construction: a gradient accumulated over many steps (``G = G + RankOne(...)``) stays one
LowRank instead of a deep tree of sums, and ``project``/``inner`` of it stay one SDDMM. The
rules are exact (no recompression, no dropping of small terms), and each costs at most one
product with an operand (``compose`` with a low-rank factor) or one addition of value arrays.

The operands of these rules, and the arguments of the queries, come in through ``aslinop``:
:func:`as_operand` for ``A + x`` and ``A @ x``, :func:`as_operator` for ``lo.inner(G, x)`` and
the other public queries.
"""

from __future__ import annotations

import numpy as np

from ._backend import is_array, namespace, seal
from ._base import LinearOperator
from ._operators.composite import Product, Scaled, Sum
from ._convert import aslinop
from ._operators.diagonal import Identity, Zero
from ._errors import ShapeError, UnsupportedOperandError
from ._operators.lowrank import LOW_RANK, LowRank, RankOne
from ._operators.lowrank import sealed_low_rank as low_rank
from ._operators.sparse import Sparse


# ----- operands ----------------------------------------------------------------------------------
def as_operand(other, A: LinearOperator | None = None, op: str = "@"):
    """``other`` as an operator for ``A op other``, or None (NotImplemented) when it is not one.

    Anything ``aslinop`` wraps takes part (scipy sparse matrices and LinearOperators, duck-typed
    operators), so ``A @ scipy_matrix`` composes lazily. An array that is not 2-D cannot be
    added to an operator: ShapeError naming both shapes.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo
    >>> as_operand(sp.eye(2)), as_operand("a string") is None
    (Sparse(shape=(2, 2), dtype=float64), True)
    """
    if isinstance(other, LinearOperator):
        return other
    if is_array(other):
        if other.ndim != 2 and A is not None:
            raise ShapeError(f"A {op} B with A.shape={A.shape} but B.shape={tuple(other.shape)} "
                             f"(an operator combines with 2-D arrays only)")
    try:
        return aslinop(other)
    except UnsupportedOperandError:
        return None


def as_operator(A, what: str) -> LinearOperator:
    """``aslinop(A)`` for the argument of a query; an input it cannot wrap raises
    UnsupportedOperandError whose message starts with ``what`` (the query's name)."""
    try:
        return aslinop(A)
    except UnsupportedOperandError as e:
        raise UnsupportedOperandError(f"{what}: {e}") from None


# ----- simplification ----------------------------------------------------------------------------
def _is_python_scalar(c, value) -> bool:
    return isinstance(c, (int, float, complex)) and c == value


def scale(c, A: LinearOperator) -> LinearOperator:
    """c·A, simplified: what ``c * A`` returns.

    ``1 * A`` is A, ``0 * A`` (python zero) a Zero, c·Zero the Zero, c·(d·A) is (c d)·A, and a
    RankOne or LowRank absorbs c into its first factor (O(m·k)). Anything else is a Scaled.
    Only python 0 and 1 are special-cased: an array scalar (a jax tracer) always scales, so
    that the result does not depend on a traced value.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> R = lo.RankOne(np.array([1.0, 2.0]), np.ones(2))
    >>> scale(3, R).u
    array([3., 6.])
    """
    if _is_python_scalar(c, 1):
        return A
    if isinstance(A, Zero):
        return A
    if _is_python_scalar(c, 0):
        return Zero(A.shape, A.dtype)
    if isinstance(A, Scaled):
        return scale(c * A.c, A.A)
    if isinstance(A, RankOne):
        return RankOne(seal(c * A.u), A.v)
    if isinstance(A, LowRank):
        return LowRank(seal(c * A.U), A.V)
    return Scaled(c, A)


def add(*ops: LinearOperator) -> LinearOperator:
    """ops[0] + ops[1] + …, simplified: what ``A + B`` returns.

    Nested sums flatten; Zero terms drop; all low-rank terms become one LowRank (factors
    concatenated, rank = the sum of the ranks); Sparse terms on one pattern become one Sparse
    (values added, O(nnz)). Returns the single remaining term itself, a Zero if none remains,
    else a Sum.

    Raises
    ------
    ShapeError
        If two operands differ in shape.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> R = lo.RankOne(np.ones(3), np.ones(3))
    >>> G = add(R, lo.Zero((3, 3)), R)
    >>> G, G.rank
    (LowRank(shape=(3, 3), dtype=float64), 2)
    """
    shape = ops[0].shape
    flat: list[LinearOperator] = []
    for op in ops:
        if op.shape != shape:
            raise ShapeError(f"A + B with A.shape={shape} but B.shape={op.shape}")
        flat.extend(op.terms if isinstance(op, Sum) else (op,))
    dtype = ops[0].dtype
    terms: list[LinearOperator] = []
    lowrank: list[LinearOperator] = []
    by_pattern: dict = {}
    for t in flat:
        if isinstance(t, Zero):
            continue
        if isinstance(t, LOW_RANK):
            lowrank.append(t)
        elif isinstance(t, Sparse) and t.pattern in by_pattern:
            i = by_pattern[t.pattern]
            terms[i] = Sparse(seal(terms[i].values + t.values), t.pattern)
        else:
            if isinstance(t, Sparse):
                by_pattern[t.pattern] = len(terms)
            terms.append(t)
    if len(lowrank) == 1:
        terms.append(lowrank[0])
    elif lowrank:
        Us, Vs = zip(*(t.factors() for t in lowrank))
        xp = namespace(*Us, *Vs)
        terms.append(LowRank(seal(xp.concatenate(Us, axis=1)), seal(xp.concatenate(Vs, axis=1))))
    if not terms:
        return Zero(shape, dtype)
    if len(terms) == 1:
        return terms[0]
    return Sum(tuple(terms))


def compose(A: LinearOperator, B: LinearOperator) -> LinearOperator:
    """A B, simplified: what ``A @ B`` returns for two operators.

    Identities drop; a Zero factor gives a Zero; scalars move out (a Scaled of the product); a
    low-rank factor keeps the product low rank: ``U Vᴴ B`` is ``LowRank(U, Bᴴ V)`` and
    ``B U Vᴴ`` is ``LowRank(B U, V)`` (one product of B with k columns, now, not at every
    application); two low-rank factors give the smaller rank. Otherwise a flat Product.

    Raises
    ------
    ShapeError
        If ``A.shape[1] != B.shape[0]``, naming both shapes.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> A = lo.Dense(np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> compose(lo.RankOne(np.ones(2), np.ones(2)), A).v      # u (Aᴴ 1)ᴴ
    array([4., 6.])
    >>> compose(lo.Identity(2), A) is A
    True
    """
    if A.shape[1] != B.shape[0]:
        raise ShapeError(f"A @ B with A.shape={A.shape} but B.shape={B.shape}")
    if isinstance(A, Identity):
        return B
    if isinstance(B, Identity):
        return A
    if isinstance(A, Zero) or isinstance(B, Zero):
        return Zero((A.shape[0], B.shape[1]), np.result_type(A.dtype, B.dtype))
    if isinstance(A, Scaled):
        return scale(A.c, compose(A.A, B))
    if isinstance(B, Scaled):
        return scale(B.c, compose(A, B.A))
    if isinstance(A, LOW_RANK) and isinstance(B, LOW_RANK):
        # U₁ V₁ᴴ U₂ V₂ᴴ = U₁ M V₂ᴴ with the small core M; fold M into the factor whose rank
        # is kept, so the result has rank min(k₁, k₂)
        U1, V1 = A.factors()
        U2, V2 = B.factors()
        xp = namespace(U1, V1, U2, V2)
        M = xp.conj(V1).T @ U2  # (k1, k2): U1 M V2ᴴ
        one = isinstance(A, RankOne) or isinstance(B, RankOne)
        if U1.shape[1] <= U2.shape[1]:
            return low_rank(U1, V2 @ xp.conj(M).T, like_rank_one=one)
        return low_rank(U1 @ M, V2, like_rank_one=one)
    if isinstance(A, LOW_RANK):
        U, V = A.factors()
        return low_rank(U, B.adjoint().matmat(V), like_rank_one=isinstance(A, RankOne))
    if isinstance(B, LOW_RANK):
        U, V = B.factors()
        return low_rank(A.matmat(U), V, like_rank_one=isinstance(B, RankOne))
    fa = A.factors if isinstance(A, Product) else (A,)
    fb = B.factors if isinstance(B, Product) else (B,)
    return Product(tuple(fa) + tuple(fb))
