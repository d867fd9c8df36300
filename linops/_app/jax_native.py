"""``python -m linops bench jax --section native``: the per-step cost of an implicit time loop.

The heat equation u_{t+1} = A⁻¹(u_t + f), A = I + Δt·K(θ)
(``lo.testing.poisson_family(nx, nx−1)``, n = nx²), T implicit steps in ``lax.scan``, loss
‖u_T − g‖², ``jax.jit(jax.value_and_grad)`` with respect to θ and f; the factorization is made
once per call, before the loop. Rows:

* ``adj.factorize KLU``: ``F = adj.factorize(A, sv.KLU())`` and ``F.solve`` in the scan body —
  the solves run as XLA FFI calls into ``solvers._native`` (no Python per step);
* ``adj.solve KLU``: ``adj.solve(A, u + f, sv.KLU())`` in the body, A built outside (the
  factorization is hoisted out of the loop; the same native solves);
* ``adj.factorize CHOLMOD``: ``adj.factorize(A, sv.Cholesky())``: CHOLMOD's factor, copied
  into the native table once per call (a supernodal one as a simplicial LL'), solved by
  ``cholmod_solve2`` in the FFI call;
* ``adj.factorize Auto``: the same loop with the default algorithm — the plain code: its
  factorize sees that its solves run natively and picks an engine the FFI call solves with
  (``sv.Auto(loop_solves=True)``: CHOLMOD for this SPD A, KLU without CHOLMOD);
* ``numpy path``: ``sv.init`` once, T ``solve``s, T ``solve_adjoint``s, ∂A kept lazy
  (``lo.LowRank``) and contracted by ``fam.pullback`` — linops without JAX;
* peers, each factorizing once per call with its own handle and a ``jax.custom_vjp`` step
  whose backward pass is the transposed solve with the same factors and −λ_r u_c on the
  pattern: ``klujax`` (``klujax.factor`` + ``solve_with_numeric``/``tsolve_with_numeric``),
  ``sparsax CHOLMOD`` (``sparsax.factor`` + ``solve_factor``, upper triangle); ``splineax
  KLU`` (``splineax.linear_solve`` with a ``KLU`` state made once). Peers that are not
  installed in this Python can run in another one (``--peer-python NAME=PATH``: a virtual
  environment that has them, e.g. splineax with its own klujax build).

Each (method, n) runs in a fresh process with one BLAS/OpenMP thread, both T₀ = T/10 and T
compiled there and their calls alternating; the time of a T is the best of its warm calls (3 to
15, until each T has run 1 s: a short call's best of three swung 0.7-1.4x between runs; CPU time
of the process, and wall time); ``µs/step`` is the marginal cost,
(t(T) − t(T₀)) / (T − T₀), so compilation, the factorization and the loss do not count, and
two processes' fixed costs never enter it. ``--repeat`` rounds of all rows run interleaved
(default 2); each row is its best round (a child at n = 10 000 swung 0.8–1.3× between runs).
The θ-gradient of every row is compared with the numpy path's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from importlib.metadata import PackageNotFoundError, version

import numpy as np

import linops as lo

from .child import in_child
from .legends import legend
from .report import markdown_table as table
from .report import publish

DT = 0.05
METHODS = ["adj.factorize KLU", "adj.solve KLU", "adj.factorize CHOLMOD", "adj.factorize Auto",
           "numpy path", "klujax",
           "sparsax CHOLMOD", "splineax KLU"]
PEERS = {"klujax": "klujax", "sparsax CHOLMOD": "sparsax", "splineax KLU": "splineax"}
#: the Newton-style rows (``--methods``, not run by default): A_t = I + (1 + t/1000)·Δt·K(θ)
#: built and factorized at EVERY step: sv.KLU() through the FFI factorize, the default
#: algorithm (its factorization a Python callback per step), klujax's factor-and-solve with a
#: kept analysis, and the numpy path (one sv.init(KLU) per step) as the gradient's reference
NEWTON = ["newton: adj.solve KLU", "newton: adj.solve Auto", "newton: klujax",
          "newton: numpy path"]
NEWTON_PEERS = {"newton: klujax": "klujax"}
#: warm calls of each T in a child: at least MIN_CALLS, more until each T has run WARM_S
#: seconds, at most MAX_CALLS
MIN_CALLS, MAX_CALLS, WARM_S = 3, 15, 1.0

def _heat(nx: int):
    """(fam, identity values, f, g, θ) of the heat problem at grid side ``nx`` (n = nx²): the
    same problem as the loops section's (seeded, so that every child builds the same one)."""
    fam, load = lo.testing.poisson_family(nx, nx - 1)
    P = fam.pattern
    eye = (P.rows == P.indices).astype(float)
    rng = np.random.default_rng(0)
    return fam, eye, load, rng.standard_normal(fam.shape[0]), 0.5 + rng.random(fam.n_params)


