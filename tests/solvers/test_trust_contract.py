"""The trust contract: every case that once gave a silently wrong number or failed outright —
hints that do not hold, edited inputs, single precision, duck-typed operators, messages."""

from __future__ import annotations

import pickle
import time
import warnings

import numpy as np
import pyamg
import pytest
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv

NONSYM = np.array([[4.0, 1, 0], [3, 4, 1], [0, 2, 4]])
RIGHT = np.array([0.25, 0.0, 0.25])


# 1. hints never switch off the check that makes the result right --------------------------------
@pytest.mark.parametrize("fmt", ["dense", "csr"])
@pytest.mark.parametrize("hint", [dict(posdef=True), dict(hermitian=True)])
def test_hint_on_non_hermitian_matrix(fmt, hint):
    A = NONSYM if fmt == "dense" else sp.csr_matrix(NONSYM)
    with pytest.warns(sv.HintWarning, match="not Hermitian"):
        sol = sv.solve(sv.LinearProblem(A, np.ones(3), **hint))
    np.testing.assert_allclose(sol.u, RIGHT, atol=1e-14)
    with pytest.raises(sv.NotHermitianError, match=r"max\|A - Aᴴ\| = 2 at \(\d, \d\)"):
        sv.solve(sv.LinearProblem(A, np.ones(3), **hint), sv.Cholesky())
    sol = sv.solve(sv.LinearProblem(A, np.ones(3), **hint), sv.Cholesky(), throw=False)
    assert sol.status is sv.Status.NOT_HERMITIAN and sol.u is None


def test_cg_on_non_hermitian_matrix_never_returns_garbage():
    A = sp.csr_matrix(NONSYM * np.array([1, 1, 1]) + np.diag([0, 0, 0]))
    try:
        sol = sv.solve(sv.LinearProblem(A, np.ones(3), posdef=True), sv.CG(rtol=1e-12))
        np.testing.assert_allclose(sol.u, RIGHT, atol=1e-10)
    except sv.ConvergenceError as e:
        assert e.status in (sv.Status.MAX_ITERATIONS, sv.Status.STAGNATION, sv.Status.BREAKDOWN)


# 2. a cache never mixes states -------------------------------------------------------------------
def test_pullback_after_user_edit_uses_the_solved_matrix():
    A0 = np.array([[4.0, 1], [2, 3]])
    A = A0.copy()
    b, a = np.array([1.0, 2]), np.array([1.0, -1])
    sol = sv.solve(sv.LinearProblem(A, b))
    A *= 2.0  # the user edits the array after solving
    g = ad.solve_pullback(sol, a)
    lam, u = np.linalg.solve(A0.T, a), np.linalg.solve(A0, b)
    np.testing.assert_allclose(lo.to_dense(g.A), -np.outer(lam, u), atol=1e-15)
    assert sol.stats.factorizations == 1 and sol.stats.numeric_refactorizations == 0


def test_update_forgets_u_and_stale_solutions_are_refused():
    A = sp.csr_matrix(np.array([[4.0, 1], [2, 3]]))
    sol = sv.solve(sv.LinearProblem(A, np.array([1.0, 2])))
    cache = sol.cache
    cache.update(A=A * 2)
    assert cache.u is None and not sol.current
    with pytest.raises(sv.StaleSolutionError, match="earlier A"):
        ad.solve_pullback(sol, np.ones(2))
    with pytest.raises(sv.StaleSolutionError, match="call cache.solve"):
        ad.solve_pullback(cache, np.ones(2))
    cache.solve()
    g = ad.solve_pullback(cache, np.ones(2))
    np.testing.assert_allclose(g.b, np.linalg.solve(2 * A.toarray().T, np.ones(2)))


def test_failed_update_keeps_the_whole_state():
    A = sp.csr_matrix(np.array([[4.0, 1], [2, 3]]))
    sol = sv.solve(sv.LinearProblem(A, np.array([1.0, 2])))
    cache = sol.cache
    with pytest.raises(sv.SingularMatrixError):
        cache.update(A=sp.csr_matrix(np.array([[1.0, 1], [1, 1]])))
    assert cache.generation == 0 and cache.u is sol.u and sol.current
    ad.solve_pullback(sol, np.ones(2))  # still valid


