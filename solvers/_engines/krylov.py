"""Iterative solvers: CG, MINRES, GMRES, BiCGStab — one runner per backend's Krylov module
(scipy, cupyx, jax.scipy), the acceptance rule of ``solvers._acceptance`` for all of them.

What a returned iterate means
-----------------------------
1. The method runs with its own stopping test at ``rtol`` (scipy's GMRES tests the
   left-preconditioned residual, CG/BiCGStab a recursively updated residual, MINRES a residual
   estimate).
2. The TRUE residual r = ‖b − A x‖ is computed once (one product with A).
3. If r > tol = max(rtol·‖b‖, atol) although the method claimed convergence, it is restarted from
   x with its internal tolerances (rtol and atol) scaled by the measured gap tol / r, at most
   ``RESTARTS`` times and only while each restart lowers r (otherwise it has stagnated).
4. ``solvers._acceptance.verdict`` decides: ``SUCCESS`` at r ≤ tol (no slack); ``ACCURACY_LIMIT``
   only when every equation holds to the rounding level (componentwise backward error
   ≤ 16·√n·eps) AND one more run from x does not halve r (a method that merely ran out of
   iterations still makes progress and fails this); otherwise :class:`ConvergenceError` with
   ``MAX_ITERATIONS``, ``STAGNATION`` or ``BREAKDOWN`` and the last iterate of every column.

No per-iteration residual is computed (that would cost one more product with A per iteration):
``history`` holds what the method reports for free (GMRES: preconditioned residual norms).

Adjoint solves (Aᴴλ = c): CG and MINRES (Hermitian A) run the same method with the same (Hermitian)
preconditioner, checked against the TRUE Aᴴ. GMRES and BiCGStab run on the exact adjoint of the
forward preconditioned operator: Aᴴ Mᴴ y = c, λ = Mᴴ y (right preconditioning with Mᴴ), so they
converge like the forward solve. Transpose solves are conj(Aᴴ-solve(conj c)).

Each column of a right-hand side (n, k) is a separate run; a complex right-hand side of a real
problem is solved as its real and imaginary parts. ``cache.stats.iterations`` counts the
iterations of every run (restarts, acceptance checks and failed runs included).

Examples
--------
In single precision a tolerance of 1e-12 is out of reach; the result is accepted at the limit
of attainable accuracy and says so:

>>> import numpy as np, scipy.sparse as sp, solvers as sv
>>> A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50), format="csr", dtype=np.float32)
>>> b = np.linspace(1, 2, 50, dtype=np.float32)
>>> sol = sv.solve(sv.LinearProblem(A, b), sv.GMRES(rtol=1e-12))
>>> sol.status.name, sol.u.dtype
('ACCURACY_LIMIT', dtype('float32'))
>>> bool(np.linalg.norm(A @ sol.u - b) <= 1e-4 * np.linalg.norm(b))
True

A method that runs out of iterations is never "at the accuracy limit"; with ``throw=False`` the
last iterate comes back with its status:

>>> sol = sv.solve(sv.LinearProblem(A.astype(np.float64), np.ones(50)), sv.CG(maxiter=5),
...                throw=False)
>>> sol.status.name, sol.u.shape
('MAX_ITERATIONS', (50,))
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

import linops as lo
from linops.internals import (ShapeError, abs_apply, adjoint_view, backend_named, csr_parts,
                              is_array, is_jax, to_numpy)

from .._acceptance import attainable, backward_error, verdict
from .._checks import backend_of_problem, default_rtol, eps, precision
from .._contract import Algorithm, Factor
from .._errors import ConvergenceError
from .._registry import Case, register
from .._results import Status

RESTARTS = 4       # restarts after a convergence claim the true residual denies (step 3)
KRYLOV_STRUCTURES = ("dense", "sparse", "diagonal", "lowrank", "matrixfree")


def default_maxiter(n: int) -> int:
    """Iterations allowed when ``maxiter`` is None: 10·n, at most 20 000."""
    return int(min(10 * max(n, 1), 20_000))


def check_spec(spec) -> None:
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
class _Krylov(Algorithm):
    """The options every Krylov method shares; ``_setup`` builds the preconditioner once."""

    rtol: float | None = None
    atol: float = 0.0
    maxiter: int | None = None
    x0: Any = None
    precond: Any = None

    method = ""

    def __post_init__(self):
        check_spec(self)

    def _setup(self, A, prob):
        return KrylovFactor(self, A, prob)


_COMMON_DOC = """
    Parameters
    ----------
    rtol, atol : float
        Stop when ‖b − A x‖ ≤ max(rtol·‖b‖, atol). ``rtol=None``: 1e-8 in double precision,
        1e-5 in single. See the acceptance rule in ``solvers._acceptance`` (results at the limit
        of attainable accuracy are returned with ``Status.ACCURACY_LIMIT``).
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
        Per solve, when the acceptance rule refuses the iterate: ``status`` is
        ``MAX_ITERATIONS``, ``STAGNATION``, ``BREAKDOWN`` or ``NONFINITE``; ``history`` and
        the last ``iterate`` (all columns) are attached; ``sv.solve(..., throw=False)`` returns
        that iterate as ``sol.u`` with the failure status.

    Notes
    -----
    The result is accepted on the TRUE residual ‖b − A x‖, computed once per run (the
    acceptance rule in ``solvers._acceptance``): ``Status.SUCCESS`` when it meets the
    tolerance, ``Status.ACCURACY_LIMIT`` when every equation holds to the rounding level of the
    precision and another run does not improve it, otherwise a :class:`ConvergenceError`;
    never a silently unconverged iterate.

