"""The JAX benchmark (issue 10): ``python benchmarks/jax_bench.py`` is
``python -m linops bench jax`` (see ``linops/_app/jax.py`` for what it measures)."""

import sys

from linops._app.jax import main

if __name__ == "__main__":
    main(sys.argv[1:])
