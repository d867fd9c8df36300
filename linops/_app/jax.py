"""adjoints.jax against jax.experimental.sparse and against the numpy path.

    python -m linops bench jax                 # n = 160 400 and 640 800 (nx = 400, 800)
    python -m linops bench jax --sizes 100     # quick
    (also: python benchmarks/jax_bench.py ...)

Problem: f(θ) = aᵀK(θ)⁻¹b for the heat-conduction family ``lo.testing.poisson_family(nx)``
(n = nx(nx+1) unknowns, one θ per cell). Rows:

* ``numpy path``: sv.solve (Auto, posdef → CHOLMOD) + ad.solve_pullback + fam.pullback.
* ``adj jit value_and_grad``: jax.jit(jax.value_and_grad(f)) with f through adj.solve(posdef=True).
* ``spsolve + grad``: the same f through jax.experimental.sparse.linalg.spsolve, jitted
  (scipy's spsolve on the host: a fresh SuperLU factorization per solve, two per gradient).
* ``fam numpy`` / ``fam jit``: assembling K(θ)'s values (numpy θ / jax.jit).
* ``hvp jit``: Hessian-vector products ∇²f(θ)·v through the sparse solve (forward-over-reverse),
  one factorization each; reported as products per second.

``--section loops``: the heat equation u_{t+1} = A⁻¹(u_t + f), A = I + Δt·K(θ),
``--steps`` implicit steps (default 50), loss ‖u_T − g‖², gradient w.r.t. θ and f:

* ``heat numpy``: sv.init once, the forward loop, the reverse loop with solve_adjoint, ∂A kept
  lazy (lo.LowRank) and pulled back by fam.pullback — the numpy path.
* ``heat scipy hand``: a hand-written scipy adjoint (one splu, trans='T', θ̄ = Mᵀ(...)).
* ``heat scan`` / ``heat fori`` / ``heat factorize``: jax.jit(jax.value_and_grad) of the loop
  written with lax.scan, lax.fori_loop, or adj.factorize + scan.
* ``vmap32`` / ``32 separate``: one jitted vmap solve over 32 value sets of one pattern
  against 32 separate sv.init + solve (symbolic analyses counted).
* ``jacrev``: jax.jit(jax.jacrev) of u = A⁻¹b w.r.t. b (host solve calls counted).
* peers at the ``solve`` section's problem (f = aᵀK(θ)⁻¹b, jit(value_and_grad)): ``klujax``
  (klujax.solve), ``splineax KLU`` (splineax.linear_solve with its KLU), against
  ``adj jit value_and_grad`` (LU, the same kind of factorization as KLU) and ``adj cholesky``.

Each (method, size) runs in a fresh subprocess so that its peak RSS is its own. Memory: the
increase of the peak resident set over the state after building the problem, for the first call
(JIT compilation included) and for a warm call (the peak is reset through /proc/self/clear_refs).
Time: the best of three warm calls (one when a call takes over 30 s).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import linops as lo

from . import docs, jax_native
from .child import hwm, in_child, positive, reset_peak, rss_now
from .legends import JAX_BASE, legend
from .report import markdown_table as table
from .report import publish

METHODS = ["numpy path", "adj jit value_and_grad", "spsolve + grad", "fam numpy", "fam jit",
           "hvp jit"]
LOOP_METHODS = ["heat numpy", "heat scipy hand", "heat scan", "heat fori", "heat factorize"]
BATCH_METHODS = ["vmap32", "32 separate", "jacrev"]
PEER_METHODS = ["adj lu", "adj cholesky", "klujax", "splineax KLU"]
NATIVE_METHODS = jax_native.METHODS   # --section native's rows ("adj.factorize KLU", ...)
NEWTON_METHODS = jax_native.NEWTON    # --section native's Newton-style rows (by --methods only)
# --section base: the base install (neither CHOLMOD nor PARDISO importable in the children)
BASE_METHODS = ["adj auto", "klujax", "splineax KLU", "spsolve + grad"]
BLOCKED = ("sksparse", "pypardiso")   # what the base install lacks
STEPS = 50


# ----- one measurement (child process) -----------------------------------------------------------

def _problem(nx: int):
    """(fam, b, θ, a) of the solve section: the Q4 family at nx (n = nx(nx+1)), a load b, θ in
    [0.5, 1.5) per cell and a random a (the value is aᵀK(θ)⁻¹b). Seeded: every child process
    builds the same problem."""
    fam, b = lo.testing.poisson_family(nx)
    rng = np.random.default_rng(0)
    return fam, b, 0.5 + rng.random(fam.n_params), rng.standard_normal(fam.shape[0])


def _numpy_path(fam, b, theta, a):
    """The reference row: ``sv.solve`` (Auto, posdef → CHOLMOD or PARDISO) + one adjoint solve
    (``ad.solve_pullback``) + ``fam.pullback`` of the lazy −λuᵀ, O(nnz). Returns (run, extra):
    ``run()`` computes value and θ-gradient; ``extra`` reads the factorization count."""
    # the solve stack only in the children of the rows that measure it
    import solvers as sv
    import adjoints as ad

    def run():
        sol = sv.solve(sv.LinearProblem(fam(theta), b, posdef=True))
        g = ad.solve_pullback(sol, a)
        return a @ sol.u, fam.pullback(g.A), sol.stats.factorizations
    return run, lambda r: {"factorizations": r[2]}


def _jax_setup():
    """(jax, jax.numpy) with x64 on: the bench compares float64 results."""
    # optional: jax (the jax extra)
    import jax

    jax.config.update("jax_enable_x64", True)
    # optional: jax (the jax extra)
    import jax.numpy as jnp

    return jax, jnp


def _adj(fam, b, theta, a):
    """``jax.jit(jax.value_and_grad(f))`` with f through ``adj.solve``: one host factorization
    per call, shared by the forward and the transposed solve (counted by ``adj.stats``)."""
    jax, jnp = _jax_setup()
    # the solve stack only in the children of the rows that measure it
    import adjoints.jax as adj

    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)
    vg = jax.jit(jax.value_and_grad(lambda th: jnp.dot(aj, adj.solve(fam(th), bj, posdef=True))))

    def run():
        adj.reset_stats()
        v, g = vg(tj)
        g.block_until_ready()
        return v, g, adj.stats()
    return run, lambda r: {"factorizations": r[2].factorizations, "live_after": r[2].live}


def _spsolve(fam, b, theta, a):
    """The JAX peer: ``jax.experimental.sparse.linalg.spsolve`` under jit(value_and_grad); it
    factorizes on the host for every solve, so twice per gradient."""
    jax, jnp = _jax_setup()
    # optional: jax (the jax extra)
    from jax.experimental.sparse.linalg import spsolve

    P = fam.pattern
    ind, ptr = jnp.asarray(P.indices, jnp.int32), jnp.asarray(P.indptr, jnp.int32)
    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)
    vg = jax.jit(jax.value_and_grad(lambda th: jnp.dot(aj, spsolve(fam(th).values, ind, ptr, bj))))

    def run():
        v, g = vg(tj)
        return v, g.block_until_ready()
    return run, lambda r: {"factorizations": 2}


def _fam_numpy(fam, b, theta, a):
    """Assembling K(θ)'s values with a numpy θ (one product with the family's map)."""
    return (lambda: fam(theta).values), lambda r: {}


def _fam_jit(fam, b, theta, a):
    """Assembling K(θ)'s values under jax.jit (the host-constant map as one linear primitive)."""
    jax, jnp = _jax_setup()
    f = jax.jit(lambda th: fam(th).values)
    tj = jnp.asarray(theta)
    return (lambda: f(tj).block_until_ready()), lambda r: {}


