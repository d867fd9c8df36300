"""Results: of a solve — the :class:`Status` enum, the cache's :class:`CacheStats` counters and
the :class:`Solution` record that ``sv.solve`` returns — and of the factor queries —
:class:`LogDet`, :class:`SelectedInverse`, :class:`Eigenpairs`, :class:`LogDetEstimate`.

A status says how a solve ended and what to do next; ``SUCCESS`` and ``ACCURACY_LIMIT`` carry a
usable result, every other member is a failure (raised as the matching ``SolveError`` subclass,
or returned with ``throw=False``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from linops.internals import ShapeError

from ._factors import kernels

class Status(enum.Enum):
    """How a solve ended. ``SUCCESS`` and ``ACCURACY_LIMIT`` are results; the rest are failures
    (raised as the matching :class:`SolveError`, or returned with ``throw=False``).

    Each member's value is its message, which says what to do next (``status.message``).

    ===============  ===========================================================================
    SUCCESS          solved; for iterative methods the TRUE residual ‖b − A u‖ met the tolerance
    ACCURACY_LIMIT   accepted although above the tolerance: the componentwise backward error is
                     at the rounding level of the precision AND the iterate settled (another run
                     does not improve it); see ``solvers._acceptance``
    SINGULAR         a zero or tiny pivot (``pivot_rtol``), or a matrix that is not positive
                     definite for Cholesky; raised as :class:`SingularMatrixError`
    NOT_HERMITIAN    Cholesky or ``Pardiso(posdef=True)`` found A − Aᴴ too large;
                     :class:`NotHermitianError`
    MAX_ITERATIONS   an iterative method ran out of ``maxiter``; :class:`ConvergenceError`
    STAGNATION       it claimed convergence, the true residual disagrees and restarts do not
                     help; :class:`ConvergenceError`
    BREAKDOWN        a Krylov breakdown (zero inner product, an indefinite preconditioner);
                     :class:`ConvergenceError` (and the default of a bare :class:`SolveError`)
    NONFINITE        the solve produced NaN/Inf (singular or badly scaled A)
    NONFINITE_INPUT  A or the right-hand side holds NaN/Inf; :class:`NonFiniteInputError`
    ===============  ===========================================================================

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> sol = sv.solve(sv.LinearProblem(np.array([[1.0, 2.0], [2.0, 4.0]]), [1.0, 1.0]),
    ...                throw=False)
    >>> sol.status.name, sol.status.ok, sol.u is None
    ('SINGULAR', False, True)
    >>> sol.status.message.split(";")[0]
    'the matrix is singular to working precision (zero or tiny pivot)'
    >>> [s.name for s in sv.Status if s.ok]
    ['SUCCESS', 'ACCURACY_LIMIT']
    """

    SUCCESS = "solved to the requested tolerance"
    ACCURACY_LIMIT = ("accepted at the limit of attainable accuracy: the true residual is above "
                      "the requested tolerance, but every equation is satisfied to the rounding "
                      "level of this precision (componentwise backward error) and another run "
                      "does not improve the iterate; ask for a looser rtol, or use float64 / a "
                      "better-conditioned formulation for more digits")
    SINGULAR = ("the matrix is singular to working precision (zero or tiny pivot); check boundary "
                "conditions / constraints (e.g. a pure-Neumann problem needs a fixed dof), or "
                "regularise")
    NOT_HERMITIAN = ("the algorithm needs a Hermitian matrix and A is not one; use sv.LU() or "
                     "sv.GMRES() (hints such as posdef=True never switch this check off)")
    MAX_ITERATIONS = ("the iterative method did not reach the tolerance within maxiter; add or "
                      "strengthen a preconditioner (AMG, ILU), raise maxiter, or use a direct "
                      "solver (LU, Cholesky)")
    STAGNATION = ("the iterative method stopped improving the true residual above both the "
                  "tolerance and the attainable accuracy (its own residual estimate drifted "
                  "away from the true one); check that the preconditioner matches the method "
                  "(CG needs a Hermitian positive definite M), or use GMRES or a direct solver")
    BREAKDOWN = ("the Krylov method broke down (illegal input or a zero inner product); the "
                 "matrix may be indefinite or singular: try GMRES or a direct solver")
    NONFINITE = "the solve produced NaN/Inf; the matrix is singular or badly scaled"
    NONFINITE_INPUT = "the input (A or the right-hand side) contains NaN/Inf"

    @property
    def message(self) -> str:
        """What happened and what to do next (the member's value)."""
        return self.value

    @property
    def ok(self) -> bool:
        """True for the statuses that carry a usable result."""
        return self in (Status.SUCCESS, Status.ACCURACY_LIMIT)


@dataclass
class CacheStats:
    """Counters of one cache (for tests and benchmarks); ``sv.Stats`` is a deprecated alias.

    The object is the cache's own, updated in place: ``sol.stats`` and ``sol.cache.stats`` are
    the same object and keep counting as the cache is reused. They are how the library proves
    "factorize once": a pullback adds one ``adjoint_solves`` and no ``factorizations``.

    Attributes
    ----------
    factorizations : int
        Full setups: ``init`` and every ``update`` that could not reuse the previous structure
        (another pattern, another dtype kind or precision, a factor whose requirements the new
        A does not meet).
    numeric_refactorizations : int
        Numeric factorizations on a kept symbolic analysis: ``update`` with the same structure,
        and ``init(prob, alg, like=other)``.
    symbolic_analyses : int
        Symbolic analyses this cache ran (fill-reducing ordering and elimination tree: SuperLU's
        COLAMD, CHOLMOD's analyze, PARDISO's phase 11; an AMG aggregation); 0 for dense
        factorizations and for a cache made with ``like=``.
    fallbacks : int
        Setups whose symmetric/definite factorization found A indefinite and that fell back to
        the general one (``sv.Auto``): one more factorization each, counted in
        ``factorizations`` once.
    tuning_factorizations : int
        Factorizations ``sv.Auto`` made to time candidate engines on this pattern and then
        dropped (at most one per candidate per pattern; not in ``factorizations``).
    solves, adjoint_solves, transpose_solves : int
        Successful calls of ``solve``, ``solve_adjoint``, ``solve_transpose`` (a call with
        k right-hand sides counts once).
    columns : int
        Right-hand sides (columns) those calls solved, every mode together: a call with k
        columns adds k. Solves nobody called by name count here too: the columns that
        ``lo.sample``/``lo.diagonal``/``lo.project`` of ``sv.inverse(cache)`` solve for
        (positions outside the selected inverse, or a cache without one), the block solves of
        the pullbacks.
    iterations : int
        Krylov (or AMG cycle) iterations over all solves, failed ones and acceptance checks
        included; 0 for direct methods.
    setup_seconds, solve_seconds : float
        Wall time spent in setups and in solves.

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> cache = sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]])), sv.LU())
    >>> _ = cache.solve(np.ones(2)), cache.solve_adjoint(np.ones(2))
    >>> s = cache.stats
    >>> s.factorizations, s.solves, s.adjoint_solves, s.iterations
    (1, 1, 1, 0)
    """

    factorizations: int = 0
    numeric_refactorizations: int = 0
    symbolic_analyses: int = 0
    fallbacks: int = 0
    tuning_factorizations: int = 0
    solves: int = 0
    adjoint_solves: int = 0
    transpose_solves: int = 0
    columns: int = 0
    iterations: int = 0
    setup_seconds: float = 0.0
    solve_seconds: float = 0.0


@dataclass(frozen=True)
class Solution:
    """Result of ``sv.solve``.

    Attributes
    ----------
    u : array of shape b.shape, or None
        Read-only, in the dtype ``result_type(A.dtype, b.dtype, float32)``. With
        ``throw=False`` and an iterative method that failed (``MAX_ITERATIONS``,
        ``STAGNATION``, ``BREAKDOWN``), ``u`` is the LAST ITERATE, as scipy, lineax and
        LinearSolve.jl return it (inexact Newton methods use it) — check ``status.ok`` before
        you trust it; None when there is no iterate (a failed factorization, NaN/Inf).
    status : Status
        ``SUCCESS``, ``ACCURACY_LIMIT``, or with ``throw=False`` the failure.
    stats : CacheStats
        The cache's counters (the same object as ``cache.stats``: it keeps counting).
    cache : LinearCache or None
        Reuse it for more right-hand sides, adjoint solves and pullbacks; None only when the
        factorization itself failed.
    generation : int
        ``cache.generation`` when ``u`` was computed; see :attr:`current`.

    Examples
    --------
    >>> import numpy as np, solvers as sv, adjoints as ad
    >>> sol = sv.solve(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), [1.0, 2.0]))
    >>> sol.u.round(3).tolist(), sol.status.name, sol.current
    ([0.1, 0.6], 'SUCCESS', True)
    >>> ad.solve_pullback(sol, np.ones(2)).b.round(3).tolist()   # λ = A⁻ᴴ 1, same factors
    [0.1, 0.3]
    >>> sol.stats.factorizations, sol.stats.adjoint_solves
    (1, 1)
    """

    u: Any
    status: Status
    stats: CacheStats
    cache: Any
    generation: int = 0

    @property
    def current(self) -> bool:
        """True while the cache still holds the A this solution was computed with.

        False after ``sol.cache.update(A=...)``; pullbacks of a solution that is not current
        raise ``StaleSolutionError``. (A new b alone keeps it current: ``u`` still belongs to
        the cache's A, and pullbacks need only A.)
        """
        return self.cache is not None and self.cache.generation == self.generation


# ----- what the factor queries return ------------------------------------------------------
class LogDet(NamedTuple):
    """(sign, logabsdet) of a determinant, as ``numpy.linalg.slogdet`` returns it.

    det A = sign · exp(logabsdet). ``sign`` is ±1.0 for real A and a complex number of modulus 1
    for complex A; ``logabsdet`` = log|det A| is a float. For a positive definite A,
    ``sign == 1.0`` and ``logabsdet`` is log det A.

    Attributes
    ----------
    sign : float or complex
    logabsdet : float

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> cache = sv.init(sv.LinearProblem(np.array([[0.0, 2.0], [3.0, 1.0]])), sv.LU())
    >>> sign, logabsdet = cache.logdet()                  # det = −6
    >>> float(sign), round(float(np.exp(logabsdet)), 12)
    (-1.0, 6.0)
    """

    sign: float | complex
    logabsdet: float


class SelectedInverse:
    """The entries of A⁻¹ on the filled pattern of A's factorization (from :func:`selected_inverse`).

    Holds Z = (Pr A Pc)⁻¹ in the factor's supernodal layout and the two permutations. Queries
    are in A's own indices. Memory: ``nbytes`` (one copy of the factor's values plus its
    integer structure); no n×n array unless the factorization was dense.

    Attributes
    ----------
    shape : (n, n)
    dtype : numpy dtype of the entries (the factor's precision)
    engine : str
        Which factorization it came from ('CHOLMOD', 'SuperLU', 'dense').
    nnz : int
        Entries held (the filled pattern's, counted once per stored slot).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> A = sp.csr_array(np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]]))
    >>> S = sv.selected_inverse(sv.init(sv.LinearProblem(A), sv.LU()))
    >>> bool(np.allclose(S.diagonal(), np.diag(np.linalg.inv(A.toarray()))))
    True
    """

    def __init__(self, engine, shape, dtype, layout, XL, XU, hermitian, irp, icp):
        self.engine, self.shape, self.dtype = engine, shape, np.dtype(dtype)
        self._layout = layout  # (sup, rp, rows, xp, c2s)
        self._XL, self._XU, self._hermitian = XL, XU, hermitian
        self._irp, self._icp = irp, icp  # A⁻¹[r, c] = Z[icp[r], irp[c]]

    @property
    def nnz(self) -> int:
        """Entries held: the slots of the supernodal layout (the filled pattern, padded)."""
        return int(self._XL.size)

    @property
    def nbytes(self) -> int:
        """Bytes of every array held (values, structure, permutations)."""
        arrays = [*self._layout, self._XL, self._XU, self._irp, self._icp]
        return int(sum(a.nbytes for a in arrays))

    def __repr__(self) -> str:
        return (f"SelectedInverse({self.engine}, n={self.shape[0]}, nnz={self.nnz}, "
                f"dtype={self.dtype.name})")

    def lookup(self, rows, cols):
        """(values, found): A⁻¹[rows[k], cols[k]] where the filled pattern holds it.

        ``found[k]`` is False (and ``values[k]`` 0) outside the pattern; every position of A's
        pattern (its explicit zeros included), of its transpose and of the diagonal is found,
        whatever rows the factorization exchanged. O(log nnz) per position. Positions must be
        integers in [0, n), as for ``lo.sample`` (no negative indices): ShapeError otherwise.
        """
        rows, cols = self._positions(rows, cols)
        out = np.zeros(rows.shape[0], dtype=self._XL.dtype)
        found = np.zeros(rows.shape[0], dtype=np.bool_)
        sup, rp, rw, xp, c2s = self._layout
        kernels().lookup(self._icp[rows], self._irp[cols], sup, rp, rw, xp, c2s, self._XL, self._XU,
                 self._hermitian, out, found)
        return out, found

    def _positions(self, rows, cols):
        """rows, cols as int64 arrays, checked as ``lo.sample`` checks them."""
        rows, cols = np.asarray(rows), np.asarray(cols)
        if rows.shape != cols.shape or rows.ndim != 1:
            raise ShapeError(f"SelectedInverse: rows and cols must be 1-D of equal length, got "
                             f"rows.shape={rows.shape} and cols.shape={cols.shape}")
        n = self.shape[0]
        for name, ix in (("rows", rows), ("cols", cols)):
            if ix.size == 0:
                continue
            if not np.issubdtype(ix.dtype, np.integer):
                raise ShapeError(f"SelectedInverse: {name} must be integers, got dtype={ix.dtype}")
            lo_, hi = int(ix.min()), int(ix.max())
            if lo_ < 0 or hi >= n:
                raise ShapeError(f"SelectedInverse: {name} out of range [0, {n}) for shape="
                                 f"{self.shape}: min={lo_}, max={hi}")
        return rows.astype(np.int64, copy=False), cols.astype(np.int64, copy=False)

    def sample(self, rows, cols):
        """A⁻¹[rows[k], cols[k]] as a 1-D array; ValueError naming a position outside the
        filled pattern (``lo.sample`` of the lazy inverse solves for those instead), ShapeError
        for positions outside [0, n) (as ``lo.sample``)."""
        out, found = self.lookup(rows, cols)
        if not found.all():
            k = int(np.flatnonzero(~found)[0])
            raise ValueError(f"A⁻¹[{int(np.asarray(rows)[k])}, {int(np.asarray(cols)[k])}] is "
                             f"outside the filled pattern of the factorization ({int((~found).sum())} "
                             f"such positions); sample the lazy inverse (lo.sample), which solves "
                             f"for those columns")
        return out

    def diagonal(self):
        """diag(A⁻¹), O(n)."""
        i = np.arange(self.shape[0])
        return self.sample(i, i)


@dataclass(frozen=True)
class Eigenpairs:
    """Eigenvalues (ascending) and orthonormal eigenvectors from :func:`eigsh`.

    Attributes
    ----------
    values : ndarray (k,), real
    vectors : ndarray (n, k)
        Column i belongs to ``values[i]``; read-only. Orthonormal, or M-orthonormal
        (VᴴMV = I) for a generalized problem.
    A : lo.LinearOperator
        The operator they belong to (a snapshot): K of K v = λ M v.
    sigma : float or None
        The shift, or None for Lanczos on A.
    cache : LinearCache or None
        The factorization of A − σI (K − σM; None without σ); pullbacks reuse it.
    residuals : ndarray (k,)
        ‖A vᵢ − λᵢ vᵢ‖₂ (‖K vᵢ − λᵢ M vᵢ‖₂).
    M : lo.LinearOperator or None
        The mass matrix of a generalized problem.
    beyond : float or None
        The nearest eigenvalue NOT returned (in the order ``which`` asked for), computed along;
        None when k + 1 = n or ``which='BE'``. A returned eigenvalue equal to it belongs to a
        cluster that was cut in two: the pullbacks refuse it by name.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> A = sp.diags([1.0, 2.0, 3.0, 4.0, 5.0]).tocsr()
    >>> e = sv.eigsh(A, 2, sigma=0.0)
    >>> e.values.round(12).tolist(), e.cache.stats.factorizations
    ([1.0, 2.0], 1)
    """

    values: Any
    vectors: Any
    A: Any
    sigma: float | None
    cache: Any
    residuals: Any
    M: Any = None
    beyond: float | None = None


@dataclass(frozen=True)
class LogDetEstimate:
    """A Monte-Carlo estimate of log det A (Hermitian positive definite A), from
    :func:`logdet_estimate`, with an error bar that includes the quadrature error.

    Attributes
    ----------
    value : float
        The estimate of log det A (mean over the probes of the middle of each probe's
        Gauss / Gauss–Radau bracket).
    stderr : float
        The error bar: √(mc_stderr² + bias_bound²). value ± 2·stderr is about a 95 % interval
        (the bias is bounded, not random; the Monte-Carlo error of the mean of p probes follows
        Student's t: ±2 covers 94.6 % at p = 32, 93.6 % at p = 16; :meth:`interval` is exact
        to that).
    samples : ndarray (probes,)
        The per-probe estimates (the middles of the brackets).
    probes : ndarray (n, probes)
        The Rademacher vectors used (``adjoints.logdet_estimate_pullback`` reuses them).
    steps : int
        Lanczos steps per probe.
    quadrature_change : float
        max over probes of |quadrature(steps) − quadrature(steps − 1)|: a diagnostic only
        (small does NOT mean converged on an ill-conditioned A; ``bias_bound`` is the bound).
    A : lo.LinearOperator
    mc_stderr : float
        The Monte-Carlo standard error alone (sample standard deviation / √probes).
    bias_bound : float
        The bound of the quadrature error of ``value`` (mean half-width of the brackets, plus
        the rounding of the quadratures).
    lower_bound : float
        The node a ≤ λ_min(A) of the Gauss–Radau rules (given, or resolved by Lanczos).

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> A = 3 * np.eye(100) + np.eye(100, k=1) + np.eye(100, k=-1)
    >>> est = sv.logdet_estimate(A, probes=64, seed=1)
    >>> exact = float(np.linalg.slogdet(A)[1])
    >>> bool(abs(est.value - exact) < 4 * est.stderr), est.stderr > 0
    (True, True)
    """

    value: float
    stderr: float
    samples: Any
    probes: Any
    steps: int
    quadrature_change: float
    A: Any
    mc_stderr: float = float("nan")
    bias_bound: float = float("nan")
    lower_bound: float = float("nan")

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """(low, high) covering log det A with probability about ``level``: value ∓ (t·mc_stderr
        + bias_bound), t the quantile of Student's t with probes − 1 degrees of freedom (the
        mean of few probes), the bias bound added in full.

        >>> import numpy as np, solvers as sv
        >>> est = sv.logdet_estimate(np.diag(np.linspace(1.0, 2.0, 50)), probes=16)
        >>> low, high = est.interval(0.99)
        >>> bool(low < float(np.sum(np.log(np.linspace(1.0, 2.0, 50)))) < high)
        True
        """
        from scipy.stats import t as student  # scipy.stats: slow to import, rarely needed

        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), got {level!r}")
        q = float(student.ppf(0.5 + level / 2, self.samples.size - 1))
        half = q * self.mc_stderr + self.bias_bound
        return self.value - half, self.value + half

    def __repr__(self) -> str:
        return (f"LogDetEstimate(value={self.value:.6g} ± {self.stderr:.2g} (1 s.e.: Monte Carlo "
                f"{self.mc_stderr:.2g}, quadrature ≤ {self.bias_bound:.2g}), "
                f"probes={self.samples.size}, steps={self.steps}; an estimate, not exact)")
