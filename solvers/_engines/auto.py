"""Auto: pick the algorithm from the operator's structure, what the registry says is installed,
and the problem's hints (verified, never trusted).

The rules are :meth:`Auto.choose`; :meth:`Auto._setup` runs the choice and, when a
symmetric/definite factorization finds A indefinite, falls back to the general one (counted).
"""

from __future__ import annotations

from dataclasses import dataclass

import linops as lo
from linops.internals import structure

from .._checks import backend_of_problem, hint_text, is_hermitian
from .._contract import Algorithm, Factor
from .direct import LU, Cholesky, DiagonalSolve
from .._errors import HintWarning, NotPositiveDefiniteError, warn_caller
from .krylov import CG, GMRES
from .amg import AMG
from .._registry import entry, register
from .woodbury import Woodbury


@register("auto", "the default: chooses by structure, size, what is installed and checked hints",
          ("dense", "sparse", "diagonal", "lowrank", "matrixfree"), direct=True,
          queries=("logdet", "selected_inverse"), adjoint="whatever it chose", jax=True)
@dataclass(frozen=True)
class Auto(Algorithm):
    """The default algorithm. Rules, first match wins:

    ================================================  =========================================
    A                                                 algorithm
    ================================================  =========================================
    Diagonal or Identity                              elementwise division (exact, O(n))
    B + LowRank(U, V) (a Sum with one low-rank term)  Woodbury over Auto(B)
    Dense (or n <= dense_max)                         Cholesky if Hermitian, else LU (LAPACK)
    Sparse, posdef hint, n > iterative_min            CG(rtol) + AMG   (where AMG exists)
    Sparse (numpy), n >= pardiso_min, PARDISO there   Pardiso (mtype 2/4 if Hermitian, else
                                                      11/13)
    Sparse, Hermitian, CHOLMOD available              Cholesky (CHOLMOD)
    Sparse, otherwise                                 LU (SuperLU; cupyx splu on cupy)
    matrix-free / lazy, Hermitian posdef hints        CG(rtol)
    matrix-free / lazy, otherwise                     GMRES(rtol)
    ================================================  =========================================

    "Hermitian" is CHECKED for stored matrices (O(nnz) sparse, O(n²) dense), hint or not: a
    Hermitian A gets the symmetric/definite factorization (half the work of LU) without any
    hint, and a Cholesky that finds A indefinite falls back to LU (one more factorization,
    counted in ``cache.stats.fallbacks``; never a wrong answer). With a hint that does not hold
    (``posdef=True`` on a non-Hermitian or an indefinite A) Auto also warns
    (:class:`HintWarning`, naming the hint as you gave it) — the README's rule. An explicit
    ``sv.Cholesky()`` raises instead (``NotHermitianError``, ``NotPositiveDefiniteError``).

    ``pardiso_min``: PARDISO (when pypardiso is installed) beat CHOLMOD and SuperLU from about
    n = 10⁴ on the Q4 Poisson family (CPU time of factorization + two solves, one thread: at
    n = 2·10⁴ 91 ms vs CHOLMOD 229 ms, 158 ms vs SuperLU 216 ms; at 8·10⁴ 465 vs 770 ms and
    655 vs 1080 ms); below 5·10³ its analysis overhead loses. 2·10⁴ keeps a margin.

    Parameters
    ----------
    iterative_min : int
        Sparse Hermitian positive definite problems larger than this go to CG + AMG (a direct
        factorization's fill grows faster than n). Default 2·10⁶.
    dense_max : int
        Lazy operators up to this size are densified and factorized (LAPACK) instead of
        solved iteratively. Default 0: never.
    rtol : float or None
        The tolerance of the iterative methods Auto picks (1e-10: gradients are only as
        accurate as the solves). None: the precision's default.
    pardiso_min : int
        Sparse problems from this size use PARDISO when it is installed (see above).

    Notes
    -----
    The choice depends on what is installed (PARDISO, CHOLMOD: the registry says) and on the
    backend (no AMG on cupy/jax, no PARDISO off the host): read ``cache.kind`` after ``init`` to
    see it, or call :meth:`choose`. Adjoint solves always reuse whatever was chosen. An
    ``update`` re-runs these rules whenever the factor cannot be reused for the new A (a
    Cholesky factor and a non-Hermitian A, another pattern or dtype kind), warnings included.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo, solvers as sv
    >>> A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50), format="csr")
    >>> prob = sv.LinearProblem(A, np.ones(50), posdef=True)
    >>> type(sv.Auto().choose(lo.Diagonal(np.ones(3)))).__name__
    'DiagonalSolve'
    >>> alg = sv.Auto(iterative_min=10).choose(prob.A, prob)     # a "large" problem
    >>> type(alg).__name__, type(alg.precond).__name__
    ('CG', 'AMG')
    >>> sol = sv.solve(prob, sv.Auto(iterative_min=10))
    >>> sol.status.name, sol.cache.kind.split(":")[0]
    ('SUCCESS', 'CG + AMG(sa)')
    >>> sv.solve(sv.LinearProblem(np.array([[4.0, 1.0], [1.0, 3.0]]), [1.0, 2.0])).cache.kind
    'dense Cholesky'
    >>> cache = sv.init(sv.LinearProblem(np.array([[1.0, 2.0], [2.0, 1.0]])))   # indefinite
    >>> cache.kind, cache.stats.fallbacks
    ('dense LU (after Cholesky: not positive definite)', 1)
    """

    iterative_min: int = 2_000_000
    dense_max: int = 0
    rtol: float | None = 1e-10
    pardiso_min: int = 20_000

    def choose(self, A: lo.LinearOperator, prob=None):
        """The algorithm these rules pick for A and the problem's hints (nothing is set up).

        Parameters
        ----------
        A : lo.LinearOperator
        prob : LinearProblem, optional
            Its ``hermitian``/``posdef`` hints; None: no hints.

        Returns
        -------
        algorithm
            ``DiagonalSolve()``, ``Woodbury(Auto(...))``, ``Cholesky()``, ``LU()``,
            ``CG(rtol, precond=AMG())``, ``Pardiso(posdef=...)``, ``CG(rtol)`` or
            ``GMRES(rtol)``.

        Warns
        -----
        HintWarning
            A hint says Hermitian (or positive definite) but A is not: LU is chosen instead.
        """
        posdef = bool(prob is not None and prob.posdef)
        hermitian = bool(prob is not None and prob.hermitian)
        kind = structure(A)
        if kind == "diagonal":
            return DiagonalSolve()
        if kind == "lowrank":
            return Woodbury(Auto(self.iterative_min, self.dense_max, self.rtol, self.pardiso_min))
        stored = kind in ("dense", "sparse") or A.shape[0] <= self.dense_max
        if not stored:  # a lazy operator's hint goes to CG unchecked; CG's true residual checks
            return CG(rtol=self.rtol) if posdef and hermitian else GMRES(rtol=self.rtol)
        # stored entries: Hermitian is checked (O(nnz)), with or without a hint
        sym = is_hermitian(A)
        if (posdef or hermitian) and not sym:
            warn_caller(f"the problem says {hint_text(prob)} but A is not Hermitian; solving "
                        f"with LU instead", HintWarning)
            posdef = False
        if kind == "sparse":
            be = backend_of_problem(A)
            if posdef and A.shape[0] > self.iterative_min and be.capability("amg") is None:
                return CG(rtol=self.rtol, precond=AMG())
            if (A.shape[0] >= self.pardiso_min and be.name == "numpy"
                    and entry("pardiso").unavailable() is None):
                return entry("pardiso").cls(posdef=sym)
            if sym and be.capability("sparse_cholesky") is None:
                return Cholesky()
            return LU()
        return Cholesky() if sym else LU()

    def plan(self, A, prob):
        """:meth:`choose`, with a symmetric/definite choice wrapped so that an indefinite A
        falls back to the general factorization (counted, and warned when a hint said
        positive definite). Made at ``init`` and at every ``update``."""
        alg = self.choose(A, prob)
        general = _general(alg)
        return alg if general is None else Fallback(alg, general)

    def _setup(self, A, prob) -> Factor:
        """The plan's setup (``Auto`` used directly, e.g. as Woodbury's base)."""
        return self.plan(A, prob).setup(A, prob)