# 3. one mutation rule for every input type: snapshot at construction --------------------------
def _inputs():
    D = np.array([[4.0, 1, 0], [1, 5, 2], [0, 2, 6]])
    yield "numpy", D.copy(), lambda a: a.__imul__(3.0)
    for fmt in ("csr", "csc", "coo", "bsr", "lil"):
        yield f"scipy-{fmt}", sp.csr_matrix(D).asformat(fmt), lambda S: _edit_scipy(S)
    yield "np.matrix", np.matrix(D), lambda m: m.__imul__(3.0)
    S = lo.aslinop(sp.csr_matrix(D))
    vals = np.array(S.values)
    yield "lo.Sparse(values)", (vals, S.pattern), lambda t: t[0].__imul__(3.0)
    yield "lo.Dense(a)", ("dense", D.copy()), lambda t: t[1].__imul__(3.0)
    yield "lo.Diagonal(d)", ("diag", np.diag(D).copy()), lambda t: t[1].__imul__(3.0)


def _edit_scipy(S):
    if S.format == "lil":
        S[0, 0] = 100.0
    else:
        S.data *= 3.0


def _wrap(x):
    if isinstance(x, tuple) and isinstance(x[0], np.ndarray):
        return lo.Sparse(*x)
    if isinstance(x, tuple) and x[0] == "dense":
        return lo.Dense(x[1])
    if isinstance(x, tuple) and x[0] == "diag":
        return lo.Diagonal(x[1])
    return x


@pytest.mark.parametrize("name", [n for n, _, _ in _inputs()])
def test_editing_the_input_never_reaches_the_cache(name):
    _, x, edit = next(t for t in _inputs() if t[0] == name)
    A = _wrap(x)
    dense_before = np.array(lo.to_dense(lo.aslinop(A)))
    b = np.array([1.0, 2.0, 3.0])
    cache = sv.init(sv.LinearProblem(A, b), sv.LU())
    u1 = np.array(cache.solve())
    edit(x)
    np.testing.assert_allclose(cache.solve(), u1, atol=0)
    np.testing.assert_allclose(cache.solve(), np.linalg.solve(dense_before, b), atol=1e-14)
    assert cache.stats.factorizations == 1 and cache.stats.numeric_refactorizations == 0


def test_operator_arrays_and_solutions_are_read_only():
    A = lo.aslinop(sp.csr_matrix(np.eye(3) * 2))
    with pytest.raises(ValueError, match="read-only"):
        A.values[0] = 5.0
    u = sv.solve(sv.LinearProblem(A, np.ones(3))).u
    with pytest.raises(ValueError, match="read-only"):
        u[0] = 0.0
    R = lo.RankOne(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="read-only"):
        R.u[0] = 2.0


def test_jax_arrays_need_no_copy():
    jnp = pytest.importorskip("jax.numpy")
    v = jnp.ones(3)
    assert lo.Diagonal(v).d is v  # immutable already: the rule costs nothing


def test_snapshot_costs_nothing_per_solve():
    """The rule's cost is one copy at construction; a solve does no work on A (counted by
    making A's arrays unreadable to numpy after init would be intrusive, so we count time
    ratios in benchmarks/snapshot_cost.py and here check that solve does not touch the operator)."""
    n = 400
    A = lo.Dense(np.eye(n) * 2 + np.random.default_rng(0).random((n, n)) * 0.01)
    cache = sv.init(sv.LinearProblem(A), sv.LU())
    calls = []
    orig = type(A).matmat
    try:
        type(A).matmat = lambda self, X: calls.append(1) or orig(self, X)
        for _ in range(5):
            cache.solve(np.ones(n))
            cache.solve_adjoint(np.ones(n))
    finally:
        type(A).matmat = orig
    assert calls == []


# 4. every dtype: see test_conformance (float32/complex64 × every algorithm) ---------------------
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_single_precision_sparse_lu_init(dtype):
    A = (sp.random(30, 30, 0.2, random_state=1) + sp.eye(30) * 4).astype(dtype).tocsr()
    sol = sv.solve(sv.LinearProblem(A, np.ones(30, dtype)), sv.LU())
    assert sol.u.dtype == dtype
    assert np.linalg.norm(A @ sol.u - 1) / np.sqrt(30) < 1e-5
    g = ad.solve_pullback(sol, np.ones(30, dtype))
    assert lo.project(g.A, like=sol.cache.A).values.dtype == dtype


