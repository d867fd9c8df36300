"""Direct solvers: LU, Cholesky and the diagonal solve, dense and sparse. One factorization
serves A, Aᵀ and Aᴴ.

Backend-specific calls (LAPACK module, SuperLU module, native CSR, host/device moves) come from
the backend table; the factors here are written once for all backends.

Singularity is decided by one rule everywhere (dense pivots, SuperLU's condition estimate,
CHOLMOD's and PARDISO's pivots): singular when the smallest pivot is at most ``pivot_rtol``
times the largest, default ``rcond_tol`` = 1e3·eps (double) / 1e2·eps (single), i.e. when
fewer than about three digits of the solution could be trusted. LAPACK and SuperLU themselves
only fail on an exact zero, and would otherwise hand back a solution of rounding noise.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

import linops as lo
from linops.internals import backend_named, diagonal_of, structure, to_numpy

from .._checks import as_dense_array, backend_of_problem, cast_rhs, precision, rcond_tol, split_complex
from .._contract import Algorithm, Factor
from .._errors import BackendNotSupported, NotPositiveDefiniteError, SingularMatrixError
from .._factors.logdet import LogDet, from_diagonal, superlu_logdet
from .._registry import register

_TRANS = {"N": 0, "T": 1, "H": 2}


def check_rtol(value, name: str) -> None:
    """ValueError unless ``value`` is None or a finite number >= 0 (checked at construction)."""
    if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value)
                                  and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0 (or None for the default), got "
                         f"{name}={value!r}")


def pivot_check(pivots, dtype, rtol: float | None, what: str) -> None:
    """SingularMatrixError when min|pivot| <= rtol·max|pivot| (rtol default: ``rcond_tol``)."""
    d = np.abs(to_numpy(pivots))
    if d.size == 0:
        return
    rtol = rcond_tol(dtype) if rtol is None else rtol
    dmax, dmin = d.max(), d.min()
    if not np.isfinite(dmax) or dmin <= rtol * dmax:
        k = int(np.argmin(d))
        raise SingularMatrixError(
            f"{what}: the matrix is singular to working precision: pivot {k} is {dmin:.3g} while "
            f"the largest is {dmax:.3g} (ratio {dmin / dmax if dmax else 0:.3g} <= pivot_rtol="
            f"{rtol:.3g}). Check boundary conditions (a pure-Neumann problem needs one fixed dof) "
            f"or regularise; pivot_rtol=0 disables this check")


def not_posdef(what: str, detail: str = "") -> NotPositiveDefiniteError:
    """The error of a Cholesky factorization that met a pivot ≤ 0 on a Hermitian matrix."""
    return NotPositiveDefiniteError(
        f"{what}: the matrix is not positive definite{detail}: it is either singular (check "
        f"boundary conditions: a pure-Neumann problem needs one fixed dof) or indefinite, which "
        f"a Hermitian matrix may well be while regular: then use sv.LU(), or drop posdef=True")


# ----- LU ----------------------------------------------------------------------------------------
@register("lu", "LU with partial pivoting: LAPACK dense, SuperLU sparse (cupyx splu on cupy)",
          ("dense", "sparse", "diagonal", "lowrank", "matrixfree"), capability={"sparse": "sparse_lu", "*": "dense_lu"}, direct=True,
          queries=("logdet", "selected_inverse"), adjoint="the same factors (trans='H')",
          jax=True)
@dataclass(frozen=True)
class LU(Algorithm):
    """LU factorization with partial pivoting; one factorization serves A, Aᵀ and Aᴴ solves.

    Dense: LAPACK getrf (scipy / jax.scipy / cupyx). Sparse: SuperLU (``splu``; on cupy the
    cupyx ``splu``, which factorizes on the host and solves on the GPU). Adjoint/transpose
    solves reuse the factors (``trans='H'/'T'``). ``update`` with the same pattern refactorizes
    numerically in the column order found by the first factorization (COLAMD runs once).

    Cost: dense O(n³) once, O(n²·k) per solve; sparse: SuperLU fill-dependent.

    Parameters
    ----------
    pivot_rtol : float, optional
        A dense pivot below pivot_rtol·max|pivot|, or for SuperLU a reciprocal condition
        estimate below it (one extra solve), means singular. Default: 1e3·eps in double
        precision (≈2.2e-13), 1e2·eps in single (≈1.2e-5). 0 disables the check.

    Raises
    ------
    ValueError
        ``pivot_rtol`` negative or not finite (at construction).
    SingularMatrixError
        At ``init``/``update``: a pivot (condition estimate) below the threshold, or SuperLU's
        exact zero pivot. The message names the pivot and the ratio.
    BackendNotSupported
        The arrays' backend has no (sparse) LU for this dtype.

    Notes
    -----
    A lazy operator (not Dense or Sparse) is densified first (``lo.to_dense``, which refuses
    above 2**26 entries); use a Krylov method for those. Integer matrices are factorized in
    float64, float32/complex64 in single precision. A complex right-hand side with real factors
    is solved as its real and imaginary parts.

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> cache = sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]])), sv.LU())
    >>> cache.solve(np.array([1.0, 2.0])).round(3).tolist()
    [0.1, 0.6]

    Sparse: SuperLU, whose factors also solve with Aᴴ; an update with the same pattern reuses
    the column ordering:

    >>> import scipy.sparse as sp
    >>> S = sp.csr_array(np.array([[4.0, 1.0, 0.0], [2.0, 3.0, 0.0], [0.0, 0.0, 1.0]]))
    >>> cache = sv.init(sv.LinearProblem(S), sv.LU())
    >>> cache.kind, cache.solve_adjoint(np.ones(3)).round(3).tolist()
    ('SuperLU', [0.1, 0.3, 1.0])
    >>> _ = cache.update(A=2 * S)
    >>> cache.stats.factorizations, cache.stats.numeric_refactorizations
    (1, 1)

    Nearly singular matrices are refused unless the threshold says otherwise:

    >>> A = np.array([[1.0, 1.0], [1.0, 1.0 + 1e-14]])
    >>> sv.init(sv.LinearProblem(A), sv.LU())
    Traceback (most recent call last):
    ...
    solvers._errors.SingularMatrixError: LU: ... pivot 1 is 9.99e-15 while the largest is 1 ...
    >>> sv.init(sv.LinearProblem(A), sv.LU(pivot_rtol=0)).solve(np.array([2.0, 2.0])).tolist()
    [2.0, 0.0]
    """

    pivot_rtol: float | None = None

    def __post_init__(self):
        check_rtol(self.pivot_rtol, "pivot_rtol")

    def _setup(self, A: lo.LinearOperator, prob) -> Factor:
        be = backend_of_problem(A)
        if structure(A) == "sparse":
            be.require("sparse_lu", "sparse LU")
            return SparseLUFactor(A, be, self.pivot_rtol)
        be.require("dense_lu", "dense LU")
        return DenseLUFactor(A, be, self.pivot_rtol)


class DenseLUFactor(Factor):
    """LAPACK getrf factors (``lu_piv``); solves with getrs (trans 0, 1, 2)."""

    kind = "dense LU"

    def __init__(self, A, be, pivot_rtol):
        self.be, self.pivot_rtol = be, pivot_rtol
        a = as_dense_array(A)
        self.dtype = precision(a.dtype)
        a = a.astype(self.dtype) if np.dtype(a.dtype) != self.dtype else a
        with warnings.catch_warnings():  # scipy warns on an exact zero pivot; we raise below
            warnings.simplefilter("ignore")
            self.lu_piv = be.linalg.lu_factor(a, check_finite=False)
        pivot_check(be.xp.diagonal(self.lu_piv[0]), self.dtype, pivot_rtol, "LU")

    def solve(self, B, trans: str):
        def run(R):
            return self.be.linalg.lu_solve(self.lu_piv, R, trans=_TRANS[trans], check_finite=False)

        return split_complex(run, cast_rhs(B, self.dtype), self.dtype)

    def _spawn(self, A):
        return DenseLUFactor(A, self.be, self.pivot_rtol)

    def logdet(self) -> LogDet:
        """sign(P)·Π Uᵢᵢ from getrf's factors, O(n)."""
        lu, piv = self.lu_piv
        piv = np.asarray(to_numpy(piv))
        swaps = int(np.count_nonzero(piv != np.arange(piv.size)))
        return from_diagonal(self.be.xp.diagonal(lu), -1 if swaps % 2 else 1)

    def selected_inverse(self, shape):
        from .._factors import selinv as _selinv

        return _selinv.dense(self, shape)


