"""Host factorizations under JAX: exactly one per linearization point, kept no longer than the
live-factorization store's policy says (adjoints.jax._live: straight-line computations freed by
their last consumer; loops, branches and escaped factorizations by pins that end with the run),
and correctness independent of how long they are kept. Memory itself (RSS) is measured in
test_memory.py."""

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
from adjoints.jax._live import STORE, Store

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
    """Counters of one run of ``fn``; ``live`` is how many factorizations the run made and left
    alive: keys alive after it that were not alive before it (other tests' garbage, freed during
    the run, is not subtracted from a count; their compiled loops may still hold their one kept
    generation: not this run's)."""
    gc.collect()
    adj.reset_stats()
    before = STORE.keys()
    jax.block_until_ready(fn())
    gc.collect()
    s = adj.stats()
    s.live = len(STORE.keys() - before)
    s.peak_live -= len(before)
    return s


def test_live_is_the_store_count_and_a_run_is_judged_by_its_own_keys():
    """An older factorization, made before the reset and freed during the measured run, is
    neither a negative ``live`` nor subtracted from what the run left alive."""
    K = lo.Sparse.from_scipy(sp.csr_array(np.array([[0.0, 2.0], [3.0, 1.0]])))
    old = adj.factorize(K)                 # eager: alive as long as ``old`` holds it
    gc.collect()
    adj.reset_stats()
    base = adj.stats().live
    assert base == STORE.live() >= 1
    del old                                # released after the reset
    gc.collect()
    s = adj.stats()
    assert s.live == STORE.live() == base - 1 >= 0, s
    old = adj.factorize(K)
    gc.collect()

    def frees_the_old_one():
        nonlocal old
        old = None
        gc.collect()
        return jax.jit(lambda b: adj.solve(K, b))(jnp.ones(2))

    s = _stats_of(frees_the_old_one)
    assert (s.factorizations, s.live) == (1, 0), s   # the old code said live == -1


def settle():
    """What the next computations would do: the current run ends and what runs left is freed
    (two small jitted solves: each starts a run; public API only, so it also runs against
    code without the store)."""
    K = lo.Sparse.from_scipy(sp.eye(2, format="csr") * 2.0)
    for _ in range(2):
        jax.block_until_ready(jax.jit(lambda b: adj.solve(K, b))(jnp.ones(2)))
    gc.collect()


def _live_now():
    settle()
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
    """A factorization made inside a loop body is consumed there and by the backward loop:
    k iterations, k factorizations, no misses; what a run leaves (the last step's pins) is
    gone once the next computations ran."""
    k = 5
    Vs = V[None] * jnp.linspace(1.0, 2.0, k)[:, None]
    g = jax.jit(jax.grad(lambda Vs: jnp.sum(jax.lax.map(lambda v: F(v, B), Vs))))
    before = _live_now()
    for scale in (1.0, 1.5):
        s = _stats_of(lambda: g(Vs * scale))
        assert (s.factorizations, s.misses) == (k, 0) and s.live <= 2, s
    assert _live_now() == before


def test_linear_transpose_owns_its_factorization():
    _live_now()
    before = STORE.keys()
    t = jax.linear_transpose(lambda b: u_of(V, b), B)
    gc.collect()
    held = STORE.keys() - before
    assert len(held) == 1                   # the transposed function holds the key
    adj.reset_stats()
    out = t(B)[0]
    np.testing.assert_allclose(out, np.linalg.solve(DENSE.T, np.asarray(B)), rtol=1e-12)
    assert adj.stats().factorizations == 0
    del t
    _live_now()
    assert not held & STORE.keys()


def test_vjp_residuals_own_the_factorization_and_pullbacks_reuse_it():
    _live_now()
    before = STORE.keys()
    adj.reset_stats()
    value, pullback = jax.vjp(F, V, B)
    held = STORE.keys() - before
    assert len(held) == 1
    g1, g2 = pullback(1.0), pullback(2.0)
    np.testing.assert_allclose(g2[0], 2 * g1[0], rtol=1e-12)
    s = adj.stats()
    assert (s.factorizations, s.misses, s.transpose_solves) == (1, 0, 2), s
    del pullback
    _live_now()
    assert not held & STORE.keys()


