"""Pullback of Hermitian eigenpairs from ``solvers.eigsh``: lazy cotangents, for A v = λ v and
for the pencil K v = λ M v (M-orthonormal V).

For simple eigenvalues λᵢ (K − λᵢM) vᵢ = 0, vᵢᴴMvᵢ = 1:

- eigenvalues: dλᵢ = vᵢᴴ (dK − λᵢ dM) vᵢ, so K̄ = Σᵢ λ̄ᵢ vᵢvᵢᴴ and M̄ = −Σᵢ λ̄ᵢλᵢ vᵢvᵢᴴ — a
  ``RankOne``/``LowRank`` each (O(n·k)); ``fam_K.pullback(K̄)`` and ``fam_M.pullback(M̄)`` give
  ∂λ/∂θ in O(nnz);
- eigenvectors: K̄ = Σᵢ wᵢvᵢᴴ and M̄ = −Σᵢ λᵢwᵢvᵢᴴ − ½ Σᵢ (vᵢᴴv̄ᵢ) vᵢvᵢᴴ with
  wᵢ = Σ_{j≠i} vⱼ (vⱼᴴv̄ᵢ)/(λᵢ − λⱼ) (exact, inside the k computed vectors) − zᵢ, where zᵢ
  solves (K − λᵢM) z = Πᴴ v̄ᵢ on the M-complement of V (Π = I − VVᴴM): a projected GMRES
  preconditioned with the eigensolver's own factorization (K − σM)⁻¹ — no new factorization.

Degenerate eigenvalues (a cluster: consecutive eigenvalues within ``gap_tol``·scale) have no
individual derivatives: a cotangent that tells the members of a cluster apart (λ̄ not constant
on it, or any V̄ on it) raises :class:`DegenerateEigenvalueError` naming the eigenvalues. With
``degenerate='invariant'`` the caller states that f is invariant on each cluster's subspace
(it depends on it only through the cluster's sum or its projector): that is checked (λ̄
constant, V_CᴴV̄_C Hermitian), and the well-defined gradient is returned. A cluster cut in two
by k (the next eigenvalue, ``eig.beyond``, equal to the last one returned) is refused whatever
the mode: ask for more eigenpairs. f must not depend on the phase (sign) of vᵢ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse.linalg as sla

import linops as lo
from linops.internals import ShapeError, seal, to_numpy
from solvers import ConvergenceError, Status

_MODES = ("raise", "invariant")


class DegenerateEigenvalueError(ValueError):
    """A cotangent asks for the derivative of one member of a cluster of (numerically) equal
    eigenvalues, which does not exist; or the cluster continues beyond the eigenpairs computed.

    Attributes
    ----------
    indices : tuple of int
        The positions (in ``eig.values``) of the cluster's members.
    values : tuple of float

    Examples
    --------
    >>> import numpy as np, solvers as sv, adjoints as ad
    >>> e = sv.eigsh(np.diag([1.0, 1.0, 2.0, 3.0, 4.0]), 2, sigma=0.0)
    >>> ad.eigsh_pullback(e, values_bar=np.array([1.0, 0.0]))
    Traceback (most recent call last):
    ...
    adjoints._eigsh.DegenerateEigenvalueError: eigsh_pullback: eigenvalues 0 and 1 coincide ...
    >>> ad.eigsh_pullback(e, values_bar=np.array([1.0, 1.0])).shape   # their sum: defined
    (5, 5)
    """

    def __init__(self, message: str, indices=(), values=()):
        super().__init__(message)
        self.indices = tuple(int(i) for i in indices)
        self.values = tuple(float(v) for v in values)


@dataclass(frozen=True)
class EigshCotangent:
    """Cotangents of the eigenpairs of K v = λ M v with respect to K and to M, both lazy.

    Attributes
    ----------
    K : lo.RankOne, lo.LowRank or lo.Zero
        K̄ = Σᵢ (λ̄ᵢvᵢ + wᵢ) vᵢᴴ.
    M : lo.RankOne, lo.LowRank or lo.Zero
        M̄ = −Σᵢ λᵢ(λ̄ᵢvᵢ + wᵢ) vᵢᴴ − ½ Σ_C V_C (V_CᴴV̄_C) V_Cᴴ.

    Examples
    --------
    >>> import numpy as np, solvers as sv, adjoints as ad
    >>> import linops as lo
    >>> K, M = np.diag([2.0, 6.0, 12.0]), np.diag([1.0, 2.0, 4.0])     # λ = 2, 3, 3
    >>> g = ad.eigsh_pullback(sv.eigsh(K, 1, sigma=0.0, M=M), values_bar=np.ones(1))
    >>> [(np.diag(lo.to_dense(G)).round(12) + 0.0).tolist() for G in (g.K, g.M)]
    [[1.0, 0.0, 0.0], [-2.0, 0.0, 0.0]]
    """

    K: lo.LinearOperator
    M: lo.LinearOperator


def eigsh_pullback(eig, values_bar=None, vectors_bar=None, *, degenerate: str = "raise",
                   gap_tol: float = 1e-8, rtol: float = 1e-12, maxiter: int = 200):
    """Cotangents of ``eig = sv.eigsh(K, k, ..., M=None)``: lazy, O(n·k).

    Parameters
    ----------
    eig : solvers.Eigenpairs
    values_bar : array (k,), optional
        λ̄ = ∂f/∂λ (real).
    vectors_bar : array (n, k), optional
        V̄ = ∂f/∂V (for complex V: df = Re Σ conj(V̄) dV); needs ``eig.cache`` (a shift).
    degenerate : {'raise', 'invariant'}
        'raise' (default): a cotangent that tells the members of a cluster of equal eigenvalues
        apart raises :class:`DegenerateEigenvalueError`. 'invariant': f is invariant on each
        cluster's subspace (checked): the gradient of that function.
    gap_tol : float
        Eigenvalues closer than ``gap_tol``·max(|λ|, |σ|) are one cluster (their vectors are
        not determined to better than eps/gap_tol).
    rtol, maxiter
        Of the projected GMRES solves (relative true residual).

    Returns
    -------
    lo.RankOne, lo.LowRank or lo.Zero
        Without M: Ā = Σᵢ (λ̄ᵢvᵢ + wᵢ) vᵢᴴ.
    EigshCotangent
        With M (``eig.M`` set): ``.K`` and ``.M``, both lazy.

    Raises
    ------
    ShapeError
        Cotangents of the wrong shape.
    DegenerateEigenvalueError
        A cotangent on a cluster that is not invariant on it (see ``degenerate``), or on a
        cluster that continues beyond the k eigenpairs computed (a ValueError).
    ValueError
        Eigenvector cotangents without a cache (``sigma=None``); an unknown ``degenerate``.
    ConvergenceError
        A projected solve missed ``rtol``.

    Notes
    -----
    Cost: eigenvalues only, nothing (the cotangent holds V); eigenvectors, one preconditioned
    GMRES run per column with nonzero V̄ (each step one solve with the eigensolver's factors
    and one product with K and M). No factorization either way.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo, solvers as sv, adjoints as ad
    >>> fam = lo.AffineSparse.from_terms([sp.diags([1.0, 0, 0]), sp.diags([0, 1.0, 0]),
    ...                                   sp.diags([0, 0, 1.0])],
    ...                                  offset=sp.diags([-np.ones(2), -np.ones(2)], [-1, 1]))
    >>> e = sv.eigsh(fam(np.array([0.0, 1.0, 2.0])), 1, sigma=-3.0)
    >>> g = ad.eigsh_pullback(e, values_bar=np.ones(1))          # ∂λ₀/∂A = v vᴴ
    >>> bool(np.allclose(fam.pullback(g), e.vectors[:, 0] ** 2))  # ∂λ₀/∂θᵢ = vᵢ²
    True
    """
    if degenerate not in _MODES:
        raise ValueError(f"degenerate must be one of {_MODES}, got {degenerate!r}")
    V = np.asarray(eig.vectors)
    w = np.asarray(eig.values)
    n, k = V.shape
    M = getattr(eig, "M", None)
    lb = None
    if values_bar is not None:
        lb = np.real(np.asarray(values_bar))
        if lb.shape != (k,):
            raise ShapeError(f"values_bar.shape={np.shape(values_bar)} but {k} eigenvalues")
    Vb = None
    if vectors_bar is not None:
        Vb = np.asarray(vectors_bar)
        if Vb.shape != (n, k):
            raise ShapeError(f"vectors_bar.shape={Vb.shape} but vectors.shape={(n, k)}")
    if lb is None and Vb is None:
        return lo.Zero((n, n)) if M is None else EigshCotangent(lo.Zero((n, n)), lo.Zero((n, n)))
    groups = clusters(w, eig.beyond, eig.sigma, gap_tol)
    check_cotangents(groups, w, V, lb, Vb, degenerate, eig.beyond, k, "eigsh_pullback",
                     gap_tol, eig.sigma)
    if Vb is None:   # eigenvalues only: the pairs with λ̄ᵢ ≠ 0, nothing of size n·k
        act = np.flatnonzero(lb != 0)
        Va = V[:, act]
        U = Va * lb[act]
        GK = _lowrank(U, Va)
        return GK if M is None else EigshCotangent(GK, _lowrank(-(U * w[act]), Va))
    dtype = np.result_type(V.dtype, Vb.dtype)
    U = np.zeros((n, k), dtype=dtype)           # K̄ = U Vᴴ
    H = np.zeros((k, k), dtype=dtype)           # the normalisation part of M̄: −½ V H Vᴴ
    if lb is not None:
        U += V * lb
    U += _vector_cotangents(eig, V, w, Vb, groups, rtol, maxiter)
    for C in groups:
        HC = V[:, C].conj().T @ Vb[:, C]
        H[np.ix_(C, C)] = (HC + HC.conj().T) / 2
    GK = _lowrank(U, V)
    if M is None:
        return GK
    return EigshCotangent(GK, _lowrank(-(U * w) - 0.5 * (V @ H), V))


def clusters(w, beyond, sigma, gap_tol: float) -> list[np.ndarray]:
    """Index arrays of the clusters of the ascending ``w``: runs of consecutive eigenvalues
    within ``gap_tol``·scale, scale = max(|λ|, |beyond|, |σ|)."""
    w = np.asarray(w, dtype=float)
    if w.size == 0:
        return []
    scale = max(float(np.abs(w).max()), abs(beyond or 0.0), abs(sigma or 0.0), 1e-300)
    cuts = np.flatnonzero(np.diff(w) > gap_tol * scale) + 1
    return [np.asarray(c) for c in np.split(np.arange(w.size), cuts)]


def check_cotangents(groups, w, V, lb, Vb, degenerate, beyond, k, who, gap_tol,
                     sigma) -> None:
    """Raise :class:`DegenerateEigenvalueError` for a cotangent that has no gradient: on a
    cluster cut in two by k, or telling a cluster's members apart (unless invariant on it)."""
    scale = max(float(np.abs(w).max()) if w.size else 0.0, abs(beyond or 0.0),
                abs(sigma or 0.0), 1e-300)
    for C in groups:
        on_values = lb is not None and np.any(lb[C] != 0)
        on_vectors = Vb is not None and np.any(Vb[:, C] != 0)
        if not (on_values or on_vectors):
            continue
        names = ", ".join(str(int(i)) for i in C)
        vals = ", ".join(f"{w[i]:.12g}" for i in C)
        if beyond is not None and np.min(np.abs(w[C] - beyond)) <= gap_tol * scale:
            raise DegenerateEigenvalueError(
                f"{who}: eigenvalue{'s' if len(C) > 1 else ''} {names} ({vals}) equal{'' if len(C) > 1 else 's'} "
                f"the next eigenvalue, {beyond:.12g}, which was not computed: the cluster "
                f"continues beyond the k={k} eigenpairs, so neither its members nor its sum "
                f"have a gradient from these; ask for more eigenpairs (k > {k}) so that the "
                f"whole cluster is inside", C, w[C])
        if len(C) == 1:
            continue
        pair = (f"eigenvalues {int(C[0])} and {int(C[1])}" if len(C) == 2
                else f"eigenvalues {names}")
        varies = on_values and np.ptp(lb[C]) > 1e-12 * max(np.abs(lb[C]).max(), 1e-300)
        if degenerate == "raise" and (varies or on_vectors):
            what = "eigenvector cotangents on them" if on_vectors else \
                f"values_bar differs on them ({', '.join(f'{lb[i]:g}' for i in C)})"
            raise DegenerateEigenvalueError(
                f"{who}: {pair} coincide ({vals}; within gap_tol of each other): {what}, but "
                f"only functions invariant on their common eigenspace (their sum, the "
                f"projector onto it) are differentiable there. Pass degenerate='invariant' "
                f"for such a function, or values_bar equal on the cluster for its sum", C, w[C])
        if varies:
            raise DegenerateEigenvalueError(
                f"{who}: {pair} coincide ({vals}) and degenerate='invariant', but values_bar "
                f"differs on them ({', '.join(f'{lb[i]:g}' for i in C)}): f is not invariant "
                f"on the cluster", C, w[C])
        if on_vectors:
            HC = V[:, C].conj().T @ Vb[:, C]
            skew = np.abs(HC - HC.conj().T).max()
            size = max(float(np.linalg.norm(V[:, C], 2) * np.linalg.norm(Vb[:, C], 2)),
                       1e-300)
            if skew > 1e-8 * size:
                raise DegenerateEigenvalueError(
                    f"{who}: {pair} coincide ({vals}) and degenerate='invariant', but "
                    f"V_Cᴴ V̄_C is not Hermitian (skew part {skew:.3g}): f depends on the basis "
                    f"chosen inside their eigenspace, not on the eigenspace alone", C, w[C])


