"""Pullback of Hermitian eigenpairs from ``solvers.eigsh``: lazy cotangents.

For A = Aᴴ with simple eigenvalues λᵢ and eigenvectors vᵢ:

- eigenvalues: dλᵢ = vᵢᴴ dA vᵢ, so Ā = Σᵢ λ̄ᵢ vᵢvᵢᴴ — a ``RankOne``/``LowRank`` (O(n·k)), and
  ``fam.pullback(Ā)`` gives ∂λ/∂θ in O(nnz);
- eigenvectors: dvᵢ = −(A − λᵢ)⁺ (I − vᵢvᵢᴴ) dA vᵢ, so Ā = Σᵢ wᵢvᵢᴴ with
  wᵢ = −(A − λᵢ)⁺ (I − vᵢvᵢᴴ) v̄ᵢ. Within the k computed eigenvectors V this is exact,
  Σ_{j≠i} vⱼ (vⱼᴴv̄ᵢ)/(λᵢ − λⱼ); outside them (Q = I − VVᴴ) it is the projected solve
  Q(A − λᵢ)Q w = −Q v̄ᵢ, by GMRES preconditioned with the eigensolver's own factorization
  (A − σI)⁻¹ — no new factorization.

Limits: the eigenvalues must be distinct (a degenerate pair has no differentiable eigenvectors:
ValueError naming it); f must not depend on the phase (sign) of vᵢ — the part of v̄ᵢ along
vᵢ is dropped, as it would only change the phase. Eigenvector cotangents need a shift-invert
result (``sigma=``), whose cache preconditions the projected solves.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse.linalg as sla

import linops as lo
from linops.internals import ShapeError, seal
from solvers import ConvergenceError, Status


def eigsh_pullback(eig, values_bar=None, vectors_bar=None, *, rtol: float = 1e-12,
                   maxiter: int = 200) -> lo.LinearOperator:
    """Ā for cotangents of ``eig = sv.eigsh(A, k, ...)``: lazy, O(n·k).

    Parameters
    ----------
    eig : solvers.Eigenpairs
    values_bar : array (k,), optional
        λ̄ = ∂f/∂λ (real).
    vectors_bar : array (n, k), optional
        V̄ = ∂f/∂V (for complex V: df = Re Σ conj(V̄) dV); needs ``eig.cache`` (a shift).
    rtol, maxiter
        Of the projected GMRES solves (relative true residual).

    Returns
    -------
    lo.RankOne or lo.LowRank
        Σ λ̄ᵢ vᵢvᵢᴴ + Σ wᵢvᵢᴴ; ``lo.Zero`` when both cotangents are None.

    Raises
    ------
    ShapeError
        Cotangents of the wrong shape.
    ValueError
        Eigenvector cotangents with two (nearly) equal eigenvalues, or without a cache.
    ConvergenceError
        A projected solve missed ``rtol``.

    Notes
    -----
    Cost: eigenvalues only, nothing (the cotangent holds V); eigenvectors, one preconditioned
    GMRES run per column with nonzero V̄ (each step one solve with the eigensolver's factors).
    No factorization either way.

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
    V = np.asarray(eig.vectors)
    w = np.asarray(eig.values)
    n, k = V.shape
    Us, Vs = [], []
    if values_bar is not None:
        lb = np.asarray(values_bar)
        if lb.shape != (k,):
            raise ShapeError(f"values_bar.shape={lb.shape} but {k} eigenvalues")
        Us.append(V * np.real(lb))
        Vs.append(V)
    if vectors_bar is not None:
        Vb = np.asarray(vectors_bar)
        if Vb.shape != (n, k):
            raise ShapeError(f"vectors_bar.shape={Vb.shape} but vectors.shape={(n, k)}")
        W = _vector_cotangents(eig, V, w, Vb, rtol, maxiter)
        Us.append(W)
        Vs.append(V)
    if not Us:
        return lo.Zero((n, n))
    U = np.concatenate(Us, axis=1)
    Vf = np.concatenate(Vs, axis=1)
    if U.shape[1] == 1:
        return lo.RankOne(seal(U[:, 0].copy()), seal(Vf[:, 0].copy()))
    return lo.LowRank(seal(U), seal(Vf))


def _vector_cotangents(eig, V, w, Vb, rtol, maxiter):
    n, k = V.shape
    cache = eig.cache
    cols = [i for i in range(k) if np.any(Vb[:, i] != 0)]
    W = np.zeros((n, k), dtype=np.result_type(V.dtype, Vb.dtype))
    if not cols:
        return W
    if cache is None:
        raise ValueError("eigenvector cotangents need a shift-invert result (sv.eigsh(A, k, "
                         "sigma=...)): its factorization preconditions the projected solves")
    scale = max(np.abs(w).max(), 1.0)
    A = eig.A
    op = cache.as_operator()

    def proj(X):
        return X - V @ (V.conj().T @ X)

    for i in cols:
        gap = np.abs(np.delete(w, i) - w[i])
        if gap.size and gap.min() <= 1e-10 * scale:
            j = int(np.delete(np.arange(k), i)[np.argmin(gap)])
            raise ValueError(f"eigsh_pullback: eigenvalues {i} and {j} are equal to working "
                             f"precision ({w[i]:.12g}, {w[j]:.12g}): their eigenvectors are not "
                             f"differentiable (only their span is)")
        c = V.conj().T @ Vb[:, i]                     # inside span(V): exact
        coef = np.zeros(k, dtype=c.dtype)
        mask = np.arange(k) != i
        coef[mask] = c[mask] / (w[i] - w[mask])
        wi = V @ coef
        rhs = -proj(Vb[:, i])                         # outside: Q(A − λᵢ)Q x = −Q v̄ᵢ
        bnorm = np.linalg.norm(rhs)
        if bnorm > 0:
            lam = w[i]
            M = sla.LinearOperator((n, n), matvec=lambda x: proj(A @ proj(x) - lam * proj(x)),
                                   dtype=W.dtype)
            P = sla.LinearOperator((n, n), matvec=lambda x: proj(op @ proj(x)), dtype=W.dtype)
            x, info = sla.gmres(M, rhs, M=P, rtol=rtol, atol=0.0, restart=min(n, 60),
                                maxiter=maxiter)
            x = proj(x)
            res = np.linalg.norm(M @ x - rhs) / bnorm
            if res > 10 * rtol:
                raise ConvergenceError(
                    f"eigsh_pullback: the projected solve for eigenvector {i} stopped at relative "
                    f"residual {res:.3g} > rtol={rtol:g}; raise maxiter or loosen rtol", [res],
                    status=Status.MAX_ITERATIONS)
            wi = wi + x
        W[:, i] = wi
    return W
