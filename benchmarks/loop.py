"""The optimization-loop benchmark (issue 12): ``python benchmarks/loop.py`` is
``python -m linops bench loop`` (see ``linops/_app/loop.py`` for what it measures)."""

import sys

from linops._app.loop import main

if __name__ == "__main__":
    main(sys.argv[1:])
