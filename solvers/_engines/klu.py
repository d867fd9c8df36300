"""SuiteSparse KLU as a sparse direct solver, compiled into linops (``solvers._native``).

KLU (Davis & Palamadai Natarajan) orders A to block triangular form (BTF), orders each block
(AMD or COLAMD) and factorizes the blocks by left-looking LU with partial pivoting (tol 1)
and row scaling: P R⁻¹ A Q = L U + F. It is the LU of circuit simulators and of the native JAX
solvers (klujax, splineax, sparsax), and it is the engine whose factors ``adjoints.jax`` solves
with inside XLA without a Python callback (``adjoints.jax._native``).

The extension is built by the package's own build where a C++17 compiler and the SuiteSparse
headers are present (``apt-get install libsuitesparse-dev``); elsewhere ``sv.KLU()`` raises
``BackendNotSupported`` naming that install, and every other engine is unaffected.

What the factors keep and answer: the symbolic analysis (BTF + ordering) is one object shared
by every numeric factorization of the pattern — ``cache.update(A=...)`` with the same pattern
and ``sv.init(..., like=)`` run ``klu_factor`` on it (pivoting redone, ordering kept); one
factorization serves A x = b (``klu_solve``), Aᵀ x = b (``klu_tsolve``) and Aᴴ x = b
(``klu_z_tsolve`` with ``conj_solve``); log det A = log(Π Rᵢ · sign(P) sign(Q) · Π Uₖₖ) from the
factors, O(n). KLU computes in double precision: a float32/complex64 A is factorized in
float64/complex128 and solutions are returned in the input precision (as CHOLMOD does).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

import linops as lo
from linops.internals import to_numpy

from .._analyses import analyses
from .._checks import backend_of_problem, cast_rhs, precision, split_complex
from .._contract import Algorithm, Factor
from .._errors import BackendNotSupported, SingularMatrixError
from .._factors.logdet import LogDet
from .._registry import register
from .direct import check_rtol, pivot_check

INSTALL = ("apt-get install libsuitesparse-dev (and a C++17 compiler), then reinstall linops "
           "(pip install .)")
_TRANS = {"N": 0, "T": 1, "H": 2}
_ORDERINGS = {"amd": 0, "colamd": 1}
_INT32_MAX = 2**31 - 1


@lru_cache(maxsize=1)
def _load():
    """(the extension module, None) or (None, why it is missing)."""
    try:
        from .. import _native   # compiled, optional: absent where it was not built
    except ImportError as e:
        return None, (f"sv.KLU needs the native extension solvers._native, which this "
                      f"installation lacks ({e}): {INSTALL}; or use sv.LU() (SuperLU)")
    return _native, None


def native():
    """The compiled module ``solvers._native``; BackendNotSupported naming the install."""
    mod, why = _load()
    if mod is None:
        raise BackendNotSupported(why)
    return mod


def native_available() -> bool:
    """True when ``solvers._native`` (KLU and its XLA FFI handlers) is built and importable.

    Examples
    --------
    >>> native_available() in (True, False)
    True
    """
    return _load()[0] is not None


def _unavailable() -> str | None:
    return _load()[1]


class _Symbolic:
    """KLU's symbolic analysis of one pattern (a native handle, freed with this object)."""

    def __init__(self, pattern: lo.Pattern, ordering: str):
        mod = native()
        n = pattern.shape[0]
        if n > _INT32_MAX or pattern.nnz > _INT32_MAX:
            raise BackendNotSupported(
                f"KLU here takes 32-bit indices: n={n}, nnz={pattern.nnz} is too large; use "
                f"sv.LU() (SuperLU) or sv.Pardiso()")
        if n and pattern.nnz == 0:       # klu_analyze: KLU_INVALID
            raise SingularMatrixError(f"KLU: A ({n}×{n}) stores no entries: it is singular")
        ptr = np.ascontiguousarray(pattern.indptr, dtype=np.int32)
        ind = np.ascontiguousarray(pattern.indices, dtype=np.int32)
        self.pattern = pattern
        self.id = mod.analyze(n, ptr, ind, _ORDERINGS[ordering])
        self._finalizer = weakref.finalize(self, mod.free_symbolic, self.id)

    def info(self) -> dict:
        """n, nnz, nblocks (BTF blocks), maxblock, structural_rank."""
        return native().symbolic_info(self.id)


