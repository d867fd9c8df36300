"""The conformance matrix: operator × backend × dtype × algorithm × operation.

Every cell either agrees with a dense numpy reference at a precision-appropriate tolerance, or
raises BackendNotSupported because the backend table declares the capability missing (the test
checks that the table says so). Anything else — an unexpected exception, a wrong number — fails.
Cells where an algorithm does not apply to an operator's structure (Cholesky on a non-Hermitian
matrix, AMG on a dense one) are not part of the matrix; their error paths are tested elsewhere.
The matrix's size (cells run, cells declared unsupported) follows from the table alone:
``python -m pytest tests/solvers/test_conformance.py -k size -rP`` prints it.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv
from linops.internals import CAPABILITIES, backend_named
from solvers.internals import build_case, entries
from tests._cases.backends import CUPY, namespace_for, to_np

N = 12
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
BACKENDS = ["numpy", "jax"] + (["cupy"] if CUPY is not None else [])


def _rand(rng, shape, dtype):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a


def _sparse_general(rng, dtype, scale=1.0):
    mask = rng.random((N, N)) < 0.3
    np.fill_diagonal(mask, True)
    D = np.where(mask, _rand(rng, (N, N), dtype), 0) * scale
    D[np.diag_indices(N)] += 6.0
    return D


def _spd(rng, dtype, scale=1.0):
    mask = rng.random((N, N)) < 0.2
    mask = mask | mask.T
    np.fill_diagonal(mask, False)
    B = np.where(mask, _rand(rng, (N, N), dtype), 0)
    D = (B + B.conj().T) * 0.5 * scale
    D[np.diag_indices(N)] = np.abs(D).sum(axis=1) + 1.0  # strictly diagonally dominant: SPD
    return D


# operator name -> (build(dense, xp) -> operator, make dense(rng, dtype, scale), hermitian posdef?)
def _sparse_op(D, xp):
    S = lo.aslinop(sp.csr_matrix(D))
    return lo.Sparse(xp.asarray(S.values), S.pattern)


def _with_lowrank(D, xp):
    # D = base + u vᴴ with the rank-one part split off again, so the operator is a Sum
    u = np.linspace(0.5, 1.5, N).astype(D.dtype)
    v = np.linspace(-1.0, 1.0, N).astype(D.dtype)
    base = D - np.outer(u, v.conj())
    return _sparse_op(base, xp) + lo.RankOne(xp.asarray(u), xp.asarray(v))


def _matrix_free(D, xp):
    a = xp.asarray(D)
    return lo.MatrixFree((N, N), D.dtype, lambda X: a @ X, lambda X: xp.conj(a).T @ X)


OPERATORS = {
    "dense": (lambda D, xp: lo.Dense(xp.asarray(D)), _sparse_general, False),
    "dense_spd": (lambda D, xp: lo.Dense(xp.asarray(D)), _spd, True),
    "sparse": (_sparse_op, _sparse_general, False),
    "sparse_spd": (_sparse_op, _spd, True),
    "diagonal": (lambda D, xp: lo.Diagonal(xp.asarray(np.diagonal(D).copy())),
                 lambda rng, dt, scale=1.0: np.diag(np.diagonal(_spd(rng, dt, scale))), True),
    "sum_lowrank": (_with_lowrank, _sparse_general, False),
    "matrix_free": (_matrix_free, _sparse_general, False),
    "matrix_free_spd": (_matrix_free, _spd, True),
}

# the structure each operator has (linops.internals.structure), which the registry's entries
# declare what they take of
STRUCTURE = {"dense": "dense", "dense_spd": "dense", "sparse": "sparse", "sparse_spd": "sparse",
             "diagonal": "diagonal", "sum_lowrank": "lowrank", "matrix_free": "matrixfree",
             "matrix_free_spd": "matrixfree"}

# algorithm label -> (registry entry, case): every configuration every registered algorithm
# declares (solvers._registry.Case); adding an engine adds its rows here by itself
ALGORITHMS = {c.label: (e, c) for e in entries() for c in e.configurations()}


def _applies(op_name, alg_name) -> bool:
    """The case takes the operator's structure, and a Hermitian (positive definite) A where it
    needs one: the operator is one of the Hermitian positive definite ones."""
    e, c = ALGORITHMS[alg_name]
    if STRUCTURE[op_name] not in c.structures:
        return False
    return OPERATORS[op_name][2] or not (c.posdef or e.hermitian)


def _declared_missing(be, op_name, alg_name, dtype) -> list[str]:
    """Why this cell cannot run here, as the declarations say: the backend table's reason for a
    capability the case needs (its algorithm's for this structure, its preconditioner's), the
    entry's own refusal of the dtype, an array backend it does not take."""
    e, c = ALGORITHMS[alg_name]
    caps = [e.capability_for(STRUCTURE[op_name]), c.options.get("precond")]
    out = [be.capability(x, dtype) for x in caps if isinstance(x, str)]
    out.append(e.unsupported(dtype) if e.unsupported is not None else None)
    if be.name not in e.backends:
        out.append(f"takes {', '.join(e.backends)} arrays")
    return [r for r in out if r is not None]


