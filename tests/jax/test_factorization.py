"""adj.Factorization as a JAX value: its pytree structure depends only on (pattern, algorithm,
hints), so it can be carried through a while_loop that refactorizes, returned from either
branch of a cond, stacked, and passed to a jitted function without recompiling; and a
Factorization with a concrete key holds its factorization wherever it came from (returned
from jit, out of a jitted scan's carry, sliced out of a vmapped batch, has_aux), even after
the object it came from died. Every answer is compared with a dense solve."""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import linops as lo
import solvers as sv
import adjoints.jax as adj

FAM, LOAD = lo.testing.poisson_family(6)
P = FAM.pattern
N = P.shape[0]
B = jnp.asarray(LOAD)
TH = jnp.asarray(0.5 + np.random.default_rng(4).random(FAM.n_params))


def dense(th):
    return FAM(np.asarray(th)).to_scipy().toarray()


def ref_solve(th, b=LOAD):
    return np.linalg.solve(dense(th), np.asarray(b))


def counted(fn):
    gc.collect()
    adj.reset_stats()
    out = jax.block_until_ready(fn())
    return out, adj.stats()


# ----- structure -----------------------------------------------------------------------------------
def test_structure_depends_on_pattern_algorithm_and_hints_only():
    F1, F2 = adj.factorize(FAM(TH)), adj.factorize(FAM(2 * TH))
    assert jax.tree.structure(F1) == jax.tree.structure(F2)
    G = adj.factorize(FAM(TH), sv.LU())
    assert jax.tree.structure(G) != jax.tree.structure(F1)        # another algorithm
    H = adj.factorize(FAM(TH), posdef=True)
    assert jax.tree.structure(H) != jax.tree.structure(F1)        # other hints
    inside = jax.jit(lambda t: adj.factorize(FAM(t)))(TH)
    assert jax.tree.structure(inside) == jax.tree.structure(F1)   # made under jit: the same


def test_new_factorizations_passed_to_jit_do_not_recompile():
    """Every new F used to be a new pytree structure: 120 F, 120 compilations."""
    f = jax.jit(lambda F, b: F.solve(b))
    for i in range(6):
        th = TH * (1 + 0.1 * i)
        np.testing.assert_allclose(np.asarray(f(adj.factorize(FAM(th)), B)), ref_solve(th),
                                   rtol=1e-12)
    assert f._cache_size() == 1


def test_while_loop_carries_a_refactorizing_factorization():
    """Newton-like: the carry holds F, the body factorizes the next matrix and solves with
    both; each step one factorization, the previous one freed once passed."""
    def body(s):
        i, Fk, u = s
        G = adj.factorize(FAM(TH * (1 + 0.1 * i)))
        return i + 1, G, Fk.solve(u) + G.solve(B)

    run = jax.jit(lambda: jax.lax.while_loop(lambda s: s[0] < 5, body,
                                             (1, adj.factorize(FAM(TH)), jnp.zeros(N))))
    (_, Fout, u), s = counted(run)
    assert (s.factorizations, s.misses) == (5, 0), s
    assert s.peak_live <= 3, s                  # not one per step
    ref = np.zeros(N)
    for i in range(1, 5):
        ref = ref_solve(TH * (1 + 0.1 * (i - 1)), ref) + ref_solve(TH * (1 + 0.1 * i))
    np.testing.assert_allclose(np.asarray(u), ref, rtol=1e-11)
    np.testing.assert_allclose(np.asarray(Fout.solve(B)), ref_solve(TH * 1.4), rtol=1e-12)


def test_cond_returns_one_of_two_factorizations_and_they_stack():
    F1, F2 = adj.factorize(FAM(TH)), adj.factorize(FAM(2 * TH))
    pick = jax.jit(lambda p: jax.lax.cond(p, lambda: F1, lambda: F2).solve(B))
    np.testing.assert_allclose(np.asarray(pick(False)), ref_solve(2 * TH), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(pick(True)), ref_solve(TH), rtol=1e-12)
    Fs = jax.tree.map(lambda a, b: jnp.stack([a, b]), F1, F2)
    U = jax.jit(jax.vmap(lambda F: F.solve(B)))(Fs)
    np.testing.assert_allclose(np.asarray(U[1]), ref_solve(2 * TH), rtol=1e-12)
    made_inside = jax.jit(lambda t, p: jax.lax.cond(p, lambda: adj.factorize(FAM(t)),
                                                    lambda: adj.factorize(FAM(2 * t))))
    for p, th in ((True, TH), (False, 2 * TH)):
        np.testing.assert_allclose(np.asarray(made_inside(TH, p).solve(B)), ref_solve(th),
                                   rtol=1e-12)


