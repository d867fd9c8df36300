"""linops: lazy linear-operator algebra with structure-aware queries.

Operators are frozen; ``+``, ``@`` and ``*`` simplify at construction; queries (``to_dense``,
``sample``, ``diagonal``, ``trace``, ``inner``, ``project``, ``payload_nbytes``) never densify
unless asked to.
"""

from ._affine import AffineSparse as AffineSparse
from ._base import LinearOperator as LinearOperator
from ._composite import Product as Product
from ._composite import Scaled as Scaled
from ._composite import Sum as Sum
from ._convert import aslinearoperator as aslinearoperator
from ._convert import aslinop as aslinop
from ._dense import Dense as Dense
from ._diagonal import Diagonal as Diagonal
from ._diagonal import Identity as Identity
from ._diagonal import Zero as Zero
from ._errors import BackendNotSupported as BackendNotSupported
from ._errors import DensificationError as DensificationError
from ._errors import PatternError as PatternError
from ._errors import ShapeError as ShapeError
from ._errors import UnsupportedOperandError as UnsupportedOperandError
from ._lowrank import LowRank as LowRank
from ._lowrank import RankOne as RankOne
from ._masked import MaskedOuter as MaskedOuter
from ._matrixfree import MatrixFree as MatrixFree
from ._pattern import Pattern as Pattern
from ._queries import diagonal as diagonal
from ._queries import inner as inner
from ._queries import payload_nbytes as payload_nbytes
from ._queries import project as project
from ._queries import sample as sample
from ._queries import to_dense as to_dense
from ._queries import trace as trace
from ._sddmm import sddmm as sddmm
from ._sparse import Sparse as Sparse

from . import testing as testing  # noqa: E402  (imports the operators above)

from ._base import install_jax_hook as _install_jax_hook  # noqa: E402

_install_jax_hook()  # operators are jax pytrees whichever of linops and jax is imported first

__version__ = "0.1.0"
