"""LinearProblem: A and b, checked once.

A problem is data only: it chooses nothing and factorizes nothing. ``sv.init(prob, alg)`` turns
it into a :class:`~solvers.LinearCache` (one factorization), ``sv.solve(prob, alg)`` does that
and solves once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import linops as lo
from linops.internals import ShapeError, is_array, snapshot, with_dtype


@dataclass(frozen=True, eq=False)
class LinearProblem:
    """A u = b with A square (anything ``lo.aslinop`` accepts) and b of shape (n,) or (n, k).

    A frozen record, validated once at construction: the square shape, b's shape against A's,
    the types of the hints. Cost: O(size of A) for wrapping and snapshotting A's arrays (one
    copy of a writeable numpy array), nothing per solve.

    Parameters
    ----------
    A : operator or array-like
        Wrapped with ``lo.aslinop`` (arrays are snapshotted: later edits of yours do not reach
        the problem). Integer and boolean matrices are solved in float64.
    b : array of shape (n,) or (n, k), optional
        The right-hand side (a list is converted with ``np.asarray``; snapshotted too).
    hermitian, posdef : bool or None
        Hints (None: unknown) that ``Auto`` uses to pick Cholesky or CG. They are verified where
        they choose an algorithm and never switch off a check (see ``sv.Auto``, ``sv.Cholesky``).
        ``posdef=True`` implies ``hermitian=True`` unless you say otherwise.
    least_squares : bool
        The problem is min ‖Au − b‖₂ (minimum-norm u) for an A of any shape m×n: what
        :func:`LeastSquares` builds. Solved by ``sv.QR()`` or ``sv.LSMR()`` only.

    Attributes
    ----------
    A : lo.LinearOperator
        The wrapped, inexact operator (what every algorithm sees).
    b : array or None
        The right-hand side, read-only (its dtype is kept: an integer b is cast per solve).
    hermitian, posdef : bool or None

    Raises
    ------
    ShapeError
        A not square (without ``least_squares``), or b not of shape (m,) / (m, k); the message
        names both shapes.
    TypeError
        A hint that is not True, False or None; or an operator of a non-numeric dtype that
        cannot be converted to float64 (integer ``Dense``, ``Sparse``, ``Diagonal`` and
        ``Identity`` are converted).
    UnsupportedOperandError
        An A that ``lo.aslinop`` cannot wrap.

    Notes
    -----
    Snapshot rule: A's and b's arrays are snapshotted here (``linops._backend``), so editing the
    arrays you passed has no effect on the problem, nor on any cache or solution made from it.
    To solve with changed values, pass them: ``cache.update(A=A2)`` (numeric refactorization
    when the pattern is the same) or ``cache.solve(b2)``. This replaced the ``check_mutation=``
    option of earlier versions, which fingerprinted A on every solve: there is nothing left to
    detect. ``lo.MatrixFree`` callables are the exception: they are called as they are.

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> a = np.array([[4.0, 1.0], [2.0, 3.0]])
    >>> prob = sv.LinearProblem(a, [1.0, 2.0])
    >>> prob.A, prob.b.tolist()
    (Dense(shape=(2, 2), dtype=float64), [1.0, 2.0])
    >>> a[0, 0] = 100.0                              # the problem holds its own copy
    >>> sv.solve(prob).u.round(3).tolist()
    [0.1, 0.6]
    >>> sv.LinearProblem(np.eye(2), posdef=True).hermitian
    True
    >>> sv.LinearProblem(np.eye(2), np.ones(3))
    Traceback (most recent call last):
    ...
    linops._errors.ShapeError: b must have shape (n,) or (n, k) with n=2 ... got b.shape=(3,)
    """

    A: Any
    b: Any = None
    hermitian: bool | None = None
    posdef: bool | None = None
    least_squares: bool = False

    def __post_init__(self):
        A = _as_inexact(lo.aslinop(self.A))
        object.__setattr__(self, "A", A)
        m, n = A.shape
        if not isinstance(self.least_squares, (bool, np.bool_)):
            raise TypeError(f"least_squares must be True or False, got {self.least_squares!r}")
        if m != n and not self.least_squares:
            raise ShapeError(f"LinearProblem needs a square A, got A.shape={A.shape}; for "
                             f"min ‖Ax − b‖ use sv.LeastSquares(A, b)")
        if self.least_squares and (self.hermitian is not None or self.posdef is not None):
            raise TypeError("a least-squares problem takes no hermitian=/posdef= hints (QR and "
                            "LSMR need none)")
        for name in ("hermitian", "posdef"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"{name} must be True, False or None, got {name}={v!r}")
        # the hints as given, for messages (posdef=True alone implies hermitian=True below)
        object.__setattr__(self, "given_hints", {k: bool(getattr(self, k)) for k in
                                                 ("hermitian", "posdef")
                                                 if getattr(self, k) is not None})
        if self.posdef and self.hermitian is None:  # positive definite means Hermitian here
            object.__setattr__(self, "hermitian", True)
        if self.b is not None:
            object.__setattr__(self, "b", snapshot(as_rhs(A, self.b, "b")))


def _as_inexact(A: lo.LinearOperator) -> lo.LinearOperator:
    """Integer/boolean operators that store their entries in float64 (others must be inexact: a
    lazy integer operator cannot be cast without evaluating it; TypeError)."""
    if np.dtype(A.dtype).kind in "fc":
        return A
    return with_dtype(A, np.float64)


def as_rhs(A, b, name: str, rows: int | None = None):
    """b as an array of shape (n,) or (n, k) with n = A's (local) row count (or ``rows``: a
    least-squares adjoint takes A's column count), else ShapeError."""
    if isinstance(b, (list, tuple)):
        b = np.asarray(b)
    if not is_array(b):
        raise ShapeError(f"{name} must be an array of shape (n,) or (n, k) for A.shape="
                         f"{A.shape}, got {type(b).__name__}")
    n = getattr(A, "local_shape", A.shape)[0] if rows is None else rows  # PETSc: this rank's rows
    shape = tuple(b.shape)
    if b.ndim not in (1, 2) or shape[0] != n:
        raise ShapeError(f"{name} must have shape (n,) or (n, k) with n={n} for A.shape="
                         f"{A.shape}, got {name}.shape={shape}")
    return b


