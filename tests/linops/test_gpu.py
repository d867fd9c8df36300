"""GPU paths (cupy and jax on CUDA). Skipped with a reason where no GPU is visible; every test
compares against the numpy path on the same data."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
import adjoints as ad
from tests._cases.backends import CUPY, CUPY_REASON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(CUPY is None, reason=str(CUPY_REASON))]

rng = np.random.default_rng(5)


def poisson2d(m):
    import pyamg

    return pyamg.gallery.poisson((m, m), format="csr")


def to_cp(x):
    return CUPY.asarray(x)


def test_spmm_both_orders_and_sddmm_match_numpy():
    cp = CUPY
    S = sp.random(300, 200, 0.05, random_state=1, format="csr")
    A_np = lo.aslinop(S)
    A_cp = lo.Sparse(cp.asarray(A_np.values), A_np.pattern)
    X = rng.standard_normal((200, 7))
    Z = rng.standard_normal((5, 300))
    np.testing.assert_allclose(cp.asnumpy(A_cp @ cp.asarray(X)), S @ X, atol=1e-12)
    np.testing.assert_allclose(cp.asnumpy(cp.asarray(Z) @ A_cp), Z @ S, atol=1e-12)
    G = lo.LowRank(cp.asarray(rng.standard_normal((300, 16))), cp.asarray(rng.standard_normal((200, 16))))
    vals = lo.project(G, like=A_cp).values
    assert isinstance(vals, cp.ndarray)
    Gn = lo.LowRank(cp.asnumpy(G.U), cp.asnumpy(G.V))
    np.testing.assert_allclose(cp.asnumpy(vals), lo.project(Gn, like=A_np).values, atol=1e-12)


@pytest.mark.parametrize("order", ["A@X", "X@A"])
def test_matmul_pullback_on_gpu(order):
    cp = CUPY
    S = sp.random(50, 50, 0.1, random_state=2, format="csr") + sp.eye(50)
    A = lo.Sparse(cp.asarray(lo.aslinop(S).values), lo.aslinop(S).pattern)
    X = cp.asarray(rng.standard_normal((50, 4)))
    if order == "A@X":
        Lbar, Xbar = ad.matmul_pullback(A, X, cp.ones((50, 4)))
        Abar = Lbar
        Xbar_ref = S.T @ np.ones((50, 4))
    else:
        Xbar, Abar = ad.matmul_pullback(X.T, A, cp.ones((4, 50)))
        Xbar_ref = np.ones((4, 50)) @ S.T
    np.testing.assert_allclose(cp.asnumpy(Xbar), Xbar_ref, atol=1e-12)
    proj = lo.project(Abar, like=A)
    assert isinstance(proj.values, cp.ndarray)


@pytest.mark.parametrize("alg", [sv.LU(), sv.Cholesky(), sv.CG(rtol=1e-10, precond=sv.Jacobi(), maxiter=2000),
                                 sv.GMRES(rtol=1e-10, precond=sv.ILU())], ids=["LU", "Chol", "CG", "GMRES"])
@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense"])
def test_solve_and_pullback_on_gpu(alg, dense):
    cp = CUPY
    if dense is False and isinstance(alg, sv.Cholesky):
        with pytest.raises(sv.BackendNotSupported):
            sv.init(sv.LinearProblem(lo.Sparse(cp.asarray(lo.aslinop(poisson2d(6)).values),
                                               lo.aslinop(poisson2d(6)).pattern), cp.ones(36)), alg)
        return
    S = poisson2d(8)
    An = lo.aslinop(S)
    A = lo.Dense(cp.asarray(S.toarray())) if dense else lo.Sparse(cp.asarray(An.values), An.pattern)
    b = cp.asarray(rng.standard_normal(64))
    sol = sv.solve(sv.LinearProblem(A, b, hermitian=True, posdef=True), alg)
    assert isinstance(sol.u, cp.ndarray)
    np.testing.assert_allclose(S @ cp.asnumpy(sol.u), cp.asnumpy(b), atol=1e-8)
    g = ad.solve_pullback(sol, cp.ones(64))
    lam_ref = np.linalg.solve(S.toarray().T, np.ones(64))
    np.testing.assert_allclose(cp.asnumpy(g.b), lam_ref, atol=1e-8)
    assert sol.stats.factorizations == 1


def test_family_and_amg_on_gpu():
    cp = CUPY
    fam, b = lo.testing.poisson_family(10)
    theta = cp.asarray(rng.random(fam.n_params) + 0.5)
    K = fam(theta)
    assert isinstance(K.values, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(K.values), fam(cp.asnumpy(theta)).values, atol=1e-14)
    sol = sv.solve(sv.LinearProblem(K, cp.asarray(b)), sv.LU())
    dtheta = fam.pullback(ad.solve_pullback(sol, cp.ones(K.shape[0])).A)
    sol_n = sv.solve(sv.LinearProblem(fam(cp.asnumpy(theta)), b), sv.LU())
    ref = fam.pullback(ad.solve_pullback(sol_n, np.ones(K.shape[0])).A)
    np.testing.assert_allclose(cp.asnumpy(dtheta), ref, atol=1e-10)
    with pytest.raises(sv.BackendNotSupported, match="CPU-only"):
        sv.init(sv.LinearProblem(K, cp.asarray(b)), sv.CG(precond=sv.AMG()))


def test_snapshot_rule_on_gpu():
    """Editing the cupy array you passed never reaches the operator or the cache."""
    cp = CUPY
    An = lo.aslinop(poisson2d(5))
    v = cp.asarray(An.values)
    A = lo.Sparse(v, An.pattern)
    assert A.values is not v
    cache = sv.init(sv.LinearProblem(A, cp.ones(25)), sv.LU())
    u1 = cache.solve()
    v *= 2.0
    np.testing.assert_allclose(cp.asnumpy(cache.solve()), cp.asnumpy(u1), atol=0)
    assert cache.stats.numeric_refactorizations == 0 and cache.stats.factorizations == 1


def test_jax_on_gpu_solve_and_matmul_without_callbacks():
    import jax
    import jax.numpy as jnp

    import adjoints.jax as adj

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("jax sees no GPU")
    S = poisson2d(6) + 0.1 * sp.random(36, 36, 0.05, random_state=3)
    A = lo.aslinop(S.tocsr())
    v = jax.device_put(jnp.asarray(A.values), gpus[0])
    b = jax.device_put(jnp.arange(36.0), gpus[0])
    f = lambda v, b: jnp.sum(jnp.sin(adj.solve(lo.Sparse(v, A.pattern), b)))
    adj.reset_stats()
    g = jax.jit(jax.grad(f, (0, 1)))(v, b)
    assert adj.stats().factorizations == 0  # no host callback ran
    Ad = S.toarray()
    u = np.linalg.solve(Ad, np.arange(36.0))
    lam = np.linalg.solve(Ad.T, np.cos(u))
    np.testing.assert_allclose(np.asarray(g[1]), lam, atol=1e-8)
    np.testing.assert_allclose(np.asarray(g[0]), -lam[A.pattern.rows] * u[A.pattern.indices], atol=1e-8)
    X = jax.device_put(jnp.ones((36, 3)), gpus[0])
    gX = jax.grad(lambda v, X: jnp.sum(adj.matmul(X.T, lo.Sparse(v, A.pattern)) ** 2), (0, 1))(v, X)
    assert next(iter(gX[0].devices())).platform == "gpu"
