"""Selected inversion under row pivoting and with explicit zeros, and the counters that show
every column a query solves.

SuperLU factors Pr·A·Pc = L·U; with row exchanges A⁻¹'s diagonal and A⁻¹ on A's pattern are
not at positions of pattern(L + U), and A's explicit zeros (θₑ = 0 in a family) are in no
factor. The selected inverse must hold them all, so that ``S.diagonal()``, ``lo.diagonal``,
``lo.project`` and ``fam.pullback`` of ``sv.inverse(cache)`` need no solve; where a query does
solve (positions outside the pattern, a cache without a selected inverse), ``stats.columns``
counts each column.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv
from tests._cases.corpus import get


def _pivoting(n: int, seed: int, dtype=np.float64) -> sp.csr_array:
    """An unsymmetric pattern with a small diagonal: LU exchanges nearly every row."""
    rng = np.random.default_rng(seed)
    A = (sp.random(n, n, 2.0 / n, random_state=seed) + sp.diags(rng.uniform(1e-3, 1e-2, n))
         + 2 * sp.eye(n, k=1) + 3 * sp.eye(n, k=-1) + sp.eye(n, k=5))
    if np.dtype(dtype).kind == "c":
        A = A + 1j * sp.random(n, n, 2.0 / n, random_state=seed + 1)
    return sp.csr_array(A.astype(dtype))


def test_the_antidiagonal_has_a_selected_diagonal():
    A = sp.csr_array(np.array([[0.0, 2.0], [3.0, 0.0]]))
    cache = sv.init(sv.LinearProblem(A), sv.LU())
    S = sv.selected_inverse(cache)
    np.testing.assert_array_equal(S.diagonal(), [0.0, 0.0])
    np.testing.assert_array_equal(S.sample(np.array([0, 1]), np.array([1, 0])), [1 / 3, 1 / 2])
    np.testing.assert_array_equal(lo.diagonal(sv.inverse(cache)), [0.0, 0.0])
    assert cache.stats.columns == 0 and cache.stats.solves == 0


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_pivoted_lu_serves_the_diagonal_and_the_pattern_without_solves(dtype):
    n = 400
    A = _pivoting(n, 3, dtype)
    cache = sv.init(sv.LinearProblem(A), sv.LU())
    lu = cache.factor.lu
    assert np.count_nonzero(lu.perm_r != lu.perm_c) > n // 2      # rows really were exchanged
    Z = np.linalg.inv(A.toarray())
    scale = np.abs(Z).max()
    K = lo.Sparse.from_scipy(A)
    P = K.pattern
    assert np.abs(lo.diagonal(sv.inverse(cache)) - np.diag(Z)).max() <= 1e-12 * scale
    proj = lo.project(sv.inverse(cache), like=K)
    assert np.abs(np.asarray(proj.values) - Z[P.rows, P.indices]).max() <= 1e-12 * scale
    grad = lo.project(ad.logdet_pullback(cache), like=K)               # A⁻ᴴ on A's pattern
    assert np.abs(np.asarray(grad.values) - Z.conj().T[P.rows, P.indices]).max() <= 1e-12 * scale
    S = sv.selected_inverse(cache)
    for r, c in ((P.rows, P.indices), (P.indices, P.rows)):
        assert np.abs(S.sample(r, c) - Z[r, c]).max() <= 1e-12 * scale
    s = cache.stats
    assert (s.factorizations, s.solves, s.adjoint_solves, s.columns) == (1, 0, 0, 0)


def test_pivoted_lu_after_a_numeric_update():
    """The reused column order (``update``): the same positions, the new values."""
    A = _pivoting(200, 5)
    cache = sv.init(sv.LinearProblem(A), sv.LU())
    A2 = sp.csr_array((A.data * np.linspace(0.5, 2.0, A.nnz), A.indices, A.indptr), shape=A.shape)
    cache.update(A=A2)
    assert cache.factor.reordered
    Z = np.linalg.inv(A2.toarray())
    S = sv.selected_inverse(cache)
    P = lo.Sparse.from_scipy(A2).pattern
    scale = np.abs(Z).max()
    assert np.abs(S.sample(P.rows, P.indices) - Z[P.rows, P.indices]).max() <= 1e-12 * scale
    assert np.abs(S.diagonal() - np.diag(Z)).max() <= 1e-12 * scale


def test_explicit_zeros_theta_zero_logdet_gradient_without_solves():
    """θₑ = 0 leaves explicit zeros on K's pattern; log det's θ-gradient Re tr(K⁻¹Kₑ) needs
    K⁻¹ there, from the selected inverse and not from a column solve per entry."""
    fam, _ = lo.testing.poisson_family(6)
    rng = np.random.default_rng(4)
    theta = rng.uniform(0.5, 2.0, fam.n_params)
    theta[rng.choice(fam.n_params, fam.n_params // 3, replace=False)] = 0.0
    # keep K regular: a small shift on the free dofs (the offset keeps its own pattern)
    shifted = lo.AffineSparse.from_terms([fam(np.eye(fam.n_params)[i]) for i in range(fam.n_params)],
                                         offset=0.05 * sp.eye(fam.shape[0], format="csr"))
    K = shifted(theta)
    assert np.count_nonzero(np.asarray(K.values) == 0) > 0           # explicit zeros stored
    cache = sv.init(sv.LinearProblem(K), sv.LU())
    grad = shifted.pullback(ad.logdet_pullback(cache))
    Kd = K.to_scipy().toarray()
    Z = np.linalg.inv(Kd)
    terms = [lo.to_dense(shifted(np.eye(fam.n_params)[i]) - shifted(np.zeros(fam.n_params)))
             for i in range(fam.n_params)]
    ref = np.array([np.trace(Z @ T) for T in terms])
    assert np.abs(grad - ref).max() <= 1e-11 * np.abs(ref).max()
    s = cache.stats
    assert (s.solves, s.adjoint_solves, s.columns) == (0, 0, 0)


def test_columns_count_every_solve_a_query_makes():
    fam, b = lo.testing.poisson_family(6)
    K = fam(np.ones(fam.n_params))
    n = K.shape[0]
    Z = np.linalg.inv(K.to_scipy().toarray())
    lu = sv.init(sv.LinearProblem(K), sv.LU())
    rows, cols = np.array([0, n - 1, 2]), np.array([n - 1, 0, 0])
    _, found = sv.selected_inverse(lu).lookup(rows, cols)
    assert not found.all()                                           # two corners: solved
    got = lo.sample(sv.inverse(lu), rows, cols)
    np.testing.assert_allclose(got, Z[rows, cols], rtol=1e-12)
    assert lu.stats.columns == np.unique(cols[~found]).size
    cg = sv.init(sv.LinearProblem(K, b, posdef=True), sv.CG(rtol=1e-12))
    assert n <= 64                      # a cache without a selected inverse solves these
    got = lo.diagonal(sv.inverse(cg))
    np.testing.assert_allclose(got, np.diag(Z), rtol=1e-9)
    assert cg.stats.columns == n                                       # one per column of A⁻¹
    cg.solve(np.ones((n, 3)))
    assert cg.stats.columns == n + 3


def test_selected_inverse_positions_are_checked_like_lo_sample():
    A = sp.csr_array(np.array([[4.0, 1.0], [2.0, 3.0]]))
    S = sv.selected_inverse(sv.init(sv.LinearProblem(A), sv.LU()))
    with pytest.raises(lo.ShapeError, match=r"rows out of range \[0, 2\) .*min=-1"):
        S.sample([-1], [0])
    with pytest.raises(lo.ShapeError, match=r"cols out of range \[0, 2\) .*max=2"):
        S.sample([0], [2])
    with pytest.raises(lo.ShapeError, match="must be integers"):
        S.lookup(np.array([0.5]), np.array([0]))
    with pytest.raises(lo.ShapeError, match="1-D of equal length"):
        S.sample([0, 1], [0])


@pytest.mark.skipif(not sv.cholmod_available(), reason="scikit-sparse missing")
def test_cholmod_holds_an_explicit_zero_stored_in_one_triangle_only():
    """CHOLMOD reads one triangle: a stored zero at (i, j) without its partner (j, i) left the
    analysed pattern, and A⁻¹ there was missing from the selected inverse."""
    m = get("explicit-zeros-spd")
    S = m.sparse()
    P = lo.Sparse.from_scipy(S).pattern
    lower_only = [(i, j) for i, j in m.explicit_zeros if (j, i) not in m.explicit_zeros]
    assert lower_only                                   # the case this is about
    cache = sv.init(sv.LinearProblem(S), sv.Cholesky())
    Z = np.linalg.inv(m.a)
    vals, found = sv.selected_inverse(cache).lookup(P.rows, P.indices)
    assert found.all()
    assert np.abs(vals - Z[P.rows, P.indices]).max() <= 1e-12 * np.abs(Z).max()
    np.testing.assert_allclose(cache.solve(np.ones(m.n)), Z.sum(axis=1), rtol=1e-12)


def test_the_empty_matrix_has_an_empty_selected_inverse_on_every_engine():
    for alg in (sv.LU(), sv.CG(), sv.Cholesky()):
        cache = sv.init(sv.LinearProblem(np.zeros((0, 0))), alg)
        S = sv.selected_inverse(cache)
        assert S.diagonal().shape == (0,) and S.shape == (0, 0)
        assert lo.diagonal(sv.inverse(cache)).shape == (0,)
