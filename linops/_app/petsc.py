"""``python -m linops bench petsc``: value + θ-gradient of f(θ) = aᵀK(θ)⁻¹b on the Poisson Q4
family (n = nx·(nx+1) free dofs, left edge fixed), distributed with PETSc CG + GAMG, against a
hand-written petsc4py script and against our serial CG + AMG (pyamg) path.

Two spellings:

    mpirun -n P python -m linops bench petsc [--nx 1000 2000] [--methods linops hand]
        measures on the P ranks of THIS launch (every rank runs main; rank 0 prints and writes).
        Without mpirun, P = 1. The methods run one after another in the same processes; before
        each, every rank frees the previous method's objects, hands free heap back to the system
        (glibc malloc_trim) and resets its peak RSS (Linux /proc/self/clear_refs), so each peak
        is that method's own (``peak_isolated`` says whether the reset worked).
    python -m linops bench petsc --ranks 1 2 [--nx 1000 2000]
        (launched WITHOUT mpirun) a driver: one fresh ``mpirun -n P`` launch per (nx, P, method),
        each measured as above, and one table comparing 1 and 2 ranks. The headline spelling.

Methods (the same θ, a, b and the same free-dof numbering in all three; results rank-independent):

- ``linops``: ``PETScElementFamily.from_elements`` (build) → ``fam(θ)`` → ``sv.init(LinearProblem(K,
  b), sv.PETSc(ksp_type="cg", pc_type="gamg", rtol))`` → ``cache.solve()`` →
  ``ad.solve_pullback`` → ``fam.pullback``;
- ``hand``: petsc4py only — its own mesh numbering, preallocation counted per owned row,
  MatSetValuesRCV of θₑKₑ, KSP cg + gamg configured with KSPSetFromOptions, KSPSetUp once, two
  KSPSolve (K is symmetric: the adjoint solve is a forward solve), one VecScatter of u and λ to
  the dofs of the rank's cells, θ̄ₑ = −λₑᵀKₑuₑ;
- ``serial``: ``lo.testing.poisson_family(nx)`` → ``sv.CG(rtol, precond=sv.AMG())`` (pyamg) →
  ``ad.solve_pullback`` → ``fam.pullback``, one process (P = 1 only).

Stopping criterion, the same for all: zero initial guess, ‖b − A x‖₂ ≤ rtol·‖b‖₂ on the
UNPRECONDITIONED residual (KSP_NORM_UNPRECONDITIONED; scipy's cg). Both PETSc methods configure
their KSP through KSPSetFromOptions: in PETSc 3.18 a GAMG that never sees it runs with
``pc_gamg_square_graph 0`` instead of the documented default 1 (5 levels, operator complexity
1.49 instead of 4 levels, 1.10 at n = 4·10⁴), a different preconditioner with other iteration
counts. ``--option NAME=VALUE`` reaches both KSPs. The achieved ‖b − Ku‖/‖b‖ and ‖a − Kᵀλ‖/‖a‖
are computed after the timed region and reported.

Timed (all ranks, between barriers): assembly of K(θ) + setup + solve + adjoint solve +
θ-gradient + the value. Not timed (``build_s``): the mesh numbering and the family /
preallocation structure, built once per optimisation. Memory, per rank: peak RSS minus the RSS
before building the problem (imports and a warm-up on nx = 8 come before), gathered.
``main(argv) -> rows``; each row: method, n, nx, ranks, time_s, cpu_s, build_s,
peak_mb (max over ranks), peak_mb_per_rank, iterations (forward + adjoint), iterations_fwd,
iterations_adj, residual_fwd, residual_adj, value, grad_norm, grad_dot, time_ratio and
mem_ratio (against hand at the same n and ranks), load_avg.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .bench import MAX_NX, _nx

METHODS = ("hand", "linops", "serial")
LABELS = {"linops": "linops sv.PETSc cg+gamg", "hand": "hand-written petsc4py cg+gamg",
          "serial": "linops serial sv.CG + sv.AMG (pyamg)"}
WARMUP_NX = 8
COLUMNS = ["n", "ranks", "method", "time s", "vs hand", "peak MB/rank", "mem vs hand",
           "iters fwd+adj", "‖b−Ku‖/‖b‖", "‖a−Kλ‖/‖a‖", "build s", "load"]


# ----- the problem (every rank computes only its own part) ---------------------------------------
def _hashed(idx, salt: int) -> np.ndarray:
    """Rank-independent pseudo-random numbers in [0, 1) from global indices."""
    h = (np.asarray(idx).astype(np.uint64) * np.uint64(2654435761) + np.uint64(salt)) \
        % np.uint64(2**32)
    return h.astype(np.float64) / 2**32


def _block(total: int, rank: int, size: int) -> tuple[int, int]:
    return total * rank // size, total * (rank + 1) // size


def _cell_nodes(cells, nx: int):
    """Node numbers (row by row, x fastest) of cells numbered row by row: (ne, 4), ccw."""
    n0 = (cells // nx) * (nx + 1) + cells % nx
    return np.stack([n0, n0 + 1, n0 + nx + 2, n0 + nx + 1], axis=1)


def _data(nx: int, cells, rows):
    """θ on the given cells; a, b on the given free dofs; the weights of the gradient check."""
    theta = 0.5 + _hashed(cells, 1)
    return theta, _hashed(rows, 2) - 0.5, np.full(rows.size, 1.0 / nx**2), _hashed(cells, 3) - 0.5


# ----- linops ------------------------------------------------------------------------------------
def _build_linops(nx: int, comm, cfg) -> dict:
    import linops as lo
    from linops.petsc import PETScElementFamily, element_slice

    sl = element_slice(nx * nx, comm)
    cells = np.arange(sl.start, sl.stop)
    fam = PETScElementFamily.from_elements(lo.testing.q4_laplace_stiffness(),
                                           _cell_nodes(cells, nx), (nx + 1) ** 2,
                                           np.arange(nx + 1) * (nx + 1), comm=comm)
    r0, r1 = fam.owned_range
    return {"fam": fam, "cells": cells, "data": _data(nx, cells, np.arange(r0, r1))}


def _run_linops(st, cfg, mpi) -> dict:
    import adjoints as ad
    import solvers as sv

    fam, (theta, a, b, _) = st["fam"], st["data"]
    K = fam(theta)
    cache = sv.init(sv.LinearProblem(K, b), sv.PETSc(ksp_type="cg", pc_type="gamg",
                                                     rtol=cfg["rtol"], options=cfg["options"]))
    u = cache.solve()
    its = cache.stats.iterations
    g = ad.solve_pullback(cache, a)
    grad = fam.pullback(g.A)
    value = mpi.allreduce(float(a @ u))
    lam = -np.asarray(g.A.factors()[0])[:, 0]
    return {"value": value, "grad": grad, "u": u, "lam": lam, "mat": K.mat, "keep": cache,
            "its": (its, cache.stats.iterations - its)}


# ----- hand-written petsc4py ---------------------------------------------------------------------
def _build_hand(nx: int, comm, cfg) -> dict:
    """What a careful petsc4py user writes: numbering, preallocation, the ghost scatter."""
    from petsc4py import PETSc

    p, r = comm.getSize(), comm.getRank()
    e0, e1 = _block(nx * nx, r, p)
    cells = np.arange(e0, e1)
    nodes = _cell_nodes(cells, nx)
    col = nodes % (nx + 1)                    # free dofs: column 0 fixed, f = i·nx + col − 1
    edofs = np.where(col > 0, (nodes // (nx + 1)) * nx + col - 1, -1).astype(PETSc.IntType)
    n_free = (nx + 1) * nx
    r0, r1 = _block(n_free, r, p)
    f = np.arange(r0, r1)
    i, c = f // nx, f % nx + 1
    d_nnz, o_nnz = np.zeros(f.size, PETSc.IntType), np.zeros(f.size, PETSc.IntType)
    for di in (-1, 0, 1):                     # the 3×3 node neighbourhood of each owned row
        for dc in (-1, 0, 1):
            ok = (i + di >= 0) & (i + di <= nx) & (c + dc >= 1) & (c + dc <= nx)
            j = (i + di) * nx + c + dc - 1
            d_nnz += ok & (j >= r0) & (j < r1)
            o_nnz += ok & ((j < r0) | (j >= r1))
    ghost = np.unique(edofs[edofs >= 0])
    gidx = np.where(edofs >= 0, np.searchsorted(ghost, np.maximum(edofs, 0)), ghost.size)
    import linops as lo

    return {"comm": comm, "sizes": (r1 - r0, n_free), "nnz": (d_nnz, o_nnz), "edofs": edofs,
            "ghost": ghost.astype(PETSc.IntType), "gidx": gidx, "cells": cells,
            "Ke": lo.testing.q4_laplace_stiffness(), "data": _data(nx, cells, f)}


def _run_hand(st, cfg, mpi) -> dict:
    from petsc4py import PETSc

    theta, a, b, _ = st["data"]
    Ke, R, comm = st["Ke"], st["edofs"], st["comm"]
    K = PETSc.Mat().createAIJ((st["sizes"], st["sizes"]), nnz=st["nnz"], comm=comm)
    chunk = 1 << 16
    for s in range(0, R.shape[0], chunk):
        K.setValuesRCV(R[s:s + chunk], R[s:s + chunk],
                       np.ascontiguousarray(theta[s:s + chunk, None, None] * Ke),
                       addv=PETSc.InsertMode.ADD_VALUES)
    K.assemble()
    K.setOption(PETSc.Mat.Option.SYMMETRIC, True)
    ksp = PETSc.KSP().create(comm)
    ksp.setOperators(K)
    ksp.setType("cg")
    ksp.getPC().setType("gamg")
    ksp.setTolerances(rtol=cfg["rtol"], atol=0.0, max_it=10000)
    opts = PETSc.Options("hand_")
    for k, v in cfg["options"].items():
        opts[k] = v
    ksp.setOptionsPrefix("hand_")
    ksp.setFromOptions()
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)   # ‖b − Kx‖, as linops
    ksp.setUp()
    bv, u = K.createVecs()
    bv.array[:] = b
    ksp.solve(bv, u)
    its = [ksp.getIterationNumber()]
    bv.array[:] = a
    lam = u.duplicate()
    ksp.solve(bv, lam)                   # K symmetric: Kᵀλ = a is a forward solve
    its.append(ksp.getIterationNumber())
    loc = PETSc.Vec().createSeq(st["ghost"].size + 1, comm=PETSc.COMM_SELF)
    sc = PETSc.Scatter().create(u, PETSc.IS().createGeneral(st["ghost"], comm=PETSc.COMM_SELF),
                                loc, PETSc.IS().createStride(st["ghost"].size, 0, 1,
                                                             comm=PETSc.COMM_SELF))
    ue = []
    for v in (u, lam):
        loc.set(0.0)
        sc.scatter(v, loc)
        ue.append(loc.array[st["gidx"]])
    grad = -np.einsum("ea,ea->e", ue[1] @ Ke, ue[0])
    value = mpi.allreduce(float(a @ u.array))
    for k in cfg["options"]:
        opts.delValue(k)
    out = {"value": value, "grad": grad, "u": u.array.copy(), "lam": lam.array.copy(), "mat": K,
           "its": tuple(its)}
    for obj in (ksp, sc, loc, bv, u, lam):
        obj.destroy()
    return out


# ----- serial (numpy + scipy + pyamg) ------------------------------------------------------------
def _build_serial(nx: int, comm, cfg) -> dict:
    import linops as lo

    fam, _ = lo.testing.poisson_family(nx)
    cells = np.arange(fam.n_params)
    return {"fam": fam, "cells": cells, "data": _data(nx, cells, np.arange(fam.shape[0]))}


def _run_serial(st, cfg, mpi) -> dict:
    import adjoints as ad
    import solvers as sv

    fam, (theta, a, b, _) = st["fam"], st["data"]
    K = fam(theta)
    cache = sv.init(sv.LinearProblem(K, b, posdef=True),
                    sv.CG(rtol=cfg["rtol"], precond=sv.AMG()))
    u = cache.solve()
    its = cache.stats.iterations
    g = ad.solve_pullback(cache, a)
    grad = fam.pullback(g.A)
    lam = -np.asarray(g.A.factors()[0])[:, 0]
    return {"value": float(a @ u), "grad": grad, "u": u, "lam": lam, "scipy": K.to_scipy(),
            "its": (its, cache.stats.iterations - its)}


BUILD = {"linops": _build_linops, "hand": _build_hand, "serial": _build_serial}
RUN = {"linops": _run_linops, "hand": _run_hand, "serial": _run_serial}


# ----- measuring on this communicator ------------------------------------------------------------
def _rss_kb(*fields: str):
    """VmRSS / VmHWM (kB) of this process, read together from /proc/self/status."""
    with open("/proc/self/status") as f:
        found = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in f)
                 if k in fields}
    values = tuple(found[k] for k in fields)
    return values if len(values) > 1 else values[0]


def _release_and_reset_peak() -> bool:
    """Free what the previous method left, return free heap to the system and reset this
    process's peak RSS to its current RSS; False when the reset is not available."""
    from petsc4py import PETSc

    gc.collect()
    PETSc.garbage_cleanup()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        hwm, rss = _rss_kb("VmHWM", "VmRSS")
        return hwm - rss < 1024   # the peak now starts from here
    except OSError:
        return False


