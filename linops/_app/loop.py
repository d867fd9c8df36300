"""Optimization loop: ``steps`` times value + θ-gradient of f(θ) = aᵀK(θ)⁻¹b with θ changing
and K's pattern fixed (the Q4 Poisson family ``lo.testing.poisson_family(nx)``, n = nx·(nx+1)
unknowns), through ``cache.update`` against hand-written loops of the same solvers.

    python -m linops bench loop [--sizes 400] [--steps 10] [--repeat 2] [--methods ...]
    (also: python benchmarks/loop.py ...)

For every solver three loops, each in a fresh subprocess (so its peak RSS is its own), the
variants interleaved and repeated (best time kept):

- ``fresh (hand)``: a hand-written script that factorizes from scratch every step;
- ``symbolic reuse (hand)``: a hand-written script that keeps what the library allows (CHOLMOD
  ``analyze`` once + ``cholesky_inplace``; SuperLU's COLAMD column order + ``NATURAL``; PARDISO
  phase 11 once + phase 22 through pypardiso; pyamg's aggregation as a predefined aggregation);
- ``linops update``: ``cache.update(A=fam(θ))`` + ``cache.solve`` + ``ad.solve_pullback`` +
  ``fam.pullback`` (for Auto as well, which picks by size; compared with fresh CHOLMOD).

Targets: linops ≤ 1.05 × the best hand-written loop of the same solver; Auto ≤ 0.7 × the
hand-written fresh-CHOLMOD loop. Per step: assemble K(θ), factorize (or set up AMG), solve
with b, solve with a (adjoint), contract the θ-gradient. Hand-written gradients use the same
assembly map M (scipy CSR) as linops, so the comparison isolates the solver loop.

``run(sizes, steps) -> list[dict]`` returns the rows (keys of ``python -m linops bench`` rows:
method, n, nnz, time_s, peak_mb, factorizations; plus solver, variant, steps, per_step_s,
numeric_refactorizations, fill, iterations, cpu_s, ratio_to_best_hand, cpu_ratio_to_best_hand,
target_ratio, load_avg, threads). On a shared machine the CPU-time ratio is the steadier one.

>>> solver_names()["SuperLU"]        # the solvers are named as sv.solve names their algorithms
('lu',)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import adjoints as ad
import linops as lo
import solvers as sv

from . import docs
from .child import in_child, peak_rss, positive, rss_now
from .legends import legend
from .methods import slug_of
from .names import Names
from .report import markdown_table, publish

SOLVERS = ("CHOLMOD", "SuperLU", "PARDISO", "CG+AMG", "Auto")
VARIANTS = ("fresh (hand)", "symbolic reuse (hand)", "linops update")
RTOL = 1e-10  # CG+AMG


def linops_alg(solver: str):
    """The algorithm object the linops loop of ``solver`` (one of :data:`SOLVERS`) uses.

    >>> linops_alg("CG+AMG")
    CG(rtol=1e-10, atol=0.0, maxiter=None, x0=None, precond=AMG(kind='sa', ...))
    """
    return {"CHOLMOD": sv.Cholesky(), "SuperLU": sv.LU(), "PARDISO": sv.Pardiso(),
            "CG+AMG": sv.CG(rtol=RTOL, precond=sv.AMG()), "Auto": sv.Auto()}[solver]


def solver_names() -> dict[str, tuple[str, ...]]:
    """Each solver of the table and the other name it answers to on the command line: the
    name of its algorithm as ``sv.solve(prob, name)`` takes it (``cholesky`` for CHOLMOD,
    ``lu`` for SuperLU, ``cg-amg`` for CG+AMG; see ``methods.slug_of``)."""
    return {s: (slug_of(linops_alg(s)),) for s in SOLVERS}


# ----- one measurement (a child process) ---------------------------------------------------------
def _problem(nx: int, steps: int):
    """(fam, b, a, [θ per step]): the family of the nx×nx grid and ``steps`` random θ."""
    fam, b = lo.testing.poisson_family(nx)
    rng = np.random.default_rng(0)
    thetas = [0.5 + rng.random(fam.n_params) for _ in range(steps)]
    a = rng.standard_normal(fam.shape[0])
    return fam, b, a, thetas


def _hand_parts(fam):
    """What a hand-written script builds once: the assembly map as scipy CSR (the same M as
    linops, so assembly costs the same) and the pattern's row/column of every entry; returns
    ``assemble(θ) -> K`` (scipy CSR) and ``gradient(u, λ) -> θ̄ = −Mᵀ(λᵢuⱼ)``."""
    P = fam.pattern
    M = fam.M.to_scipy()
    MT = sp.csr_array(M.T)  # for the gradient θ̄ = Mᵀ g

    def assemble(theta):
        return sp.csr_matrix((M @ theta, P.indices, P.indptr), shape=P.shape)

    def gradient(u, lam):
        return -(MT @ (lam[P.rows] * u[P.indices]))

    return assemble, gradient


def _upper(K):
    """(positions of K's upper-triangle entries in K.data, the upper triangle's indptr and
    indices): what a PARDISO user of a symmetric type computes once per pattern."""
    pos = sp.csr_matrix((np.arange(K.nnz) + 1.0, K.indices, K.indptr), shape=K.shape)
    U = sp.triu(pos, format="csr")
    U.sort_indices()
    return U.data.astype(np.int64) - 1, U.indptr, U.indices


def _pardiso_numeric(ps, U) -> None:
    """Phase 22 alone (numeric refactorization on the analysis ``ps`` keeps) through pypardiso.

    pypardiso's public methods are ``factorize`` (phase 12: analysis AND factorization) and
    ``solve``; the numeric phase by itself is reachable only through ``set_phase`` +
    ``_call_pardiso``, the route pypardiso's own docstrings name for running a chosen phase
    (``remove_stored_factorization``). ``factorized_A`` is what its ``solve`` compares the
    matrix against to decide that the factors are current (phase 33) rather than stale (13).
    That is the whole of what a pypardiso user has to write by hand here — no binding of the
    MKL entry points, which this reference used to carry.
    """
    ps.set_phase(22)
    ps._call_pardiso(U, np.zeros((U.shape[0], 1)))
    ps.factorized_A = U.copy()


@lru_cache(maxsize=1)
def _pypardiso_solver():
    """One pypardiso solver per process, as a script keeps one: its constructor looks for
    MKL's runtime by a recursive search of site-packages (about 0.7 s here), a one-time cost
    like an import (linops caches its MKL lookup the same way), so it stays out of the timed
    loops. Real symmetric positive definite type (mtype 2)."""
    from pypardiso import PyPardisoSolver  # the optional dependency: only this loop needs it

    return PyPardisoSolver(mtype=2)


def _hand_pardiso(reuse: bool, assemble, gradient, b, a, thetas, info) -> float:
    """The PARDISO loops through pypardiso's solver on the upper triangle (mtype 2): fresh =
    ``factorize`` (phase 12: analysis + factorization) + ``solve`` every step; reuse =
    ``factorize`` once, then :func:`_pardiso_numeric` (phase 22) per step. MKL's memory is
    released at the end (``free_memory``). Returns the last f."""
    ps, upper, first = _pypardiso_solver(), None, True
    for theta in thetas:
        K = assemble(theta)
        if upper is None:
            upper = _upper(K)
        U = sp.csr_matrix((K.data[upper[0]], upper[2], upper[1]), shape=K.shape)
        if first or not reuse:
            ps.set_iparm(18, -1)  # report the fill (iparm(18) is an output once set)
            ps.factorize(U)
            info["fill"] = int(ps.get_iparm(18))
            info["factorizations"] += 1
            first = False
        else:
            _pardiso_numeric(ps, U)
            info["numeric_refactorizations"] += 1
        u, lam = ps.solve(U, b), ps.solve(U, a)  # SPD type: Kᵀ = K, the adjoint is a solve
        f, g = a @ u, gradient(u, lam)
    ps.free_memory(everything=True)
    return f


def _hand_loop(solver: str, variant: str, fam, b, a, thetas) -> dict:
    """One hand-written loop (``variant`` 'fresh (hand)' or 'symbolic reuse (hand)') of
    ``solver``; returns the counts, the fill (or iterations) and the last value f.

    Per step: K(θ) assembled through the same map M as linops, a factorization (or AMG setup),
    a solve with b and one with a (the adjoint: K is symmetric, so a forward solve for
    CHOLMOD, PARDISO and CG; SuperLU solves with ``trans='T'``), the θ-gradient −Mᵀ(λᵢuⱼ).
    What "symbolic reuse" keeps, per solver:

    - CHOLMOD: ``cholesky`` once, then ``cholesky_inplace`` (the analysis kept);
    - SuperLU: COLAMD's column order from the first ``splu``, then ``splu(K[:, order],
      permc_spec='NATURAL')`` with the solutions permuted back;
    - PARDISO: pypardiso's ``factorize`` once, then phase 22 (:func:`_pardiso_numeric`);
    - CG+AMG: pyamg's aggregates of the first setup passed as predefined aggregates (the
      numeric hierarchy rebuilt), scipy's ``cg`` twice with the same preconditioner.
    """
    assemble, gradient = _hand_parts(fam)
    reuse = variant == "symbolic reuse (hand)"
    info: dict = {"factorizations": 0, "numeric_refactorizations": 0}
    if solver == "CHOLMOD":
        # optional: scikit-sparse (the cholmod extra)
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
        f = _hand_pardiso(reuse, assemble, gradient, b, a, thetas, info)
    elif solver == "CG+AMG":
        import pyamg  # only in this row's child: its peak RSS is measured
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


def _linops_loop(solver: str, fam, b, a, thetas) -> dict:
    """The linops loop: ``sv.init`` once, then per step ``cache.update(A=fam(θ))``, a solve, one
    ``ad.solve_pullback`` (an adjoint solve on the same factors) and ``fam.pullback``; returns
    the cache's counters, the engine, its fill or iterations and the last value f."""
    cache = None
    for theta in thetas:
        K = fam(theta)
        if cache is None:
            cache = sv.init(sv.LinearProblem(K, b, posdef=True), linops_alg(solver))
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
    """One loop in this process (run it in a fresh one): its time, CPU time and peak RSS over
    the state after building the problem, after a warm-up loop on a tiny problem (imports and
    first-call costs excluded).

    Parameters
    ----------
    solver, variant : str
        Of :data:`SOLVERS` and :data:`VARIANTS`.
    nx, steps : int
        Grid side (n = nx·(nx+1)) and loop length.

    Returns
    -------
    dict
        The row: method, solver, variant, n, nnz, steps, time_s, cpu_s, per_step_s, peak_mb and
        the loop's counts (factorizations, numeric_refactorizations, fill or iterations, value).

    Examples
    --------
    >>> hand = run_one("SuperLU", "symbolic reuse (hand)", 4, 2)
    >>> ours = run_one("SuperLU", "linops update", 4, 2)
    >>> (hand["factorizations"], hand["numeric_refactorizations"]) == (1, 1) == \\
    ...     (ours["factorizations"], ours["numeric_refactorizations"])
    True
    >>> abs(hand["value"] - ours["value"]) < 1e-12 * abs(ours["value"])
    True
    """
    warnings.simplefilter("ignore")
    tiny = _problem(6, 2)
    fam, b, a, thetas = _problem(nx, steps)
    loop = ((lambda *p: _linops_loop(solver, *p)) if variant == "linops update"
            else (lambda *p: _hand_loop(solver, variant, *p)))
    loop(*tiny)
    base = rss_now()
    t, c = time.perf_counter(), time.process_time()
    info = loop(fam, b, a, thetas)
    elapsed, cpu = time.perf_counter() - t, time.process_time() - c
    return {"method": f"{solver}: {variant}", "solver": solver, "variant": variant,
            "n": fam.shape[0], "nnz": fam.pattern.nnz, "steps": steps, "time_s": elapsed,
            "cpu_s": cpu,
            "per_step_s": elapsed / steps, "peak_mb": max(peak_rss() - base, 0) / 2**20, **info}


