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

Each (method, size) runs in a fresh subprocess so that its peak RSS is its own. Memory: the
increase of the peak resident set over the state after building the problem, for the first call
(JIT compilation included) and for a warm call (the peak is reset through /proc/self/clear_refs).
Time: the best of three warm calls (one when a call takes over 30 s).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from .report import markdown_table as table

METHODS = ["numpy path", "adj jit value_and_grad", "spsolve + grad", "fam numpy", "fam jit",
           "hvp jit"]


# ----- one measurement (child process) -----------------------------------------------------------
def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _problem(nx: int):
    import numpy as np

    import linops as lo

    fam, b = lo.testing.poisson_family(nx)
    rng = np.random.default_rng(0)
    return fam, b, 0.5 + rng.random(fam.n_params), rng.standard_normal(fam.shape[0])


def _numpy_path(fam, b, theta, a):
    import solvers as sv
    import adjoints as ad

    def run():
        sol = sv.solve(sv.LinearProblem(fam(theta), b, posdef=True))
        g = ad.solve_pullback(sol, a)
        return a @ sol.u, fam.pullback(g.A), sol.stats.factorizations
    return run, lambda r: {"factorizations": r[2]}


def _jax_setup():
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    return jax, jnp


def _adj(fam, b, theta, a):
    jax, jnp = _jax_setup()
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
    jax, jnp = _jax_setup()
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
    return (lambda: fam(theta).values), lambda r: {}


def _fam_jit(fam, b, theta, a):
    jax, jnp = _jax_setup()
    f = jax.jit(lambda th: fam(th).values)
    tj = jnp.asarray(theta)
    return (lambda: f(tj).block_until_ready()), lambda r: {}


def _hvp(fam, b, theta, a):
    jax, jnp = _jax_setup()
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


_BUILD = {"numpy path": _numpy_path, "adj jit value_and_grad": _adj, "spsolve + grad": _spsolve,
          "fam numpy": _fam_numpy, "fam jit": _fam_jit, "hvp jit": _hvp}


def run_one(method: str, nx: int) -> dict:
    fam, b, theta, a = _problem(nx)
    run, extra = _BUILD[method](fam, b, theta, a)
    out = {"method": method, "n": fam.shape[0], "nnz": fam.pattern.nnz}
    base = _rss()
    _reset_peak()
    t = time.perf_counter()
    res = run()
    first = time.perf_counter() - t
    out["first_call_s"] = first
    out["peak_first_mb"] = max(_hwm() - base, 0) / 2**20
    times = []
    for _ in range(3):
        base = _rss()
        _reset_peak()
        t = time.perf_counter()
        res = run()
        times.append(time.perf_counter() - t)
        out["peak_warm_mb"] = max(out.get("peak_warm_mb", 0.0), max(_hwm() - base, 0) / 2**20)
        if times[-1] > 30:   # minutes-long rows (spsolve at n = 640 800): one warm call is enough
            break
    out["time_s"] = min(times)
    out.update(extra(res))
    return out


# ----- driver -------------------------------------------------------------------------------------
def _child(method: str, nx: int, timeout: float) -> dict:
    code = ("import json, warnings; warnings.simplefilter('ignore');"
            "from linops._app.jax import run_one;"
            f"print('@@' + json.dumps(run_one({method!r}, {nx})))")
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"method": method, "skipped": f"timed out after {timeout:.0f} s"}
    for line in p.stdout.splitlines():
        if line.startswith("@@"):
            return json.loads(line[2:])
    err = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"method": method, "skipped": f"failed: {err[:160]}"}


def _rows(results: list[dict]) -> list[dict]:
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
    from pathlib import Path

    from .loop import _positive
    from .report import publish

    ap = argparse.ArgumentParser(prog="python -m linops bench jax",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=_positive, nargs="+", default=[400, 800], metavar="NX",
                    help="grid sides nx (n = nx·(nx+1)); default 400 800")
    ap.add_argument("--out", type=Path, default=Path(out or "bench-out"), metavar="DIR")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=METHODS)
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args(argv)
    results = []
    for nx in args.sizes:
        for m in args.methods:
            sys.stderr.write(f"{m}, nx={nx} ...\n")
            r = _child(m, nx, args.timeout)
            r.setdefault("n", nx * (nx + 1))
            results.append(r)
    cols = ["n", "method", "time s", "first call s", "peak MB (warm)", "peak MB (first)",
            "factorizations", "ratio", "memory"]
    text = table(_rows(results), cols)
    publish(args.out, "jax", text, results, argv)
    return results


if __name__ == "__main__":
    main()