class SparseLUFactor(Factor):
    """SuperLU through the backend's sparse module. ``order``: the column order of a previous
    factorization of the same pattern (numeric refactorization: SuperLU keeps no symbolic
    factorization, so we keep its fill-reducing column order and factor A[:, order] with
    ``permc_spec='NATURAL'``; partial row pivoting is redone). When ``reordered`` is True,
    ``lu`` factorizes ``A[:, order]``."""

    def __init__(self, A: lo.Sparse, be, pivot_rtol, order=None):
        self.be, self.pivot_rtol = be, pivot_rtol
        self.kind = be.sparse_lu_name
        self.dtype = precision(A.dtype)
        csc = be.csr(A.values, A.pattern).tocsc().astype(self.dtype)
        reuse = order is not None
        try:
            if reuse:
                self.lu = be.sparse_linalg.splu(csc[:, order], permc_spec="NATURAL")
                self.order = order
            else:
                self.lu = be.sparse_linalg.splu(csc, permc_spec="COLAMD")
                self.symbolic_analyses = 1
                # SuperLU factors Pr·A·Pc = L·U with Pc[i, perm_c[i]] = 1, i.e. A·Pc takes its
                # column j from column argsort(perm_c)[j] of A: that is the column order
                self.order = (np.argsort(to_numpy(self.lu.perm_c)) if be.sparse_lu_keeps_order
                              else None)
        except RuntimeError as e:
            raise SingularMatrixError(f"SuperLU: {e}; the matrix has a zero pivot (a zero column "
                                      f"or a singular block). Check boundary conditions") from None
        self.reordered = reuse
        growth_check(self, A, pivot_rtol, self.kind)

    def solve(self, B, trans: str):
        be = self.be
        Bf = cast_rhs(be.to_factor(B), self.dtype)
        X = split_complex(lambda R: self._solve(R, trans), Bf, self.dtype)
        return be.from_factor(X)

    def _solve(self, R, trans):
        R = self.be.factor_layout(R)
        if not self.reordered:
            return self.lu.solve(R, trans=trans)
        if trans == "N":  # A[:, order] y = b  ->  x[order] = y
            Y = self.lu.solve(R, trans="N")
            X = np.empty_like(Y)
            X[self.order] = Y
            return X
        return self.lu.solve(np.asfortranarray(R[self.order]), trans=trans)

    def _spawn(self, A):
        return SparseLUFactor(A, self.be, self.pivot_rtol, order=self.order)

    def logdet(self) -> LogDet:
        return superlu_logdet(self)

    def selected_inverse(self, shape):
        if not self.be.host_factors:
            raise BackendNotSupported("selected inversion of a cupyx SuperLU factor is not wired;"
                                      " factorize on the host (numpy arrays) with sv.LU()")
        from .._factors import selinv as _selinv

        return _selinv.superlu(self, shape)


