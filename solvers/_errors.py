"""Status enum, exceptions and warnings. Messages say what to do next."""

from __future__ import annotations

import enum

from linops.internals import BackendNotSupported as BackendNotSupported


class Status(enum.Enum):
    """How a solve ended. ``SUCCESS`` and ``ACCURACY_LIMIT`` are results; the rest are failures
    (raised as the matching :class:`SolveError`, or returned with ``throw=False``)."""

    SUCCESS = "solved to the requested tolerance"
    ACCURACY_LIMIT = ("accepted at the limit of attainable accuracy: the true residual is above "
                      "the requested tolerance but at the rounding-error level of this precision "
                      "(the iterate is as accurate as the arithmetic allows); ask for a looser "
                      "rtol, or use float64 / a better-conditioned formulation for more digits")
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
        return self.value

    @property
    def ok(self) -> bool:
        """True for the statuses that carry a usable result."""
        return self in (Status.SUCCESS, Status.ACCURACY_LIMIT)


class SolveError(RuntimeError):
    """A solve failed. ``status`` says why; the cache that raised it stays usable."""

    status = Status.BREAKDOWN

    def __init__(self, message: str, status: Status | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class SingularMatrixError(SolveError):
    """The factorization hit a zero/tiny pivot or the matrix is not positive definite."""

    status = Status.SINGULAR


class NotHermitianError(SolveError, ValueError):
    """An algorithm that needs a Hermitian matrix (Cholesky) got one that is not."""

    status = Status.NOT_HERMITIAN


class NonFiniteInputError(SolveError, ValueError):
    """A or a right-hand side contains NaN or Inf; the message names the first offending entry."""

    status = Status.NONFINITE_INPUT


class ConvergenceError(SolveError):
    """An iterative method stopped before reaching the tolerance.

    ``history``: the residual norms relative to ‖b‖ that the method reported (GMRES: its
    preconditioned residual per inner iteration; the others report none), followed by the true
    relative residual of the final iterate. ``iterate``: the last iterate (not a solution).
    """

    status = Status.MAX_ITERATIONS

    def __init__(self, message: str, history, iterate=None, status: Status | None = None):
        super().__init__(message, status)
        self.history = list(history)
        self.iterate = iterate


class StaleSolutionError(RuntimeError):
    """A solution is used with a cache whose A has changed since (``update``), so the pair
    (solution, factorization) would mix two matrices. Solve again, then pull back."""


class HintWarning(UserWarning):
    """A hint (``hermitian=``, ``posdef=``) does not hold for A; the solve ignored it."""


def warn_caller(message: str, category: type[Warning]) -> None:
    """Warn at the first frame outside linops/solvers/adjoints (the user's line)."""
    import os
    import sys
    import warnings

    ours = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in
                 (sys.modules["linops"], sys.modules["solvers"]) if getattr(m, "__file__", None))
    frame, level = sys._getframe(1), 2  # stacklevel 2 is our caller
    while frame is not None and frame.f_code.co_filename.startswith(ours):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
