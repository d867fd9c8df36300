"""Oracle: the JAX front end (adjoints.jax) under every loop form and to second order, against
the same program written in dense jax.numpy (jnp.linalg.solve / slogdet, whose derivatives JAX
has), over the corpus of hard matrices (tests/_cases/corpus.py).

One program per matrix: the values v of A's stored entries are the input; each loop form
(scan, fori_loop, while_loop, cond, switch, lax.map, a Python loop, vmap, a Factorization
used by A and Aᵀ solves inside a scan, log|det A|, a scan whose body builds and factorizes
its own A_t with sv.KLU()) gives a real loss; the gradient and a
Hessian-vector product (``jvp`` of ``grad``) of every form are computed in ONE jitted module
(one compilation per matrix) and compared with the same function written in dense jnp without
loops. Every form runs on two matrices (a pivoting real one, a complex symmetric one); the
others (explicit zeros, cond 1e8, a saddle point, n = 1 negative, complex64) run the core
forms: a scan whose cond alternates A and Aᵀ solves, log det, and the KLU factorization in
the loop body (the FFI factorize). The tolerance follows the
precision and the matrix's condition number (a missing conjugate or transpose is O(1) off).
Singular corpus entries are not differentiable and are left to the named-error tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adjoints.jax as adj
import linops as lo
import solvers as sv
from tests._cases.corpus import CORPUS

T = 2   # steps of every loop: u ← A⁻¹(u + b)
NAMES = ("needs-pivoting", "complex-symmetric", "explicit-zeros-spd", "spd-cond-1e8",
         "saddle-point", "n1-negative", "hpd-complex64")
FORMS = ("scan", "fori", "while", "cond", "switch", "map", "python", "vmap", "factorize",
         "logdet", "klu-body", "auto-body")


def _tol(mat) -> float:
    eps = float(np.finfo(mat.dtype).eps)
    return max(1e-12, 50 * eps * mat.cond)


FULL = ("needs-pivoting", "complex-symmetric")   # every loop form; the others: CORE
# a scan alternating A and Aᵀ solves, log det, and a scan whose body builds and factorizes
# its own A_t with sv.KLU() or the default algorithm (the FFI factorize where
# Auto.loop_factorize picks KLU: a step that never enters Python)
CORE = ("cond", "logdet", "klu-body", "auto-body")
# the dense reference of each form, written without loops (T steps unrolled): the loop forms
# compute the same function, so they share one dense program
REFERENCE = {"scan": "chain", "fori": "chain", "while": "chain", "python": "chain",
             "cond": "alternate", "switch": "alternate", "map": "batch", "vmap": "batch",
             "factorize": "both", "logdet": "logdet", "klu-body": "stepped",
             "auto-body": "stepped"}
SCALES = (1.0, 1.5)   # the two matrices of map and vmap: A(v·s)
STEP = 0.25           # klu-body, auto-body: A_t = (1 + STEP·t)·A at step t


def _setting(mat):
    S = mat.sparse()
    P = lo.Sparse.from_scipy(S).pattern
    b = jnp.asarray(np.linspace(1.0, 2.0, mat.n) * (1 - 0.5j if mat.dtype.kind == "c" else 1),
                    dtype=mat.dtype)
    return S, P, b


def _loss(u):
    return jnp.sum(jnp.abs(u) ** 2)


def _sparse_programs(mat, forms):
    """form -> loss(v) with adjoints.jax: the loop forms."""
    _, P, b = _setting(mat)
    scales = lambda v: jnp.asarray(SCALES, v.real.dtype)  # noqa: E731

    def A_of(v):
        return lo.Sparse(v, P)

    def step(A):
        return lambda u: adj.solve(A, u + b)

    def scan(v):
        s = step(A_of(v))
        return _loss(jax.lax.scan(lambda u, _: (s(u), None), b, None, length=T)[0])

    def fori(v):
        s = step(A_of(v))
        return _loss(jax.lax.fori_loop(0, T, lambda i, u: s(u), b))

    def while_(v):
        s = step(A_of(v))
        return _loss(jax.lax.while_loop(lambda c: c[0] < T, lambda c: (c[0] + 1, s(c[1])),
                                        (0, b))[1])

    def cond(v):
        A = A_of(v)
        return _loss(jax.lax.scan(lambda u, i: (jax.lax.cond(
            i % 2 == 0, lambda w: adj.solve(A, w + b), lambda w: adj.solve(A.T, w), u), None),
            b, jnp.arange(T))[0])

    def switch(v):
        A = A_of(v)
        branches = [lambda w: w, lambda w: adj.solve(A, w + b), lambda w: adj.solve(A.T, w)]
        return _loss(jax.lax.scan(lambda u, i: (jax.lax.switch(1 + i % 2, branches, u), None),
                                  b, jnp.arange(T))[0])

    def map_(v):   # one matrix per lax.map step
        return jnp.sum(jax.lax.map(lambda s: _loss(adj.solve(A_of(v * s), b)), scales(v)))

    def python(v):
        A, u = A_of(v), b
        for _ in range(T):
            u = adj.solve(A, u + b)
        return _loss(u)

    def vmap(v):
        return jnp.sum(jax.vmap(lambda s: _loss(adj.solve(A_of(v * s), b)))(scales(v)))

    def factorize(v):   # a Factorization used by A and Aᵀ solves inside a scan
        F = adj.factorize(A_of(v))
        return _loss(jax.lax.scan(lambda u, _: (F.solve_transpose(F.solve(u + b)), None), b,
                                  None, length=T)[0])

    def logdet(v):
        return adj.slogdet(A_of(v))[1]

    def stepped(alg):   # a Newton-like step: A_t built and factorized inside the body
        def loss(v):
            def body(u, t):
                return adj.solve(A_of(v * (1 + STEP * t).astype(v.dtype)), u + b, alg), None
            return _loss(jax.lax.scan(body, b, jnp.arange(T) * 1.0)[0])
        return loss

    fns = {"scan": scan, "fori": fori, "while": while_, "cond": cond, "switch": switch,
           "map": map_, "python": python, "vmap": vmap, "factorize": factorize,
           "logdet": logdet, "klu-body": stepped(sv.KLU()), "auto-body": stepped(None)}
    return {k: fns[k] for k in forms}


def _dense_programs(mat, kinds):
    """kind -> loss(v) in dense jnp, straight-line (the reference)."""
    S, P, b = _setting(mat)
    rows, cols, n = jnp.asarray(P.rows), jnp.asarray(P.indices), mat.n

    def A_of(v):
        return jnp.zeros((n, n), v.dtype).at[rows, cols].set(v)

    def chain(v):
        A, u = A_of(v), b
        for _ in range(T):
            u = jnp.linalg.solve(A, u + b)
        return _loss(u)

    def alternate(v):
        A, u = A_of(v), b
        for i in range(T):
            u = jnp.linalg.solve(A, u + b) if i % 2 == 0 else jnp.linalg.solve(A.T, u)
        return _loss(u)

    def batch(v):
        return sum(_loss(jnp.linalg.solve(A_of(v * s), b)) for s in SCALES)

    def both(v):
        A, u = A_of(v), b
        for _ in range(T):
            u = jnp.linalg.solve(A.T, jnp.linalg.solve(A, u + b))
        return _loss(u)

    def logdet(v):
        return jnp.linalg.slogdet(A_of(v))[1]

    def stepped(v):
        u = b
        for t in range(T):
            u = jnp.linalg.solve(A_of(v * (1 + STEP * t)), u + b)
        return _loss(u)

    fns = {"chain": chain, "alternate": alternate, "batch": batch, "both": both,
           "logdet": logdet, "stepped": stepped}
    return {k: fns[k] for k in kinds}


def _derivatives(mat, fns):
    """{name: (loss, grad, hvp)} at the corpus values, one jitted module (while_loop: the
    first and second directional derivatives along dv, forward mode — no reverse mode through
    while_loop — so its reference is taken the same way)."""
    S = mat.sparse()
    v = jnp.asarray(S.data)
    dv = jnp.asarray(np.cos(np.arange(v.size) + 1.0) * np.abs(S.data).max() * 0.1,
                     dtype=mat.dtype)

    def everything(v):
        out = {}
        for name, f in fns.items():
            if name.startswith("while"):
                d1 = lambda x, f=f: jax.jvp(f, (x,), (dv,))[1]  # noqa: E731
                out[name] = (f(v), d1(v), jax.jvp(d1, (v,), (dv,))[1])
                continue
            g = jax.grad(f)
            out[name] = (f(v), g(v), jax.jvp(g, (v,), (dv,))[1])
        return out

    compiled = jax.jit(everything).lower(v).compile(
        compiler_options={"xla_backend_optimization_level": 0})   # tiny: compiling dominates
    return jax.tree.map(np.asarray, compiled(v))


@pytest.mark.parametrize("name", NAMES)
def test_loop_forms_first_and_second_order_against_dense_jax(name):
    mat = CORPUS[name]
    forms = FORMS if name in FULL else CORE
    adj.reset_stats()
    got = _derivatives(mat, _sparse_programs(mat, forms))
    s = adj.stats()
    assert s.misses == 0, s
    # one factorization per distinct matrix of a form (map and vmap: two each), however many
    # solves, tangents and second-order terms use it; the loop forms' one is made for native
    # loop solves (CHOLMOD for a real HPD A where installed, else KLU: no selected inversion),
    # so log det of the same values makes its own where that is KLU
    native_klu = not (mat.posdef and mat.dtype.kind == "f" and sv.cholmod_available())
    # klu-body, auto-body: T matrices, factorized by the FFI factorize once per loop that runs
    # them (the value's, the gradient's forward loop, the Hessian-vector product's: it does not
    # look for another loop's factorization of the same values, as the store does)
    extra = int("logdet" in forms and native_klu) + (3 * T - 1) * sum(
        f in ("klu-body", "auto-body") for f in forms)
    assert s.factorizations <= len(forms) + 2 * sum(f in ("map", "vmap") for f in forms) \
        + extra, s
    kinds = {REFERENCE[f] for f in forms}
    dense = {k: f for k, f in _dense_programs(mat, kinds).items()}
    if "while" in forms:
        dense["while-chain"] = dense["chain"]
    want = _derivatives(mat, dense)
    tol = _tol(mat)
    for form in forms:
        ref = want["while-chain" if form == "while" else REFERENCE[form]]
        for what, a, b in zip(("value", "first", "second"), got[form], ref):
            scale = max(float(np.max(np.abs(b))), 1e-300)
            err = float(np.max(np.abs(a - b))) / scale
            assert err <= tol, f"{name} {form} {what}: relative error {err:.2e} > {tol:.1e}"
