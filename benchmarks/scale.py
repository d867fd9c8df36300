"""The scale benchmark (issue 12): ``python benchmarks/scale.py`` is
``python -m linops bench scale`` (see ``linops/_app/scale.py`` for what it measures)."""

import sys

from linops._app.scale import main

if __name__ == "__main__":
    main(sys.argv[1:])