{adjoint_note}
"""


@register("cg", "conjugate gradients, Hermitian positive definite A",
          KRYLOV_STRUCTURES, hermitian=True, posdef=True, capability="cg",
          adjoint="CG on A, checked against Aᴴ", jax=True,
          cases=(Case("CG", dict(rtol=1e-11)), Case("CG+Jacobi", dict(rtol=1e-11, precond="jacobi")),
                 Case("CG+AMG", dict(rtol=1e-11, precond="amg"), structures=("sparse",))))
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


@register("minres", "MINRES, Hermitian (indefinite) A; real only on numpy/cupy",
          KRYLOV_STRUCTURES, hermitian=True, capability="minres",
          adjoint="MINRES on A, checked against Aᴴ", cases=(Case("MINRES", dict(rtol=1e-11)),))
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


@register("gmres", "restarted GMRES, general A",
          KRYLOV_STRUCTURES, capability="gmres", adjoint="GMRES on Aᴴ Mᴴ", jax=True,
          cases=(Case("GMRES", dict(rtol=1e-11)),
                 Case("GMRES+Jacobi", dict(rtol=1e-11, precond="jacobi")),
                 Case("GMRES+ILU", dict(rtol=1e-11, precond="ilu"), structures=("sparse",))))
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


@register("bicgstab", "BiCGStab, general A (not on cupy)",
          KRYLOV_STRUCTURES, capability="bicgstab", adjoint="BiCGStab on Aᴴ Mᴴ", jax=True,
          cases=(Case("BiCGStab", dict(rtol=1e-11)),
                 Case("BiCGStab+Jacobi", dict(rtol=1e-11, precond="jacobi")),
                 Case("BiCGStab+ILU", dict(rtol=1e-11, precond="ilu"), structures=("sparse",))))
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
class IterativeFactor(Factor):
    """The 'factorization' of an iterative method: its preconditioner, built once, and the
    acceptance rule. Subclasses implement ``_run``.

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
        self.history: list[float] = []
        self.last_status = Status.SUCCESS
        if spec.x0 is not None and tuple(spec.x0.shape) != (A.shape[1],):
            raise ShapeError(f"x0.shape={tuple(spec.x0.shape)} but A.shape={A.shape}")

    def solve(self, B, trans: str):
        xp = self.be.xp
        if trans == "T":
            return xp.conj(self.solve(xp.conj(B), "H"))
        if B.shape[1] == 0:
            return xp.zeros(tuple(B.shape), dtype=np.result_type(self.dtype, B.dtype))
        statuses: list[Status] = []
        failures: list[ConvergenceError] = []

        def run(R, share):
            cols = []
            for j in range(R.shape[1]):
                try:
                    cols.append(self._solve_one(R[:, j], trans, statuses, share[j]))
                except ConvergenceError as e:  # finish the other columns: the iterate is whole
                    failures.append(e)
                    cols.append(e.iterate if e.iterate is not None
                                else xp.full(R.shape[0], np.nan, dtype=R.dtype))
            return xp.stack(cols, axis=1)

        X = _split_complex_iterates(run, B, self.dtype, self.be)
        if failures:  # the whole iterate, unless a column has none (NaN/Inf: nothing to give)
            worst = failures[0]
            whole = all(e.iterate is not None for e in failures)
            raise ConvergenceError(str(worst), worst.history, X if whole else None, worst.status)
        # one status for the whole call: the weakest column's (every column was accepted)
        self.last_status = (Status.ACCURACY_LIMIT if Status.ACCURACY_LIMIT in statuses
                            else Status.SUCCESS)
        return X

    def _solve_one(self, b, trans, statuses, share: float = 1.0):
        """One column. ``share``: ‖b‖ / ‖the column it is a part of‖ when b is the real or
        imaginary part of a complex column (a real method): the part gets that share of atol,
        so that the two residuals together meet max(rtol‖column‖, atol)."""
        xp = self.be.xp
        spec = self.spec
        bnorm = float(xp.linalg.norm(b))
        if bnorm == 0:  # exact answer; a relative test against ‖b‖ = 0 could never pass
            statuses.append(Status.SUCCESS)
            return xp.zeros_like(b)
        rtol = default_rtol(self.dtype) if spec.rtol is None else spec.rtol
        atol = spec.atol * share
        tol = max(rtol * bnorm, atol)
        # the operator of the residual checks (Aᴴ for adjoint solves, applied without forming
        # a transposed pattern) and the one the method runs on: a method that needs a Hermitian
        # A runs on A itself, and the residual with the true Aᴴ catches an A that is not
        op = self.A if trans == "N" else adjoint_view(self.A)  # no transposed pattern
        run_op = self.A if trans == "N" or self.hermitian_method else op
        x0 = spec.x0 if trans == "N" and spec.x0 is not None else None
        if x0 is not None:
            x0 = self.be.xp.asarray(x0)
        history: list[float] = []
        inner, inner_atol = rtol, atol
        best = None  # (r, x, Ax, outcome) of the best iterate so far
        for _ in range(1 + RESTARTS):
            x, outcome = self._run(run_op, trans, b, x0 if best is None else best[1], inner,
                                   history, inner_atol)
            Ax = op @ x
            r = float(xp.linalg.norm(b - Ax))
            if not np.isfinite(r):
                break
            improved = best is None or r < best[0]
            if improved:
                best = (r, x, Ax, outcome)
            # restart only when the method claimed a convergence that the true residual denies
            # (its own norm — preconditioned, recursively updated — met ITS test) and the
            # previous restart helped at all: from the iterate, with both of its tolerances
            # scaled by the measured gap (an atol-bound test needs its atol scaled: a tighter
            # rtol alone changes nothing)
            if best[0] <= tol or outcome != "converged" or not improved:
                break
            shrink = 0.5 * tol / best[0]
            inner = max(inner * shrink, eps(self.dtype))           # ask for what is missing
            inner_atol = inner_atol * shrink
        name = type(spec).__name__
        if best is None:
            self.history = history + [math.inf]
            raise ConvergenceError(f"{name}: the iterate is not finite; {Status.NONFINITE.message}",
                                   self.history, None, Status.NONFINITE)
        r, x, Ax, outcome = best
        self.history = history + [r / bnorm]
        omega = functools.cache(lambda: self._backward_error(trans, b, x, Ax))  # if missed
        limit = attainable(self.A.shape[0], self.dtype)

        again = []

        def rerun():  # one more run from x: does it still make progress?
            x2, _ = self._run(run_op, trans, b, x, rtol, [], atol)
            again.append(x2)
            return (float(xp.linalg.norm(b - op @ x2)), float(xp.linalg.norm(x2 - x)),
                    float(xp.linalg.norm(x)))

        status, rerun_won = verdict(r, bnorm, tol, omega, limit, outcome, rerun, self.dtype)
        if status.ok:
            statuses.append(status)
            return again[0] if rerun_won else x
        raise ConvergenceError(
            f"{name} stopped with relative residual {r / bnorm:.3g} > rtol={rtol:g} "
            f"(atol={atol:g}; backward error {omega():.2g}, attainable in this precision "
            f"≈ {limit:.2g}); {status.message}", self.history, x, status)

    def _backward_error(self, trans, b, x, Ax) -> float:
        """Componentwise ω = max |b − Ax|ᵢ / (|A||x| + |b|)ᵢ (|Aᴴ| for adjoint solves); the
        normwise ‖b − Ax‖ / (‖Ax‖ + ‖b‖) for operators that store no entries."""
        xp = self.be.xp
        absAx = abs_apply(self.A, x, trans != "N")
        if absAx is None:
            r = float(xp.linalg.norm(b - Ax))
            return r / (float(xp.linalg.norm(Ax)) + float(xp.linalg.norm(b)))
        return backward_error(to_numpy(xp.abs(b - Ax)), to_numpy(absAx + xp.abs(b)))

    def _run(self, op, trans, b, x0, rtol, history, atol):  # pragma: no cover - abstract
        raise NotImplementedError


