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
import ctypes
import gc
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import adjoints as ad
import linops as lo
import solvers as sv

from . import docs
from .bench import MAX_NX, _nx
from .child import positive, reset_peak
from .legends import legend
from .names import Names
from .report import markdown_table, write_section

METHODS = ("hand", "linops", "serial")
LABELS = {"linops": "linops sv.PETSc cg+gamg", "hand": "hand-written petsc4py cg+gamg",
          "serial": "linops serial sv.CG + sv.AMG (pyamg)"}
WARMUP_NX = 8
COLUMNS = ["n", "ranks", "method", "time s", "vs hand", "peak MB/rank", "mem vs hand",
           "iters fwd+adj", "‖b−Ku‖/‖b‖", "‖a−Kλ‖/‖a‖", "build s", "load"]


# ----- the problem (every rank computes only its own part) ---------------------------------------
def _hashed(idx, salt: int) -> np.ndarray:
    """Rank-independent pseudo-random numbers in [0, 1) from global indices: every rank computes
    the values of its own cells or dofs, and any split of the indices gives the same numbers
    (so results do not depend on the number of ranks). O(len(idx)).

    >>> np.array_equal(_hashed(np.arange(6), 1)[3:], _hashed(np.arange(3, 6), 1))
    True
    """
    h = (np.asarray(idx).astype(np.uint64) * np.uint64(2654435761) + np.uint64(salt)) \
        % np.uint64(2**32)
    return h.astype(np.float64) / 2**32


def _block(total: int, rank: int, size: int) -> tuple[int, int]:
    """[start, stop) of rank ``rank``'s contiguous block of ``total`` items over ``size`` ranks
    (PETSc's default split: sizes differ by at most one).

    >>> [_block(10, r, 3) for r in range(3)]
    [(0, 3), (3, 6), (6, 10)]
    """
    return total * rank // size, total * (rank + 1) // size


