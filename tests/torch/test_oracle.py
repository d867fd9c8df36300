"""The oracle harness for adjoints.torch: every entry point on every matrix of the shared
corpus (tests/_cases/corpus.py: pivoting, explicit zeros, repeated and clustered eigenvalues,
cond 1e8–1e12, near-singular and singular, indefinite, complex symmetric, hub rows, n = 0/1,
float32/complex64) against dense torch.linalg in complex128, at a tolerance that follows the
matrix's condition number and the precision; singular matrices raise the error ``solvers``
raises for them; one factorization per value set."""

from __future__ import annotations

import numpy as np
import pytest

from tests._cases.corpus import CORPUS
from tests.torch.cases import torch

import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
import adjoints.torch as at  # noqa: E402

TORCH = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
         np.dtype(np.complex64): torch.complex64, np.dtype(np.complex128): torch.complex128}


def _tol(m) -> float:
    eps = float(np.finfo(m.dtype).eps)
    return max(1e-13, 50 * m.n * max(m.cond, 1.0) * eps)


def _err(got, want) -> float:
    got = got.detach().to(torch.complex128)
    return float((got - want).abs().max() / max(float(want.abs().max()), 1e-300)) \
        if want.numel() else 0.0


def _solvers_error(m, b, alg=None):
    """The exception type solvers raises for this matrix with ``alg`` (default: its default
    algorithm; None when it solves it): adjoints.torch must raise the same."""
    try:
        sv.solve(sv.LinearProblem(m.sparse(), b), alg)
    except sv.SolveError as e:
        return type(e)
    return None


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_entry_point_on_the_corpus(name):
    m = CORPUS[name]
    dt = TORCH[m.dtype]
    K = lo.Sparse.from_scipy(m.sparse())
    P, n = K.pattern, m.n
    rng = np.random.default_rng(0)
    b_np = (rng.standard_normal(n) + (1j * rng.standard_normal(n) if m.dtype.kind == "c" else 0)
            ).astype(m.dtype)
    v = torch.tensor(K.values, requires_grad=True)
    b = torch.tensor(b_np)
    D = torch.tensor(m.a.astype(np.complex128))
    bc = b.to(torch.complex128)
    error = _solvers_error(m, b_np) if n else None
    assert error is not None or not m.singular, "solvers solved a singular corpus matrix"
    if error is not None:
        with pytest.raises(error):
            at.solve(lo.Sparse(v, P), b)
        with pytest.raises(error):
            at.logdet(lo.Sparse(v, P))
        return
    tol = _tol(m)
    at.reset_stats()
    base = at.stats().live              # factorizations other tests' garbage still holds
    u = at.solve(lo.Sparse(v, P), b)
    a = torch.linspace(-1, 1, n, dtype=torch.float64).to(dt)
    if n:
        (a.conj() @ u).real.backward()
    s = at.stats()
    assert (s.factorizations, s.misses, s.live) == ((1 if n else 0), 0, base), s
    assert u.dtype == dt
    uref = torch.linalg.solve(D, bc)
    assert _err(u, uref) < tol, ("solve", _err(u, uref), tol)
    lam = torch.linalg.solve(D.mH, a.to(torch.complex128))
    gref = -(lam[torch.as_tensor(P.rows)] * uref[torch.as_tensor(P.indices)].conj())
    if n:
        assert _err(v.grad, gref if m.dtype.kind == "c" else gref.real) < tol, "values gradient"
    lu_error = _solvers_error(m, b_np, sv.LU())
    if lu_error is not None:   # SuperLU's pivot check refuses what the default engine answers
        with pytest.raises(lu_error):       # (float32 at κ·u near its threshold): the same here
            at.factorize(lo.Sparse(v.detach(), P), sv.LU())
        return
    F = at.factorize(lo.Sparse(v.detach(), P), sv.LU())
    assert _err(F.solve_adjoint(b), torch.linalg.solve(D.mH, bc)) < tol, "solve_adjoint"
    assert _err(F.solve_transpose(b), torch.linalg.solve(D.T, bc)) < tol, "solve_transpose"
    X = torch.tensor(rng.standard_normal((n, 2))).to(dt)
    assert _err(at.matmul(lo.Sparse(v, P), X), D @ X.to(torch.complex128)) < 1e-5, "matmul"
    assert _err(at.matmul(X.T, lo.Sparse(v, P)), X.T.to(torch.complex128) @ D) < 1e-5, "rmatmul"
    if n == 0:
        return
    sign, ld = F.slogdet()
    sref, ldref = torch.linalg.slogdet(D)
    assert abs(float(ld) - float(ldref)) < tol * max(1.0, abs(float(ldref))) * 10, "logdet"
    assert abs(complex(sign) - complex(sref)) < 1e-4, "sign"
    rows, cols = [0, n - 1, n // 2], [n - 1, 0, n // 2]
    Ainv = torch.linalg.inv(D)
    assert _err(F.selected_inverse(rows, cols), Ainv[rows, cols]) < tol * 10, "selected inverse"
    if m.posdef and m.cond < 1e12:    # CHOLMOD through Auto (posdef hint)
        w = torch.tensor(K.values, requires_grad=True)
        uc = at.solve(lo.Sparse(w, P), b, posdef=True)
        assert _err(uc, uref) < tol, "Cholesky solve"
        at.logdet(lo.Sparse(w, P), posdef=True).backward()
        zref = torch.linalg.inv(D).mH[torch.as_tensor(P.rows), torch.as_tensor(P.indices)]
        assert _err(w.grad, zref if m.dtype.kind == "c" else zref.real) < tol, "logdet grad"
