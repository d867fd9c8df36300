"""The native lowering of the JAX solves (adjoints.jax._native): a KLU solve inside a loop runs
as an XLA FFI call into solvers._native, with the Python callback's function as its fallback.

Every transform is checked through loops (scan, fori_loop, a cond inside a scan) against the
callback path with the SAME factors (``_native.ENABLED = False``: equal to the last bit) and
against dense ``jnp.linalg.solve`` autodiff (~1e-12 in float64), real and complex; the native
counters prove the FFI path ran (and the callback path did not); one factorization per call;
misses, expired factorizations and non-finite right-hand sides go through the fallback with
the callback's counters and named errors. x64 off runs in a fresh interpreter
(tests/jax/x64off_native.py), lifetimes by RSS in subprocesses (tests/jax/native_memory_child.py),
and the fallback where the extension is absent in a subprocess whose import of it fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import linops as lo
import solvers as sv
import adjoints.jax as adj
from adjoints.jax import _native
from tests._cases.jax_cases import (battery, battery_inputs, compare, make_b, make_case, rhs,
                                    rtol_for)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
pytestmark = pytest.mark.skipif(not _native.available(),
                                reason="solvers._native is not built (no SuiteSparse/compiler "
                                       "when linops was installed): the native JAX path is off")
T = 3
WHICH = ("value_and_grad", "jvp", "hessian", "vmap_grad", "vmap_jvp", "vmap_matrices",
         "linear_transpose")


def native_calls() -> int:
    """FFI solve calls since the last drain (reads without draining)."""
    from solvers.internals import native

    return native().counts()["native_calls"]


def fallbacks() -> int:
    """Calls the native side handed to the Python fallback since the last drain."""
    from solvers.internals import native

    return native().counts()["fallbacks"]


def drain() -> None:
    adj.reset_stats()   # drains the native counters into (and then resets) adj.stats()


def loop_solve(case, form: str, dense: bool = False):
    """(params, b) ↦ u_T of u_{t+1} = A⁻¹(u_t + b) (cond: A⁻¹ and A⁻ᵀ alternately), T steps,
    with A factorized once outside the loop (``adj.factorize``) or its dense jnp reference."""
    def solver(p):
        if dense:
            a = case.dense(p)
            return (lambda r: jnp.linalg.solve(a, r)), (lambda r: jnp.linalg.solve(a.T, r))
        F = adj.factorize(case.build(p), case.alg)
        return F.solve, F.solve_transpose

    def run(p, b):
        solve, tsolve = solver(p)
        if form == "scan" or (form == "solve-in-body" and dense):   # the same chain
            return jax.lax.scan(lambda u, _: (solve(u + b), None), b, None, length=T)[0]
        if form == "fori":
            return jax.lax.fori_loop(0, T, lambda i, u: solve(u + b), b)
        if form == "cond":
            def step(u, i):
                return jax.lax.cond(i % 2 == 0, lambda v: solve(v + b),
                                    lambda v: tsolve(v) + 0.5 * b, u), None
            return jax.lax.scan(step, b, jnp.arange(T))[0]
        if form == "solve-in-body":   # adj.solve with a matrix built outside the loop
            A = case.build(p)
            return jax.lax.scan(lambda u, _: (adj.solve(A, u + b, case.alg), None), b, None,
                                length=T)[0]
        if form == "factorize-in-body":   # A_t = (1 + t/4)·A built, and factorized, each step
            return jax.lax.scan(lambda u, t: (step_matrix_solve(case, p, t, dense)(u + b), None),
                                b, jnp.arange(T).astype(jnp.result_type(float)))[0]
        raise ValueError(form)
    return run


def step_matrix_solve(case, p, t, dense: bool = False):
    """r ↦ A_t⁻¹ r with A_t = (1 + t/4)·A(p) built inside the loop body (a Newton or
    time-dependent step: one factorization per step), or its dense jnp reference."""
    s = 1 + 0.25 * t
    if dense:
        a = case.dense(p) * s.astype(case.dtype)
        return lambda r: jnp.linalg.solve(a, r)
    A = case.build(p)
    return lambda r: adj.solve(lo.Sparse(A.values * s.astype(A.values.dtype), A.pattern), r,
                               case.alg)


def klu_case(dtype):
    return dataclasses.replace(make_case("sparse-LU", dtype), alg=sv.KLU())


def run_battery(case, form, which=WHICH, dense=False):
    """The transforms through the loop, compiled without backend optimisations (tiny problems:
    compile time dominates)."""
    args = battery_inputs(case)
    fn = jax.jit(lambda *a: battery(case, loop_solve(case, form, dense), *a, which=which))
    compiled = fn.lower(*args).compile(compiler_options={"xla_backend_optimization_level": 0})
    return jax.tree.map(np.asarray, compiled(*args))


def cholmod_case(dtype):
    """An HPD case through sv.Cholesky (CHOLMOD): real factors solve natively (a copy in the
    native table), complex ones keep the callback."""
    if not sv.cholmod_available():
        pytest.skip("scikit-sparse (CHOLMOD) is not installed")
    return make_case("sparse-Cholesky", dtype)


def auto_case(dtype):
    """The default algorithm on an HPD matrix: in a loop CHOLMOD (real; KLU without it), KLU
    (complex: CHOLMOD's complex factors have no native copy); straight, Auto's usual rules."""
    return make_case("sparse-Auto", dtype)


def auto_general_case(dtype):
    """The default algorithm on a nonsymmetric matrix: KLU in a loop (SuperLU by the rules)."""
    return dataclasses.replace(make_case("sparse-LU", dtype), alg=None)


CASES = {"klu": klu_case, "cholmod": cholmod_case, "auto": auto_case,
         "auto-general": auto_general_case}
# (fori_loop with static bounds lowers to a scan: once, with KLU)
NATIVE_CELLS = [(f, e) for e in ("klu", "cholmod") for f in ("scan", "cond", "solve-in-body")]
NATIVE_CELLS += [("fori", "klu"), ("factorize-in-body", "klu")]
# the default algorithm: the loop's factorize picks a native engine (Auto(loop_solves=True)),
# the callback path (ENABLED=False) Auto's rules' engine: equal to rounding, not bit for bit
NATIVE_CELLS += [(f, e) for e in ("auto", "auto-general") for f in ("scan", "solve-in-body")]
NATIVE_CELLS += [("factorize-in-body", "auto")]   # the FFI factorize (KLU) by Auto's flops rule


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
@pytest.mark.parametrize("form,engine", NATIVE_CELLS, ids=[f"{f}-{e}" for f, e in NATIVE_CELLS])
def test_native_equals_the_callback_path_and_dense_autodiff(form, dtype, engine):
    case = CASES[engine](dtype)
    drain()
    got = run_battery(case, form)
    if engine == "cholmod" and np.dtype(dtype).kind == "c":
        assert native_calls() == 0, "a complex CHOLMOD factor has no native copy: the callback"
    else:   # a native solve counts only where the key's factor is in the native table
        assert native_calls() > 0, "the FFI solve did not run"
    _native.ENABLED = False
    try:
        drain()
        callback = run_battery(case, form)
        assert native_calls() == 0, "ENABLED=False must keep the Python callback"
    finally:
        _native.ENABLED = True
    for key in WHICH:
        for a, b in zip(jax.tree.leaves(got[key]), jax.tree.leaves(callback[key])):
            if engine.startswith("auto"):   # another engine's factors: rounding
                np.testing.assert_allclose(a, b, rtol=rtol_for(dtype), atol=1e-13,
                                           err_msg=f"{form} {key}")
            else:   # the same factors, the same arithmetic: bit for bit
                np.testing.assert_array_equal(a, b, err_msg=f"{form} {key}")
    compare(got, dense_reference(engine, form, dtype), rtol_for(dtype),
            f"{form}/{np.dtype(dtype).name}")


_DENSE: dict = {}


def dense_reference(engine: str, form: str, dtype):
    """The battery of dense ``jnp.linalg.solve`` autodiff through the same function: every
    form but cond and factorize-in-body computes u_T of the same chain (solve-in-body
    included), and the engines of one matrix family (KLU and the default on the nonsymmetric
    one, CHOLMOD and the default on the HPD one: the same seed) share it — computed once per
    worker."""
    own = form in ("cond", "factorize-in-body")
    key = ("hpd" if engine in ("cholmod", "auto") else "general", np.dtype(dtype).name,
           form if own else "chain")
    if key not in _DENSE:
        _DENSE[key] = run_battery(CASES[engine](dtype), form if own else "scan", dense=True)
    return _DENSE[key]


@pytest.mark.parametrize("engine", ["klu", "cholmod", "auto", "auto-general"])
def test_one_factorization_and_every_step_counted(engine):
    case = CASES[engine](np.float64)
    p, q = case.params, rhs(case)
    f = jax.jit(jax.value_and_grad(lambda p, q: jnp.sum(loop_solve(case, "scan")(
        p, make_b(q, case.dtype)) ** 2), (0, 1)))
    for i in range(2):   # the second call: compiled, a new matrix aliased afresh
        drain()
        jax.block_until_ready(f(tuple(x * (1 + 0.1 * i) for x in p), q))
        calls = native_calls()
        s = adj.stats()
        assert s.factorizations == 1 and s.misses == 0, s
        assert s.forward_solves == T and s.transpose_solves == T, s
        # every step native: the factorization aliased its key for the loop (no fallback)
        assert calls == 2 * T and fallbacks() == 0, (calls, fallbacks())


def loop_counts() -> dict:
    """The native table now: loop factors alive, slots, FFI factorizations / solve calls /
    fallbacks since the last drain."""
    from solvers.internals import native

    c = native().counts()
    return {k: c[k] for k in ("loop_factors", "slots", "factorizations", "native_calls",
                              "fallbacks")}


@pytest.mark.parametrize("engine", ["klu", "auto"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_a_factorization_in_the_loop_body_never_enters_python(dtype, engine):
    """A_t built and factorized at every step (sv.KLU, or the default algorithm on an HPD
    matrix, where the rules would pick CHOLMOD through a callback and KLU's flops are under
    ``loop_factorize_flops``): the FFI factorize makes every factorization (T per call, none
    by Python), the forward and the transposed solves are native with them (no fallback, no
    miss), and the backward pass frees each one after its last use: one factor is left between
    calls (the slot's, freed by the next run), none after the compiled function is dropped.
    The value and gradient equal KLU's callback path to the bit (the same KLU factors) and
    dense autodiff to 1e-12."""
    from adjoints.jax._live import STORE

    case = klu_case(dtype) if engine == "klu" else auto_case(dtype)
    p, q = case.params, rhs(case)

    def loss(p, q, dense=False):
        return jnp.sum(jnp.abs(loop_solve(case, "factorize-in-body", dense)(
            p, make_b(q, case.dtype))) ** 2)

    f = jax.jit(jax.value_and_grad(loss, (0, 1)))
    for i in range(2):   # the second call: the slot drops the first run's factor
        drain()
        got = jax.block_until_ready(f(tuple(x * (1 + 0.1 * i) for x in p), q))
        c = loop_counts()
        assert c["factorizations"] == T and c["native_calls"] == 2 * T, c
        assert c["fallbacks"] == 0 and c["loop_factors"] == 1, c
        s = adj.stats()
        assert (s.factorizations, s.misses, s.forward_solves, s.transpose_solves) == \
            (T, 0, T, T), s
        assert s.live == len(STORE.keys()) + 1, s    # the loop factor counts as live
    _native.ENABLED = False
    klu = dataclasses.replace(case, alg=sv.KLU())   # the callback of the engine that ran
    try:
        want = jax.jit(jax.value_and_grad(
            lambda p, q: jnp.sum(jnp.abs(loop_solve(klu, "factorize-in-body")(
                p, make_b(q, case.dtype))) ** 2), (0, 1)))(tuple(x * 1.1 for x in p), q)
    finally:
        _native.ENABLED = True
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(a, b)
    dense = jax.value_and_grad(lambda p, q: loss(p, q, True), (0, 1))(
        tuple(x * 1.1 for x in p), q)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(dense)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())
    slots = loop_counts()["slots"]
    del f
    jax.clear_caches()
    import gc

    gc.collect()
    c = loop_counts()
    assert c["slots"] < slots and c["loop_factors"] == 0, c


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_the_default_in_the_loop_body_keeps_the_callback_over_its_flops_limit(dtype):
    """``sv.Auto(loop_factorize_flops=0)`` on the HPD matrix: real, with CHOLMOD installed, the
    factorization stays Auto's rules' (CHOLMOD through the Python callback, T factorizations
    by Python, none native; the solves with them still native); complex, KLU is the rules'
    engine in a loop anyway, so the FFI factorize makes it. Both answer as the native KLU
    run does, to rounding."""
    case = dataclasses.replace(auto_case(dtype), alg=sv.Auto(loop_factorize_flops=0))
    p, q = case.params, rhs(case)

    def run(c):
        drain()
        out = jax.jit(jax.value_and_grad(lambda p, q: jnp.sum(jnp.abs(loop_solve(
            c, "factorize-in-body")(p, make_b(q, c.dtype))) ** 2), (0, 1)))(p, q)
        return jax.block_until_ready(out), loop_counts(), adj.stats()

    got, c, s = run(case)
    callback = np.dtype(dtype).kind == "f" and sv.cholmod_available()
    assert c["factorizations"] == (0 if callback else T), c
    assert s.factorizations == T and s.misses == 0, s
    want = run(dataclasses.replace(case, alg=sv.KLU()))[0]
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=rtol_for(dtype), atol=1e-13)


def test_auto_loop_factorize_says_why():
    """The rule at lowering: KLU where the rules would pick it in a loop (complex, or no
    CHOLMOD), else KLU's estimated flops against the limit; None off the limit, for an empty
    pattern, or over iterative_min with a posdef hint."""
    case = auto_case(np.float64)
    P = case.build(case.params).pattern
    why = sv.Auto().loop_factorize(P, np.float64)
    assert why is not None and "KLU (native factorize)" in why
    if sv.cholmod_available():
        assert "flops <= loop_factorize_flops" in why
        assert sv.Auto(loop_factorize_flops=0).loop_factorize(P, np.float64) is None
    assert sv.Auto(loop_factorize_flops=0).loop_factorize(P, np.complex128) is not None
    assert sv.Auto(iterative_min=1).loop_factorize(P, np.float64, posdef=True) is None
    empty = lo.Pattern.from_coo([], [], (3, 3))
    assert sv.Auto().loop_factorize(empty, np.float64) is None
    for bad in (-1.0, float("nan"), "5e6", True):
        with pytest.raises(ValueError, match="loop_factorize_flops must be a number >= 0"):
            sv.Auto(loop_factorize_flops=bad)


def test_a_forward_loop_keeps_one_factorization_alive_at_a_time():
    """Without a backward pass nothing comes back for a step's factorization: the slot frees it
    when it factorizes the next matrix (before factorizing), so at most one is alive inside
    the loop (read at every step by a host callback) and after it."""
    from solvers.internals import native

    case = klu_case(np.float64)
    p, q = case.params, rhs(case)
    seen = []

    def body(u, t):
        x = step_matrix_solve(case, p, t)(u + make_b(q, case.dtype))
        jax.debug.callback(lambda: seen.append(native().counts()["loop_factors"]),
                           ordered=True)
        return x, None

    run = jax.jit(lambda: jax.lax.scan(body, make_b(q, case.dtype),
                                       jnp.arange(4 * T, dtype=jnp.float64))[0])
    drain()
    jax.block_until_ready(run())
    assert loop_counts()["factorizations"] == 4 * T and max(seen) == 1, seen


def test_a_matrix_built_unchanged_at_every_step_is_factorized_once():
    """M + dt·K formed inside the step from loop constants (implicit Euler, a forward loop:
    under a gradient JAX hoists the invariant matrix out of the loop): the slot finds the
    same values bit for bit and reuses its factorization (counted in ``reuses``), as the live
    store does by values: one factorization per call."""
    case = klu_case(np.float64)
    p, q = case.params, rhs(case)
    b = make_b(q, case.dtype)

    def loss(p, dt, dense=False):
        def body(u, _):
            if dense:
                return jnp.linalg.solve(case.dense(p) * dt + jnp.eye(b.size), u + b), None
            A = case.build(p)
            eye = jnp.asarray(A.pattern.rows == A.pattern.indices, A.values.dtype)
            return adj.solve(lo.Sparse(eye + dt * A.values, A.pattern), u + b, sv.KLU()), None
        return jnp.sum(jax.lax.scan(body, b, None, length=4 * T)[0] ** 2)

    f = jax.jit(loss)
    drain()
    got = f(p, 0.3)
    c = loop_counts()
    assert c["factorizations"] == 1 and c["fallbacks"] == 0, c
    s = adj.stats()
    assert (s.factorizations, s.reuses, s.misses) == (1, 4 * T - 1, 0), s
    np.testing.assert_allclose(got, loss(p, 0.3, True), rtol=1e-12)


@pytest.mark.parametrize("alg", [sv.KLU(), None], ids=["klu", "default"])
def test_loops_of_one_program_share_a_factorization_of_the_same_values(alg):
    """One matrix, built before the loop, solved in both branches of a ``lax.cond`` in the
    body, in one jit with its value, gradient and Hessian-vector product: each branch of each
    loop factorizes on its own slot (a branch is not hoisted), and every slot after the first
    finds a factorization of the same values bit for bit in another one (the live store's
    lookup by values, done natively): one factorization per pattern (A, Aᵀ) and call (it was
    one per slot and loop), the rest counted in ``reuses``; the answers match dense
    autodiff."""
    case = klu_case(np.float64)
    p, q = case.params, rhs(case)
    b = make_b(q, case.dtype)

    def loss(p, dense=False):
        if dense:
            a = case.dense(p)
            solve = lambda r: jnp.linalg.solve(a, r)   # noqa: E731
            tsolve = lambda r: jnp.linalg.solve(a.T, r)   # noqa: E731
        else:
            A = case.build(p)
            solve = lambda r: adj.solve(A, r, alg)   # noqa: E731
            tsolve = lambda r: adj.solve(A.T, r, alg)   # noqa: E731

        def body(u, i):
            return jax.lax.cond(i % 2 == 0, lambda w: solve(w + b), lambda w: tsolve(2 * w),
                                u), None
        return jnp.sum(jax.lax.scan(body, b, jnp.arange(2 * T))[0] ** 2)

    def every(p, loss=loss):
        g = jax.grad(loss)
        return loss(p), g(p), jax.jvp(g, (p,), (p,))[1]

    f = jax.jit(every)
    for i in range(2):
        drain()
        got = jax.block_until_ready(f(tuple(x * (1 + 0.1 * i) for x in p)))
        c = loop_counts()
        assert c["factorizations"] <= 2 and c["fallbacks"] == 0, c
        s = adj.stats()   # A and Aᵀ: two patterns, one factorization each
        assert s.factorizations == 2 and s.reuses >= 4 and s.misses == 0, (s, c)
    want = every(tuple(x * 1.1 for x in p), lambda p: loss(p, True))
    for a, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, w, rtol=1e-12, atol=1e-12 * np.abs(w).max())


def test_a_compiled_function_dropped_while_its_loop_runs_keeps_its_slot():
    """``jax.jit(lambda v: ...)(v)``: the Python executable dies at once while XLA still runs
    the loop (asynchronous dispatch); its loop slot and fallbacks live with the executable's
    host callbacks, so every call answers (none fails with "its compiled module is gone")."""
    n = 2000
    S = sp.diags([np.full(n - 1, -1.0), np.full(n, 4.0), np.full(n - 1, -1.2)], [-1, 0, 1],
                 format="csr")
    K = lo.Sparse.from_scipy(sp.csr_array(S))
    b = jnp.ones(n)

    def fwd(v):
        step = lambda u, t: (adj.solve(lo.Sparse(v * (1 + 0.1 * t), K.pattern), u + b,  # noqa
                                       sv.KLU()), None)
        return jax.lax.scan(step, b, jnp.arange(30) * 1.0)[0]

    v = jnp.asarray(K.values)
    want = np.asarray(jax.jit(fwd)(v))
    for _ in range(6):
        got = jax.block_until_ready(jax.jit(lambda v: fwd(v))(v))
        np.testing.assert_allclose(got, want, rtol=1e-13)


def test_a_checkpointed_body_factorizes_again_and_keeps_no_forward_factorizations():
    """jax.checkpoint around the step: the backward loop recomputes each factorization next to
    its cotangent solve (its own slot), so the forward loop's slot keeps one factorization at
    a time (nothing comes back for them): 2T − 1 factorizations per call (the recompute of
    the last step finds the forward slot's last factorization of the same values: a reuse),
    at most one left per slot afterwards, the gradient equal to dense autodiff."""
    case = klu_case(np.float64)
    p, q = case.params, rhs(case)
    b = make_b(q, case.dtype)

    def loss(p, dense=False):
        step = jax.checkpoint(lambda u, t: step_matrix_solve(case, p, t, dense)(u + b))
        u = jax.lax.scan(lambda u, t: (step(u, t), None), b, jnp.arange(T) * 1.0)[0]
        return jnp.sum(u ** 2)

    before = loop_counts()["loop_factors"]
    drain()
    g = jax.jit(jax.grad(loss))(p)
    c = loop_counts()
    assert c["factorizations"] == 2 * T - 1 and c["fallbacks"] == 0, c
    assert adj.stats().reuses == 1, adj.stats()
    assert c["loop_factors"] <= before + 2, c
    want = jax.grad(lambda p: loss(p, True))(p)
    for a, w in zip(g, want):
        np.testing.assert_allclose(a, w, rtol=1e-11, atol=1e-12 * np.abs(w).max())


@pytest.mark.parametrize("bad", ["singular", "nan"])
def test_a_failed_factorization_in_the_loop_names_its_error_and_the_next_call_works(bad):
    """A_t singular (zero at step 2) or with a NaN at step 2: the FFI factorize hands the call
    to Python, whose KLU init raises the named error (first line); the same compiled function
    answers the next, regular, call natively, and nothing is left behind."""
    case = klu_case(np.float64)
    p, q = case.params, rhs(case)
    b = make_b(q, case.dtype)

    def run(p, c, dense=False):
        A, a = case.build(p), case.dense(p)

        def body(u, t):
            s = jnp.where(t == 2.0, c, 1.0 + 0.25 * t)
            if dense:
                return jnp.linalg.solve(a * s, u + b), None
            At = lo.Sparse(A.values * s, A.pattern)
            return adj.solve(At, u + b, sv.KLU()), None
        return jax.lax.scan(body, b, jnp.arange(T, dtype=jnp.float64))[0]

    f = jax.jit(run)
    c = 0.0 if bad == "singular" else jnp.nan
    import gc

    gc.collect()
    before = loop_counts()["loop_factors"]    # other tests' slots may hold one each
    with pytest.raises(Exception) as e:
        jax.block_until_ready(f(p, c))
    first = str(e.value).strip().splitlines()[0]
    want = "SingularMatrixError" if bad == "singular" else "NonFiniteInputError"
    assert f"solvers.{want}" in first, first
    assert loop_counts()["loop_factors"] <= before + 1   # at most the last good step's
    drain()
    got = f(p, 1.5)
    c = loop_counts()
    assert c["factorizations"] == T and c["fallbacks"] == 0 and c["loop_factors"] <= before + 1
    np.testing.assert_allclose(got, run(p, 1.5, dense=True), rtol=1e-12, atol=1e-12)


def test_a_query_or_an_escaped_factorization_keeps_the_python_factorize():
    """The FFI factorize applies only where native solves alone consume the factorization: a
    log-determinant of the same Factorization in the body, or the Factorization carried out
    of the step, keep the Python callback (no loop slot), with the same answers."""
    case = klu_case(np.float64)
    p, q = case.params, rhs(case)
    b = make_b(q, case.dtype)

    def with_logdet(p):
        A = case.build(p)

        def body(u, t):
            F = adj.factorize(lo.Sparse(A.values * (1 + 0.25 * t), A.pattern), sv.KLU())
            return F.solve(u + b), adj.slogdet(F)[1]
        return jax.lax.scan(body, b, jnp.arange(T, dtype=jnp.float64))

    def carried(p):   # each step solves with the previous step's Factorization
        A = case.build(p)

        def body(s, t):
            u, F = s
            G = adj.factorize(lo.Sparse(A.values * (1 + 0.25 * t), A.pattern), sv.KLU())
            return (F.solve(u + b), G), None
        F0 = adj.factorize(A, sv.KLU())
        return jax.lax.scan(body, (b, F0), jnp.arange(1, T + 1, dtype=jnp.float64))[0][0]

    a = np.asarray(case.dense(p))
    drain()
    u, ld = jax.jit(with_logdet)(p)
    assert loop_counts()["factorizations"] == 0 and adj.stats().factorizations == T
    want = [np.linalg.slogdet(a * (1 + 0.25 * t))[1] for t in range(T)]
    np.testing.assert_allclose(ld, want, rtol=1e-12)
    drain()
    u = jax.jit(carried)(p)
    assert loop_counts()["factorizations"] == 0 and adj.stats().factorizations == T + 1
    want = np.asarray(b)
    for t in range(T):
        want = np.linalg.solve(a * (1 + 0.25 * t), want + np.asarray(b))
    np.testing.assert_allclose(u, want, rtol=1e-12)


def test_second_order_matches_finite_differences():
    from jax.test_util import check_grads

    case = klu_case(np.complex128)
    f = jax.jit(lambda p0, p1, q0: jnp.sum(jnp.abs(loop_solve(case, "scan")(
        (p0, p1), make_b((q0, q0 * 0.5), case.dtype))) ** 2))
    q = rhs(case)[0]
    check_grads(f, (*case.params, q), order=2, modes=("fwd", "rev"), eps=1e-5, atol=1e-7,
                rtol=1e-7)


def test_vmap_over_a_batch_of_factorizations_solves_natively():
    case = klu_case(np.float64)
    p, q = case.params, rhs(case)
    scale = jnp.asarray([1.0, 1.1, 1.3])
    P = tuple(jnp.stack([x * s for s in scale]) for x in p)

    def f(p):
        return loop_solve(case, "scan")(p, make_b(q, case.dtype))

    drain()
    got = jax.jit(jax.vmap(f))(P)
    assert native_calls() > 0
    s = adj.stats()
    assert s.factorizations == 3 and s.symbolic_analyses == 1, s
    want = jax.vmap(loop_solve(case, "scan", dense=True), (0, None))(P, make_b(q, case.dtype))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_nonfinite_rhs_in_a_loop_fails_with_the_named_error():
    case = klu_case(np.float64)
    p, q = case.params, rhs(case)
    b = make_b(q, case.dtype).at[2].set(jnp.nan)
    with pytest.raises(Exception) as e:
        jax.block_until_ready(jax.jit(loop_solve(case, "scan"))(p, b))
    first = str(e.value).strip().splitlines()[0]
    assert "solvers.NonFiniteInputError" in first and "nan" in first.lower(), first


def test_a_returned_factorization_stays_alive_and_a_freed_one_refactorizes_in_a_loop():
    """A Factorization returned from jit lives as long as it is held: running the jitted
    function again does not expire it (the loop stays native, no miss). A key whose
    factorization was freed anyway is answered by the fallback, which refactorizes from the
    values the Factorization carries (one miss), with the same result."""
    from adjoints.jax._live import STORE

    K = lo.Sparse.from_scipy(sp.csr_array(np.array([[2.0, 1.0], [0.0, 4.0]])))
    make = jax.jit(lambda v: adj.factorize(lo.Sparse(v, K.pattern), sv.KLU()))
    v = jnp.asarray(K.values)
    F = make(v)
    loop = jax.jit(lambda F, u: jax.lax.scan(lambda u, _: (F.solve(u), None), u, None,
                                             length=2)[0])
    np.testing.assert_allclose(loop(F, jnp.ones(2)), [0.15625, 0.0625])
    _ = make(2 * v)                         # the jitted function ran again: F is still held
    drain()
    np.testing.assert_allclose(loop(F, jnp.ones(2)), [0.15625, 0.0625])
    assert native_calls() == 2 and adj.stats().misses == 0
    STORE.drop([int(k) for k in np.asarray(F.key).reshape(-1)])   # freed under its holder
    drain()
    np.testing.assert_allclose(loop(F, jnp.ones(2)), [0.15625, 0.0625])
    s = adj.stats()
    assert s.misses == 1 and s.factorizations == 1, s


def test_grad_of_a_jitted_loop():
    """jit inside grad: the backward pass is another module whose loop solves with the key of
    the forward module's run (no factorize of its own: the native solve applies there too)."""
    case = klu_case(np.float64)
    p, q = case.params, rhs(case)
    inner = jax.jit(lambda p, b: loop_solve(case, "scan")(p, b))
    drain()
    g = jax.grad(lambda p: jnp.sum(inner(p, make_b(q, case.dtype)) ** 2))(p)
    want = jax.grad(lambda p: jnp.sum(loop_solve(case, "scan", dense=True)(
        p, make_b(q, case.dtype)) ** 2))(p)
    for a, b in zip(g, want):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_a_supernodal_cholmod_factor_solves_natively_as_its_simplicial_copy():
    """A dense-pattern SPD matrix (n = 80: CHOLMOD's "auto" mode factorizes it supernodally,
    flops/nnz(L) ≈ 50 > 40): the native copy is converted to a simplicial LL' factor; the loop's
    value and gradient, forward and transposed solves native, match dense autodiff."""
    if not sv.cholmod_available():
        pytest.skip("scikit-sparse (CHOLMOD) is not installed")
    n = 80
    rng = np.random.default_rng(4)
    B = rng.standard_normal((n, n))
    M = B @ B.T / n + np.eye(n)
    S = lo.Sparse.from_scipy(sp.csr_array(M))
    P, f = S.pattern, jnp.asarray(rng.standard_normal(n))
    from solvers._factors.selinv import _cholmod_struct

    held = sv.init(sv.LinearProblem(S), sv.Cholesky())
    assert _cholmod_struct(held.factor.factor).is_super == 1   # the path under test

    def loss(v, dense=False):
        if dense:
            a = jnp.zeros((n, n)).at[P.rows, P.indices].set(v)
            step = lambda r: jnp.linalg.solve(a, r)   # noqa: E731
        else:
            step = adj.factorize(lo.Sparse(v, P), sv.Cholesky()).solve
        u = jax.lax.scan(lambda u, _: (step(u + f), None), f, None, length=T)[0]
        return jnp.sum(u ** 2)

    v = jnp.asarray(S.values)
    drain()
    got = jax.jit(jax.value_and_grad(loss))(v)
    assert native_calls() == 2 * T, native_calls()   # the forward and the backward loop
    want = jax.value_and_grad(lambda v: loss(v, True))(v)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-12 * np.abs(want[1]).max())


def test_a_default_factorization_made_outside_on_another_engine_solves_through_the_fallback():
    """An eager ``adj.factorize`` with the default algorithm follows Auto's rules (SuperLU for
    this nonsymmetric A): its key has no native factor, so each step of a loop that solves with
    it is answered by the fallback — the callback's function, its counters, the same values."""
    from solvers.internals import native

    case = auto_general_case(np.float64)
    p, q = case.params, rhs(case)
    b = make_b(q, case.dtype)
    F = adj.factorize(case.build(p))
    loop = jax.jit(lambda F, u: jax.lax.scan(lambda u, _: (F.solve(u + b), None), u, None,
                                             length=T)[0])
    drain()
    before = native().counts()["fallbacks"]
    got = loop(F, b)
    assert native_calls() == 0 and native().counts()["fallbacks"] - before == T
    s = adj.stats()
    assert s.forward_solves == T and s.factorizations == 0 and s.misses == 0, s
    want = jax.lax.scan(lambda u, _: (jnp.linalg.solve(case.dense(p), u + b), None), b, None,
                        length=T)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_the_callback_stays_for_other_algorithms_and_straight_solves():
    case = dataclasses.replace(make_case("sparse-LU", np.float64))
    p, q = case.params, rhs(case)
    drain()
    jax.block_until_ready(jax.jit(loop_solve(case, "scan"))(p, make_b(q, case.dtype)))
    assert native_calls() == 0                       # SuperLU: Python callback
    kcase = klu_case(np.float64)
    from adjoints.jax._live import STORE

    STORE.settle()   # what earlier runs left (the pool) is freed first
    drain()
    before = STORE.keys()
    jax.block_until_ready(jax.jit(lambda p, b: adj.solve(kcase.build(p), b, sv.KLU()))(
        p, make_b(q, kcase.dtype)))
    assert native_calls() == 0                       # straight: exact references in Python
    s = adj.stats()
    assert s.factorizations == 1 and not STORE.keys() - before  # ... freed with its last solve


# the x64-off cases (x64off_native.py) run in test_x64off.py's fresh interpreter, with
# x64off_jax.py: one interpreter and one JAX import for both


# pattern -> factorizations per call: the factor-once forms, and with sv.KLU the forms that
# factorize inside the loop body (the FFI factorize: a loop slot of the native table)
MEMORY = {"factorize": 1, "scan-unroll2": 1, "fori_loop": 1, "carried": 1}
MEMORY_IN_BODY = {"stepped-in-body": 5, "while-newton": 3}
MEMORY_CALLS = 150   # a leak of one KLU factor per call would be >= 150 MB: 3x the limit


@pytest.mark.slow
@pytest.mark.parametrize("alg", ["klu", "cholesky"])
def test_rss_stays_flat_over_150_native_calls_of_every_pattern(alg):
    """The four patterns in ONE child (one JAX import), each from its own warm-up and baseline;
    KLU's factors, and CHOLMOD's native copies (freed with the factor they copy)."""
    if alg == "cholesky" and not sv.cholmod_available():
        pytest.skip("scikit-sparse (CHOLMOD) is not installed")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    patterns = {**MEMORY, **(MEMORY_IN_BODY if alg == "klu" else {})}
    p = subprocess.run([sys.executable, str(HERE / "native_memory_child.py"), ",".join(patterns),
                        str(MEMORY_CALLS), alg], capture_output=True, text=True, timeout=600,
                       env=env, cwd=ROOT)
    got = {r["pattern"]: r for r in (json.loads(ln[2:]) for ln in p.stdout.splitlines()
                                     if ln.startswith("@@"))}
    assert p.returncode == 0 and set(got) == set(patterns), (sorted(got), p.stderr[-3000:])
    for pattern, per_call in patterns.items():
        r = got[pattern]
        assert r["native_calls"] > 0, r                 # the FFI path ran
        assert r["grown_mb"] < 50, r                    # a leak of one factor per call: 150+ MB
        assert r["misses"] == 0 and r["factorizations"] == per_call * MEMORY_CALLS, r
        # what a run leaves: one factorization of the store (an earlier pattern's, pooled),
        # and a loop slot's last one until its next run or its compiled function goes
        assert r["live"] <= 1 + (pattern in MEMORY_IN_BODY) and r["loop_factors"] <= 1, r
        assert r["native_factors"] - r["loop_factors"] <= 1, r
        assert r["aliases"] - r["loop_factors"] <= 1, r
        if pattern in MEMORY_IN_BODY:   # every factorization made by the FFI factorize
            assert r["loop_factorizations"] == per_call * MEMORY_CALLS, r


KEPT_MODULES_CHILD = """
import gc, json, os, sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np
import linops as lo, solvers as sv, adjoints.jax as adj
from solvers.internals import native

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

fam, load = lo.testing.poisson_family(100)
P, b = fam.pattern, jnp.asarray(load)
v0 = jnp.asarray(fam(np.ones(fam.n_params)).values)
kept = []

def module(i):   # a new compiled module per call, kept (as JAX's caches keep an eager one's)
    def fwd(v):
        step = lambda u, t: (adj.solve(lo.Sparse(v * (1 + 0.1 * t + 1e-3 * i), P), u + b,
                                       sv.KLU()), None)
        return jax.lax.scan(step, b, jnp.arange(2) * 1.0)[0]
    f = jax.jit(fwd)
    kept.append(f)
    jax.block_until_ready(f(v0))

for i in range(3):
    module(i)
gc.collect()
before = rss()
for i in range(3, 23):
    module(i)
gc.collect()
print("@@" + json.dumps({"grown_mb": (rss() - before) / 2**20,
                         "loop_factors": native().counts()["loop_factors"],
                         "modules": len(kept)}))
"""


@pytest.mark.slow
def test_compiled_modules_kept_but_not_run_again_keep_no_loop_factorization():
    """20 distinct compiled functions (JAX keeps an eager loop's module in its caches the same
    way), each run once, each factorizing in its loop body (n = 10 100, ~8.5 MB per KLU
    factor): a slot's last factorization used to live as long as its module (measured: +208
    MB, 23 loop factors alive); the next run frees what earlier runs left, so one is alive and
    the child grows by what JAX keeps per module (measured +39 MB)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", KEPT_MODULES_CHILD], capture_output=True,
                       text=True, timeout=600, env=env, cwd=ROOT)
    got = [json.loads(ln[2:]) for ln in p.stdout.splitlines() if ln.startswith("@@")]
    assert p.returncode == 0 and got, p.stderr[-3000:]
    r = got[0]
    assert r["modules"] == 23 and r["loop_factors"] <= 1 and r["grown_mb"] < 100, r


def test_without_the_extension_klu_is_refused_and_jax_keeps_the_callback(tmp_path):
    code = textwrap.dedent("""
        import sys, importlib.abc
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "solvers._native":
                    raise ImportError("simulated: built without SuiteSparse")
        sys.meta_path.insert(0, Block())
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp, numpy as np, scipy.sparse as sp
        import linops as lo, solvers as sv, adjoints.jax as adj
        from adjoints.jax import _native
        assert not sv.native_available() and not _native.available()
        K = lo.Sparse.from_scipy(sp.csr_array(np.array([[2.0, 1.0], [0.0, 4.0]])))
        try:
            sv.init(sv.LinearProblem(K), sv.KLU())
        except sv.BackendNotSupported as e:
            assert "libsuitesparse-dev" in str(e), e
        else:
            raise SystemExit("sv.KLU() ran without its extension")
        assert "libsuitesparse-dev" in sv.show_config()
        try:
            adj.factorize(K, sv.KLU())
        except sv.BackendNotSupported as e:
            assert "libsuitesparse-dev" in str(e), e
        else:
            raise SystemExit("adj.factorize(K, sv.KLU()) ran without its extension")
        F = adj.factorize(K, sv.LU())
        run = jax.jit(jax.grad(lambda v: jax.lax.scan(
            lambda u, _: (adj.solve(lo.Sparse(v, K.pattern), u), None), jnp.ones(2), None,
            length=2)[0].sum()))
        print("OK", run(jnp.asarray(K.values)).tolist())
    """)
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0 and "OK" in p.stdout, p.stdout + p.stderr[-3000:]


def test_a_handler_built_for_another_ffi_api_is_not_used():
    # the build's XLA FFI API against jaxlib's own: same major, minor no newer
    assert _native._same_ffi_api((0, 0))
    assert not _native._same_ffi_api((0, 999)) and not _native._same_ffi_api((99, 0))


# ----- the values' cotangent: the native SDDMM ----------------------------------------------------
def _big_pattern(monkeypatch, threshold=64):
    """A random 60×50 pattern, and the host-product threshold lowered under it (the native SDDMM
    and the host callbacks take patterns from HOST_MIN_NNZ entries)."""
    from adjoints.jax import _spmm

    monkeypatch.setattr(_spmm, "HOST_MIN_NNZ", threshold)
    A = sp.random(60, 50, density=0.2, format="csr", random_state=3)
    return lo.Sparse.from_scipy(A).pattern


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
@pytest.mark.parametrize("k", [None, 3], ids=["vector", "3-columns"])
def test_native_sddmm_equals_the_gather_and_registers_a_pattern_once(monkeypatch, dtype, k):
    from adjoints.jax import _spmm
    from solvers.internals import native

    P = _big_pattern(monkeypatch)
    rng = np.random.default_rng(0)

    def draw(m):
        x = rng.standard_normal((m,) if k is None else (m, k))
        return (x + 1j * rng.standard_normal(x.shape) if dtype == np.complex128 else x).astype(dtype)

    U, V = draw(60), draw(50)
    f = jax.jit(lambda U, V: _spmm.sddmm_p.bind(U, V, pattern=P))
    text = f.lower(U, V).as_text()
    assert "linops_sddmm" in text and "callback" not in text
    got = np.asarray(f(U, V))
    Uk, Vk = (U[:, None], V[:, None]) if k is None else (U, V)
    ref = np.sum(Uk[P.rows] * Vk[P.indices], axis=1)       # no conjugation
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-13 * np.abs(ref).max())
    held = native().counts()["patterns"]
    g = jax.jit(lambda U, V: 2.0 * _spmm.sddmm_p.bind(U, V, pattern=P))   # another module
    np.testing.assert_allclose(np.asarray(g(U, V)), 2 * ref, rtol=0, atol=2e-13 * np.abs(ref).max())
    assert native().counts()["patterns"] == held             # one entry per pattern content


def test_a_dropped_function_s_running_computation_still_finds_its_pattern(monkeypatch):
    """``out = jax.jit(f)(x)`` and the function dropped (and the caches cleared, and collected)
    before the result is read: JAX runs asynchronously, so the computation reaches the SDDMM
    after its Python executable is gone (six 1500×1500 products first); the pattern must still
    be there (the first version freed it with the executable: an INTERNAL error here)."""
    import gc

    from adjoints.jax import _spmm

    monkeypatch.setattr(_spmm, "HOST_MIN_NNZ", 64)
    n = 1500
    P = lo.Sparse.from_scipy(sp.random(n, n, density=0.01, format="csr", random_state=0)).pattern
    rng = np.random.default_rng(1)
    W = jnp.asarray(rng.standard_normal((n, n)) / np.sqrt(n))
    U, V = jnp.asarray(rng.standard_normal((n, 8))), jnp.asarray(rng.standard_normal((n, 8)))
    Uw = np.asarray(U)
    for _ in range(6):
        Uw = np.tanh(np.asarray(W) @ Uw)
    ref = np.sum(Uw[P.rows] * np.asarray(V)[P.indices], axis=1)
    for _ in range(3):
        def slow_then_sample(U, V):
            for _ in range(6):          # work before the SDDMM: the call returns first
                U = jnp.tanh(W @ U)
            return _spmm.sddmm_p.bind(U, V, pattern=P)

        out = jax.jit(slow_then_sample)(U, V)
        del slow_then_sample
        jax.clear_caches()
        gc.collect()
        np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-10, atol=1e-12)


def test_patterns_over_the_byte_cap_keep_the_host_callback(monkeypatch):
    from adjoints.jax import _spmm

    P = lo.Sparse.from_scipy(sp.random(70, 40, density=0.3, format="csr", random_state=9)).pattern
    monkeypatch.setattr(_spmm, "HOST_MIN_NNZ", 64)
    monkeypatch.setattr(_native, "PATTERN_BYTES_MAX", 0)
    U, V = np.ones(70), np.ones(40)
    text = jax.jit(lambda U, V: _spmm.sddmm_p.bind(U, V, pattern=P)).lower(U, V).as_text()
    assert "linops_sddmm" not in text and "callback" in text


def test_mixed_dtypes_keep_the_host_callback(monkeypatch):
    """float64 U with complex128 V (result complex): not the native handler's case."""
    from adjoints.jax import _spmm

    P = _big_pattern(monkeypatch)
    U, V = np.ones(60), np.ones(50, np.complex128)
    text = jax.jit(lambda U, V: _spmm.sddmm_p.bind(U, V, pattern=P)).lower(U, V).as_text()
    assert "linops_sddmm" not in text and "callback" in text


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_a_loops_values_cotangent_runs_natively_and_matches_the_callback_path(monkeypatch, dtype):
    """grad through a scan of native solves, with the pattern above the host threshold: every
    step's values cotangent is the FFI SDDMM (no Python callback for it in the module), and
    the gradients equal the all-callback path's (itself compared with dense autodiff above) to
    rounding: the same products in another order."""
    case = klu_case(dtype)
    monkeypatch.setattr("adjoints.jax._spmm.HOST_MIN_NNZ", 1)
    p, b = case.params, make_b(rhs(case), dtype)
    loss = lambda p: jnp.sum(jnp.abs(loop_solve(case, "scan")(p, b)) ** 2)   # noqa: E731
    g = jax.jit(jax.grad(loss))
    text = g.lower(p).as_text()
    assert "linops_sddmm" in text and "linops_klu_solve" in text
    native_grad = g(p)
    monkeypatch.setattr(_native, "ENABLED", False)
    callback = jax.jit(jax.grad(loss))
    assert "linops_sddmm" not in callback.lower(p).as_text()
    for got, ref in zip(jax.tree.leaves(native_grad), jax.tree.leaves(callback(p))):
        ref = np.asarray(ref)
        np.testing.assert_allclose(np.asarray(got), ref, rtol=0, atol=1e-12 * np.abs(ref).max())
