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
  when the computation that needs it is done (see :mod:`adjoints._jax_host`).
* dense A, ``lo.Diagonal``, matrix-free operators (jax Krylov) and the GPU sparse branch:
  ``jax.lax.custom_linear_solve`` with factors that live in XLA (:mod:`adjoints._jax_solves`).
* ``B + LowRank`` (Woodbury) and ``c·B``: composed from the solves above; JAX differentiates
  the composition.

The cotangent of sparse values is an SDDMM on the pattern (O(nnz·k)); nothing forms an n×n
array. JAX's convention for complex numbers applies: cotangents use the plain transpose Aᵀ
(``jax.test_util.check_grads`` is the judge). Failures raise the same named exceptions as the
numpy path when eager (``solvers.SingularMatrixError``, ``solvers.NonFiniteInputError``, ...) and
fail a jitted computation with a ``JaxRuntimeError`` whose first line names the problem.

Public API: :func:`solve`, :func:`matmul`, :func:`stats`, :func:`reset_stats`, :class:`Stats`;
log-determinants and eigenpairs (issue 18): :func:`logdet`, :func:`slogdet`, :func:`inv_sample`,
:func:`eigsh`.

JAX conventions
---------------
* dtypes follow JAX: with ``jax_enable_x64`` off, float64 inputs become float32 and so does
  the result (the singularity thresholds then are single precision's); nothing here switches
  x64 on.
* Put ``jax.jit`` outermost (``jax.jit(jax.grad(f))``, not ``jax.grad(jax.jit(f))``): then the
  forward solve and the gradient's transpose solve share one factorization; the other order
  refactorizes in the backward pass (correct, counted in ``stats().misses``).
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

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

import linops as lo
import solvers as sv
from linops.internals import ShapeError, ensure_jax_pytrees

from . import _jax_host as _host
from ._jax_host import Stats as Stats
from ._jax_solves import dense_factor, diagonal_factor, gpu_sparse_factor, krylov_factor
from ._jax_spmm import spmm

ensure_jax_pytrees()

from ._jax_logdet import eigsh, inv_sample, logdet, slogdet  # noqa: E402  (issue 18)

__all__ = ["solve", "matmul", "stats", "reset_stats", "Stats", "logdet", "slogdet", "inv_sample", "eigsh"]

# the names solve() accepts: the solvers algorithms that have a JAX path (no AMG/PETSc/Pardiso
# as a top-level alg: AMG runs as a preconditioner inside a host solve)
_NAMES = {"auto": sv.Auto, "lu": sv.LU, "cholesky": sv.Cholesky, "cg": sv.CG, "gmres": sv.GMRES,
          "bicgstab": sv.BiCGStab, "woodbury": sv.Woodbury}


def stats() -> Stats:
    """Counters of the host factorizations made by :func:`solve` (a snapshot, also valid after
    ``jax.jit`` runs): ``factorizations``, ``forward_solves``, ``transpose_solves``, ``misses``
    (refactorizations by a consumer that found none), ``live`` (alive now), ``peak_live``.

    Only the sparse CPU path factorizes on the host and is counted; dense, diagonal and
    matrix-free solves live in XLA and are not. Counters are process-wide (one registry), so
    call :func:`reset_stats` before the computation you want to measure.

    Returns
    -------
    Stats
        A copy: later solves do not change it.

    Examples
    --------
    >>> import jax.numpy as jnp, scipy.sparse as sp, linops as lo
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> reset_stats(); stats().factorizations
    0
    >>> solve(K, jnp.array([1.0, 2.0])).tolist()
    [0.25, 0.5]
    >>> s = stats()
    >>> s.factorizations, s.forward_solves, s.misses
    (1, 1, 0)
    """
    return _host.stats()


def reset_stats() -> None:
    """Zero the counters of :func:`stats`.

    Factorizations alive now are kept (and still counted in ``live``); ``peak_live`` restarts
    from their number.

    Examples
    --------
    >>> reset_stats()
    >>> s = stats()
    >>> s.factorizations, s.forward_solves, s.transpose_solves, s.misses
    (0, 0, 0, 0)
    """
    _host.reset_stats()


# ----- solve -------------------------------------------------------------------------------------
def solve(A: Any, b: Any, alg: Any = None, *, hermitian: bool | None = None,
          posdef: bool | None = None) -> jax.Array:
    """u = A⁻¹ b, differentiable in A's arrays and in b under every JAX transform.

    Parameters
    ----------
    A : operator
        ``lo.Sparse`` (values: the differentiable leaf; pattern static), a BCOO/BCSR with
        concrete indices, ``fam(θ)`` for a ``lo.AffineSparse`` family, a dense (n, n) array or
        ``lo.Dense``, ``lo.Diagonal``, ``lo.Identity``, ``c * B``, ``B + LowRank/RankOne``
        (Woodbury over B's solve), or any other operator whose products are jax-traceable
        (``lo.MatrixFree``: solved by jax's CG/GMRES/BiCGStab).
    b : array (n,) or (n, k)
    alg : solvers algorithm or name, optional
        Sparse on the CPU: anything ``solvers`` offers (``sv.LU()``, ``sv.Cholesky()``,
        ``sv.CG(rtol=..., precond=sv.AMG())``, ``sv.GMRES(...)``, ``sv.Auto()`` — the default).
        Dense: ``sv.LU()`` / ``sv.Cholesky()``. Matrix-free: ``sv.CG``/``sv.GMRES``/
        ``sv.BiCGStab`` (precond None or ``sv.Jacobi()``). Gradients are as accurate as the
        solves: give iterative methods a tight ``rtol``.
    hermitian, posdef : bool, optional
        Hints for ``sv.Auto`` (posdef → Cholesky / CG), as in ``solvers.LinearProblem``.

    Returns
    -------
    u : jax array of shape b.shape and dtype ``result_type(A, b)``.

    Raises
    ------
    ShapeError
        A not square, or b not of shape (n,) / (n, k) (at trace time).
    ValueError, TypeError
        An unknown algorithm name or object; A or b that is not an array.
    BackendNotSupported
        An algorithm the chosen path does not have (a direct method for a matrix-free
        operator, AMG/ILU preconditioning inside jax's Krylov loop).
    solvers.SingularMatrixError, solvers.NotHermitianError, solvers.NonFiniteInputError,
    solvers.ConvergenceError, solvers.SolveError
        Eager: raised as in ``solvers``. Under ``jax.jit``: a ``JaxRuntimeError`` whose first
        line is ``FAILED_PRECONDITION: solvers.SingularMatrixError: ...`` (or the other name).

    Notes
    -----
    Cost: one factorization per linearization point (sparse CPU: ``solvers.init`` on the host;
    dense: one LU in XLA), then per solve two triangular solves. ``grad``/``vjp``: + one
    transpose solve with the same factors and an O(nnz·k) SDDMM. ``jvp``/``jacfwd``: + one solve
    per tangent (vmapped tangents share one call). Adjoint (JAX convention): b̄ = A⁻ᵀū,
    Ā = −b̄ uᵀ, sampled on A's pattern when A is sparse.

    Sparse matrices on a GPU are solved on the device by cuSOLVER, which keeps no factors: every
    solve (and every tangent/cotangent solve) factorizes again. ``vmap`` over A makes one
    factorization per batch member; over b only, one for all.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> A = jnp.array([[2.0, 1.0], [0.0, 4.0]])
    >>> b = jnp.array([1.0, 2.0])
    >>> jax.grad(lambda b: solve(A, b).sum())(b).tolist()       # b̄ = A⁻ᵀ 1
    [0.5, 0.125]
    >>> jax.grad(lambda A: solve(A, b).sum())(A).tolist()       # Ā = −b̄ uᵀ
    [[-0.125, -0.25], [-0.03125, -0.0625]]
    >>> jax.vmap(lambda c: solve(A, c))(jnp.eye(2)).tolist()    # rows: A⁻¹ e₀, A⁻¹ e₁
    [[0.5, 0.0], [-0.125, 0.25]]

    A singular matrix fails with a named error, also under jit:

    >>> solve(jnp.array([[1.0, 2.0], [2.0, 4.0]]), b)
    Traceback (most recent call last):
    ...
    solvers._errors.SingularMatrixError: dense LU (adjoints.jax): the matrix is singular ...
    """
    alg = _resolve(alg)
    b = _as_jax(b, "b")
    op = _coerce(A)
    shape = tuple(op.shape)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ShapeError(f"solve needs a square A, got A.shape={shape}")
    if b.ndim not in (1, 2) or b.shape[0] != shape[0]:
        raise ShapeError(f"solve needs b of shape (n,) or (n, k) with n={shape[0]}: "
                         f"A.shape={shape}, b.shape={tuple(b.shape)}")
    dtype = jnp.result_type(_dtype_of(op), b.dtype)
    return _factor(op, dtype, alg, hermitian, posdef)(b.astype(dtype))


def _coerce(A):
    """A dense jax array, or a linops operator (BCOO/BCSR and scipy sparse become lo.Sparse)."""
    if isinstance(A, lo.Dense):
        A = A.a
    if not isinstance(A, lo.LinearOperator) and _is_plain_array(A):
        return _as_jax(A, "A")
    return lo.aslinop(A)


def _dtype_of(op):
    if isinstance(op, lo.Sparse):
        return _as_jax(op.values, "A.values").dtype
    if not isinstance(op, lo.LinearOperator):
        return op.dtype
    return jax.dtypes.canonicalize_dtype(op.dtype)


def _factor(op, dtype, alg, hermitian=None, posdef=None) -> Callable:
    """b ↦ A⁻¹ b for right-hand sides in ``dtype``. The factorization (if A needs one) is made
    here, ONCE, and shared by every solve, tangent and cotangent of the returned function."""
    if not isinstance(op, lo.LinearOperator):
        return dense_factor(op, dtype, alg, posdef)
    if isinstance(op, lo.Sparse):
        values = _as_jax(op.values, "A.values")
        if _platform(values) == "gpu":
            return gpu_sparse_factor(values, op.pattern, dtype)
        spec = _host.Spec(op.pattern, alg, hermitian, posdef)
        site = _host.Site()
        keys = _host.factorize(values, spec, site)
        return lambda b: _host.host_solve(keys, values, b, spec, site)
    if isinstance(op, lo.Dense):
        return dense_factor(_as_jax(op.a, "A"), dtype, alg, posdef)
    if isinstance(op, lo.Diagonal):
        return diagonal_factor(_as_jax(op.d, "A.d"), dtype, alg)
    if isinstance(op, lo.Identity):
        return lambda b: b
    if isinstance(op, lo.Scaled):  # (c·B)⁻¹ = B⁻¹/c: B's factorization, c differentiable
        inner = _factor(op.A, dtype, alg, hermitian, posdef)
        c = jnp.asarray(op.c)
        return lambda b: (inner(b) / c).astype(dtype)
    parts = _split_low_rank(op)
    if parts is not None:
        return _woodbury(*parts, dtype, alg)
    # anything else is used through its products only (traceable: MatrixFree, Sum, Product...)
    return krylov_factor(op, dtype, alg, hermitian, posdef)


def _woodbury(B, U, V, dtype, alg) -> Callable:
    """(B + U Vᴴ)⁻¹ b = y − Z C⁻¹ Vᴴ y with y = B⁻¹b, Z = B⁻¹U, C = I + Vᴴ Z. B is factorized
    once (its solve serves Z and every y) and C (k×k) by one dense LU; JAX differentiates the
    formula (exact, so its derivative is the derivative of the solve)."""
    base = _factor(B, dtype, alg.base if isinstance(alg, sv.Woodbury) else alg)
    U, V = _as_jax(U, "U").astype(dtype), _as_jax(V, "V").astype(dtype)
    Z = base(U)
    Vh = jnp.conj(V).T
    small = dense_factor(jnp.eye(U.shape[1], dtype=dtype) + Vh @ Z, dtype, sv.LU(), None)

    def apply(b):
        y = base(b)
        return y - Z @ small(Vh @ y)

    return apply


def _split_low_rank(op):
    """(B, U, V) when op = B + U Vᴴ with exactly one low-rank term, else None."""
    if not isinstance(op, lo.Sum):
        return None
    low = [t for t in op.terms if isinstance(t, (lo.LowRank, lo.RankOne))]
    if len(low) != 1:
        return None
    rest = [t for t in op.terms if t is not low[0]]
    B = rest[0] if len(rest) == 1 else lo.Sum(tuple(rest))
    U, V = low[0].factors()
    return B, U, V


def _resolve(alg):
    """An algorithm object from None (Auto), a name of ``_NAMES`` or an object with setup."""
    if alg is None:
        return sv.Auto()
    if isinstance(alg, str):
        key = alg.strip().lower().replace("-", "").replace("_", "")
        if key not in _NAMES:
            raise ValueError(f"unknown algorithm {alg!r}; names: {', '.join(sorted(_NAMES))}")
        return _NAMES[key]()
    if not callable(getattr(alg, "setup", None)):
        raise TypeError(f"alg must be a solvers algorithm (sv.LU(), sv.CG(...), ...) or its name, "
                        f"got {type(alg).__name__}: {alg!r}")
    return alg


def _as_jax(x, name: str):
    """x as a jax array; integer/boolean arrays in JAX's default float (float32 without x64)."""
    try:
        x = jnp.asarray(x)
    except TypeError:
        raise TypeError(f"{name} must be an array, got {type(x).__name__}") from None
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.result_type(float))
    return x


