"""Optimization loop: `steps` times value + θ-gradient of f(θ) = aᵀK(θ)⁻¹b, θ changing, K's
pattern fixed (Q4 Poisson family, ``lo.testing.poisson_family(nx)``, n = nx·(nx+1)).

    python -m linops bench loop [--sizes 400] [--steps 10] [--repeat 2] [--solvers ...]
    (also: python benchmarks/loop.py ...)

For every solver three loops, each in a fresh subprocess (so its peak RSS is its own), the
variants interleaved and repeated (best time kept):

- ``fresh (hand)``: a hand-written script that factorizes from scratch every step;
- ``symbolic reuse (hand)``: a hand-written script that keeps what the library allows (CHOLMOD
  ``analyze`` once + ``cholesky_inplace``; SuperLU's COLAMD column order + ``NATURAL``; PARDISO
  phase 11 once + phase 22; pyamg's aggregation as a predefined aggregation);
- ``linops update``: ``cache.update(A=fam(θ))`` + ``cache.solve`` + ``ad.solve_pullback`` +
  ``fam.pullback`` (for Auto as well, which picks by size; compared with fresh CHOLMOD).

Targets (issue 12): linops ≤ 1.05 × the best hand-written loop of the same solver; Auto ≤ 0.7 ×
the hand-written fresh-CHOLMOD loop. Per step: assemble K(θ), factorize (or set up AMG), solve
with b, solve with a (adjoint), contract the θ-gradient. Hand-written gradients use the same
assembly map M (scipy CSR) as linops, so the comparison isolates the solver loop.

``run(sizes, steps) -> list[dict]`` returns the rows (keys of ``python -m linops bench`` rows:
method, n, nnz, time_s, peak_mb, factorizations; plus solver, variant, steps, per_step_s,
numeric_refactorizations, fill, iterations, cpu_s, ratio_to_best_hand, cpu_ratio_to_best_hand,
target_ratio, load_avg, threads). On a shared machine the CPU-time ratio is the steadier one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SOLVERS = ("CHOLMOD", "SuperLU", "PARDISO", "CG+AMG", "Auto")
VARIANTS = ("fresh (hand)", "symbolic reuse (hand)", "linops update")
RTOL = 1e-10  # CG+AMG


# ----- one measurement (a child process) ---------------------------------------------------------
def _rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _problem(nx: int, steps: int):
    import linops as lo

    fam, b = lo.testing.poisson_family(nx)
    rng = np.random.default_rng(0)
    thetas = [0.5 + rng.random(fam.n_params) for _ in range(steps)]
    a = rng.standard_normal(fam.shape[0])
    return fam, b, a, thetas


def _hand_parts(fam):
    """What a hand-written script builds once: the assembly map as scipy CSR (the same M as
    linops, so assembly costs the same) and the pattern's row/column of every entry."""
    import scipy.sparse as sp

    P = fam.pattern
    M = fam.M.to_scipy()
    MT = sp.csr_array(M.T)  # for the gradient θ̄ = Mᵀ g

    def assemble(theta):
        return sp.csr_matrix((M @ theta, P.indices, P.indptr), shape=P.shape)

    def gradient(u, lam):
        return -(MT @ (lam[P.rows] * u[P.indices]))

    return assemble, gradient


