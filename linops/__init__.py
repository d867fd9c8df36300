"""linops: lazy linear-operator algebra with structure-aware queries.

An operator is a frozen description of an m×n linear map: an array, a sparse matrix, a diagonal,
a low-rank product U Vᴴ, user callables, or a sum/product of other operators. Combining
operators builds a new operator and computes no matrix; the combination is simplified at
construction (``RankOne + RankOne`` is one ``LowRank``, an ``Identity`` drops out of a product).
Queries ask for what you need (entries, the diagonal, an inner product, the values on a sparsity
pattern) at the cost the structure allows, and never build an m×n array unless you call
``to_dense``. The same code serves numpy/scipy, cupy and jax arrays: the backend is read from the
arrays an operator holds, and operators are jax pytrees.

Construct
---------
Dense(a)                          an explicit 2-D array
Sparse(values, pattern)           CSR values on a Pattern (``Sparse.from_scipy``, ``.to_scipy``)
Pattern(indptr, indices, shape)   an immutable, hashable CSR structure (``Pattern.from_coo``)
Diagonal(d), Identity(n), Zero((m, n))
RankOne(u, v), LowRank(U, V)      u vᴴ and U Vᴴ, kept as factors: how gradients stay O(n)
MaskedOuter(U, V, pattern)        U Vᴴ sampled on a pattern, kept lazy
MatrixFree(shape, dtype, f, fH)   an operator given by callables X ↦ A X and X ↦ Aᴴ X
aslinop(x)                        wrap an array, scipy/cupyx/jax sparse matrix, scipy or PyLops
                                  operator, petsc4py Mat
LinearOperator                    the abstract base: a subclass supplies matmat and adjoint

Combine
-------
A + B, A - B, c * A, -A, A / c    Sum and Scaled
A @ B                             Product (or a smaller LowRank when a factor is low rank)
A.H, A.T, A.conj()                conjugate transpose, plain transpose, entrywise conjugate

Apply
-----
A @ x, A @ X                      x (n,) or X (n, k); also ``A.matvec``, ``A.matmat``, ``A.apply``
x @ A, X @ A                      from the left, through Aᵀ (no conjugation)
aslinearoperator(A)               a scipy.sparse.linalg.LinearOperator for scipy's solvers

Query
-----
to_dense(A)                       the m×n array; refuses above 2**26 entries unless asked
sample(A, rows, cols)             the entries A[rows[k], cols[k]]
diagonal(A), trace(A)             through ``sample``: O(n) for most operators
inner(G, K)                       Frobenius ⟨G, K⟩ = Σ conj(Gᵢⱼ) Kᵢⱼ, never densifying lazy operands
payload_nbytes(A)                 bytes of the arrays an operator holds

Project
-------
project(G, like=A)                G's values on A's sparsity pattern, a Sparse: the
project(G, pattern=P)             fixed-pattern gradient, O(nnz·k) for a low-rank G
sddmm(U, V, rows, cols)           the entries of U Vᴴ at given positions, O(len(rows)·k)

Families
--------
AffineSparse                      K(θ) = K₀ + Σᵢ θᵢ Kᵢ on one pattern: ``from_terms``,
                                  ``from_elements`` (finite elements); ``fam(θ)`` is a Sparse,
                                  ``fam.pullback(G)`` contracts a cotangent to θ̄ in O(nnz)

Testing
-------
testing                           ``dottest(A)`` (⟨Ax, y⟩ = ⟨x, Aᴴy⟩), ``check_against_dense(A)``,
                                  the operator ``zoo(name)``, ``poisson_family(nx)``

Errors
------
ShapeError                        shapes that do not fit (a ValueError)
PatternError                      a malformed CSR pattern (a ValueError)
DensificationError                ``to_dense`` above its limit (a MemoryError)
BackendNotSupported               a capability or dtype an array backend lacks
UnsupportedOperandError           an input linops cannot wrap (a TypeError)

Configuration
-------------
show_config()                     versions, and the backend table: what each backend has and,
                                  for what it lacks, why and the alternative (``sv.show_config()``:
                                  the solver algorithms; ``python -m linops info`` prints both)

``linops.internals`` is the interface ``solvers`` and ``adjoints`` build on; it is not user API.

Notes
-----
Operators snapshot the arrays they are given: a numpy array is copied once into a private
read-only array (unless it is read-only all the way down), a cupy array is copied on its
device, and jax arrays, immutable, are kept as they are. Editing your array afterwards never changes an operator, or a
factorization or solution made from it. ``MatrixFree`` callables are the exception: they are
called as they are.

Examples
--------
>>> import numpy as np, scipy.sparse as sp, linops as lo
>>> A = lo.aslinop(sp.diags([2.0, 3.0, 4.0]))             # a Sparse, CSR
>>> G = lo.RankOne(np.ones(3), np.array([1.0, 2.0, 3.0]))  # the 3×3 matrix 1 vᴴ, never formed
>>> B = A + G
>>> B, B @ np.ones(3)
(Sum(shape=(3, 3), dtype=float64), array([ 8.,  9., 10.]))
>>> float(lo.inner(G, A))                                  # Σᵢ Gᵢᵢ Aᵢᵢ = 1·2 + 2·3 + 3·4
20.0
>>> lo.project(G, like=A).values                           # G on A's pattern: the diagonal
array([1., 2., 3.])
>>> lo.testing.dottest(B)
True
"""

