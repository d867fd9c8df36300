"""Failures through adjoints.jax: the numpy path's named exceptions when eager, a runtime error
whose FIRST line names the problem under jit, never a silent Inf/NaN; bad input named; pytrees
in either import order; the GPU branch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
import adjoints.jax as adj

N = 6
SINGULAR = np.diag([1.0, 2, 3, 4, 5, 0.0]) + np.diag(np.ones(N - 1), 1)   # last row zero
SPD_SINGULAR = np.diag([2.0, 2, 2, 2, 2, 0.0]) + 0.5 * (np.eye(N, k=1) + np.eye(N, k=-1))
SPD_SINGULAR[-1, -2] = SPD_SINGULAR[-2, -1] = 0.0
INDEFINITE = np.diag([2.0, 2, -3, 2, 2, 2])


def _jax_operator(kind, M):
    if kind == "sparse":
        return lo.Sparse(jnp.asarray(lo.Sparse.from_scipy(sp.csr_matrix(M)).values),
                         lo.Pattern.from_scipy(sp.csr_matrix(M)))
    if kind == "dense":
        return jnp.asarray(M)
    if kind == "diagonal":
        return lo.Diagonal(jnp.asarray(np.diagonal(M)))
    raise ValueError(kind)


def _numpy_operator(kind, M):
    return {"sparse": sp.csr_matrix(M), "dense": M, "diagonal": lo.Diagonal(np.diagonal(M))}[kind]


def _numpy_error(kind, M, b, alg):
    with pytest.raises(sv.SolveError) as info:
        sv.solve(sv.LinearProblem(_numpy_operator(kind, M), np.asarray(b)), alg)
    return type(info.value)


# (sparse Cholesky on an INDEFINITE matrix is not here: the numpy path's CHOLMOD factorizes it
# as LDLᵀ without an error, and the host path shares that behaviour; reported to solvers.)
CASES = [("sparse", SINGULAR, sv.LU()), ("sparse", SPD_SINGULAR, sv.Cholesky()),
         ("dense", SINGULAR, sv.LU()), ("dense", INDEFINITE, sv.Cholesky()),
         ("diagonal", np.diag(np.diagonal(SINGULAR)), None)]
IDS = ["sparse-LU", "sparse-Chol-singular", "dense-LU", "dense-Chol-indefinite", "diagonal"]


@pytest.mark.parametrize("kind,M,alg", CASES, ids=IDS)
def test_singular_eager_raises_the_numpy_paths_named_error(kind, M, alg):
    b = np.ones(N)
    expected = _numpy_error(kind, M, b, alg)
    A = _jax_operator(kind, M)
    before = adj.stats().live
    with pytest.raises(expected, match="singular|positive definite"):
        adj.solve(A, jnp.asarray(b), alg)
    # also inside eager jax.grad / jax.vmap: the same named error, not a JAX one
    with pytest.raises(expected):
        jax.grad(lambda b: jnp.sum(adj.solve(A, b, alg)))(jnp.asarray(b))
    assert adj.stats().live == before


@pytest.mark.parametrize("kind,M,alg", [CASES[0], CASES[2], CASES[4]],
                         ids=["sparse", "dense", "diagonal"])
def test_singular_under_jit_first_line_names_the_problem(kind, M, alg):
    A = _jax_operator(kind, M)
    b = jnp.ones(N)
    before = adj.stats().live
    fns = {"forward": jax.jit(lambda b: adj.solve(A, b, alg)),
           "grad": jax.jit(jax.grad(lambda b: jnp.sum(adj.solve(A, b, alg) ** 2))),
           "vmap": jax.jit(jax.vmap(lambda b: adj.solve(A, b, alg)))}
    for name, f in fns.items():
        arg = jnp.ones((3, N)) if name == "vmap" else b
        with pytest.raises(Exception) as info:
            jax.block_until_ready(f(arg))
        first = str(info.value).splitlines()[0]
        assert "SingularMatrixError" in first and "singular" in first, (name, first)
    assert adj.stats().live <= before


@pytest.mark.parametrize("kind", ["sparse", "dense", "diagonal"])
@pytest.mark.parametrize("where", ["A", "b"])
def test_nonfinite_input_eager_and_jit(kind, where):
    M = np.eye(N) * 3 + np.eye(N, k=1)
    if kind == "diagonal":
        M = np.diag(np.diagonal(M))
    b = np.ones(N)
    if where == "A":
        M = M.copy()
        M[2, 2] = np.nan
    else:
        b = b.copy()
        b[4] = np.inf
    expected = _numpy_error(kind, M, b, None)
    assert issubclass(expected, sv.NonFiniteInputError)
    A = _jax_operator(kind, M)
    with pytest.raises(expected, match="nan|inf"):
        adj.solve(A, jnp.asarray(b))
    with pytest.raises(Exception) as info:
        jax.block_until_ready(jax.jit(lambda b: adj.solve(A, b))(jnp.asarray(b)))
    first = str(info.value).splitlines()[0]
    assert "NonFiniteInputError" in first and ("nan" in first or "inf" in first), first


def test_nonfinite_cotangent_is_reported_not_propagated():
    A = _jax_operator("dense", np.eye(N) * 2)
    S = _jax_operator("sparse", np.eye(N) * 2)
    for op in (A, S):
        f = jax.jit(lambda b: jnp.sum(jnp.log(adj.solve(op, b) - 1.0)))   # log(0) → -inf, ct inf
        with pytest.raises(Exception) as info:
            jax.block_until_ready(jax.grad(f)(jnp.full(N, 2.0)))
        assert "NonFiniteInputError" in str(info.value).splitlines()[0]


def test_krylov_nonconvergence_is_an_error():
    a = jnp.asarray(np.diag(np.logspace(0, 4, 20)))
    mf = lo.MatrixFree((20, 20), np.float64, lambda X: a @ X, lambda X: a.T @ X)
    with pytest.raises(sv.ConvergenceError, match="did not converge"):
        adj.solve(mf, jnp.ones(20), sv.CG(rtol=1e-12, maxiter=3))


def test_bad_input_is_named():
    A = _jax_operator("sparse", np.eye(N) * 2)
    with pytest.raises(lo.ShapeError, match=r"A.shape=\(6, 6\), b.shape=\(5,\)"):
        adj.solve(A, jnp.ones(5))
    with pytest.raises(lo.ShapeError, match=r"square A, got A.shape=\(6, 4\)"):
        adj.solve(jnp.ones((6, 4)), jnp.ones(6))
    with pytest.raises(lo.ShapeError, match=r"b.shape=\(6, 2, 1\)"):
        adj.solve(A, jnp.ones((6, 2, 1)))
    with pytest.raises(lo.ShapeError, match=r"X.shape=\(5, 2\)"):
        adj.matmul(A, jnp.ones((5, 2)))
    with pytest.raises(lo.ShapeError, match=r"X.shape=\(2, 5\)"):
        adj.matmul(jnp.ones((2, 5)), A)
    with pytest.raises(TypeError, match="one dense operand"):
        adj.matmul(A, A)
    with pytest.raises(ValueError, match="algorithm 'qr' has no JAX path; names there: auto"):
        adj.solve(A, jnp.ones(N), "qr")
    mf = lo.MatrixFree((N, N), np.float64, lambda X: 2 * X, lambda X: 2 * X)
    with pytest.raises(sv.BackendNotSupported, match="Krylov method"):
        adj.solve(mf, jnp.ones(N), sv.LU())
    with pytest.raises(sv.BackendNotSupported, match="Jacobi"):
        adj.solve(mf, jnp.ones(N), sv.CG(precond=sv.AMG()))


@pytest.mark.parametrize("first", ["linops", "jax"])
def test_operators_are_pytrees_in_either_import_order(first):
    """``import linops`` before ``import jax`` used to make jax.jit over an lo.Sparse fail
    unless adjoints.jax happened to be imported; checked in a fresh interpreter."""
    second = "jax" if first == "linops" else "linops"
    code = textwrap.dedent(f"""
        import {first}, {second}
        import sys, numpy as np, scipy.sparse as sp
        import jax, jax.numpy as jnp, linops as lo
        assert "adjoints.jax" not in sys.modules
        S = lo.Sparse.from_scipy(sp.eye(3, format="csr"))
        S = lo.Sparse(jnp.asarray(S.values), S.pattern)
        out = jax.jit(lambda A, x: A @ x)(S, jnp.ones(3))
        leaves = jax.tree_util.tree_leaves(lo.Diagonal(jnp.ones(3)) + S)
        print("OK", float(out.sum()), len(leaves))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert p.returncode == 0 and "OK 3.0 2" in p.stdout, p.stderr[-2000:]