# 5. Identity / Identity + RankOne -----------------------------------------------------------------
def test_identity_and_woodbury_over_identity():
    np.testing.assert_array_equal(sv.solve(sv.LinearProblem(lo.Identity(4), np.ones(4))).u,
                                  np.ones(4))
    I1 = lo.Identity(4) + lo.RankOne(np.ones(4), np.arange(4.0))
    ref = np.linalg.solve(lo.to_dense(I1), np.ones(4))
    for alg in (sv.Auto(), sv.Woodbury(), sv.GMRES(rtol=1e-12)):
        np.testing.assert_allclose(sv.solve(sv.LinearProblem(I1, np.ones(4)), alg).u, ref,
                                   atol=1e-12)
    x = np.ones(3)
    y = lo.Identity(3) @ x
    y[0] = 7.0
    assert x[0] == 1.0  # applying I never aliases the caller's array


# 6. jax MatrixFree with Krylov; host-only preconditioners on jax ---------------------------------
def test_jax_matrix_free_krylov_and_declared_preconditioners():
    jnp = pytest.importorskip("jax.numpy")
    P = pyamg.gallery.poisson((10, 10), format="csr")
    M = jnp.asarray(P.toarray())
    mf = lo.MatrixFree((100, 100), np.float64, lambda X: M @ X, lambda X: M.T @ X)
    for b in (jnp.ones(100), np.ones(100)):
        u = sv.solve(sv.LinearProblem(mf, b), sv.CG(rtol=1e-12)).u
        np.testing.assert_allclose(P @ np.asarray(u), np.ones(100), atol=1e-9)
    J = lo.Sparse(jnp.asarray(lo.aslinop(P).values), lo.aslinop(P).pattern)
    for pc, name in ((sv.AMG(), "AMG"), (sv.ILU(), "ILU")):
        with pytest.raises(lo.BackendNotSupported, match=rf"{name}.*jax.*Jacobi"):
            sv.solve(sv.LinearProblem(J, jnp.ones(100)), sv.CG(precond=pc))
    assert sv.solve(sv.LinearProblem(J, jnp.ones(100)), sv.CG(precond=sv.Jacobi())).status.ok


# 7. duck-typed operators, np.matrix, pickling -----------------------------------------------------
class _PyLopsLike:
    """Shape, dtype, matvec and rmatvec: what a PyLops operator offers."""

    def __init__(self, a):
        self.a, self.shape, self.dtype = a, a.shape, a.dtype

    def matvec(self, x):
        return self.a @ x

    def rmatvec(self, x):
        return self.a.conj().T @ x


def test_duck_typed_operator_wraps_and_passes_dottest():
    a = np.random.default_rng(0).standard_normal((5, 4)) + 1j
    op = lo.aslinop(_PyLopsLike(a))
    assert isinstance(op, lo.MatrixFree)
    np.testing.assert_allclose(op @ np.ones(4), a @ np.ones(4))
    np.testing.assert_allclose(op.H @ np.ones(5), a.conj().T @ np.ones(5))
    assert lo.testing.dottest(op)


def test_things_that_are_not_operators_are_refused():
    class ShapeOnly:
        shape, dtype = (3, 3), np.float64

    with pytest.raises(lo.UnsupportedOperandError, match="matvec"):
        lo.aslinop(ShapeOnly())


def test_np_matrix_and_pickle():
    A = lo.aslinop(np.matrix(np.eye(2) * 3))
    assert (A @ np.ones(2)).shape == (2,)
    L = pickle.loads(pickle.dumps(lo.aslinearoperator(sp.eye(3, format="csr") * 2)))
    np.testing.assert_allclose(L @ np.ones(3), 2 * np.ones(3))
    np.testing.assert_allclose(L.H @ np.ones(3), 2 * np.ones(3))


