"""log det A from the factorization a cache already holds: no second factorization.

Every direct engine knows det A up to its permutations: LU (LAPACK, SuperLU) as
det A = sign(Pr)·sign(Pc)·Π Uᵢᵢ, Cholesky (LAPACK, CHOLMOD) as Π Lᵢᵢ² (or Π Dᵢᵢ of LDLᴴ),
PARDISO's Hermitian positive definite types as the product of their pivots, MUMPS (through
PETSc) as the determinant it computes while it factorizes (ICNTL(33)). The logarithms are
summed in double precision, so single-precision factors lose nothing more in the sum.

Singular matrices: one rule on every engine. A cache never holds the factors of a matrix that
its singularity check refused (``SingularMatrixError`` at ``init``); a cache built with
``pivot_rtol=0`` that still holds an exactly zero pivot raises ``SingularMatrixError`` here
too — never numpy's (0, −inf), which would feed a gradient A⁻ᴴ that does not exist.

Iterative caches (CG, GMRES, AMG, PETSc KSP) have no factors: ``BackendNotSupported`` naming a
direct solver, or :func:`solvers.logdet_estimate` for matrix-free operators.

Each engine's ``Factor.logdet`` (beside the engine, in ``_direct``, ``_pardiso`` and ``_petsc``)
calls the helpers here; the contract's default raises.
"""

from __future__ import annotations

import numpy as np

from linops.internals import to_numpy

from .._errors import BackendNotSupported, SingularMatrixError
from .._results import LogDet
from . import kernels


def permutation_sign(perm) -> int:
    """+1 or −1: the parity of a permutation (n minus the number of its cycles), O(n).

    Examples
    --------
    >>> permutation_sign([0, 1, 2]), permutation_sign([1, 0, 2]), permutation_sign([1, 2, 0])
    (1, -1, 1)
    """
    p = np.asarray(perm, dtype=np.int64)

    return 1 if (p.size - kernels().cycle_count(p)) % 2 == 0 else -1


def from_diagonal(d, extra_sign=1) -> LogDet:
    """sign·Π d as (sign, log|Π d|), summed in double precision; SingularMatrixError on a 0."""
    d = np.asarray(to_numpy(d))
    d = d.astype(np.complex128 if d.dtype.kind == "c" else np.float64)
    a = np.abs(d)
    if a.size and (not np.all(np.isfinite(a)) or a.min() == 0):
        k = int(np.argmin(np.where(np.isfinite(a), a, 0)))
        raise SingularMatrixError(
            f"logdet: pivot {k} of the factorization is {d[k]}: A is singular, log det A = −inf "
            f"and its gradient A⁻ᴴ does not exist (the cache was built with pivot_rtol=0). "
            f"Regularise A, or fix its boundary conditions")
    logabs = float(np.sum(np.log(a)))
    if d.dtype.kind == "c":
        phase = np.sum(np.angle(d))  # a product of unit numbers, without overflow
        sign = complex(np.exp(1j * phase)) * extra_sign
    else:
        sign = float(extra_sign * (-1.0 if np.count_nonzero(d < 0) % 2 else 1.0))
    return LogDet(sign, logabs)


def superlu_logdet(f) -> LogDet:
    """SuperLU: the signs of both permutations (and of the kept column order) times Π Uᵢᵢ
    (scipy exposes U only as a copy: O(nnz(U)) time and memory, no factorization)."""
    if not f.be.host_factors:
        raise BackendNotSupported("logdet of a cupyx SuperLU factor is not wired; factorize on "
                                  "the host (numpy arrays) with sv.LU()")
    lu = f.lu
    # Pr·M·Pc = L·U with L unit lower: det M = sign(perm_r)·sign(perm_c)·Π Uᵢᵢ, and
    # M = A[row_order][:, order] when the factor was reordered (numeric refactorization; the
    # rows only in symmetric mode), so det A = sign(row_order)·sign(order)·det M
    s = permutation_sign(to_numpy(lu.perm_r)) * permutation_sign(to_numpy(lu.perm_c))
    if f.reordered:
        s *= permutation_sign(f.order)
        if getattr(f, "row_order", None) is not None:
            s *= permutation_sign(f.row_order)
    return from_diagonal(lu.U.diagonal(), s)


def pardiso_logdet(f) -> LogDet:
    """PARDISO's Hermitian positive definite types: the sum of the logs of its pivots."""
    h = f.handle
    if h.mtype not in (2, 4):
        raise BackendNotSupported(
            f"logdet: PARDISO's unsymmetric factorization (mtype {h.mtype}) is of a scaled and "
            f"row-matched matrix (iparm(11), iparm(13)) whose scaling MKL does not expose, so its "
            f"pivots do not give det A. Use sv.LU() (SuperLU) for a general A, or "
            f"sv.Pardiso(posdef=True) / sv.Cholesky() for a Hermitian positive definite one")
    if not h.holds(f, f.mnum):
        raise RuntimeError("this PARDISO factor was replaced by a later update; use the cache")
    d = h.pivots(f.dtype, f.mnum)
    if d is None:
        raise BackendNotSupported("logdet: pardiso_getdiag failed on this handle; use "
                                  "sv.Cholesky() (CHOLMOD)")
    return from_diagonal(np.real(d))  # the D of LDLᴴ for mtypes 2 and 4 (checked in the tests)