# ----- the driver --------------------------------------------------------------------------------
def _child(solver: str, variant: str, nx: int, steps: int, timeout: float,
           threads: int | None = None) -> dict:
    """:func:`run_one` in a fresh interpreter (BLAS/OpenMP/MKL limited to ``threads``); a
    failure or a timeout comes back as the row's ``skipped`` reason.

    A fresh process per loop keeps each peak RSS its own and each loop free of what an earlier
    one left (allocator state, MKL's buffers); the row comes back as one JSON line prefixed
    with ``@@`` on the child's stdout. Cost: one interpreter start with the imports (about a
    second) on top of the loop.
    """
    row = {"method": f"{solver}: {variant}", "solver": solver, "variant": variant,
           "n": nx * (nx + 1), "steps": steps}
    return in_child("loop", f"run_one({solver!r}, {variant!r}, {nx}, {steps})", row, timeout,
                    threads=threads)


def _variants(solver: str) -> tuple:
    """The loops measured for ``solver``: all three, Auto only its linops loop."""
    return ("linops update",) if solver == "Auto" else VARIANTS


def run(sizes=(400,), steps: int = 10, solvers=SOLVERS, repeat: int = 2,
        timeout: float = 900.0, progress=None, threads: int | None = None) -> list[dict]:
    """The loop table: one row per (size, solver, variant), best of ``repeat`` interleaved runs,
    each in a fresh subprocess.

    ``ratio_to_best_hand``: time / best hand-written loop of the same solver (Auto: / fresh
    CHOLMOD); ``target_ratio``: 1.05 (Auto: 0.7); the same in CPU time as
    ``cpu_ratio_to_best_hand``. ``threads``: BLAS / OpenMP / MKL threads of every child (None:
    the environment's). Cost: ``repeat`` × (3 per solver, 1 for Auto) child processes per size.
    """
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