def _cell_nodes(cells, nx: int):
    """Node numbers (row by row, x fastest) of cells numbered row by row: (ne, 4), ccw.

    >>> _cell_nodes(np.array([0, 3]), 2).tolist()       # a 2×2 grid of cells, 3×3 nodes
    [[0, 1, 4, 3], [4, 5, 8, 7]]
    """
    n0 = (cells // nx) * (nx + 1) + cells % nx
    return np.stack([n0, n0 + 1, n0 + nx + 2, n0 + nx + 1], axis=1)


def _data(nx: int, cells, rows):
    """(θ, a, b, w) for the given cells and free dofs: θ ∈ [0.5, 1.5) per cell, a (the
    objective's weights) per dof, the load b = 1/nx² per dof, and the weights w of the
    gradient check ``grad_dot = Σ wₑ θ̄ₑ``; all rank-independent (:func:`_hashed`)."""
    theta = 0.5 + _hashed(cells, 1)
    return theta, _hashed(rows, 2) - 0.5, np.full(rows.size, 1.0 / nx**2), _hashed(cells, 3) - 0.5


# ----- linops ------------------------------------------------------------------------------------
def _build_linops(nx: int, comm, cfg) -> dict:
    """linops's build on this rank: its slice of the cells (``element_slice``) and the
    distributed family ``PETScElementFamily.from_elements`` (the left edge's dofs fixed)."""
    from linops.petsc import PETScElementFamily, element_slice  # initialises MPI on import

    sl = element_slice(nx * nx, comm)
    cells = np.arange(sl.start, sl.stop)
    fam = PETScElementFamily.from_elements(lo.testing.q4_laplace_stiffness(),
                                           _cell_nodes(cells, nx), (nx + 1) ** 2,
                                           np.arange(nx + 1) * (nx + 1), comm=comm)
    r0, r1 = fam.owned_range
    return {"fam": fam, "cells": cells, "data": _data(nx, cells, np.arange(r0, r1))}


def _run_linops(st, cfg, mpi) -> dict:
    """The timed linops path: K = fam(θ), ``sv.init`` with ``sv.PETSc(cg, gamg)``, a solve, one
    ``ad.solve_pullback`` (``KSPSolveTranspose`` on the same setup) and ``fam.pullback``."""
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
    """What a careful petsc4py user writes once per mesh, on this rank: the free-dof numbering
    (column 0 fixed), the preallocation counted per owned row (the 3×3 node neighbourhood,
    split into the diagonal and off-diagonal blocks) and the ghost map of the rank's element
    dofs. O(local cells + local rows)."""
    # optional: petsc4py (the petsc extra)
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
    return {"comm": comm, "sizes": (r1 - r0, n_free), "nnz": (d_nnz, o_nnz), "edofs": edofs,
            "ghost": ghost.astype(PETSc.IntType), "gidx": gidx, "cells": cells,
            "Ke": lo.testing.q4_laplace_stiffness(), "data": _data(nx, cells, f)}


def _run_hand(st, cfg, mpi) -> dict:
    """The timed hand-written path: MatSetValuesRCV of θₑKₑ into the preallocated AIJ, KSP cg +
    gamg through KSPSetFromOptions (prefix ``hand_``), two KSPSolve (K is symmetric), one
    VecScatter of u and λ to the rank's element dofs, θ̄ₑ = −λₑᵀKₑuₑ."""
    # optional: petsc4py (the petsc extra)
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
    """The serial reference's build: ``lo.testing.poisson_family(nx)`` on one process, with
    the same θ, a, b as the distributed methods (the same free-dof numbering: the left edge
    fixed, rows numbered row by row)."""
    fam, _ = lo.testing.poisson_family(nx)
    cells = np.arange(fam.n_params)
    return {"fam": fam, "cells": cells, "data": _data(nx, cells, np.arange(fam.shape[0]))}


def _run_serial(st, cfg, mpi) -> dict:
    """The timed serial path: ``sv.CG(rtol, precond=sv.AMG())`` (pyamg) on the same θ, a, b:
    K = fam(θ), ``sv.init``, a solve, one ``ad.solve_pullback`` (CG on Kᴴ = K with the same
    hierarchy) and ``fam.pullback``; the same stopping test ‖b − Kx‖ ≤ rtol‖b‖ as the PETSc
    methods, so the iteration counts differ only through the preconditioner."""
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
    """The named fields of /proc/self/status (VmRSS, VmHWM, ...) in kB, read together; one
    value for one field, a tuple for several. Linux only."""
    with open("/proc/self/status") as f:
        found = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in f)
                 if k in fields}
    values = tuple(found[k] for k in fields)
    return values if len(values) > 1 else values[0]


def _release_and_reset_peak() -> bool:
    """Free what the previous method left, return free heap to the system and reset this
    process's peak RSS to its current RSS; False when the reset is not available.

    Python's and PETSc's garbage first (``gc.collect``, ``PETSc.garbage_cleanup``), then
    glibc's ``malloc_trim(0)`` (freed heap otherwise stays resident and the next method's peak
    would start above its own), then ``/proc/self/clear_refs`` ← 5, which sets VmHWM to the
    current RSS; the reset counts as done when the two agree to 1 MB."""
    # optional: petsc4py (the petsc extra)
    from petsc4py import PETSc

    gc.collect()
    PETSc.garbage_cleanup()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    if not reset_peak():
        return False
    hwm, rss = _rss_kb("VmHWM", "VmRSS")
    return hwm - rss < 1024   # the peak now starts from here


