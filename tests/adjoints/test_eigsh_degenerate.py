"""Degenerate eigenvalues in ad.eigsh_pullback (issue 25, findings 1 and 23).

The 2-D Dirichlet Laplacian on a square grid has exactly equal pairs (λ₁ = λ₂). A cotangent that
tells a pair's members apart has no gradient: refused by name (before, it returned a number that
depended on ARPACK's basis, 0.6–0.9 away from finite differences). A function invariant on the
pair's eigenspace (the pair's sum, the projector) is differentiable: with equal λ̄ or
``degenerate='invariant'`` it is returned, checked against central differences of dense eigh.
A pair cut in two by k (λ₁ computed, its equal partner not) is named at once (before: 10–20 s
of GMRES and "raise maxiter or loosen rtol"). Real and complex Hermitian.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv


def _family(complex_: bool, L: int = 7):
    """K(θ) = D T Dᴴ + diag(θ): T the 2-D Laplacian (degenerate pairs), D a diagonal phase."""
    T1 = sp.diags([-np.ones(L - 1), 2 * np.ones(L), -np.ones(L - 1)], [-1, 0, 1])
    T = (sp.kron(T1, sp.eye(L)) + sp.kron(sp.eye(L), T1)).tocsr()
    n = L * L
    if complex_:
        d = np.exp(1j * np.random.default_rng(0).uniform(0, 2 * np.pi, n))
        T = sp.csr_array(sp.diags(d) @ T @ sp.diags(d.conj()))
    fam = lo.AffineSparse.from_elements(np.ones((n, 1, 1)), np.arange(n)[:, None], n, offset=T)
    return fam, np.zeros(n)


def _dense(fam, theta):
    return fam(theta).to_scipy().toarray()


def _fd(f, theta, idx, h=1e-6):
    out = []
    for i in idx:
        d = np.zeros_like(theta)
        d[i] = h
        out.append((f(theta + d) - f(theta - d)) / (2 * h))
    return np.array(out)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_one_member_of_a_degenerate_pair_is_refused_by_name(complex_):
    fam, th = _family(complex_)
    e = sv.eigsh(fam(th), 4, sigma=0.0)
    assert abs(e.values[1] - e.values[2]) < 1e-12                  # the pair is exact
    with pytest.raises(ad.DegenerateEigenvalueError, match="eigenvalues 1 and 2 coincide") as ex:
        ad.eigsh_pullback(e, values_bar=np.array([0.0, 1.0, 0.0, 0.0]))
    assert ex.value.indices == (1, 2)
    with pytest.raises(ad.DegenerateEigenvalueError, match="eigenvector cotangents"):
        Vb = np.zeros_like(e.vectors)
        Vb[:, 1] = e.vectors[:, 1]
        ad.eigsh_pullback(e, vectors_bar=Vb)
    assert e.cache.stats.factorizations == 1


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_the_sum_of_a_degenerate_pair_has_its_gradient(complex_):
    fam, th = _family(complex_)
    e = sv.eigsh(fam(th), 4, sigma=0.0)
    g = fam.pullback(ad.eigsh_pullback(e, values_bar=np.array([0.0, 1.0, 1.0, 0.0])))
    # dense reference: the projector onto the pair's eigenspace, its diagonal = ∂(λ₁+λ₂)/∂θ
    w, V = np.linalg.eigh(_dense(fam, th))
    ref = (np.abs(V[:, 1:3]) ** 2).sum(axis=1)
    assert np.abs(g - ref).max() <= 1e-12
    idx = [0, 10, 24, 31]
    fd = _fd(lambda t: np.linalg.eigvalsh(_dense(fam, t))[1:3].sum(), th, idx)
    assert np.abs(g[idx] - fd).max() <= 1e-7


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_a_subspace_invariant_function_of_the_pair_with_degenerate_invariant(complex_):
    """f = Σⱼ gⱼ Pⱼⱼ + λ₀, P the projector onto the pair's eigenspace: invariant on it."""
    fam, th = _family(complex_)
    n = fam.shape[0]
    gw = np.random.default_rng(5).uniform(0, 1, n)
    e = sv.eigsh(fam(th), 4, sigma=0.0)
    Vb = np.zeros_like(e.vectors)
    Vb[:, 1:3] = 2 * gw[:, None] * e.vectors[:, 1:3]
    lb = np.array([1.0, 0.0, 0.0, 0.0])
    with pytest.raises(ad.DegenerateEigenvalueError):
        ad.eigsh_pullback(e, values_bar=lb, vectors_bar=Vb)
    G = ad.eigsh_pullback(e, values_bar=lb, vectors_bar=Vb, degenerate="invariant")
    grad = fam.pullback(G)

    def f(t):
        w, V = np.linalg.eigh(_dense(fam, t))
        return float(gw @ (np.abs(V[:, 1:3]) ** 2).sum(axis=1) + w[0])

    idx = [0, 8, 24, 40]
    fd = _fd(f, th, idx)
    assert np.abs(grad[idx] - fd).max() <= 1e-7 * max(1.0, np.abs(fd).max()), (grad[idx], fd)
    # a function of one basis vector is not invariant on the pair: refused even so
    Vb2 = np.zeros_like(e.vectors)
    Vb2[:, 1] = 2 * gw * e.vectors[:, 1]
    with pytest.raises(ad.DegenerateEigenvalueError, match="not Hermitian"):
        ad.eigsh_pullback(e, vectors_bar=Vb2, degenerate="invariant")
    with pytest.raises(ad.DegenerateEigenvalueError, match="differs"):
        ad.eigsh_pullback(e, values_bar=np.array([0.0, 1.0, 2.0, 0.0]), degenerate="invariant")
    assert e.cache.stats.factorizations == 1


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_a_pair_cut_in_two_by_k_is_named_at_once(complex_):
    """k = 2 holds λ₁ but not its equal partner λ₂: its eigenvector cotangent used to run GMRES
    for 10-20 s and end in 'raise maxiter or loosen rtol'; its value cotangent was arbitrary."""
    fam, th = _family(complex_)
    e = sv.eigsh(fam(th), 2, sigma=0.0)
    assert e.beyond is not None and abs(e.beyond - e.values[1]) < 1e-12
    Vb = np.zeros_like(e.vectors)
    Vb[:, 1] = np.arange(fam.shape[0])
    solves = e.cache.stats.solves
    with pytest.raises(ad.DegenerateEigenvalueError, match="was not computed") as ex:
        ad.eigsh_pullback(e, vectors_bar=Vb)
    assert "k > 2" in str(ex.value) and ex.value.indices == (1,)
    assert e.cache.stats.solves == solves                          # named before any solve
    with pytest.raises(ad.DegenerateEigenvalueError, match="was not computed"):
        ad.eigsh_pullback(e, values_bar=np.array([0.0, 1.0]))
    with pytest.raises(ad.DegenerateEigenvalueError, match="was not computed"):
        ad.eigsh_pullback(e, values_bar=np.array([0.0, 1.0]), degenerate="invariant")
    # the simple eigenvalue next to it is fine, and exact
    g = fam.pullback(ad.eigsh_pullback(e, values_bar=np.array([1.0, 0.0])))
    assert np.abs(g - np.abs(e.vectors[:, 0]) ** 2).max() <= 1e-12


