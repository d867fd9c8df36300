"""Optimization loops: value + θ-gradient with the pattern fixed and θ changing, through
``cache.update(A=...)``. Counts (numeric refactorizations, kept orderings / analyses, AMG
hierarchy builds / numeric rebuilds / kept hierarchies) and correctness after every update
against a fresh direct solve — never wall time. Also the sort-free ``from_elements``: equal to
the general construction, entry for entry."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import adjoints as ad
import linops as lo
import solvers as sv
from linops._family.affine import AffineSparse
from solvers._engines.amg import AMGReuse

STEPS = 5


def loop_problem(nx=24, seed=0):
    fam, b = lo.testing.poisson_family(nx)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(fam.shape[0])
    thetas = [0.5 + rng.random(fam.n_params) for _ in range(STEPS + 1)]
    return fam, b, a, thetas


def reference(fam, theta, b, a):
    """f = aᵀK⁻¹b and ∂f/∂θₑ = −λₑᵀ Keₑ uₑ by a fresh SuperLU factorization and the element
    formula (independent of AffineSparse.pullback)."""
    K = fam(theta).to_scipy().tocsc()
    lu = spl.splu(K)
    u, lam = lu.solve(b), lu.solve(a, trans="T")
    uf, lf = fam.expand(u), fam.expand(lam)
    nx = int(round(np.sqrt(fam.n_params)))
    dofs = lo.testing.grid_dofs(nx, nx)
    Ke = lo.testing.q4_laplace_stiffness()
    g = -np.einsum("ei,ij,ej->e", lf[dofs], Ke, uf[dofs])
    return a @ u, g


def value_and_grad(cache, fam, theta, b, a):
    cache.update(A=fam(theta))
    u = cache.solve(b)
    lam = cache.solve_adjoint(a)
    return a @ u, fam.pullback(lo.RankOne(-lam, u))


def run_loop(alg, posdef=True, nx=24, rtol=1e-9):
    fam, b, a, thetas = loop_problem(nx)
    cache = sv.init(sv.LinearProblem(fam(thetas[0]), b, posdef=posdef), alg)
    for theta in thetas[1:]:
        f, g = value_and_grad(cache, fam, theta, b, a)
        f_ref, g_ref = reference(fam, theta, b, a)
        assert abs(f - f_ref) <= rtol * abs(f_ref)
        np.testing.assert_allclose(g, g_ref, rtol=rtol * 10, atol=rtol * np.abs(g_ref).max())
    assert cache.stats.factorizations == 1
    assert cache.stats.numeric_refactorizations == STEPS
    assert cache.stats.adjoint_solves == STEPS
    return cache


# ----- direct solvers ----------------------------------------------------------------------------
@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric mode", "COLAMD"])
def test_superlu_refactorization_keeps_the_order_and_its_fill(symmetric):
    fam, b, a, thetas = loop_problem(30)
    # the Q4 pattern is structurally symmetric: symmetric mode by default
    cache = run_loop(sv.LU() if symmetric else sv.LU(symmetric_mode=False), posdef=False, nx=30)
    f = cache.factor
    assert f.reordered and f.symmetric == symmetric  # numeric refactorization in the kept order
    assert (f.row_order is not None) == symmetric    # symmetric mode: PAPᵀ, rows permuted too
    mode = (dict(permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.01,
                 options=dict(SymmetricMode=True)) if symmetric else dict(permc_spec="COLAMD"))
    K = fam(thetas[-1]).to_scipy().tocsc()
    fresh = spl.splu(K, **mode)
    # the bug this guards against: a wrong order grew the fill step after step
    assert f.lu.nnz <= 1.02 * fresh.nnz, (f.lu.nnz, fresh.nnz)
    first = spl.splu(fam(thetas[0]).to_scipy().tocsc(), **mode)
    np.testing.assert_array_equal(f.order, np.argsort(first.perm_c))


def test_cholmod_keeps_its_symbolic_analysis():
    if not sv.cholmod_available():
        pytest.skip('CHOLMOD not installed: pip install "linops[cholmod]"')
    fam, b, a, thetas = loop_problem()
    cache = sv.init(sv.LinearProblem(fam(thetas[0]), b, posdef=True), sv.Cholesky())
    symbolic = cache.factor.symbolic
    for theta in thetas[1:]:
        f, g = value_and_grad(cache, fam, theta, b, a)
        f_ref, g_ref = reference(fam, theta, b, a)
        assert abs(f - f_ref) <= 1e-9 * abs(f_ref)
        np.testing.assert_allclose(g, g_ref, rtol=1e-8, atol=1e-12)
        assert cache.factor.symbolic is symbolic
    assert cache.stats.numeric_refactorizations == STEPS and cache.stats.factorizations == 1


def test_pattern_change_is_a_full_factorization():
    fam, b, a, thetas = loop_problem(10)
    cache = sv.init(sv.LinearProblem(fam(thetas[0]), b), sv.LU())
    K = fam(thetas[1]).to_scipy() + sp.diags(np.ones(fam.shape[0] - 3), 3)
    cache.update(A=K)
    assert cache.stats.factorizations == 2 and cache.stats.numeric_refactorizations == 0
    np.testing.assert_allclose(K @ cache.solve(), b, atol=1e-12)


# ----- AMG ---------------------------------------------------------------------------------------
AMG_ALGS = {
    "CG+AMG": lambda reuse: sv.CG(rtol=1e-11, precond=sv.AMG(reuse=reuse)),
    "GMRES+AMG": lambda reuse: sv.GMRES(rtol=1e-11, precond=sv.AMG(reuse=reuse)),
    "AMG": lambda reuse: sv.AMG(rtol=1e-11, reuse=reuse),
}


@pytest.mark.parametrize("reuse", ["aggregation", "hierarchy", "none"])
@pytest.mark.parametrize("name", AMG_ALGS)
def test_amg_loop_counts_and_correctness_after_every_update(name, reuse):
    cache = run_loop(AMG_ALGS[name](reuse), rtol=1e-8)
    r = cache.factor.amg
    assert isinstance(r, AMGReuse)
    assert r.builds + r.numeric_rebuilds + r.kept == 1 + STEPS
    assert len(r.steps) == 1 + STEPS
    # one forward and one adjoint solve per step, each with its iteration count
    assert [len(s) for s in r.steps] == [0] + [2] * STEPS
    assert all(its > 0 for s in r.steps for its in s)
    assert sum(r.iterations_per_step) == cache.stats.iterations
    if reuse == "none":
        assert (r.builds, r.numeric_rebuilds, r.kept) == (1 + STEPS, 0, 0)
    elif reuse == "aggregation":
        assert r.builds == 1 and r.numeric_rebuilds == STEPS  # θ stays in [0.5, 1.5]
    else:
        assert r.builds == 1 and r.kept >= 1
    assert r.rebuilds == r.builds - 1 + r.numeric_rebuilds


def test_amg_aggregation_reuse_keeps_the_aggregates_and_recomputes_the_numbers():
    fam, b, a, thetas = loop_problem()
    cache = sv.init(sv.LinearProblem(fam(thetas[0]), b, posdef=True),
                    sv.CG(rtol=1e-10, precond=sv.AMG()))
    M0 = cache.factor.M
    aggs = M0.aggregates
    assert aggs is not None and len(aggs) == len(M0.ml.levels) - 1
    assert not hasattr(M0.ml.levels[0], "C")  # only the aggregation is kept, not C or T
    np.random.seed(7)  # pyamg's spectral-radius estimates start from np.random vectors
    cache.update(A=fam(thetas[1]))
    M1 = cache.factor.M
    assert M1.ml is not M0.ml
    assert all(x is y for x, y in zip(M1.aggregates, aggs))
    # the numeric hierarchy is that of the new A: its finest operator is the new matrix
    np.testing.assert_allclose(M1.ml.levels[0].A.toarray(), fam(thetas[1]).to_scipy().toarray())
    # and equals pyamg's fresh hierarchy on the same aggregation
    import pyamg

    np.random.seed(7)
    ref = pyamg.smoothed_aggregation_solver(
        sp.csr_matrix(fam(thetas[1]).to_scipy()), max_levels=len(aggs) + 1,
        aggregate=[("predefined", {"AggOp": g}) for g in aggs])
    for lv, rl in zip(M1.ml.levels, ref.levels):
        np.testing.assert_allclose(lv.A.toarray(), rl.A.toarray(), rtol=1e-12, atol=1e-14)


def test_amg_hierarchy_reuse_rebuilds_when_iterations_grow():
    """θ jumps to a 10⁴ contrast: the kept hierarchy needs many more iterations, so the next
    update recomputes it on the kept aggregation; when even that needs more than max_growth ×
    the baseline, the aggregation no longer fits and the next update is a full setup, whose
    iterations become the new baseline; then the hierarchy is kept again."""
    fam, b, a, thetas = loop_problem(32)
    alg = sv.CG(rtol=1e-10, precond=sv.AMG(reuse="hierarchy", max_growth=1.5))
    cache = sv.init(sv.LinearProblem(fam(thetas[0]), b, posdef=True), alg)
    rng = np.random.default_rng(5)
    jump = np.where(rng.random(fam.n_params) < 0.5, 1e-4, 1.0)
    seq = [thetas[1]] + [thetas[1] * jump * (1 + 0.01 * i) for i in range(4)]
    actions = []
    for theta in seq:
        r = cache.factor.amg
        before = (r.kept, r.numeric_rebuilds, r.builds)
        f, g = value_and_grad(cache, fam, theta, b, a)
        f_ref, g_ref = reference(fam, theta, b, a)
        assert abs(f - f_ref) <= 1e-7 * abs(f_ref)
        np.testing.assert_allclose(g, g_ref, rtol=1e-6, atol=1e-9 * np.abs(g_ref).max())
        r = cache.factor.amg
        after = (r.kept, r.numeric_rebuilds, r.builds)
        actions.append(["keep", "numeric", "build"][int(np.argmax(np.subtract(after, before)))])
    its = [max(s) for s in r.steps[1:]]
    assert its[1] > 1.5 * its[0]            # the jump made the kept hierarchy expensive ...
    assert actions[:3] == ["keep", "keep", "numeric"]  # ... so the next update recomputed it
    assert its[2] < its[1]                  # which brought the iterations down
    # every later decision follows the rule, replayed from the recorded iterations
    assert actions[3] == ("build" if its[2] > 1.5 * its[0] else "keep")
    if actions[3] == "build":
        assert actions[4] == "keep" and r.baseline == its[3]
    assert r.rebuilds == r.numeric_rebuilds + r.builds - 1 >= 1


def test_amg_aggregation_reuse_rebuilds_from_scratch_when_the_aggregation_stops_fitting():
    fam, b, a, thetas = loop_problem(32)
    cache = sv.init(sv.LinearProblem(fam(thetas[0]), b, posdef=True),
                    sv.CG(rtol=1e-10, precond=sv.AMG(max_growth=1.5)))
    jump = np.where(np.random.default_rng(5).random(fam.n_params) < 0.5, 1e-4, 1.0)
    for theta in [thetas[1], thetas[1] * jump, thetas[1] * jump * 1.01]:
        value_and_grad(cache, fam, theta, b, a)
    r = cache.factor.amg
    its = [max(s) for s in r.steps[1:]]
    assert its[1] > 1.5 * its[0]  # the old aggregation does not suit the 10⁴ contrast
    assert (r.builds, r.numeric_rebuilds) == (2, 2)  # so the third update set up from scratch
    f_ref, g_ref = reference(fam, thetas[1] * jump * 1.01, b, a)
    np.testing.assert_allclose(value_and_grad(cache, fam, thetas[1] * jump * 1.01, b, a)[1],
                               g_ref, rtol=1e-6, atol=1e-9 * np.abs(g_ref).max())


def test_amg_reuse_parameters_are_checked():
    with pytest.raises(ValueError, match="reuse"):
        sv.AMG(reuse="sometimes")
    with pytest.raises(ValueError, match="max_growth"):
        sv.AMG(max_growth=0.5)


def test_ruge_stuben_numeric_rebuild_is_a_full_setup():
    cache = run_loop(sv.CG(rtol=1e-11, precond=sv.AMG(kind="rs")), rtol=1e-8)
    r = cache.factor.amg
    assert cache.factor.M.aggregates is None
    assert r.builds == 1 + STEPS and r.numeric_rebuilds == 0


# ----- PARDISO and Auto in the same loop ---------------------------------------------------------
def test_pardiso_loop():
    from solvers._engines.pardiso import pardiso_available

    if not pardiso_available():
        pytest.skip('pypardiso not installed: pip install "linops[pardiso]"')
    cache = run_loop(sv.Pardiso())
    assert cache.factor.phases[11] == 1 and cache.factor.phases[22] == 1 + STEPS


def test_auto_loop_refactorizes_numerically():
    cache = run_loop(sv.Auto())
    assert cache.stats.factorizations == 1


def test_adjoints_pullback_in_the_loop_uses_the_current_factorization():
    fam, b, a, thetas = loop_problem(12)
    cache = sv.init(sv.LinearProblem(fam(thetas[0]), b, posdef=True), sv.LU())
    cache.update(A=fam(thetas[1]))
    sol_u = cache.solve()
    g = fam.pullback(ad.solve_pullback(cache, a).A)
    np.testing.assert_allclose(g, reference(fam, thetas[1], b, a)[1], rtol=1e-9)
    assert np.allclose(sol_u, spl.spsolve(fam(thetas[1]).to_scipy().tocsc(), b))


# ----- from_elements: the sort-free construction equals the general one --------------------------
def general_family(Ke, dofs, n, fixed=None):
    """An independent reference: every element entry through one global sort (np.unique in
    Pattern.from_coo_with_map), duplicates summed by scipy, Mᴴ by scipy's transpose."""
    import scipy.sparse as sp

    Ke, dofs = np.asarray(Ke), np.asarray(dofs)
    ne, k = dofs.shape
    is_free = np.ones(n, dtype=bool)
    if fixed is not None:
        is_free[np.asarray(fixed)] = False
    free = np.flatnonzero(is_free)
    newidx = np.full(n, -1, dtype=np.int64)
    newidx[free] = np.arange(free.size)
    r = np.broadcast_to(dofs[:, :, None], (ne, k, k))
    c = np.broadcast_to(dofs[:, None, :], (ne, k, k))
    e = np.broadcast_to(np.arange(ne)[:, None, None], (ne, k, k))
    keep = is_free[r] & is_free[c]
    pattern, pos = lo.Pattern.from_coo_with_map(newidx[r[keep]], newidx[c[keep]],
                                                (free.size, free.size))
    M = sp.csr_array((np.broadcast_to(Ke, (ne, k, k))[keep], (pos, e[keep])),
                     shape=(pattern.nnz, ne))
    return AffineSparse(pattern, lo.Sparse.from_scipy(M.conj().T), None, free, n)


