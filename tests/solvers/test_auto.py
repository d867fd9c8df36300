"""sv.Auto: the same answer at update as at init, and the fallbacks its choices need.

An update is a setup that may reuse symbolic work: whatever Auto solves at init it solves at
update, on the same pattern (a Cholesky/CHOLMOD/PARDISO-definite cache updated to a Hermitian
indefinite matrix falls back to LU, as init does, with the same warning and count), and a
regular matrix that PARDISO's static pivoting cannot take goes to SuperLU instead of being
called singular.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
from tests._cases.matrices import HAVE_PARDISO, needs_cholmod, needs_pardiso

N = 30


def tridiag(shift: float = 0.0) -> sp.csr_matrix:
    """The 1-D Laplacian minus ``shift``·I: positive definite for shift 0, Hermitian
    indefinite (eigenvalues in (-3, 1), none near 0) for shift 3; one pattern."""
    T = sp.diags([-1.0, 2.0 - shift, -1.0], [-1, 0, 1], shape=(N, N), format="csr")
    T.sort_indices()
    return T


def dense_solution(A, b):
    return np.linalg.solve(A.toarray() if sp.issparse(A) else A, b)


CASES = {  # engine Auto picks at init on the SPD matrix -> (operator maker, Auto, kind at init)
    "dense Cholesky": (lambda A: A.toarray(), sv.Auto(), "dense Cholesky"),
    "CHOLMOD": (lambda A: A, sv.Auto(), "CHOLMOD"),
    "PARDISO mtype 2": (lambda A: A, sv.Auto(pardiso_min=1), "PARDISO (mtype 2)"),
}


def _skip(engine):
    if engine == "CHOLMOD" and not sv.cholmod_available():
        pytest.skip("scikit-sparse (CHOLMOD) missing")
    if engine.startswith("PARDISO") and not HAVE_PARDISO:
        pytest.skip("pypardiso (MKL) missing")


@pytest.mark.parametrize("posdef", [True, None], ids=["posdef hint", "no hint"])
@pytest.mark.parametrize("engine", list(CASES))
def test_update_to_an_indefinite_matrix_falls_back_as_init_does(engine, posdef):
    _skip(engine)
    make, alg, kind = CASES[engine]
    b = np.arange(1.0, N + 1)
    spd, indefinite = make(tridiag()), make(tridiag(3.0))
    cache = sv.init(sv.LinearProblem(spd, b, posdef=posdef), alg)
    assert cache.kind == kind
    # what init does on the indefinite matrix ...
    with warnings.catch_warnings(record=True) as at_init:
        warnings.simplefilter("always")
        fresh = sv.init(sv.LinearProblem(indefinite, b, posdef=posdef), alg)
    # ... update does on the same pattern, warnings included
    with warnings.catch_warnings(record=True) as at_update:
        warnings.simplefilter("always")
        cache.update(A=indefinite)
    hint = [w for w in at_update if issubclass(w.category, sv.HintWarning)]
    assert len(hint) == (1 if posdef else 0)
    assert [str(w.message) for w in hint] == [str(w.message) for w in at_init
                                              if issubclass(w.category, sv.HintWarning)]
    assert "not positive definite" in cache.kind and "not positive definite" in fresh.kind
    assert cache.generation == 1 and cache.stats.fallbacks >= 1
    want = dense_solution(indefinite, b)
    for c in (cache, fresh):
        np.testing.assert_allclose(c.solve(), want, rtol=1e-11, atol=0)
        np.testing.assert_allclose(c.solve_adjoint(b), want, rtol=1e-11, atol=0)
    # and back: the cache keeps solving on the pattern (LU now), SPD values included
    cache.update(A=spd)
    np.testing.assert_allclose(cache.solve(), dense_solution(spd, b), rtol=1e-11, atol=0)


@pytest.mark.parametrize("engine", list(CASES))
def test_a_failed_fallback_at_update_leaves_the_cache_as_it_was(engine):
    _skip(engine)
    make, alg, _ = CASES[engine]
    b = np.ones(N)
    cache = sv.init(sv.LinearProblem(make(tridiag()), b), alg)
    u0 = cache.solve()
    # singular and Hermitian on the same pattern: the definite factorization fails, and so does
    # the general one, which names the singularity
    S = tridiag()
    S = sp.csr_matrix(S - sp.eye(N, format="csr") * float(np.linalg.eigvalsh(S.toarray())[4]))
    with pytest.raises(sv.SingularMatrixError):
        cache.update(A=make(S))
    assert cache.generation == 0 and cache.kind == CASES[engine][2]
    np.testing.assert_allclose(cache.solve(), u0, rtol=1e-13)


@needs_cholmod
def test_counts_of_a_fallback_at_update():
    cache = sv.init(sv.LinearProblem(tridiag(), np.ones(N)), sv.Auto())
    cache.update(A=tridiag(3.0))
    s = cache.stats
    # the failed numeric refactorization, then a full LU setup; no refactorization succeeded
    assert (s.factorizations, s.numeric_refactorizations, s.fallbacks) == (2, 0, 1)
    cache.update(A=tridiag(2.5))           # the LU factor now refactorizes numerically
    assert (s.factorizations, s.numeric_refactorizations, s.fallbacks) == (2, 1, 1)


@needs_pardiso
@pytest.mark.parametrize("posdef", [True, False])
def test_a_regular_matrix_pardiso_static_pivoting_refuses_goes_to_superlu(posdef):
    A = tridiag(3.0)
    b = np.arange(1.0, N + 1)
    with pytest.raises(sv.SingularMatrixError, match="pivots perturbed"):   # PARDISO alone
        sv.init(sv.LinearProblem(A, b), sv.Pardiso(posdef=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sv.HintWarning)
        cache = sv.init(sv.LinearProblem(A, b, posdef=posdef or None), sv.Auto(pardiso_min=1))
        assert cache.kind.startswith("SuperLU") and "static pivoting met a tiny pivot" in cache.kind
        np.testing.assert_allclose(cache.solve(), dense_solution(A, b), rtol=1e-11, atol=0)
        # an update from a matrix PARDISO takes to one it does not: the same fallback
        cache = sv.init(sv.LinearProblem(tridiag(), b, posdef=posdef or None),
                        sv.Auto(pardiso_min=1))
        assert "PARDISO" in cache.kind
        cache.update(A=A)
    assert cache.kind.startswith("SuperLU") and "static pivoting" in cache.kind
    np.testing.assert_allclose(cache.solve(), dense_solution(A, b), rtol=1e-11, atol=0)


# ----- loop_solves: the engines adjoints.jax's native FFI solve takes ------------------------------
needs_native = pytest.mark.skipif(not sv.native_available(),
                                  reason="solvers._native (KLU) is not built")


def _grid(n: int, skew: float = 0.0, dtype=np.float64) -> sp.csr_array:
    """A 1-D Laplacian + I (SPD), made nonsymmetric by ``skew`` on the upper diagonal."""
    A = sp.diags([-1.0, 2.5, -1.0 + skew], [-1, 0, 1], shape=(n, n), format="csr")
    return sp.csr_array(A.astype(dtype))


@needs_native
@pytest.mark.parametrize("what,A,kwargs,engine", [
    ("real SPD", _grid(40), dict(posdef=True), "CHOLMOD"),
    ("nonsymmetric", _grid(40, 0.3), {}, "KLU"),
    ("complex Hermitian", _grid(40, dtype=np.complex128), dict(hermitian=True), "KLU"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_loop_solves_picks_an_engine_the_native_solve_takes(what, A, kwargs, engine):
    if engine == "CHOLMOD" and not sv.cholmod_available():
        engine = "KLU"      # no CHOLMOD here: KLU solves natively as well
    b = np.arange(1.0, 41.0)
    cache = sv.init(sv.LinearProblem(A, **kwargs), sv.Auto(loop_solves=True))
    assert cache.kind.startswith(engine), cache.kind
    assert "solved in compiled loops" in cache.info, cache.info
    assert cache.factor.native_handle() != 0          # a factor the FFI call can solve with
    D = A.toarray()
    np.testing.assert_allclose(cache.solve(b), np.linalg.solve(D, b), rtol=1e-12)
    np.testing.assert_allclose(cache.solve_adjoint(b), np.linalg.solve(D.conj().T, b),
                               rtol=1e-12)


@needs_native
def test_loop_solves_falls_back_to_klu_for_an_indefinite_hermitian_matrix():
    A = sp.csr_array(np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.5], [0.0, 0.5, -3.0]]))
    cache = sv.init(sv.LinearProblem(A), sv.Auto(loop_solves=True))
    assert cache.kind.startswith("KLU"), cache.kind
    assert cache.stats.fallbacks == (1 if sv.cholmod_available() else 0)
    np.testing.assert_allclose(cache.solve(np.ones(3)), np.linalg.solve(A.toarray(), np.ones(3)),
                               rtol=1e-13)


@needs_native
def test_loop_solves_keeps_the_rules_where_the_native_engines_cannot_answer():
    """KLU does not invert selectively: a problem asking for A⁻¹'s entries keeps SuperLU; the
    rule is one of the host (a measurement is never made for a loop's factor)."""
    A = _grid(40, 0.3)
    cache = sv.init(sv.LinearProblem(A, asks=("selected_inverse",)), sv.Auto(loop_solves=True))
    assert cache.kind.startswith("SuperLU"), cache.kind
    indefinite = sp.csr_array(np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.5], [0.0, 0.5, -3.0]]))
    cache = sv.init(sv.LinearProblem(indefinite, asks=("selected_inverse",)),
                    sv.Auto(loop_solves=True))           # CHOLMOD refuses it: SuperLU, not KLU
    assert cache.kind.startswith("SuperLU"), cache.kind
    np.testing.assert_allclose(np.asarray(lo.diagonal(sv.inverse(cache))),
                               np.diag(np.linalg.inv(indefinite.toarray())), rtol=1e-12)
    big = sv.init(sv.LinearProblem(_grid(40, 0.3)), sv.Auto(loop_solves=True, pardiso_min=1,
                                                            tune=True))
    assert big.kind.startswith("KLU") and big.stats.tuning_factorizations == 0, big.info
