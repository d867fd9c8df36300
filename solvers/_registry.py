"""The algorithm registry: one entry per algorithm, written beside its class.

Each engine module registers its algorithms with :func:`register`; everything that needs to know
which algorithms exist reads this table instead of keeping its own list: the names
``sv.solve(prob, "lu")`` accepts (:func:`resolve`), ``sv.Auto`` (is PARDISO/CHOLMOD usable
here?), ``adjoints.jax`` (which algorithms have a JAX path), ``python -m linops info``
(:func:`show_config`) and the conformance tests.

>>> import solvers as sv
>>> from solvers._registry import entry
>>> e = entry("lu")
>>> e.cls is sv.LU, e.structures, e.jax
(True, ('dense', 'sparse'), True)
>>> sv.solve(sv.LinearProblem([[2.0]], [4.0]), "LU").u.tolist()       # names: any case
[2.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ._contract import Algorithm

STRUCTURES = ("dense", "sparse", "diagonal", "lowrank", "matrixfree", "petsc")


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
        Operator structures it takes (of ``STRUCTURES``).
    hermitian : bool
        It needs a Hermitian A (checked, never assumed from a hint).
    capability : str or None
        The backend-table capability it needs (``"sparse_lu"``, ``"cg"``, ...), if one.
    adjoint : str
        How adjoint (Aᴴ) solves are served, in words.
    jax : bool
        ``adjoints.jax.solve`` accepts it as ``alg``.
    requires : callable or None
        Returns None when its optional dependency is importable, else the reason with the
        install command.
    """

    name: str
    cls: type
    summary: str
    structures: tuple
    hermitian: bool = False
    capability: str | None = None
    adjoint: str = "the same factors"
    jax: bool = False
    requires: Callable[[], str | None] | None = None

    def unavailable(self) -> str | None:
        """None when it can run here; else why not (the missing optional dependency)."""
        return self.requires() if self.requires is not None else None


_REGISTRY: dict[str, Entry] = {}


def _slug(name: str) -> str:
    return "".join(ch for ch in name.strip().lower() if ch not in "-_ ")


def register(name: str, summary: str, structures, **facts):
    """Class decorator: record the algorithm under ``name`` and set ``cls.name``."""
    bad = [s for s in structures if s not in STRUCTURES]
    if bad:
        raise ValueError(f"unknown structures {bad}; known: {STRUCTURES}")

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
