"""What the setups read cheaply instead of recomputing: CHOLMOD's pivots from the factor in
place (scikit-sparse's D() converts the factor), and the Hermitian check of a stored operator
once for Auto's choice and the factorization's requirement."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
from solvers import _checks
from solvers._engines.direct import cholmod_pivots
from tests._cases.matrices import needs_cholmod


@needs_cholmod
@pytest.mark.parametrize("mode", ["supernodal", "simplicial"])
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("nx", [4, 40])
def test_cholmod_pivots_read_in_place_equal_scikit_sparse_D(mode, complex_, nx):
    from sksparse import cholmod  # optional: the test is skipped without scikit-sparse

    fam, _ = lo.testing.poisson_family(nx)
    K = fam(np.linspace(0.5, 1.5, fam.n_params)).to_scipy().tocsc()
    if complex_:
        K = sp.csc_matrix(K + 0.02j * (sp.triu(K, 1) - sp.tril(K, -1)))
    F = cholmod.analyze(K, mode=mode).cholesky(K)
    got = cholmod_pivots(F)
    want = np.real(F.D())                 # (converts F: called after the read)
    assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_array_equal(got, want)


def test_the_hermitian_check_of_a_stored_operator_runs_once(monkeypatch):
    calls = []
    original = _checks.hermitian_defect

    def counting(A):
        calls.append(type(A).__name__)
        return original(A)

    monkeypatch.setattr(_checks, "hermitian_defect", counting)
    fam, b = lo.testing.poisson_family(10)
    K = fam(np.ones(fam.n_params))
    sv.init(sv.LinearProblem(K, b, posdef=True))          # Auto's check + Cholesky's requirement
    assert calls == ["Sparse"]
    sv.init(sv.LinearProblem(2 * K.to_scipy(), b))        # another operator: checked again
    assert calls == ["Sparse", "Sparse"]
    n = len(_checks._DEFECTS)
    del K
    gc.collect()
    assert len(_checks._DEFECTS) < n                       # the entry died with its operator
