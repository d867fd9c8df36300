"""Operator cotangents (issue 19, item 3): every pullback of adjoints accepts Ȳ as a linops
operator (Identity, Diagonal, Sparse, LowRank, ...) and returns lazy results; trace_pullback
gives ∂ Re tr(L R) without an m×m array; misuse is named."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv

rng = np.random.default_rng(11)


def rnd(shape, complex_):
    a = rng.standard_normal(shape)
    return a + 1j * rng.standard_normal(shape) if complex_ else a


def cotangent_ops(m, p, complex_):
    """Ȳ of shape (m, p) as operators of each kind (square kinds only when m == p)."""
    out = {"lowrank": lo.LowRank(rnd((m, 2), complex_), rnd((p, 2), complex_)),
           "rankone": lo.RankOne(rnd(m, complex_), rnd(p, complex_)),
           "sparse": lo.aslinop(sp.random(m, p, 0.3, random_state=1, format="csr")
                                * (1 + 1j if complex_ else 1)),
           "scipy": sp.random(m, p, 0.3, random_state=2, format="csr"),
           "dense-op": lo.Dense(rnd((m, p), complex_))}
    if m == p:
        out |= {"identity": lo.Identity(m), "diagonal": lo.Diagonal(rnd(m, complex_)),
                "scaled-identity": 2.5 * lo.Identity(m)}
    return out


def dense(x):
    if isinstance(x, lo.LinearOperator):
        return lo.to_dense(x)
    if sp.issparse(x):
        return x.toarray()
    return np.asarray(x)


CASES = ["op@dense", "dense@op", "op@op", "dense@dense"]


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("square", [True, False], ids=["square", "rect"])
def test_matmul_pullback_takes_operator_cotangents(case, complex_, square):
    m, k = 6, 5
    p = m if square else 4
    A = sp.random(m, k, 0.5, random_state=3, format="csr") * (1 - 2j if complex_ else 1)
    B = sp.random(k, p, 0.5, random_state=4, format="csr")
    L = {"op@dense": A, "dense@op": rnd((m, k), complex_), "op@op": A,
         "dense@dense": rnd((m, k), complex_)}[case]
    R = {"op@dense": rnd((k, p), complex_), "dense@op": B, "op@op": lo.aslinop(B),
         "dense@dense": rnd((k, p), complex_)}[case]
    Ld, Rd = dense(L), dense(R)
    for name, Ybar in cotangent_ops(m, p, complex_).items():
        Lbar, Rbar = ad.matmul_pullback(L, R, Ybar)
        assert isinstance(Lbar, lo.LinearOperator) and isinstance(Rbar, lo.LinearOperator), name
        Yd = dense(Ybar)
        np.testing.assert_allclose(lo.to_dense(Lbar), Yd @ Rd.conj().T, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(lo.to_dense(Rbar), Ld.conj().T @ Yd, atol=1e-12, err_msg=name)
        # the same numbers as the array cotangent
        La, Ra = ad.matmul_pullback(L, R, Yd)
        np.testing.assert_allclose(lo.to_dense(Lbar), dense(La), atol=1e-12, err_msg=name)
        np.testing.assert_allclose(lo.to_dense(Rbar), dense(Ra), atol=1e-12, err_msg=name)


def test_identity_cotangent_is_structural():
    """Ȳ = I drops out: L̄ is Rᴴ itself (a view of R's factors), R̄ is Lᴴ."""
    K = lo.aslinop(sp.random(50, 50, 0.1, random_state=0, format="csr"))
    R = lo.LowRank(rng.standard_normal((50, 3)), rng.standard_normal((50, 3)))
    Kbar, Rbar = ad.matmul_pullback(K, R, lo.Identity(50))
    assert isinstance(Kbar, lo.LowRank) and lo.payload_nbytes(Kbar) == lo.payload_nbytes(R)
    np.testing.assert_allclose(lo.to_dense(Rbar), lo.to_dense(K).T, atol=0)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_trace_pullback_against_finite_differences(complex_):
    """f = Re tr(L R) (scaled): L̄ and R̄ by central differences on every entry, real and
    imaginary directions (df = Re⟨L̄, dL⟩)."""
    m, k = 4, 3
    L, R = rnd((m, k), complex_), rnd((k, m), complex_)
    scale = 0.7
    Lbar, Rbar = ad.trace_pullback(L, R, scale)
    assert isinstance(Lbar, lo.LinearOperator) and isinstance(Rbar, lo.LinearOperator)
    f = lambda L_, R_: scale * np.trace(L_ @ R_).real
    h = 1e-6
    for X, Xbar, which in ((L, Lbar, 0), (R, Rbar, 1)):
        fd = np.zeros(X.shape, dtype=X.dtype)
        for idx in np.ndindex(X.shape):
            for step in ((1.0, 1j) if complex_ else (1.0,)):
                E = np.zeros(X.shape, dtype=X.dtype)
                E[idx] = step * h
                args_p = (X + E, R) if which == 0 else (L, X + E)
                args_m = (X - E, R) if which == 0 else (L, X - E)
                fd[idx] += step * (f(*args_p) - f(*args_m)) / (2 * h)
        np.testing.assert_allclose(lo.to_dense(Xbar), fd, atol=1e-8)


def test_trace_pullback_never_forms_n_by_n():
    """n = 200 000: a dense n×n cotangent would take 320 GB. The cotangent of a sparse H in
    f = tr(H R) with R low rank is R's factors; its projection on H's pattern is O(nnz)."""
    n, r = 200_000, 4
    H = sp.csr_array((rng.standard_normal(5 * n), (np.repeat(np.arange(n), 5),
                                                  rng.integers(0, n, 5 * n))), shape=(n, n))
    R = lo.LowRank(rng.standard_normal((n, r)), rng.standard_normal((n, r)))
    Hop = lo.aslinop(H)
    tracemalloc.start()
    Hbar, Rbar = ad.trace_pullback(Hop, R)
    pull_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    grad = lo.project(Hbar, like=Hop)
    project_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert isinstance(Hbar, lo.LowRank) and lo.payload_nbytes(Hbar) == lo.payload_nbytes(R)
    # Hbar = Rᴴ is R's own factors; Rbar = Hᴴ is the sparse adjoint (transposed pattern, O(nnz))
    assert pull_peak < 24 * H.nnz, f"trace_pullback allocated {pull_peak / 1e6:.1f} MB"
    assert project_peak < 3 * 8 * H.nnz * r, f"project peak {project_peak / 1e6:.1f} MB"  # SDDMM
    assert project_peak < 1e-3 * 8 * n * n
    # the numbers: ∂ tr(H R)/∂H_ij = R_ji on every stored entry
    rows, cols = Hop.pattern.rows, Hop.pattern.indices
    want = lo.sample(R, cols, rows)
    np.testing.assert_allclose(grad.values, want, rtol=1e-12)
    assert isinstance(Rbar, lo.LinearOperator)


def test_inv_pullback_takes_operator_cotangents():
    n = 6
    A = rng.standard_normal((n, n)) + n * np.eye(n)
    cache = sv.init(sv.LinearProblem(A), sv.LU())
    Ainv = np.linalg.inv(A)
    for Ybar in (lo.Identity(n), lo.Diagonal(rng.standard_normal(n)),
                 lo.aslinop(sp.random(n, n, 0.4, random_state=0, format="csr")),
                 lo.LowRank(rng.standard_normal((n, 2)), rng.standard_normal((n, 2)))):
        G = ad.inv_pullback(cache, Ybar)
        assert isinstance(G, lo.LinearOperator)
        np.testing.assert_allclose(lo.to_dense(G), -Ainv.T @ lo.to_dense(Ybar) @ Ainv.T, atol=1e-12)
    assert cache.stats.factorizations == 1


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_solve_pullback_takes_operator_cotangents(complex_):
    n, k = 7, 5
    A = rnd((n, n), complex_) + n * np.eye(n)
    B = rnd((n, k), complex_)
    for ubar in (lo.LowRank(rnd((n, 2), complex_), rnd((k, 2), complex_)),
                 lo.RankOne(rnd(n, complex_), rnd(k, complex_)),
                 lo.aslinop(sp.random(n, k, 0.4, random_state=2, format="csr"))):
        sol = sv.solve(sv.LinearProblem(A, B), sv.LU())
        g = ad.solve_pullback(sol, ubar)
        ref = ad.solve_pullback(sv.solve(sv.LinearProblem(A, B), sv.LU()), lo.to_dense(ubar))
        np.testing.assert_allclose(lo.to_dense(g.A), lo.to_dense(ref.A), atol=1e-12)
        np.testing.assert_allclose(dense(g.b), ref.b, atol=1e-12)
        if isinstance(ubar, (lo.RankOne, lo.LowRank)):
            assert isinstance(g.A, lo.LowRank) and isinstance(g.b, lo.LowRank)
            assert g.A.rank == g.b.rank == (1 if isinstance(ubar, lo.RankOne) else 2)  # r solves
        assert sol.stats.factorizations == 1 and sol.stats.adjoint_solves == 1
    # u = A⁻¹ I: the cotangent of f = Re tr(A⁻¹) through the solve is ū = I
    sol = sv.solve(sv.LinearProblem(A, np.eye(n)), sv.LU())
    g = ad.solve_pullback(sol, lo.Identity(n))
    Ainv = np.linalg.inv(A)
    np.testing.assert_allclose(lo.to_dense(g.A), -(Ainv @ Ainv).conj().T, atol=1e-12)


def test_misuse_is_named():
    n = 576
    K = sp.random(n, n, 0.01, random_state=0, format="csr")
    R = rng.standard_normal((n, n))
    # the first-hour case: Ybar = I on equal shapes used to say "(576, 576) but (576, 576)"
    Kbar, _ = ad.matmul_pullback(K, R, lo.Identity(n))
    np.testing.assert_allclose(lo.to_dense(Kbar), R.T, atol=0)
    x = rng.standard_normal(n)
    with pytest.raises(lo.ShapeError, match=r"Ybar is an operator of shape \(576, 576\) but "
                                            r"Y = L @ R is a vector of shape \(576,\)"):
        ad.matmul_pullback(K, x, lo.Identity(n))
    with pytest.raises(lo.ShapeError, match=r"Ybar.shape=\(3, 3\) but Y = L @ R has shape \(576, 576\)"):
        ad.matmul_pullback(K, R, lo.Identity(3))
    with pytest.raises(lo.ShapeError, match=r"Ybar.shape=\(576,\) but Y = L @ R has shape \(576, 576\)"):
        ad.matmul_pullback(K, R, x)
    with pytest.raises(TypeError, match="Ybar must be an array or a linops operator, got a list"):
        ad.matmul_pullback(K, x, [1.0] * n)
    with pytest.raises(TypeError, match="Ybar must be an array of Y's shape \\(576,\\) or a linops "
                                        "operator, got str"):
        ad.matmul_pullback(K, x, "ones")
    with pytest.raises(lo.ShapeError, match=r"L.shape=\(576, 576\) and R.shape=\(3,\): the inner "
                                            r"dimensions differ \(576 vs 3\)"):
        ad.matmul_pullback(K, np.ones(3), np.ones(576))
    with pytest.raises(lo.ShapeError, match=r"tr\(L R\) needs L \(m, k\) and R \(k, m\)"):
        ad.trace_pullback(np.ones((3, 2)), np.ones((2, 4)))
    prob = sv.LinearProblem(np.eye(2) * 3, np.ones(2))
    with pytest.raises(TypeError, match="got a LinearProblem that has not been solved: solve it "
                                        "first, sol = sv.solve\\(prob\\)"):
        ad.solve_pullback(prob, np.ones(2))
    sol = sv.solve(prob)
    with pytest.raises(lo.ShapeError, match=r"ubar is an operator of shape \(2, 2\) but u.shape=\(2,\): "
                                            r"an operator cotangent needs a matrix u"):
        ad.solve_pullback(sol, lo.Identity(2))
