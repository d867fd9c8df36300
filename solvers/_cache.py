"""init / solve and the LinearCache: the factorization plus counters.

``init`` factorizes once; ``solve``, ``solve_adjoint``, ``solve_transpose`` and every pullback
reuse it. State rule: a cache never mixes two matrices. Its A is a snapshot (edits of the
arrays you passed in do not reach it; see ``linops._backend``), its solution ``u`` is read-only,
``update(A=...)`` replaces A, factors and ``generation`` together and forgets ``u``, and a
:class:`Solution` made before an update is refused by pullbacks (:class:`StaleSolutionError`).
A failed factorization or solve leaves the cache exactly as it was.

Spelled out, for a cache ``c``:

- ``c.A``, ``c.factor`` and ``c.generation`` change together, only in ``c.update(A=...)``;
- ``c.u`` is the solution for the current A and b, or None: ``update`` (new A or new b)
  forgets it, ``c.solve()`` sets it; it is read-only, so nobody can edit it behind the
  factorization's back;
- a :class:`Solution` remembers the generation it was solved in; ``sol.current`` tells whether
  the cache still holds that A, and ``adjoints.solve_pullback`` refuses it otherwise;
- on an exception nothing is assigned: ``update`` builds the new factors before replacing the
  old ones, and a solve sets ``u``, ``status`` and its call counter only after it succeeded
  (iterations and time are counted either way).

There is no ``check_mutation=`` option any more (earlier versions fingerprinted A on every
solve to detect edits): with snapshots there are no edits to detect, and nothing is paid per
solve. Changed values go in through ``update``.
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

    The object is the cache's own, updated in place: ``sol.stats`` and ``sol.cache.stats`` are
    the same object and keep counting as the cache is reused. They are how the library proves
    "factorize once": a pullback adds one ``adjoint_solves`` and no ``factorizations``.

    Attributes
    ----------
    factorizations : int
        Full setups: ``init`` and every ``update`` whose A has another structure.
    numeric_refactorizations : int
        ``update`` with the same structure (pattern): the symbolic analysis was reused.
    solves, adjoint_solves, transpose_solves : int
        Successful calls of ``solve``, ``solve_adjoint``, ``solve_transpose`` (a call with
        k right-hand sides counts once).
    iterations : int
        Krylov (or AMG cycle) iterations over all solves, failed ones included; 0 for direct
        methods.
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

    Attributes
    ----------
    u : array of shape b.shape, or None
        Read-only, in the dtype ``result_type(A.dtype, b.dtype, float32)``.
    status : Status
        ``SUCCESS``, ``ACCURACY_LIMIT`` (an iterative method at the rounding level), or with
        ``throw=False`` the failure.
    stats : Stats
        The cache's counters (the same object as ``cache.stats``: it keeps counting).
    cache : LinearCache or None
        Reuse it for more right-hand sides, adjoint solves and pullbacks.
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
    stats: Stats
    cache: "LinearCache | None"
    generation: int = 0

    @property
    def current(self) -> bool:
        """True while the cache still holds the A this solution was computed with.

        False after ``sol.cache.update(A=...)``; pullbacks of a solution that is not current
        raise :class:`StaleSolutionError`. (A new b alone keeps it current: ``u`` still
        belongs to the cache's A, and pullbacks need only A.)
        """
        return self.cache is not None and self.cache.generation == self.generation


def structure_key(A: lo.LinearOperator):
    """Hashable description of A's structure: equal keys allow a numeric refactorization.

    None (never equal) for operators without a comparable structure, such as lazy ones."""
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

    Made by :func:`init` (or :func:`solve`, as ``sol.cache``); constructing one directly is
    the same as ``init``.

    Parameters
    ----------
    prob : LinearProblem
    alg : algorithm object or name, optional
        As in :func:`init`; default ``sv.Auto()``.
    check_finite : bool
        Check A now and every right-hand side per solve for NaN/Inf.

    Attributes
    ----------
    prob : LinearProblem
        The current problem (``update`` replaces it).
    A : lo.LinearOperator
        ``prob.A``, the snapshot the factors belong to.
    alg : algorithm
        The algorithm object (``Auto`` stays ``Auto``; :attr:`kind` says what it chose).
    factor : object
        The algorithm's state: LU factors, a Cholesky factor, a Krylov method with its
        preconditioner, a PARDISO handle. Read it for diagnostics (``factor.amg`` for AMG
        reuse, ``factor.phases`` for PARDISO); its interface is not public.
    status : Status or None
        Of the last successful solve, forward, adjoint or transpose (``ACCURACY_LIMIT`` if any
        column of it was); None before the first.
    generation : int
        0 at ``init``, +1 per ``update`` that replaced A.
    u : array or None
        The last forward solution (read-only), see :attr:`u`.
    stats : Stats
    check_finite : bool

    Raises
    ------
    TypeError
        ``prob`` is not a :class:`LinearProblem`, or ``alg`` is not an algorithm or a name.
    SingularMatrixError, NotHermitianError, NonFiniteInputError, BackendNotSupported
        From the factorization; see :func:`init`.

    Notes
    -----
    State rule (module ``solvers._cache``): the cache never mixes two matrices. ``A``,
    ``factor`` and ``generation`` change together, only in :meth:`update`; ``u`` belongs to the
    current A and b or is None; every failure leaves the cache as it was. The algorithm's
    ``setup(A, prob)`` runs once here and the factor's ``solve(B, trans)`` per call, with
    ``trans`` 'N', 'H' or 'T': that is all a cache asks of an algorithm.

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> cache = sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), [1.0, 2.0]), "lu")
    >>> cache
    LinearCache(dense LU, n=2, factorizations=1, solves=0, adjoint_solves=0)
    >>> cache.solve().round(3).tolist(), cache.u.flags.writeable
    ([0.1, 0.6], False)
    >>> cache.solve_adjoint(np.array([1.0, 1.0])).round(3).tolist()   # Aᴴ λ = c, same factors
    [0.1, 0.3]
    >>> cache.stats.factorizations, cache.stats.solves, cache.stats.adjoint_solves
    (1, 1, 1)
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
        """The operator the current factorization belongs to (``prob.A``, a snapshot)."""
        return self.prob.A

    @property
    def u(self):
        """The last forward solution for the current A and b (read-only), or None.

        Set by every successful :meth:`solve` (also with an explicit b); forgotten by
        :meth:`update`. ``adjoints.solve_pullback(cache, ubar)`` pulls back through it.
        """
        return self._u

    @property
    def kind(self) -> str:
        """What the algorithm set up, in words: 'dense LU', 'SuperLU', 'CHOLMOD',
        'CG + AMG(sa): 3 levels, ...', 'Woodbury(rank 1) over diagonal', ... (``sv.Auto``'s
        choice shows here)."""
        return getattr(self.factor, "kind", type(self.factor).__name__)

    def __repr__(self) -> str:
        s = self.stats
        return (f"LinearCache({self.kind}, n={self.A.shape[0]}, factorizations={s.factorizations}, "
                f"solves={s.solves}, adjoint_solves={s.adjoint_solves})")

    def as_operator(self) -> lo.LinearOperator:
        """A⁻¹ as a lazy operator (matmat = solve, rmatmat = adjoint solve; same factors).

        Returns
        -------
        lo.MatrixFree
            ``Ainv @ X`` runs :meth:`solve`'s work and ``Ainv.H @ X`` :meth:`solve_adjoint`'s,
            each counted in :attr:`stats`; neither touches ``u``. Bound to this cache: after an
            :meth:`update` it applies the new A's inverse.

        Examples
        --------
        >>> import numpy as np, solvers as sv
        >>> cache = sv.init(sv.LinearProblem(np.array([[2.0, 1j], [0.0, 1.0]])))
        >>> Ainv = cache.as_operator()
        >>> Ainv @ np.ones(2), Ainv.H @ np.ones(2)
        (array([0.5-0.5j, 1. +0.j ]), array([0.5+0.j , 1. +0.5j]))
        """
        return lo.MatrixFree(self.A.shape, self.A.dtype, lambda X: self._run(X, "N", "x"),
                             lambda X: self._run(X, "H", "x"))

    def logdet(self):
        """(sign, log|det A|) from the factorization this cache holds: no new factorization.

        LU (LAPACK, SuperLU): the sign of both permutations times the product of U's diagonal;
        Cholesky (LAPACK, CHOLMOD) and PARDISO's Hermitian positive definite types: the sum of
        the logs of the pivots (sign 1). Cost O(n) (SuperLU: O(nnz(U)), reading U's diagonal).
        The gradient, A⁻ᴴ, is ``adjoints.logdet_pullback(cache)``.

        Returns
        -------
        solvers.LogDet
            ``(sign, logabsdet)`` like ``numpy.linalg.slogdet``.

        Raises
        ------
        SingularMatrixError
            A zero pivot (a cache made with ``pivot_rtol=0``): the same on every engine.
        BackendNotSupported
            An iterative cache, or PARDISO's unsymmetric types: the message names a direct
            solver, or ``sv.logdet_estimate`` for matrix-free operators.

        Examples
        --------
        >>> import numpy as np, solvers as sv
        >>> cache = sv.init(sv.LinearProblem(np.array([[2.0, 1.0], [1.0, 2.0]])), sv.Cholesky())
        >>> sign, logabsdet = cache.logdet()
        >>> sign, round(float(np.exp(logabsdet)), 12), cache.stats.factorizations
        (1.0, 3.0, 1)
        """
        from ._logdet import logdet

        return logdet(self.factor)

    # ----- solves ---------------------------------------------------------------------------------
    def solve(self, b=None):
        """u = A⁻¹ b (b defaults to the problem's b); also kept, read-only, as ``cache.u``.

        Raises SolveError subclasses (the cache stays usable); NonFiniteInputError for NaN/Inf
        in b; ShapeError for a b of the wrong shape.

        Parameters
        ----------
        b : array of shape (n,) or (n, k), optional
            Default: the problem's b. A list is converted; a complex b with real factors is
            solved as its real and imaginary parts.

        Returns
        -------
        u : array of b's shape, read-only
            dtype ``result_type(A.dtype, b.dtype, float32)``. Cost: two triangular solves per
            column for direct methods, one Krylov run per column for iterative ones.

        Raises
        ------
        ValueError
            No b here and none in the problem.
        ShapeError
            b of the wrong shape.
        NonFiniteInputError
            NaN/Inf in b (with ``check_finite``).
        ConvergenceError
            An iterative method missed the tolerance (see ``solvers._krylov``).
        SolveError
            The result holds NaN/Inf (``Status.NONFINITE``).

        Examples
        --------
        >>> import numpy as np, solvers as sv
        >>> cache = sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]])))
        >>> cache.solve(np.eye(2)).round(3).tolist()          # k = 2 columns, one call
        [[0.3, -0.1], [-0.2, 0.4]]
        """
        b = self.prob.b if b is None else b
        if b is None:
            raise ValueError("no right-hand side: pass b to solve() or to the LinearProblem")
        u = self._run(b, "N", "b")
        u = backend_of_problem(self.A, u).freeze(u)
        self._u = u
        return u

    def solve_adjoint(self, c):
        """λ = A⁻ᴴ c with the same factorization (two triangular solves for LU).

        The solve a reverse-mode gradient needs (λ = A⁻ᴴ ū, see ``adjoints.solve_pullback``).
        Direct methods reuse their factors (SuperLU ``trans='H'``, PARDISO ``iparm(12)``,
        Cholesky: the forward solve); Krylov methods run on Aᴴ with the adjoint of the
        forward preconditioner. Never a new factorization; ``u`` is not touched.

        Parameters
        ----------
        c : array of shape (n,) or (n, k)

        Returns
        -------
        λ : array of c's shape

        Raises
        ------
        ShapeError, NonFiniteInputError, ConvergenceError, SolveError
            As for :meth:`solve`.

        Examples
        --------
        >>> import numpy as np, solvers as sv
        >>> A = np.array([[2.0, 1j], [0.0, 1.0]])
        >>> cache = sv.init(sv.LinearProblem(A))
        >>> lam = cache.solve_adjoint(np.ones(2))
        >>> lam, np.allclose(A.conj().T @ lam, 1.0), cache.stats.factorizations
        (array([0.5+0.j , 1. +0.5j]), True, 1)
        """
        return self._run(c, "H", "c")

    def solve_transpose(self, c):
        """λ = A⁻ᵀ c with the same factorization (complex symmetric problems, JAX's convention).

        The plain transpose, without conjugation: equal to :meth:`solve_adjoint` for real A.
        Iterative methods compute it as conj(A⁻ᴴ conj(c)). Parameters, Returns and Raises as
        for :meth:`solve_adjoint`.

        Examples
        --------
        >>> import numpy as np, solvers as sv
        >>> cache = sv.init(sv.LinearProblem(np.array([[2.0, 1j], [0.0, 1.0]])))
        >>> cache.solve_transpose(np.ones(2))
        array([0.5+0.j , 1. -0.5j])
        """
        return self._run(c, "T", "c")

    def _run(self, b, trans: str, name: str):
        b = as_rhs(self.A, b, name)
        if self.check_finite:
            finite_or_raise(b, name)
        B = b[:, None] if b.ndim == 1 else b  # factors see (n, k) only
        t = time.perf_counter()
        it0 = self.factor.iterations
        try:
            X = self.factor.solve(B, trans)
        finally:  # failed runs count their iterations too
            self.stats.iterations += self.factor.iterations - it0
            self.stats.solve_seconds += time.perf_counter() - t
        xp = backend_of_problem(self.A, X).xp
        # O(n·k): a direct solve that hit a pivot the check let through surfaces here, not later
        if not bool(xp.all(xp.isfinite(X))):
            raise SolveError(f"the solve produced NaN/Inf; {Status.NONFINITE.message}",
                             Status.NONFINITE)
        self.status = getattr(self.factor, "last_status", None) or Status.SUCCESS
        attr = {"N": "solves", "H": "adjoint_solves", "T": "transpose_solves"}[trans]
        setattr(self.stats, attr, getattr(self.stats, attr) + 1)
        # the answer's dtype depends on the inputs only, never on the factor's working precision
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

        Parameters
        ----------
        A : operator or array-like, optional
            The new matrix, of the cache's shape; snapshotted like ``LinearProblem``'s A. The
            problem's hints are kept. What "numeric" reuses: SuperLU the column order
            (COLAMD once), CHOLMOD the symbolic analysis, PARDISO phase 11, AMG its aggregation
            (see ``sv.AMG``'s ``reuse``); dense factorizations simply refactorize.
        b : array, optional
            The new default right-hand side.

        Returns
        -------
        LinearCache
            ``self``, to chain ``cache.update(A=A2).solve()``.

        Raises
        ------
        ShapeError
            A new A of another shape (build a new cache for another size).
        SingularMatrixError, NotHermitianError, NonFiniteInputError
            From the new factorization; the cache is unchanged.

        Notes
        -----
        This is the way to solve with changed values: operators snapshot their arrays, so an
        in-place edit of the array you passed never reaches the cache (there is no
        ``check_mutation`` any more: nothing to detect). Solutions made before the update stay
        readable but are no longer ``current``; pullbacks refuse them.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, solvers as sv
        >>> A = sp.csr_array(np.array([[4.0, 1.0], [2.0, 3.0]]))
        >>> cache = sv.init(sv.LinearProblem(A, [1.0, 2.0]), sv.LU())
        >>> cache.update(A=2 * A).solve().round(3).tolist()   # same pattern: numeric only
        [0.05, 0.3]
        >>> s = cache.stats
        >>> s.factorizations, s.numeric_refactorizations, cache.generation
        (1, 1, 1)
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
            # build the new factor first and assign last: a failure leaves the cache untouched
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
        """StaleSolutionError unless ``generation`` is the cache's current one.

        For code that keeps a solution and its cache apart (pullbacks call it).

        Parameters
        ----------
        generation : int
            The generation the result was computed in (``Solution.generation``).
        what : str
            How to call the result in the message.

        Raises
        ------
        StaleSolutionError
            ``update`` replaced A since.

        Examples
        --------
        >>> import numpy as np, solvers as sv
        >>> cache = sv.init(sv.LinearProblem(np.eye(2)))
        >>> cache.check_current(0)                         # fine: nothing happens
        >>> cache.update(A=2 * np.eye(2)).check_current(0)
        Traceback (most recent call last):
        ...
        solvers._errors.StaleSolutionError: this solution was computed for an earlier A ...
        """
        if generation != self.generation:
            raise StaleSolutionError(
                f"{what} was computed for an earlier A (generation {generation}); the cache has "
                f"been updated since (generation {self.generation}), so a pullback would mix two "
                f"matrices. Solve again (sv.solve or cache.solve()) and pull back the new solution")


_NOT_A_PROBLEM = ("expected a solvers.LinearProblem, got {0}; build one first: "
                  "sv.solve(sv.LinearProblem(A, b)) or sv.init(sv.LinearProblem(A, b), alg)")


def init(prob: LinearProblem, alg=None, *, check_finite: bool = True) -> LinearCache:
    """Factorize (or set up the preconditioner) once; returns the reusable cache.

    Everything expensive happens here: the factorization (or the preconditioner and its
    hierarchy), the Hermitian check of Cholesky, the singularity checks, the finiteness check of
    A. What follows reuses it: ``cache.solve(b)``, ``cache.solve_adjoint(c)``,
    ``cache.solve_transpose(c)``, ``cache.as_operator()`` and the pullbacks of ``adjoints``.

    Parameters
    ----------
    prob : LinearProblem
    alg : algorithm object or name, optional
        ``sv.LU()``, ``sv.Cholesky()``, ``sv.CG(...)``, ... or a name such as ``"lu"``;
        default ``sv.Auto()`` (see its rules).
        Names (case, '-' and '_' ignored): auto, lu, cholesky, cg, minres, gmres, bicgstab,
        amg, woodbury, diagonal, pardiso, petsc; a name gives the default options.
    check_finite : bool
        Check A (here) and every right-hand side (per solve) for NaN/Inf, O(nnz) and O(n).

    Returns
    -------
    LinearCache

    Raises
    ------
    SingularMatrixError, NotHermitianError, NonFiniteInputError, BackendNotSupported
        A singular (or, for Cholesky, not positive definite) matrix; a non-Hermitian one for
        Cholesky; NaN/Inf in A; a method or dtype the arrays' backend lacks (the message names
        the alternative or the install). These are raised whatever you would pass as ``throw``
        to :func:`solve`; ``init`` has no ``throw``.
    TypeError
        ``prob`` is not a LinearProblem, or ``alg`` is not an algorithm.
    ValueError
        An unknown algorithm name (the message lists the names).

    Notes
    -----
    There is no ``check_mutation=`` (removed): the problem holds snapshots of your arrays, so
    later edits of them cannot reach the factorization. Use ``cache.update(A=...)`` to change A.

    Examples
    --------
    >>> import numpy as np
    >>> cache = init(LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), np.array([1.0, 2.0])))
    >>> cache.solve().round(3).tolist(), cache.stats.factorizations
    ([0.1, 0.6], 1)
    >>> cache.solve_adjoint(np.array([1.0, 1.0])).round(3).tolist(), cache.stats.factorizations
    ([0.1, 0.3], 1)
    >>> init(LinearProblem(np.eye(2)), "qr")
    Traceback (most recent call last):
    ...
    ValueError: unknown algorithm 'qr'; names: amg, auto, bicgstab, cg, cholesky, diagonal, ...
    """
    return LinearCache(prob, alg, check_finite=check_finite)


def solve(prob: LinearProblem, alg=None, *, throw: bool = True,
          check_finite: bool = True) -> Solution:
    """Solve A u = b: ``init`` (one factorization) + ``cache.solve()``.

    Parameters
    ----------
    prob : LinearProblem
        A, b (required here) and the hints ``hermitian=``/``posdef=``.
    alg : algorithm object or name, optional
        Default ``sv.Auto()``: Cholesky (CHOLMOD/LAPACK) for hinted positive definite problems,
        SuperLU/LAPACK LU otherwise, Woodbury for B + low rank, CG/GMRES for matrix-free A.
        Or any of ``sv.LU()``, ``sv.Cholesky()``, ``sv.CG()``, ``sv.MINRES()``,
        ``sv.GMRES()``, ``sv.BiCGStab()`` (preconditioners ``sv.AMG()``, ``sv.ILU()``,
        ``sv.Jacobi()``), ``sv.AMG()`` as a solver, ``sv.Woodbury()``, ``sv.DiagonalSolve()``,
        ``sv.Pardiso()``, ``sv.PETSc()``, or a name (``"lu"``, ``"cg"``, ...: see :func:`init`).
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
        ``u`` is read-only, of b's shape; ``status`` is ``SUCCESS`` or ``ACCURACY_LIMIT`` (an
        iterative result at the rounding level of the precision), or with ``throw=False`` the
        failure; ``cache`` is None only when the factorization itself failed. ``stats`` counts
        the work (``factorizations``, ``solves``, ``iterations``, times) and keeps counting as
        the cache is reused. ``sol.current`` is False once ``sol.cache.update(...)`` replaced A.

    Raises
    ------
    SolveError
        With ``throw=True``: its subclasses ``SingularMatrixError``, ``NotHermitianError``,
        ``NonFiniteInputError``, ``ConvergenceError`` (each with its ``status``).
    BackendNotSupported
        The method or dtype is not available for the arrays' backend (whatever ``throw``).
    TypeError, ValueError, ShapeError
        Misuse: not a LinearProblem, an unknown algorithm, no b (whatever ``throw``).

    Notes
    -----
    The default, ``sv.Auto()``, picks by structure and hints, first match wins: a Diagonal or
    Identity is divided (exact, O(n)); ``B + LowRank`` goes through Woodbury over ``Auto(B)``; a
    Dense A gets LAPACK Cholesky when ``posdef=True`` and LU otherwise; a Sparse A gets CG + AMG
    when ``posdef=True`` and n > 2·10⁶, PARDISO from n = 2·10⁴ when pypardiso is installed,
    CHOLMOD Cholesky when ``posdef=True`` and scikit-sparse is installed, SuperLU LU otherwise; a
    matrix-free A gets CG (hermitian and posdef) or GMRES. A ``posdef``/``hermitian`` hint on a
    matrix that is not Hermitian warns (``HintWarning``) and uses LU: never a wrong answer. See
    ``help(sv.Auto)`` for the table and its thresholds; ``sol.cache.kind`` says what was chosen.

    Iterative results are checked against the TRUE residual ‖b − A u‖ before they are returned
    (the acceptance policy of ``solvers._krylov``); a direct solve that produced NaN/Inf raises.

    There is no ``check_mutation=`` option any more: A and b are snapshotted when the
    ``LinearProblem`` is built, so editing your arrays afterwards changes nothing here. Solve a
    changed A with ``sol.cache.update(A=A2).solve()`` (a numeric refactorization when the
    pattern is the same).

    Examples
    --------
    >>> import numpy as np
    >>> sol = solve(LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), [1.0, 2.0]))
    >>> sol.u.round(3).tolist(), sol.status.name
    ([0.1, 0.6], 'SUCCESS')
    >>> sol.cache.kind, sol.stats.factorizations
    ('dense LU', 1)

    A failure as a status instead of an exception:

    >>> bad = solve(LinearProblem(np.array([[1.0, 2.0], [2.0, 4.0]]), [1.0, 1.0]), throw=False)
    >>> bad.status.name, bad.u, bad.cache
    ('SINGULAR', None, None)
    """
    if not isinstance(prob, LinearProblem):
        raise TypeError(_NOT_A_PROBLEM.format(type(prob).__name__))
    # two stages, so that with throw=False a failed solve still hands back its usable cache
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
