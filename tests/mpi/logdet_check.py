"""cache.logdet() on PETSc MUMPS factorizations, and options that reach the factor and the levels.

mpirun -n P python tests/mpi/logdet_check.py

Each case compares with numpy's slogdet of the serial family's dense matrix (n = 420): MUMPS LU
and Cholesky, after update (numeric refactorization), after a failed update (the restored,
freshly set-up KSP), nonsymmetric, indefinite with a negative determinant (the sign), and
the refusals.
"""

import numpy as np
from _common import COMM, PETScElementFamily, element_slice, emit, lo, parameters, problem, sv

Ke, dofs, n, fixed, sfam, b = problem("poisson", 20)
theta, a = parameters("poisson", dofs.shape[0], sfam.shape[0], b)
sl = element_slice(dofs.shape[0], COMM)
fam = PETScElementFamily.from_elements(Ke, dofs[sl], n, fixed, comm=COMM)
S = 0.4 * np.array([[0, 1, 0, -1], [-1, 0, 1, 0], [0, -1, 0, 1], [1, 0, -1, 0]], float)
skew = PETScElementFamily.from_elements(Ke + S, dofs[sl], n, fixed, comm=COMM)
sskew = lo.AffineSparse.from_elements(np.broadcast_to(Ke + S, (dofs.shape[0], 4, 4)), dofs, n,
                                      fixed=fixed)


def reference(family, th):
    s, v = np.linalg.slogdet(family(th).to_scipy().toarray())
    return float(s), float(v)


def emit_case(case, cache, ref):
    got = cache.logdet()
    emit({"check": "logdet", "case": case, "ranks": COMM.getSize(), "sign": float(np.real(got.sign)),
          "logabsdet": got.logabsdet, "ref_sign": ref[0], "ref": ref[1],
          "factorizations": cache.stats.factorizations})


theta2 = theta * (1.0 + 0.5 * np.cos(np.arange(theta.size)))
for name, alg in (("lu", sv.PETSc()), ("cholesky", sv.PETSc(pc_type="cholesky"))):
    cache = sv.init(sv.LinearProblem(fam(theta[sl])), alg)
    emit_case(f"{name} fresh", cache, reference(sfam, theta))
    cache.update(A=fam(theta2[sl]))
    emit_case(f"{name} after update", cache, reference(sfam, theta2))
    try:
        cache.update(A=fam(np.zeros_like(theta)[sl]))      # singular: refused, old state kept
    except Exception as e:
        emit({"check": "failed_update", "case": name, "error": type(e).__name__})
    emit_case(f"{name} after a failed update", cache, reference(sfam, theta2))

# a nonsymmetric matrix, and an indefinite one with det < 0: K − σI with σ between K's two
# lowest eigenvalues has exactly one negative eigenvalue
cache = sv.init(sv.LinearProblem(skew(theta[sl])), sv.PETSc())
emit_case("lu nonsymmetric", cache, reference(sskew, theta))
K = sfam(theta).to_scipy().toarray()
lam = np.linalg.eigvalsh(K)
sigma = 0.5 * (lam[0] + lam[1])
shifted = fam(theta[sl]).mat.duplicate(copy=True)
shifted.shift(-sigma)
cache.update(A=lo.aslinop(shifted))
emit_case("lu indefinite", cache, tuple(float(x) for x in np.linalg.slogdet(K - sigma * np.eye(len(K)))))

for case, alg in (("iterative", sv.PETSc(ksp_type="cg", pc_type="gamg")),
                  ("icntl_33 off", sv.PETSc(options={"mat_mumps_icntl_33": 0}))):
    cache = sv.init(sv.LinearProblem(fam(theta[sl])), alg)
    try:
        cache.logdet()
        emit({"check": "refused", "case": case, "error": None})
    except Exception as e:
        emit({"check": "refused", "case": case, "error": type(e).__name__, "message": str(e)})

# options read at PCSetUp reach what they configure: MUMPS's ICNTL(14) (workspace increase)
# and the GAMG levels' smoother iterations
cache = sv.init(sv.LinearProblem(fam(theta[sl])), sv.PETSc(options={"mat_mumps_icntl_14": 77}))
icntl14 = cache.factor.ksp.getPC().getFactorMatrix().getMumpsIcntl(14)
cache = sv.init(sv.LinearProblem(fam(theta[sl])),
                sv.PETSc(ksp_type="cg", pc_type="gamg", options={"mg_levels_ksp_max_it": 3}))
pc = cache.factor.ksp.getPC()
level_its = [pc.getMGSmoother(k).getTolerances()[3] for k in range(1, pc.getMGLevels())]
emit({"check": "options", "icntl14": icntl14, "level_max_it": level_its})
