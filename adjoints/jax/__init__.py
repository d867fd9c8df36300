"""JAX integration: ``solve`` and ``matmul`` under every JAX transform.

``jax.grad``, ``value_and_grad``, ``jvp``, ``jacfwd``, ``jacrev``, ``hessian``, ``vmap`` of each,
``linear_transpose`` and ``jit`` of all of them work through :func:`solve` and :func:`matmul`,
in float32/float64/complex64/complex128, with ``jax_enable_x64`` on or off.

How: u = A⁻¹b is linear in b and implicitly defined by A, so its tangent is another solve,
u̇ = A⁻¹(ḃ − Ȧu), and its transpose is a solve with Aᵀ. Each solve is a primitive whose JVP rule
emits the SAME solve primitive (same factorization) and whose transpose rule emits the
transposed solve; JAX derives reverse mode, vmap and every higher order from these rules.

* sparse A on the CPU (``lo.Sparse`` with jax values, a BCOO/BCSR with concrete indices,
  ``fam(θ)``): the factorization is ``solvers.init`` on the host (SuperLU, CHOLMOD, a Krylov
  method with its preconditioner: any ``alg``), made once per linearization point and freed
  when the computation that needs it is done (see :mod:`adjoints.jax._host`).
* dense A, ``lo.Diagonal``, matrix-free operators (jax Krylov) and the GPU sparse branch:
  ``jax.lax.custom_linear_solve`` with factors that live in XLA (:mod:`adjoints.jax._solves`).
* ``B + LowRank`` (Woodbury) and ``c·B``: composed from the solves above; JAX differentiates
  the composition.

The cotangent of sparse values is an SDDMM on the pattern (O(nnz·k)); nothing forms an n×n
array. JAX's convention for complex numbers applies: cotangents use the plain transpose Aᵀ
(``jax.test_util.check_grads`` is the judge). Failures raise the same named exceptions as the
numpy path when eager (``solvers.SingularMatrixError``, ``solvers.NonFiniteInputError``, ...) and
fail a jitted computation with a ``JaxRuntimeError`` whose first line names the problem.

Public API: :func:`solve`, :func:`factorize` (a :class:`Factorization`: the twin of
``sv.init`` as a JAX value), :func:`matmul`, :func:`stats`, :func:`reset_stats`, :class:`Stats`,
:class:`ExpiredFactorizationError`; log-determinants and eigenpairs: :func:`logdet`,
:func:`slogdet`, :func:`inv_sample`, :func:`eigsh`; least squares: :func:`lstsq`.

Loops (one factorization per matrix per computation)
----------------------------------------------------
A solve inside ``lax.scan``/``fori_loop``/``while_loop`` or a Python loop under ``jit`` whose
matrix was built outside the loop is factorized once, where the matrix is, and every step and
every cotangent step of ``grad`` reuses it; a loop body that builds the same matrix at every
step reuses the factorization by its values (``stats().reuses``); a Newton loop whose matrix
changes factorizes per step and keeps the pattern's symbolic analysis. Eager code is the
exception: each eager ``solve(A, b)`` call factorizes, so an eager Python loop should
factorize once itself::

    F = adj.factorize(A)          # once
    for t in range(T):
        u = F.solve(u + f)        # every step reuses F (also F.solve_transpose/solve_adjoint)

JAX conventions
---------------
* dtypes follow JAX: with ``jax_enable_x64`` off, float64 inputs become float32 and so does
  the result (the singularity thresholds then are single precision's); nothing here switches
  x64 on.
* Put ``jax.jit`` outermost (``jax.jit(jax.grad(f))``, not ``jax.grad(jax.jit(f))``): then the
  forward solve and the gradient's transpose solve share one factorization; the other order
  refactorizes in the backward pass (correct, counted in ``stats().misses``).
* Lifetime: eager factorizations live as long as the arrays (or ``Factorization``) holding
  their key; inside ``jit`` a straight-line computation frees its factorization with its last
  solve, and a compiled loop keeps its last factorization until it runs again (one per
  compiled site; see :mod:`adjoints.jax._host`). A ``Factorization`` returned from a jitted
  function is usable until that function runs again, then refused.
* A ``lo.Sparse``'s pattern is static (part of the pytree structure); its values are the
  differentiable leaf. A BCOO/BCSR needs concrete indices (not traced).

Examples
--------
>>> import jax, jax.numpy as jnp, scipy.sparse as sp, linops as lo, adjoints.jax as adj
>>> A = jnp.array([[2.0, 1.0], [0.0, 4.0]])
>>> b = jnp.array([1.0, 2.0])
>>> adj.solve(A, b).tolist()
[0.25, 0.5]
>>> jax.grad(lambda b: adj.solve(A, b).sum())(b).tolist()          # b̄ = A⁻ᵀ 1
[0.5, 0.125]

Sparse: the gradient with respect to the stored values, −λᵣ u_c on the pattern, under jit:

>>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
>>> f = lambda v: adj.solve(lo.Sparse(v, K.pattern), b).sum()
>>> adj.reset_stats()
>>> jax.jit(jax.grad(f))(jnp.asarray(K.values)).tolist()
[-0.125, -0.25, -0.0625]
>>> s = adj.stats()
>>> s.factorizations, s.forward_solves, s.transpose_solves
(1, 1, 1)
"""

from ._factor import Factorization as Factorization
from ._host import ExpiredFactorizationError as ExpiredFactorizationError
from ._host import Stats as Stats
from ._solve import factorize as factorize
from ._solve import reset_stats as reset_stats
from ._solve import solve as solve
from ._solve import stats as stats
from ._matmul import matmul as matmul
from ._eigsh import eigsh as eigsh
from ._logdet import inv_sample as inv_sample
from ._logdet import logdet as logdet
from ._logdet import slogdet as slogdet
from ._lstsq import lstsq as lstsq

__all__ = ["solve", "factorize", "Factorization", "matmul", "stats", "reset_stats", "Stats",
           "ExpiredFactorizationError", "logdet", "slogdet", "inv_sample", "eigsh", "lstsq"]