@pytest.mark.parametrize("seed", range(12))
def test_from_elements_matches_the_general_construction(seed):
    rng = np.random.default_rng(seed)
    n, k, ne = int(rng.integers(6, 40)), int(rng.integers(1, 5)), int(rng.integers(1, 30))
    dofs = np.array([rng.choice(n, k, replace=False) for _ in range(ne)])
    shape = (ne, k, k) if seed % 2 else (k, k)
    Ke = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if seed % 3 == 0 else 0)
    fixed = rng.choice(n, int(rng.integers(0, 4)), replace=False) if seed % 4 else None
    fast, ref = AffineSparse.from_elements(Ke, dofs, n, fixed=fixed), general_family(Ke, dofs, n,
                                                                                      fixed)
    assert "M" not in fast.__dict__  # only Mᴴ is kept; fam(θ) reads it transposed
    assert fast.pattern == ref.pattern and fast.M.pattern == ref.M.pattern
    np.testing.assert_allclose(fast.M.values, ref.M.values, rtol=1e-14)
    MH = fast.M.adjoint()
    assert fast.MH.pattern == MH.pattern
    np.testing.assert_allclose(fast.MH.values, MH.values, rtol=1e-14)
    theta = rng.random(ne)
    G = lo.RankOne(rng.standard_normal(fast.shape[0]), rng.standard_normal(fast.shape[0]))
    np.testing.assert_allclose(fast.pullback(G), ref.pullback(G), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fast(theta).to_scipy().toarray(), ref(theta).to_scipy().toarray())


def test_from_elements_repeated_dofs_and_offset_take_the_general_route():
    Ke = np.array([[2.0, -1.0], [-1.0, 2.0]])
    dofs = np.array([[0, 1], [1, 1], [1, 2]])  # element 1 repeats dof 1
    fam = AffineSparse.from_elements(Ke, dofs, 3)
    dense = fam(np.array([1.0, 1.0, 1.0])).to_scipy().toarray()
    np.testing.assert_allclose(dense, [[2, -1, 0], [-1, 6, -1], [0, -1, 2]])
    off = AffineSparse.from_elements(Ke, np.array([[0, 1], [1, 2]]), 3, offset=sp.eye(3) * 5.0)
    np.testing.assert_allclose(off(np.array([1.0, 1.0])).to_scipy().toarray(),
                               [[7, -1, 0], [-1, 9, -1], [0, -1, 7]])
