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

import ctypes
import math
import threading
import weakref
import time
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

import linops as lo
from linops.internals import backend_named, diagonal_of, structure, to_numpy

from .._analyses import analyses
from .._checks import as_dense_array, backend_of_problem, cast_rhs, precision, rcond_tol, split_complex
from .._contract import Algorithm, Factor
from .._errors import BackendNotSupported, NotPositiveDefiniteError, SingularMatrixError
from .._factors import selinv as _selinv
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
#: SuperLU's diagonal pivot threshold in symmetric mode: a diagonal entry at least this fraction
#: of its column's largest is taken as the pivot (the SuperLU user's guide suggests 0.0 to 0.01)
SYMMETRIC_PIVOT_THRESHOLD = 0.01


@register("lu", "LU with partial pivoting: LAPACK dense, SuperLU sparse (cupyx splu on cupy)",
          ("dense", "sparse", "diagonal", "lowrank", "matrixfree"), capability={"sparse": "sparse_lu", "*": "dense_lu"}, direct=True,
          queries=("logdet", "selected_inverse"), adjoint="the same factors (trans='H')",
          jax=True)
@dataclass(frozen=True)
class LU(Algorithm):
    """LU factorization with partial pivoting; one factorization serves A, Aᵀ and Aᴴ solves.

    Dense: LAPACK getrf (scipy / jax.scipy / cupyx). Sparse: SuperLU (``splu``; on cupy the
    cupyx ``splu``, which factorizes on the host and solves on the GPU), used the way its
    authors recommend for the structure (below). Adjoint/transpose solves reuse the factors
    (``trans='H'/'T'``). ``update`` with the same pattern refactorizes numerically in the
    order found by the first factorization (the ordering runs once).

    Sparse A, by structure (``symmetric_mode=None``):

    * structurally symmetric (A and Aᵀ have one pattern: finite elements, graphs, most PDE
      matrices, symmetric or not in their values): SuperLU's **symmetric mode** — minimum
      degree on the structure of Aᵀ + A (``MMD_AT_PLUS_A``) and diagonal pivots preferred
      (``diag_pivot_thresh`` 0.01, :data:`SYMMETRIC_PIVOT_THRESHOLD`). On the 2-D Q4 family
      it makes 0.57× COLAMD's fill and factorizes about twice as fast (n = 160 400). Threshold
      pivoting is verified: the backward error of the solve that estimates the condition
      number must stay at the rounding level (1e3·eps), else the factorization is redone in
      the general mode (counted in ``cache.stats.fallbacks``, said in ``cache.kind``);
    * otherwise: COLAMD's column order and partial pivoting (threshold 1).

    Cost: dense O(n³) once, O(n²·k) per solve; sparse: SuperLU fill-dependent, plus one solve
    and one product with A to check the factorization.

    Parameters
    ----------
    pivot_rtol : float, optional
        A dense pivot below pivot_rtol·max|pivot|, or for SuperLU a reciprocal condition
        estimate below it (one extra solve), means singular. Default: 1e3·eps in double
        precision (≈2.2e-13), 1e2·eps in single (≈1.2e-5). 0 disables the check.
    symmetric_mode : bool, optional
        Sparse A: None (default) by structure, as above; True: symmetric mode whatever the
        structure; False: COLAMD and partial pivoting always.

    Raises
    ------
    ValueError
        ``pivot_rtol`` negative or not finite, ``symmetric_mode`` not None/True/False (at
        construction).
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

    Sparse: SuperLU, whose factors also solve with Aᴴ; this pattern is structurally
    symmetric, so symmetric mode; an update with the same pattern reuses the ordering:

    >>> import scipy.sparse as sp
    >>> S = sp.csr_array(np.array([[4.0, 1.0, 0.0], [2.0, 3.0, 0.0], [0.0, 0.0, 1.0]]))
    >>> cache = sv.init(sv.LinearProblem(S), sv.LU())
    >>> cache.kind, cache.solve_adjoint(np.ones(3)).round(3).tolist()
    ('SuperLU (symmetric mode)', [0.1, 0.3, 1.0])
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
    symmetric_mode: bool | None = None

    def __post_init__(self):
        check_rtol(self.pivot_rtol, "pivot_rtol")
        if self.symmetric_mode not in (None, True, False):
            raise ValueError(f"LU: symmetric_mode must be None, True or False, got "
                             f"symmetric_mode={self.symmetric_mode!r}")

    def _setup(self, A: lo.LinearOperator, prob) -> Factor:
        be = backend_of_problem(A)
        if structure(A) == "sparse":
            be.require("sparse_lu", "sparse LU")
            symmetric = (structurally_symmetric(A.pattern) if self.symmetric_mode is None
                         else self.symmetric_mode)
            return SparseLUFactor(A, be, self.pivot_rtol, symmetric=symmetric)
        be.require("dense_lu", "dense LU")
        return DenseLUFactor(A, be, self.pivot_rtol)


def structurally_symmetric(pattern) -> bool:
    """Whether a square pattern equals its transpose (O(nnz) once per pattern: the transposed
    pattern is kept on it)."""
    m, n = pattern.shape
    return m == n and pattern.transpose()[0] == pattern


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
        return _selinv.dense(self, shape)


class SparseLUFactor(Factor):
    """SuperLU through the backend's sparse module.

    ``lu`` factorizes M = A[row_order][:, order]: A itself after a fresh factorization
    (``reordered`` False; SuperLU keeps its permutations ``perm_r``/``perm_c``), or, in a
    numeric refactorization, A permuted by the order of a previous factorization of the same
    pattern, factorized with ``permc_spec='NATURAL'`` (SuperLU keeps no symbolic factorization,
    so we keep its order; partial row pivoting is redone). ``order`` are the columns;
    ``row_order`` is None in the general mode (M = A[:, order]) and equal to ``order`` in
    symmetric mode (M = PAPᵀ, whose diagonal is A's: symmetric mode's pivots are diagonal
    ones). ``symmetric`` says which mode made the factors; ``fallbacks`` counts a symmetric
    factorization redone in the general mode (the backward-error check)."""

    def __init__(self, A: lo.Sparse, be, pivot_rtol, order=None, symmetric: bool = False):
        self.be, self.pivot_rtol = be, pivot_rtol
        self.dtype = precision(A.dtype)
        self.pattern = A.pattern  # A's (explicit zeros included): selected inversion holds it
        csc = be.csr(A.values, A.pattern).tocsc().astype(self.dtype, copy=False)
        self.fallbacks = 0
        # SuperLU keeps no symbolic factorization, but its column order is the pattern's alone:
        # kept across caches (solvers._analyses), a fresh cache of a known pattern factorizes A
        # permuted by it, as an update does (0.85-0.9x the time of splu's own ordering at
        # n = 40 200 and 160 400; the same factors)
        key = (("superlu", A.pattern, symmetric)
               if order is None and be.sparse_lu_keeps_order else None)
        if key is not None:
            order = analyses.get(key)
            self.reused_analysis = order is not None
        self._factorize(csc, order, symmetric)
        if key is not None and not self.reused_analysis:
            self.order.setflags(write=False)   # shared by the pattern's later caches
            analyses.put(key, self.order, self.order.nbytes)
        try:
            berr = factor_check(self, A, pivot_rtol, self.kind)
        except SingularMatrixError:
            if not symmetric:
                raise
            berr = math.inf   # threshold pivoting is not to blame for singularity: retry
        if symmetric and not berr <= backward_tol(self.dtype):
            # diagonal pivoting was not stable enough here: partial pivoting instead
            self.fallbacks = 1
            self._factorize(csc, None, False)
            factor_check(self, A, pivot_rtol, self.kind)
            self.kind += f" (after symmetric mode: backward error {berr:.1e})"

    def _factorize(self, csc, order, symmetric: bool) -> None:
        be = self.be
        self.symmetric = symmetric
        self.kind = be.sparse_lu_name + (" (symmetric mode)" if symmetric else "")
        mode = (dict(diag_pivot_thresh=SYMMETRIC_PIVOT_THRESHOLD,
                     options=dict(SymmetricMode=True)) if symmetric else {})
        reuse = order is not None
        t = time.perf_counter()
        try:
            if reuse:
                self.order = order
                self.row_order = order if symmetric else None
                M = csc[order][:, order] if symmetric else csc[:, order]
                self.lu = be.sparse_linalg.splu(M, permc_spec="NATURAL", **mode)
                self.symbolic_analyses = 0
            else:
                self.lu = be.sparse_linalg.splu(
                    csc, permc_spec="MMD_AT_PLUS_A" if symmetric else "COLAMD", **mode)
                self.symbolic_analyses = 1
                # SuperLU factors Pr·A·Pc = L·U with Pc[i, perm_c[i]] = 1, i.e. A·Pc takes its
                # column j from column argsort(perm_c)[j] of A: that is the column order
                self.order = (np.argsort(to_numpy(self.lu.perm_c)) if be.sparse_lu_keeps_order
                              else None)
                self.row_order = None
        except RuntimeError as e:
            raise SingularMatrixError(f"SuperLU: {e}; the matrix has a zero pivot (a zero column "
                                      f"or a singular block). Check boundary conditions") from None
        self.reordered = reuse
        self.numeric_seconds = time.perf_counter() - t   # SuperLU orders inside splu

    def solve(self, B, trans: str):
        be = self.be
        Bf = cast_rhs(be.to_factor(B), self.dtype)
        X = split_complex(lambda R: self._solve(R, trans), Bf, self.dtype)
        return be.from_factor(X)

    def _solve(self, R, trans):
        R = self.be.factor_layout(R)
        if not self.reordered:
            return self.lu.solve(R, trans=trans)
        # M = A[rows][:, cols]: A x = b is M y = b[rows] with x[cols] = y, and Aᴴ x = c is
        # Mᴴ z = c[cols] with x[rows] = z (rows the identity in the general mode)
        rows = self.row_order
        cols = self.order
        if trans == "N":
            Y = self.lu.solve(R if rows is None else np.asfortranarray(R[rows]), trans="N")
            X = np.empty_like(Y)
            X[cols] = Y
            return X
        Z = self.lu.solve(np.asfortranarray(R[cols]), trans=trans)
        if rows is None:
            return Z
        X = np.empty_like(Z)
        X[rows] = Z
        return X

    def _spawn(self, A):
        return SparseLUFactor(A, self.be, self.pivot_rtol, order=self.order,
                              symmetric=self.symmetric)

    def logdet(self) -> LogDet:
        return superlu_logdet(self)

    def selected_inverse(self, shape):
        if not self.be.host_factors:
            raise BackendNotSupported("selected inversion of a cupyx SuperLU factor is not wired;"
                                      " factorize on the host (numpy arrays) with sv.LU()")

        return _selinv.superlu(self, shape)


def backward_tol(dtype) -> float:
    """The largest backward error a factorization may show on its check solve: 1e3·eps (the
    rounding level of a stable factorization, with room for n and the condition of the
    check)."""
    return 1e3 * float(np.finfo(np.dtype(dtype)).eps)


def factor_check(factor, A: lo.Sparse, rtol: float | None, what: str) -> float:
    """One solve with a fixed random vector r checks a sparse factorization twice; returns the
    backward error ‖r − A x‖∞ / (‖A‖∞‖x‖∞ + ‖r‖∞) of x = A⁻¹r.

    * singularity: SingularMatrixError when the reciprocal-condition estimate
      ‖r‖∞ / (‖A‖∞ ‖A⁻¹r‖∞) is at most ``rtol`` (default ``rcond_tol``; 0: no check). SuperLU
      exposes its pivots only by copying all of U (as expensive as the factorization), so this
      costs one triangular solve pair instead;
    * stability: the backward error (one product with A), which the caller compares with
      :func:`backward_tol` where it chose a pivoting that needs checking.
    """
    rtol = rcond_tol(A.dtype) if rtol is None else rtol
    if A.shape[0] == 0:
        return 0.0
    r = np.random.default_rng(12345).standard_normal((A.shape[0], 1)).astype(factor.dtype)
    x = to_numpy(factor.solve(factor.be.from_host(r), "N"))
    values = np.abs(to_numpy(A.values))
    anorm = np.bincount(A.pattern.rows, values, minlength=A.shape[0]).max()
    xmax = np.abs(x).max()
    if rtol > 0 and (not np.isfinite(xmax) or np.abs(r).max() <= rtol * anorm * xmax):
        est = np.abs(r).max() / (anorm * xmax) if np.isfinite(xmax) and xmax else 0.0
        raise SingularMatrixError(
            f"{what}: the matrix is singular to working precision: estimated reciprocal "
            f"condition number {est:.3g} <= pivot_rtol={rtol:.3g}. Check boundary conditions (a "
            f"pure-Neumann problem needs one fixed dof) or regularise; pivot_rtol=0 disables "
            f"this check")
    if not np.isfinite(xmax):
        return math.inf
    P = A.pattern
    Ax = sp.csr_matrix((to_numpy(A.values), P.indices, P.indptr), shape=P.shape) @ x[:, 0]
    res = np.abs(r[:, 0] - Ax).max()
    return float(res / (anorm * xmax + np.abs(r).max()))


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
        return _selinv.dense(self, shape)


def _cholmod():
    """scikit-sparse's cholmod module, imported only when a sparse Cholesky is asked for."""
    # optional: scikit-sparse (the cholmod extra)
    from sksparse import cholmod

    return cholmod


