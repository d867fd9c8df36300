"""adjoints.jax's Krylov solves are held to the acceptance rule of the numpy path: no slack."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import linops as lo
import solvers as sv
import adjoints.jax as adj


def test_matrix_free_krylov_accepts_no_slack():
    """CG stopped by maxiter=9 at 7.5× rtol used to be accepted (10× slack): now the true
    residual decides, ‖b − Ax‖ ≤ max(rtol‖b‖, atol), or ConvergenceError."""
    rng = np.random.default_rng(0)
    n = 60
    Q = np.linalg.qr(rng.standard_normal((n, n)))[0]
    a = jnp.asarray(Q @ np.diag(np.linspace(1, 3, n)) @ Q.T)
    mf = lo.MatrixFree((n, n), np.float64, lambda X: a @ X, lambda X: a.T @ X)
    b = jnp.asarray(rng.standard_normal(n))
    import jax.scipy.sparse.linalg as jspl

    x9 = jspl.cg(lambda v: a @ v, b, tol=1e-6, maxiter=9)[0]
    first = float(jnp.linalg.norm(b - a @ x9) / jnp.linalg.norm(b))
    assert 1e-6 < first < 1e-5                      # the case: inside the old 10× slack
    for alg in (sv.CG(rtol=1e-6, maxiter=9), sv.GMRES(rtol=1e-6, maxiter=9, restart=9)):
        for run in (lambda: adj.solve(mf, b, alg), lambda: jax.jit(lambda b: adj.solve(mf, b, alg))(b)):
            try:
                u = run()
            except Exception as e:   # the only other honest outcome: a named failure
                assert "ConvergenceError" in str(e) or isinstance(e, sv.ConvergenceError), e
                continue
            res = float(jnp.linalg.norm(b - a @ u))
            assert res <= 1e-6 * float(jnp.linalg.norm(b)), res
    with pytest.raises(sv.ConvergenceError, match="did not converge"):
        adj.solve(mf, b, sv.CG(rtol=1e-12, maxiter=2))
