"""``python -m linops info | bench | tune``: the command-line entry point.

A thin layer: the commands live in ``linops._app`` (the one part of linops allowed to import
solvers and adjoints). ``info`` prints what this installation can do, generated from the
backend table and the algorithm registry; ``bench`` runs the benchmarks (``bench --help``);
``tune`` measures ``sv.Auto``'s candidate engines on this machine and writes the profile Auto
reads (``tune --help``).
"""

from __future__ import annotations

import sys

from ._app.bench import bench
from ._app.info import info

USAGE = """usage: python -m linops {info,bench,tune} [options]
  info   versions, the backend table and the solver algorithms (lo.show_config() and
         sv.show_config()), and which PETSc solvers transpose correctly
  bench  value + gradient benchmark and its sections (python -m linops bench --help)
  tune   measure sv.Auto's engines on this machine, write its profile (--help)"""


def main(argv=None) -> int:
    """Run one command; returns the exit status (0; 2 for an unknown command).

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``python -m linops`` (default: the process's own).

    Examples
    --------
    >>> main(["--help"])                          # doctest: +ELLIPSIS
    usage: python -m linops {info,bench,tune} [options]
    ...
    0
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "info":
        print(info())
        return 0
    if command == "bench":
        bench(rest)
        return 0
    if command == "tune":
        from ._app.tune import main as tune  # its imports (solvers' engines) only when asked

        return tune(rest)
    print(f"unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