def _lowrank(U, V):
    """U Vᴴ without the columns U leaves zero (a cotangent on one eigenpair of k is rank one:
    its projection onto a pattern is then one SDDMM column, not k); lo.Zero when U is zero."""
    keep = np.flatnonzero(np.any(U != 0, axis=0))
    if keep.size == 0:
        return lo.Zero((U.shape[0], V.shape[0]))
    if keep.size == 1:
        return lo.RankOne(seal(U[:, keep[0]].copy()), seal(V[:, keep[0]].copy()))
    return lo.LowRank(seal(U[:, keep]), seal(V[:, keep]))


def _vector_cotangents(eig, V, w, Vb, groups, rtol, maxiter):
    """Columns wᵢ with K̄ = Σ wᵢvᵢᴴ from the eigenvector cotangents (the part inside span V:
    exact; outside: the projected solve)."""
    n, k = V.shape
    cols = [i for i in range(k) if np.any(Vb[:, i] != 0)]
    W = np.zeros((n, k), dtype=np.result_type(V.dtype, Vb.dtype))
    if not cols:
        return W
    cache = eig.cache
    if cache is None:
        raise ValueError("eigenvector cotangents need a shift-invert result (sv.eigsh(A, k, "
                         "sigma=...)): its factorization preconditions the projected solves")
    member = np.empty(k, dtype=np.int64)
    for g, C in enumerate(groups):
        member[C] = g
    K, M = eig.A, eig.M
    MV = V if M is None else np.asarray(to_numpy(M @ V))
    op = cache.as_operator()
    for i in cols:
        c = V.conj().T @ Vb[:, i]                     # inside span(V): exact
        others = member != member[i]                  # a cluster's own coupling is gauge
        coef = np.zeros(k, dtype=W.dtype)
        coef[others] = c[others] / (w[i] - w[others])
        y = Vb[:, i] - MV @ c                         # Πᴴ v̄ᵢ
        z = projected_solve(K, M, V, MV, op, w[i], y, rtol, maxiter, i)
        W[:, i] = V @ coef - z
    return W


