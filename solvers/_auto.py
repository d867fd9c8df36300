"""Auto: pick the algorithm from the operator's structure and the problem's hints; and the
names accepted wherever an algorithm is expected (``sv.solve(prob, "lu")``).

An algorithm is any object with ``setup(A, prob) -> factor``; the factor has
``solve(B, trans)`` (trans 'N', 'H' or 'T', B of shape (n, k)), ``refactor(A)`` (same
structure), an ``iterations`` counter and optionally ``kind`` and ``last_status``. That small
protocol is what ``LinearCache`` relies on, and what ``Auto`` and ``Woodbury`` compose.
"""

from __future__ import annotations

from dataclasses import dataclass

import linops as lo

from ._backend import backend_of_problem, is_hermitian, precision
from ._direct import LU, Cholesky
from ._errors import HintWarning, SingularMatrixError, warn_caller
from ._krylov import CG, GMRES
from ._precond import AMG
from ._woodbury import Woodbury, split_low_rank


@dataclass(frozen=True)
class Auto:
    """The default algorithm. Rules, first match wins:

    ================================================  =========================================
    A                                                 algorithm
    ================================================  =========================================
    Diagonal or Identity                              elementwise division (exact, O(n))
    B + LowRank(U, V) (a Sum with one low-rank term)  Woodbury over Auto(B)
    Dense (or n <= dense_max)                         Cholesky if posdef else LU (LAPACK)
    Sparse, Hermitian posdef, n > iterative_min       CG(rtol) + AMG   (where AMG exists)
    Sparse (numpy), n >= pardiso_min, PARDISO there   Pardiso (mtype 2/4 if posdef, else 11/13)
    Sparse, Hermitian posdef, CHOLMOD available       Cholesky (CHOLMOD)
    Sparse, otherwise                                 LU (SuperLU; cupyx splu on cupy)
    matrix-free / lazy, Hermitian posdef              CG(rtol)
    matrix-free / lazy, otherwise                     GMRES(rtol)
    ================================================  =========================================

    Hints are verified where they choose an algorithm: with ``posdef=True`` on a matrix that is
    not Hermitian (an O(nnz) check), Auto warns (:class:`HintWarning`) and uses LU instead, so a
    wrong hint never produces a wrong answer. (An explicit ``sv.Cholesky()`` raises instead.)

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
    The choice depends on what is installed (PARDISO, CHOLMOD) and on the backend (no AMG on
    cupy/jax, no PARDISO off the host): read ``cache.kind`` after ``init`` to see it, or call
    :meth:`choose`. ``Auto`` passes the problem's hints on, so ``Pardiso`` picks its positive
    definite type and Krylov methods their Hermitian variants. Adjoint solves always reuse
    whatever was chosen.

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
    >>> sv.solve(sv.LinearProblem(np.array([[4.0, 1.0], [1.0, 3.0]]), [1.0, 2.0],
    ...                           posdef=True)).cache.kind
    'dense Cholesky'
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
        if isinstance(A, (lo.Diagonal, lo.Identity)):
            return DiagonalSolve()
        if split_low_rank(A) is not None:
            return Woodbury(Auto(self.iterative_min, self.dense_max, self.rtol, self.pardiso_min))
        # verify a hint only where it steers the choice and the check is cheap (stored entries);
        # a lazy operator's hint goes to CG unchecked, and CG's true-residual test catches it
        stored = isinstance(A, (lo.Dense, lo.Sparse)) or A.shape[0] <= self.dense_max
        if (posdef or hermitian) and stored and not is_hermitian(A):
            warn_caller(f"the problem says hermitian={prob.hermitian}, posdef={prob.posdef} but "
                        f"A is not Hermitian; solving with LU instead", HintWarning)
            posdef = hermitian = False
        if isinstance(A, lo.Dense) or A.shape[0] <= self.dense_max:
            return Cholesky() if posdef else LU()
        if isinstance(A, lo.Sparse):
            be = backend_of_problem(A)
            if posdef and A.shape[0] > self.iterative_min and be.capability("amg") is None:
                return CG(rtol=self.rtol, precond=AMG())
            if A.shape[0] >= self.pardiso_min and be.name == "numpy" and _have_pardiso():
                from ._pardiso import Pardiso

                return Pardiso(posdef=posdef)
            if posdef and be.capability("sparse_cholesky") is None:
                return Cholesky()
            return LU()
        if posdef and hermitian:
            return CG(rtol=self.rtol)
        return GMRES(rtol=self.rtol)

    def setup(self, A, prob):
        """``self.choose(A, prob).setup(A, prob)``: the chosen algorithm's factor."""
        return self.choose(A, prob).setup(A, prob)


