"""solvers: LinearProblem -> init (factorize once) -> solve / solve_adjoint / solve_transpose.

>>> import numpy as np, solvers as sv
>>> cache = sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]])), sv.LU())
>>> cache.solve(np.array([1.0, 2.0])).round(3).tolist(), cache.stats.factorizations
([0.1, 0.6], 1)
"""

from ._auto import Auto as Auto
from ._auto import DiagonalSolve as DiagonalSolve
from ._cache import LinearCache as LinearCache
from ._cache import Solution as Solution
from ._cache import Stats as Stats
from ._cache import init as init
from ._cache import solve as solve
from ._direct import LU as LU
from ._direct import Cholesky as Cholesky
from ._direct import cholmod_available as cholmod_available
from ._errors import BackendNotSupported as BackendNotSupported
from ._errors import ConvergenceError as ConvergenceError
from ._errors import HintWarning as HintWarning
from ._errors import NonFiniteInputError as NonFiniteInputError
from ._errors import NotHermitianError as NotHermitianError
from ._errors import SingularMatrixError as SingularMatrixError
from ._errors import SolveError as SolveError
from ._errors import StaleSolutionError as StaleSolutionError
from ._errors import Status as Status
from ._krylov import CG as CG
from ._krylov import GMRES as GMRES
from ._krylov import MINRES as MINRES
from ._krylov import BiCGStab as BiCGStab
from ._pardiso import Pardiso as Pardiso
from ._precond import AMG as AMG
from ._precond import ILU as ILU
from ._precond import Jacobi as Jacobi
from ._problem import LinearProblem as LinearProblem
from ._woodbury import Woodbury as Woodbury
from ._petsc import PETSc as PETSc
from ._petsc import TransposeNotSupportedError as TransposeNotSupportedError