def growth_check(factor, A: lo.Sparse, rtol: float | None, what: str) -> None:
    """Reciprocal-condition estimate from one solve with a fixed random vector:
    rcond ≈ ‖r‖∞ / (‖A‖∞ ‖A⁻¹r‖∞). SuperLU exposes its pivots only by copying all of U (as
    expensive as the factorization), so this costs one triangular solve pair instead."""
    rtol = rcond_tol(A.dtype) if rtol is None else rtol
    if rtol <= 0 or A.shape[0] == 0:
        return
    r = np.random.default_rng(12345).standard_normal((A.shape[0], 1)).astype(factor.dtype)
    x = to_numpy(factor.solve(factor.be.from_host(r), "N"))
    anorm = np.bincount(A.pattern.rows, np.abs(to_numpy(A.values)), minlength=A.shape[0]).max()
    xmax = np.abs(x).max()
    if not np.isfinite(xmax) or np.abs(r).max() <= rtol * anorm * xmax:
        est = np.abs(r).max() / (anorm * xmax) if np.isfinite(xmax) and xmax else 0.0
        raise SingularMatrixError(
            f"{what}: the matrix is singular to working precision: estimated reciprocal "
            f"condition number {est:.3g} <= pivot_rtol={rtol:.3g}. Check boundary conditions (a "
            f"pure-Neumann problem needs one fixed dof) or regularise; pivot_rtol=0 disables "
            f"this check")


