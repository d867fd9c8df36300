"""Auto's measurements: the candidate engines timed on the real pattern, and where they are kept.

``sv.Auto`` picks by rules (:meth:`solvers.Auto.choose`). Where a problem is solved more than
once it measures instead, as FFTW's plans and cuDNN's benchmark mode do:

* at a cache's first ``update`` on the same pattern (``Auto(tune=None)``, the default), or at
  ``init`` with ``Auto(tune=True)``, every candidate engine that can answer the problem's
  questions (:func:`solvers.LinearProblem`'s ``asks``) factorizes the matrix once and solves
  once forward and once adjoint, timed; the fastest one's factor is kept, the others are
  dropped at once (``cache.stats.tuning_factorizations`` counts them: never more than one per
  candidate per pattern). The result is remembered for the pattern (:class:`Profile`), so
  every later cache on it starts with the winner;
* ``python -m linops tune`` measures the same candidates on representative problems (2-D
  finite-element patterns, symmetric positive definite and nonsymmetric, n from 10⁴ to 1.6·10⁵)
  and writes a per-machine profile to the user's cache directory; ``Auto`` reads it once per
  process and, for a problem of the same class and a similar size, starts with that machine's
  winner instead of the fixed order (a plain ``sv.solve`` keeps its cost: one factorization).

Candidates answer alike: every one is a direct factorization with its own pivoting, so a tuned
choice changes the answer by the engines' rounding only (the conformance matrix checks it).
Krylov + AMG is never a timed candidate (its answer differs by its tolerance, not by rounding):
Auto's rule keeps choosing it for very large positive definite problems.

What is timed, per candidate: the full setup (``setup_s``; ordering/analysis + numeric
factorization + the engine's checks), the numeric factorization alone where the engine
separates it (``numeric_s``: CHOLMOD's ``cholesky`` on its analysis, PARDISO's phase 22;
SuperLU's whole ``splu``), and a forward plus an adjoint solve with the problem's b
(``solve_s``). A cache that will be updated is ranked by numeric + solves (what each later
step costs), a one-shot ``init`` by setup + solves.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._checks import backend_of_problem
from .._contract import Algorithm, Factor
from .._errors import BackendNotSupported, NotPositiveDefiniteError, SingularMatrixError

PROFILE_NAME = "auto-profile.json"
PROFILE_VERSION = 1
#: a machine profile entry serves problems of its class within these factors of its n and nnz/n
N_RANGE, DENSITY_RANGE = 2.0, 1.5


# ----- what one measurement is --------------------------------------------------------------------
@dataclass(frozen=True)
class Timing:
    """One candidate engine's trial on a matrix: seconds, or why it could not factorize.

    Attributes
    ----------
    engine : str
        ``"CHOLMOD"``, ``"PARDISO"`` or ``"SuperLU"``.
    setup_s : float
        The full setup: ordering/analysis, numeric factorization, the engine's checks.
    numeric_s : float
        The numeric factorization alone (CHOLMOD's ``cholesky`` on its analysis, PARDISO's
        phase 22; SuperLU: its whole ``splu``).
    solve_s : float
        One forward and one adjoint solve with the problem's right-hand side.
    failed : str or None
        Why the engine could not take the matrix ("not positive definite", ...).
    """

    engine: str
    setup_s: float = math.nan
    numeric_s: float = math.nan
    solve_s: float = math.nan
    failed: str | None = None

    def cost(self, use: str) -> float:
        """Seconds per use: ``"update"`` numeric + solves (a step of a loop), ``"init"`` setup +
        solves (a one-shot solve); inf for a failed trial."""
        if self.failed is not None:
            return math.inf
        return (self.numeric_s if use == "update" else self.setup_s) + self.solve_s

    def as_dict(self) -> dict:
        return {"engine": self.engine, "setup_s": self.setup_s, "numeric_s": self.numeric_s,
                "solve_s": self.solve_s, "failed": self.failed}


@dataclass(frozen=True)
class Measurement:
    """The trials of the candidate engines on one matrix, and what they were measured for.

    Attributes
    ----------
    timings : tuple of Timing
    use : str
        ``"update"`` (ranked by numeric + solves) or ``"init"`` (setup + solves).
    where : str
        ``"on this pattern"``, or the problem a machine profile measured.
    """

    timings: tuple
    use: str
    where: str = "on this pattern"

    def ranking(self, use: str | None = None) -> list:
        """The engines that factorized, fastest first for ``use`` (default: its own)."""
        use = use or self.use
        ok = [t for t in self.timings if t.failed is None]
        return sorted(ok, key=lambda t: t.cost(use))

    def winner(self, use: str | None = None, allowed=None) -> str | None:
        """The fastest engine (among ``allowed`` names, if given), or None."""
        for t in self.ranking(use):
            if allowed is None or t.engine in allowed:
                return t.engine
        return None

    def text(self, use: str | None = None) -> str:
        """'chose CHOLMOD: 0.41 s vs PARDISO 0.74 s, SuperLU 1.10 s on this pattern (...)'."""
        use = use or self.use
        ranked = self.ranking(use)
        if not ranked:
            return f"no candidate factorized {self.where}"
        best, rest = ranked[0], ranked[1:]
        others = ", ".join(f"{t.engine} {t.cost(use):.3g} s" for t in rest)
        failed = "; ".join(f"{t.engine}: {t.failed}" for t in self.timings if t.failed)
        what = ("numeric factorization" if use == "update" else "factorization") + \
            " + a forward and an adjoint solve"
        out = f"chose {best.engine}: {best.cost(use):.3g} s"
        out += f" vs {others}" if others else " (the only candidate)"
        out += f" {self.where} ({what}"
        return out + (f"; {failed})" if failed else ")")

    def as_dict(self) -> dict:
        return {"use": self.use, "where": self.where,
                "timings": [t.as_dict() for t in self.timings]}

    @classmethod
    def from_dict(cls, d: dict, where: str | None = None) -> "Measurement":
        return cls(tuple(Timing(**t) for t in d["timings"]), d.get("use", "init"),
                   where or d.get("where", "on this pattern"))


# ----- where measurements are kept -------------------------------------------------------------
def machine_id() -> dict:
    """What makes a profile this machine's: host name, processor, core count, Python."""
    return {"host": platform.node(), "machine": platform.machine(),
            "processor": platform.processor(), "cores": os.cpu_count(),
            "python": platform.python_version()}


