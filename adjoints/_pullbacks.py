"""Explicit pullbacks returning LAZY cotangents (numpy, cupy and jax arrays alike).

Convention (see DESIGN.md): for real f, df = Re⟨Ā, dA⟩_F with ⟨X, Y⟩ = Σ conj(X) Y. For
u = A⁻¹b: λ = A⁻ᴴū, b̄ = λ, Ā = −λuᴴ. For Y = L R: L̄ = Ȳ Rᴴ, R̄ = Lᴴ Ȳ. For Y = A⁻¹:
Ā = −A⁻ᴴ Ȳ A⁻ᴴ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import linops as lo
from linops.internals import ShapeError, is_array, namespace, seal
from solvers import LinearCache, Solution, StaleSolutionError


@dataclass(frozen=True)
class SolveCotangent:
    """Cotangents of u = A⁻¹b: ``A`` (RankOne, or LowRank for several right-hand sides) and
    ``b`` (the adjoint solution λ). ``lam`` is an alias of ``b``."""

    A: lo.LinearOperator
    b: Any

    @property
    def lam(self):
        return self.b


def solve_pullback(sol_or_cache: Solution | LinearCache, ubar) -> SolveCotangent:
    """Pull ū back through u = A⁻¹b: one adjoint solve with the forward factorization, ZERO
    factorizations. Ā = RankOne(−λ, u) = −λuᴴ (LowRank(−Λ, U) for u of shape (n, k)).

    Memory: O(n·k) — the cotangent is never formed as an n×n array; contract it with
    ``fam.pullback(g.A)`` or project it with ``lo.project(g.A, like=A)``.

    >>> import numpy as np, solvers as sv
    >>> sol = sv.solve(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), np.array([1.0, 2.0])))
    >>> g = solve_pullback(sol, np.ones(2))
    >>> g.b.round(3).tolist(), type(g.A).__name__
    ([0.1, 0.3], 'RankOne')
    """
    if isinstance(sol_or_cache, Solution):
        cache, u = sol_or_cache.cache, sol_or_cache.u
        if cache is None or u is None:
            raise ValueError(f"this Solution has no solution to pull back (status "
                             f"{sol_or_cache.status.name}: {sol_or_cache.status.message})")
        cache.check_current(sol_or_cache.generation)
    elif isinstance(sol_or_cache, LinearCache):
        cache, u = sol_or_cache, sol_or_cache.u
        if u is None:
            raise StaleSolutionError(
                "the cache holds no solution for its current A and b (none was computed yet, or "
                "update() replaced A or b since): call cache.solve() before pulling back")
    else:
        raise TypeError(f"solve_pullback needs a solvers.Solution or LinearCache, got "
                        f"{type(sol_or_cache).__name__}")
    if isinstance(ubar, (list, tuple)):
        ubar = np.asarray(ubar)
    if not is_array(ubar) or tuple(ubar.shape) != tuple(u.shape):
        raise ShapeError(f"ubar.shape={tuple(getattr(ubar, 'shape', ()))} but "
                         f"u.shape={tuple(u.shape)}")
    lam = cache.solve_adjoint(ubar)
    neg = seal(-lam)
    if u.ndim == 1:
        return SolveCotangent(lo.RankOne(neg, u), lam)
    return SolveCotangent(lo.LowRank(neg, u), lam)


def matmul_pullback(L, R, Ybar):
    """Pull Ȳ back through Y = L @ R; returns (L̄, R̄).

    Either operand may be an operator (lo / scipy / cupyx / BCOO sparse or dense) and the other a
    dense vector or matrix, so ``matmul_pullback(A, X, Ybar)`` serves A @ X and
    ``matmul_pullback(X, A, Ybar)`` serves X @ A. The dense side is computed with sparse·dense
    products (the operator is never densified); the operator side is LowRank (RankOne for
    vectors) — project it with ``lo.project(Lbar, like=A)`` for the values' gradient (SDDMM).
    """
    l_op, r_op = _is_operator(L), _is_operator(R)
    if l_op:
        L = lo.aslinop(L)
    if r_op:
        R = lo.aslinop(R)
    if l_op and not r_op:
        if R.shape[0] != L.shape[1]:
            raise ShapeError(f"A @ X with A.shape={L.shape} but X.shape={tuple(R.shape)}")
        _check_ybar(Ybar, (L.shape[0],) + tuple(R.shape[1:]))
        Lbar = lo.RankOne(Ybar, R) if R.ndim == 1 else lo.LowRank(Ybar, R)
        return Lbar, L.H @ Ybar
    if r_op and not l_op:
        if L.shape[-1] != R.shape[0]:
            raise ShapeError(f"X @ A with X.shape={tuple(L.shape)} but A.shape={R.shape}")
        _check_ybar(Ybar, tuple(L.shape[:-1]) + (R.shape[1],))
        xp = namespace(L, Ybar)
        if L.ndim == 1:
            return Ybar @ R.H, lo.RankOne(xp.conj(L), xp.conj(Ybar))
        return Ybar @ R.H, lo.LowRank(xp.conj(L).T, xp.conj(Ybar).T)
    if l_op and r_op:
        raise TypeError("matmul_pullback needs one dense operand; for operator @ operator the "
                        "cotangent of each factor is Ȳ times the other's adjoint: compose them "
                        "lazily with `Ybar_op @ R.H` and `L.H @ Ybar_op`")
    xp = namespace(L, R, Ybar)
    L2 = L[None, :] if L.ndim == 1 else L
    R2 = R[:, None] if R.ndim == 1 else R
    Y2 = Ybar.reshape(L2.shape[0], R2.shape[1])
    Lbar = Y2 @ xp.conj(R2).T
    Rbar = xp.conj(L2).T @ Y2
    return Lbar.reshape(L.shape), Rbar.reshape(R.shape)


def inv_pullback(cache: LinearCache, Ybar) -> lo.LinearOperator:
    """Pull Ȳ back through Y = A⁻¹ (the inverse used as a lazy operator): Ā = −A⁻ᴴ Ȳ A⁻ᴴ.

    Ȳ low rank (U Vᴴ): Ā = LowRank(−A⁻ᴴU, A⁻¹V), k adjoint + k forward solves now.
    Otherwise: the lazy product −A⁻ᴴ Ȳ A⁻ᴴ; projecting it onto a pattern solves only with
    the distinct columns that pattern touches. No factorization either way.
    """
    Ybar = lo.aslinop(Ybar)
    if Ybar.shape != cache.A.shape:
        raise ShapeError(f"Ybar.shape={Ybar.shape} but A.shape={cache.A.shape}")
    Ainv = cache.as_operator()
    if isinstance(Ybar, (lo.RankOne, lo.LowRank)):
        U, V = Ybar.factors()
        return lo.LowRank(-cache.solve_adjoint(U), Ainv @ V)
    return -(Ainv.H @ Ybar @ Ainv.H)


def _is_operator(x) -> bool:
    if isinstance(x, lo.LinearOperator):
        return True
    import scipy.sparse as sp

    if sp.issparse(x):
        return True
    mod = type(x).__module__
    return mod.startswith("cupyx.scipy.sparse") or mod.startswith("jax.experimental.sparse") \
        or mod.startswith("scipy.sparse.linalg")


def _check_ybar(Ybar, shape) -> None:
    if not is_array(Ybar) or tuple(Ybar.shape) != tuple(shape):
        raise ShapeError(f"Ybar.shape={tuple(getattr(Ybar, 'shape', ()))} but Y has shape {tuple(shape)}")
