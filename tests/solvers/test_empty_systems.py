"""Empty shapes on every path: n = 0 matrices and (n, 0) right-hand sides."""

from __future__ import annotations

import numpy as np
import pyamg
import pytest
import scipy.sparse as sp

import solvers as sv
from tests._cases.matrices import HAVE_PARDISO


# ----- empty shapes on every path ----------------------------------------------------------------
@pytest.mark.parametrize("alg", [sv.CG(), sv.GMRES(), sv.BiCGStab(), sv.MINRES(),
                                 sv.CG(precond=sv.AMG()), sv.AMG(), sv.LU(), sv.Auto(),
                                 "pardiso"], ids=str)
def test_empty_right_hand_sides_and_matrices(alg):
    if alg == "pardiso" and not HAVE_PARDISO:
        pytest.skip("pypardiso not installed")
    P = sp.csr_matrix(pyamg.gallery.poisson((6, 6), format="csr"))
    cache = sv.init(sv.LinearProblem(P, posdef=True), alg)
    assert cache.solve(np.zeros((36, 0))).shape == (36, 0)
    assert cache.solve_adjoint(np.zeros((36, 0))).shape == (36, 0)
    empty = sv.solve(sv.LinearProblem(sp.csr_matrix((0, 0)), np.zeros(0), posdef=True), alg)
    assert empty.u.shape == (0,) and empty.status is sv.Status.SUCCESS
