"""Operands adjoints.jax takes as they come: empty systems, a numpy sparse matrix made inside a
traced function, a padded BCOO."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import adjoints.jax as adj


def _sparse(n):
    S = lo.Sparse.from_scipy(sp.csr_array(np.eye(n) * 2 + np.eye(n, k=1)))
    return lo.Sparse(jnp.asarray(S.values), S.pattern)


@pytest.mark.parametrize("kind", ["sparse", "factorize", "dense", "diagonal", "matrixfree"])
@pytest.mark.parametrize("shape", ["n0", "k0"])
def test_empty_systems_return_empty_results(kind, shape):
    n = 0 if shape == "n0" else 4
    b = jnp.zeros((n, 0)) if shape == "k0" else jnp.zeros((0,))
    A = {"sparse": lambda: _sparse(n), "factorize": lambda: adj.factorize(_sparse(n)),
         "dense": lambda: jnp.eye(n) * 2, "diagonal": lambda: lo.Diagonal(jnp.ones(n) * 2),
         "matrixfree": lambda: lo.MatrixFree((n, n), np.float64, lambda X: 2 * X,
                                             lambda X: 2 * X)}[kind]()
    for fn in (lambda b: adj.solve(A, b), jax.jit(lambda b: adj.solve(A, b))):
        u = fn(b)
        assert u.shape == b.shape and u.dtype == jnp.float64
    g = jax.jit(jax.grad(lambda b: jnp.sum(adj.solve(A, b))))(b)
    assert g.shape == b.shape
    if kind == "sparse":
        X = jnp.zeros((n, 0)) if shape == "k0" else jnp.zeros((0,))
        assert adj.matmul(A, X).shape == X.shape
        assert jax.jit(adj.matmul)(A, X).shape == X.shape


def test_numpy_sparse_made_inside_a_traced_function():
    code = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np, scipy.sparse as sp
        jax.config.update("jax_enable_x64", True)
        import linops as lo
        T = sp.random(20, 20, 0.3, random_state=0, format="csr") + sp.eye(20, format="csr")
        x = jnp.ones(20)
        y = jax.jit(lambda x: lo.aslinop(T) @ x)(x)
        g = jax.jit(jax.grad(lambda x: jnp.sum((lo.aslinop(T) @ x) ** 2)))(x)
        assert np.allclose(y, T @ np.ones(20)) and np.allclose(g, 2 * T.T @ (T @ np.ones(20)))
        fam, _ = lo.testing.poisson_family(4)
        K = fam(np.ones(fam.n_params)).to_scipy()
        h = jax.jit(jax.grad(lambda t: jnp.sum(lo.AffineSparse.from_terms([K])(t).values)))
        assert np.allclose(h(jnp.ones(1)), K.sum())
        print("OK")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "OK" in p.stdout, p.stderr[-2000:]
    # and the interpreter shuts down without the weak-reference traceback of _jax_constant
    assert "Exception ignored" not in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_padded_bcoo_drops_jax_padding():
    from jax.experimental import sparse as jsp

    M = np.array([[4.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 5.0]])
    A = jsp.BCOO.fromdense(jnp.asarray(M), nse=9)      # 6 entries + 3 padding (index = 3)
    assert (np.asarray(A.indices) >= 3).any()
    b = jnp.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(adj.solve(A, b), np.linalg.solve(M, b), rtol=1e-14)
    np.testing.assert_allclose(adj.matmul(A, b), M @ b, rtol=1e-14)
    np.testing.assert_allclose(adj.matmul(b, A), b @ M, rtol=1e-14)
    g = jax.grad(lambda d: jnp.sum(adj.solve(jsp.BCOO((d, A.indices), shape=A.shape), b)))(
        A.data)
    u = np.linalg.solve(M, b)
    lam = np.linalg.solve(M.T, np.ones(3))
    ind = np.asarray(A.indices)
    keep = (ind < 3).all(1)
    np.testing.assert_allclose(np.asarray(g)[keep], -lam[ind[keep, 0]] * u[ind[keep, 1]],
                               rtol=1e-13)
    assert np.all(np.asarray(g)[~keep] == 0)
