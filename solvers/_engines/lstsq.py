"""Least squares: x = A⁺b for an m×n A of any shape, by QR (SuiteSparseQR / LAPACK) or LSMR.

Both serve the three systems of the contract from ONE setup: 'N' x = A⁺b, 'H' y = A⁺ᴴc (the
adjoint of b ↦ x, what a gradient needs) and 'T' y = A⁺ᵀc; for a square regular A these are
A⁻¹, A⁻ᴴ, A⁻ᵀ, so both are ordinary solvers too. Never the normal equations (they square
cond(A)):

- ``QR``: m ≥ n: A E = Q R (Householder Q kept implicit), x = E R⁻¹ (Qᴴb)₁:ₙ and
  A⁺ᴴc = Q [R⁻ᴴ Eᵀc; 0]; m < n: the same on Aᴴ, giving the minimum-norm x = Q R⁻ᴴ Eᵀ b. A
  that has neither full column nor full row rank (numerical rank by SuiteSparseQR's rule, or
  |Rᵢᵢ| ≤ 20(m+n)·eps·|R₀₀| for LAPACK) is refused by name (:class:`RankDeficientError`).
- ``LSMR``: scipy's ``lsmr`` (or ``lsqr``) from x₀ = 0, so the minimum-norm solution for any
  A, rank-deficient too; an iterate is accepted on the normal-equation residual,
  ‖Aᴴ(b − Ax)‖ ≤ max(rtol·‖Aᴴb‖, atol), else :class:`ConvergenceError`. Adjoint solves are
  LSMR on Aᴴ.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import linops as lo
from linops.internals import csr_parts, dense_array, structure, to_numpy

from .._checks import backend_of_problem, default_rtol, precision
from .._contract import Algorithm, Factor
from .._errors import BackendNotSupported, ConvergenceError, RankDeficientError, Status
from .._registry import Case, register
from .direct import check_rtol

_QTX, _QX = 0, 1          # SuiteSparseQR_C_qmult methods: Qᴴ X, Q X
_RETX_EQUALS_B = 1        # SuiteSparseQR_C_solve systems: X = E R⁻¹ B
_RTX_EQUALS_ETB = 3       # X = R⁻ᴴ Eᵀ B
_RX_EQUALS_B = 0          # X = R⁻¹ B (for the rank)


def sparseqr_missing() -> str | None:
    """None when SuiteSparseQR's binding imports, else how to install it."""
    try:
        import sparseqr  # noqa: F401, PLC0415 (optional dependency)
    except ImportError:
        return ('not installed: pip install "linops[qr]" (sparseqr, SuiteSparseQR; needs '
                'libsuitesparse-dev)')
    return None


def _work_dtype(dtype):
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def _as_host(B, dtype):
    return np.asfortranarray(np.asarray(to_numpy(B), dtype=dtype))


def _by_parts(fn, B):
    """A real factor applied to a complex block: its real and imaginary parts as one real
    block of twice the columns (casting B to the factor's real dtype would drop B.imag)."""
    k = B.shape[1]
    Y = fn(np.hstack([B.real, B.imag]))
    return Y[:, :k] + 1j * Y[:, k:]


# ----- QR ----------------------------------------------------------------------------------------
@register("qr", "QR least squares: SuiteSparseQR sparse (sparseqr), LAPACK dense; min-norm for "
          "m < n", ("dense", "sparse"), direct=True, backends=("numpy", "jax"),
          adjoint="the same Q and R (A⁺ᴴ = Q R⁻ᴴ Eᵀ)", requires=sparseqr_missing,
          cases=(Case("QR"),))
