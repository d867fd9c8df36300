"""linops.petsc: distributed operators through PETSc (petsc4py + MPI).

``from linops.petsc import PETScMatrix, PETScElementFamily, element_slice``. Importing this
module imports petsc4py (and so initialises PETSc and MPI). Layout rule: shapes are global,
arrays are each rank's owned slice (see ``linops._operators.petsc`` and ``linops._family.petsc_family``).
"""

from ._operators.petsc import MatrixModifiedError as MatrixModifiedError
from ._operators.petsc import PETScMatrix as PETScMatrix
from ._operators.petsc import structure_key_of as structure_key_of
from ._family.petsc_family import PETScElementFamily as PETScElementFamily
from ._family.petsc_family import element_slice as element_slice

__all__ = ["MatrixModifiedError", "PETScElementFamily", "PETScMatrix", "element_slice",
           "structure_key_of"]
