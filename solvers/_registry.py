"""The algorithm registry: one entry per algorithm, written beside its class — the one list of
engines.

Each engine module registers its algorithms with :func:`register`; everything that needs to know
which algorithms exist, or what they take and answer, reads this table instead of keeping its
own list: the names ``sv.solve(prob, "lu")`` accepts (:func:`resolve`), the contract's refusal
of an operator structure, backend or dtype an entry does not declare
(``solvers._contract.check_declared``), ``sv.Auto`` (is PARDISO/CHOLMOD usable here?),
``adjoints.jax`` (which algorithms have a JAX path), ``python -m linops info``
(:func:`show_config`) and the conformance matrices, which are generated from the entries and
their :class:`Case` s (an engine added here is tested there without another edit).

>>> import solvers as sv
>>> from solvers._registry import entry
>>> e = entry("lu")
>>> e.cls is sv.LU, e.structures[:2], e.direct, e.jax
(True, ('dense', 'sparse'), True, True)
>>> [c.label for c in entry("cg").configurations()]
['CG', 'CG+Jacobi', 'CG+AMG']
>>> sv.solve(sv.LinearProblem([[2.0]], [4.0]), "LU").u.tolist()       # names: any case
[2.0]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ._contract import Algorithm

STRUCTURES = ("dense", "sparse", "diagonal", "lowrank", "matrixfree", "petsc")


@dataclass(frozen=True)
class Case:
    """A configuration of an algorithm that the conformance matrices run, and what it answers.

    The conformance tests (tests/solvers/test_conformance*.py) are generated from these: every
    case of every registered algorithm, on every operator structure it takes, is checked
    against a dense reference. ``None`` means "as the entry says".

    Attributes
    ----------
    label : str
        How tables and test ids name it (``"CG+AMG"``).
    options : dict
        Keywords of ``cls()``; ``precond`` names a preconditioner (``"jacobi"``, ``"ilu"``,
        ``"amg"``), built by :func:`build`.
    structures, posdef, direct, queries : as in :class:`Entry`, for this configuration.
    """

    label: str
    options: dict = field(default_factory=dict)
    structures: tuple | None = None
    posdef: bool | None = None
    direct: bool | None = None
    queries: tuple | None = None


@dataclass(frozen=True)
class Entry:
    """What the library knows about one algorithm.

    Attributes
    ----------
    name : str
        The slug (``"lu"``); names are matched ignoring case, '-', '_' and spaces.
    cls : type
        The algorithm class (``sv.LU``); ``cls()`` gives the defaults.
    summary : str
        One line: what it is.
    structures : tuple of str
        Operator structures it takes (of ``STRUCTURES``); ``sv.init`` refuses any other with
        one message (``BackendNotSupported`` naming the algorithms that take it).
    hermitian : bool
        It needs a Hermitian A (checked, never assumed from a hint).
    posdef : bool
        It needs a Hermitian positive definite A (CG, Cholesky): the conformance matrices give
        it one.
    direct : bool
        A factorization: ``update`` is a numeric refactorization of the same structure.
    queries : tuple of str
        What its factors answer besides solves: ``"logdet"`` (``cache.logdet()``),
        ``"selected_inverse"`` (A⁻¹'s entries without a solve); everything else raises
        ``BackendNotSupported`` (log det) or solves for columns (entries of A⁻¹).
    backends : tuple of str
        The array backends it takes (numpy, jax, cupy).
    capability : str, dict or None
        The backend-table capability it needs (``"cg"``), or per structure
        (``{"sparse": "sparse_lu", "*": "dense_lu"}``: a dense factorization of anything else):
        where the table declares it missing for a dtype, ``sv.init`` raises the table's reason.
    adjoint : str
        How adjoint (Aᴴ) solves are served, in words.
    jax : bool
        ``adjoints.jax.solve`` accepts it as ``alg``.
    requires : callable or None
        Returns None when its optional dependency is importable, else the reason with the
        install command.
    unsupported : callable or None
        ``unsupported(dtype)``: why this installation cannot take that dtype (a real PETSc
        build and a complex A), else None; ``sv.init`` raises ``BackendNotSupported`` then.
    cases : tuple of Case
        The configurations the conformance matrices run (default: ``cls()`` alone).
    """

    name: str
    cls: type
    summary: str
    structures: tuple
    hermitian: bool = False
    posdef: bool = False
    direct: bool = False
    queries: tuple = ()
    backends: tuple = ("numpy", "jax", "cupy")
    capability: str | dict | None = None
    adjoint: str = "the same factors"
    jax: bool = False
    requires: Callable[[], str | None] | None = None
    unsupported: Callable[[Any], str | None] | None = None
    cases: tuple = ()

    def unavailable(self) -> str | None:
        """None when it can run here; else why not (the missing optional dependency)."""
        return self.requires() if self.requires is not None else None

    def capability_for(self, structure: str) -> str | None:
        """The capability it needs for an operator of this structure (None: none)."""
        if isinstance(self.capability, dict):
            return self.capability.get(structure, self.capability.get("*"))
        return self.capability

    def configurations(self) -> tuple[Case, ...]:
        """Its cases with every field decided (the entry's facts where a case says None)."""
        cases = self.cases or (Case(self.cls.__name__),)
        return tuple(Case(c.label, dict(c.options),
                          self.structures if c.structures is None else c.structures,
                          self.posdef if c.posdef is None else c.posdef,
                          self.direct if c.direct is None else c.direct,
                          self.queries if c.queries is None else c.queries) for c in cases)


#: preconditioners by name (``Case.options["precond"]``): registered beside their classes
PRECONDITIONERS: dict[str, type] = {}


def register_preconditioner(name: str):
    """Class decorator: a preconditioner spec that cases may name (``precond="ilu"``)."""
    def deco(cls):
        PRECONDITIONERS[name] = cls
        return cls

    return deco


def build(entry: Entry, case: Case) -> Algorithm:
    """The algorithm object of one case: ``entry.cls(**case.options)`` with ``precond`` named."""
    options = dict(case.options)
    if isinstance(options.get("precond"), str):
        options["precond"] = PRECONDITIONERS[options["precond"]]()
    return entry.cls(**options)


_REGISTRY: dict[str, Entry] = {}


def _slug(name: str) -> str:
    return "".join(ch for ch in name.strip().lower() if ch not in "-_ ")


def register(name: str, summary: str, structures, **facts):
    """Class decorator: record the algorithm under ``name`` and set ``cls.name``; ``facts`` are
    the other fields of :class:`Entry`."""
    bad = [s for s in structures if s not in STRUCTURES]
    if bad:
        raise ValueError(f"unknown structures {bad}; known: {STRUCTURES}")
    for c in facts.get("cases", ()):
        bad = [s for s in (c.structures or ()) if s not in structures]
        if bad:
            raise ValueError(f"case {c.label!r} takes {bad}, which {name!r} does not declare")

    def deco(cls):
        _REGISTRY[_slug(name)] = Entry(_slug(name), cls, summary, tuple(structures), **facts)
        cls.name = _slug(name)
        return cls

    return deco


def entries() -> tuple[Entry, ...]:
    """Every registered algorithm, in registration order."""
    return tuple(_REGISTRY.values())


def entry(name: str) -> Entry:
    """The entry for ``name`` (ValueError listing the names when there is none)."""
    key = _slug(name)
    if key not in _REGISTRY:
        raise ValueError(f"unknown algorithm {name!r}; names: {', '.join(sorted(_REGISTRY))} "
                         f"(or pass an object such as sv.CG(rtol=1e-10, precond=sv.AMG()))")
    return _REGISTRY[key]


def entry_of(alg) -> Entry | None:
    """The entry of an algorithm object's class, or None."""
    return next((e for e in _REGISTRY.values() if type(alg) is e.cls), None)


def resolve(alg, *, jax: bool = False):
    """An algorithm object from ``alg``: None (``Auto()``), a registered name, or an object.

    ``jax=True`` restricts names to algorithms with a JAX path (``adjoints.jax``)."""
    if alg is None:
        return entry("auto").cls()
    if isinstance(alg, str):
        e = entry(alg)
        if jax and not e.jax:
            names = sorted(x.name for x in _REGISTRY.values() if x.jax)
            raise ValueError(f"algorithm {alg!r} has no JAX path; names there: "
                             f"{', '.join(names)}")
        return e.cls()
    if not isinstance(alg, Algorithm):
        raise TypeError(f"alg must be a solvers algorithm (sv.LU(), sv.CG(...), ...) or its name, "
                        f"got {type(alg).__name__}: {alg!r}")
    return alg


def show_config() -> str:
    """The algorithm table, generated from the registry (``sv.show_config()``).

    One row per algorithm: its name, the structures it takes, whether it needs a Hermitian A,
    how it serves adjoint solves, whether ``adjoints.jax`` has it, and whether it can run
    here (the missing optional dependency otherwise).

    Returns
    -------
    str

    Examples
    --------
    >>> import solvers as sv
    >>> print(sv.show_config().splitlines()[2])          # doctest: +NORMALIZE_WHITESPACE
      cg  dense, sparse, diagonal, lowrank, matrixfree  Hermitian  CG on A, checked against Aᴴ  yes  available
    """
    rows = [("name", "takes", "A", "adjoint solves", "jax", "here")]
    for e in entries():
        why = e.unavailable()
        rows.append((e.name, ", ".join(e.structures), "Hermitian" if e.hermitian else "any",
                     e.adjoint, "yes" if e.jax else "no", "available" if why is None else why))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["solvers algorithms (sv.solve(prob, name) or the class):"]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5])
    return "\n".join(lines)
