"""What PETSc's transposed solves do, by version: the measured table ``sv.PETSc`` consults.

This is the part of the PETSc engine that changes with each PETSc release: which KSP/PC/factor
combinations return a correct ``KSPSolveTranspose`` (measured), which are silently wrong, which
crash. ``solvers._engines.petsc`` routes or refuses the bad ones and verifies every combination that is
not here (or on another version) with one random right-hand side at setup. Whatever the table
says, a transposed solution is accepted only against the true Aᵀ (Aᴴ).

>>> TRANSPOSE_TABLE[("preonly", "lu", "mumps")][0], "hypre" in BAD_COMPONENTS
('verified', True)
"""

from __future__ import annotations

# Methods that assume a symmetric (Hermitian) A: their transposed solve is the forward solve —
# used as such only on a matrix VERIFIED symmetric (MatIsSymmetric), never on a hint.
SYMMETRIC_KSP = frozenset({"cg", "minres", "cr", "pipecg", "pipecr", "groppcg", "pipecgrr",
                           "symmlq", "fcg", "pipefcg", "nash", "stcg", "gltr", "qcg"})
SYMMETRIC_PC = frozenset({"cholesky", "icc"})
SEQUENTIAL_FACTOR = frozenset({"superlu", "umfpack", "klu", "cholmod", "petsc"})
TABLE_VERSION = (3, 18)

# Measured with PETSc 3.18.5 (Debian libpetsc-real-dev, OpenMPI): nonsymmetric tridiagonal
# A = tridiag(-1.6, 2.5, -0.4), n = 10 000, random b with ‖b‖ ≈ 100, rtol = 1e-10,
# KSPSolveTranspose then ‖Aᵀy − b‖ / ‖b‖ on (1 rank, 2 ranks). See tests/mpi/transpose_table.py.
# verdict: "verified" | "wrong" (silently wrong) | "unsupported" (PETSc error or crash).
TRANSPOSE_TABLE: dict[tuple[str, str, str | None], tuple[str, str]] = {
    ("preonly", "lu", "mumps"): ("verified", "2.9e-16 / 4.0e-16"),
    ("preonly", "lu", "superlu_dist"): ("wrong", "0.82 / 1.2"),
    ("preonly", "lu", "superlu"): ("verified", "2.2e-16 / one rank only"),
    ("preonly", "lu", "umfpack"): ("verified", "3.0e-16 / one rank only"),
    ("preonly", "lu", "klu"): ("verified", "2.7e-16 / one rank only"),
    ("preonly", "lu", "petsc"): ("verified", "2.9e-16 / one rank only"),
    ("gmres", "gamg", None): ("verified", "2.7e-10 / 3.9e-10"),
    ("bcgs", "gamg", None): ("verified", "2.0e-10 / 1.9e-10"),
    ("gmres", "bjacobi", None): ("verified", "2.1e-15 / 9.4e-16"),
    ("gmres", "asm", None): ("verified", "2.1e-15 / 1.8e-15"),
    ("gmres", "jacobi", None): ("verified", "7.5e-11 / 1.0e-10"),
    ("gmres", "ilu", None): ("verified", "2.1e-15 / one rank only"),
    ("gmres", "none", None): ("verified", "7.5e-11 / 1.0e-10"),
    ("bicg", "jacobi", None): ("verified", "6.7e-11 / 1.3e-10"),
    ("gmres", "hypre", None): ("wrong", "1.0 / 1.4 (returns 0 and overwrites b)"),
    ("preonly", "hypre", None): ("wrong", "1.0 / 1.4 (returns 0 and overwrites b)"),
    ("cg", "hypre", None): ("wrong", "1.0 on a symmetric A (returns 0)"),
    ("gmres", "sor", None): ("unsupported", "PETSc error 56: no transposed SOR"),
    ("gmres", "ml", None): ("unsupported", "segmentation fault"),
}


# Components whose transposed solve is wrong or crashes in every combination measured: never run
# it (not even the one random check at setup — hypre's overwrites its right-hand side, ML's
# segfaults, so a check could corrupt the process); adjoints go through an explicit Aᵀ instead.
BAD_COMPONENTS: dict[str, str] = {
    "superlu_dist": "wrong transposed solutions (0.82 / 1.2 relative residual)",
    "hypre": "wrong transposed solutions (returns 0 and overwrites b)",
    "sor": "no transposed SOR (PETSc error 56)",
    "ml": "segmentation fault in the transposed solve",
}
