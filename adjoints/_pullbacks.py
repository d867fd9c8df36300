"""Explicit pullbacks returning LAZY cotangents (numpy, cupy and jax arrays alike).

Convention (see DESIGN.md): for real f, df = Re⟨Ā, dA⟩_F with ⟨X, Y⟩ = Σ conj(X) Y. For
u = A⁻¹b: λ = A⁻ᴴū, b̄ = λ, Ā = −λuᴴ. For Y = L R: L̄ = Ȳ Rᴴ, R̄ = Lᴴ Ȳ (f = Re tr(L R):
Ȳ = I). For Y = A⁻¹: Ā = −A⁻ᴴ Ȳ A⁻ᴴ. Cotangents given as operators (Ȳ = ``lo.Identity(n)``,
a ``Diagonal``, a ``Sparse``, a ``LowRank``) are accepted by every pullback here and give lazy
results.

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
import scipy.sparse as sp

import linops as lo
from linops.internals import ShapeError, is_array, namespace, seal, to_numpy
from solvers import LinearCache, LinearProblem, RankDeficientError, Solution, StaleSolutionError


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


def solve_pullback(sol_or_cache: Solution | LinearCache, ubar, *,
                   rank_deficient: str = "raise") -> SolveCotangent:
    """Pull ū back through u = A⁻¹b: one adjoint solve with the forward factorization, ZERO
    factorizations. Ā = RankOne(−λ, u) = −λuᴴ (LowRank(−Λ, U) for u of shape (n, k)).

    Memory: O(n·k) — the cotangent is never formed as an n×n array; contract it with
    ``fam.pullback(g.A)`` or project it with ``lo.project(g.A, like=A)``.

    Parameters
    ----------
    sol_or_cache : solvers.Solution or solvers.LinearCache
        The forward solve: a Solution (its ``u`` and cache), or a cache whose last
        ``cache.solve()`` gives u (``cache.u``).
    ubar : array of u's shape, or an operator when u is (n, k)
        ū = ∂f/∂u (for complex u: the cotangent with df = Re⟨ū, du⟩). A low-rank operator
        ū = P Qᴴ (``RankOne``/``LowRank``) costs rank(ū) adjoint solves instead of k, and
        λ stays low rank; any other operator (``Identity``, ``Diagonal``, ``Sparse``) is read as
        its n×k entries, the size of u.

    rank_deficient : {'raise', 'fixed_rank'}
        Least squares only (``sv.LeastSquares``): an A with neither full column nor full row
        rank has no gradient (a generic dA changes the rank, and A⁺ jumps):
        :class:`solvers.RankDeficientError` by default; 'fixed_rank' returns the derivative
        along perturbations that keep the rank (the three-term formula below).

    Returns
    -------
    SolveCotangent
        ``.A`` = Ā (lazy), ``.b`` = b̄ = λ (an array; a ``LowRank`` for a low-rank ū). For least
        squares x = A⁺b: ``.A`` = r λᴴ − μ xᴴ + q pᴴ (rank 2, or 3: a ``LowRank``) with
        μ = A⁺ᴴx̄, λ = A⁺μ (= (AᴴA)⁻¹x̄ for full column rank), r = b − Ax, and, for A without
        full column rank, p = x̄ − A⁺Ax̄, q = A⁺ᴴx; ``.b`` = μ.

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
        Neither a Solution nor a LinearCache (an unsolved LinearProblem: solve it first).
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
    elif isinstance(sol_or_cache, LinearProblem):
        raise TypeError("solve_pullback needs the solved problem, got a LinearProblem that has "
                        "not been solved: solve it first, sol = sv.solve(prob) (or cache = "
                        "sv.init(prob); cache.solve()), then ad.solve_pullback(sol, ubar) — the "
                        "adjoint solve reuses that factorization")
    else:
        raise TypeError(f"solve_pullback needs a solvers.Solution or LinearCache, got "
                        f"{type(sol_or_cache).__name__}")
    if isinstance(ubar, (list, tuple)):
        ubar = np.asarray(ubar)
    if cache.prob.least_squares:
        b = cache.prob.b if isinstance(sol_or_cache, Solution) else cache.rhs
        return lstsq_pullback(cache, u, b, ubar, rank_deficient)
    if _is_operator(ubar):
        return _solve_pullback_operator(cache, u, lo.aslinop(ubar))
    if not is_array(ubar) or tuple(ubar.shape) != tuple(u.shape):
        raise ShapeError(f"ubar.shape={tuple(getattr(ubar, 'shape', ()))} but "
                         f"u.shape={tuple(u.shape)}")
    lam = cache.solve_adjoint(ubar)
    neg = seal(-lam)  # read-only, as u is: g.A must not change if the caller edits an array
    if u.ndim == 1:
        return SolveCotangent(lo.RankOne(neg, u), lam)
    return SolveCotangent(lo.LowRank(neg, u), lam)


