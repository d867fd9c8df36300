"""The engines the oracle runs: every algorithm of the registry that can run here
(``solvers.internals.entries()``), as one or more configured instances, and which operator
forms each takes (``Entry.structures``). A new engine registered in ``solvers`` joins the
oracle by its entry; only an engine that needs options to be meaningful gets them here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

import solvers as sv
from solvers.internals import entries

#: forms of a dense corpus matrix and the registry structure each has
FORMS = {"dense": "dense", "sparse": "sparse", "matrixfree": "matrixfree"}
ITERATIVE = {"cg", "minres", "gmres", "bicgstab", "amg", "lsmr"}


@dataclass(frozen=True)
class Engine:
    """One configured algorithm: ``label`` (for ids), its registry ``name``, ``make(dtype)``
    the algorithm object for a matrix of that dtype, ``rtol`` the tolerance it was given (None
    for direct methods), the registry ``structures``."""

    label: str
    name: str
    make: Callable
    structures: tuple
    iterative: bool
    hermitian_only: bool

    def rtol(self, dtype) -> float | None:
        if not self.iterative:
            return None
        return 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def _tol(dtype) -> float:
    return 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def _instances(e):
    """(label, make) pairs for a registry entry."""
    n = e.name
    if n in ("cg", "minres", "gmres", "bicgstab", "lsmr"):
        return [(n, lambda dt, c=e.cls: c(rtol=_tol(dt)))]
    if n == "amg":
        return [(n, lambda dt, c=e.cls: c(rtol=_tol(dt)))]
    if n == "petsc":
        return [("petsc-mumps", lambda dt, c=e.cls: c()),
                ("petsc-gmres-jacobi", lambda dt, c=e.cls: c(ksp_type="gmres", pc_type="jacobi",
                                                            rtol=_tol(dt)))]
    return [(n, lambda dt, c=e.cls: c())]


def engines(structure: str | None = None) -> list[Engine]:
    """Every runnable engine (optionally: that takes ``structure``), from the registry."""
    out = []
    for e in entries():
        if e.unavailable() is not None:
            continue
        if structure is not None and structure not in e.structures:
            continue
        for label, make in _instances(e):
            out.append(Engine(label, e.name, make, e.structures,
                              e.name in ITERATIVE or label == "petsc-gmres-jacobi", e.hermitian))
    return out


def unavailable() -> dict:
    """Registry entries that cannot run here, with the reason (reported, not silently lost)."""
    return {e.name: e.unavailable() for e in entries() if e.unavailable() is not None}