# ----- held wherever it came from --------------------------------------------------------------------
def _forms():
    def returned_from_jit():
        F = adj.factorize(FAM(TH))
        G = jax.jit(lambda F: F)(F)
        return G

    def out_of_a_jitted_scan_carry():
        F = adj.factorize(FAM(TH))
        return jax.jit(lambda F: jax.lax.scan(lambda c, _: (c, None), F, None, length=3)[0])(F)

    def sliced_out_of_a_vmapped_batch():
        Fs = jax.vmap(lambda t: adj.factorize(FAM(t)))(jnp.stack([2 * TH, TH]))
        return jax.tree.map(lambda x: x[1], Fs)

    def made_and_solved_inside_jit():
        u, G = jax.jit(lambda t: (lambda F: (F.solve(B), F))(adj.factorize(FAM(t))))(TH)
        np.testing.assert_allclose(np.asarray(u), ref_solve(TH), rtol=1e-12)
        return G

    def has_aux_eager():
        vg = jax.value_and_grad(lambda t: (lambda F: (jnp.sum(F.solve(B)), F))(
            adj.factorize(FAM(t))), has_aux=True)
        (_, G), _ = vg(TH)
        return G

    def has_aux_under_jit():
        vg = jax.jit(jax.value_and_grad(lambda t: (lambda F: (jnp.sum(F.solve(B)), F))(
            adj.factorize(FAM(t))), has_aux=True))
        (_, G), _ = vg(TH)
        return G

    return {f.__name__: f for f in (returned_from_jit, out_of_a_jitted_scan_carry,
                                    sliced_out_of_a_vmapped_batch, made_and_solved_inside_jit,
                                    has_aux_eager, has_aux_under_jit)}


FORMS = _forms()


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_factorization_is_held_wherever_it_came_from(form):
    """The object it came from is gone (and other computations ran): F still solves with its
    own factorization, no new one, eagerly and under jit; dropping F frees it."""
    G = FORMS[form]()
    gc.collect()
    for i in range(2):        # other computations run in between
        jax.block_until_ready(jax.jit(lambda t: adj.solve(FAM(t), B))(TH * (3 + i)))
    (u, v), s = counted(lambda: (G.solve(B), jax.jit(lambda F: F.solve_transpose(B))(G)))
    assert (s.factorizations, s.misses) == (0, 0), s
    np.testing.assert_allclose(np.asarray(u), ref_solve(TH), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(v), np.linalg.solve(dense(TH).T, LOAD), rtol=1e-12)
    before = adj.stats().live
    del G
    gc.collect()
    assert adj.stats().live < before


def test_factorize_of_a_factorization_refuses_another_algorithm():
    """adj.factorize(F, sv.Cholesky()) silently returned F with its own algorithm."""
    F = adj.factorize(FAM(TH))
    assert adj.factorize(F) is F
    with pytest.raises(TypeError, match="its own algorithm"):
        adj.factorize(F, sv.Cholesky())
    with pytest.raises(TypeError, match="posdef=True"):
        adj.factorize(F, posdef=True)


def test_a_factorization_with_foreign_values_is_never_silently_wrong():
    """Keys and values that do not belong together (tree.map over F scales both): the solve
    refactorizes from the values it carries (a miss) and answers for those values."""
    F = adj.factorize(FAM(TH))
    G = jax.tree.map(lambda x: x * 2 if x.dtype == jnp.float64 else x, F)  # values only
    u, s = counted(lambda: G.solve(B))
    assert s.misses == 1, s
    np.testing.assert_allclose(np.asarray(u), ref_solve(2 * TH), rtol=1e-12)
    H = jax.tree.map(lambda x: x + 1 if x.dtype == jnp.int32 else x, F)   # a key of nothing
    u, s = counted(lambda: jax.jit(lambda F: F.solve(B))(H))
    assert s.misses == 1, s
    np.testing.assert_allclose(np.asarray(u), ref_solve(TH), rtol=1e-12)