def test_correctness_never_depends_on_how_long_factorizations_are_kept(monkeypatch):
    """Drop every factorization between the forward and the backward pass (what an evicting
    capacity would do): the pullback refactorizes deterministically, counts a miss, and the
    gradient is unchanged. Under jit the other extreme: every consumer drops the factorization
    it used at once, so each later consumer misses and refactorizes from the values it
    carries; the gradient and the Hessian are still exact."""
    ref = jax.grad(F, (0, 1))(V, B)
    value, pullback = jax.vjp(F, V, B)
    STORE.drop(list(STORE._entries))
    adj.reset_stats()
    got = pullback(1.0)
    for x, y in zip(got, ref):
        np.testing.assert_allclose(x, y, rtol=1e-13, atol=0)
    assert adj.stats().misses == 1
    real = Store.consumed

    def forgetful(self, op, keys):
        real(self, op, keys)
        self.drop(keys)

    monkeypatch.setattr(Store, "consumed", forgetful)
    s = _stats_of(lambda: jax.jit(jax.value_and_grad(F, (0, 1)))(V, B))
    assert s.misses == 1, s                     # the transpose solve
    for x, y in zip(jax.jit(jax.grad(F, (0, 1)))(V, B), ref):
        np.testing.assert_allclose(x, y, rtol=1e-13)
    s = _stats_of(lambda: jax.jit(jax.hessian(F))(V, B))
    assert s.misses >= 2, s
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
    """grad of a map over 20 matrices: the forward loop makes 20 factorizations that the
    backward loop uses in reverse order; none is freed early (no capacity applies), each is
    freed when the backward loop moved on from it."""
    k = 20
    Vs = V[None] * jnp.linspace(1.0, 2.0, k)[:, None]
    g = jax.jit(jax.grad(lambda Vs: jnp.sum(jax.lax.map(lambda v: F(v, B), Vs))))
    s = _stats_of(lambda: g(Vs))
    assert (s.factorizations, s.misses, s.peak_live) == (k, 0, k), s
    assert s.live <= 2, s


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


def test_no_growth_after_300_forward_only_jitted_calls():
    """The issue's leak: 100 forward-only jitted calls used to leave 64 factorizations alive.
    Here every call frees its factorization before returning; RSS stays flat over 300 calls
    of an n = 2550 CHOLMOD factorization (a leak would keep ~150 MB, 300 factorizations alive:
    more than the 64 of the issue)."""
    fam, b = lo.testing.poisson_family(50)
    bj = jnp.asarray(b)
    f = jax.jit(lambda th: adj.solve(fam(th), bj, posdef=True))
    theta = jnp.asarray(0.5 + np.random.default_rng(0).random(fam.n_params))
    for _ in range(20):                      # warm up allocator and caches
        f(theta).block_until_ready()
    gc.collect()
    adj.reset_stats()
    before = _rss()
    base = STORE.keys()           # what other tests left: judged by key, not by count
    peak_live = 0
    for i in range(300):
        f(theta * (1 + 1e-3 * (i % 7))).block_until_ready()
        peak_live = max(peak_live, len(STORE.keys() - base))
    gc.collect()
    grown = (_rss() - before) / 2**20
    s = adj.stats()
    left = len(STORE.keys() - base)
    assert s.factorizations == 300 and left == 0 and peak_live == 0, (s, left, peak_live)
    assert grown < 64, f"RSS grew by {grown:.0f} MB over 300 calls"


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


# ----- lifetimes in the forms users write -------------------------------------------------------
FAM, LOAD = lo.testing.poisson_family(6)
PF = FAM.pattern
NF = PF.shape[0]
BF = jnp.asarray(LOAD)
TH = jnp.asarray(0.5 + np.random.default_rng(3).random(FAM.n_params))


def _eager_loop(form, th):
    """One eager loop (not under jit) whose matrix changes with every call."""
    A = FAM(th)
    u0 = jnp.zeros(NF)
    if form == "scan":
        return jax.lax.scan(lambda u, _: (adj.solve(A, u + BF), None), u0, None, length=3)[0]
    if form == "fori_loop":
        return jax.lax.fori_loop(0, 3, lambda i, u: adj.solve(A, u + BF), u0)
    if form == "while_loop":
        return jax.lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, adj.solve(A, s[1] + BF)),
                                  (0, u0))[1]
    if form == "cond":
        return jax.lax.cond(th[0] > 0, lambda: adj.solve(A, BF), lambda: BF)
    if form == "switch":
        return jax.lax.switch(1, [lambda: BF, lambda: adj.solve(A, BF)])
    if form == "map":
        return jax.lax.map(lambda t: adj.solve(FAM(t), BF), jnp.stack([th, 2 * th]))
    raise ValueError(form)


