"""Scale: value + θ-gradient of f(θ) = aᵀK(θ)⁻¹b with CG + AMG (pyamg smoothed aggregation),
building the family included, at n = 10⁶ … 10⁷ (Q4 Poisson family, nx ≈ √n).

    python -m linops bench scale [--sizes 1001 2001 3164] [--rtol 1e-8]
    (also: python benchmarks/scale.py ...)

The problem: Q4 Laplace on nx × nx cells, every boundary node fixed (n = (nx − 1)² unknowns).
Two implementations, each size and each implementation in a fresh subprocess (peak RSS is its
own; run one at a time — 10⁷ takes most of a 24 GB machine):

- ``linops``: ``lo.testing.poisson_family(nx, fixed="boundary")`` → ``fam(θ)`` →
  ``sv.init(LinearProblem(K, b, posdef=True), sv.CG(rtol, precond=sv.AMG()))`` →
  ``cache.solve()`` → ``ad.solve_pullback`` → ``fam.pullback``;
- ``hand``: a numpy + scipy + pyamg script doing the same work: grid connectivity, Dirichlet
  elimination and COO indices (int32) by hand, ``csr_matrix((θₑ·Ke, (i, j)))`` assembly, the same
  pyamg solver and scipy ``cg`` twice, gradient by the element formula −λₑᵀ Ke uₑ.

Reported per row: total time and its parts, peak RSS (over the interpreter after imports), and
the bytes per unknown of every structure the path keeps alive (counted from the arrays).

The family-build table times what a user does once before a loop, each in a fresh process
(best of ``--build-repeats``): the *plain* numpy/scipy COO assembly of K (connectivity,
elimination, int32 COO indices, ``csr_matrix``), against ``AffineSparse.from_elements`` (from
the same connectivity) and ``AffineSparse.from_coo`` (from top88-style full triplets
``iK, jK, sK, param`` that the timed code builds too). Wall and CPU time, peak RSS.
Targets: family build ≤ 1.1 × the plain assembly at every size; value + θ-gradient
at n = 10⁷ ≤ 60 s and ≤ 12 GB.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import linops as lo

from . import docs
from .child import in_child, peak_rss, positive, rss_now
from .legends import legend
from .report import markdown_table as table
from .report import publish

RTOL = 1e-8




def nbytes(*objs) -> int:
    """Bytes held by numpy arrays, scipy sparse matrices, lo.Sparse / lo.Pattern (their cached
    index arrays included) and lists/tuples/dicts of those; shared arrays counted once."""
    seen: set = set()
    total = 0

    def arr(a):
        nonlocal total
        if a is None:
            return
        base = a
        while isinstance(base, np.ndarray) and base.base is not None and isinstance(base.base,
                                                                                    np.ndarray):
            base = base.base
        if id(base) not in seen:
            seen.add(id(base))
            total += base.nbytes

    def walk(o):
        if isinstance(o, np.ndarray):
            arr(o)
        elif sp.issparse(o):
            for name in ("data", "indices", "indptr", "row", "col"):
                if hasattr(o, name):
                    arr(getattr(o, name))
        elif isinstance(o, lo.Pattern):
            arr(o.indptr)
            arr(o.indices)
            for v in o.__dict__.values():
                walk(v)
        elif isinstance(o, lo.Sparse):
            arr(np.asarray(o.values))
            walk(o.pattern)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v)

    for o in objs:
        walk(o)
    return total


def _hierarchy_bytes(ml, skip=()) -> int:
    """Bytes of an AMG hierarchy's matrices (A, P, R, B, AggOp, BH of every level), leaving out
    the arrays in ``skip`` (the finest A, counted apart)."""
    parts = []
    for lv in ml.levels:
        for name in ("A", "P", "R", "B", "AggOp", "BH"):
            m = getattr(lv, name, None)
            if m is not None and not any(m is s for s in skip):
                parts.append(m)
    return nbytes(parts)


# ----- the two implementations (each runs in its own process) ------------------------------------
def _linops(nx: int, rtol: float) -> dict:
    """The linops path at nx, timed by part: the family (``poisson_family(nx,
    fixed="boundary")``), K(θ), ``sv.CG(precond=sv.AMG())`` setup, the solve, the adjoint solve
    (``ad.solve_pullback``), ``fam.pullback``; and the bytes of every structure it keeps."""
    # only in the rows that use them: the scale child's RSS is measured
    import adjoints as ad
    import solvers as sv

    t = {}
    t0 = time.perf_counter()
    fam, b = lo.testing.poisson_family(nx, fixed="boundary")
    t["build"] = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    theta = 0.5 + rng.random(fam.n_params)
    a = rng.standard_normal(fam.shape[0])
    t1 = time.perf_counter()
    K = fam(theta)
    t["assemble"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    cache = sv.init(sv.LinearProblem(K, b, posdef=True), sv.CG(rtol=rtol, precond=sv.AMG()))
    t["amg_setup"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    u = cache.solve()
    t["solve"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    g = ad.solve_pullback(cache, a)
    t["adjoint_solve"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    grad = fam.pullback(g.A)
    f = float(a @ u)
    t["pullback"] = time.perf_counter() - t1
    t["total"] = time.perf_counter() - t0
    ml = cache.factor.M.ml
    n = fam.shape[0]
    level0 = ml.levels[0].A
    mem = {"family pattern (indptr, indices, rows)": nbytes(fam.pattern),
           "M: θ → values (built only on request)": nbytes(fam.__dict__.get("M")),
           "Mᴴ: θ → values (read transposed) and pullback": nbytes(fam.MH),
           "free-dof map": nbytes(fam.free),
           "K(θ) values": nbytes(K.values),
           "AMG finest A (scipy int32 index copy)": nbytes(level0.indices, level0.indptr),
           "AMG coarse levels, P, R, B, aggregates": _hierarchy_bytes(ml, skip=(level0,)),
           "vectors (θ, a, b, u, λ, θ̄)": nbytes(theta, a, b, u, g.b, grad)}
    return {"time": t, "bytes": mem, "value": f, "n": n, "nnz": fam.pattern.nnz,
            "iterations": cache.stats.iterations, "levels": len(ml.levels)}


def _hand(nx: int, rtol: float) -> dict:
    """The hand-written numpy + scipy + pyamg script of the same problem, timed by the same
    parts: connectivity and COO indices, scipy's COO → CSR assembly, pyamg's smoothed aggregation
    with its defaults, two scipy CG solves, the element-wise gradient −λₑᵀKₑuₑ."""
    # only in the rows that use them: the scale child's RSS is measured
    import pyamg

    t = {}
    t0 = time.perf_counter()
    ny = nx
    nodes = np.arange((nx + 1) * (ny + 1), dtype=np.int64).reshape(ny + 1, nx + 1)
    dofs = np.stack([nodes[:-1, :-1].ravel(), nodes[:-1, 1:].ravel(), nodes[1:, 1:].ravel(),
                     nodes[1:, :-1].ravel()], axis=1)
    Ke = np.array([[4.0, -1.0, -2.0, -1.0], [-1.0, 4.0, -1.0, -2.0],
                   [-2.0, -1.0, 4.0, -1.0], [-1.0, -2.0, -1.0, 4.0]]) / 6.0
    N = (nx + 1) * (ny + 1)
    free = np.ones(N, dtype=bool)
    free[nodes[0]] = free[nodes[-1]] = free[nodes[:, 0]] = free[nodes[:, -1]] = False
    newidx = np.full(N, -1, dtype=np.int32)
    newidx[free] = np.arange(int(free.sum()), dtype=np.int32)
    n = int(free.sum())
    d = newidx[dofs]
    iK = np.repeat(d, 4, axis=1).ravel()
    jK = np.tile(d, (1, 4)).ravel()
    keep = (iK >= 0) & (jK >= 0)
    sel = np.flatnonzero(keep).astype(np.int64)  # entry → (element, local pair)
    iK, jK = iK[keep], jK[keep]
    del keep
    b = np.full(n, 1.0 / (nx * ny))
    t["build"] = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    theta = 0.5 + rng.random(dofs.shape[0])
    a = rng.standard_normal(n)
    t1 = time.perf_counter()
    sK = (theta[:, None] * Ke.ravel()[None, :]).ravel()[sel]
    K = sp.csr_matrix((sK, (iK, jK)), shape=(n, n))
    del sK
    t["assemble"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    ml = pyamg.smoothed_aggregation_solver(K)
    M = ml.aspreconditioner()
    t["amg_setup"] = time.perf_counter() - t1
    its = [0]

    def tick(_):
        its[0] += 1

    t1 = time.perf_counter()
    u, info1 = spl.cg(K, b, rtol=rtol, M=M, callback=tick)
    t["solve"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    lam, info2 = spl.cg(K, a, rtol=rtol, M=M, callback=tick)
    t["adjoint_solve"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    uf = np.zeros(N)
    lf = np.zeros(N)
    uf[free], lf[free] = u, lam
    grad = -np.einsum("ei,ij,ej->e", lf[dofs], Ke, uf[dofs])
    f = float(a @ u)
    t["pullback"] = time.perf_counter() - t1
    t["total"] = time.perf_counter() - t0
    if info1 or info2:
        raise RuntimeError(f"cg did not converge: info {info1}, {info2}")
    mem = {"connectivity, dof map": nbytes(dofs, newidx, free),
           "COO indices iK, jK (int32) + entry map": nbytes(iK, jK, sel),
           "K (scipy CSR)": nbytes(K),
           "AMG coarse levels, P, R, B, aggregates": _hierarchy_bytes(ml, skip=(K,)),
           "vectors (θ, a, b, u, λ, θ̄)": nbytes(theta, a, b, u, lam, grad)}
    return {"time": t, "bytes": mem, "value": f, "n": n, "nnz": int(K.nnz),
            "iterations": its[0], "levels": len(ml.levels)}


# ----- family build against the plain COO assembly (each in its own process) -------------------
BUILDS = ("plain", "from_elements", "from_coo")


def _boundary_nodes(nx: int) -> np.ndarray:
    """The nodes on the boundary of the (nx + 1)² grid (the fixed dofs of the scale problem)."""
    ix = np.arange((nx + 1) ** 2).reshape(nx + 1, nx + 1)
    return np.concatenate([ix[0], ix[-1], ix[1:-1, 0], ix[1:-1, -1]])


def build_plain(nx: int):
    """K by the plain numpy/scipy COO assembly (what ``_hand`` does before its solves):
    connectivity, Dirichlet elimination, int32 COO indices of the kept entries, csr_matrix."""
    dofs = lo.testing.grid_dofs(nx, nx)
    Ke = lo.testing.q4_laplace_stiffness()
    N = (nx + 1) ** 2
    free = np.ones(N, dtype=bool)
    free[_boundary_nodes(nx)] = False
    newidx = np.full(N, -1, dtype=np.int32)
    n = int(free.sum())
    newidx[free] = np.arange(n, dtype=np.int32)
    d = newidx[dofs]
    iK = np.repeat(d, 4, axis=1).ravel()
    jK = np.tile(d, (1, 4)).ravel()
    keep = (iK >= 0) & (jK >= 0)
    sK = np.broadcast_to(Ke.ravel(), (dofs.shape[0], 16)).ravel()[keep]
    K = sp.csr_matrix((sK, (iK[keep], jK[keep])), shape=(n, n))
    return K


def build_from_elements(nx: int):
    """The family from the same connectivity: ``AffineSparse.from_elements``."""
    dofs = lo.testing.grid_dofs(nx, nx)
    return lo.AffineSparse.from_elements(lo.testing.q4_laplace_stiffness(), dofs,
                                         (nx + 1) ** 2, fixed=_boundary_nodes(nx))


def build_from_coo(nx: int):
    """The family from top88-style triplets over all dofs (built here, as a user would):
    ``AffineSparse.from_coo(iK, jK, sK, param, shape=N, fixed=...)``."""
    dofs = lo.testing.grid_dofs(nx, nx).astype(np.int32)
    ne = dofs.shape[0]
    iK = np.repeat(dofs, 4, axis=1).ravel()
    jK = np.tile(dofs, (1, 4)).ravel()
    sK = np.tile(lo.testing.q4_laplace_stiffness().ravel(), ne)
    param = np.repeat(np.arange(ne, dtype=np.int32), 16)
    return lo.AffineSparse.from_coo(iK, jK, sK, param, shape=(nx + 1) ** 2,
                                    fixed=_boundary_nodes(nx))


def run_build(impl: str, nx: int) -> dict:
    """Time one build (after a warm-up at nx = 8): wall, CPU (user + system) and peak RSS
    over the state before it."""
    fn = {"plain": build_plain, "from_elements": build_from_elements,
          "from_coo": build_from_coo}[impl]
    fn(8)
    base = rss_now()
    c0, t0 = os.times(), time.perf_counter()
    out = fn(nx)
    wall, c1 = time.perf_counter() - t0, os.times()
    nnz = out.nnz if hasattr(out, "nnz") else out.pattern.nnz
    return {"impl": impl, "nx": nx, "n": int(out.shape[0]), "nnz": int(nnz), "wall_s": wall,
            "cpu_s": (c1.user - c0.user) + (c1.system - c0.system), "sys_s": c1.system - c0.system,
            "peak_mb": (peak_rss() - base) / 2**20}


def _in_child(call: str, row: dict, timeout: float, blas_threads: int | None) -> dict:
    """``call`` (an expression of this module) in a fresh process: its peak RSS its own."""
    return in_child("scale", call, row, timeout, threads=blas_threads)


def _build_child(impl: str, nx: int, timeout: float, blas_threads: int | None) -> dict:
    """:func:`run_build` of ``impl`` at ``nx`` in a fresh process."""
    return _in_child(f"run_build({impl!r}, {nx})", {"impl": impl, "nx": nx, "n": (nx - 1) ** 2},
                     timeout, blas_threads)


def run_builds(sizes, repeats: int = 2, timeout: float = 1200.0, progress=None,
               blas_threads: int | None = 1) -> list[dict]:
    """Per size and build, the best (lowest wall time) of ``repeats`` fresh processes, the
    three builds interleaved; ratios against the plain assembly."""
    rows = []
    for nx in sizes:
        best: dict = {}
        for rep in range(repeats):
            for impl in BUILDS:
                if progress:
                    progress(f"build nx={nx} {impl} ({rep + 1}/{repeats})")
                r = _build_child(impl, nx, timeout, blas_threads)
                r["load_avg"] = os.getloadavg()[0]
                if impl not in best or r.get("wall_s", np.inf) < best[impl].get("wall_s", np.inf):
                    best[impl] = r
        plain = best["plain"]
        for impl in BUILDS:
            r = best[impl]
            if "wall_s" in r and "wall_s" in plain:
                r["wall_ratio"] = r["wall_s"] / plain["wall_s"]
                # os.times ticks in 10 ms: at tiny sizes a ratio of ticks means nothing
                r["cpu_ratio"] = r["cpu_s"] / plain["cpu_s"] if plain["cpu_s"] > 0 else None
                r["peak_ratio"] = r["peak_mb"] / plain["peak_mb"] if plain["peak_mb"] > 0 else None
            rows.append(r)
    return rows


def format_builds(rows: list[dict]) -> str:
    """The family-build table (Markdown) from :func:`run_builds`' rows, with its note."""
    out = []
    for r in rows:
        if "skipped" in r:
            out.append({"n": f"{r['n']:,}", "build": r["impl"], "wall s": r["skipped"]})
            continue
        out.append({"n": f"{r['n']:,}", "build": r["impl"], "wall s": f"{r['wall_s']:.2f}",
                    "cpu s (sys)": f"{r['cpu_s']:.2f} ({r['sys_s']:.2f})",
                    "peak GB": f"{r['peak_mb'] / 1024:.2f}",
                    "vs plain: wall, cpu, peak": ", ".join(
                        "–" if r[k] is None else f"{r[k]:.2f}"
                        for k in ("wall_ratio", "cpu_ratio", "peak_ratio"))
                    if r["impl"] != "plain" and "wall_ratio" in r else "",
                    "load": f"{r['load_avg']:.1f}"})
    cols = ["n", "build", "wall s", "cpu s (sys)", "peak GB", "vs plain: wall, cpu, peak", "load"]
    legend = ("family build (target ≤ 1.10 × plain): plain = numpy/scipy COO assembly of one K "
              "(connectivity, elimination, int32 indices, csr_matrix); from_elements and from_coo "
              "build the family K(θ) (from_coo's time includes making the full iK, jK, sK, param); "
              "best of fresh processes; cpu = user + system (system: page faults of fresh memory)")
    return table(out, cols) + "\n\n" + legend


