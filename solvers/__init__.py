"""solvers: LinearProblem -> init (factorize once) -> solve / solve_adjoint / solve_transpose.

A problem is A and b. ``init`` does the expensive part once — a factorization, or a
preconditioner for an iterative method — and returns a cache that solves with A, with Aᴴ (the
solve a gradient needs) and with Aᵀ, all from the SAME factors; counters prove it. ``solve``
is ``init`` plus one solve, with the algorithm picked for you by default. Every operator of
``linops`` (dense, sparse, diagonal, low-rank sums, matrix-free) and every array backend
(numpy/scipy, cupy, jax) goes through the same calls.

Problem and results
-------------------
LinearProblem(A, b, hermitian=, posdef=,   A u = b; A and b are snapshotted; hints for Auto;
              asks=)                       asks: "logdet", "selected_inverse" beyond solves
LeastSquares(A, b)                         min ‖A u − b‖ for an m×n A (a LinearProblem with
                                           ``least_squares=True``): QR or LSMR
init(prob, alg=None, like=None)            factorize once -> LinearCache (``like=``: reuse
                                           another cache's symbolic analysis)
solve(prob, alg=None, throw=True)          init + one solve -> Solution
Solution                                   u, status, stats, cache, generation, current
LinearCache                                solve(b), solve_adjoint(c), solve_transpose(c),
                                           update(A=, b=), as_operator(), logdet(), u, kind,
                                           info (what was chosen and why), generation
CacheStats                                 factorizations, numeric_refactorizations,
                                           symbolic_analyses, fallbacks, tuning_factorizations,
                                           solves, adjoint_solves, transpose_solves, columns,
                                           iterations, times (``Stats``: its deprecated old name)
analyses, AnalysisStats                   symbolic analyses kept per pattern across caches
                                           (CHOLMOD, PARDISO): a second one-shot solve of a
                                           pattern factorizes numerically only; ``.stats()``,
                                           ``.clear()``, ``.limit(entries=, nbytes=)``
Status                                     SUCCESS, ACCURACY_LIMIT, SINGULAR, NOT_HERMITIAN,
                                           MAX_ITERATIONS, STAGNATION, BREAKDOWN, NONFINITE,
                                           NONFINITE_INPUT (``status.ok``, ``status.message``)

Algorithms (pass as ``alg``; or a name: ``"lu"``, ``"cg"``, ...)
----------------------------------------------------------------
Auto(tune=, profile=)      the default: picks from A's structure and the hints (see its table),
                           measuring the engines where a problem is solved more than once
Profile                    Auto's measurements: per pattern, and the machine profile that
                           ``python -m linops tune`` writes (``Profile.load()``)
LU(pivot_rtol=,            LAPACK dense / SuperLU sparse (symmetric mode for structurally
   symmetric_mode=)        symmetric patterns); any square A
Cholesky(pivot_rtol=)      Hermitian positive definite; dense or CHOLMOD (cholmod_available())
CG, MINRES                 Krylov, Hermitian (positive definite / indefinite) A
GMRES, BiCGStab            Krylov, general A (``rtol``, ``atol``, ``maxiter``, ``x0``,
                           ``precond``)
Woodbury(base)             B + U Vᴴ from B's factorization and a k×k system
DiagonalSolve()            Diagonal / Identity: division
Pardiso(posdef=)           Intel MKL PARDISO (optional: ``pip install "linops[pardiso]"``)
QR()                       least squares (and square systems): SuiteSparseQR sparse
                           (``pip install "linops[qr]"``), LAPACK dense; min-norm for m < n
LSMR(rtol=, solver=)       iterative least squares (scipy lsmr/lsqr), min-norm for any rank
KLU(pivot_rtol=, ordering=)  SuiteSparse KLU, compiled in where SuiteSparse is installed
PETSc(ksp_type=, pc_type=)  PETSc KSP + PC over MPI, with checked transposed solves (optional)
cholmod_available()        whether sparse Cholesky (scikit-sparse) is installed
native_available()         whether the compiled extension (KLU, native JAX solves) is built
show_config()              the algorithm table, generated from the registry (what runs here)

Preconditioners (``precond=`` of a Krylov method)
-------------------------------------------------
AMG(kind="sa" | "rs")      algebraic multigrid (pyamg; numpy only); also a solver of its own
ILU(drop_tol, fill_factor)  incomplete LU (numpy, cupy)
Jacobi()                   diag(A)⁻¹ (every backend, lazy operators too)

Log-determinants, selected inversion, eigenvalues
-------------------------------------------------
cache.logdet() -> LogDet          (sign, log|det A|) from the cache's factors, no new one
selected_inverse(cache)           SelectedInverse: A⁻¹ on the factor's filled pattern
inverse(cache), Inverse           A⁻¹ / A⁻ᴴ lazily; lo.sample/project/diagonal by selected inversion
eigsh(A, k, sigma=) -> Eigenpairs  Hermitian eigenpairs by shift-invert on one factorization;
                                  M= for K v = λ M v (M-orthonormal vectors)
buckling(K, KG, k) -> Eigenpairs  load factors of (K + λK_G) v = 0 (eigsh with M = −K_G)
logdet_estimate(A) -> LogDetEstimate  matrix-free A: SLQ estimate of log det, with its stderr

Errors and warnings
-------------------
SolveError                 base of every solve failure (``status`` says which); ``throw=False``
                           returns these as a Status instead
SingularMatrixError        a zero or tiny pivot
RankDeficientError         least squares: A without full column (row) rank for QR (a
                           SingularMatrixError)
NotPositiveDefiniteError   Cholesky of a Hermitian indefinite A (a SingularMatrixError)
NotHermitianError          Cholesky of a non-Hermitian A (hints never switch the check off)
NonFiniteInputError        NaN/Inf in A or a right-hand side
ConvergenceError           an iterative method missed its tolerance (``history``, ``iterate``)
StaleSolutionError         a Solution used after ``update`` replaced its A
ClosedCacheError           a cache used after ``cache.close()`` released its factorization
HintWarning                a hint that does not hold; the solve used LU instead
BackendNotSupported        a method or dtype the arrays' backend lacks (names the alternative)
TransposeNotSupportedError  a PETSc combination whose transposed solve is known to be wrong

Contract
--------
Every algorithm is a ``solvers._contract.Algorithm`` and its state a ``Factor``; ``init``,
``update`` and ``init(..., like=)`` go through ONE validation path (dtype, finiteness, the
algorithm's requirements such as a Hermitian A, the singularity checks), so an update is never
a path with fewer checks. Algorithms are registered (``solvers._registry``): the names above,
``Auto``, ``adjoints.jax`` and ``show_config()`` read that table.

Notes
-----
State and snapshots: A and b are snapshotted when the problem is built, so editing your arrays
afterwards never reaches a cache; change A with ``cache.update(A=...)`` (a numeric
refactorization on the same pattern), which also bumps ``cache.generation`` so that old
solutions are refused by pullbacks. (This replaced the ``check_mutation=`` option of earlier
versions.) A failure leaves the cache as it was. Iterative results are accepted on the true
residual only (``solvers._acceptance``).

Examples
--------
>>> import numpy as np, solvers as sv
>>> cache = sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]])), sv.LU())
>>> cache.solve(np.array([1.0, 2.0])).round(3).tolist(), cache.stats.factorizations
([0.1, 0.6], 1)
>>> cache.solve_adjoint(np.array([1.0, 1.0])).round(3).tolist()    # Aᴴ λ = c, same factors
[0.1, 0.3]
>>> sol = sv.solve(sv.LinearProblem(np.array([[4.0, 1.0], [1.0, 3.0]]), [1.0, 2.0], posdef=True))
>>> sol.cache.kind, sol.status.name, sol.u.round(4).tolist()
('dense Cholesky', 'SUCCESS', [0.0909, 0.6364])
"""