@pytest.mark.parametrize("form", ["scan", "fori_loop", "while_loop", "cond", "switch", "map"])
def test_eager_loops_and_branches_do_not_keep_a_factorization_per_call(form):
    """Each eager loop or branch compiles a module that JAX keeps in its caches: it used to
    keep one factorization per call for ever (+507 MB over 25 calls at n = 19 881). Now what a
    call leaves is gone once the next calls ran, and the answers are the dense ones."""
    before = _live_now()
    for i in range(8):
        th = TH * (1 + 0.1 * i)
        out = np.asarray(_eager_loop(form, th))
        assert adj.stats().live - before <= 3, (i, adj.stats())
    K = FAM(np.asarray(th)).to_scipy().toarray()
    if form == "map":
        ref = np.linalg.solve(K, np.asarray(LOAD))
        np.testing.assert_allclose(out[0], ref, rtol=1e-12)
    elif form in ("cond", "switch"):
        np.testing.assert_allclose(out, np.linalg.solve(K, np.asarray(LOAD)), rtol=1e-12)
    assert _live_now() - before <= 0


def test_rejitted_closures_and_dropped_functions_free_their_factorizations():
    """A new jitted closure per call (each its own compiled module), and jitted functions that
    are deleted: nothing accumulates; deleting them and clearing JAX's caches frees what they
    held even if nothing else runs."""
    before = _live_now()
    for i in range(4):   # more closures than the 3 a leak would stay under
        th = TH * (1 + 0.1 * i)
        loss = jax.jit(lambda th: jnp.sum(jax.lax.fori_loop(
            0, 3, lambda j, u: adj.solve(FAM(th), u + BF * (1 + i)), jnp.zeros(NF)) ** 2))
        jax.block_until_ready(jax.grad(loss)(th))
        assert adj.stats().live - before <= 3, (i, adj.stats())
    fns = [jax.jit(lambda th, i=i: jax.lax.scan(
        lambda u, _: (adj.solve(FAM(th), u + BF * i), None), jnp.zeros(NF), None, length=2)[0])
        for i in range(2)]
    for f in fns:
        jax.block_until_ready(f(TH))
    del f, fns, loss
    jax.clear_caches()
    gc.collect()
    assert adj.stats().live - before <= 0, adj.stats()


def test_gradient_over_more_matrices_than_any_capacity():
    """grad over 100 matrices makes exactly 100 factorizations (it made 136: a capacity of
    64 per site evicted factorizations the backward loop still needed) and equals the dense
    gradient; 70 factorizations from lax.map used by a second lax.map: no error (it raised
    ExpiredFactorizationError at 65), no miss."""
    k = 100
    Ts = jnp.stack([TH * (1 + 0.01 * i) for i in range(k)])
    loss = lambda Ts: jnp.sum(jax.lax.map(lambda t: jnp.sum(adj.solve(FAM(t), BF) ** 2), Ts))
    got = []
    s = _stats_of(lambda: got.append(jax.jit(jax.grad(loss))(Ts)) or got[0])
    assert (s.factorizations, s.misses) == (k, 0), s

    def dense_loss(Ts):
        M = jnp.asarray(FAM.M.to_scipy().toarray())
        def one(t):
            A = jnp.zeros((NF, NF)).at[PF.rows, PF.indices].set(M @ t)
            return jnp.sum(jnp.linalg.solve(A, BF) ** 2)
        return jnp.sum(jax.lax.map(one, Ts))
    g = got[0][:12]   # row i depends on Ts[i] only: the first 12 rows are grad over Ts[:12]
    np.testing.assert_allclose(np.asarray(g), np.asarray(jax.grad(dense_loss)(Ts[:12])),
                               rtol=1e-11, atol=1e-11 * float(jnp.abs(g).max()))

    def two_maps(Ts):
        Fs = jax.lax.map(lambda t: adj.factorize(FAM(t)), Ts)
        return jax.lax.map(lambda F: F.solve(BF), Fs)

    U, s = None, _stats_of(lambda: jax.jit(two_maps)(Ts[:70]))
    assert (s.factorizations, s.misses) == (70, 0), s
    U = jax.jit(two_maps)(Ts[:70])
    np.testing.assert_allclose(np.asarray(U[69]), np.linalg.solve(
        FAM(np.asarray(Ts[69])).to_scipy().toarray(), np.asarray(LOAD)), rtol=1e-12)


