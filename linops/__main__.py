"""The application layer: ``python -m linops info | bench``.

The one module of linops allowed to import solvers and adjoints. ``bench`` runs every
(method, size) measurement in a fresh subprocess, so that its peak memory (RSS, C and XLA
allocations included) is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

DENSE_BUDGET = 4 * 2**30  # bytes a dense n×n method may take before it is reported, not run
DENSE_SOLVE_MAX_N = 6000  # dense O(n³) solves above this are reported, not run (2-minute budget)
METHODS = ["linops LU", "linops Cholesky", "linops jax", "scipy hand-written adjoint",
           "dense gradient (n×n)", "jax spsolve + grad", "dense jax.grad"]


# ----- info --------------------------------------------------------------------------------------
def _version(mod: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(mod)
    except Exception:
        return None


def info() -> str:
    import platform

    lines = [f"linops {_version('linops') or 'source tree'} on Python {platform.python_version()} "
             f"({platform.machine()})"]
    for dist in ("numpy", "scipy", "array-api-compat", "pyamg", "jax", "jaxlib", "scikit-sparse",
                 "petsc4py", "matplotlib"):
        lines.append(f"  {dist:<17} {_version(dist) or 'not installed'}")
    gpu = "not available"
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode() if n else "none"
        gpu = f"cupy {cupy.__version__}, {n} device(s): {name}"
    except Exception as e:
        gpu = f"not available ({type(e).__name__})"
    import solvers as sv

    def have(ok, hint):
        return "available" if ok else hint

    lines += ["backends:",
              "  numpy/scipy       available (default)",
              f"  jax               {have(_version('jax'), 'pip install linops[jax]')}",
              f"  cupy (GPU)        {gpu}",
              f"  pyamg (AMG)       {'available' if _version('pyamg') else 'missing'}",
              f"  CHOLMOD           {have(sv.cholmod_available(), 'pip install linops[cholmod]')}",
              f"  petsc4py          {'installed' if _version('petsc4py') else 'not installed (optional, not wired)'}",
              "factorizations that serve adjoint solves (same factors, no refactorization):",
              "  numpy: LU (LAPACK getrs trans / SuperLU trans='H','T'), Cholesky (LAPACK, CHOLMOD),",
              "         Krylov + AMG/ILU/Jacobi (hierarchy of Aᴴ built once when A is not Hermitian)",
              "  cupy:  dense LU/Cholesky (cupyx), sparse LU via cupyx splu (host factorization, GPU solves)",
              "  jax:   dense jax.scipy LU (trans=1); sparse via host callback into SuperLU/CHOLMOD"]
    return "\n".join(lines)


# ----- one measurement (runs in a child process) -------------------------------------------------
def _rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _problem(nx: int):
    import linops as lo

    fam, b = lo.testing.poisson_family(nx)
    rng = np.random.default_rng(0)
    theta = 0.5 + rng.random(fam.n_params)
    a = rng.standard_normal(fam.shape[0])
    return fam, b, theta, a


def run_one(method: str, nx: int) -> dict:
    """Value + gradient of f(θ) = aᵀK(θ)⁻¹b w.r.t. θ and K's values with one method.

    Memory: peak RSS increase of the first full run over the state after building the problem
    and a warm-up on a tiny one (so imports are excluded; JIT compilation is included).
    Time: the best of two further runs (steady state)."""
    fam, b, theta, a = _problem(nx)
    n, nnz = fam.shape[0], fam.pattern.nnz
    out = {"method": method, "n": n, "nnz": nnz}
    copies = 3 if "jax" in method else 2
    if method in ("dense gradient (n×n)", "dense jax.grad"):
        need = copies * n * n * 8
        if need > DENSE_BUDGET:
            return {**out, "skipped": f"would need {need / 1e9:.1f} GB"}
        if method == "dense jax.grad" and n > DENSE_SOLVE_MAX_N:
            return {**out, "skipped": f"not run: O(n³) dense LU, {need / 1e9:.1f} GB"}
    tiny = _problem(6)
    for fn in _METHODS[method](*tiny)[:2]:
        fn()
    fwd, full, extra = _METHODS[method](fam, b, theta, a)
    base = _rss_now()
    res = full()
    peak = _peak_rss() - base
    fwd()
    t_fwd = min(_time(fwd) for _ in range(2))
    t_full, res = min((_time_with(full) for _ in range(2)), key=lambda x: x[0])
    out.update(time_s=t_full, forward_s=t_fwd, ratio=t_full / t_fwd,
               peak_mb=max(peak, 0) / 2**20, **extra(res))
    return out


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _time_with(fn):
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def _linops(alg_name):
    def build(fam, b, theta, a):
        import linops as lo
        import solvers as sv
        import adjoints as ad

        alg = sv.LU() if alg_name == "LU" else sv.Cholesky()
        if alg_name == "Cholesky" and not sv.cholmod_available():
            raise RuntimeError("CHOLMOD not installed")

        def fwd():
            return sv.solve(sv.LinearProblem(fam(theta), b, posdef=True), alg).u

        def full():
            K = fam(theta)
            sol = sv.solve(sv.LinearProblem(K, b, posdef=True), alg)
            f = a @ sol.u
            g = ad.solve_pullback(sol, a)         # Ā = RankOne(−λ, u), no factorization
            gK = lo.project(g.A, like=K)          # gradient w.r.t. K's stored values (SDDMM)
            return f, fam.pullback(gK), gK.values, g, sol.stats

        return fwd, full, lambda r: {"factorizations": r[4].factorizations,
                                     "payload_bytes": lo.payload_nbytes(r[3].A)}
    return build


def _linops_jax(fam, b, theta, a):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import adjoints.jax as adj

    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)
    f = lambda th: jnp.dot(aj, adj.solve(fam(th), bj))
    vg = jax.jit(jax.value_and_grad(f))
    fj = jax.jit(f)

    def full():
        adj.reset_stats()
        v, g = vg(tj)
        g.block_until_ready()
        return v, g, adj.stats()

    return (lambda: fj(tj).block_until_ready()), full, \
        lambda r: {"factorizations": r[2].factorizations, "payload_bytes": int(r[1].nbytes)}


def _scipy_by_hand(fam, b, theta, a):
    import scipy.sparse as sp
    import scipy.sparse.linalg as spl

    P = fam.pattern
    M = fam.M.to_scipy()
    rows, cols = P.rows, P.indices

    def fwd():
        K = sp.csc_matrix(sp.csr_matrix((M @ theta, P.indices, P.indptr), shape=P.shape))
        return spl.splu(K).solve(b)

    def full():
        K = sp.csc_matrix(sp.csr_matrix((M @ theta, P.indices, P.indptr), shape=P.shape))
        lu = spl.splu(K)
        u = lu.solve(b)
        lam = lu.solve(a, trans="T")
        gK = -lam[rows] * u[cols]
        return a @ u, M.T @ gK, gK

    return fwd, full, lambda r: {"factorizations": 1, "payload_bytes": int(r[2].nbytes)}


def _dense_gradient(fam, b, theta, a):
    import scipy.sparse.linalg as spl

    P = fam.pattern
    M = fam.M.to_scipy()

    def fwd():
        return spl.splu(fam(theta).to_scipy().tocsc()).solve(b)

    def full():
        lu = spl.splu(fam(theta).to_scipy().tocsc())
        u, lam = lu.solve(b), lu.solve(a, trans="T")
        G = -np.outer(lam, u)  # what an AD system materialises
        gK = G[P.rows, P.indices]
        return a @ u, M.T @ gK, G

    return fwd, full, lambda r: {"factorizations": 1, "payload_bytes": int(r[2].nbytes)}


def _jax_spsolve(fam, b, theta, a):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax.experimental.sparse.linalg import spsolve

    P = fam.pattern
    ind, ptr = jnp.asarray(P.indices, dtype=jnp.int32), jnp.asarray(P.indptr, dtype=jnp.int32)
    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)
    f = lambda th: jnp.dot(aj, spsolve(fam(th).values, ind, ptr, bj))
    vg = jax.value_and_grad(f)

    def full():
        v, g = vg(tj)
        return v, g.block_until_ready()

    return (lambda: f(tj).block_until_ready()), full, \
        lambda r: {"factorizations": 2, "payload_bytes": int(r[1].nbytes)}


def _dense_jax(fam, b, theta, a):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    P = fam.pattern
    aj, bj, tj = jnp.asarray(a), jnp.asarray(b), jnp.asarray(theta)

    def f(th):
        K = jnp.zeros(P.shape).at[P.rows, P.indices].set(fam(th).values)
        return jnp.dot(aj, jnp.linalg.solve(K, bj))

    vg, fj = jax.jit(jax.value_and_grad(f)), jax.jit(f)

    def full():
        v, g = vg(tj)
        return v, g.block_until_ready()

    return (lambda: fj(tj).block_until_ready()), full, \
        lambda r: {"factorizations": 1, "payload_bytes": P.shape[0] ** 2 * 8}


_METHODS = {"linops LU": _linops("LU"), "linops Cholesky": _linops("Cholesky"),
            "linops jax": _linops_jax, "scipy hand-written adjoint": _scipy_by_hand,
            "dense gradient (n×n)": _dense_gradient, "jax spsolve + grad": _jax_spsolve,
            "dense jax.grad": _dense_jax}


# ----- the driver --------------------------------------------------------------------------------
def _child(method: str, nx: int, timeout: float) -> dict:
    code = ("import json, sys, warnings; warnings.simplefilter('ignore');"
            "from linops.__main__ import run_one;"
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
    return {"method": method, "skipped": f"failed: {err[:120]}"}


def _progress(i: int, total: int, label: str) -> None:
    w = 30
    done = int(w * i / total)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (w - done)}] {i}/{total} {label[:48]:<48}")
    sys.stderr.flush()
    if i == total:
        sys.stderr.write("\n")


def _fmt(r: dict) -> dict:
    if "skipped" in r:
        return {"n": r.get("n", ""), "method": r["method"], "time s": r["skipped"]}
    return {"n": r["n"], "method": r["method"], "time s": f"{r['time_s']:.3f}",
            "grad/fwd": f"{r['ratio']:.2f}", "factorizations": r["factorizations"],
            "peak MB": f"{r['peak_mb']:.0f}", "gradient bytes": f"{r['payload_bytes']:,}"}


def bench(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(prog="python -m linops bench",
                                 description="value + gradient of aᵀK(θ)⁻¹b, K(θ) a 2-D FE family")
    ap.add_argument("--sizes", type=int, nargs="+", help="grid sides nx (n ≈ nx²); default 50 100 200 400")
    ap.add_argument("--quick", action="store_true", help="small sizes (30 60), a few seconds")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=METHODS)
    ap.add_argument("--json", metavar="PATH", help="write all measurements as JSON")
    ap.add_argument("--plot", metavar="PATH", help="matplotlib PNG: time and memory vs n (log-log)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per measurement")
    args = ap.parse_args(argv)
    sizes = args.sizes or ([30, 60] if args.quick else [50, 100, 200, 400])
    have_jax = _version("jax") is not None
    jobs = [(m, nx) for nx in sizes for m in args.methods]
    results = []
    t0 = time.time()
    for i, (m, nx) in enumerate(jobs):
        _progress(i, len(jobs), f"{m}, nx={nx}")
        if "jax" in m and not have_jax:
            r = {"method": m, "skipped": 'needs pip install "linops[jax]"'}
        else:
            r = _child(m, nx, args.timeout)
        r.setdefault("n", (nx + 1) * nx)
        results.append(r)
    _progress(len(jobs), len(jobs), f"done in {time.time() - t0:.0f} s")
    cols = ["n", "method", "time s", "grad/fwd", "factorizations", "peak MB", "gradient bytes"]
    rows = [_fmt(r) for r in results]
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    print("value + gradient of f(θ) = aᵀK(θ)⁻¹b w.r.t. θ (one per cell) and K's stored values")
    print(" | ".join(c.ljust(widths[c]) for c in cols))
    print("-|-".join("-" * widths[c] for c in cols))
    for r in rows:
        print(" | ".join(str(r.get(c, "")).ljust(widths[c]) for c in cols))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        _plot(results, args.plot)
    return results


def _plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for m in METHODS:
        pts = sorted((r["n"], r["time_s"], r["peak_mb"]) for r in results
                     if r["method"] == m and "time_s" in r)
        if not pts:
            continue
        n, t, mem = zip(*pts)
        ax1.loglog(n, t, "o-", label=m)
        ax2.loglog(n, np.maximum(mem, 0.1), "o-", label=m)
    ax1.set(xlabel="n (unknowns)", ylabel="value + gradient time [s]", title="time")
    ax2.set(xlabel="n (unknowns)", ylabel="peak RSS increase [MB]", title="memory")
    ax1.legend(fontsize=7)
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m linops {info,bench} [options]\n  info   versions and backends\n"
              "  bench  headline benchmark (python -m linops bench --help)")
        return 0
    if argv[0] == "info":
        print(info())
        return 0
    if argv[0] == "bench":
        bench(argv[1:])
        return 0
    print(f"unknown command {argv[0]!r}; use info or bench", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