def _residual(res: dict, rhs, x, mpi) -> float:
    """‖rhs − K x‖ / ‖rhs‖ over all ranks (K symmetric: the adjoint residual is the same form)."""
    if "scipy" in res:
        r = rhs - res["scipy"] @ x
    else:
        K = res["mat"]
        xv, yv = K.createVecs()
        xv.array[:] = x
        K.mult(xv, yv)
        r = rhs - yv.array
        xv.destroy(), yv.destroy()
    return float(np.sqrt(mpi.allreduce(float(r @ r)) / mpi.allreduce(float(rhs @ rhs))))


def measure(method: str, nx: int, cfg: dict, comm) -> dict:
    """One measurement of ``method`` on the nx×nx problem over ``comm`` (collective)."""
    mpi = comm.tompi4py()
    isolated = all(mpi.allgather(_release_and_reset_peak()))
    base = _rss_kb("VmRSS")
    mpi.Barrier()
    t0 = time.perf_counter()
    st = BUILD[method](nx, comm, cfg)
    build_s, build_hwm = time.perf_counter() - t0, _rss_kb("VmHWM")
    isolated &= all(mpi.allgather(_release_and_reset_peak()))   # the run's own peak from here
    built = _rss_kb("VmRSS")
    mpi.Barrier()
    t1, c1 = time.perf_counter(), time.process_time()
    res = RUN[method](st, cfg, mpi)
    mpi.Barrier()
    t2, c2 = time.perf_counter(), time.process_time()
    run_hwm = _rss_kb("VmHWM")
    peaks = mpi.allgather((max(build_hwm, run_hwm) - base) / 1024)
    phases = mpi.allgather(((build_hwm - base) / 1024, (built - base) / 1024,
                            (run_hwm - built) / 1024))
    theta, a, b, w = st["data"]
    grad = np.asarray(res["grad"])
    row = {"method": method, "label": LABELS[method], "n": (nx + 1) * nx, "nx": nx,
           "ranks": comm.getSize(), "time_s": t2 - t1, "cpu_s": max(mpi.allgather(c2 - c1)),
           "build_s": max(mpi.allgather(build_s)), "peak_mb": max(peaks), "peak_mb_per_rank": peaks,
           "peak_isolated": isolated,
           "build_peak_mb": [p[0] for p in phases], "built_mb": [p[1] for p in phases],
           "run_peak_mb": [p[2] for p in phases], "iterations": int(sum(res["its"])),
           "iterations_fwd": int(res["its"][0]), "iterations_adj": int(res["its"][1]),
           "residual_fwd": _residual(res, b, res["u"], mpi),
           "residual_adj": _residual(res, a, res["lam"], mpi), "value": float(res["value"]),
           "grad_norm": float(np.sqrt(mpi.allreduce(float(grad @ grad)))),
           "grad_dot": float(mpi.allreduce(float(w @ grad))), "rtol": cfg["rtol"],
           "options": cfg["options"], "load_avg": round(os.getloadavg()[0], 2)}
    if "mat" in res:
        res["mat"].destroy()
    del st, res
    return row