def _hvp(fam, b, theta, a):
    """Hessian-vector products ∇²f(θ)·v (forward over reverse) through ``adj.solve``: one
    factorization per product, every tangent and cotangent solve on it."""
    jax, jnp = _jax_setup()
    # the solve stack only in the children of the rows that measure it
    import adjoints.jax as adj

    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)
    f = lambda th: jnp.dot(aj, adj.solve(fam(th), bj, posdef=True))
    v = jnp.asarray(__import__("numpy").random.default_rng(1).standard_normal(theta.shape))
    hvp = jax.jit(lambda th, v: jax.jvp(jax.grad(f), (th,), (v,))[1])

    def run():
        adj.reset_stats()
        out = hvp(tj, v).block_until_ready()
        return out, adj.stats()
    return run, lambda r: {"factorizations": r[1].factorizations, "live_after": r[1].live}


# ----- --section loops: time loops, batches, peers ----------------------------------------------
DT = 0.05


def _heat(nx: int):
    """(fam, eye values, f, g, θ) of the heat problem with n = nx·nx unknowns (ny = nx − 1)."""
    fam, load = lo.testing.poisson_family(nx, nx - 1)
    P = fam.pattern
    eye = (P.rows == P.indices).astype(float)
    rng = np.random.default_rng(0)
    return fam, eye, load, rng.standard_normal(fam.shape[0]), 0.5 + rng.random(fam.n_params)


