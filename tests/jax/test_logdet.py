"""Issue 18, JAX: adj.slogdet / adj.logdet, adj.inv_sample and adj.eigsh under grad, jvp,
vmap and jit, against dense jnp references (jax.test_util.check_grads judges the convention);
one host factorization per linearization point for logdet."""

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


def test_logdet_one_factorization_per_linearization_point(monkeypatch):
    K = _matrix("spd")
    P, v = K.pattern, jnp.asarray(K.values)
    calls = []
    real = _jax_logdet._init
    monkeypatch.setattr(_jax_logdet, "_init", lambda *a: calls.append(1) or real(*a))
    f = jax.jit(jax.value_and_grad(lambda x: adj.logdet(lo.Sparse(x, P), posdef=True)))
    f(v)
    assert len(calls) == 1
    calls.clear()
    jax.jit(jax.vmap(jax.grad(lambda x: adj.logdet(lo.Sparse(x, P), posdef=True))))(
        jnp.stack([v, 2 * v, 3 * v]))
    assert len(calls) == 3    # one per batch member


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