def _best(rows: list[dict]) -> list[dict]:
    """One row per (n, ranks, method): the fastest of the repeats (``repeats`` says how many)."""
    best: dict = {}
    for r in rows:
        key = (r["n"], r["ranks"], r["method"])
        count = best.get(key, {}).get("repeats", 0) + 1
        if key not in best or r.get("time_s", np.inf) < best[key].get("time_s", np.inf):
            best[key] = r
        best[key]["repeats"] = count
    return list(best.values())


def run_here(sizes, methods, cfg: dict, repeat: int = 1, progress=None) -> list[dict]:
    """Every method at every size on COMM_WORLD, after a warm-up of each on nx = 8; with
    ``repeat`` > 1 the methods alternate and the fastest run of each is kept."""
    from petsc4py import PETSc

    comm = PETSc.COMM_WORLD
    for m in methods:
        measure(m, WARMUP_NX, cfg, comm)
    rows = []
    for nx in sizes:
        for i in range(repeat):
            for m in methods:
                if progress and comm.getRank() == 0:
                    progress(f"{m}, nx={nx}, {comm.getSize()} rank(s), run {i + 1}/{repeat}")
                rows.append(measure(m, nx, cfg, comm))
    _release_and_reset_peak()
    return _best(rows)


# ----- the driver: one mpirun launch per measurement ---------------------------------------------
def _mpirun(ranks: int) -> list[str]:
    exe = shutil.which("mpirun")
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    extra = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) \
        if "Open MPI" in ver or "OpenRTE" in ver else []
    return [exe, *extra, "-n", str(ranks)]


