"""Zero factorizations in pullbacks, and O(n) memory for the gradient of a 10^6 system."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
import adjoints as ad


@pytest.mark.slow
def test_gradient_wrt_values_of_a_million_unknowns_is_O_nnz():
    n = 10**6
    A = lo.aslinop(sp.diags([-1.0, 2.05, -1.0], [-1, 0, 1], shape=(n, n), format="csr"))
    nnz = A.pattern.nnz
    a = np.random.default_rng(0).standard_normal(n)
    b = np.ones(n)
    A.pattern.rows  # pattern bookkeeping belongs to A, not to the gradient
    cache = sv.init(sv.LinearProblem(A, b), sv.LU())  # the factorization is outside the window
    tracemalloc.start()
    u = cache.solve()
    f = a @ u
    g = ad.solve_pullback(cache, a)  # f = aᵀu -> ū = a
    grad_values = lo.project(g.A, like=A).values
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 40 * nnz, f"peak {peak / nnz:.1f} bytes per stored entry"
    assert lo.payload_nbytes(g.A) <= 3 * n * 8 + 1024
    assert cache.stats.factorizations == 1 and cache.stats.adjoint_solves == 1
    # spot-check against the closed form −λᵢ uⱼ at a few stored entries
    lam = g.b
    k = np.array([0, 1, 2, nnz // 2, nnz - 1])
    np.testing.assert_allclose(grad_values[k], -lam[A.pattern.rows[k]] * u[A.pattern.indices[k]], rtol=1e-12)
    assert np.isfinite(f)


def test_no_pullback_factorizes():
    A = sp.random(30, 30, 0.2, random_state=1) + 5 * sp.eye(30)
    fam = lo.AffineSparse.from_terms([A.tocsr(), sp.eye(30, format="csr")])
    K = fam(np.array([1.0, 0.5]))
    for alg in (sv.LU(), sv.GMRES(rtol=1e-12), sv.Auto()):
        cache = sv.init(sv.LinearProblem(K, np.ones(30)), alg)
        sol_u = cache.solve()
        g = ad.solve_pullback(cache, np.ones(30))
        fam.pullback(g.A)
        ad.inv_pullback(cache, g.A)
        ad.matmul_pullback(K, sol_u, np.ones(30))
        assert cache.stats.factorizations == 1 and cache.stats.numeric_refactorizations == 0
