"""Iterative solvers: CG, MINRES, GMRES, BiCGStab (the backend's Krylov module: scipy, cupyx or
jax.scipy) and the standalone AMG cycle, with one acceptance policy for all of them.

Acceptance policy (what a returned iterate means)
-------------------------------------------------
1. The method runs with its own stopping test at ``rtol`` (scipy's GMRES tests the
   left-preconditioned residual, CG/BiCGStab a recursively updated residual, MINRES a residual
   estimate).
2. The TRUE residual r = ‖b − A x‖ is computed once (one product with A).
3. If r > tol = max(rtol·‖b‖, atol) although the method claimed convergence, it is restarted from
   x with a tighter internal tolerance, at most ``RESTARTS`` times and only while each restart
   at least halves r (otherwise it has stagnated).
4. The result is **accepted** with ``Status.SUCCESS`` when r ≤ tol, and with
   ``Status.ACCURACY_LIMIT`` when r is within the attainable accuracy of the arithmetic,
   r ≤ c·√n·eps·(‖|A||x|‖ + ‖b‖) (c = ``ATTAINABLE``): rounding alone produces residuals of that
   size, so no iterate can do better in this precision — provided also r ≤ √eps·‖b‖, or, for
   badly scaled systems where even that is out of reach, one more run from x leaves x unchanged
   to √eps (a settled iterate; an iterate that blows up on a singular or inconsistent system keeps
   moving and is never accepted). Anything else raises
   :class:`ConvergenceError` with ``Status.MAX_ITERATIONS`` (the method ran out of iterations)
   or ``Status.STAGNATION`` (it claimed convergence, the true residual disagrees and restarts
   do not help) — never a silently wrong iterate.

No per-iteration residual is computed (that would cost one more product with A per iteration):
``history`` holds what the method reports for free (GMRES: preconditioned residual norms).

Adjoint solves (Aᴴλ = c): CG and MINRES (Hermitian A) run the same method with the same (Hermitian)
preconditioner. GMRES and BiCGStab run on the exact adjoint of the forward preconditioned
operator: Aᴴ Mᴴ y = c, λ = Mᴴ y (right preconditioning with Mᴴ), so they converge like the
forward solve and test the true adjoint residual. Transpose solves are conj(Aᴴ-solve(conj c)).

Each column of a right-hand side (n, k) is a separate run; a complex right-hand side of a real
problem is solved as its real and imaginary parts. ``cache.stats.iterations`` counts the
iterations of every run (restarts and failed runs included).

Examples
--------
In single precision a tolerance of 1e-12 is out of reach; the result is accepted at the limit
of attainable accuracy and says so:

>>> import numpy as np, scipy.sparse as sp, solvers as sv
>>> A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50), format="csr", dtype=np.float32)
>>> sol = sv.solve(sv.LinearProblem(A, np.ones(50, np.float32)), sv.GMRES(rtol=1e-12))
>>> sol.status.name, sol.u.dtype
('ACCURACY_LIMIT', dtype('float32'))
>>> bool(np.linalg.norm(A @ sol.u - 1) <= 1e-4 * np.sqrt(50))
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

import linops as lo
from linops.internals import is_array, to_numpy

from ._backend import backend_of_problem, default_rtol, eps, precision, split_complex
from ._errors import ConvergenceError, Status

RESTARTS = 4       # restarts after a convergence claim the true residual denies (step 3)
ATTAINABLE = 16.0  # c in the attainable-accuracy bound c·√n·eps·(‖|A||x|‖ + ‖b‖) (step 4)


def default_maxiter(n: int) -> int:
    """Iterations allowed when ``maxiter`` is None: 10·n, at most 20 000."""
    return int(min(10 * max(n, 1), 20_000))


def _check_spec(spec) -> None:
    """Validate (and normalise: atol None -> 0, a list x0 -> array) a Krylov or AMG spec at
    construction, so that a bad option fails where it was written, not at the first solve."""
    if spec.atol is None:  # as scipy: None means the default (no absolute floor)
        object.__setattr__(spec, "atol", 0.0)
    x0 = getattr(spec, "x0", None)
    if x0 is not None:
        if isinstance(x0, (list, tuple)):
            object.__setattr__(spec, "x0", np.asarray(x0))
        elif not is_array(x0):
            raise TypeError(f"{type(spec).__name__}: x0 must be None or an array of shape (n,), "
                            f"got {type(x0).__name__} {x0!r}")
    for name in ("rtol", "atol"):
        v = getattr(spec, name)
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{type(spec).__name__}: {name} must be a finite number >= 0, got "
                             f"{name}={v!r}")
    m = spec.maxiter
    if m is not None and not (isinstance(m, (int, np.integer)) and m > 0):
        raise ValueError(f"{type(spec).__name__}: maxiter must be a positive integer (or None), "
                         f"got maxiter={m!r}")


@dataclass(frozen=True)
class _Krylov:
    """The options every Krylov method shares; ``setup`` builds the preconditioner once."""

    rtol: float | None = None
    atol: float = 0.0
    maxiter: int | None = None
    x0: Any = None
    precond: Any = None

    method = ""

    def __post_init__(self):
        _check_spec(self)

    def setup(self, A, prob):
        """Build the preconditioner (if any) for A; nothing else is precomputed."""
        return _KrylovFactor(self, A, prob)


_COMMON_DOC = """
    Parameters
    ----------
    rtol, atol : float
        Stop when ‖b − A x‖ ≤ max(rtol·‖b‖, atol). ``rtol=None``: 1e-8 in double precision,
        1e-5 in single. See the acceptance policy in ``solvers._krylov`` (results at the limit of
        attainable accuracy are returned with ``Status.ACCURACY_LIMIT``).
    maxiter : int, optional
        Total iterations (products with A) allowed per right-hand side; default 10·n, at most
        20 000.{restart_note}
    x0 : array, optional
        Initial guess for forward solves (adjoint solves start from zero).
    precond : sv.AMG(), sv.ILU() or sv.Jacobi(), optional
        Set up once, at ``init``. {precond_note}

    Raises
    ------
    ValueError
        At construction: a negative or non-finite ``rtol``/``atol``, a ``maxiter`` that is not
        a positive integer{restart_raise}.
    TypeError
        At construction: an ``x0`` that is not an array.
    ShapeError
        At ``init``: ``x0`` not of shape (n,).
    BackendNotSupported
        At ``init``: the method (or the preconditioner) is missing on the arrays' backend.
    ConvergenceError
        Per solve, when the acceptance policy refuses the iterate: ``status`` is
        ``MAX_ITERATIONS``, ``STAGNATION``, ``BREAKDOWN`` or ``NONFINITE``; ``history`` and
        the last ``iterate`` are attached.

    Notes
    -----
    The result is accepted on the TRUE residual ‖b − A x‖, computed once per run (the
    acceptance policy in ``solvers._krylov``): ``Status.SUCCESS`` when it meets the
    tolerance, ``Status.ACCURACY_LIMIT`` when it is at the rounding level of the precision,
    otherwise a :class:`ConvergenceError`; never a silently unconverged iterate.

