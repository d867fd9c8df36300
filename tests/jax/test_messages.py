"""What adjoints.jax says and which dtype it answers in: NaN/Inf named without advice it does not
accept (adj.solve has no check_finite) and the cotangent called the cotangent; a BCSR with
concrete indices accepted under jit; half-precision operators solved (in float32) under jit;
JAX's promotion for a float32 sparse A with a float64 b (the answer is float64 and as accurate
as float64); a Factorization answers in its own precision."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
import adjoints.jax as adj

N = 6
M = np.eye(N) * 3 + np.eye(N, k=1) - 0.5 * np.eye(N, k=-2)


def _sparse(m=M, dtype=np.float64):
    S = lo.Sparse.from_scipy(sp.csr_matrix(m.astype(dtype)))
    return lo.Sparse(jnp.asarray(S.values), S.pattern)


def _first_line(fn):
    with pytest.raises(Exception) as info:
        jax.block_until_ready(fn())
    return type(info.value), str(info.value).splitlines()[0]


@pytest.mark.parametrize("kind", ["sparse", "dense", "diagonal"])
def test_nonfinite_messages_name_what_and_where_without_check_finite(kind):
    A = {"sparse": _sparse(), "dense": jnp.asarray(M),
         "diagonal": lo.Diagonal(jnp.asarray(np.diag(M)))}[kind]
    b = jnp.ones(N).at[2].set(jnp.nan)
    for fn in (lambda: adj.solve(A, b), lambda: jax.jit(lambda b: adj.solve(A, b))(b)):
        cls, first = _first_line(fn)
        assert "nan" in first and "index (2" in first and "check_finite" not in first, first
    # a cotangent with -inf: named as the cotangent (it said "c contains -inf")
    f = jax.jit(jax.grad(lambda b: jnp.sum(jnp.log(adj.solve(A, b) - adj.solve(A, b)))))
    cls, first = _first_line(lambda: f(jnp.ones(N)))
    assert "NonFiniteInputError" in first and "cotangent" in first, first
    assert "c contains" not in first and "check_finite" not in first, first


def test_nonfinite_matrix_values_are_named_by_row_and_column():
    m = M.copy()
    m[4, 4] = np.inf
    A = _sparse(m)
    with pytest.raises(sv.NonFiniteInputError, match=r"A contains inf at \(4, 4\)") as info:
        adj.factorize(A)
    assert "check_finite" not in str(info.value)
    cls, first = _first_line(lambda: jax.jit(lambda v: adj.solve(lo.Sparse(v, A.pattern),
                                                                 jnp.ones(N)))(A.values))
    assert "NonFiniteInputError" in first and "(4, 4)" in first, first


def test_bcsr_with_concrete_indices_under_jit():
    """It was refused as "a BCOO whose indices are traced"; padded BCSR too."""
    from jax.experimental import sparse as jsp

    b = jnp.arange(1.0, N + 1)
    for Mx in (jsp.BCSR.fromdense(jnp.asarray(M)), jsp.BCSR.fromdense(jnp.asarray(M), nse=25)):
        u = jax.jit(lambda b: adj.solve(Mx, b))(b)
        np.testing.assert_allclose(np.asarray(u), np.linalg.solve(M, np.asarray(b)), rtol=1e-13)
        g = jax.jit(jax.grad(lambda d: jnp.sum(adj.solve(
            jsp.BCSR((d, Mx.indices, Mx.indptr), shape=Mx.shape), b))))(Mx.data)
        assert g.shape == Mx.data.shape and bool(jnp.all(jnp.isfinite(g)))
    traced = jax.jit(lambda d, i, p: adj.solve(jsp.BCSR((d, i, p), shape=(N, N)), b))
    Mx = jsp.BCSR.fromdense(jnp.asarray(M))
    with pytest.raises(sv.BackendNotSupported, match="a BCSR whose indices are traced"):
        traced(Mx.data, Mx.indices, Mx.indptr)


@pytest.mark.parametrize("kind,dtype", [("diagonal", jnp.float16), ("matrixfree", jnp.bfloat16),
                                        ("sparse", jnp.bfloat16), ("dense", jnp.float16)])
def test_half_precision_operators_solve_in_float32_under_jit(kind, dtype):
    """They failed with "KeyError: 10" (the error check could not read a float16 buffer)."""
    d = np.array([2.0, 4.0, 8.0, 0.5, 1.0, 2.0])
    m = np.diag(d) + 0.25 * np.eye(N, k=1)
    if kind == "diagonal":
        m = np.diag(d)
        A = lo.Diagonal(jnp.asarray(d, dtype))
    elif kind == "matrixfree":
        a = jnp.asarray(m, dtype)
        A = lo.MatrixFree((N, N), dtype, lambda X: a @ X, lambda X: a.T @ X)
    elif kind == "sparse":
        S = lo.Sparse.from_scipy(sp.csr_matrix(m))
        A = lo.Sparse(jnp.asarray(S.values, dtype), S.pattern)
    else:
        A = jnp.asarray(m, dtype)
    b = jnp.asarray(np.arange(1.0, N + 1), dtype)
    alg = sv.GMRES(rtol=1e-6) if kind == "matrixfree" else None
    u = jax.jit(lambda b: adj.solve(A, b, alg))(b)
    assert u.dtype == jnp.float32
    ref = np.linalg.solve(m.astype(np.float32), np.arange(1.0, N + 1))
    np.testing.assert_allclose(np.asarray(u), ref, rtol=1e-5)


def test_float32_sparse_with_float64_b_follows_jax_promotion():
    """It returned float64 with float32 accuracy (relative error 1.7e-5); now the matrix is
    factorized in float64, as jnp.linalg.solve promotes."""
    rng = np.random.default_rng(0)
    m = (rng.standard_normal((40, 40)) * (rng.random((40, 40)) < 0.2) + 6 * np.eye(40))
    m32 = m.astype(np.float32)
    A = _sparse(m32, np.float32)
    b = jnp.asarray(rng.standard_normal(40))
    ref = np.linalg.solve(m32.astype(np.float64), np.asarray(b))
    for u in (adj.solve(A, b), jax.jit(lambda b: adj.solve(A, b))(b)):
        assert u.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(u), ref, rtol=1e-12)
    dense = jnp.linalg.solve(jnp.asarray(m32), b)
    np.testing.assert_allclose(np.asarray(adj.solve(A, b)), np.asarray(dense), rtol=1e-12)
    # the gradient with respect to the float32 values comes back in float32
    g = jax.grad(lambda v: jnp.sum(adj.solve(lo.Sparse(v, A.pattern), b)))(A.values)
    assert g.dtype == jnp.float32
    # an explicit float32 factorization has float32 digits only: it answers in float32
    F = adj.factorize(A)
    u = F.solve(b)
    assert u.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(u), ref, rtol=1e-4)
    assert F.solve(b.astype(jnp.complex128)).dtype == jnp.complex64
