"""RankOne (u vᴴ) and LowRank (U Vᴴ): the lazy form of outer-product cotangents."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ._backend import namespace
from ._base import LinearOperator, _set, conj, operator, seal, snapshot
from ._errors import ShapeError
from ._queries import _inner, _sample, _to_dense, conjugate
from ._sddmm import sddmm


@operator
class RankOne(LinearOperator):
    """u vᴴ with u (m,), v (n,). Memory O(m+n). Apply: O((m+n)·k). Adjoint: RankOne(v, u).
    u and v are snapshotted (the mutation rule in ``linops._backend``).

    >>> import numpy as np
    >>> G = RankOne(np.array([1.0, 2.0]), np.array([1.0, 0.0, 1.0]))
    >>> G.shape, (G @ np.ones(3)).tolist()
    ((2, 3), [2.0, 4.0])
    """

    u: Any
    v: Any
    shape: tuple[int, int] = None
    dtype: Any = None
    _leaves: ClassVar = ("u", "v")

    def __post_init__(self):
        for name in ("u", "v"):
            x = snapshot(getattr(self, name))
            _set(self, **{name: x})
            if not hasattr(x, "ndim") or x.ndim != 1:
                raise ShapeError(f"RankOne needs 1-D u and v, got {name}.shape="
                                 f"{tuple(getattr(x, 'shape', ()))}")
        _set(self, shape=(int(self.u.shape[0]), int(self.v.shape[0])),
             dtype=np.result_type(self.u.dtype, self.v.dtype))

    @property
    def rank(self) -> int:
        return 1

    def factors(self):
        """(U, V) as 2-D arrays with one column each."""
        return self.u[:, None], self.v[:, None]

    def matmat(self, X):
        xp = namespace(self.u, self.v, X)
        return self.u[:, None] * (xp.conj(self.v) @ X)[None, :]

    def adjoint(self) -> "RankOne":
        return RankOne(self.v, self.u)


@operator
class LowRank(LinearOperator):
    """U Vᴴ with U (m, k), V (n, k). Memory O((m+n)·k). Apply: O((m+n)·k·p). Adjoint: LowRank(V, U).

    >>> import numpy as np
    >>> G = LowRank(np.ones((4, 2)), np.ones((3, 2)))
    >>> G.shape, G.rank
    ((4, 3), 2)
    """

    U: Any
    V: Any
    shape: tuple[int, int] = None
    dtype: Any = None
    _leaves: ClassVar = ("U", "V")

    def __post_init__(self):
        U, V = snapshot(self.U), snapshot(self.V)
        _set(self, U=U, V=V)
        if not (hasattr(U, "ndim") and hasattr(V, "ndim") and U.ndim == 2 and V.ndim == 2
                and U.shape[1] == V.shape[1]):
            raise ShapeError(f"LowRank needs 2-D U (m, k) and V (n, k) with equal k, got "
                             f"U.shape={tuple(getattr(U, 'shape', ()))}, "
                             f"V.shape={tuple(getattr(V, 'shape', ()))}")
        _set(self, shape=(int(U.shape[0]), int(V.shape[0])), dtype=np.result_type(U.dtype, V.dtype))

    @property
    def rank(self) -> int:
        return int(self.U.shape[1])

    def factors(self):
        return self.U, self.V

    def matmat(self, X):
        xp = namespace(self.U, self.V, X)
        return self.U @ (xp.conj(self.V).T @ X)

    def adjoint(self) -> "LowRank":
        return LowRank(self.V, self.U)


LOW_RANK = (RankOne, LowRank)


def low_rank(U, V, *, like_rank_one: bool = False) -> LinearOperator:
    """RankOne when asked and U, V have one column; LowRank otherwise."""
    if like_rank_one and U.shape[1] == 1:
        return RankOne(U[:, 0], V[:, 0])
    return LowRank(U, V)


def sealed_low_rank(U, V, *, like_rank_one: bool = False) -> LinearOperator:
    """``low_rank`` of factors this library just computed (sealed, so they are not copied)."""
    return low_rank(seal(U), seal(V), like_rank_one=like_rank_one)


@conjugate.register(RankOne)
@conjugate.register(LowRank)
def _(A):
    U, V = A.factors()
    return low_rank(conj(U), conj(V), like_rank_one=isinstance(A, RankOne))


@_to_dense.register(RankOne)
@_to_dense.register(LowRank)
def _(A):
    U, V = A.factors()
    xp = namespace(U, V)
    return U @ xp.conj(V).T


@_sample.register(RankOne)
@_sample.register(LowRank)
def _(A, rows, cols):
    U, V = A.factors()
    return sddmm(U, V, rows, cols)


@_inner.register(RankOne)
@_inner.register(LowRank)
def _(G, K):
    U, V = G.factors()
    if isinstance(K, LOW_RANK):
        U2, V2 = K.factors()
        xp = namespace(U, V, U2, V2)
        return xp.sum((xp.conj(U).T @ U2) * xp.conj(xp.conj(V).T @ V2))
    # tr(Gᴴ K) = tr(Uᴴ K V): one product of K with the k columns of V
    KV = K.matmat(V)
    xp = namespace(U, KV)
    return xp.sum(xp.conj(U) * KV)
