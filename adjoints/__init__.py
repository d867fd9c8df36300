"""adjoints: pullbacks that return LAZY cotangents, parameter contraction, JAX integration.

``import adjoints.jax`` for ``jax.grad``/``jax.jit`` through solves and sparse products.

The gradient of ``f = aᵀA⁻¹b`` with respect to A is the rank-one matrix −λuᴴ (u = A⁻¹b,
λ = A⁻ᴴa). The pullbacks here return it as exactly that — an operator holding λ and u, O(n)
memory — and compute λ with the factorization of the forward solve. From the lazy cotangent
you take what you need: the values on A's pattern, the gradient with respect to parameters
θ of a family K(θ), or an inner product.

Pullbacks (numpy, cupy and jax arrays)
--------------------------------------
solve_pullback(sol, ubar)        u = A⁻¹b: one adjoint solve, no factorization -> SolveCotangent
SolveCotangent                   ``.A`` = −λuᴴ (RankOne/LowRank), ``.b`` = λ (alias ``.lam``)
matmul_pullback(L, R, Ybar)      Y = A @ X or X @ A: (L̄, R̄), the operator's one lazy; Ȳ may be
                                 an operator (Identity, Diagonal, Sparse, LowRank): both lazy
trace_pullback(L, R)             f = Re tr(L R): (Rᴴ, Lᴴ) as lazy views, no m×m array
inv_pullback(cache, Ybar)        Y = A⁻¹ used as an operator: Ā = −A⁻ᴴȲA⁻ᴴ, lazy

logdet_pullback(cache)           log|det A|: Ā = A⁻ᴴ lazily, entries by selected inversion
inv_sample_pullback(cache, r, c, v̄)  entries of A⁻¹: Ā = −A⁻ᴴȲA⁻ᴴ, LowRank (2 solves/column)
eigsh_pullback(eig, λ̄, V̄)       eigenpairs: Σλ̄ᵢvᵢvᵢᴴ + projected solves for V̄ (no factorization);
                                 with M: EigshCotangent (K̄, M̄); DegenerateEigenvalueError
logdet_estimate_pullback(est)    matrix-free: Hutchinson estimate of A⁻ᴴ (EstimatedCotangent, stderr)

From a lazy cotangent G to numbers (re-exported from linops)
------------------------------------------------------------
project(G, like=A)               G on A's stored entries: the fixed-pattern gradient (SDDMM)
AffineSparse                     ``fam.pullback(G)``: θ̄ for K(θ) = K₀ + Σ θᵢKᵢ, O(nnz)

JAX (``import adjoints.jax as adj``; needs ``pip install "linops[jax]"``)
-----------------------------------------------------------------------
adj.solve(A, b, alg=None)        u = A⁻¹b under grad, jvp, vmap, jit, hessian, ...; one
                                 factorization per matrix per computation (loops included)
adj.factorize(A, alg=None)       F, a factorization as a JAX value: F.solve, F.solve_transpose,
                                 F.solve_adjoint; closed over, carried, vmapped, differentiated
adj.matmul(L, R)                 sparse @ dense or dense @ sparse, values̄ by SDDMM
adj.stats(), adj.reset_stats()   counters of the host factorizations (``adj.Stats``)

Notes
-----
Convention: for real f, df = Re⟨Ā, dA⟩_F with ⟨X, Y⟩_F = Σ conj(Xᵢⱼ) Yᵢⱼ, so for u = A⁻¹b
λ = A⁻ᴴū, b̄ = λ and Ā = −λuᴴ; for real θ, θ̄ᵢ = Re⟨Kᵢ, Ā⟩_F. The cotangent is the FULL
gradient (also on A's structural zeros, as finite differences on the dense matrix see it);
``project`` gives the gradient on the pattern, and neither is chosen silently. ``adjoints.jax``
follows JAX's own convention instead (plain transposes; ``jax.test_util.check_grads``).

Examples
--------
>>> import numpy as np, scipy.sparse as sp, linops as lo, solvers as sv, adjoints as ad
>>> A = sp.csr_array(np.array([[4.0, 1.0], [2.0, 3.0]]))
>>> sol = sv.solve(sv.LinearProblem(A, np.array([1.0, 2.0])))
>>> g = ad.solve_pullback(sol, np.ones(2))            # f = 1ᵀu
>>> g.A, g.b.round(3).tolist()
(RankOne(shape=(2, 2), dtype=float64), [0.1, 0.3])
>>> ad.project(g.A, like=sol.cache.A).values.round(3).tolist()
[-0.01, -0.06, -0.03, -0.18]
>>> sol.stats.factorizations, sol.stats.adjoint_solves
(1, 1)
"""

from linops import AffineSparse as AffineSparse
from linops import project as project

from ._pullbacks import SolveCotangent as SolveCotangent
from ._pullbacks import inv_pullback as inv_pullback
from ._pullbacks import matmul_pullback as matmul_pullback
from ._pullbacks import solve_pullback as solve_pullback
from ._pullbacks import trace_pullback as trace_pullback
from ._eigsh import DegenerateEigenvalueError as DegenerateEigenvalueError
from ._eigsh import EigshCotangent as EigshCotangent
from ._eigsh import eigsh_pullback as eigsh_pullback
from ._logdet import inv_sample_pullback as inv_sample_pullback
from ._logdet import EstimatedCotangent as EstimatedCotangent
from ._logdet import logdet_estimate_pullback as logdet_estimate_pullback
from ._logdet import logdet_pullback as logdet_pullback

__all__ = [
    # pullbacks
    "solve_pullback", "SolveCotangent", "matmul_pullback", "trace_pullback", "inv_pullback",
    "logdet_pullback", "inv_sample_pullback", "eigsh_pullback", "EigshCotangent",
    "DegenerateEigenvalueError",
    "logdet_estimate_pullback", "EstimatedCotangent",
    # from a lazy cotangent to numbers
    "project", "AffineSparse",
]
