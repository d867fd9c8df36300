"""Direct solvers: LU and Cholesky, dense and sparse. One factorization serves A, Aᵀ and Aᴴ."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import linops as lo
from linops._backend import backend_name, to_numpy

from ._backend import as_dense_array, dense_linalg, device_csr, host_csr, split_complex, xp_of
from ._errors import BackendNotSupported, SingularMatrixError, SolveError

_TRANS = {"N": 0, "T": 1, "H": 2}


RCOND_TOL = 1e3 * np.finfo(np.float64).eps  # ≈ 2.2e-13: fewer than ~3 correct digits left


def _pivot_check(pivots, n: int, rtol: float | None, what: str) -> None:
    """Raise SingularMatrixError when min|pivot| <= rtol·max|pivot| (rtol default RCOND_TOL)."""
    d = np.abs(to_numpy(pivots))
    if d.size == 0:
        return
    rtol = RCOND_TOL if rtol is None else rtol
    dmax, dmin = d.max(), d.min()
    if not np.isfinite(dmax) or dmin <= rtol * dmax:
        k = int(np.argmin(d))
        raise SingularMatrixError(
            f"{what}: the matrix is singular to working precision: pivot {k} is {dmin:.3g} while "
            f"the largest is {dmax:.3g} (ratio {dmin / dmax if dmax else 0:.3g} <= pivot_rtol="
            f"{rtol:.3g}). Check boundary conditions (a pure-Neumann problem needs one fixed dof) "
            f"or regularise; pivot_rtol=0 disables this check")


def _check_hermitian(A: lo.LinearOperator, what: str) -> None:
    xp = xp_of(A)
    if isinstance(A, lo.Sparse):
        AH = A.adjoint()
        if AH.pattern != A.pattern:
            raise SolveError(f"{what} needs a Hermitian matrix, but A's pattern is not symmetric; "
                             f"use LU (or pass hermitian=True if you know better)")
        diff = float(xp.max(xp.abs(AH.values - A.values))) if A.pattern.nnz else 0.0
        scale = float(xp.max(xp.abs(A.values))) if A.pattern.nnz else 0.0
    else:
        a = as_dense_array(A)
        diff = float(xp.max(xp.abs(a - xp.conj(a).T)))
        scale = float(xp.max(xp.abs(a)))
    if diff > 1e-10 * max(scale, 1e-300):
        raise SolveError(f"{what} needs a Hermitian matrix, but max|A - Aᴴ| = {diff:.3g} "
                         f"(max|A| = {scale:.3g}); use LU")


# ----- LU ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LU:
    """LU factorization. Dense: LAPACK getrf (scipy / jax.scipy / cupyx). Sparse: SuperLU
    (``splu``; on cupy the cupyx ``splu``, which factorizes on the host and solves on the GPU).

    Adjoint/transpose solves reuse the factors (``trans='H'/'T'``). Numeric refactorization of a
    sparse matrix on the same pattern reuses the column ordering (COLAMD runs once).
    ``pivot_rtol``: a dense pivot below pivot_rtol·max|pivot|, or for SuperLU a reciprocal
    condition estimate below it (one extra solve), means singular (default 1e3·eps ≈ 2.2e-13).
    """

    pivot_rtol: float | None = None

    def setup(self, A: lo.LinearOperator, prob) -> "object":
        if isinstance(A, lo.Sparse):
            if backend_name(xp_of(A)) == "cupy":
                return _CupySuperLU(A, self.pivot_rtol)
            return _SuperLU(A, self.pivot_rtol)
        return _DenseLU(A, self.pivot_rtol)


class _DenseLU:
    kind = "dense LU"

    def __init__(self, A, pivot_rtol):
        self.xp = xp_of(A)
        self.la = dense_linalg(self.xp)
        a = as_dense_array(A)
        if backend_name(self.xp) == "numpy":
            import warnings

            with warnings.catch_warnings():  # scipy warns on an exact zero pivot; we raise below
                warnings.simplefilter("ignore")
                self.lu_piv = self.la.lu_factor(a, check_finite=False)
        else:
            self.lu_piv = self.la.lu_factor(a)
        _pivot_check(self.xp.diagonal(self.lu_piv[0]), A.shape[0], pivot_rtol, "LU")
        self.pivot_rtol = pivot_rtol
        self.iterations = 0

    def solve(self, B, trans: str):
        return self.la.lu_solve(self.lu_piv, B, trans=_TRANS[trans])

    def refactor(self, A):
        return _DenseLU(A, self.pivot_rtol)


class _SuperLU:
    kind = "SuperLU"

    def __init__(self, A: lo.Sparse, pivot_rtol, colperm=None):
        import scipy.sparse.linalg as spl

        self.out_xp = xp_of(A)  # jax values: host factorization, results back as jax arrays
        csc = host_csr(A).tocsc()
        self.dtype = csc.dtype
        self.colperm = colperm
        try:
            if colperm is None:
                self.lu = spl.splu(csc, permc_spec="COLAMD")
            else:
                self.lu = spl.splu(csc[:, colperm], permc_spec="NATURAL")
        except RuntimeError as e:
            raise SingularMatrixError(f"SuperLU: {e}; the matrix has a zero pivot (a zero column "
                                      f"or a singular block). Check boundary conditions") from None
        self.pivot_rtol = pivot_rtol
        _growth_check(self, A, pivot_rtol, "SuperLU")
        self.iterations = 0

    def solve(self, B, trans: str):
        X = split_complex(lambda R: self._solve(R, trans), _host_in(B, self.dtype), self.dtype)
        return X if self.out_xp is np else self.out_xp.asarray(X)

    def _solve(self, Bh, trans):
        if self.colperm is None:
            return self.lu.solve(np.asarray(Bh, order="F"), trans=trans)
        if trans == "N":
            Y = self.lu.solve(np.asarray(Bh, order="F"), trans="N")
            X = np.empty_like(Y)
            X[self.colperm] = Y
            return X
        return self.lu.solve(np.asarray(Bh[self.colperm], order="F"), trans=trans)

    def refactor(self, A):
        perm = self.lu.perm_c if self.colperm is None else self.colperm[self.lu.perm_c]
        return _SuperLU(A, self.pivot_rtol, colperm=np.asarray(perm))


class _CupySuperLU:
    kind = "cupyx SuperLU (host factorization, GPU solves)"

    def __init__(self, A: lo.Sparse, pivot_rtol):
        import cupyx.scipy.sparse.linalg as cspl

        try:
            self.lu = cspl.splu(device_csr(A).tocsc())
        except RuntimeError as e:
            raise SingularMatrixError(f"cupyx splu: {e}; the matrix has a zero pivot") from None
        self.pivot_rtol = pivot_rtol
        self.iterations = 0
        _growth_check(self, A, pivot_rtol, "cupyx splu")

    def solve(self, B, trans: str):
        return self.lu.solve(B, trans=trans)

    def refactor(self, A):
        return _CupySuperLU(A, self.pivot_rtol)


def _host_in(B, dtype):
    """Host copy of B in the factor's precision (complex B stays complex: split_complex)."""
    Bh = to_numpy(B)
    kind = "c" if np.dtype(Bh.dtype).kind == "c" else np.dtype(dtype).kind
    target = np.result_type(np.dtype(dtype), np.complex64) if kind == "c" else np.dtype(dtype)
    if np.dtype(dtype).kind == "c" or kind != "c":
        target = np.dtype(dtype) if np.dtype(dtype).kind == kind else target
    return Bh.astype(target, copy=False)


