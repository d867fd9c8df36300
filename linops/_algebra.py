"""Simplification at construction: the rules behind ``+``, ``*`` and ``@``.

- sums flatten, zeros drop, low-rank terms merge into one LowRank (RankOne + RankOne ->
  LowRank), Sparse terms on one pattern add their values;
- scalings merge (c·(d·A) = (cd)·A) and are absorbed by low-rank factors (c·u vᴴ = (c u) vᴴ);
- identities drop from products, zeros absorb, products flatten; any product with a low-rank
  factor stays low rank with the smaller rank (U Vᴴ B = U (Bᴴ V)ᴴ).
"""

from __future__ import annotations

from ._backend import namespace
from ._base import LinearOperator, seal
from ._composite import Product, Scaled, Sum
from ._diagonal import Identity, Zero
from ._errors import ShapeError
from ._lowrank import LOW_RANK, LowRank, RankOne
from ._lowrank import sealed_low_rank as low_rank
from ._sparse import Sparse


def _is_python_scalar(c, value) -> bool:
    return isinstance(c, (int, float, complex)) and c == value


def scale(c, A: LinearOperator) -> LinearOperator:
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
    if A.shape[1] != B.shape[0]:
        raise ShapeError(f"A @ B with A.shape={A.shape} but B.shape={B.shape}")
    if isinstance(A, Identity):
        return B
    if isinstance(B, Identity):
        return A
    if isinstance(A, Zero) or isinstance(B, Zero):
        import numpy as np

        return Zero((A.shape[0], B.shape[1]), np.result_type(A.dtype, B.dtype))
    if isinstance(A, Scaled):
        return scale(A.c, compose(A.A, B))
    if isinstance(B, Scaled):
        return scale(B.c, compose(A, B.A))
    if isinstance(A, LOW_RANK) and isinstance(B, LOW_RANK):
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