{adjoint_note}
"""


@dataclass(frozen=True)
class CG(_Krylov):
    __doc__ = ("""Conjugate gradients for Hermitian positive definite A. Cost per iteration: one
    product with A and one preconditioner application.
""" + _COMMON_DOC.format(restart_note="", restart_raise="",
                         precond_note="It must be Hermitian positive definite.",
                         adjoint_note="""\
    Adjoint solves run CG on A itself (A = Aᴴ) with the same preconditioner; the true adjoint
    residual is still checked, so a non-Hermitian A is caught there.""")
               + """
    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> A = np.array([[4.0, 1.0], [1.0, 3.0]])
    >>> sv.solve(sv.LinearProblem(A, np.ones(2)), sv.CG(rtol=1e-12)).u.round(4).tolist()
    [0.1818, 0.2727]

    With algebraic multigrid on a 2-D Poisson problem, and the adjoint solve on the same
    hierarchy:

    >>> import pyamg
    >>> P = pyamg.gallery.poisson((30, 30), format="csr")
    >>> cache = sv.init(sv.LinearProblem(P, np.ones(900)), sv.CG(rtol=1e-10, precond=sv.AMG()))
    >>> _ = cache.solve(), cache.solve_adjoint(np.ones(900))
    >>> cache.status.name, cache.stats.factorizations, cache.stats.iterations < 40
    ('SUCCESS', 1, True)
    """)

    method = "cg"


@dataclass(frozen=True)
class MINRES(_Krylov):
    __doc__ = ("""MINRES for Hermitian, possibly indefinite A. Not available on jax.

    Cost per iteration: one product with A, one preconditioner application; a short
    recurrence (a few vectors of memory), like CG.