def run_one(impl: str, nx: int, rtol: float = RTOL) -> dict:
    """One measurement in this (child) process: a warm-up at a tiny size (first-call costs
    excluded), then ``impl`` ('linops' or 'hand') at ``nx``: times by part, peak RSS over the
    state after the warm-up, the kept bytes per structure."""
    warnings.simplefilter("ignore")
    import pyamg  # noqa: F401  (imports outside the measurement)
    import scipy.sparse.linalg  # noqa: F401

    import adjoints  # noqa: F401
    import solvers  # noqa: F401

    (_linops if impl == "linops" else _hand)(8, rtol)  # warm-up: first-call costs excluded
    base = rss_now()
    out = (_linops if impl == "linops" else _hand)(nx, rtol)
    peak = peak_rss() - base
    n = out["n"]
    kept = sum(out["bytes"].values())
    return {"method": f"{impl} CG+AMG", "impl": impl, "n": n, "nnz": out["nnz"], "nx": nx,
            "time_s": out["time"]["total"], "times": out["time"], "peak_mb": peak / 2**20,
            "peak_bytes_per_unknown": peak / n, "kept_bytes_per_unknown": kept / n,
            "bytes_per_unknown": {k: v / n for k, v in out["bytes"].items()},
            "iterations": out["iterations"], "levels": out["levels"], "value": out["value"],
            "factorizations": 1}


