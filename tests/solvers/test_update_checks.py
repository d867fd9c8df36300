"""An update is held to every check init makes: the Hermitian check of a Cholesky
cache, Auto's hint verification, a full setup when the dtype kind changes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import solvers as sv
from tests._cases.matrices import HAVE_PARDISO, rel_residual, skewed, spd


# ----- update held to init's Hermitian check -----------------------------------------------------
@pytest.mark.parametrize("alg,dense", [(sv.Cholesky(), True), (sv.Cholesky(), False)],
                         ids=["dense Cholesky", "CHOLMOD"])
def test_update_of_a_cholesky_cache_refuses_non_hermitian(alg, dense):
    if not dense and not sv.cholmod_available():
        pytest.skip("CHOLMOD missing")
    S = spd()
    A, B = (S.toarray(), skewed(S).toarray()) if dense else (S, skewed(S))
    b = np.ones(S.shape[0])
    cache = sv.init(sv.LinearProblem(A, b), alg)
    with pytest.raises(sv.NotHermitianError, match="max\\|A - Aᴴ\\|"):
        sv.init(sv.LinearProblem(B, b), alg)           # what init says ...
    with pytest.raises(sv.NotHermitianError, match="max\\|A - Aᴴ\\|"):
        cache.update(A=B)                             # ... update says too
    assert cache.generation == 0
    assert rel_residual(S, cache.solve(), b) < 1e-12  # and the cache still holds A


def test_auto_with_posdef_hint_on_a_non_hermitian_update_is_right():
    S = spd()
    b = np.ones(S.shape[0])
    cache = sv.init(sv.LinearProblem(S, b, posdef=True))
    with pytest.warns(sv.HintWarning, match="posdef=True but A is not Hermitian"):
        cache.update(A=skewed(S))
    assert rel_residual(skewed(S), cache.solve(), b) < 1e-12
    assert "LU" in cache.kind or "mtype 11" in cache.kind


# ----- a dtype-kind change is a full setup -------------------------------------------------------
@pytest.mark.parametrize("alg", ["pardiso", "cholmod", "lu"])
def test_update_from_real_to_complex_values_refactorizes_in_complex(alg):
    if alg == "pardiso" and not HAVE_PARDISO or alg == "cholmod" and not sv.cholmod_available():
        pytest.skip(f"{alg} not installed")
    S = spd()
    b = np.ones(S.shape[0])
    make = {"pardiso": sv.Pardiso, "cholmod": sv.Cholesky, "lu": sv.LU}[alg]
    cache = sv.init(sv.LinearProblem(S, b, posdef=True), make())
    H = sp.csr_matrix(S + 1j * (sp.triu(S, 1) - sp.tril(S, -1)) * 0.1)  # Hermitian, same pattern
    cache.update(A=H)
    assert cache.stats.factorizations == 2 and cache.stats.numeric_refactorizations == 0
    x = cache.solve()
    assert x.dtype == np.complex128 and rel_residual(H, x, b) < 1e-12
    if alg == "pardiso":
        assert cache.factor.handle.mtype in (4, 13)


# ----- a closed cache refuses everything, on every engine ------------------------------------------
@pytest.mark.parametrize("name", ["lu-dense", "superlu", "cholmod", "cg", "pardiso"])
def test_a_closed_cache_refuses_solves_updates_and_queries(name):
    S = spd(60)
    A = S.toarray() if name == "lu-dense" else S
    alg = {"lu-dense": sv.LU(), "superlu": sv.LU(), "cholmod": sv.Cholesky(),
           "cg": sv.CG(rtol=1e-10), "pardiso": sv.Pardiso()}[name]
    if name == "cholmod" and not sv.cholmod_available():
        pytest.skip("CHOLMOD missing")
    if name == "pardiso" and not HAVE_PARDISO:
        pytest.skip("pypardiso missing")
    b = np.ones(S.shape[0])
    cache = sv.init(sv.LinearProblem(A, b), alg)
    u = cache.solve()
    cache.close()
    cache.close()                                        # idempotent
    assert cache.closed
    calls = [("solve", cache.solve), ("solve_adjoint", lambda: cache.solve_adjoint(b)),
             ("solve_transpose", lambda: cache.solve_transpose(b)),
             ("update", lambda: cache.update(A=2 * A)), ("logdet", cache.logdet),
             ("selected_inverse", lambda: sv.selected_inverse(cache)),
             (r"init\(\.\.\., like=cache\)", lambda: sv.init(sv.LinearProblem(A), alg, like=cache)),
             ("solve", lambda: cache.as_operator() @ b)]
    for what, call in calls:
        with pytest.raises(sv.ClosedCacheError, match=f"{what}: this cache was closed"):
            call()
    np.testing.assert_allclose(S @ u, b, rtol=1e-8)      # what it returned before stays valid


# ----- AMG: one-level hierarchies update, zero diagonals are named ------------------------------
@pytest.mark.parametrize("alg", [sv.AMG(rtol=1e-10), sv.CG(rtol=1e-10, precond=sv.AMG())],
                         ids=["AMG", "CG+AMG"])
def test_amg_update_of_a_one_level_hierarchy(alg):
    """A small matrix's hierarchy has one level and no aggregation to keep: the numeric
    rebuild indexed an empty list (IndexError) on every update."""
    A = sp.csr_array(np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]]))
    b = np.ones(3)
    cache = sv.init(sv.LinearProblem(A, b), alg)
    cache.solve()
    u = cache.update(A=1.5 * A).solve()
    np.testing.assert_allclose(1.5 * A @ u, b, rtol=1e-9)


def test_amg_names_a_zero_diagonal():
    """pyamg's smoothers divide by the diagonal: a zero gave NaN cycles and scipy's bare
    'array must not contain infs or NaNs', or a ZeroDivisionError at an update."""
    Z = sp.csr_array(np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))
    with pytest.raises(sv.ConvergenceError, match=r"AMG needs a nonzero diagonal.*A\[0, 0\] = 0"):
        sv.init(sv.LinearProblem(Z, np.ones(3)), sv.AMG())
    one = sv.init(sv.LinearProblem(sp.csr_array(np.array([[3.0]])), np.ones(1)), sv.AMG())
    zero = sp.csr_array((np.array([0.0]), np.array([0]), np.array([0, 1])), shape=(1, 1))
    with pytest.raises(sv.ConvergenceError, match="nonzero diagonal"):
        one.update(A=zero)
    np.testing.assert_allclose(one.solve(np.ones(1)), [1 / 3])   # unchanged