from ._family.affine import AffineSparse as AffineSparse
from ._config import show_config as show_config
from ._base import LinearOperator as LinearOperator
from ._operators.composite import Product as Product
from ._operators.composite import Scaled as Scaled
from ._operators.composite import Sum as Sum
from ._convert import aslinearoperator as aslinearoperator
from ._convert import aslinop as aslinop
from ._operators.dense import Dense as Dense
from ._operators.diagonal import Diagonal as Diagonal
from ._operators.diagonal import Identity as Identity
from ._operators.diagonal import Zero as Zero
from ._errors import BackendNotSupported as BackendNotSupported
from ._errors import DensificationError as DensificationError
from ._errors import PatternError as PatternError
from ._errors import ShapeError as ShapeError
from ._errors import UnsupportedOperandError as UnsupportedOperandError
from ._generics import payload_nbytes as payload_nbytes
from ._operators.lowrank import LowRank as LowRank
from ._operators.lowrank import RankOne as RankOne
from ._operators.masked import MaskedOuter as MaskedOuter
from ._operators.matrixfree import MatrixFree as MatrixFree
from ._operators.pattern import Pattern as Pattern
from ._queries import diagonal as diagonal
from ._queries import inner as inner
from ._queries import project as project
from ._queries import sample as sample
from ._queries import to_dense as to_dense
from ._queries import trace as trace
from ._sddmm import sddmm as sddmm
from ._operators.sparse import Sparse as Sparse

from . import testing as testing  # noqa: E402  (imports the operators above)

from ._pytree import install_jax_hook as _install_jax_hook  # noqa: E402

_install_jax_hook()  # operators are jax pytrees whichever of linops and jax is imported first

__version__ = "0.1.0"

__all__ = [
    # construct
    "Dense", "Sparse", "Pattern", "Diagonal", "Identity", "Zero", "RankOne", "LowRank",
    "MaskedOuter", "MatrixFree", "LinearOperator", "aslinop",
    # combine (built by +, @ and *)
    "Sum", "Product", "Scaled",
    # apply
    "aslinearoperator",
    # query
    "to_dense", "sample", "diagonal", "trace", "inner", "payload_nbytes",
    # project
    "project", "sddmm",
    # families
    "AffineSparse",
    # testing
    "testing",
    # configuration
    "show_config",
    # errors
    "ShapeError", "PatternError", "DensificationError", "BackendNotSupported",
    "UnsupportedOperandError",
]