def _child(impl: str, nx: int, rtol: float, timeout: float, blas_threads: int | None) -> dict:
    """:func:`run_one` of ``impl`` at ``nx`` in a fresh process (its BLAS thread count kept in
    the row)."""
    row = {"method": f"{impl} CG+AMG", "impl": impl, "nx": nx, "n": (nx - 1) ** 2}
    out = _in_child(f"run_one({impl!r}, {nx}, {rtol})", row, timeout, blas_threads)
    return out if "skipped" in out else {**out, "blas_threads": blas_threads}


def run(sizes=(1001, 2001, 3164), rtol: float = RTOL, timeout: float = 1200.0,
        progress=None, blas_threads: int | None = 1) -> list[dict]:
    """Rows per size: hand then linops (never two at once), with linops/hand ratios.
    ``blas_threads``: OpenBLAS/OpenMP threads of both children (default 1: pyamg's setup is
    dominated by BLAS-1 calls in its spectral-radius estimate, which threads only slow down on
    a shared 2-core machine; None leaves the environment as it is)."""
    rows = []
    for nx in sizes:
        pair = {}
        for impl in ("hand", "linops"):
            if progress:
                progress(f"nx={nx} {impl}")
            r = _child(impl, nx, rtol, timeout, blas_threads)
            r["load_avg"] = os.getloadavg()[0]
            pair[impl] = r
        lin, hand = pair["linops"], pair["hand"]
        if "time_s" in lin and "time_s" in hand:
            lin["time_ratio"] = lin["time_s"] / hand["time_s"]
            lin["peak_ratio"] = lin["peak_mb"] / hand["peak_mb"]
        rows += [hand, lin]
    return rows


