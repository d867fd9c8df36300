"""PyTorch front end: sparse solves, products, log-determinants and parameter families under
``torch.autograd``, every ``torch.func`` transform and ``torch.compile``.

``import adjoints.torch as at`` (needs ``pip install "linops[torch]"``). A sparse matrix is its
values — a torch tensor, the differentiable part — on a static ``lo.Pattern``: ``lo.Sparse(v,
pattern)``, ``fam(θ)`` for a ``lo.AffineSparse`` family, or a torch sparse COO/CSR/CSC tensor
converted once at the boundary. Sparse tensors do not pass through ``torch.func`` or
``torch.compile``; values plus a static pattern do.

Entry points
------------
at.solve(A, b, alg=None)        u = A⁻¹b; factorized once (``solvers.init``: SuperLU, CHOLMOD,
                                PARDISO, a Krylov method with its preconditioner — any ``alg``)
at.factorize(A, alg=None)       F, the factorization as a handle: ``F.solve``,
                                ``F.solve_transpose``, ``F.solve_adjoint``, ``F.logdet``,
                                ``F.slogdet``, ``F.selected_inverse``, ``F.release()``;
                                ``full_grad=True``: the full gradient ∂f/∂A as ``F.grad``
at.matmul(L, R)                 sparse @ dense or dense @ sparse; values̄ by SDDMM
at.logdet(A), at.slogdet(A)     log|det A| (and its sign) from the factors
at.inv_sample(A, rows, cols)    entries of A⁻¹ by selected inversion
fam(θ)                          K(θ) for a torch θ: one sparse product, θ̄ = Mᴴ v̄ (O(nnz))
at.stats(), at.reset_stats()    counters of the host factorizations (``at.Stats``)
at.ReleasedFactorizationError   a solve (a backward pass too) after ``F.release()``

How: each operation is a ``torch.autograd.Function`` with ``forward``/``setup_context``, a
``jvp`` and a ``vmap`` staticmethod, and also a ``torch.library.custom_op`` with
``register_autograd``, ``register_vmap`` and a fake kernel (``torch.compile`` keeps it opaque,
without graph breaks; Dynamo cannot trace a Function that defines ``jvp``, so under compile the
front end calls the operators). The factorization is named by a key tensor; a solve's
cotangent is the same solve with the transposed operation on the same key, its tangent another
solve, so backward, forward mode, double backward and Hessian-vector products all run on ONE
factorization (``stats().factorizations``). ``vmap`` over value sets: one factorization per
member, one symbolic analysis for all; over right-hand sides: one multi-column solve.

Gradients (torch's convention, conjugate transposes): for u = A⁻¹b, b̄ = λ = A⁻ᴴū and the
stored values get −λᵣ conj(u꜀) — the PATTERN gradient (torch's "masked" semantics for sparse
inputs), an O(nnz·k) SDDMM. The FULL gradient −λuᴴ (correct on structural zeros too, what
finite differences on the dense matrix see) is the lazy linops operator ``F.grad`` of a
``factorize(..., full_grad=True)``, never an n×n array.

Lifetime: a factorization lives as long as the autograd graph that needs it (each solve saves
its key) or the :class:`Factorization` handle; after ``backward()`` it is freed. A backward
pass run twice is torch's error (the graph's saved tensors are gone); one after
``F.release()`` is :class:`ReleasedFactorizationError` — never a wrong number. Factorizations
are found again only by their exact values.

Examples
--------
>>> import torch, scipy.sparse as sp, linops as lo, adjoints.torch as at
>>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
>>> v = torch.tensor(K.values, requires_grad=True)
>>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
>>> at.reset_stats()
>>> alive = at.stats().live                 # factorizations alive before (others' included)
>>> u = at.solve(lo.Sparse(v, K.pattern), b)
>>> u.sum().backward()
>>> u.tolist(), v.grad.tolist()
([0.25, 0.5], [-0.125, -0.25, -0.0625])
>>> s = at.stats()
>>> s.factorizations, s.forward_solves, s.transpose_solves, s.live - alive   # freed after backward
(1, 1, 1, 0)
>>> torch.func.jacrev(lambda b: at.solve(K, b))(b).tolist()          # A⁻¹, one 2-column solve
[[0.5, -0.125], [0.0, 0.25]]
"""

from . import _family  # noqa: F401  (registers fam(θ) for torch θ on linops' family_call)
from ._factorization import Factorization as Factorization
from ._factorization import factorize as factorize
from ._factorization import solve as solve
from ._matmul import matmul as matmul
from ._query_ops import inv_sample as inv_sample
from ._query_ops import logdet as logdet
from ._query_ops import slogdet as slogdet
from ._store import ReleasedFactorizationError as ReleasedFactorizationError
from ._store import Stats as Stats
from ._store import reset_stats as reset_stats
from ._store import stats as stats

__all__ = ["solve", "factorize", "Factorization", "matmul", "logdet", "slogdet", "inv_sample",
           "stats", "reset_stats", "Stats", "ReleasedFactorizationError"]
