"""The stable internal interface that ``solvers`` and ``adjoints`` build on.

Not user API (no stability promise to users), but the one place the other two packages import
linops internals from, so that linops can reorganise its private modules freely.
"""

from ._backend import BACKEND_NAMES as BACKEND_NAMES
from ._backend import CAPABILITIES as CAPABILITIES
from ._backend import DTYPES as DTYPES
from ._backend import Backend as Backend
from ._backend import backend_named as backend_named
from ._backend import backend_of as backend_of
from ._backend import is_cupy as is_cupy
from ._backend import is_jax as is_jax
from ._backend import namespace as namespace
from ._backend import conj as conj
from ._backend import is_array as is_array
from ._backend import seal as seal
from ._backend import snapshot as snapshot
from ._backend import to_numpy as to_numpy
from ._errors import BackendNotSupported as BackendNotSupported
from ._errors import ShapeError as ShapeError
from ._errors import UnsupportedOperandError as UnsupportedOperandError
from ._pytree import array_leaves as array_leaves
from ._pytree import backend_of_operator as backend_of_operator
from ._pytree import ensure_jax_pytrees as ensure_jax_pytrees
from ._sddmm import sddmm as sddmm