""" + _COMMON_DOC.format(restart_note="", restart_raise="",
                         precond_note="""It must be Hermitian positive definite (scipy refuses
        an indefinite one: ConvergenceError with BREAKDOWN).""",
                         adjoint_note="    Adjoint solves run MINRES on A itself (A = Aᴴ).")
               + """
    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> A = sp.diags([1.0, -2.0, 4.0, -8.0], format="csr")     # symmetric, indefinite
    >>> sv.solve(sv.LinearProblem(A, np.ones(4)), sv.MINRES(rtol=1e-12)).u.round(6).tolist()
    [1.0, -0.5, 0.25, -0.125]
    """)

    method = "minres"


@dataclass(frozen=True)
class GMRES(_Krylov):
    __doc__ = ("""Restarted GMRES for general A (``restart``: Krylov subspace size per cycle; the
    method restarts every ``restart`` iterations, which can slow or stall convergence).

    Cost per iteration: one product with A, one preconditioner application and an
    orthogonalisation against up to ``restart`` vectors (O(n·restart) work and memory).
""" + _COMMON_DOC.format(restart_note="""
        (scipy's GMRES counts maxiter in restart cycles: it gets ceil(maxiter/restart).)""",
                         restart_raise=", or a ``restart`` that is not a positive integer",
                         precond_note="""Applied on the left for forward solves and as Mᴴ
        on the right for adjoint solves.""",
                         adjoint_note="""\
    Adjoint solves run on Aᴴ Mᴴ (the exact adjoint of the forward preconditioned operator), so
    they converge like the forward solve. ``history`` in a ConvergenceError holds GMRES's
    preconditioned residual per iteration.""")
               + """
    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> A = sp.diags([-1.6, 2.5, -0.4], [-1, 0, 1], shape=(50, 50), format="csr")
    >>> alg = sv.GMRES(rtol=1e-12, precond=sv.ILU())
    >>> cache = sv.init(sv.LinearProblem(A, np.ones(50)), alg)
    >>> u, lam = cache.solve(), cache.solve_adjoint(np.ones(50))
    >>> bool(np.allclose(A @ u, 1.0) and np.allclose(A.T @ lam, 1.0)), cache.stats.factorizations
    (True, 1)
    >>> sv.init(sv.LinearProblem(A, np.ones(50)), sv.GMRES(maxiter=3)).solve()
    Traceback (most recent call last):
    ...
    solvers._errors.ConvergenceError: GMRES stopped with relative residual ... > rtol=1e-08 ...
    """)

    restart: int = 50
    method = "gmres"  # the backend table's name (and capability) for this method

    def __post_init__(self):
        super().__post_init__()
        if not (isinstance(self.restart, (int, np.integer)) and self.restart > 0):
            raise ValueError(f"GMRES: restart must be a positive integer, got "
                             f"restart={self.restart!r}")


@dataclass(frozen=True)
class BiCGStab(_Krylov):
    __doc__ = ("""BiCGStab for general A. Not available on cupy.

    Cost per iteration: two products with A and two preconditioner applications; a short
    recurrence (constant memory), but no minimisation property: the residual can jump.
""" + _COMMON_DOC.format(restart_note="", restart_raise="",
                         precond_note="Applied on the right (as Mᴴ for adjoint solves).",
                         adjoint_note="""\
    Adjoint solves run on Aᴴ Mᴴ (the exact adjoint of the forward preconditioned operator).""")
               + """
    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> A = sp.diags([-1.6, 2.5, -0.4], [-1, 0, 1], shape=(50, 50), format="csr")
    >>> alg = sv.BiCGStab(rtol=1e-12, precond=sv.Jacobi())
    >>> sol = sv.solve(sv.LinearProblem(A, np.ones(50)), alg)
    >>> sol.status.name, bool(np.allclose(A @ sol.u, 1.0))
    ('SUCCESS', True)
    """)

    method = "bicgstab"