def _hand_loop(solver: str, variant: str, fam, b, a, thetas) -> dict:
    assemble, gradient = _hand_parts(fam)
    reuse = variant == "symbolic reuse (hand)"
    info: dict = {"factorizations": 0, "numeric_refactorizations": 0}
    if solver == "CHOLMOD":
        from sksparse import cholmod

        F = None
        for theta in thetas:
            K = assemble(theta).tocsc()
            if F is None or not reuse:
                F = cholmod.cholesky(K)
                info["factorizations"] += 1
            else:
                F.cholesky_inplace(K)
                info["numeric_refactorizations"] += 1
            u, lam = F(b), F(a)
            f, g = a @ u, gradient(u, lam)
        info["fill"] = int(F.L().nnz)
    elif solver == "SuperLU":
        import scipy.sparse.linalg as spl

        order = None
        for theta in thetas:
            K = assemble(theta).tocsc()
            if order is None or not reuse:
                lu = spl.splu(K, permc_spec="COLAMD")
                order = np.argsort(lu.perm_c)
                u, lam = lu.solve(b), lu.solve(a, trans="T")
                info["factorizations"] += 1
            else:
                lu = spl.splu(K[:, order], permc_spec="NATURAL")
                y = lu.solve(b)
                u = np.empty_like(y)
                u[order] = y
                lam = lu.solve(a[order], trans="T")
                info["numeric_refactorizations"] += 1
            f, g = a @ u, gradient(u, lam)
        info["fill"] = int(lu.nnz)
    elif solver == "PARDISO":
        h = None
        for theta in thetas:
            K = assemble(theta)
            if h is None or not reuse:
                if h is not None:
                    h.release()
                h = _RawPardiso(K)
                info["factorizations"] += 1
            else:
                h.numeric(K)
                info["numeric_refactorizations"] += 1
            u, lam = h.solve(b), h.solve(a)  # SPD type: Aᵀ = A
            f, g = a @ u, gradient(u, lam)
        info["fill"] = int(h.iparm[17])
        h.release()
    elif solver == "CG+AMG":
        import pyamg
        import scipy.sparse.linalg as spl

        aggs, its = None, []
        for theta in thetas:
            K = assemble(theta)
            if aggs is None or not reuse:
                ml = pyamg.smoothed_aggregation_solver(K, keep=reuse)
                if reuse:
                    aggs = [lv.AggOp for lv in ml.levels[:-1]]
                info["factorizations"] += 1
            else:
                ml = pyamg.smoothed_aggregation_solver(
                    K, aggregate=[("predefined", {"AggOp": g}) for g in aggs],
                    max_levels=len(aggs) + 1)
                info["numeric_refactorizations"] += 1
            Mp = ml.aspreconditioner()
            count = [0]

            def tick(_):
                count[0] += 1

            u, _ = spl.cg(K, b, rtol=RTOL, M=Mp, callback=tick)
            lam, _ = spl.cg(K, a, rtol=RTOL, M=Mp, callback=tick)
            its.append(count[0])
            f, g = a @ u, gradient(u, lam)
        info["iterations"] = its
    else:
        raise ValueError(f"no hand-written loop for solver {solver!r}")
    info["value"] = float(f)
    return info


class _RawPardiso:
    """A hand-written PARDISO loop through MKL's C interface (SPD type 2, upper triangle)."""

    def __init__(self, K):
        import ctypes

        import scipy.sparse as sp
        from pypardiso.pardiso_wrapper import PyPardisoSolver

        self.ct = ctypes
        self.lib = PyPardisoSolver().libmkl
        i32 = ctypes.POINTER(ctypes.c_int32)
        p = ctypes.c_void_p
        self.lib.pardiso.argtypes = [p, i32, i32, i32, i32, i32, p, p, p, p, i32, p, i32, p, p,
                                     i32]
        self.lib.pardisoinit.argtypes = [p, i32, p]
        U = sp.triu(K, format="csr")
        U.sort_indices()
        self.upper = sp.triu(sp.csr_matrix((np.arange(K.nnz) + 1.0, K.indices, K.indptr),
                                           shape=K.shape), format="csr").data.astype(np.int64) - 1
        self.ia, self.ja = U.indptr.astype(np.int32), U.indices.astype(np.int32)
        self.n = K.shape[0]
        self.pt = np.zeros(64, dtype=np.int64)
        self.iparm = np.zeros(64, dtype=np.int32)
        self.lib.pardisoinit(self.pt.ctypes.data, self._i(2), self.iparm.ctypes.data)
        self.iparm[34] = 1
        self.a = np.ascontiguousarray(K.data[self.upper])
        self._call(11)
        self._call(22)

    def _i(self, v):
        return self.ct.byref(self.ct.c_int32(v))

    def _call(self, phase, B=None, X=None):
        if B is None:
            B = X = np.zeros((self.n, 1))
        err = self.ct.c_int32(0)
        self.lib.pardiso(self.pt.ctypes.data, self._i(1), self._i(1), self._i(2), self._i(phase),
                         self._i(self.n), self.a.ctypes.data, self.ia.ctypes.data,
                         self.ja.ctypes.data, None, self._i(B.shape[1]), self.iparm.ctypes.data,
                         self._i(0), B.ctypes.data, X.ctypes.data, self.ct.byref(err))
        if err.value:
            raise RuntimeError(f"PARDISO phase {phase}: error {err.value}")

    def numeric(self, K):
        self.a = np.ascontiguousarray(K.data[self.upper])
        self._call(22)

    def solve(self, b):
        B = np.asfortranarray(b.reshape(-1, 1))
        X = np.zeros_like(B)
        self._call(33, B, X)
        return X[:, 0]

    def release(self):
        z = np.zeros(1)
        err = self.ct.c_int32(0)
        self.lib.pardiso(self.pt.ctypes.data, self._i(1), self._i(1), self._i(2), self._i(-1),
                         self._i(0), z.ctypes.data, self.ia.ctypes.data, self.ja.ctypes.data,
                         None, self._i(1), self.iparm.ctypes.data, self._i(0), z.ctypes.data,
                         z.ctypes.data, self.ct.byref(err))


