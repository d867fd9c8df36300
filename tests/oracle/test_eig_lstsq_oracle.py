"""Oracle: eigsh (standard and generalized) and least squares against dense numpy, over the
corpus of hard matrices (tests/_cases/corpus.py) plus cases of their own: rank-deficient and
ill-conditioned least squares, clustered modes, singular and indefinite M.

Every answer is either a correct number (within a precision-aware tolerance of the dense
reference) or a named error — never a number from a problem that has none: a gradient of one
member of a cluster, a QR solution of a rank-deficient A, an eigenproblem with a bad M.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp

import adjoints as ad
import linops as lo
import solvers as sv
from tests._cases.corpus import CORPUS

HERMITIAN = [m for m in CORPUS.values() if m.hermitian and m.n >= 3]
ALL = [m for m in CORPUS.values() if m.n >= 1]


def _tol(dtype) -> float:
    return 1e-3 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-8


@pytest.mark.parametrize("mat", HERMITIAN, ids=lambda m: m.name)
def test_eigsh_values_and_value_gradients(mat):
    """The 2 eigenvalues nearest a shift below the spectrum; their gradients vvᴴ, or the named
    refusal where the corpus has a cluster (repeated, clustered eigenvalues)."""
    a = mat.a.astype(np.complex128 if mat.dtype.kind == "c" else np.float64)
    w = np.linalg.eigvalsh(a)
    k = 2
    sigma = float(w[0] - 0.1 * max(1.0, np.ptp(w)))
    S = lo.Sparse.from_scipy(mat.sparse())
    try:
        e = sv.eigsh(S, k, sigma=sigma)
    except sv.SolveError as err:            # the shifted matrix itself singular: named
        pytest.fail(f"{mat.name}: {err}")
    scale = np.abs(w).max()
    assert np.abs(e.values - w[:k]).max() <= _tol(mat.dtype) * scale
    gaps = np.diff(np.concatenate([w[:k], [w[k]]]))
    lb = np.array([1.0, 0.0])
    simple = gaps[0] > 1e-8 * scale and (w[1] - w[0]) > 1e-8 * scale
    if not simple:
        with pytest.raises(ad.DegenerateEigenvalueError):
            ad.eigsh_pullback(e, values_bar=lb)
        return
    G = lo.to_dense(ad.eigsh_pullback(e, values_bar=lb))
    W, V = np.linalg.eigh(a)
    ref = np.outer(V[:, 0], V[:, 0].conj())
    assert np.abs(G - ref).max() <= max(_tol(mat.dtype) * 1e2 * scale / max(
        w[1] - w[0], 1e-300), 1e-9)


CLUSTERED = ["repeated-eigenvalues", "clustered-eigenvalues"]


@pytest.mark.parametrize("name", CLUSTERED)
@pytest.mark.parametrize("k", [2, 3, 4])
def test_clusters_are_named_or_their_sums_exact(name, k):
    mat = CORPUS[name]
    a = mat.a
    w, V = np.linalg.eigh(a)
    e = sv.eigsh(lo.Sparse.from_scipy(mat.sparse()), k, sigma=0.0)
    assert np.abs(e.values - w[:k]).max() <= 1e-9
    cut = abs(w[k] - w[k - 1]) <= 1e-8 * np.abs(w).max()
    lb = np.ones(k)
    if cut:                                   # the first cluster continues beyond k
        with pytest.raises(ad.DegenerateEigenvalueError, match="not computed"):
            ad.eigsh_pullback(e, values_bar=lb)
        return
    G = lo.to_dense(ad.eigsh_pullback(e, values_bar=lb))    # the sum: P onto the k modes
    assert np.abs(G - V[:, :k] @ V[:, :k].T).max() <= 1e-7
    with pytest.raises(ad.DegenerateEigenvalueError, match="coincide"):
        ad.eigsh_pullback(e, values_bar=np.eye(k)[0])


def _mass(n, kind, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "spd":
        q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        return (q * np.logspace(0, 2, n)) @ q.T
    if kind == "singular":
        q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        s = np.logspace(0, 2, n)
        s[0] = 0.0
        return (q * s) @ q.T
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    s = np.logspace(0, 2, n)
    s[0] = -0.5
    return (q * s) @ q.T


@pytest.mark.parametrize("mat", [m for m in HERMITIAN if m.posdef and m.n >= 5],
                         ids=lambda m: m.name)
def test_generalized_against_scipy_eigh_and_bad_M_refused(mat):
    a = mat.a.astype(np.complex128 if mat.dtype.kind == "c" else np.float64)
    n = mat.n
    M = _mass(n, "spd")
    ref = sl.eigh(a, M, eigvals_only=True)
    sigma = float(ref[0] - 0.1 * max(1.0, np.ptp(ref)))
    if mat.dtype.kind == "c":
        M = M.astype(np.complex128)
    try:
        e = sv.eigsh(a, 2, sigma=sigma, M=M)
    except sv.ConvergenceError as err:       # a named failure is allowed; a wrong number not
        assert "residual" in str(err) or "ARPACK" in str(err)
        return
    assert np.abs(e.values - ref[:2]).max() <= _tol(mat.dtype) * np.abs(ref).max()
    V = e.vectors
    assert np.abs(V.conj().T @ M @ V - np.eye(2)).max() <= 1e-8
    for kind, err in (("singular", sv.SingularMatrixError),
                      ("indefinite", sv.NotPositiveDefiniteError)):
        with pytest.raises(err):
            sv.eigsh(a, 2, sigma=sigma, M=_mass(n, kind))


# ----- least squares ------------------------------------------------------------------------------
def _lstsq_cases():
    rng = np.random.default_rng(0)
    out = {}
    for c in (1e2, 1e8):
        u, _ = np.linalg.qr(rng.standard_normal((30, 8)))
        v, _ = np.linalg.qr(rng.standard_normal((8, 8)))
        out[f"tall-cond-1e{int(np.log10(c))}"] = (u * np.logspace(0, -np.log10(c), 8)) @ v.T
    a = rng.standard_normal((12, 5))
    out["rank-deficient"] = np.column_stack([a, a[:, 0] - 2 * a[:, 3]])
    out["wide"] = rng.standard_normal((5, 11))
    out["empty-column"] = np.column_stack([rng.standard_normal((9, 3)), np.zeros(9)])
    z = rng.standard_normal((14, 6)) + 1j * rng.standard_normal((14, 6))
    out["complex-tall"] = z
    return out


LSTSQ = _lstsq_cases()
SQUARE = [m for m in ALL if not m.singular and m.n >= 2 and m.cond < 1e9]


@pytest.mark.parametrize("name", list(LSTSQ))
@pytest.mark.parametrize("alg", ["qr", "lsmr"])
def test_least_squares_solution_and_gradient(name, alg):
    a = LSTSQ[name]
    m, n = a.shape
    rank = np.linalg.matrix_rank(a)
    full = rank == min(m, n)
    b = np.random.default_rng(1).standard_normal(m)
    A = sp.csr_array(a)
    algo = sv.QR() if alg == "qr" else sv.LSMR(rtol=1e-14, maxiter=5000)
    if alg == "qr" and not full:
        with pytest.raises(sv.RankDeficientError):
            sv.solve(sv.LeastSquares(A, b), algo)
        return
    cond = np.linalg.cond(a) if full else 1.0
    try:
        sol = sv.solve(sv.LeastSquares(A, b), algo)
    except sv.ConvergenceError:
        assert alg == "lsmr" and cond > 1e6   # a named failure on the hardest case only
        return
    x = np.linalg.pinv(a) @ b
    assert np.abs(sol.u - x).max() <= 1e-13 * cond * max(1, np.abs(x).max()) * 100
    if not full:
        with pytest.raises(sv.RankDeficientError):
            ad.solve_pullback(sol, np.ones(n))
        return
    if cond > 1e6:
        return                                 # the gradient at cond 1e8: bench lstsq checks it
    G = lo.to_dense(ad.solve_pullback(sol, np.ones(n)).A)
    h = 1e-6
    i, j = np.unravel_index(np.argmax(np.abs(G)), G.shape)
    E = np.zeros((m, n))
    E[i, j] = h
    fd = np.real((np.linalg.pinv(a + E) @ b).sum() - (np.linalg.pinv(a - E) @ b).sum()) / (2 * h)
    assert abs(np.real(G[i, j]) - fd) <= 1e-6 * max(1.0, abs(fd))


@pytest.mark.parametrize("mat", SQUARE, ids=lambda m: m.name)
def test_qr_on_the_square_corpus_is_a_solver(mat):
    """A square regular corpus matrix through QR: A⁻¹b, A⁻ᴴc (the pivoting, zero-diagonal,
    complex symmetric, hub-row and single-precision entries)."""
    a = mat.a
    b = np.random.default_rng(2).standard_normal(mat.n).astype(mat.dtype)
    cache = sv.init(sv.LinearProblem(lo.Sparse.from_scipy(mat.sparse()), b), sv.QR())
    ref = np.linalg.solve(a.astype(np.complex128), b)
    tol = _tol(mat.dtype) * max(1.0, mat.cond) * 1e-2
    assert np.abs(cache.solve() - ref).max() <= tol * max(1, np.abs(ref).max())
    refh = np.linalg.solve(a.astype(np.complex128).conj().T, b)
    assert np.abs(cache.solve_adjoint(b) - refh).max() <= tol * max(1, np.abs(refh).max())


@pytest.mark.parametrize("mat", [m for m in ALL if m.singular], ids=lambda m: m.name)
def test_qr_refuses_the_singular_corpus(mat):
    with pytest.raises(sv.SingularMatrixError):
        sv.init(sv.LinearProblem(lo.Sparse.from_scipy(mat.sparse())), sv.QR())