# 8. throw=False always returns a Solution ---------------------------------------------------------
def test_throw_false_never_raises_for_solve_failures():
    S = sp.csr_matrix(np.array([[1.0, 1], [1, 1]]))
    assert sv.solve(sv.LinearProblem(S, np.ones(2)), throw=False).status is sv.Status.SINGULAR
    bad = sv.solve(sv.LinearProblem(np.eye(2), np.array([np.nan, 1])), throw=False)
    assert bad.status is sv.Status.NONFINITE_INPUT and bad.u is None
    A = np.eye(2)
    A[0, 1] = np.inf
    assert sv.solve(sv.LinearProblem(A, np.ones(2)), throw=False).status \
        is sv.Status.NONFINITE_INPUT


# 9. Krylov acceptance ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["airfoil", "bar", "knot", "unit_cube"])
def test_cg_amg_tight_tolerance_on_pyamg_examples(name):
    A = sp.csr_matrix(pyamg.gallery.load_example(name)["A"])
    rng = np.random.default_rng(1)
    for _ in range(3):
        b = rng.standard_normal(A.shape[0])
        sol = sv.solve(sv.LinearProblem(A, b, hermitian=True, posdef=True),
                       sv.CG(rtol=1e-12, precond=sv.AMG()))
        r = np.linalg.norm(A @ sol.u - b) / np.linalg.norm(b)
        assert sol.status.ok
        assert r <= 1e-12 or (sol.status is sv.Status.ACCURACY_LIMIT and r < 1e-10)


def test_singular_inconsistent_system_is_never_accepted():
    A = sp.csr_matrix(pyamg.gallery.load_example("unit_square")["A"])  # pure Neumann
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    with pytest.raises(sv.ConvergenceError) as e:
        sv.solve(sv.LinearProblem(A, b, posdef=True), sv.CG(rtol=1e-12, precond=sv.AMG()))
    assert e.value.status in (sv.Status.MAX_ITERATIONS, sv.Status.STAGNATION)


@pytest.mark.parametrize("m", [64, 256])
def test_linearsolve_476_gmres_jacobi_badly_scaled_rows(m):
    """LinearSolve.jl #476: GMRES + Jacobi on diag(10^±8)·(R + mI). Forward and adjoint both
    accurate and quick (the adjoint is right-preconditioned with Mᴴ)."""
    rng = np.random.default_rng(m)
    A = np.diag(10.0 ** (8 * rng.choice([-1, 1], m))) @ (rng.random((m, m)) + m * np.eye(m))
    x = rng.standard_normal(m)
    sol = sv.solve(sv.LinearProblem(A, A @ x), sv.GMRES(rtol=1e-12, precond=sv.Jacobi()))
    assert sol.status.ok and sol.stats.iterations < 100
    np.testing.assert_allclose(sol.u, x, rtol=0, atol=1e-10 * np.abs(x).max())
    c = rng.standard_normal(m)
    lam = sol.cache.solve_adjoint(c)
    ref = np.linalg.solve(A.T, c)
    assert np.abs(lam - ref).max() <= 1e-9 * np.abs(ref).max()
    assert sol.stats.iterations < 200


def test_float32_tight_rtol_is_accepted_at_the_accuracy_limit():
    A = pyamg.gallery.poisson((12, 12), format="csr").astype(np.float32)
    sol = sv.solve(sv.LinearProblem(A, np.ones(144, np.float32)), sv.CG(rtol=1e-12))
    assert sol.status is sv.Status.ACCURACY_LIMIT
    assert np.linalg.norm(A @ sol.u - 1) / 12 < 1e-5


def test_gmres_maxiter_counts_iterations_not_cycles():
    A = pyamg.gallery.poisson((15, 15), format="csr") + 0.3 * sp.eye(225, k=1)
    with pytest.raises(sv.ConvergenceError):
        sv.solve(sv.LinearProblem(A, np.ones(225)), sv.GMRES(rtol=1e-14, restart=10, maxiter=25))
    cache = sv.init(sv.LinearProblem(A, np.ones(225)), sv.GMRES(rtol=1e-14, restart=10,
                                                                  maxiter=25))
    with pytest.raises(sv.ConvergenceError):
        cache.solve()
    assert cache.stats.iterations <= 30 * (1 + 4)  # three cycles of ten per run, few restarts