def _jax():
    """(jax, jax.numpy) with x64 on: every row computes in float64, so that the gradients of
    all rows can be compared with the numpy path's to rounding."""
    # jax only in the children of JAX rows, x64 set before its first array
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp  # after the x64 switch

    return jax, jnp


def _linops(form: str, alg: str):
    """jit(value_and_grad) of the loop through adjoints.jax (``form``: factorize or solve)."""
    def build(nx, steps):
        jax, jnp = _jax()
        # linops' solvers only in the children of its own rows (a peer's child runs without them)
        import adjoints.jax as adj
        import solvers as sv

        fam, eye, f, g, theta = _heat(nx)
        P = fam.pattern
        n = P.shape[0]
        eyej, gj = jnp.asarray(eye), jnp.asarray(g)
        algo = {"klu": sv.KLU(), "cholmod": sv.Cholesky(), "auto": None}[alg]

        def loss(th, f):
            A = lo.Sparse(eyej + DT * fam(th).values, P)
            if form == "factorize":
                F = adj.factorize(A, algo, posdef=True)
                body = lambda u, _: (F.solve(u + f), None)   # noqa: E731
            else:
                body = lambda u, _: (adj.solve(A, u + f, algo, posdef=True), None)   # noqa
            u = jax.lax.scan(body, jnp.zeros(n), None, length=steps)[0]
            return jnp.sum((u - gj) ** 2)

        vg = jax.jit(jax.value_and_grad(loss, (0, 1)))

        def run(i):
            adj.reset_stats()
            v, (gt, gf) = vg(jnp.asarray(theta) * (1 + 1e-9 * i), jnp.asarray(f))
            jax.block_until_ready(gt)
            return gt, adj.stats().factorizations
        return run, "linops"
    return build


def _newton(alg: str):
    """jit(value_and_grad) of the heat loop whose body builds A_t and solves it: one
    factorization per step (``klu``: the FFI factorize; ``auto``: the default algorithm, the
    FFI factorize where ``sv.Auto.loop_factorize`` picks KLU, else a Python callback per
    factorization)."""
    def build(nx, steps):
        jax, jnp = _jax()
        # linops' solvers only in the children of its own rows (a peer's child runs without them)
        import adjoints.jax as adj
        import solvers as sv

        algo = sv.KLU() if alg == "klu" else None
        fam, eye, f, g, theta = _heat(nx)
        P = fam.pattern
        eyej, gj = jnp.asarray(eye), jnp.asarray(g)

        def loss(th, f):
            K = DT * fam(th).values
            body = lambda u, t: (adj.solve(lo.Sparse(eyej + (1 + 1e-3 * t) * K, P), u + f,  # noqa
                                           algo), None)
            u = jax.lax.scan(body, jnp.zeros(P.shape[0]), jnp.arange(steps) * 1.0)[0]
            return jnp.sum((u - gj) ** 2)

        vg = jax.jit(jax.value_and_grad(loss, (0, 1)))

        def run(i):
            adj.reset_stats()
            v, (gt, gf) = vg(jnp.asarray(theta) * (1 + 1e-9 * i), jnp.asarray(f))
            jax.block_until_ready(gt)
            return gt, adj.stats().factorizations
        return run, "linops"
    return build


