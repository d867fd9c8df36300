"""Status enum, exceptions and warnings. Messages say what to do next.

Every failure of a solve is one :class:`Status` and one exception class::

    RuntimeError
    └── SolveError                       status: why (the cache that raised stays usable)
        ├── SingularMatrixError          Status.SINGULAR
        │   ├── NotPositiveDefiniteError Cholesky of a Hermitian indefinite A
        │   └── RankDeficientError       least squares: A lacks full column (or row) rank
        ├── NotHermitianError            Status.NOT_HERMITIAN     (also a ValueError)
        ├── NonFiniteInputError          Status.NONFINITE_INPUT   (also a ValueError)
        └── ConvergenceError             Status.MAX_ITERATIONS / STAGNATION / BREAKDOWN / ...
    RuntimeError
    ├── StaleSolutionError               a solution used after ``update`` replaced its A
    └── ClosedCacheError                 a cache used after ``close()`` released it
    UserWarning
    └── HintWarning                      a ``hermitian=``/``posdef=`` hint that does not hold
    BackendNotSupported                  (linops') a capability or dtype a backend lacks

``sv.solve(..., throw=False)`` turns every :class:`SolveError` into a returned ``Status``;
the others are raised whatever ``throw`` says (they are programming errors, not outcomes).
"""

from __future__ import annotations

import os
import sys
import warnings

from linops.internals import BackendNotSupported as BackendNotSupported

from ._results import Status