def user_profile_path() -> Path:
    """Where ``python -m linops tune`` writes the machine profile and ``Auto`` reads it: the
    user's cache directory (``~/.cache/linops`` on Linux, ``~/Library/Caches/linops`` on macOS,
    ``%LOCALAPPDATA%/linops/Cache`` on Windows), file ``auto-profile.json``."""
    home = Path.home()
    system = platform.system()
    if system == "Darwin":
        base = home / "Library" / "Caches" / "linops"
    elif system == "Windows":
        base = home / "AppData" / "Local" / "linops" / "Cache"
    else:
        base = home / ".cache" / "linops"
    return base / PROFILE_NAME


class Profile:
    """Auto's measurements: per pattern (made in this process, at a cache's first update or with
    ``Auto(tune=True)``) and per problem class (a machine profile, written by
    ``python -m linops tune``).

    A pattern's measurement decides every later ``Auto`` setup on that pattern; a class entry
    (symmetric/definite or general, real or complex, the precision, the queries declared, n and
    nnz/n within a factor of 2 and 1.5 of the measured problem's) decides an ``Auto`` setup that
    has no measurement of its own pattern. ``sv.Auto(profile=...)`` takes one explicitly; by
    default Auto uses :func:`default_profile`.

    Parameters
    ----------
    entries : list of dict, optional
        Class entries (as ``python -m linops tune`` writes them).
    meta : dict, optional
        The profile's header: machine, date, linops version, threads.
    path : Path, optional
        The file it was read from (for messages).

    Examples
    --------
    >>> import solvers as sv
    >>> p = sv.Profile()
    >>> p.measured("some pattern") is None, len(p.entries)
    (True, 0)
    """

    def __init__(self, entries=(), meta=None, path=None):
        self.entries = [dict(e) for e in entries]
        self.meta = dict(meta or {})
        self.path = Path(path) if path is not None else None
        self._patterns: dict = {}

    def __repr__(self) -> str:
        where = f", from {self.path}" if self.path else ""
        return (f"Profile({len(self.entries)} class entries, {len(self._patterns)} patterns "
                f"measured{where})")

    # -- per pattern --
    def measured(self, key) -> Measurement | None:
        """The measurement made on the pattern ``key`` in this process, or None."""
        return self._patterns.get(key)

    def record(self, key, m: Measurement) -> None:
        """Keep ``m`` for the pattern ``key`` (later setups on it use its winner)."""
        self._patterns[key] = m

    # -- per class (the machine profile) --
    def add(self, problem_class: dict, m: Measurement, *, problem: str, n: int, nnz: int) -> None:
        """A class entry: ``m`` measured on ``problem`` (n unknowns, nnz stored entries)."""
        self.entries.append({**problem_class, "problem": problem, "n": int(n), "nnz": int(nnz),
                             "measurement": m.as_dict()})

    def for_class(self, problem_class: dict, n: int, nnz: int):
        """(entry, Measurement) of the class entry nearest to (n, nnz/n) within range, or None."""
        best, dist = None, math.inf
        for e in self.entries:
            if any(e.get(k) != v for k, v in problem_class.items()):
                continue
            if not (e["n"] / N_RANGE <= n <= e["n"] * N_RANGE):
                continue
            dens, edens = nnz / max(n, 1), e["nnz"] / max(e["n"], 1)
            if not (edens / DENSITY_RANGE <= dens <= edens * DENSITY_RANGE):
                continue
            d = abs(math.log(n / e["n"]))
            if d < dist:
                best, dist = e, d
        if best is None:
            return None
        where = f"on {best['problem']} (n = {best['n']:,}) in this machine's profile"
        return best, Measurement.from_dict(best["measurement"], where)

    # -- files --
    def save(self, path=None) -> Path:
        """Write the class entries as JSON (to ``path``, default this profile's own or
        :func:`user_profile_path`); returns the path."""
        path = Path(path or self.path or user_profile_path())
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": PROFILE_VERSION, **self.meta, "entries": self.entries}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path=None, *, this_machine: bool = True) -> "Profile":
        """The profile in ``path`` (default :func:`user_profile_path`); an empty one when the
        file does not exist, was written by another machine (``this_machine``) or another
        profile version. A file that cannot be read warns and gives an empty profile."""
        path = Path(path or user_profile_path())
        if not path.exists():
            return cls(path=path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            warnings.warn(f"Auto: the profile {path} cannot be read ({e}); rerun "
                          f"`python -m linops tune`", RuntimeWarning, stacklevel=2)
            return cls(path=path)
        if data.get("version") != PROFILE_VERSION:
            return cls(path=path)
        if this_machine and data.get("machine_id") != machine_id():
            return cls(path=path)
        meta = {k: v for k, v in data.items() if k not in ("entries", "version")}
        return cls(data.get("entries", ()), meta, path)

    @staticmethod
    def header(**extra) -> dict:
        """The meta block a new machine profile carries: the machine, the date, and ``extra``."""
        return {"machine_id": machine_id(),
                "date": datetime.datetime.now().isoformat(timespec="seconds"), **extra}


_DEFAULT: list = []


def default_profile() -> Profile:
    """The profile ``sv.Auto()`` uses: this machine's (:func:`user_profile_path`), read once
    per process, and the measurements of patterns made since."""
    if not _DEFAULT:
        _DEFAULT.append(Profile.load())
    return _DEFAULT[0]


def use_profile(profile: Profile | None) -> Profile | None:
    """Make ``profile`` the default (None: read the user's file again at the next use); returns
    the previous one. For tests and for ``python -m linops tune``."""
    old = _DEFAULT[0] if _DEFAULT else None
    _DEFAULT.clear()
    if profile is not None:
        _DEFAULT.append(profile)
    return old


# ----- measuring --------------------------------------------------------------------------------
_WARM: set = set()   # (engine, dtype) whose one-time costs this process has paid


def _warm(engine: str, alg: Algorithm, dtype) -> None:
    """Pay an engine's one-time costs before its first timed trial in this process (loading
    MKL and starting its threads, importing scikit-sparse, compiling nothing later trials pay):
    one setup on a 400-unknown 2-D Laplacian of ``dtype``, not timed."""
    k = (engine, np.dtype(dtype).str)
    if k in _WARM:
        return
    _WARM.add(k)
    import scipy.sparse as sp  # only a first trial needs it
    import linops as lo  # the operator of the warm-up matrix

    T = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(20, 20))
    L = sp.csr_matrix(sp.kron(T, sp.eye(20)) + sp.kron(sp.eye(20), T)).astype(dtype)
    try:
        alg.setup(lo.Sparse.from_scipy(L), None).close()
    except Exception:   # a warm-up only: the timed trial meets and reports any real error
        pass