# ----- the GPU branch ----------------------------------------------------------------------------
def _gpu_devices():
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def test_gpu_branch_runs_on_cpu_too():
    """The device-resident branch (cuSOLVER spsolve on a GPU; jax's scipy fallback of spsolve
    on the CPU) is a custom_linear_solve, so every transform works; checked here on the CPU."""
    from adjoints.jax._solves import gpu_sparse_factor
    from jax.test_util import check_grads

    S = sp.random(N, N, 0.4, random_state=3, format="csr") + sp.eye(N, format="csr") * 4
    A = lo.Sparse.from_scipy(S)
    P, v = A.pattern, jnp.asarray(A.values)
    f = lambda v, b: jnp.sum(jnp.sin(gpu_sparse_factor(v, P, v.dtype)(b)))
    b = jnp.asarray(np.random.default_rng(0).standard_normal(N))
    check_grads(f, (v, b), order=1, modes=("fwd", "rev"))
    u = gpu_sparse_factor(v, P, v.dtype)(jnp.stack([b, 2 * b], 1))
    np.testing.assert_allclose(u[:, 1], np.linalg.solve(S.toarray(), 2 * np.asarray(b)),
                               rtol=1e-10)
    g = jax.vmap(jax.grad(f, 1), (None, 0))(v, jnp.stack([b, b]))
    np.testing.assert_allclose(g[0], jax.grad(f, 1)(v, b), rtol=1e-12)


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_devices(), reason="no GPU visible to jax")
def test_gpu_sparse_solve_on_device():  # pragma: no cover - needs a GPU
    gpu = _gpu_devices()[0]
    S = sp.random(50, 50, 0.1, random_state=1, format="csr") + sp.eye(50, format="csr") * 5
    A = lo.Sparse.from_scipy(S)
    P = A.pattern
    v = jax.device_put(jnp.asarray(A.values), gpu)
    b = jax.device_put(jnp.ones(50), gpu)
    f = lambda v, b: jnp.sum(jnp.sin(adj.solve(lo.Sparse(v, P), b)))
    g = jax.jit(jax.grad(f, (0, 1)))(v, b)
    fd = lambda v, b: jnp.sum(jnp.sin(jnp.linalg.solve(
        jnp.zeros(P.shape).at[P.rows, P.indices].set(v), b)))
    gd = jax.grad(fd, (0, 1))(v, b)
    for x, y in zip(g, gd):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-8)
