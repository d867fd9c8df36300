"""init / solve and the LinearCache: the factorization plus counters.

``init`` factorizes once; ``solve``, ``solve_adjoint``, ``solve_transpose`` and every pullback
reuse it. In-place edits of A's arrays after ``init`` are detected (crc32 fingerprint of the
host arrays, O(bytes), on by default) and answered with a numeric refactorization, never with
stale factors. A failed refactorization or solve leaves the cache as it was.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

import linops as lo
from linops._backend import is_jax
from linops._pytree_util import array_leaves

from ._backend import finite_or_raise, xp_of
from ._errors import SolveError, Status
from ._problem import LinearProblem, check_rhs


@dataclass
class Stats:
    """Counters of one cache (for tests and benchmarks)."""

    factorizations: int = 0
    numeric_refactorizations: int = 0
    solves: int = 0
    adjoint_solves: int = 0
    transpose_solves: int = 0
    iterations: int = 0
    setup_seconds: float = 0.0
    solve_seconds: float = 0.0


@dataclass(frozen=True)
class Solution:
    """Result of ``sv.solve``: ``u``, ``status`` (Status), ``stats`` and the reusable ``cache``."""

    u: Any
    status: Status
    stats: Stats
    cache: "LinearCache"


def _fingerprint(A: lo.LinearOperator):
    """crc32 over the host arrays A holds (jax arrays and patterns are immutable: skipped)."""
    out = []
    for a in array_leaves(A, patterns=False):
        if is_jax(a):
            continue
        if isinstance(a, np.ndarray):
            out.append((id(a), zlib.crc32(np.ascontiguousarray(a).view(np.uint8))))
        else:  # cupy: a position-weighted checksum of the 32-bit words, two device reductions
            xp = xp_of(A)
            w = a.reshape(-1).view(xp.uint32).astype(xp.uint64)
            pos = xp.arange(w.size, dtype=xp.uint64) % xp.uint64(65521) + xp.uint64(1)
            out.append((id(a), int(w.sum()), int((w * pos).sum())))
    return tuple(out)


class LinearCache:
    """The state of a solve: A's factorization (or preconditioner), the last solution, counters.

    Cost model: ``init`` = one factorization; each ``solve``/``solve_adjoint``/``solve_transpose``
    = triangular solves (or one Krylov run) with the SAME factors; fingerprint check O(nnz).
    """

    def __init__(self, prob: LinearProblem, alg, *, check_mutation: bool = True,
                 check_finite: bool = True):
        from ._auto import Auto

        self.prob = prob
        self.alg = alg if alg is not None else Auto()
        self.check_mutation = check_mutation
        self.check_finite = check_finite
        self.stats = Stats()
        self.u = None
        if check_finite:
            _check_finite_op(prob.A)
        t = time.perf_counter()
        self.factor = self.alg.setup(prob.A, prob)
        self.stats.setup_seconds += time.perf_counter() - t
        self.stats.factorizations += 1
        self._fp = _fingerprint(prob.A) if check_mutation else None

    # ----- properties -----------------------------------------------------------------------------
    @property
    def A(self) -> lo.LinearOperator:
        return self.prob.A

    @property
    def kind(self) -> str:
        return getattr(self.factor, "kind", type(self.factor).__name__)

    def __repr__(self) -> str:
        s = self.stats
        return (f"LinearCache({self.kind}, n={self.A.shape[0]}, factorizations={s.factorizations}, "
                f"solves={s.solves}, adjoint_solves={s.adjoint_solves})")

    def as_operator(self) -> lo.LinearOperator:
        """A⁻¹ as a lazy operator (matmat = solve, rmatmat = adjoint solve; same factors)."""
        return lo.MatrixFree(self.A.shape, self.A.dtype, lambda X: self._run(X, "N", "x"),
                             lambda X: self._run(X, "H", "x"))

    # ----- solves ---------------------------------------------------------------------------------
    def solve(self, b=None):
        """u = A⁻¹ b (b defaults to the problem's b); also stored as ``cache.u``."""
        b = self.prob.b if b is None else b
        if b is None:
            raise ValueError("no right-hand side: pass b to solve() or to the LinearProblem")
        u = self._run(b, "N", "b")
        self.u = u
        return u

    def solve_adjoint(self, c):
        """λ = A⁻ᴴ c with the same factorization (two triangular solves for LU)."""
        return self._run(c, "H", "c")

    def solve_transpose(self, c):
        """λ = A⁻ᵀ c with the same factorization (complex symmetric problems, JAX's convention)."""
        return self._run(c, "T", "c")

    def _run(self, b, trans: str, name: str):
        check_rhs(self.A, b, name)
        if self.check_finite:
            finite_or_raise(b, name)
        self._refresh_if_mutated()
        B = b[:, None] if b.ndim == 1 else b
        t = time.perf_counter()
        it0 = self.factor.iterations
        X = self.factor.solve(B, trans)
        self.stats.iterations += getattr(self.factor, "iterations", 0) - it0
        self.stats.solve_seconds += time.perf_counter() - t
        xp = xp_of(self.A)
        if not bool(xp.all(xp.isfinite(X))):
            raise SolveError(f"the solve produced NaN/Inf; {Status.NONFINITE.message}",
                             Status.NONFINITE)
        attr = {"N": "solves", "H": "adjoint_solves", "T": "transpose_solves"}[trans]
        setattr(self.stats, attr, getattr(self.stats, attr) + 1)
        return X[:, 0] if b.ndim == 1 else X

    # ----- updates --------------------------------------------------------------------------------
    def update(self, A=None, b=None) -> "LinearCache":
        """New A and/or b. A with the same pattern: numeric refactorization (symbolic analysis
        kept where the backend allows); a new pattern: full factorization. On failure the cache
        keeps its previous A and factors."""
        prob = self.prob
        if A is not None:
            A = lo.aslinop(A)
            if A.shape != prob.A.shape:
                from linops._errors import ShapeError

                raise ShapeError(f"update: new A.shape={A.shape} but the cache's A.shape={prob.A.shape}")
            new_prob = LinearProblem(A, prob.b if b is None else b, hermitian=prob.hermitian,
                                     posdef=prob.posdef)
            same = _same_structure(prob.A, A)
            self._refactor(new_prob, numeric=same)
        elif b is not None:
            self.prob = LinearProblem(prob.A, b, hermitian=prob.hermitian, posdef=prob.posdef)
        return self

    def _refactor(self, new_prob: LinearProblem, numeric: bool) -> None:
        if self.check_finite:
            _check_finite_op(new_prob.A)
        t = time.perf_counter()
        factor = self.factor.refactor(new_prob.A) if numeric else self.alg.setup(new_prob.A, new_prob)
        self.stats.setup_seconds += time.perf_counter() - t
        self.factor, self.prob = factor, new_prob
        if numeric:
            self.stats.numeric_refactorizations += 1
        else:
            self.stats.factorizations += 1
        self._fp = _fingerprint(new_prob.A) if self.check_mutation else None

    def _refresh_if_mutated(self) -> None:
        if not self.check_mutation:
            return
        if _fingerprint(self.A) != self._fp:
            self._refactor(self.prob, numeric=True)


def _same_structure(A, B) -> bool:
    if isinstance(A, lo.Sparse) and isinstance(B, lo.Sparse):
        return A.pattern == B.pattern
    return type(A) is type(B) and isinstance(A, lo.Dense)


def _check_finite_op(A: lo.LinearOperator) -> None:
    for a in array_leaves(A, patterns=False):
        if is_jax(a) or not np.issubdtype(np.dtype(a.dtype), np.inexact):
            continue
        if isinstance(A, lo.Sparse) and a is A.values:
            xp = xp_of(A)
            if not bool(xp.all(xp.isfinite(a))):
                k = int(np.flatnonzero(~np.isfinite(np.asarray(a)))[0]) if isinstance(a, np.ndarray) else 0
                r, c = int(A.pattern.rows[k]), int(A.pattern.indices[k])
                raise ValueError(f"A contains {a[k]} at stored entry {k} (row {r}, column {c}); "
                                 f"check_finite=False skips this check")
        else:
            finite_or_raise(a, "A")


def init(prob: LinearProblem, alg=None, *, check_mutation: bool = True,
         check_finite: bool = True) -> LinearCache:
    """Factorize (or set up the preconditioner) once; returns the reusable cache.

    >>> import numpy as np
    >>> cache = init(LinearProblem(np.array([[4.0, 1.0], [2.0, 3.0]]), np.array([1.0, 2.0])))
    >>> cache.solve().round(3).tolist(), cache.stats.factorizations
    ([0.1, 0.6], 1)
    """
    return LinearCache(prob, alg, check_mutation=check_mutation, check_finite=check_finite)


def solve(prob: LinearProblem, alg=None, *, throw: bool = True, check_mutation: bool = True,
          check_finite: bool = True) -> Solution:
    """init + solve. With ``throw=False`` a failed solve returns a Solution whose status says
    what went wrong (u is the last iterate or None) instead of raising."""
    cache = init(prob, alg, check_mutation=check_mutation, check_finite=check_finite)
    try:
        u = cache.solve()
    except SolveError as e:
        if throw:
            raise
        return Solution(getattr(e, "iterate", None), e.status, cache.stats, cache)
    return Solution(u, Status.SUCCESS, cache.stats, cache)