def lstsq_pullback(cache, x, b, xbar, rank_deficient: str = "raise") -> SolveCotangent:
    """x = A⁺b (min ‖Ax − b‖, minimum norm): Ā = r λᴴ − μ xᴴ + q pᴴ, b̄ = μ, from the cache's one
    factorization (2 solves for full column rank, 4 otherwise; never the normal equations).

    μ = A⁺ᴴx̄ (``solve_adjoint``), λ = A⁺μ (= (AᴴA)⁻¹x̄ when A has full column rank: R⁻¹R⁻ᴴ for
    QR), r = b − Ax; without full column rank also p = x̄ − A⁺Ax̄ (x̄'s part in A's null space)
    and q = A⁺ᴴx (Golub–Pereyra). The formula is the gradient where A has full column or full
    row rank, and the derivative along rank-preserving perturbations otherwise (only with
    ``rank_deficient='fixed_rank'``).
    """
    if rank_deficient not in ("raise", "fixed_rank"):
        raise ValueError(f"rank_deficient must be 'raise' or 'fixed_rank', got {rank_deficient!r}")
    if _is_operator(xbar):
        xbar = lo.to_dense(lo.aslinop(xbar), allow_dense=True)
    if not is_array(xbar) or tuple(xbar.shape) != tuple(x.shape):
        raise ShapeError(f"ubar.shape={tuple(getattr(xbar, 'shape', ()))} but "
                         f"u.shape={tuple(x.shape)}")
    if b is None:
        raise StaleSolutionError("the cache holds no right-hand side for its u: call "
                                 "cache.solve(b) before pulling back")
    A = cache.A
    m, n = A.shape
    xp = namespace(x, b)                                      # the problem's backend
    vec = x.ndim == 1
    X = x[:, None] if vec else x
    Xb = xbar[:, None] if vec else xbar
    Xb = xp.asarray(Xb)
    B = b[:, None] if b.ndim == 1 else b
    Ainv = cache.as_operator()
    column = getattr(cache.factor, "column_rank", None)
    if column and hasattr(cache.factor, "gram_solve"):        # R only: λ = (AᴴA)⁻¹x̄, μ = Aλ
        lam = cache.solve_gram(Xb)
        mu = A @ lam
    else:
        mu = cache.solve_adjoint(Xb)                          # A⁺ᴴ x̄
        lam = Ainv @ mu                                       # A⁺A⁺ᴴ x̄
    R = B - A @ X
    Us, Vs = [R, -mu], [lam, X]
    if column is None:                                        # QR knows; LSMR: look
        column = _full_column_rank(Ainv, A, Xb, m, n)
    if not column:
        P = Xb - Ainv @ (A @ Xb)                              # null-space part of x̄
        Q = cache.solve_adjoint(X)                            # A⁺ᴴ x
        if rank_deficient == "raise" and not _full_row_rank(cache, Ainv, A, m, n, xp):
            raise RankDeficientError(
                f"solve_pullback: A ({m}×{n}) has neither full column nor full row rank, so "
                f"x = A⁺b is not differentiable there (a generic perturbation changes the rank "
                f"and A⁺ jumps); regularise (stack √α·L under A), or pass "
                f"rank_deficient='fixed_rank' for the derivative along rank-preserving "
                f"perturbations")
        Us.append(Q)
        Vs.append(P)
    dtype = np.result_type(*(u.dtype for u in Us), *(v.dtype for v in Vs))
    U = seal(xp.concatenate([xp.asarray(u).astype(dtype) for u in Us], axis=1))
    V = seal(xp.concatenate([xp.asarray(v).astype(dtype) for v in Vs], axis=1))
    return SolveCotangent(lo.LowRank(U, V), seal(mu[:, 0] if vec else mu))


