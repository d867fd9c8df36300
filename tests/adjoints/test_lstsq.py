"""Issue 26: sparse least squares, sv.LeastSquares with sv.QR (SuiteSparseQR / LAPACK) and
sv.LSMR, and its lazy rank-2 cotangent.

x = A⁺b against numpy's pinv for tall, wide (minimum norm) and square A, real and complex,
sparse and dense; A⁺ᴴc and A⁺ᵀc from the same factorization; update on the same pattern reuses
the column order; ad.solve_pullback's Ā = r λᴴ − (Aλ) xᴴ (+ q pᴴ for wide A) against central
differences on every entry of the dense A AND jax autodiff of jnp.linalg.pinv (a missing
conjugate fails the complex case at 1e-10); rank deficiency refused by name, or the
fixed-rank derivative on request; weighted / Tikhonov as stacked families; LinearSolve.jl
#1309's non-square ∂A case.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv

SHAPES = [(9, 4), (4, 9), (6, 6)]


def _matrix(m, n, complex_, seed=0, sparse=True):
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < 0.45
    mask[np.arange(min(m, n)), np.arange(min(m, n))] = True
    a = np.where(mask, rng.standard_normal((m, n)), 0.0)
    if complex_:
        a = a + 1j * np.where(mask, rng.standard_normal((m, n)), 0.0)
    a[np.arange(min(m, n)), np.arange(min(m, n))] += 3.0
    return sp.csr_array(a) if sparse else a


def _algs():
    return [sv.QR(), sv.LSMR(rtol=1e-14)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
@pytest.mark.parametrize("alg", _algs(), ids=["QR", "LSMR"])
def test_solves_match_the_pseudo_inverse(shape, complex_, sparse, alg):
    m, n = shape
    A = _matrix(m, n, complex_, sparse=sparse)
    Ad = A.toarray() if sparse else A
    Pinv = np.linalg.pinv(Ad)
    rng = np.random.default_rng(1)
    b, c = rng.standard_normal(m), rng.standard_normal(n) + (1j if complex_ else 0) * 0.5
    cache = sv.init(sv.LeastSquares(A, b), alg)
    assert cache.stats.factorizations == 1
    assert np.abs(cache.solve() - Pinv @ b).max() <= 1e-12 * np.abs(Pinv @ b).max()
    assert np.abs(cache.solve_adjoint(c) - Pinv.conj().T @ c).max() <= 1e-12 * np.abs(c).max() * 10
    assert np.abs(cache.solve_transpose(c) - Pinv.T @ c).max() <= 1e-12 * np.abs(c).max() * 10
    B = rng.standard_normal((m, 3))
    assert np.abs(cache.solve(B) - Pinv @ B).max() <= 1e-11
    assert cache.solve(np.zeros((m, 0))).shape == (n, 0)
    assert cache.stats.factorizations == 1


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("alg", _algs(), ids=["QR", "LSMR"])
def test_gradient_against_central_differences_and_jax(shape, complex_, alg):
    """f = Re(wᴴx), x = A⁺b: Ā on EVERY entry of A (structural zeros too), b̄."""
    m, n = shape
    A = _matrix(m, n, complex_, seed=3)
    Ad = A.toarray()
    rng = np.random.default_rng(4)
    b = rng.standard_normal(m) + (1j * rng.standard_normal(m) if complex_ else 0)
    w = rng.standard_normal(n) + (1j * rng.standard_normal(n) if complex_ else 0)
    sol = sv.solve(sv.LeastSquares(A, b), alg)
    g = ad.solve_pullback(sol, w)              # x̄ = w for f = Re(wᴴx)
    assert isinstance(g.A, lo.LowRank) and g.A.shape == (m, n)
    assert g.A.factors()[0].shape[1] == (2 if m >= n else 3)
    assert sol.stats.factorizations == 1
    G = lo.to_dense(g.A)

    def f(a, bb):
        return float(np.real(np.vdot(w, np.linalg.pinv(a) @ bb)))

    h = 1e-6
    fd = np.zeros((m, n), dtype=Ad.dtype)
    for i in range(m):
        for j in range(n):
            E = np.zeros((m, n))
            E[i, j] = h
            fd[i, j] = (f(Ad + E, b) - f(Ad - E, b)) / (2 * h)
            if complex_:   # df = Re⟨Ā, dA⟩: the imaginary direction gives Im Ā
                fd[i, j] += 1j * (f(Ad + 1j * E, b) - f(Ad - 1j * E, b)) / (2 * h)
    assert np.abs(G - fd).max() <= 1e-7 * np.abs(fd).max(), np.abs(G - fd).max()
    fdb = np.array([(f(Ad, b + h * e) - f(Ad, b - h * e)) / (2 * h) for e in np.eye(m)])
    if complex_:
        fdb = fdb + 1j * np.array([(f(Ad, b + 1j * h * e) - f(Ad, b - 1j * h * e)) / (2 * h)
                                   for e in np.eye(m)])
    assert np.abs(g.b - fdb).max() <= 1e-7 * np.abs(fdb).max()
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp  # noqa: PLC0415 (optional dependency)

    def fj(ar, ai):
        a = ar + 1j * ai if complex_ else ar
        return jnp.real(jnp.vdot(jnp.asarray(w), jnp.linalg.pinv(a) @ jnp.asarray(b)))

    gr, gi = jax.grad(fj, argnums=(0, 1))(jnp.asarray(Ad.real), jnp.asarray(Ad.imag))
    ref = np.asarray(gr) + (1j * np.asarray(gi) if complex_ else 0)
    assert np.abs(G - ref).max() <= 1e-10 * np.abs(ref).max()
    # projected on A's pattern: the values' gradient, by SDDMM
    P = lo.project(g.A, like=lo.aslinop(A))
    rows, cols = A.nonzero()
    assert np.allclose(np.sort_complex(np.asarray(P.values)), np.sort_complex(G[rows, cols]))


def test_rank_deficient_A_refused_by_name_and_LSMR_gives_min_norm():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((10, 3))
    a = np.column_stack([a, a[:, 0] + a[:, 1]])              # rank 3 of 4 columns
    b = rng.standard_normal(10)
    for A in (a, sp.csr_array(a)):
        with pytest.raises(sv.RankDeficientError, match=r"rank 3 < 4"):
            sv.init(sv.LeastSquares(A, b), sv.QR())
    sol = sv.solve(sv.LeastSquares(sp.csr_array(a), b), sv.LSMR(rtol=1e-14))
    assert np.abs(sol.u - np.linalg.pinv(a) @ b).max() <= 1e-9
    with pytest.raises(sv.RankDeficientError, match="neither full column nor full row rank"):
        ad.solve_pullback(sol, np.ones(4))
    # the fixed-rank derivative: along a perturbation that keeps rank 3, against differences
    g = ad.solve_pullback(sol, np.ones(4), rank_deficient="fixed_rank")
    D = rng.standard_normal((10, 3))
    D = np.column_stack([D, D[:, 0] + D[:, 1]])              # dA keeps the dependency
    h = 1e-6
    fd = (np.sum(np.linalg.pinv(a + h * D) @ b) - np.sum(np.linalg.pinv(a - h * D) @ b)) / (2 * h)
    assert abs(lo.inner(g.A, lo.Dense(D)) - fd) <= 1e-6 * max(1, abs(fd))


def test_misuse_is_named():
    A = np.ones((3, 2)) + np.eye(3, 2)
    with pytest.raises(lo.ShapeError, match=r"square A, got A.shape=\(3, 2\).*LeastSquares"):
        sv.LinearProblem(A, np.ones(3))
    with pytest.raises(TypeError, match="least-squares problem.*sv.QR"):
        sv.init(sv.LeastSquares(A, np.ones(3)), sv.LU())
    with pytest.raises(TypeError, match="no hermitian"):
        sv.LinearProblem(A, np.ones(3), least_squares=True, posdef=True)
    cache = sv.init(sv.LeastSquares(A, np.ones(3)))
    assert cache.kind == "dense QR"
    with pytest.raises(lo.ShapeError, match=r"c.shape=\(3,\)"):
        cache.solve_adjoint(np.ones(3))                       # the adjoint takes n = 2
    with pytest.raises(lo.ShapeError):
        cache.solve(np.ones(2))
    assert sv.init(sv.LeastSquares(sp.csr_array(A))).kind == "SuiteSparseQR"
    assert sv.init(sv.LeastSquares(lo.MatrixFree((3, 2), np.float64, lambda X: A @ X,
                                                 lambda X: A.T @ X))).kind == "LSMR (scipy)"
    with pytest.raises(sv.ConvergenceError, match="normal-equation residual"):
        sv.solve(sv.LeastSquares(_matrix(40, 30, False), np.ones(40)), sv.LSMR(rtol=1e-14,
                                                                                maxiter=2))
    with pytest.raises(ValueError, match="solver must be"):
        sv.LSMR(solver="cg")
    empty = sv.init(sv.LeastSquares(np.zeros((0, 3)), np.zeros(0)))
    assert empty.solve().shape == (3,) and np.all(empty.solve() == 0)


def test_update_reuses_the_column_order_and_a_failed_update_keeps_the_cache():
    A = _matrix(30, 12, False, seed=7)
    b = np.random.default_rng(1).standard_normal(30)
    cache = sv.init(sv.LeastSquares(A, b), sv.QR())
    A2 = A.copy()
    A2.data = A2.data * 1.7 + 0.1
    cache.update(A=A2)
    assert cache.stats.numeric_refactorizations == 1 and cache.generation == 1
    assert np.abs(cache.solve() - np.linalg.pinv(A2.toarray()) @ b).max() <= 1e-12
    dup_a = A2.toarray()
    dup_a[:, 5] = 0.0                                         # an empty column: rank 11
    with pytest.raises(sv.RankDeficientError):
        cache.update(A=sp.csr_array(dup_a))
    assert cache.generation == 1
    assert np.abs(cache.solve() - np.linalg.pinv(A2.toarray()) @ b).max() <= 1e-12


def test_weighted_and_tikhonov_are_stacked_families():
    """min ‖W(A(θ)x − b)‖² + α‖Lx‖²: the stacked operator [W A(θ); √α L] is a family of its own;
    its θ-gradient against central differences of the dense normal-free solution."""
    rng = np.random.default_rng(2)
    m, n = 20, 8
    terms = [sp.csr_array(_matrix(m, n, False, seed=s) * (rng.random() + 0.5)) for s in range(3)]
    W = sp.diags(rng.uniform(0.5, 2.0, m))
    L = sp.diags([np.ones(n - 1), -np.ones(n - 1)], [0, 1], shape=(n - 1, n))
    alpha = 0.3
    Z = sp.csr_array((n - 1, n))
    fam = lo.AffineSparse.from_terms([sp.csr_array(sp.vstack([W @ T, Z])) for T in terms],
                                     offset=sp.csr_array(sp.vstack([sp.csr_array((m, n)),
                                                                    np.sqrt(alpha) * L])))
    b = rng.standard_normal(m)
    bs = np.concatenate([W @ b, np.zeros(n - 1)])
    th = np.array([1.0, 0.5, -0.3])
    sol = sv.solve(sv.LeastSquares(fam(th), bs))
    g = ad.solve_pullback(sol, np.ones(n))
    grad = fam.pullback(g.A)

    def f(t):
        At = sum(ti * T.toarray() for ti, T in zip(t, terms))
        # the regularised solution from its definition (dense, by a stacked lstsq)
        big = np.vstack([W @ At, np.sqrt(alpha) * L.toarray()])
        return float(np.sum(np.linalg.lstsq(big, bs, rcond=None)[0]))

    h = 1e-6
    fd = np.array([(f(th + h * e) - f(th - h * e)) / (2 * h) for e in np.eye(3)])
    assert np.abs(grad - fd).max() <= 1e-7 * max(1, np.abs(fd).max())


def test_linearsolve_1309_nonsquare_dA():
    """LinearSolve.jl issue #1309: the reverse-mode ∂A of a non-square solve is wrong (~90 %)
    there, because the square rule −λxᴴ (λ = A⁻ᴴx̄) is applied to A⁺. The case as the issue
    states it — a tall A, f = sum(A \\ b) — and its wide counterpart: against central
    differences on every entry; the square rule's answer is far off (what the issue saw)."""
    A = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 7.0]])
    b = np.array([1.0, 2.0, 4.0])
    for a, bb in ((A, b), (A.T.copy(), b[:2])):
        m, n = a.shape
        sol = sv.solve(sv.LeastSquares(a, bb))
        G = lo.to_dense(ad.solve_pullback(sol, np.ones(n)).A)
        h = 1e-6
        fd = np.zeros((m, n))
        for i in range(m):
            for j in range(n):
                E = np.zeros((m, n))
                E[i, j] = h
                fd[i, j] = (np.linalg.pinv(a + E) @ bb).sum() - (np.linalg.pinv(a - E) @ bb).sum()
        fd /= 2 * h
        assert np.abs(G - fd).max() <= 1e-8 * np.abs(fd).max()
        x = np.linalg.pinv(a) @ bb
        naive = -np.outer(np.linalg.pinv(a).T @ np.ones(n), x)   # the square rule on A⁺
        assert np.abs(naive - fd).max() >= 0.05 * np.abs(fd).max()


