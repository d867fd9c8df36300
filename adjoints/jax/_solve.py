"""``adj.solve`` and ``adj.factorize``: the operand dispatch of the JAX front end (sparse on the
host, dense / diagonal / matrix-free / GPU sparse in XLA, Woodbury and scaled compositions) and
the counters of the host factorizations (``stats``, ``reset_stats``). See ``adjoints.jax``."""


from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

import linops as lo
import solvers as sv
from linops.internals import (ShapeError, csr_parts, dense_array, diagonal_of, ensure_jax_pytrees,
                              low_rank_split, scale_split, structure)
from solvers.internals import resolve

from . import _factor as _fac
from . import _host
from ._factor import Factorization
from ._host import Stats
from ._live import Spec
from ._solves import dense_factor, diagonal_factor, gpu_sparse_factor, krylov_factor

ensure_jax_pytrees()



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
    u : jax array of shape b.shape and dtype ``result_type(A, b)`` (JAX's promotion: a float32
        A with a float64 b is solved in float64; half precisions are solved in float32).

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
    if isinstance(A, Factorization):
        if alg is not None:
            raise TypeError("solve(F, b) uses F's own algorithm; alg must be None, got "
                            f"{alg!r}")
        return A.solve(b)
    alg = _resolve(alg)
    b = _as_jax(b, "b")
    op = _coerce(A)
    shape = tuple(op.shape)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ShapeError(f"solve needs a square A, got A.shape={shape}")
    if b.ndim not in (1, 2) or b.shape[0] != shape[0]:
        raise ShapeError(f"solve needs b of shape (n,) or (n, k) with n={shape[0]}: "
                         f"A.shape={shape}, b.shape={tuple(b.shape)}")
    dtype = working_dtype(jnp.result_type(_dtype_of(op), b.dtype))
    if b.size == 0:   # n = 0 or no columns: nothing to solve, an empty result (any path)
        return jnp.zeros(b.shape, dtype)
    return _factor(op, dtype, alg, hermitian, posdef)(b.astype(dtype))


# ----- factorize ---------------------------------------------------------------------------------
def factorize(A: Any, alg: Any = None, *, hermitian: bool | None = None,
              posdef: bool | None = None) -> Factorization:
    """F = a factorization of the sparse matrix A, as a JAX value: the twin of ``sv.init``.

    ``F.solve(b)`` (also ``adj.solve(F, b)``), ``F.solve_transpose(b)`` and
    ``F.solve_adjoint(b)`` reuse the one factorization any number of times. F is a pytree (the
    key and A's values are its leaves): close over it, carry it through ``scan``/
    ``fori_loop``/``while_loop``/``cond``, pass it into ``jax.jit``, vmap over a batch of
    matrices (one factorization per member, one symbolic analysis for all), and differentiate
    through it: every solve's tangent and cotangent is a solve with the same factors, and A's
    values get their cotangent on the pattern (an SDDMM of each solve's λ and u).

    Parameters
    ----------
    A : sparse operator
        ``lo.Sparse`` with jax values, ``fam(θ)``, or a BCOO/BCSR with concrete indices.
    alg : solvers algorithm or name, optional
        As for :func:`solve` (default ``sv.Auto()``).
    hermitian, posdef : bool, optional
        Hints for ``sv.Auto``.

    Returns
    -------
    Factorization

    Raises
    ------
    TypeError
        A is not sparse (dense and matrix-free systems: use :func:`solve`, which keeps its
        factors inside XLA).
    ShapeError
        A is not square.
    solvers.SingularMatrixError, solvers.NotHermitianError, solvers.NonFiniteInputError
        Eager: raised here. Under ``jax.jit``: a ``JaxRuntimeError`` whose first line names it.
    ExpiredFactorizationError
        (from a solve) F was made inside a jitted computation that has ended.

    Notes
    -----
    Cost: one ``solvers.init`` on the host now (eager) or when the computation runs (jit);
    then two triangular solves per right-hand side. Lifetime: eager, as long as F (or any
    array holding its key) lives; made inside ``jax.jit``, as long as that computation needs
    it. A loop that calls :func:`solve` with one matrix built outside the loop gets the same
    single factorization without this function (the factorization is made where the matrix
    is); ``factorize`` is for an eager Python loop (each eager :func:`solve` call factorizes
    anew) and for making the reuse explicit.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, scipy.sparse as sp
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> reset_stats()
    >>> F = factorize(K)
    >>> u = jnp.array([1.0, 2.0])
    >>> for _ in range(3):                     # an eager loop: one factorization for all steps
    ...     u = solve(F, u)
    >>> u.tolist(), stats().factorizations
    ([0.015625, 0.03125], 1)
    >>> step = lambda u, _: (F.solve(u), None)
    >>> jax.lax.scan(step, jnp.array([1.0, 2.0]), None, length=3)[0].tolist()
    [0.015625, 0.03125]
    """
    if isinstance(A, Factorization):
        if alg is not None or hermitian is not None or posdef is not None:
            raise TypeError(f"factorize(F) of a Factorization returns F itself, with its own "
                            f"algorithm ({A.spec.alg!r}); alg, hermitian and posdef must be None "
                            f"(got alg={alg!r}, hermitian={hermitian!r}, posdef={posdef!r}): "
                            f"to factorize with another algorithm, pass the matrix")
        return A
    alg = _resolve(alg)
    op = _coerce(A)
    parts = csr_parts(op) if isinstance(op, lo.LinearOperator) else None
    if parts is None:
        raise TypeError(f"factorize needs a sparse matrix (lo.Sparse, fam(θ), BCOO/BCSR), got "
                        f"{type(op).__name__}; dense, diagonal and matrix-free systems keep "
                        f"their factors inside XLA: call adj.solve(A, b)")
    shape = tuple(op.shape)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ShapeError(f"factorize needs a square A, got A.shape={shape}")
    raw, pattern = parts
    values = _as_jax(raw, "A.values")
    if _platform(values) == "gpu":
        raise sv.BackendNotSupported("factorize keeps host factors (CPU); on a GPU call "
                                     "adj.solve(A, b), which solves on the device")
    values = values.astype(working_dtype(values.dtype))
    spec = Spec(pattern, alg, hermitian, posdef, auto=isinstance(alg, sv.Auto))
    return _fac.make(values, spec, raw)


