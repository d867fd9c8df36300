"""Host factorizations under JAX: exactly one per linearization point, kept no longer than the
policy of adjoints.jax._host says (straight-line computations: freed by their last solve;
loops: at most one generation per compiled site), and correctness independent of how long
they are kept. Memory itself (RSS) is measured in test_jax_memory.py."""

from __future__ import annotations

import gc
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
import adjoints.jax as adj
from adjoints.jax import _host as _jax_host
from adjoints.jax._live import REGISTRY

rng = np.random.default_rng(2)
N = 10


def _matrix(n=N, seed=4):
    S = sp.random(n, n, 0.3, random_state=seed, format="csr") + sp.eye(n, format="csr") * 5
    A = lo.Sparse.from_scipy(S)
    return A.pattern, jnp.asarray(A.values), S.toarray()


P, V, DENSE = _matrix()
B = jnp.asarray(rng.standard_normal(N))
BS = jnp.asarray(rng.standard_normal((4, N)))


def u_of(v, b):
    return adj.solve(lo.Sparse(v, P), b)


def F(v, b):
    u = u_of(v, b)
    return jnp.sum(jnp.sin(u)) + 0.5 * jnp.sum(u ** 2)


TRANSFORMS = {
    "grad": lambda: jax.grad(F, (0, 1))(V, B),
    "value_and_grad": lambda: jax.value_and_grad(F, (0, 1))(V, B),
    "jvp": lambda: jax.jvp(F, (V, B), (V, B)),
    "jacfwd": lambda: jax.jacfwd(u_of, (0, 1))(V, B),
    "jacrev": lambda: jax.jacrev(u_of, (0, 1))(V, B),
    "hessian": lambda: jax.hessian(F, (0, 1))(V, B),
    "vmap_grad": lambda: jax.vmap(jax.grad(F, (0, 1)), (None, 0))(V, BS),
    "vmap_jvp": lambda: jax.vmap(lambda t: jax.jvp(F, (V, B), (t, B)))(V[None] * BS[:, :1]),
    "vmap_jacfwd": lambda: jax.vmap(jax.jacfwd(u_of, 0), (None, 0))(V, BS),
    "vmap_jacrev": lambda: jax.vmap(jax.jacrev(u_of, 0), (None, 0))(V, BS),
    "vmap_hessian": lambda: jax.vmap(jax.hessian(F, 0), (None, 0))(V, BS[:2]),
}


def _stats_of(fn):
    """Counters of one run of ``fn``; ``live`` is what the run left alive (other tests' compiled
    loops may still hold their one kept generation: not this run's)."""
    gc.collect()
    adj.reset_stats()
    before = adj.stats().live
    jax.block_until_ready(fn())
    gc.collect()
    s = adj.stats()
    s.live -= before
    s.peak_live -= before
    return s


def _live_now():
    gc.collect()
    return adj.stats().live


EAGER_TOO = ("grad", "value_and_grad", "jvp", "jacfwd", "jacrev", "vmap_grad", "vmap_jacrev")


@pytest.mark.parametrize("name,mode", [(n, "jit") for n in TRANSFORMS]
                         + [(n, "eager") for n in EAGER_TOO])
def test_one_factorization_per_linearization_point(name, mode):
    """(eager hessians: see test_jax_transforms.test_eager_transforms_match_jit)"""
    fn = TRANSFORMS[name]
    if mode == "jit":
        g = jax.jit(fn)
        fn = g
    s = _stats_of(fn)
    assert (s.factorizations, s.misses, s.live) == (1, 0, 0), s
    if mode == "jit":                        # the compiled computation, run again
        s = _stats_of(fn)
        assert (s.factorizations, s.misses, s.live) == (1, 0, 0), s


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_vmap_over_k_matrices_is_k_factorizations(mode):
    k = 80
    Vs = V[None] * jnp.linspace(1.0, 2.0, k)[:, None]
    fn = lambda: jax.vmap(jax.value_and_grad(F, (0, 1)), (0, None))(Vs, B)
    fn = jax.jit(fn) if mode == "jit" else fn
    s = _stats_of(fn)
    assert (s.factorizations, s.misses, s.live) == (k, 0, 0), s
    val, (gv, gb) = fn()
    D = np.asarray(DENSE)[None] * np.linspace(1.0, 2.0, k)[:, None, None]
    u = np.linalg.solve(D, np.broadcast_to(np.asarray(B), (k, N))[..., None])[..., 0]
    ref = np.sin(u).sum(1) + 0.5 * (u ** 2).sum(1)
    np.testing.assert_allclose(val, ref, rtol=1e-12)