@dataclass(frozen=True)
class QR(Algorithm):
    """QR factorization for least squares, min ‖Ax − b‖ (and for square systems).

    Sparse A: SuiteSparseQR (``pip install "linops[qr]"``) with its fill-reducing column order,
    Q kept as Householder vectors (never formed); dense A: LAPACK's pivoted QR. Tall or square
    A (m ≥ n) must have full column rank, wide A (m < n) full row rank (then x is the
    minimum-norm solution, from the QR of Aᴴ); a rank-deficient A raises
    :class:`RankDeficientError` naming the rank (use ``sv.LSMR()``, or regularise).
    One factorization serves x = A⁺b, A⁺ᴴc and A⁺ᵀc. ``update`` with the same pattern reuses
    the column order (a fixed-order numeric factorization).

    Float32/complex64 are factorized in double precision (SuiteSparseQR's types); results are
    returned in the problem's precision.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> A = sp.csr_array(np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]]))
    >>> cache = sv.init(sv.LeastSquares(A, np.array([1.0, 2.0, 2.0])), sv.QR())
    >>> cache.solve().round(6).tolist(), cache.kind
    ([1.166667, 0.5], 'SuiteSparseQR')
    >>> c = np.array([1.0, 0.0])
    >>> bool(np.allclose(cache.solve_adjoint(c), np.linalg.pinv(A.toarray()).T @ c))   # A⁺ᴴc
    True
    """

    least_squares = True

    def _setup(self, A, prob) -> Factor:
        m, n = A.shape
        if m == 0 or n == 0:
            return _ZeroFactor(A)
        be = backend_of_problem(A)
        if structure(A) == "dense":
            return _DenseQR(np.asarray(to_numpy(dense_array(A))), A.dtype, be)
        if csr_parts(A) is None:
            raise BackendNotSupported(f"QR needs an assembled A (Dense or Sparse), got "
                                      f"{type(A).__name__}; use sv.LSMR() (products only)")
        why = sparseqr_missing()
        if why is not None:
            raise BackendNotSupported(f"QR of a sparse A needs SuiteSparseQR: {why}; or use "
                                      f"sv.LSMR()")
        return _SparseQR(A.to_scipy(), A.dtype, be)


class _ZeroFactor(Factor):
    """A with m = 0 or n = 0: A⁺ is the zero n×m matrix (exact)."""

    kind = "empty least squares"
    column_rank = row_rank = True

    def __init__(self, A):
        self.dtype = precision(A.dtype)
        self.shape = A.shape
        self.be = backend_of_problem(A)

    def solve(self, B, trans):
        m, n = self.shape
        return self.be.xp.zeros((n if trans == "N" else m, B.shape[1]), dtype=np.result_type(
            self.dtype, B.dtype))

    def _spawn(self, A):
        return _ZeroFactor(A)


def _rank_error(m, n, rank, how):
    side = "column" if m >= n else "row"
    return RankDeficientError(
        f"QR: A ({m}×{n}) has numerical rank {rank} < {min(m, n)} ({how}): without full "
        f"{side} rank min ‖Ax − b‖ has no unique (minimum-norm) solution QR can give; use "
        f"sv.LSMR() for the minimum-norm solution, or regularise (Tikhonov: stack √α·L under A "
        f"and zeros under b)")


class _DenseQR(Factor):
    """LAPACK pivoted QR of A (m ≥ n) or of Aᴴ (m < n), economic; on the host, results in
    the backend of A (``be``)."""

    kind = "dense QR"

    def __init__(self, a, dtype, be):
        self.be = be
        self.dtype = precision(dtype)
        self.shape = a.shape
        m, n = a.shape
        self.wide = m < n
        self.column_rank, self.row_rank = not self.wide, m <= n   # checked below
        work = _work_dtype(dtype)
        F = (a.conj().T if self.wide else a).astype(work)
        self.Q, self.R, self.E = sl.qr(F, mode="economic", pivoting=True)
        d = np.abs(np.diag(self.R))
        tol = 20 * (m + n) * np.finfo(np.float64).eps * (d[0] if d.size else 0.0)
        rank = int(np.sum(d > tol))
        if rank < min(m, n):
            raise _rank_error(m, n, rank, f"|Rᵢᵢ| ≤ {tol:.3g} for {min(m, n) - rank} pivots")

    def _plain(self, B):      # F⁺ B for F = Q R Eᵀ (full column rank): E R⁻¹ Qᴴ B
        Y = sl.solve_triangular(self.R, self.Q.conj().T @ B)
        X = np.empty_like(Y)
        X[self.E] = Y
        return X

    def _adjoint(self, C):    # F⁺ᴴ C = Q R⁻ᴴ Eᵀ C
        return self.Q @ sl.solve_triangular(self.R, C[self.E], trans="C")

    def gram_solve(self, C):
        """(AᴴA)⁻¹ C = E R⁻¹ R⁻ᴴ Eᵀ C (tall A): two triangular solves, no Q."""
        C = np.asarray(to_numpy(C), dtype=np.result_type(C.dtype, self.Q.dtype))
        Y = sl.solve_triangular(self.R, sl.solve_triangular(self.R, C[self.E], trans="C"))
        X = np.empty_like(Y)
        X[self.E] = Y
        return self.be.from_host(X)

    def solve(self, B, trans):
        return self.be.from_host(self._host_solve(B, trans))

    def _host_solve(self, B, trans):
        B = np.asarray(to_numpy(B), dtype=np.result_type(B.dtype, self.Q.dtype))
        if trans == "T":
            return np.conj(self._host_solve(np.conj(B), "H"))
        if (trans == "N") != self.wide:   # A⁺ = F⁺ (tall) or F⁺ᴴ (wide: F = Aᴴ)
            return self._plain(B)
        return self._adjoint(B)