class SolveError(RuntimeError):
    """A solve failed. ``status`` says why; the cache that raised it stays usable.

    The base class of every failure that ``sv.solve(..., throw=False)`` turns into a returned
    :class:`Status`: catch it to handle all of them. A failed ``init`` leaves nothing behind; a
    failed ``cache.solve``/``update`` leaves the cache exactly as it was before the call.

    Parameters
    ----------
    message : str
        What happened, with the numbers, and what to do next.
    status : Status, optional
        Overrides the class's status (a bare ``SolveError`` says ``Status.BREAKDOWN``; the
        solvers raise it with ``Status.NONFINITE`` when a solve produced NaN/Inf).

    Attributes
    ----------
    status : Status

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> cache = sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]])))
    >>> try:
    ...     cache.solve(np.array([1.0, np.inf]))
    ... except sv.SolveError as e:
    ...     print(type(e).__name__, e.status.name)
    NonFiniteInputError NONFINITE_INPUT
    >>> cache.solve(np.array([1.0, 2.0])).round(3).tolist()    # still usable
    [0.1, 0.6]
    """

    status = Status.BREAKDOWN

    def __init__(self, message: str, status: Status | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class SingularMatrixError(SolveError):
    """The factorization hit a zero/tiny pivot or the matrix is not positive definite.

    Raised by ``init`` (or ``update``) for LU, Cholesky, Pardiso, ILU, DiagonalSolve and the
    Woodbury capacitance. "Tiny" is relative: a pivot (or, for SuperLU, a reciprocal condition
    estimate) at most ``pivot_rtol``·max|pivot| — by default 1e3·eps in double precision and
    1e2·eps in single — so a matrix with fewer than about three correct digits left in its
    solution is refused rather than solved. ``pivot_rtol=0`` switches the check off. The
    message names the pivot and the ratio. ``status``: ``Status.SINGULAR``.

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> sv.init(sv.LinearProblem(np.array([[1.0, 2.0], [2.0, 4.0]])), sv.LU())
    Traceback (most recent call last):
    ...
    solvers._errors.SingularMatrixError: LU: the matrix is singular ...: pivot 1 is 0 ...
    """

    status = Status.SINGULAR


class NotPositiveDefiniteError(SingularMatrixError):
    """A Cholesky factorization (dense, CHOLMOD, PARDISO's definite types) found A Hermitian but
    not positive definite: a pivot ≤ 0. Not necessarily singular — a symmetric indefinite
    matrix (a saddle point, a shifted Helmholtz operator) is regular; solve it with ``sv.LU()``,
    or drop ``posdef=True``. ``sv.Auto`` catches it and falls back to LU (counted in
    ``cache.stats.fallbacks``; with a ``posdef=True`` hint it also warns). A subclass of
    :class:`SingularMatrixError` (``status``: ``Status.SINGULAR``).

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> sv.init(sv.LinearProblem(np.array([[1.0, 2.0], [2.0, 1.0]])), sv.Cholesky())
    Traceback (most recent call last):
    ...
    solvers._errors.NotPositiveDefiniteError: Cholesky: the matrix is not positive definite ...
    """


class RankDeficientError(SingularMatrixError):
    """Least squares: A has neither full column rank (m ≥ n) nor full row rank (m < n), so the
    QR factorization cannot give the minimum-norm solution A⁺b, or a pullback was asked for
    the gradient of A⁺b where the pseudo-inverse is not differentiable (a generic perturbation
    changes the rank). The message names the numerical rank. Use ``sv.LSMR()`` (the
    minimum-norm solution for any A), or regularise: stack √α·L under A (Tikhonov). A
    :class:`SingularMatrixError` (``status``: ``Status.SINGULAR``).

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> A = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])        # rank 1
    >>> sv.init(sv.LeastSquares(A), sv.QR())
    Traceback (most recent call last):
    ...
    solvers._errors.RankDeficientError: QR: A (3×2) has numerical rank 1 < 2 ...
    """


class NotHermitianError(SolveError, ValueError):
    """An algorithm that needs a Hermitian matrix (Cholesky) got one that is not.

    The check is max|A − Aᴴ| ≤ tol·max|A| (tol 1e-10 in double precision, 1e-4 in single),
    O(nnz) for a sparse A; the message gives the largest defect and where it is. The problem's
    ``hermitian=``/``posdef=`` hints never switch it off (``sv.Auto`` warns and uses LU instead;
    an explicit ``sv.Cholesky()`` raises this). Also a ``ValueError``. ``status``:
    ``Status.NOT_HERMITIAN``.

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), posdef=True), sv.Cholesky())
    Traceback (most recent call last):
    ...
    solvers._errors.NotHermitianError: Cholesky needs a Hermitian matrix, ... at (0, 1) ...
    """

    status = Status.NOT_HERMITIAN


class NonFiniteInputError(SolveError, ValueError):
    """A or a right-hand side contains NaN or Inf; the message names the first offending entry.

    A is checked once by ``init``/``update`` (O(nnz)), every right-hand side by its solve
    (O(n·k)); ``check_finite=False`` skips both. Also a ``ValueError``. ``status``:
    ``Status.NONFINITE_INPUT``.

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> sv.init(sv.LinearProblem(np.array([[4.0, np.nan], [2.0, 3.0]])))
    Traceback (most recent call last):
    ...
    solvers._errors.NonFiniteInputError: A contains nan at index (0, 1) (1 non-finite entries); ...
    """

    status = Status.NONFINITE_INPUT


class ConvergenceError(SolveError):
    """An iterative method stopped before reaching the tolerance.

    ``history``: the residual norms relative to ‖b‖ that the method reported (GMRES: its
    preconditioned residual per inner iteration; the others report none), followed by the true
    relative residual of the final iterate. ``iterate``: the last iterate (not a solution).

    ``status`` says which way it stopped: ``MAX_ITERATIONS`` (out of ``maxiter``),
    ``STAGNATION`` (the method claimed convergence but the true residual disagrees and
    restarts did not help), ``BREAKDOWN`` or ``NONFINITE``. See the acceptance policy in
    ``solvers._engines.krylov``. With ``sv.solve(..., throw=False)`` the iterate is dropped: a
    Solution never carries an unconverged ``u``.

    Parameters
    ----------
    message : str
    history : sequence of float
    iterate : array, optional
    status : Status, optional
        Default ``Status.MAX_ITERATIONS``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50), format="csr")
    >>> try:
    ...     sv.solve(sv.LinearProblem(A, np.ones(50)), sv.CG(maxiter=5))
    ... except sv.ConvergenceError as e:
    ...     print(e.status.name, round(e.history[-1], 2), e.iterate.shape)
    MAX_ITERATIONS 4.1 (50,)
    """

    status = Status.MAX_ITERATIONS

    def __init__(self, message: str, history, iterate=None, status: Status | None = None):
        super().__init__(message, status)
        self.history = list(history)
        self.iterate = iterate


class StaleSolutionError(RuntimeError):
    """A solution is used with a cache whose A has changed since (``update``), so the pair
    (solution, factorization) would mix two matrices. Solve again, then pull back.

    Raised by ``adjoints.solve_pullback`` for a :class:`Solution` whose ``generation`` is not
    the cache's any more (``sol.current`` is False), or for a cache whose ``u`` was forgotten
    by ``update``. Not a :class:`SolveError`: it is a misuse, raised whatever ``throw`` says.

    Examples
    --------
    >>> import numpy as np, solvers as sv, adjoints as ad
    >>> sol = sv.solve(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), [1.0, 2.0]))
    >>> _ = sol.cache.update(A=np.array([[5.0, 1.0], [2.0, 3.0]]))
    >>> sol.current
    False
    >>> ad.solve_pullback(sol, np.ones(2))
    Traceback (most recent call last):
    ...
    solvers._errors.StaleSolutionError: this solution was computed for an earlier A ...
    """


class ClosedCacheError(RuntimeError):
    """A cache (or a factorization) is used after ``cache.close()`` released it.

    ``close`` frees the factorization's external resources now (PARDISO memory, PETSc objects:
    using them afterwards would crash the process), so every later solve, ``update``, query
    (``logdet``, selected inversion) and ``init(..., like=cache)`` raises this instead. Build a
    new cache with ``sv.init``. Not a :class:`SolveError`: a misuse, raised whatever ``throw``
    says.

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> cache = sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]])))
    >>> cache.close()
    >>> cache.update(A=np.eye(2))
    Traceback (most recent call last):
    ...
    solvers._errors.ClosedCacheError: update: this cache was closed (cache.close() released its ...
    """


class HintWarning(UserWarning):
    """A hint (``hermitian=``, ``posdef=``) does not hold for A; the solve ignored it.

    Issued by ``sv.Auto`` and ``sv.Pardiso`` where a hint would choose an algorithm that needs a
    Hermitian A (Cholesky, CG, PARDISO's positive definite types) but A is not Hermitian: they
    use LU instead, so a wrong hint costs speed, never correctness. The warning points at your
    line (the first frame outside linops/solvers). Turn it into an error with
    ``warnings.simplefilter("error", sv.HintWarning)``.

    Examples
    --------
    >>> import warnings, numpy as np, solvers as sv
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     cache = sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), posdef=True))
    >>> w[0].category.__name__, cache.kind
    ('HintWarning', 'dense LU')
    """


def warn_caller(message: str, category: type[Warning]) -> None:
    """Warn at the first frame outside linops/solvers/adjoints (the user's line)."""
    # the packages whose frames are skipped: a warning about the user's hint belongs on their line
    ours = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in
                 (sys.modules["linops"], sys.modules["solvers"]) if getattr(m, "__file__", None))
    frame, level = sys._getframe(1), 2  # stacklevel 2 is our caller
    while frame is not None and frame.f_code.co_filename.startswith(ours):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