def _heat_numpy(nx, steps):
    """The numpy path of the heat loop: ``sv.init`` once, ``steps`` forward solves, ``steps``
    adjoint solves on the same factors, ∂A kept lazy as one ``lo.LowRank(−Λ, U)`` and contracted
    by ``fam.pullback`` once — the reverse time loop a user writes by hand."""
    # the solve stack only in the children of the rows that measure it
    import solvers as sv

    fam, eye, f, g, theta = _heat(nx)
    P = fam.pattern

    def run():
        """(loss, θ-gradient, f-gradient, factorizations) of one forward and reverse loop."""
        cache = sv.init(sv.LinearProblem(lo.Sparse(eye + DT * fam(theta).values, P), posdef=True))
        us = [np.zeros(P.shape[0])]
        for _ in range(steps):
            us.append(cache.solve(us[-1] + f))
        ubar = 2 * (us[-1] - g)
        lams, fbar = [], np.zeros_like(f)
        for _ in range(steps):
            lam = cache.solve_adjoint(ubar)
            lams.append(lam)
            fbar += lam
            ubar = lam
        G = lo.LowRank(-np.stack(lams[::-1], 1), np.stack(us[1:], 1))
        return np.sum((us[-1] - g) ** 2), DT * fam.pullback(G), fbar, cache.stats.factorizations
    return run, lambda r: {"factorizations": r[3]}


def _heat_scipy(nx, steps):
    """A hand-written scipy adjoint of the heat loop: one ``splu``, ``trans='T'`` solves, the
    gradient on the stored entries accumulated per step and mapped to θ by Mᵀ (what linops is
    compared with)."""
    fam, eye, f, g, theta = _heat(nx)
    P = fam.pattern
    M = fam.M.to_scipy()
    rows, cols = P.rows, P.indices

    def run():
        """(loss, θ-gradient, f-gradient): one splu, the loop forward, then backward with
        ``trans='T'`` on the same factors, ∂A accumulated on the stored entries."""
        A = sp.csr_array((eye + DT * (M @ theta), P.indices, P.indptr), shape=P.shape)
        lu = spl.splu(A.tocsc())
        us = [np.zeros(P.shape[0])]
        for _ in range(steps):
            us.append(lu.solve(us[-1] + f))
        ubar = 2 * (us[-1] - g)
        abar = np.zeros(P.nnz)
        fbar = np.zeros_like(f)
        for t in range(steps, 0, -1):
            lam = lu.solve(ubar, trans="T")
            fbar += lam
            abar -= lam[rows] * us[t][cols]
            ubar = lam
        return np.sum((us[-1] - g) ** 2), DT * (M.T @ abar), fbar
    return run, lambda r: {"factorizations": 1}