PIVOT_TOL = 1.0   # KLU's Common.tol: partial pivoting (see KLUFactor)


def symbolic_of(pattern: lo.Pattern, ordering: str = "amd") -> tuple["_Symbolic", bool]:
    """(KLU's symbolic analysis of ``pattern``, whether it was reused): the one every
    ``KLUFactor`` of the pattern shares (kept in ``sv.analyses``); ``adjoints.jax`` factorizes
    on it inside compiled loops (its FFI factorize)."""
    return analyses.obtain(("klu", pattern, ordering), lambda: _Symbolic(pattern, ordering),
                           lambda _: 16 * (pattern.shape[0] + pattern.nnz))


class KLUFactor(Factor):
    """One KLU numeric factorization on a (shared) symbolic analysis. ``handle``: the native
    factor's id in ``solvers._native``'s table (what ``adjoints.jax`` aliases its keys to);
    freed when this object is collected (or by :meth:`close`)."""

    kind = "KLU"

    def __init__(self, A: lo.Sparse, be, pivot_rtol, ordering: str, symbolic=None):
        mod = native()
        self.be, self.pivot_rtol, self.ordering = be, pivot_rtol, ordering
        self.out_dtype = precision(A.dtype)
        self.dtype = np.result_type(self.out_dtype, np.float64)   # KLU: double precision
        if symbolic is None:
            # KLU's analysis (BTF + the fill-reducing ordering) is the pattern's alone: kept
            # across caches (solvers._analyses)
            symbolic, self.reused_analysis = symbolic_of(A.pattern, ordering)
            self.symbolic_analyses = int(not self.reused_analysis)
        self.symbolic = symbolic
        values = np.ascontiguousarray(to_numpy(A.values), dtype=self.dtype)
        # partial pivoting (KLU's tol = 1): KLU's default threshold (0.001, a diagonal pivot
        # kept down to 1e-3 of its column's largest entry) grew the factors of a matrix that
        # needs pivoting to a backward error of 1e-14..4e-13 where partial pivoting gives 2e-16
        # (the long oracle profile's counterexample, n = 25, cond 38); a diagonally dominant
        # matrix (a PDE's) pivots on its diagonal either way
        self._numeric(mod, values, A.shape[0], tol=PIVOT_TOL)
        pivot_check(self.pivots(), self.out_dtype, pivot_rtol, "KLU")

    def _numeric(self, mod, values, n: int, tol: float) -> None:
        """klu_factor on the kept analysis (``tol``: KLU's pivoting tolerance); a zero pivot
        raises SingularMatrixError."""
        handle, status, rank, col = mod.factor(self.symbolic.id, values, tol)
        if handle == 0:
            if status == 1:   # KLU_SINGULAR: an exactly zero pivot
                raise SingularMatrixError(
                    f"KLU: the matrix is singular: column {col} has a zero pivot (numerical "
                    f"rank {rank} of {n}). Check boundary conditions (a pure-Neumann "
                    f"problem needs one fixed dof) or regularise")
            raise SingularMatrixError(f"KLU: klu_factor failed (KLU status {status})")
        self.handle = handle
        self._finalizer = weakref.finalize(self, mod.free_factor, handle)

    def native_handle(self) -> int:
        """KLU factors live in the native table: their own handle."""
        return self.handle

    def pivots(self) -> np.ndarray:
        """The n pivots R[k]·U[k, k] (before KLU's row scaling), in factor order."""
        out = np.empty(self.symbolic.pattern.shape[0], self.dtype)
        native().pivots(self.handle, out)
        return out

    def solve(self, B, trans: str):
        Bh = cast_rhs(self.be.to_host(B), self.dtype)
        X = split_complex(lambda R: self._solve(R, trans), Bh, self.dtype)
        return self.be.from_host(cast_rhs(X, self.out_dtype))

    def _solve(self, R, trans: str) -> np.ndarray:
        X = np.array(R, dtype=self.dtype, order="F", copy=True)
        native().solve(self.handle, X, _TRANS[trans])
        return X

    def _spawn(self, A):
        return KLUFactor(A, self.be, self.pivot_rtol, self.ordering, symbolic=self.symbolic)

    def logdet(self) -> LogDet:
        """log det A = log(Π Rᵢ) + log|Π Uₖₖ| and the sign of both permutations, O(n)."""
        re, im, logabs = native().logdet(self.handle)
        if not np.isfinite(logabs):
            raise SingularMatrixError(
                "logdet: a pivot of the KLU factorization is 0: A is singular, log det A = −inf "
                "and its gradient A⁻ᴴ does not exist (the cache was built with pivot_rtol=0). "
                "Regularise A, or fix its boundary conditions")
        sign = complex(re, im) if self.dtype.kind == "c" else float(re)
        return LogDet(sign, float(logabs))

    def info(self) -> dict:
        """The factorization's sizes: n, lnz, unz (entries of L and U), nblocks, complex."""
        return native().factor_info(self.handle)

    def close(self) -> None:
        """Free the native factor now (idempotent; the cache cannot solve afterwards)."""
        self._finalizer()


