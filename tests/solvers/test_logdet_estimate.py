"""The stochastic log-determinant's error bars are tested statistically: over 200 seeds on
ill-conditioned matrices, ``est.interval(0.95)`` covers the exact log det at its stated rate, or
the estimate refuses (ConvergenceError) where the quadrature error cannot be bounded — never an
error bar 10× too small (the Gauss rule's bias used to be left out of ``stderr``). And
log det of a non-Hermitian operator is refused, stored or matrix-free."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
from tests._cases.corpus import get

N, PROBES, SEEDS = 60, 8, 200


def _rotated(cond: float, seed: int = 0):
    """Dense Hermitian positive definite, eigenvalues log-spaced over [1/cond, 1], in a random
    basis (a diagonal would make Rademacher probes exact)."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((N, N)))
    w = np.logspace(-np.log10(cond), 0, N)
    a = (q * w) @ q.T
    return lo.aslinop((a + a.T) / 2), float(np.sum(np.log(w))), float(w[0])


def _coverage(A, exact, seeds=SEEDS, **kw):
    covered = refused = 0
    for seed in range(seeds):
        try:
            est = sv.logdet_estimate(A, probes=PROBES, seed=seed, **kw)
        except sv.ConvergenceError as e:
            assert "quadrature error cannot be bounded" in str(e)
            refused += 1
            continue
        low, high = est.interval(0.95)
        covered += low <= exact <= high
        assert est.stderr >= est.mc_stderr and est.bias_bound >= 0
    return covered, refused


def test_too_few_steps_at_cond_1e6_refuse_or_cover():
    """20 steps at cond 1e6: the Gauss values sit far above log det (the old stderr covered
    0 of 100 seeds). Each seed must refuse or cover; with the spectrum's lower bound given,
    the Gauss–Radau bracket holds and covers."""
    A, exact, lam_min = _rotated(1e6)
    covered, refused = _coverage(A, exact, steps=20)
    assert covered + refused >= 0.97 * SEEDS, (covered, refused)
    covered, refused = _coverage(A, exact, seeds=SEEDS // 2, steps=20, lower_bound=lam_min)
    assert refused == 0 and covered >= 0.93 * (SEEDS // 2), covered


def test_enough_steps_cover_at_the_stated_rate_without_refusing():
    A, exact, _ = _rotated(1e4)
    covered, refused = _coverage(A, exact, steps=45)
    # 95 % stated; 200 binomial draws: three standard deviations below is 0.904
    assert refused <= 0.02 * SEEDS and covered >= 0.90 * (SEEDS - refused), (covered, refused)


def test_the_bias_bound_shrinks_to_nothing_as_steps_resolve_the_spectrum():
    A, exact, lam_min = _rotated(1e6)
    loose = sv.logdet_estimate(A, probes=PROBES, steps=20, lower_bound=lam_min)
    tight = sv.logdet_estimate(A, probes=PROBES, steps=N)            # the whole Krylov space
    assert loose.bias_bound > 2 * loose.mc_stderr                     # the bias dominates
    assert tight.bias_bound <= 1e-6 * tight.mc_stderr
    assert abs(tight.value - exact) <= 4 * tight.stderr


def test_lower_bound_is_checked():
    A, _, lam_min = _rotated(1e2)
    with pytest.raises(ValueError, match="lower_bound must be a positive number"):
        sv.logdet_estimate(A, lower_bound=0.0)
    with pytest.raises(ValueError, match="is above a Ritz value"):
        sv.logdet_estimate(A, lower_bound=0.5)


@pytest.mark.parametrize("form", ["dense", "sparse", "matrixfree"])
def test_a_non_hermitian_operator_is_refused(form):
    """307.37 ± 0.09 against an exact 337.96 came back for a nonsymmetric operator."""
    rng = np.random.default_rng(3)
    a = 4 * np.eye(50) + 0.5 * np.triu(rng.standard_normal((50, 50)), 1)   # det > 0, not symmetric
    A = {"dense": a, "sparse": sp.csr_array(a),
         "matrixfree": lo.MatrixFree(a.shape, a.dtype, lambda X: a @ X, lambda X: a.T @ X)}[form]
    with pytest.raises(sv.NotHermitianError, match="logdet_estimate needs a Hermitian"):
        sv.logdet_estimate(A)


def test_a_hermitian_matrix_free_operator_passes_the_check():
    rng = np.random.default_rng(4)
    b = rng.standard_normal((40, 40)) + 1j * rng.standard_normal((40, 40))
    a = b @ b.conj().T + 40 * np.eye(40)                                   # complex HPD
    mf = lo.MatrixFree(a.shape, a.dtype, lambda X: a @ X, lambda X: a @ X)
    est = sv.logdet_estimate(mf, probes=32, steps=40)
    low, high = est.interval(0.999)
    assert low <= np.linalg.slogdet(a)[1] <= high


def test_single_precision_matrix_free_defect_is_found():
    """One random pair (⟨y, Ax⟩ against ⟨Ay, x⟩) saw a 40 % asymmetry of a float32 operator
    as 0.94 % < the 1 % allowed; four vectors and the adjoint product see it."""
    a = get("general-float32").a
    mf = lo.MatrixFree(a.shape, a.dtype, lambda X: a @ X, lambda X: a.T @ X)
    with pytest.raises(sv.NotHermitianError, match="AX − AᴴX"):
        sv.logdet_estimate(mf, probes=4, steps=3)
    no_adjoint = lo.MatrixFree(a.shape, a.dtype, lambda X: a @ X)
    with pytest.raises(sv.NotHermitianError, match="conjugate-symmetric"):
        sv.logdet_estimate(no_adjoint, probes=4, steps=3)


def test_an_exact_quadrature_keeps_its_rounding_in_the_error_bar():
    """A diagonal with Rademacher probes has no Monte-Carlo error and, with steps = n, no
    quadrature error: what is left is the rounding of the Ritz values (u·θ_max/θ, 1e-8 in
    log det at κ = 1e8), which the error bar must hold."""
    d = np.logspace(-8, 0, 7)
    est = sv.logdet_estimate(np.diag(d), probes=24, steps=7, seed=7)
    low, high = est.interval(0.999)
    assert low <= np.sum(np.log(d)) <= high
