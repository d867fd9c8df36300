"""``python -m linops info | bench``: the command-line entry point.

A thin layer: the commands live in ``linops._app`` (the one part of linops allowed to import
solvers and adjoints).
"""

from __future__ import annotations

import sys

USAGE = """usage: python -m linops {info,bench} [options]
  info   versions, backends, and which factorizations serve adjoint solves
  bench  value + gradient benchmark (python -m linops bench --help)"""


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "info":
        from ._app.info import info

        print(info())
        return 0
    if command == "bench":
        from ._app.bench import bench

        bench(rest)
        return 0
    print(f"unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