def _heat_jax(form):
    """A builder for the heat loop written the JAX way — ``form`` 'scan', 'fori' (lax.fori_loop)
    or 'factorize' (adj.factorize outside a scan) — under jit(value_and_grad) w.r.t. θ and f.
    Each call perturbs θ, so every call factorizes its own matrix (counted: 1 per call)."""
    def build(nx, steps):
        """(run, extra) for grid side ``nx`` and ``steps`` steps: ``run()`` one jitted
        value-and-gradient call at a new θ, ``extra`` the factorization and solve counts."""
        jax, jnp = _jax_setup()
        # the solve stack only in the children of the rows that measure it
        import adjoints.jax as adj

        fam, eye, f, g, theta = _heat(nx)
        P = fam.pattern
        eyej, fj, gj = jnp.asarray(eye), jnp.asarray(f), jnp.asarray(g)
        n = P.shape[0]

        def loss(th, f):
            A = lo.Sparse(eyej + DT * fam(th).values, P)
            u0 = jnp.zeros(n)
            if form == "scan":
                u = jax.lax.scan(lambda u, _: (adj.solve(A, u + f, posdef=True), None), u0,
                                 None, length=steps)[0]
            elif form == "fori":
                u = jax.lax.fori_loop(0, steps, lambda i, u: adj.solve(A, u + f, posdef=True), u0)
            else:
                F = adj.factorize(A, posdef=True)
                u = jax.lax.scan(lambda u, _: (F.solve(u + f), None), u0, None, length=steps)[0]
            return jnp.sum((u - gj) ** 2)

        vg = jax.jit(jax.value_and_grad(loss, (0, 1)))
        tj = jnp.asarray(theta)
        calls = [0]

        def run():   # θ changes slightly at every call: each call factorizes its own matrix
            adj.reset_stats()
            calls[0] += 1
            v, gr = vg(tj * (1 + 1e-9 * calls[0]), fj)
            jax.block_until_ready(gr)
            return v, gr, adj.stats()
        return run, lambda r: {"factorizations": r[2].factorizations,
                               "misses": r[2].misses, "live_after": r[2].live}
    return build


def _vmap32(nx, steps):
    """One jitted ``vmap`` of ``adj.solve`` (Auto) over 32 value sets of one pattern: 32 numeric
    factorizations on one symbolic analysis (``sv.init(like=)``; PARDISO keeps them in slots of
    one handle), counted."""
    jax, jnp = _jax_setup()

    # the solve stack only in the children of the rows that measure it
    import adjoints.jax as adj

    fam, b = lo.testing.poisson_family(nx)
    rng = np.random.default_rng(0)
    thetas = jnp.asarray(0.5 + rng.random((32, fam.n_params)))
    bj = jnp.asarray(b)
    fn = jax.jit(jax.vmap(lambda th: adj.solve(fam(th), bj)))    # Auto, as a user writes it

    def run():
        adj.reset_stats()
        jax.block_until_ready(fn(thetas))
        return adj.stats()
    return run, lambda s: {"factorizations": s.factorizations,
                           "symbolic_analyses": s.symbolic_analyses}


def _separate32(nx, steps):
    """32 separate ``sv.init`` (Auto) + solve of the same 32 value sets (32 analyses): the
    baseline of ``vmap32`` (target: vmap32 ≤ 0.8× this)."""
    # the solve stack only in the children of the rows that measure it
    import solvers as sv

    fam, b = lo.testing.poisson_family(nx)
    rng = np.random.default_rng(0)
    thetas = 0.5 + rng.random((32, fam.n_params))

    def run():
        n = 0
        for th in thetas:
            c = sv.init(sv.LinearProblem(fam(th)))      # Auto: the same algorithm as vmap32
            c.solve(b)
            n += c.stats.factorizations
        return n
    return run, lambda n: {"factorizations": n, "symbolic_analyses": n}


def _jacrev(nx, steps):
    """``jax.jit(jax.jacrev)`` of u = A⁻¹b w.r.t. b: one factorization and one multi-column
    transposed solve (the host solve calls are counted)."""
    jax, jnp = _jax_setup()

    # the solve stack only in the children of the rows that measure it
    import adjoints.jax as adj

    fam, b = lo.testing.poisson_family(nx)
    A = fam(jnp.asarray(0.5 + np.random.default_rng(0).random(fam.n_params)))
    J = jax.jit(jax.jacrev(lambda b: adj.solve(A, b, posdef=True)))
    bj = jnp.asarray(b)

    def run():
        adj.reset_stats()
        jax.block_until_ready(J(bj))
        return adj.stats()
    return run, lambda s: {"factorizations": s.factorizations,
                           "solve_calls": s.forward_solves + s.transpose_solves}