def trial(engine: str, alg: Algorithm, A, prob):
    """(Timing, factor or None): ``alg``'s full setup on A, timed, then one forward and one
    adjoint solve with the problem's b (ones when it has none). A factorization that refuses A
    (not positive definite, singular, an unsupported dtype) gives a failed Timing. The engine's
    one-time costs in this process (loading a library) are paid first, untimed."""
    _warm(engine, alg, A.dtype)
    t0 = time.perf_counter()
    try:
        factor = alg.setup(A, prob)
    except (NotPositiveDefiniteError, SingularMatrixError, BackendNotSupported) as e:
        why = ("not positive definite" if isinstance(e, NotPositiveDefiniteError)
               else "singular" if isinstance(e, SingularMatrixError) else "not supported")
        return Timing(engine, failed=why), None
    setup = time.perf_counter() - t0
    b = prob.b if prob is not None and prob.b is not None else None
    B = _rhs(A, b)
    t0 = time.perf_counter()
    factor.solve(B, "N")
    factor.solve(B, "H")
    solve = time.perf_counter() - t0
    numeric = getattr(factor, "numeric_seconds", None)
    return Timing(engine, setup, setup if numeric is None else numeric, solve), factor


def _rhs(A, b):
    be = backend_of_problem(A)
    if b is None:
        return be.xp.ones((A.shape[0], 1), dtype=np.result_type(A.dtype, np.float32))
    return b[:, None] if b.ndim == 1 else b


