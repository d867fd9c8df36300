"""Explicit pullbacks returning LAZY cotangents (numpy, cupy and jax arrays alike).

Convention (see DESIGN.md): for real f, df = Re⟨Ā, dA⟩_F with ⟨X, Y⟩ = Σ conj(X) Y. For
u = A⁻¹b: λ = A⁻ᴴū, b̄ = λ, Ā = −λuᴴ. For Y = L R: L̄ = Ȳ Rᴴ, R̄ = Lᴴ Ȳ. For Y = A⁻¹:
Ā = −A⁻ᴴ Ȳ A⁻ᴴ.

"Pullback" is reverse mode by hand: given ū = ∂f/∂u (conjugated, for complex u), return the
cotangents of the inputs. Each cotangent with respect to a matrix is an operator (``RankOne``,
``LowRank``, a lazy product), O(n·k) memory; it is the FULL gradient, correct on A's structural
zeros too. What to do with it:

- ``lo.project(G, like=A)``: the gradient on A's stored entries (SDDMM, O(nnz·k));
- ``fam.pullback(G)``: the gradient with respect to θ of a family ``K(θ)``, O(nnz);
- ``lo.inner(G, K)``: one directional derivative ⟨G, K⟩_F;
- ``lo.to_dense(G)``: only if you mean it (n×n).

Solves reuse the forward factorization (``Solution.cache``): a pullback adds adjoint solves and
never a factorization.
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
    ``b`` (the adjoint solution λ). ``lam`` is an alias of ``b``.

    Attributes
    ----------
    A : lo.RankOne or lo.LowRank
        Ā = −λuᴴ (−Λ Uᴴ for k right-hand sides), kept as its factors: O(n·k) memory.
    b : array of u's shape
        b̄ = λ = A⁻ᴴ ū.

    Examples
    --------
    >>> import numpy as np, solvers as sv, adjoints as ad
    >>> sol = sv.solve(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), [1.0, 2.0]))
    >>> g = ad.solve_pullback(sol, np.ones(2))
    >>> g.A, g.lam is g.b
    (RankOne(shape=(2, 2), dtype=float64), True)
    """

    A: lo.LinearOperator
    b: Any

    @property
    def lam(self):
        """The adjoint solution λ = A⁻ᴴ ū (the same array as ``b``)."""
        return self.b