class _SparseQR(Factor):
    """SuiteSparseQR of A (m ≥ n) or Aᴴ (m < n) in Householder form (Q never formed)."""

    kind = "SuiteSparseQR"

    def __init__(self, S, dtype, be, order=None):
        from sparseqr import sparseqr as spqr  # noqa: PLC0415 (optional dependency)

        self._spqr = spqr
        self.be = be          # SuiteSparseQR runs on the host; results go back to A's backend
        self.dtype = precision(dtype)
        self.shape = S.shape
        m, n = S.shape
        self.wide = m < n
        self.column_rank, self.row_rank = not self.wide, m <= n   # checked below
        self.work = _work_dtype(dtype)
        F = sp.csc_matrix((S.conj().T if self.wide else S).astype(self.work))
        if order is not None:                            # the previous column order: fixed
            F = F[:, order]
        self.symbolic_analyses = 1 if order is None else 0
        chol = spqr.scipy2cholmodsparse(sp.coo_matrix(F))
        ordering = spqr.lib.SPQR_ORDERING_FIXED if order is not None else \
            spqr.lib.SPQR_ORDERING_DEFAULT
        qr = spqr.lib.SuiteSparseQR_C_factorize(ordering, -2.0, chol, spqr.cc)
        spqr.cholmod_free_sparse(chol)
        if qr == spqr.ffi.NULL:
            raise MemoryError(f"SuiteSparseQR could not factorize A ({m}×{n})")
        self._qr = qr
        self._finalizer = weakref.finalize(self, _free_qr, spqr, qr)
        self.p = F.shape[1]                              # columns of F
        rng = np.random.default_rng(0)
        probe = rng.standard_normal((F.shape[0], 1)).astype(self.work)
        z0 = self._csolve(_RX_EQUALS_B, probe)          # R⁻¹ B: zero rows beyond the rank
        rank = int(np.count_nonzero(z0[:, 0]))
        if rank < min(m, n):
            self.close()
            raise _rank_error(m, n, rank, "SuiteSparseQR's rank estimate")
        z1 = self._csolve(_RETX_EQUALS_B, probe)        # E R⁻¹ B: the column order E
        self.given = order                               # F = G[:, order] (G = A, or Aᴴ)
        inner = np.arange(self.p) if order is None else order
        self.order = inner[_factor_columns(z0[:, 0], z1[:, 0])]   # for the next update

    @staticmethod
    def _by_column(fn, B):
        """sparseqr's numpy2cholmoddense turns a 1×k block into k×1 (it prefers column
        vectors): SuiteSparseQR then sees mismatched dimensions and returns NULL, which
        reading segfaulted. A one-row block goes one column at a time."""
        if B.shape[0] == 1 and B.shape[1] > 1:
            return np.hstack([fn(B[:, j:j + 1]) for j in range(B.shape[1])])
        return fn(B)

    def _csolve(self, system, B):
        return self._by_column(lambda B: self._csolve1(system, B), B)

    def _csolve1(self, system, B):
        spqr = self._spqr
        chB = spqr.numpy2cholmoddense(np.asfortranarray(B, dtype=self.work))
        chX = spqr.lib.SuiteSparseQR_C_solve(system, self._qr, chB, spqr.cc)
        spqr.cholmod_free_dense(chB)
        if chX == spqr.ffi.NULL:
            raise RuntimeError(f"SuiteSparseQR_C_solve failed on a {B.shape} block "
                               f"(A {self.shape[0]}×{self.shape[1]})")
        X = spqr.cholmoddense2numpy(chX)
        spqr.cholmod_free_dense(chX)
        return np.asarray(X).reshape(-1, B.shape[1])

    def _qmult(self, method, B):
        return self._by_column(lambda B: np.asarray(self._spqr.qmult(
            self._qr, np.asfortranarray(B, dtype=self.work), method)).reshape(-1, B.shape[1]), B)

    def _plain(self, B):      # G⁺ B = Π F⁺ B, F⁺ = E R⁻¹ Qᴴ
        Y = self._csolve(_RETX_EQUALS_B, self._qmult(_QTX, B))
        if self.given is None:
            return Y
        X = np.empty_like(Y)
        X[self.given] = Y
        return X

    def _adjoint(self, C):    # G⁺ᴴ C = F⁺ᴴ Πᵀ C, F⁺ᴴ = Q R⁻ᴴ Eᵀ (padded to F's rows)
        if self.given is not None:
            C = C[self.given]
        return self._qmult(_QX, self._csolve(_RTX_EQUALS_ETB, C))

    def gram_solve(self, C):
        """(AᴴA)⁻¹ C = Π E R⁻¹ R⁻ᴴ Eᵀ Πᵀ C (tall A): triangular solves with R only, no Q."""
        C = np.asarray(to_numpy(C))
        if C.dtype.kind == "c" and self.work.kind != "c":
            return _by_parts(self.gram_solve, C)
        C = _as_host(C, self.work)
        if self.given is not None:
            C = C[self.given]
        Y = self._csolve(_RETX_EQUALS_B, self._csolve(_RTX_EQUALS_ETB, C))
        if self.given is None:
            return self.be.from_host(Y)
        X = np.empty_like(Y)
        X[self.given] = Y
        return self.be.from_host(X)

    def solve(self, B, trans):
        if self._qr is None:
            raise ValueError("this SuiteSparseQR factorization was closed")
        B = np.asarray(to_numpy(B))
        if B.dtype.kind == "c" and self.work.kind != "c":
            return _by_parts(lambda P: self.solve(P, trans), B)
        return self.be.from_host(self._host_solve(_as_host(B, self.work), trans))

    def _host_solve(self, B, trans):
        if trans == "T":
            return np.conj(self._host_solve(np.conj(B), "H"))
        if (trans == "N") != self.wide:
            return self._plain(B)
        return self._adjoint(B)

    def _spawn(self, A):
        return _SparseQR(A.to_scipy(), A.dtype, self.be, order=self.order)

    def close(self):
        if self._qr is not None:
            self._finalizer()
            self._qr = None