@pytest.mark.parametrize("alg,shape", [(sv.QR(), (9, 4)), (sv.QR(), (4, 9)),
                                       (sv.LSMR(rtol=1e-14), (9, 4))],
                         ids=["QR-tall", "QR-wide", "LSMR-tall"])
def test_results_are_arrays_of_the_problem_backend(alg, shape):
    """A least-squares problem with jax arrays gets jax arrays back from every solve and from
    the pullback (the factorization runs on the host), with the numbers of the numpy path."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp  # noqa: PLC0415 (optional dependency)

    m, n = shape
    A = _matrix(m, n, False, seed=5)
    b = np.random.default_rng(2).standard_normal(m)
    S = lo.Sparse.from_scipy(A)
    cases = [(lo.Sparse(jnp.asarray(S.values), S.pattern), A)]
    if isinstance(alg, sv.QR):
        cases.append((jnp.asarray(A.toarray()), A.toarray()))
    for Aj, An in cases:
        cj = sv.init(sv.LeastSquares(Aj, jnp.asarray(b)), alg)
        cn = sv.init(sv.LeastSquares(An, b), alg)
        c = np.ones(n)
        outs = [(cj.solve(), cn.solve()), (cj.solve_adjoint(jnp.asarray(c)), cn.solve_adjoint(c)),
                (cj.solve_transpose(jnp.asarray(c)), cn.solve_transpose(c))]
        if isinstance(alg, sv.QR) and m >= n:
            outs.append((cj.solve_gram(jnp.asarray(c)), cn.solve_gram(c)))
        gj, gn = ad.solve_pullback(cj, jnp.asarray(c)), ad.solve_pullback(cn, c)
        outs += [(gj.b, gn.b), *zip(gj.A.factors(), gn.A.factors())]
        for got, want in outs:
            assert isinstance(got, jax.Array), type(got)
            assert np.abs(np.asarray(got) - want).max() <= 1e-10 * max(1, np.abs(want).max())
