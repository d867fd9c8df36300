"""adjoints.jax: check_grads (tight), agreement with dense jax autodiff, factorization counts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from jax.experimental import sparse as jsp
from jax.test_util import check_grads

import linops as lo
import adjoints.jax as adj

TOL = dict(order=1, modes=["rev"], atol=1e-7, rtol=1e-7, eps=1e-6)
rng = np.random.default_rng(11)


def matrix(kind, n=12):
    S = sp.random(n, n, 0.25, random_state=4) + sp.eye(n) * 4
    if kind == "real":
        return sp.csr_matrix(S)
    C = S + 1j * sp.random(n, n, 0.25, random_state=5)
    if kind == "complex_symmetric":
        return sp.csr_matrix(C + C.T)
    if kind == "hermitian":
        return sp.csr_matrix(C @ C.conj().T + 4 * sp.eye(n))
    return sp.csr_matrix(C)


def dense_of(values, P):
    return jnp.zeros(P.shape, values.dtype).at[P.rows, P.indices].set(values)


@pytest.mark.parametrize("kind", ["real", "hermitian", "complex_symmetric", "complex"])
def test_sparse_solve_grads_vs_fd_and_dense_jax(kind):
    A = lo.aslinop(matrix(kind))
    P, v = A.pattern, jnp.asarray(A.values)
    b = jnp.asarray(rng.standard_normal(12) + (1j * rng.standard_normal(12) if kind != "real" else 0))
    c = jnp.asarray(rng.standard_normal(12))

    def f(v, b):
        u = adj.solve(lo.Sparse(v, P), b)
        return jnp.real(jnp.sum(jnp.sin(u) * c)) + jnp.real(jnp.vdot(u, u))

    def f_dense(v, b):
        u = jnp.linalg.solve(dense_of(v, P), b)
        return jnp.real(jnp.sum(jnp.sin(u) * c)) + jnp.real(jnp.vdot(u, u))

    check_grads(f, (v, b), **TOL)
    g, gd = jax.grad(f, (0, 1))(v, b), jax.grad(f_dense, (0, 1))(v, b)
    scale = float(jnp.abs(gd[0]).max())
    np.testing.assert_allclose(g[0], gd[0], atol=1e-12 * scale)
    np.testing.assert_allclose(g[1], gd[1], atol=1e-12 * scale)


def test_one_factorization_per_grad_also_under_jit():
    A = lo.aslinop(matrix("real"))
    P = A.pattern
    f = lambda v, b: jnp.sum(adj.solve(lo.Sparse(v, P), b) ** 2)
    g = jax.jit(jax.grad(f, (0, 1)))
    v, b = jnp.asarray(A.values), jnp.ones(12)
    for k in range(1, 4):
        adj.reset_stats()
        g(v * k, b)
        s = adj.stats()
        assert (s.factorizations, s.forward_solves, s.transpose_solves, s.misses) == (1, 1, 1, 0)


def test_vmap_over_b_factorizes_once_and_grads_are_right():
    A = lo.aslinop(matrix("complex"))
    P, v = A.pattern, jnp.asarray(A.values)
    B = jnp.asarray(rng.standard_normal((5, 12)) + 0j)
    adj.reset_stats()
    U = jax.vmap(lambda b: adj.solve(lo.Sparse(v, P), b))(B)
    assert adj.stats().factorizations == 1
    np.testing.assert_allclose(np.asarray(U), np.linalg.solve(A.to_scipy().toarray(), np.asarray(B).T).T, atol=1e-12)
    h = lambda v: jnp.real(jnp.sum(jax.vmap(lambda b: adj.solve(lo.Sparse(v, P), b))(B) ** 2))
    check_grads(h, (v,), **TOL)
    jax.jit(jax.grad(h))(v)


def test_multi_rhs_b_matrix():
    A = lo.aslinop(matrix("real"))
    P, v = A.pattern, jnp.asarray(A.values)
    B = jnp.asarray(rng.standard_normal((12, 3)))
    check_grads(lambda v, B: jnp.sum(jnp.cos(adj.solve(lo.Sparse(v, P), B))), (v, B), **TOL)


def test_bcoo_and_dense_inputs():
    Ad = matrix("real").toarray()
    idx = np.argwhere(Ad != 0)
    data = jnp.asarray(Ad[idx[:, 0], idx[:, 1]])
    b = jnp.arange(12.0)

    def f_bcoo(data, b):
        A = jsp.BCOO((data, jnp.asarray(idx)), shape=Ad.shape)
        return jnp.sum(jnp.sin(adj.solve(A, b)))

    check_grads(f_bcoo, (data, b), **TOL)
    check_grads(lambda A, b: jnp.sum(jnp.sin(adj.solve(A, b))), (jnp.asarray(Ad), b), **TOL)
    gA = jax.grad(lambda A: jnp.sum(adj.solve(A, b)))(jnp.asarray(Ad))
    assert gA.shape == Ad.shape  # dense A: dense cotangent, by design


def test_family_inside_traced_function_matches_numpy_path():
    import solvers as sv
    import adjoints as ad

    nx = 8
    n = (nx + 1) ** 2
    ix = np.arange(n).reshape(nx + 1, nx + 1)
    dofs = np.stack([ix[:-1, :-1].ravel(), ix[:-1, 1:].ravel(), ix[1:, 1:].ravel(), ix[1:, :-1].ravel()], 1)
    Ke = np.array([[4, -1, -2, -1], [-1, 4, -1, -2], [-2, -1, 4, -1], [-1, -2, -1, 4]]) / 6.0
    fam = lo.AffineSparse.from_elements(Ke, dofs, n, fixed=ix[0])
    a = rng.standard_normal(fam.shape[0])
    bvec = np.ones(fam.shape[0])
    theta = jnp.asarray(rng.random(nx * nx) + 0.5)
    f = lambda th: jnp.dot(jnp.asarray(a), adj.solve(fam(th), jnp.asarray(bvec)))
    check_grads(f, (theta,), **TOL)
    adj.reset_stats()
    gj = jax.jit(jax.grad(f))(theta)
    assert adj.stats().factorizations == 1
    sol = sv.solve(sv.LinearProblem(fam(np.asarray(theta)), bvec), sv.LU())
    gn = fam.pullback(ad.solve_pullback(sol, a).A)
    np.testing.assert_allclose(np.asarray(gj), gn, atol=1e-12 * np.abs(gn).max())


@pytest.mark.parametrize("order", ["A@X", "X@A", "x@A", "A@x"])
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_matmul_both_orders_grads(order, complex_):
    A = lo.aslinop(matrix("complex" if complex_ else "real"))
    P, v = A.pattern, jnp.asarray(A.values)
    X = jnp.asarray(rng.standard_normal((12, 3)) + (1j * rng.standard_normal((12, 3)) if complex_ else 0))
    fns = {"A@X": lambda S, X: adj.matmul(S, X), "X@A": lambda S, X: adj.matmul(X.T, S),
           "x@A": lambda S, X: adj.matmul(X[:, 0], S), "A@x": lambda S, X: adj.matmul(S, X[:, 0])}
    dense_fns = {"A@X": lambda D, X: D @ X, "X@A": lambda D, X: X.T @ D,
                 "x@A": lambda D, X: X[:, 0] @ D, "A@x": lambda D, X: D @ X[:, 0]}
    f = lambda v, X: jnp.real(jnp.sum(jnp.sin(fns[order](lo.Sparse(v, P), X))))
    fd = lambda v, X: jnp.real(jnp.sum(jnp.sin(dense_fns[order](dense_of(v, P), X))))
    check_grads(f, (v, X), **TOL)
    g, gd = jax.grad(f, (0, 1))(v, X), jax.grad(fd, (0, 1))(v, X)
    np.testing.assert_allclose(g[0], gd[0], atol=1e-12)
    np.testing.assert_allclose(g[1], gd[1], atol=1e-12)
    jax.jit(jax.grad(f, (0, 1)))(v, X)


def test_gpu_branch_runs_on_cpu_too():
    """The device-resident branch (cuSOLVER spsolve on a GPU) falls back to scipy on the CPU,
    so its custom VJP is checked here as well."""
    A = lo.aslinop(matrix("real"))
    P, v = A.pattern, jnp.asarray(A.values)
    solve_dev = adj._sparse_solve_gpu(P)
    b = jnp.asarray(rng.standard_normal(12))
    check_grads(lambda v, b: jnp.sum(jnp.sin(solve_dev(v, b))), (v, b), **TOL)
    B = jnp.asarray(rng.standard_normal((12, 2)))
    check_grads(lambda v, B: jnp.sum(jnp.sin(solve_dev(v, B))), (v, B), **TOL)
    assert adj._platform(v) == "cpu"