def format_rows(rows: list[dict]) -> str:
    """The value + gradient table (Markdown) from :func:`run`'s rows, with the kept-bytes
    breakdown below it."""
    out = []
    for r in rows:
        if "skipped" in r:
            out.append({"n": r["n"], "method": r["method"], "time s": r["skipped"]})
            continue
        t = r["times"]
        out.append({"n": f"{r['n']:,}", "method": r["method"], "time s": f"{r['time_s']:.1f}",
                    "build/asm/amg/solve/adj/grad s": "/".join(
                        f"{t[k]:.1f}" for k in ("build", "assemble", "amg_setup", "solve",
                                                "adjoint_solve", "pullback")),
                    "its": r["iterations"], "peak GB": f"{r['peak_mb'] / 1024:.2f}",
                    "peak B/unknown": f"{r['peak_bytes_per_unknown']:.0f}",
                    "kept B/unknown": f"{r['kept_bytes_per_unknown']:.0f}",
                    "linops/hand t, mem": (f"{r['time_ratio']:.2f}, {r['peak_ratio']:.2f}"
                                           if "time_ratio" in r else ""),
                    "load": f"{r['load_avg']:.1f}"})
    cols = ["n", "method", "time s", "build/asm/amg/solve/adj/grad s", "its", "peak GB",
            "peak B/unknown", "kept B/unknown", "linops/hand t, mem", "load"]
    lines = [table(out, cols), "", "bytes per unknown of what each path keeps alive:"]
    for r in rows:
        if "bytes_per_unknown" in r:
            parts = ", ".join(f"{k}: {v:.0f}" for k, v in r["bytes_per_unknown"].items())
            lines.append(f"  n={r['n']:,} {r['impl']}: {parts}")
    return "\n".join(lines)