def _full_column_rank(Ainv, A, Xb, m, n) -> bool:
    """m ≥ n and x̄ has no part in A's null space (an iterative cache's evidence)."""
    if m < n:
        return False
    P = np.asarray(to_numpy(Xb - Ainv @ (A @ Xb)))
    return bool(np.linalg.norm(P) <= 1e-6 * max(np.linalg.norm(np.asarray(to_numpy(Xb))),
                                                1e-300))


def _full_row_rank(cache, Ainv, A, m, n, xp=np) -> bool:
    """A A⁺ = I (QR of a wide A says so; else one random probe)."""
    known = getattr(cache.factor, "row_rank", None)
    if known is not None:
        return known
    if m > n:
        return False
    y = np.random.default_rng(0).standard_normal(m)
    back = np.asarray(to_numpy(A @ (Ainv @ xp.asarray(y))))
    return bool(np.linalg.norm(back - y) <= 1e-6 * np.linalg.norm(y))


def _solve_pullback_operator(cache, u, ubar) -> SolveCotangent:
    """ū given as an operator of U's shape (n, k): a low-rank ū = P Qᴴ costs r adjoint solves
    and keeps λ = (A⁻ᴴP) Qᴴ and Ā = −(A⁻ᴴP)(U Q)ᴴ low rank; any other operator is read as its
    n×k entries (the size of U itself) and solved column by column."""
    if u.ndim != 2 or ubar.shape != tuple(u.shape):
        raise ShapeError(f"ubar is an operator of shape {ubar.shape} but u.shape="
                         f"{tuple(u.shape)}" + (": an operator cotangent needs a matrix u "
                                                "(several right-hand sides)" if u.ndim == 1 else ""))
    if isinstance(ubar, (lo.RankOne, lo.LowRank)):
        P, Q = ubar.factors()
        LP = seal(cache.solve_adjoint(P))
        xp = namespace(u, Q)
        return SolveCotangent(lo.LowRank(seal(-LP), u @ Q if xp is np else xp.matmul(u, Q)),
                              lo.LowRank(LP, Q))
    lam = cache.solve_adjoint(lo.to_dense(ubar, allow_dense=True))
    return SolveCotangent(lo.LowRank(seal(-lam), u), lam)