def _factor_columns(z0, z1):
    """pos with F's column pos[k] = the factor's column k, from z0 = R⁻¹B (factor order) and
    z1 = E R⁻¹B (F's order) of one random B: z1[pos[k]] = z0[k] (distinct values, a.s.)."""
    i1 = np.lexsort((z1.imag, z1.real))
    i0 = np.lexsort((z0.imag, z0.real))
    pos = np.empty(z1.size, dtype=np.int64)
    pos[i0] = i1
    return pos


def _free_qr(spqr, qr):
    ptr = spqr.ffi.new("SuiteSparseQR_C_factorization **", qr)
    spqr.lib.SuiteSparseQR_C_free(ptr, spqr.cc)


# ----- LSMR ----------------------------------------------------------------------------------------
@register("lsmr", "LSMR / LSQR least squares (scipy): products only, min-norm for any rank",
          ("dense", "sparse", "diagonal", "lowrank", "matrixfree"), backends=("numpy", "jax"),
          adjoint="LSMR on Aᴴ (A⁺ᴴ = (Aᴴ)⁺)", cases=(Case("LSMR", dict(rtol=1e-13)),))
@dataclass(frozen=True)
class LSMR(Algorithm):
    """Iterative least squares by scipy's ``lsmr`` (``solver="lsqr"``: ``lsqr``), from x₀ = 0:
    the minimum-norm solution of min ‖Ax − b‖ for any A, rank-deficient included.

    Acceptance (the normal-equation residual, the least-squares form of the project's rule):
    ‖Aᴴ(b − Ax)‖ ≤ max(rtol·‖Aᴴb‖, atol), checked on the true residual after the method
    stops; else :class:`ConvergenceError` (Status.MAX_ITERATIONS). Adjoint solves A⁺ᴴc are LSMR
    on Aᴴ (A⁺ᴴ = (Aᴴ)⁺), transpose solves conj of those. The setup only wraps A's products.

    Parameters
    ----------
    rtol : float, optional
        Default ``default_rtol`` of the precision (1e-8 double, 1e-5 single).
    atol : float
        Absolute floor of the test (default 0).
    maxiter : int, optional
        Default 10·min(m, n) + 100.
    solver : {'lsmr', 'lsqr'}
    damp : float
        Tikhonov damping of scipy's routines, min ‖Ax − b‖² + damp²‖x‖² (0: none).

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> A = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])        # rank 1: QR refuses
    >>> x = sv.solve(sv.LeastSquares(A, np.array([1.0, 2.0, 3.0])), sv.LSMR(rtol=1e-12)).u
    >>> bool(np.allclose(x, np.linalg.pinv(A) @ [1.0, 2.0, 3.0]))   # the minimum-norm one
    True
    """

    least_squares = True
    rtol: float | None = None
    atol: float = 0.0
    maxiter: int | None = None
    solver: str = "lsmr"
    damp: float = 0.0

    def __post_init__(self):
        check_rtol(self.rtol, "rtol")
        check_rtol(self.atol, "atol")
        check_rtol(self.damp, "damp")
        if self.solver not in ("lsmr", "lsqr"):
            raise ValueError(f"solver must be 'lsmr' or 'lsqr', got {self.solver!r}")
        if self.maxiter is not None and not (isinstance(self.maxiter, int) and self.maxiter > 0):
            raise ValueError(f"maxiter must be a positive int or None, got {self.maxiter!r}")

    def _setup(self, A, prob) -> Factor:
        return _LSMRFactor(A, self)


