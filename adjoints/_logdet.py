"""Pullbacks of log-determinants and of entries of A⁻¹, as lazy operators.

log|det A| has the gradient Ā = A⁻ᴴ (for real f, df = Re tr(A⁻¹dA) = Re⟨A⁻ᴴ, dA⟩_F): a dense n×n
matrix of which a sparse problem needs the entries on A's pattern only. :func:`logdet_pullback`
returns it as ``solvers.Inverse`` tied to the cache, whose entries come by selected inversion
of the factor the cache already holds: ``fam.pullback(Ā)`` gives ∂ log|det K(θ)|/∂θᵢ =
Re tr(K⁻¹Kᵢ) for every i in about the time of one factorization, without a single solve.

:func:`inv_sample_pullback` pulls back a few entries of A⁻¹ (a local density of states, a
Green's function element): Ā = −A⁻ᴴ Ȳ A⁻ᴴ is of rank at most the number of distinct columns
asked for, and costs two solves per such column.
"""

from __future__ import annotations

import numpy as np

import linops as lo
from linops.internals import ShapeError, seal, to_numpy
from solvers import CG, LinearCache, LinearProblem, init, inverse


def logdet_pullback(cache: LinearCache, cotangent=1.0) -> lo.LinearOperator:
    """Ā = c̄·A⁻ᴴ: the gradient of ``c̄·log|det A|`` (c̄ = ``cotangent``), lazily, from the cache.

    Memory O(1) now; its entries are computed by selected inversion of the cache's factor when
    asked for (``lo.project(G, like=A)``, ``fam.pullback(G)``, ``lo.diagonal``, ``lo.sample``,
    ``lo.inner(G, K)`` with a sparse K): O(nnz(L)) memory, about two factorizations' flops, no
    solve and no factorization. Applying it is one adjoint solve per call.

    Parameters
    ----------
    cache : solvers.LinearCache
        A factorized A (CHOLMOD, SuperLU, dense; see ``solvers.selected_inverse``). Other
        caches still apply the operator, but answer entries by one solve per distinct column.
    cotangent : float
        c̄ = ∂f/∂ log|det A| (default 1: the gradient of log|det A| itself).

    Returns
    -------
    lo.LinearOperator
        ``solvers.Inverse`` with ``op='H'`` (scaled by c̄ when c̄ ≠ 1).

    Raises
    ------
    StaleSolutionError
        When the operator is used after ``cache.update`` replaced A.

    Notes
    -----
    Complex A: log|det A| is real and df = Re tr(A⁻¹dA), so Ā = A⁻ᴴ in the convention of
    ``adjoints`` (df = Re⟨Ā, dA⟩_F); for a real θ, ``fam.pullback(Ā)`` returns
    Re tr(K⁻¹Kᵢ). The phase of det A has the derivative Im tr(A⁻¹dA), the imaginary part of
    ``fam.pullback(Ā, real=False)``.

    Examples
    --------
    >>> import numpy as np, linops as lo, solvers as sv, adjoints as ad
    >>> fam, _ = lo.testing.poisson_family(3)
    >>> theta = np.linspace(1.0, 2.0, fam.n_params)
    >>> cache = sv.init(sv.LinearProblem(fam(theta)), sv.LU())
    >>> g = fam.pullback(ad.logdet_pullback(cache))          # tr(K⁻¹ Kᵢ), no solve
    >>> K = fam(theta).to_scipy().toarray()
    >>> Ki = [fam(np.eye(fam.n_params)[i]).to_scipy().toarray() for i in range(fam.n_params)]
    >>> bool(np.allclose(g, [np.trace(np.linalg.solve(K, k)) for k in Ki]))
    True
    >>> cache.stats.solves, cache.stats.adjoint_solves, cache.stats.factorizations
    (0, 0, 1)
    """
    G = inverse(cache, adjoint=True)
    return G if np.isscalar(cotangent) and cotangent == 1 else np.conj(cotangent) * G


