"""The solver contract on PETSc, in-process on one rank: hints never replace the adjoint
check, SUCCESS means the true residual met rtol, a real build refuses complex input, updates
are rechecked, routed transposes leave the forward matrix alone."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import solvers as sv
from tests._cases.matrices import needs_petsc, rel_residual, skewed, spd


# ----- in-process on one rank --------------------------------------------------------------------
def _tridiag(n=400, lower=-1.6, diag=2.5, upper=-0.4):
    return sp.csr_matrix(sp.diags([lower, diag, upper], [-1, 0, 1], shape=(n, n)))


@needs_petsc
def test_petsc_hermitian_hint_never_replaces_the_adjoint_check():
    A = _tridiag()
    c = np.random.default_rng(1).standard_normal(A.shape[0])
    cache = sv.init(sv.LinearProblem(A, hermitian=True), sv.PETSc())
    lam = cache.solve_adjoint(c)
    assert rel_residual(A.T, lam, c) < 1e-10                      # was 0.829 with SUCCESS
    assert cache.factor.transpose_mode != "forward"


@needs_petsc
def test_petsc_gmres_icc_on_nonsymmetric_a_solves_the_adjoint():
    A = _tridiag()
    b, c = np.ones(A.shape[0]), np.random.default_rng(2).standard_normal(A.shape[0])
    cache = sv.init(sv.LinearProblem(A, b), sv.PETSc(ksp_type="gmres", pc_type="icc",
                                                     rtol=1e-10))
    assert rel_residual(A, cache.solve(), b) <= 1e-10
    try:
        lam = cache.solve_adjoint(c)
    except sv.SolveError as e:                       # a named refusal is acceptable, never 0.152
        assert not e.status.ok
    else:
        assert rel_residual(A.T, lam, c) <= 1e-10


@needs_petsc
def test_real_petsc_build_refuses_complex_input():
    from petsc4py import PETSc

    if np.dtype(PETSc.ScalarType).kind == "c":
        pytest.skip("a complex PETSc build")
    A = sp.csr_matrix(_tridiag() + 0.3j * sp.eye(400))
    with pytest.raises(sv.BackendNotSupported, match="complex PETSc build"):
        sv.init(sv.LinearProblem(A), sv.PETSc())


@needs_petsc
@pytest.mark.parametrize("rtol", [1e-4, 1e-6, 1e-8, 1e-10])
def test_petsc_success_means_the_true_residual_met_rtol(rtol):
    # GMRES tests its left-preconditioned residual, so its own stop lands near rtol either side
    A = _tridiag(2000, -1.3, 2.2, -0.7)
    b = np.random.default_rng(3).standard_normal(2000)
    sol = sv.solve(sv.LinearProblem(A, b), sv.PETSc(ksp_type="gmres", pc_type="jacobi",
                                                    rtol=rtol), throw=False)
    if sol.status is sv.Status.SUCCESS:
        assert rel_residual(A, sol.u, b) <= rtol           # no slack (was 1.5×)
    else:
        assert not sol.status.ok or sol.status is sv.Status.ACCURACY_LIMIT


@needs_petsc
def test_petsc_cholesky_names_the_non_symmetry():
    A = _tridiag(50)
    with pytest.raises(sv.NotHermitianError, match="needs a Hermitian matrix"):
        sv.init(sv.LinearProblem(A), sv.PETSc(pc_type="cholesky"))


@needs_petsc
def test_petsc_update_to_nonsymmetric_values_is_rechecked():
    """The symmetry of the new values decides the adjoint path (MatIsSymmetric would trust the
    flag the old values left on the factor's Mat)."""
    S = spd(400)
    c = np.random.default_rng(4).standard_normal(S.shape[0])
    cache = sv.init(sv.LinearProblem(S), sv.PETSc())
    assert cache.factor.transpose_mode == "forward"
    B = skewed(S)
    cache.update(A=B)
    assert cache.factor.transpose_mode != "forward"
    assert rel_residual(B.T, cache.solve_adjoint(c), c) < 1e-10


@needs_petsc
def test_petsc_routed_transpose_leaves_the_forward_matrix_alone():
    """petsc4py's mat.transpose() without an output transposes IN PLACE: the routed adjoint
    once turned the factor's own Mat into Aᵀ, so later forward solves solved Aᵀ."""
    A = _tridiag()
    b, c = np.ones(400), np.random.default_rng(5).standard_normal(400)
    cache = sv.init(sv.LinearProblem(A, b), sv.PETSc(ksp_type="gmres", pc_type="hypre",
                                                     rtol=1e-11))
    assert cache.factor.transpose_mode == "route"
    lam = cache.solve_adjoint(c)
    assert rel_residual(A.T, lam, c) < 1e-10
    assert rel_residual(A, cache.solve(), b) < 1e-10              # forward still solves A


@needs_petsc
def test_a_converged_petsc_krylov_solve_builds_no_abs_matrix():
    """PETSc's backward error needs a |A| Mat (a copy of A: 116 MB at n = 10⁶, the whole
    memory gap to the hand-written script in bench petsc); a converged solve never builds it."""
    S = spd(400)
    b = np.ones(S.shape[0])
    cache = sv.init(sv.LinearProblem(S, b), sv.PETSc(ksp_type="cg", pc_type="jacobi",
                                                     rtol=1e-10))
    u = cache.solve()
    cache.solve_adjoint(b)
    assert cache.factor._absmat is None and rel_residual(S, u, b) <= 1e-10
    with pytest.raises(sv.ConvergenceError):
        sv.init(sv.LinearProblem(S, b), sv.PETSc(ksp_type="cg", pc_type="none", rtol=1e-12,
                                                 maxiter=2)).solve()


_CLOSED_SCRIPT = """
import numpy as np, scipy.sparse as sp, solvers as sv
A = sp.csr_matrix(sp.diags([-1.6, 2.5, -0.4], [-1, 0, 1], shape=(50, 50)))
for alg in (sv.PETSc(), sv.PETSc(ksp_type="gmres", pc_type="jacobi")):
    cache = sv.init(sv.LinearProblem(A, np.ones(50)), alg)
    cache.solve()
    cache.close()
    cache.close()                                   # idempotent
    for call in (lambda: cache.update(A=2 * A), lambda: cache.solve(),
                 lambda: cache.solve_adjoint(np.ones(50)), lambda: cache.logdet(),
                 lambda: sv.init(sv.LinearProblem(A), alg, like=cache)):
        try:
            call()
        except sv.ClosedCacheError as e:
            assert "this cache was closed" in str(e), e
        else:
            raise AssertionError("a closed cache answered")
    assert cache.closed
print("CLOSED-OK")
"""


@needs_petsc
def test_petsc_update_after_close_is_a_named_error_not_a_crash():
    """close() destroys the KSP and the Mat; touching them again aborted MPI (a segfault of the
    whole process), so this runs in a child process."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", _CLOSED_SCRIPT], capture_output=True, text=True,
                         timeout=300, env=env, cwd=root)
    assert out.returncode == 0 and "CLOSED-OK" in out.stdout, (out.returncode, out.stdout,
                                                                out.stderr[-2000:])


@needs_petsc
@pytest.mark.parametrize("kw, name", [({"ksp_type": "bicgstab"}, "bicgstab"),
                                      ({"ksp_type": "gmres", "pc_type": "nosuchpc"}, "nosuchpc")])
def test_petsc_unknown_type_names_is_backend_not_supported(kw, name):
    with pytest.raises(sv.BackendNotSupported, match=f"{name}.*KSP types: .*bcgs.*PC types: "):
        sv.init(sv.LinearProblem(_tridiag(20)), sv.PETSc(**kw))
