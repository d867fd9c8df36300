"""The distributed PETSc benchmark (issue 11): ``mpirun -n 2 python benchmarks/petsc_bench.py`` is
``mpirun -n 2 python -m linops bench petsc`` (see ``linops/_app/petsc.py`` for what it measures)."""

import sys

from linops._app.petsc import main

if __name__ == "__main__":
    main(sys.argv[1:])
