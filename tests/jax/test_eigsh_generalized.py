"""Issue 26, JAX: adj.eigsh(K, k, sigma, M=M) under grad, jvp, vmap and jit, with the values of
BOTH K and M traced, against dense jnp references (eigh of the Cholesky-transformed pencil,
differentiated by JAX) and the numpy pullback; degenerate clusters refused by name at run time.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import adjoints as ad  # noqa: E402
import adjoints.jax as adj  # noqa: E402
import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402


def _pencil(complex_: bool, nx: int = 5):
    fK, fM = lo.testing.membrane_families(nx)
    rng = np.random.default_rng(2)
    K = fK(rng.uniform(0.5, 2, fK.n_params)).to_scipy()
    M = fM(rng.uniform(0.5, 2, fM.n_params)).to_scipy()
    if complex_:
        n = K.shape[0]
        S = sp.random(n, n, density=0.1, random_state=4, format="csr")
        K = sp.csr_array(K + 0.3j * (S - S.T))
        M = sp.csr_array(M + 0.001j * (S - S.T))
    K, M = lo.Sparse.from_scipy(sp.csr_array(K)), lo.Sparse.from_scipy(sp.csr_array(M))
    return K, M


def _dense(v, P):
    n = P.shape[0]
    return jnp.zeros((n, n), v.dtype).at[P.rows, P.indices].add(v)


def _ref_eigh(a, b):
    """Generalized eigh in jnp (differentiable): L⁻¹ A L⁻ᴴ."""
    a, b = (a + jnp.conj(a).T) / 2, (b + jnp.conj(b).T) / 2
    L = jnp.linalg.cholesky(b)
    C = jax.scipy.linalg.solve_triangular(L, a, lower=True)
    C = jax.scipy.linalg.solve_triangular(L, jnp.conj(C).T, lower=True)
    w, Y = jnp.linalg.eigh((C + jnp.conj(C).T) / 2)
    return w, jax.scipy.linalg.solve_triangular(jnp.conj(L).T, Y, lower=False)


def _herm_direction(P, dtype, seed):
    D = np.random.default_rng(seed).standard_normal(P.nnz)
    Dm = sp.csr_array((D, P.indices, P.indptr), shape=P.shape)
    Dm = (Dm + Dm.conj().T) / 2
    return jnp.asarray(np.asarray(Dm[P.rows, P.indices]).ravel().astype(dtype))


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_grad_and_jvp_in_K_and_M_match_dense_jax(complex_):
    K, M = _pencil(complex_)
    PK, PM = K.pattern, M.pattern
    vk, vm = jnp.asarray(K.values), jnp.asarray(M.values)
    n = PK.shape[0]
    wgt = jnp.asarray(np.random.default_rng(4).uniform(0, 1, n))

    def f(xk, xm):
        w, V = adj.eigsh(lo.Sparse(xk, PK), 3, sigma=0.0, M=lo.Sparse(xm, PM))
        return w[0] + 0.5 * w[2] + jnp.sum(wgt * jnp.abs(V[:, 1]) ** 2)

    def ref(xk, xm):
        w, V = _ref_eigh(_dense(xk, PK), _dense(xm, PM))
        return w[0] + 0.5 * w[2] + jnp.sum(wgt * jnp.abs(V[:, 1]) ** 2)

    # the dense references compiled (eager, op by op, they cost seconds; same arithmetic)
    assert np.isclose(float(f(vk, vm)), float(jax.jit(ref)(vk, vm)), rtol=1e-11)
    dk, dm = _herm_direction(PK, vk.dtype, 6), _herm_direction(PM, vm.dtype, 7) * 0.01
    jvp_of = lambda fn: jax.jit(lambda a, b, c, d: jax.jvp(fn, (a, b), (c, d))[1])
    t = jvp_of(f)(vk, vm, dk, dm)
    tr = jvp_of(ref)(vk, vm, dk, dm)
    assert abs(float(t) - float(tr)) <= 1e-8 * max(1.0, abs(float(tr)))
    gk, gm = jax.grad(f, argnums=(0, 1))(vk, vm)
    rk, rm = jax.jit(jax.grad(ref, argnums=(0, 1)))(vk, vm)
    for g, r, d in ((gk, rk, dk), (gm, rm, dm)):   # contracted with Hermitian directions
        a, b = float(jnp.real(jnp.sum(g * d))), float(jnp.real(jnp.sum(r * d)))
        assert abs(a - b) <= 1e-8 * max(1.0, abs(b)), (a, b)


def test_eigenvalue_gradient_equals_the_numpy_pullback_and_vmap():
    fK, fM = lo.testing.membrane_families(5)
    th = np.random.default_rng(1).uniform(0.5, 2, fK.n_params)
    K = fK(th)

    def lam0(rho):
        return adj.eigsh(K, 2, sigma=0.0, M=fM(rho))[0][0]

    rhos = jnp.stack([jnp.ones(fM.n_params), jnp.linspace(0.5, 2.0, fM.n_params)])
    G = np.asarray(jax.jit(jax.vmap(jax.grad(lam0)))(rhos))
    for rho, g in zip(np.asarray(rhos), G):
        e = sv.eigsh(K, 2, sigma=0.0, M=fM(rho))
        want = fM.pullback(ad.eigsh_pullback(e, values_bar=np.array([1.0, 0.0])).M)
        assert np.abs(g - want).max() <= 1e-10 * np.abs(want).max()


def test_degenerate_pair_is_refused_at_run_time_or_differentiated_when_invariant():
    fK, fM = lo.testing.membrane_families(6)
    th = jnp.ones(fK.n_params)
    M = fM(np.ones(fM.n_params))

    def pair(t, mode):
        w, _ = adj.eigsh(fK(t), 3, sigma=0.0, M=M, degenerate=mode)
        return w[1] + w[2]

    with pytest.raises(Exception, match="coincide"):
        jax.block_until_ready(jax.jit(jax.grad(lambda t: pair(t, "raise")))(th))
    g = np.asarray(jax.grad(lambda t: pair(t, "invariant"))(th))
    e = sv.eigsh(fK(np.asarray(th)), 3, sigma=0.0, M=M)
    want = fK.pullback(ad.eigsh_pullback(e, values_bar=np.array([0.0, 1.0, 1.0])).K)
    assert np.abs(g - want).max() <= 1e-10 * np.abs(want).max()
    with pytest.raises(Exception, match="was not computed"):   # k = 2 cuts the pair
        jax.grad(lambda t: adj.eigsh(fK(t), 2, sigma=0.0, M=M, degenerate="invariant")[0][1])(th)