def test_scan_with_a_changing_matrix_under_grad_analyses_the_pattern_once():
    """jit(grad) of a scan whose matrix changes every step: one factorization per step, one
    symbolic analysis in all (it redid the analysis 7 times in 8 steps)."""
    Ts = jnp.stack([TH * (1 + 0.1 * i) for i in range(8)])

    def loss(Ts):
        return jnp.sum(jax.lax.scan(lambda u, t: (adj.solve(FAM(t), u + BF, "lu"), None),
                                    jnp.zeros(NF), Ts)[0] ** 2)

    # the second function finds SuperLU's order of the pattern kept (sv.analyses): none at all
    for fn, analyses in ((jax.jit(loss), 1), (jax.jit(jax.grad(loss)), 0)):
        s = _stats_of(lambda: fn(Ts))
        assert (s.factorizations, s.symbolic_analyses, s.misses) == (8, analyses, 0), s
    sv.analyses.clear()
    s = _stats_of(lambda: jax.jit(jax.grad(loss))(Ts))
    assert (s.factorizations, s.symbolic_analyses, s.misses) == (8, 1, 0), s


def test_python_loop_rebuilding_one_matrix_under_jit_factorizes_once():
    """A Python loop under jit(value_and_grad) that builds fam(θ) again at every step (equal
    values, new tracers): one factorization, found again by its values (it made 5 for 5)."""
    def loss(th):
        u = jnp.zeros(NF)
        for _ in range(5):
            u = adj.solve(FAM(th), u + BF)
        return jnp.sum(u ** 2)

    s = _stats_of(lambda: jax.jit(jax.value_and_grad(loss))(TH))
    assert (s.factorizations, s.misses, s.reuses) == (1, 0, 4), s
    v, g = jax.jit(jax.value_and_grad(loss))(TH)
    vd, gd = jax.value_and_grad(loss)(TH)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gd), rtol=1e-12)


def test_factorize_inside_a_scan_body_and_nested_scans():
    """adj.factorize inside a scan body, 70 steps under grad (more than the old capacity):
    no ExpiredFactorizationError, one factorization per step; solves in nested scans over 10
    distinct matrices: 10 factorizations under grad (it made 80)."""
    Ts = jnp.stack([TH * (1 + 0.01 * i) for i in range(70)])

    def body(u, t):
        Fk = adj.factorize(FAM(t))
        return Fk.solve(u + BF) + 0.1 * Fk.solve_transpose(u), None

    loss = lambda Ts: jnp.sum(jax.lax.scan(body, jnp.zeros(NF), Ts)[0] ** 2)
    s = _stats_of(lambda: jax.jit(jax.grad(loss))(Ts))
    assert (s.factorizations, s.misses) == (70, 0), s

    def nested(Ts):
        def outer(u, t):
            A = FAM(t)
            return jax.lax.scan(lambda u, _: (adj.solve(A, u + BF), None), u, None,
                                length=4)[0], None
        return jnp.sum(jax.lax.scan(outer, jnp.zeros(NF), Ts)[0] ** 2)

    for fn in (jax.jit(nested), jax.jit(jax.grad(nested))):
        s = _stats_of(lambda: fn(Ts[:10]))
        assert (s.factorizations, s.misses) == (10, 0), s
    g = jax.jit(jax.grad(nested))(Ts[:3])
    M = jnp.asarray(FAM.M.to_scipy().toarray())

    def dense(Ts):
        def outer(u, t):
            A = jnp.zeros((NF, NF)).at[PF.rows, PF.indices].set(M @ t)
            return jax.lax.scan(lambda u, _: (jnp.linalg.solve(A, u + BF), None), u, None,
                                length=4)[0], None
        return jnp.sum(jax.lax.scan(outer, jnp.zeros(NF), Ts)[0] ** 2)
    gd = jax.grad(dense)(Ts[:3])
    np.testing.assert_allclose(np.asarray(g), np.asarray(gd), rtol=1e-10,
                               atol=1e-12 * float(jnp.abs(gd).max()))
