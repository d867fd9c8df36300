"""Auto: pick the algorithm from the operator's structure, what the registry says is installed,
the problem's hints (verified, never trusted) and the questions it declares (``asks``) — and,
where a problem is solved more than once, from measurements of the candidate engines on the
real pattern (:mod:`solvers._engines.tune`).

The rules are :meth:`Auto.choose`; :meth:`Auto.plan` turns the choice into the plan a setup
runs: the measured or profiled winner where there is one, and a :class:`Fallback` chain around
a factorization that may refuse the matrix (a definite one on an indefinite A, PARDISO's static
pivoting on a regular A it cannot take).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

import linops as lo
from linops.internals import backend_of, structure, structure_key

from .._checks import backend_of_problem, hint_text, is_hermitian, precision
from .._contract import Algorithm, Factor, Prepared
from .direct import LU, Cholesky, DiagonalSolve
from .._errors import HintWarning, NotPositiveDefiniteError, SingularMatrixError, warn_caller
from .klu import KLU, native_available, symbolic_of as klu_symbolic
from .krylov import CG, GMRES
from .amg import AMG
from .._registry import entry, register
from .tune import Profile, Tuned, default_profile, measure_candidates
from .woodbury import Woodbury

#: what each engine Auto may pick answers beyond solves (``LinearProblem(asks=...)``)
ANSWERS = {"CHOLMOD": {"logdet", "selected_inverse"}, "SuperLU": {"logdet", "selected_inverse"},
           "PARDISO definite": {"logdet"}, "PARDISO": set(), "KLU": {"logdet"},
           "dense": {"logdet", "selected_inverse"}}


@register("auto", "the default: chooses by structure, size, what is installed and checked hints",
          ("dense", "sparse", "diagonal", "lowrank", "matrixfree"), direct=True,
          queries=("logdet", "selected_inverse"), adjoint="whatever it chose", jax=True)
@dataclass(frozen=True)
class Auto(Algorithm):
    """The default algorithm. Rules, first match wins:

    ================================================  =========================================
    A                                                 algorithm
    ================================================  =========================================
    Diagonal or Identity                              elementwise division (exact, O(n))
    B + LowRank(U, V) (a Sum with one low-rank term)  Woodbury over Auto(B)
    Dense (or n <= dense_max)                         Cholesky if Hermitian, else LU (LAPACK)
    Sparse, posdef hint, n > iterative_min            CG(rtol) + AMG   (where AMG exists; not
                                                      when the problem asks for log det or
                                                      entries of A⁻¹)
    Sparse (numpy), ``loop_solves``                   Cholesky (CHOLMOD) if real Hermitian and
                                                      installed, else KLU (where built)
    Sparse (numpy), factorized at every step of a     KLU's native FFI factorize where the
    compiled loop (``adjoints.jax``)                  rule above would pick KLU, or KLU's
                                                      estimated flops <= loop_factorize_flops
                                                      (:meth:`loop_factorize`)
    Sparse (numpy), n >= pardiso_min, PARDISO there   Pardiso (mtype 2/4 if Hermitian, else
                                                      11/13; not when the problem asks for
                                                      entries of A⁻¹, nor for log det unless
                                                      Hermitian)
    Sparse, Hermitian, CHOLMOD available              Cholesky (CHOLMOD)
    Sparse, otherwise                                 LU (SuperLU, symmetric mode for a
                                                      structurally symmetric pattern; cupyx
                                                      splu on cupy)
    matrix-free / lazy, Hermitian posdef hints        CG(rtol)
    matrix-free / lazy, otherwise                     GMRES(rtol)
    ================================================  =========================================

    "Hermitian" is CHECKED for stored matrices (O(nnz) sparse, O(n²) dense), hint or not: a
    Hermitian A gets the symmetric/definite factorization (half the work of LU) without any
    hint, and a Cholesky that finds A indefinite falls back to LU (one more factorization,
    counted in ``cache.stats.fallbacks``; never a wrong answer), at ``init`` and at every
    ``update`` alike. With a hint that does not hold (``posdef=True`` on a non-Hermitian or an
    indefinite A) Auto also warns (:class:`HintWarning`, naming the hint as you gave it) — the
    README's rule. An explicit ``sv.Cholesky()`` raises instead (``NotHermitianError``,
    ``NotPositiveDefiniteError``).

    **Measured, where a problem is solved more than once.** For a sparse matrix on the host the
    rules' direct engine is only the first guess. At a cache's first ``update`` on the same
    pattern (or at ``init`` with ``tune=True``) Auto times every candidate engine that can
    answer the problem's questions — CHOLMOD, PARDISO and SuperLU (symmetric mode for a
    structurally symmetric pattern) for a Hermitian A, PARDISO and SuperLU otherwise — on the
    real matrix, keeps the fastest one's factor and drops the others
    (``cache.stats.tuning_factorizations``: at most one per candidate per pattern), and
    remembers the winner for the pattern. Without a measurement of the pattern, a per-machine
    profile written by ``python -m linops tune`` (read from the user's cache directory) picks
    the winner measured on a problem of the same class and a similar size. ``cache.info`` says
    which and why ("chose CHOLMOD: 0.41 s vs PARDISO 0.74 s on this pattern (...)"). Every
    candidate is a direct factorization, so a measured choice changes the answer by the
    engines' rounding only; a plain ``sv.solve`` keeps its cost (one factorization).

    **Questions.** A problem that declares ``asks=("logdet", "selected_inverse")`` gets an
    engine that answers them (CHOLMOD, SuperLU; PARDISO's definite types for log det). An
    undeclared query that the chosen engine cannot answer (the gradient of log det on a
    PARDISO cache) is answered all the same: the cache factorizes once more with a capable
    engine, counted in ``cache.stats.factorizations`` and warned (:class:`HintWarning`).

    ``pardiso_min``: PARDISO (when pypardiso is installed) beat CHOLMOD and SuperLU from about
    n = 10⁴ on the Q4 Poisson family (CPU time of factorization + two solves, one thread: at
    n = 2·10⁴ 91 ms vs CHOLMOD 229 ms, 158 ms vs SuperLU 216 ms; at 8·10⁴ 465 vs 770 ms and
    655 vs 1080 ms); below 5·10³ its analysis overhead loses. 2·10⁴ keeps a margin. Measured
    on other machines or under load, the order differs: hence the measurements.

    Parameters
    ----------
    iterative_min : int
        Sparse Hermitian positive definite problems larger than this go to CG + AMG (a direct
        factorization's fill grows faster than n). Default 2·10⁶.
    dense_max : int
        Lazy operators up to this size are densified and factorized (LAPACK) instead of
        solved iteratively. Default 0: never.
    rtol : float or None
        The tolerance of the iterative methods Auto picks (1e-10: gradients are only as
        accurate as the solves). None: the precision's default.
    pardiso_min : int
        Sparse problems from this size use PARDISO when it is installed (see above).
    tune : bool or None
        None (default): measure at a cache's first update of a pattern of at least
        ``tune_min`` unknowns; True: at ``init`` too, at any size; False: the rules only (no
        measurement, no profile).
    profile : sv.Profile, path or None
        Where measurements are kept and the machine profile read from: None (default) the
        process's own (this machine's file, :meth:`solvers.Profile.load`, and the patterns
        measured since); a path: that file; a ``sv.Profile``.
    tune_min : int
        The smallest problem ``tune=None`` measures (default 10⁴ unknowns: below, a
        factorization takes milliseconds and PARDISO's analysis alone costs more than any
        choice saves).
    loop_solves : bool
        The factor will be solved with at many steps of a compiled loop (``adjoints.jax`` sets
        it for a factorization whose solves sit in a ``lax.scan``/``fori_loop``/``while_loop``
        body): the engines whose factors its XLA FFI call solves without a Python callback per
        step win — CHOLMOD for a real Hermitian A, else KLU — chosen by rule (no measurement:
        the tuning times factorizations, a loop pays per step). Default False.
    loop_factorize_flops : float
        A factorization made at every step of a compiled loop (``adjoints.jax``: A built in a
        ``lax.scan`` body) whose solves are all native is KLU's XLA FFI factorize — no Python
        per step — when KLU's estimated flops (its symbolic analysis) are at most this, even
        where the rules would pick CHOLMOD (a Python callback per step, ~2 ms with its
        adjoint). Measured, jit(value_and_grad) of a scan factorizing every step, one thread,
        ms per step native KLU vs the CHOLMOD callback: 2-D Q4 heat n = 256 0.25 vs 2.7
        (9.3·10⁴ flops), 1 024 1.6 vs 3.5, 3 025 9.3 vs 10.9 (6.0·10⁶), 4 096 15.0 vs 13.1
        (1.0·10⁷); 3-D 7-point n = 512 1.2 vs 6.0 (9.4·10⁵), 1 331 11.4 vs 9.2 (8.6·10⁶).
        Default 5·10⁶ (flops, not n: a 3-D pattern fills sooner).

    Notes
    -----
    The choice depends on what is installed (PARDISO, CHOLMOD: the registry says), on the
    backend (no AMG on cupy/jax, no PARDISO off the host) and on the measurements: read
    ``cache.info`` after ``init`` to see it, or call :meth:`choose` for the rules. Adjoint solves
    always reuse whatever was chosen. An ``update`` re-runs these rules whenever the factor
    cannot be reused for the new A (a Cholesky factor and a non-Hermitian A, another pattern or
    dtype kind), warnings included.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, linops as lo, solvers as sv
    >>> A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50), format="csr")
    >>> prob = sv.LinearProblem(A, np.ones(50), posdef=True)
    >>> type(sv.Auto().choose(lo.Diagonal(np.ones(3)))).__name__
    'DiagonalSolve'
    >>> alg = sv.Auto(iterative_min=10).choose(prob.A, prob)     # a "large" problem
    >>> type(alg).__name__, type(alg.precond).__name__
    ('CG', 'AMG')
    >>> sol = sv.solve(prob, sv.Auto(iterative_min=10))
    >>> sol.status.name, sol.cache.kind.split(":")[0]
    ('SUCCESS', 'CG + AMG(sa)')
    >>> sv.solve(sv.LinearProblem(np.array([[4.0, 1.0], [1.0, 3.0]]), [1.0, 2.0])).cache.kind
    'dense Cholesky'
    >>> cache = sv.init(sv.LinearProblem(np.array([[1.0, 2.0], [2.0, 1.0]])))   # indefinite
    >>> cache.kind, cache.stats.fallbacks
    ('dense LU (after Cholesky: not positive definite)', 1)

    Measured at init, with a private profile:

    >>> cache = sv.init(prob, sv.Auto(tune=True, profile=sv.Profile()))
    >>> cache.info.split(":")[1].strip().startswith("chose")   # doctest: +SKIP
    True
    """

    iterative_min: int = 2_000_000
    dense_max: int = 0
    rtol: float | None = 1e-10
    pardiso_min: int = 20_000
    tune: bool | None = None
    profile: Any = field(default=None, repr=False)
    tune_min: int = 10_000
    loop_solves: bool = False
    loop_factorize_flops: float = 5e6

    def __post_init__(self):
        f = self.loop_factorize_flops
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not f >= 0:
            raise ValueError(f"Auto: loop_factorize_flops must be a number >= 0 (0: never "
                             f"KLU's native factorize where the rules pick CHOLMOD), got {f!r}")
        if self.tune not in (None, True, False):
            raise ValueError(f"Auto: tune must be None, True or False, got tune={self.tune!r}")
        if not (self.profile is None or isinstance(self.profile, (Profile, str, Path))):
            raise TypeError(f"Auto: profile must be None, a path or a solvers.Profile, got "
                            f"{type(self.profile).__name__}")
        if isinstance(self.profile, (str, Path)):
            object.__setattr__(self, "profile", Profile.load(self.profile))

    def choose(self, A: lo.LinearOperator, prob=None):
        """The algorithm these rules pick for A and the problem's hints and questions (nothing
        is set up, nothing measured).

        Parameters
        ----------
        A : lo.LinearOperator
        prob : LinearProblem, optional
            Its ``hermitian``/``posdef`` hints and ``asks``; None: no hints, solves only.

        Returns
        -------
        algorithm
            ``DiagonalSolve()``, ``Woodbury(Auto(...))``, ``Cholesky()``, ``LU()``,
            ``CG(rtol, precond=AMG())``, ``Pardiso(posdef=...)``, ``CG(rtol)`` or
            ``GMRES(rtol)``.

        Warns
        -----
        HintWarning
            A hint says Hermitian (or positive definite) but A is not: LU is chosen instead.
        """
        return self._decide(A, prob)[0]

    def _decide(self, A, prob):
        """(algorithm, the rule in words, whether A is Hermitian (checked; None: not checked))."""
        posdef = bool(prob is not None and prob.posdef)
        hermitian = bool(prob is not None and prob.hermitian)
        asks = prob.asks if prob is not None else frozenset()
        kind = structure(A)
        n = A.shape[0]
        if kind == "diagonal":
            return DiagonalSolve(), "a diagonal operator: elementwise division", None
        if kind == "lowrank":
            return (Woodbury(replace(self)),
                    "B + a low-rank term: Woodbury over Auto(B)", None)
        stored = kind in ("dense", "sparse") or n <= self.dense_max
        if not stored:  # a lazy operator's hint goes to CG unchecked; CG's true residual checks
            if posdef and hermitian:
                return CG(rtol=self.rtol), "a lazy operator with posdef hints: CG", None
            return GMRES(rtol=self.rtol), "a lazy operator: GMRES", None
        # stored entries: Hermitian is checked (O(nnz)), with or without a hint
        sym = is_hermitian(A)
        if (posdef or hermitian) and not sym:
            warn_caller(f"the problem says {hint_text(prob)} but A is not Hermitian; solving "
                        f"with LU instead", HintWarning)
            posdef = False
        what = "Hermitian" if sym else "not Hermitian"
        if kind == "sparse":
            be = backend_of_problem(A)
            if (posdef and n > self.iterative_min and be.capability("amg") is None
                    and not asks):
                return (CG(rtol=self.rtol, precond=AMG()),
                        f"by rule: sparse, positive definite hint, n = {n:,} > iterative_min", sym)
            native = self._native(A, sym, asks, be)
            if native is not None:
                return native + (sym,)
            if (n >= self.pardiso_min and be.name == "numpy"
                    and entry("pardiso").unavailable() is None and _pardiso_answers(asks, sym)):
                return (entry("pardiso").cls(posdef=sym),
                        f"by rule: sparse, {what}, n = {n:,} >= pardiso_min and PARDISO "
                        f"installed", sym)
            if sym and be.capability("sparse_cholesky") is None:
                return Cholesky(), f"by rule: sparse, {what}, CHOLMOD installed", sym
            return LU(), f"by rule: sparse, {what}", sym
        return (Cholesky() if sym else LU()), f"by rule: dense, {what}", sym

    def _native(self, A, sym: bool, asks, be):
        """With ``loop_solves``: (the engine whose factor adjoints.jax's XLA FFI call solves
        with, the rule in words) — CHOLMOD for a real Hermitian A where it is installed, else
        KLU where ``solvers._native`` is built — or None (neither answers, or not on the host)."""
        if not self.loop_solves or be.name != "numpy":
            return None
        if (sym and np.dtype(A.dtype).kind != "c" and be.capability("sparse_cholesky") is None
                and asks <= ANSWERS["CHOLMOD"]):
            return Cholesky(), ("by rule: sparse, Hermitian, solved in compiled loops: CHOLMOD "
                                "(its factor is solved natively)")
        if _klu_answers(asks):
            what = "Hermitian" if sym else "not Hermitian"
            return KLU(), f"by rule: sparse, {what}, solved in compiled loops: KLU (native solves)"
        return None

    def loop_factorize(self, pattern: lo.Pattern, dtype, posdef: bool = False) -> str | None:
        """Why a factorization of ``pattern`` made at every step of a compiled loop, solved
        only there, is KLU's native factorize (``adjoints.jax`` asks at lowering, where the
        values are not known yet), or None: the per-step Python callback of the rules' engine.
        KLU's symbolic analysis of the pattern is made once and kept (``sv.analyses``).

        Examples
        --------
        >>> import linops as lo, solvers as sv
        >>> P = lo.Pattern.from_coo([0, 1, 1], [0, 0, 1], (2, 2))
        >>> sv.Auto().loop_factorize(P, "float64") is not None or not sv.native_available()
        True
        """
        if not native_available() or not pattern.nnz or (
                posdef and pattern.shape[0] > self.iterative_min):
            return None
        cholmod = (np.dtype(dtype).kind != "c"
                   and backend_of(np.zeros(0)).capability("sparse_cholesky") is None)
        if not cholmod:
            return "by rule: sparse, factorized in compiled loops: KLU (native factorize)"
        flops = klu_symbolic(pattern)[0].info()["est_flops"]
        if flops <= self.loop_factorize_flops:
            return (f"by rule: sparse, factorized in compiled loops, KLU's estimated "
                    f"{flops:.3g} flops <= loop_factorize_flops: KLU (native factorize)")
        return None

    def plan(self, A, prob):
        """:meth:`choose`, or the measured/profiled winner, as the plan a setup runs: a
        symmetric/definite choice wrapped so that an indefinite A falls back to the general
        factorization (counted, and warned when a hint said positive definite), PARDISO's LU
        so that a regular matrix its static pivoting refuses goes to SuperLU; with
        ``tune=True`` and no measurement of the pattern yet, the measuring plan. Made at
        ``init`` and at every ``update``."""
        return self._plan(A, prob, "init" if self.tune else None)

    def replan(self, A, prob, previous: Factor):
        """The plan of an ``update``: the first update of a pattern (the same structure as the
        factor held) measures the candidates (``tune`` not False); later ones use the winner."""
        same = previous.structure is not None and previous.structure == structure_key(A)
        big = self.tune is True or A.shape[0] >= self.tune_min
        return self._plan(A, prob, "update" if same and big and self.tune is not False
                          else None)

    def for_query(self, query: str, A, prob, factor: Factor):
        """The plan of an engine that answers ``query`` for A (``prob`` already asks it), when
        the factor Auto chose cannot; None for an operator nothing here factorizes."""
        if structure(A) not in ("sparse", "dense"):
            return None
        return self._plan(A, prob, None)

    def measure(self, prob, *, repeat: int = 1):
        """Time every candidate engine on ``prob`` (a sparse host matrix), keeping nothing: what
        Auto measures at a first update, and what ``python -m linops tune`` records.

        Parameters
        ----------
        prob : LinearProblem
        repeat : int
            Trials per candidate; each timing is the fastest of them.

        Returns
        -------
        solvers._engines.tune.Measurement
            ``timings`` (setup, numeric factorization, solves, or why a candidate failed),
            ``ranking(use)``, ``winner(use)``, ``text(use)``.

        Raises
        ------
        ValueError
            ``prob.A`` is not a sparse matrix on the host (nothing to choose between).

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, solvers as sv
        >>> A = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(200, 200), format="csr")
        >>> m = sv.Auto().measure(sv.LinearProblem(A, np.ones(200)))
        >>> m.winner("init") in {t.engine for t in m.timings}
        True
        """
        A = prob.A
        be = backend_of_problem(A)
        if structure(A) != "sparse" or be.name != "numpy":
            raise ValueError(f"Auto.measure times sparse host matrices, got a {structure(A)} "
                             f"operator on {be.name}")
        sym = is_hermitian(A)
        return measure_candidates(_candidates(be, sym, prob.asks), A, prob, repeat)

    def _profile(self) -> Profile | None:
        if self.tune is False:
            return None
        return self.profile if self.profile is not None else default_profile()

    def _plan(self, A, prob, measure: str | None):
        alg, why, sym = self._decide(A, prob)
        asks = prob.asks if prob is not None else frozenset()
        # a loop's native engine is chosen by rule: the measurements time factorizations, and
        # what a loop pays is its solves' Python callbacks
        profile = None if self.loop_solves else self._profile()
        be = backend_of_problem(A)
        direct = isinstance(alg, (Cholesky, LU)) or alg.name == "pardiso"
        if profile is not None and direct and structure(A) == "sparse" and be.name == "numpy":
            cands = _candidates(be, sym, asks)
            names = {c[0] for c in cands}
            key = (A.pattern.fingerprint, precision(A.dtype).name, sym, tuple(sorted(asks)))
            m = profile.measured(key)
            if m is not None and m.winner(allowed=names) is not None:
                alg, why = _engine_alg(m.winner(allowed=names), sym), m.text()
            elif measure is not None and len(_timed(cands)) > 1:
                return Tuned(tuple(cands), measure, _general(alg, asks), key, profile)
            else:
                cls = {"class": "hermitian" if sym else "general",
                       "dtype": precision(A.dtype).name}
                found = profile.for_class(cls, A.shape[0], A.pattern.nnz)
                if found is not None and found[1].winner("init", names) is not None:
                    alg = _engine_alg(found[1].winner("init", names), sym)
                    why = found[1].text("init")
        # a loop's Cholesky that meets an indefinite A falls back to the other native engine
        native_lu = self.loop_solves and _klu_answers(asks)
        plan = _general(alg, asks, KLU() if native_lu else None)
        object.__setattr__(plan, "why", why)   # read by prepare for cache.info; never compared
        return plan

    def _setup(self, A, prob) -> Factor:
        """The plan's setup (``Auto`` used directly, e.g. as Woodbury's base)."""
        return self.plan(A, prob).setup(A, prob)


def _pardiso_answers(asks, sym: bool) -> bool:
    """Whether PARDISO (definite types when ``sym``) answers every declared query."""
    return asks <= (ANSWERS["PARDISO definite"] if sym else ANSWERS["PARDISO"])


def _candidates(be, sym: bool, asks) -> list:
    """The engines Auto times for a sparse host matrix: (engine, the algorithm a trial runs, the
    plan kept when it wins)."""
    cholmod = be.capability("sparse_cholesky") is None
    pardiso = entry("pardiso").unavailable() is None
    out = []
    if sym:
        if cholmod:
            out.append(("CHOLMOD", Cholesky(), _general(Cholesky(), asks)))
        if pardiso and _pardiso_answers(asks, True):
            P = entry("pardiso").cls
            out.append(("PARDISO", P(posdef=True), _general(P(posdef=True), asks)))
            if _pardiso_answers(asks, False):   # Hermitian indefinite: its LU
                out.append(("PARDISO", P(posdef=False), _general(P(posdef=False), asks)))
        # SuperLU in symmetric mode (MMD on Aᵀ + A, diagonal pivots): twice CHOLMOD's flops, yet
        # within 3 % of CHOLMOD by hand at n = 40 200 and ahead of PARDISO there under load
        out.append(("SuperLU", LU(), LU()))
    else:
        if pardiso and _pardiso_answers(asks, False):
            P = entry("pardiso").cls
            out.append(("PARDISO", P(posdef=False), _general(P(posdef=False), asks)))
        out.append(("SuperLU", LU(), LU()))
    return out


def _timed(cands) -> set:
    """The engines a measurement over ``cands`` may time."""
    return {c[0] for c in cands}


def _engine_alg(engine: str, sym: bool):
    """The algorithm of an engine's name in a measurement."""
    if engine == "CHOLMOD":
        return Cholesky()
    if engine == "PARDISO":
        return entry("pardiso").cls(posdef=bool(sym))
    return LU()


