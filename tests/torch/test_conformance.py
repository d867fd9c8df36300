"""adjoints.torch in the conformance matrix: the sparse operators of
tests/solvers/test_conformance.py × every algorithm that applies to them, each case in one of
the four dtypes (taken in turn, so every dtype meets a quarter of the cases; the engines
themselves meet every dtype in tests/solvers), through the torch front end (the host engines,
so the numpy table decides what exists).

Each cell agrees with dense torch.linalg at the matrix's precision-appropriate tolerance —
solve, solve_adjoint, solve_transpose, a multi-column solve, and the gradients b̄ and values̄
of a solve — or raises BackendNotSupported because the table declares the capability missing
(the message is the table's). Anything else fails."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import scipy.sparse as sp

from tests.solvers.test_conformance import (ALGORITHMS, N, _applies, _declared_missing,
                                            _sparse_general, _spd, _tol)
from tests.torch.cases import torch

import linops as lo  # noqa: E402
import adjoints.torch as at  # noqa: E402
from linops.internals import backend_named  # noqa: E402
from solvers.internals import build_case  # noqa: E402

DTYPES = {np.float32: torch.float32, np.float64: torch.float64,
          np.complex64: torch.complex64, np.complex128: torch.complex128}
OPERATORS = {"sparse": (_sparse_general, False), "sparse_spd": (_spd, True)}
# the registry's cases that take a sparse operator (a Hermitian positive definite one where the
# case needs it); Woodbury needs a low-rank term, which a values + pattern operand has not
CASES = [(o, a) for o in OPERATORS for a in ALGORITHMS if a != "Woodbury" and _applies(o, a)]
CELLS = [(o, a, list(DTYPES)[i % len(DTYPES)]) for i, (o, a) in enumerate(CASES)]


def _rand(rng, shape, dtype):
    a = rng.standard_normal(shape)
    return (a + 1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else a).astype(dtype)


@pytest.mark.parametrize("op_name,alg_name,dtype", CELLS,
                         ids=[f"{o}-{a}-{np.dtype(d).name}" for o, a, d in CELLS])
def test_cell(op_name, alg_name, dtype):
    rng = np.random.default_rng(zlib.crc32(f"torch-{op_name}-{np.dtype(dtype).name}".encode()))
    make, hpd = OPERATORS[op_name]
    D = make(rng, dtype).astype(dtype)
    K = lo.Sparse.from_scipy(sp.csr_array(D))
    tdt = DTYPES[dtype]
    v = torch.tensor(K.values, requires_grad=True)
    A = lo.Sparse(v, K.pattern)
    entry, case = ALGORITHMS[alg_name]
    if entry.unavailable() is not None:
        pytest.skip(entry.unavailable())
    alg = build_case(entry, case)
    hints = dict(hermitian=True, posdef=True) if hpd else {}
    b = torch.tensor(_rand(rng, (N,), dtype), requires_grad=True)
    be = backend_named("numpy")
    missing = _declared_missing(be, op_name, alg_name, dtype)
    if missing:
        with pytest.raises(lo.BackendNotSupported) as e:
            at.solve(A, b, alg, **hints)
        assert any(r.split(";")[0] in str(e.value) for r in missing), (str(e.value), missing)
        return
    tol = _tol(dtype)
    Dt = torch.tensor(D.astype(np.complex128), requires_grad=True)

    def close(name, got, want):
        got, want = got.detach().to(torch.complex128), want.detach()
        err = float((got - want).abs().max()) / max(float(want.abs().max()), 1e-30)
        assert err < tol, f"{name}: relative error {err:.2e} >= {tol:g}"

    at.reset_stats()
    F = at.factorize(A, alg, **hints)
    u = F.solve(b)
    assert u.dtype == tdt
    bc = b.detach().to(torch.complex128)
    close("solve", u, torch.linalg.solve(Dt, bc))
    c = torch.tensor(_rand(rng, (N,), dtype))
    cc = c.to(torch.complex128)
    close("solve_adjoint", F.solve_adjoint(c), torch.linalg.solve(Dt.mH, cc))
    close("solve_transpose", F.solve_transpose(c), torch.linalg.solve(Dt.T, cc))
    B = torch.tensor(_rand(rng, (N, 3), dtype))
    close("multi-rhs", F.solve(B), torch.linalg.solve(Dt, B.to(torch.complex128)))
    ubar = torch.tensor(_rand(rng, (N,), dtype))
    (ubar.conj() * u).sum().real.backward()
    ref = (ubar.to(torch.complex128).conj() * torch.linalg.solve(Dt, bc)).sum().real
    ref.backward()
    close("gradient b", b.grad, torch.linalg.solve(Dt.mH, ubar.to(torch.complex128)))
    P = K.pattern
    close("gradient values", v.grad, Dt.grad[torch.as_tensor(P.rows), torch.as_tensor(P.indices)])
    s = at.stats()
    assert (s.factorizations, s.misses) == (1, 0), s


def test_matrix_size():
    """The torch front end's part of the matrix (printed with -rP)."""
    unsupported = sum(bool(_declared_missing(backend_named("numpy"), o, a, d))
                      for o, a, d in CELLS)
    run = len(CELLS) - unsupported
    print(f"adjoints.torch conformance: {len(CASES)} operator × algorithm cases, one dtype each: "
          f"{run} cells run, {unsupported} declared unsupported")
    assert len(CASES) >= 30 and run >= 25 and {d for _, _, d in CELLS} == set(DTYPES)