def _newton_klujax(nx, steps):
    """klujax: ``solve_with_symbol`` (factor and solve, analysis kept) at every step, its own
    derivative rules."""
    jax, jnp = _jax()
    # optional peers (the bench extra): imported only in the child measuring them
    import klujax

    fam, eye, f, g, theta = _heat(nx)
    P = fam.pattern
    Ai, Aj = jnp.asarray(P.rows, jnp.int32), jnp.asarray(P.indices, jnp.int32)
    sym = klujax.analyze(Ai, Aj, P.shape[0])
    eyej, gj = jnp.asarray(eye), jnp.asarray(g)

    def loss(th, f):
        K = DT * fam(th).values
        body = lambda u, t: (klujax.solve_with_symbol(Ai, Aj, eyej + (1 + 1e-3 * t) * K,  # noqa
                                                      u + f, sym), None)
        u = jax.lax.scan(body, jnp.zeros(P.shape[0]), jnp.arange(steps) * 1.0)[0]
        return jnp.sum((u - gj) ** 2)

    vg = jax.jit(jax.value_and_grad(loss, (0, 1)))

    def run(i):
        v, (gt, gf) = vg(jnp.asarray(theta) * (1 + 1e-9 * i), jnp.asarray(f))
        jax.block_until_ready(gt)
        return gt, steps
    return run, f"klujax {_version('klujax')}"


def _newton_numpy(nx, steps):
    """The numpy path of the Newton rows: sv.init(KLU) of every A_t, the reverse loop of
    ``solve_adjoint`` with the kept caches, ∂θ = Σₜ (1 + t/1000)·Δt·fam.pullback(−λₜuₜᵀ)."""
    import solvers as sv   # linops' solvers only in the children of its own rows

    fam, eye, f, g, theta = _heat(nx)
    P = fam.pattern

    def run(i):
        th = theta * (1 + 1e-9 * i)
        K = DT * fam(th).values
        caches, us = [], [np.zeros(P.shape[0])]
        for t in range(steps):
            caches.append(sv.init(sv.LinearProblem(lo.Sparse(eye + (1 + 1e-3 * t) * K, P)),
                                  sv.KLU()))
            us.append(caches[-1].solve(us[-1] + f))
        ubar, grad = 2 * (us[-1] - g), np.zeros(fam.n_params)
        for t in reversed(range(steps)):
            lam = caches[t].solve_adjoint(ubar)
            grad += (1 + 1e-3 * t) * DT * fam.pullback(lo.RankOne(-lam, us[t + 1]))
            ubar = lam
        return grad, steps
    return run, "linops"


def _numpy(nx, steps):
    """The numpy path: ``sv.init`` once (Auto: CHOLMOD for this SPD A), the forward loop, the
    reverse loop of ``solve_adjoint``, ∂A kept lazy as one ``lo.LowRank`` and contracted by
    ``fam.pullback`` once."""
    # linops' solvers only in the children of its own rows (a peer's child runs without them)
    import solvers as sv

    fam, eye, f, g, theta = _heat(nx)
    P = fam.pattern

    def run(i):
        th = theta * (1 + 1e-9 * i)
        cache = sv.init(sv.LinearProblem(lo.Sparse(eye + DT * fam(th).values, P), posdef=True))
        us = [np.zeros(P.shape[0])]
        for _ in range(steps):
            us.append(cache.solve(us[-1] + f))
        ubar, lams = 2 * (us[-1] - g), []
        for _ in range(steps):
            ubar = cache.solve_adjoint(ubar)
            lams.append(ubar)
        G = lo.LowRank(-np.stack(lams[::-1], 1), np.stack(us[1:], 1))
        return DT * fam.pullback(G), cache.stats.factorizations
    return run, "linops"


def _custom_step(jax, jnp, rows, cols, solve, tsolve):
    """u ↦ A⁻¹u as a custom_vjp of (values, rhs) over a factor handle: the peers' factor-once
    step with its exact cotangents (λ = A⁻ᵀū, values̄ = −λ_r u_c)."""
    @jax.custom_vjp
    def step(vals, handle, rhs):
        return solve(handle, rhs)

    def fwd(vals, handle, rhs):
        x = solve(handle, rhs)
        return x, (handle, x)

    def bwd(res, ct):
        handle, x = res
        lam = tsolve(handle, ct)
        return -lam[rows] * x[cols], None, lam

    step.defvjp(fwd, bwd)
    return step


