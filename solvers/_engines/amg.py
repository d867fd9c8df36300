"""Algebraic multigrid (pyamg), in one module: the ``AMG`` spec, its hierarchy as a
preconditioner (with the reuse policy across ``cache.update``), and pyamg's cycle iteration as a
solver of its own.

A Krylov method holds the hierarchy by composition (``factor.M``, a :class:`Preconditioner`);
what an update keeps is the preconditioner's own decision (:meth:`_AMGPrecond.updated`), counted
in :class:`AMGReuse` (``cache.factor.amg``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyamg
from pyamg.relaxation.smoothing import change_smoothers

import linops as lo
from linops.internals import ShapeError, snapshot, to_numpy

from .._checks import split_complex
from .._contract import Algorithm
from .._errors import ConvergenceError
from .._results import Status
from .krylov import IterativeFactor, check_spec
from .precond import Preconditioner, sparse_only
from .._registry import Case, register, register_preconditioner


@register("amg", "algebraic multigrid (pyamg): a preconditioner, or pyamg's cycles as a solver",
          ("sparse",), posdef=True, capability="amg",
          adjoint="the same hierarchy, or Aᴴ's (built once)", cases=(Case("AMG", dict(rtol=1e-11)),))
@register_preconditioner("amg")
@dataclass(frozen=True)
class AMG(Algorithm):
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
        acceptance policy of ``solvers._engines.krylov`` applies), number of cycles (200), pyamg's
        Krylov acceleration (``accel="cg"``, ...; None: plain cycles), initial guess.
    options : dict
        Passed to pyamg's solver constructor (``{"strength": "symmetric", "max_levels": 5}``).
    near_nullspace : array of shape (n, k), optional
        Smoothed aggregation's candidate vectors (pyamg's ``B``): the modes the hierarchy must
        represent exactly — for elasticity the rigid-body modes (3 in 2-D, 6 in 3-D), without
        which SA converges slowly. Kept (snapshotted) for every rebuild across updates, and
        used as the left candidates of Aᴴ's hierarchy. Default: the constant vector.
    reuse : {"aggregation", "hierarchy", "none"}
        What ``cache.update(A=...)`` keeps (above).
    max_growth : float
        ≥ 1; the growth of iterations per solve that triggers a rebuild (above).

    Raises
    ------
    ValueError
        At construction: an unknown ``kind`` or ``reuse``, ``max_growth`` < 1, bad tolerances,
        a ``near_nullspace`` with ``kind="rs"``.
    ShapeError
        At ``init``: ``near_nullspace`` not of shape (n, k).
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
    near_nullspace: Any = field(default=None, compare=False)

    def __post_init__(self):
        if self.near_nullspace is not None:
            if self.kind != "sa":
                raise ValueError("near_nullspace is smoothed aggregation's (kind='sa'); "
                                 "Ruge–Stüben has no candidate vectors")
            B = np.asarray(self.near_nullspace)
            object.__setattr__(self, "near_nullspace", snapshot(B[:, None] if B.ndim == 1 else B))
        if self.kind not in ("sa", "rs"):
            raise ValueError(f"AMG kind must be 'sa' or 'rs', got kind={self.kind!r}")
        if self.reuse not in REUSE:
            raise ValueError(f"AMG reuse must be one of {REUSE}, got reuse={self.reuse!r}")
        if not (isinstance(self.max_growth, (int, float)) and math.isfinite(self.max_growth)
                and self.max_growth >= 1):
            raise ValueError(f"AMG max_growth must be a finite number >= 1, got "
                             f"max_growth={self.max_growth!r}")
        check_spec(self)

    def build(self, A, hermitian: bool | None, be) -> "_AMGPrecond":
        """The hierarchy of A, applied as one V-cycle (``hermitian``: whether Mᴴ = M, so that
        adjoint solves need no second hierarchy; ``be``: the arrays' backend)."""
        be.require("amg", "AMG (pyamg)")
        sparse_only(A, "AMG")
        _require_diagonal(A)
        B = self.near_nullspace
        if B is not None and (B.ndim != 2 or B.shape[0] != A.shape[0]):
            raise ShapeError(f"near_nullspace must have shape (n, k) with n={A.shape[0]}, got "
                             f"near_nullspace.shape={B.shape}")
        return _AMGPrecond(self, A, hermitian, be, reuse=AMGReuse())

    def _setup(self, A, prob):
        """As an algorithm of its own (``sv.solve(prob, sv.AMG())``): the hierarchy and
        pyamg's cycle iteration under the acceptance rule of the Krylov methods."""
        return AMGSolveFactor(self, A, prob)


REUSE = ("aggregation", "hierarchy", "none")


def _require_diagonal(A: lo.Sparse) -> None:
    """ConvergenceError (BREAKDOWN) naming the first zero on A's diagonal: pyamg's smoothers
    divide by it (its cycles returned NaN, and scipy's bare ValueError surfaced, or a
    ZeroDivisionError at setup). O(nnz)."""
    P = A.pattern
    rows, cols = np.asarray(P.rows), np.asarray(P.indices)
    d = np.zeros(A.shape[0], dtype=np.result_type(A.dtype, np.float64))
    on = rows == cols
    d[rows[on]] = to_numpy(A.values)[on]
    zero = np.flatnonzero(d == 0)
    if zero.size:
        raise ConvergenceError(
            f"AMG needs a nonzero diagonal (its smoothers divide by it), but A[{zero[0]}, "
            f"{zero[0]}] = 0 ({zero.size} zero diagonal entries): use sv.GMRES(precond="
            f"sv.ILU()) or a direct solver (sv.LU()); {Status.BREAKDOWN.message}", [],
            status=Status.BREAKDOWN)


def _pyamg_hierarchy(spec: AMG, S, aggregates=None):
    """pyamg's hierarchy of S. Smoothed aggregation keeps each level's aggregation (``AggOp``,
    n entries) for numeric rebuilds and drops the rest of what ``keep`` retains; with
    ``aggregates`` the aggregation is predefined (strength and aggregation are skipped)."""
    if spec.kind != "sa":
        return pyamg.ruge_stuben_solver(S, **spec.options)
    opts = dict(spec.options)
    if spec.near_nullspace is not None:
        B = np.asarray(spec.near_nullspace, dtype=np.result_type(S.dtype, np.float64))
        opts.setdefault("B", B)
        opts.setdefault("BH", B.conj())
    user_keep = bool(opts.pop("keep", False))
    if aggregates:  # a one-level hierarchy has no aggregation to keep: a plain setup
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
    """One hierarchy, applied as a V-cycle. ``reuse`` (an :class:`AMGReuse`, shared by the
    successive hierarchies of one cache) records the iterations of every solve and decides,
    at each ``updated(A)``, whether to keep, recompute or rebuild the hierarchy."""

    def __init__(self, spec: AMG, A: lo.Sparse, hermitian, be, ml=None, adjoint_of=None,
                 aggregates=None, adjoint_aggregates=None, reuse=None):
        self.spec, self.A, self.hermitian, self.be = spec, A, hermitian, be
        self.reuse = reuse
        self.analyses = int(ml is None and not aggregates)
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

    def record(self, iterations: int) -> None:
        if self.reuse is not None:
            self.reuse.record(iterations)

    def updated(self, A: lo.Sparse) -> "_AMGPrecond":
        """The reuse policy's preconditioner for A (same pattern): kept, recomputed on the
        kept aggregation, or built from scratch (counted in ``reuse``)."""
        return self.reuse.update(self, A, self.spec, self.hermitian, self.be)

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
                           adjoint_aggregates=adj_aggs, reuse=self.reuse)

    def refreshed(self, A: lo.Sparse) -> "_AMGPrecond":
        """This hierarchy kept for A (same pattern): the finest level's operator and every
        level's smoothers are replaced (O(nnz)), the coarse levels stay those of the old A, so
        residuals and fine-level smoothing are A's own. The adjoint hierarchy (non-Hermitian A)
        is recomputed on its kept aggregation when first needed."""
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
                          adjoint_aggregates=adj_aggs, reuse=self.reuse)
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
        _require_diagonal(A)        # every path: a kept or rebuilt hierarchy smooths with A's
        cur = max(self.steps[-1], default=None)
        action = self.decide(spec)
        if action == "numeric" and not M.aggregates:
            action = "build"  # Ruge–Stüben (no predefined splitting), or one level (nothing kept)
        if action == "keep":
            new = M.refreshed(A)
        elif action == "numeric":
            new = M.rebuilt(A)
        else:
            new = spec.build(A, hermitian, be)
            new.reuse = self
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


