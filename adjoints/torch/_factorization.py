"""``at.solve`` and ``at.factorize``, and the :class:`Factorization` handle.

The factorization is made once per value set (``solvers.init`` on the host: SuperLU, CHOLMOD,
PARDISO, a Krylov method with its preconditioner — any ``alg``), named by a key tensor, and
used by every solve, tangent and cotangent of the computation (see :mod:`._solve_ops`).
"""

from __future__ import annotations

from typing import Any

import torch

import solvers as sv
from linops.internals import ShapeError
from solvers.internals import resolve

from . import _solve_ops as ops
from ._operand import Operand, as_tensor, operand, real_dtype
from ._sparse import conj
from ._full_grad import GRADS, FullGradient
from ._store import REGISTRY, RELEASED, ReleasedFactorizationError, spec_const

__all__ = ["solve", "factorize", "Factorization"]


class Factorization:
    """A factorization of a sparse matrix A = Sparse(values, pattern), made by
    :func:`adjoints.torch.factorize`: the twin of ``solvers.init`` for torch.

    ``F.solve(b)``, ``F.solve_transpose(b)``, ``F.solve_adjoint(b)`` reuse the one
    factorization any number of times and are differentiable in b and in the values F was made
    from (their cotangents and tangents are solves with the same factors); ``F.logdet()``,
    ``F.slogdet()`` and ``F.selected_inverse()`` read the factors too.

    Lifetime: as long as F or any autograd graph that used it (each solve saves F's key for
    its backward); ``F.release()`` frees it now, after which F and any pending backward pass
    through it raise :class:`ReleasedFactorizationError`.

    Cost: making it is one ``solvers.init`` (per vmap member, one symbolic analysis for all);
    each solve is two triangular solves (or one Krylov run) per column; the columns of one call
    are solved together.

    Examples
    --------
    >>> import torch, scipy.sparse as sp, linops as lo, adjoints.torch as at
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> F = at.factorize(K)
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> F.solve(b).tolist(), F.solve_transpose(torch.ones(2, dtype=torch.float64)).tolist()
    ([0.25, 0.5], [0.5, 0.125])
    >>> F
    Factorization(n=2, nnz=3, dtype=torch.float64, alg=Auto(...))
    """

    def __init__(self, key: torch.Tensor, values: torch.Tensor, spec: int, pattern, alg,
                 full_grad: bool = False):
        self.key, self.values, self.spec = key, values, spec
        self.pattern, self.alg = pattern, alg
        self._released = False
        self._full = None
        if full_grad:
            if torch._C._functorch.is_functorch_wrapped_tensor(key) or key.numel() != 1:
                raise ValueError("full_grad=True collects the full gradient during "
                                 "torch.autograd backward passes; it is not available inside "
                                 "torch.func transforms or for a batch of matrices")
            self._full = FullGradient()
            GRADS[int(key.reshape(-1)[0])] = self._full

    @property
    def grad(self):
        """The FULL gradient ∂f/∂A accumulated by the backward passes so far, as a lazy
        linops operator (``lo.RankOne``/``lo.LowRank``: Σ −λuᴴ over the solves with F), or None
        (nothing yet, or F made without ``full_grad=True``). It is the gradient of the dense
        matrix — correct on A's structural zeros too — at O(n) memory per right-hand side;
        ``lo.project(F.grad, like=A)`` is the gradient on the stored values (what
        ``values.grad`` holds), ``fam.pullback(F.grad)`` the θ-gradient. Set ``F.grad = None``
        to start again."""
        return None if self._full is None else self._full.operator()

    @grad.setter
    def grad(self, value) -> None:
        if value is not None:
            raise ValueError("F.grad can only be reset (F.grad = None)")
        if self._full is not None:
            self._full.U.clear()
            self._full.V.clear()

    @property
    def shape(self) -> tuple:
        """A's shape (n, n)."""
        return tuple(self.pattern.shape)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of A's values."""
        return self.values.dtype

    def __repr__(self) -> str:
        return (f"Factorization(n={self.pattern.shape[0]}, nnz={self.pattern.nnz}, "
                f"dtype={self.dtype}, alg={self.alg!r})")

    # ----- solves ----------------------------------------------------------------------------
    def _check_live(self) -> None:
        if self._released:
            raise ReleasedFactorizationError(RELEASED)

    def _rhs(self, b, name: str) -> torch.Tensor:
        self._check_live()
        b = as_tensor(b, f"{name}: b", self.values)
        n = self.pattern.shape[0]
        if b.dim() not in (1, 2) or b.shape[0] != n:
            raise ShapeError(f"{name} needs b of shape (n,) or (n, k) with n={n}: "
                             f"A.shape={self.shape}, b.shape={tuple(b.shape)}")
        return b.to(torch.promote_types(self.values.dtype, b.dtype))

    def _run(self, b, trans: str, name: str) -> torch.Tensor:
        b = self._rhs(b, name)
        if b.numel() == 0:
            return torch.zeros_like(b)
        return ops.solve(self.key, self.values, b, self.spec, trans)

    def solve(self, b) -> torch.Tensor:
        """u = A⁻¹ b (b: (n,) or (n, k)); differentiable in b and in A's values."""
        return self._run(b, "N", "solve")

    def solve_transpose(self, b) -> torch.Tensor:
        """u = A⁻ᵀ b with the same factorization (the plain transpose)."""
        return self._run(b, "T", "solve_transpose")

    def solve_adjoint(self, b) -> torch.Tensor:
        """u = A⁻ᴴ b = conj(A⁻ᵀ conj(b)) with the same factorization."""
        b = self._rhs(b, "solve_adjoint")
        if b.numel() == 0:
            return torch.zeros_like(b)
        return conj(ops.solve(self.key, self.values, conj(b), self.spec, "T"))

    def release(self) -> None:
        """Free the factorization now. Later solves with F, and backward passes through
        graphs that used F, raise :class:`ReleasedFactorizationError`."""
        if torch._C._functorch.is_batchedtensor(self.key):
            raise RuntimeError("release() inside torch.func.vmap: release the Factorization "
                               "outside the transform")
        self._released = True
        REGISTRY.release(self.key.reshape(-1).tolist())

    # ----- factor queries (see _query_ops) ---------------------------------------------------
    def logdet(self) -> torch.Tensor:
        """log|det A| from the factors, differentiable (see :func:`adjoints.torch.logdet`)."""
        from ._query_ops import slogdet_of  # import cycle: _query_ops imports this module

        return slogdet_of(self)[1]

    def slogdet(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(sign, log|det A|) from the factors (see :func:`adjoints.torch.slogdet`)."""
        from ._query_ops import slogdet_of  # import cycle: _query_ops imports this module

        return slogdet_of(self)

    def selected_inverse(self, rows=None, cols=None) -> torch.Tensor:
        """Entries of A⁻¹ by selected inversion of these factors, differentiable (see
        :func:`adjoints.torch.inv_sample`): on A's pattern by default (values in its CSR
        order), else at (rows[k], cols[k])."""
        from ._query_ops import inv_sample_of  # import cycle: _query_ops imports this module

        return inv_sample_of(self, rows, cols)


def _check(A, who: str) -> Operand:
    op = operand(A, who)
    shape = op.shape
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ShapeError(f"{who} needs a square A, got A.shape={shape}")
    return op


def _make(op: Operand, alg, hermitian, posdef, explicit: bool, b_dtype=None,
          full_grad: bool = False) -> Factorization:
    """The Factorization of a sparse operand (values promoted to b's precision)."""
    values = op.values
    if b_dtype is not None:
        values = values.to(torch.promote_types(values.dtype, real_dtype(b_dtype)))
    spec = spec_const(op.pattern, alg, hermitian, posdef, explicit)
    if op.pattern.shape[0] == 0:   # nothing to factorize
        key = torch.zeros(tuple(values.shape[:-1]) + (1,), dtype=torch.int64)
    else:
        key = ops.factorize(values, spec)
    return Factorization(key, values, spec, op.pattern, alg, full_grad)


def implicit(A, alg, hermitian, posdef, who: str) -> Factorization:
    """The factorization an entry point makes for itself (not a user's handle: like
    :func:`solve`'s, it shares a live factorization of the same values, e.g. the one of a
    solve with the same K)."""
    op = _check(A, who)
    if op.dense is not None:
        raise TypeError(f"{who} of a dense tensor: use torch.linalg")
    return _make(op, resolve(alg), hermitian, posdef, explicit=False)


def factorize(A: Any, alg: Any = None, *, hermitian: bool | None = None,
              posdef: bool | None = None, full_grad: bool = False) -> Factorization:
    """F = a factorization of the sparse matrix A (values a torch tensor), made once.

    Parameters
    ----------
    A : lo.Sparse, fam(θ), torch sparse COO/CSR/CSC tensor or scipy sparse matrix
    alg : solvers algorithm or name, optional
        Anything ``solvers`` offers on the host (default ``sv.Auto()``).
    hermitian, posdef : bool, optional
        Hints for ``sv.Auto`` (posdef → Cholesky), as in ``solvers.LinearProblem``.
    full_grad : bool, default False
        Also collect the FULL gradient ∂f/∂A during backward passes, lazily, as ``F.grad``
        (a ``lo.RankOne``/``lo.LowRank``: O(n) per right-hand side). The gradient with respect
        to the stored values (``values.grad``, the pattern gradient) is computed either way.

    Returns
    -------
    Factorization

    Raises
    ------
    TypeError
        A is dense (``torch.linalg`` factorizes dense matrices: call :func:`solve`).
    ShapeError
        A is not square.
    solvers.SingularMatrixError, solvers.NotHermitianError, solvers.NonFiniteInputError
        From the factorization, now.

    Notes
    -----
    Cost: one ``solvers.init`` on the host now. Under ``torch.func.vmap`` over the values: one
    factorization per member, one symbolic analysis for all. An eager Python loop that solves
    with one matrix should factorize once with this function (each :func:`solve` call
    factorizes anew, unless a factorization of exactly the same values is still alive).

    Examples
    --------
    >>> import torch, scipy.sparse as sp, linops as lo, adjoints.torch as at
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> at.reset_stats()
    >>> F = at.factorize(K)
    >>> u = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> for _ in range(3):
    ...     u = F.solve(u)
    >>> u.tolist(), at.stats().factorizations
    ([0.015625, 0.03125], 1)
    """
    op = _check(A, "factorize")
    if op.dense is not None:
        raise TypeError("factorize needs a sparse A (lo.Sparse, fam(θ), a torch sparse "
                        "tensor); dense matrices are factorized by torch.linalg: call "
                        "at.solve(A, b) or torch.linalg.lu_factor(A)")
    return _make(op, resolve(alg), hermitian, posdef, explicit=True, full_grad=full_grad)


def solve(A: Any, b: Any, alg: Any = None, *, hermitian: bool | None = None,
          posdef: bool | None = None) -> torch.Tensor:
    """u = A⁻¹ b, differentiable in A's values and in b under torch.autograd, every
    ``torch.func`` transform and ``torch.compile``.

    Parameters
    ----------
    A : operator
        ``lo.Sparse`` with torch values (the differentiable tensor; the pattern is static),
        ``fam(θ)``, a torch sparse COO/CSR/CSC tensor (values differentiable), a scipy sparse
        matrix, a :class:`Factorization`, or a dense (n, n) tensor (``torch.linalg.solve``).
    b : tensor (n,) or (n, k)
    alg : solvers algorithm or name, optional
        Sparse: anything ``solvers`` offers (``sv.LU()``, ``sv.Cholesky()``,
        ``sv.CG(rtol=..., precond=sv.AMG())``, ...; default ``sv.Auto()``). Gradients are as
        accurate as the solves: give iterative methods a tight ``rtol``. Dense: ``None``,
        ``sv.LU()``/``"lu"`` or ``sv.Cholesky()``/``"cholesky"``.
    hermitian, posdef : bool, optional
        Hints for ``sv.Auto``.

    Returns
    -------
    u : tensor of b's shape, dtype ``promote_types(A, b)``.

    Raises
    ------
    ShapeError
        A not square, or b not of shape (n,) / (n, k).
    TypeError
        An A that is not a matrix, a b that is not an array.
    solvers.SingularMatrixError, solvers.NotHermitianError, solvers.NonFiniteInputError,
    solvers.ConvergenceError, solvers.SolveError
        As raised by ``solvers``.

    Notes
    -----
    Cost: one factorization (``solvers.init``), then two triangular solves per column.
    Backward: one adjoint solve with the same factors, b̄ = λ = A⁻ᴴū, and an O(nnz·k) SDDMM
    for the values, Ā = −λuᴴ on the pattern (torch's convention: conjugate transposes).
    Forward mode (``jvp``/``jacfwd``): one solve per call, u̇ = A⁻¹(ḃ − Ȧu), all tangents of
    a ``vmap`` as columns of one call. Higher orders: solves on the same factors, never a new
    factorization. The factorization lives as long as the autograd graph that needs it.

    Examples
    --------
    >>> import torch, scipy.sparse as sp, linops as lo, adjoints.torch as at
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> v = torch.tensor(K.values, requires_grad=True)
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> u = at.solve(lo.Sparse(v, K.pattern), b)
    >>> u.tolist()
    [0.25, 0.5]
    >>> u.sum().backward()
    >>> v.grad.tolist()                          # −λ[r] u[c] on the pattern, λ = A⁻ᵀ 1
    [-0.125, -0.25, -0.0625]
    """
    if isinstance(A, Factorization):
        if alg is not None:
            raise TypeError(f"solve(F, b) uses F's own algorithm; alg must be None, got {alg!r}")
        return A.solve(b)
    op = _check(A, "solve")
    if op.dense is not None:
        return _dense_solve(op.dense, b, alg)
    b = as_tensor(b, "solve: b", op.values)
    n = op.shape[0]
    if b.dim() not in (1, 2) or b.shape[0] != n:
        raise ShapeError(f"solve needs b of shape (n,) or (n, k) with n={n}: A.shape={op.shape}, "
                         f"b.shape={tuple(b.shape)}")
    alg = resolve(alg)
    if b.numel() == 0:
        return torch.zeros(b.shape, dtype=torch.promote_types(op.dtype, b.dtype))
    return _make(op, alg, hermitian, posdef, explicit=False, b_dtype=b.dtype).solve(b)


def _dense_solve(A: torch.Tensor, b, alg) -> torch.Tensor:
    """torch.linalg for a dense A: LU (default) or Cholesky."""
    b = as_tensor(b, "solve: b", A)
    n = A.shape[0]
    if b.dim() not in (1, 2) or b.shape[0] != n:
        raise ShapeError(f"solve needs b of shape (n,) or (n, k) with n={n}: "
                         f"A.shape={tuple(A.shape)}, b.shape={tuple(b.shape)}")
    alg = resolve(alg)
    dt = torch.promote_types(A.dtype, b.dtype)
    A, b = A.to(dt), b.to(dt)
    if isinstance(alg, (sv.LU, sv.Auto)):
        return torch.linalg.solve(A, b)
    if isinstance(alg, sv.Cholesky):
        L = torch.linalg.cholesky(A)
        x = torch.cholesky_solve(b.unsqueeze(-1) if b.dim() == 1 else b, L)
        return x.squeeze(-1) if b.dim() == 1 else x
    raise sv.BackendNotSupported(f"a dense torch A is solved by torch.linalg with sv.LU() or "
                                 f"sv.Cholesky(); got {alg!r} (iterative methods: pass a "
                                 f"lo.Sparse)")
