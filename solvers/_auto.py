"""Auto: pick the algorithm from the operator's structure and the problem's hints."""

from __future__ import annotations

from dataclasses import dataclass

import linops as lo

from ._direct import LU, Cholesky, cholmod_available
from ._krylov import CG, GMRES
from ._precond import AMG
from ._woodbury import Woodbury, split_low_rank


@dataclass(frozen=True)
class Auto:
    """The default algorithm. Rules, first match wins:

    ================================================  =========================================
    A                                                 algorithm
    ================================================  =========================================
    B + LowRank(U, V) (a Sum with one low-rank term)  Woodbury over Auto(B)
    Dense (or small: n <= dense_max after to_dense)   Cholesky if posdef else LU (LAPACK)
    Sparse, Hermitian posdef, n > iterative_min        CG(rtol) + AMG   (numpy backend)
    Sparse, Hermitian posdef, CHOLMOD installed       Cholesky (CHOLMOD)
    Sparse, otherwise                                 LU (SuperLU; cupyx splu on cupy)
    matrix-free / lazy, Hermitian posdef              CG(rtol)
    matrix-free / lazy, otherwise                     GMRES(rtol)
    ================================================  =========================================
    """

    iterative_min: int = 2_000_000
    dense_max: int = 0
    rtol: float = 1e-10

    def choose(self, A: lo.LinearOperator, prob=None):
        from ._backend import name_of

        posdef = bool(prob is not None and prob.posdef)
        hermitian = bool(prob is not None and prob.hermitian)
        if split_low_rank(A) is not None:
            return Woodbury(Auto(self.iterative_min, self.dense_max, self.rtol))
        if isinstance(A, lo.Dense) or A.shape[0] <= self.dense_max:
            return Cholesky() if posdef else LU()
        if isinstance(A, lo.Sparse):
            numpy_backend = name_of(A) == "numpy"
            if posdef and A.shape[0] > self.iterative_min and numpy_backend:
                return CG(rtol=self.rtol, precond=AMG())
            if posdef and name_of(A) != "cupy" and cholmod_available():
                return Cholesky()
            return LU()
        if posdef and hermitian:
            return CG(rtol=self.rtol)
        return GMRES(rtol=self.rtol)

    def setup(self, A, prob):
        return self.choose(A, prob).setup(A, prob)