def LeastSquares(A, b=None) -> LinearProblem:  # noqa: N802 (a problem constructor, like LinearProblem)
    """The least-squares problem min ‖A x − b‖₂ for an m×n A of any shape (minimum-norm x).

    A :class:`LinearProblem` with ``least_squares=True``: ``sv.init(prob)`` factorizes A once
    (``sv.QR()``, SuiteSparseQR, when ``sparseqr`` is installed; else ``sv.LSMR()``), and the
    cache serves x = A⁺b (``cache.solve(b)``) and y = A⁺ᴴc (``cache.solve_adjoint(c)``) from
    the same factors; ``adjoints.solve_pullback`` returns the rank-2 lazy cotangent
    Ā = r λᴴ − (Aλ) xᴴ (r = b − Ax, λ = (AᴴA)⁻¹x̄). Weights and Tikhonov regularisation are
    stacked operators: min ‖W(Ax − b)‖ is A → WA, b → Wb; min ‖Ax − b‖² + α‖Lx‖² is
    A → [A; √α L], b → [b; 0] (``scipy.sparse.vstack``).

    Parameters
    ----------
    A : operator or array-like, m×n
        Dense or sparse (QR), or any operator with products (LSMR).
    b : array (m,) or (m, k), optional

    Returns
    -------
    LinearProblem

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> A = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])        # a line through 3 points
    >>> sol = sv.solve(sv.LeastSquares(A, np.array([1.0, 2.0, 2.0])))
    >>> sol.u.round(6).tolist(), sol.cache.kind
    ([1.166667, 0.5], 'dense QR')
    """
    return LinearProblem(A, b, least_squares=True)
