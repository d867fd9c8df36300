"""RankOne (u vᴴ) and LowRank (U Vᴴ): the lazy form of outer-product cotangents.

The gradient of f = a·(A⁻¹b) with respect to A is the n×n matrix -λ uᴴ; as a RankOne it costs
two vectors. These operators keep such products as their factors through the whole algebra
(sums of them concatenate factors, products with anything stay low rank, see ``_algebra``) and
answer the queries from the factors: entries by SDDMM, inner products in O((m+n)·k²) or one
product with the other operand. The module also holds their query rules and the helpers that
choose between the two classes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .._backend import conj, namespace, seal, snapshot
from .._base import LinearOperator
from .._errors import ShapeError
from .._generics import _inner, _inner_by_k, _sample, _to_dense, conjugate, sample_pattern
from .._pytree import _set, backend_of_operator, operator
from .._sddmm import sddmm


@operator
class RankOne(LinearOperator):
    """The rank-one m×n matrix u vᴴ, kept as its two vectors: (u vᴴ)ᵢⱼ = uᵢ conj(vⱼ).

    Memory O(m+n). Apply: u (vᴴ X), O((m+n)·k) for X of shape (n, k). Adjoint:
    ``RankOne(v, u)``, O(1). Entries (``sample``, ``project``) cost O(1) each; ``inner`` with a
    Sparse K costs O(nnz(K)), with a LowRank O((m+n)·k).

    Parameters
    ----------
    u : array of shape (m,)
    v : array of shape (n,)
        numpy, cupy or jax, one backend. v is conjugated in the product, not at construction.

    Raises
    ------
    ShapeError
        If u or v is not 1-D.

    See Also
    --------
    LowRank : U Vᴴ with k columns; a sum of RankOne operators becomes one.

    Notes
    -----
    ``u`` and ``v`` are snapshotted (the mutation rule of ``linops._backend``). Scaling does
    not wrap: ``c * RankOne(u, v)`` is ``RankOne(c u, v)``. This is the form of a solve's
    cotangent, ``Ā = -λ uᴴ`` (``adjoints.solve_pullback``).

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> G = RankOne(np.array([1.0, 2.0]), np.array([3.0, 1j]))
    >>> lo.to_dense(G)                                  # the second column is conj(1j) = -1j
    array([[3.+0.j, 0.-1.j],
           [6.+0.j, 0.-2.j]])
    >>> G @ np.array([1.0, 0.0]), lo.payload_nbytes(G)  # 2 + 2 numbers, not 2·2
    (array([3.+0.j, 6.+0.j]), 48)
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
        """1 (the stored rank; u or v may still be zero)."""
        return 1

    def factors(self):
        """(U, V) as 2-D arrays of one column each (views of u and v), so that code written for
        ``LowRank.factors`` serves both classes.

        Examples
        --------
        >>> import numpy as np
        >>> U, V = RankOne(np.ones(2), np.ones(3)).factors()
        >>> U.shape, V.shape
        ((2, 1), (3, 1))
        """
        return self.u[:, None], self.v[:, None]

    def matmat(self, X):
        """u (vᴴ X): one row vector of inner products, then an outer product; O((m+n)·k)."""
        xp = namespace(self.u, self.v, X)
        return self.u[:, None] * (xp.conj(self.v) @ X)[None, :]

    def adjoint(self) -> "RankOne":
        """(u vᴴ)ᴴ = v uᴴ: the factors swap, O(1)."""
        return RankOne(self.v, self.u)