import warnings

from ._analyses import AnalysisStats as AnalysisStats
from ._analyses import analyses as analyses
from ._engines.amg import AMG as AMG
from ._engines.auto import Auto as Auto
from ._cache import LinearCache as LinearCache
from ._engines.direct import LU as LU
from ._engines.direct import Cholesky as Cholesky
from ._engines.direct import DiagonalSolve as DiagonalSolve
from ._engines.direct import cholmod_available as cholmod_available
from ._errors import BackendNotSupported as BackendNotSupported
from ._errors import ClosedCacheError as ClosedCacheError
from ._errors import ConvergenceError as ConvergenceError
from ._errors import HintWarning as HintWarning
from ._errors import NonFiniteInputError as NonFiniteInputError
from ._errors import NotHermitianError as NotHermitianError
from ._errors import NotPositiveDefiniteError as NotPositiveDefiniteError
from ._errors import SingularMatrixError as SingularMatrixError
from ._errors import SolveError as SolveError
from ._errors import StaleSolutionError as StaleSolutionError
from ._engines.krylov import CG as CG
from ._engines.krylov import GMRES as GMRES
from ._engines.krylov import MINRES as MINRES
from ._engines.krylov import BiCGStab as BiCGStab
from ._engines.pardiso import Pardiso as Pardiso
from ._engines.klu import KLU as KLU
from ._engines.klu import native_available as native_available
from ._engines.petsc import PETSc as PETSc
from ._engines.petsc import TransposeNotSupportedError as TransposeNotSupportedError
from ._engines.precond import ILU as ILU
from ._engines.precond import Jacobi as Jacobi
from ._problem import LinearProblem as LinearProblem
from ._registry import show_config as show_config
from ._results import CacheStats as CacheStats
from ._results import Solution as Solution
from ._results import Status as Status
from ._solve import init as init
from ._solve import solve as solve
from ._engines.woodbury import Woodbury as Woodbury
from ._engines.tune import Profile as Profile
from ._engines.lstsq import LSMR as LSMR
from ._engines.lstsq import QR as QR
from ._problem import LeastSquares as LeastSquares
from ._errors import RankDeficientError as RankDeficientError
from ._results import LogDet as LogDet
from ._results import SelectedInverse as SelectedInverse
from ._inverse import selected_inverse as selected_inverse
from ._inverse import Inverse as Inverse
from ._inverse import inverse as inverse
from ._results import Eigenpairs as Eigenpairs
from ._eigsh import eigsh as eigsh
from ._eigsh import buckling as buckling
from ._results import LogDetEstimate as LogDetEstimate
from ._logdet_estimate import logdet_estimate as logdet_estimate

