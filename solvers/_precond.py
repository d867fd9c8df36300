"""Preconditioners: set up once (per cache), then applied; each prints a summary and can act as
an operator. ``adjoint()`` gives the preconditioner for the Aᴴ solve (built lazily, once).

Which backend has which: the table's ``amg``, ``ilu`` and ``jacobi`` capabilities (AMG: numpy
only; ILU: numpy and cupy; Jacobi: everywhere). A missing one raises BackendNotSupported naming
the alternative.

A preconditioner spec (``AMG``, ``ILU``, ``Jacobi``) is a frozen options record; its
``build(A, hermitian, be)`` makes the applied object (a :class:`Preconditioner`), once per
cache, at ``init``. Pass the spec as ``precond=`` to a Krylov method:

>>> import numpy as np, pyamg, solvers as sv
>>> A = pyamg.gallery.poisson((20, 20), format="csr")
>>> cache = sv.init(sv.LinearProblem(A, np.ones(400)), sv.CG(precond=sv.Jacobi()))
>>> cache.kind
'CG + Jacobi(n=400)'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import linops as lo
from linops.internals import to_numpy

from ._backend import split_complex
from ._errors import SingularMatrixError


class Preconditioner:
    """M ≈ A⁻¹ as a callable ``M(X)``; ``adjoint()`` gives Mᴴ (for Aᴴ solves).

    The applied form of a spec, made by its ``build``; ``cache.factor.M`` holds it. Its
    ``repr`` is ``summary`` (levels and complexities for AMG, nnz(L+U) for ILU)."""

    summary: str = ""

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

    def __repr__(self) -> str:
        return self.summary


def _sparse_only(A, who: str):
    if not isinstance(A, lo.Sparse):
        raise lo.BackendNotSupported(f"{who} needs an assembled sparse matrix (lo.Sparse / scipy "
                                     f"sparse), got {type(A).__name__}; use sv.Jacobi() or none")


# ----- AMG ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AMG:
    """Algebraic multigrid (pyamg): smoothed aggregation (``kind="sa"``, default) or
    Ruge–Stüben (``kind="rs"``).

    As a preconditioner (``sv.CG(precond=sv.AMG())``): one V-cycle per application. As a
    standalone solver (``sv.solve(prob, sv.AMG())``): pyamg's cycle iteration to ``rtol``
    (``maxiter`` cycles), accepted by the same true-residual policy as the Krylov methods.
    For a non-Hermitian A the hierarchy of Aᴴ is built once, on the first adjoint solve.
    numpy only; other backends raise BackendNotSupported naming ILU/Jacobi.
    Setup cost: the hierarchy (≈ a few SpMM with A); application: one V-cycle, O(nnz).

    Reuse across ``cache.update(A=...)`` (same pattern), ``reuse=``:

    - ``"aggregation"`` (default): keep the aggregates of every level (pyamg's predefined
      aggregation) and recompute the numeric hierarchy (candidates, smoothed prolongators,
      Galerkin products) for the new A; saves strength of connection and aggregation.
    - ``"hierarchy"``: keep the whole hierarchy of the old A as the preconditioner while the
      iterations per solve stay within ``max_growth`` × those after the last full build;
      when they grew, the next update recomputes it on the kept aggregation (and if that does
      not bring them back, builds it from scratch).
    - ``"none"``: a full setup per update.

    Under "aggregation" too, a step whose iterations exceeded ``max_growth`` × the baseline
    makes the next update a full setup (the aggregation no longer fits A). Ruge–Stüben has no
    predefined splitting in pyamg: its numeric rebuilds are full setups. What happened is
    counted on the factor: ``cache.factor.amg`` (:class:`AMGReuse`: ``builds``,
    ``numeric_rebuilds``, ``kept``, ``rebuilds``, iterations per solve for every step).

    Parameters
    ----------
    kind : {"sa", "rs"}
        Smoothed aggregation (default) or Ruge–Stüben (``pyamg.ruge_stuben_solver``).
    rtol, atol, maxiter, accel, x0
        Only for the standalone solver: tolerance of the cycle iteration (default 1e-10; the
        acceptance policy of ``solvers._krylov`` applies), number of cycles (200), pyamg's
        Krylov acceleration (``accel="cg"``, ...; None: plain cycles), initial guess.
    options : dict
        Passed to pyamg's solver constructor (``{"strength": "symmetric", "max_levels": 5}``).
    reuse : {"aggregation", "hierarchy", "none"}
        What ``cache.update(A=...)`` keeps (above).
    max_growth : float
        ≥ 1; the growth of iterations per solve that triggers a rebuild (above).

    Raises
    ------
    ValueError
        At construction: an unknown ``kind`` or ``reuse``, ``max_growth`` < 1, bad tolerances.
    BackendNotSupported
        At ``init``: A is not an assembled sparse matrix, or the arrays are not numpy.

    Examples
    --------
    >>> import pyamg, numpy as np, solvers as sv
    >>> A = pyamg.gallery.poisson((20, 20), format="csr")
    >>> sol = sv.solve(sv.LinearProblem(A, np.ones(400)), sv.CG(rtol=1e-10, precond=sv.AMG()))
    >>> sol.status.name
    'SUCCESS'
    >>> sol.cache.factor.M
    AMG(sa): 3 levels, operator complexity 1.31, grid complexity 1.20

    An update with the same pattern recomputes the hierarchy on the kept aggregation:

    >>> _ = sol.cache.update(A=2 * A).solve()
    >>> r = sol.cache.factor.amg
    >>> r.builds, r.numeric_rebuilds, sol.cache.stats.factorizations
    (1, 1, 1)

    As a solver of its own (pyamg's cycles, accepted on the true residual):

    >>> sv.solve(sv.LinearProblem(A, np.ones(400)), sv.AMG()).status.name
    'SUCCESS'
    """

    kind: str = "sa"
    rtol: float | None = 1e-10
    atol: float = 0.0
    maxiter: int = 200
    accel: str | None = None
    options: dict = field(default_factory=dict)
    x0: Any = None
    reuse: str = "aggregation"
    max_growth: float = 1.5

    def __post_init__(self):
        from ._krylov import _check_spec

        if self.kind not in ("sa", "rs"):
            raise ValueError(f"AMG kind must be 'sa' or 'rs', got kind={self.kind!r}")
        if self.reuse not in REUSE:
            raise ValueError(f"AMG reuse must be one of {REUSE}, got reuse={self.reuse!r}")
        if not (isinstance(self.max_growth, (int, float)) and math.isfinite(self.max_growth)
                and self.max_growth >= 1):
            raise ValueError(f"AMG max_growth must be a finite number >= 1, got "
                             f"max_growth={self.max_growth!r}")
        _check_spec(self)

    def build(self, A, hermitian: bool | None, be) -> "_AMGPrecond":
        """The hierarchy of A, applied as one V-cycle (``hermitian``: whether Mᴴ = M, so that
        adjoint solves need no second hierarchy; ``be``: the arrays' backend)."""
        be.require("amg", "AMG (pyamg)")
        _sparse_only(A, "AMG")
        return _AMGPrecond(self, A, hermitian, be)

    # standalone solver protocol
    def setup(self, A, prob):
        """As an algorithm of its own (``sv.solve(prob, sv.AMG())``): the hierarchy and
        pyamg's cycle iteration under the Krylov acceptance policy."""
        from ._krylov import _AMGSolveFactor

        return _AMGSolveFactor(self, A, prob)


REUSE = ("aggregation", "hierarchy", "none")


def _pyamg_hierarchy(spec: AMG, S, aggregates=None):
    """pyamg's hierarchy of S. Smoothed aggregation keeps each level's aggregation (``AggOp``,
    n entries) for numeric rebuilds and drops the rest of what ``keep`` retains; with
    ``aggregates`` the aggregation is predefined (strength and aggregation are skipped)."""
    import pyamg

    if spec.kind != "sa":
        return pyamg.ruge_stuben_solver(S, **spec.options)
    opts = dict(spec.options)
    user_keep = bool(opts.pop("keep", False))
    if aggregates is not None:
        opts.update(aggregate=[("predefined", {"AggOp": agg}) for agg in aggregates],
                    max_levels=len(aggregates) + 1)
    keep = user_keep or spec.reuse != "none"
    ml = pyamg.smoothed_aggregation_solver(S, keep=keep, **opts)
    if keep and not user_keep:  # keep=True retains every level's work arrays; we need AggOp only
        for level in ml.levels[:-1]:
            for name in ("C", "T", "Cnodes"):
                level.__dict__.pop(name, None)
    return ml


class _AMGPrecond(Preconditioner):
    def __init__(self, spec: AMG, A: lo.Sparse, hermitian, be, ml=None, adjoint_of=None,
                 aggregates=None, adjoint_aggregates=None):
        self.spec, self.A, self.hermitian, self.be = spec, A, hermitian, be
        self.ml = ml if ml is not None else _pyamg_hierarchy(spec, be.csr(A.values, A.pattern),
                                                             aggregates)
        self._cycle = self.ml.aspreconditioner(cycle="V")
        # Mᴴ of a non-Hermitian A is another hierarchy (of Aᴴ): built on the first adjoint solve
        self._adjoint = adjoint_of
        self._adjoint_aggregates = adjoint_aggregates
        levels = self.ml.levels[:-1]
        self.aggregates = ([lv.AggOp for lv in levels]
                           if spec.kind == "sa" and all(hasattr(lv, "AggOp") for lv in levels)
                           else None)
        self.summary = (f"AMG({spec.kind}): {len(self.ml.levels)} levels, operator complexity "
                        f"{self.ml.operator_complexity():.2f}, grid complexity "
                        f"{self.ml.grid_complexity():.2f}")

    def __call__(self, X):
        Xh = to_numpy(X)  # pyamg runs on the host
        cols = Xh[:, None] if Xh.ndim == 1 else Xh
        Y = np.stack([split_complex(self._cycle.matvec, cols[:, j], self.A.dtype)
                      for j in range(cols.shape[1])], axis=1)
        return self.be.from_host(Y[:, 0] if Xh.ndim == 1 else Y)

    def adjoint(self) -> "_AMGPrecond":
        if self.hermitian:
            return self
        if self._adjoint is None:
            self._adjoint = _AMGPrecond(self.spec, self.A.adjoint(), False, self.be,
                                        adjoint_of=self, aggregates=self._adjoint_aggregates)
        return self._adjoint

    def rebuilt(self, A: lo.Sparse) -> "_AMGPrecond":
        """The hierarchy of A (same pattern) on this one's aggregation (and its adjoint's,
        when that was built); requires ``self.aggregates``."""
        adj = self._adjoint
        adj_aggs = (adj.aggregates if adj is not None and adj is not self and not self.hermitian
                    else self._adjoint_aggregates)
        return _AMGPrecond(self.spec, A, self.hermitian, self.be, aggregates=self.aggregates,
                           adjoint_aggregates=adj_aggs)

    def refreshed(self, A: lo.Sparse) -> "_AMGPrecond":
        """This hierarchy kept for A (same pattern): the finest level's operator and every
        level's smoothers are replaced (O(nnz)), the coarse levels stay those of the old A, so
        residuals and fine-level smoothing are A's own. The adjoint hierarchy (non-Hermitian A)
        is recomputed on its kept aggregation when first needed."""
        import copy

        from pyamg.relaxation.smoothing import change_smoothers

        S = self.be.csr(A.values, A.pattern)
        old = self.ml.levels[0].A
        if hasattr(old, "symmetry"):
            S.symmetry = old.symmetry
        ml = copy.copy(self.ml)
        ml.levels = [copy.copy(level) for level in self.ml.levels]
        ml.levels[0].A = S
        smoother = ("block_gauss_seidel" if self.spec.kind == "sa" else "gauss_seidel",
                    {"sweep": "symmetric"})
        change_smoothers(ml, self.spec.options.get("presmoother", smoother),
                         self.spec.options.get("postsmoother", smoother))
        adj = self._adjoint
        adj_aggs = (adj.aggregates if adj is not None and adj is not self and not self.hermitian
                    else self._adjoint_aggregates)
        new = _AMGPrecond(self.spec, A, self.hermitian, self.be, ml=ml,
                          adjoint_aggregates=adj_aggs)
        new.aggregates = self.aggregates
        return new


@dataclass
class AMGReuse:
    """What happened to an AMG hierarchy over a cache's updates (``cache.factor.amg``).

    ``builds``: full setups (strength, aggregation, numeric hierarchy), the first included;
    ``numeric_rebuilds``: hierarchies recomputed on the kept aggregation; ``kept``: updates
    that kept the whole hierarchy; ``steps``: for every step (init or update, up to the next
    update) the iterations of each solve in it; ``baseline``: the largest per-solve count in the
    step after the last full build. ``rebuilds`` = builds − 1 + numeric_rebuilds.
    """

    builds: int = 1
    numeric_rebuilds: int = 0
    kept: int = 0
    steps: list = field(default_factory=lambda: [[]])
    baseline: int | None = None
    last: str = "build"

    @property
    def rebuilds(self) -> int:
        """Hierarchies made after the first: ``builds − 1 + numeric_rebuilds``."""
        return self.builds - 1 + self.numeric_rebuilds

    @property
    def iterations_per_step(self) -> list:
        """Total iterations of each step."""
        return [sum(s) for s in self.steps]

    def record(self, iterations: int) -> None:
        """Count one solve's iterations in the current step (the factor calls it)."""
        self.steps[-1].append(int(iterations))

    def decide(self, spec: AMG) -> str:
        """'keep', 'numeric' or 'build' for the next A (see ``AMG``'s reuse rules)."""
        cur = max(self.steps[-1], default=None)
        baseline = self.baseline if self.baseline is not None else cur
        grew = cur is not None and baseline is not None and cur > spec.max_growth * baseline
        if spec.reuse == "none":
            return "build"
        if spec.reuse == "hierarchy":
            return ("build" if self.last == "numeric" else "numeric") if grew else "keep"
        return "build" if grew else "numeric"

    def update(self, M: _AMGPrecond, A: lo.Sparse, spec: AMG, hermitian, be) -> _AMGPrecond:
        """The preconditioner for the new A under the reuse policy; counts what it did."""
        cur = max(self.steps[-1], default=None)
        action = self.decide(spec)
        if action == "numeric" and M.aggregates is None:
            action = "build"  # Ruge–Stüben: no predefined splitting
        new = (M.refreshed(A) if action == "keep" else M.rebuilt(A) if action == "numeric"
               else spec.build(A, hermitian, be))
        if self.baseline is None and cur is not None:
            self.baseline = cur
        if action == "build":
            self.builds += 1
            self.baseline = None
        elif action == "numeric":
            self.numeric_rebuilds += 1
        else:
            self.kept += 1
        self.last = action
        self.steps.append([])
        return new


# ----- ILU ---------------------------------------------------------------------------------------
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
        _sparse_only(A, "ILU")
        try:
            ilu = be.sparse_linalg.spilu(be.csr(A.values, A.pattern).tocsc(),
                                         drop_tol=self.drop_tol, fill_factor=self.fill_factor)
        except RuntimeError as e:  # SuperLU's ILU reports a zero pivot this way
            raise SingularMatrixError(f"ILU: {e}; the matrix (or its incomplete factor) is "
                                      f"singular: check boundary conditions, lower drop_tol, or "
                                      f"use sv.LU()") from None
        return _ILUPrecond(self, A, be, ilu)


class _ILUPrecond(Preconditioner):
    def __init__(self, spec: ILU, A, be, ilu, trans="N"):
        self.spec, self.A, self.be, self.ilu, self.trans = spec, A, be, ilu, trans
        self.summary = (f"ILU(drop_tol={spec.drop_tol}, fill_factor={spec.fill_factor}): "
                        f"nnz(L+U)={ilu.nnz}")

    def __call__(self, X):
        be = self.be
        Xf = be.to_host(X) if be.host_factors else X
        Y = split_complex(lambda R: self.ilu.solve(R, trans=self.trans), Xf, self.A.dtype)
        return be.from_host(Y) if be.host_factors else Y

    def adjoint(self) -> "_ILUPrecond":
        return _ILUPrecond(self.spec, self.A, self.be, self.ilu,
                           {"N": "H", "H": "N", "T": "N"}[self.trans])


# ----- Jacobi ------------------------------------------------------------------------------------
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
        return _JacobiPrecond(1 / d, be)


class _JacobiPrecond(Preconditioner):
    def __init__(self, dinv: Any, be):
        self.dinv, self.be = dinv, be
        self.summary = f"Jacobi(n={dinv.shape[0]})"

    def __call__(self, X):
        return self.dinv * X if X.ndim == 1 else self.dinv[:, None] * X

    def adjoint(self):
        return _JacobiPrecond(self.be.xp.conj(self.dinv), self.be)

    def as_operator(self) -> lo.LinearOperator:
        return lo.Diagonal(self.dinv)