# 10. misuse gets a message that teaches ----------------------------------------------------------
def test_messages():
    with pytest.raises(TypeError, match=r"sv.solve\(sv.LinearProblem\(A, b\)\)"):
        sv.solve(sp.eye(3, format="csr"), np.ones(3))
    np.testing.assert_allclose(sv.solve(sv.LinearProblem(np.eye(3), np.ones(3)), "lu").u,
                               np.ones(3))
    with pytest.raises(ValueError, match="names: .*cholesky.*gmres"):
        sv.solve(sv.LinearProblem(np.eye(3), np.ones(3)), "foo")
    with pytest.raises(TypeError, match="algorithm"):
        sv.solve(sv.LinearProblem(np.eye(3), np.ones(3)), 42)
    for bad in (lambda: sv.CG(rtol=-1), lambda: sv.LU(pivot_rtol=-1),
                lambda: sv.GMRES(restart=0), lambda: sv.CG(maxiter=0),
                lambda: sv.AMG(kind="xx"), lambda: sv.ILU(drop_tol=-1)):
        with pytest.raises(ValueError):
            bad()
    np.testing.assert_allclose(sv.solve(sv.LinearProblem(np.eye(3), [1, 2, 3])).u, [1, 2, 3])
    with pytest.raises(lo.ShapeError, match=r"n=3 .* got b.shape=\(2,\)"):
        sv.LinearProblem(np.eye(3), [1.0, 2.0])
    with pytest.raises(lo.ShapeError, match="got str"):
        sv.LinearProblem(np.eye(3), "abc")
    with pytest.raises(TypeError, match="posdef must be True, False or None"):
        sv.LinearProblem(np.eye(3), np.ones(3), posdef="yes")


def test_integer_matrices_are_solved_in_float64():
    sol = sv.solve(sv.LinearProblem(np.array([[2, 0], [0, 4]]), np.array([2, 4])))
    assert sol.u.dtype == np.float64
    np.testing.assert_allclose(sol.u, [1.0, 1.0])


def test_warning_for_hint_points_at_the_caller():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        sv.solve(sv.LinearProblem(NONSYM, np.ones(3), posdef=True))
    assert w and w[0].filename == __file__


# the backend table --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["numpy", "cupy", "jax"])
def test_backend_table_entries_name_their_alternative(name):
    from linops.internals import CAPABILITIES, DTYPES, backend_named

    be = backend_named(name)
    assert be.name == name and set(be.dtypes) == set(DTYPES)
    for cap in CAPABILITIES:
        for dt in (None,) + DTYPES:
            reason = be.capability(cap, dt)
            assert reason is None or ("use" in reason or "pip install" in reason), (cap, reason)
    with pytest.raises(KeyError, match="unknown capability"):
        be.capability("fft")
    with pytest.raises(lo.BackendNotSupported, match="float16"):
        be.require_dtype(np.float16, "solve")


def test_unsupported_dtype_is_a_named_error():
    with pytest.raises(lo.BackendNotSupported, match="float16"):
        sv.init(sv.LinearProblem(np.eye(2, dtype=np.float16), np.ones(2)))


def test_hermitian_method_adjoint_runs_on_a_and_checks_against_the_true_adjoint():
    """CG/MINRES adjoint solves run on A itself (no transposed pattern is built) and are
    accepted only if they satisfy Aᴴλ = c: a non-Hermitian A is caught, never returned."""
    A = sp.csr_matrix(np.array([[4.0, 1.0, 0], [0.2, 4.0, 1.0], [0, 0.3, 4.0]]))
    cache = sv.init(sv.LinearProblem(A, np.ones(3)), sv.CG(rtol=1e-12))
    with pytest.raises(sv.ConvergenceError):
        cache.solve_adjoint(np.array([1.0, 2.0, 3.0]))
    H = lo.aslinop(sp.csr_matrix(np.array([[4.0, 1 - 1j], [1 + 1j, 3.0]])))
    cache = sv.init(sv.LinearProblem(H, np.ones(2)), sv.CG(rtol=1e-13))
    lam = cache.solve_adjoint(np.array([1.0, 1j]))
    np.testing.assert_allclose(lo.to_dense(H).conj().T @ lam, [1.0, 1j], atol=1e-12)
    assert "_transpose" not in H.pattern.__dict__  # no transposed pattern was computed