__all__ = [
    # problem and results
    "LinearProblem", "init", "solve", "Solution", "LinearCache", "CacheStats", "Status",
    "analyses", "AnalysisStats",
    # algorithms
    "Auto", "LU", "Cholesky", "CG", "MINRES", "GMRES", "BiCGStab", "Woodbury", "DiagonalSolve",
    "Pardiso", "PETSc", "cholmod_available", "show_config", "KLU", "native_available",
    "Profile",
    # least squares
    "LeastSquares", "QR", "LSMR", "RankDeficientError",
    # preconditioners
    "AMG", "ILU", "Jacobi",
    # errors and warnings
    "SolveError", "SingularMatrixError", "NotPositiveDefiniteError", "NotHermitianError",
    "NonFiniteInputError", "ConvergenceError", "StaleSolutionError", "HintWarning",
    "BackendNotSupported", "TransposeNotSupportedError", "ClosedCacheError",
    # log-determinants, selected inversion, eigenvalues
    "LogDet", "SelectedInverse", "selected_inverse", "Inverse", "inverse",
    "eigsh", "buckling", "Eigenpairs", "logdet_estimate", "LogDetEstimate",
]


def __getattr__(name: str):
    """``sv.Stats``: the deprecated name of :class:`CacheStats` (``adjoints.jax.Stats`` counts
    something else: JAX's host factorizations)."""
    if name == "Stats":
        warnings.warn("solvers.Stats is deprecated: use solvers.CacheStats (the same class)",
                      DeprecationWarning, stacklevel=2)
        return CacheStats
    raise AttributeError(f"module 'solvers' has no attribute {name!r}")