def test_map_over_matrices_counts_per_iteration():
    """A factorization made inside a loop body is consumed there: k iterations, k factorizations,
    no misses; what stays is the site's one idle factorization (for a next step with the same
    values), freed when the site factorizes again."""
    k = 5
    Vs = V[None] * jnp.linspace(1.0, 2.0, k)[:, None]
    g = jax.jit(jax.grad(lambda Vs: jnp.sum(jax.lax.map(lambda v: F(v, B), Vs))))
    s = _stats_of(lambda: g(Vs))
    assert (s.factorizations, s.misses) == (k, 0) and s.live <= 1, s
    s = _stats_of(lambda: g(Vs * 1.5))
    assert (s.factorizations, s.misses) == (k, 0) and s.live <= 0, s   # the old one went


def test_linear_transpose_owns_its_factorization():
    before = _live_now()
    t = jax.linear_transpose(lambda b: u_of(V, b), B)
    gc.collect()
    assert adj.stats().live == before + 1   # the transposed function holds the key
    adj.reset_stats()
    out = t(B)[0]
    np.testing.assert_allclose(out, np.linalg.solve(DENSE.T, np.asarray(B)), rtol=1e-12)
    assert adj.stats().factorizations == 0
    del t
    assert _live_now() == before


def test_vjp_residuals_own_the_factorization_and_pullbacks_reuse_it():
    before = _live_now()
    adj.reset_stats()
    value, pullback = jax.vjp(F, V, B)
    assert adj.stats().live == before + 1
    g1, g2 = pullback(1.0), pullback(2.0)
    np.testing.assert_allclose(g2[0], 2 * g1[0], rtol=1e-12)
    s = adj.stats()
    assert (s.factorizations, s.misses, s.transpose_solves) == (1, 0, 2), s
    del pullback
    assert _live_now() == before


def test_correctness_never_depends_on_how_long_factorizations_are_kept(monkeypatch):
    """Drop every factorization between the forward and the backward pass (what an evicting
    capacity would do): the pullback refactorizes deterministically, counts a miss, and the
    gradient is unchanged. Same under jit when nothing at all is kept."""
    ref = jax.grad(F, (0, 1))(V, B)
    value, pullback = jax.vjp(F, V, B)
    REGISTRY.release(list(REGISTRY.entries))
    adj.reset_stats()
    got = pullback(1.0)
    for x, y in zip(got, ref):
        np.testing.assert_allclose(x, y, rtol=1e-13, atol=0)
    assert adj.stats().misses == 1
    # Under jit, the other extreme: every consumer frees the factorization it used at once
    # (as if each were the last). The transpose solve of the gradient then misses and
    # refactorizes, and the gradient and Hessian are still exact.
    monkeypatch.setattr(_jax_host.SiteState, "exact", property(lambda self: True))
    monkeypatch.setattr(_jax_host.SiteState, "per_run", property(lambda self: 1.0))
    s = _stats_of(lambda: jax.jit(jax.value_and_grad(F, (0, 1)))(V, B))
    assert s.misses == 1, s                     # the transpose solve
    for x, y in zip(jax.jit(jax.grad(F, (0, 1)))(V, B), ref):
        np.testing.assert_allclose(x, y, rtol=1e-13)
    np.testing.assert_allclose(jax.jit(jax.hessian(F))(V, B), jax.hessian(F)(V, B),
                               rtol=1e-11, atol=1e-13)


def test_checkpointed_and_conditional_consumers_stay_bounded():
    """Under jax.checkpoint the backward pass refactorizes and the pairing of consumers to
    factorizations is ambiguous; such sites keep at most GENERATIONS_KEPT generations."""
    g = jax.jit(jax.grad(jax.checkpoint(F), (0, 1)))
    h = jax.jit(jax.grad(lambda v, p: jax.lax.cond(p > 0, lambda v: F(v, B), lambda v: 0.0, v)))
    before = _live_now()
    for i in range(30):
        g(V, B * (1 + i))
        h(V * (1 + i), float(i % 2))
    assert _live_now() - before <= 2        # at most one generation per compiled site


def test_long_scan_with_gradient_keeps_every_factorization_until_used():
    """grad of a scan over 20 matrices: the forward loop makes 20 factorizations that the
    backward loop uses in reverse order; none is evicted early (no capacity applies)."""
    k = 20
    Vs = V[None] * jnp.linspace(1.0, 2.0, k)[:, None]
    g = jax.jit(jax.grad(lambda Vs: jnp.sum(jax.lax.map(lambda v: F(v, B), Vs))))
    s = _stats_of(lambda: g(Vs))
    assert (s.factorizations, s.misses, s.peak_live) == (k, 0, k), s
    assert s.live <= 1, s