def _residual(res: dict, rhs, x, mpi) -> float:
    """‖rhs − K x‖ / ‖rhs‖ over all ranks (K symmetric: the adjoint residual is the same form),
    with the run's own K: a scipy matrix (serial) or the PETSc Mat (one MatMult). Collective;
    computed after the timed region."""
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
    """One measurement of ``method`` on the nx×nx problem over ``comm`` (collective: every rank
    calls it).

    The previous method's objects are freed and each rank's peak RSS is reset first
    (:func:`_release_and_reset_peak`); the build is timed on its own (``build_s``), then the
    run between two barriers (``time_s``, the slowest rank's ``cpu_s``). Residuals, value and
    gradient norms are computed afterwards, outside the timing.

    Parameters
    ----------
    method : str
        One of :data:`METHODS`.
    nx : int
        Grid side: n = nx·(nx+1) free dofs.
    cfg : dict
        ``rtol`` and ``options`` (PETSc options for both PETSc KSPs).
    comm : petsc4py.PETSc.Comm

    Returns
    -------
    dict
        The row described in the module docstring (the same on every rank).
    """
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
    """One row per (n, ranks, method): the fastest of the repeats (``repeats`` says how many),
    in the order the keys first appear.

    >>> [(r["time_s"], r["repeats"]) for r in _best([
    ...     {"n": 1, "ranks": 1, "method": "hand", "time_s": 2.0},
    ...     {"n": 1, "ranks": 1, "method": "hand", "time_s": 1.5}])]
    [(1.5, 2)]
    """
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
    ``repeat`` > 1 the methods alternate and the fastest run of each is kept.

    The spelling ``mpirun -n P python -m linops bench petsc``: all methods share these P
    processes, one after another. Collective; ``progress`` (a callable taking a line) is
    called on rank 0 only. Returns the rows (:func:`measure`), the same on every rank."""
    # optional: petsc4py (the petsc extra)
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
    """The launcher command for ``ranks`` processes: mpirun from PATH, with Open MPI's
    ``--oversubscribe`` (more ranks than cores on a small machine) and, as root,
    ``--allow-run-as-root``."""
    exe = shutil.which("mpirun")
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    extra = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) \
        if "Open MPI" in ver or "OpenRTE" in ver else []
    return [exe, *extra, "-n", str(ranks)]


def run_launches(sizes, ranks, methods, cfg: dict, timeout: float, repeat: int = 1,
                 progress=None) -> list[dict]:
    """One fresh ``mpirun -n P`` per (nx, P, method) and repeat; the fastest of each is kept.

    The spelling ``python -m linops bench petsc --ranks 1 2``, run without mpirun: each launch
    is this command on P ranks with one method, writing its JSON to a temporary folder that is
    read back; a launch that fails or passes ``timeout`` seconds becomes a row with
    ``skipped``. The serial method is launched on one rank only. One BLAS/OpenMP thread per
    rank."""
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
    """Add time_ratio and mem_ratio to every measured row, against the hand row at the same n
    and ranks (the hand row's own ratios are 1); rows without a hand row get none.

    >>> rows = [{"n": 4, "ranks": 1, "method": m, "time_s": t, "peak_mb": 10.0}
    ...         for m, t in (("hand", 2.0), ("linops", 2.2))]
    >>> add_ratios(rows)
    >>> round(rows[1]["time_ratio"], 2), rows[1]["mem_ratio"]
    (1.1, 1.0)
    """
    hand = {(r["n"], r["ranks"]): r for r in rows if r["method"] == "hand" and "time_s" in r}
    for r in rows:
        h = hand.get((r["n"], r["ranks"]))
        if h is not None and "time_s" in r:
            r["time_ratio"] = r["time_s"] / h["time_s"]
            r["mem_ratio"] = r["peak_mb"] / h["peak_mb"] if h["peak_mb"] > 0 else None


def format_rows(rows: list[dict]) -> str:
    """The petsc table (Markdown, :data:`COLUMNS`; its legend is ``legends.PETSC``); a row that
    did not run says why under time s.

    ``peak MB/rank`` lists every rank's peak, and says "(not isolated)" when the peak could not
    be reset before the method (its peak may then include an earlier method's)."""
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


LEGEND = legend("petsc")  # kept under its old name


# ----- the command -------------------------------------------------------------------------------

def _option(text: str) -> tuple[str, str]:
    """argparse type of ``--option``: 'NAME=VALUE' → (NAME, VALUE), NAME without a dash."""
    name, sep, value = text.partition("=")
    if not sep or not name or name.startswith("-"):
        raise argparse.ArgumentTypeError(f"options are NAME=VALUE without the leading '-' "
                                         f"(pc_gamg_threshold=0.02), got {text!r}")
    return name, value


def parser() -> argparse.ArgumentParser:
    """The parser of ``python -m linops bench petsc`` (its ``--help`` ends with the legend).

    Its description is the module docstring's first paragraph; the epilog shows the two
    spellings (under mpirun, or ``--ranks`` launching mpirun itself) and the legend.

    >>> parser().parse_args(["--nx", "20", "--methods", "Linops", "--ranks", "1", "2"]).ranks
    [1, 2]
    """
    ap = argparse.ArgumentParser(
        prog="python -m linops bench petsc", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n")[0].replace("``", ""),
        epilog="spellings:\n  mpirun -n P python -m linops bench petsc ...   measure on these P "
               "ranks\n  python -m linops bench petsc --ranks 1 2 ...    one mpirun launch per "
               f"measurement, one table\n\n{LEGEND}")
    ap.add_argument("--nx", type=_nx, nargs="+", default=[1000], metavar="NX",
                    help="grid sides (n = nx·(nx+1)); default 1000 (n ≈ 10⁶)")
    ap.add_argument("--methods", nargs="+", action=Names, names=list(METHODS), metavar="NAME",
                    help="linops, hand, serial, any case, comma or space separated (default: "
                         "linops hand, and serial on one rank)")
    ap.add_argument("--ranks", type=positive, nargs="+", metavar="P",
                    help="launch without mpirun: one `mpirun -n P` per measurement")
    ap.add_argument("--rtol", type=float, default=1e-8,
                    help="relative residual ‖b − Kx‖ ≤ rtol‖b‖ for every method (default 1e-8)")
    ap.add_argument("--option", type=_option, action="append", default=[], metavar="NAME=VALUE",
                    help="a PETSc option for both PETSc KSPs (repeatable), e.g. "
                         "pc_gamg_square_graph=0")
    ap.add_argument("--out", type=Path, default=Path("bench-out"), metavar="DIR",
                    help="folder for petsc.md and petsc.json (default bench-out/)")
    ap.add_argument("--repeat", type=positive, default=1, metavar="R",
                    help="runs of each measurement, alternating methods; the fastest is kept "
                         "(default 1)")
    ap.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                    help="seconds per launch with --ranks (default 1800)")
    docs.add_option(ap)
    return ap


def _launched_by_mpirun() -> bool:
    """Whether this process was started by mpirun (Open MPI's or a PMI launcher's variables)."""
    return any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def _validate(ap, args) -> int:
    """Everything that can be checked before measuring — rtol, timeout, petsc4py and mpi4py
    installed, ``--ranks`` not under mpirun and mpirun on PATH, the serial method on one rank,
    ``--out`` writable — each failure a usage error (exit 2) that says what to do; returns the
    number of ranks of this launch (1 with ``--ranks``)."""
    if not 0 < args.rtol < 1:
        ap.error(f"--rtol must be in (0, 1), got {args.rtol}")
    if args.timeout <= 0:
        ap.error(f"--timeout must be positive, got {args.timeout}")
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
        # optional: petsc4py (the petsc extra)
        from petsc4py import PETSc

        size = PETSc.COMM_WORLD.getSize()
        if args.methods and "serial" in args.methods and size > 1:
            ap.error(f"the serial method runs on one process, this launch has {size} ranks: "
                     f"launch it without mpirun (or use --ranks)")
    if size == 1:
        err = _can_write(args.out)
        if err:
            ap.error(err)
    docs.check(ap, args.write_docs, "petsc")
    return size


def main(argv=None) -> list[dict]:
    """``python -m linops bench petsc``: the table, printed and written to ``--out`` on rank 0.
    Every rank returns the rows.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``bench petsc`` (default: the process's own); see :func:`parser`.

    Returns
    -------
    list of dict
        One row per (n, ranks, method), the fastest of ``--repeat`` (keys in the module
        docstring), with ``time_ratio`` / ``mem_ratio`` against the hand row.

    Notes
    -----
    Under ``mpirun -n P`` every rank runs this function and the methods share the P processes
    (:func:`run_here`); with ``--ranks`` (no mpirun) this process only launches one
    ``mpirun`` per measurement (:func:`run_launches`). Arguments are checked before any
    measurement (:func:`_validate`); with P > 1, rank 0 checks ``--out`` and every rank exits
    with status 2 when it is not writable.
    """
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
        # optional: petsc4py (the petsc extra)
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
                      f"{launch}python -m linops bench petsc {' '.join(argv)}".strip(),
                      args.write_docs)
    return rows


def _can_write(out: Path) -> str | None:
    """None when ``out`` can be created and written, else the message for the usage error
    (a probe file named after the process, so that ranks sharing a folder do not collide)."""
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
