"""A real factorization answers a complex right-hand side exactly: every direct engine of the
registry, on a real sparse A needing pivoting, in every solve mode (and QR's Gram solve). The
oracle found SuiteSparseQR casting b to A's real dtype: B.imag dropped, SUCCESS with a
residual of 4.1 on a 4×4 system."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
from solvers.internals import entries

#: real, nonsymmetric, zero diagonal (row exchanges needed); its SPD partner for Cholesky
A = np.array([[0.0, 2.0, 0.0, 1.0], [3.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 4.0],
              [1.0, 0.0, 5.0, 0.0]])
H = A.T @ A + np.eye(4)
B = np.array([[1 + 1j, 0.0], [2.0, 0.0], [3.0, 1.0], [4j, 0.0]])   # a real column too


def _direct():
    out = []
    for e in entries():
        if e.direct and "sparse" in e.structures:
            why = e.unavailable()
            marks = [pytest.mark.skip(reason=why)] if why else []
            out.append(pytest.param(e, id=e.name, marks=marks))
    return out


@pytest.mark.parametrize("e", _direct())
def test_complex_block_on_a_real_factor(e):
    a = H if e.hermitian or e.posdef else A
    S = lo.Sparse.from_scipy(sp.csr_array(a))
    cache = sv.init(sv.LinearProblem(S, B[:, 0]), e.cls())
    for solve, M in ((cache.solve, a), (cache.solve_adjoint, a.T), (cache.solve_transpose, a.T)):
        X = solve(B)
        assert X.dtype == np.complex128
        assert np.linalg.norm(M @ X - B) <= 1e-13 * np.linalg.norm(B), (e.name, solve.__name__)
        x = solve(B[:, 0])
        assert np.linalg.norm(M @ x - B[:, 0]) <= 1e-13 * np.linalg.norm(B[:, 0])


def test_qr_gram_solve_of_a_complex_c():
    pytest.importorskip("sparseqr")
    T = np.vstack([A, np.eye(4)])
    cache = sv.init(sv.LeastSquares(lo.Sparse.from_scipy(sp.csr_array(T)), np.ones(8)), sv.QR())
    want = np.linalg.solve(T.T @ T, B)
    assert np.linalg.norm(cache.solve_gram(B) - want) <= 1e-13 * np.linalg.norm(want)
    b = np.arange(8) + 1j
    want = np.linalg.lstsq(T, b, rcond=None)[0]
    assert np.linalg.norm(cache.solve(b) - want) <= 1e-13 * np.linalg.norm(want)


@pytest.mark.parametrize("shape", [(1, 1), (5, 1)])
def test_qr_blocks_of_one_row(shape):
    """A block with one row (a 1×1 A; the adjoint's c of an m×1 A): sparseqr handed
    SuiteSparseQR a k×1 array for it, which returned NULL and the read segfaulted."""
    pytest.importorskip("sparseqr")
    T = np.arange(1.0, shape[0] + 1).reshape(shape)
    cache = sv.init(sv.LeastSquares(lo.Sparse.from_scipy(sp.csr_array(T)), np.ones(shape[0])),
                    sv.QR())
    P = np.linalg.pinv(T)
    Bn = np.arange(3 * shape[0]).reshape(shape[0], 3) + 1j
    Bh = np.array([[1.0, 2.0 + 1j, -3.0]])
    for got, want in ((cache.solve(Bn), P @ Bn), (cache.solve_adjoint(Bh), P.T @ Bh),
                      (cache.solve_transpose(Bh), P.T @ Bh), (cache.solve_gram(Bh),
                                                              np.linalg.solve(T.T @ T, Bh))):
        assert got.shape == want.shape
        assert np.linalg.norm(got - want) <= 1e-13 * np.linalg.norm(want)
