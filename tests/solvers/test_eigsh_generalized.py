"""Issue 26: generalized Hermitian eigenproblems K v = λ M v (sv.eigsh(K, k, M=M, sigma=...)).

Values and M-orthonormal vectors against scipy.linalg.eigh(K, M); one factorization of K − σM,
reused by the eigenvector cotangents; ad.eigsh_pullback's lazy cotangents for K AND M,
contracted by fam_K.pullback / fam_M.pullback, against central differences of dense
generalized eigh and the exact vᴴKₑv, real and complex Hermitian (a missing conjugate or a wrong
normalisation term fails the complex case); singular, indefinite and non-Hermitian M refused by
name; degenerate pairs as in the standard problem; buckling (K + λK_G) v = 0.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv


def _families(complex_: bool, nx: int = 7):
    fK, fM = lo.testing.membrane_families(nx)
    rng = np.random.default_rng(1)
    th = rng.uniform(0.5, 2.0, fK.n_params)
    rho = rng.uniform(0.5, 2.0, fM.n_params)
    if not complex_:
        return fK, fM, th, rho
    n = fK.shape[0]
    P = sp.random(n, n, density=0.05, random_state=3, format="csr")
    S = (P - P.T) * 0.3                                   # real skew: i·S is Hermitian
    Kc = lo.AffineSparse.from_terms([fK(np.eye(fK.n_params)[e]).to_scipy()
                                     for e in range(fK.n_params)], offset=sp.csr_array(1j * S))
    Mc = lo.AffineSparse.from_terms([fM(np.eye(fM.n_params)[e]).to_scipy()
                                     for e in range(fM.n_params)],
                                    offset=sp.csr_array(1j * 0.002 * (S != 0).multiply(S)))
    return Kc, Mc, th, rho


def _dense(fam, p):
    return fam(p).to_scipy().toarray()


def _fd(f, p, idx, h=1e-5):
    out = []
    for i in idx:
        d = np.zeros_like(p)
        d[i] = h
        out.append((f(p + d) - f(p - d)) / (2 * h))
    return np.array(out)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_values_and_M_orthonormal_vectors_match_dense_eigh(complex_):
    fK, fM, th, rho = _families(complex_)
    K, M = fK(th), fM(rho)
    e = sv.eigsh(K, 4, sigma=0.0, M=M)
    ref = sl.eigh(_dense(fK, th), _dense(fM, rho), eigvals_only=True)[:4]
    assert np.abs(e.values - ref).max() <= 1e-10 * ref.max()
    V = e.vectors
    G = V.conj().T @ (M.to_scipy() @ V)
    assert np.abs(G - np.eye(4)).max() <= 1e-10
    R = K.to_scipy() @ V - (M.to_scipy() @ V) * e.values
    assert np.abs(R).max() <= 1e-9 * np.abs(K.to_scipy()).max()
    assert e.cache.stats.factorizations == 1 and e.M is M
    assert e.beyond is not None and e.beyond >= e.values[-1] - 1e-12


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_eigenvalue_gradients_for_K_and_M(complex_):
    fK, fM, th, rho = _families(complex_)
    e = sv.eigsh(fK(th), 3, sigma=0.0, M=fM(rho))
    lb = np.array([1.0, 0.0, 0.5])
    g = ad.eigsh_pullback(e, values_bar=lb)
    assert isinstance(g, ad.EigshCotangent)
    assert isinstance(g.K, (lo.RankOne, lo.LowRank)) and isinstance(g.M, (lo.RankOne, lo.LowRank))
    gt, gr = fK.pullback(g.K), fM.pullback(g.M)
    V, w = e.vectors, e.values
    # exact: ∂λᵢ/∂θₑ = vᵢᴴKₑvᵢ, ∂λᵢ/∂ρₑ = −λᵢvᵢᴴMₑvᵢ (Kₑ, Mₑ the families' derivatives)
    for j in (0, 11, 30):
        Ke = _dense(fK, np.eye(fK.n_params)[j]) - _dense(fK, np.zeros(fK.n_params))
        Me = _dense(fM, np.eye(fM.n_params)[j]) - _dense(fM, np.zeros(fM.n_params))
        want_t = sum(lb[i] * np.real(V[:, i].conj() @ Ke @ V[:, i]) for i in range(3))
        want_r = sum(-lb[i] * w[i] * np.real(V[:, i].conj() @ Me @ V[:, i]) for i in range(3))
        assert abs(gt[j] - want_t) <= 1e-12 * max(1, abs(want_t))
        assert abs(gr[j] - want_r) <= 1e-12 * max(1, abs(want_r))

    def f(t, r):
        lam = sl.eigh(_dense(fK, t), _dense(fM, r), eigvals_only=True)[:3]
        return float(lb @ lam)

    idx = [0, 17, 35]
    assert np.abs(gt[idx] - _fd(lambda t: f(t, rho), th, idx)).max() <= 1e-7 * max(1, abs(gt).max())
    assert np.abs(gr[idx] - _fd(lambda r: f(th, r), rho, idx)).max() <= 1e-7 * max(1, abs(gr).max())
    assert e.cache.stats.factorizations == 1


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_eigenvector_cotangents_for_K_and_M(complex_):
    """f = Σⱼ gⱼ|v₁ⱼ|² + λ₀ with M-normalised v₁ (phase invariant): the normalisation term
    −½(vᴴv̄)vvᴴ of M̄ and the M-projected solve, against dense eigh(K, M)."""
    fK, fM, th, rho = _families(complex_, nx=6)
    n = fK.shape[0]
    gw = np.random.default_rng(5).uniform(0, 1, n)
    e = sv.eigsh(fK(th), 3, sigma=0.0, M=fM(rho))
    Vb = np.zeros_like(e.vectors)
    Vb[:, 1] = 2 * gw * e.vectors[:, 1]
    solves = e.cache.stats.solves
    g = ad.eigsh_pullback(e, values_bar=np.array([1.0, 0.0, 0.0]), vectors_bar=Vb)
    assert e.cache.stats.factorizations == 1 and e.cache.stats.solves > solves
    gt, gr = fK.pullback(g.K), fM.pullback(g.M)

    def f(t, r):
        w, V = sl.eigh(_dense(fK, t), _dense(fM, r))
        return float(gw @ np.abs(V[:, 1]) ** 2 + w[0])

    idx = [0, 7, 20]
    fdt, fdr = _fd(lambda t: f(t, rho), th, idx), _fd(lambda r: f(th, r), rho, idx)
    assert np.abs(gt[idx] - fdt).max() <= 1e-7 * max(1, np.abs(fdt).max()), (gt[idx], fdt)
    assert np.abs(gr[idx] - fdr).max() <= 1e-7 * max(1, np.abs(fdr).max()), (gr[idx], fdr)


def test_degenerate_pair_of_the_square_membrane():
    """Uniform square: λ₁ = λ₂ (the (1,2) and (2,1) modes). One member refused, their sum exact."""
    fK, fM = lo.testing.membrane_families(8)
    th = np.ones(fK.n_params)
    e = sv.eigsh(fK(th), 3, sigma=0.0, M=fM(th))
    assert abs(e.values[1] - e.values[2]) <= 1e-10 * e.values[2]
    with pytest.raises(ad.DegenerateEigenvalueError, match="eigenvalues 1 and 2 coincide"):
        ad.eigsh_pullback(e, values_bar=np.array([0.0, 1.0, 0.0]))
    g = ad.eigsh_pullback(e, values_bar=np.array([0.0, 1.0, 1.0]))
    gt = fK.pullback(g.K)
    fd = _fd(lambda t: sl.eigh(_dense(fK, t), _dense(fM, th), eigvals_only=True)[1:3].sum(),
             th, [0, 9, 27])
    assert np.abs(gt[[0, 9, 27]] - fd).max() <= 1e-7 * max(1, np.abs(fd).max())
    e2 = sv.eigsh(fK(th), 2, sigma=0.0, M=fM(th))          # the pair cut in two
    with pytest.raises(ad.DegenerateEigenvalueError, match="was not computed"):
        ad.eigsh_pullback(e2, values_bar=np.array([0.0, 1.0]))


def test_bad_M_is_refused_by_name():
    fK, fM = lo.testing.membrane_families(5)
    th = np.ones(fK.n_params)
    K, M = fK(th), fM(th).to_scipy()
    n = K.shape[0]
    Z = M.tolil()
    Z[3, :] = 0
    Z[:, 3] = 0
    with pytest.raises(sv.SingularMatrixError, match=r"M\[3, 3\] = 0"):
        sv.eigsh(K, 2, sigma=0.0, M=sp.csr_array(Z))
    N = M.tolil()
    N[4, 4] = -N[4, 4]
    with pytest.raises(sv.NotPositiveDefiniteError, match="indefinite"):
        sv.eigsh(K, 2, sigma=0.0, M=sp.csr_array(N))
    # positive diagonal, not dominant: the Lanczos check decides
    lap = sp.csr_array(fK(th).to_scipy())
    indef = sp.csr_array(lap - 1.5 * float(sl.eigh(lap.toarray(), eigvals_only=True)[0])
                         * sp.eye(n))
    with pytest.raises(sv.NotPositiveDefiniteError, match="Rayleigh quotient"):
        sv.eigsh(K, 2, sigma=0.0, M=indef)
    neumann = np.diag([1.0, 2.0, 2.0, 2.0, 1.0]) - np.eye(5, k=1) - np.eye(5, k=-1)
    neumann[0, 4] = neumann[4, 0] = 0.0
    with pytest.raises(sv.SingularMatrixError, match="singular"):
        sv.eigsh(np.diag([1.0, 2.0, 3.0, 4.0, 5.0]), 2, sigma=0.0, M=neumann)
    with pytest.raises(sv.NotHermitianError, match="Hermitian M"):
        sv.eigsh(K, 2, sigma=0.0, M=sp.csr_array(M + sp.triu(M, 1)))
    with pytest.raises(lo.ShapeError, match="M.shape"):
        sv.eigsh(K, 2, sigma=0.0, M=sp.eye(n + 1))
    with pytest.raises(ValueError, match="needs sigma"):
        sv.eigsh(K, 2, M=M)


def test_a_given_cache_must_hold_K_minus_sigma_M():
    fK, fM = lo.testing.membrane_families(5)
    th = np.ones(fK.n_params)
    K, M = fK(th).to_scipy(), fM(th).to_scipy()
    cache = sv.init(sv.LinearProblem(sp.csr_array(K + 2.0 * M), posdef=True))
    e = sv.eigsh(K, 2, sigma=-2.0, M=M, cache=cache)
    assert e.cache is cache and cache.stats.factorizations == 1
    assert np.allclose(e.values, sl.eigh(K.toarray(), M.toarray(), eigvals_only=True)[:2],
                       rtol=1e-12)
    with pytest.raises(ValueError, match="K − σM"):
        sv.eigsh(K, 2, sigma=-1.0, M=M, cache=cache)


def test_buckling_of_a_column_and_its_gradient():
    """(K + λK_G) v = 0: EI(x) varies per element; ∂λ_cr/∂EIₑ against central differences."""
    n = 60
    h = 1.0 / (n + 1)
    D = sp.diags([np.ones(n), -np.ones(n)], [0, -1], shape=(n + 1, n)) / h   # slopes
    curv = sp.csr_array(D.T @ D)                          # −v'' (pinned), n×n
    # bending K(EI) = Σₑ EIₑ Cₑᵀ Cₑ with Cₑ the curvature at interior node e (finite differences)
    C = sp.csr_array(curv.multiply(h))                     # rows: curvature at node e (×h)
    terms = [sp.csr_array(C[[e], :].T @ C[[e], :] / h ** 3) for e in range(n)]
    famK = lo.AffineSparse.from_terms(terms)
    EI = np.linspace(1.0, 2.0, n)
    KG = -curv * h                                        # geometric stiffness of P = 1
    e = sv.buckling(famK(EI), KG, 2)
    ref = sl.eigh(famK(EI).to_scipy().toarray(), -KG.toarray(), eigvals_only=True)[:2]
    assert np.abs(e.values - ref).max() <= 1e-9 * ref[0]
    g = ad.eigsh_pullback(e, values_bar=np.array([1.0, 0.0]))
    grad = famK.pullback(g.K)
    idx = [0, 20, 45]
    fd = _fd(lambda p: sl.eigh(famK(p).to_scipy().toarray(), -KG.toarray(),
                               eigvals_only=True)[0], EI, idx, h=1e-3)
    assert np.abs(grad[idx] - fd).max() <= 1e-6 * max(1.0, np.abs(fd).max())
    with pytest.raises(sv.NotPositiveDefiniteError):
        sv.buckling(famK(EI), -KG, 1)                     # tension: −K_G indefinite


# ----- what the eigensolve costs: the shift-invert engine, the M check, rank-one cotangents ------
@pytest.mark.slow
def test_shift_invert_does_not_pick_pardiso_for_its_many_solves():
    """Auto takes PARDISO from n = 20 000 (one factorization + two solves); shift-invert makes
    one factorization and tens of solves, where CHOLMOD's solves are faster: eigsh's default
    is Auto without PARDISO. n = 20 164 here, where plain Auto picks PARDISO."""
    pytest.importorskip("pypardiso")
    if not sv.cholmod_available():
        pytest.skip("needs CHOLMOD (scikit-sparse)")
    fK, fM = lo.testing.membrane_families(143)
    K, M = fK(np.ones(fK.n_params)), fM(np.ones(fM.n_params))
    assert type(sv.Auto().choose(K)).__name__ == "Pardiso"         # what Auto alone picks
    e = sv.eigsh(K, 2, sigma=0.0, M=M)
    assert e.cache.kind == "CHOLMOD" and e.cache.stats.factorizations == 1


def test_the_M_check_is_a_cholesky_not_a_lanczos_run(monkeypatch):
    """A consistent mass matrix is not diagonally dominant; its definiteness is proven by one
    Cholesky factorization (ARPACK runs once: the eigensolve), an indefinite one is still
    named by its Rayleigh quotient, and a dense singular one as singular."""
    import scipy.sparse.linalg as sla

    calls = []
    real = sla.eigsh

    def counting(*args, **kw):
        calls.append(kw.get("which"))
        return real(*args, **kw)

    monkeypatch.setattr(sla, "eigsh", counting)
    fK, fM = lo.testing.membrane_families(9)
    th = np.ones(fK.n_params)
    K, M = fK(th), fM(th)
    S = M.to_scipy()
    d = S.diagonal()
    assert np.any(d <= np.asarray(abs(S).sum(axis=1)).ravel() - np.abs(d))   # not dominant
    e = sv.eigsh(K, 2, sigma=0.0, M=M)
    assert len(calls) == 1                       # the eigensolve only
    ref = sl.eigh(K.to_scipy().toarray(), S.toarray(), eigvals_only=True)[:2]
    assert np.abs(e.values - ref).max() <= 1e-10 * ref.max()
    lap = K.to_scipy()
    low = float(sl.eigh(lap.toarray(), eigvals_only=True)[0])
    with pytest.raises(sv.NotPositiveDefiniteError, match="Rayleigh quotient"):
        sv.eigsh(K, 2, sigma=0.0, M=sp.csr_array(lap - 1.5 * low * sp.eye(lap.shape[0])))
    with pytest.raises(sv.NotPositiveDefiniteError, match="Rayleigh quotient"):
        sv.eigsh(K, 2, sigma=0.0, M=lap.toarray() - 1.5 * low * np.eye(lap.shape[0]))


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_a_cotangent_on_one_eigenvalue_is_rank_one(complex_):
    """λ̄ = e_i: K̄ = vᵢvᵢᴴ and M̄ = −λᵢvᵢvᵢᴴ as RankOne (one SDDMM column per family pullback,
    not k); λ̄ = 0 gives lo.Zero; several nonzero λ̄ keep only those pairs."""
    fK, fM, th, rho = _families(complex_)
    e = sv.eigsh(fK(th), 4, sigma=0.0, M=fM(rho))
    V, w = e.vectors, e.values
    g = ad.eigsh_pullback(e, values_bar=np.array([0.0, 1.0, 0.0, 0.0]))
    assert isinstance(g.K, lo.RankOne) and isinstance(g.M, lo.RankOne)
    v = V[:, 1]
    assert np.abs(lo.to_dense(g.K) - np.outer(v, v.conj())).max() <= 1e-14
    assert np.abs(lo.to_dense(g.M) + w[1] * np.outer(v, v.conj())).max() <= 1e-13 * w[1]
    z = ad.eigsh_pullback(e, values_bar=np.zeros(4))
    assert isinstance(z.K, lo.Zero) and isinstance(z.M, lo.Zero)
    two = ad.eigsh_pullback(e, values_bar=np.array([2.0, 0.0, 0.0, -1.0]))
    assert isinstance(two.K, lo.LowRank) and two.K.factors()[0].shape[1] == 2
    ref = 2 * np.outer(V[:, 0], V[:, 0].conj()) - np.outer(V[:, 3], V[:, 3].conj())
    assert np.abs(lo.to_dense(two.K) - ref).max() <= 1e-13