def measure_candidates(candidates, A, prob, repeat: int = 1) -> Measurement:
    """The trials of ``candidates`` (as :class:`Tuned` takes them) on A, each the fastest of
    ``repeat``, every factor closed: a Measurement for ``use="init"``."""
    timings = []
    for engine, alg, _plan in candidates:
        if engine in {t.engine for t in timings if t.failed is None}:
            continue
        best = None
        for _ in range(max(1, int(repeat))):
            timing, factor = trial(engine, alg, A, prob)
            if factor is not None:
                factor.close()
            if best is None or timing.cost("init") < best.cost("init"):
                best = timing
            if timing.failed is not None:
                break
        timings.append(best)
    return Measurement(tuple(timings), "init")


@dataclass(frozen=True)
class Tuned(Algorithm):
    """Auto's measuring plan: every candidate's trial (:func:`trial`) on A, the fastest one's
    factor kept and the others closed at once. The factor it returns carries ``plan`` = the
    winner's plan (so the next update of the pattern reuses it), ``tuning_factorizations``
    (the trials beyond the kept one) and ``why`` (the measurement, in words); the measurement is
    recorded in ``profile`` for the pattern ``key``. When no candidate factorizes A, ``rules``
    (the plan Auto's rules make) runs as it would have, with its own fallbacks and errors. Not
    registered: ``Auto``'s building block.

    Attributes
    ----------
    candidates : tuple of (str, Algorithm, Algorithm)
        (engine, the algorithm timed, the plan kept when it wins); a second entry of one engine (PARDISO's unsymmetric type
        after its definite one) is tried only when the first failed.
    use : str
        What the ranking is for: ``"update"`` or ``"init"``.
    rules : Algorithm
        The rules' plan, for a matrix no candidate takes.
    key : tuple
        The pattern's key in ``profile``.
    profile : Profile
    """

    candidates: tuple
    use: str
    rules: Algorithm
    key: tuple = ()
    profile: Profile | None = field(default=None, compare=False, repr=False)

    @property
    def label(self) -> str:
        return "Auto (measuring " + ", ".join(c[0] for c in self.candidates) + ")"

    def _setup(self, A, prob) -> Factor:
        timings, best, best_cost, best_plan, tried = [], None, math.inf, None, 0
        for engine, alg, plan in self.candidates:
            if engine in {t.engine for t in timings if t.failed is None}:
                continue
            timing, factor = trial(engine, alg, A, prob)
            tried += 1
            timings.append(timing)
            if factor is None:
                continue
            cost = timing.cost(self.use)
            if cost < best_cost:
                if best is not None:
                    best.close()
                best, best_cost, best_plan = factor, cost, plan
            else:
                factor.close()
        m = Measurement(tuple(timings), self.use)
        if best is None:   # nothing took A: the rules' plan decides (and names the error)
            factor = self.rules.setup(A, prob)
            factor.chosen = self.rules
            factor.tuning_factorizations = tried
            factor.why = f"{m.text()}; Auto's rules instead"
            return factor
        if self.profile is not None:
            self.profile.record(self.key, m)
        best.chosen = best_plan
        best.tuning_factorizations = tried - 1
        extra = tried - 1
        best.why = f"{m.text()}; {extra} extra factorization{'' if extra == 1 else 's'}"
        return best