def _adj_alg(alg, posdef=None):
    """A builder for ``jit(value_and_grad)`` of aᵀK(θ)⁻¹b through ``adj.solve`` with ``alg``
    ('lu', 'cholesky'; None: sv.Auto with the ``posdef`` hint): the linops rows of the peer
    comparison, θ perturbed per call."""
    def build(nx, steps):
        """(run, extra) for grid side ``nx`` (``steps`` is unused: one solve per call):
        ``run()`` one jitted value-and-gradient call at a new θ, ``extra`` its counts."""
        jax, jnp = _jax_setup()
        # the solve stack only in the children of the rows that measure it
        import adjoints.jax as adj

        fam, b, theta, a = _problem(nx)
        aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)
        vg = jax.jit(jax.value_and_grad(
            lambda th: jnp.dot(aj, adj.solve(fam(th), bj, alg, posdef=posdef))))

        calls = [0]

        def run():   # a new θ at every call (no method may reuse an earlier factorization)
            adj.reset_stats()
            calls[0] += 1
            v, g = vg(tj * (1 + 1e-9 * calls[0]))
            g.block_until_ready()
            return v, g, adj.stats()
        return run, lambda r: {"factorizations": r[2].factorizations}
    return build


def _fresh_theta_runner(vg, tj):
    """``run()`` calling the jitted ``vg`` at a slightly new θ each time (no call may reuse an
    earlier call's factorization), returning (value, gradient) once computed."""
    calls = [0]

    def run():
        calls[0] += 1
        v, g = vg(tj * (1 + 1e-9 * calls[0]))
        return v, g.block_until_ready()
    return run


def _klujax(nx, steps):
    """The peer klujax (``klujax.solve`` on COO indices) under jit(value_and_grad): KLU
    factorizes for the solve and again for its transpose (2 per gradient)."""
    jax, jnp = _jax_setup()
    # optional: klujax, a peer (the bench extra)
    import klujax

    fam, b, theta, a = _problem(nx)
    P = fam.pattern
    Ai, Aj = jnp.asarray(P.rows, jnp.int32), jnp.asarray(P.indices, jnp.int32)
    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)
    vg = jax.jit(jax.value_and_grad(
        lambda th: jnp.dot(aj, klujax.solve(Ai, Aj, fam(th).values, bj))))
    run = _fresh_theta_runner(vg, tj)
    return run, lambda r: {"factorizations": 2}


def _splineax(nx, steps):
    """The peer splineax (lineax + KLU): ``linear_solve`` with its KLU solver, which reuses its
    factorization for the transposed solve (1 per gradient)."""
    jax, jnp = _jax_setup()
    # optional: jax (the jax extra)
    from jax.experimental import sparse as jsp
    import splineax

    fam, b, theta, a = _problem(nx)
    P = fam.pattern
    ind = jnp.stack([jnp.asarray(P.rows, jnp.int32), jnp.asarray(P.indices, jnp.int32)], 1)
    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)

    def f(th):
        op = splineax.BCOOLinearOperator(jsp.BCOO((fam(th).values, ind), shape=P.shape))
        u, _ = splineax.linear_solve(op, bj, splineax.KLU())
        return jnp.dot(aj, u.value if hasattr(u, "value") else u)

    vg = jax.jit(jax.value_and_grad(f))
    run = _fresh_theta_runner(vg, tj)
    return run, lambda r: {"factorizations": 1}


_BUILD = {"numpy path": _numpy_path, "adj jit value_and_grad": _adj, "spsolve + grad": _spsolve,
          "fam numpy": _fam_numpy, "fam jit": _fam_jit, "hvp jit": _hvp}
_BUILD2 = {"heat numpy": _heat_numpy, "heat scipy hand": _heat_scipy,
           "heat scan": _heat_jax("scan"), "heat fori": _heat_jax("fori"),
           "heat factorize": _heat_jax("factorize"), "vmap32": _vmap32,
           "32 separate": _separate32, "jacrev": _jacrev, "adj lu": _adj_alg("lu"),
           "adj cholesky": _adj_alg("cholesky"), "klujax": _klujax, "splineax KLU": _splineax,
           "adj auto": _adj_alg(None, posdef=True)}