@register("klu", "SuiteSparse KLU: BTF + AMD ordering, sparse LU with row scaling (compiled "
          "in; adjoints.jax solves with it inside XLA)", ("sparse",), direct=True,
          backends=("numpy", "jax"), queries=("logdet",),
          adjoint="the same factors (klu_tsolve, conj_solve)", jax=True, requires=_unavailable)
@dataclass(frozen=True)
class KLU(Algorithm):
    """Sparse LU by SuiteSparse KLU; one factorization serves A, Aᵀ and Aᴴ solves.

    KLU permutes A to block upper triangular form, orders each diagonal block (AMD by default)
    and factorizes the blocks with threshold partial pivoting after scaling each row by its
    largest entry. ``update`` with the same pattern keeps the symbolic analysis (a new numeric
    factorization, pivoting redone); adjoint and transpose solves use the same factors
    (``klu_tsolve``). Under ``adjoints.jax`` its solves run as XLA FFI calls, without a Python
    callback per solve (see docs/jax-native.md).

    Cost: fill-dependent factorization; O(nnz(L + U)) per solve; dtypes float32, float64,
    complex64, complex128 (single precision factorizes in double). numpy arrays and jax arrays
    (through the host); indices up to 2³¹ − 1.

    Parameters
    ----------
    pivot_rtol : float, optional
        Singular when min|pivot| <= pivot_rtol·max|pivot| for KLU's pivots before its row
        scaling (an exactly zero pivot always is). Default 1e3·eps in double precision
        (≈2.2e-13), 1e2·eps in single; 0 disables the check.
    ordering : {"amd", "colamd"}
        The fill-reducing ordering of each BTF block (AMD on A + Aᵀ, or COLAMD on A).

    Raises
    ------
    ValueError
        ``pivot_rtol`` negative or not finite, or an unknown ``ordering`` (at construction).
    SingularMatrixError
        At ``init``/``update``: an exactly zero pivot (the message names the column), or a
        pivot below the threshold.
    BackendNotSupported
        The extension is not built (the message names the install), or A is not sparse.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> S = sp.csr_array(np.array([[0.0, 2.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 4.0]]))
    >>> alg = sv.KLU() if sv.native_available() else sv.LU()
    >>> cache = sv.init(sv.LinearProblem(S), alg)           # a zero diagonal: KLU pivots
    >>> cache.solve(np.array([2.0, 2.0, 4.0])).round(6).tolist()
    [1.0, 1.0, 1.0]
    >>> cache.solve_adjoint(np.array([1.0, 1.0, 1.0])).round(6).tolist()     # Aᴴλ = c, same factors
    [0.0, 1.0, 0.25]
    >>> _ = cache.update(A=2 * S)                            # same pattern: analysis kept
    >>> cache.stats.factorizations, cache.stats.numeric_refactorizations
    (1, 1)
    >>> round(float(np.exp(cache.logdet().logabsdet)), 6)     # |det(2A)| = 8·|−8|
    64.0
    """

    pivot_rtol: float | None = None
    ordering: str = "amd"

    def __post_init__(self):
        check_rtol(self.pivot_rtol, "pivot_rtol")
        if self.ordering not in _ORDERINGS:
            raise ValueError(f"ordering must be one of {sorted(_ORDERINGS)}, got "
                             f"ordering={self.ordering!r}")

    def _setup(self, A: lo.LinearOperator, prob) -> Factor:
        return KLUFactor(A, backend_of_problem(A), self.pivot_rtol, self.ordering)
