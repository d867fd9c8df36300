"""lineax's own test cases (their non-JAX semantics), ported to our API with numpy arrays.

Sources (patrick-kidger/lineax, ``tests/``, read for the cases and re-expressed here):
``test_operator.py`` (operator algebra, materialise, diagonal/tridiagonal extraction,
structure checks), ``test_adjoint.py``, ``test_transpose.py``, ``test_well_posed.py``,
``test_solve.py``, ``test_singular.py`` and ``helpers.py`` (the operator makers and the
solver × structure-tag table).

Their operator makers map to ours: MatrixLinearOperator -> ``lo.Dense``;
FunctionLinearOperator / JacobianLinearOperator -> ``lo.MatrixFree``; a sparse stored matrix
-> ``lo.Sparse``; DiagonalLinearOperator -> ``lo.Diagonal``; IdentityLinearOperator ->
``lo.Identity``; TridiagonalLinearOperator -> ``lo.Sparse`` on the tridiagonal pattern; the
"neg" maker -> ``-lo.Dense(-M)``. Their solvers map to ``sv.LU``, ``sv.Cholesky``, ``sv.CG``,
``sv.GMRES``, ``sv.BiCGStab``, ``sv.DiagonalSolve`` and ``sv.Auto``; ``Normal(S)`` is ``S`` on
the lazy normal equations ``AᴴA``.

Deliberate differences (our documented behaviour is tested instead): we have no
least-squares / pseudo-inverse solvers (QR, SVD, LSMR, ``well_posed=False``): a singular
system is a named error and a rectangular one a ShapeError; ``Cholesky`` on a negative
(semi)definite matrix is a SingularMatrixError (lineax negates it); an iterative solve that
runs out of steps is a ConvergenceError (lineax returns the iterate when rtol = atol = 0);
pytree operators, tags, ``linearise`` and JAX transforms are not ours (JAX is tested
elsewhere).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose

import linops as lo
import solvers as sv
from linops.testing import check_against_dense, dottest

DTYPES = [pytest.param(np.float64, id="f64"), pytest.param(np.complex128, id="c128")]


def _normal(rng, shape, dtype):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


# ----- the operator makers (helpers.py::make_operators) -------------------------------------------
def make_matrix(M):
    return lo.Dense(M)


def make_sparse(M):
    return lo.aslinop(sp.csr_matrix(M))


def make_function(M):
    return lo.MatrixFree(M.shape, M.dtype, lambda X: M @ X, lambda X: M.conj().T @ X)


def make_neg(M):
    return -lo.Dense(-M)


def make_diagonal(M):
    return lo.Diagonal(np.diag(M).copy())


def make_identity(M):
    return lo.Identity(M.shape[0], dtype=M.dtype)


def make_tridiagonal(M):
    n = M.shape[0]
    rows, cols = np.nonzero(np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) <= 1)
    P = lo.Pattern.from_coo(rows, cols, (n, n))
    return lo.Sparse(M[P.rows, P.indices].copy(), P)


GENERAL = [make_matrix, make_sparse, make_function, make_neg]
STRUCTURED = [make_diagonal, make_identity, make_tridiagonal]
MAKERS = [pytest.param(m, id=m.__name__[5:]) for m in GENERAL + STRUCTURED]


def _matrix_for(make, rng, n, dtype):
    """A matrix that the maker represents exactly (lineax: eye for diagonal/identity/tridiag
    in test_ops; here a random one with that structure, so that the checks can fail)."""
    M = _normal(rng, (n, n), dtype)
    if make is make_identity:
        return np.eye(n, dtype=dtype)
    if make is make_diagonal:
        return np.diag(np.diag(M))
    if make is make_tridiagonal:
        return np.triu(np.tril(M, 1), -1)
    return M


# ----- test_operator.py ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("make", MAKERS)
def test_ops(make, dtype):
    # ports lineax test_operator.py::test_ops: +, @, * scalar, scalar *, / scalar agree with the
    # matrices (mv, as_matrix, and the transpose of each)
    rng = np.random.default_rng(0)
    M1 = _matrix_for(make, rng, 3, dtype)
    op1 = make(M1)
    M2 = _normal(rng, (3, 3), dtype)
    op2 = lo.Dense(M2)
    s = _normal(rng, (), dtype)[()]
    vec = _normal(rng, (3,), dtype)
    cases = {"add": (op1 + op2, M1 + M2), "composed": (op1 @ op2, M1 @ M2),
             "mul": (op1 * s, M1 * s), "rmul": (s * op1, s * M1), "div": (op1 / s, M1 / s)}
    assert_allclose(op1 @ vec + op2 @ vec, cases["add"][0] @ vec, rtol=1e-13)
    assert_allclose(op1 @ (op2 @ vec), cases["composed"][0] @ vec, rtol=1e-13)
    for name, (op, ref) in cases.items():
        assert_allclose(op @ vec, ref @ vec, rtol=1e-13, atol=1e-14, err_msg=name)
        assert_allclose(lo.to_dense(op), ref, rtol=1e-13, atol=1e-14, err_msg=name)
        assert_allclose(lo.to_dense(op.T), ref.T, rtol=1e-13, atol=1e-14, err_msg=name)
        assert_allclose(lo.to_dense(op.H), ref.conj().T, rtol=1e-13, atol=1e-14, err_msg=name)


@pytest.mark.parametrize("make", [pytest.param(m, id=m.__name__[5:]) for m in GENERAL])
def test_structures_vector(make):
    # ports lineax test_operator.py::test_structures_vector (in/out sizes of a 3×5 operator)
    M = np.random.default_rng(0).standard_normal((3, 5))
    op = make(M)
    assert op.shape == (3, 5) and op.dtype == np.float64
    assert (op @ np.ones(5)).shape == (3,) and (op.H @ np.ones(3)).shape == (5,)
    with pytest.raises(lo.ShapeError, match=r"A.shape=\(3, 5\)"):
        op @ np.ones(3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (200, 500)], ids=["small", "large"])
def test_materialise(shape, dtype):
    # ports lineax test_operator.py::test_materialise and ::test_materialise_large
    M = _normal(np.random.default_rng(1), shape, dtype)
    for make in GENERAL:
        D = lo.to_dense(make(M))
        assert D.shape == shape and np.dtype(D.dtype) == np.dtype(dtype)
        assert_allclose(D, M, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("make", MAKERS)
def test_diagonal(make, dtype):
    # ports lineax test_operator.py::test_diagonal (extract the diagonal of any operator)
    M = _matrix_for(make, np.random.default_rng(2), 4, dtype)
    assert_allclose(lo.diagonal(make(M)), np.diag(M), rtol=1e-14)
    assert_allclose(lo.trace(make(M)), np.trace(M), rtol=1e-13)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tridiagonal(dtype):
    # ports lineax test_operator.py::test_tridiagonal: the three diagonals of a tridiagonal
    # operator and of diag @ tridiag / tridiag @ diag (via lo.diagonal and lo.sample)
    rng = np.random.default_rng(3)
    T = _matrix_for(make_tridiagonal, rng, 5, dtype)
    d = _normal(rng, (5,), dtype)
    i = np.arange(4)

    def diagonals(op):
        return lo.diagonal(op), lo.sample(op, i + 1, i), lo.sample(op, i, i + 1)

    for op, ref in ((make_tridiagonal(T), T), (make_identity(np.eye(5, dtype=dtype)), np.eye(5)),
                    (lo.Diagonal(d) @ make_tridiagonal(T), np.diag(d) @ T),
                    (make_tridiagonal(T) @ lo.Diagonal(d), T @ np.diag(d))):
        got = diagonals(op)
        for k, g in zip((0, -1, 1), got):
            assert_allclose(g, np.diagonal(ref, k), rtol=1e-14, atol=1e-15)


def _hpd_for(make, rng, n, dtype):
    """A Hermitian positive definite matrix that the maker represents exactly."""
    if make is make_identity:
        return np.eye(n, dtype=dtype)
    if make is make_diagonal:
        return np.diag(np.abs(_normal(rng, (n,), dtype)) + 1.0).astype(dtype)
    if make is make_tridiagonal:
        off = _normal(rng, (n - 1,), dtype)
        return (np.diag(4.0 + np.abs(_normal(rng, (n,), dtype))) + np.diag(off, 1)
                + np.diag(off.conj(), -1)).astype(dtype)
    M = _normal(rng, (n, n), dtype)
    return M.conj().T @ M + 0.1 * np.eye(n)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("make", MAKERS)
def test_is_symmetric_decides_cholesky(make, dtype):
    # ports lineax test_operator.py::test_is_symmetric / ::test_is_positive_semidefinite /
    # ::test_is_negative_semidefinite as the decision they drive here: Cholesky accepts a
    # Hermitian positive definite operator, refuses a non-Hermitian one (NotHermitianError),
    # and a Hermitian non-PD one (SingularMatrixError; lineax negates an NSD matrix instead).
    # The sparse (CHOLMOD) non-PD case is test_sparse_cholesky_refuses_non_positive_definite.
    rng = np.random.default_rng(4)
    n = 4
    H = _hpd_for(make, rng, n, dtype)
    b = _normal(rng, (n,), dtype)
    u = sv.solve(sv.LinearProblem(make(H), b), sv.Cholesky()).u
    assert_allclose(H @ u, b, rtol=1e-10, atol=1e-10)
    if make not in (make_identity, make_sparse, make_tridiagonal):
        with pytest.raises(sv.SingularMatrixError, match="not positive definite"):
            sv.solve(sv.LinearProblem(make(-H), b), sv.Cholesky())
        sol = sv.solve(sv.LinearProblem(make(-H), b), sv.Cholesky(), throw=False)
        assert sol.status is sv.Status.SINGULAR and sol.u is None
    if make not in (make_diagonal, make_identity):  # those are Hermitian whenever real
        N = H + 2.0 * np.triu(np.ones((n, n)), 1)
        N = np.triu(np.tril(N, 1), -1) if make is make_tridiagonal else N
        with pytest.raises(sv.NotHermitianError, match="Hermitian"):
            sv.solve(sv.LinearProblem(make(N), b), sv.Cholesky())


@pytest.mark.parametrize("kind", ["negative-definite", "indefinite"])
@pytest.mark.parametrize("make", [make_sparse, make_tridiagonal], ids=["sparse", "tridiagonal"])
def test_sparse_cholesky_refuses_non_positive_definite(make, kind):
    # ports lineax test_operator.py::test_is_negative_semidefinite + helpers' Cholesky rows
    # (Cholesky needs positive definite): same rule for the sparse factorization as the dense
    rng = np.random.default_rng(4)
    H = _hpd_for(make_tridiagonal, rng, 4, np.float64)
    A = -H if kind == "negative-definite" else H - 4.5 * np.eye(4) * (np.arange(4) % 2)
    assert np.linalg.eigvalsh(A).max() > 0 or kind == "negative-definite"
    b = np.ones(4)
    with pytest.raises(sv.SingularMatrixError, match="not positive definite"):
        sv.solve(sv.LinearProblem(lo.Dense(A), b), sv.Cholesky())  # the dense path refuses
    with pytest.raises(sv.SingularMatrixError):
        sv.solve(sv.LinearProblem(make(A), b), sv.Cholesky())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("make", MAKERS)
def test_adjoint(make, dtype):
    # ports lineax test_adjoint.py::test_adjoint: <A v1, v2> = <v1, conj(A)ᵀ v2> = <v1, conj(Aᵀ) v2>
    rng = np.random.default_rng(5)
    if make in GENERAL:
        M = _normal(rng, (3, 5), dtype)
    else:
        M = _matrix_for(make, rng, 4, dtype)
    op = make(M)
    v1, v2 = _normal(rng, (op.shape[1],), dtype), _normal(rng, (op.shape[0],), dtype)
    inner1 = np.vdot(v2, op @ v1)
    for adj in (op.conj().T, op.T.conj(), op.H):
        assert_allclose(np.vdot(adj @ v2, v1), inner1, rtol=1e-13)
    assert dottest(op)


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_sized_operator_materialises(dtype):
    # ports lineax test_operator.py::test_zero_pytree_as_matrix (as_matrix of a 0-sized op)
    for op in (lo.Zero((0, 0), dtype), lo.Dense(np.zeros((0, 0), dtype)),
               lo.Dense(np.zeros((0, 3), dtype)), lo.Zero((3, 0), dtype)):
        D = lo.to_dense(op)
        assert D.shape == op.shape
        assert (op @ np.zeros(op.shape[1], dtype)).shape == (op.shape[0],)
        assert (op.H @ np.zeros(op.shape[0], dtype)).shape == (op.shape[1],)


def test_zero_sized_operator_check_against_dense():
    # ports lineax test_operator.py::test_zero_pytree_as_matrix through our public checker
    for op in (lo.Dense(np.zeros((0, 3))), lo.Zero((3, 0)), lo.Zero((0, 0))):
        assert dottest(op)
        assert check_against_dense(op)


# ----- test_well_posed.py / test_transpose.py: solver × structure table ---------------------------
TOL = 1e-12


def _construct(rng, n, dtype, tags):
    """helpers.py::_construct_matrix_impl: random, with the tags' structure, cond < 1000."""
    while True:
        M = _normal(rng, (n, n), dtype)
        if "diagonal" in tags:
            M = np.diag(np.diag(M))
        if "symmetric" in tags:
            M = M + M.T
        if "lower" in tags:
            M = np.tril(M)
        if "upper" in tags:
            M = np.triu(M)
        if "unit" in tags:
            M[np.arange(n), np.arange(n)] = 1
        if "tridiagonal" in tags:
            M = np.triu(np.tril(M, 1), -1)
        if "psd" in tags:
            M = M @ M.T.conj()
        if "nsd" in tags:
            M = -M @ M.T.conj()
        if np.linalg.cond(M) < 1000:
            return M


