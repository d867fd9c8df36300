"""The stable internal interface that ``solvers`` and ``adjoints`` build on.

Not user API (no stability promise to users), but the one place the other two packages import
linops internals from, so that linops can reorganise its private modules freely.
"""

from ._backend import backend_name as backend_name
from ._backend import is_cupy as is_cupy
from ._backend import is_jax as is_jax
from ._backend import namespace as namespace
from ._backend import spmm as spmm
from ._backend import to_numpy as to_numpy
from ._base import ensure_jax_pytrees as ensure_jax_pytrees
from ._base import is_array as is_array
from ._errors import BackendNotSupported as BackendNotSupported
from ._errors import ShapeError as ShapeError
from ._errors import UnsupportedOperandError as UnsupportedOperandError
from ._pytree_util import array_leaves as array_leaves
from ._sddmm import sddmm as sddmm
