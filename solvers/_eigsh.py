"""``sv.eigsh``: a few eigenpairs of a Hermitian operator or pencil, by shift-invert on ONE
factorization.

Standard (``M=None``): A v = λ v. Generalized (``M=`` Hermitian positive definite, a mass
matrix): K v = λ M v with M-orthonormal vectors (VᴴMV = I). With a shift σ, ARPACK's Lanczos
runs on (K − σM)⁻¹ applied by a cache's solves: the eigenvalues nearest σ converge first (σ
below the spectrum: the lowest ones, a ground state, the fundamental modes). The cache — made
here with ``alg`` (default: ``sv.Auto`` without PARDISO, so CHOLMOD for a Hermitian K − σM
where it is installed, see :func:`shift_invert_default`) or passed in — is
kept on the result, so the eigenvector cotangents of ``adjoints.eigsh_pullback`` reuse its
factorization (a projected solve, preconditioned by it). Without σ (standard case only),
Lanczos on A itself (``which='SA'``, ``'LA'``, ``'LM'``), no factorization.

One eigenpair more than asked for is computed (when k + 1 < n) and its eigenvalue kept as
``Eigenpairs.beyond``: it tells the pullbacks whether the last eigenvalue returned has an equal
partner that was not (a degenerate cluster cut in two has no gradient).

Results are checked: every returned pair has ‖Kv − λMv‖ ≤ ``residual_tol``·(‖K‖₁ + |λ|‖M‖₁)‖v‖
(estimated), or :class:`ConvergenceError` is raised.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import linops as lo
from linops.internals import ShapeError, csr_parts, dense_array, structure, to_numpy

from ._checks import (backend_of_problem, hermitian_defect, hermitian_tol, is_hermitian,
                      precision)
from ._errors import (BackendNotSupported, ConvergenceError, NotHermitianError,
                      NotPositiveDefiniteError, SingularMatrixError, Status)
from ._problem import LinearProblem
from ._registry import entry
from ._results import Eigenpairs
from ._solve import init

_WHICH = ("LM", "SM", "LA", "SA", "BE")


def eigsh(A, k: int = 1, sigma: float | None = None, *, M=None, which: str = "LM", alg=None,
          cache=None, tol: float = 0.0, maxiter: int | None = None, ncv: int | None = None,
          v0=None, residual_tol: float | None = None) -> Eigenpairs:
    """k eigenpairs of a Hermitian A (or of the pencil K v = λ M v): shift-invert around
    ``sigma`` on one factorization.

    Parameters
    ----------
    A : operator or anything ``lo.aslinop`` accepts
        Hermitian (checked: O(nnz) for sparse, two products for a matrix-free operator): the
        stiffness K of a generalized problem.
    k : int
        1 ≤ k < n.
    sigma : float, optional
        Shift: the k eigenvalues nearest σ (``which='LM'`` of (K − σM)⁻¹). K − σM is factorized
        once (``alg``, default :func:`shift_invert_default`, with ``posdef`` when σ is below
        K − σM's Gershgorin bound) unless ``cache`` holds its factorization already. Needs an
        assembled K (and M): Dense or Sparse. Without σ: Lanczos on A, ``which`` as in scipy (``'SA'``:
        smallest); a generalized problem needs σ.
    M : operator, optional
        The mass matrix of K v = λ M v: Hermitian positive definite (checked: a singular or
        indefinite M raises by name), of A's shape. The vectors come M-orthonormal.
    which : str
        'LM' (default; with σ: nearest σ), 'SM', 'LA', 'SA', 'BE'.
    alg : algorithm, optional
        How to factorize K − σM (default: ``sv.Auto`` without PARDISO, whose solves are the
        slower ones; :func:`shift_invert_default`).
    cache : LinearCache, optional
        A factorization of K − σM to reuse (verified by one product with a random vector).
    tol, maxiter, ncv, v0
        ARPACK's (tol=0: machine precision).
    residual_tol : float, optional
        Accept a pair when ‖Kv − λMv‖ ≤ residual_tol·(‖K‖₁ + |λ|‖M‖₁)‖v‖; default 1e-8 (1e-3
        in single precision).

    Returns
    -------
    Eigenpairs
        ``values`` ascending, ``vectors`` (orthonormal; M-orthonormal with M), ``cache`` (the
        factorization of K − σM), ``beyond`` (the nearest eigenvalue not returned, or None).

    Raises
    ------
    ShapeError
        A not square, M of another shape, or k not in [1, n) (use ``numpy.linalg.eigh`` for
        all eigenpairs).
    NotHermitianError
        A or M is not Hermitian (the message gives the defect).
    NotPositiveDefiniteError, SingularMatrixError
        M is indefinite or singular (the message names the entry or the Rayleigh quotient).
    ConvergenceError
        ARPACK did not converge in ``maxiter``, or a pair misses ``residual_tol``.
    BackendNotSupported
        σ with a matrix-free A (nothing to factorize: give σ=None), or cupy/jax arrays.
    ValueError
        M without σ.

    Notes
    -----
    Cost with σ: one factorization of K − σM plus one solve (and one product with M) per
    Lanczos step (usually 2k to 4k of them for well separated eigenvalues); without σ: one
    product with A per step, many more steps for interior or clustered eigenvalues. An M that
    is not diagonally dominant is checked by a Cholesky factorization of M (about the cost of
    the factorization of K − σM; a short Lanczos run on M's products where there is no
    Cholesky for it). The gradient of λᵢ is vᵢvᵢᴴ with respect to K and −λᵢvᵢvᵢᴴ with respect
    to M (``adjoints.eigsh_pullback``), O(n) memory.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> n = 50
    >>> H = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tocsr()
    >>> e = sv.eigsh(H, 1, sigma=-0.1)                     # the lowest: 2 − 2cos(π/(n+1))
    >>> bool(abs(e.values[0] - (2 - 2 * np.cos(np.pi / (n + 1)))) < 1e-12)
    True
    >>> M = sp.diags(np.full(n, 2.0)).tocsr()              # K v = λ M v: λ halves
    >>> g = sv.eigsh(H, 2, sigma=-0.1, M=M)
    >>> bool(np.allclose(g.values, sv.eigsh(H, 2, sigma=-0.1).values / 2, rtol=1e-12))
    True
    >>> bool(np.allclose(g.vectors.T @ (M @ g.vectors), np.eye(2)))   # M-orthonormal
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
    if M is not None:
        M = lo.aslinop(M)
        if M.shape != A.shape:
            raise ShapeError(f"eigsh: M.shape={M.shape} but A.shape={A.shape}")
        if sigma is None:
            raise ValueError("eigsh with M needs sigma (shift-invert on one factorization of "
                             "K − σM); sigma=0 gives the lowest modes of a constrained "
                             "structure, a σ below the spectrum those of a free one")
        _require_hermitian(M, "M")
        require_mass(M)
    dtype = precision(np.result_type(A.dtype, M.dtype) if M is not None else A.dtype)
    rtol = residual_tol if residual_tol is not None else (
        1e-3 if dtype in (np.float32, np.complex64) else 1e-8)
    # one pair beyond k: the nearest eigenvalue left out (a cluster cut in two is named later)
    extra = 1 if (k + 1 < n and which != "BE") else 0
    Aop = lo.aslinearoperator(A)
    Mop = None if M is None else lo.aslinearoperator(M)
    # ARPACK's complex mode needs k < n − 1 (scipy otherwise calls a dense eig it refuses for
    # operators): so small a problem is solved densely, exactly, with the same selection
    dense = np.dtype(dtype).kind == "c" and k + extra >= n - 1
    try:
        if dense:
            cache = None if sigma is None else _shift_cache(A, float(sigma), alg, cache, M)
            w, V = _dense_pairs(A, M, k + extra, sigma, which)
        elif sigma is None:
            w, V = sla.eigsh(Aop, k + extra, which=which, tol=tol, maxiter=maxiter, ncv=ncv,
                             v0=v0)
            cache = None
        else:
            cache = _shift_cache(A, float(sigma), alg, cache, M)
            op = cache.as_operator()
            OPinv = sla.LinearOperator((n, n), matvec=lambda x: op @ x,
                                       matmat=lambda X: op @ X, dtype=np.dtype(op.dtype))
            w, V = sla.eigsh(Aop, k + extra, M=Mop, sigma=float(sigma), which=which,
                             OPinv=OPinv, tol=tol, maxiter=maxiter, ncv=ncv, v0=v0,
                             mode="normal")
    except sla.ArpackNoConvergence as e:
        raise ConvergenceError(
            f"eigsh: ARPACK did not converge ({len(e.eigenvalues)} of k={k} eigenpairs after "
            f"maxiter={maxiter}); raise maxiter or ncv, or move sigma nearer the eigenvalues "
            f"wanted", [], status=Status.MAX_ITERATIONS) from None
    w, V = np.asarray(w).real, np.asarray(V)
    beyond = None
    if extra:
        drop = _last_by_which(w, sigma, which)
        beyond = float(w[drop])
        keep = np.delete(np.arange(w.size), drop)
        w, V = w[keep], V[:, keep]
    order = np.argsort(w, kind="stable")
    w, V = w[order], V[:, order]
    V = _orthonormal(V, M)
    MV = V if M is None else np.asarray(to_numpy(M @ V))
    R = np.asarray(to_numpy(A @ V)) - MV * w
    res = np.linalg.norm(R, axis=0)
    scale = _norm1_estimate(A)
    if M is not None:
        scale = (scale + np.abs(w) * _norm1_estimate(M)) * np.linalg.norm(V, axis=0)
    bound = rtol * np.maximum(scale, 1e-300)
    if np.any(~np.isfinite(res)) or np.any(res > bound):
        i = int(np.argmax(res / bound))
        what = "‖Av − λv‖" if M is None else "‖Kv − λMv‖"
        raise ConvergenceError(
            f"eigsh: eigenpair {i} (λ = {w[i]:.6g}) has the residual {what} = {res[i]:.3g} > "
            f"{np.broadcast_to(bound, res.shape)[i]:.3g} (residual_tol = {rtol:g} times the "
            f"scale); tighten tol or raise maxiter", list(res), status=Status.STAGNATION)
    V.setflags(write=False)
    w.setflags(write=False)
    return Eigenpairs(w, V, A, None if sigma is None else float(sigma), cache, res, M=M,
                      beyond=beyond)


def buckling(K, KG, k: int = 1, sigma: float = 0.0, **options) -> Eigenpairs:
    """Buckling load factors: the k smallest λ > 0 with (K + λK_G) v = 0.

    K is the (Hermitian positive definite) stiffness, K_G the geometric stiffness of a
    reference load, negative definite for a load that compresses every degree of freedom it
    acts on (a column, a plate in compression). Then K v = λ (−K_G) v is a generalized
    Hermitian problem with the mass role played by −K_G: this is :func:`eigsh` with
    ``M = −K_G`` (checked positive definite, refused by name otherwise), shift-invert around
    ``sigma`` on one factorization of K + σK_G, vectors with vᴴ(−K_G)v = 1.

    Gradients: ``g = adjoints.eigsh_pullback(e, values_bar=...)`` gives ``g.K`` = K̄ and
    ``g.M`` = the cotangent of −K_G, so K̄_G = −g.M (dλ = −vᴴ(dK + λ dK_G)v / vᴴK_Gv).

    Parameters
    ----------
    K, KG : operators of one shape (Sparse or Dense)
    k : int
    sigma : float
        The shift of the load factor (0: the lowest loads first).
    **options
        Passed to :func:`eigsh` (``alg``, ``tol``, ``ncv``, ...).

    Returns
    -------
    Eigenpairs
        ``values`` the load factors ascending; ``M`` is −K_G.

    Raises
    ------
    NotPositiveDefiniteError, SingularMatrixError
        −K_G is not positive definite (tension somewhere, or unloaded dofs): eliminate the
        unloaded dofs, or use ARPACK's buckling mode directly.

    Examples
    --------
    Euler's column, EI v⁗ + P v″ = 0 on [0, 1] with pinned ends: P_cr = π² EI.

    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> n = 200; h = 1.0 / (n + 1)
    >>> D2 = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]) / h
    >>> K = sp.csr_array(D2 @ D2 / h)                       # bending, EI = 1 (pinned: D2²)
    >>> e = sv.buckling(K, -D2.tocsr(), 1)                 # K_G = −P·D2 for the load P = 1
    >>> bool(abs(e.values[0] / np.pi ** 2 - 1) < 1e-4)
    True
    """
    KG = lo.aslinop(KG)
    minus = (lo.Sparse.from_scipy(sp.csr_array(-KG.to_scipy())) if csr_parts(KG) is not None
             else -KG)
    return eigsh(K, k, sigma, M=minus, **options)


def _dense_pairs(A, M, count: int, sigma, which: str):
    """The ``count`` eigenpairs ARPACK's ``which`` (of ν = 1/(λ − σ) with a shift) ranks
    first, from a dense Hermitian (generalized) eigendecomposition: for the n ≤ k + 2 where
    ARPACK's complex mode cannot run. Vectors orthonormal (M-orthonormal), also within a
    repeated eigenvalue. O(n³) on a tiny n."""
    Ad = np.asarray(to_numpy(lo.to_dense(A)), dtype=np.complex128)
    Md = None if M is None else np.asarray(to_numpy(lo.to_dense(M)), dtype=np.complex128)
    w, V = la.eigh((Ad + Ad.conj().T) / 2, None if Md is None else (Md + Md.conj().T) / 2)
    with np.errstate(divide="ignore"):
        key = w if sigma is None else 1.0 / (w - sigma)
    first = {"LM": -np.abs(key), "SM": np.abs(key), "LA": -key, "SA": key}
    if which == "BE":   # alternately from the high and the low end, as ARPACK's BE
        order = np.argsort(key, kind="stable")
        idx = [order[-1 - i // 2] if i % 2 == 0 else order[i // 2] for i in range(count)]
    else:
        idx = np.argsort(first[which], kind="stable")[:count]
    return w[idx], V[:, idx]


def _last_by_which(w, sigma, which: str) -> int:
    """The index of the pair ARPACK's ``which`` ranks last (the one beyond the k wanted): in
    the shift-invert mode the order is of ν = 1/(λ − σ)."""
    key = w if sigma is None else 1.0 / (w - sigma)
    if which == "LM":
        return int(np.argmin(np.abs(key)))
    if which == "SM":
        return int(np.argmax(np.abs(key)))
    if which == "LA":
        return int(np.argmin(key))
    return int(np.argmax(key))  # SA


def _orthonormal(V, M):
    """V with VᴴV = I (VᴴMV = I with M). ARPACK's vectors are so to rounding for distinct
    eigenvalues; within a cluster its complex (Arnoldi) mode returns a basis that is not
    orthogonal (|vᵢᴴvⱼ| = 0.35 seen). Repaired by the k×k Cholesky of VᴴMV where it drifted: the
    same span, eigenvectors still. A basis that does not span k dimensions is a ConvergenceError.
    """
    MV = V if M is None else np.asarray(to_numpy(M @ V))
    G = V.conj().T @ MV
    G = (G + G.conj().T) / 2
    if np.abs(G - np.eye(G.shape[0])).max() <= 1e-10:
        return V
    low = float(np.linalg.eigvalsh(G)[0])
    if low <= 1e-8:
        raise ConvergenceError(f"eigsh: ARPACK's eigenvectors do not span k={G.shape[0]} "
                               f"dimensions (the smallest eigenvalue of their Gram matrix is "
                               f"{low:.3g}); raise ncv or change v0", [],
                               status=Status.BREAKDOWN)
    L = np.linalg.cholesky(G)
    return np.linalg.solve(L.conj(), V.T).T  # V L⁻ᴴ


def _require_hermitian(A: lo.LinearOperator, name: str = "A") -> None:
    if structure(A) == "diagonal":
        d = np.asarray(to_numpy(lo.diagonal(A)))
        if np.iscomplexobj(d) and np.any(np.abs(d.imag) > hermitian_tol(d.dtype) * np.maximum(
                np.abs(d), 1e-300)):
            i = int(np.argmax(np.abs(d.imag)))
            raise NotHermitianError(f"eigsh needs a Hermitian {name}, but the diagonal entry "
                                    f"{i} is {d[i]:.6g} (not real)")
        return
    if structure(A) in ("sparse", "dense"):
        if not is_hermitian(A):
            d, s, pos = hermitian_defect(A)
            raise NotHermitianError(f"eigsh needs a Hermitian {name}, but max|{name} − "
                                    f"{name}ᴴ| = {d:.3g} at {pos} (max|{name}| = {s:.3g}); for a "
                                    f"general {name} use scipy.sparse.linalg.eigs")
        return
    rng = np.random.default_rng(0)
    n = A.shape[0]
    x = rng.standard_normal(n).astype(A.dtype)
    y = rng.standard_normal(n).astype(A.dtype)
    ax, ay = to_numpy(A @ x), to_numpy(A @ y)
    lhs, rhs = np.vdot(y, ax), np.vdot(ay, x)
    if abs(lhs - rhs) > 100 * hermitian_tol(A.dtype) * max(
            np.linalg.norm(ax) * np.linalg.norm(y), 1e-300):
        raise NotHermitianError(f"eigsh needs a Hermitian {name}, but ⟨y, {name}x⟩ = {lhs:.6g} "
                                f"and ⟨{name}y, x⟩ = {rhs:.6g} differ for random x, y")


def require_mass(M: lo.LinearOperator) -> None:
    """Refuse, by name, an M that is not Hermitian positive definite (the caller checked it
    Hermitian).

    In this order: a diagonal entry ≤ 0 (an O(n) proof, naming the entry); strict Gershgorin
    dominance (an O(nnz) proof of definiteness: accepted); else a Cholesky factorization of M
    where the backend has one for it (CHOLMOD for a sparse M, LAPACK for a dense one: a proof
    either way, pivots below 100·eps of the largest counting as singular). When it fails, or
    where there is no Cholesky (a matrix-free M, no scikit-sparse), the smallest Rayleigh
    quotient of a short Lanczos run on M's products names what is wrong (a quotient at the
    rounding level of ‖M‖: singular; below it: indefinite).

    The Cholesky costs about one factorization of K − σM (0.8 s of CPU at n = 10⁵ on the 2-D
    plate); the Lanczos run it replaces took 16 s there, because the smallest eigenvalue of a
    mass matrix sits in a dense part of its spectrum.
    """
    n = M.shape[0]
    if n == 0:
        return
    d, off = _gershgorin(M)
    big = float(np.max(np.abs(d) + off)) if d is not None else None
    if d is not None:
        i = int(np.argmin(d))
        if d[i] <= 0 or (big and d[i] <= 1e-14 * big):
            cls = NotPositiveDefiniteError if d[i] < 0 else SingularMatrixError
            raise cls(f"eigsh: M must be Hermitian positive definite (the mass matrix of "
                      f"K v = λ M v), but M[{i}, {i}] = {d[i]:.6g}: M is "
                      f"{'indefinite' if d[i] < 0 else 'singular'} (a massless or "
                      f"constrained degree of freedom? eliminate it from K and M)")
        if np.all(d - off > 0):
            return
    failed = _cholesky_of_mass(M)
    if failed is None:
        return
    scale = big if big is not None else _norm1_estimate(M)
    floor = 1e2 * np.finfo(np.float64).eps * scale   # a quotient at rounding level: singular
    theta = _lowest_rayleigh_quotient(M)
    if theta is not None and theta > floor and failed is _NO_CHOLESKY:
        return
    if theta is not None and theta <= floor:
        cls = NotPositiveDefiniteError if theta < -floor else SingularMatrixError
        raise cls(f"eigsh: M must be Hermitian positive definite (the mass matrix of "
                  f"K v = λ M v), but a Rayleigh quotient xᴴMx/xᴴx = {theta:.6g} ≤ "
                  f"{floor:.3g} (the rounding level of ‖M‖ = {scale:.3g}): M is "
                  f"{'indefinite' if cls is NotPositiveDefiniteError else 'singular'}")
    if failed is _NO_CHOLESKY:       # no proof either way: the Lanczos run did not settle
        raise ConvergenceError(
            "eigsh: could not decide whether M is positive definite (no Cholesky "
            "factorization for it here, and a Lanczos run on its products did not converge); "
            "pass an assembled M (pip install \"linops[cholmod]\" for a sparse one)", [],
            status=Status.MAX_ITERATIONS)
    raise type(failed)(f"eigsh: M must be Hermitian positive definite (the mass matrix of "
                       f"K v = λ M v), but its Cholesky factorization failed: {failed}")


_NO_CHOLESKY = object()   # _cholesky_of_mass: this backend cannot factorize M by Cholesky


def _cholesky_of_mass(M):
    """None when M has a Cholesky factorization (then it is positive definite), the
    SingularMatrixError (or NotPositiveDefiniteError) when it has none, ``_NO_CHOLESKY``
    when there is no Cholesky for M here (matrix-free, or a sparse M without CHOLMOD)."""
    kind = structure(M)
    if kind not in ("sparse", "dense"):
        return _NO_CHOLESKY
    cap = "sparse_cholesky" if kind == "sparse" else "dense_cholesky"
    if backend_of_problem(M).capability(cap, M.dtype) is not None:
        return _NO_CHOLESKY
    alg = entry("cholesky").cls(pivot_rtol=1e2 * float(np.finfo(np.float64).eps),
                                check_hermitian=False)   # the caller checked it
    try:
        cache = init(LinearProblem(M, hermitian=True, posdef=True), alg)
    except SingularMatrixError as e:       # NotPositiveDefiniteError included
        return e
    cache.close()
    return None


def _lowest_rayleigh_quotient(M) -> float | None:
    """The smallest Ritz value of a short Lanczos run on M's products (an upper bound on its
    smallest eigenvalue), or None when the run does not converge."""
    try:
        return float(sla.eigsh(lo.aslinearoperator(M), 1, which="SA", tol=1e-6, maxiter=60,
                               return_eigenvectors=False)[0])
    except sla.ArpackNoConvergence:
        return None


def _gershgorin(M):
    """(real diagonal, off-diagonal absolute row sums) of an assembled M, or (None, None)."""
    if structure(M) == "diagonal":
        d = np.real(np.asarray(to_numpy(lo.diagonal(M))))
        return d, np.zeros_like(d)
    if structure(M) == "sparse":
        S = M.to_scipy()
        d = np.real(S.diagonal())
        return d, np.asarray(abs(S).sum(axis=1)).ravel() - np.abs(S.diagonal())
    if structure(M) == "dense":
        a = np.asarray(to_numpy(dense_array(M)))
        d = np.real(np.diag(a))
        return d, np.abs(a).sum(axis=1) - np.abs(np.diag(a))
    return None, None


def _norm1_estimate(A) -> float:
    if structure(A) == "sparse":
        return float(abs(A.to_scipy()).sum(axis=0).max())
    if structure(A) == "dense":
        return float(np.abs(to_numpy(dense_array(A))).sum(axis=0).max())
    if structure(A) == "diagonal":
        return float(np.abs(to_numpy(lo.diagonal(A))).max())
    x = np.random.default_rng(1).standard_normal(A.shape[0])
    return float(np.linalg.norm(to_numpy(A @ x)) / np.linalg.norm(x)) * np.sqrt(A.shape[0])


def shifted(A: lo.LinearOperator, sigma: float, M: lo.LinearOperator | None = None
            ) -> lo.LinearOperator:
    """K − σM (A − σI without M) assembled (Sparse or Dense), the matrix shift-invert
    factorizes."""
    if M is not None and structure(M) not in ("sparse", "dense", "diagonal"):
        raise BackendNotSupported(f"eigsh: shift-invert needs an assembled M (Dense, Sparse or "
                                  f"Diagonal), got {type(M).__name__}")
    if csr_parts(A) is not None:
        S = A.to_scipy()
        B = (sp.eye_array(S.shape[0], dtype=S.dtype) if M is None
             else sp.csr_array(_as_scipy(M)))
        return lo.Sparse.from_scipy(sp.csr_array(S - sigma * B))
    if dense_array(A) is not None:
        a = np.asarray(to_numpy(dense_array(A)))
        b = np.eye(a.shape[0], dtype=a.dtype) if M is None else np.asarray(
            lo.to_dense(M, allow_dense=True))
        return lo.Dense(a - sigma * b)
    raise BackendNotSupported(f"eigsh: shift-invert needs an assembled A (Dense or Sparse), got "
                              f"{type(A).__name__}; pass sigma=None (Lanczos on A's products)")


def _as_scipy(M):
    if csr_parts(M) is not None:
        return M.to_scipy()
    if structure(M) == "diagonal":
        return sp.diags(np.asarray(to_numpy(lo.diagonal(M))))
    return sp.csr_array(np.asarray(lo.to_dense(M, allow_dense=True)))


def _shift_cache(A, sigma, alg, cache, M=None):
    if cache is not None:
        n = A.shape[0]
        x = np.random.default_rng(2).standard_normal(n)
        mx = x if M is None else np.asarray(to_numpy(M @ x))
        want = np.asarray(to_numpy(A @ x)) - sigma * mx
        got = np.asarray(to_numpy(cache.A @ x))
        if np.linalg.norm(want - got) > 1e-10 * max(np.linalg.norm(want), 1e-300):
            what = "A − σI" if M is None else "K − σM"
            raise ValueError(f"eigsh: the cache passed does not hold {what} for sigma={sigma} "
                             f"(one random product differs by {np.linalg.norm(want - got):.3g})")
        return cache
    S = shifted(A, sigma, M)
    posdef = _below_spectrum(S)
    return init(LinearProblem(S, hermitian=True, posdef=posdef),
                shift_invert_default() if alg is None else alg)


def shift_invert_default():
    """``sv.Auto`` for the matrix shift-invert factorizes: Auto's rules, except PARDISO.

    Shift-invert makes one factorization and then one solve per Lanczos step (tens of them),
    so the cost per solve decides, not the factorization alone that Auto's PARDISO threshold
    was measured on. On the 2-D plate of ``lo.testing.membrane_families`` at n = 99 856 one
    solve took 29 ms of CPU time with CHOLMOD, 30 ms with SuperLU and 45 ms with PARDISO (one
    thread; 115 ms with MKL's threads on a loaded machine), the factorization 0.8 s, 1.3 s and
    1.7 s: CHOLMOD for a Hermitian K − σM (LU when it is indefinite), SuperLU otherwise. Pass
    ``alg=sv.Pardiso()`` to have PARDISO all the same.
    """
    return entry("auto").cls(pardiso_min=_NEVER)


_NEVER = 2 ** 62   # a size no matrix reaches


def _below_spectrum(S) -> bool:
    """Gershgorin: every disc of K − σM right of 0, so it is positive definite."""
    if structure(S) == "sparse":
        M = S.to_scipy()
        d = np.real(M.diagonal())
        off = np.asarray(abs(M).sum(axis=1)).ravel() - np.abs(d)
        return bool(np.all(d - off > 0))
    a = np.asarray(to_numpy(dense_array(S)))
    d = np.real(np.diag(a))
    return bool(np.all(d - (np.abs(a).sum(axis=1) - np.abs(d)) > 0))
