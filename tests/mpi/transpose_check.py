"""Transposed/adjoint solves per PETSc combination on a nonsymmetric tridiagonal Mat.

mpirun -n P python tests/mpi/transpose_check.py
One RESULT line per combination: how the factor handles Aᵀ (reuse / route / refuse / verified
at setup), the setup events an adjoint solve triggered, and the true residual ‖Aᵀy − c‖/‖c‖.
"""

import numpy as np
from _common import COMM, MPI, emit, events, delta, lo, sv
from petsc4py import PETSc
from solvers._engines.petsc import TransposeNotSupportedError

N = 2000


def tridiagonal():
    A = PETSc.Mat().createAIJ(((PETSc.DECIDE, N), (PETSc.DECIDE, N)), nnz=(3, 1), comm=COMM)
    r0, r1 = A.getOwnershipRange()
    for i in range(r0, r1):
        if i > 0:
            A.setValue(i, i - 1, -1.6)
        A.setValue(i, i, 2.5)
        if i < N - 1:
            A.setValue(i, i + 1, -0.4)
    A.assemble()
    return A


def norm(x) -> float:
    return float(np.sqrt(MPI.allreduce(float(np.vdot(x, x).real))))


COMBOS = {
    "mumps (table: verified)": sv.PETSc(),
    "gmres+gamg (table: verified)": sv.PETSc(ksp_type="gmres", pc_type="gamg", rtol=1e-12),
    "superlu_dist (table: wrong) routed": sv.PETSc(factor_solver_type="superlu_dist"),
    "superlu_dist (table: wrong) refused": sv.PETSc(factor_solver_type="superlu_dist",
                                                    route_transpose=False),
    "tfqmr+jacobi (not in table)": sv.PETSc(ksp_type="tfqmr", pc_type="jacobi", rtol=1e-12),
    "gmres+hypre tuned (not in table)": sv.PETSc(ksp_type="gmres", pc_type="hypre", rtol=1e-12,
                                                 options={"pc_hypre_type": "boomeramg"}),
    "mumps tuned (not in table)": sv.PETSc(options={"mat_mumps_icntl_14": 50}),
    "gmres+hypre refused": sv.PETSc(ksp_type="gmres", pc_type="hypre", rtol=1e-12,
                                    route_transpose=False),
}

import sys  # noqa: E402

GROUP = sys.argv[1] if len(sys.argv) > 1 else ""
COMBOS = {k: v for k, v in COMBOS.items() if any(g in k for g in GROUP.split(","))}
M = tridiagonal()
A = lo.aslinop(M)
r0, r1 = M.getOwnershipRange()
rng = np.random.default_rng(11)
b_all, c_all = rng.standard_normal(N), rng.standard_normal(N)
b, c = b_all[r0:r1], c_all[r0:r1]
x, y = rng.standard_normal(r1 - r0), rng.standard_normal(r1 - r0)
emit({"check": "dottest", "lhs": MPI.allreduce(float(y @ (A @ x))),
      "rhs": MPI.allreduce(float(x @ (A.H @ y))), "shape": list(A.shape),
      "local_shape": MPI.allgather(list(A.local_shape)), "type": type(A).__name__})

for name, alg in COMBOS.items():
    try:
        cache = sv.init(sv.LinearProblem(A, b), alg)
    except lo.BackendNotSupported as e:
        emit({"check": "transpose", "combo": name, "ranks": COMM.getSize(),
              "error": type(e).__name__, "message": str(e), "at": "init"})
        continue
    f = cache.factor
    out = {"check": "transpose", "combo": name, "ranks": COMM.getSize(), "mode": f.transpose_mode,
           "note": f.transpose_note, "setup_check": list(getattr(f, "transpose_check", ())) or None}
    u = cache.solve()
    out["forward_residual"] = norm(b - A @ u) / norm(b)
    e0 = events()
    try:
        lam = cache.solve_adjoint(c)
        lam2 = cache.solve_transpose(2 * c)
        out["adjoint_residual"] = norm(c - A.H @ lam) / norm(c)
        out["transpose_residual"] = norm(2 * c - A.T @ lam2) / norm(2 * c)
        out["error"] = None
    except TransposeNotSupportedError as e:
        out["error"], out["message"] = type(e).__name__, str(e)
    out["adjoint_events"] = delta(e0, events())
    out["transpose_setups"] = f.transpose_setups
    out["factorizations"] = cache.stats.factorizations
    emit(out)
    del cache, f

M.setValue(0, 0, 3.0)
M.assemble()
try:
    A @ x
    emit({"check": "modified", "error": None})
except Exception as e:  # noqa: BLE001 - the test asserts the exact class name
    emit({"check": "modified", "error": type(e).__name__, "message": str(e)})

import gc  # noqa: E402

gc.collect()
PETSc.garbage_cleanup()