@operator
class LowRank(LinearOperator):
    """The m×n matrix U Vᴴ of rank ≤ k, kept as its factors: Σᵣ U[:, r] V[:, r]ᴴ.

    Memory O((m+n)·k). Apply: U (Vᴴ X), O((m+n)·k·p) for X of shape (n, p). Adjoint:
    ``LowRank(V, U)``, O(1). Entries cost O(k) each (SDDMM); ``inner`` with a Sparse K costs
    O(nnz(K)·k), with another LowRank of rank k' O((m+n)·k·k').

    Parameters
    ----------
    U : array of shape (m, k)
    V : array of shape (n, k)
        numpy, cupy or jax, one backend, the same k. V is conjugated in the product.

    Raises
    ------
    ShapeError
        If U or V is not 2-D, or their numbers of columns differ.

    Notes
    -----
    ``U`` and ``V`` are snapshotted (the mutation rule of ``linops._backend``). Sums of low-rank
    operators concatenate their factors (``RankOne + RankOne`` is a LowRank of rank 2, with no
    recompression), ``c * LowRank(U, V)`` is ``LowRank(c U, V)``, and a product with any operator
    B stays low rank: ``LowRank(U, V) @ B`` is ``LowRank(U, Bᴴ V)``, one product with B.

    Examples
    --------
    >>> import numpy as np, linops as lo
    >>> G = LowRank(np.ones((4, 2)), np.ones((3, 2)))
    >>> G.shape, G.rank, G @ np.ones(3)
    ((4, 3), 2, array([6., 6., 6., 6.]))
    >>> R = lo.RankOne(np.ones(4), np.ones(3))
    >>> (G + R).rank                                   # factors concatenated
    3
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
        """k, the number of columns of U and V (an upper bound of the true rank)."""
        return int(self.U.shape[1])

    def factors(self):
        """(U, V), as stored (read-only snapshots).

        Examples
        --------
        >>> import numpy as np
        >>> U, V = LowRank(np.ones((4, 2)), np.ones((3, 2))).factors()
        >>> U.shape, V.shape
        ((4, 2), (3, 2))
        """
        return self.U, self.V

    def matmat(self, X):
        """U (Vᴴ X): the k×p core first, so nothing of size m×n appears; O((m+n)·k·p)."""
        xp = namespace(self.U, self.V, X)
        return self.U @ (xp.conj(self.V).T @ X)

    def adjoint(self) -> "LowRank":
        """(U Vᴴ)ᴴ = V Uᴴ: the factors swap, O(1)."""
        return LowRank(self.V, self.U)


LOW_RANK = (RankOne, LowRank)


def low_rank(U, V, *, like_rank_one: bool = False) -> LinearOperator:
    """RankOne when asked and U, V have one column; LowRank otherwise.

    The algebra asks when an operand was a RankOne, so that ``c * u vᴴ`` and ``u vᴴ @ B`` stay
    RankOne (what users and tests of ``solve_pullback`` expect), while genuine k = 1 LowRank
    results keep their class."""
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
        # ⟨U Vᴴ, U₂ V₂ᴴ⟩ = Σ (Uᴴ U₂) ∘ conj(Vᴴ V₂): two k×k₂ Gram matrices, O((m+n)·k·k₂)
        U2, V2 = K.factors()
        xp = namespace(U, V, U2, V2)
        return xp.sum((xp.conj(U).T @ U2) * xp.conj(xp.conj(V).T @ V2))
    # tr(Gᴴ K) = tr(Uᴴ K V): one product of K with the k columns of V
    KV = K.matmat(V)
    xp = namespace(U, KV)
    return xp.sum(xp.conj(U) * KV)


@_inner_by_k.register(RankOne)
@_inner_by_k.register(LowRank)
def _(K, G):
    # ⟨G, K⟩ = conj(⟨K, G⟩) for a G without a rule: the low-rank rule above does the work
    v = _inner(K, G)
    return namespace(v).conj(v)


@sample_pattern.register(RankOne)
@sample_pattern.register(LowRank)
def _(G, pattern):
    # the pattern's index arrays on the factors' device, so a GPU SDDMM needs no transfer
    be = backend_of_operator(G)
    return _sample(G, pattern.on(be, "rows"), pattern.on(be, "indices"))