# ----- Cholesky ----------------------------------------------------------------------------------
@register("cholesky", "Cholesky L Lᴴ for Hermitian positive definite A: LAPACK dense, CHOLMOD "
          "sparse", ("dense", "sparse", "diagonal", "lowrank", "matrixfree"), hermitian=True, posdef=True, direct=True,
          capability={"sparse": "sparse_cholesky", "*": "dense_cholesky"},
          queries=("logdet", "selected_inverse"), adjoint="the forward solve (A = Aᴴ)", jax=True)
@dataclass(frozen=True)
class Cholesky(Algorithm):
    """Cholesky A = L Lᴴ for Hermitian positive definite A.

    Dense: ``xp.linalg.cholesky`` + triangular solves (numpy / jax / cupy). Sparse: CHOLMOD via
    scikit-sparse (numpy, and jax arrays on the host), whose symbolic analysis (fill-reducing
    ordering) is kept for numeric refactorizations; CHOLMOD computes in float64/complex128 (a
    float32 matrix is factorized in double and results are returned in float32). Without
    scikit-sparse a sparse matrix raises BackendNotSupported naming the install.

    A is checked to be Hermitian first (O(nnz) for sparse, O(n²) for dense) and a non-Hermitian A
    raises NotHermitianError — the ``hermitian=``/``posdef=`` hints of the problem never switch
    this off (only ``check_hermitian=False`` does, for callers who checked themselves). A
    Hermitian A that is not positive definite raises NotPositiveDefiniteError (a
    SingularMatrixError: use LU, or drop ``posdef=True``); a tiny pivot SingularMatrixError.
    ``cache.update`` is held to the same checks: a non-Hermitian update raises
    NotHermitianError and leaves the cache as it was.
    Adjoint solves are the same solve (A = Aᴴ); transpose solves conjugate.

    Parameters
    ----------
    pivot_rtol : float, optional
        Singular when min dᵢ ≤ pivot_rtol·max dᵢ for the pivots dᵢ = |Lᵢᵢ|² (CHOLMOD: the D of
        its LDLᵀ). Defaults as for ``LU``; 0 disables the check.
    check_hermitian : bool
        Verify A = Aᴴ first (default True). False is for callers who checked themselves: a
        non-Hermitian A is then factorized from one of its triangles (which one depends on the
        backend), a wrong answer rather than an error.

    Raises
    ------
    ValueError
        ``pivot_rtol`` negative or not finite (at construction).
    NotHermitianError
        At ``init``/``update``: max|A − Aᴴ| above 1e-10·max|A| (1e-4 in single precision).
    NotPositiveDefiniteError
        At ``init``/``update``: A is Hermitian but not positive definite (a pivot ≤ 0).
    SingularMatrixError
        At ``init``/``update``: a pivot is below the threshold.
    BackendNotSupported
        A sparse A without scikit-sparse (``pip install "linops[cholmod]"``, after
        ``apt-get install libsuitesparse-dev``), or a sparse A on cupy.

    Notes
    -----
    Cost: dense n³/3 (half of LU) once, O(n²·k) per solve; sparse: CHOLMOD's supernodal
    factorization, fill-dependent; on the benchmark's 2-D finite-element family it took
    about 0.6× SuperLU's time and 0.3× its memory (README). ``update`` with the same pattern
    reuses CHOLMOD's symbolic analysis. ``sv.cholmod_available()`` says whether the sparse path
    is installed.

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> A = np.array([[4.0, 1.0], [1.0, 3.0]])
    >>> sv.init(sv.LinearProblem(A), sv.Cholesky()).solve(np.ones(2)).round(4).tolist()
    [0.1818, 0.2727]
    >>> sv.init(sv.LinearProblem(-A), sv.Cholesky())
    Traceback (most recent call last):
    ...
    solvers._errors.NotPositiveDefiniteError: Cholesky: the matrix is not positive definite ...

    Sparse, where CHOLMOD is installed:

    >>> import scipy.sparse as sp
    >>> S = sp.csr_array(A)
    >>> alg = sv.Cholesky() if sv.cholmod_available() else sv.LU()
    >>> sv.init(sv.LinearProblem(S), alg).solve(np.ones(2)).round(4).tolist()
    [0.1818, 0.2727]
    """

    pivot_rtol: float | None = None
    check_hermitian: bool = True

    def __post_init__(self):
        check_rtol(self.pivot_rtol, "pivot_rtol")

    def needs_hermitian(self, A, prob) -> bool:
        """Unless ``check_hermitian=False``: the hints never switch the check off."""
        return self.check_hermitian

    def _setup(self, A: lo.LinearOperator, prob) -> Factor:
        be = backend_of_problem(A)
        if structure(A) == "sparse":
            be.require("sparse_cholesky", "sparse Cholesky")
            factor = CholmodFactor(A, be, self.pivot_rtol)
        else:
            be.require("dense_cholesky", "dense Cholesky")
            factor = DenseCholeskyFactor(A, be, self.pivot_rtol)
        factor.requires_hermitian = self.check_hermitian
        return factor


