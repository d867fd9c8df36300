"""Woodbury: (B + U Vᴴ)⁻¹ from B's factorization plus a k×k capacitance system.

Low-rank updates arrive by construction in this library: ``lo.Sparse + lo.LowRank`` stays a
lazy ``Sum`` (never densified), and ``sv.Auto`` sends it here, so a sparse matrix plus a rank-k
correction costs one sparse factorization and k extra solves, not a dense n×n factorization.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from linops.internals import backend_of, low_rank_split

from .._contract import Algorithm, Factor
from .._errors import SingularMatrixError, SolveError
from .._registry import register, resolve


@register("woodbury", "B + U Vᴴ from B's factorization and a k×k capacitance system",
          ("lowrank",), capability={"lowrank": "sparse_lu"}, adjoint="the same formula on Bᴴ + V Uᴴ",
          jax=True)
@dataclass(frozen=True)
class Woodbury(Algorithm):
    """Solve (B + U Vᴴ) x = b with B's factorization (``base``, default ``Auto``) and a k×k
    capacitance C = I + Vᴴ B⁻¹ U: x = B⁻¹b − B⁻¹U C⁻¹ Vᴴ B⁻¹ b. Setup: B's factorization, then
    k solves with B for C. Adjoint: the same formula on Bᴴ + V Uᴴ, whose capacitance is Cᴴ (k
    adjoint solves, once).

    A must be a ``lo.Sum`` with exactly one ``lo.LowRank``/``lo.RankOne`` term (B is the rest,
    any operator ``base`` can solve). Cost: ``init`` factorizes B; the first solve in each
    direction (A, Aᴴ, Aᵀ) makes its k solves with B and the k×k LU of C, kept for the
    following ones; each solve then costs one solve with B plus O(n·k).

    Parameters
    ----------
    base : algorithm, optional
        How to solve with B: ``sv.LU()``, ``sv.CG(...)``, ... Default ``sv.Auto()``, without
        the problem's hints (they describe A, not B).

    Raises
    ------
    SolveError
        At ``init``: A is not B + one low-rank term.
    SingularMatrixError
        From B's factorization at ``init``; from a singular capacitance (so A is singular) at
        the first solve in a direction.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo, solvers as sv
    >>> B = lo.aslinop(sp.diags([2.0, 3.0, 4.0], format="csr"))
    >>> A = B + lo.RankOne(np.ones(3), np.array([1.0, 0.0, 1.0]))    # a lazy Sum
    >>> cache = sv.init(sv.LinearProblem(A), sv.Woodbury(sv.LU()))
    >>> cache.kind
    'Woodbury(rank 1) over SuperLU'
    >>> x = cache.solve(np.ones(3))
    >>> bool(np.allclose(lo.to_dense(A) @ x, 1.0)), cache.stats.factorizations
    (True, 1)
    """

    base: Any = None

    def _setup(self, A, prob) -> Factor:
        """Split A into B + U Vᴴ and factorize B with ``base`` (its own checks included)."""
        parts = low_rank_split(A)
        if parts is None:
            raise SolveError(f"Woodbury needs A = B + LowRank(U, V), got {type(A).__name__}")
        B, U, V = parts
        base = resolve(self.base)  # None: Auto
        return WoodburyFactor(base.setup(B, None), B, U, V)  # no hints hold for B alone


class WoodburyFactor(Factor):
    """B's factor ``inner`` and, per direction, the capacitance (made on first use)."""

    def __init__(self, inner, B, U, V):
        self.inner, self.B, self.U, self.V = inner, B, U, V
        self.dtype = inner.dtype
        self.kind = f"Woodbury(rank {U.shape[1]}) over {getattr(inner, 'kind', type(inner).__name__)}"
        self.be = backend_of(U, V)
        self.xp = self.be.xp
        self._cap: dict = {}

    def _capacitance(self, trans):
        """(Z, Q, lu(C), linalg) for op(A) = op(B) + P Qᴴ, made on first use per direction."""
        if trans not in self._cap:
            xp = self.xp
            P, Q = {"N": (self.U, self.V), "H": (self.V, self.U),
                    "T": (xp.conj(self.V), xp.conj(self.U))}[trans]
            Z = self.inner.solve(P, trans)  # op(B)⁻¹ P
            C = xp.eye(P.shape[1], dtype=Z.dtype) + xp.conj(Q).T @ Z
            la = self.be.linalg
            try:
                lu = la.lu_factor(C)
            except Exception as e:  # pragma: no cover - LAPACK raises only on bad input
                raise SingularMatrixError(f"Woodbury capacitance: {e}") from None
            # the pivots of C decide: C is singular exactly when B + U Vᴴ is (B being regular)
            d = xp.abs(xp.diagonal(lu[0]))
            if not bool(xp.all(d > 1e-13 * xp.max(d))):
                raise SingularMatrixError("Woodbury: the capacitance matrix I + Vᴴ B⁻¹ U is "
                                          "singular, so B + U Vᴴ is singular")
            self._cap[trans] = (Z, Q, lu, la)
        return self._cap[trans]

    def solve(self, Bm, trans):
        Z, Q, lu, la = self._capacitance(trans)
        Y = self.inner.solve(Bm, trans)
        return Y - Z @ la.lu_solve(lu, self.xp.conj(Q).T @ Y)

    @property
    def iterations(self) -> int:
        return self.inner.iterations

    @property
    def last_status(self):
        return self.inner.last_status

    def close(self) -> None:
        self.inner.close()
