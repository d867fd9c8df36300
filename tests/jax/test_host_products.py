"""adjoints.jax's sparse products on the host (issue 16, finding 20).

On the CPU, ``spmm_p`` (A·X on a static pattern, the tangent of every sparse solve) and
``sddmm_p`` (its value cotangent, −λᵣu_c on the pattern) run in a host callback from
``HOST_MIN_NNZ`` stored entries: lowered as gathers, XLA embedded the pattern's index arrays in
the compiled module as constants and copied them while compiling (the first jitted gradient at
n = 640 800 peaked at 1.63× the numpy gradient's memory; on the host path 1.32×, by
``python -m linops bench jax``). Here: the host path gives the numbers the gather path gives
under every transform (the threshold forced to 0 on the suite's small cases), and a large
pattern's compiled module carries no index constant (a payload-size check, not a comment).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import linops as lo
import adjoints.jax as adj
from adjoints.jax import _native as _jax_native
from adjoints.jax import _spmm as _jax_spmm
from tests._cases.jax_cases import (CORE, FULL, battery_inputs, compare, jit_both, make_b, make_case,
                            rhs, rtol_for, scalar_loss)

C128, F32, C64 = np.complex128, np.float32, np.complex64


@pytest.fixture
def host_everywhere(monkeypatch):
    """HOST_MIN_NNZ = 0, and afterwards proof that the host lowering was taken (the native
    SDDMM off: the callback is what a build without the extension, and float32, runs)."""
    monkeypatch.setattr(_jax_spmm, "HOST_MIN_NNZ", 0)
    monkeypatch.setattr(_jax_native, "ENABLED", False)
    lowered = []
    real = _jax_spmm._host_callback
    monkeypatch.setattr(_jax_spmm, "_host_callback",
                        lambda ctx, fn, args: lowered.append(fn.__name__) or real(ctx, fn, args))
    yield
    assert {"product", "sample"} <= set(lowered), lowered


@pytest.mark.parametrize("kind,dtype,which", [
    ("sparse-LU", C128, FULL), ("family", np.float64, FULL), ("sparse-Cholesky", np.float64, CORE),
    ("sparse-LU", F32, CORE), ("sparse-Cholesky", C64, CORE)],
    ids=["lu-c128-full", "family-f64-full", "cholesky-f64", "lu-f32", "cholesky-c64"])
def test_host_products_under_every_transform_match_dense_autodiff(kind, dtype, which,
                                                                  host_everywhere):
    case = make_case(kind, dtype)
    got, want = jit_both(case, battery_inputs(case), which)
    compare(got, want, rtol_for(dtype, kind), f"{kind}/{np.dtype(dtype).name} on the host")


@pytest.mark.parametrize("kind,dtype", [("sparse-LU", C128), ("family", np.float64)])
def test_host_products_check_grads_second_order(kind, dtype, host_everywhere):
    case = make_case(kind, dtype)
    f = jax.jit(lambda p, q: scalar_loss(case.solve(p, make_b(q, case.dtype))))
    check_grads(f, (case.params, rhs(case)), order=2, modes=("fwd", "rev"), eps=1e-5)


@pytest.mark.parametrize("dtype", [np.float64, C128])
@pytest.mark.parametrize("trans", ["N", "T"])
def test_spmm_and_sddmm_host_equal_gather(dtype, trans, monkeypatch):
    """The primitives themselves, vectors and blocks, both directions, jitted: host = gather
    to rounding, and both = scipy."""
    import scipy.sparse as sp

    rng = np.random.default_rng(7)
    A = sp.random(60, 45, density=0.2, random_state=3, format="csr")
    A = (A + 1j * A if np.dtype(dtype).kind == "c" else A).astype(dtype)
    S = lo.Sparse.from_scipy(A)
    m, n = A.shape if trans == "N" else A.shape[::-1]
    v = jnp.asarray(S.values)
    for shape in ((n,), (n, 3)):
        X = jnp.asarray(rng.standard_normal(shape).astype(dtype))
        Y = jnp.asarray(rng.standard_normal((m,) + shape[1:]).astype(dtype))

        def both(v, X, Y):
            f = lambda v, X: jnp.sum(Y * _jax_spmm.spmm(v, X, S.pattern, trans))
            return f(v, X), jax.grad(f, argnums=(0, 1), holomorphic=False)(v.real, X.real) \
                if np.dtype(dtype).kind != "c" else jax.vjp(f, v, X)[1](jnp.ones((), dtype))

        monkeypatch.setattr(_jax_spmm, "HOST_MIN_NNZ", 1 << 60)
        gather = jax.jit(both)(v, X, Y)
        monkeypatch.setattr(_jax_spmm, "HOST_MIN_NNZ", 0)
        host = jax.jit(both)(v, X, Y)
        for g, h in zip(jax.tree.leaves(gather), jax.tree.leaves(host)):
            np.testing.assert_allclose(np.asarray(h), np.asarray(g), rtol=1e-13, atol=1e-13)
        op = A if trans == "N" else A.T
        np.testing.assert_allclose(np.asarray(host[0]),
                                   np.sum(np.asarray(Y) * (op @ np.asarray(X))), rtol=1e-13)


def test_vmap_keeps_the_gather_and_the_numbers(monkeypatch):
    """Batched products (vmap over right-hand sides or matrices) stay gathers: same numbers."""
    monkeypatch.setattr(_jax_spmm, "HOST_MIN_NNZ", 0)
    case = make_case("sparse-LU", np.float64)
    got, want = jit_both(case, battery_inputs(case), ("vmap_grad", "vmap_jvp"))
    compare(got, want, rtol_for(np.float64), "vmap on the host path")


def test_a_large_pattern_compiles_without_index_constants():
    """Lowered jit(value_and_grad) of aᵀA⁻¹b at nnz ≥ HOST_MIN_NNZ: no constant of ≥ 1 000
    elements in the StableHLO (each index constant of the gather path would be ≥ nnz/2), and
    the gradient equals the gather path's."""
    fam, b = lo.testing.poisson_family(90)
    K = fam(np.linspace(0.5, 1.5, fam.n_params))
    assert K.pattern.nnz >= _jax_spmm.HOST_MIN_NNZ
    P = K.pattern

    def f(v, b):
        return jnp.sum(adj.solve(lo.Sparse(v, P), b) ** 2)

    args = (jnp.asarray(K.values), jnp.asarray(b))
    vg = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))
    text = vg.lower(*args).as_text()
    sizes = [int(s) for s in re.findall(r"stablehlo\.constant dense<[^>]*> : tensor<(\d+)x",
                                        text)]
    assert max(sizes, default=0) < 1000, sorted(sizes)[-5:]
    assert len(text) < 200_000, len(text)          # the gather path's module: > 2 MB of hex
    host = vg(*args)
    old = _jax_spmm.HOST_MIN_NNZ
    try:
        _jax_spmm.HOST_MIN_NNZ = 1 << 60
        gather = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(*args)
    finally:
        _jax_spmm.HOST_MIN_NNZ = old
    for h, g in zip(jax.tree.leaves(host), jax.tree.leaves(gather)):
        np.testing.assert_allclose(np.asarray(h), np.asarray(g), rtol=1e-12,
                                   atol=1e-12 * float(np.abs(np.asarray(g)).max()))