def matmul_pullback(L, R, Ybar):
    """Pull Ȳ back through Y = L @ R; returns (L̄, R̄).

    Either operand may be an operator (lo / scipy / cupyx / BCOO sparse or dense) and the other a
    dense vector or matrix, so ``matmul_pullback(A, X, Ybar)`` serves A @ X and
    ``matmul_pullback(X, A, Ybar)`` serves X @ A; both may be operators too. The dense side is
    computed with sparse·dense products (the operator is never densified); the operator side
    is LowRank (RankOne for vectors) — project it with ``lo.project(Lbar, like=A)`` for the
    values' gradient (SDDMM).

    Ȳ may itself be an operator (``lo.Identity``, ``Diagonal``, ``Sparse``, ``LowRank``, any
    linops operator or scipy sparse matrix) when Y is a matrix: then both cotangents are lazy
    operators, L̄ = Ȳ Rᴴ and R̄ = Lᴴ Ȳ as products that simplify where the structure allows
    (``Identity`` drops out, a low-rank factor keeps the product low rank), and nothing of
    Y's size is formed. ∂ tr(L R) is :func:`trace_pullback`.

    Parameters
    ----------
    L, R : operator or array
        The factors of Y = L @ R: operators (``lo`` operator, scipy / cupyx sparse, jax
        BCOO/BCSR, scipy LinearOperator) or dense arrays of shape (n,) or (n, k) on the right,
        (n,) or (m, n) on the left.
    Ybar : array or operator of Y's shape
        Ȳ = ∂f/∂Y; an operator only where Y is 2-D.

    Returns
    -------
    (Lbar, Rbar)
        L̄ = Ȳ Rᴴ and R̄ = Lᴴ Ȳ. With an array Ȳ: an operator's cotangent is lazy (``RankOne``/
        ``LowRank``; a lazy product when both factors are operators), a dense factor's an array.
        With an operator Ȳ: both lazy operators.

    Raises
    ------
    ShapeError
        The shapes of L and R do not chain, ``Ybar`` is not of Y's shape, or an operator Ȳ
        meets a vector Y; the message names the shapes.
    TypeError
        ``Ybar`` is neither an array nor an operator.

    Notes
    -----
    Cost: one product with the operator's adjoint, O(nnz·k) for a sparse one; the lazy
    cotangent is O((m + n)·k) memory; its projection onto A's pattern is an SDDMM, O(nnz·k).
    An operator Ȳ costs nothing until the cotangents are applied or queried. The cotangent is
    the full gradient: dense on A's structural zeros until projected.

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

    An operator cotangent: Ȳ = I (f = tr Y) gives L̄ = Rᴴ, lazily.

    >>> R = lo.RankOne(np.ones(3), np.arange(3.0))
    >>> Abar, Rbar = matmul_pullback(A, R, lo.Identity(3))
    >>> Abar, bool(np.allclose(lo.to_dense(Abar), lo.to_dense(R).T))
    (RankOne(shape=(3, 3), dtype=float64), True)
    """
    l_op, r_op = _is_operator(L), _is_operator(R)
    L = lo.aslinop(L) if l_op else _dense_operand(L, "L")
    R = lo.aslinop(R) if r_op else _dense_operand(R, "R")
    y_shape = _chain(L, R, l_op, r_op)
    if _is_operator(Ybar):
        Ybar = lo.aslinop(Ybar)
        if len(y_shape) != 2:
            raise ShapeError(f"Ybar is an operator of shape {Ybar.shape} but Y = L @ R is a "
                             f"vector of shape {y_shape} (L.shape={tuple(L.shape)}, "
                             f"R.shape={tuple(R.shape)}): pass Ybar as an array")
        if Ybar.shape != y_shape:
            raise ShapeError(f"Ybar.shape={Ybar.shape} but Y = L @ R has shape {y_shape} "
                             f"(L.shape={tuple(L.shape)}, R.shape={tuple(R.shape)})")
        Lop = L if l_op else lo.Dense(L)
        Rop = R if r_op else lo.Dense(R)
        return Ybar @ Rop.H, Lop.H @ Ybar
    _check_ybar(Ybar, y_shape, L, R)
    if l_op and r_op:
        Y = lo.Dense(Ybar)
        return Y @ R.H, L.H @ Y
    if l_op:
        Lbar = lo.RankOne(Ybar, R) if R.ndim == 1 else lo.LowRank(Ybar, R)
        return Lbar, L.H @ Ybar
    if r_op:
        # X @ A: Ā = Xᴴ Ȳ, written as U Vᴴ with U = Xᴴ (n, m) and V = Ȳᴴ (n, m)
        xp = namespace(L, Ybar)
        if L.ndim == 1:
            return Ybar @ R.H, lo.RankOne(xp.conj(L), xp.conj(Ybar))
        return Ybar @ R.H, lo.LowRank(xp.conj(L).T, xp.conj(Ybar).T)
    # both dense: the textbook rule on 2-D views (a vector operand is one row or one column)
    xp = namespace(L, R, Ybar)
    L2 = L[None, :] if L.ndim == 1 else L
    R2 = R[:, None] if R.ndim == 1 else R
    Y2 = Ybar.reshape(L2.shape[0], R2.shape[1])
    Lbar = Y2 @ xp.conj(R2).T
    Rbar = xp.conj(L2).T @ Y2
    return Lbar.reshape(L.shape), Rbar.reshape(R.shape)