def inv_sample_pullback(cache: LinearCache, rows, cols, vbar) -> lo.LinearOperator:
    """Pull v̄ back through v = A⁻¹[rows, cols] (entries of the inverse): Ā = −A⁻ᴴ Ȳ A⁻ᴴ with
    Ȳ = Σₖ v̄ₖ e_{rₖ} e_{cₖ}ᵀ, as a LowRank of rank = the number of distinct columns.

    Cost: one forward and one adjoint solve per distinct column in ``cols`` (block solves),
    O(n·k) memory; no factorization. ``fam.pullback`` of the result is O(nnz·k).

    Parameters
    ----------
    cache : solvers.LinearCache
    rows, cols : 1-D integer arrays
        The positions, as for ``lo.sample``.
    vbar : array of len(rows)
        v̄ = ∂f/∂v (for complex v: the cotangent with df = Re Σ conj(v̄ₖ) dvₖ).

    Returns
    -------
    lo.LowRank

    Raises
    ------
    ShapeError
        rows, cols and vbar not 1-D of one length, or out of range.

    Examples
    --------
    >>> import numpy as np, linops as lo, solvers as sv, adjoints as ad
    >>> A = np.array([[4.0, 1.0], [2.0, 3.0]])
    >>> cache = sv.init(sv.LinearProblem(A))
    >>> G = ad.inv_sample_pullback(cache, [0], [1], [1.0])      # f = (A⁻¹)₀₁
    >>> Z = np.linalg.inv(A)
    >>> bool(np.allclose(lo.to_dense(G), -np.outer(Z[0, :], Z[:, 1])))
    True
    """
    rows = np.asarray(to_numpy(rows), dtype=np.int64)
    cols = np.asarray(to_numpy(cols), dtype=np.int64)
    vbar = np.asarray(to_numpy(vbar))
    n = cache.A.shape[0]
    if not (rows.ndim == cols.ndim == vbar.ndim == 1 and rows.shape == cols.shape == vbar.shape):
        raise ShapeError(f"inv_sample_pullback: rows.shape={rows.shape}, cols.shape={cols.shape} "
                         f"and vbar.shape={vbar.shape} must be 1-D of one length")
    if rows.size and (min(rows.min(), cols.min()) < 0 or max(rows.max(), cols.max()) >= n):
        raise ShapeError(f"inv_sample_pullback: positions out of range [0, {n})")
    ucols, j = np.unique(cols, return_inverse=True)
    dtype = np.result_type(cache.A.dtype, vbar.dtype, np.float32)
    Y = np.zeros((n, ucols.size), dtype=dtype)   # Ȳ E_C: column k holds v̄ at its rows
    np.add.at(Y, (rows, j), vbar)
    E = np.zeros((n, ucols.size), dtype=dtype)
    E[ucols, np.arange(ucols.size)] = 1
    # Ā = −A⁻ᴴ (Ȳ E_C)(E_Cᵀ A⁻ᴴ) = LowRank(−A⁻ᴴ Ȳ E_C, A⁻¹ E_C)
    U = -cache.solve_adjoint(Y)
    V = cache.as_operator() @ E
    return lo.LowRank(seal(np.asarray(U)), seal(np.asarray(V)))


class EstimatedCotangent:
    """The Hutchinson estimate of ∂ log det A/∂A = A⁻ᴴ from the probes of a
    ``solvers.LogDetEstimate``: Ā ≈ (1/p) Σⱼ (A⁻ᴴzⱼ) zⱼᴴ, with its standard error.

    Attributes
    ----------
    G : lo.LowRank
        The mean cotangent (rank = probes), O(n·probes) memory; an estimate, not A⁻ᴴ.
    W, Z : ndarray (n, probes)
        A⁻ᴴzⱼ and the probes zⱼ.

    Examples
    --------
    >>> import numpy as np, linops as lo, solvers as sv, adjoints as ad
    >>> fam, _ = lo.testing.poisson_family(6)
    >>> K = fam(np.ones(fam.n_params))
    >>> g = ad.logdet_estimate_pullback(sv.logdet_estimate(K, probes=200, seed=2))
    >>> mean, stderr = g.pullback(fam)
    >>> exact = fam.pullback(ad.logdet_pullback(sv.init(sv.LinearProblem(K), sv.LU())))
    >>> bool(np.mean(np.abs(mean - exact) <= 4 * stderr) > 0.9)
    True
    """

    def __init__(self, W, Z):
        self.W, self.Z = W, Z
        p = Z.shape[1]
        self.G = lo.LowRank(seal(W / p), Z)

    def pullback(self, fam):
        """(θ̄, stderr): the estimated θ-gradient Re tr(K⁻¹Kᵢ) of a family and the standard
        error of each entry (from the per-probe pullbacks, O(nnz) each)."""
        p = self.Z.shape[1]
        per = np.stack([fam.pullback(lo.RankOne(self.W[:, j].copy(), self.Z[:, j].copy()))
                        for j in range(p)])
        return per.mean(axis=0), per.std(axis=0, ddof=1) / np.sqrt(p)

    def __repr__(self) -> str:
        n, p = self.Z.shape
        return f"EstimatedCotangent(n={n}, probes={p}; an estimate of A⁻ᴴ, not exact)"


def logdet_estimate_pullback(est, alg=None) -> EstimatedCotangent:
    """The stochastic gradient of log det A that goes with ``sv.logdet_estimate``: Hutchinson's
    tr(A⁻¹dA) ≈ (1/p) Σ zⱼᴴ A⁻¹ dA zⱼ on the estimate's probes, with standard errors.

    Parameters
    ----------
    est : solvers.LogDetEstimate
    alg : solvers algorithm, optional
        For the p adjoint solves A⁻ᴴzⱼ (one block); default ``sv.CG(rtol=1e-10)`` (products
        only, as the estimate itself); a preconditioned CG for harder operators.

    Returns
    -------
    EstimatedCotangent
        ``.G`` the mean cotangent (LowRank), ``.pullback(fam)`` → (θ̄, stderr).

    Notes
    -----
    Cost: one block of p solves (a Krylov run per probe), O(n·p) memory; each θ-gradient entry's
    standard error comes from the p per-probe values. Never exact: use ``logdet_pullback`` on a
    factorized cache for the exact gradient.

    Examples
    --------
    >>> import numpy as np, solvers as sv, adjoints as ad
    >>> A = np.diag(np.linspace(1.0, 2.0, 50))
    >>> g = ad.logdet_estimate_pullback(sv.logdet_estimate(A, probes=16))
    >>> g
    EstimatedCotangent(n=50, probes=16; an estimate of A⁻ᴴ, not exact)
    """
    cache = init(LinearProblem(est.A, hermitian=True, posdef=True),
                 alg if alg is not None else CG(rtol=1e-10))
    Z = np.asarray(est.probes)
    W = np.asarray(cache.solve_adjoint(Z))
    return EstimatedCotangent(W, Z)
