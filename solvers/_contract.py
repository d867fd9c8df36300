"""The solver contract: what an algorithm and its factor are, and the ONE validation path that
every setup and every update goes through.

An engine is one module written against two base classes:

* :class:`Algorithm` — a frozen options record (``sv.LU()``, ``sv.CG(rtol=...)``). It declares
  its requirements (:meth:`Algorithm.needs_hermitian`) and implements :meth:`Algorithm._setup`,
  which factorizes a validated A. Its public :meth:`Algorithm.setup` is the base class's and is
  not overridden (``tests/test_contract.py`` checks every registered algorithm).
* :class:`Factor` — what ``_setup`` returns and a cache keeps: it solves ``op(A) X = B`` for
  ``op`` in :attr:`Factor.modes` ('N', 'H', 'T') with the SAME factors, may reuse its symbolic
  analysis for a matrix of the same structure (:meth:`Factor._refactor`, :meth:`Factor._spawn`)
  and may know its log-determinant.

:func:`prepare` is the path ``sv.init``, ``cache.update`` and ``sv.init(..., like=)`` share.
In this order it checks: the dtype against the backend table, NaN/Inf in A (``check_finite``),
the empty matrix (n = 0 is solved exactly by :class:`EmptyFactor`, whatever the algorithm);
then it makes the algorithm's PLAN for this A (:meth:`Algorithm.plan`, or at an ``update``
:meth:`Algorithm.replan`: ``Auto`` chooses, verifying the hints and warning as at ``init``, and
measures its candidates at the first update of a pattern) and either REUSES a previous factor's
symbolic analysis through the plan's :meth:`Algorithm.refactor` — only when the plan is the one
that built it, the structure, the working precision (so the dtype kind too) and the backend are
the same, and the new A meets every requirement the previous factor was built on (a Hermitian
factor needs a Hermitian A); a plan that recovers from a failed refactorization (``Auto``'s
fallback to LU) may answer with a full setup instead — or runs a FULL setup of the plan, whose
declared requirements are checked before ``_setup``. A query the factor cannot answer (log det,
selected inversion) may get a capable plan from :meth:`Algorithm.for_query` (``Auto`` only). So an update is a setup
that may reuse symbolic work, never a path with fewer checks: a Cholesky cache refuses a
non-Hermitian update as its ``init`` does, ``Auto`` warns and chooses LU exactly as at ``init``
(and goes back to Cholesky when the values are Hermitian again), and a real factor never
receives complex values.

>>> import numpy as np, solvers as sv
>>> cache = sv.init(sv.LinearProblem(np.array([[4.0, 1.0], [1.0, 3.0]])), sv.Cholesky())
>>> cache.update(A=np.array([[4.0, 1.0], [2.0, 3.0]]))
Traceback (most recent call last):
...
solvers._errors.NotHermitianError: Cholesky needs a Hermitian matrix, but max|A - Aᴴ| = 1 ...
>>> cache.solve(np.ones(2)).round(4).tolist()          # the failed update changed nothing
[0.1818, 0.2727]
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

import linops as lo
from linops.internals import structure, structure_key

from ._checks import (backend_of_problem, check_finite_operator, is_hermitian, precision,
                      require_hermitian)
from ._errors import BackendNotSupported
from ._results import LogDet
from ._results import SelectedInverse

MODES = frozenset("NHT")


class Factor(abc.ABC):
    """The state an algorithm's setup leaves: factors (or a preconditioner) that serve
    ``op(A)⁻¹ B`` for ``op`` in :attr:`modes` without being rebuilt.

    Subclasses implement :meth:`solve`; they may implement :meth:`_refactor` (numeric
    refactorization on the same structure, ``update``), :meth:`_spawn` (a second factor on the
    same symbolic analysis that leaves this one usable, ``init(..., like=)``) and
    :meth:`logdet`. The attributes below are read by the cache and by ``adjoints``.

    Attributes
    ----------
    kind : str
        What was set up, in words ('SuperLU', 'CHOLMOD', 'CG + AMG(sa): ...').
    dtype : numpy.dtype
        The working precision of the factors.
    modes : frozenset of {'N', 'H', 'T'}
        The systems the factors solve: A, Aᴴ, Aᵀ (every engine here serves all three).
    requires_hermitian : bool
        The factors assume A = Aᴴ (Cholesky, PARDISO's definite types): a later A must be
        Hermitian to reuse them, else ``prepare`` runs a full setup (whose checks then decide).
    iterations : int
        Krylov iterations so far (0 for direct methods).
    last_status : Status or None
        Of the last solve (``ACCURACY_LIMIT`` for an iterative one at the rounding level).
    symbolic_analyses : int
        Symbolic analyses this factor ran (0 when it reused one).
    numeric_seconds : float or None
        Wall time of the numeric factorization alone, where the engine separates it from its
        analysis (CHOLMOD, PARDISO, SuperLU's ``splu``); what ``Auto``'s measurements rank a
        loop's steps by.
    why : str or None
        Why this factor's algorithm was chosen (``Auto``; None for an algorithm as given), in
        words: ``cache.info`` shows it.
    chosen : Algorithm or None
        Set by a setup that chose among plans by measuring them (``Auto``'s tuning): the plan
        that built this factor, recorded as its ``plan`` instead of the measuring one.
    tuning_factorizations : int
        Factorizations of other candidates timed and dropped to choose this one.
    reused_analysis : bool
        The full setup found this pattern's symbolic analysis kept from an earlier cache
        (``sv.analyses``) and ran the numeric factorization only (``symbolic_analyses`` 0).
    """

    kind: str = ""
    dtype: Any = None
    modes: frozenset = MODES
    requires_hermitian: bool = False
    iterations: int = 0
    last_status: Any = None
    symbolic_analyses: int = 0
    numeric_seconds: float | None = None
    why: str | None = None
    chosen: Any = None
    tuning_factorizations: int = 0
    reused_analysis: bool = False
    # set by setup(): the algorithm (the plan) that built it; by prepare(): what it was built
    # for (structure key, backend name, the working precision of the operator: CHOLMOD
    # factors a float32 A in float64, say)
    plan: Any = None
    structure: Any = None
    backend: Any = None
    precision: Any = None

    @abc.abstractmethod
    def solve(self, B, trans: str):
        """X with op(A) X = B, op = A, Aᴴ or Aᵀ for ``trans`` 'N', 'H', 'T'; B of shape (n, k)
        with n, k ≥ 1 (the cache handles empty shapes), in the backend of A."""

    def _refactor(self, A) -> "Factor | None":
        """A factor for A (same structure, same precision: ``prepare`` checked) that reuses this
        one's symbolic work; this one may stop working. None: not supported (full setup)."""
        return self._spawn(A)

    def _spawn(self, A) -> "Factor | None":
        """Like :meth:`_refactor`, but this factor must stay usable (batches on one pattern).
        None: not supported (a full setup with its own analysis)."""
        return None

    def native_handle(self) -> int:
        """The id of this factorization in ``solvers._native``'s table, through which
        ``adjoints.jax`` solves with it in a compiled loop without a Python callback (KLU's own
        factor; a native copy of a real CHOLMOD factor, made at the first call); 0: none (the
        callback serves it)."""
        return 0

    def logdet(self):
        """(sign, log|det A|) (a ``solvers.LogDet``) from the factors; engines without factors
        raise BackendNotSupported naming a direct solver or the stochastic estimator."""
        raise BackendNotSupported(
            f"logdet needs a factorization, and this cache holds {self.kind or type(self).__name__}"
            f": use a direct solver (sv.LU(), sv.Cholesky(), sv.Pardiso(posdef=True)), or for an "
            f"operator that cannot be factorized the stochastic estimate sv.logdet_estimate(A) "
            f"(with its standard error)")

    def selected_inverse(self, shape):
        """A⁻¹ on the factor's filled pattern (a ``solvers.SelectedInverse``), by the Takahashi
        recurrences on the factors; engines without accessible factors raise
        BackendNotSupported."""
        raise BackendNotSupported(
            f"selected inversion needs the factors of A, and this cache holds "
            f"{self.kind or type(self).__name__}: use sv.LU() (SuperLU) or sv.Cholesky() "
            f"(CHOLMOD) for a sparse A; for an operator that cannot be factorized, "
            f"sv.logdet_estimate")

    def close(self) -> None:
        """Release external resources now (PARDISO memory, PETSc objects); idempotent. The
        garbage collector does the same when the factor is dropped."""


class EmptyFactor(Factor):
    """The factor of a 0×0 matrix: every solve returns an empty (0, k) result (exact)."""

    kind = "empty (n = 0)"

    def __init__(self, A):
        self.dtype = precision(A.dtype)
        self.be = backend_of_problem(A)

    def solve(self, B, trans: str):
        return self.be.xp.zeros(tuple(B.shape), dtype=np.result_type(self.dtype, B.dtype))

    def _spawn(self, A) -> "EmptyFactor":
        return EmptyFactor(A)

    def logdet(self):
        return LogDet(1.0, 0.0)  # det of the 0×0 matrix

    def selected_inverse(self, shape):
        """The (empty) inverse of the 0×0 matrix, exactly: every engine answers n = 0."""
        z = np.zeros(0, np.int64)
        one = np.zeros(1, np.int64)
        dt = np.dtype(self.dtype)
        return SelectedInverse("empty", shape, dt, (one, one, z, one, z), np.zeros(0, dt),
                               np.zeros(1, dt), False, z, z)


class Algorithm(abc.ABC):
    """An algorithm: frozen options plus a setup that returns a :class:`Factor`.

    Subclasses (frozen dataclasses) implement :meth:`_setup` and declare their requirements in
    :meth:`needs_hermitian`; they do not override :meth:`setup`. ``name`` is the registry slug
    (``sv.solve(prob, "lu")``). An algorithm that composes others (``Auto``, ``Woodbury``) calls
    their :meth:`setup`, so their requirements are checked too.
    """

    name: ClassVar[str] = ""
    #: solves min ‖Ax − b‖ for any m×n A (``sv.QR``, ``sv.LSMR``); the others need a square A
    least_squares: ClassVar[bool] = False

    def needs_hermitian(self, A, prob) -> bool:
        """True when this algorithm's factorization is valid only for a Hermitian A (checked
        in O(nnz) before :meth:`_setup`; the hints ``hermitian=``/``posdef=`` never skip it)."""
        return False

    def plan(self, A, prob) -> "Algorithm":
        """The algorithm that will factorize this A: ``self`` by default; an algorithm that
        decides from A and the hints (``Auto``, ``Pardiso(posdef=None)``) returns the decided
        one, verifying the hints (and warning) here — at ``init`` and at every ``update``."""
        return self

    def replan(self, A, prob, previous: Factor) -> "Algorithm":
        """The plan for an ``update`` of a cache that holds ``previous``: :meth:`plan` by
        default. ``Auto`` measures its candidates here, at the first update of a pattern (the
        problem is solved more than once)."""
        return self.plan(A, prob)

    def for_query(self, query: str, A, prob, factor: Factor) -> "Algorithm | None":
        """An algorithm whose factor answers ``query`` (``"logdet"``, ``"selected_inverse"``)
        for A where ``factor`` (this algorithm's) cannot, or None: an algorithm chosen by the
        user is kept, and the query raises. ``Auto`` returns the capable plan."""
        return None

    def refactor(self, previous: Factor, A, prob, keep_previous: bool) -> "Prepared | None":
        """Reuse ``previous``'s symbolic analysis for A (``prepare`` has checked that this plan
        built it and that A meets its requirements): :meth:`Factor._spawn` when ``previous``
        must stay usable, else :meth:`Factor._refactor`. None: the factor cannot reuse it (a
        full setup follows). An algorithm that recovers from a failed attempt (``Auto``'s
        fallback) may return a full setup of another algorithm instead (``reused=False``)."""
        factor = previous._spawn(A) if keep_previous else previous._refactor(A)
        return None if factor is None else Prepared(factor, True)

    @property
    def label(self) -> str:
        """How messages name the algorithm."""
        return type(self).__name__

    def setup(self, A: lo.LinearOperator, prob=None) -> Factor:
        """A full setup: the declared requirements, then :meth:`_setup` (an empty A gets an
        :class:`EmptyFactor`). The cache reaches it through :func:`prepare`, which makes the
        checks common to every algorithm first."""
        if getattr(prob, "least_squares", False) and not self.least_squares:
            raise TypeError(f"{self.label} solves square systems A u = b, and this is a "
                            f"least-squares problem (A.shape={A.shape}): use sv.QR() "
                            f"(SuiteSparseQR / LAPACK) or sv.LSMR() (iterative)")
        if self.needs_hermitian(A, prob):
            require_hermitian(A, self.label)
        empty = A.shape[0] == 0 and not self.least_squares  # least squares: the engine's shapes
        factor = EmptyFactor(A) if empty else self._setup(A, prob)
        if not isinstance(factor, Factor):
            raise TypeError(f"{self.label}._setup returned {type(factor).__name__}, not a "
                            f"solvers Factor")
        factor.plan = factor.chosen if factor.chosen is not None else self
        return factor

    @abc.abstractmethod
    def _setup(self, A: lo.LinearOperator, prob) -> Factor:
        """Factorize (or set up the preconditioner of) a validated, non-empty A."""


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare` made: the factor and whether it reused a symbolic analysis."""

    factor: Factor
    reused: bool


def prepare(alg: Algorithm, A: lo.LinearOperator, prob, *, previous: Factor | None = None,
            keep_previous: bool = False, check_finite: bool = True) -> Prepared:
    """The one validation path of ``init``, ``update`` and ``init(..., like=)``.

    Parameters
    ----------
    alg : Algorithm
    A : lo.LinearOperator
        Square (``LinearProblem`` checked the shape).
    prob : LinearProblem
        Its hints.
    previous : Factor, optional
        A factor whose symbolic analysis may be reused (``update``: the cache's; ``like=``: the
        other cache's).
    keep_previous : bool
        ``previous`` must stay usable (``like=``): :meth:`Factor._spawn` instead of
        :meth:`Factor._refactor`.
    check_finite : bool
        Check A for NaN/Inf.

    Returns
    -------
    Prepared

    Raises
    ------
    BackendNotSupported, NonFiniteInputError, NotHermitianError, SingularMatrixError, ...
        From the checks and the factorization; nothing is changed on failure.
    """
    be = backend_of_problem(A, getattr(prob, "b", None))
    be.require_dtype(A.dtype, "solve")
    if check_finite:
        check_finite_operator(A)
    key = structure_key(A)
    if not A.shape[0]:
        plan = alg
    elif previous is not None and not keep_previous:
        plan = alg.replan(A, prob, previous)
    else:
        plan = alg.plan(A, prob)
    check_declared(plan, A, be)
    made = None
    if previous is not None and same_spec(previous.plan, plan) and _reusable(previous, A, key, be):
        made = plan.refactor(previous, A, prob, keep_previous)
        if made is not None:
            made.factor.plan = plan
    if made is None:
        made = Prepared(plan.setup(A, prob), False)
    factor, reused = made.factor, made.reused
    if factor.why is None:   # the plan's reason (Auto's), shown by cache.info
        factor.why = getattr(plan, "why", None)
    factor.structure, factor.backend, factor.precision = key, be.name, precision(A.dtype)
    return Prepared(factor, reused)


def check_declared(alg: Algorithm, A: lo.LinearOperator, be) -> None:
    """BackendNotSupported, in one message, when the registry entry of ``alg`` does not declare
    A's structure, A's backend or A's dtype (engines do not re-check what they declare)."""
    from ._registry import entries, entry_of  # the registry imports this module (Algorithm)

    e = entry_of(alg)
    if e is None:
        return
    kind = structure(A)
    if kind not in e.structures:
        takes = [x.name for x in entries() if kind in x.structures]
        raise BackendNotSupported(
            f"{alg.label} takes {', '.join(e.structures)} operators, and A is {kind} "
            f"({type(A).__name__}, {A.shape[0]}×{A.shape[1]}); algorithms that take {kind} "
            f"operators: {', '.join(takes) or 'none'}")
    if be.name not in e.backends:
        raise BackendNotSupported(
            f"{alg.label} takes {', '.join(e.backends)} arrays, and A's are {be.name}; "
            f"sv.show_config() lists what each algorithm takes")
    why = e.unsupported(A.dtype) if e.unsupported is not None else None
    if why is not None:
        raise BackendNotSupported(f"{alg.label}: {why}")


def same_spec(a, b) -> bool:
    """Two algorithm objects with the same type and options (arrays compared by value)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if not dataclasses.is_dataclass(a):
        return False
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if x is y:
            continue
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
                    and np.array_equal(x, y)):
                return False
        elif dataclasses.is_dataclass(x):
            if not same_spec(x, y):
                return False
        else:
            try:
                if not bool(x == y):
                    return False
            except (TypeError, ValueError):
                return False
    return True


def _reusable(previous: Factor, A, key, be) -> bool:
    """Whether A may reuse ``previous``'s symbolic work: the same structure, working
    precision and backend, and every requirement ``previous`` was built on."""
    if key is None or previous.structure != key or previous.backend != be.name:
        return False
    if precision(A.dtype) != previous.precision:  # another kind or precision: a full setup
        return False
    if previous.requires_hermitian:
        return is_hermitian(A)
    return True
