"""Krylov solvers delegating to scipy.sparse.linalg / cupyx.scipy.sparse.linalg /
jax.scipy.sparse.linalg, with a preconditioner set up once per cache.

Every run ends with a check of the TRUE residual ‖b − A x‖ ≤ max(rtol‖b‖, atol) (the method is
restarted from its iterate up to 3 times when its own stopping test was looser); an iterate
that still fails raises ConvergenceError with the residual history, never returns silently.
Adjoint solves run the method on Aᴴ with Mᴴ; transpose solves are conj(Aᴴ-solve(conj c)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import linops as lo
from linops._backend import backend_name, to_numpy

from ._backend import host_csr, split_complex, xp_of
from ._errors import BackendNotSupported, ConvergenceError, Status

SLACK = 1.0
RESTARTS = 4


@dataclass(frozen=True)
class _Krylov:
    rtol: float = 1e-8
    atol: float = 0.0
    maxiter: int | None = None
    x0: Any = None
    precond: Any = None

    method = ""

    def setup(self, A, prob):
        return _IterativeFactor(self, A, prob)


@dataclass(frozen=True)
class CG(_Krylov):
    """Conjugate gradients (Hermitian positive definite A). Preconditioner M must be HPD."""

    method = "cg"


@dataclass(frozen=True)
class MINRES(_Krylov):
    """MINRES (Hermitian, possibly indefinite A). Not available on jax."""

    method = "minres"


@dataclass(frozen=True)
class GMRES(_Krylov):
    """Restarted GMRES (general A). ``restart``: Krylov subspace size per cycle."""

    restart: int = 50
    method = "gmres"


@dataclass(frozen=True)
class BiCGStab(_Krylov):
    """BiCGStab (general A). Not available on cupy."""

    method = "bicgstab"


def _module(xp):
    name = backend_name(xp)
    if name == "numpy":
        import scipy.sparse.linalg as m
    elif name == "cupy":
        import cupyx.scipy.sparse.linalg as m
    else:
        import jax.scipy.sparse.linalg as m
    return name, m


class _IterativeFactor:
    """The 'factorization' of an iterative method: its preconditioner(s), built once."""

    def __init__(self, spec, A: lo.LinearOperator, prob, standalone_amg: bool = False):
        self.spec, self.A, self.prob = spec, A, prob
        self.hermitian = bool(prob.hermitian) if prob is not None else False
        self.xp = xp_of(A)
        self.iterations = 0
        self.history: list[float] = []
        self.standalone_amg = standalone_amg
        if standalone_amg:
            self.M = spec.build(A, self.hermitian)
            self.kind = f"AMG solver [{self.M.summary}]"
            return
        name, mod = _module(self.xp)
        if not hasattr(mod, spec.method):
            alt = "GMRES or CG" if spec.method in ("minres", "bicgstab") else "another method"
            raise BackendNotSupported(f"{type(spec).__name__} does not exist for the {name} "
                                      f"backend ({mod.__name__} has no {spec.method}); use {alt}")
        self.M = spec.precond.build(A, self.hermitian) if spec.precond is not None else None
        self.kind = type(spec).__name__ + (f" + {self.M.summary}" if self.M is not None else "")

    def refactor(self, A):
        return _IterativeFactor(self.spec, A, self.prob, self.standalone_amg)

    def solve(self, B, trans: str):
        xp = self.xp
        if trans == "T":
            return xp.conj(self.solve(xp.conj(B), "H"))
        op = self.A if trans == "N" else self.A.adjoint()
        M = None
        if self.M is not None:
            M = self.M if trans == "N" else self.M.adjoint()
        def run(R):
            return xp.stack([self._solve_one(op, M, R[:, j]) for j in range(R.shape[1])], axis=1)

        return split_complex(run, B, self.A.dtype)

    def _solve_one(self, op, M, b):
        xp = self.xp
        spec = self.spec
        bnorm = float(xp.linalg.norm(b))
        if bnorm == 0:
            return xp.zeros_like(b)
        history: list[float] = []
        tol = max(spec.rtol * bnorm, spec.atol)
        x = None
        factor = 1.0
        for _restart in range(RESTARTS):  # MINRES stops on a backward error, not on ‖r‖/‖b‖
            if self.standalone_amg:
                x, claimed = _amg_solve(M, b, spec, history, x), False
            else:
                x, claimed = self._krylov(op, M, b, bnorm, history, x, factor)
            r = float(xp.linalg.norm(b - op @ x))
            if not np.isfinite(r) or r <= tol or not claimed:
                break
            factor *= max(0.5 * tol / r, 1e-8)  # ask the method's own test for what is missing
        self.iterations += max(len(history), 1)
        self.history = history
        if not np.isfinite(r):
            raise ConvergenceError(f"{type(spec).__name__}: the iterate is not finite; "
                                   f"{Status.NONFINITE.message}", history, None, Status.NONFINITE)
        if r > SLACK * tol:
            raise ConvergenceError(
                f"{type(spec).__name__} stopped after {len(history)} iterations with relative "
                f"residual {r / bnorm:.3g} > rtol={spec.rtol:g} (atol={spec.atol:g}); "
                f"{Status.MAX_ITERATIONS.message}", history, x)
        return x

    def _krylov(self, op, M, b, bnorm, history, x0=None, factor=1.0):
        xp = self.xp
        spec = self.spec
        name, mod = _module(xp)
        fn = getattr(mod, spec.method)
        if x0 is None and spec.x0 is not None:
            x0 = xp.asarray(spec.x0)
        if name == "jax":
            kw = dict(x0=x0, tol=spec.rtol * factor, atol=spec.atol, maxiter=spec.maxiter,
                      M=(lambda v: M(v)) if M is not None else None)
            if spec.method == "gmres":
                kw["restart"] = spec.restart
            x, _ = fn(lambda v: op @ v, b, **kw)
            return x, False
        Aop = _scipy_like(op, name)
        Mop = _scipy_like_precond(M, op, name) if M is not None else None
        kw: dict = dict(x0=x0, maxiter=spec.maxiter, M=Mop)
        if spec.method == "gmres":
            kw.update(restart=spec.restart, callback=lambda pr: history.append(float(pr)),
                      callback_type="pr_norm")
        else:
            kw["callback"] = lambda xk: history.append(float(xp.linalg.norm(b - op @ xk)) / bnorm)
        if spec.method != "minres":
            kw["atol"] = spec.atol
        if name == "numpy":
            kw["rtol"] = spec.rtol * factor
        else:  # cupyx keeps scipy's older keyword
            kw["tol"] = spec.rtol * factor
        x, info = fn(Aop, b, **kw)
        if info < 0:
            raise ConvergenceError(f"{type(spec).__name__}: illegal input or breakdown "
                                   f"(info={info}); {Status.BREAKDOWN.message}", history, x,
                                   Status.BREAKDOWN)
        return x, info == 0


def _scipy_like(op, name):
    if name == "numpy":
        if isinstance(op, lo.Sparse):
            return host_csr(op)
        return lo.aslinearoperator(op)
    import cupyx.scipy.sparse.linalg as cspl

    if isinstance(op, lo.Sparse):
        from ._backend import device_csr

        return device_csr(op)
    return cspl.LinearOperator(op.shape, matvec=lambda v: op @ v, dtype=op.dtype)


def _scipy_like_precond(M, op, name):
    if name == "numpy":
        from scipy.sparse.linalg import LinearOperator

        return LinearOperator(op.shape, matvec=lambda v: to_numpy(M(v)), dtype=op.dtype)
    import cupyx.scipy.sparse.linalg as cspl

    return cspl.LinearOperator(op.shape, matvec=M, dtype=op.dtype)


def _amg_solve(M, b, spec, history, x0=None):
    bh = to_numpy(b)
    x0 = None if x0 is None else to_numpy(x0)
    res: list[float] = []
    solve = M.ml.solve
    kw = dict(tol=spec.rtol, maxiter=spec.maxiter, accel=spec.accel, residuals=res)
    x = split_complex(lambda r: solve(r, **kw), bh, M.A.dtype)
    bn = np.linalg.norm(bh)
    history.extend(float(r) / bn for r in res)
    return x if M.out_xp is np else M.out_xp.asarray(x)
