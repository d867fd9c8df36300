"""Value aᵀK(θ)⁻¹b and θ-gradient of distributed element families vs the serial numpy path.

mpirun -n P python tests/mpi/family_check.py PATH   (PATH: cache | factor)
Prints one RESULT line per (problem, solver) on rank 0.
"""

import numpy as np
from petsc4py import PETSc
from _common import (COMM, PETScElementFamily, argv, distributed, element_slice, emit,
                     parameters, problem, serial_reference, sv)

SOLVERS = {
    "mumps": sv.PETSc(),
    "cg+gamg": sv.PETSc(ksp_type="cg", pc_type="gamg", rtol=1e-12),
    "gmres+gamg": sv.PETSc(ksp_type="gmres", pc_type="gamg", rtol=1e-12),
}
CASES = [("poisson", 24, "mumps"), ("poisson", 24, "cg+gamg"), ("mbb", 6, "mumps"),
         ("mbb", 6, "cg+gamg"), ("convection", 16, "mumps"), ("convection", 16, "gmres+gamg")]
# SuperLU_dist (routed adjoints) is exercised in transpose_check.py: in Debian's PETSc 3.18 a
# process that used SuperLU_dist next to MUMPS, GAMG and hypre can corrupt the heap at MPI finalize.

path = argv(1, "cache")
only = argv(2, "")
CASES = [c for c in CASES if not only or c[2] in only.split(",")]
for name, size, solver in CASES:
    Ke, dofs, n, fixed, sfam, b = problem(name, size)
    theta, a = parameters(name, dofs.shape[0], sfam.shape[0], b)
    sl = element_slice(dofs.shape[0], COMM)
    fam = PETScElementFamily.from_elements(Ke, dofs[sl], n, fixed, comm=COMM)
    r0, r1 = fam.owned_range
    res = distributed(fam, SOLVERS[solver], theta[sl], b[r0:r1], a[r0:r1], path)
    out = {"problem": name, "solver": solver, "path": path, "ranks": COMM.getSize(),
           "n": int(sfam.shape[0]), **{k: v for k, v in res.items() if k != "grad"}}
    if COMM.getRank() == 0:
        value_ref, grad_ref = serial_reference(sfam, b, theta, a)
        out.update(value_ref=value_ref, rel_value=abs(res["value"] - value_ref) / abs(value_ref),
                   rel_grad=float(np.linalg.norm(res["grad"] - grad_ref) / np.linalg.norm(grad_ref)))
    emit(out)

import gc  # noqa: E402
gc.collect()  # destroy PETSc objects before PetscFinalize
PETSc.garbage_cleanup()