def test_close_but_distinct_eigenvalues_keep_their_gradients():
    """A gap of 1e-4 (relative) is not a cluster: eigenvector cotangents against dense eigh."""
    fam, th = _family(False, L=6)
    n = fam.shape[0]
    th = th.copy()
    th[7] = 1e-3                                                    # splits the pair
    e = sv.eigsh(fam(th), 4, sigma=0.0)
    assert 1e-6 < e.values[2] - e.values[1] < 1e-3
    gw = np.random.default_rng(2).uniform(0, 1, n)
    Vb = np.zeros_like(e.vectors)
    Vb[:, 3] = 2 * gw * e.vectors[:, 3]
    grad = fam.pullback(ad.eigsh_pullback(e, vectors_bar=Vb))

    def f(t):
        return float(gw @ np.linalg.eigh(_dense(fam, t))[1][:, 3] ** 2)

    idx = [0, 7, 20]
    fd = _fd(f, th, idx, h=1e-7)
    assert np.abs(grad[idx] - fd).max() <= 1e-6 * max(1.0, np.abs(fd).max())


def test_degenerate_option_is_checked():
    fam, th = _family(False, L=4)
    e = sv.eigsh(fam(th), 2, sigma=0.0)
    with pytest.raises(ValueError, match="degenerate must be one of"):
        ad.eigsh_pullback(e, values_bar=np.ones(2), degenerate="sum")