class _Symbolic:
    """A CHOLMOD symbolic analysis (scikit-sparse ``Factor`` from ``analyze``) shared by the
    factors of one pattern (``like=``, ``sv.analyses``), with the lock its numeric
    factorizations take (its ``cholmod_common`` workspace is not for two threads at once)."""

    def __init__(self, factor):
        self.factor, self.lock = factor, threading.Lock()


class CholmodFactor(Factor):
    """CHOLMOD's ``factor`` (scikit-sparse ``Factor``) on a kept ``symbolic`` analysis."""

    kind = "CHOLMOD"

    def __init__(self, A: lo.Sparse, be, pivot_rtol, symbolic=None):
        cholmod = _cholmod()
        self.be, self.pivot_rtol, self._native = be, pivot_rtol, None
        self.out_dtype = precision(A.dtype)
        self.dtype = np.result_type(self.out_dtype, np.float64)  # CHOLMOD: double precision
        csc = _symmetric_pattern(be.csr(A.values, A.pattern)).tocsc().astype(self.dtype,
                                                                          copy=False)
        if symbolic is None:
            # Debian's SuiteSparse 5.12 refuses complex Hermitian positive definite matrices in
            # its simplicial row factorization ("not positive definite" on a matrix with
            # eigenvalues 1.1, 3.7, 12): the supernodal factorization of the same matrix is right
            mode = "supernodal" if self.dtype.kind == "c" else "auto"
            # CHOLMOD's analysis is the pattern's alone: kept across caches (solvers._analyses)
            symbolic, self.reused_analysis = analyses.obtain(
                ("cholmod", A.pattern, mode, self.dtype),
                lambda: _Symbolic(cholmod.analyze(csc, mode=mode)),
                lambda _: 8 * (4 * A.shape[0] + csc.nnz))
            self.symbolic_analyses = int(not self.reused_analysis)
        self.symbolic = symbolic
        t = time.perf_counter()
        try:
            with symbolic.lock:   # one numeric factorization at a time on a shared analysis
                self.factor = symbolic.factor.cholesky(csc)
        except cholmod.CholmodNotPositiveDefiniteError as e:
            raise not_posdef("CHOLMOD", f" ({e})") from None
        self.numeric_seconds = time.perf_counter() - t
        D = cholmod_pivots(self.factor)
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

    def native_handle(self) -> int:
        """A native copy of the factor (real, double precision: ``cholmod_copy_factor`` into
        ``solvers._native``, O(nnz(L)) once, freed with this factor) for ``adjoints.jax``'s
        FFI solves; 0 for complex factors, a layout the reader refuses, or no extension."""
        if self._native is None:
            # the extension's loader lives in klu.py, which imports this module (pivot_check)
            from .klu import native, native_available
            from .._factors.selinv import _cholmod_struct  # the factor's C layout, verified

            handle = 0
            if native_available() and hasattr(native(), "adopt_cholmod") and \
                    self.dtype == np.float64:
                try:
                    st = _cholmod_struct(self.factor)
                except BackendNotSupported:
                    st = None
                if st is not None:
                    handle = int(native().adopt_cholmod(ctypes.addressof(st)))
                    if handle:
                        weakref.finalize(self, native().free_factor, handle)
            self._native = handle
        return self._native

    def _spawn(self, A):
        f = CholmodFactor(A, self.be, self.pivot_rtol, symbolic=self.symbolic)
        f.requires_hermitian = self.requires_hermitian
        return f

    def logdet(self) -> LogDet:
        """Π Dᵢᵢ of LDLᴴ (the squares of LLᴴ's diagonal), O(n)."""
        return from_diagonal(cholmod_pivots(self.factor))

    def selected_inverse(self, shape):
        return _selinv.cholmod(self, shape)


