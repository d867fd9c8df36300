"""adjoints.jax with jax_enable_x64 OFF (JAX's default): float32/complex64 everywhere.

Not collected by the default run (tests/conftest.py forces x64 on at import); executed by
``tests/jax/test_x64off.py`` as ``python -m pytest --noconftest -o python_files='x64off_*.py'``
in a fresh interpreter, where x64 stays off. Every sparse solve used to fail here, even forward
("result_shape_dtypes cannot specify 64-bit types").
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
import adjoints.jax as adj  # noqa: E402
from tests._cases.jax_cases import (CORE, battery_inputs, compare, jit_both,  # noqa: E402
                            make_b, make_case, rhs, rtol_for, scalar_loss)

F32, C64 = np.float32, np.complex64
LITE = ("value_and_grad", "jvp", "vmap_grad", "linear_transpose")


def test_x64_is_really_off():
    assert not jax.config.jax_enable_x64
    assert jnp.ones(2).dtype == jnp.float32
    assert jnp.asarray(np.ones(2)).dtype == jnp.float32


@pytest.mark.parametrize("kind,dtype,which", [
    ("sparse-LU", F32, CORE), ("sparse-Cholesky", C64, LITE), ("sparse-CG", F32, LITE),
    ("sparse-Auto", F32, LITE), ("dense", C64, LITE), ("diagonal", F32, LITE),
    ("woodbury", C64, LITE), ("family", F32, LITE), ("matrixfree", C64, LITE)])
def test_transforms_single_precision_x64_off(kind, dtype, which):
    case = make_case(kind, dtype)
    got, want = jit_both(case, battery_inputs(case), which)
    compare(got, want, rtol_for(dtype, kind), f"{kind}/{np.dtype(dtype).name}")
    for v in jax.tree.leaves(got):
        assert v.dtype in (jnp.float32, jnp.complex64), v.dtype


def test_check_grads_second_order_x64_off():
    case = make_case("sparse-LU", F32)
    f = jax.jit(lambda p, q: scalar_loss(case.solve(p, make_b(q, F32))))
    # second-order finite differences in float32: a larger step and percent-level tolerances
    check_grads(f, (case.params, rhs(case)), order=2, modes=("fwd", "rev"), eps=3e-2,
                atol=1e-2, rtol=1e-2)


def test_eager_sparse_and_numpy_float64_inputs_x64_off():
    """Eager, and with float64 numpy values (jax turns them into float32)."""
    S = sp.random(8, 8, 0.4, random_state=1, format="csr") + sp.eye(8, format="csr") * 4
    A = lo.Sparse.from_scipy(S)
    b = np.ones(8)
    u = adj.solve(A, b)
    assert u.dtype == jnp.float32
    np.testing.assert_allclose(u, np.linalg.solve(S.toarray(), b), rtol=2e-5)
    P, v = A.pattern, jnp.asarray(A.values)
    g = jax.grad(lambda v: jnp.sum(adj.solve(lo.Sparse(v, P), jnp.asarray(b)) ** 2))(v)
    assert g.dtype == jnp.float32
    adj.reset_stats()
    before = adj.stats().live
    jax.jit(jax.hessian(lambda v: jnp.sum(adj.solve(lo.Sparse(v, P), jnp.asarray(b)) ** 2)))(v)
    s = adj.stats()
    assert (s.factorizations, s.misses, s.live - before) == (1, 0, 0), s


def test_loops_factorize_once_x64_off():
    """Issue 20's loop forms in single precision: one factorization per value_and_grad."""
    fam, load = lo.testing.poisson_family(6)
    P = fam.pattern
    eye = jnp.asarray((P.rows == P.indices).astype(np.float32))
    f = jnp.asarray(load, jnp.float32)
    th = jnp.asarray(0.5 + np.random.default_rng(0).random(fam.n_params), jnp.float32)

    def scan(th, F=False):
        A = lo.Sparse(eye + 0.05 * fam(th).values.astype(jnp.float32), P)
        solve = adj.factorize(A).solve if F else (lambda r: adj.solve(A, r))
        u = jax.lax.scan(lambda u, _: (solve(u + f), None), jnp.zeros(P.shape[0]), None,
                         length=8)[0]
        return jnp.sum(u ** 2)

    for F in (False, True):
        adj.reset_stats()
        v, g = jax.jit(jax.value_and_grad(lambda t: scan(t, F)))(th)
        s = adj.stats()
        assert (s.factorizations, s.misses) == (1, 0), s
        assert g.dtype == jnp.float32
        vd, gd = jax.value_and_grad(lambda t: scan(t, False))(th)
        np.testing.assert_allclose(np.asarray(g), np.asarray(gd), rtol=1e-4,
                                   atol=1e-4 * float(jnp.abs(gd).max()))


def test_complex_matrix_real_b_x64_off():
    case = make_case("sparse-LU", C64)
    A = case.build(case.params)
    b = jnp.ones(8, jnp.float32)
    g = jax.jit(jax.grad(lambda b: jnp.real(jnp.sum(adj.solve(A, b) ** 2))))(b)
    assert g.dtype == jnp.float32