# ----- the shared policy -------------------------------------------------------------------------
class _IterativeFactor:
    """The 'factorization' of an iterative method: its preconditioner(s), built once, and the
    acceptance policy. Subclasses implement ``_run``.

    ``_run(op, trans, b, x0, rtol, history) -> (x, outcome)`` is one run of the method from x0
    with its own stopping test at ``rtol``; outcome is 'converged', 'maxiter' or 'breakdown'.
    Everything after it (true residual, restarts, acceptance, the error) is here, shared.
    """

    hermitian_method = False

    def __init__(self, spec, A: lo.LinearOperator, prob):
        self.spec, self.A, self.prob = spec, A, prob
        self.be = backend_of_problem(A, getattr(prob, "b", None))
        self.dtype = precision(A.dtype)
        self.hermitian = bool(prob.hermitian) if prob is not None else False
        self.iterations = 0
        self.history: list[float] = []
        self.last_status = Status.SUCCESS
        if spec.x0 is not None and tuple(spec.x0.shape) != (A.shape[1],):
            from linops.internals import ShapeError

            raise ShapeError(f"x0.shape={tuple(spec.x0.shape)} but A.shape={A.shape}")

    def refactor(self, A):
        return type(self)(self.spec, A, self.prob)

    def solve(self, B, trans: str):
        xp = self.be.xp
        if trans == "T":
            return xp.conj(self.solve(xp.conj(B), "H"))
        statuses: list[Status] = []

        def run(R):
            cols = [self._solve_one(R[:, j], trans, statuses) for j in range(R.shape[1])]
            return xp.stack(cols, axis=1)

        X = split_complex(run, B, self.dtype)
        # one status for the whole call: the weakest column's (every column was accepted)
        self.last_status = (Status.ACCURACY_LIMIT if Status.ACCURACY_LIMIT in statuses
                            else Status.SUCCESS)
        return X

    def _solve_one(self, b, trans, statuses):
        xp = self.be.xp
        spec = self.spec
        bnorm = float(xp.linalg.norm(b))
        if bnorm == 0:  # exact answer; a relative test against ‖b‖ = 0 could never pass
            statuses.append(Status.SUCCESS)
            return xp.zeros_like(b)
        rtol = default_rtol(self.dtype) if spec.rtol is None else spec.rtol
        tol = max(rtol * bnorm, spec.atol)
        # the operator of the residual checks (Aᴴ for adjoint solves, applied without forming
        # a transposed pattern) and the one the method runs on: a method that needs a Hermitian
        # A runs on A itself, and the residual with the true Aᴴ catches an A that is not
        op = self.A if trans == "N" else _adjoint_operator(self.A)
        run_op = self.A if trans == "N" or self.hermitian_method else op
        x0 = spec.x0 if trans == "N" and spec.x0 is not None else None
        if x0 is not None:
            x0 = self.be.xp.asarray(x0)
        history: list[float] = []
        inner = rtol
        best = None  # (r, x, Ax, outcome) of the best iterate so far
        for _ in range(1 + RESTARTS):
            x, outcome = self._run(run_op, trans, b, x0 if best is None else best[1], inner,
                                   history)
            Ax = op @ x
            r = float(xp.linalg.norm(b - Ax))
            if not np.isfinite(r):
                break
            improved = best is None or r <= 0.5 * best[0]
            if best is None or r < best[0]:
                best = (r, x, Ax, outcome)
            # restart only when the method claimed a convergence that the true residual denies,
            # above the attainable accuracy, and the previous restart helped
            if (best[0] <= tol or outcome != "converged" or not improved
                    or best[0] <= self._attainable(trans, best[1], best[2], bnorm)):
                break
            inner = max(inner * 0.5 * tol / best[0], eps(self.dtype))  # ask for what is missing
        name = type(spec).__name__
        if best is None:
            self.history = history + [math.inf]
            raise ConvergenceError(f"{name}: the iterate is not finite; {Status.NONFINITE.message}",
                                   self.history, None, Status.NONFINITE)
        r, x, Ax, outcome = best
        self.history = history + [r / bnorm]
        if r <= tol:
            statuses.append(Status.SUCCESS)
            return x
        rounding = self._rounding(trans, x, Ax, bnorm)
        if r <= rounding and (r <= math.sqrt(eps(self.dtype)) * bnorm
                              or self._settled(run_op, trans, b, x, rtol)):
            statuses.append(Status.ACCURACY_LIMIT)
            return x
        status = {"converged": Status.STAGNATION, "breakdown": Status.BREAKDOWN}.get(
            outcome, Status.MAX_ITERATIONS)
        limit = min(rounding, math.sqrt(eps(self.dtype)) * bnorm)
        raise ConvergenceError(
            f"{name} stopped with relative residual {r / bnorm:.3g} > rtol={rtol:g} "
            f"(atol={spec.atol:g}; attainable in this precision ≈ {limit / bnorm:.2g}); "
            f"{status.message}", self.history, x, status)

    def _rounding(self, trans, x, Ax, bnorm) -> float:
        """c·√n·eps·(‖|A||x|‖ + ‖b‖): the size of residual that rounding alone produces
        (|Aᴴ| for adjoint solves; ‖Ax‖ stands in for operators without stored entries)."""
        xp = self.be.xp
        absAx = _abs_product(self.A, trans, x)
        ax = float(xp.linalg.norm(absAx)) if absAx is not None else float(xp.linalg.norm(Ax))
        return ATTAINABLE * math.sqrt(self.A.shape[0]) * eps(self.dtype) * (ax + bnorm)

    def _attainable(self, trans, x, Ax, bnorm) -> float:
        """The residual below which restarting cannot help: the rounding level, capped at
        √eps·‖b‖ (above the cap ``_settled`` decides)."""
        return min(self._rounding(trans, x, Ax, bnorm), math.sqrt(eps(self.dtype)) * bnorm)

    def _settled(self, op, trans, b, x, rtol) -> bool:
        """A residual at the rounding level but above √eps·‖b‖ happens for badly scaled
        systems (rows scaled by 10^±8: LinearSolve.jl #476) and for diverging iterates of
        singular or inconsistent ones. They differ in whether x is a fixed point: one more run
        from x moves a settled iterate by rounding only (|δ| ≲ |A⁻¹| eps |A| |x|), while a
        diverging one keeps growing. Accept when the move is below √eps·‖x‖."""
        xp = self.be.xp
        x2, _ = self._run(op, trans, b, x, rtol, [])
        move, size = float(xp.linalg.norm(x2 - x)), float(xp.linalg.norm(x))
        return bool(np.isfinite(move) and move <= math.sqrt(eps(self.dtype)) * size)

    def _run(self, op, trans, b, x0, rtol, history):  # pragma: no cover - abstract
        raise NotImplementedError


