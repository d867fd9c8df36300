"""Issue 18: sv.eigsh by shift-invert on one factorization, and its lazy pullbacks.

Eigenvalues against numpy.linalg.eigh; ∂λ/∂θ (RankOne vvᴴ through fam.pullback) and the
eigenvector cotangent (projected solve) against central differences of dense eigh, real and
complex Hermitian (a missing conjugate fails the complex case); one factorization; errors named.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv


def _dense(fam, theta):
    return fam(theta).to_scipy().toarray()


@pytest.mark.parametrize("complex_hop", [False, True])
def test_eigenvalues_and_gradient_exact(complex_hop):
    fam, eps = lo.testing.tight_binding(7, complex_hop)
    H = fam(eps)
    e = sv.eigsh(H, 3, sigma=-5.0)
    ref = np.linalg.eigvalsh(_dense(fam, eps))[:3]
    assert np.abs(e.values - ref).max() <= 1e-12 * np.abs(ref).max()
    assert e.cache.stats.factorizations == 1
    # ∂λ₀/∂εᵢ = |v₀ᵢ|², from RankOne(v, v) in O(nnz)
    g = ad.eigsh_pullback(e, values_bar=np.array([1.0, 0.0, 0.0]))
    grad = fam.pullback(g)
    assert np.abs(grad - np.abs(e.vectors[:, 0]) ** 2).max() <= 1e-12
    h = 1e-5
    for i in (0, 11, 30):
        d = np.zeros_like(eps)
        d[i] = h
        fd = (np.linalg.eigvalsh(_dense(fam, eps + d))[0]
              - np.linalg.eigvalsh(_dense(fam, eps - d))[0]) / (2 * h)
        assert abs(grad[i] - fd) <= 1e-8
    assert e.cache.stats.factorizations == 1


@pytest.mark.parametrize("complex_hop", [False, True])
def test_eigenvector_cotangent_against_finite_differences(complex_hop):
    """f = Σⱼ gⱼ |v₁ⱼ|² + λ₀ (phase invariant): V̄ = 2 g v₁; Ā through the projected solve."""
    fam, eps = lo.testing.tight_binding(6, complex_hop, seed=3)
    n = fam.shape[0]
    gw = np.random.default_rng(5).uniform(0, 1, n)

    def f_dense(theta):
        w, V = np.linalg.eigh(_dense(fam, theta))
        return float(gw @ np.abs(V[:, 1]) ** 2 + w[0])

    e = sv.eigsh(fam(eps), 3, sigma=-5.5)
    Vb = np.zeros_like(e.vectors)
    Vb[:, 1] = 2 * gw * e.vectors[:, 1]
    G = ad.eigsh_pullback(e, values_bar=np.array([1.0, 0.0, 0.0]), vectors_bar=Vb)
    grad = fam.pullback(G)
    h = 1e-5
    for i in (0, 7, 20, 35):
        d = np.zeros_like(eps)
        d[i] = h
        fd = (f_dense(eps + d) - f_dense(eps - d)) / (2 * h)
        assert abs(grad[i] - fd) <= 1e-7 * max(1.0, abs(fd)), (i, grad[i], fd)
    assert e.cache.stats.factorizations == 1


def test_eigsh_errors_are_named():
    fam, eps = lo.testing.tight_binding(4)
    H = fam(eps)
    n = H.shape[0]
    with pytest.raises(lo.ShapeError, match="k=16"):
        sv.eigsh(H, n, sigma=0.0)
    with pytest.raises(lo.ShapeError):
        sv.eigsh(H, 0)
    A = sp.random(n, n, density=0.3, random_state=1).tocsr() + sp.eye_array(n)
    with pytest.raises(sv.NotHermitianError):
        sv.eigsh(A, 1, sigma=0.0)
    with pytest.raises(sv.NotHermitianError):
        sv.eigsh(lo.MatrixFree((n, n), np.float64, lambda X: A @ X, lambda X: A.T @ X), 1)
    big, e2 = lo.testing.tight_binding(20)
    with pytest.raises(sv.ConvergenceError):
        sv.eigsh(big(e2), 4, which="SA", maxiter=2, ncv=9)
    with pytest.raises(sv.BackendNotSupported, match="sigma=None"):
        sv.eigsh(lo.MatrixFree((n, n), np.float64, lambda X: H @ X, lambda X: H @ X), 1,
                 sigma=0.0)
    e = sv.eigsh(H, 2)                                  # Lanczos, no factorization
    with pytest.raises(ValueError, match="shift-invert"):
        ad.eigsh_pullback(e, vectors_bar=np.ones((n, 2)))


def test_eigsh_reuses_a_given_cache():
    fam, eps = lo.testing.tight_binding(6)
    H = fam(eps)
    S = H.to_scipy() + 5.0 * sp.eye_array(H.shape[0])
    cache = sv.init(sv.LinearProblem(S, posdef=True), sv.LU())
    e = sv.eigsh(H, 2, sigma=-5.0, cache=cache)
    assert e.cache is cache and cache.stats.factorizations == 1
    assert np.allclose(e.values, np.linalg.eigvalsh(H.to_scipy().toarray())[:2], atol=1e-12)
    with pytest.raises(ValueError, match="does not hold"):
        sv.eigsh(H, 2, sigma=-4.0, cache=cache)
