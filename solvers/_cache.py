"""The LinearCache: a factorization plus counters, and its state rule.

``sv.init`` makes one (:mod:`solvers._solve`); ``solve``, ``solve_adjoint``, ``solve_transpose``
and every pullback reuse its factorization. State rule: a cache never mixes two matrices. Its A
is a snapshot (edits of the arrays you passed in do not reach it; see ``linops._backend``), its
solution ``u`` is read-only, ``update(A=...)`` replaces A, factors and ``generation`` together
and forgets ``u``, and a :class:`Solution` made before an update is refused by pullbacks
(:class:`StaleSolutionError`). A failed factorization or solve leaves the cache exactly as it
was.

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

import numpy as np

import linops as lo
from linops.internals import ShapeError

from ._checks import backend_of_problem, finite_or_raise
from ._contract import Prepared, prepare
from ._errors import BackendNotSupported, ClosedCacheError, HintWarning, SolveError, \
    StaleSolutionError, warn_caller
from ._problem import LinearProblem, as_rhs
from ._registry import entry, resolve
from ._results import CacheStats, Status

NOT_A_PROBLEM = ("expected a solvers.LinearProblem, got {0}; build one first: "
                 "sv.solve(sv.LinearProblem(A, b)) or sv.init(sv.LinearProblem(A, b), alg)")


def least_squares_default(A) -> str:
    """The algorithm a least-squares problem gets without ``alg``: QR (SuiteSparseQR for a
    sparse A when ``sparseqr`` is installed, LAPACK for a dense one), else LSMR."""
    from linops.internals import structure  # noqa: PLC0415 (beside its one use)

    kind = structure(A)
    if kind == "dense" or (kind == "sparse" and entry("qr").unavailable() is None):
        return "qr"
    return "lsmr"


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
    stats : CacheStats
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
    current A and b or is None; every failure leaves the cache as it was. Setups go through
    ``solvers._contract.prepare`` — the same checks for ``init``, ``update`` and ``like=`` —
    and the factor's ``solve(B, trans)`` runs per call, with ``trans`` 'N', 'H' or 'T'.
    Empty shapes never reach a factor: n = 0 and right-hand sides of shape (n, 0) give empty
    results on every engine.

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

    def __init__(self, prob: LinearProblem, alg=None, *, check_finite: bool = True,
                 like: "LinearCache | None" = None):
        if not isinstance(prob, LinearProblem):
            raise TypeError(NOT_A_PROBLEM.format(type(prob).__name__))
        if like is not None and not isinstance(like, LinearCache):
            raise TypeError(f"like must be a solvers.LinearCache (a cache whose symbolic analysis "
                            f"to reuse), got {type(like).__name__}")
        self.prob = prob
        if alg is None and like is None and prob.least_squares:
            alg = least_squares_default(prob.A)
        self.alg = resolve(alg) if alg is not None or like is None else like.alg
        self.check_finite = check_finite
        self.stats = CacheStats()
        self.generation = 0
        self.status: Status | None = None
        self._u = None
        self._closed = False
        if like is not None:
            like.require_open("init(..., like=cache)")
        previous = like.factor if like is not None and like.A.shape == prob.A.shape else None
        self.factor = self._prepare(prob, previous, keep_previous=True).factor

    def _prepare(self, prob: LinearProblem, previous, keep_previous: bool) -> Prepared:
        """The contract's path (``solvers._contract.prepare``), timed and counted."""
        t = time.perf_counter()
        made = prepare(self.alg, prob.A, prob, previous=previous, keep_previous=keep_previous,
                       check_finite=self.check_finite)
        s = self.stats
        s.setup_seconds += time.perf_counter() - t
        if made.reused:
            s.numeric_refactorizations += 1
        else:
            s.factorizations += 1
        s.symbolic_analyses += made.factor.symbolic_analyses
        s.fallbacks += getattr(made.factor, "fallbacks", 0)
        s.tuning_factorizations += made.factor.tuning_factorizations
        return made

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
    def rhs(self):
        """The right-hand side of :attr:`u` for a least-squares cache (read-only), or None:
        its pullback needs the residual b − Au."""
        return getattr(self, "_rhs", None) if self._u is not None else None

    @property
    def kind(self) -> str:
        """What the algorithm set up, in words: 'dense LU', 'SuperLU', 'CHOLMOD',
        'CG + AMG(sa): 3 levels, ...', 'Woodbury(rank 1) over diagonal', ... (``sv.Auto``'s
        choice shows here)."""
        return self.factor.kind or type(self.factor).__name__

    @property
    def info(self) -> str:
        """What the algorithm set up and why, in words: the kind, then ``sv.Auto``'s reason
        (its rule, the winner of a measurement on this pattern with the times of every
        candidate, or of this machine's profile; a factorization a query needed) or the
        algorithm as it was given.

        Examples
        --------
        >>> import numpy as np, solvers as sv
        >>> sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]))).info
        'dense LU — by rule: dense, not Hermitian'
        >>> sv.init(sv.LinearProblem(np.eye(2)), sv.LU()).info
        'dense LU — LU(pivot_rtol=None, symmetric_mode=None), as given'
        """
        why = self.factor.why or f"{self.alg!r}, as given"
        if self.factor.reused_analysis:
            why += ("; the symbolic analysis of an earlier factorization of this pattern "
                    "reused (sv.analyses)")
        return f"{self.kind} — {why}"

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
        m, n = self.A.shape  # A⁺ (n × m) for a least-squares cache
        return lo.MatrixFree((n, m), self.A.dtype, lambda X: self._run(X, "N", "x"),
                             lambda X: self._run(X, "H", "x"))

    def logdet(self):
        """(sign, log|det A|) from the factorization this cache holds: no new factorization.

        LU (LAPACK, SuperLU): the sign of both permutations times the product of U's diagonal;
        Cholesky (LAPACK, CHOLMOD) and PARDISO's Hermitian positive definite types: the sum of
        the logs of the pivots (sign 1); PETSc with a MUMPS LU/Cholesky PC: MUMPS's own
        determinant (any number of ranks). Cost O(n) (SuperLU: O(nnz(U)), reading U's
        diagonal; MUMPS: O(1)).
        The gradient, A⁻ᴴ, is ``adjoints.logdet_pullback(cache)``.

        Returns
        -------
        solvers.LogDet
            ``(sign, logabsdet)`` like ``numpy.linalg.slogdet``.

        Raises
        ------
        SingularMatrixError
            A zero pivot (a cache made with ``pivot_rtol=0``; MUMPS's null pivots): the same on
            every engine.
        BackendNotSupported
            An iterative cache, PARDISO's unsymmetric types, a PETSc factorization other than
            MUMPS: the message names a direct solver, or ``sv.logdet_estimate`` for
            matrix-free operators.

        Examples
        --------
        >>> import numpy as np, solvers as sv
        >>> cache = sv.init(sv.LinearProblem(np.array([[2.0, 1.0], [1.0, 2.0]])), sv.Cholesky())
        >>> sign, logabsdet = cache.logdet()
        >>> sign, round(float(np.exp(logabsdet)), 12), cache.stats.factorizations
        (1.0, 3.0, 1)
        """
        self.require_open("logdet")
        return self._answering("logdet", lambda f: f.logdet())

    def _answering(self, query: str, call):
        """``call(factor)`` for a query beyond solves (``"logdet"``, ``"selected_inverse"``).

        When the factor cannot answer it (BackendNotSupported) and the algorithm can choose
        another engine (``Auto``: :meth:`Algorithm.for_query`), A is factorized once more with a
        capable one — the same checks as ``init``, counted in ``stats.factorizations``, warned
        (:class:`HintWarning`) — which replaces the factor (the same A: ``generation``, ``u``
        and every Solution stay valid), and the problem asks the query from then on (updates
        keep a capable engine). Otherwise the error stands."""
        try:
            return call(self.factor)
        except BackendNotSupported:
            prob = self.prob.asking(query)
            plan = self.alg.for_query(query, self.A, prob, self.factor)
            if plan is None:
                raise
        old = self.kind
        t = time.perf_counter()
        made = prepare(plan, self.A, prob, check_finite=self.check_finite)
        self.stats.setup_seconds += time.perf_counter() - t
        self.stats.factorizations += 1
        self.stats.symbolic_analyses += made.factor.symbolic_analyses
        self.stats.fallbacks += getattr(made.factor, "fallbacks", 0)
        warn_caller(f"{query}: {old}, which Auto chose, cannot answer it; A was factorized once "
                    f"more with {made.factor.kind} (cache.stats.factorizations counts it). "
                    f"Declare it and Auto factorizes once: sv.LinearProblem(..., "
                    f"asks=({query!r},))", HintWarning)
        made.factor.why = (f"asked for {query}, which {old} cannot answer "
                           f"({made.factor.why or 'the rules'})")
        previous, self.factor, self.prob = self.factor, made.factor, prob
        previous.close()
        return call(self.factor)

    def close(self) -> None:
        """Release the factorization's external resources now (PARDISO, PETSc); idempotent.
        Afterwards every solve, ``update``, ``logdet``, selected inversion and
        ``init(..., like=cache)`` raises :class:`ClosedCacheError` (the released objects would
        crash the process). Dropping the cache does the same without the need to call it."""
        self.factor.close()
        self._closed = True

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def require_open(self, what: str) -> None:
        """ClosedCacheError naming ``what`` when the cache was closed."""
        if self._closed:
            raise ClosedCacheError(
                f"{what}: this cache was closed (cache.close() released its {self.kind} "
                f"factorization); build a new one with sv.init(sv.LinearProblem(A), alg)")

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
            An iterative method missed the tolerance (see ``solvers._engines.krylov``).
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
        be = backend_of_problem(self.A, u)
        u = be.freeze(u)
        self._u = u
        if self.prob.least_squares:  # its pullback needs r = b − Au: keep the b of u
            self._rhs = b if b is self.prob.b else be.freeze(be.xp.asarray(b).copy())
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

    def solve_gram(self, c):
        """λ = (AᴴA)⁻¹ c for a least-squares cache whose A (m ≥ n) has full column rank, from
        the QR factors: R⁻ᴴ then R⁻¹ (two triangular solves, no Q, never AᴴA itself). The solve
        the least-squares pullback needs (λ for x̄ = c; then Aλ = A⁺ᴴc). Counted as an adjoint
        solve.

        Raises
        ------
        BackendNotSupported
            The cache's engine has no R (LSMR, the square solvers), or A is wide.

        Examples
        --------
        >>> import numpy as np, solvers as sv
        >>> A = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
        >>> cache = sv.init(sv.LeastSquares(A))
        >>> bool(np.allclose(cache.solve_gram(np.ones(2)), np.linalg.solve(A.T @ A, np.ones(2))))
        True
        """
        self.require_open("solve_gram")
        fn = getattr(self.factor, "gram_solve", None)
        if fn is None or not getattr(self.factor, "column_rank", False):
            raise BackendNotSupported(f"solve_gram needs the R of a QR factorization of an A with "
                                      f"full column rank; this cache holds {self.kind} of an A "
                                      f"of shape {self.A.shape}")
        c = as_rhs(self.A, c, "c", rows=self.A.shape[1])
        if self.check_finite:
            finite_or_raise(c, "c")
        C = c[:, None] if c.ndim == 1 else c
        X = fn(C)
        self.stats.adjoint_solves += 1
        dtype = np.result_type(self.A.dtype, c.dtype, np.float32)
        if np.dtype(X.dtype) != dtype:
            X = X.astype(dtype)
        return X[:, 0] if c.ndim == 1 else X

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
        self.require_open({"N": "solve", "H": "solve_adjoint", "T": "solve_transpose"}[trans])
        m, n = self.A.shape  # least squares: b has m rows, c (adjoint, transpose) n
        b = as_rhs(self.A, b, name, rows=None if m == n or trans == "N" else n)
        if self.check_finite:
            finite_or_raise(b, name)
        B = b[:, None] if b.ndim == 1 else b  # factors see (n, k) only
        # the answer's dtype depends on the inputs only, never on the factor's working precision
        dtype = np.result_type(self.A.dtype, b.dtype, np.float32)
        be = backend_of_problem(self.A, b)
        out = (n if trans == "N" else m, B.shape[1])
        if B.shape[0] == 0 or B.shape[1] == 0 or out[0] == 0:  # empty: exact, no engine sees it
            X = be.xp.zeros(out, dtype=dtype)
        else:
            try:
                X = self._factor_solve(B, trans, be)
            except SolveError as e:  # a failure's last iterate, in the caller's shape and dtype
                it = getattr(e, "iterate", None)
                if it is not None and tuple(it.shape) == tuple(B.shape):
                    it = it.astype(dtype) if np.dtype(it.dtype) != dtype else it
                    e.iterate = be.freeze(it[:, 0] if b.ndim == 1 else it)
                raise
        self.status = self.factor.last_status or Status.SUCCESS
        attr = {"N": "solves", "H": "adjoint_solves", "T": "transpose_solves"}[trans]
        setattr(self.stats, attr, getattr(self.stats, attr) + 1)
        self.stats.columns += int(B.shape[1]) if B.shape[0] else 0
        if np.dtype(X.dtype) != dtype:
            X = X.astype(dtype)
        return X[:, 0] if b.ndim == 1 else X

    def _factor_solve(self, B, trans: str, be):
        t = time.perf_counter()
        it0 = self.factor.iterations
        try:
            X = self.factor.solve(B, trans)
        finally:  # failed runs count their iterations too
            self.stats.iterations += self.factor.iterations - it0
            self.stats.solve_seconds += time.perf_counter() - t
        # O(n·k): a direct solve that hit a pivot the check let through surfaces here, not later
        if not bool(be.xp.all(be.xp.isfinite(X))):
            raise SolveError(f"the solve produced NaN/Inf; {Status.NONFINITE.message}",
                             Status.NONFINITE)
        return X

    # ----- updates --------------------------------------------------------------------------------
    def update(self, A=None, b=None) -> "LinearCache":
        """New A and/or b.

        An update is held to every check ``init`` makes (dtype, finiteness, the hint and
        Hermitian checks, the singularity checks): it goes through the same path
        (``solvers._contract.prepare``) and only then may reuse symbolic work. A with the same
        structure (pattern), the same working precision and meeting the factor's requirements
        (a Cholesky factor needs a Hermitian A): numeric refactorization (symbolic analysis
        kept where the backend allows); otherwise a full setup, exactly as ``init`` would make
        it (``Auto`` re-chooses, with its warnings). Either way ``generation`` grows and ``u``
        is forgotten (it belonged to the old A); a new b alone also forgets ``u``. On failure
        the cache keeps its previous A, factors, generation and ``u``.

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
        SingularMatrixError, NotHermitianError, NonFiniteInputError, BackendNotSupported
            From the checks or the new factorization; the cache is unchanged.

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
        self.require_open("update")
        prob = self.prob
        if A is not None:
            A = lo.aslinop(A)
            if A.shape != prob.A.shape:
                raise ShapeError(f"update: new A.shape={A.shape} but the cache's "
                                 f"A.shape={prob.A.shape}")
            new_prob = LinearProblem(A, prob.b if b is None else b, asks=prob.asks,
                                     **prob.given_hints, least_squares=prob.least_squares)
            # build the new factor first and assign last: a failure leaves the cache untouched
            made = self._prepare(new_prob, self.factor, keep_previous=False)
            self.factor, self.prob = made.factor, new_prob
            self.generation += 1
            self._u = None
        elif b is not None:
            self.prob = LinearProblem(prob.A, b, asks=prob.asks, **prob.given_hints,
                                      least_squares=prob.least_squares)
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