@pytest.mark.parametrize("order", ["A@X", "X@A"])
def test_matmul_x64_off(order):
    case = make_case("sparse-LU", C64)
    P = case.build(case.params).pattern
    X = jnp.ones((8, 3), jnp.complex64)

    def f(p, dense):
        A = case.dense(p) if dense else case.build(p)
        mm = jnp.matmul if dense else adj.matmul
        Y = mm(A, X) if order == "A@X" else mm(X.T, A)
        return scalar_loss(Y.reshape(-1))

    g = jax.jit(jax.grad(lambda p: f(p, False)))(case.params)
    gd = jax.grad(lambda p: f(p, True))(case.params)
    compare({"g": g}, {"g": gd}, 2e-4)
    assert P.nnz > 0


def test_errors_under_jit_x64_off():
    M = np.diag([1.0, 2, 3, 0.0])
    S = lo.Sparse.from_scipy(sp.csr_matrix(M + np.eye(4, k=1)))
    for A in (lo.Sparse(jnp.asarray(S.values), S.pattern), jnp.asarray(M)):
        with pytest.raises(Exception) as info:
            jax.block_until_ready(jax.jit(jax.grad(lambda b: jnp.sum(adj.solve(A, b))))(
                jnp.ones(4)))
        assert "SingularMatrixError" in str(info.value).splitlines()[0]
        with pytest.raises(sv.SingularMatrixError):
            adj.solve(A, jnp.ones(4))


def test_host_products_x64_off():
    """A pattern above HOST_MIN_NNZ (its products and value cotangent on the host, issue 16
    finding 20) in float32: the gradient's dtype stays float32 and equals the gather path's."""
    from adjoints.jax import _spmm as _jax_spmm

    fam, b = lo.testing.poisson_family(90)
    K = fam(np.linspace(0.5, 1.5, fam.n_params))
    assert K.pattern.nnz >= _jax_spmm.HOST_MIN_NNZ

    def f(v, b):
        return jnp.sum(adj.solve(lo.Sparse(v, K.pattern), b) ** 2)

    args = (jnp.asarray(K.values), jnp.asarray(b))
    host = jax.jit(jax.grad(f, argnums=(0, 1)))(*args)
    old, _jax_spmm.HOST_MIN_NNZ = _jax_spmm.HOST_MIN_NNZ, 1 << 60
    try:
        gather = jax.jit(jax.grad(f, argnums=(0, 1)))(*args)
    finally:
        _jax_spmm.HOST_MIN_NNZ = old
    for h, g in zip(host, gather):
        assert h.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(h), np.asarray(g), rtol=1e-5,
                                   atol=1e-5 * float(np.abs(np.asarray(g)).max()))


def test_logdet_bridge_and_held_factorization_x64_off():
    """float32 with x64 off: log det and a solve of one matrix share one counted
    factorization, the log det's hessian is the trace formula (against dense jnp), and a
    Factorization returned from jit stays usable after the function runs again."""
    S = lo.Sparse.from_scipy(sp.csr_array(np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0],
                                                    [0.0, 1.0, 2.0]], np.float32)))
    P, w = S.pattern, jnp.asarray(S.values)
    both = lambda w: adj.logdet(lo.Sparse(w, P)) + adj.solve(lo.Sparse(w, P), jnp.ones(3)).sum()
    adj.reset_stats()
    g = jax.jit(jax.grad(both))(w)
    assert g.dtype == np.float32 and adj.stats().factorizations == 1, adj.stats()
    dense = lambda w: jnp.zeros((3, 3), w.dtype).at[P.rows, P.indices].set(w)
    H = jax.jit(jax.hessian(lambda w: adj.logdet(lo.Sparse(w, P))))(w)
    H_ref = jax.jit(jax.hessian(lambda w: jnp.linalg.slogdet(dense(w))[1]))(w)  # jit: eager 6 s
    np.testing.assert_allclose(np.asarray(H), np.asarray(H_ref), rtol=2e-5, atol=1e-6)
    make = jax.jit(lambda w: adj.factorize(lo.Sparse(w, P)))
    F = make(w)
    _ = make(2 * w)
    np.testing.assert_allclose(np.asarray(F.solve(jnp.ones(3))),
                               np.linalg.solve(np.asarray(dense(w)), np.ones(3)), rtol=1e-5)
    assert adj.stats().misses == 0


def test_lstsq_single_precision_x64_off():
    """adj.lstsq in float32 (sparse on the host, dense in XLA): x, its values' gradient and the
    dense gradient stay float32 and agree with float64 pinv / with each other."""
    pytest.importorskip("sparseqr")
    A = sp.csr_array(sp.random(30, 8, density=0.3, random_state=2) + sp.eye(30, 8))
    S = lo.Sparse.from_scipy(A)
    b = jnp.asarray(np.random.default_rng(1).standard_normal(30), jnp.float32)
    v = jnp.asarray(S.values, jnp.float32)
    x = adj.lstsq(lo.Sparse(v, S.pattern), b)
    g = jax.jit(jax.grad(lambda v: adj.lstsq(lo.Sparse(v, S.pattern), b).sum()))(v)
    gd = jax.jit(jax.grad(lambda a: adj.lstsq(a, b).sum()))(jnp.asarray(A.toarray(), jnp.float32))
    assert [x.dtype, g.dtype, gd.dtype] == [jnp.float32] * 3
    x64 = np.linalg.pinv(A.toarray()) @ np.asarray(b, np.float64)
    assert np.abs(np.asarray(x, np.float64) - x64).max() <= 1e-5 * np.abs(x64).max()
    gd = np.asarray(gd, np.float64)[S.pattern.rows, S.pattern.indices]
    assert np.abs(np.asarray(g, np.float64) - gd).max() <= 1e-4 * np.abs(gd).max()
