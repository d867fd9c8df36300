"""sv.Auto answers the questions it is asked: the gradient of log det and entries of A⁻¹ on a
cache whose engine has no selected inverse (PARDISO), log det on PARDISO's unsymmetric type —
by one more factorization with a capable engine (counted, warned), or by a capable engine from
the start when the problem declares the question (``LinearProblem(asks=...)``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv
from tests._cases.matrices import needs_cholmod, needs_pardiso

pytestmark = [needs_pardiso]


def family(nx=20):
    fam, b = lo.testing.poisson_family(nx)          # n = 420 > 64 distinct columns
    theta = np.linspace(0.5, 1.5, fam.n_params)
    return fam, b, theta


def trace_gradient(fam, theta):
    """∂ log det K(θ)/∂θᵢ = tr(K⁻¹Kᵢ), densely."""
    Z = np.linalg.inv(fam(theta).to_scipy().toarray())
    M = fam.M.to_scipy().tocsc()            # column i: the values of Kᵢ on the pattern
    P = fam.pattern
    zt = Z[P.indices, P.rows]               # (K⁻¹)ᵀ on the pattern: Σ K⁻¹[c, r] Kᵢ[r, c]
    return M.T @ zt


@needs_cholmod
def test_logdet_gradient_on_a_pardiso_cache_factorizes_once_more_with_cholmod():
    fam, b, theta = family()
    cache = sv.init(sv.LinearProblem(fam(theta), b, posdef=True), sv.Auto(pardiso_min=100))
    assert cache.kind == "PARDISO (mtype 2)"
    u = cache.solve()
    sol_generation = cache.generation
    with pytest.warns(sv.HintWarning, match="factorized once more with CHOLMOD.*asks="):
        g = fam.pullback(ad.logdet_pullback(cache))
    np.testing.assert_allclose(g, trace_gradient(fam, theta), rtol=1e-12)
    s = cache.stats
    assert (s.factorizations, s.solves, s.adjoint_solves) == (2, 1, 0)   # no solve: selinv
    assert cache.kind == "CHOLMOD" and "asked for selected_inverse" in cache.info
    assert cache.generation == sol_generation and cache.u is u           # the same A
    # from now on the cache answers it itself, and updates keep an engine that can
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(fam.pullback(ad.logdet_pullback(cache)), g, rtol=1e-13)
        theta2 = theta * 1.1
        cache.update(A=fam(theta2))
        np.testing.assert_allclose(fam.pullback(ad.logdet_pullback(cache)),
                                   trace_gradient(fam, theta2), rtol=1e-12)
    assert cache.kind == "CHOLMOD" and s.factorizations == 2 and s.numeric_refactorizations == 1


@needs_cholmod
def test_declared_questions_choose_a_capable_engine_up_front():
    fam, b, theta = family()
    for asks in ("selected_inverse", ("logdet", "selected_inverse")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cache = sv.init(sv.LinearProblem(fam(theta), b, posdef=True, asks=asks),
                            sv.Auto(pardiso_min=100))
            g = fam.pullback(ad.logdet_pullback(cache))
        assert cache.kind == "CHOLMOD" and cache.stats.factorizations == 1
        np.testing.assert_allclose(g, trace_gradient(fam, theta), rtol=1e-12)
    # log det alone: PARDISO's definite type answers it, so Auto keeps PARDISO
    cache = sv.init(sv.LinearProblem(fam(theta), b, posdef=True, asks="logdet"),
                    sv.Auto(pardiso_min=100))
    assert cache.kind == "PARDISO (mtype 2)"
    want = np.linalg.slogdet(fam(theta).to_scipy().toarray())
    assert abs(cache.logdet().logabsdet - want[1]) <= 1e-12 * abs(want[1])
    assert cache.stats.factorizations == 1


def nonsymmetric(nx=12):
    fam, b = lo.testing.convection_diffusion_family(nx, peclet=2.0)
    return fam(np.linspace(0.5, 1.5, fam.n_params)), b


def test_logdet_of_a_nonsymmetric_pardiso_cache_goes_to_superlu():
    K, b = nonsymmetric()
    D = K.to_scipy().toarray()
    sign, logabs = np.linalg.slogdet(D)
    cache = sv.init(sv.LinearProblem(K, b), sv.Auto(pardiso_min=10))
    assert cache.kind == "PARDISO (mtype 11)"
    with pytest.warns(sv.HintWarning, match="logdet: PARDISO \\(mtype 11\\), which Auto chose"):
        got = cache.logdet()
    assert got.sign == sign and abs(got.logabsdet - logabs) <= 1e-12 * abs(logabs)
    assert cache.kind.startswith("SuperLU") and cache.stats.factorizations == 2
    declared = sv.init(sv.LinearProblem(K, b, asks="logdet"), sv.Auto(pardiso_min=10))
    assert declared.kind.startswith("SuperLU") and declared.stats.factorizations == 1


def test_an_algorithm_you_chose_is_kept_and_the_query_refused():
    fam, b, theta = family()
    cache = sv.init(sv.LinearProblem(fam(theta), b, posdef=True), sv.Pardiso())
    with pytest.raises(sv.BackendNotSupported, match="selected inversion needs the factors"):
        fam.pullback(ad.logdet_pullback(cache))
    assert cache.stats.factorizations == 1 and cache.kind == "PARDISO (mtype 2)"
    K, b = nonsymmetric()
    with pytest.raises(sv.BackendNotSupported, match="unsymmetric factorization"):
        sv.init(sv.LinearProblem(K, b, asks="logdet"), sv.Pardiso()).logdet()


def test_a_few_entries_are_still_answered_by_solves_without_a_new_factorization():
    fam, b, theta = family()
    cache = sv.init(sv.LinearProblem(fam(theta), b, posdef=True), sv.Auto(pardiso_min=100))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = lo.sample(sv.inverse(cache), [0, 5, 9], [0, 5, 9])
    Z = np.linalg.inv(fam(theta).to_scipy().toarray())
    np.testing.assert_allclose(d, Z[[0, 5, 9], [0, 5, 9]], rtol=1e-12)
    assert cache.stats.factorizations == 1 and cache.kind == "PARDISO (mtype 2)"


def test_logdet_declared_on_an_indefinite_matrix_falls_back_past_pardiso_lu():
    n = 30
    A = sp.csr_matrix(sp.diags([-1.0, -1.0, -1.0], [-1, 0, 1], shape=(n, n)))   # indefinite
    want = np.linalg.slogdet(A.toarray())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache = sv.init(sv.LinearProblem(A, asks="logdet"), sv.Auto(pardiso_min=1))
        got = cache.logdet()
    assert cache.kind.startswith("SuperLU") and "Pardiso(posdef=False)" not in cache.kind
    assert got.sign == want[0] and abs(got.logabsdet - want[1]) <= 1e-12 * abs(want[1])


def test_asks_names_are_checked():
    with pytest.raises(ValueError, match="unknown \\['log_det'\\]; a cache is asked logdet, "
                                         "selected_inverse"):
        sv.LinearProblem(np.eye(2), asks="log_det")
    p = sv.LinearProblem(np.eye(2), posdef=True)
    q = p.asking("logdet")
    assert q.asks == {"logdet"} and q.posdef and q.A is p.A and p.asks == frozenset()