def _linops_alg(solver: str):
    import solvers as sv

    return {"CHOLMOD": sv.Cholesky(), "SuperLU": sv.LU(), "PARDISO": sv.Pardiso(),
            "CG+AMG": sv.CG(rtol=RTOL, precond=sv.AMG()), "Auto": sv.Auto()}[solver]


def _linops_loop(solver: str, fam, b, a, thetas) -> dict:
    import adjoints as ad
    import solvers as sv

    cache = None
    for theta in thetas:
        K = fam(theta)
        if cache is None:
            cache = sv.init(sv.LinearProblem(K, b, posdef=True), _linops_alg(solver))
        else:
            cache.update(A=K)
        u = cache.solve()
        g = fam.pullback(ad.solve_pullback(cache, a).A)
        f = a @ u
    s = cache.stats
    info = {"factorizations": s.factorizations,
            "numeric_refactorizations": s.numeric_refactorizations,
            "kind": cache.kind.split(":")[0][:40], "value": float(f)}
    fac = cache.factor
    if hasattr(fac, "lu"):
        info["fill"] = int(fac.lu.nnz)
    elif hasattr(fac, "factor") and hasattr(fac.factor, "L"):
        info["fill"] = int(fac.factor.L().nnz)
    elif hasattr(fac, "nnz_factors"):
        info["fill"] = fac.nnz_factors
        info["pardiso_phases"] = {str(k): v for k, v in sorted(fac.phases.items())}
    if getattr(fac, "amg", None) is not None:
        r = fac.amg
        info["iterations"] = r.iterations_per_step
        info["amg"] = {"builds": r.builds, "numeric_rebuilds": r.numeric_rebuilds,
                       "kept": r.kept}
    return info


def run_one(solver: str, variant: str, nx: int, steps: int) -> dict:
    """One loop in this process: time, peak RSS over the state after building the problem
    (and a warm-up loop on a tiny one, so imports and first-call costs are excluded)."""
    import warnings

    warnings.simplefilter("ignore")
    tiny = _problem(6, 2)
    fam, b, a, thetas = _problem(nx, steps)
    loop = ((lambda *p: _linops_loop(solver, *p)) if variant == "linops update"
            else (lambda *p: _hand_loop(solver, variant, *p)))
    loop(*tiny)
    base = _rss_now()
    t, c = time.perf_counter(), time.process_time()
    info = loop(fam, b, a, thetas)
    elapsed, cpu = time.perf_counter() - t, time.process_time() - c
    return {"method": f"{solver}: {variant}", "solver": solver, "variant": variant,
            "n": fam.shape[0], "nnz": fam.pattern.nnz, "steps": steps, "time_s": elapsed,
            "cpu_s": cpu,
            "per_step_s": elapsed / steps, "peak_mb": max(_peak_rss() - base, 0) / 2**20, **info}


# ----- the driver --------------------------------------------------------------------------------
def _child(solver: str, variant: str, nx: int, steps: int, timeout: float,
           threads: int | None = None) -> dict:
    code = ("import json; from linops._app.loop import run_one; "
            f"print('@@' + json.dumps(run_one({solver!r}, {variant!r}, {nx}, {steps})))")
    row = {"method": f"{solver}: {variant}", "solver": solver, "variant": variant,
           "n": nx * (nx + 1), "steps": steps}
    env = dict(os.environ)
    if threads:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(threads)
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {**row, "skipped": f"timed out after {timeout:.0f} s"}
    for line in p.stdout.splitlines():
        if line.startswith("@@"):
            return json.loads(line[2:])
    err = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {**row, "skipped": f"failed: {err[:160]}"}


def _variants(solver: str) -> tuple:
    return ("linops update",) if solver == "Auto" else VARIANTS


