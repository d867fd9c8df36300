"""Explicit pullbacks vs central finite differences and vs dense jax.grad, real and complex."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
import adjoints as ad

rng = np.random.default_rng(7)


def random_matrix(n, kind):
    """'real', 'hermitian' (complex HPD), 'complex_symmetric' (Aᵀ = A ≠ Aᴴ), 'complex'."""
    M = rng.standard_normal((n, n))
    if kind == "real":
        return M + n * np.eye(n)
    C = M + 1j * rng.standard_normal((n, n))
    if kind == "hermitian":
        return C @ C.conj().T + n * np.eye(n)
    if kind == "complex_symmetric":
        return C + C.T + n * np.eye(n)
    return C + n * np.eye(n)


def fd_matrix_gradient(f, A, entries, h=1e-6):
    """Ā[i, j] = ∂f/∂Re A_ij + i ∂f/∂Im A_ij by central differences (DESIGN.md convention)."""
    out = []
    for i, j in entries:
        E = np.zeros_like(A)
        E[i, j] = 1
        d = (f(A + h * E) - f(A - h * E)) / (2 * h)
        if np.iscomplexobj(A):
            d = d + 1j * (f(A + 1j * h * E) - f(A - 1j * h * E)) / (2 * h)
        out.append(d)
    return np.array(out)


def test_small_exact_case():
    A = np.array([[4.0, 1.0], [2.0, 3.0]])
    sol = sv.solve(sv.LinearProblem(A, np.array([1.0, 2.0])))
    g = ad.solve_pullback(sol, np.ones(2))  # f = sum(u)
    np.testing.assert_allclose(g.b, [0.1, 0.3], atol=1e-15)
    assert isinstance(g.A, lo.RankOne)
    np.testing.assert_allclose(lo.to_dense(g.A), -np.outer([0.1, 0.3], sol.u), atol=1e-15)
    np.testing.assert_allclose(sol.u, [0.1, 0.6], atol=1e-15)


@pytest.mark.parametrize("kind", ["real", "hermitian", "complex_symmetric", "complex"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_solve_pullback_vs_finite_differences_and_jax(kind, sparse):
    n = 6
    A = random_matrix(n, kind)
    if sparse:
        A = A * (np.abs(rng.standard_normal((n, n))) > 0.6) + n * np.eye(n)
    dtype = A.dtype
    b = rng.standard_normal(n).astype(dtype)
    c = rng.standard_normal(n) + (1j * rng.standard_normal(n) if dtype.kind == "c" else 0)

    def f(A_, b_=b):  # real scalar: Re(cᴴ u) + ‖u‖²/2
        u = np.linalg.solve(A_, b_)
        return np.real(np.vdot(c, u)) + 0.5 * np.vdot(u, u).real

    Aop = lo.aslinop(sp.csr_matrix(A)) if sparse else A
    cache = sv.init(sv.LinearProblem(Aop, b), sv.LU())
    u = cache.solve()
    g = ad.solve_pullback(cache, c + u)  # ū = ∂f/∂ū (df = Re⟨ū, du⟩)
    assert cache.stats.factorizations == 1 and cache.stats.adjoint_solves == 1
    entries = [(i, j) for i in range(n) for j in range(n)]  # structural zeros included
    Abar_fd = fd_matrix_gradient(f, A, entries)
    Abar = lo.sample(g.A, np.array([e[0] for e in entries]), np.array([e[1] for e in entries]))
    scale = np.abs(Abar_fd).max()
    np.testing.assert_allclose(Abar, Abar_fd, atol=1e-7 * scale)  # FD-limited
    # b̄ by finite differences on b
    bbar_fd = []
    for k in range(n):
        e = np.zeros(n, dtype=dtype)
        e[k] = 1
        d = (f(A, b + 1e-6 * e) - f(A, b - 1e-6 * e)) / 2e-6
        if dtype.kind == "c":
            d = d + 1j * (f(A, b + 1e-6j * e) - f(A, b - 1e-6j * e)) / 2e-6
        bbar_fd.append(d)
    np.testing.assert_allclose(g.b, bbar_fd, atol=1e-7 * scale)
    # dense jax autodiff, float64; JAX returns conj of our cotangent for real f of complex input
    import jax
    import jax.numpy as jnp

    def fj(A_, b_):
        u_ = jnp.linalg.solve(A_, b_)
        return jnp.real(jnp.vdot(jnp.asarray(c), u_)) + 0.5 * jnp.real(jnp.vdot(u_, u_))

    gA, gb = jax.grad(fj, argnums=(0, 1))(jnp.asarray(A), jnp.asarray(b))
    gA, gb = np.conj(np.asarray(gA)), np.conj(np.asarray(gb))
    np.testing.assert_allclose(lo.to_dense(g.A), gA, atol=1e-12 * scale)  # tight: catches a missing conj
    np.testing.assert_allclose(g.b, gb, atol=1e-12 * scale)
    if dtype.kind == "c":
        assert np.abs(lo.to_dense(g.A) - np.conj(gA)).max() > 1e-6 * scale  # the conj matters


def test_multi_rhs_pullback_is_low_rank_and_cotangents_add_lazily():
    A = random_matrix(8, "complex")
    B = rng.standard_normal((8, 3)) + 0j
    cache = sv.init(sv.LinearProblem(A, B), sv.LU())
    sol_U = cache.solve()
    g = ad.solve_pullback(cache, np.ones((8, 3)))
    assert isinstance(g.A, lo.LowRank) and g.A.rank == 3
    Ainv = np.linalg.inv(A)
    lam = Ainv.conj().T @ np.ones((8, 3))
    np.testing.assert_allclose(lo.to_dense(g.A), -lam @ sol_U.conj().T, atol=1e-12)
    c1 = ad.solve_pullback(sv.solve(sv.LinearProblem(A, B[:, 0]), sv.LU()), np.ones(8)).A
    c2 = ad.solve_pullback(sv.solve(sv.LinearProblem(A, B[:, 1]), sv.LU()), np.ones(8)).A
    total = c1 + c2
    assert isinstance(total, lo.LowRank) and total.rank == 2
    np.testing.assert_allclose(lo.to_dense(total), lo.to_dense(c1) + lo.to_dense(c2), atol=1e-13)


@pytest.mark.parametrize("order", ["A@X", "X@A"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("vector", [False, True], ids=["matrix", "vector"])
def test_matmul_pullback_both_orders(order, dtype, vector):
    n, k = 7, 3
    S = sp.random(n, n, 0.4, random_state=3, dtype=np.float64) + sp.eye(n)
    A = (S + (1j * S if dtype == np.complex128 else 0)).tocsr().astype(dtype)
    Aop = lo.aslinop(A)
    X = rng.standard_normal((n,) if vector else (n, k)).astype(dtype)
    Ad = A.toarray()
    Y = (Ad @ X) if order == "A@X" else (X.T @ Ad if not vector else X @ Ad)
    Xin = X if (order == "A@X" or vector) else X.T
    C = (rng.standard_normal(Y.shape) + (1j * rng.standard_normal(Y.shape) if dtype == np.complex128 else 0)).astype(dtype)

    if order == "A@X":
        Lbar, Rbar = ad.matmul_pullback(Aop, Xin, C)
        Abar, Xbar = Lbar, Rbar
        fA = lambda A_: np.real(np.vdot(C, A_ @ Xin))
        fX = lambda X_: np.real(np.vdot(C, Ad @ X_))
    else:
        Xbar, Abar = ad.matmul_pullback(Xin, Aop, C)
        fA = lambda A_: np.real(np.vdot(C, Xin @ A_))
        fX = lambda X_: np.real(np.vdot(C, X_ @ Ad))
    assert isinstance(Abar, (lo.RankOne, lo.LowRank))
    entries = [(i, j) for i in range(n) for j in range(n)]
    fd = fd_matrix_gradient(fA, Ad, entries)
    np.testing.assert_allclose(lo.to_dense(Abar).reshape(-1), fd, atol=1e-7)
    proj = lo.project(Abar, like=Aop)
    assert proj.pattern == Aop.pattern
    np.testing.assert_allclose(proj.values, lo.to_dense(Abar)[Aop.pattern.rows, Aop.pattern.indices], atol=1e-13)
    # X̄ by the closed form and by finite differences on every entry
    flat = Xin.reshape(-1)
    Xfd = []
    for idx in range(flat.size):
        e = np.zeros_like(flat)
        e[idx] = 1
        d = (fX((flat + 1e-6 * e).reshape(Xin.shape)) - fX((flat - 1e-6 * e).reshape(Xin.shape))) / 2e-6
        if dtype == np.complex128:
            d = d + 1j * (fX((flat + 1e-6j * e).reshape(Xin.shape)) - fX((flat - 1e-6j * e).reshape(Xin.shape))) / 2e-6
        Xfd.append(d)
    np.testing.assert_allclose(np.asarray(Xbar).reshape(-1), Xfd, atol=1e-7)


@pytest.mark.parametrize("low_rank", [True, False])
def test_inv_pullback(low_rank):
    n = 6
    A = random_matrix(n, "complex")
    cache = sv.init(sv.LinearProblem(A), sv.LU())
    if low_rank:
        Ybar = lo.LowRank(rng.standard_normal((n, 2)) + 0j, rng.standard_normal((n, 2)) + 1j)
    else:
        Ybar = lo.Dense(rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)))
    Yd = lo.to_dense(Ybar)
    G = ad.inv_pullback(cache, Ybar)
    if low_rank:
        assert isinstance(G, lo.LowRank)
    f = lambda A_: np.real(np.vdot(Yd, np.linalg.inv(A_)))
    fd = fd_matrix_gradient(f, A, [(i, j) for i in range(n) for j in range(n)])
    np.testing.assert_allclose(lo.to_dense(G).reshape(-1), fd, atol=1e-7)
    Ainv = np.linalg.inv(A)
    np.testing.assert_allclose(lo.to_dense(G), -Ainv.conj().T @ Yd @ Ainv.conj().T, atol=1e-12)
    P = lo.Pattern.from_coo([0, 2, 2, 5], [1, 1, 3, 5], (n, n))
    before = cache.stats.solves + cache.stats.adjoint_solves
    proj = lo.project(G, pattern=P)
    used = cache.stats.solves + cache.stats.adjoint_solves - before
    np.testing.assert_allclose(proj.values, lo.to_dense(G)[P.rows, P.indices], atol=1e-12)
    assert cache.stats.factorizations == 1
    if not low_rank:  # only the 3 distinct columns it needs, as one block: 2 block solves
        assert used == 2