def _split_complex_iterates(run, B, dtype, be):
    """``run(B, share)`` for a real method and a possibly complex B (real and imaginary parts
    apart), keeping the iterate of both parts when one fails. ``share[j]`` is the part's norm
    over its column's: each part gets that share of atol, so that the complex residual meets
    max(rtol‖b‖, atol) (each part meeting atol alone left up to √2·atol)."""
    if np.dtype(B.dtype).kind != "c" or precision(dtype).kind == "c":
        return run(B, [1.0] * B.shape[1])
    xp = be.xp
    norms = np.asarray(to_numpy(xp.linalg.norm(B, axis=0)), dtype=np.float64)
    parts, errors = [], []
    for part in (xp.real(B), xp.imag(B)):
        if isinstance(B, np.ndarray):
            part = np.ascontiguousarray(part)
        pn = np.asarray(to_numpy(xp.linalg.norm(part, axis=0)), dtype=np.float64)
        share = [float(p / t) if t > 0 else 1.0 for p, t in zip(pn, norms)]
        try:
            parts.append(run(part, share))
        except ConvergenceError as e:
            errors.append(e)
            parts.append(e.iterate if e.iterate is not None else xp.full(part.shape, np.nan))
    X = parts[0] + 1j * parts[1]
    if errors:
        whole = all(e.iterate is not None for e in errors)
        raise ConvergenceError(str(errors[0]), errors[0].history, X if whole else None,
                               errors[0].status)
    return X