def _growth_check(factor, A: lo.Sparse, rtol: float | None, what: str) -> None:
    """Reciprocal-condition estimate from one solve with a fixed random vector:
    rcond ≈ ‖r‖∞ / (‖A‖∞ ‖A⁻¹r‖∞). SuperLU exposes its pivots only by copying all of U (as
    expensive as the factorization), so this costs one triangular solve pair instead."""
    rtol = RCOND_TOL if rtol is None else rtol
    if rtol <= 0 or A.shape[0] == 0:
        return
    r = np.random.default_rng(12345).standard_normal((A.shape[0], 1))
    xp = xp_of(A)
    x = to_numpy(factor.solve(r if backend_name(xp) != "cupy" else xp.asarray(r), "N"))
    anorm = np.abs(to_numpy(A.values))
    anorm = np.bincount(A.pattern.rows, anorm, minlength=A.shape[0]).max()
    xmax = np.abs(x).max()
    if not np.isfinite(xmax) or np.abs(r).max() <= rtol * anorm * xmax:
        est = np.abs(r).max() / (anorm * xmax) if np.isfinite(xmax) and xmax else 0.0
        raise SingularMatrixError(
            f"{what}: the matrix is singular to working precision: estimated reciprocal "
            f"condition number {est:.3g} <= pivot_rtol={rtol:.3g}. Check boundary conditions (a "
            f"pure-Neumann problem needs one fixed dof) or regularise; pivot_rtol=0 disables "
            f"this check")