def _declared_anywhere(be, dtype) -> list[str]:
    """Every reason the backend table gives for this dtype (what a composite algorithm such as
    Auto or Woodbury may meet through the engine it chooses)."""
    return [r for r in (be.capability(c, dtype) for c in CAPABILITIES) if r is not None]


def _tol(dtype) -> float:
    return 2e-3 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-8


CASES = [(o, a) for o in OPERATORS for a in ALGORITHMS if _applies(o, a)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op_name,alg_name", CASES, ids=[f"{o}-{a}" for o, a in CASES])
def test_cell(op_name, alg_name, backend, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{op_name}-{np.dtype(dtype).name}".encode()))
    xp = namespace_for(backend)
    be = backend_named(backend)
    build, make, hpd = OPERATORS[op_name]
    D = make(rng, dtype).astype(dtype)
    A = build(D, xp)
    hints = dict(hermitian=True, posdef=True) if hpd else {}
    b = _rand(rng, (N,), dtype).astype(dtype)
    entry, case = ALGORITHMS[alg_name]
    if entry.unavailable() is not None:
        pytest.skip(entry.unavailable())
    make_alg = lambda: build_case(entry, case)  # noqa: E731
    missing = _declared_missing(be, op_name, alg_name, dtype)
    if missing:
        with pytest.raises(lo.BackendNotSupported) as e:
            cache = sv.init(sv.LinearProblem(A, xp.asarray(b), **hints), make_alg())
            cache.solve()
        assert any(r.split(";")[0] in str(e.value) for r in missing), (str(e.value), missing)
        return
    tol = _tol(dtype)
    Dh = D.astype(np.complex128)

    def close(name, got, want):
        got = to_np(got)
        err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
        assert err < tol, f"{name}: relative error {err:.2e} >= {tol:g}"

    try:
        cache = sv.init(sv.LinearProblem(A, xp.asarray(b), **hints), make_alg())
    except lo.BackendNotSupported as e:
        # a composite (Auto, Woodbury) meets the table through the engine it chose: only a
        # reason the table declares for this dtype is a refusal, anything else fails
        declared = _declared_anywhere(be, dtype) if entry.capability_for(STRUCTURE[op_name]) \
            is None else []
        assert any(r.split(";")[0] in str(e) for r in declared), str(e)
        return
    u = cache.solve()
    assert cache.status.ok
    assert np.dtype(to_np(u).dtype) == np.result_type(dtype, np.float32)
    close("solve", u, np.linalg.solve(Dh, b))
    c = _rand(rng, (N,), dtype).astype(dtype)
    close("solve_adjoint", cache.solve_adjoint(xp.asarray(c)), np.linalg.solve(Dh.conj().T, c))
    close("solve_transpose", cache.solve_transpose(xp.asarray(c)), np.linalg.solve(Dh.T, c))
    B = _rand(rng, (N, 3), dtype).astype(dtype)
    close("multi-rhs", cache.solve(xp.asarray(B)), np.linalg.solve(Dh, B))
    ubar = _rand(rng, (N,), dtype).astype(dtype)
    u = cache.solve()
    g = ad.solve_pullback(cache, xp.asarray(ubar))
    lam = np.linalg.solve(Dh.conj().T, ubar)
    uref = np.linalg.solve(Dh, b)
    close("pullback b", g.b, lam)
    close("pullback A", lo.to_dense(g.A), -np.outer(lam, uref.conj()))
    if isinstance(A, lo.Sparse):
        P = A.pattern
        close("project", lo.project(g.A, like=A).values, -(lam[P.rows] * uref[P.indices].conj()))
    D2 = make(np.random.default_rng(7), dtype, 1.3).astype(dtype)
    if isinstance(A, lo.Sparse):  # same pattern, new values: a numeric refactorization
        D2 = np.where(D != 0, D * 1.3 + np.where(D != 0, 0.05, 0), 0).astype(dtype)
        if hpd:
            D2 = ((D2 + D2.conj().T) / 2).astype(dtype)
    A2 = build(D2, xp)
    gen = cache.generation
    cache.update(A=A2)
    assert cache.generation == gen + 1 and cache.u is None
    close("update", cache.solve(xp.asarray(b)), np.linalg.solve(D2.astype(np.complex128), b))
    if isinstance(A, lo.Sparse) and case.direct:
        assert cache.stats.numeric_refactorizations == 1
    assert cache.stats.factorizations + cache.stats.numeric_refactorizations == 2


def matrix_size() -> tuple[int, int]:
    """(cells run, cells declared unsupported) over CASES × BACKENDS × DTYPES."""
    unsupported = sum(bool(_declared_missing(backend_named(b), o, a, d))
                      for o, a in CASES for b in BACKENDS for d in DTYPES)
    return len(CASES) * len(BACKENDS) * len(DTYPES) - unsupported, unsupported


def test_matrix_size():
    """The matrix has the size the README reports (and a backend or dtype cannot drop out)."""
    run, unsupported = matrix_size()
    print(f"conformance matrix: {len(CASES)} operator × algorithm cases × {BACKENDS} × "
          f"{len(DTYPES)} dtypes: {run} cells run, {unsupported} declared unsupported")
    assert len(CASES) >= 60
    gpu = CUPY is not None
    assert run >= (740 if gpu else 560) and unsupported <= (160 if gpu else 72)