def run_launches(sizes, ranks, methods, cfg: dict, timeout: float, repeat: int = 1,
                 progress=None) -> list[dict]:
    """One fresh ``mpirun -n P`` per (nx, P, method) and repeat; the fastest of each is kept."""
    rows = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    jobs = [(nx, p, i, m) for nx in sizes for p in ranks for i in range(repeat) for m in methods
            if m != "serial" or p == 1]
    for nx, p, i, m in jobs:
        if progress:
            progress(f"{m}, nx={nx}, mpirun -n {p}, run {i + 1}/{repeat}")
        opts = [f"--option={k}={v}" for k, v in cfg["options"].items()]
        with tempfile.TemporaryDirectory() as tmp:
            cmd = _mpirun(p) + [sys.executable, "-m", "linops", "bench", "petsc", "--nx", str(nx),
                                "--methods", m, "--rtol", repr(cfg["rtol"]), *opts, "--out", tmp]
            base = {"method": m, "label": LABELS[m], "n": (nx + 1) * nx, "nx": nx, "ranks": p}
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                     env=env)
            except subprocess.TimeoutExpired:
                rows.append({**base, "skipped": f"timed out after {timeout:.0f} s"})
                continue
            path = Path(tmp) / "petsc.json"
            if out.returncode != 0 or not path.exists():
                err = (out.stderr.strip().splitlines() or ["no output"])[-1]
                rows.append({**base, "skipped": f"failed ({out.returncode}): {err[:200]}"})
                continue
            rows += json.loads(path.read_text())["results"]
    return _best(rows)