def _loops(P, b):
    def step(u, v):
        return adj.solve(lo.Sparse(v, P), u + b)

    def scan(v):
        u, _ = jax.lax.scan(lambda u, _: (step(u, v), None), jnp.zeros_like(b), None, length=4)
        return jnp.sum(u ** 2)

    def fori(v):
        return jnp.sum(jax.lax.fori_loop(0, 4, lambda i, u: step(u, v), jnp.zeros_like(b)) ** 2)

    def cond(v):
        u = jax.lax.cond(jnp.sum(v) > 0, lambda v: step(b, v), lambda v: b, v)
        return jnp.sum(u ** 2)

    return {"scan": scan, "fori_loop": fori, "cond": cond}


@pytest.mark.parametrize("form", ["scan", "fori_loop", "cond"])
def test_control_flow_on_the_host_path(form, monkeypatch):
    """jit(grad) of a loop (scan, fori_loop) or a branch (cond) over adj.solve: the host
    products give the gather path's gradient, with one factorization per call."""
    import scipy.sparse as sp

    n = 40
    A = (sp.random(n, n, density=0.15, random_state=2) + 6 * sp.eye(n)).tocsr()
    S = lo.Sparse.from_scipy(A)
    v, b = jnp.asarray(S.values), jnp.asarray(np.linspace(-1.0, 1.0, n))
    f = _loops(S.pattern, b)[form]
    monkeypatch.setattr(_jax_spmm, "HOST_MIN_NNZ", 1 << 60)
    gather = jax.jit(jax.grad(f))(v)
    monkeypatch.setattr(_jax_spmm, "HOST_MIN_NNZ", 0)
    monkeypatch.setattr(_jax_native, "ENABLED", False)
    lowered = []
    real = _jax_spmm._host_callback
    monkeypatch.setattr(_jax_spmm, "_host_callback",
                        lambda ctx, fn, args: lowered.append(fn.__name__) or real(ctx, fn, args))
    adj.reset_stats()
    host = jax.jit(jax.grad(f))(v)
    assert "sample" in lowered and adj.stats().factorizations == 1
    np.testing.assert_allclose(np.asarray(host), np.asarray(gather), rtol=1e-12,
                               atol=1e-12 * float(np.abs(np.asarray(gather)).max()))
    if _jax_native.sddmm_available():   # the same loop with the native SDDMM in the body
        monkeypatch.setattr(_jax_native, "ENABLED", True)
        g = jax.jit(jax.grad(f))
        assert "linops_sddmm" in g.lower(v).as_text()
        np.testing.assert_allclose(np.asarray(g(v)), np.asarray(gather), rtol=1e-12,
                                   atol=1e-12 * float(np.abs(np.asarray(gather)).max()))
