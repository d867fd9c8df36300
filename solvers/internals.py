"""The interface ``adjoints`` builds on: solvers' contract, registry and shared rules.

Not user API (no stability promise to users), but the one place ``adjoints`` imports solvers
internals from, so that solvers can reorganise its private modules freely (the layer test,
``tests/structure/test_layers.py``, checks that nothing else is imported). Structure queries
(``structure``, ``low_rank_split``, ...) are linops's: ``linops.internals``.
"""

from ._acceptance import attainable as attainable
from ._acceptance import backward_error as backward_error
from ._acceptance import verdict as verdict
from ._checks import default_rtol as default_rtol
from ._checks import eps as eps
from ._checks import hermitian_tol as hermitian_tol
from ._checks import is_hermitian as is_hermitian
from ._checks import precision as precision
from ._checks import rcond_tol as rcond_tol
from ._contract import Algorithm as Algorithm
from ._eigsh import shifted as shifted
from ._contract import EmptyFactor as EmptyFactor
from ._contract import Factor as Factor
from ._registry import Case as Case
from ._registry import Entry as Entry
from ._registry import build as build_case
from ._registry import entries as entries
from ._registry import entry as entry
from ._registry import entry_of as entry_of
from ._registry import resolve as resolve
from ._engines.tune import Measurement as Measurement
from ._engines.tune import Timing as Timing
from ._engines.tune import use_profile as use_profile
from ._engines.tune import user_profile_path as user_profile_path
from ._engines.petsc import transpose_support as transpose_support
from ._engines.klu import KLUFactor as KLUFactor
from ._engines.klu import PIVOT_TOL as KLU_PIVOT_TOL
from ._engines.klu import symbolic_of as klu_symbolic
from ._engines.klu import native as native
from ._engines.klu import native_available as native_available