def _peer_loop(nx, steps, factor, solve, tsolve):
    """A peer's heat loop: ``factor(values) -> handle`` once per call (outside the scan),
    ``solve(handle, b)`` / ``tsolve(handle, b)`` for A and Aᵀ inside the custom_vjp step;
    returns ``run(i)`` at θ·(1 + 1e-9·i) (no call may reuse an earlier factorization)."""
    jax, jnp = _jax()
    fam, eye, f, g, theta = _heat(nx)
    P = fam.pattern
    n = P.shape[0]
    rows, cols = jnp.asarray(P.rows, jnp.int32), jnp.asarray(P.indices, jnp.int32)
    eyej, gj = jnp.asarray(eye), jnp.asarray(g)
    step = _custom_step(jax, jnp, rows, cols, solve, tsolve)

    def loss(th, f):
        vals = eyej + DT * fam(th).values
        h = factor(jax.lax.stop_gradient(vals))
        u = jax.lax.scan(lambda u, _: (step(vals, h, u + f), None), jnp.zeros(n), None,
                         length=steps)[0]
        return jnp.sum((u - gj) ** 2)

    vg = jax.jit(jax.value_and_grad(loss, (0, 1)))

    def run(i):
        v, (gt, gf) = vg(jnp.asarray(theta) * (1 + 1e-9 * i), jnp.asarray(f))
        jax.block_until_ready(gt)
        return gt, 1
    return run


def _klujax(nx, steps):
    """klujax: ``analyze`` once per pattern (at build time), ``factor`` once per call,
    ``solve_with_numeric`` / ``tsolve_with_numeric`` per step (its factor-once API)."""
    jax, jnp = _jax()
    # optional peers (the bench extra): imported only in the child measuring them
    import klujax

    P = _heat(nx)[0].pattern
    Ai, Aj = jnp.asarray(P.rows, jnp.int32), jnp.asarray(P.indices, jnp.int32)
    sym = klujax.analyze(Ai, Aj, P.shape[0])
    run = _peer_loop(nx, steps, lambda v: klujax.factor(Ai, Aj, v, sym),
                     lambda h, b: klujax.solve_with_numeric(h, b, sym),
                     lambda h, b: klujax.tsolve_with_numeric(h, b, sym))
    return run, f"klujax {_version('klujax')}"


def _sparsax(nx, steps):
    """sparsax: CHOLMOD ``factor`` of the upper triangle once per call, ``solve_factor`` per
    step (A = Aᵀ, so the transposed solve is the same solve)."""
    jax, jnp = _jax()
    # optional peers (the bench extra): imported only in the child measuring them
    import sparsax

    P = _heat(nx)[0].pattern
    up = np.flatnonzero(P.rows <= P.indices)          # sparsax reads the upper triangle
    Ai = jnp.asarray(P.rows[up], jnp.int32)
    Aj = jnp.asarray(P.indices[up], jnp.int32)
    upj = jnp.asarray(up)
    n = P.shape[0]
    run = _peer_loop(nx, steps, lambda v: sparsax.factor(Ai, Aj, v[upj], n),
                     sparsax.solve_factor, sparsax.solve_factor)   # A = Aᵀ
    return run, f"sparsax {_version('sparsax')}"


def _splineax(nx, steps):
    """splineax: lineax's ``linear_solve`` with splineax's ``KLU`` and a state made once per
    call (``solver.init``), so that every step and its transpose reuse one factorization."""
    jax, jnp = _jax()
    # optional peers (the bench extra): imported only in the child measuring them
    import splineax
    from jax.experimental import sparse as jsp

    fam, eye, f, g, theta = _heat(nx)
    P = fam.pattern
    n = P.shape[0]
    ind = jnp.stack([jnp.asarray(P.rows, jnp.int32), jnp.asarray(P.indices, jnp.int32)], 1)
    eyej, gj = jnp.asarray(eye), jnp.asarray(g)
    solver = splineax.KLU()

    def loss(th, f):
        op = splineax.BCOOLinearOperator(jsp.BCOO((eyej + DT * fam(th).values, ind),
                                                  shape=P.shape))
        state = solver.init(op, {})                   # one factorization, reused by every step

        def body(u, _):
            sol, _ = splineax.linear_solve(op, u + f, solver, state=state)
            return getattr(sol, "value", sol), None
        u = jax.lax.scan(body, jnp.zeros(n), None, length=steps)[0]
        return jnp.sum((u - gj) ** 2)

    vg = jax.jit(jax.value_and_grad(loss, (0, 1)))

    def run(i):
        v, (gt, gf) = vg(jnp.asarray(theta) * (1 + 1e-9 * i), jnp.asarray(f))
        jax.block_until_ready(gt)
        return gt, 1
    return run, f"splineax {_version('splineax')}"


