"""``python -m linops info``: what this installation can do, generated from the code's own tables.

Three parts, none written here: ``lo.show_config()`` (versions, and the backend table: what
each array backend has and, for what it lacks, the alternative), ``sv.show_config()`` (the
algorithm registry: every algorithm, what it takes, how it serves adjoint solves, whether
``adjoints.jax`` has it, whether it runs here) and the PETSc transposed-solve table that
``solvers._engines.petsc`` keeps (which KSP + PC combinations transpose correctly, as measured).

A new backend capability, a newly registered solver engine or a new row of the PETSc table
appears here without an edit to this file.
"""

from __future__ import annotations

import linops as lo
import solvers as sv
from solvers.internals import transpose_support


def petsc_lines() -> list[str]:
    """The PETSc part of the report: the measured transposed-solve table, indented.

    Returns
    -------
    list of str
        ``solvers._engines.petsc.transpose_support()``'s lines (one when petsc4py is not installed,
        saying how to install it); if the table cannot be produced — petsc4py installed but
        broken — one line with the error instead of a traceback.

    Notes
    -----
    Cost: imports petsc4py when it is installed (PETSc initializes itself, about 0.1 s).
    """
    try:
        lines = transpose_support()
    except Exception as e:  # petsc4py imports but PETSc does not start: say so, keep the rest
        return [f"PETSc: the transposed-solve table is unavailable ({type(e).__name__}: {e})"]
    return ["PETSc transposed solves (adjoints), from solvers._engines.petsc's measured table:",
            *(f"  {line}" for line in lines)]


def info() -> str:
    """The report printed by ``python -m linops info``.

    Returns
    -------
    str
        ``lo.show_config()``, ``sv.show_config()`` and :func:`petsc_lines`, in that order.

    Notes
    -----
    Cost: package metadata, the registry's availability checks (each optional engine tries its
    import once: CHOLMOD, PARDISO's MKL, PETSc) — under a second.

    Examples
    --------
    >>> from linops._app.info import info
    >>> report = info()
    >>> report.startswith("linops ") and "solvers algorithms" in report
    True
    >>> import solvers.internals
    >>> rows = [l.split()[0] for l in report.splitlines() if l.startswith("  ")]
    >>> all(e.name in rows for e in solvers.internals.entries())   # every registered algorithm
    True
    """
    return "\n".join([lo.show_config(), sv.show_config(), *petsc_lines()])
