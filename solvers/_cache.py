"""init / solve and the LinearCache: the factorization plus counters.

``init`` factorizes once; ``solve``, ``solve_adjoint``, ``solve_transpose`` and every pullback
reuse it. State rule: a cache never mixes two matrices. Its A is a snapshot (edits of the
arrays you passed in do not reach it; see ``linops._backend``), its solution ``u`` is read-only,
``update(A=...)`` replaces A, factors and ``generation`` together and forgets ``u``, and a
:class:`Solution` made before an update is refused by pullbacks (:class:`StaleSolutionError`).
A failed factorization or solve leaves the cache exactly as it was.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import linops as lo
from linops.internals import ShapeError

from ._auto import resolve_algorithm
from ._backend import backend_of_problem, check_finite_operator, finite_or_raise
from ._errors import SolveError, StaleSolutionError, Status
from ._problem import LinearProblem, as_rhs


@dataclass
class Stats:
    """Counters of one cache (for tests and benchmarks).

    ``factorizations``: full setups (symbolic + numeric, or a preconditioner built from scratch);
    ``numeric_refactorizations``: ``update`` on the same structure; ``iterations``: Krylov
    iterations over all solves; times in seconds.
    """

    factorizations: int = 0
    numeric_refactorizations: int = 0
    solves: int = 0
    adjoint_solves: int = 0
    transpose_solves: int = 0
    iterations: int = 0
    setup_seconds: float = 0.0
    solve_seconds: float = 0.0


@dataclass(frozen=True)
class Solution:
    """Result of ``sv.solve``.

    ``u``: the solution (read-only; None when the solve failed with ``throw=False``);
    ``status``: a :class:`Status` (``status.ok`` is True for SUCCESS and ACCURACY_LIMIT);
    ``stats``: the cache's counters; ``cache``: the reusable :class:`LinearCache` (None when
    the factorization itself failed); ``generation``: the cache generation ``u`` belongs to.
    """

    u: Any
    status: Status
    stats: Stats
    cache: "LinearCache | None"
    generation: int = 0

    @property
    def current(self) -> bool:
        """True while the cache still holds the A this solution was computed with."""
        return self.cache is not None and self.cache.generation == self.generation


def structure_key(A: lo.LinearOperator):
    """Hashable description of A's structure: equal keys allow a numeric refactorization."""
    key = getattr(A, "structure_key", None)
    if key is not None:
        return key
    if isinstance(A, lo.Sparse):
        return ("sparse", A.pattern)
    if isinstance(A, lo.Dense):
        return ("dense", A.shape)
    return None


