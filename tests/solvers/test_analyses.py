"""Symbolic analyses kept per pattern across caches (``sv.analyses``): a one-shot solve of a
pattern seen before runs the numeric factorization only, and answers as a fresh analysis would.

Checked against dense references on matrices of the kinds the oracle uses (SPD, nonsymmetric
that needs pivoting, zero diagonal values on a stored diagonal), on PARDISO and CHOLMOD, with the
counters (``symbolic_analyses``, PARDISO's phase counts) and the store's bounds. RSS with a new
pattern on every call is in ``test_lifetime.py`` (``:patterns``).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import solvers as sv
from solvers.internals import entry

needs_pardiso = pytest.mark.skipif(entry("pardiso").unavailable() is not None,
                                   reason=str(entry("pardiso").unavailable()))
needs_cholmod = pytest.mark.skipif(not sv.cholmod_available(), reason="scikit-sparse not installed")


def _poisson(nx: int, scale: float = 1.0, shift: float = 0.0) -> sp.csr_matrix:
    T = sp.diags([-np.ones(nx - 1), 2 * np.ones(nx), -np.ones(nx - 1)], [-1, 0, 1])
    K = sp.kronsum(T, T) * scale + shift * sp.eye(nx * nx)
    return sp.csr_matrix(K)


def _backward_error(A, x, b) -> float:
    A = sp.csr_matrix(A)
    r = b - A @ x
    return float(np.linalg.norm(r) / (abs(A).sum(axis=1).max() * np.linalg.norm(x)
                                      + np.linalg.norm(b)))


def _fresh(prob, alg):
    """The same init with nothing kept: the reference a reused analysis must equal."""
    sv.analyses.clear()
    try:
        return sv.init(prob, alg)
    finally:
        sv.analyses.clear()


needs_klu = pytest.mark.skipif(not sv.native_available(), reason="solvers._native not built")
ENGINES = [pytest.param(lambda: sv.Pardiso(), "PARDISO", marks=needs_pardiso, id="pardiso"),
           pytest.param(lambda: sv.Cholesky(), "CHOLMOD", marks=needs_cholmod, id="cholmod"),
           pytest.param(lambda: sv.KLU(), "KLU", marks=needs_klu, id="klu"),
           pytest.param(lambda: sv.LU(), "SuperLU", id="superlu")]


@pytest.mark.parametrize("make, engine", ENGINES)
def test_second_cache_of_a_pattern_reuses_the_analysis_and_answers_as_fresh(make, engine):
    b = np.random.default_rng(0).standard_normal(400)
    first = sv.init(sv.LinearProblem(_poisson(20), b, posdef=True), make())
    assert first.stats.symbolic_analyses == 1 and not first.factor.reused_analysis
    K2 = _poisson(20, scale=3.0, shift=0.5)
    prob = sv.LinearProblem(K2, b, posdef=True)
    second = sv.init(prob, make())
    assert engine in second.kind
    assert second.stats.symbolic_analyses == 0 and second.factor.reused_analysis
    assert second.stats.factorizations == 1
    assert "reused (sv.analyses)" in second.info
    ref = np.linalg.solve(K2.toarray(), b)
    fresh = _fresh(prob, make())
    for x in (second.solve(), second.solve_adjoint(b), second.solve_transpose(b)):
        np.testing.assert_allclose(x, ref, rtol=1e-12, atol=0)
    np.testing.assert_allclose(second.solve(), fresh.solve(), rtol=1e-13, atol=0)
    # the first cache keeps its own factors, also after the second is dropped
    ref1 = np.linalg.solve(_poisson(20).toarray(), b)
    np.testing.assert_allclose(first.solve(), ref1, rtol=1e-12, atol=0)
    del second
    np.testing.assert_allclose(first.solve_adjoint(b), ref1, rtol=1e-12, atol=0)
    assert first.logdet().logabsdet == pytest.approx(
        np.linalg.slogdet(_poisson(20).toarray())[1], rel=1e-12)


@needs_pardiso
def test_pardiso_phase_counts_one_analysis_for_many_one_shot_solves():
    b = np.ones(400)
    sols = [sv.solve(sv.LinearProblem(_poisson(20, scale=1 + k), b, posdef=True), sv.Pardiso())
            for k in range(5)]
    handles = {id(s.cache.factor.handle) for s in sols}
    assert len(handles) == 1
    assert sols[0].cache.factor.phases[11] == 1 and sols[0].cache.factor.phases[22] == 5
    for k, s in enumerate(sols):
        np.testing.assert_allclose(s.u, np.linalg.solve(_poisson(20, scale=1 + k).toarray(), b),
                                   rtol=1e-12)


def _hard_nonsymmetric(n: int, seed: int):
    """A fixed pattern (tridiagonal + a far band) whose values change from case to case: random,
    a zero diagonal that needs pivoting off it, and rows scaled over 12 orders of magnitude."""
    rng = np.random.default_rng(seed)
    rows = np.r_[np.arange(n), np.arange(n - 1), np.arange(1, n), np.arange(n - 7)]
    cols = np.r_[np.arange(n), np.arange(1, n), np.arange(n - 1), np.arange(7, n)]
    vals = rng.standard_normal(rows.size)
    kind = seed % 3
    if kind == 1:
        vals[:n] = 0.0        # every diagonal value zero: the matching must leave the diagonal
    A = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
    if kind == 2:
        A = sp.csr_matrix(sp.diags(10.0 ** rng.uniform(-6, 6, n)) @ A)
    A.sort_indices()
    return A


def _hard_structurally_symmetric(n: int, seed: int):
    """The pattern of ``_hard_nonsymmetric`` made structurally symmetric (SuperLU's symmetric
    mode), its values nonsymmetric; seed % 3 == 1: a zero diagonal (stored), pivots off it. (The
    symmetric mode's fallback to partial pivoting on a kept order: test_superlu_modes.py.)"""
    A = _hard_nonsymmetric(n, seed)
    P = (abs(A) + abs(A).T).tocsr()
    P.data[:] = np.random.default_rng(seed + 100).standard_normal(P.nnz)
    if seed % 3 == 1:
        P.setdiag(0.0)        # stored zeros: the pattern keeps its diagonal
    P.sort_indices()
    return P


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("make", [_hard_nonsymmetric, _hard_structurally_symmetric])
def test_superlu_kept_column_order_answers_as_a_fresh_order(make, seed):
    """SuperLU's column order is kept per pattern (and mode): a second cache of the pattern, on
    values that need pivoting, factorizes the permuted matrix with NATURAL — the same fill, the
    dense answer to the backward error of a fresh ordering, log det and transpose solves too."""
    n = 120
    first = sv.init(sv.LinearProblem(make(n, 3 * seed + 300), np.ones(n)), sv.LU())  # kind 0
    assert first.stats.symbolic_analyses == 1 and not first.factor.reused_analysis
    A = make(n, seed)
    b = np.random.default_rng(seed).standard_normal(n)
    prob = sv.LinearProblem(A, b)
    try:
        fresh = _fresh(prob, sv.LU())
    except sv.SingularMatrixError as e:   # rows over 12 decades: a condition estimate past 1e13
        with pytest.raises(sv.SingularMatrixError, match="reciprocal condition"):
            sv.init(prob, sv.LU())
        assert "reciprocal condition" in str(e)
        return
    sv.init(sv.LinearProblem(make(n, 3 * seed + 300), np.ones(n)), sv.LU())   # keep the order
    second = sv.init(prob, sv.LU())
    assert second.factor.reused_analysis and second.stats.symbolic_analyses == 0
    assert second.factor.symmetric == fresh.factor.symmetric        # the same mode (fallback too)
    assert second.factor.lu.nnz == fresh.factor.lu.nnz              # the kept order's fill
    D = A.toarray()
    for x, M in ((second.solve(), A), (second.solve_transpose(b), A.T),
                 (second.solve_adjoint(b), A.T)):
        rhs = b
        assert _backward_error(M, x, rhs) <= 64 * n * np.finfo(float).eps
    np.testing.assert_allclose(second.solve(), np.linalg.solve(D, b),
                               rtol=1e-9 * np.linalg.cond(D) / 1e3 + 1e-12)
    assert second.logdet().logabsdet == pytest.approx(np.linalg.slogdet(D)[1], rel=1e-11)
    assert second.logdet().sign == pytest.approx(np.linalg.slogdet(D)[0])


@needs_pardiso
@pytest.mark.parametrize("seed", range(9))
def test_pardiso_unsymmetric_reuse_is_never_a_worse_answer(seed):
    """The unsymmetric types match and scale by the values of their analysis: a kept analysis
    is used for other values only when it factorizes them without a perturbed pivot, else the
    matrix is analysed afresh (``stats.fallbacks``); either way the answer has the backward
    error of a fresh factorization."""
    n = 60
    b = np.random.default_rng(100 + seed).standard_normal(n)
    for warm in range(3):      # analyses kept from other values of the same pattern
        try:
            sv.init(sv.LinearProblem(_hard_nonsymmetric(n, 1000 + 3 * warm + seed)), sv.Pardiso())
        except sv.SingularMatrixError:
            pass
    A = _hard_nonsymmetric(n, seed)
    prob = sv.LinearProblem(A, b)
    try:
        fresh = _fresh(prob, sv.Pardiso())
    except sv.SingularMatrixError:
        pytest.skip("singular to PARDISO's pivot test even when analysed afresh")
    cache = sv.init(prob, sv.Pardiso())
    x = cache.solve()
    ref = np.linalg.solve(A.toarray(), b)
    cond = np.linalg.cond(A.toarray())
    assert _backward_error(A, x, b) <= max(10 * _backward_error(A, fresh.solve(), b), 1e-14)
    assert np.linalg.norm(x - ref) <= 1e-14 * cond * np.linalg.norm(ref) * 100
    if cache.factor.reused_analysis:
        assert cache.factor.perturbed_pivots == 0 and cache.stats.symbolic_analyses == 0
    else:
        assert cache.stats.symbolic_analyses == 1


@needs_pardiso
def test_bounds_evict_and_zero_entries_turns_reuse_off():
    b = np.ones(100)
    old = sv.analyses.stats()
    try:
        sv.analyses.limit(entries=2)
        for nx in (10, 11, 12):
            sv.init(sv.LinearProblem(_poisson(nx), np.ones(nx * nx), posdef=True), sv.Pardiso())
        st = sv.analyses.stats()
        assert st.kept == 2 and st.evicted >= 1 and st.nbytes > 0
        again = sv.init(sv.LinearProblem(_poisson(10), b, posdef=True), sv.Pardiso())
        assert again.stats.symbolic_analyses == 1          # 10×10 was evicted
        sv.analyses.limit(entries=0)
        assert sv.analyses.stats().kept == 0
        for _ in range(2):
            c = sv.init(sv.LinearProblem(_poisson(10), b, posdef=True), sv.Pardiso())
            assert c.stats.symbolic_analyses == 1 and not c.factor.reused_analysis
        sv.analyses.limit(entries=8, nbytes=0)             # nothing fits in 0 bytes
        c = sv.init(sv.LinearProblem(_poisson(10), b, posdef=True), sv.Pardiso())
        assert sv.analyses.stats().kept == 0
    finally:
        sv.analyses.limit(entries=old.entries, nbytes=old.limit_bytes)


@needs_pardiso
def test_a_failed_factorization_on_a_kept_analysis_leaves_store_and_caches_usable():
    b = np.ones(400)
    good = sv.init(sv.LinearProblem(_poisson(20), b, posdef=True), sv.Pardiso(posdef=True))
    bad = _poisson(20, shift=-8.5)       # same pattern, indefinite
    with pytest.raises(sv.NotPositiveDefiniteError):
        sv.init(sv.LinearProblem(bad, b), sv.Pardiso(posdef=True))
    again = sv.init(sv.LinearProblem(_poisson(20, scale=2.0), b, posdef=True),
                    sv.Pardiso(posdef=True))
    assert again.factor.reused_analysis
    np.testing.assert_allclose(again.solve(), np.linalg.solve(2 * _poisson(20).toarray(), b),
                               rtol=1e-12)
    np.testing.assert_allclose(good.solve(), np.linalg.solve(_poisson(20).toarray(), b),
                               rtol=1e-12)


@needs_pardiso
def test_threads_share_a_kept_handle_safely():
    """JAX's host callbacks may factorize and solve from several threads: caches of one pattern
    share the kept PARDISO handle, one call at a time."""
    from concurrent.futures import ThreadPoolExecutor

    b = np.random.default_rng(1).standard_normal(400)
    sv.init(sv.LinearProblem(_poisson(20), b, posdef=True), sv.Pardiso())

    def work(k):
        K = _poisson(20, scale=1 + k % 5)
        cache = sv.init(sv.LinearProblem(K, b, posdef=True), sv.Pardiso())
        out = [cache.solve(), cache.solve_adjoint(b)]
        ref = np.linalg.solve(K.toarray(), b)
        return max(float(np.abs(x - ref).max() / np.abs(ref).max()) for x in out)

    with ThreadPoolExecutor(4) as ex:
        errs = list(ex.map(work, range(40)))
    assert max(errs) < 1e-12