def _coerce(A):
    """A dense jax array, or a linops operator (BCOO/BCSR and scipy sparse become lo.Sparse)."""
    if isinstance(A, lo.LinearOperator) and dense_array(A) is not None:
        A = dense_array(A)
    if not isinstance(A, lo.LinearOperator) and _is_plain_array(A):
        return _as_jax(A, "A")
    return lo.aslinop(A)   # BCOO/BCSR: concrete indices, JAX's padding entries dropped


def _dtype_of(op):
    if not isinstance(op, lo.LinearOperator):
        return op.dtype
    parts = csr_parts(op)
    if parts is not None:
        return _as_jax(parts[0], "A.values").dtype
    return jax.dtypes.canonicalize_dtype(op.dtype)


def _factor(op, dtype, alg, hermitian=None, posdef=None) -> Callable:
    """b ↦ A⁻¹ b for right-hand sides in ``dtype``. The factorization (if A needs one) is made
    here, ONCE, and shared by every solve, tangent and cotangent of the returned function."""
    if not isinstance(op, lo.LinearOperator):
        return dense_factor(op, dtype, alg, posdef)
    kind = structure(op)
    if kind == "sparse":
        raw, pattern = csr_parts(op)
        values = _as_jax(raw, "A.values")
        if _platform(values) == "gpu":
            return gpu_sparse_factor(values, pattern, dtype)
        # JAX's promotion: a float32 A with a float64 b is factorized in float64 (a real A
        # stays real for a complex b: its factors solve the real and imaginary parts)
        values = values.astype(jnp.promote_types(values.dtype, jnp.finfo(dtype).dtype))
        spec = Spec(pattern, alg, hermitian, posdef, auto=isinstance(alg, sv.Auto))
        F = _fac.make(values, spec, raw)   # made where the values are: once per values
        return F.solve
    if kind == "dense":
        return dense_factor(_as_jax(dense_array(op), "A"), dtype, alg, posdef)
    if kind == "diagonal":
        d = diagonal_of(op)
        return (lambda b: b) if d is None else diagonal_factor(_as_jax(d, "A.d"), dtype, alg)
    scaled = scale_split(op)
    if scaled is not None:  # (c·B)⁻¹ = B⁻¹/c: B's factorization, c differentiable
        c, B = scaled
        inner = _factor(B, dtype, alg, hermitian, posdef)
        c = jnp.asarray(c)
        return lambda b: (inner(b) / c).astype(dtype)
    if kind == "lowrank":
        return _woodbury(*low_rank_split(op), dtype, alg)
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


def working_dtype(dtype):
    """The dtype solves run and answer in: ``dtype`` (JAX's promotion of A's and b's), half
    precisions (float16, bfloat16) raised to float32 as ``solvers`` works them."""
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.inexact) and jnp.finfo(dtype).bits < 32:
        return jnp.dtype(jnp.float32)
    return dtype


def _resolve(alg):
    """An algorithm object from None (Auto), a name of an algorithm the registry marks as
    having a JAX path, or an algorithm object (``solvers.internals.resolve``)."""
    return resolve(alg, jax=True)


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
