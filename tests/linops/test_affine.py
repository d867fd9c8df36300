"""AffineSparse: construction, evaluation, pullback vs dense contraction, Dirichlet elimination."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
import adjoints as ad

rng = np.random.default_rng(3)


def dense_contraction(G, Ks):
    Gd = lo.to_dense(G)
    return np.array([np.vdot(lo.to_dense(lo.aslinop(K)), Gd) for K in Ks])


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_from_terms_evaluates_and_pulls_back(dtype):
    n = 9
    Ks = [sp.random(n, n, 0.2, random_state=i, format="coo").astype(dtype) for i in range(4)]
    K0 = sp.eye(n, format="csr", dtype=dtype) * 3
    fam = lo.AffineSparse.from_terms(Ks, offset=K0)
    theta = rng.standard_normal(4)
    ref = K0.toarray() + sum(t * K.toarray() for t, K in zip(theta, Ks))
    np.testing.assert_allclose(lo.to_dense(fam(theta)), ref, atol=1e-13)
    for G in (lo.RankOne(rng.standard_normal(n) + 0j, rng.standard_normal(n) + 1j),
              lo.LowRank(rng.standard_normal((n, 3)), rng.standard_normal((n, 3))),
              lo.Dense(rng.standard_normal((n, n))), fam(rng.standard_normal(4))):
        want = dense_contraction(G, Ks)
        np.testing.assert_allclose(fam.pullback(G, real=False), want, atol=1e-12)
        np.testing.assert_allclose(fam.pullback(G), want.real, atol=1e-12)


def test_from_elements_matches_explicit_assembly_with_dirichlet():
    # 1-D bar, 5 elements, 2 dofs each, per-element stiffness, left end fixed
    ne, n = 5, 6
    dofs = np.stack([np.arange(ne), np.arange(1, ne + 1)], axis=1)
    Ke = np.array([[[1.0, -1.0], [-1.0, 1.0]]]) * (1 + np.arange(ne))[:, None, None]
    fam = lo.AffineSparse.from_elements(Ke, dofs, n, fixed=[0])
    theta = rng.random(ne) + 0.5
    Kfull = np.zeros((n, n))
    for e in range(ne):
        Kfull[np.ix_(dofs[e], dofs[e])] += theta[e] * Ke[e]
    np.testing.assert_allclose(lo.to_dense(fam(theta)), Kfull[1:, 1:], atol=1e-13)
    assert fam.free.tolist() == [1, 2, 3, 4, 5]
    np.testing.assert_allclose(fam.expand(np.arange(5.0)), [0, 0, 1, 2, 3, 4])
    G = lo.RankOne(rng.standard_normal(5), rng.standard_normal(5))
    Ks = []
    for e in range(ne):
        Kel = np.zeros((n, n))
        Kel[np.ix_(dofs[e], dofs[e])] = Ke[e]
        Ks.append(sp.csr_matrix(Kel[1:, 1:]))
    np.testing.assert_allclose(fam.pullback(G), dense_contraction(G, Ks), atol=1e-13)


def test_compliance_gradient_is_minus_u_K_u_per_element():
    """Topology optimisation: c = fᵀu, ∂c/∂θₑ = −uₑᵀ Kₑ uₑ, via solve_pullback + fam.pullback."""
    nx = 6
    n = nx + 1
    dofs = np.stack([np.arange(nx), np.arange(1, n)], axis=1)
    Ke = np.array([[1.0, -1.0], [-1.0, 1.0]])
    fam = lo.AffineSparse.from_elements(Ke, dofs, n, fixed=[0])
    theta = rng.random(nx) + 0.5
    f = np.ones(n - 1)
    sol = sv.solve(sv.LinearProblem(fam(theta), f, hermitian=True, posdef=True), sv.Cholesky())
    g = ad.solve_pullback(sol, f)  # c = fᵀu -> ū = f
    dc = fam.pullback(g.A)
    u = fam.expand(sol.u)
    want = np.array([-u[dofs[e]] @ Ke @ u[dofs[e]] for e in range(nx)])
    np.testing.assert_allclose(dc, want, atol=1e-12)
    assert sol.cache.stats.factorizations == 1


def test_bad_family_inputs_are_named():
    with pytest.raises(lo.ShapeError, match=r"terms\[1\].shape=\(3, 3\)"):
        lo.AffineSparse.from_terms([sp.eye(2), sp.eye(3)])
    with pytest.raises(lo.ShapeError, match=r"Ke must be \(k, k\)=\(2, 2\)"):
        lo.AffineSparse.from_elements(np.eye(3), np.zeros((4, 2), int), 5)
    with pytest.raises(lo.ShapeError, match=r"dofs out of range \[0, 5\)"):
        lo.AffineSparse.from_elements(np.eye(2), np.array([[0, 5]]), 5)
    fam = lo.AffineSparse.from_terms([sp.eye(3)])
    with pytest.raises(lo.ShapeError, match=r"theta must have shape \(1,\)"):
        fam(np.ones(2))


def test_from_elements_with_offset_builds_a_resolvent_family():
    # tight-binding chain: bonds are 2-node "elements", A(θ) = z·I − H(θ)
    n = 6
    bonds = np.stack([np.arange(n - 1), np.arange(1, n)], axis=1)
    z = 0.3 + 0.05j
    fam = lo.AffineSparse.from_elements(-np.array([[0.0, 1.0], [1.0, 0.0]]), bonds, n,
                                        offset=z * sp.eye(n, format="csr"))
    t = rng.random(n - 1)
    H = np.zeros((n, n))
    H[bonds[:, 0], bonds[:, 1]] = t
    H = H + H.T
    np.testing.assert_allclose(lo.to_dense(fam(t)), z * np.eye(n) - H, atol=1e-14)
    G = lo.RankOne(rng.standard_normal(n) + 1j, rng.standard_normal(n) + 0j)
    Ks = []
    for b in bonds:
        E = np.zeros((n, n))
        E[b[0], b[1]] = E[b[1], b[0]] = -1.0
        Ks.append(sp.csr_matrix(E))
    np.testing.assert_allclose(fam.pullback(G), dense_contraction(G, Ks).real, atol=1e-13)


# ----- incidence counts that cannot wrap ----------------------------------------------------------
@pytest.mark.parametrize("degree", [255, 256, 70_000])
def test_a_hub_shared_by_many_elements_keeps_its_entries(degree):
    """A star of 2-node elements around dof 0 (int8 wrapped at 256, int16 would at 65 536)."""
    dofs = np.stack([np.zeros(degree, dtype=int), np.arange(1, degree + 1)], axis=1)
    Ke = np.array([[1.0, -1.0], [-0.5, 2.0]])
    fam = lo.AffineSparse.from_elements(Ke, dofs, degree + 1, fixed=[degree])
    nf = degree
    assert fam.pattern.nnz == 1 + 3 * (nf - 1)      # hub diagonal, hub row/column, leaf diagonals
    assert int(fam.MH.pattern.indices.min()) >= 0   # every element entry found its slot
    theta = 1 + rng.random(degree)
    K = fam(theta).to_scipy()
    assert K[0, 0] == pytest.approx(theta.sum(), rel=1e-13)
    np.testing.assert_allclose(K.diagonal()[1:], 2 * theta[:-1], rtol=1e-15)
    np.testing.assert_allclose(K[0, 1:].toarray().ravel(), -theta[:-1], rtol=1e-15)
    G = lo.RankOne(np.ones(nf), np.ones(nf))                     # sum of all entries
    np.testing.assert_allclose(fam.pullback(G)[:-1], np.full(degree - 1, Ke.sum()), rtol=1e-13)


def test_a_256_sector_disc_centre():
    """Triangles around a centre node (the mesh of issue 16): 256 elements share dof 0."""
    m = 256
    ring = np.arange(1, m + 1)
    tri = np.stack([np.zeros(m, dtype=int), ring, np.roll(ring, -1)], axis=1)
    Ke = np.array([[2.0, -1.0, -1.0], [-1.0, 1.0, 0.0], [-1.0, 0.0, 1.0]])
    fam = lo.AffineSparse.from_elements(Ke, tri, m + 1, fixed=ring[::2])
    theta = rng.random(m) + 0.5
    full = np.zeros((m + 1, m + 1))
    for e in range(m):
        full[np.ix_(tri[e], tri[e])] += theta[e] * Ke
    np.testing.assert_allclose(lo.to_dense(fam(theta)), full[np.ix_(fam.free, fam.free)], atol=1e-12)


@pytest.mark.parametrize("Ke, dofs", [(np.zeros((0, 0)), np.zeros((3, 0), dtype=int)),
                                      (np.zeros((2, 0, 0)), np.zeros((2, 0), dtype=int))],
                         ids=["shared", "per-element"])
def test_elements_without_dofs_contribute_nothing(Ke, dofs):
    """k = 0: a family whose elements touch no dof is K(θ) = 0 (with or without an offset and
    fixed values), never a bare ZeroDivisionError."""
    ne = dofs.shape[0]
    fam = lo.AffineSparse.from_elements(Ke, dofs, 3, fixed=[0], fixed_values=[2.0])
    assert fam.n_params == ne and fam.shape == (2, 2) and fam.pattern.nnz == 0
    np.testing.assert_array_equal(lo.to_dense(fam(np.ones(ne))), np.zeros((2, 2)))
    np.testing.assert_array_equal(fam.rhs(np.ones(ne)), [0.0, 0.0])
    G = lo.RankOne(np.ones(2), np.ones(2))
    np.testing.assert_array_equal(fam.pullback(G, bbar=np.ones(2)), np.zeros(ne))
    off = lo.AffineSparse.from_elements(Ke, dofs, 3, offset=sp.eye(3, format="csr"))
    np.testing.assert_array_equal(lo.to_dense(off(np.ones(ne))), np.eye(3))
