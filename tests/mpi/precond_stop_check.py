"""PETSc Krylov methods that stop on their own (preconditioned) norm above the true tolerance,
and atol-bound solves of complex right-hand sides on a real build.

mpirun -n P python tests/mpi/precond_stop_check.py

An easy nonsymmetric tridiagonal system, distributed by rows. Each case prints the status and
the TRUE relative residual against the tolerance (rtol-bound), or the true residual against
atol (atol-bound): SUCCESS must mean true ≤ tol.
"""

import numpy as np
from _common import COMM, emit, lo, sv
from petsc4py import PETSc

MPI = COMM.tompi4py()


def tridiag(n, lower, diag, upper):
    A = PETSc.Mat().createAIJ(((None, n), (None, n)), nnz=3, comm=COMM)
    r0, r1 = A.getOwnershipRange()
    for i in range(r0, r1):
        cols, vals = [i], [diag]
        if i > 0:
            cols.insert(0, i - 1)
            vals.insert(0, lower)
        if i < n - 1:
            cols.append(i + 1)
            vals.append(upper)
        A.setValues(i, cols, vals)
    A.assemble()
    return A


def apply(A, x_local):
    """A x on this rank's rows; a complex x on a real build as its two parts."""
    x_local = np.asarray(x_local)
    if x_local.dtype.kind == "c" and np.dtype(PETSc.ScalarType).kind != "c":
        return apply(A, x_local.real) + 1j * apply(A, x_local.imag)
    x, r = A.createVecRight(), A.createVecLeft()
    x.array[:] = x_local
    A.mult(x, r)
    out = r.array.copy()
    x.destroy()
    r.destroy()
    return out


def true_residual(A, x_local, b_local):
    loc = np.asarray(b_local) - apply(A, x_local)
    return float(np.sqrt(MPI.allreduce(float(np.vdot(loc, loc).real))))


def gnorm(v):
    return float(np.sqrt(MPI.allreduce(float(np.vdot(v, v).real))))


n = 4000
NONSYM = tridiag(n, -1.3, 2.2, -0.7)
NONSYM2 = tridiag(n, -1.2, 2.0, -0.3)
SPD = tridiag(n, -1.0, 2.2, -1.0)
r0, r1 = NONSYM.getOwnershipRange()
rng = np.random.default_rng(11)
b_full = rng.standard_normal(n)
b = b_full[r0:r1]
bc = (b_full + 1j * rng.standard_normal(n))[r0:r1]
combos = [("gmres", "gamg"), ("bcgs", "gamg"), ("gmres", "jacobi"), ("bcgs", "jacobi"),
          ("gmres", "asm"), ("cg", "jacobi")]
for ksp, pc in combos:
    M = SPD if ksp == "cg" else NONSYM
    A = lo.aslinop(M)
    for matrix, Mr in (("a", M), ("b", NONSYM2 if ksp != "cg" else None)):
        if Mr is None:
            continue
        for rtol in (1e-6, 1e-8, 1e-10, 1e-12):
            sol = sv.solve(sv.LinearProblem(lo.aslinop(Mr), b),
                           sv.PETSc(ksp_type=ksp, pc_type=pc, rtol=rtol), throw=False)
            true = true_residual(Mr, sol.u, b) / gnorm(b) if sol.u is not None else None
            emit({"case": "rtol", "matrix": matrix, "ksp": ksp, "pc": pc, "rtol": rtol,
                  "ranks": COMM.getSize(), "status": sol.status.name, "true": true})
    for atol in (1e-4, 1e-7):
        for name, rhs in (("real", b), ("complex", bc)):
            alg = sv.PETSc(ksp_type=ksp, pc_type=pc, rtol=1e-30, atol=atol)
            cache = sv.init(sv.LinearProblem(A, rhs), alg)
            try:
                u = cache.solve()
                status, true = cache.status.name, true_residual(M, u, rhs)
            except sv.SolveError as e:
                status, true = e.status.name, None
            emit({"case": "atol", "ksp": ksp, "pc": pc, "atol": atol, "rhs": name,
                  "ranks": COMM.getSize(), "status": status, "true": true})