def main(argv=None, out=None) -> list[dict]:
    """``python -m linops bench scale``: the scale rows, printed and written to ``--out``."""
    ap = argparse.ArgumentParser(prog="python -m linops bench scale",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 description=__doc__.split("\n\n")[0].replace("``", ""),
                                 epilog=legend("scale"))
    ap.add_argument("--sizes", type=positive, nargs="+", default=[1001, 2001, 3164],
                    metavar="NX", help="grid sides (n = (nx − 1)² unknowns); default 1001 2001 "
                    "3164 (10⁶, 4·10⁶, 10⁷)")
    ap.add_argument("--only", choices=("build", "solve"), default=None,
                    help="only the family-build table, or only the value + gradient table")
    ap.add_argument("--build-repeats", type=positive, default=2, metavar="R",
                    help="fresh processes per family build (the best is kept); default 2")
    ap.add_argument("--rtol", type=float, default=RTOL,
                    help=f"CG stops at ‖b − Kx‖ ≤ rtol‖b‖ (default {RTOL:g})")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="BLAS/OpenMP threads per child (default 1; 0: leave the environment)")
    ap.add_argument("--out", type=Path, default=Path(out or "bench-out"), metavar="DIR",
                    help="folder for scale.md and scale.json (default bench-out/)")
    docs.add_option(ap)
    args = ap.parse_args(argv)
    if args.write_docs is not None and args.only is not None:
        ap.error("--write-docs writes both tables into one region of the page: run without "
                 "--only")
    docs.check(ap, args.write_docs, "scale")
    def progress(s):
        print(f"[{time.strftime('%H:%M:%S')}] {s}", file=sys.stderr, flush=True)

    rows, parts = [], []
    if args.only != "solve":
        builds = run_builds(args.sizes, args.build_repeats, progress=progress,
                            blas_threads=args.blas_threads or None)
        rows += [{**r, "section": "build"} for r in builds]
        parts.append(format_builds(builds))
    if args.only != "build":
        solves = run(args.sizes, args.rtol, blas_threads=args.blas_threads or None,
                     progress=progress)
        rows += solves
        parts.append(format_rows(solves))
    text = "\n\n".join(parts)
    publish(args.out, "scale", text, rows, argv, args.write_docs)
    return rows


if __name__ == "__main__":
    main()
