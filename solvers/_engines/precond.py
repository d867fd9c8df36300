"""Preconditioners: set up once (per cache), then applied; each prints a summary and can act as
an operator. ``adjoint()`` gives the preconditioner for the Aᴴ solve (built lazily, once).

Which backend has which: the table's ``amg``, ``ilu`` and ``jacobi`` capabilities (AMG: numpy
only; ILU: numpy and cupy; Jacobi: everywhere). A missing one raises BackendNotSupported naming
the alternative.

A preconditioner spec (``AMG`` in ``solvers._engines.amg``, ``ILU``, ``Jacobi``) is a frozen options
record; its ``build(A, hermitian, be)`` makes the applied object (a :class:`Preconditioner`),
once per cache, at ``init``; ``cache.update`` asks the applied object for its successor
(:meth:`Preconditioner.updated`: rebuilt by default, AMG applies its reuse policy). Pass the
spec as ``precond=`` to a Krylov method:

>>> import numpy as np, pyamg, solvers as sv
>>> A = pyamg.gallery.poisson((20, 20), format="csr")
>>> cache = sv.init(sv.LinearProblem(A, np.ones(400)), sv.CG(precond=sv.Jacobi()))
>>> cache.kind
'CG + Jacobi(n=400)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import linops as lo
from linops.internals import csr_parts, to_numpy

from .._checks import split_complex
from .._errors import SingularMatrixError
from .._registry import register_preconditioner


class Preconditioner:
    """M ≈ A⁻¹ as a callable ``M(X)``; ``adjoint()`` gives Mᴴ (for Aᴴ solves).

    The applied form of a spec, made by its ``build``; ``cache.factor.M`` holds it. Its
    ``repr`` is ``summary`` (levels and complexities for AMG, nnz(L+U) for ILU). Besides
    ``__call__`` and ``adjoint`` a subclass may override :meth:`updated` (what an update of A
    keeps) and :meth:`record` (what it learns from each solve); ``analyses`` counts the
    symbolic analyses its build ran (an AMG aggregation)."""

    summary: str = ""
    analyses: int = 0
    spec = None
    hermitian = None
    be = None

    def __call__(self, X):
        """M X for X of shape (n,) or (n, k)."""
        raise NotImplementedError

    def adjoint(self) -> "Preconditioner":
        """Mᴴ, the preconditioner of adjoint (Aᴴ) solves."""
        raise NotImplementedError

    def as_operator(self) -> lo.LinearOperator:
        """M as a linops operator (its adjoint applies ``self.adjoint()``)."""
        A = self.A
        return lo.MatrixFree(A.shape, A.dtype, self, lambda X: self.adjoint()(X))

    def updated(self, A) -> "Preconditioner":
        """The preconditioner for a new A of the same structure (``cache.update``): built
        again from the spec by default."""
        return self.spec.build(A, self.hermitian, self.be)

    def record(self, iterations: int) -> None:
        """Called after every solve with its iteration count (AMG's reuse policy reads it)."""

    def __repr__(self) -> str:
        return self.summary


def sparse_only(A, who: str):
    if csr_parts(A) is None:
        raise lo.BackendNotSupported(f"{who} needs an assembled sparse matrix (lo.Sparse / scipy "
                                     f"sparse), got {type(A).__name__}; use sv.Jacobi() or none")


# ----- ILU ---------------------------------------------------------------------------------------
@register_preconditioner("ilu")
@dataclass(frozen=True)
class ILU:
    """Incomplete LU (``spilu`` of the backend's sparse module: scipy on the host, cupyx on the
    GPU). Adjoint application reuses it (``trans='H'``). Setup: fill-dependent; application:
    two sparse triangular solves.

    For general (non-Hermitian) A with GMRES or BiCGStab; not for CG/MINRES, which need a
    Hermitian positive definite M. An ``update`` builds it again (SuperLU's ILU keeps no
    symbolic part).

    Parameters
    ----------
    drop_tol : float
        Entries below ``drop_tol`` (relative to their column) are dropped; 0 keeps the whole LU.
    fill_factor : float
        ≥ 1; the most nnz(L+U)/nnz(A) allowed.

    Raises
    ------
    ValueError
        At construction: ``drop_tol`` < 0 or ``fill_factor`` < 1.
    BackendNotSupported
        At ``init``: A not assembled sparse, or a backend without ILU (jax).
    SingularMatrixError
        At ``init``: the incomplete factor hit a zero pivot.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, solvers as sv
    >>> A = sp.diags([-1.6, 2.5, -0.4], [-1, 0, 1], shape=(50, 50), format="csr")
    >>> cache = sv.init(sv.LinearProblem(A, np.ones(50)), sv.GMRES(precond=sv.ILU(drop_tol=0)))
    >>> _ = cache.solve()
    >>> cache.stats.iterations                                 # the exact LU: one iteration
    1
    """

    drop_tol: float = 1e-4
    fill_factor: float = 10.0

    def __post_init__(self):
        if not (self.drop_tol >= 0 and self.fill_factor >= 1):
            raise ValueError(f"ILU needs drop_tol >= 0 and fill_factor >= 1, got "
                             f"drop_tol={self.drop_tol!r}, fill_factor={self.fill_factor!r}")

    def build(self, A, hermitian, be) -> "_ILUPrecond":
        """The incomplete factors of A (``hermitian`` is not used: Mᴴ is ``trans='H'``)."""
        be.require("ilu", "ILU")
        sparse_only(A, "ILU")
        try:
            ilu = be.sparse_linalg.spilu(be.csr(A.values, A.pattern).tocsc(),
                                         drop_tol=self.drop_tol, fill_factor=self.fill_factor)
        except RuntimeError as e:  # SuperLU's ILU reports a zero pivot this way
            raise SingularMatrixError(f"ILU: {e}; the matrix (or its incomplete factor) is "
                                      f"singular: check boundary conditions, lower drop_tol, or "
                                      f"use sv.LU()") from None
        return _ILUPrecond(self, A, be, ilu, hermitian)


class _ILUPrecond(Preconditioner):
    def __init__(self, spec: ILU, A, be, ilu, hermitian, trans="N"):
        self.spec, self.A, self.be, self.ilu, self.trans = spec, A, be, ilu, trans
        self.hermitian = hermitian
        self.summary = (f"ILU(drop_tol={spec.drop_tol}, fill_factor={spec.fill_factor}): "
                        f"nnz(L+U)={ilu.nnz}")

    def __call__(self, X):
        be = self.be
        Y = split_complex(lambda R: self.ilu.solve(R, trans=self.trans), be.to_factor(X),
                          self.A.dtype)
        return be.from_factor(Y)

    def adjoint(self) -> "_ILUPrecond":
        return _ILUPrecond(self.spec, self.A, self.be, self.ilu, self.hermitian,
                           {"N": "H", "H": "N", "T": "N"}[self.trans])


# ----- Jacobi ------------------------------------------------------------------------------------
@register_preconditioner("jacobi")
@dataclass(frozen=True)
class Jacobi:
    """Diagonal scaling M = diag(A)⁻¹ (every backend, any operator with a diagonal; for a
    MatrixFree operator the diagonal costs n products). Application: O(n).

    The one preconditioner on every backend and for lazy operators (``lo.diagonal(A)``), and
    the one ``adjoints.jax`` accepts inside jax's Krylov loops. Mᴴ = diag(conj(A))⁻¹. Hermitian
    positive definite whenever A is, so it suits CG and MINRES.

    Raises
    ------
    ValueError
        At ``init``: a zero on A's diagonal (named).

    Examples
    --------
    >>> import numpy as np, linops as lo, solvers as sv
    >>> M = lo.MatrixFree((3, 3), np.float64, lambda X: 2 * X, lambda X: 2 * X)
    >>> cache = sv.init(sv.LinearProblem(M, posdef=True), sv.CG(precond=sv.Jacobi()))
    >>> cache.kind, cache.solve(np.ones(3)).tolist()
    ('CG + Jacobi(n=3)', [0.5, 0.5, 0.5])
    """

    def build(self, A, hermitian, be) -> "_JacobiPrecond":
        """1 / diag(A) (``hermitian`` is not used: Mᴴ is the conjugate)."""
        be.require("jacobi", "Jacobi")
        d = lo.diagonal(A)
        if not bool(be.xp.all(d != 0)):
            k = int(np.argmin(np.abs(to_numpy(d))))
            raise ValueError(f"Jacobi preconditioner needs a zero-free diagonal; A[{k}, {k}] = 0")
        return _JacobiPrecond(1 / d, be, self)


class _JacobiPrecond(Preconditioner):
    def __init__(self, dinv: Any, be, spec=None):
        self.dinv, self.be, self.spec = dinv, be, spec
        self.summary = f"Jacobi(n={dinv.shape[0]})"

    def __call__(self, X):
        return self.dinv * X if X.ndim == 1 else self.dinv[:, None] * X

    def adjoint(self):
        return _JacobiPrecond(self.be.xp.conj(self.dinv), self.be, self.spec)

    def as_operator(self) -> lo.LinearOperator:
        return lo.Diagonal(self.dinv)