# ----- report ------------------------------------------------------------------------------------
def add_ratios(rows: list[dict]) -> None:
    """time_ratio and mem_ratio of every row against the hand row at the same n and ranks."""
    hand = {(r["n"], r["ranks"]): r for r in rows if r["method"] == "hand" and "time_s" in r}
    for r in rows:
        h = hand.get((r["n"], r["ranks"]))
        if h is not None and "time_s" in r:
            r["time_ratio"] = r["time_s"] / h["time_s"]
            r["mem_ratio"] = r["peak_mb"] / h["peak_mb"] if h["peak_mb"] > 0 else None


def format_rows(rows: list[dict]) -> str:
    from .report import markdown_table

    cells = []
    for r in rows:
        if "skipped" in r:
            cells.append({"n": f"{r['n']:,}", "ranks": r["ranks"], "method": r["method"],
                          "time s": r["skipped"]})
            continue
        cells.append({
            "n": f"{r['n']:,}", "ranks": r["ranks"], "method": r["method"],
            "time s": f"{r['time_s']:.2f}",
            "vs hand": f"{r['time_ratio']:.2f}" if "time_ratio" in r else "",
            "peak MB/rank": " / ".join(f"{m:.0f}" for m in r["peak_mb_per_rank"])
            + ("" if r["peak_isolated"] else " (not isolated)"),
            "mem vs hand": f"{r['mem_ratio']:.2f}" if r.get("mem_ratio") else "",
            "iters fwd+adj": f"{r['iterations_fwd']}+{r['iterations_adj']}",
            "‖b−Ku‖/‖b‖": f"{r['residual_fwd']:.1e}", "‖a−Kλ‖/‖a‖": f"{r['residual_adj']:.1e}",
            "build s": f"{r['build_s']:.2f}", "load": f"{r['load_avg']:.1f}"})
    return markdown_table(cells, COLUMNS)


