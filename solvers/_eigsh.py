"""``sv.eigsh``: a few eigenpairs of a Hermitian operator, by shift-invert on ONE factorization.

With a shift σ, ARPACK's Lanczos runs on (A − σI)⁻¹ applied by a cache's solves: the
eigenvalues nearest σ converge first (σ below the spectrum: the lowest ones, a ground state).
The cache — made here with ``alg`` (``sv.Auto()``: CHOLMOD when A − σI is positive definite) or
passed in — is kept on the result, so the eigenvector cotangents of
``adjoints.eigsh_pullback`` reuse its factorization (a projected solve, preconditioned by it).
Without σ, Lanczos on A itself (``which='SA'``, ``'LA'``, ``'LM'``), no factorization.

Results are checked: every returned pair has ‖Av − λv‖ ≤ ``residual_tol``·‖A‖₁ (estimated),
or :class:`ConvergenceError` is raised.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import linops as lo
from linops.internals import ShapeError, csr_parts, dense_array, structure, to_numpy

from ._checks import hermitian_tol, is_hermitian, precision
from ._errors import BackendNotSupported, ConvergenceError, NotHermitianError, Status
from ._problem import LinearProblem
from ._results import Eigenpairs
from ._solve import init

_WHICH = ("LM", "SM", "LA", "SA", "BE")


def eigsh(A, k: int = 1, sigma: float | None = None, *, which: str = "LM", alg=None,
          cache=None, tol: float = 0.0, maxiter: int | None = None, ncv: int | None = None,
          v0=None, residual_tol: float | None = None) -> Eigenpairs:
    """k eigenpairs of a Hermitian A: shift-invert around ``sigma`` on one factorization.

    Parameters
    ----------
    A : operator or anything ``lo.aslinop`` accepts
        Hermitian (checked: O(nnz) for sparse, two products for a matrix-free operator).
    k : int
        1 ≤ k < n.
    sigma : float, optional
        Shift: the k eigenvalues nearest σ (``which='LM'`` of (A − σI)⁻¹). A − σI is factorized
        once (``alg``, default ``sv.Auto()`` with ``posdef`` when σ is below A's Gershgorin
        bound) unless ``cache`` holds its factorization already. Needs an assembled A (Dense or
        Sparse). Without σ: Lanczos on A, ``which`` as in scipy (``'SA'``: smallest).
    which : str
        'LM' (default; with σ: nearest σ), 'SM', 'LA', 'SA', 'BE'.
    alg : algorithm, optional
        How to factorize A − σI.
    cache : LinearCache, optional
        A factorization of A − σI to reuse (verified by one product with a random vector).
    tol, maxiter, ncv, v0
        ARPACK's (tol=0: machine precision).
    residual_tol : float, optional
        Accept a pair when ‖Av − λv‖ ≤ residual_tol·‖A‖₁; default 1e-8 (1e-3 in single
        precision).

    Returns
    -------
    Eigenpairs

    Raises
    ------
    ShapeError
        A not square, or k not in [1, n) (use ``numpy.linalg.eigh`` for all eigenpairs).
    NotHermitianError
        A is not Hermitian (the message gives the defect).
    ConvergenceError
        ARPACK did not converge in ``maxiter``, or a pair misses ``residual_tol``.
    BackendNotSupported
        σ with a matrix-free A (nothing to factorize: give σ=None), or cupy/jax arrays.

    Notes
    -----
    Cost with σ: one factorization of A − σI plus one solve per Lanczos step (usually 2k to
    4k of them for well separated eigenvalues); without σ: one product with A per step, many
    more steps for interior or clustered eigenvalues. The gradient of λᵢ with respect to A is
    vᵢvᵢᴴ (``adjoints.eigsh_pullback``), O(n) memory.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> n = 50
    >>> H = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tocsr()
    >>> e = sv.eigsh(H, 1, sigma=-0.1)                     # the lowest: 2 − 2cos(π/(n+1))
    >>> bool(abs(e.values[0] - (2 - 2 * np.cos(np.pi / (n + 1)))) < 1e-12)
    True
    >>> sv.eigsh(H, n)
    Traceback (most recent call last):
    ...
    linops._errors.ShapeError: eigsh: k=50 must be in [1, n) = [1, 50) ...
    """
    A = lo.aslinop(A)
    m, n = A.shape
    if m != n:
        raise ShapeError(f"eigsh needs a square operator, got A.shape={A.shape}")
    if not (isinstance(k, (int, np.integer)) and 1 <= k < n):
        raise ShapeError(f"eigsh: k={k} must be in [1, n) = [1, {n}) (ARPACK); for all "
                         f"eigenpairs of a small matrix use numpy.linalg.eigh(lo.to_dense(A))")
    if which not in _WHICH:
        raise ValueError(f"eigsh: which must be one of {_WHICH}, got {which!r}")
    _require_hermitian(A)
    dtype = precision(A.dtype)
    rtol = residual_tol if residual_tol is not None else (
        1e-3 if dtype in (np.float32, np.complex64) else 1e-8)
    Aop = lo.aslinearoperator(A)
    try:
        if sigma is None:
            w, V = sla.eigsh(Aop, k, which=which, tol=tol, maxiter=maxiter, ncv=ncv, v0=v0)
            cache = None
        else:
            cache = _shift_cache(A, float(sigma), alg, cache)
            op = cache.as_operator()
            OPinv = sla.LinearOperator((n, n), matvec=lambda x: op @ x,
                                       matmat=lambda X: op @ X, dtype=np.dtype(op.dtype))
            w, V = sla.eigsh(Aop, k, sigma=float(sigma), which=which, OPinv=OPinv, tol=tol,
                             maxiter=maxiter, ncv=ncv, v0=v0, mode="normal")
    except sla.ArpackNoConvergence as e:
        raise ConvergenceError(
            f"eigsh: ARPACK did not converge ({len(e.eigenvalues)} of k={k} eigenpairs after "
            f"maxiter={maxiter}); raise maxiter or ncv, or move sigma nearer the eigenvalues "
            f"wanted", [], status=Status.MAX_ITERATIONS) from None
    order = np.argsort(w)
    w, V = np.asarray(w)[order].real, np.asarray(V)[:, order]
    R = np.asarray(A @ V) - V * w
    res = np.linalg.norm(R, axis=0)
    scale = _norm1_estimate(A)
    if np.any(~np.isfinite(res)) or np.any(res > rtol * max(scale, 1e-300)):
        i = int(np.argmax(res))
        raise ConvergenceError(
            f"eigsh: eigenpair {i} (λ = {w[i]:.6g}) has the residual ‖Av − λv‖ = {res[i]:.3g} > "
            f"residual_tol·‖A‖₁ = {rtol * scale:.3g}; tighten tol or raise maxiter",
            list(res), status=Status.STAGNATION)
    V.setflags(write=False)
    w.setflags(write=False)
    return Eigenpairs(w, V, A, None if sigma is None else float(sigma), cache, res)


def _require_hermitian(A: lo.LinearOperator) -> None:
    if structure(A) in ("sparse", "dense"):
        if not is_hermitian(A):
            from ._checks import hermitian_defect

            d, s, pos = hermitian_defect(A)
            raise NotHermitianError(f"eigsh needs a Hermitian A, but max|A − Aᴴ| = {d:.3g} at "
                                    f"{pos} (max|A| = {s:.3g}); for a general A use "
                                    f"scipy.sparse.linalg.eigs")
        return
    rng = np.random.default_rng(0)
    n = A.shape[0]
    x = rng.standard_normal(n).astype(A.dtype)
    y = rng.standard_normal(n).astype(A.dtype)
    ax, ay = to_numpy(A @ x), to_numpy(A @ y)
    lhs, rhs = np.vdot(y, ax), np.vdot(ay, x)
    if abs(lhs - rhs) > 100 * hermitian_tol(A.dtype) * max(
            np.linalg.norm(ax) * np.linalg.norm(y), 1e-300):
        raise NotHermitianError(f"eigsh needs a Hermitian A, but ⟨y, Ax⟩ = {lhs:.6g} and "
                                f"⟨Ay, x⟩ = {rhs:.6g} differ for random x, y")


def _norm1_estimate(A) -> float:
    if structure(A) == "sparse":
        return float(abs(A.to_scipy()).sum(axis=0).max())
    if structure(A) == "dense":
        return float(np.abs(to_numpy(dense_array(A))).sum(axis=0).max())
    x = np.random.default_rng(1).standard_normal(A.shape[0])
    return float(np.linalg.norm(to_numpy(A @ x)) / np.linalg.norm(x)) * np.sqrt(A.shape[0])


def shifted(A: lo.LinearOperator, sigma: float) -> lo.LinearOperator:
    """A − σI assembled (Sparse or Dense), the matrix shift-invert factorizes."""
    if csr_parts(A) is not None:
        S = A.to_scipy()
        return lo.Sparse.from_scipy((S - sigma * sp.eye_array(S.shape[0], dtype=S.dtype)).tocsr())
    if dense_array(A) is not None:
        a = np.asarray(to_numpy(dense_array(A)))
        return lo.Dense(a - sigma * np.eye(a.shape[0], dtype=a.dtype))
    raise BackendNotSupported(f"eigsh: shift-invert needs an assembled A (Dense or Sparse), got "
                              f"{type(A).__name__}; pass sigma=None (Lanczos on A's products)")


def _shift_cache(A, sigma, alg, cache):
    if cache is not None:
        n = A.shape[0]
        x = np.random.default_rng(2).standard_normal(n)
        want = np.asarray(to_numpy(A @ x)) - sigma * x
        got = np.asarray(to_numpy(cache.A @ x))
        if np.linalg.norm(want - got) > 1e-10 * max(np.linalg.norm(want), 1e-300):
            raise ValueError(f"eigsh: the cache passed does not hold A − σI for sigma={sigma} "
                             f"(one random product differs by {np.linalg.norm(want - got):.3g})")
        return cache
    S = shifted(A, sigma)
    posdef = _below_spectrum(S)
    return init(LinearProblem(S, hermitian=True, posdef=posdef), alg)


def _below_spectrum(S) -> bool:
    """Gershgorin: every disc of A − σI right of 0, so it is positive definite."""
    if structure(S) == "sparse":
        M = S.to_scipy()
        d = np.real(M.diagonal())
        off = np.asarray(abs(M).sum(axis=1)).ravel() - np.abs(d)
        return bool(np.all(d - off > 0))
    a = np.asarray(to_numpy(dense_array(S)))
    d = np.real(np.diag(a))
    return bool(np.all(d - (np.abs(a).sum(axis=1) - np.abs(d)) > 0))
