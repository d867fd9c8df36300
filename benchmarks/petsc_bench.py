"""Value + θ-gradient of f(θ) = aᵀK(θ)⁻¹b on the Poisson Q4 family, CG + GAMG, distributed.

    python benchmarks/petsc_bench.py --nx 1000 2000 --ranks 1 2      # the table (spawns mpirun)
    mpirun -n 2 python benchmarks/petsc_bench.py --one linops 1000     # one measurement

Methods (each in its own mpirun, so peak memory is its own):
  linops     PETScElementFamily + sv.init(..., sv.PETSc(cg, gamg)) + ad.solve_pullback + pullback
  petsc4py   the same work hand-written in petsc4py (same mesh arrays and preallocation, same
             KSP options, ghost scatter + einsum for the gradient): the reference for overhead
  serial     our serial path: lo.testing.poisson_family + sv.CG(precond=sv.AMG()) (pyamg), 1 rank
Timed: assembly of K(θ) + init + solve + adjoint solve + θ-gradient (the mesh/family set-up
is excluded; it is built once per optimisation). Memory: peak RSS per rank (max over ranks)
minus the RSS after building the mesh.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

RTOL = 1e-8


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def hashed(idx, salt: int) -> np.ndarray:
    """Rank-independent pseudo-random numbers in [0, 1) from global indices."""
    h = (idx.astype(np.uint64) * np.uint64(2654435761) + np.uint64(salt)) % np.uint64(2**32)
    return h.astype(np.float64) / 2**32


def local_mesh(nx: int, comm):
    """This rank's block of Q4 cells of an nx×nx grid (no global arrays)."""
    from linops.petsc import element_slice

    ne = nx * nx
    sl = element_slice(ne, comm)
    e = np.arange(sl.start, sl.stop)
    n0 = (e // nx) * (nx + 1) + e % nx
    dofs = np.stack([n0, n0 + 1, n0 + nx + 2, n0 + nx + 1], axis=1)
    fixed = np.arange(nx + 1) * (nx + 1)
    return e, dofs, (nx + 1) ** 2, fixed


def one(method: str, nx: int) -> dict:
    if method == "serial":
        return one_serial(nx)
    from petsc4py import PETSc

    import linops as lo
    from linops.petsc import PETScElementFamily

    comm = PETSc.COMM_WORLD
    mpi = comm.tompi4py()
    e, dofs, n, fixed = local_mesh(nx, comm)
    fam = PETScElementFamily.from_elements(lo.testing.q4_laplace_stiffness(), dofs, n, fixed,
                                           comm=comm)
    r0, r1 = fam.owned_range
    theta = 0.5 + hashed(e, 1)
    a = hashed(np.arange(r0, r1), 2) - 0.5
    b = np.full(r1 - r0, 1.0 / nx**2)
    base = rss()
    mpi.Barrier()
    t = time.perf_counter()
    value, grad, its = (run_linops if method == "linops" else run_petsc4py)(fam, theta, a, b)
    mpi.Barrier()
    dt = time.perf_counter() - t
    return {"method": method, "ranks": comm.getSize(), "n": fam.shape[0], "time_s": dt,
            "peak_mb": max(mpi.allgather(peak() - base)) / 2**20,
            "peak_rss_mb": max(mpi.allgather(peak())) / 2**20, "iterations": its,
            "value": mpi.allreduce(value), "grad_norm": float(np.sqrt(mpi.allreduce(grad @ grad)))}


def run_linops(fam, theta, a, b):
    import adjoints as ad
    import solvers as sv

    K = fam(theta)
    cache = sv.init(sv.LinearProblem(K, b), sv.PETSc(ksp_type="cg", pc_type="gamg", rtol=RTOL))
    u = cache.solve()
    g = ad.solve_pullback(cache, a)
    return float(a @ u), fam.pullback(g.A), cache.stats.iterations


def run_petsc4py(fam, theta, a, b):
    """What a careful petsc4py user writes by hand for the same value and gradient."""
    from petsc4py import PETSc

    comm = fam.comm
    nl, N = fam.local_shape[0], fam.shape[0]
    K = PETSc.Mat().createAIJ(((nl, N), (nl, N)), nnz=(fam.d_nnz, fam.o_nnz), comm=comm)
    Ke, R = fam.Ke, fam.edofs
    for s in range(0, R.shape[0], 1 << 16):
        K.setValuesRCV(R[s:s + (1 << 16)], R[s:s + (1 << 16)],
                       np.ascontiguousarray(theta[s:s + (1 << 16), None, None] * Ke),
                       addv=PETSc.InsertMode.ADD_VALUES)
    K.assemble()
    ksp = PETSc.KSP().create(comm)
    ksp.setOperators(K)
    ksp.setType("cg")
    ksp.getPC().setType("gamg")
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.setTolerances(rtol=RTOL, max_it=10000)
    ksp.setUp()
    bv, u = K.createVecs()
    bv.array[:] = b
    ksp.solve(bv, u)
    its = ksp.getIterationNumber()
    av, lam = K.createVecs()
    av.array[:] = a
    ksp.solve(av, lam)       # K symmetric: the adjoint solve is a forward solve
    its += ksp.getIterationNumber()
    ghost = PETSc.Vec().createSeq(fam.ghost_dofs.size + 1, comm=PETSc.COMM_SELF)
    sc = PETSc.Scatter().create(u, PETSc.IS().createGeneral(fam.ghost_dofs.astype(PETSc.IntType),
                                                            comm=PETSc.COMM_SELF), ghost,
                                PETSc.IS().createStride(fam.ghost_dofs.size, 0, 1,
                                                        comm=PETSc.COMM_SELF))
    vals = []
    for v in (u, lam):
        ghost.set(0.0)
        sc.scatter(v, ghost)
        vals.append(ghost.array.copy())
    ue, le = vals[0][fam.ghost_index], vals[1][fam.ghost_index]
    grad = -np.einsum("ea,ea->e", le @ Ke, ue)
    return float(a @ u.array), grad, its


def one_serial(nx: int) -> dict:
    import adjoints as ad
    import linops as lo
    import solvers as sv

    fam, b = lo.testing.poisson_family(nx)
    e = np.arange(fam.n_params)
    theta = 0.5 + hashed(e, 1)
    a = hashed(np.arange(fam.shape[0]), 2) - 0.5
    base = rss()
    t = time.perf_counter()
    cache = sv.init(sv.LinearProblem(fam(theta), b), sv.CG(rtol=RTOL, precond=sv.AMG()))
    u = cache.solve()
    grad = fam.pullback(ad.solve_pullback(cache, a).A)
    dt = time.perf_counter() - t
    return {"method": "serial", "ranks": 1, "n": fam.shape[0], "time_s": dt,
            "peak_mb": (peak() - base) / 2**20, "peak_rss_mb": peak() / 2**20,
            "iterations": cache.stats.iterations, "value": float(a @ u),
            "grad_norm": float(np.linalg.norm(grad))}


def table(sizes, ranks, methods) -> None:
    rows = []
    here = os.path.abspath(__file__)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(here)),
                                          os.environ.get("PYTHONPATH", "")])}
    for nx in sizes:
        for method in methods:
            for p in ([1] if method == "serial" else ranks):
                cmd = ([sys.executable] if method == "serial" else
                       ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(p),
                        sys.executable]) + [here, "--one", method, str(nx)]
                out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                line = [x for x in out.stdout.splitlines() if x.startswith("{")]
                if not line:
                    print(f"{method} nx={nx} p={p} failed:\n{out.stderr[-2000:]}", flush=True)
                    continue
                rows.append(json.loads(line[0]))
                print(json.dumps(rows[-1]), flush=True)
    ref = {(r["n"], r["ranks"]): r for r in rows if r["method"] == "petsc4py"}
    print(f"\n{'method':<10} {'n':>9} {'ranks':>5} {'time (s)':>9} {'vs petsc4py':>11} "
          f"{'peak/rank (MB)':>14} {'iters':>6} {'value':>22}")
    for r in rows:
        h = ref.get((r["n"], r["ranks"]))
        ratio = f"{r['time_s'] / h['time_s']:.2f}" if h else "-"
        print(f"{r['method']:<10} {r['n']:>9} {r['ranks']:>5} {r['time_s']:>9.2f} {ratio:>11} "
              f"{r['peak_mb']:>14.0f} {r['iterations']:>6} {r['value']:>22.15g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", nargs=2, metavar=("METHOD", "NX"))
    ap.add_argument("--nx", type=int, nargs="+", default=[1000])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--methods", nargs="+", default=["linops", "petsc4py", "serial"])
    args = ap.parse_args()
    if args.one:
        res = one(args.one[0], int(args.one[1]))
        if res.get("ranks", 1) == 1 or _rank() == 0:
            print(json.dumps(res), flush=True)
        return
    table(args.nx, args.ranks, args.methods)


def _rank() -> int:
    from petsc4py import PETSc

    return PETSc.COMM_WORLD.getRank()


if __name__ == "__main__":
    main()
