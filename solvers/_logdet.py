"""log det A from the factorization a cache already holds: no second factorization.

Every direct engine knows det A up to its permutations: LU (LAPACK, SuperLU) as
det A = sign(Pr)·sign(Pc)·Π Uᵢᵢ, Cholesky (LAPACK, CHOLMOD) as Π Lᵢᵢ² (or Π Dᵢᵢ of LDLᴴ),
PARDISO's Hermitian positive definite types as the product of their pivots. The logarithms are
summed in double precision, so single-precision factors lose nothing more in the sum.

Singular matrices: one rule on every engine. A cache never holds the factors of a matrix that
its singularity check refused (``SingularMatrixError`` at ``init``); a cache built with
``pivot_rtol=0`` that still holds an exactly zero pivot raises ``SingularMatrixError`` here
too — never numpy's (0, −inf), which would feed a gradient A⁻ᴴ that does not exist.

Iterative caches (CG, GMRES, AMG, PETSc KSP) have no factors: ``BackendNotSupported`` naming a
direct solver, or :func:`solvers.logdet_estimate` for matrix-free operators.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from linops.internals import to_numpy

from ._errors import BackendNotSupported, SingularMatrixError


class LogDet(NamedTuple):
    """(sign, logabsdet) of a determinant, as ``numpy.linalg.slogdet`` returns it.

    det A = sign · exp(logabsdet). ``sign`` is ±1.0 for real A and a complex number of modulus 1
    for complex A; ``logabsdet`` = log|det A| is a float. For a positive definite A,
    ``sign == 1.0`` and ``logabsdet`` is log det A.

    Attributes
    ----------
    sign : float or complex
    logabsdet : float

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> cache = sv.init(sv.LinearProblem(np.array([[0.0, 2.0], [3.0, 1.0]])), sv.LU())
    >>> sign, logabsdet = cache.logdet()                  # det = −6
    >>> float(sign), round(float(np.exp(logabsdet)), 12)
    (-1.0, 6.0)
    """

    sign: float | complex
    logabsdet: float


def permutation_sign(perm) -> int:
    """+1 or −1: the parity of a permutation (n minus the number of its cycles), O(n).

    Examples
    --------
    >>> permutation_sign([0, 1, 2]), permutation_sign([1, 0, 2]), permutation_sign([1, 2, 0])
    (1, -1, 1)
    """
    p = np.asarray(perm, dtype=np.int64)
    from ._selinv_kernels import cycle_count

    return 1 if (p.size - cycle_count(p)) % 2 == 0 else -1


def _from_diagonal(d, extra_sign=1) -> LogDet:
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


def logdet(factor) -> LogDet:
    """(sign, log|det A|) from a cache's factor; what ``LinearCache.logdet`` calls.

    Engines: dense LU (``lu_piv``), dense Cholesky (``L``), SuperLU (``lu``, with ``order``
    when ``reordered``), CHOLMOD (``factor``), PARDISO's Hermitian positive definite types
    (``handle``), the diagonal solve. Cost: O(n) from the pivots, except SuperLU, whose
    diagonal of U is read by copying U (scipy exposes U only as a copy): O(nnz(U)) time and
    memory, no factorization.

    Parameters
    ----------
    factor : a cache's ``factor``

    Returns
    -------
    LogDet

    Raises
    ------
    SingularMatrixError
        A zero pivot (only possible with ``pivot_rtol=0``; see the module notes).
    BackendNotSupported
        An iterative cache (no factors), PARDISO's unsymmetric types (MKL factorizes a scaled
        and matched matrix whose scaling it does not expose), or another engine without a
        determinant; the message names what to use instead.

    Examples
    --------
    >>> import numpy as np, solvers as sv
    >>> A = np.array([[4.0, 1.0], [1.0, 3.0]])
    >>> c = sv.init(sv.LinearProblem(A), sv.Cholesky())
    >>> round(logdet(c.factor).logabsdet, 12) == round(float(np.log(11.0)), 12)
    True
    """
    if hasattr(factor, "lu_piv"):                                   # dense LU (LAPACK getrf)
        lu, piv = factor.lu_piv
        piv = np.asarray(to_numpy(piv))
        swaps = int(np.count_nonzero(piv != np.arange(piv.size)))
        return _from_diagonal(factor.be.xp.diagonal(lu), -1 if swaps % 2 else 1)
    if hasattr(factor, "lu") and hasattr(factor, "order"):           # SuperLU
        return _superlu_logdet(factor)
    if getattr(factor, "kind", "") == "CHOLMOD" and hasattr(factor, "factor"):
        d = np.real(factor.factor.D())  # LDLᴴ's D (squares of LLᴴ's diagonal), O(n)
        return _from_diagonal(d)
    if hasattr(factor, "handle") and hasattr(factor.handle, "mtype"):  # PARDISO
        return _pardiso_logdet(factor)
    if hasattr(factor, "L") and getattr(factor, "kind", "") == "dense Cholesky":
        d = np.abs(np.asarray(to_numpy(factor.be.xp.diagonal(factor.L))))
        return _from_diagonal(d.astype(np.float64) ** 2)
    if getattr(factor, "kind", "") == "diagonal":
        if factor.d is None:
            return LogDet(1.0, 0.0)
        return _from_diagonal(factor.d)
    own = getattr(type(factor), "logdet", None)
    if own is not None and own is not _base_logdet():   # an engine that knows its own
        sign, logabsdet = factor.logdet()
        return LogDet(sign, float(logabsdet))
    kind = getattr(factor, "kind", type(factor).__name__)
    raise BackendNotSupported(
        f"logdet needs a factorization, and this cache holds {kind}: use a direct solver "
        f"(sv.LU(), sv.Cholesky(), sv.Pardiso(posdef=True)), or for an operator that cannot be "
        f"factorized the stochastic estimate sv.logdet_estimate(A) (with its standard error)")


def _superlu_logdet(f) -> LogDet:
    if not getattr(f.be, "host_factors", True):
        raise BackendNotSupported("logdet of a cupyx SuperLU factor is not wired; factorize on "
                                  "the host (numpy arrays) with sv.LU()")
    lu = f.lu
    # Pr·M·Pc = L·U with L unit lower: det M = sign(perm_r)·sign(perm_c)·Π Uᵢᵢ, and M = A[:, order]
    # when the factor was reordered (numeric refactorization), so det A = sign(order)·det M
    s = permutation_sign(to_numpy(lu.perm_r)) * permutation_sign(to_numpy(lu.perm_c))
    if f.reordered:
        s *= permutation_sign(f.order)
    return _from_diagonal(lu.U.diagonal(), s)


def _pardiso_logdet(f) -> LogDet:
    h = f.handle
    if h.mtype not in (2, 4):
        raise BackendNotSupported(
            f"logdet: PARDISO's unsymmetric factorization (mtype {h.mtype}) is of a scaled and "
            f"row-matched matrix (iparm(11), iparm(13)) whose scaling MKL does not expose, so its "
            f"pivots do not give det A. Use sv.LU() (SuperLU) for a general A, or "
            f"sv.Pardiso(posdef=True) / sv.Cholesky() for a Hermitian positive definite one")
    mnum = getattr(f, "mnum", None)
    held = h.holds(f, mnum) if hasattr(h, "holds") else getattr(h, "owner", f) is f
    if not held:
        raise RuntimeError("this PARDISO factor was replaced by a later update; use the cache")
    d = h.pivots(f.dtype, mnum) if mnum is not None else h.pivots(f.dtype)
    if d is None:
        raise BackendNotSupported("logdet: pardiso_getdiag failed on this handle; use "
                                  "sv.Cholesky() (CHOLMOD)")
    return _from_diagonal(np.real(d))  # the D of LDLᴴ for mtypes 2 and 4 (checked in the tests)


def _base_logdet():
    """The contract's default ``Factor.logdet`` (which only raises), or None before it existed."""
    try:
        from ._contract import Factor
    except ImportError:  # pragma: no cover
        return None
    return Factor.logdet