COLUMNS = ["n", "method", "time s", "s/step", "cpu s", "fact/num", "fill", "its/step",
           "peak MB", "vs best hand", "cpu vs hand", "load"]


def format_rows(rows: list[dict]) -> str:
    """The loop table (Markdown, :data:`COLUMNS`; the legend is ``legends.LOOP``); a row that
    did not run says why under time s.

    >>> text = format_rows([{"n": 20, "method": "PARDISO: fresh (hand)", "time_s": 0.5,
    ...                      "per_step_s": 0.25, "cpu_s": 0.4, "factorizations": 2,
    ...                      "numeric_refactorizations": 0, "fill": 1170, "peak_mb": 3.0,
    ...                      "load_avg": 1.0},
    ...                     {"n": 20, "method": "CHOLMOD: fresh (hand)",
    ...                      "skipped": "failed: ModuleNotFoundError"}])
    >>> [[c.strip() for c in line.strip("|").split("|")][:7] for line in text.splitlines()[2:]]
    [['20', 'PARDISO: fresh (hand)', '0.50', '0.250', '0.40', '2/0', '1,170'],
     ['20', 'CHOLMOD: fresh (hand)', 'failed: ModuleNotFoundError', '', '', '', '']]
    """
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
    return markdown_table(out, COLUMNS)