@dataclass(frozen=True)
class Fallback(Algorithm):
    """The algorithms of ``chain`` in turn: ``chain[i + 1]`` when ``chain[i]`` fails with an
    error of type ``on[i]``. What ``Auto`` plans around a factorization that may refuse a
    matrix it was chosen for:

    * ``NotPositiveDefiniteError`` after a symmetric/definite factorization (Cholesky,
      PARDISO's definite types): A is Hermitian but not positive definite; the next one is
      the LU counterpart. A wrong ``posdef=True`` hint is warned (:class:`HintWarning`).
    * ``SingularMatrixError`` after PARDISO's unsymmetric LU, whose static pivoting (pivots
      perturbed instead of exchanged) can meet a tiny pivot on a regular but indefinite
      matrix; the next one is SuperLU, whose partial pivoting then either solves or names the
      singularity itself.

    The same rule holds at ``init`` and at every ``update`` (:meth:`refactor`: the numeric
    refactorization of the factor the cache holds, and when that fails with its link's error,
    a full setup of the rest of the chain; the cache keeps its old state if that fails too).
    Each failed attempt is counted in ``cache.stats.fallbacks``. Not registered: ``Auto``'s
    building block."""

    chain: tuple
    on: tuple

    def __post_init__(self):
        if len(self.on) != len(self.chain) - 1:
            raise ValueError(f"Fallback: {len(self.chain)} algorithms need {len(self.chain) - 1}"
                             f" errors, got on={self.on!r}")

    @property
    def label(self) -> str:
        return self.chain[0].label

    def _setup(self, A, prob) -> Factor:
        return self._run(A, prob, 0, [])

    def refactor(self, previous, A, prob, keep_previous: bool):
        """The held factor's numeric refactorization (whichever link of the chain built it);
        when that fails with the link's error, a full setup of the links after it."""
        i = getattr(previous, "chain_index", 0)
        try:
            made = super().refactor(previous, A, prob, keep_previous)
        except Exception as e:
            if i >= len(self.on) or not isinstance(e, self.on[i]):
                raise
            return Prepared(self._run(A, prob, i + 1, [self._failed(i, prob)]), False)
        if made is not None:
            made.factor.chain_index = i
        return made

    def _run(self, A, prob, start: int, failed: list) -> Factor:
        for i in range(start, len(self.chain)):
            try:
                factor = self.chain[i].setup(A, prob)
            except Exception as e:
                if i >= len(self.on) or not isinstance(e, self.on[i]):
                    raise
                failed.append(self._failed(i, prob))
                continue
            factor.chain_index = i
            if failed:
                factor.fallbacks = getattr(factor, "fallbacks", 0) + len(failed)
                factor.kind = f"{factor.kind} (after {'; '.join(failed)})"
            return factor
        raise AssertionError("unreachable: the last link has no fallback")  # pragma: no cover

    def _failed(self, i: int, prob) -> str:
        """Says what failed (for the factor's kind), warning when a hint said positive
        definite."""
        label = self.chain[i].label
        if issubclass(self.on[i], NotPositiveDefiniteError):
            if prob is not None and prob.posdef:
                warn_caller(f"the problem says {hint_text(prob)} but A is not positive definite "
                            f"({label} found a pivot <= 0); solving with LU instead",
                            HintWarning)
            return f"{label}: not positive definite"
        return f"{label}: static pivoting met a tiny pivot"


def _klu_answers(asks) -> bool:
    """KLU (``solvers._native``) is built and answers everything the problem asks."""
    return entry("klu").unavailable() is None and asks <= ANSWERS["KLU"]


def _general(alg, asks=frozenset(), lu=None):
    """The plan around ``alg``: ``alg`` itself, or a :class:`Fallback` to what takes the
    matrices ``alg`` may refuse (``lu``, default SuperLU's, after the definite factorizations,
    SuperLU after PARDISO's unsymmetric LU; PARDISO's LU is left out of the chain when the
    problem asks what it cannot answer)."""
    if isinstance(alg, Cholesky):
        return Fallback((alg, LU() if lu is None else lu), (NotPositiveDefiniteError,))
    if alg.name == "pardiso":
        lu = type(alg)(posdef=False, pivot_rtol=alg.pivot_rtol)
        if alg.posdef and not _pardiso_answers(asks, False):
            return Fallback((alg, LU()), (NotPositiveDefiniteError,))
        if alg.posdef:
            return Fallback((alg, lu, LU()), (NotPositiveDefiniteError, SingularMatrixError))
        return Fallback((lu, LU()), (SingularMatrixError,))
    return alg