# (our solver, tags, makers it applies to) after helpers.py::solvers_tags_pseudoinverse
SOLVER_TABLE = [
    ("Auto", lambda: sv.Auto(), (), GENERAL),
    ("LU-lower", lambda: sv.LU(), ("lower",), [make_matrix, make_sparse]),
    ("LU-upper", lambda: sv.LU(), ("upper",), [make_matrix, make_sparse]),
    ("LU-lower-unit", lambda: sv.LU(), ("lower", "unit"), [make_matrix, make_sparse]),
    ("LU-upper-unit", lambda: sv.LU(), ("upper", "unit"), [make_matrix, make_sparse]),
    ("Diagonal", lambda: sv.DiagonalSolve(), ("diagonal",), [make_diagonal]),
    ("Diagonal-unit", lambda: sv.DiagonalSolve(), ("diagonal", "unit"), [make_diagonal, make_identity]),
    ("Tridiagonal", lambda: sv.LU(), ("tridiagonal",), [make_tridiagonal]),
    ("LU", lambda: sv.LU(), (), GENERAL),
    ("BiCGStab", lambda: sv.BiCGStab(rtol=TOL, atol=0.0), (), GENERAL),
    ("GMRES", lambda: sv.GMRES(rtol=TOL, atol=0.0), (), GENERAL),
    ("CG-psd", lambda: sv.CG(rtol=TOL, atol=0.0), ("psd",), GENERAL),
    ("CG-nsd", lambda: sv.CG(rtol=TOL, atol=0.0), ("nsd",), GENERAL),
    ("Cholesky-psd", lambda: sv.Cholesky(), ("psd",), GENERAL),
    ("MINRES-symmetric", lambda: sv.MINRES(rtol=TOL, atol=0.0), ("symmetric",), GENERAL),
]
WELLPOSED = [pytest.param(name, alg, tags, make, id=f"{name}-{make.__name__[5:]}")
             for name, alg, tags, makers in SOLVER_TABLE for make in makers]