class AMGSolveFactor(IterativeFactor):
    """pyamg's own cycle iteration (``sv.AMG()`` used as the solver), with the same acceptance
    rule as the Krylov methods; the hierarchy ``M`` follows the same reuse policy."""

    def __init__(self, spec, A, prob, M=None):
        super().__init__(spec, A, prob)
        if M is None:
            M = spec.build(A, self.hermitian, self.be)
            self.symbolic_analyses = M.analyses
        self.M = M
        self.kind = f"AMG solver [{self.M.summary}]"

    @property
    def amg(self) -> "AMGReuse":
        """The reuse record of the hierarchy."""
        return self.M.reuse

    def solve(self, B, trans: str):
        it0 = self.iterations
        try:
            return super().solve(B, trans)
        finally:
            self.M.record(self.iterations - it0)

    def _refactor(self, A):
        return AMGSolveFactor(self.spec, A, self.prob, M=self.M.updated(A))

    def _spawn(self, A):
        return AMGSolveFactor(self.spec, A, self.prob)

    def _run(self, op, trans, b, x0, rtol, history, atol):
        # pyamg's cycles stop on rtol alone; an atol-bound tolerance is judged by the verdict
        M = self.M if trans == "N" else self.M.adjoint()
        res: list[float] = []
        bh = to_numpy(b)
        try:
            x = M.ml.solve(bh, x0=None if x0 is None else to_numpy(x0), tol=rtol,
                           maxiter=self.spec.maxiter, accel=self.spec.accel, residuals=res)
        except (ValueError, ZeroDivisionError, FloatingPointError) as e:  # NaN/Inf in a cycle
            if isinstance(e, ValueError) and "inf" not in str(e).lower():
                raise
            raise ConvergenceError(f"AMG: its cycle produced NaN/Inf ({e}); "
                                   f"{Status.NONFINITE.message}", history, None,
                                   Status.NONFINITE) from None
        bn = float(np.linalg.norm(bh))
        history.extend(float(r) / bn for r in res)
        self.iterations += max(len(res) - 1, 0)  # res[0] is the initial residual, not a cycle
        converged = bool(res) and res[-1] <= rtol * bn
        return self.be.from_host(x), "converged" if converged else "maxiter"
