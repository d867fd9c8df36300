"""Every JAX transform through adjoints.jax.solve / matmul, judged by dense ``jnp.linalg.solve``
autodiff and by ``jax.test_util.check_grads(order=2, modes=("fwd", "rev"))``.

Kinds (see ``test_jax_cases``): sparse with every solvers algorithm (host factorization),
BCOO, dense LU/Cholesky, ``fam(θ)``, ``lo.Diagonal``, Woodbury (sparse + RankOne), matrix-free
(jax CG/GMRES). The FULL battery (all eleven transforms, all inside one ``jax.jit``) runs on the
host-factorization paths; every other kind runs the CORE battery. Single precision with x64 OFF
runs in ``x64off_jax.py`` (see test_jax_x64off.py); factorization counts in test_jax_lifetime.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from jax.experimental import sparse as jsp
from jax.test_util import check_grads

import linops as lo
import solvers as sv
import adjoints.jax as adj
from tests._cases.jax_cases import (CORE, FULL, battery, battery_inputs, compare, jit_both, make_b,
                            make_case, rhs, rtol_for, scalar_loss)

C128, F32, C64 = np.complex128, np.float32, np.complex64


def _check(case, which):
    got, want = jit_both(case, battery_inputs(case), which)
    compare(got, want, rtol_for(case.dtype, case.kind),
            f"{case.kind}/{np.dtype(case.dtype).name}")


@pytest.mark.parametrize("kind,dtype", [("sparse-LU", C128), ("family", np.float64)],
                         ids=["sparse-c128", "family-f64"])
def test_all_transforms_under_jit_match_dense_autodiff(kind, dtype):
    """value_and_grad, jvp, jacfwd, jacrev, hessian, vmap of grad/jvp/jacrev/hessian, vmap over
    3 matrices and linear_transpose, all in one jax.jit, vs jnp.linalg.solve autodiff."""
    _check(make_case(kind, dtype), FULL)


@pytest.mark.parametrize("kind,dtype", [
    ("sparse-Cholesky", np.float64), ("sparse-CG", C128), ("sparse-GMRES", C128),
    ("sparse-Auto", np.float64), ("dense", C128), ("dense-Cholesky", np.float64),
    ("diagonal", C128), ("woodbury", C128), ("matrixfree", np.float64), ("sparse-LU", F32)])
def test_core_transforms_every_kind(kind, dtype):
    """value_and_grad, jvp, hessian, vmap(grad) over right-hand sides, linear_transpose, under
    jit, for every solvers algorithm and every operator kind adj.solve accepts."""
    _check(make_case(kind, dtype), CORE)


def test_eager_transforms_match_jit():
    """The same transforms without jit (the host factorization then runs eagerly and is owned
    by its key array)."""
    case = make_case("sparse-LU", C128)
    args = battery_inputs(case)
    which = ("value_and_grad", "jvp", "hessian", "vmap_grad")
    adj.reset_stats()
    got = battery(case, case.solve, *args, which=which)
    s = adj.stats()
    assert (s.factorizations, s.misses) == (len(which), 0), s   # one per transform
    _, want = jit_both(case, args, which)
    compare(got, want, rtol_for(C128), "eager")


@pytest.mark.parametrize("kind,dtype", [("sparse-LU", C128), ("dense", np.float64),
                                        ("woodbury", np.float64), ("family", np.float64)])
def test_check_grads_second_order_fwd_and_rev(kind, dtype):
    case = make_case(kind, dtype)
    f = jax.jit(lambda p, q: scalar_loss(case.solve(p, make_b(q, case.dtype))))
    check_grads(f, (case.params, rhs(case)), order=2, modes=("fwd", "rev"), eps=1e-5)


def test_check_grads_with_complex_inputs():
    """Complex values and complex b as the differentiated inputs (JAX's complex convention),
    and agreement with dense autodiff tight enough to catch a missing conjugate."""
    case = make_case("sparse-LU", C128)
    P = case.build(case.params).pattern
    v = jnp.asarray(case.build(case.params).values)
    b = make_b(rhs(case), C128)
    f = jax.jit(lambda v, b: scalar_loss(adj.solve(lo.Sparse(v, P), b)))
    check_grads(f, (v, b), order=2, modes=("fwd", "rev"), eps=1e-5)
    fd = jax.jit(lambda v, b: scalar_loss(jnp.linalg.solve(
        jnp.zeros(P.shape, v.dtype).at[P.rows, P.indices].set(v), b)))
    g, gd = jax.grad(f, (0, 1))(v, b), jax.grad(fd, (0, 1))(v, b)
    for x, y in zip(g, gd):
        np.testing.assert_allclose(x, y, atol=1e-12 * np.abs(y).max())
        assert np.abs(np.asarray(x) - np.conj(y)).max() > 1e-6 * np.abs(y).max()  # not conj


def test_bcoo_input_eager():
    """A BCOO with concrete indices (built outside jit; under jit its indices are traced and
    carry no static pattern, which aslinop refuses with a clear error)."""
    case = make_case("bcoo", np.float64)
    q = rhs(case)
    f = lambda p, q: scalar_loss(case.solve(p, make_b(q, case.dtype)))
    check_grads(f, (case.params, q), order=1, modes=("fwd", "rev"), eps=1e-5)
    g = jax.grad(f)(case.params, q)
    gd = jax.grad(lambda p, q: scalar_loss(case.solve_dense(p, make_b(q, np.float64))))(
        case.params, q)
    compare({"g": g}, {"g": gd}, 1e-12)
    idx = np.array([[0, 0], [1, 1]])
    with pytest.raises(lo.BackendNotSupported, match="static pattern"):
        jax.jit(lambda d: adj.solve(jsp.BCOO((d, idx), shape=(2, 2)), jnp.ones(2)))(jnp.ones(2))


def test_every_other_solvers_algorithm_gradient():
    """BiCGStab, MINRES, CG + AMG, GMRES + ILU through the host path: gradients vs dense."""
    S = sp.csr_matrix(np.asarray(make_case("sparse-Auto", np.float64).dense(
        make_case("sparse-Auto", np.float64).params)))
    A = lo.Sparse.from_scipy(S)
    P, v = A.pattern, jnp.asarray(A.values)
    b = jnp.asarray(np.random.default_rng(1).standard_normal(S.shape[0]))
    fd = lambda v: jnp.sum(jnp.sin(jnp.linalg.solve(
        jnp.zeros(P.shape).at[P.rows, P.indices].set(v), b)))
    gd = jax.grad(fd)(v)
    for alg in (sv.BiCGStab(rtol=1e-13), sv.MINRES(rtol=1e-13), sv.CG(rtol=1e-13, precond=sv.AMG()),
                sv.GMRES(rtol=1e-13, precond=sv.ILU())):
        g = jax.jit(jax.grad(lambda v: jnp.sum(jnp.sin(adj.solve(lo.Sparse(v, P), b, alg,
                                                                  hermitian=True)))))(v)
        np.testing.assert_allclose(g, gd, atol=1e-10 * np.abs(gd).max(), err_msg=repr(alg))


def test_matrixfree_gmres_gradient():
    case = make_case("dense", np.float64)
    a = case.dense(case.params)
    b = make_b(rhs(case), np.float64)
    mf = lambda a: lo.MatrixFree(a.shape, a.dtype, lambda X: a @ X, lambda X: a.T @ X)
    f = lambda a: jnp.sum(jnp.sin(adj.solve(mf(a), b, sv.GMRES(rtol=1e-13, restart=8))))
    g = jax.jit(jax.grad(f))(a)
    gd = jax.grad(lambda a: jnp.sum(jnp.sin(jnp.linalg.solve(a, b))))(a)
    np.testing.assert_allclose(g, gd, atol=1e-10 * np.abs(gd).max())


def test_complex_matrix_with_real_b_gives_real_cotangent():
    b = jnp.asarray(np.random.default_rng(3).standard_normal(8))
    for kind in ("sparse-LU", "dense"):
        c = make_case(kind, C128)
        A, Ad = c.build(c.params), c.dense(c.params)
        g = jax.jit(jax.grad(lambda b: jnp.real(jnp.sum(adj.solve(A, b, c.alg) ** 2))))(b)
        gd = jax.grad(lambda b: jnp.real(jnp.sum(jnp.linalg.solve(Ad, b) ** 2)))(b)
        assert g.dtype == gd.dtype == jnp.float64, kind
        np.testing.assert_allclose(g, gd, atol=1e-12 * np.abs(gd).max())


def test_structured_operators():
    """Identity, c·A and B + LowRank (several columns) go through the same machinery."""
    case = make_case("sparse-LU", np.float64)
    A = case.build(case.params)
    D = np.asarray(case.dense(case.params))
    b = jnp.asarray(np.random.default_rng(4).standard_normal(8))
    U = jnp.asarray(np.random.default_rng(5).standard_normal((8, 2))) * 0.3
    np.testing.assert_allclose(adj.solve(lo.Identity(8), b), b)
    B3 = jnp.stack([b, 2 * b, b[::-1]], 1)                    # several right-hand sides
    np.testing.assert_allclose(adj.solve(A, B3), np.linalg.solve(D, B3), rtol=1e-12)
    np.testing.assert_allclose(adj.solve(2.5 * A, b), np.linalg.solve(2.5 * D, b), rtol=1e-12)
    W = A + lo.LowRank(U, U[::-1])
    np.testing.assert_allclose(adj.solve(W, b), np.linalg.solve(D + U @ U[::-1].T, b),
                               rtol=1e-12)
    adj.reset_stats()
    jax.jit(jax.grad(lambda b: jnp.sum(adj.solve(W, b) ** 2)))(b)
    assert adj.stats().factorizations == 1       # Woodbury: one factorization of B


# ----- matmul ------------------------------------------------------------------------------------
def _matmul_solve(case, order: str, dense: bool):
    """A linear map of b through adj.matmul (or jnp.matmul on the dense matrix), shaped like b
    so that the battery's transforms apply unchanged."""
    def f(p, b):
        A = case.dense(p) if dense else case.build(p)
        mm = jnp.matmul if dense else adj.matmul
        B = jnp.stack([b, 2 * b, b[::-1]], 1)       # (n, 3): a matrix operand, linear in b
        if order == "A@X":
            return mm(A, B)[:, 1] + mm(A, B)[:, 2]
        if order == "X@A":
            return mm(B.T, A)[2] + mm(B.T, A)[0]
        if order == "A@x":
            return mm(A, b)
        return mm(b, A)
    return f


@pytest.mark.parametrize("order,dtype", [("A@X", C128), ("X@A", C128), ("A@x", np.float64),
                                         ("x@A", F32)])
def test_matmul_every_transform_both_orders(order, dtype):
    case = make_case("sparse-LU", dtype)
    got, want = jit_both(case, battery_inputs(case), FULL, _matmul_solve(case, order, False),
                         _matmul_solve(case, order, True))
    compare(got, want, rtol_for(dtype), f"matmul {order}")


@pytest.mark.parametrize("order", ["X@A"])
def test_matmul_check_grads(order):
    case = make_case("sparse-LU", C128)
    f = jax.jit(lambda p, q: scalar_loss(_matmul_solve(case, order, False)(p, make_b(q, C128))))
    check_grads(f, (case.params, rhs(case)), order=2, modes=("fwd", "rev"), eps=1e-5)


def test_values_cotangent_is_never_an_n_by_n_array():
    """Lazy means lazy: no intermediate of the gradient (solve, A @ X, X @ A) has n² entries."""
    n = 4000
    S = sp.random(n, n, 3e-3, random_state=0, format="csr") + sp.eye(n, format="csr") * 10
    A = lo.Sparse.from_scipy(S)
    P, v = A.pattern, jnp.asarray(A.values)
    b, X = jnp.ones(n), jnp.ones((n, 3))
    for f in (lambda v: jnp.sum(adj.solve(lo.Sparse(v, P), b) ** 2),
              lambda v: jnp.sum(adj.matmul(lo.Sparse(v, P), X) ** 2),
              lambda v: jnp.sum(adj.matmul(X.T, lo.Sparse(v, P)) ** 2)):
        jaxpr = jax.make_jaxpr(jax.grad(f))(v)
        sizes = [int(np.prod(var.aval.shape)) for eqn in jaxpr.jaxpr.eqns
                 for var in eqn.outvars if hasattr(var.aval, "shape")]
        assert max(sizes) < n * n // 100, max(sizes)