class DenseCholeskyFactor(Factor):
    """``L`` (lower) with A = L Lᴴ; solves are two triangular solves."""

    kind = "dense Cholesky"

    def __init__(self, A, be, pivot_rtol):
        self.be, self.pivot_rtol = be, pivot_rtol
        xp = be.xp
        a = as_dense_array(A)
        self.dtype = precision(a.dtype)
        a = a.astype(self.dtype) if np.dtype(a.dtype) != self.dtype else a
        try:
            L = xp.linalg.cholesky(a)
        except Exception as e:  # numpy and cupy raise their own LinAlgError
            if "LinAlgError" not in type(e).__name__:
                raise
            raise not_posdef("Cholesky", f" (LAPACK: {e})") from None
        d = xp.diagonal(L)
        if not bool(xp.all(xp.isfinite(d))):  # jax returns NaN instead of raising
            raise not_posdef("Cholesky", " (NaN pivot)")
        pivot_check(xp.abs(d) ** 2, self.dtype, pivot_rtol, "Cholesky")
        self.L = L

    def solve(self, B, trans: str):
        xp, st = self.be.xp, self.be.linalg.solve_triangular
        if trans == "T":  # Aᵀ = conj(A) for Hermitian A
            return xp.conj(self.solve(xp.conj(B), "N"))

        def run(R):  # L Lᴴ x = r; an adjoint solve is the same solve (A = Aᴴ)
            return st(self.L, st(self.L, R, lower=True), lower=True, trans=2)

        return split_complex(run, cast_rhs(B, self.dtype), self.dtype)

    def _spawn(self, A):
        f = DenseCholeskyFactor(A, self.be, self.pivot_rtol)
        f.requires_hermitian = self.requires_hermitian
        return f

    def logdet(self) -> LogDet:
        """Π Lᵢᵢ², O(n)."""
        d = np.abs(np.asarray(to_numpy(self.be.xp.diagonal(self.L))))
        return from_diagonal(d.astype(np.float64) ** 2)

    def selected_inverse(self, shape):
        from .._factors import selinv as _selinv

        return _selinv.dense(self, shape)


def _cholmod():
    """scikit-sparse's cholmod module, imported only when a sparse Cholesky is asked for."""
    from sksparse import cholmod

    return cholmod