def _have_pardiso() -> bool:
    from ._pardiso import pardiso_available

    return pardiso_available()


@dataclass(frozen=True)
class DiagonalSolve:
    """x = b / d for a Diagonal (or Identity) operator: exact, O(n) per solve; adjoint divides by
    conj(d). A zero diagonal entry raises SingularMatrixError naming it.

    ``sv.Auto`` picks it for every ``lo.Diagonal`` and ``lo.Identity``. Setup: one O(n) scan for
    zeros (exact zeros only: a tiny entry is a valid, if ill-conditioned, diagonal). Transpose
    solves divide by d itself. ``update`` just rescans.

    Raises
    ------
    TypeError
        A is not a ``lo.Diagonal``/``lo.Identity`` (at ``init``).
    SingularMatrixError
        A zero on the diagonal (at ``init``).

    Examples
    --------
    >>> import numpy as np, linops as lo, solvers as sv
    >>> d = np.array([2.0, 2.0 + 2.0j])
    >>> cache = sv.init(sv.LinearProblem(lo.Diagonal(d)), sv.DiagonalSolve())
    >>> cache.solve(np.ones(2)), cache.solve_adjoint(np.ones(2))          # 1/d and 1/conj(d)
    (array([0.5 +0.j  , 0.25-0.25j]), array([0.5 +0.j  , 0.25+0.25j]))
    >>> sv.init(sv.LinearProblem(lo.Diagonal(np.array([2.0, 0.0]))))
    Traceback (most recent call last):
    ...
    solvers._errors.SingularMatrixError: the diagonal matrix has a zero at A[1, 1]; it is singular
    """

    def setup(self, A, prob):
        """The O(n) 'factorization': the diagonal, checked for zeros."""
        if not isinstance(A, (lo.Diagonal, lo.Identity)):
            raise TypeError(f"DiagonalSolve needs a lo.Diagonal or lo.Identity operator, got "
                            f"{type(A).__name__}; wrap the diagonal with lo.Diagonal(d) or use "
                            f"sv.LU()")
        return _DiagonalFactor(A)


class _DiagonalFactor:
    kind = "diagonal"

    def __init__(self, A):
        be = backend_of_problem(A)
        if isinstance(A, lo.Identity):
            self.d = None
        else:
            import numpy as np

            from linops.internals import to_numpy

            d = A.d
            bad = to_numpy(be.xp.abs(d) == 0)
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise SingularMatrixError(f"the diagonal matrix has a zero at A[{k}, {k}]; it is "
                                          f"singular")
            self.d = d.astype(precision(d.dtype)) if d.dtype != precision(d.dtype) else d
        self.be = be
        self.iterations = 0

    def solve(self, B, trans: str):
        xp = self.be.xp if self.d is not None else None
        if self.d is None:
            return B * 1  # a copy: u must never alias the right-hand side
        d = self.d if trans == "N" else (xp.conj(self.d) if trans == "H" else self.d)
        return B / d[:, None]

    def refactor(self, A):
        return _DiagonalFactor(A)


def _algorithms() -> dict:
    """Name -> algorithm class; the optional backends only when their module imports."""
    from . import _direct, _krylov, _precond

    table = {"auto": Auto, "lu": _direct.LU, "cholesky": _direct.Cholesky, "cg": _krylov.CG,
             "minres": _krylov.MINRES, "gmres": _krylov.GMRES, "bicgstab": _krylov.BiCGStab,
             "amg": _precond.AMG, "woodbury": Woodbury, "diagonal": DiagonalSolve}
    try:
        from ._pardiso import Pardiso

        table["pardiso"] = Pardiso
    except ImportError:
        pass
    try:
        from ._petsc import PETSc

        table["petsc"] = PETSc
    except ImportError:
        pass
    return table


def resolve_algorithm(alg):
    """An algorithm object from ``alg``: None (Auto), an algorithm, or a name such as "lu"."""
    if alg is None:
        return Auto()
    if isinstance(alg, str):
        table = _algorithms()
        key = alg.strip().lower().replace("-", "").replace("_", "")
        if key not in table:
            raise ValueError(f"unknown algorithm {alg!r}; names: {', '.join(sorted(table))} "
                             f"(or pass an object such as sv.CG(rtol=1e-10, precond=sv.AMG()))")
        return table[key]()
    if not callable(getattr(alg, "setup", None)):
        raise TypeError(f"alg must be a solvers algorithm (sv.LU(), sv.CG(...), ...) or its name, "
                        f"got {type(alg).__name__}: {alg!r}")
    return alg