def _is_plain_array(x) -> bool:
    """A dense array (numpy, jax, a tracer) rather than an operator or a sparse matrix."""
    if _is_jax_sparse(x) or isinstance(x, lo.LinearOperator):
        return False
    import scipy.sparse as sp

    return not sp.issparse(x) and hasattr(x, "ndim") and hasattr(x, "dtype")


def _is_jax_sparse(x) -> bool:
    return type(x).__module__.startswith("jax.experimental.sparse")


def _platform(*arrays) -> str:
    """Where the computation runs: the device of the first concrete array; for tracers (inside
    jax.jit) jax's default backend, which is where a jitted computation on them runs."""
    for x in arrays:
        try:
            return next(iter(x.devices())).platform
        except Exception:  # a tracer has no device
            continue
    return jax.default_backend()


# ----- matmul ------------------------------------------------------------------------------------
def matmul(L: Any, R: Any) -> jax.Array:
    """Y = L @ R with one operand sparse (``lo.Sparse``, BCOO/BCSR) and the other a dense jax
    array: ``matmul(A, X)`` or ``matmul(X, A)``; differentiable in both under every transform.

    Cost O(nnz·k) (gather + sorted segment-sum). Adjoint: X̄ = AᵀȲ (or ȲAᵀ), values̄ = SDDMM
    of Ȳ and X on A's pattern, O(nnz·k); never an n×n array. Dense operands on both sides
    fall back to ``jnp.matmul``.

    Parameters
    ----------
    L, R : sparse operator or dense array
        One of them ``lo.Sparse`` (jax values; the pattern static) or a BCOO/BCSR; the other a
        dense array of shape (n,) or (n, k) on the right, (n,) or (m, n) on the left.

    Returns
    -------
    Y : jax array
        Of shape (m,) / (m, k) for A @ X, (n,) / (m, n) for X @ A.

    Raises
    ------
    ShapeError
        The shapes do not chain.
    TypeError
        Both operands are sparse.

    Notes
    -----
    ``X @ A`` runs as (Aᵀ Xᵀ)ᵀ on the transposed pattern (computed once per pattern), so both
    orders are a gather and a segment sum, and both differentiate to an SDDMM on A's pattern.
    The cotangents follow JAX's convention (plain transposes, no conjugation).

    Examples
    --------
    >>> import jax, jax.numpy as jnp, scipy.sparse as sp
    >>> A = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> x = jnp.array([1.0, 2.0])
    >>> matmul(A, x).tolist(), matmul(x, A).tolist()              # A x and xᵀ A
    ([4.0, 8.0], [2.0, 9.0])
    >>> v = jnp.asarray(A.values)
    >>> jax.grad(lambda v: matmul(lo.Sparse(v, A.pattern), x).sum())(v).tolist()   # x_c
    [1.0, 2.0, 2.0]
    """
    l_sp, r_sp = _sparse_operand(L), _sparse_operand(R)
    if l_sp and r_sp:
        raise TypeError("matmul needs one dense operand; got two sparse operands "
                        f"({type(L).__name__}, {type(R).__name__})")
    if not (l_sp or r_sp):
        return jnp.matmul(_plain(L), _plain(R))
    if l_sp:
        A = lo.aslinop(L)
        X = _as_jax(R, "X")
        if X.ndim not in (1, 2) or X.shape[0] != A.shape[1]:
            raise ShapeError(f"A @ X with A.shape={A.shape} but X.shape={tuple(X.shape)}")
        return spmm(_as_jax(A.values, "A.values"), X, A.pattern, "N")
    A = lo.aslinop(R)
    X = _as_jax(L, "X")
    if X.ndim not in (1, 2) or X.shape[-1] != A.shape[0]:
        raise ShapeError(f"X @ A with X.shape={tuple(X.shape)} but A.shape={A.shape}")
    Xt = X.T if X.ndim == 2 else X  # X @ A = (Aᵀ Xᵀ)ᵀ: one primitive, trans="T"
    Y = spmm(_as_jax(A.values, "A.values"), Xt, A.pattern, "T")      # Yᵀ = Aᵀ Xᵀ
    return Y.T if X.ndim == 2 else Y


def _plain(x):
    """A Dense operator's array (for the dense-dense fallback)."""
    return x.a if isinstance(x, lo.Dense) else x


def _sparse_operand(x) -> bool:
    """``lo.Sparse`` or a jax sparse matrix: the operand whose values get an SDDMM cotangent."""
    return isinstance(x, lo.Sparse) or _is_jax_sparse(x)