def _version(dist: str) -> str:
    """The installed version of a distribution, or "?" (the table says who ran each row)."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


_BUILD = {"adj.factorize KLU": _linops("factorize", "klu"),
          "adj.solve KLU": _linops("solve", "klu"),
          "adj.factorize CHOLMOD": _linops("factorize", "cholmod"),
          "adj.factorize Auto": _linops("factorize", "auto"), "numpy path": _numpy,
          "klujax": _klujax, "sparsax CHOLMOD": _sparsax, "splineax KLU": _splineax,
          "newton: adj.solve KLU": _newton("klu"), "newton: adj.solve Auto": _newton("auto"),
          "newton: klujax": _newton_klujax, "newton: numpy path": _newton_numpy}


def run_pair(method: str, nx: int, steps: list) -> list:
    """(method, nx) at every T of ``steps`` in this (child) process, the calls of the Ts
    alternating (T₀, T, T₀, T, ...): the best of its warm calls (:data:`MIN_CALLS` to
    :data:`MAX_CALLS`, until :data:`WARM_S` seconds of each T), CPU and wall time, and the
    θ-gradient (a list) for the comparison with the numpy path. One process for both Ts: the
    marginal cost per step is not the difference of two processes' fixed costs."""
    peer = {**PEERS, **NEWTON_PEERS}.get(method)
    if peer:
        try:
            __import__(peer)
        except Exception as e:   # not installed here (or broken): say so in the row
            return [{"method": method, "nx": nx, "steps": T,
                     "skipped": f"{peer} not importable here ({type(e).__name__})"}
                    for T in steps]
    runs = [_BUILD[method](nx, T) for T in steps]
    who = runs[0][1]
    if who == "linops":
        who = f"linops {_version('linops')}"
    first, cpu, wall, outs = [], [[] for _ in steps], [[] for _ in steps], [None] * len(steps)
    # every call its own θ (run(i) scales it by 1 + 1e-9·i): no call finds the factorization
    # of another one still live. The gradient compared is the first call's (θ·(1 + 1e-7·j)
    # in every row): a later call's θ depends on how many warm calls a row made, and a 1e-9
    # change of θ moved the gradient by 3e-9 at n = 10 000
    grads = []
    for j, (run, _) in enumerate(runs):
        t = time.perf_counter()
        grads.append(run(100 * j)[0])
        first.append(time.perf_counter() - t)
    # warm calls until each T has run WARM_S seconds in all (at least MIN_CALLS, at most
    # MAX_CALLS calls): a 20 ms call (n = 256) is measured 15 times, a 2 s one (n = 10 000) 3
    i = 0
    while i < MIN_CALLS or (i < MAX_CALLS and min(map(sum, wall)) < WARM_S):
        i += 1
        for j, (run, _) in enumerate(runs):
            c, t = time.process_time(), time.perf_counter()
            outs[j] = run(100 * j + i)
            cpu[j].append(time.process_time() - c)
            wall[j].append(time.perf_counter() - t)
    return [{"method": method, "nx": nx, "n": nx * nx, "steps": T, "cpu_s": min(cpu[j]),
             "wall_s": min(wall[j]), "first_call_s": first[j],
             "factorizations": int(outs[j][1]), "version": who,
             "grad": np.asarray(grads[j], dtype=float).tolist()}
            for j, T in enumerate(steps)]


