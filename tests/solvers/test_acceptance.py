"""The acceptance rule of iterates: running out is never ACCURACY_LIMIT, throw=False keeps the
last iterate, and the backward error is computed only where it decides."""

from __future__ import annotations

import numpy as np
import pyamg
import pytest

import solvers as sv
from tests._cases.matrices import rel_residual, spd


# ----- running out is never ACCURACY_LIMIT -------------------------------------------------------
def test_cg_that_ran_out_just_above_rtol_is_max_iterations():
    P = pyamg.gallery.poisson((60, 60), format="csr")
    b = np.random.default_rng(0).standard_normal(P.shape[0])
    rtol = 1e-10
    full = sv.init(sv.LinearProblem(P, b), sv.CG(rtol=rtol))
    full.solve()
    need = full.stats.iterations
    # a maxiter a few iterations short of convergence: residual within ~10x of rtol
    for short in range(need - 1, need - 30, -1):
        sol = sv.solve(sv.LinearProblem(P, b), sv.CG(rtol=rtol, maxiter=short), throw=False)
        r = rel_residual(P, sol.u, b)
        if r > rtol:
            break
    assert rtol < r < 100 * rtol, (short, r)
    assert sol.status is sv.Status.MAX_ITERATIONS and not sol.status.ok
    assert sol.u is not None and sol.u.shape == b.shape       # finding 10: the last iterate


# ----- throw=False keeps the last iterate (lineax: rtol = atol = 0, max_steps = 2) ---------------
@pytest.mark.parametrize("alg", [sv.CG, sv.GMRES, sv.BiCGStab])
def test_throw_false_returns_the_last_iterate(alg):
    P = pyamg.gallery.poisson((10, 10), format="csr")
    b = np.ones(P.shape[0])
    sol = sv.solve(sv.LinearProblem(P, b), alg(rtol=0.0, atol=0.0, maxiter=2), throw=False)
    assert sol.status is sv.Status.MAX_ITERATIONS
    assert sol.u.shape == b.shape and not sol.u.flags.writeable
    assert np.all(np.isfinite(sol.u)) and np.linalg.norm(sol.u) > 0   # two steps from zero
    if alg is not sv.GMRES:                   # the very iterate scipy's own method returns
        import scipy.sparse.linalg as spl

        ref, info = getattr(spl, alg.method)(P, b, rtol=0.0, atol=0.0, maxiter=2)
        assert info > 0
        np.testing.assert_allclose(sol.u, ref, rtol=1e-12)
    with pytest.raises(sv.ConvergenceError) as e:
        sv.solve(sv.LinearProblem(P, b), alg(rtol=0.0, atol=0.0, maxiter=2))
    np.testing.assert_array_equal(e.value.iterate, sol.u)
    import adjoints as ad

    with pytest.raises(ValueError, match="MAX_ITERATIONS"):   # an iterate is not a solution
        ad.solve_pullback(sol, np.ones_like(b))


# ----- acceptance costs only where it decides ----------------------------------------------------
def test_a_converged_krylov_solve_computes_no_backward_error(monkeypatch):
    """The componentwise backward error (an O(nnz) |A| product) decides only an iterate that
    missed the tolerance; every converged solve paid it, a temporary of A's size per solve."""
    from solvers._engines import krylov as _krylov

    calls = []
    real = _krylov.IterativeFactor._backward_error
    monkeypatch.setattr(_krylov.IterativeFactor, "_backward_error",
                        lambda self, *a: calls.append(1) or real(self, *a))
    S = spd(400)
    b = np.ones(S.shape[0])
    cache = sv.init(sv.LinearProblem(S, b), sv.CG(rtol=1e-10))
    u = cache.solve()
    cache.solve_adjoint(b)
    assert calls == [] and rel_residual(S, u, b) <= 1e-10
    sol = sv.solve(sv.LinearProblem(S, b), sv.CG(rtol=1e-10, maxiter=3), throw=False)
    assert not sol.status.ok and calls                       # a miss is judged by it


# ----- real A, complex b: the two parts share atol -----------------------------------------------
def _atol_cases():
    import scipy.sparse as sp

    P = pyamg.gallery.poisson((30, 30), format="csr")
    n = P.shape[0]
    N = sp.csr_array(P + sp.diags(0.3 * np.ones(n - 1), 1, shape=(n, n)))
    out = []
    for cls in (sv.CG, sv.GMRES, sv.BiCGStab):
        for pre in (None, sv.Jacobi(), sv.ILU()):
            out.append(pytest.param(P if cls is sv.CG else N, cls, pre,
                                    id=f"{cls.__name__}-{type(pre).__name__ if pre else 'none'}"))
    return out


@pytest.mark.parametrize("A, cls, pre", _atol_cases())
@pytest.mark.parametrize("atol", [1e-4, 1e-8])
def test_complex_rhs_of_a_real_matrix_meets_atol_with_both_parts(A, cls, pre, atol):
    """A real method solves a complex b as its real and imaginary parts; each meeting atol on
    its own left up to √2·atol (1.37-1.40× with SUCCESS): each gets atol·‖part‖/‖b‖."""
    rng = np.random.default_rng(0)
    n = A.shape[0]
    b = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    tol = atol * np.linalg.norm(b)                       # atol binds: rtol is negligible
    cache = sv.init(sv.LinearProblem(A, b), cls(rtol=1e-30, atol=tol, precond=pre))
    u = cache.solve()
    assert cache.status is sv.Status.SUCCESS
    assert np.linalg.norm(b - A @ u) <= tol
    lam = cache.solve_adjoint(b)
    assert np.linalg.norm(b - A.T @ lam) <= tol
    B = np.stack([b, 3 * b.real, 1j * b.imag], axis=1)    # per column: its own share
    U = cache.solve(B)
    for j in range(3):
        assert np.linalg.norm(B[:, j] - A @ U[:, j]) <= tol
