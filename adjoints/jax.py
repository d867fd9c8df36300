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

__all__ = ["solve", "matmul", "stats", "reset_stats", "Stats"]

_NAMES = {"auto": sv.Auto, "lu": sv.LU, "cholesky": sv.Cholesky, "cg": sv.CG, "gmres": sv.GMRES,
          "bicgstab": sv.BiCGStab, "woodbury": sv.Woodbury}


def stats() -> Stats:
    """Counters of the host factorizations made by :func:`solve` (a snapshot, also valid after
    ``jax.jit`` runs): ``factorizations``, ``forward_solves``, ``transpose_solves``, ``misses``
    (refactorizations by a consumer that found none), ``live`` (alive now), ``peak_live``.

    >>> reset_stats(); stats().factorizations
    0
    """
    return _host.stats()


def reset_stats() -> None:
    """Zero the counters of :func:`stats`."""
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

    Cost: one factorization per linearization point (sparse CPU: ``solvers.init`` on the host;
    dense: one LU in XLA), then per solve two triangular solves. ``grad``/``vjp``: + one
    transpose solve with the same factors and an O(nnz·k) SDDMM. ``jvp``/``jacfwd``: + one solve
    per tangent (vmapped tangents share one call). Adjoint (JAX convention): b̄ = A⁻ᵀū,
    Ā = −b̄ uᵀ, sampled on A's pattern when A is sparse.

    >>> import jax, jax.numpy as jnp
    >>> A = jnp.array([[4.0, 1.0], [2.0, 3.0]])
    >>> jax.grad(lambda b: solve(A, b).sum())(jnp.array([1.0, 2.0])).round(3).tolist()
    [0.1, 0.3]
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
    if isinstance(op, lo.Scaled):
        inner = _factor(op.A, dtype, alg, hermitian, posdef)
        c = jnp.asarray(op.c)
        return lambda b: (inner(b) / c).astype(dtype)
    parts = _split_low_rank(op)
    if parts is not None:
        return _woodbury(*parts, dtype, alg)
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
    try:
        x = jnp.asarray(x)
    except TypeError:
        raise TypeError(f"{name} must be an array, got {type(x).__name__}") from None
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.result_type(float))
    return x


def _is_plain_array(x) -> bool:
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

    >>> import jax.numpy as jnp, scipy.sparse as sp
    >>> A = lo.Sparse.from_scipy(sp.eye(2, format="csr"))
    >>> matmul(A, jnp.array([1.0, 2.0])).tolist()
    [1.0, 2.0]
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
    Xt = X.T if X.ndim == 2 else X
    Y = spmm(_as_jax(A.values, "A.values"), Xt, A.pattern, "T")      # Yᵀ = Aᵀ Xᵀ
    return Y.T if X.ndim == 2 else Y


def _plain(x):
    return x.a if isinstance(x, lo.Dense) else x


def _sparse_operand(x) -> bool:
    return isinstance(x, lo.Sparse) or _is_jax_sparse(x)
