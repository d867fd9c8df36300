"""adj.lstsq: x = A⁺b (least squares; minimum norm for a wide A) under grad, jvp, jacfwd,
jacrev, hessian, vmap and jit, sparse (SuiteSparseQR on the host) and dense (jnp QR in XLA).

Every transform against dense jnp autodiff of A⁺b (jnp.linalg.pinv for the values; for the
derivatives the full-rank formula (AᴴA)⁻¹Aᴴb / Aᴴ(AAᴴ)⁻¹b, whose autodiff compiles far faster than
the SVD's and agrees with it to 1e-14 here; 1e-12 relative: a missing conjugate or a missing
residual term fails) and against central differences; the values'
cotangent an SDDMM on A's pattern (no m×n array in the jaxpr) equal to the numpy pullback's
projected rank-2 r λᴴ − (Aλ) xᴴ; ONE host QR per linearization point (jit(grad), jit(hessian),
jvp, vmap over b), one per member for vmap over A; rank deficiency and bad input named, eager
and under jit; the host store bounded (RSS flat over 300 jitted calls in a subprocess);
single precision with x64 off (in tests/jax/x64off_jax.py, which runs without x64).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
pytest.importorskip("sparseqr")
import jax.numpy as jnp  # noqa: E402

import adjoints as ad  # noqa: E402
import adjoints.jax as adj  # noqa: E402
import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
from adjoints.jax import _lstsq  # noqa: E402  (its counters)

ROOT = Path(__file__).resolve().parents[2]
# one case per branch: tall, wide (the minimum-norm solution's null-space terms), square
CASES = [((9, 4), True), ((4, 9), True), ((6, 6), False)]
CASE_IDS = ["complex-9x4", "complex-4x9", "real-6x6"]
ids = {"shape": lambda s: f"{s[0]}x{s[1]}"}


def _case(m, n, complex_, seed=0):
    """A sparse m×n with full rank, an explicit zero on its pattern, and b, w."""
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < 0.45
    mask[np.arange(min(m, n)), np.arange(min(m, n))] = True
    a = np.where(mask, rng.standard_normal((m, n)), 0.0)
    if complex_:
        a = a + 1j * np.where(mask, rng.standard_normal((m, n)), 0.0)
    a[np.arange(min(m, n)), np.arange(min(m, n))] += 3.0
    S = lo.Sparse.from_scipy(sp.csr_array(a))
    vals = np.asarray(S.values).copy()
    P = S.pattern
    z = int(np.flatnonzero(P.rows != P.indices)[-1])  # an off-diagonal entry made an explicit
    vals[z] = 0.0                                      # zero: its gradient is not 0
    a[P.rows[z], P.indices[z]] = 0.0
    c = 1j if complex_ else 0.0
    b = rng.standard_normal(m) + c * rng.standard_normal(m)
    w = rng.standard_normal(n) + c * rng.standard_normal(n)
    return a, P, jnp.asarray(vals), jnp.asarray(b), jnp.asarray(w), z


def _dense(v, P):
    return jnp.zeros(P.shape, v.dtype).at[P.rows, P.indices].set(v)


def _pinv_b(a, b):
    """A⁺b for a full-rank A by the formula autodiff differentiates cheaply (test sizes are
    tiny and well conditioned: the normal equations lose nothing here)."""
    ah = jnp.conj(a).T
    if a.shape[0] >= a.shape[1]:
        return jnp.linalg.solve(ah @ a, ah @ b)
    return ah @ jnp.linalg.solve(a @ ah, b)


def _f(x, w):
    return jnp.real(jnp.vdot(w, x))                  # Re(wᴴx): real for complex x too


def _rel(got, want):
    got, want = np.asarray(got), np.asarray(want)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-300))


# ----- values ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,complex_", CASES, ids=CASE_IDS)
def test_values_match_pinv_and_the_numpy_path(shape, complex_):
    m, n = shape
    a, P, v, b, w, z = _case(m, n, complex_)
    ref = np.linalg.pinv(a) @ np.asarray(b)
    xs = adj.lstsq(lo.Sparse(v, P), b)
    xd = adj.lstsq(jnp.asarray(a), b)
    for x in (xs, xd, jax.jit(lambda v, b: adj.lstsq(lo.Sparse(v, P), b))(v, b)):
        assert x.shape == (n,) and _rel(x, ref) <= 1e-12
    numpy_x = sv.solve(sv.LeastSquares(sp.csr_array(a), np.asarray(b)), sv.QR()).u
    assert np.abs(np.asarray(xs) - numpy_x).max() <= 1e-13 * np.abs(numpy_x).max()
    B = jnp.stack([b, 2 * b, b + 1], axis=1)         # several right-hand sides
    assert _rel(adj.lstsq(lo.Sparse(v, P), B), np.linalg.pinv(a) @ np.asarray(B)) <= 1e-12
    assert adj.lstsq(jnp.zeros((0, 3)), jnp.zeros(0)).shape == (3,)


# ----- reverse mode --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,complex_", CASES, ids=CASE_IDS)
def test_grad_against_dense_autodiff_central_differences_and_the_numpy_pullback(shape,
                                                                                complex_):
    m, n = shape
    a, P, v, b, w, z = _case(m, n, complex_, seed=1)

    def f_sparse(v, b):
        return _f(adj.lstsq(lo.Sparse(v, P), b), w)

    def f_dense(a, b):
        return _f(adj.lstsq(a, b), w)

    def f_ref(a, b):
        return _f(_pinv_b(a, b), w)

    _lstsq.clear()
    _lstsq.reset_stats()
    gv, gb = jax.jit(jax.grad(f_sparse, argnums=(0, 1)))(v, b)
    s = _lstsq.stats()
    assert (s.factorizations, s.solves, s.gram_solves) == (1, 1, 2 if m < n else 1)
    ra, rb = jax.jit(jax.grad(f_ref, argnums=(0, 1)))(jnp.asarray(a), b)
    assert _rel(gv, ra[P.rows, P.indices]) <= 1e-12 and _rel(gb, rb) <= 1e-12
    da, db = jax.jit(jax.grad(f_dense, argnums=(0, 1)))(jnp.asarray(a), b)
    assert _rel(da, ra) <= 1e-12 and _rel(db, rb) <= 1e-12
    # central differences on a few stored entries (the explicit zero among them), both parts
    h = 1e-6
    fv = jax.jit(f_sparse)
    for k in (0, P.nnz // 2, z):
        e = np.zeros(P.nnz, complex if complex_ else float)
        e[k] = h
        fd = (fv(v + e, b) - fv(v - e, b)) / (2 * h)
        if complex_:             # JAX's grad of a real f of z = x + iy: ∂f/∂x − i ∂f/∂y
            fd = fd - 1j * (fv(v + 1j * e, b) - fv(v - 1j * e, b)) / (2 * h)
        assert abs(complex(gv[k]) - complex(fd)) <= 1e-7 * float(jnp.abs(gv).max())
    # the numpy pullback: the rank-2 cotangent projected on the pattern (our convention is
    # the conjugate of JAX's for complex values)
    sol = sv.solve(sv.LeastSquares(sp.csr_array(a), np.asarray(b)), sv.QR())
    g = ad.solve_pullback(sol, np.asarray(w))
    proj = np.asarray(lo.sample(g.A, P.rows, P.indices))
    assert _rel(np.conj(gv) if complex_ else gv, proj) <= 1e-12


def test_the_values_cotangent_is_an_sddmm_on_the_pattern():
    rng = np.random.default_rng(3)
    A = sp.csr_array(sp.random(300, 60, density=0.05, random_state=1) + sp.eye(300, 60))
    S = lo.Sparse.from_scipy(A)
    b = jnp.asarray(rng.standard_normal(300))
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda v: adj.lstsq(lo.Sparse(v, S.pattern),
                                                              b).sum()))(jnp.asarray(S.values)))
    shapes = set(re.findall(r"\[(\d+),(\d+)\]", jaxpr))
    assert ("300", "60") not in shapes and ("60", "300") not in shapes   # nothing m×n
    assert "adjoints_jax_sddmm" in jaxpr


# ----- every transform ----------------------------------------------------------------------------
def _paths(shape, sparse, seed):
    m, n = shape
    a, P, v, b, w, _ = _case(m, n, False, seed=seed)
    if sparse:
        return a, P, v, b, w, (lambda p, b: adj.lstsq(lo.Sparse(p, P), b)), \
            (lambda p, b: _pinv_b(_dense(p, P), b))
    return a, P, jnp.asarray(a), b, w, adj.lstsq, _pinv_b


@pytest.mark.parametrize("shape,sparse", [((4, 9), True), ((9, 4), False)],
                         ids=["sparse-4x9", "dense-9x4"])
def test_jvp_and_hessian_against_dense_autodiff(shape, sparse):
    m, n = shape
    a, P, p, b, w, x_of, ref = _paths(shape, sparse, 2)
    rng = np.random.default_rng(4)
    dp, dbt = jnp.asarray(rng.standard_normal(p.shape)), jnp.asarray(rng.standard_normal(m))
    _lstsq.clear()
    _lstsq.reset_stats()
    x, dx = jax.jit(lambda *a: jax.jvp(x_of, a[:2], a[2:]))(p, b, dp, dbt)
    _, rdx = jax.jit(lambda *a: jax.jvp(ref, a[:2], a[2:]))(p, b, dp, dbt)
    assert _rel(dx, rdx) <= 1e-12
    if sparse:
        assert _lstsq.stats().factorizations == 1
    _lstsq.clear()
    _lstsq.reset_stats()
    H = jax.jit(jax.hessian(lambda p: _f(x_of(p, b), w)))(p)
    Hr = jax.jit(jax.hessian(lambda p: _f(ref(p, b), w)))(p)
    assert _rel(H, Hr) <= 1e-11
    if sparse:
        assert _lstsq.stats().factorizations == 1          # every solve of the Hessian reuses
    if sparse:                                  # the b-Hessian's path is the same for dense A
        Hb = jax.jit(jax.hessian(lambda b: jnp.sum(x_of(p, b) ** 2)))(b)   # 2 A⁺ᵀA⁺
        Ap = np.linalg.pinv(a)
        assert _rel(Hb, 2 * Ap.T @ Ap) <= 1e-11


@pytest.mark.parametrize("shape,jac", [((9, 4), "jacfwd"), ((4, 9), "jacrev")],
                         ids=["jacfwd-9x4", "jacrev-4x9"])
def test_jacfwd_and_jacrev_against_dense_autodiff(shape, jac):
    *_, p, b, w, x_of, ref = _paths(shape, True, 3)
    want = jax.jit(jax.jacrev(ref, argnums=(0, 1)))(p, b)
    got = jax.jit(getattr(jax, jac)(x_of, argnums=(0, 1)))(p, b)
    assert _rel(got[0], want[0]) <= 1e-11 and _rel(got[1], want[1]) <= 1e-11


@pytest.mark.parametrize("shape", [(4, 9)], ids=ids["shape"])
def test_vmap_over_b_over_A_and_of_grad(shape):
    m, n = shape
    a, P, v, b, w, z = _case(m, n, False, seed=5)
    rng = np.random.default_rng(6)
    Bs = jnp.asarray(rng.standard_normal((7, m)))
    _lstsq.clear()
    _lstsq.reset_stats()
    X = jax.jit(jax.vmap(lambda bb: adj.lstsq(lo.Sparse(v, P), bb)))(Bs)
    s = _lstsq.stats()
    assert _rel(X, Bs @ np.linalg.pinv(a).T) <= 1e-12
    assert s.factorizations == 1 and s.solves == 1              # one host call, 7 columns
    Vs = v[None, :] * jnp.asarray(rng.uniform(0.5, 1.5, (3, P.nnz)))
    _lstsq.clear()
    _lstsq.reset_stats()
    G = jax.jit(jax.vmap(jax.grad(lambda p: _f(adj.lstsq(lo.Sparse(p, P), b), w))))(Vs)
    assert _lstsq.stats().factorizations == 3                   # one per member
    R = jax.jit(jax.vmap(jax.grad(lambda p: _f(_pinv_b(_dense(p, P), b), w))))(Vs)
    assert _rel(G, R) <= 1e-12
    Gd = jax.jit(jax.vmap(jax.grad(lambda A: _f(adj.lstsq(A, b), w))))(
        jnp.stack([jnp.asarray(a)] * 2))
    assert _rel(Gd[1], jax.grad(lambda A: _f(_pinv_b(A, b), w))(jnp.asarray(a))) <= 1e-12


def test_family_gradient_and_linearsolve_1309():
    """θ ↦ A(θ) = Σ θᵢ Aᵢ (a stacked Tikhonov family): ∂(Σx)/∂θ against central differences;
    LinearSolve.jl #1309's case (tall A, f = sum(A \\ b)): ∂A against central differences,
    where the square rule −λxᴴ is ~90 % off."""
    rng = np.random.default_rng(7)
    m, n = 12, 5
    terms = [sp.csr_array(sp.random(m, n, density=0.5, random_state=s) + sp.eye(m, n))
             for s in range(3)]
    L = sp.diags([np.ones(n - 1), -np.ones(n - 1)], [0, 1], shape=(n - 1, n))
    Z = sp.csr_array((n - 1, n))
    fam = lo.AffineSparse.from_terms([sp.csr_array(sp.vstack([T, Z])) for T in terms],
                                     offset=sp.csr_array(sp.vstack([sp.csr_array((m, n)),
                                                                    0.3 * L])))
    b = jnp.asarray(np.concatenate([rng.standard_normal(m), np.zeros(n - 1)]))
    th = jnp.array([1.0, 0.5, -0.3])

    def f(t):
        return adj.lstsq(fam(t), b).sum()

    g = jax.jit(jax.grad(f))(th)
    h = 1e-6
    fj = jax.jit(f)
    fd = [(fj(th.at[i].add(h)) - fj(th.at[i].add(-h))) / (2 * h) for i in range(3)]
    assert _rel(g, fd) <= 1e-7
    A = jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 7.0]])
    bb = jnp.array([1.0, 2.0, 4.0])
    G = jax.jit(jax.grad(lambda A: adj.lstsq(A, bb).sum()))(A)
    fd = np.zeros((3, 2))
    for i in range(3):
        for j in range(2):
            E = np.zeros((3, 2))
            E[i, j] = h
            fd[i, j] = (np.linalg.pinv(A + E) @ bb).sum() - (np.linalg.pinv(A - E) @ bb).sum()
    fd /= 2 * h
    assert _rel(G, fd) <= 1e-8
    x = np.linalg.pinv(A) @ bb
    square_rule = -np.outer(np.linalg.pinv(A).T @ np.ones(2), x)
    assert _rel(square_rule, fd) >= 0.5


def test_ill_conditioned_gradient_matches_the_numpy_path():
    """cond(A) = 1e8: the JAX gradient (Gram solves with R, never AᴴA) equals the numpy
    pullback's to 1e-9 (both come from the same R)."""
    rng = np.random.default_rng(8)
    m, n = 40, 12
    u, _ = np.linalg.qr(rng.standard_normal((m, n)))
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a = (u * np.logspace(0, -8, n)) @ q.T
    S = lo.Sparse.from_scipy(sp.csr_array(a))
    b = rng.standard_normal(m)
    g = jax.jit(jax.grad(lambda v: adj.lstsq(lo.Sparse(v, S.pattern), jnp.asarray(b)).sum()))(
        jnp.asarray(S.values))
    sol = sv.solve(sv.LeastSquares(sp.csr_array(a), b), sv.QR())
    ref = lo.sample(ad.solve_pullback(sol, np.ones(n)).A, S.pattern.rows, S.pattern.indices)
    assert _rel(g, ref) <= 1e-9


