"""The stable internal interface that ``solvers`` and ``adjoints`` build on.

Not user API (no stability promise to users), but the one place the other two packages import
linops internals from, so that linops can reorganise its private modules freely
(``tests/structure/test_layers.py`` holds them to it).

An operator defined outside linops (a solver's lazy inverse) is a ``LinearOperator`` subclass
decorated with :func:`operator` (a frozen dataclass and a jax pytree), and registers its query
rules on the generics of ``linops._generics``: ``sample_generic`` (entries at (row, col)
positions; it gives ``sample``, ``diagonal``, ``trace`` and ``project``), ``to_dense_generic``,
``inner_generic`` (⟨G, K⟩ by G's type) and ``conjugate`` (conj(A), for ``.conj()`` and ``.T``).

Structure queries (branch on these, not on concrete operator types): ``structure`` ('dense',
'sparse', 'diagonal', 'lowrank', 'petsc', 'matrixfree'), ``csr_parts``, ``dense_array``,
``diagonal_of``, ``low_rank_split``, ``scale_split``, ``abs_apply`` (|A| X), ``adjoint_view`` (the cheapest Aᴴ),
``with_dtype`` and ``structure_key``.
"""

from ._backend import BACKEND_NAMES as BACKEND_NAMES
from ._backend import CAPABILITIES as CAPABILITIES
from ._backend import DTYPES as DTYPES
from ._backend import Backend as Backend
from ._backend import backend_named as backend_named
from ._backend import backend_of as backend_of
from ._backend import is_cupy as is_cupy
from ._backend import is_jax as is_jax
from ._backend import is_torch as is_torch
from ._backend import dtype_of as dtype_of
from ._backend import namespace as namespace
from ._backend import conj as conj
from ._backend import is_array as is_array
from ._backend import seal as seal
from ._backend import snapshot as snapshot
from ._backend import to_numpy as to_numpy
from ._errors import BackendNotSupported as BackendNotSupported
from ._errors import ShapeError as ShapeError
from ._errors import UnsupportedOperandError as UnsupportedOperandError
from ._generics import _inner as inner_generic
from ._generics import _sample as sample_generic
from ._generics import _to_dense as to_dense_generic
from ._generics import abs_apply as abs_apply
from ._generics import adjoint_view as adjoint_view
from ._generics import conjugate as conjugate
from ._generics import csr_parts as csr_parts
from ._generics import dense_array as dense_array
from ._generics import diagonal_of as diagonal_of
from ._generics import low_rank_split as low_rank_split
from ._generics import scale_split as scale_split
from ._generics import structure as structure
from ._generics import structure_key as structure_key
from ._generics import with_dtype as with_dtype
from ._family.affine import family_call as family_call_generic
from ._pytree import array_leaves as array_leaves
from ._pytree import backend_of_operator as backend_of_operator
from ._pytree import ensure_jax_pytrees as ensure_jax_pytrees
from ._pytree import operator as operator
from ._sddmm import sddmm as sddmm
from ._jax_constant import HOST_MIN_NNZ as HOST_MIN_NNZ