@dataclass(frozen=True)
class Fallback(Algorithm):
    """``first`` (a symmetric/definite factorization), or ``general`` when ``first`` finds A
    Hermitian but not positive definite: what ``Auto`` plans for a Hermitian A. The fallback
    costs the failed attempt (counted in ``cache.stats.fallbacks``); a wrong ``posdef=True``
    hint is warned (:class:`HintWarning`). Not registered: ``Auto``'s building block."""

    first: Algorithm
    general: Algorithm

    @property
    def label(self) -> str:
        return self.first.label

    def _setup(self, A, prob) -> Factor:
        try:
            return self.first.setup(A, prob)
        except NotPositiveDefiniteError:
            if prob is not None and prob.posdef:
                warn_caller(f"the problem says {hint_text(prob)} but A is not positive definite "
                            f"({self.first.label} found a pivot <= 0); solving with LU instead",
                            HintWarning)
            factor = self.general.setup(A, prob)
            factor.fallbacks = getattr(factor, "fallbacks", 0) + 1
            factor.kind = f"{factor.kind} (after {self.first.label}: not positive definite)"
            return factor


def _general(alg):
    """The general (LU) counterpart of a symmetric/definite algorithm, or None."""
    if isinstance(alg, Cholesky):
        return LU()
    if alg.name == "pardiso" and alg.posdef:
        return type(alg)(posdef=False, pivot_rtol=alg.pivot_rtol)
    return None
