"""Status enum and exceptions. Messages say what to do next."""

from __future__ import annotations

import enum

from linops._errors import BackendNotSupported as BackendNotSupported


class Status(enum.Enum):
    SUCCESS = "solved"
    SINGULAR = ("the matrix is singular to working precision (zero or tiny pivot); check boundary "
                "conditions / constraints (e.g. a pure-Neumann problem needs a fixed dof), or "
                "regularise")
    MAX_ITERATIONS = ("the Krylov method did not reach the tolerance within maxiter; add or "
                      "strengthen a preconditioner (AMG, ILU), raise maxiter, or use a direct "
                      "solver (LU, Cholesky)")
    BREAKDOWN = ("the Krylov method broke down (illegal input or a zero inner product); the "
                 "matrix may be indefinite or singular: try GMRES or a direct solver")
    NONFINITE = "the solve produced NaN/Inf; the matrix is singular or badly scaled"

    @property
    def message(self) -> str:
        return self.value


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


class ConvergenceError(SolveError):
    """An iterative method stopped before reaching the tolerance. ``history`` holds the
    relative residual norms per iteration; ``iterate`` the last iterate."""

    status = Status.MAX_ITERATIONS

    def __init__(self, message: str, history, iterate=None, status: Status | None = None):
        super().__init__(message, status)
        self.history = list(history)
        self.iterate = iterate