class KrylovFactor(IterativeFactor):
    """A Krylov method of the backend's module with its preconditioner ``M`` (built here, once
    per cache; an AMG hierarchy is kept or rebuilt across updates by its own reuse policy,
    ``M.reuse``)."""

    def __init__(self, spec, A, prob, M=None):
        super().__init__(spec, A, prob)
        self.be.require(spec.method, type(spec).__name__, self.dtype)
        self.hermitian_method = spec.method in ("cg", "minres")
        if M is None and spec.precond is not None:
            M = spec.precond.build(A, self.hermitian, self.be)
            self.symbolic_analyses = int(getattr(M, "analyses", 0))
        self.M = M
        self.kind = type(spec).__name__ + (f" + {self.M.summary}" if self.M is not None else "")

    @property
    def amg(self):
        """The AMG reuse record (``AMGReuse``) when the preconditioner is AMG, else None."""
        return getattr(self.M, "reuse", None)

    def solve(self, B, trans: str):
        it0 = self.iterations
        try:
            return super().solve(B, trans)
        finally:
            if self.M is not None:
                self.M.record(self.iterations - it0)

    def _refactor(self, A):
        M = self.M.updated(A) if self.M is not None else None
        return KrylovFactor(self.spec, A, self.prob, M=M)

    def _spawn(self, A):
        return KrylovFactor(self.spec, A, self.prob)

    def _run(self, op, trans, b, x0, rtol, history, atol):
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
            x, info, its = run_krylov(self.be, spec.method, op, b, x0=x0, rtol=rtol,
                                      atol=atol, M=M, restart=restart, maxiter=maxiter,
                                      history=history)
        except ValueError as e:  # scipy's MINRES refuses an indefinite preconditioner
            if "infs or NaNs" in str(e):   # scipy's GMRES on a NaN of the operator or the
                raise ConvergenceError(     # preconditioner (its least-squares step)
                    f"{type(spec).__name__}: the iteration produced NaN/Inf ({e}); "
                    f"{Status.NONFINITE.message}", history, None, Status.NONFINITE) from None
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


# ----- one runner per backend's Krylov module ----------------------------------------------------
def run_krylov(be, method: str, op, b, *, x0, rtol: float, atol: float, maxiter: int, M=None,
               restart: int | None = None, history: list | None = None):
    """One run of the backend's Krylov ``method`` ('cg', 'gmres', 'bicgstab', 'minres').

    ``op`` and ``M`` (preconditioner, or None) are linops operators; ``maxiter`` counts
    iterations (for GMRES: whole cycles of ``restart`` iterations, then one shorter cycle
    for the remainder, so that exactly ``maxiter`` products are allowed). Returns (x, info,
    iterations) with scipy's ``info`` (0 converged, > 0 not converged, < 0 breakdown), or
    None where the module reports no flag. GMRES appends its preconditioned residual norms
    to ``history``. The runner is looked up by the backend's name (``RUNNERS``).
    """
    be.require(method, method.upper())
    kw = dict(x0=x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, restart=restart,
              history=history)
    if method == "gmres" and maxiter > restart and maxiter % restart:
        rest = maxiter % restart
        x, info, its = RUNNERS[be.name](be, method, op, b, **{**kw, "maxiter": maxiter - rest})
        if info == 0:
            return x, info, its
        x, info, more = RUNNERS[be.name](be, method, op, b,
                                         **{**kw, "x0": x, "restart": rest, "maxiter": rest})
        return x, info, its + more
    return RUNNERS[be.name](be, method, op, b, **kw)


