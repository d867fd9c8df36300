"""The engines: one module per engine family, each an ``Algorithm`` and its ``Factor`` written
against ``solvers._contract`` and registered by name (``solvers._registry.register``).

auto (Auto: chooses among the others), direct (LU, Cholesky, DiagonalSolve), krylov (CG,
MINRES, GMRES, BiCGStab and the acceptance of their iterates), amg (AMG as a solver and as a
preconditioner), precond (ILU, Jacobi), woodbury (a low-rank update of a base factorization),
pardiso (MKL PARDISO), petsc (PETSc KSP + PC over MPI) and petsc_table (which PETSc
combinations transpose correctly, as measured). A new engine is a new module here and its
import in ``solvers/__init__.py``; the frame (problem, cache, contract, registry) never
imports an engine.
"""