def main(args, argv) -> list[dict]:
    """The native section's driver: every (method, n) at T and T/10, side by side."""
    pythons = dict(p.split("=", 1) for p in (args.peer_python or []))
    methods = args.methods or METHODS
    results = []
    load = []
    Ts = [max(args.steps // 10, 1), args.steps]
    for rnd in range(1, args.repeat + 1):   # rounds of every row, interleaved
        for nx in args.heat_sizes:
            for m in methods:
                sys.stderr.write(f"round {rnd}: {m}, n={nx * nx}, T={Ts} ...\n")
                py = pythons.get(PEERS.get(m, ""), None)
                rows = in_child("jax_native", f"run_pair({m!r}, {nx}, {Ts})",
                                {"method": m, "nx": nx, "steps": Ts}, args.timeout, threads=1,
                                python=py)
                if isinstance(rows, dict):   # the child failed: its row says why
                    rows = [rows, rows]
                load.append(os.getloadavg()[0])
                results.append({"method": m, "nx": nx, "round": rnd, "short": rows[0],
                                "long": rows[1]})
    return _report(results, args, argv, load)


def _report(results, args, argv, load) -> list[dict]:
    """The table from the measurements: marginal µs per step, the ratios to the best peer and
    to the numpy path, the gradient error, with the load average; published as jax-native."""
    per = {}
    for r in results:
        s, l = r["short"], r["long"]
        key = (r["nx"], r["method"])
        if "skipped" in s or "skipped" in l:
            per[key] = {"skipped": s.get("skipped") or l.get("skipped")}
            continue
        dT = l["steps"] - s["steps"]
        got = {"cpu": (l["cpu_s"] - s["cpu_s"]) / dT * 1e6,
               "wall": (l["wall_s"] - s["wall_s"]) / dT * 1e6,
               "grad": np.asarray(l["grad"]), "fact": l["factorizations"],
               "version": l["version"]}
        old = per.get(key)
        if old is None or "cpu" not in old or got["cpu"] < old["cpu"]:   # the best round
            per[key] = got
    rows = []
    for nx in args.heat_sizes:
        for m in (args.methods or METHODS):
            newton = m in NEWTON   # its own peers and its own numpy reference
            peers = [per[(nx, q)]["cpu"] for q in (NEWTON_PEERS if newton else PEERS)
                     if "cpu" in per.get((nx, q), {})]
            best = min(peers) if peers else None
            ref = per.get((nx, "newton: numpy path" if newton else "numpy path"), {})
            p = per.get((nx, m))
            if p is None:
                continue
            if "skipped" in p:
                rows.append({"n": f"{nx * nx:,}", "method": m, "µs/step cpu": p["skipped"]})
                continue
            row = {"n": f"{nx * nx:,}", "method": m, "µs/step cpu": f"{p['cpu']:.1f}",
                   "µs/step wall": f"{p['wall']:.1f}", "fact.": p["fact"],
                   "version": p["version"]}
            if best and best > 0:
                row["ratio"] = f"{p['cpu'] / best:.2f}"
            if "cpu" in ref:
                row["vs numpy"] = f"{p['cpu'] / ref['cpu']:.2f}"
                g0 = ref["grad"]
                row["grad rel.err"] = f"{np.abs(p['grad'] - g0).max() / np.abs(g0).max():.1e}"
            rows.append(row)
    cols = ["n", "method", "µs/step cpu", "µs/step wall", "ratio", "vs numpy", "grad rel.err",
            "fact.", "version"]
    text = (table(rows, cols) + f"\n\nT = {args.steps} (marginal over T/10, both in one process), "
            f"one thread, the best of {args.repeat} interleaved rounds; load average "
            f"{min(load):.1f}–{max(load):.1f} (1 min) during the run")
    slim = [{k: v for k, v in r.items() if k != "grad"} for r in
            [dict(x["long"], short_cpu_s=x["short"].get("cpu_s")) for x in results]]
    # the jax section's legend (it names the native rows' columns too), as jax-loops does
    publish(args.out, "jax-native", f"{text}\n\n{legend('jax')}", slim, argv, args.write_docs,
            section="jax")
    return results


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The native section's options on the jax section's parser."""
    ap.add_argument("--peer-python", action="append", metavar="PEER=PYTHON",
                    help="native: run a peer (klujax, sparsax, splineax) with another Python "
                         "that has it, e.g. splineax=/path/venv/bin/python")
