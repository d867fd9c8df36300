"""The conformance matrix's state axis: engine × state × dtype × operation.

``tests/solvers/test_conformance.py`` starts every cell from a fresh ``init``; the review that found 20
failures got most of them from a cache in some other state. Here every engine — every case the
registry declares for an algorithm that takes sparse matrices (SuperLU, CHOLMOD, PARDISO of
both types, the Krylov methods with AMG/ILU/Jacobi, pyamg's own cycles, PETSc in-process:
MUMPS, CG+GAMG, GMRES+GAMG, and Auto), and the dense factorizations — is driven into each state:

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
from linops.internals import backend_named
from solvers.internals import Case, build_case, entries, entry

N = 12
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
STATES = ["fresh", "update", "update_kind", "failed_update", "failed_solve"]


def _engines() -> dict:
    """engine label -> (entry, case, structure): every case of every registered algorithm that
    takes sparse matrices, on CSR; the direct ones also on a dense matrix (a dense
    factorization is another engine)."""
    out = {}
    for e in entries():
        for c in e.configurations():
            if "sparse" in c.structures:
                out[c.label] = (e, c, "sparse")
            if c.direct and "dense" in c.structures:
                out[f"{c.label} (dense)"] = (e, c, "dense")
    return out


ENGINES = _engines()
# tuned Auto (it measures its candidates at init) in every state: each cell answers as the
# untuned Auto does, to rounding. Here only, not in the backend matrix: the candidates it times
# (CHOLMOD, PARDISO, SuperLU) are host engines, and the backend axis is Auto's own cells.
_AUTO = entry("auto")
TUNED = ("Auto tuned", "Auto tuned hpd")
for _label, _hpd in zip(TUNED, (False, True)):
    ENGINES[_label] = (_AUTO, Case(_label, dict(tune=True, pardiso_min=1), ("sparse",), _hpd, True,
                                   _AUTO.queries), "sparse")
# Auto for a factor solved in compiled loops (what adjoints.jax asks when its solves lower to the
# native FFI call): CHOLMOD for a real Hermitian A, KLU otherwise, in every state — a kind
# change (real -> complex) replans CHOLMOD to KLU; the answers are those of every other engine
LOOP = ("Auto loop", "Auto loop hpd")
for _label, _hpd in zip(LOOP, (False, True)):
    ENGINES[_label] = (_AUTO, Case(_label, dict(loop_solves=True), ("sparse",), _hpd, True,
                                   _AUTO.queries), "sparse")


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
    if ENGINES[engine][2] == "dense":
        return lo.Dense(D)
    rows, cols = np.nonzero(MASK)
    return lo.aslinop(sp.csr_matrix((D[rows, cols], (rows, cols)), shape=D.shape))


def _other_kind(dtype):
    return {np.dtype(np.float32): np.complex64, np.dtype(np.float64): np.complex128,
            np.dtype(np.complex64): np.float32, np.dtype(np.complex128): np.float64}[np.dtype(dtype)]


def declared_unsupported(engine, dtype) -> str | None:
    """Why the engine declares ``dtype`` unsupported (None: it must work); skips where its
    optional dependency is not installed."""
    e, c, kind = ENGINES[engine]
    if e.unavailable() is not None:
        pytest.skip(e.unavailable())
    caps = [e.capability_for(kind), c.options.get("precond")]
    reasons = [backend_named("numpy").capability(x, dtype) for x in caps if isinstance(x, str)]
    reasons.append(e.unsupported(dtype) if e.unsupported is not None else None)
    return next((r for r in reasons if r is not None), None)


def make(engine):
    e, c, _ = ENGINES[engine]
    return build_case(e, c)


def _hpd(engine) -> bool:
    e, c, _ = ENGINES[engine]
    return bool(c.posdef or e.hermitian)


def _tol(dtype) -> float:
    return 2e-3 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-8


def _close(name, got, want, dtype):
    got = np.asarray(got)
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30) if want.size else 0.0
    assert err < _tol(dtype), f"{name}: relative error {err:.2e} >= {_tol(dtype):g}"


def _bad_updates(engine, D, hpd, direct):
    """The updates init would refuse too, with the exception each must raise: NaN; a
    non-Hermitian matrix where the algorithm's factorization needs a Hermitian one (its own
    ``needs_hermitian``); a singular one for the direct engines."""
    bad = D.copy()
    bad[0, 0] = np.nan
    out = [(bad, sv.NonFiniteInputError)]
    A = operator(D, engine)
    if hpd and make(engine).needs_hermitian(A, sv.LinearProblem(A, posdef=True)):
        skew = D.copy()
        i, j = np.argwhere(np.triu(MASK, 1))[0]
        skew[i, j] = skew[i, j] + 0.5 * abs(D[i, i])
        out.append((skew, sv.NotHermitianError))
    if direct and ENGINES[engine][0].name != "auto":
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
    hpd, direct = _hpd(engine), ENGINES[engine][1].direct
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
            cache = sv.init(sv.LinearProblem(operator(D, engine), b, **hints), make(engine))
            cache.solve()
        return
    if state == "fresh":
        cache = sv.init(sv.LinearProblem(operator(D, engine), b, **hints), make(engine))
    elif state in ("update", "update_kind"):
        D0 = matrix(np.random.default_rng(1), start_dtype, hpd)
        b0 = _rand(rng, (N,), start_dtype).astype(start_dtype)
        cache = sv.init(sv.LinearProblem(operator(D0, engine), b0, **hints), make(engine))
        cache.solve()
        kind0 = cache.factor.precision
        cache.update(A=operator(D, engine), b=b)
        s = cache.stats
        if state == "update" and direct and ENGINES[engine][2] == "sparse" \
                and ENGINES[engine][0].name != "auto":
            assert s.numeric_refactorizations == 1 and s.factorizations == 1, s
        if state == "update_kind":  # another dtype kind is never a numeric refactorization
            assert s.numeric_refactorizations == 0 and s.factorizations == 2, s
            assert cache.factor.precision != kind0
        assert cache.generation == 1 and cache.u is None
    elif state == "failed_update":
        cache = sv.init(sv.LinearProblem(operator(D, engine), b, **hints), make(engine))
        for bad, err in _bad_updates(engine, D, hpd, direct):
            with pytest.raises(err):
                cache.update(A=operator(bad, engine))
        assert cache.generation == 0
    else:  # failed_solve
        cache = sv.init(sv.LinearProblem(operator(D, engine), b, **hints), make(engine))
        nan = b.copy()
        nan[3] = np.nan
        with pytest.raises(sv.NonFiniteInputError):
            cache.solve(nan)
    _check_operations(cache, D, b, dtype)
    _check_factor_queries(engine, cache, D, dtype)


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


# what the factors answer besides solves, as each case declares (Case.queries): log det, and
# A⁻¹'s entries by selected inversion. log det elsewhere is refused with BackendNotSupported
# (Krylov caches hold no factors, PARDISO's unsymmetric type hides its scaling); entries of A⁻¹
# elsewhere come from solves with the cache (a few columns are allowed, a pattern's worth is
# refused; checked on the direct engines: a Krylov cache's 12 unit columns are its own solves,
# tested above)
def _check_factor_queries(engine, cache, D, dtype):
    """log det and diag(A⁻¹) against dense numpy, in every state: after an update or a change
    of dtype kind they must be those of the NEW matrix; selected inversion makes no solve."""
    Dh = D.astype(np.complex128)
    sign, logabs = np.linalg.slogdet(Dh)
    _, case, _ = ENGINES[engine]
    if "logdet" in case.queries:
        got = cache.logdet()
        assert abs(got.logabsdet - logabs) <= _tol(dtype) * max(1.0, abs(logabs)), (got, logabs)
        assert abs(complex(got.sign) - sign) <= _tol(dtype), (got.sign, sign)
    else:
        with pytest.raises(lo.BackendNotSupported):
            cache.logdet()
    if not case.direct:
        return
    solves = cache.stats.solves + cache.stats.adjoint_solves + cache.stats.transpose_solves
    _close("diag(A⁻¹)", np.asarray(lo.diagonal(sv.inverse(cache))),
           np.diag(np.linalg.inv(Dh)), dtype)
    after = cache.stats.solves + cache.stats.adjoint_solves + cache.stats.transpose_solves
    if engine in TUNED + LOOP:
        # the winner decides: CHOLMOD or SuperLU invert selectively, PARDISO's (KLU's) cache
        # answers these 12 columns by solves (a few columns; no refactorization): the values
        # are checked
        assert after >= solves
    elif "selected_inverse" in case.queries:
        assert after == solves, "selected inversion made a solve"
    else:
        assert after > solves


EMPTY_ENGINES = [e for e in ENGINES]


@pytest.mark.parametrize("engine", EMPTY_ENGINES)
def test_empty_matrix(engine):
    """n = 0: every engine gives empty results (exact), with and without columns."""
    hpd = _hpd(engine)
    declared_unsupported(engine, np.float64)
    A = lo.Dense(np.zeros((0, 0))) if ENGINES[engine][2] == "dense" \
        else lo.aslinop(sp.csr_matrix((0, 0)))
    cache = sv.init(sv.LinearProblem(A, np.zeros(0), **(dict(posdef=True) if hpd else {})),
                    make(engine))
    assert cache.solve().shape == (0,)
    for op in (cache.solve, cache.solve_adjoint, cache.solve_transpose):
        assert np.asarray(op(np.zeros((0, 3)))).shape == (0, 3)
    sol = sv.solve(sv.LinearProblem(A, np.zeros(0)), make(engine))
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
    names = {e.name for e, _, _ in ENGINES.values()}
    for e in entries():
        if "sparse" in e.structures:
            assert e.name in names, f"{e.name} is missing from the state matrix"
    assert cells >= 300
    rows, cols = np.nonzero(MASK)
    A = operator(matrix(np.random.default_rng(0), np.float64, True), "LU")
    assert A.pattern.nnz == rows.size       # the failed updates keep the pattern