def _adjoint_operator(A: lo.LinearOperator) -> lo.LinearOperator:
    """Aᴴ for Krylov runs and residual checks: for Sparse a matrix-free product through the
    backend's native transposed view (no sorted transposed pattern, which would cost a sort
    and 16 bytes per stored entry); otherwise ``A.adjoint()``."""
    if not isinstance(A, lo.Sparse):
        return A.adjoint()
    from linops.internals import backend_of

    be = backend_of(A.values)
    return lo.MatrixFree((A.shape[1], A.shape[0]), A.dtype,
                         lambda X: be.spmm_adjoint(A.values, A.pattern, X), lambda X: A @ X)


def _abs_product(A, trans: str, x):
    """|A| |x| (|A|ᵀ |x| for adjoint solves) for operators that store their entries, else None."""
    from linops.internals import backend_of

    if isinstance(A, lo.Sparse):
        be = backend_of(A.values)
        v, ax = be.xp.abs(A.values), be.xp.abs(x)
        return be.spmm(v, A.pattern, ax) if trans == "N" else be.spmm_adjoint(v, A.pattern, ax)
    if isinstance(A, lo.Dense):
        xp = backend_of(A.a).xp
        return (xp.abs(A.a) if trans == "N" else xp.abs(A.a).T) @ xp.abs(x)
    if isinstance(A, lo.Diagonal):
        xp = backend_of(A.d).xp
        return xp.abs(A.d) * xp.abs(x)
    return None


class _AMGTracked:
    """Mixin for factors whose preconditioner ``M`` may be an AMG hierarchy: records the
    iterations of every solve in ``self.amg`` (an :class:`AMGReuse`, shared by the factors of
    one cache) and, on ``refactor``, keeps / recomputes / rebuilds the hierarchy by its policy."""

    amg = None

    def solve(self, B, trans: str):
        it0 = self.iterations
        try:
            return super().solve(B, trans)
        finally:
            if self.amg is not None:
                self.amg.record(self.iterations - it0)

    def refactor(self, A):
        if self.amg is None:
            return type(self)(self.spec, A, self.prob)
        M = self.amg.update(self.M, A, self._amg_spec, self.hermitian, self.be)
        return type(self)(self.spec, A, self.prob, M=M, amg=self.amg)