def test_a_failing_computation_frees_its_factorizations():
    f = jax.jit(jax.grad(lambda v: jnp.sum(jnp.log(u_of(v, B) - u_of(v, B)))))  # log 0: ct inf
    before = _live_now()
    with pytest.raises(Exception, match="NonFiniteInputError"):
        jax.block_until_ready(f(V))
    assert _live_now() <= before


def test_factorization_crossing_a_jit_boundary_is_redone_not_kept():
    """jax.grad(jax.jit(f)): the forward and backward passes are two compiled computations, so
    the backward refactorizes (documented; counted as a miss) and nothing stays alive."""
    s = _stats_of(lambda: jax.grad(jax.jit(F), (0, 1))(V, B))
    assert (s.factorizations, s.misses, s.live) == (2, 1, 0), s
    got = jax.grad(jax.jit(F), (0, 1))(V, B)
    ref = jax.jit(jax.grad(F, (0, 1)))(V, B)
    for x, y in zip(got, ref):
        np.testing.assert_allclose(x, y, rtol=1e-13)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_growth_after_1000_forward_only_jitted_calls():
    """The issue's leak: 100 forward-only jitted calls used to leave 64 factorizations alive.
    Here every call frees its factorization before returning; RSS stays flat over 1000 calls
    of an n = 2550 CHOLMOD factorization (a leak would keep ~0.5 GB)."""
    fam, b = lo.testing.poisson_family(50)
    bj = jnp.asarray(b)
    f = jax.jit(lambda th: adj.solve(fam(th), bj, posdef=True))
    theta = jnp.asarray(0.5 + np.random.default_rng(0).random(fam.n_params))
    for _ in range(20):                      # warm up allocator and caches
        f(theta).block_until_ready()
    gc.collect()
    adj.reset_stats()
    before = _rss()
    base = adj.stats().live
    peak_live = 0
    for i in range(1000):
        f(theta * (1 + 1e-3 * (i % 7))).block_until_ready()
        peak_live = max(peak_live, adj.stats().live - base)
    gc.collect()
    grown = (_rss() - before) / 2**20
    s = adj.stats()
    assert s.factorizations == 1000 and s.live == base and peak_live == 0, s
    assert grown < 64, f"RSS grew by {grown:.0f} MB over 1000 calls"


def test_no_growth_after_many_gradients_eager_and_jitted():
    g = jax.jit(jax.grad(F, (0, 1)))
    before = _live_now()
    for _ in range(100):
        g(V, B)
        jax.grad(F)(V, B)
    assert _live_now() == before


def test_stats_counts_solves():
    s = _stats_of(lambda: jax.jit(jax.grad(F))(V, B))
    assert (s.factorizations, s.forward_solves, s.transpose_solves) == (1, 1, 1), s
    s = _stats_of(lambda: jax.jit(u_of)(V, B))
    assert (s.factorizations, s.forward_solves, s.transpose_solves) == (1, 1, 0), s
    assert isinstance(s, adj.Stats)


@pytest.mark.parametrize("alg", [sv.LU(), sv.Cholesky(), sv.CG(rtol=1e-12), sv.GMRES(rtol=1e-12),
                                 sv.Auto()], ids=["LU", "Cholesky", "CG", "GMRES", "Auto"])
def test_every_algorithm_one_factorization_for_jacrev_and_hessian(alg):
    """jacrev used to return uninitialised memory in all rows but the first, with every solver.
    Hermitian positive definite A so that every algorithm applies."""
    S = sp.csr_matrix(DENSE @ DENSE.T + np.eye(N))
    A = lo.Sparse.from_scipy(S)
    Pd, v = A.pattern, jnp.asarray(A.values)
    u = lambda b: adj.solve(lo.Sparse(v, Pd), b, alg, posdef=True)
    s = _stats_of(lambda: jax.jit(jax.jacrev(u))(B))
    assert (s.factorizations, s.misses, s.live) == (1, 0, 0)
    J = jax.jit(jax.jacrev(u))(B)
    np.testing.assert_allclose(J, np.linalg.inv(S.toarray()), atol=1e-10 * np.abs(J).max())
    Fh = lambda v: jnp.sum(jnp.sin(adj.solve(lo.Sparse(v, Pd), B, alg, posdef=True)))
    s = _stats_of(lambda: jax.jit(jax.hessian(Fh))(v))
    assert (s.factorizations, s.misses, s.live) == (1, 0, 0)