# ----- refusals -------------------------------------------------------------------------------------
def test_rank_deficiency_and_bad_input_are_named_eager_and_under_jit():
    a = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])           # rank 1
    S = lo.Sparse.from_scipy(sp.csr_array(a))
    b = jnp.ones(3)
    f = lambda v: adj.lstsq(lo.Sparse(v, S.pattern), b).sum()   # noqa: E731
    with pytest.raises(sv.RankDeficientError, match="rank 1 < 2"):
        f(jnp.asarray(S.values))
    with pytest.raises(Exception) as e:
        jax.jit(jax.grad(f))(jnp.asarray(S.values)).block_until_ready()
    assert str(e.value).splitlines()[0].startswith(
        "FAILED_PRECONDITION: solvers.RankDeficientError: QR: A (3×2) has numerical rank 1")
    with pytest.raises(sv.RankDeficientError, match=r"adj.lstsq: A \(3×2\) has numerical rank"):
        adj.lstsq(jnp.asarray(a), b)
    with pytest.raises(Exception) as e:
        jax.jit(adj.lstsq)(jnp.asarray(a).T, jnp.ones(2)).block_until_ready()   # wide, rank 1
    assert "solvers.RankDeficientError: adj.lstsq: A (2×3)" in str(e.value).splitlines()[0]
    good = jnp.asarray(np.eye(3, 2) + 1.0)
    with pytest.raises(lo.ShapeError, match=r"m=3.*b.shape=\(2,\)"):
        adj.lstsq(good, jnp.ones(2))
    with pytest.raises(TypeError, match="alg=sv.QR"):
        adj.lstsq(good, b, sv.LSMR())
    with pytest.raises(TypeError, match="needs A's entries"):
        adj.lstsq(lo.MatrixFree((3, 2), np.float64, lambda X: good @ X,
                                lambda X: good.T @ X), b)
    bad = np.asarray(S.values).copy()
    bad[0] = np.nan
    with pytest.raises(sv.NonFiniteInputError):
        adj.lstsq(lo.Sparse(jnp.asarray(bad), S.pattern), b)


