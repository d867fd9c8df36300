"""JAX: eigenpairs of a Hermitian sparse A, or of the pencil K v = λ M v, under ``grad``,
``jvp``, ``vmap`` and ``jit``.

A ``jax.custom_jvp`` whose primal is one host computation (``solvers.eigsh``: one
factorization of K − σM, through ``jax.pure_callback``) and whose tangent is written in jnp,
linear in the tangents of K's and M's values, so JAX transposes it for reverse mode:

- dλᵢ = Re vᵢᴴ (dK − λᵢ dM) vᵢ (one O(nnz·k) product each, no solve);
- dvᵢ = Σ_{j≠i} vⱼ vⱼᴴ(dK − λᵢdM)vᵢ/(λᵢ − λⱼ) − ½ vᵢ (vᵢᴴ dM vᵢ) + zᵢ, with zᵢ the projected
  solve (K − λᵢM) z = −Πᴴ(dK − λᵢdM)vᵢ on the M-complement of V (Π = I − VVᴴM), as a
  ``jax.lax.custom_linear_solve`` (its transpose is the same Hermitian solve).

Degenerate eigenvalues (see ``adjoints.eigsh_pullback``): by default any cluster among the k
eigenvalues, or a last eigenvalue equal to the next one not computed, makes the derivative
raise :class:`adjoints.DegenerateEigenvalueError` (a runtime error under jit, named in its
first line): a custom JVP cannot know which outputs f uses, so it refuses rather than return a
basis-dependent number. ``degenerate='invariant'`` gives the derivatives of functions invariant
on each cluster's subspace (cluster-mean dλ, the gauge-free dV): exact for the cluster's sum,
its projector, and any eigenpair outside clusters.

Only public ``solvers``/``adjoints`` functions are used (the projected solve is
``adjoints._eigsh.projected_solve``): each eigenvector tangent/cotangent solve factorizes
K − σM once more on the host; eigenvalue derivatives need none.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

import linops as lo
import solvers as sv
from linops.internals import csr_parts, dense_array
from solvers.internals import shifted

from .._eigsh import DegenerateEigenvalueError, clusters, projected_solve

_MODES = ("raise", "invariant")


def eigsh(A, k: int, sigma: float, alg=None, *, M=None, rtol: float = 1e-12,
          degenerate: str = "raise", gap_tol: float = 1e-8):
    """k eigenpairs of a Hermitian A (or of K v = λ M v) nearest ``sigma``, differentiable.

    Parameters
    ----------
    A : lo.Sparse (jax values; ``fam(θ)``) — Hermitian; a dense jax array goes to
        ``jnp.linalg.eigh`` (with M: on the Cholesky-transformed pencil), and then ``sigma``
        picks the k eigenvalues nearest it
    k : int
    sigma : float
        The shift; K − σM is factorized once on the host (``alg``).
    alg : solvers algorithm, optional
    M : lo.Sparse or dense jax array, optional
        The mass matrix, Hermitian positive definite (checked by ``solvers.eigsh``); its values
        may be traced too (∂/∂ρ of a density family).
    rtol : float
        Of the projected solves of the eigenvector tangents.
    degenerate : {'raise', 'invariant'}
        See the module notes.
    gap_tol : float
        Eigenvalues within ``gap_tol``·max(|λ|, |σ|) form a cluster.

    Returns
    -------
    (w, V) : jax arrays (k,) ascending, (n, k); V M-orthonormal with M

    Raises
    ------
    adjoints.DegenerateEigenvalueError
        When differentiating through a cluster (see ``degenerate``); a runtime error under jit.
    solvers.NotPositiveDefiniteError, SingularMatrixError, NotHermitianError
        A bad M or A, as in ``solvers.eigsh``.

    Notes
    -----
    Cost: the primal is one host ``sv.eigsh`` (one factorization); dλ one product; dV one
    host factorization of K − σM per tangent or cotangent solve plus one preconditioned GMRES
    per column. ``vmap`` runs the host computations one batch member at a time.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpy as np, linops as lo, adjoints.jax as adj
    >>> fK, fM = lo.testing.membrane_families(6)
    >>> rho = jnp.ones(fM.n_params)
    >>> K = fK(np.ones(fK.n_params))
    >>> lam0 = lambda r: adj.eigsh(K, 1, sigma=0.0, M=fM(r))[0][0]
    >>> g = jax.grad(lam0)(rho)                      # ∂λ₀/∂ρₑ = −λ₀ v₀ᴴ Mₑ v₀ < 0
    >>> bool(jnp.all(g < 0)), bool(abs(float(g.sum()) + float(lam0(rho))) < 1e-4)
    (True, True)
    """
    if degenerate not in _MODES:
        raise ValueError(f"degenerate must be one of {_MODES}, got {degenerate!r}")
    parts = csr_parts(A)
    mparts = None if M is None else csr_parts(M)
    if parts is None:
        return _dense_eigsh(A, k, sigma, M)
    if M is not None and mparts is None:
        raise TypeError(f"adj.eigsh: A is sparse, so M must be sparse too (lo.Sparse, a "
                        f"family's fM(ρ)); got {type(M).__name__}")
    v, P = parts
    if M is None:
        vm, PM = jnp.zeros((0,), jnp.asarray(v).dtype), None
    else:
        vm, PM = mparts
    opts = (int(k), float(sigma), alg, float(rtol), degenerate, float(gap_tol))
    w, V, _ = _eig(jnp.asarray(v), jnp.asarray(vm), P, PM, opts)
    return w, V


def _dense(X):
    a = dense_array(X) if isinstance(X, lo.LinearOperator) else None
    return jnp.asarray(X if a is None else a)


def _dense_eigsh(A, k, sigma, M):
    a = _dense(A)
    if M is None:
        w, V = jnp.linalg.eigh(a)
    else:
        L = jnp.linalg.cholesky(_dense(M))
        C = jax.scipy.linalg.solve_triangular(L, a, lower=True)
        C = jax.scipy.linalg.solve_triangular(L, jnp.conj(C).T, lower=True)   # L⁻¹ A L⁻ᴴ
        w, Y = jnp.linalg.eigh((C + jnp.conj(C).T) / 2)
        V = jax.scipy.linalg.solve_triangular(jnp.conj(L).T, Y, lower=False)
    idx = jnp.sort(jnp.argsort(jnp.abs(w - sigma))[:k])
    return w[idx], V[:, idx]


def _real(dtype):
    return jnp.zeros((), dtype).real.dtype


def _host_eigs(vals, mvals, P, PM, k, sigma, alg):
    M = None if PM is None else lo.Sparse(np.asarray(mvals), PM)
    return sv.eigsh(lo.Sparse(np.asarray(vals), P), k, sigma=sigma, alg=alg, M=M)


@partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def _eig(v, vm, P, PM, opts):
    k, sigma, alg = opts[:3]
    n = P.shape[0]
    dt = jnp.result_type(v.dtype, vm.dtype)
    rd = _real(dt)

    def host(vals, mvals):
        e = _host_eigs(vals, mvals, P, PM, k, sigma, alg)
        beyond = np.nan if e.beyond is None else e.beyond
        return (np.asarray(e.values, rd), np.asarray(e.vectors).astype(dt),
                np.asarray(beyond, rd))

    return jax.pure_callback(host, (jax.ShapeDtypeStruct((k,), rd),
                                    jax.ShapeDtypeStruct((n, k), dt),
                                    jax.ShapeDtypeStruct((), rd)), v, vm,
                             vmap_method="sequential")


def _spmm(vals, P, X):
    """A X for A = Sparse(vals, P), in jnp (linear in vals and in X)."""
    return jax.ops.segment_sum(vals[:, None] * X[P.indices], P.rows, P.shape[0])


def _check_host(w, beyond, V, k, sigma, degenerate, gap_tol):
    """1.0, or DegenerateEigenvalueError naming the cluster the derivative would cross."""
    w = np.asarray(w, dtype=float)
    b = float(beyond)
    b = None if np.isnan(b) else b
    groups = clusters(w, b, sigma, gap_tol)
    scale = max(float(np.abs(w).max()), abs(b or 0.0), abs(sigma), 1e-300)
    for C in groups:
        vals = ", ".join(f"{w[i]:.12g}" for i in C)
        names = ", ".join(str(int(i)) for i in C)
        if b is not None and np.min(np.abs(w[C] - b)) <= gap_tol * scale:
            raise DegenerateEigenvalueError(
                f"adj.eigsh: eigenvalue(s) {names} ({vals}) equal the next eigenvalue, "
                f"{b:.12g}, which was not computed: the cluster continues beyond k={k}; ask "
                f"for more eigenpairs so that the whole cluster is inside", C, w[C])
        if len(C) > 1 and degenerate == "raise":
            raise DegenerateEigenvalueError(
                f"adj.eigsh: eigenvalues {names} coincide ({vals}): their individual "
                f"derivatives do not exist; pass degenerate='invariant' for functions invariant "
                f"on each cluster (its sum, its projector, eigenpairs outside clusters)", C, w[C])
    return np.ones((), np.asarray(V).real.dtype)


@_eig.defjvp
def _eig_jvp(P, PM, opts, primals, tangents):
    k, sigma, alg, rtol, degenerate, gap_tol = opts
    (v, vm), (dv, dvm) = primals, tangents
    w, V, beyond = _eig(v, vm, P, PM, opts)
    rd = w.dtype
    ok = jax.pure_callback(partial(_check_host, k=k, sigma=sigma, degenerate=degenerate,
                                   gap_tol=gap_tol), jax.ShapeDtypeStruct((), rd), w, beyond, V,
                           vmap_method="sequential")
    V0, w0 = jax.lax.stop_gradient(V), jax.lax.stop_gradient(w)
    v0, vm0 = jax.lax.stop_gradient(v), jax.lax.stop_gradient(vm)
    has_m = PM is not None
    dKV = _spmm(dv, P, V0)
    dMV = _spmm(dvm, PM, V0) if has_m else jnp.zeros_like(V0)
    R = dKV - dMV * w0[None, :]                          # (dK − λᵢ dM) vᵢ, column i
    G = jnp.conj(V0).T @ R                               # G[j, i] = vⱼᴴ(dK − λᵢdM)vᵢ
    GM = jnp.conj(V0).T @ dMV                            # vⱼᴴ dM vᵢ
    scale = jnp.maximum(jnp.max(jnp.abs(w0)), jnp.abs(sigma))
    cut = jnp.concatenate([jnp.zeros((1,), jnp.int32),
                           (jnp.diff(w0) > gap_tol * scale).astype(jnp.int32)])
    ids = jnp.cumsum(cut)
    same = ids[:, None] == ids[None, :]
    diag = jnp.real(jnp.diagonal(G))
    dw = (same.astype(rd) @ diag) / jnp.sum(same, axis=1).astype(rd)     # cluster means
    gap = w0[None, :] - w0[:, None]                      # gap[j, i] = λᵢ − λⱼ
    F = jnp.where(same, 0.0, 1.0 / jnp.where(same, 1.0, gap))
    dV_in = V0 @ (G * F) - 0.5 * (V0 @ jnp.where(same, GM, 0.0))
    MV0 = _spmm(vm0, PM, V0) if has_m else V0

    def proj(X):                                         # Π X = X − V Vᴴ M X
        MX = _spmm(vm0, PM, X) if has_m else X
        return X - V0 @ (jnp.conj(V0).T @ MX)

    def projh(Y):                                        # Πᴴ Y = Y − M V Vᴴ Y
        return Y - MV0 @ (jnp.conj(V0).T @ Y)

    def matvec(X):                                       # Πᴴ (K − λᵢ M) Π, column i
        QX = proj(X)
        MQX = _spmm(vm0, PM, QX) if has_m else QX
        return projh(_spmm(v0, P, QX) - MQX * w0[None, :])

    def host_solve(vals, mvals, lam, Vh, B):
        K = lo.Sparse(np.asarray(vals), P)
        M = None if PM is None else lo.Sparse(np.asarray(mvals), PM)
        cache = sv.init(sv.LinearProblem(shifted(K, sigma, M), hermitian=True), alg)
        op = cache.as_operator()
        Vh, B = np.asarray(Vh), np.asarray(B)
        MVh = Vh if M is None else np.asarray(M @ Vh)
        X = np.zeros_like(B)
        for i in range(B.shape[1]):
            b = B[:, i] - MVh @ (Vh.conj().T @ B[:, i])  # a cotangent need not be ⊥ V
            X[:, i] = projected_solve(K, M, Vh, MVh, op, float(lam[i]), b, rtol, 200, i)
        return X.astype(B.dtype)

    def solve(_, B):
        return jax.pure_callback(host_solve, jax.ShapeDtypeStruct(B.shape, B.dtype), v0, vm0,
                                 w0, V0, B, vmap_method="sequential")

    def transpose_solve(_, B):  # the solve is Hermitian: its transpose is conj ∘ solve ∘ conj
        return jnp.conj(solve(None, jnp.conj(B)))

    X = jax.lax.custom_linear_solve(matvec, -projh(R), solve, transpose_solve)
    return (w, V, beyond), (dw * ok, (dV_in + X) * ok, jnp.zeros_like(beyond))