def _ops(op, M, which):
    """helpers.py::ops: the operator as is, transposed, or materialised."""
    if which == "transpose":
        return op.T, M.T
    if which == "materialise":
        return lo.Dense(lo.to_dense(op)), M
    return op, M


@pytest.mark.parametrize("which", ["identity", "transpose", "materialise"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, alg, tags, make", WELLPOSED)
def test_small_wellposed(name, alg, tags, make, dtype, which):
    # ports lineax test_well_posed.py::test_small_wellposed (3×3, cond < 1000, x = true x)
    if name == "MINRES-symmetric" and np.dtype(dtype).kind == "c":
        pytest.skip("MINRES is declared unsupported for complex on numpy (scipy's is wrong)")
    if name.startswith("Diagonal") and which == "materialise":
        pytest.skip("DiagonalSolve on a materialised (Dense) operator: test_diagonal_solve_on_dense")
    rng = np.random.default_rng(zlib.crc32(f"{name}{make.__name__}{which}{dtype}".encode()))
    M = _construct(rng, 3, dtype, tags)
    op, M = _ops(make(M), M, which)
    assert_allclose(lo.to_dense(op), M, rtol=1e-12, atol=1e-12)
    true_x = _normal(rng, (3,), dtype)
    b = M @ true_x
    sol = sv.solve(sv.LinearProblem(op, b), alg())
    assert sol.status.ok
    tol = 1e-10 if name in ("Auto", "LU", "Cholesky-psd") or name.startswith(("LU", "Diag", "Tri")) \
        else 1e-8  # iterative: forward error <= cond · rtol
    assert_allclose(sol.u, true_x, rtol=tol, atol=tol)
    assert_allclose(sol.u, np.linalg.solve(M, b), rtol=tol, atol=tol)


def test_diagonal_solve_on_dense():
    # ports lineax test_well_posed.py::test_small_wellposed for (lx.Diagonal(), diagonal_tag)
    # with the _materialise op: the Diagonal solver on a materialised diagonal matrix. Ours must
    # solve it or refuse with a named error saying what it needs: the registry declares that
    # DiagonalSolve takes diagonal operators, so init refuses a dense one with that message.
    D = lo.Dense(np.diag([2.0, 4.0, 5.0]))
    try:
        sol = sv.solve(sv.LinearProblem(D, np.array([2.0, 4.0, 5.0])), sv.DiagonalSolve())
    except sv.BackendNotSupported as e:
        assert "DiagonalSolve takes diagonal operators, and A is dense" in str(e)
    else:
        assert_allclose(sol.u, np.ones(3), rtol=1e-15)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, alg, tags, make", WELLPOSED)
def test_transpose_solve(name, alg, tags, make, dtype):
    # ports lineax test_transpose.py::test_transpose: the transpose of the solve map is the
    # solve with Aᵀ (our cache.solve_transpose, same factorization) — and Aᴴ for solve_adjoint
    if name == "MINRES-symmetric" and np.dtype(dtype).kind == "c":
        pytest.skip("MINRES is declared unsupported for complex on numpy")
    rng = np.random.default_rng(zlib.crc32(f"{name}{make.__name__}{dtype}".encode()))
    M = _construct(rng, 3, dtype, tags)
    cache = sv.init(sv.LinearProblem(make(M)), alg())
    c = _normal(rng, (3,), dtype)
    tol = 1e-10 if not name.startswith(("BiCG", "GMRES", "CG", "MINRES")) else 1e-8
    assert_allclose(cache.solve_transpose(c), np.linalg.solve(M.T, c), rtol=tol, atol=tol)
    assert_allclose(cache.solve_adjoint(c), np.linalg.solve(M.conj().T, c), rtol=tol, atol=tol)
    assert cache.stats.factorizations == 1


# ----- test_solve.py -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_gmres_large_dense(dtype):
    # ports lineax test_solve.py::test_gmres_large_dense (100×100, restart 100, tol 1e-10)
    rng = np.random.default_rng(6)
    M = _normal(rng, (100, 100), dtype)
    true_x = _normal(rng, (100,), dtype)
    sol = sv.solve(sv.LinearProblem(M, M @ true_x), sv.GMRES(rtol=1e-10, atol=1e-10, restart=100))
    assert sol.status.ok
    assert_allclose(sol.u, true_x, rtol=1e-8, atol=1e-8)
    assert np.linalg.norm(M @ sol.u - M @ true_x) <= 1e-10 * np.linalg.norm(M @ true_x)


def test_nontrivial_diagonal_operator():
    # ports lineax test_solve.py::test_nontrivial_diagonal_operator (the pytree flattened)
    d = np.array([8.0, 1, 2, 3, 4, 5, 6])
    y = np.array([4.0, 7, 8, 9, 2, 10, 12])
    sol = sv.solve(sv.LinearProblem(lo.Diagonal(d), y))
    assert_allclose(sol.u, [0.5, 7.0, 4.0, 3.0, 0.5, 2.0, 2.0], rtol=1e-15)
    assert sol.cache.kind == "diagonal"


@pytest.mark.parametrize("alg", [sv.LU, sv.Auto, sv.GMRES], ids=["LU", "Auto", "GMRES"])
def test_mixed_dtypes(alg):
    # ports lineax test_solve.py::test_mixed_dtypes / _complex / _complex_real (a pytree mixing
    # float32/float64 or complex64/complex128 leaves): here a single-precision or real A with a
    # double-precision or complex b; the result takes the common dtype
    cases = [
        (np.array([[1, 5.0], [-2, -2]], np.float32), np.array([3.0, 4.0]), [-3.25, 1.25], np.float64),
        (np.array([[1, 5j], [2j, -2]], np.complex64), np.array([3, 4], np.complex128),
         [-0.75 - 2.5j, 0.5 - 0.75j], np.complex128),
        (np.array([[1, -5j], [2, -2j]]), np.array([3, 4], np.complex128), [1.75, 0.25j], np.complex128),
        (np.array([[1, 5.0], [-2, -2]]), np.array([3, 4], np.complex128), [-3.25, 1.25], np.complex128),
    ]
    for A, b, want, out_dtype in cases:
        rtol = 1e-5 if np.dtype(A.dtype) in (np.float32, np.complex64) else 1e-12
        spec = alg(rtol=1e-10) if alg is sv.GMRES else alg()
        u = sv.solve(sv.LinearProblem(A, b), spec).u
        assert u.dtype == out_dtype
        assert_allclose(u, want, rtol=rtol, atol=rtol)


def test_mixed_dtypes_triangular():
    # ports lineax test_solve.py::test_mixed_dtypes_triangular / _complex_triangular /
    # _complex_real_triangular (lower triangular systems; our LU, dense and sparse)
    for A, b, want in ((np.array([[1, 0], [-2, -2.0]]), np.array([3.0, 4]), [3, -5]),
                       (np.array([[1, 0], [2j, -2]]), np.array([3, 4], complex), [3, -2 + 3j]),
                       (np.array([[1, 0], [2, 2j]]), np.array([3, 4], complex), [3, 1j])):
        for AA in (A, sp.csr_matrix(A)):
            assert_allclose(sv.solve(sv.LinearProblem(AA, b), sv.LU()).u, want, rtol=1e-14)


def test_nonfinite_input():
    # ports lineax test_solve.py::test_nonfinite_input (throw=False -> nonfinite_input)
    op = lo.Diagonal(np.array([1.0, 1.0]))
    for vec in ([1.0, np.inf], [1.0, np.nan], [np.nan, np.inf]):
        sol = sv.solve(sv.LinearProblem(op, np.array(vec)), throw=False)
        assert sol.status is sv.Status.NONFINITE_INPUT and sol.u is None
        with pytest.raises(sv.NonFiniteInputError, match="b contains"):
            sv.solve(sv.LinearProblem(op, np.array(vec)))


def _poisson_nsd(n):
    return -2 * np.eye(n) + np.eye(n, k=1) + np.eye(n, k=-1)


@pytest.mark.parametrize("alg", [sv.CG, sv.BiCGStab, sv.MINRES], ids=["CG", "BiCGStab", "MINRES"])
def test_iterative_max_steps_only(alg):
    # ports lineax test_solve.py::test_iterative_solver_max_steps_only (rtol = atol = 0,
    # max_steps = 2 on a 100-point NSD Poisson matrix): lineax returns the iterate; ours reports
    # MAX_ITERATIONS as a named error carrying the iterate (documented), after <= 2 iterations
    A = _poisson_nsd(100)
    rhs = np.random.default_rng(0).standard_normal(100)
    cache = sv.init(sv.LinearProblem(A, rhs), alg(rtol=0.0, atol=0.0, maxiter=2))
    with pytest.raises(sv.ConvergenceError) as e:
        cache.solve()
    assert e.value.status is sv.Status.MAX_ITERATIONS
    assert e.value.iterate.shape == (100,) and np.all(np.isfinite(e.value.iterate))
    assert cache.stats.iterations <= 2


def test_iterative_max_steps_only_gmres():
    # ports lineax test_solve.py::test_iterative_solver_max_steps_only for lx.GMRES
    A = _poisson_nsd(100)
    rhs = np.random.default_rng(0).standard_normal(100)
    cache = sv.init(sv.LinearProblem(A, rhs), sv.GMRES(rtol=0.0, atol=0.0, maxiter=2))
    with pytest.raises(sv.ConvergenceError):
        cache.solve()
    assert cache.stats.iterations <= 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("make", [pytest.param(m, id=m.__name__[5:]) for m in GENERAL])
@pytest.mark.parametrize("alg", [sv.CG, sv.MINRES], ids=["CG", "MINRES"])
def test_hermitian_methods_on_a_nonsymmetric_operator(alg, make, dtype):
    # ports lineax's solver × tag table (helpers.py: CG only with a positive/negative
    # semidefinite tag; lineax refuses CG on an untagged operator at init). Ours does not check
    # the structure up front; the acceptance policy must then give the right answer or a named
    # error — never a wrong iterate. (MINRES complex: declared unsupported.)
    rng = np.random.default_rng(9)
    M = _construct(rng, 5, dtype, ())
    b = _normal(rng, (5,), dtype)
    try:
        sol = sv.solve(sv.LinearProblem(make(M), b), alg(rtol=1e-10))
    except lo.BackendNotSupported:
        assert alg is sv.MINRES and np.dtype(dtype).kind == "c"
    except sv.SolveError as e:
        assert not e.status.ok
    else:
        assert np.linalg.norm(M @ sol.u - b) <= 1.01e-10 * np.linalg.norm(b)


# ----- test_singular.py --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_gmres_restart2_reports_failure(dtype):
    # ports lineax test_singular.py::test_bicgstab_breakdown (GMRES restart=2 on a random
    # 100×100, tol 1e-10: lineax reports a failure) — ours: a failure Status, never success
    # with a wrong iterate
    rng = np.random.default_rng(0)
    M = _normal(rng, (100, 100), dtype)
    true_x = _normal(rng, (100,), dtype)
    # maxiter=200 (lineax: its default step budget) keeps scipy's slow complex GMRES short
    sol = sv.solve(sv.LinearProblem(M, M @ true_x),
                   sv.GMRES(rtol=1e-10, atol=1e-10, restart=2, maxiter=200), throw=False)
    if sol.status.ok:
        assert np.linalg.norm(M @ sol.u - M @ true_x) <= 1e-10 * np.linalg.norm(M @ true_x)
    else:  # the last iterate with its failure status (lineax returns it too)
        assert sol.status is sv.Status.MAX_ITERATIONS and sol.u.shape == true_x.shape


@pytest.mark.parametrize("dtype", DTYPES)
def test_gmres_stagnation_or_breakdown(dtype):
    # ports lineax test_singular.py::test_gmres_stagnation_or_breakdown (4×4, restart 2)
    M = np.array([[0.15892892, 0.05884365, -0.60427412, 0.1891916],
                  [-1.5484863, 0.93608822, 1.94888868, 1.37069667],
                  [0.62687318, -0.13996738, -0.6824359, 0.30975754],
                  [-0.67428635, 1.52372255, -0.88277754, 0.69633816]], dtype=dtype)
    true_x = np.array([0.51383273, 1.72983427, -0.43251078, -1.11764668], dtype=dtype)
    sol = sv.solve(sv.LinearProblem(M, M @ true_x), sv.GMRES(rtol=1e-10, atol=1e-10, restart=2),
                   throw=False)
    if sol.status.ok:
        assert_allclose(sol.u, true_x, rtol=1e-7)
    else:
        assert sol.u is not None and sol.u.shape == true_x.shape   # the last iterate
        assert sol.status in (sv.Status.MAX_ITERATIONS, sv.Status.STAGNATION, sv.Status.BREAKDOWN)


def _singular_zero_row(rng, n, tags):
    """helpers.py::construct_singular_matrix ('zero': first row zeroed, then the tags)."""
    M = rng.standard_normal((n, n))
    M[0, :] = 0
    if "psd" in tags:
        M = M @ M.T
    if "nsd" in tags:
        M = -M @ M.T
    return M


ITERATIVE_SINGULAR = [("CG-psd", sv.CG, ("psd",)), ("CG-nsd", sv.CG, ("nsd",)),
                      ("GMRES", sv.GMRES, ()), ("BiCGStab", sv.BiCGStab, ())]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("use_state", [False, True])
@pytest.mark.parametrize("make", [make_matrix, make_function], ids=["matrix", "function"])
@pytest.mark.parametrize("name, alg, tags", ITERATIVE_SINGULAR, ids=[c[0] for c in ITERATIVE_SINGULAR])
def test_iterative_singular(name, alg, tags, make, use_state, dtype):
    # ports lineax test_singular.py::test_iterative_singular (a singular matrix, a random rhs:
    # the solve must raise) — ours: a named SolveError, with or without a prepared cache
    rng = np.random.default_rng(7)
    M = _singular_zero_row(rng, 3, tags)
    vec = _normal(rng, (3,), dtype)
    spec = alg(rtol=1e-12, atol=1e-12)
    with pytest.raises(sv.SolveError) as e:
        if use_state:
            sv.init(sv.LinearProblem(make(M)), spec).solve(vec)
        else:
            sv.solve(sv.LinearProblem(make(M), vec), spec)
    assert not e.value.status.ok


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alg", [sv.LU, sv.Cholesky, sv.Auto, sv.DiagonalSolve],
                         ids=["LU", "Cholesky", "Auto", "Diagonal"])
def test_direct_singular(alg, dtype):
    # ports lineax test_singular.py::test_small_singular for the non-pseudo-inverse solvers:
    # lineax only runs its least-squares solvers there; ours (no least squares) must refuse a
    # singular matrix with a named error — SINGULAR as a Status with throw=False
    rng = np.random.default_rng(8)
    M = _normal(rng, (3, 3), dtype)
    M[0, :] = 0
    if alg is sv.Cholesky:
        M = M @ M.conj().T
    op = lo.Diagonal(np.diag(M).copy()) if alg is sv.DiagonalSolve else lo.Dense(M)
    b = _normal(rng, (3,), dtype)
    with pytest.raises(sv.SingularMatrixError, match="singular"):
        sv.solve(sv.LinearProblem(op, b), alg())
    sol = sv.solve(sv.LinearProblem(op, b), alg(), throw=False)
    assert sol.status is sv.Status.SINGULAR and sol.u is None
    if alg in (sv.LU, sv.Auto):
        with pytest.raises(sv.SingularMatrixError):
            sv.solve(sv.LinearProblem(sp.csr_matrix(M), b), alg())


@pytest.mark.parametrize("shape", [(2, 3), (3, 2), (3, 6), (6, 3)])
def test_nonsquare_is_refused(shape):
    # ports lineax test_singular.py::test_nonsquare_pytree_operator1/2, test_nonsquare_mat_vec,
    # test_nonsquare_vec: lineax solves least squares; we have no least-squares solver, so a
    # rectangular LinearProblem is a ShapeError naming the shape (documented)
    M = np.random.default_rng(0).standard_normal(shape)
    with pytest.raises(lo.ShapeError, match=rf"square A, got A.shape=\({shape[0]}, {shape[1]}\)"):
        sv.LinearProblem(M, np.ones(shape[0]))
    with pytest.raises(lo.ShapeError, match="square"):
        sv.LinearProblem(sp.csr_matrix(M), np.ones(shape[0]))


# ----- test_adjoint.py::test_preconditioner_adjoint (gh #160) -------------------------------------
@pytest.mark.parametrize("name", ["GMRES", "BiCGStab", "CG"])
def test_preconditioner_adjoint(name):
    # ports lineax test_adjoint.py::test_preconditioner_adjoint: with an exact preconditioner
    # the forward AND the transpose/adjoint solves take a few steps (gh #160: the adjoint
    # dropped it); d x / d b = A⁻¹ from both directions. Our exact inverse: ILU(drop_tol=0).
    rng = np.random.default_rng(123)
    A = rng.uniform(size=(10, 10))
    A += np.diag(np.arange(10) ** 6).astype(A.dtype)
    if name == "CG":
        A = A.T @ A
    pc = sv.ILU(drop_tol=0.0)
    alg = {"GMRES": sv.GMRES(rtol=1e-12, restart=1, maxiter=4, precond=pc),
           "BiCGStab": sv.BiCGStab(rtol=1e-12, maxiter=3, precond=pc),
           "CG": sv.CG(rtol=1e-12, maxiter=3, precond=pc)}[name]
    cache = sv.init(sv.LinearProblem(sp.csr_matrix(A)), alg)
    Ainv = np.linalg.inv(A)
    tol = 1e-9
    assert_allclose(cache.solve(np.eye(10)), Ainv, rtol=tol, atol=tol * np.abs(Ainv).max())
    assert_allclose(cache.solve_transpose(np.eye(10)), Ainv.T, rtol=tol, atol=tol * np.abs(Ainv).max())
    assert_allclose(cache.solve_adjoint(np.eye(10)), Ainv.T, rtol=tol, atol=tol * np.abs(Ainv).max())
    assert cache.stats.iterations <= 30 * 4
