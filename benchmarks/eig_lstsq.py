"""Generalized eigenproblems and sparse least squares with gradients:
``python benchmarks/eig_lstsq.py eig [...]`` is ``python -m linops bench eig [...]`` and
``python benchmarks/eig_lstsq.py lstsq [...]`` is ``python -m linops bench lstsq [...]`` (see
``linops/_app/eig.py`` and ``linops/_app/lstsq.py`` for what they measure)."""

import sys

from linops._app import eig, lstsq

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] not in ("eig", "lstsq"):
        sys.exit("usage: python benchmarks/eig_lstsq.py {eig|lstsq} [options]")
    (eig if args[0] == "eig" else lstsq).main(args[1:])