# ----- Cholesky ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cholesky:
    """Cholesky A = L Lᴴ for Hermitian positive definite A.

    Dense: LAPACK potrf (scipy / jax.scipy / cupyx). Sparse: CHOLMOD via scikit-sparse, whose
    symbolic analysis (fill-reducing ordering) is kept for numeric refactorizations; without
    scikit-sparse a sparse matrix raises BackendNotSupported naming the install.
    Adjoint solves are the same solve (A = Aᴴ); transpose solves conjugate.
    A failed factorization (not positive definite, or a tiny pivot) raises SingularMatrixError.
    """

    pivot_rtol: float | None = None
    check_hermitian: bool = True

    def setup(self, A: lo.LinearOperator, prob):
        if self.check_hermitian and not (prob is not None and prob.hermitian):
            _check_hermitian(A, "Cholesky")
        if isinstance(A, lo.Sparse):
            if backend_name(xp_of(A)) == "cupy":
                raise BackendNotSupported("sparse Cholesky on the GPU does not exist in cupyx; "
                                          "use sv.LU() (cupyx splu) or sv.CG(precond=sv.Jacobi())")
            return _Cholmod(A, self.pivot_rtol)
        return _DenseCholesky(A, self.pivot_rtol)


class _DenseCholesky:
    """A = L Lᴴ through ``xp.linalg.cholesky`` and triangular solves (scipy / cupyx / jax.scipy
    ``solve_triangular``), so the same code serves numpy, cupy and jax."""

    kind = "dense Cholesky"

    def __init__(self, A, pivot_rtol):
        self.xp = xp = xp_of(A)
        self.la = dense_linalg(xp)
        a = as_dense_array(A)
        try:
            L = xp.linalg.cholesky(a)
        except np.linalg.LinAlgError as e:
            raise SingularMatrixError(f"Cholesky: {e}: the matrix is singular or indefinite; use "
                                      f"LU for indefinite matrices") from None
        except Exception as e:  # cupy raises its own LinAlgError
            if "LinAlgError" not in type(e).__name__:
                raise
            raise SingularMatrixError(f"Cholesky: {e}: the matrix is singular or indefinite") from None
        d = xp.diagonal(L)
        if not bool(xp.all(xp.isfinite(d))):
            raise SingularMatrixError("Cholesky: the matrix is not positive definite (NaN pivot); "
                                      "use LU for indefinite matrices")
        _pivot_check(xp.abs(d) ** 2, A.shape[0], pivot_rtol, "Cholesky")
        self.L = L
        self.pivot_rtol = pivot_rtol
        self.iterations = 0

    def solve(self, B, trans: str):
        xp, st = self.xp, self.la.solve_triangular
        if trans == "T":
            return xp.conj(self.solve(xp.conj(B), "N"))
        Y = st(self.L, B, lower=True)
        return st(self.L, Y, lower=True, trans=2)

    def refactor(self, A):
        return _DenseCholesky(A, self.pivot_rtol)


def _cholmod():
    try:
        from sksparse import cholmod
    except ImportError:
        raise BackendNotSupported(
            'sparse Cholesky needs CHOLMOD: pip install "linops[cholmod]" (scikit-sparse; on '
            'Debian/Ubuntu first apt-get install libsuitesparse-dev), or use sv.LU() or '
            'sv.CG(precond=sv.AMG())') from None
    return cholmod


class _Cholmod:
    kind = "CHOLMOD"

    def __init__(self, A: lo.Sparse, pivot_rtol, symbolic=None):
        cholmod = _cholmod()
        self.out_xp = xp_of(A)
        csc = host_csr(A).tocsc()
        self.dtype = csc.dtype
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cholmod.CholmodTypeConversionWarning)
            self.symbolic = cholmod.analyze(csc) if symbolic is None else symbolic
            try:
                self.factor = self.symbolic.cholesky(csc)
            except cholmod.CholmodNotPositiveDefiniteError as e:
                raise SingularMatrixError(f"CHOLMOD: {e}: the matrix is singular or not positive "
                                          f"definite; use LU for indefinite matrices") from None
        _pivot_check(self.factor.D(), A.shape[0], pivot_rtol, "CHOLMOD")
        self.pivot_rtol = pivot_rtol
        self.iterations = 0

    def solve(self, B, trans: str):
        Bh = _host_in(B, self.dtype)
        if trans == "T":
            Bh = np.conj(Bh)
        X = split_complex(self.factor, Bh, self.dtype)
        if trans == "T":
            X = np.conj(X)
        return X if self.out_xp is np else self.out_xp.asarray(X)

    def refactor(self, A):
        return _Cholmod(A, self.pivot_rtol, symbolic=self.symbolic)


def cholmod_available() -> bool:
    try:
        _cholmod()
        return True
    except BackendNotSupported:
        return False