class CholmodFactor(Factor):
    """CHOLMOD's ``factor`` (scikit-sparse ``Factor``) on a kept ``symbolic`` analysis."""

    kind = "CHOLMOD"

    def __init__(self, A: lo.Sparse, be, pivot_rtol, symbolic=None):
        cholmod = _cholmod()
        self.be, self.pivot_rtol = be, pivot_rtol
        self.out_dtype = precision(A.dtype)
        self.dtype = np.result_type(self.out_dtype, np.float64)  # CHOLMOD: double precision
        csc = be.csr(A.values, A.pattern).tocsc().astype(self.dtype)
        if symbolic is None:
            # Debian's SuiteSparse 5.12 refuses complex Hermitian positive definite matrices in
            # its simplicial row factorization ("not positive definite" on a matrix with
            # eigenvalues 1.1, 3.7, 12): the supernodal factorization of the same matrix is right
            mode = "supernodal" if self.dtype.kind == "c" else "auto"
            symbolic = cholmod.analyze(csc, mode=mode)
            self.symbolic_analyses = 1
        self.symbolic = symbolic
        try:
            self.factor = self.symbolic.cholesky(csc)
        except cholmod.CholmodNotPositiveDefiniteError as e:
            raise not_posdef("CHOLMOD", f" ({e})") from None
        D = np.real(self.factor.D())
        pivot_check(D, self.out_dtype, pivot_rtol, "CHOLMOD")  # singular: a tiny pivot first
        if D.size and D.min() <= 0:  # a simplicial LDLᵀ "succeeds" on indefinite matrices
            k = int(np.argmin(D))
            raise not_posdef("CHOLMOD", f" (pivot {k} of LDLᵀ is {D[k]:.3g} <= 0)")

    def solve(self, B, trans: str):
        Bh = cast_rhs(self.be.to_host(B), self.dtype)
        if trans == "T":  # Aᵀ = conj(A): conj(A⁻¹ conj(b)), as for the dense factor
            Bh = np.conj(Bh)
        X = split_complex(self.factor, Bh, self.dtype)
        if trans == "T":
            X = np.conj(X)
        X = cast_rhs(X, self.out_dtype)
        return self.be.from_host(X)

    def _spawn(self, A):
        f = CholmodFactor(A, self.be, self.pivot_rtol, symbolic=self.symbolic)
        f.requires_hermitian = self.requires_hermitian
        return f

    def logdet(self) -> LogDet:
        """Π Dᵢᵢ of LDLᴴ (the squares of LLᴴ's diagonal), O(n)."""
        return from_diagonal(np.real(self.factor.D()))

    def selected_inverse(self, shape):
        from .._factors import selinv as _selinv

        return _selinv.cholmod(self, shape)


def cholmod_available() -> bool:
    """True when scikit-sparse (CHOLMOD) can be imported.

    Without it, ``sv.Cholesky()`` of a sparse matrix raises ``BackendNotSupported`` naming the
    install, and ``sv.Auto()`` solves sparse positive definite problems with SuperLU instead
    (correct, slower and with more fill). Dense Cholesky never needs it.

    Returns
    -------
    bool

    Examples
    --------
    >>> import solvers as sv
    >>> sv.cholmod_available() in (True, False)
    True
    """
    return backend_named("numpy").capability("sparse_cholesky") is None


# ----- diagonal ----------------------------------------------------------------------------------
@register("diagonal", "elementwise division for Diagonal / Identity operators",
          ("diagonal",), direct=True, queries=("logdet",), adjoint="division by conj(d)",
          jax=False)
@dataclass(frozen=True)
class DiagonalSolve(Algorithm):
    """x = b / d for a Diagonal (or Identity) operator: exact, O(n) per solve; adjoint divides by
    conj(d). A zero diagonal entry raises SingularMatrixError naming it.

    ``sv.Auto`` picks it for every ``lo.Diagonal`` and ``lo.Identity``. Setup: one O(n) scan for
    zeros (exact zeros only: a tiny entry is a valid, if ill-conditioned, diagonal). Transpose
    solves divide by d itself. ``update`` just rescans.

    Raises
    ------
    BackendNotSupported
        A is not a ``lo.Diagonal``/``lo.Identity`` (at ``init``: the registry declares
        diagonal operators only).
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

    def _setup(self, A, prob) -> Factor:
        return DiagonalFactor(A)


class DiagonalFactor(Factor):
    """The diagonal ``d`` (None for the identity), checked for zeros."""

    kind = "diagonal"

    def __init__(self, A):
        d = _diagonal(A)
        be = backend_of_problem(A)
        self.be = be
        self.dtype = precision(A.dtype)
        if d is None:
            self.d = None
            return
        bad = to_numpy(be.xp.abs(d) == 0)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise SingularMatrixError(f"the diagonal matrix has a zero at A[{k}, {k}]; it is "
                                      f"singular")
        self.d = d.astype(precision(d.dtype)) if d.dtype != precision(d.dtype) else d

    def solve(self, B, trans: str):
        if self.d is None:
            return B * 1  # a copy: u must never alias the right-hand side
        xp = self.be.xp
        d = xp.conj(self.d) if trans == "H" else self.d
        return B / d[:, None]

    def _spawn(self, A):
        return DiagonalFactor(A)

    def logdet(self) -> LogDet:
        return LogDet(1.0, 0.0) if self.d is None else from_diagonal(self.d)


def _diagonal(A):
    """The stored diagonal (None for an Identity); A's structure is "diagonal" (prepare
    checked the registry's declaration)."""
    return diagonal_of(A)