def cholmod_pivots(factor) -> np.ndarray:
    """The D of CHOLMOD's LDLᴴ (the squares of LLᴴ's diagonal), real, length n.

    Read from the factor in place (O(n): the diagonal entries of each supernode, or the first
    entry of each simplicial column) where its layout is the one selected inversion reads;
    scikit-sparse's ``D()`` otherwise, which converts the whole factor (37 ms at n = 160 400,
    the Q4 family)."""
    from .._factors.selinv import _carray, _cholmod_struct  # the layout reader lives there

    try:
        st = _cholmod_struct(factor)
    except BackendNotSupported:
        return np.real(factor.D())
    n = int(st.n)
    itype = np.int64 if st.itype == 2 else np.int32
    cplx = st.xtype == 2
    if st.is_super:
        ns = int(st.nsuper)
        sup = _carray(st.super_, ns + 1, itype).astype(np.int64)
        pi = _carray(st.pi, ns + 1, itype).astype(np.int64)
        px = _carray(st.px, ns + 1, itype).astype(np.int64)
        width = np.diff(sup)
        node = np.repeat(np.arange(ns), width)          # the supernode of each column
        local = np.arange(n) - sup[node]                 # its column within the supernode
        pos = px[node] + local * (pi[node + 1] - pi[node]) + local
    else:
        pos = _carray(st.p, n + 1, itype)[:n].astype(np.int64)
    count = int(pos.max()) + 1 if n else 0
    raw = _carray(st.x, count * (2 if cplx else 1), np.float64)
    d = (raw[2 * pos] if cplx else raw[pos]).copy()      # real part: the diagonal is real
    return d * d if st.is_ll else d


def _symmetric_pattern(S):
    """S with its pattern closed under transposition (the added positions hold explicit
    zeros; a Hermitian S is ~0 there anyway). CHOLMOD reads one triangle: a stored entry (i, j)
    whose partner (j, i) is not stored — an explicit zero of a family at θₑ = 0, say — would
    otherwise leave the analysed pattern, and the selected inverse would miss A⁻¹ there.
    O(nnz); S itself when its pattern is symmetric already."""
    T = S.T.tocsr()
    T.sort_indices()
    S = S.tocsr()
    S.sort_indices()
    if S.nnz == T.nnz and np.array_equal(S.indptr, T.indptr) and np.array_equal(S.indices,
                                                                                  T.indices):
        return S
    C = S.tocoo()
    rows = np.concatenate([C.row, C.col])
    cols = np.concatenate([C.col, C.row])
    vals = np.concatenate([C.data, np.zeros(C.nnz, dtype=C.data.dtype)])
    return sp.csr_matrix((vals, (rows, cols)), shape=S.shape)   # duplicates summed, zeros kept


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