def run_one(method: str, nx: int, steps: int = STEPS, base: bool = False) -> dict:
    """One measurement in this (child) process: build ``method`` at ``nx``, call it once (the
    first call, compilation included) and then warm, recording wall/CPU time and the peak RSS
    increase of each; returns the row as a dict (``skipped`` with the reason when it cannot
    run). ``base``: as on the base install — :data:`BLOCKED` cannot be imported in this process
    (set before solvers is), so sv.Auto, adjoints.jax and the peers see neither CHOLMOD nor
    PARDISO."""
    if base:
        for name in BLOCKED:
            sys.modules[name] = None      # "import sksparse" raises ImportError from now on
    if method in _BUILD2:
        run, extra = _BUILD2[method](nx, steps)
        fam = _heat(nx)[0] if method.startswith("heat") else _problem(nx)[0]
    else:
        fam, b, theta, a = _problem(nx)
        run, extra = _BUILD[method](fam, b, theta, a)
    out = {"method": method, "n": fam.shape[0], "nnz": fam.pattern.nnz}
    before = rss_now()
    reset_peak()
    t = time.perf_counter()
    res = run()
    first = time.perf_counter() - t
    out["first_call_s"] = first
    out["peak_first_mb"] = max(hwm() - before, 0) / 2**20
    times = []
    for _ in range(3):
        before = rss_now()
        reset_peak()
        t = time.perf_counter()
        res = run()
        times.append(time.perf_counter() - t)
        out["peak_warm_mb"] = max(out.get("peak_warm_mb", 0.0), max(hwm() - before, 0) / 2**20)
        if times[-1] > 30:   # minutes-long rows (spsolve at n = 640 800): one warm call is enough
            break
    out["time_s"] = min(times)
    c = time.process_time()
    res = run()
    out["cpu_s"] = time.process_time() - c
    out.update(extra(res))
    if base:
        import solvers as sv  # imported after BLOCKED is set, as every row's builder does
        from solvers.internals import entry  # the same

        out["base_install"] = not sv.cholmod_available() and \
            entry("pardiso").unavailable() is not None
    return out


# ----- driver -------------------------------------------------------------------------------------
def _child(method: str, nx: int, timeout: float, steps: int = STEPS, base: bool = False,
           path: str | None = None) -> dict:
    """``run_one`` in a fresh subprocess (its peak RSS is its own), with a time limit; the row,
    or ``skipped`` with what went wrong. ``path``: a folder put first on the child's module
    path (splineax's own klujax module, see ``--splineax-path``)."""
    # one BLAS/OpenMP thread: CPU time is then steadier than wall time on a shared machine
    return in_child("jax", f"run_one({method!r}, {nx}, {steps}, {base!r})", {"method": method},
                    timeout, threads=1, path=path)


def _rows(results: list[dict]) -> list[dict]:
    """The solve section's table rows from the measurements: times, peaks, factorizations and
    each row's ratio against the row it is compared with."""
    by = {(r.get("n"), r["method"]): r for r in results}
    rows = []
    for r in results:
        if "skipped" in r:
            rows.append({"n": r.get("n", ""), "method": r["method"], "time s": r["skipped"]})
            continue
        row = {"n": f"{r['n']:,}", "method": r["method"], "time s": f"{r['time_s']:.3f}",
               "first call s": f"{r['first_call_s']:.2f}",
               "peak MB (warm)": f"{r['peak_warm_mb']:.0f}",
               "peak MB (first)": f"{r['peak_first_mb']:.0f}",
               "factorizations": r.get("factorizations", "")}
        ref = {"adj jit value_and_grad": "spsolve + grad", "fam jit": "fam numpy"}.get(r["method"])
        if ref and (r["n"], ref) in by and "time_s" in by[(r["n"], ref)]:
            x = by[(r["n"], ref)]["time_s"] / r["time_s"]
            row["ratio"] = (f"{x:.2f}x faster than {ref}" if x >= 1
                            else f"{1 / x:.2f}x the time of {ref}")
        if r["method"] == "adj jit value_and_grad" and (r["n"], "numpy path") in by:
            npk = by[(r["n"], "numpy path")]
            if npk.get("peak_warm_mb", 0) >= 1:  # below 1 MB the ratio is noise
                row["memory"] = (f"{r['peak_warm_mb'] / max(npk['peak_warm_mb'], 1e-9):.2f}x "
                                 f"numpy path (warm)")
        if r["method"] == "hvp jit":
            row["ratio"] = f"{1 / r['time_s']:.2f} Hessian-vector products/s"
        rows.append(row)
    return rows


