"""Preconditioners: set up once (per cache), then applied; each prints a summary and can act as
an operator. ``adjoint()`` gives the preconditioner for the Aᴴ solve (built lazily, once)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import linops as lo
from linops._backend import backend_name, to_numpy

from ._backend import host_csr, split_complex, xp_of
from ._errors import BackendNotSupported


class Preconditioner:
    """M ≈ A⁻¹ as a callable ``M(X)``; ``adjoint()`` gives Mᴴ (for Aᴴ solves)."""

    summary: str = ""

    def __call__(self, X):
        raise NotImplementedError

    def adjoint(self) -> "Preconditioner":
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.summary


def _sparse_only(A, who: str):
    if not isinstance(A, lo.Sparse):
        raise BackendNotSupported(f"{who} needs an assembled sparse matrix (lo.Sparse / scipy "
                                  f"sparse), got {type(A).__name__}; use sv.Jacobi() or none")


# ----- AMG ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AMG:
    """Algebraic multigrid (pyamg): smoothed aggregation (``kind="sa"``, default) or
    Ruge–Stüben (``kind="rs"``). As a preconditioner: one V-cycle per application. As a
    standalone solver (``sv.solve(prob, sv.AMG())``): pyamg's cycle iteration to ``rtol``.
    For a non-Hermitian A the hierarchy of Aᴴ is built once, on the first adjoint solve.
    CPU only (numpy/scipy); other backends raise BackendNotSupported naming ILU/Jacobi.
    """

    kind: str = "sa"
    rtol: float = 1e-10
    atol: float = 0.0
    maxiter: int = 200
    accel: str | None = None
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in ("sa", "rs"):
            raise ValueError(f"AMG kind must be 'sa' or 'rs', got kind={self.kind!r}")

    def build(self, A, hermitian: bool | None = None) -> "_AMGPrecond":
        _sparse_only(A, "AMG")
        if backend_name(xp_of(A)) == "cupy":
            raise BackendNotSupported("AMG (pyamg) is CPU-only and has no GPU counterpart; on "
                                      "cupy use sv.CG(precond=sv.ILU()) or sv.Jacobi(), or sv.LU()")
        return _AMGPrecond(self, A, hermitian)

    # standalone solver protocol
    def setup(self, A, prob):
        from ._krylov import _IterativeFactor

        return _IterativeFactor(self, A, prob, standalone_amg=True)


def _pyamg_hierarchy(spec: AMG, S):
    import pyamg

    if spec.kind == "sa":
        return pyamg.smoothed_aggregation_solver(S, **spec.options)
    return pyamg.ruge_stuben_solver(S, **spec.options)


class _AMGPrecond(Preconditioner):
    def __init__(self, spec: AMG, A: lo.Sparse, hermitian, ml=None, adjoint_of=None):
        self.spec, self.A, self.hermitian = spec, A, hermitian
        self.out_xp = xp_of(A)
        self.ml = ml if ml is not None else _pyamg_hierarchy(spec, host_csr(A))
        self._adjoint = adjoint_of
        self.summary = (f"AMG({spec.kind}): {len(self.ml.levels)} levels, operator complexity "
                        f"{self.ml.operator_complexity():.2f}, grid complexity "
                        f"{self.ml.grid_complexity():.2f}")

    def __call__(self, X):
        M = self.ml.aspreconditioner(cycle="V")
        Xh = to_numpy(X)
        cols = Xh[:, None] if Xh.ndim == 1 else Xh
        Y = np.stack([split_complex(M.matvec, cols[:, j], self.A.dtype) for j in range(cols.shape[1])], axis=1)
        Y = Y[:, 0] if Xh.ndim == 1 else Y
        return Y if self.out_xp is np else self.out_xp.asarray(Y)

    def adjoint(self) -> "_AMGPrecond":
        if self.hermitian:
            return self
        if self._adjoint is None:
            AH = self.A.adjoint()
            self._adjoint = _AMGPrecond(self.spec, AH, False, adjoint_of=self)
        return self._adjoint


# ----- ILU ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ILU:
    """Incomplete LU (scipy ``spilu``; host). Adjoint application reuses it (``trans='H'``)."""

    drop_tol: float = 1e-4
    fill_factor: float = 10.0

    def build(self, A, hermitian=None) -> "_ILUPrecond":
        _sparse_only(A, "ILU")
        return _ILUPrecond(self, A)


class _ILUPrecond(Preconditioner):
    def __init__(self, spec: ILU, A, trans="N", ilu=None):
        import scipy.sparse.linalg as spl

        self.spec, self.A, self.trans = spec, A, trans
        self.out_xp = xp_of(A)
        if ilu is None and backend_name(self.out_xp) == "cupy":
            import cupyx.scipy.sparse.linalg as cspl

            from ._backend import device_csr

            ilu = cspl.spilu(device_csr(A).tocsc(), drop_tol=spec.drop_tol,
                             fill_factor=spec.fill_factor)
        elif ilu is None:
            ilu = spl.spilu(host_csr(A).tocsc(), drop_tol=spec.drop_tol, fill_factor=spec.fill_factor)
        self.ilu = ilu
        self.summary = f"ILU(drop_tol={spec.drop_tol}, fill_factor={spec.fill_factor}): nnz(L+U)={self.ilu.nnz}"

    def __call__(self, X):
        if backend_name(self.out_xp) == "cupy":
            return self.ilu.solve(X, trans=self.trans)
        Y = split_complex(lambda R: self.ilu.solve(R, trans=self.trans), to_numpy(X), self.A.dtype)
        return Y if self.out_xp is np else self.out_xp.asarray(Y)

    def adjoint(self) -> "_ILUPrecond":
        return _ILUPrecond(self.spec, self.A, {"N": "H", "H": "N", "T": "N"}[self.trans], self.ilu)


# ----- Jacobi ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Jacobi:
    """Diagonal scaling M = diag(A)⁻¹ (any backend, any operator with a diagonal)."""

    def build(self, A, hermitian=None) -> "_JacobiPrecond":
        d = lo.diagonal(A)
        xp = xp_of(A)
        if not bool(xp.all(d != 0)):
            k = int(np.argmin(np.abs(to_numpy(d))))
            raise ValueError(f"Jacobi preconditioner needs a zero-free diagonal; A[{k}, {k}] = 0")
        return _JacobiPrecond(1 / d)


class _JacobiPrecond(Preconditioner):
    def __init__(self, dinv: Any):
        self.dinv = dinv
        self.summary = f"Jacobi(n={dinv.shape[0]})"

    def __call__(self, X):
        return self.dinv * X if X.ndim == 1 else self.dinv[:, None] * X

    def adjoint(self):
        from linops._backend import namespace

        return _JacobiPrecond(namespace(self.dinv).conj(self.dinv))