LEGEND = """columns:
  time s         assembly K(θ) + setup + solve + adjoint solve + θ-gradient + value (not the build)
  vs hand        time / the hand-written petsc4py script's, same n and ranks (target ≤ 1.10)
  peak MB/rank   each rank's peak RSS over its RSS before building the problem
  mem vs hand    max-over-ranks peak / the hand-written script's
  iters fwd+adj  Krylov iterations of the forward and the adjoint solve
  ‖b−Ku‖/‖b‖     achieved true relative residuals (stopping test: ‖b − Kx‖ ≤ rtol‖b‖ for all)
  build s        mesh numbering + family / preallocation structure (once per optimisation)"""


# ----- the command -------------------------------------------------------------------------------
def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return v


def _option(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or name.startswith("-"):
        raise argparse.ArgumentTypeError(f"options are NAME=VALUE without the leading '-' "
                                         f"(pc_gamg_threshold=0.02), got {text!r}")
    return name, value


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m linops bench petsc", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n")[0].replace("``", ""),
        epilog="spellings:\n  mpirun -n P python -m linops bench petsc ...   measure on these P "
               "ranks\n  python -m linops bench petsc --ranks 1 2 ...    one mpirun launch per "
               f"measurement, one table\n\n{LEGEND}")
    ap.add_argument("--nx", type=_nx, nargs="+", default=[1000], metavar="NX",
                    help="grid sides (n = nx·(nx+1)); default 1000 (n ≈ 10⁶)")
    ap.add_argument("--methods", nargs="+", choices=METHODS, metavar="METHOD",
                    help="linops, hand, serial (default: linops hand, and serial on one rank)")
    ap.add_argument("--ranks", type=_positive, nargs="+", metavar="P",
                    help="launch without mpirun: one `mpirun -n P` per measurement")
    ap.add_argument("--rtol", type=float, default=1e-8,
                    help="relative residual ‖b − Kx‖ ≤ rtol‖b‖ for every method (default 1e-8)")
    ap.add_argument("--option", type=_option, action="append", default=[], metavar="NAME=VALUE",
                    help="a PETSc option for both PETSc KSPs (repeatable), e.g. "
                         "pc_gamg_square_graph=0")
    ap.add_argument("--out", type=Path, default=Path("bench-out"), metavar="DIR",
                    help="folder for petsc.md and petsc.json (default bench-out/)")
    ap.add_argument("--repeat", type=_positive, default=1, metavar="R",
                    help="runs of each measurement, alternating methods; the fastest is kept "
                         "(default 1)")
    ap.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                    help="seconds per launch with --ranks (default 1800)")
    return ap