class _KrylovFactor(_AMGTracked, _IterativeFactor):
    """A Krylov method of the backend's module with its preconditioner ``M`` (built here, once
    per cache; with AMG kept or rebuilt across updates by the ``AMGReuse`` policy)."""

    def __init__(self, spec, A, prob, M=None, amg=None):
        from ._precond import AMG, AMGReuse

        super().__init__(spec, A, prob)
        self.be.require(spec.method, type(spec).__name__, self.dtype)
        self.hermitian_method = spec.method in ("cg", "minres")
        if M is None and spec.precond is not None:
            M = spec.precond.build(A, self.hermitian, self.be)
        self.M = M
        if isinstance(spec.precond, AMG):
            self._amg_spec = spec.precond
            self.amg = amg if amg is not None else AMGReuse()
        self.kind = type(spec).__name__ + (f" + {self.M.summary}" if self.M is not None else "")

    def _run(self, op, trans, b, x0, rtol, history):
        """One run of the backend's Krylov method; outcome 'converged' | 'maxiter' | 'breakdown'."""
        spec = self.spec
        n = op.shape[0]
        M = self.M.as_operator() if self.M is not None else None
        right = None
        if M is not None and trans != "N" and not self.hermitian_method:
            # the exact adjoint of the left-preconditioned forward operator: Aᴴ Mᴴ (a method
            # for Hermitian A runs its adjoint solves on A itself, with the same M)
            MH = M.adjoint()
            right, M, op, x0 = MH, None, op @ MH, None
        maxiter = spec.maxiter or default_maxiter(n)
        # a basis beyond n (or beyond maxiter) is never used but would still be allocated
        restart = min(getattr(spec, "restart", n), n, maxiter)
        try:
            x, info, its = self.be.run_krylov(spec.method, op, b, x0=x0, rtol=rtol,
                                              atol=spec.atol, M=M, restart=restart,
                                              maxiter=maxiter, history=history)
        except ValueError as e:  # scipy's MINRES refuses an indefinite preconditioner
            if "indefinite" not in str(e):
                raise
            raise ConvergenceError(
                f"{type(spec).__name__}: {e}: {spec.method.upper()} needs a Hermitian positive "
                f"definite preconditioner (Jacobi of a matrix with a non-positive diagonal is "
                f"not); use sv.GMRES(precond=...) or no preconditioner; "
                f"{Status.BREAKDOWN.message}", history, None, Status.BREAKDOWN) from None
        self.iterations += its
        if right is not None:
            x = right @ x
        if info is None or info == 0:  # jax reports no flag: the true residual decides
            return x, "converged"
        return x, "breakdown" if info < 0 else "maxiter"


class _AMGSolveFactor(_AMGTracked, _IterativeFactor):
    """pyamg's own cycle iteration (``sv.AMG()`` used as the solver), with the same policy."""

    def __init__(self, spec, A, prob, M=None, amg=None):
        from ._precond import AMGReuse

        super().__init__(spec, A, prob)
        self.M = M if M is not None else spec.build(A, self.hermitian, self.be)
        self._amg_spec = spec
        self.amg = amg if amg is not None else AMGReuse()
        self.kind = f"AMG solver [{self.M.summary}]"

    def _run(self, op, trans, b, x0, rtol, history):
        M = self.M if trans == "N" else self.M.adjoint()
        res: list[float] = []
        bh = to_numpy(b)
        x = M.ml.solve(bh, x0=None if x0 is None else to_numpy(x0), tol=rtol,
                       maxiter=self.spec.maxiter, accel=self.spec.accel, residuals=res)
        bn = float(np.linalg.norm(bh))
        history.extend(float(r) / bn for r in res)
        self.iterations += max(len(res) - 1, 0)  # res[0] is the initial residual, not a cycle
        converged = bool(res) and res[-1] <= rtol * bn
        return self.be.from_host(x), "converged" if converged else "maxiter"
