"""JAX: adj.slogdet / adj.logdet, adj.inv_sample and adj.eigsh under grad, jvp, vmap and jit,
and second order (hessian, jvp of grad, jacfwd(jacrev)), against dense jnp references
(jax.test_util.check_grads judges the convention); log det and inverse entries go through the
solves' bridge: one host factorization per linearization point, counted in adj.stats(), shared
with solves of the same values."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import adjoints.jax as adj  # noqa: E402
import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
from adjoints.jax import _logdet as _jax_logdet  # noqa: E402
from adjoints.jax._live import STORE  # noqa: E402


def _matrix(kind: str, n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    fam, _ = lo.testing.poisson_family(5)
    K = fam(rng.uniform(0.5, 2, fam.n_params)).to_scipy()
    n = K.shape[0]
    if kind == "spd":
        return lo.Sparse.from_scipy(K.tocsr())
    P = K.copy()
    P.data = rng.uniform(-1, 1, P.nnz)
    A = K + P - 1.2 * sp.eye_array(n)
    if kind == "complex":
        Q = K.copy()
        Q.data = rng.uniform(-1, 1, Q.nnz)
        A = A + 1j * Q
    return lo.Sparse.from_scipy(sp.csr_array(A))


def _dense(v, P):
    n = P.shape[0]
    return jnp.zeros((n, n), v.dtype).at[P.rows, P.indices].add(v)


@pytest.mark.parametrize("kind", ["spd", "general", "complex"])
def test_logdet_matches_dense_jnp_under_grad_jit_jvp(kind):
    K = _matrix(kind)
    P, v = K.pattern, jnp.asarray(K.values)
    posdef = kind == "spd"

    def f(x):
        return adj.logdet(lo.Sparse(x, P), posdef=posdef)

    def ref(x):
        return jnp.linalg.slogdet(_dense(x, P))[1]

    assert abs(float(f(v)) - float(ref(v))) <= 1e-12 * abs(float(ref(v)))
    g, gr = jax.jit(jax.grad(f))(v), jax.grad(ref)(v)
    assert np.abs(np.asarray(g - gr)).max() <= 1e-10 * np.abs(np.asarray(gr)).max()
    dv = jnp.asarray(np.random.default_rng(1).standard_normal(v.shape)).astype(v.dtype)
    t, tr = jax.jvp(f, (v,), (dv,))[1], jax.jvp(ref, (v,), (dv,))[1]
    assert abs(float(t) - float(tr)) <= 1e-10 * max(1.0, abs(float(tr)))
    # numerical directions are not symmetric: LU for the spd case too
    check_grads(lambda x: adj.logdet(lo.Sparse(x, P)), (v,), order=1, modes=("fwd", "rev"),
                atol=1e-6, rtol=1e-6)
    if kind == "complex":   # the sign's derivative: i·Im tr(A⁻¹dA)·sign
        s = jax.jvp(lambda x: adj.slogdet(lo.Sparse(x, P))[0], (v,), (dv,))[1]
        sr = jax.jvp(lambda x: jnp.linalg.slogdet(_dense(x, P))[0], (v,), (dv,))[1]
        assert abs(complex(s) - complex(sr)) <= 1e-10


def _count_inits(monkeypatch):
    """Every real factorization (solvers.init) from here on, whoever makes it."""
    calls = []
    real = sv.init
    monkeypatch.setattr(sv, "init", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_logdet_one_factorization_per_linearization_point(monkeypatch):
    K = _matrix("spd")
    P, v = K.pattern, jnp.asarray(K.values)
    calls = _count_inits(monkeypatch)
    f = jax.jit(jax.value_and_grad(lambda x: adj.logdet(lo.Sparse(x, P), posdef=True)))
    adj.reset_stats()
    f(v)
    s = adj.stats()
    assert len(calls) == 1 and (s.factorizations, s.misses, s.queries) == (1, 0, 2), s
    calls.clear()
    jax.jit(jax.vmap(jax.grad(lambda x: adj.logdet(lo.Sparse(x, P), posdef=True))))(
        jnp.stack([v, 2 * v, 3 * v]))
    assert len(calls) == 3    # one per batch member


def test_logdet_and_solve_of_one_matrix_share_one_counted_factorization(monkeypatch):
    """logdet + solve of one matrix under jit(grad) factorized twice while adj.stats() said
    1 (the log det bypassed the store); now one real factorization, and the counters say so.
    The gradient equals dense jnp autodiff."""
    fam, b = lo.testing.poisson_family(5)
    th = jnp.asarray(np.random.default_rng(7).uniform(0.5, 2, fam.n_params))
    bj = jnp.asarray(b)
    f = lambda t: adj.logdet(fam(t), posdef=True) + jnp.sum(adj.solve(fam(t), bj, posdef=True))
    calls = _count_inits(monkeypatch)
    adj.reset_stats()
    g = jax.jit(jax.grad(f))(th)
    s = adj.stats()
    assert len(calls) == 1 and (s.factorizations, s.misses) == (1, 0), (len(calls), s)
    M = jnp.asarray(fam.M.to_scipy().toarray())
    P = fam.pattern

    def ref(t):
        A = _dense(M @ t, P)
        return jnp.linalg.slogdet(A)[1] + jnp.sum(jnp.linalg.solve(A, bj))

    gr = jax.grad(ref)(th)
    assert np.abs(np.asarray(g - gr)).max() <= 1e-11 * np.abs(np.asarray(gr)).max()
    F = adj.factorize(fam(th), posdef=True)
    adj.reset_stats()
    ld = adj.logdet(F)                       # a Factorization answers with its own factors
    assert adj.stats().factorizations == 0
    assert abs(float(ld) - float(jnp.linalg.slogdet(_dense(M @ th, P))[1])) <= 1e-12 * abs(float(ld))


@pytest.mark.parametrize("kind", ["spd", "general", "complex"])
def test_logdet_second_order_matches_dense(kind):
    """hessian, jvp of grad and jacfwd(jacrev) of sparse log det: exact (they failed with
    "Pure callbacks do not support JVP"), by solves with the one factorization."""
    K = _matrix(kind)
    P, v = K.pattern, jnp.asarray(K.values)
    posdef = kind == "spd"
    f = lambda x: adj.logdet(lo.Sparse(x, P), posdef=posdef)
    ref = lambda x: jnp.linalg.slogdet(_dense(x, P))[1]
    rng = np.random.default_rng(3)
    dv = jnp.asarray(rng.standard_normal(v.shape)).astype(v.dtype)
    adj.reset_stats()
    if kind == "complex":   # log|det| is not holomorphic: d²/dt² along a complex direction
        g2 = jax.jit(jax.grad(jax.grad(lambda t: f(v + t * dv))))(0.0)
        s = adj.stats()
        assert (s.factorizations, s.misses) == (1, 0), s
        g2r = jax.grad(jax.grad(lambda t: ref(v + t * dv)))(0.0)
        assert abs(float(g2) - float(g2r)) <= 1e-9 * max(1.0, abs(float(g2r)))
        return
    hvp = jax.jit(lambda x, d: jax.jvp(jax.grad(f), (x,), (d,))[1])(v, dv)
    s = adj.stats()
    assert (s.factorizations, s.misses) == (1, 0), s
    hvpr = jax.jvp(jax.grad(ref), (v,), (dv,))[1]
    assert np.abs(np.asarray(hvp - hvpr)).max() <= 1e-10 * np.abs(np.asarray(hvpr)).max()
    H = jax.jit(jax.hessian(f))(v)
    Hr = jax.jit(jax.hessian(ref))(v)
    assert np.abs(np.asarray(H - Hr)).max() <= 1e-10 * np.abs(np.asarray(Hr)).max()
    J = jax.jit(jax.jacfwd(jax.jacrev(f)))(v)
    assert np.abs(np.asarray(J - Hr)).max() <= 1e-10 * np.abs(np.asarray(Hr)).max()


def test_logdet_family_hessian_is_the_trace_formula():
    """d²/dρ² log det(I − ρW) = −tr((W A⁻¹)²) (a likelihood's standard error), and the Hessian
    of log det K(θ) over a family's parameters, against dense autodiff."""
    n = 30
    rng = np.random.default_rng(5)
    Wd = sp.random(n, n, 0.15, random_state=5).toarray()
    np.fill_diagonal(Wd, 0.0)
    W = sp.csr_array(Wd / np.maximum(Wd.sum(1), 1e-12)[:, None])   # row-stochastic weights
    I = sp.eye(n, format="csr")
    fam = lo.AffineSparse.from_terms([I, -W])
    f = lambda rho: adj.logdet(fam(jnp.stack([1.0, rho])))
    rho = 0.4
    h = float(jax.jit(jax.grad(jax.grad(f)))(rho))
    A = np.eye(n) - rho * W.toarray()
    WA = W.toarray() @ np.linalg.inv(A)
    assert abs(h + np.trace(WA @ WA)) <= 1e-11 * abs(np.trace(WA @ WA))
    fam2, _ = lo.testing.poisson_family(4)
    th = jnp.asarray(rng.uniform(0.5, 2, fam2.n_params))
    M = jnp.asarray(fam2.M.to_scipy().toarray())
    H = jax.jit(jax.hessian(lambda t: adj.logdet(fam2(t), posdef=True)))(th)
    Hr = jax.jit(jax.hessian(lambda t: jnp.linalg.slogdet(_dense(M @ t, fam2.pattern))[1]))(th)
    assert np.abs(np.asarray(H - Hr)).max() <= 1e-10 * np.abs(np.asarray(Hr)).max()


def test_logdet_vmap_and_family():
    fam, _ = lo.testing.poisson_family(4)
    thetas = jnp.asarray(np.random.default_rng(2).uniform(0.5, 2, (3, fam.n_params)))
    f = jax.jit(jax.vmap(jax.grad(lambda t: adj.logdet(fam(t), posdef=True))))
    got = np.asarray(f(thetas))
    for t, g in zip(np.asarray(thetas), got):
        cache = sv.init(sv.LinearProblem(fam(t)), sv.Cholesky())
        assert np.allclose(g, fam.pullback(ad_logdet(cache)), rtol=1e-12, atol=0)
        Kd = fam(t).to_scipy().toarray()
        assert np.isclose(float(adj.logdet(fam(jnp.asarray(t)), posdef=True)),
                          np.linalg.slogdet(Kd)[1], rtol=1e-12)


def ad_logdet(cache):
    import adjoints as ad

    return ad.logdet_pullback(cache)


@pytest.mark.parametrize("kind", ["general", "complex"])
def test_inv_sample_matches_dense(kind):
    K = _matrix(kind)
    P, v = K.pattern, jnp.asarray(K.values)
    n = P.shape[0]
    rows, cols = np.array([0, 3, 3, n - 1]), np.array([0, 3, 7, 0])

    def f(x):
        return jnp.sum(jnp.abs(adj.inv_sample(lo.Sparse(x, P), rows, cols)) ** 2)

    def ref(x):
        return jnp.sum(jnp.abs(jnp.linalg.inv(_dense(x, P))[rows, cols]) ** 2)

    assert np.isclose(float(f(v)), float(ref(v)), rtol=1e-12)
    g, gr = jax.jit(jax.grad(f))(v), jax.grad(ref)(v)
    assert np.abs(np.asarray(g - gr)).max() <= 1e-10 * np.abs(np.asarray(gr)).max()
    check_grads(f, (v,), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)
    batch = jax.vmap(lambda x: adj.inv_sample(lo.Sparse(x, P), rows, cols))(jnp.stack([v, 2 * v]))
    assert np.allclose(np.asarray(batch[1]), np.asarray(batch[0]) / 2, rtol=1e-12)


@pytest.mark.parametrize("kind", ["general", "complex"])
def test_inv_sample_second_order_matches_dense(kind):
    """hessian / jacfwd(jacrev) of entries of A⁻¹: exact, one factorization per call."""
    K = _matrix(kind)
    P, v = K.pattern, jnp.asarray(K.values)
    n = P.shape[0]
    rows, cols = np.array([0, 3, n - 1]), np.array([0, 7, 2])

    def f(x):
        z = adj.inv_sample(lo.Sparse(x, P), rows, cols)
        return jnp.sum(jnp.real(z) ** 2 + jnp.imag(z))

    def ref(x):
        z = jnp.linalg.inv(_dense(x, P))[rows, cols]
        return jnp.sum(jnp.real(z) ** 2 + jnp.imag(z))

    if kind == "complex":   # a real function of complex values: along a direction
        dv = jnp.asarray(np.random.default_rng(8).standard_normal(v.shape)).astype(v.dtype)
        adj.reset_stats()
        g2 = jax.jit(jax.grad(jax.grad(lambda t: f(v + t * dv))))(0.0)
        assert adj.stats().factorizations == 1
        g2r = jax.grad(jax.grad(lambda t: ref(v + t * dv)))(0.0)
        assert abs(float(g2) - float(g2r)) <= 1e-9 * max(1.0, abs(float(g2r)))
        return
    adj.reset_stats()
    H = jax.jit(jax.hessian(f))(v)
    s = adj.stats()
    assert (s.factorizations, s.misses) == (1, 0), s
    Hr = jax.jit(jax.hessian(ref))(v)
    assert np.abs(np.asarray(H - Hr)).max() <= 1e-10 * np.abs(np.asarray(Hr)).max()
    J = jax.jit(jax.jacfwd(jax.jacrev(f)))(v)
    assert np.abs(np.asarray(J - Hr)).max() <= 1e-10 * np.abs(np.asarray(Hr)).max()


def test_inv_sample_refuses_positions_outside_the_matrix():
    K = _matrix("spd")
    with pytest.raises(lo.ShapeError, match=r"\(3, 40\) is outside"):
        adj.inv_sample(K, [3], [40])
    with pytest.raises(lo.ShapeError, match="one length"):
        adj.inv_sample(K, [0, 1], [0])


def test_eager_logdet_frees_its_factorization_and_is_counted():
    K = _matrix("general")
    adj.reset_stats()
    before = STORE.keys()
    s, ld = adj.slogdet(K)
    st = adj.stats()
    assert (st.factorizations, st.queries) == (1, 1), st
    assert not STORE.keys() - before   # freed: nothing this call made is alive
    ref = np.linalg.slogdet(K.to_scipy().toarray())
    assert float(s) == ref[0] and abs(float(ld) - ref[1]) <= 1e-12 * abs(ref[1])


def _tight_binding(L, complex_hop, seed=0):
    fam, eps = lo.testing.tight_binding(L, complex_hop, seed=seed)
    return fam(eps)


@pytest.mark.parametrize("complex_hop", [False, True])
def test_eigsh_values_and_vectors_match_dense_eigh(complex_hop):
    H = _tight_binding(5, complex_hop)
    P, v = H.pattern, jnp.asarray(H.values)
    n = P.shape[0]
    wgt = jnp.asarray(np.random.default_rng(4).uniform(0, 1, n))

    def f(x):   # eigenvalues and a phase-invariant function of an eigenvector
        w, V = adj.eigsh(lo.Sparse(x, P), 3, sigma=-5.0)
        return w[0] + 0.5 * w[2] + jnp.sum(wgt * jnp.abs(V[:, 1]) ** 2)

    def ref(x):
        a = _dense(x, P)
        a = (a + jnp.conj(a).T) / 2   # eigh reads a Hermitian matrix
        w, V = jnp.linalg.eigh(a)
        return w[0] + 0.5 * w[2] + jnp.sum(wgt * jnp.abs(V[:, 1]) ** 2)

    assert np.isclose(float(f(v)), float(ref(v)), rtol=1e-12)
    # Hermitian directions (what a Hamiltonian family's tangents are): jvp against dense eigh
    D = np.random.default_rng(6).standard_normal(P.nnz)
    Dm = sp.csr_array((D, P.indices, P.indptr), shape=P.shape)
    Dm = (Dm + Dm.conj().T) / 2
    dv = jnp.asarray(np.asarray(Dm[P.rows, P.indices]).ravel().astype(np.asarray(v).dtype))
    t = jax.jit(lambda x, d: jax.jvp(f, (x,), (d,))[1])(v, dv)
    tr = jax.jvp(ref, (v,), (dv,))[1]
    assert abs(float(t) - float(tr)) <= 1e-8 * max(1.0, abs(float(tr)))
    # reverse mode contracted with the same Hermitian direction (JAX convention: no conj)
    g = jax.grad(f)(v)
    gr = jax.grad(ref)(v)
    assert abs(float(jnp.real(jnp.sum(g * dv))) - float(jnp.real(jnp.sum(gr * dv)))) <= \
        1e-8 * max(1.0, abs(float(tr)))


def test_eigsh_under_vmap_and_jit():
    H = _tight_binding(4, False)
    P, v = H.pattern, jnp.asarray(H.values)
    lam0 = jax.jit(jax.vmap(jax.grad(lambda x: adj.eigsh(lo.Sparse(x, P), 1, sigma=-5.0)[0][0])))
    g = np.asarray(lam0(jnp.stack([v, 2 * v])))
    for x, gx in zip((v, 2 * v), g):
        a = np.asarray(_dense(x, P))
        w, V = np.linalg.eigh(a)
        i = int(np.argmin(np.abs(w + 5.0)))                    # the eigenvalue nearest sigma
        ref = np.outer(V[:, i], V[:, i])[P.rows, P.indices]   # ∂λ/∂values = v vᵀ on the pattern
        assert np.abs(gx - ref).max() <= 1e-10