def trace_pullback(L, R, scale=1.0):
    """The cotangents of f = scale · Re tr(L R): (L̄, R̄) = (scale · Rᴴ, scale · Lᴴ), lazy.

    ``matmul_pullback(L, R, scale * lo.Identity(m))`` spelled out: ∂ tr(L R)/∂L = Rᵀ, whose
    conjugate is the cotangent in this package's convention. Neither the product L R nor any
    m×m array is formed — the results are the factors' adjoints (an ``Identity``
    cotangent drops out of the products), so their memory is at most the factors' own: a
    low-rank factor's adjoint shares its arrays, a sparse one's is its transposed pattern
    (O(nnz)), a dense array is snapshotted once. ``scale`` is the outer derivative when f is a
    function of the trace (f = φ(tr(L R)) gives scale = φ′).

    Parameters
    ----------
    L, R : operator or 2-D array
        With L R square: L of shape (m, k), R of shape (k, m).
    scale : scalar, default 1.0

    Returns
    -------
    (Lbar, Rbar)
        Operators of L's and R's shapes.

    Raises
    ------
    ShapeError
        If L R is not square or the factors do not chain.

    Notes
    -----
    To contract with a sparse L (its gradient on the stored entries), ``lo.project(Lbar,
    like=L)``: O(nnz·rank) for a low-rank R. The trace value itself is ``lo.trace(L @ R)``,
    which evaluates only the diagonal.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo
    >>> H = sp.random(500, 500, 0.01, random_state=0, format="csr")
    >>> R = lo.LowRank(np.ones((500, 2)), np.ones((500, 2)))
    >>> Hbar, Rbar = trace_pullback(H, R)                     # Hbar = Rᴴ
    >>> Hbar, lo.payload_nbytes(Hbar) == lo.payload_nbytes(R)
    (LowRank(shape=(500, 500), dtype=float64), True)
    >>> bool(np.isclose(lo.inner(Hbar, lo.aslinop(H)), lo.trace(lo.aslinop(H) @ R)))  # ⟨Rᴴ, H⟩ = tr(H R)
    True
    """
    shapes = []
    for name, X in (("L", L), ("R", R)):
        shape = tuple(getattr(X, "shape", ()))
        if len(shape) != 2:
            raise ShapeError(f"trace_pullback needs matrices: {name}.shape={shape}")
        shapes.append(shape)
    (m, k), (k2, m2) = shapes
    if k != k2 or m != m2:
        raise ShapeError(f"tr(L R) needs L (m, k) and R (k, m): L.shape={shapes[0]}, "
                         f"R.shape={shapes[1]}")
    dtype = np.result_type(*[np.dtype(getattr(X, "dtype", np.float64)) for X in (L, R)],
                           np.asarray(scale).dtype)
    I = lo.Identity(m, dtype=dtype)
    return matmul_pullback(L, R, I if scale == 1 else scale * I)


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

    if sp.issparse(x):
        return True
    mod = type(x).__module__
    return mod.startswith("cupyx.scipy.sparse") or mod.startswith("jax.experimental.sparse") \
        or mod.startswith("scipy.sparse.linalg")


def _dense_operand(X, name: str):
    """A dense factor as an array (lists are accepted); anything else is named."""
    if isinstance(X, (list, tuple)):
        X = np.asarray(X)
    if not is_array(X) or X.ndim not in (1, 2):
        raise TypeError(f"matmul_pullback: {name} must be an operator or a 1-D/2-D array, got "
                        f"{type(X).__name__} of shape {tuple(getattr(X, 'shape', ()))}")
    return X


def _chain(L, R, l_op: bool, r_op: bool) -> tuple:
    """Y's shape for Y = L @ R; ShapeError naming both when they do not chain."""
    if L.shape[-1] != R.shape[0]:
        kinds = {(True, False): "A @ X", (False, True): "X @ A"}.get((l_op, r_op), "L @ R")
        raise ShapeError(f"Y = {kinds} with L.shape={tuple(L.shape)} and R.shape="
                         f"{tuple(R.shape)}: the inner dimensions differ ({L.shape[-1]} vs "
                         f"{R.shape[0]})")
    return tuple(L.shape[:-1]) + tuple(R.shape[1:])


def _check_ybar(Ybar, shape, L, R) -> None:
    if isinstance(Ybar, (list, tuple)):
        raise TypeError("matmul_pullback: Ybar must be an array or a linops operator, got a "
                        f"{type(Ybar).__name__}; pass np.asarray(Ybar)")
    if not is_array(Ybar):
        raise TypeError(f"matmul_pullback: Ybar must be an array of Y's shape {tuple(shape)} or "
                        f"a linops operator, got {type(Ybar).__name__}")
    if tuple(Ybar.shape) != tuple(shape):
        raise ShapeError(f"Ybar.shape={tuple(Ybar.shape)} but Y = L @ R has shape {tuple(shape)} "
                         f"(L.shape={tuple(L.shape)}, R.shape={tuple(R.shape)})")