def parser() -> argparse.ArgumentParser:
    """The parser of ``python -m linops bench loop`` (its ``--help`` ends with the legend).

    ``--methods`` (old spelling ``--solvers``) takes the table's solver names or the names
    ``sv.solve`` gives their algorithms (:func:`solver_names`), in any case.

    >>> parser().parse_args(["--methods", "cholesky,PARDISO", "--steps", "3"]).solvers
    ['CHOLMOD', 'PARDISO']
    """
    ap = argparse.ArgumentParser(prog="python -m linops bench loop",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 description=__doc__.split("\n\n")[0].replace("``", ""),
                                 epilog=legend("loop"))
    ap.add_argument("--sizes", type=positive, nargs="+", default=[400], metavar="NX",
                    help="grid sides nx (n = nx·(nx+1)); default 400")
    ap.add_argument("--steps", type=positive, default=10, metavar="S",
                    help="value + θ-gradient evaluations per loop (default 10)")
    ap.add_argument("--repeat", type=positive, default=2, metavar="R",
                    help="interleaved runs of every loop; the fastest is kept (default 2)")
    ap.add_argument("--methods", "--solvers", dest="solvers", nargs="+", action=Names,
                    names=solver_names(), what="solver", default=list(SOLVERS), metavar="NAME",
                    help="solvers to loop over, by table name or by the name sv.solve gives its "
                         "algorithm, any case, comma or space separated: "
                         + ", ".join(f"{s} ({alias[0]})" for s, alias in solver_names().items())
                         + " (default: all)")
    ap.add_argument("--threads", type=int, default=0, metavar="T",
                    help="BLAS/OpenMP/MKL threads per child (0: the environment's)")
    ap.add_argument("--out", type=Path, default=Path("bench-out"), metavar="DIR",
                    help="folder for loop.md and loop.json (default bench-out/)")
    docs.add_option(ap)
    return ap


def main(argv=None, out=None) -> list[dict]:
    """``python -m linops bench loop``: the loop table with its legend, printed and written
    to ``--out``; returns the rows (see :func:`run`).

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``bench loop`` (default: the process's own); see :func:`parser`.
    out : str, optional
        The default of ``--out`` (``benchmarks/loop.py`` passes its own).

    Notes
    -----
    Cost: ``--repeat`` × (3 loops per solver, 1 for Auto) fresh processes per size; the
    default (n = 160 400, 10 steps, 2 repeats, every solver) runs about 260 s of loops per
    repeat here (the README's table), some ten minutes in all on two cores. Progress goes to
    stderr.
    """
    ap = parser()
    if out is not None:
        ap.set_defaults(out=Path(out))
    args = ap.parse_args(argv)
    docs.check(ap, args.write_docs, "loop")
    rows = run(args.sizes, args.steps, args.solvers, args.repeat, threads=args.threads or None,
               progress=lambda s: print(f"[{time.strftime('%H:%M:%S')}] {s}", file=sys.stderr,
                                        flush=True))
    publish(args.out, "loop", format_rows(rows), rows, argv, args.write_docs)
    return rows


if __name__ == "__main__":
    main()