def run(sizes=(400,), steps: int = 10, solvers=SOLVERS, repeat: int = 2,
        timeout: float = 900.0, progress=None, threads: int | None = None) -> list[dict]:
    """The loop table: one row per (size, solver, variant), best of ``repeat`` interleaved runs,
    each in a fresh subprocess. ``ratio_to_best_hand``: time / best hand-written loop of the same
    solver (Auto: / fresh CHOLMOD); ``target_ratio``: 1.05 (Auto: 0.7). ``threads``: BLAS /
    OpenMP / MKL threads of every child (None: the environment's)."""
    rows = []
    for nx in sizes:
        best: dict = {}
        jobs = [(s, v) for s in solvers for v in _variants(s)]
        for rep in range(repeat):
            order = jobs[rep % len(jobs):] + jobs[:rep % len(jobs)]  # rotate: interleaved
            for i, (s, v) in enumerate(order):
                if progress:
                    progress(f"nx={nx} rep {rep + 1}/{repeat} {s}: {v}")
                r = _child(s, v, nx, steps, timeout, threads)
                r["load_avg"] = os.getloadavg()[0]
                r["threads"] = threads
                key = (s, v)
                if key not in best or ("time_s" in r and r["time_s"] < best[key].get(
                        "time_s", float("inf"))):
                    best[key] = r
        for key in ("time_s", "cpu_s"):
            hand = {s: min((best[(s, v)][key] for v in VARIANTS[:2]
                            if key in best.get((s, v), {})), default=None) for s in solvers}
            fresh_cholmod = best.get(("CHOLMOD", "fresh (hand)"), {}).get(key)
            for s in solvers:
                r = best[(s, "linops update")]
                ref = fresh_cholmod if s == "Auto" else hand.get(s)
                if key in r and ref:
                    name = "ratio_to_best_hand" if key == "time_s" else "cpu_ratio_to_best_hand"
                    r[name] = r[key] / ref
                    r["target_ratio"] = 0.7 if s == "Auto" else 1.05
        rows += [best[(s, v)] for s in solvers for v in _variants(s)]
    return rows


def format_rows(rows: list[dict]) -> str:
    from .report import markdown_table as table

    out = []
    for r in rows:
        if "skipped" in r:
            out.append({"n": r["n"], "method": r["method"], "time s": r["skipped"]})
            continue
        out.append({"n": r["n"], "method": r["method"], "time s": f"{r['time_s']:.2f}",
                    "s/step": f"{r['per_step_s']:.3f}",
                    "fact/num": f"{r['factorizations']}/{r['numeric_refactorizations']}",
                    "fill": f"{r['fill']:,}" if "fill" in r else "",
                    "its/step": " ".join(map(str, r.get("iterations", []))),
                    "peak MB": f"{r['peak_mb']:.0f}",
                    "cpu s": f"{r['cpu_s']:.2f}" if "cpu_s" in r else "",
                    "vs best hand": (f"{r['ratio_to_best_hand']:.2f} (≤{r['target_ratio']})"
                                     if "ratio_to_best_hand" in r else ""),
                    "cpu vs hand": (f"{r['cpu_ratio_to_best_hand']:.2f}"
                                    if "cpu_ratio_to_best_hand" in r else ""),
                    "load": f"{r['load_avg']:.1f}"})
    cols = ["n", "method", "time s", "s/step", "cpu s", "fact/num", "fill", "its/step",
            "peak MB", "vs best hand", "cpu vs hand", "load"]
    return table(out, cols)


def main(argv=None, out=None) -> list[dict]:
    """``python -m linops bench loop``: the loop table, printed and written to ``--out``."""
    from pathlib import Path

    from .report import publish

    ap = argparse.ArgumentParser(prog="python -m linops bench loop",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=_positive, nargs="+", default=[400], metavar="NX",
                    help="grid sides nx (n = nx·(nx+1)); default 400")
    ap.add_argument("--steps", type=_positive, default=10)
    ap.add_argument("--repeat", type=_positive, default=2)
    ap.add_argument("--solvers", nargs="+", choices=SOLVERS, default=list(SOLVERS))
    ap.add_argument("--threads", type=int, default=0,
                    help="BLAS/OpenMP/MKL threads per child (0: the environment's)")
    ap.add_argument("--out", type=Path, default=Path(out or "bench-out"), metavar="DIR")
    args = ap.parse_args(argv)
    rows = run(args.sizes, args.steps, args.solvers, args.repeat, threads=args.threads or None,
               progress=lambda s: print(f"[{time.strftime('%H:%M:%S')}] {s}", file=sys.stderr,
                                        flush=True))
    text = format_rows(rows)
    publish(args.out, "loop", text, rows, argv)
    return rows


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return v


if __name__ == "__main__":
    main()