def main(argv=None, out=None) -> list[dict]:
    """``python -m linops bench jax``: the table, printed and written to ``--out``."""
    ap = argparse.ArgumentParser(prog="python -m linops bench jax",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=positive, nargs="+", default=[400, 800], metavar="NX",
                    help="grid sides nx (n = nx·(nx+1)); default 400 800")
    ap.add_argument("--out", type=Path, default=Path(out or "bench-out"), metavar="DIR")
    ap.add_argument("--methods", nargs="+", choices=METHODS + list(_BUILD2) + jax_native.METHODS
                    + jax_native.NEWTON,
                    default=None)
    ap.add_argument("--section", choices=["solve", "loops", "base", "native"], default="solve",
                    help="solve: f = aᵀK(θ)⁻¹b (default); loops: time loops, batches and JAX "
                         "peers; base: adj.solve (Auto) against klujax, splineax's KLU and jax "
                         "spsolve as on the base install (neither CHOLMOD nor PARDISO "
                         "importable), --repeat times, interleaved; native: µs per implicit "
                         "step of a lax.scan heat loop, the native KLU solves against the JAX "
                         "peers (defaults there: --heat-sizes 16 32 100, --steps 1000)")
    ap.add_argument("--repeat", type=positive, default=2,
                    help="base: rounds of all its rows, interleaved (default 2)")
    ap.add_argument("--splineax-path", default=None, metavar="DIR",
                    help="a folder holding splineax-klujax's klujax module, put first on the "
                         "splineax child's path: klujax and splineax-klujax both install a "
                         "top-level klujax.py, and the later install replaces the other "
                         "(pip install --no-deps --target DIR splineax-klujax)")
    jax_native.add_arguments(ap)
    ap.add_argument("--steps", type=positive, default=STEPS, help="implicit steps (loops)")
    ap.add_argument("--heat-sizes", type=positive, nargs="+", default=[29, 400], metavar="NX",
                    help="loops: heat grids (n = nx²); default 29 400 (n = 841, 160 000)")
    ap.add_argument("--timeout", type=float, default=900.0)
    docs.add_option(ap)
    args = ap.parse_args(argv)
    if args.section == "base" and args.write_docs is not None:
        ap.error("--write-docs: --section base has no region of the benchmarks page; its table "
                 "is written under --out")
    docs.check(ap, args.write_docs, {"loops": "jax-loops", "native": "jax-native"}.get(
        args.section, "jax"))
    if args.section == "native":
        given = argv if argv is not None else sys.argv[1:]
        if not any(a.startswith("--heat-sizes") for a in given):
            args.heat_sizes = [16, 32, 100]
        if not any(a.startswith("--steps") for a in given):
            args.steps = 1000
        return jax_native.main(args, argv)
    if args.section == "loops":
        return _main_loops(args, argv)
    if args.section == "base":
        return _main_base(args, argv)
    results = []
    for nx in args.sizes:
        for m in args.methods or METHODS:
            sys.stderr.write(f"{m}, nx={nx} ...\n")
            r = _child(m, nx, args.timeout)
            r.setdefault("n", nx * (nx + 1))
            results.append(r)
    cols = ["n", "method", "time s", "first call s", "peak MB (warm)", "peak MB (first)",
            "factorizations", "ratio", "memory"]
    text = table(_rows(results), cols)
    publish(args.out, "jax", text, results, argv, args.write_docs)
    return results