def _scipy_runner(be, method, op, b, *, x0, rtol, atol, maxiter, M, restart, history):
    """scipy.sparse.linalg (numpy) or cupyx.scipy.sparse.linalg (cupy): same signatures."""
    module = be.sparse_linalg
    fn = getattr(module, method)
    count = [0]

    def tick(*_):
        count[0] += 1

    kw = dict(x0=x0, maxiter=maxiter if method != "gmres" else maxiter // restart,
              callback=tick, M=_krylov_operator(be, M) if M is not None else None)
    if method == "gmres":
        def pr_norm(res):
            if history is not None:
                history.append(float(res))
            count[0] += 1

        kw.update(restart=restart, callback=pr_norm, callback_type="pr_norm")
    if method != "minres":
        kw["atol"] = atol
    kw[be.krylov_rtol_keyword] = rtol
    x, info = fn(_krylov_operator(be, op), b, **kw)
    return x, int(info), count[0]


def _krylov_operator(be, op):
    """op as the Krylov module takes it: native CSR for Sparse, else a LinearOperator whose
    results are fresh arrays of this backend (scipy updates them in place)."""
    parts = csr_parts(op)
    if parts is not None:
        return be.csr(*parts)
    return be.sparse_linalg.LinearOperator(op.shape, dtype=op.dtype,
                                           matvec=lambda v: be.fresh(op @ v, v))


def _jax_runner(be, method, op, b, *, x0, rtol, atol, maxiter, M, restart, history):
    """Concrete arrays on the CPU: scipy's method on host views (no compilation; jax-valued
    operators are applied as they are, sparse ones through a host CSR). Arrays on an
    accelerator: jax.scipy.sparse.linalg, compiled once per operator structure (operators
    are pytrees), which reports no convergence flag (info None) nor iteration count."""
    if _on_cpu(b):
        op, M = _on_host(op), None if M is None else _on_host(M)
        x, info, its = _scipy_runner(backend_named("numpy"), method, op, be.to_host(b),
                                     x0=None if x0 is None else be.to_host(x0), rtol=rtol,
                                     atol=atol, maxiter=maxiter, M=M, restart=restart,
                                     history=history)
        return be.from_host(x), info, its
    x = _jax_krylov()(op, M, b, x0, rtol, atol, method=method,
                      maxiter=int(maxiter // restart if method == "gmres" else maxiter),
                      restart=int(restart))
    return x, None, 0


RUNNERS = {"numpy": _scipy_runner, "cupy": _scipy_runner, "jax": _jax_runner}


def _on_host(op):
    """A jax-valued operator with its arrays copied to the host once, so that scipy's iteration
    applies it with numpy (a product of a jax-valued Sum or LowRank is dozens of eager jax
    dispatches: ~1 s per GMRES solve at n = 12 in single precision); the arrays a matrix-free
    closure captures stay as they are (its products come back through ``be.fresh``)."""
    # optional: jax (the jax extra); jax arrays are here, so jax is loaded
    import jax

    return jax.tree_util.tree_map(lambda x: np.asarray(x) if is_jax(x) else x, op)


def _on_cpu(x) -> bool:
    try:
        return all(d.platform == "cpu" for d in x.devices())
    except Exception:  # a tracer has no devices
        return False


def _jax_krylov_core(op, M, b, x0, rtol, atol, *, method, maxiter, restart):
    # optional: jax (the jax extra)
    import jax.scipy.sparse.linalg as jspl

    kw = dict(x0=x0, tol=rtol, atol=atol, maxiter=maxiter,
              M=(lambda v: M @ v) if M is not None else None)
    if method == "gmres":
        kw["restart"] = restart
    return getattr(jspl, method)(lambda v: op @ v, b, **kw)[0]


@lru_cache(maxsize=1)
def _jax_krylov():
    # optional: jax (the jax extra)
    import jax

    return jax.jit(_jax_krylov_core, static_argnames=("method", "maxiter", "restart"))