class LinearCache:
    """The state of a solve: A's factorization (or preconditioner), the last solution, counters.

    Cost model: ``init`` = one factorization; each ``solve``/``solve_adjoint``/``solve_transpose``
    = triangular solves (or one Krylov run) with the SAME factors; no per-solve checks of A
    (operators are immutable snapshots).

    Attributes: ``A``, ``alg``, ``factor``, ``u`` (last forward solution, read-only, or None),
    ``status`` (of the last solve), ``generation`` (bumped when A changes), ``stats``.
    """

    def __init__(self, prob: LinearProblem, alg, *, check_finite: bool = True):
        if not isinstance(prob, LinearProblem):
            raise TypeError(_NOT_A_PROBLEM.format(type(prob).__name__))
        self.prob = prob
        self.alg = resolve_algorithm(alg)
        self.check_finite = check_finite
        self.stats = Stats()
        self.generation = 0
        self.status: Status | None = None
        self._u = None
        be = backend_of_problem(prob.A, prob.b)
        be.require_dtype(prob.A.dtype, "solve")
        if check_finite:
            check_finite_operator(prob.A)
        t = time.perf_counter()
        self.factor = self.alg.setup(prob.A, prob)
        self.stats.setup_seconds += time.perf_counter() - t
        self.stats.factorizations += 1

    # ----- properties -----------------------------------------------------------------------------
    @property
    def A(self) -> lo.LinearOperator:
        return self.prob.A

    @property
    def u(self):
        """The last forward solution for the current A and b (read-only), or None."""
        return self._u

    @property
    def kind(self) -> str:
        return getattr(self.factor, "kind", type(self.factor).__name__)

    def __repr__(self) -> str:
        s = self.stats
        return (f"LinearCache({self.kind}, n={self.A.shape[0]}, factorizations={s.factorizations}, "
                f"solves={s.solves}, adjoint_solves={s.adjoint_solves})")

    def as_operator(self) -> lo.LinearOperator:
        """A⁻¹ as a lazy operator (matmat = solve, rmatmat = adjoint solve; same factors)."""
        return lo.MatrixFree(self.A.shape, self.A.dtype, lambda X: self._run(X, "N", "x"),
                             lambda X: self._run(X, "H", "x"))

    # ----- solves ---------------------------------------------------------------------------------
    def solve(self, b=None):
        """u = A⁻¹ b (b defaults to the problem's b); also kept, read-only, as ``cache.u``.

        Raises SolveError subclasses (the cache stays usable); NonFiniteInputError for NaN/Inf
        in b; ShapeError for a b of the wrong shape."""
        b = self.prob.b if b is None else b
        if b is None:
            raise ValueError("no right-hand side: pass b to solve() or to the LinearProblem")
        u = self._run(b, "N", "b")
        u = backend_of_problem(self.A, u).freeze(u)
        self._u = u
        return u

    def solve_adjoint(self, c):
        """λ = A⁻ᴴ c with the same factorization (two triangular solves for LU)."""
        return self._run(c, "H", "c")

    def solve_transpose(self, c):
        """λ = A⁻ᵀ c with the same factorization (complex symmetric problems, JAX's convention)."""
        return self._run(c, "T", "c")

    def _run(self, b, trans: str, name: str):
        b = as_rhs(self.A, b, name)
        if self.check_finite:
            finite_or_raise(b, name)
        B = b[:, None] if b.ndim == 1 else b
        t = time.perf_counter()
        it0 = self.factor.iterations
        try:
            X = self.factor.solve(B, trans)
        finally:  # failed runs count their iterations too
            self.stats.iterations += self.factor.iterations - it0
            self.stats.solve_seconds += time.perf_counter() - t
        xp = backend_of_problem(self.A, X).xp
        if not bool(xp.all(xp.isfinite(X))):
            raise SolveError(f"the solve produced NaN/Inf; {Status.NONFINITE.message}",
                             Status.NONFINITE)
        self.status = getattr(self.factor, "last_status", None) or Status.SUCCESS
        attr = {"N": "solves", "H": "adjoint_solves", "T": "transpose_solves"}[trans]
        setattr(self.stats, attr, getattr(self.stats, attr) + 1)
        dtype = np.result_type(self.A.dtype, b.dtype, np.float32)
        if np.dtype(X.dtype) != dtype:
            X = X.astype(dtype)
        return X[:, 0] if b.ndim == 1 else X

    # ----- updates --------------------------------------------------------------------------------
    def update(self, A=None, b=None) -> "LinearCache":
        """New A and/or b.

        A with the same structure (pattern): numeric refactorization (symbolic analysis kept where
        the backend allows); otherwise a full factorization. Either way ``generation`` grows and
        ``u`` is forgotten (it belonged to the old A); a new b alone also forgets ``u``. On
        failure the cache keeps its previous A, factors, generation and ``u``.
        """
        prob = self.prob
        if A is not None:
            A = lo.aslinop(A)
            if A.shape != prob.A.shape:
                raise ShapeError(f"update: new A.shape={A.shape} but the cache's "
                                 f"A.shape={prob.A.shape}")
            new_prob = LinearProblem(A, prob.b if b is None else b, hermitian=prob.hermitian,
                                     posdef=prob.posdef)
            key = structure_key(prob.A)
            numeric = key is not None and key == structure_key(new_prob.A)
            if self.check_finite:
                check_finite_operator(new_prob.A)
            t = time.perf_counter()
            factor = (self.factor.refactor(new_prob.A) if numeric
                      else self.alg.setup(new_prob.A, new_prob))
            self.stats.setup_seconds += time.perf_counter() - t
            self.factor, self.prob = factor, new_prob
            if numeric:
                self.stats.numeric_refactorizations += 1
            else:
                self.stats.factorizations += 1
            self.generation += 1
            self._u = None
        elif b is not None:
            self.prob = LinearProblem(prob.A, b, hermitian=prob.hermitian, posdef=prob.posdef)
            self._u = None
        return self

    def check_current(self, generation: int, what: str = "this solution") -> None:
        """StaleSolutionError unless ``generation`` is the cache's current one."""
        if generation != self.generation:
            raise StaleSolutionError(
                f"{what} was computed for an earlier A (generation {generation}); the cache has "
                f"been updated since (generation {self.generation}), so a pullback would mix two "
                f"matrices. Solve again (sv.solve or cache.solve()) and pull back the new solution")