def solve_pullback(sol_or_cache: Solution | LinearCache, ubar) -> SolveCotangent:
    """Pull ū back through u = A⁻¹b: one adjoint solve with the forward factorization, ZERO
    factorizations. Ā = RankOne(−λ, u) = −λuᴴ (LowRank(−Λ, U) for u of shape (n, k)).

    Memory: O(n·k) — the cotangent is never formed as an n×n array; contract it with
    ``fam.pullback(g.A)`` or project it with ``lo.project(g.A, like=A)``.

    Parameters
    ----------
    sol_or_cache : solvers.Solution or solvers.LinearCache
        The forward solve: a Solution (its ``u`` and cache), or a cache whose last
        ``cache.solve()`` gives u (``cache.u``).
    ubar : array of u's shape
        ū = ∂f/∂u (for complex u: the cotangent with df = Re⟨ū, du⟩).

    Returns
    -------
    SolveCotangent
        ``.A`` = Ā (lazy), ``.b`` = b̄ = λ.

    Raises
    ------
    ValueError
        A Solution without a solution (a failure returned by ``throw=False``).
    StaleSolutionError
        The cache was updated since the Solution was made, or the cache holds no ``u``
        (never solved, or forgotten by ``update``): the pullback would mix two matrices.
    ShapeError
        ``ubar`` not of u's shape.
    TypeError
        Neither a Solution nor a LinearCache.
    SolveError
        From the adjoint solve (an iterative method that misses its tolerance on Aᴴ).

    Notes
    -----
    Cost: one adjoint solve ``cache.solve_adjoint(ubar)`` — two triangular solves for LU and
    Cholesky, one Krylov run for iterative methods — and no factorization
    (``stats.adjoint_solves`` grows by one, ``stats.factorizations`` does not). For
    ``f = aᵀu``, ``ubar = a`` gives ∂f/∂b = λ and ∂f/∂A = −λuᴴ.

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> sol = sv.solve(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), np.array([1.0, 2.0])))
    >>> g = solve_pullback(sol, np.ones(2))
    >>> g.b.round(3).tolist(), type(g.A).__name__
    ([0.1, 0.3], 'RankOne')
    >>> sol.stats.factorizations, sol.stats.adjoint_solves
    (1, 1)

    For a sparse A, the full gradient against the gradient on A's stored entries:

    >>> import scipy.sparse as sp, linops as lo
    >>> A = sp.csr_array(np.array([[4.0, 1.0, 0.0], [2.0, 3.0, 0.0], [0.0, 0.0, 2.0]]))
    >>> sol = sv.solve(sv.LinearProblem(A, np.array([1.0, 2.0, 2.0])))
    >>> g = solve_pullback(sol, np.ones(3))
    >>> lo.to_dense(g.A)[0].round(3).tolist()                  # dense on a zero entry, too
    [-0.01, -0.06, -0.1]
    >>> lo.project(g.A, like=sol.cache.A).values.round(3).tolist()    # 5 stored entries
    [-0.01, -0.06, -0.03, -0.18, -0.5]
    """
    if isinstance(sol_or_cache, Solution):
        cache, u = sol_or_cache.cache, sol_or_cache.u
        if cache is None or u is None or not sol_or_cache.status.ok:  # a failure's last iterate
            raise ValueError(f"this Solution has no solution to pull back (status "     # is no u
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
    neg = seal(-lam)  # read-only, as u is: g.A must not change if the caller edits an array
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

    Parameters
    ----------
    L, R : operator or array
        The factors of Y = L @ R. At most one of them is an operator (``lo`` operator, scipy /
        cupyx sparse, jax BCOO/BCSR, scipy LinearOperator); the other is a dense array of shape
        (n,) or (n, k) on the right, (n,) or (m, n) on the left. Two dense arrays are allowed
        too (both cotangents are then arrays).
    Ybar : array of Y's shape
        Ȳ = ∂f/∂Y.

    Returns
    -------
    (Lbar, Rbar)
        L̄ = Ȳ Rᴴ and R̄ = Lᴴ Ȳ. The operator's cotangent is lazy (``RankOne``/``LowRank``),
        the dense one an array (one product with the operator's adjoint).

    Raises
    ------
    ShapeError
        The shapes of L and R do not chain, or ``Ybar`` is not of Y's shape.
    TypeError
        Both operands are operators (compose ``Ybar_op @ R.H`` and ``L.H @ Ybar_op`` lazily
        instead).

    Notes
    -----
    Cost: one product with the operator's adjoint, O(nnz·k) for a sparse one; the lazy
    cotangent is O((m + n)·k) memory; its projection onto A's pattern is an SDDMM, O(nnz·k).
    The cotangent is the full gradient: dense on A's structural zeros until projected.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo
    >>> A = sp.csr_array(np.array([[4.0, 1.0, 0.0], [2.0, 3.0, 0.0], [0.0, 0.0, 2.0]]))
    >>> X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    >>> Abar, Xbar = matmul_pullback(A, X, np.ones((3, 2)))          # Y = A @ X
    >>> Abar, Xbar.tolist()
    (LowRank(shape=(3, 3), dtype=float64), [[6.0, 6.0], [4.0, 4.0], [2.0, 2.0]])
    >>> lo.project(Abar, like=lo.aslinop(A)).values.tolist()        # Ȳ Xᴴ on A's entries
    [3.0, 7.0, 3.0, 7.0, 11.0]
    >>> Xbar, Abar = matmul_pullback(np.ones((2, 3)), A, np.ones((2, 3)))   # Y = X @ A
    >>> Xbar.tolist(), Abar.shape
    ([[5.0, 5.0, 2.0], [5.0, 5.0, 2.0]], (3, 3))
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
        # X @ A: Ā = Xᴴ Ȳ, written as U Vᴴ with U = Xᴴ (n, m) and V = Ȳᴴ (n, m)
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
    # both dense: the textbook rule on 2-D views (a vector operand is one row or one column)
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

    Parameters
    ----------
    cache : solvers.LinearCache
        The factorization of A (``sol.cache``).
    Ybar : operator or array of A's shape
        Ȳ = ∂f/∂(A⁻¹), e.g. from ``lo.RankOne`` when f reads A⁻¹ through products.

    Returns
    -------
    lo.LowRank or lazy operator
        Ā = −A⁻ᴴ Ȳ A⁻ᴴ.

    Raises
    ------
    ShapeError
        ``Ybar`` not of A's shape.

    Notes
    -----
    Cost for Ȳ = U Vᴴ of rank k: k adjoint and k forward solves with the cache's factors, now.
    For any other Ȳ nothing is solved until the result is applied or queried; each
    application costs two solves per column (``cache.as_operator()``).

    Examples
    --------
    >>> import numpy as np, linops as lo, solvers as sv
    >>> A = np.array([[4.0, 1.0], [2.0, 3.0]])
    >>> cache = sv.init(sv.LinearProblem(A))
    >>> G = inv_pullback(cache, lo.RankOne(np.ones(2), np.ones(2)))    # Ȳ = 1 1ᵀ
    >>> G, cache.stats.factorizations
    (LowRank(shape=(2, 2), dtype=float64), 1)
    >>> Ainv = np.linalg.inv(A)
    >>> bool(np.allclose(lo.to_dense(G), -Ainv.T @ np.ones((2, 2)) @ Ainv.T))
    True
    """
    Ybar = lo.aslinop(Ybar)
    if Ybar.shape != cache.A.shape:
        raise ShapeError(f"Ybar.shape={Ybar.shape} but A.shape={cache.A.shape}")
    Ainv = cache.as_operator()
    if isinstance(Ybar, (lo.RankOne, lo.LowRank)):
        # −A⁻ᴴ U Vᴴ A⁻ᴴ = (−A⁻ᴴU)(A⁻¹V)ᴴ: stays low rank, 2k solves
        U, V = Ybar.factors()
        return lo.LowRank(-cache.solve_adjoint(U), Ainv @ V)
    return -(Ainv.H @ Ybar @ Ainv.H)


def _is_operator(x) -> bool:
    """Operand that must stay lazy (linops, scipy/cupyx/jax sparse, scipy LinearOperator);
    checked by module name so that cupy and jax need not be imported."""
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