def _launched_by_mpirun() -> bool:
    return any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def _validate(ap, args) -> int:
    """Everything that can be checked before measuring; returns the ranks of this launch."""
    if not 0 < args.rtol < 1:
        ap.error(f"--rtol must be in (0, 1), got {args.rtol}")
    if args.timeout <= 0:
        ap.error(f"--timeout must be positive, got {args.timeout}")
    import importlib.util

    missing = [m for m in ("petsc4py", "mpi4py") if importlib.util.find_spec(m) is None]
    if missing:
        ap.error(f"{' and '.join(missing)} not installed: apt-get install libpetsc-real-dev "
                 f"openmpi-bin, then pip install \"linops[petsc]\" (see the README)")
    if args.ranks:
        if _launched_by_mpirun():
            ap.error("--ranks launches mpirun itself: run it without mpirun, or drop --ranks to "
                     "measure on the ranks of this launch")
        if shutil.which("mpirun") is None:
            ap.error("--ranks needs mpirun on PATH (apt-get install openmpi-bin)")
        size = 1
    else:
        from petsc4py import PETSc

        size = PETSc.COMM_WORLD.getSize()
        if args.methods and "serial" in args.methods and size > 1:
            ap.error(f"the serial method runs on one process, this launch has {size} ranks: "
                     f"launch it without mpirun (or use --ranks)")
    if size == 1:
        err = _can_write(args.out)
        if err:
            ap.error(err)
    return size


def main(argv=None) -> list[dict]:
    """``python -m linops bench petsc``: the table, printed and written to ``--out`` on rank 0.
    Every rank returns the rows."""
    from .report import write_section

    argv = list(sys.argv[3:] if argv is None else argv)
    ap = parser()
    args = ap.parse_args(argv)
    size = _validate(ap, args)
    cfg = {"rtol": args.rtol, "options": dict(args.option)}

    def progress(text):
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    if args.ranks:
        methods = args.methods or list(METHODS)
        rows = run_launches(args.nx, args.ranks, methods, cfg, args.timeout, args.repeat,
                            progress)
        rank = 0
    else:
        from petsc4py import PETSc

        rank = PETSc.COMM_WORLD.getRank()
        if size > 1:   # rank 0 checks --out before anyone measures
            ok = PETSc.COMM_WORLD.tompi4py().bcast(_can_write(args.out) if rank == 0 else None)
            if ok is not None:
                if rank == 0:
                    ap.error(ok)
                sys.exit(2)
        methods = args.methods or (["hand", "linops"] + (["serial"] if size == 1 else []))
        rows = run_here(args.nx, methods, cfg, args.repeat, progress)
    add_ratios(rows)
    if rank == 0:
        text = format_rows(rows)
        print(f"value + θ-gradient of aᵀK(θ)⁻¹b, Poisson Q4, CG + GAMG / AMG, rtol "
              f"{args.rtol:g}\n{text}\n{LEGEND}", flush=True)
        launch = f"mpirun -n {size} " if size > 1 else ""
        write_section(args.out, "petsc", f"{text}\n\n```\n{LEGEND}\n```", rows,
                      f"{launch}python -m linops bench petsc {' '.join(argv)}".strip())
    return rows


def _can_write(out: Path) -> str | None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        return f"cannot write results to {out}/: {e.strerror or e}"
    return None


if __name__ == "__main__":
    main()
