"""Small matrices and availability marks shared by the solver tests."""

from __future__ import annotations

import numpy as np
import pyamg
import pytest
import scipy.sparse as sp

import solvers as sv
from solvers.internals import entry

HAVE_PARDISO = entry("pardiso").unavailable() is None
HAVE_PETSC = entry("petsc").unavailable() is None
needs_pardiso = pytest.mark.skipif(not HAVE_PARDISO, reason="pypardiso (MKL) not installed")
needs_cholmod = pytest.mark.skipif(not sv.cholmod_available(), reason="scikit-sparse missing")
needs_petsc = pytest.mark.skipif(not HAVE_PETSC, reason="petsc4py not installed")


def spd(n=30, seed=0):
    P = pyamg.gallery.poisson((n // 5, 5), format="csr").astype(float)
    rng = np.random.default_rng(seed)
    return sp.csr_matrix(P + sp.diags(rng.random(P.shape[0])))


def skewed(S, scale=0.5):
    """Same pattern as S, not symmetric."""
    return sp.csr_matrix(S + sp.triu(S, 1) * scale)


def rel_residual(A, x, b) -> float:
    return float(np.linalg.norm(A @ x - b) / np.linalg.norm(b))
