"""adjoints: pullbacks that return LAZY cotangents, parameter contraction, JAX integration.

``import adjoints.jax`` for ``jax.grad``/``jax.jit`` through solves and sparse products.
"""

from linops import AffineSparse as AffineSparse
from linops import project as project

from ._pullbacks import SolveCotangent as SolveCotangent
from ._pullbacks import inv_pullback as inv_pullback
from ._pullbacks import matmul_pullback as matmul_pullback
from ._pullbacks import solve_pullback as solve_pullback
