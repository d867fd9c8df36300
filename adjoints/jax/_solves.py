"""Solves that live entirely inside XLA, through ``jax.lax.custom_linear_solve``.

Dense LU/Cholesky (jax.scipy factors), diagonal, matrix-free Krylov (jax.scipy.sparse.linalg)
and the GPU sparse branch (cuSOLVER ``spsolve``). ``custom_linear_solve`` gets the matvec
(differentiable in every array the operator holds), a solve and a transpose solve that close
over the factors; JAX derives jvp, vjp, vmap and every higher order from it, and each tangent or
cotangent solve reuses the SAME factors, whose lifetime XLA manages (they are ordinary
intermediate buffers). Failures go through :mod:`adjoints.jax._errors`: named exceptions when
eager, a first-line message under jit, never a silent Inf/NaN. Cost of the checks: O(n·k)
reductions per solve; on a GPU each check is also a host callback (a small device-to-host copy
of the status and a synchronisation point).

Each ``*_factor`` returns ``b ↦ A⁻¹ b``. The factorization is made when the ``*_factor`` function
runs (once per trace), and ``custom_linear_solve`` closes over it, so the same factors serve
the forward solve and every tangent and cotangent solve of the returned function.

The checks use ``solvers``' thresholds (``rcond_tol``, the Hermitian tolerance) so that the
same matrix is refused, or accepted, on both paths.

>>> import jax.numpy as jnp, solvers as sv
>>> solve = dense_factor(jnp.array([[2.0, 1.0], [0.0, 4.0]]), jnp.float32, sv.LU(), None)
>>> solve(jnp.array([1.0, 2.0], jnp.float32)).tolist()
[0.25, 0.5]
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

import linops as lo
import solvers as sv
from solvers.internals import rcond_tol

from ._errors import guard, register_message
from ._errors import _MESSAGES
from ._spmm import spmm

__all__ = ["dense_factor", "diagonal_factor", "krylov_factor", "gpu_sparse_factor"]

_SINGULAR = register_message(
    sv.SingularMatrixError,
    "{what} (adjoints.jax): the matrix is singular to working precision: pivot {0} is {1:.3g} "
    "while the largest is {2:.3g} (ratio {3:.3g} <= pivot_rtol={4:.3g}). Check boundary "
    "conditions (a pure-Neumann problem needs one fixed dof) or regularise; pivot_rtol=0 "
    "disables this check")
_NOT_PD = register_message(
    sv.NotPositiveDefiniteError,
    "Cholesky (adjoints.jax): the matrix is not positive definite (the factorization broke down "
    "at pivot {0}): it is singular or indefinite; use LU (alg=sv.LU()) for indefinite matrices")
_NOT_HERM = register_message(
    sv.NotHermitianError,
    "Cholesky (adjoints.jax) needs a Hermitian matrix, but max|A - Aᴴ| = {0:.3g} at ({1}, {2}) "
    "(max|A| = {3:.3g}); use sv.LU()")
_NONFINITE_A = register_message(
    sv.NonFiniteInputError,
    "A contains {2} at index ({0}, {1}); NaN/Inf in the matrix (adjoints.jax checks every solve)")
_NONFINITE_D = register_message(
    sv.NonFiniteInputError, "A contains {1} at diagonal entry {0} (adjoints.jax)")
_NONFINITE_B = register_message(
    sv.NonFiniteInputError,
    "b contains {2} at index ({0}, {1}) (column 0 for a vector b); NaN/Inf in the right-hand side")
_NONFINITE_CT = register_message(
    sv.NonFiniteInputError,
    "the cotangent flowing back into this solve contains {2} at index ({0}, {1}) (column 0 "
    "for a vector); NaN/Inf in the gradient of what follows the solve")
_NONFINITE_X = register_message(
    sv.SolveError, "the solve produced NaN/Inf at index ({0}, {1}) (adjoints.jax); "
    + sv.Status.NONFINITE.message)
_NO_CONVERGENCE = register_message(
    sv.ConvergenceError,
    "{method} (jax.scipy.sparse.linalg) did not converge: relative residual {1:.3g} of column "
    "{0} > rtol={2:.3g} (true residual ‖b − Ax‖) after at most {3} iterations per run and "
    "restarts from the last iterate; " + sv.Status.MAX_ITERATIONS.message)
RESTARTS = 2        # restarts from the last iterate when the true residual is above tol
ATTAINABLE = 10.0   # rounding-level residual: c·√n·eps·(‖Ax‖ + ‖b‖), as solvers' c


def _msg(template_id: int, **fmt) -> int:
    """A static message with some fields filled at trace time (e.g. the algorithm's name).

    Only the named fields are filled; the positional ``{0}``... stay for the run-time numbers.
    """
    cls, text, _ = _MESSAGES[template_id]
    return register_message(cls, text.replace("{what}", fmt.get("what", "{what}"))
                            .replace("{method}", fmt.get("method", "{method}")))


def _first_bad(ok, x, template: int):
    """(status, info) for the first False in ``ok`` (2-D view): info = (row, col, value)."""
    # computed whether or not anything is bad: under jit there is no branch, only a status
    ok2 = ok.reshape(ok.shape[0], -1)
    bad = ~ok2
    k = jnp.argmax(bad.reshape(-1))
    i, j = jnp.divmod(k, ok2.shape[1])
    v = x.reshape(-1)[k]
    # info is a real array: report the component (real or imaginary part) that is not finite
    val = jnp.where(jnp.isfinite(jnp.real(v)), jnp.imag(v), jnp.real(v))  # the bad component
    real = val.dtype
    info = jnp.stack([i.astype(real), j.astype(real), val])
    return jnp.where(jnp.any(bad), template, 0), info


def _pivot_status(d, rtol, template: int):
    """Status/info of solvers' pivot rule: singular when min|d| <= rtol·max|d| (or NaN/Inf)."""
    a = jnp.abs(d)
    k = jnp.argmin(a)
    dmin, dmax = a[k], jnp.max(a)
    bad = (dmin <= rtol * dmax) | ~jnp.isfinite(dmax) | jnp.any(jnp.isnan(a))
    ratio = jnp.where(dmax > 0, dmin / jnp.where(dmax > 0, dmax, 1), 0)
    info = jnp.stack([k.astype(a.dtype), dmin, dmax, ratio, jnp.asarray(rtol, a.dtype)])
    return jnp.where(bad, template, 0), info


def check_rhs(b, cotangent: bool = False):
    """b, guarded: NonFiniteInputError naming its first NaN/Inf (inside the solve functions:
    custom_linear_solve never traces them for linearity). ``cotangent``: b is the cotangent a
    transpose solve receives, and the message says so."""
    st, info = _first_bad(jnp.isfinite(b), b, _NONFINITE_CT if cotangent else _NONFINITE_B)
    return guard(b, st, info)


def _finite_solution(x):
    st, info = _first_bad(jnp.isfinite(x), x, _NONFINITE_X)
    return guard(x, st, info)


def _as_2d(b):
    return b if b.ndim == 2 else b[:, None]


# ----- dense --------------------------------------------------------------------------------------
def dense_factor(a, dtype, alg, posdef: bool | None) -> Callable:
    """b ↦ a⁻¹ b with ONE jax.scipy LU (or Cholesky) factorization, made here and reused by
    every solve, tangent and cotangent of the returned function. a: (n, n); b: (n,) or (n, k)
    in ``dtype``."""
    a = a.astype(dtype)
    # as sv.Auto for dense: Cholesky when asked, or when posdef is hinted (the Hermitian check
    # below still runs: a wrong hint fails loudly here rather than falling back to LU)
    use_chol = isinstance(alg, sv.Cholesky) or (_is_auto(alg) and bool(posdef))
    rtol = getattr(alg, "pivot_rtol", None)
    rtol = rcond_tol(dtype) if rtol is None else float(rtol)
    # the factors are not differentiated: custom_linear_solve differentiates through the matvec
    ac = jax.lax.stop_gradient(a)
    st, info = _first_bad(jnp.isfinite(ac), ac, _NONFINITE_A)
    ac = guard(ac, st, info)
    if use_chol:
        if getattr(alg, "check_hermitian", True):
            diff = jnp.abs(ac - jnp.conj(ac).T)
            k = jnp.argmax(diff.reshape(-1))
            i, j = jnp.divmod(k, a.shape[0])
            scale = jnp.max(jnp.abs(ac))
            dmax = diff.reshape(-1)[k]
            tol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10
            real = jnp.real(dmax).dtype
            st = jnp.where(dmax > tol * jnp.maximum(scale, 1e-300), _NOT_HERM, 0)
            ac = guard(ac, st, jnp.stack([dmax, i.astype(real), j.astype(real), scale]))
        L = jnp.linalg.cholesky(ac)
        d = jnp.diagonal(L)
        broke = ~jnp.isfinite(d)  # jax returns NaNs where LAPACK would report "not posdef"
        st, info = _pivot_status(jnp.abs(d) ** 2, rtol, _msg(_SINGULAR, what="Cholesky"))
        info = jnp.where(jnp.any(broke), info.at[0].set(jnp.argmax(broke).astype(info.dtype)),
                         info)
        L = guard(L, jnp.where(jnp.any(broke), _NOT_PD, st), info)
        st_ = jax.scipy.linalg.solve_triangular

        def solve(_, r):
            y = st_(L, check_rhs(r), lower=True)
            return _finite_solution(st_(L, y, lower=True, trans="C"))

        def tsolve(_, r):   # Aᵀ = conj(A) for Hermitian A
            r = check_rhs(r, cotangent=True)
            return jnp.conj(solve(None, jnp.conj(r)))
    else:
        lu, piv = jax.scipy.linalg.lu_factor(ac)
        lu_solve = jax.scipy.linalg.lu_solve
        st, info = _pivot_status(jnp.diagonal(lu), rtol, _msg(_SINGULAR, what="dense LU"))
        lu = guard(lu, st, info)

        def solve(_, r):
            return _finite_solution(lu_solve((lu, piv), check_rhs(r), trans=0))

        def tsolve(_, r):
            return _finite_solution(lu_solve((lu, piv), check_rhs(r, True), trans=1))

    return lambda b: jax.lax.custom_linear_solve(lambda x: a @ x, b, solve, tsolve)


def _is_auto(alg) -> bool:
    """No algorithm given, or ``sv.Auto``: the path decides."""
    return alg is None or isinstance(alg, sv.Auto)


# ----- diagonal ----------------------------------------------------------------------------------
def diagonal_factor(d, dtype, alg) -> Callable:
    """b ↦ diag(d)⁻¹ b: nothing to factorize; the singularity rule is solvers' pivot rule."""
    d = d.astype(dtype)
    dc = jax.lax.stop_gradient(d)
    st, info = _first_bad(jnp.isfinite(dc)[:, None], dc[:, None], _NONFINITE_D)
    dc = guard(dc, st, info[jnp.array([0, 2])])
    rtol = getattr(alg, "pivot_rtol", None)
    rtol = rcond_tol(dtype) if rtol is None else float(rtol)
    st, info = _pivot_status(dc, rtol, _msg(_SINGULAR, what="diagonal"))
    dc = guard(dc, st, info)

    def apply(b):
        shape = (-1,) + (1,) * (b.ndim - 1)

        def solve(_, r):
            return check_rhs(r) / dc.reshape(shape)

        def tsolve(_, r):   # a diagonal is its own transpose: the same division
            return check_rhs(r, cotangent=True) / dc.reshape(shape)

        return jax.lax.custom_linear_solve(lambda x: d.reshape(shape) * x, b, solve, tsolve)

    return apply


# ----- matrix-free: jax Krylov --------------------------------------------------------------------
def krylov_factor(A: lo.LinearOperator, dtype, alg, hermitian, posdef) -> Callable:
    """b ↦ A⁻¹ b by jax.scipy.sparse.linalg (CG, GMRES or BiCGStab), column by column (vmap).
    The transpose solve runs the same method on JAX's transpose of the matvec.

    Acceptance is solvers' rule, without slack: the method runs with its own stopping test at
    rtol, then the TRUE residual r = ‖b − A x‖ of every column decides. r > tol =
    max(rtol‖b‖, atol): restarted from x with a tighter internal tolerance (at most
    ``RESTARTS`` times, each at most ``maxiter`` iterations, and only while a restart halves
    r). Accepted when r ≤ tol, or when r is at the rounding level of the arithmetic
    (r ≤ c·√n·eps·(‖Ax‖ + ‖b‖) and r ≤ √eps‖b‖: no iterate can do better); otherwise
    ConvergenceError naming the residual."""
    # optional: jax (the jax extra)
    import jax.scipy.sparse.linalg as jspl

    if _is_auto(alg):
        alg = sv.CG() if (hermitian and posdef) else sv.GMRES()
    method = {sv.CG: "cg", sv.GMRES: "gmres", sv.BiCGStab: "bicgstab"}.get(type(alg))
    if method is None:
        raise sv.BackendNotSupported(
            f"adjoints.jax.solve with a {type(A).__name__} operator needs a Krylov method that "
            f"jax has: sv.CG(), sv.GMRES() or sv.BiCGStab(); got {alg!r} (direct methods need "
            f"an assembled matrix: lo.Sparse, a dense array or lo.Diagonal)")
    single = np.dtype(dtype) in (np.float32, np.complex64)
    rtol = alg.rtol if alg.rtol is not None else (1e-5 if single else 1e-8)
    atol = float(alg.atol)
    n = A.shape[0]
    maxiter = alg.maxiter if alg.maxiter is not None else min(10 * n, 20_000)
    fn = getattr(jspl, method)
    kw = dict(tol=rtol, atol=atol, maxiter=maxiter)
    if method == "gmres":
        kw["restart"] = min(alg.restart, n)
    precond = _jacobi(A, alg)
    msg = _msg(_NO_CONVERGENCE, method=type(alg).__name__)

    def matvec(x):
        return (A @ x).astype(dtype)

    def matvec_t(y):   # JAX's transpose of the matvec (never conjugated), on vectors
        # derived by JAX from the traced product: a matrix-free operator needs no Aᵀ of its own
        return jax.linear_transpose(matvec, jnp.zeros((n,), dtype))(y)[0]

    eps = float(np.finfo(np.dtype(dtype)).eps)

    def run(mv, r, M, cotangent=False):
        R = _as_2d(check_rhs(r, cotangent))
        bn = jnp.linalg.norm(R, axis=0)
        tol = jnp.maximum(rtol * bn, atol)
        mvc = jax.vmap(mv, in_axes=1, out_axes=1)

        def sweep(X0, inner):
            def one(c, x0, t):
                return fn(mv, c, x0=x0, M=M, **{**kw, "tol": t})[0]

            return jax.vmap(one, in_axes=(1, 1, 0), out_axes=1)(R, X0, inner)

        def residual(X):
            AX = mvc(X)
            return jnp.linalg.norm(R - AX, axis=0), jnp.linalg.norm(AX, axis=0)

        # jax's Krylov solvers report no convergence flag: the true residual is the evidence
        inner0 = jnp.full(bn.shape, rtol, bn.dtype)
        X = sweep(jnp.zeros_like(R), inner0)
        res, ax = residual(X)

        def again(state):
            X, res, _, inner, i = state
            inner = jnp.maximum(inner * 0.5 * tol / jnp.maximum(res, tol), eps)
            X2 = sweep(X, jnp.where(res > tol, inner, inner0))
            res2, ax2 = residual(X2)
            better = res2 < res
            X = jnp.where(better[None], X2, X)
            return (X, jnp.minimum(res, res2), res2 <= 0.5 * res, inner, i + 1)

        def more(state):
            _, res, improved, _, i = state
            return (i < RESTARTS) & jnp.any((res > tol) & improved)

        X, res, _, _, _ = jax.lax.while_loop(
            more, again, (X, res, jnp.ones(bn.shape, bool), inner0, 0))
        ax = residual(X)[1]
        rounding = ATTAINABLE * np.sqrt(n) * eps * (ax + bn)
        ok = (res <= tol) | ((res <= rounding) & (res <= np.sqrt(eps) * bn))
        bad = ~ok
        j = jnp.argmax(bad)
        rel = res[j] / jnp.where(bn[j] > 0, bn[j], 1)
        real = rel.dtype
        info = jnp.stack([j.astype(real), rel, jnp.asarray(rtol, real),
                          jnp.asarray(maxiter, real)])
        X = guard(X, jnp.where(jnp.any(bad), msg, 0), info)
        return _finite_solution(X.reshape(r.shape))

    def solve(_, r):
        return run(matvec, r, precond)

    def tsolve(_, r):
        return run(matvec_t, r, precond, True)   # diag(Aᵀ) = diag(A): the same Jacobi scaling

    return lambda b: jax.lax.custom_linear_solve(matvec, b, solve, tsolve)


def _jacobi(A, alg):
    """The Jacobi preconditioner as a jax function, or None; others refuse (host-only)."""
    pc = getattr(alg, "precond", None)
    if pc is None:
        return None
    if not isinstance(pc, sv.Jacobi):
        raise sv.BackendNotSupported(
            f"{type(pc).__name__} preconditioning is not available inside jax's Krylov loops "
            f"(it runs on host numpy arrays); use precond=sv.Jacobi() or none, or pass an "
            f"assembled lo.Sparse (its solve runs on the host with every solvers option)")
    d = jax.lax.stop_gradient(lo.diagonal(A))
    dinv = 1 / d

    def M(v):
        return (dinv * v).astype(v.dtype)

    return M


# ----- GPU: cuSOLVER sparse QR, no host round trip ------------------------------------------------
def gpu_sparse_factor(values, pattern: lo.Pattern, dtype) -> Callable:
    """The device-resident branch for arrays on a GPU: jax's ``spsolve`` (cuSOLVER csrlsvqr).

    Cost: cuSOLVER keeps no factors, so EVERY solve is a fresh sparse QR factorization: the
    forward solve one per right-hand-side column, a gradient one more per column (the transpose
    solve on the transposed pattern), a jvp one more, a Hessian several. That is the price of
    staying on the device; the CPU branch factorizes once per linearization point. The tangent
    rules are still derived by JAX through ``custom_linear_solve``; vmap runs the batch as a
    loop (cuSOLVER has no batched sparse QR). Singular matrices surface as NaN/Inf, which the
    result check turns into an error. On a CPU the same code runs through jax's scipy
    fallback of ``spsolve`` (used by the tests).
    """
    # optional: jax (the jax extra)
    from jax.experimental.sparse.linalg import spsolve

    pt, perm = pattern.transpose()
    ind, ptr = jnp.asarray(pattern.indices, jnp.int32), jnp.asarray(pattern.indptr, jnp.int32)
    indT, ptrT = jnp.asarray(pt.indices, jnp.int32), jnp.asarray(pt.indptr, jnp.int32)
    vals = jax.lax.stop_gradient(values).astype(dtype)
    valsT = vals[perm]

    # cuSOLVER has no batched sparse QR: vmap over the solve becomes a loop over the batch
    @jax.custom_batching.custom_vmap
    def one(v, i, p, c):
        return spsolve(v, i, p, c)

    @one.def_vmap
    def _one_batched(axis_size, in_batched, v, i, p, c):
        outs = []
        for k in range(axis_size):
            pick = [x[k] if bat else x for x, bat in zip((v, i, p, c), in_batched)]
            outs.append(spsolve(*pick))
        return jnp.stack(outs), True

    def cols(v, i, p, r, cotangent=False):
        R = _as_2d(check_rhs(r, cotangent))
        X = jnp.stack([one(v, i, p, R[:, j]) for j in range(R.shape[1])], axis=1)
        return _finite_solution(X.reshape(r.shape))

    def matvec(x):
        return spmm(values.astype(dtype), x, pattern)

    return lambda b: jax.lax.custom_linear_solve(matvec, b, lambda _, r: cols(vals, ind, ptr, r),
                                                 lambda _, r: cols(valsT, indT, ptrT, r, True))
