"""The conformance matrix's state axis: engine × state × dtype × operation (issue 16, item 3).

``tests/solvers/test_conformance.py`` starts every cell from a fresh ``init``; the review that found 20
failures got most of them from a cache in some other state. Here every engine — SuperLU, dense
LU/Cholesky, CHOLMOD, PARDISO (both types), the Krylov methods with AMG/ILU/Jacobi, pyamg's own
cycles, PETSc in-process (MUMPS, CG+GAMG, GMRES+GAMG) and Auto — is driven into each state:

* ``fresh``        init(A)
* ``update``       init(A0), update(A) with the same pattern and dtype (numeric refactorization)
* ``update_kind``  init(A0) of the OTHER dtype kind (real ↔ complex), update(A): a full setup
* ``failed_update`` init(A), update(bad) that init would refuse too (NaN; non-Hermitian for the
                   engines that need a Hermitian A; singular for the direct ones): the named
                   error, and the cache still solves with A
* ``failed_solve`` init(A), a solve with NaN in b (NonFiniteInputError), then on with A

and then every operation is checked against a dense complex128 reference: solve, solve_adjoint,
solve_transpose, a multi-column right-hand side, an empty (n, 0) right-hand side, the pullback
(Ā = −λuᴴ, b̄ = λ) and its projection on A's pattern. A cell either agrees at a
precision-appropriate tolerance or raises ``BackendNotSupported`` where the engine declares the
dtype unsupported (checked against its declaration) — nothing else. ``test_empty_matrix`` is
the n = 0 column. ``test_state_matrix_size`` prints the size.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv
from solvers.internals import entries, entry

N = 12
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
STATES = ["fresh", "update", "update_kind", "failed_update", "failed_solve"]


def _petsc_missing() -> str | None:
    if entry("petsc").unavailable() is not None:
        return entry("petsc").unavailable()
    return None


def _petsc_real() -> bool:
    from petsc4py import PETSc

    return np.dtype(PETSc.ScalarType).kind != "c"


# engine -> (factory, needs a Hermitian positive definite A, direct factorization)
ENGINES = {
    "SuperLU": (lambda: sv.LU(), False, True),
    "dense LU": (lambda: sv.LU(), False, True),
    "dense Cholesky": (lambda: sv.Cholesky(), True, True),
    "CHOLMOD": (lambda: sv.Cholesky(), True, True),
    "PARDISO": (lambda: sv.Pardiso(), False, True),
    "PARDISO posdef": (lambda: sv.Pardiso(posdef=True), True, True),
    "CG": (lambda: sv.CG(rtol=1e-11), True, False),
    "CG+AMG": (lambda: sv.CG(rtol=1e-11, precond=sv.AMG()), True, False),
    "CG+Jacobi": (lambda: sv.CG(rtol=1e-11, precond=sv.Jacobi()), True, False),
    "MINRES": (lambda: sv.MINRES(rtol=1e-11), True, False),
    "GMRES+ILU": (lambda: sv.GMRES(rtol=1e-11, precond=sv.ILU()), False, False),
    "BiCGStab+Jacobi": (lambda: sv.BiCGStab(rtol=1e-11, precond=sv.Jacobi()), False, False),
    "AMG": (lambda: sv.AMG(rtol=1e-11), True, False),
    "PETSc mumps": (lambda: sv.PETSc(), False, True),
    "PETSc cg+gamg": (lambda: sv.PETSc(ksp_type="cg", pc_type="gamg", rtol=1e-11), True, False),
    "PETSc gmres+gamg": (lambda: sv.PETSc(ksp_type="gmres", pc_type="gamg", rtol=1e-11), False,
                         False),
    "Auto": (lambda: sv.Auto(), False, True),
    "SuiteSparseQR": (lambda: sv.QR(), False, True),
    "LSMR": (lambda: sv.LSMR(rtol=1e-13), False, False),
}
DENSE = ("dense LU", "dense Cholesky")


def _rand(rng, shape, dtype):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a


def _pattern(seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mask = rng.random((N, N)) < 0.25
    mask = mask | mask.T
    np.fill_diagonal(mask, True)
    mask[np.arange(N - 1), np.arange(1, N)] = mask[np.arange(1, N), np.arange(N - 1)] = True
    return mask


MASK = _pattern()


def matrix(rng, dtype, hpd: bool) -> np.ndarray:
    """A matrix on MASK: Hermitian positive definite (diagonally dominant) or general."""
    B = np.where(MASK, _rand(rng, (N, N), dtype), 0)
    if hpd:
        D = (B + B.conj().T) / 2
        np.fill_diagonal(D, 0)
        D[np.diag_indices(N)] = np.abs(D).sum(axis=1) + 1.0
    else:
        D = B
        D[np.diag_indices(N)] += 6.0
    return D.astype(dtype)


def operator(D, engine):
    """Dense, or CSR on MASK with explicit zeros kept: every matrix of a cell shares a pattern."""
    if engine in DENSE:
        return lo.Dense(D)
    rows, cols = np.nonzero(MASK)
    return lo.aslinop(sp.csr_matrix((D[rows, cols], (rows, cols)), shape=D.shape))


def _other_kind(dtype):
    return {np.dtype(np.float32): np.complex64, np.dtype(np.float64): np.complex128,
            np.dtype(np.complex64): np.float32, np.dtype(np.complex128): np.float64}[np.dtype(dtype)]


def declared_unsupported(engine, dtype) -> str | None:
    """Why the engine declares ``dtype`` unsupported (None: it must work)."""
    if engine.startswith("PETSc"):
        missing = _petsc_missing()
        if missing:
            pytest.skip(missing)
        if np.dtype(dtype).kind == "c" and _petsc_real():
            return "this PETSc build is real"
    if engine == "MINRES" and np.dtype(dtype).kind == "c":
        return "scipy's minres"
    if engine.startswith("PARDISO") and entry("pardiso").unavailable() is not None:
        pytest.skip(entry("pardiso").unavailable())
    if engine == "SuiteSparseQR" and entry("qr").unavailable() is not None:
        pytest.skip(entry("qr").unavailable())
    if engine == "CHOLMOD" and not sv.cholmod_available():
        pytest.skip("CHOLMOD (scikit-sparse) not installed")
    return None


def _tol(dtype) -> float:
    return 2e-3 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-8


def _close(name, got, want, dtype):
    got = np.asarray(got)
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30) if want.size else 0.0
    assert err < _tol(dtype), f"{name}: relative error {err:.2e} >= {_tol(dtype):g}"


def _bad_updates(engine, D, hpd, direct):
    """The updates init would refuse too, with the exception each must raise."""
    bad = D.copy()
    bad[0, 0] = np.nan
    out = [(bad, sv.NonFiniteInputError)]
    if hpd and engine not in ("CG", "CG+Jacobi", "MINRES", "CG+AMG", "AMG", "PETSc cg+gamg"):
        skew = D.copy()
        i, j = np.argwhere(np.triu(MASK, 1))[0]
        skew[i, j] = skew[i, j] + 0.5 * abs(D[i, i])
        out.append((skew, sv.NotHermitianError))
    if direct and engine != "Auto":
        sing = D.copy()
        sing[:, 0] = 0  # same pattern (explicit zeros), a zero column: singular
        if hpd:
            sing[0, :] = 0  # and the row: still Hermitian, so the singularity is what fails
        out.append((sing, sv.SingularMatrixError))
    return out


CELLS = [(e, s) for e in ENGINES for s in STATES]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("engine,state", CELLS, ids=[f"{e}-{s}" for e, s in CELLS])
def test_state_cell(engine, state, dtype):
    make, hpd, direct = ENGINES[engine]
    rng = np.random.default_rng(zlib.crc32(f"{engine}-{state}-{np.dtype(dtype).name}".encode()))
    D = matrix(rng, dtype, hpd)
    hints = dict(posdef=True) if hpd else {}
    b = _rand(rng, (N,), dtype).astype(dtype)
    why = declared_unsupported(engine, dtype)
    start_dtype = _other_kind(dtype) if state == "update_kind" else dtype
    why_start = declared_unsupported(engine, start_dtype)
    if why_start is not None and why is None:  # cannot even start in that state here
        pytest.skip(f"{engine} starts in {np.dtype(start_dtype).name}: {why_start}")
    if why is not None:
        with pytest.raises(lo.BackendNotSupported):
            cache = sv.init(sv.LinearProblem(operator(D, engine), b, **hints), make())
            cache.solve()
        return
    if state == "fresh":
        cache = sv.init(sv.LinearProblem(operator(D, engine), b, **hints), make())
    elif state in ("update", "update_kind"):
        D0 = matrix(np.random.default_rng(1), start_dtype, hpd)
        b0 = _rand(rng, (N,), start_dtype).astype(start_dtype)
        cache = sv.init(sv.LinearProblem(operator(D0, engine), b0, **hints), make())
        cache.solve()
        kind0 = cache.factor.precision
        cache.update(A=operator(D, engine), b=b)
        s = cache.stats
        if state == "update" and engine not in DENSE and engine != "Auto":
            assert s.numeric_refactorizations == 1 and s.factorizations == 1, s
        if state == "update_kind":  # another dtype kind is never a numeric refactorization
            assert s.numeric_refactorizations == 0 and s.factorizations == 2, s
            assert cache.factor.precision != kind0
        assert cache.generation == 1 and cache.u is None
    elif state == "failed_update":
        cache = sv.init(sv.LinearProblem(operator(D, engine), b, **hints), make())
        for bad, err in _bad_updates(engine, D, hpd, direct):
            with pytest.raises(err):
                cache.update(A=operator(bad, engine))
        assert cache.generation == 0
    else:  # failed_solve
        cache = sv.init(sv.LinearProblem(operator(D, engine), b, **hints), make())
        nan = b.copy()
        nan[3] = np.nan
        with pytest.raises(sv.NonFiniteInputError):
            cache.solve(nan)
    _check_operations(cache, D, b, dtype)
    _check_factor_queries(engine, direct, cache, D, dtype)


def _check_operations(cache, D, b, dtype):
    Dh = D.astype(np.complex128)
    rng = np.random.default_rng(5)
    u = cache.solve()
    assert cache.status.ok
    assert np.dtype(np.asarray(u).dtype) == np.result_type(dtype, np.float32)
    uref = np.linalg.solve(Dh, b)
    _close("solve", u, uref, dtype)
    c = _rand(rng, (N,), dtype).astype(dtype)
    _close("solve_adjoint", cache.solve_adjoint(c), np.linalg.solve(Dh.conj().T, c), dtype)
    _close("solve_transpose", cache.solve_transpose(c), np.linalg.solve(Dh.T, c), dtype)
    B = _rand(rng, (N, 3), dtype).astype(dtype)
    _close("multi-rhs", cache.solve(B), np.linalg.solve(Dh, B), dtype)
    for empty in (np.zeros((N, 0), dtype), ):
        for op in (cache.solve, cache.solve_adjoint, cache.solve_transpose):
            out = np.asarray(op(empty))
            assert out.shape == (N, 0)
    u = cache.solve(b)
    ubar = _rand(rng, (N,), dtype).astype(dtype)
    g = ad.solve_pullback(cache, ubar)
    lam = np.linalg.solve(Dh.conj().T, ubar)
    _close("pullback b", g.b, lam, dtype)
    _close("pullback A", lo.to_dense(g.A), -np.outer(lam, uref.conj()), dtype)
    if isinstance(cache.A, lo.Sparse):
        P = cache.A.pattern
        _close("project", lo.project(g.A, like=cache.A).values,
               -(lam[P.rows] * uref[P.indices].conj()), dtype)


# what the factors answer besides solves (issue 18): log det, and A⁻¹'s entries by selected
# inversion. log det elsewhere is refused with BackendNotSupported (Krylov caches hold no
# factors, PARDISO's unsymmetric type hides its scaling); entries of A⁻¹ elsewhere come from
# solves with the cache (a few columns are allowed, a pattern's worth is refused; checked on the
# direct engines: a Krylov cache's 12 unit columns are its own solves, tested above)
LOGDET = {"SuperLU", "dense LU", "dense Cholesky", "CHOLMOD", "PARDISO posdef", "PETSc mumps",
          "Auto"}
SELINV = {"SuperLU", "dense LU", "dense Cholesky", "CHOLMOD", "Auto"}


def _check_factor_queries(engine, direct, cache, D, dtype):
    """log det and diag(A⁻¹) against dense numpy, in every state: after an update or a change
    of dtype kind they must be those of the NEW matrix; selected inversion makes no solve."""
    Dh = D.astype(np.complex128)
    sign, logabs = np.linalg.slogdet(Dh)
    if engine in LOGDET:
        got = cache.logdet()
        assert abs(got.logabsdet - logabs) <= _tol(dtype) * max(1.0, abs(logabs)), (got, logabs)
        assert abs(complex(got.sign) - sign) <= _tol(dtype), (got.sign, sign)
    else:
        with pytest.raises(lo.BackendNotSupported):
            cache.logdet()
    if not direct:
        return
    solves = cache.stats.solves + cache.stats.adjoint_solves + cache.stats.transpose_solves
    _close("diag(A⁻¹)", np.asarray(lo.diagonal(sv.inverse(cache))),
           np.diag(np.linalg.inv(Dh)), dtype)
    after = cache.stats.solves + cache.stats.adjoint_solves + cache.stats.transpose_solves
    if engine in SELINV:
        assert after == solves, "selected inversion made a solve"
    else:
        assert after > solves


EMPTY_ENGINES = [e for e in ENGINES]


@pytest.mark.parametrize("engine", EMPTY_ENGINES)
def test_empty_matrix(engine):
    """n = 0: every engine gives empty results (exact), with and without columns."""
    make, hpd, _ = ENGINES[engine]
    declared_unsupported(engine, np.float64)
    A = lo.Dense(np.zeros((0, 0))) if engine in DENSE else lo.aslinop(sp.csr_matrix((0, 0)))
    cache = sv.init(sv.LinearProblem(A, np.zeros(0), **(dict(posdef=True) if hpd else {})),
                    make())
    assert cache.solve().shape == (0,)
    for op in (cache.solve, cache.solve_adjoint, cache.solve_transpose):
        assert np.asarray(op(np.zeros((0, 3)))).shape == (0, 3)
    sol = sv.solve(sv.LinearProblem(A, np.zeros(0)), make())
    assert sol.status is sv.Status.SUCCESS and sol.u.shape == (0,)
    g = ad.solve_pullback(sol, np.zeros(0))
    assert g.b.shape == (0,) and g.A.shape == (0, 0)


def state_matrix_size() -> tuple[int, int]:
    """(cells, engines) of the state matrix: engines × states × dtypes, and the n = 0 column."""
    return len(CELLS) * len(DTYPES), len(EMPTY_ENGINES)


def test_state_matrix_size():
    """Printed with -rP; every engine of the registry that factorizes sparse matrices is in."""
    cells, empty = state_matrix_size()
    print(f"state conformance matrix: {len(ENGINES)} engines × {len(STATES)} states × "
          f"{len(DTYPES)} dtypes = {cells} cells × 9 operations, plus {empty} n = 0 cells")
    kinds = {type(make()).__name__ for make, _, _ in ENGINES.values()}
    for e in entries():
        if "sparse" in e.structures:
            assert e.cls.__name__ in kinds, f"{e.name} is missing from the state matrix"
    assert cells >= 300
    rows, cols = np.nonzero(MASK)
    A = operator(matrix(np.random.default_rng(0), np.float64, True), "SuperLU")
    assert A.pattern.nnz == rows.size       # the failed updates keep the pattern