_NOT_A_PROBLEM = ("expected a solvers.LinearProblem, got {0}; build one first: "
                  "sv.solve(sv.LinearProblem(A, b)) or sv.init(sv.LinearProblem(A, b), alg)")


def init(prob: LinearProblem, alg=None, *, check_finite: bool = True) -> LinearCache:
    """Factorize (or set up the preconditioner) once; returns the reusable cache.

    Parameters
    ----------
    prob : LinearProblem
    alg : algorithm object or name, optional
        ``sv.LU()``, ``sv.Cholesky()``, ``sv.CG(...)``, ... or a name such as ``"lu"``;
        default ``sv.Auto()`` (see its rules).
    check_finite : bool
        Check A (here) and every right-hand side (per solve) for NaN/Inf, O(nnz) and O(n).

    Raises
    ------
    SingularMatrixError, NotHermitianError, NonFiniteInputError, BackendNotSupported

    >>> import numpy as np
    >>> cache = init(LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), np.array([1.0, 2.0])))
    >>> cache.solve().round(3).tolist(), cache.stats.factorizations
    ([0.1, 0.6], 1)
    """
    return LinearCache(prob, alg, check_finite=check_finite)


def solve(prob: LinearProblem, alg=None, *, throw: bool = True,
          check_finite: bool = True) -> Solution:
    """Solve A u = b: ``init`` (one factorization) + ``cache.solve()``.

    Parameters
    ----------
    prob : LinearProblem
    alg : algorithm object or name, optional
        Default ``sv.Auto()``: Cholesky (CHOLMOD/LAPACK) for hinted positive definite problems,
        SuperLU/LAPACK LU otherwise, Woodbury for B + low rank, CG/GMRES for matrix-free A.
    throw : bool
        True (default): failures raise a :class:`SolveError` subclass. False: every failure of
        the solve — singular factorization, non-Hermitian matrix for Cholesky, non-finite input,
        no convergence — returns a Solution whose ``status`` says what happened and whose ``u``
        is None (an unconverged iterate is never handed out as a solution).
    check_finite : bool
        See :func:`init`.

    Returns
    -------
    Solution
        ``u``, ``status``, ``stats``, ``cache`` (reuse it: ``sol.cache.solve_adjoint(c)``).

    >>> import numpy as np
    >>> sol = solve(LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), [1.0, 2.0]))
    >>> sol.u.round(3).tolist(), sol.status.name
    ([0.1, 0.6], 'SUCCESS')
    """
    if not isinstance(prob, LinearProblem):
        raise TypeError(_NOT_A_PROBLEM.format(type(prob).__name__))
    try:
        cache = init(prob, alg, check_finite=check_finite)
    except SolveError as e:
        if throw:
            raise
        return Solution(None, e.status, Stats(), None)
    try:
        u = cache.solve()
    except SolveError as e:
        if throw:
            raise
        return Solution(None, e.status, cache.stats, cache, cache.generation)
    return Solution(u, cache.status, cache.stats, cache, cache.generation)
