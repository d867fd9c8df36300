"""linops.petsc: distributed operators through PETSc (petsc4py + MPI).

``from linops.petsc import PETScMatrix, PETScElementFamily, element_slice``. Importing this
module imports petsc4py (and so initialises PETSc and MPI). Layout rule: shapes are global,
arrays are each rank's owned slice (see ``linops._petsc`` and ``linops._petsc_family``).
"""

from ._petsc import MatrixModifiedError as MatrixModifiedError
from ._petsc import PETScMatrix as PETScMatrix
from ._petsc import structure_key_of as structure_key_of
from ._petsc_family import PETScElementFamily as PETScElementFamily
from ._petsc_family import element_slice as element_slice

__all__ = ["MatrixModifiedError", "PETScElementFamily", "PETScMatrix", "element_slice",
           "structure_key_of"]
