"""update(A=...) on the same pattern, structure keys, and failures mapped to named errors.

mpirun -n P python tests/mpi/update_check.py
"""

import numpy as np
from _common import (COMM, PETScElementFamily, ad, delta, element_slice, emit, events, lo,
                     parameters, problem, serial_reference, sv)
from petsc4py import PETSc

Ke, dofs, n, fixed, sfam, b = problem("poisson", 20)
theta, a = parameters("poisson", dofs.shape[0], sfam.shape[0], b)
sl = element_slice(dofs.shape[0], COMM)
fam = PETScElementFamily.from_elements(Ke, dofs[sl], n, fixed, comm=COMM)
r0, r1 = fam.owned_range
MPI = COMM.tompi4py()

for name, alg in (("mumps", sv.PETSc()),
                  ("cg+gamg", sv.PETSc(ksp_type="cg", pc_type="gamg", rtol=1e-12))):
    K1 = fam(theta[sl])
    cache = sv.init(sv.LinearProblem(K1, b[r0:r1]), alg)
    cache.solve()
    theta2 = theta * (1.0 + 0.5 * np.cos(np.arange(theta.size)))
    K2 = fam(theta2[sl])
    e0 = events()
    cache.update(A=K2)
    e1 = events()
    u = cache.solve()
    g = ad.solve_pullback(cache, a[r0:r1])
    tb = MPI.gather(fam.pullback(g.A), root=0)
    value = MPI.allreduce(float(a[r0:r1] @ u))
    out = {"check": "update", "solver": name, "ranks": COMM.getSize(),
           "key_equal": K1.structure_key == K2.structure_key,
           "key_from_csr_equal": lo.aslinop(K2.mat).structure_key == K2.structure_key,
           "stats": vars(cache.stats), "update_events": delta(e0, e1)}
    if COMM.getRank() == 0:
        v_ref, g_ref = serial_reference(sfam, b, theta2, a)
        out.update(rel_value=abs(value - v_ref) / abs(v_ref),
                   rel_grad=float(np.linalg.norm(np.concatenate(tb) - g_ref) / np.linalg.norm(g_ref)))
    emit(out)

# the factor's copy keeps the symmetry flag (MatDuplicate drops it; GAMG then symmetrizes its
# graph); an update to a NONSYMMETRIC matrix with the same pattern must stop treating adjoint
# solves as forward solves; each solve's history is its own
S = 0.4 * np.array([[0, 1, 0, -1], [-1, 0, 1, 0], [0, -1, 0, 1], [1, 0, -1, 0]], float)
skew = PETScElementFamily.from_elements(Ke + S, dofs[sl], n, fixed, comm=COMM)
for name, alg in (("mumps", sv.PETSc()), ("gmres+gamg", sv.PETSc(ksp_type="gmres",
                                                                   pc_type="gamg", rtol=1e-12))):
    K1, K2 = fam(theta[sl]), skew(theta[sl])
    cache = sv.init(sv.LinearProblem(K1, b[r0:r1]), alg)
    flag, mode1 = cache.factor.mat.isSymmetricKnown(), cache.factor.transpose_mode
    cache.solve()
    h1 = len(cache.factor.history)
    cache.solve()
    its0 = cache.stats.iterations
    cache.solve()
    its2, h2 = cache.stats.iterations - its0, len(cache.factor.history)
    cache.update(A=K2)
    lam = cache.solve_adjoint(a[r0:r1])
    x, y = K2.mat.createVecs()
    x.array[:] = lam
    K2.mat.multTranspose(x, y)
    res = np.sqrt(MPI.allreduce(float(np.sum((y.array - a[r0:r1]) ** 2)))
                  / MPI.allreduce(float(np.sum(a[r0:r1] ** 2))))
    emit({"check": "symmetry", "solver": name, "flag_after_init": list(flag), "mode_init": mode1,
          "mode_after_update": cache.factor.transpose_mode, "key_equal":
          K1.structure_key == K2.structure_key, "adjoint_residual": res,
          "flag_after_update": list(cache.factor.mat.isSymmetricKnown()),
          "history_lens": [h1, h2], "iterations_last_solve": its2})

# a different pattern: a family on another mesh has another key -> the cache sets up anew
fam_b = PETScElementFamily.from_elements(Ke, dofs[sl][:, [0, 1, 2, 3]], n, fixed[1:], comm=COMM)
emit({"check": "other_pattern", "key_equal": fam_b.structure_key == fam.structure_key})


def failure(label, fn):
    try:
        fn()
        emit({"check": "failure", "case": label, "error": None})
    except Exception as e:  # noqa: BLE001 - the test asserts the exact class
        emit({"check": "failure", "case": label, "error": type(e).__name__, "message": str(e),
              "history_len": len(getattr(e, "history", []) or [])})


neumann = PETScElementFamily.from_elements(Ke, dofs[sl], n, None, comm=COMM)  # no fixed dof: singular
failure("singular", lambda: sv.init(sv.LinearProblem(neumann(theta[sl]), np.ones(neumann.local_shape[0])),
                                    sv.PETSc()).solve())
K = fam(theta[sl])
failure("maxiter", lambda: sv.init(sv.LinearProblem(K, b[r0:r1]),
                                   sv.PETSc(ksp_type="cg", pc_type="jacobi", maxiter=3)).solve())
failure("bad_rhs_shape", lambda: sv.init(sv.LinearProblem(K, b[r0:r1]), sv.PETSc()).solve(np.ones(r1 - r0 + 1)))
failure("theta_shape", lambda: fam(theta[sl][:-1]))
if COMM.getSize() > 1:
    failure("sequential_factor", lambda: sv.init(sv.LinearProblem(K, b[r0:r1]),
                                                 sv.PETSc(factor_solver_type="superlu")))

import gc  # noqa: E402

gc.collect()
PETSc.garbage_cleanup()