# ----- lifetime (a subprocess) --------------------------------------------------------------------
def _child(code: str, env_extra=None) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")]),
           **(env_extra or {})}
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_rss_stays_flat_over_200_jitted_calls_with_new_values():
    """Each call a new A (new values: a new factorization, ~0.6 MB); the store keeps at most
    CAPACITY of them, so 200 calls may grow the resident set by far less than the ~125 MB that
    keeping them all takes (measured with CAPACITY raised: 125 MB; as it is: 2-11 MB)."""
    out = _child("""
        import gc, json, jax, jax.numpy as jnp, numpy as np, scipy.sparse as sp, linops as lo
        jax.config.update("jax_enable_x64", True)
        import adjoints.jax as adj
        from adjoints.jax import _lstsq
        from linops._app.child import rss_now
        A = sp.csr_array(sp.random(800, 200, density=0.01, random_state=0) + sp.eye(800, 200))
        S = lo.Sparse.from_scipy(A); b = jnp.asarray(np.random.default_rng(0).standard_normal(800))
        g = jax.jit(jax.grad(lambda v: adj.lstsq(lo.Sparse(v, S.pattern), b).sum()))
        v = jnp.asarray(S.values)
        for i in range(10):
            g(v * (1 + i * 1e-3)).block_until_ready()
        gc.collect(); base = rss_now()
        for i in range(200):
            g(v * (1.1 + i * 1e-3)).block_until_ready()
        gc.collect()
        s = _lstsq.stats()
        print(json.dumps({"grow_mb": (rss_now() - base) / 2**20, "live": s.live,
                          "facts": s.factorizations, "cap": _lstsq.CAPACITY}))
    """)
    assert out["facts"] == 210 and out["live"] <= out["cap"]
    assert out["grow_mb"] < 50, out