def _main_base(args, argv) -> list[dict]:
    """``--section base``: value + θ-gradient at --sizes (default n = 160 400) by adj.solve with
    sv.Auto (SuperLU in symmetric mode there) and by the JAX peers, as on the base install,
    each row in its own process at one thread, every round of rows interleaved; each peer's
    time over linops' in the same round."""
    results = []
    for rnd in range(1, args.repeat + 1):
        for nx in args.sizes[:1] if args.sizes == [400, 800] else args.sizes:
            for m in args.methods or BASE_METHODS:
                sys.stderr.write(f"round {rnd}: {m}, nx={nx} (base install) ...\n")
                path = args.splineax_path if m == "splineax KLU" else None
                r = _child(m, nx, args.timeout, args.steps, base=True, path=path)
                r.setdefault("n", nx * (nx + 1))
                r["round"], r["load"] = rnd, round(os.getloadavg()[0], 2)
                results.append(r)
    rows = []
    for r in results:
        ours = next((x for x in results if x["round"] == r["round"] and x["n"] == r["n"]
                     and x["method"] == "adj auto" and "time_s" in x), None)
        row = {"round": r["round"], "n": f"{r['n']:,}", "method": r["method"],
               "load": r["load"]}
        if "skipped" in r:
            rows.append({**row, "time s": r["skipped"]})
            continue
        row.update({"time s": f"{r['time_s']:.3f}", "cpu s": f"{r['cpu_s']:.3f}",
                    "factorizations": r.get("factorizations", "")})
        if ours is not None and r["method"] != "adj auto":
            row["vs linops"] = f"{r['time_s'] / ours['time_s']:.2f}x linops' time"
            row["cpu vs linops"] = f"{r['cpu_s'] / ours['cpu_s']:.2f}x linops' CPU"
        rows.append(row)
    cols = ["round", "n", "method", "time s", "cpu s", "factorizations", "vs linops",
            "cpu vs linops", "load"]
    text = f"{table(rows, cols)}\n\n{legend('jax')}\n{JAX_BASE}"
    publish(args.out, "jax-base", text, results, argv, section="jax")
    return results


def _main_loops(args, argv) -> list[dict]:
    """``--section loops``: heat loops at --heat-sizes, vmap32 at n = 40 200, jacrev at
    n = 2 550, peers at n = 160 400; ratios are of CPU time, measured side by side."""
    plan = [(m, nx) for nx in args.heat_sizes for m in LOOP_METHODS]
    plan += [("vmap32", 200), ("32 separate", 200), ("jacrev", 50)]
    plan += [(m, 400) for m in PEER_METHODS]
    if args.methods:
        plan = [(m, nx) for m, nx in plan if m in args.methods]
    results = []
    for m, nx in plan:
        sys.stderr.write(f"{m}, nx={nx} ...\n")
        r = _child(m, nx, args.timeout, args.steps)
        r.setdefault("n", "")
        results.append(r)
    by = {(r.get("n"), r["method"]): r for r in results}
    refs = {"heat scan": "heat numpy", "heat fori": "heat numpy", "heat factorize": "heat numpy",
            "heat scipy hand": "heat numpy", "vmap32": "32 separate", "klujax": "adj lu",
            "splineax KLU": "adj lu", "adj cholesky": "adj lu"}
    rows = []
    for r in results:
        if "skipped" in r:
            rows.append({"n": r.get("n", ""), "method": r["method"], "time s": r["skipped"]})
            continue
        row = {"n": f"{r['n']:,}", "method": r["method"], "time s": f"{r['time_s']:.3f}",
               "cpu s": f"{r['cpu_s']:.3f}", "first call s": f"{r['first_call_s']:.2f}",
               "peak MB (first)": f"{r['peak_first_mb']:.0f}",
               "peak MB (warm)": f"{r['peak_warm_mb']:.0f}",
               "factorizations": r.get("factorizations", ""),
               "symbolic": r.get("symbolic_analyses", ""),
               "solve calls": r.get("solve_calls", "")}
        ref = by.get((r["n"], refs.get(r["method"])))
        if ref and "cpu_s" in ref:
            row["cpu ratio"] = f"{r['cpu_s'] / max(ref['cpu_s'], 1e-9):.2f}x {ref['method']}"
            if r["method"].startswith("heat ") and (r["n"], "heat scipy hand") in by:
                hand = by[(r["n"], "heat scipy hand")]
                if "cpu_s" in hand and r["method"] != "heat scipy hand":
                    row["cpu ratio"] += (f", {r['cpu_s'] / max(hand['cpu_s'], 1e-9):.2f}x "
                                         f"scipy hand")
        rows.append(row)
    cols = ["n", "method", "time s", "cpu s", "first call s", "peak MB (first)", "peak MB (warm)",
            "factorizations", "symbolic", "solve calls", "cpu ratio"]

    publish(args.out, "jax-loops", table(rows, cols) + "\n\n" + legend("jax"), results, argv,
            args.write_docs, section="jax")
    return results


if __name__ == "__main__":
    main()