def projected_solve(K, M, V, MV, op, lam, y, rtol, maxiter, i):
    """z with (K − λM) z = y and Vᴴ M z = 0, for y ⊥ V (y = Πᴴy): GMRES on the left-
    preconditioned Π (K − σM)⁻¹ (K − λM) Π, then up to three refinement steps against the true
    residual."""
    n = V.shape[0]
    ynorm = np.linalg.norm(y)
    if ynorm == 0:
        return np.zeros_like(y)
    dtype = np.result_type(y.dtype, V.dtype, K.dtype, *(() if M is None else (M.dtype,)))

    def proj(x):                                      # Π x = x − V Vᴴ M x
        return x - V @ (MV.conj().T @ x)

    def L(x):
        mx = x if M is None else np.asarray(to_numpy(M @ x))
        return np.asarray(to_numpy(K @ x)) - lam * mx

    def P(r):
        return proj(np.asarray(op @ r))

    T = sla.LinearOperator((n, n), matvec=lambda x: P(L(proj(x))), dtype=dtype)
    z = np.zeros(n, dtype=dtype)
    r = y.astype(dtype)
    res = 1.0
    for _ in range(4):
        dz, _info = sla.gmres(T, P(r), rtol=rtol / 10, atol=0.0, restart=min(n, 60),
                              maxiter=maxiter)
        z = z + proj(dz)
        r = y - L(z)
        res = np.linalg.norm(r) / ynorm
        if res <= 10 * rtol:
            return z
    raise ConvergenceError(
        f"eigsh_pullback: the projected solve for eigenvector {i} stopped at relative residual "
        f"{res:.3g} > rtol={rtol:g}; an eigenvalue just outside the computed ones may be "
        f"nearly equal to λ = {lam:.12g} (ask for more eigenpairs), else raise maxiter or "
        f"loosen rtol", [res], status=Status.MAX_ITERATIONS)