class _LSMRFactor(Factor):
    def __init__(self, A, alg):
        self.A = A
        self.be = backend_of_problem(A)
        self.alg = alg
        self.dtype = precision(A.dtype)
        self.kind = f"{alg.solver.upper()} (scipy)"
        m, n = A.shape
        self.maxiter = alg.maxiter or 10 * min(m, n) + 100
        self.rtol = default_rtol(self.dtype) if alg.rtol is None else alg.rtol

    def _run(self, op, B):
        m, n = op.shape
        work = _work_dtype(np.result_type(B.dtype, self.dtype))
        X = np.zeros((n, B.shape[1]), dtype=work)
        tiny = 1e-3 * self.rtol      # scipy's own stopping tests, below ours: ours decides
        for j in range(B.shape[1]):
            b = np.asarray(to_numpy(B[:, j])).astype(work)
            if self.alg.solver == "lsmr":
                out = sla.lsmr(op, b, damp=self.alg.damp, atol=tiny, btol=tiny,
                               maxiter=self.maxiter)
            else:
                out = sla.lsqr(op, b, damp=self.alg.damp, atol=tiny, btol=tiny,
                               iter_lim=self.maxiter)
            x, its = out[0], int(out[2])
            self.iterations += its
            r = b - op @ x
            g = op.rmatvec(r) - self.alg.damp ** 2 * x
            g0 = op.rmatvec(b)
            bound = max(self.rtol * np.linalg.norm(g0), self.alg.atol)
            if np.linalg.norm(g) > bound and np.linalg.norm(r) > max(
                    self.rtol * np.linalg.norm(b), self.alg.atol):
                e = ConvergenceError(
                    f"{self.kind}: the normal-equation residual ‖Aᴴ(b − Ax)‖ = "
                    f"{np.linalg.norm(g):.3g} > max(rtol·‖Aᴴb‖, atol) = {bound:.3g} after "
                    f"{its} iterations (column {j}); raise maxiter, loosen rtol, or use sv.QR()",
                    [float(np.linalg.norm(g))], status=Status.MAX_ITERATIONS)
                X[:, j] = x
                e.iterate = self.be.from_host(X)
                raise e
            X[:, j] = x
        self.last_status = Status.SUCCESS
        return X

    def solve(self, B, trans):
        op = lo.aslinearoperator(self.A)
        if trans == "N":
            X = self._run(op, B)
        elif trans == "H":
            X = self._run(op.H, B)
        else:
            X = np.conj(self._run(op.H, np.conj(np.asarray(to_numpy(B)))))
        return self.be.from_host(X)

    def _spawn(self, A):
        return _LSMRFactor(A, self.alg)
