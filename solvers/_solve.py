"""``sv.init`` and ``sv.solve``: the two entry points.

``init`` factorizes once and returns the :class:`~solvers.LinearCache`; ``solve`` is ``init`` plus
one solve, returning a :class:`~solvers.Solution` (with ``throw=False``: always one, its status
saying what happened).
"""

from __future__ import annotations

from ._cache import NOT_A_PROBLEM, LinearCache
from ._errors import SolveError
from ._problem import LinearProblem
from ._results import CacheStats, Solution


def init(prob: LinearProblem, alg=None, *, check_finite: bool = True,
         like: LinearCache | None = None) -> LinearCache:
    """Factorize (or set up the preconditioner) once; returns the reusable cache.

    Everything expensive happens here: the factorization (or the preconditioner and its
    hierarchy), the Hermitian check of Cholesky, the singularity checks, the finiteness check of
    A. What follows reuses it: ``cache.solve(b)``, ``cache.solve_adjoint(c)``,
    ``cache.solve_transpose(c)``, ``cache.as_operator()`` and the pullbacks of ``adjoints``.

    Parameters
    ----------
    prob : LinearProblem
    alg : algorithm object or name, optional
        ``sv.LU()``, ``sv.Cholesky()``, ``sv.CG(...)``, ... or a registered name such as
        ``"lu"`` (case, '-' and '_' ignored; a name gives the default options); default
        ``sv.Auto()`` (see its rules). ``sv.show_config()`` lists every registered algorithm,
        the operators it takes and whether it runs here.
    check_finite : bool
        Check A (here) and every right-hand side (per solve) for NaN/Inf, O(nnz) and O(n).
    like : LinearCache, optional
        A cache of a matrix with the same pattern: its symbolic analysis is reused and it stays
        usable (SuperLU's column order, CHOLMOD's symbolic factor, PARDISO's analysis through a
        second factor slot, AMG's aggregation is rebuilt). The new cache counts
        ``numeric_refactorizations == 1``, ``symbolic_analyses == 0``. With another pattern or
        dtype kind it is an ordinary ``init`` (a full setup, counted). ``alg`` defaults to
        ``like.alg``. Every check of ``init`` is made either way.

    Returns
    -------
    LinearCache

    Raises
    ------
    SingularMatrixError, NotHermitianError, NonFiniteInputError, BackendNotSupported
        A singular (or, for Cholesky, not positive definite) matrix; a non-Hermitian one for
        Cholesky; NaN/Inf in A; an operator structure, array backend or dtype the algorithm
        does not declare, or a method the arrays' backend lacks (the message names the
        alternative or the install). These are raised whatever you would pass as ``throw``
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
    >>> import numpy as np, scipy.sparse as sp
    >>> cache = init(LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), np.array([1.0, 2.0])))
    >>> cache.solve().round(3).tolist(), cache.stats.factorizations
    ([0.1, 0.6], 1)
    >>> cache.solve_adjoint(np.array([1.0, 1.0])).round(3).tolist(), cache.stats.factorizations
    ([0.1, 0.3], 1)

    A batch of matrices on one pattern, one symbolic analysis:

    >>> S = sp.csr_array(np.array([[4.0, 1.0], [2.0, 3.0]]))
    >>> first = init(LinearProblem(S), "lu")
    >>> second = init(LinearProblem(2 * S), like=first)
    >>> first.stats.symbolic_analyses, second.stats.symbolic_analyses, second.kind
    (1, 0, 'SuperLU')
    >>> init(LinearProblem(np.eye(2)), "svd")
    Traceback (most recent call last):
    ...
    ValueError: unknown algorithm 'svd'; names: amg, auto, bicgstab, cg, cholesky, diagonal, ...
    """
    return LinearCache(prob, alg, check_finite=check_finite, like=like)


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
        no convergence — returns a Solution whose ``status`` says what happened (``status.ok``
        is False). Its ``u`` is the iterative method's LAST ITERATE when there is one (scipy,
        lineax and LinearSolve.jl do the same; inexact Newton methods need it), else None.
    check_finite : bool
        See :func:`init`.

    Returns
    -------
    Solution
        ``u``, ``status``, ``stats``, ``cache`` (reuse it: ``sol.cache.solve_adjoint(c)``).
        ``u`` is read-only, of b's shape; ``status`` is ``SUCCESS`` or ``ACCURACY_LIMIT`` (an
        iterative result at the rounding level of the precision), or with ``throw=False`` the
        failure (with the last iterate as ``u`` where there is one); ``cache`` is None only when the factorization itself failed. ``stats`` counts
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
    (the acceptance rule of ``solvers._acceptance``); a direct solve that produced NaN/Inf
    raises.

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
        raise TypeError(NOT_A_PROBLEM.format(type(prob).__name__))
    # two stages, so that with throw=False a failed solve still hands back its usable cache
    try:
        cache = init(prob, alg, check_finite=check_finite)
    except SolveError as e:
        if throw:
            raise
        return Solution(None, e.status, CacheStats(), None)
    try:
        u = cache.solve()
    except SolveError as e:
        if throw:
            raise
        return Solution(getattr(e, "iterate", None), e.status, cache.stats, cache,
                        cache.generation)
    return Solution(u, cache.status, cache.stats, cache, cache.generation)
