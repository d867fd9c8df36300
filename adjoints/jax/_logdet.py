"""JAX: log-determinants, entries of the inverse and eigenpairs of sparse matrices under
``grad``, ``jvp``, ``vmap`` and ``jit``.

Each function is a ``jax.custom_jvp`` whose primal is one host computation through
``jax.pure_callback`` (``solvers.init``: one factorization) and whose tangent is written in jnp,
linear in the tangent of A's values, so JAX transposes it for reverse mode by itself:

- ``slogdet``/``logdet``: d log det A = tr(A⁻¹dA) = Σₑ (A⁻¹)_{cₑ rₑ} dvₑ, the selected inverse on
  Aᵀ's pattern from the SAME factorization as the value (one host call per linearization point);
- ``inv_sample``: d(A⁻¹)ᵣ꜀ = −(A⁻¹ dA A⁻¹)ᵣ꜀, from the rows R and columns C of A⁻¹ asked for
  (|R| transpose solves and |C| solves with that factorization);
- ``eigsh``: dλᵢ = Re(vᵢᴴ dA vᵢ); dvᵢ exactly inside the k computed eigenvectors and by a
  projected solve outside them (``jax.lax.custom_linear_solve``, so its transpose is a solve too).

Dense jax arrays go to jnp.linalg (``slogdet``, ``inv``, ``eigh``), whose derivatives JAX has.
``vmap`` runs the host computations one batch member at a time (``vmap_method='sequential'``).

Once the factorization primitives of ``adjoints.jax`` (``adj.factorize``) are public, the
eigenvector projected solves should reuse the eigensolver's factorization through them; here
each ``custom_linear_solve`` call factorizes A − σI once more on the host (documented in
:func:`eigsh`).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

import linops as lo
import solvers as sv
from linops.internals import csr_parts, dense_array


class _Static:
    """A hashable wrapper of an index array (a static argument of a custom_jvp)."""

    def __init__(self, a):
        self.a = np.asarray(a, dtype=np.int64)
        self._h = hash(self.a.tobytes())

    def __hash__(self):
        return self._h

    def __eq__(self, other):
        return isinstance(other, _Static) and np.array_equal(self.a, other.a)


def _alg(alg, posdef):
    if alg is not None:
        return alg
    return sv.Cholesky() if posdef else sv.LU()


def _sparse_parts(A):
    """(values, pattern) of a sparse operand, or None for a dense one."""
    return csr_parts(A)


def _dense(A):
    a = dense_array(A) if isinstance(A, lo.LinearOperator) else None
    return jnp.asarray(A if a is None else a)


def _init(values, pattern, alg):
    return sv.init(sv.LinearProblem(lo.Sparse(np.asarray(values), pattern)), alg)


def _concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _real(dtype):
    return jnp.zeros((), dtype).real.dtype


# ----- slogdet / logdet --------------------------------------------------------------------------
def slogdet(A, alg=None, *, posdef: bool = False):
    """(sign, log|det A|) of a sparse or dense A, differentiable under every JAX transform.

    Parameters
    ----------
    A : lo.Sparse (jax or numpy values; ``fam(θ)``), a dense jax array or lo.Dense
    alg : solvers algorithm, optional
        The host factorization of a sparse A: default ``sv.Cholesky()`` when ``posdef``,
        ``sv.LU()`` otherwise (any direct method with ``cache.logdet()``).
    posdef : bool
        A is Hermitian positive definite (CHOLMOD, half the work).

    Returns
    -------
    (sign, logabsdet) : jax arrays
        ``sign`` of A's dtype (±1, or a unit complex number), ``logabsdet`` real.

    Raises
    ------
    solvers.SingularMatrixError, solvers.NotHermitianError, solvers.BackendNotSupported
        Eager: as in ``solvers``; under jit, a runtime error naming them.

    Notes
    -----
    Cost: one host factorization per linearization point; under ``grad``/``jvp`` its selected
    inverse on Aᵀ's pattern (about two factorizations' flops, O(nnz(L)) memory) gives the
    tangent tr(A⁻¹dA) — the gradient with respect to the stored values is (A⁻ᵀ)ᵣ꜀ on A's pattern
    (JAX's convention: no conjugation). ``d sign = sign·i·Im tr(A⁻¹dA)`` for complex A.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpy as np, scipy.sparse as sp, linops as lo
    >>> import adjoints.jax as adj
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [1.0, 3.0]]))
    >>> s, ld = adj.slogdet(K)
    >>> float(s), round(float(jnp.exp(ld)), 10)
    (1.0, 5.0)
    >>> f = lambda v: adj.logdet(lo.Sparse(v, K.pattern))
    >>> [round(float(x), 5) for x in jax.jit(jax.grad(f))(jnp.asarray(K.values)) * 5]  # A⁻ᵀ·5
    [3.0, -1.0, -1.0, 2.0]
    """
    parts = _sparse_parts(A)
    if parts is None:
        return jnp.linalg.slogdet(_dense(A))
    v, P = parts
    alg = _alg(alg, posdef)
    if _concrete(v):
        s, ld = _init(v, P, alg).logdet()
        dt = jnp.asarray(v).dtype
        return jnp.asarray(s, dt), jnp.asarray(ld, _real(dt))
    return _slogdet(jnp.asarray(v), P, alg)


def logdet(A, alg=None, *, posdef: bool = False):
    """log|det A| (= log det A for a positive determinant): ``slogdet(A, ...)[1]``.

    Examples
    --------
    >>> import jax.numpy as jnp, adjoints.jax as adj
    >>> round(float(adj.logdet(jnp.array([[2.0, 0.0], [0.0, -3.0]]))), 12) == round(float(jnp.log(6.0)), 12)
    True
    """
    return slogdet(A, alg, posdef=posdef)[1]


def _shapes(v):
    dt = v.dtype
    return (jax.ShapeDtypeStruct((), dt), jax.ShapeDtypeStruct((), _real(dt)))


@partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _slogdet(v, P, alg):
    def host(vals):
        s, ld = _init(vals, P, alg).logdet()
        return np.asarray(s, vals.dtype), np.asarray(ld, np.zeros((), vals.dtype).real.dtype)

    return jax.pure_callback(host, _shapes(v), v, vmap_method="sequential")


@_slogdet.defjvp
def _slogdet_jvp(P, alg, primals, tangents):
    (v,), (dv,) = primals, tangents

    def host(vals):
        cache = _init(vals, P, alg)
        s, ld = cache.logdet()
        z = np.asarray(sv.selected_inverse(cache).sample(P.indices, P.rows))  # A⁻¹[c, r]
        rd = np.zeros((), vals.dtype).real.dtype
        return np.asarray(s, vals.dtype), np.asarray(ld, rd), z.astype(vals.dtype)

    shapes = _shapes(v) + (jax.ShapeDtypeStruct(v.shape, v.dtype),)
    s, ld, z = jax.pure_callback(host, shapes, v, vmap_method="sequential")
    t = jnp.sum(z * dv)
    if jnp.iscomplexobj(v):
        ds = s * (1j * jnp.imag(t))
    else:
        ds = jnp.zeros_like(s)
    return (s, ld), (ds, jnp.real(t))


# ----- entries of the inverse --------------------------------------------------------------------
def inv_sample(A, rows, cols, alg=None, *, posdef: bool = False):
    """The entries A⁻¹[rows[k], cols[k]], differentiable under every JAX transform.

    Values by selected inversion of one host factorization (positions outside the factor's
    filled pattern by a solve per distinct column); the tangent −(A⁻¹ dA A⁻¹)[r, c] from the
    rows R and columns C of A⁻¹ involved: |R| + |C| solves with the same factorization and an
    O(nnz·|C|) product. So derivatives of a few entries (a local density of states, a Green's
    function element) are cheap, and of the whole diagonal cost 2n solves.

    Parameters
    ----------
    A : lo.Sparse, a dense jax array or lo.Dense
    rows, cols : 1-D integer arrays (concrete)
    alg, posdef
        As for :func:`slogdet`.

    Returns
    -------
    jax array (len(rows),)

    Examples
    --------
    >>> import jax, jax.numpy as jnp, scipy.sparse as sp, linops as lo, adjoints.jax as adj
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [1.0, 3.0]]))
    >>> [round(float(x), 5) for x in adj.inv_sample(K, [0, 1], [0, 1]) * 5]   # diag(A⁻¹)·5
    [3.0, 2.0]
    >>> g = jax.grad(lambda v: adj.inv_sample(lo.Sparse(v, K.pattern), [0], [0])[0])
    >>> [round(float(x), 4) for x in g(jnp.asarray(K.values)) * 25]   # −(A⁻ᵀe₀)(A⁻¹e₀)ᵀ
    [-9.0, 3.0, 3.0, -1.0]
    """
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    parts = _sparse_parts(A)
    if parts is None:
        a = _dense(A)
        return jnp.linalg.inv(a)[rows, cols]
    v, P = parts
    alg = _alg(alg, posdef)
    if _concrete(v):
        cache = _init(v, P, alg)
        return jnp.asarray(np.asarray(lo.sample(sv.inverse(cache), rows, cols)))
    return _inv_sample(jnp.asarray(v), P, _Static(rows), _Static(cols), alg)


@partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3, 4))
def _inv_sample(v, P, rows, cols, alg):
    def host(vals):
        cache = _init(vals, P, alg)
        return np.asarray(lo.sample(sv.inverse(cache), rows.a, cols.a)).astype(vals.dtype)

    return jax.pure_callback(host, jax.ShapeDtypeStruct(rows.a.shape, v.dtype), v,
                             vmap_method="sequential")


@_inv_sample.defjvp
def _inv_sample_jvp(P, rows, cols, alg, primals, tangents):
    (v,), (dv,) = primals, tangents
    n = P.shape[0]
    R, ri = np.unique(rows.a, return_inverse=True)
    C, ci = np.unique(cols.a, return_inverse=True)

    def host(vals):
        cache = _init(vals, P, alg)
        out = np.asarray(lo.sample(sv.inverse(cache), rows.a, cols.a))
        ER = np.zeros((n, R.size), vals.dtype)
        ER[R, np.arange(R.size)] = 1
        EC = np.zeros((n, C.size), vals.dtype)
        EC[C, np.arange(C.size)] = 1
        ZC = np.asarray(cache.solve(EC))                 # A⁻¹[:, C]
        ZR = np.asarray(cache.solve_transpose(ER)).T     # A⁻¹[R, :]
        return out.astype(vals.dtype), ZR.astype(vals.dtype), ZC.astype(vals.dtype)

    shapes = (jax.ShapeDtypeStruct(rows.a.shape, v.dtype),
              jax.ShapeDtypeStruct((R.size, n), v.dtype), jax.ShapeDtypeStruct((n, C.size), v.dtype))
    out, ZR, ZC = jax.pure_callback(host, shapes, v, vmap_method="sequential")
    Y = jax.ops.segment_sum(dv[:, None] * ZC[P.indices], P.rows, n)   # dA A⁻¹[:, C]
    return out, -jnp.sum(ZR[ri] * Y[:, ci].T, axis=1)


# ----- eigenpairs --------------------------------------------------------------------------------
def eigsh(A, k: int, sigma: float, alg=None, *, rtol: float = 1e-12):
    """k eigenpairs of a Hermitian sparse A nearest ``sigma`` (``solvers.eigsh``), differentiable.

    Parameters
    ----------
    A : lo.Sparse (jax values) — Hermitian; a dense jax array goes to ``jnp.linalg.eigh``
        (then ``sigma`` picks the k eigenvalues nearest it)
    k : int
    sigma : float
        The shift; A − σI is factorized once on the host (``alg``).
    alg : solvers algorithm, optional
    rtol : float
        Of the projected solves of the eigenvector tangents.

    Returns
    -------
    (w, V) : jax arrays (k,) ascending, (n, k)

    Notes
    -----
    Tangents: dλᵢ = Re(vᵢᴴ dA vᵢ) (one O(nnz·k) product, no solve); dvᵢ = Σ_{j≠i} vⱼ
    (vⱼᴴ dA vᵢ)/(λᵢ − λⱼ) over the computed eigenvectors plus −(Q(A − λᵢ)Q)⁺ Q dA vᵢ, Q = I −
    VVᴴ, by GMRES preconditioned with a factorization of A − σI — one more host factorization
    per tangent (or cotangent) solve of the eigenvectors; eigenvalue derivatives need none.
    Eigenvalues must be distinct (degenerate ones give non-finite eigenvector derivatives, as in
    ``jnp.linalg.eigh``); f must not depend on the eigenvectors' phase.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpy as np, scipy.sparse as sp, linops as lo
    >>> import adjoints.jax as adj
    >>> n = 30
    >>> T = sp.diags([-np.ones(n - 1), -np.ones(n - 1)], [-1, 1]).tocsr()
    >>> fam = lo.AffineSparse.from_terms([sp.diags(np.eye(n)[i]) for i in range(n)], offset=T)
    >>> lam0 = lambda eps: adj.eigsh(fam(eps), 1, sigma=-3.0)[0][0]
    >>> eps = jnp.linspace(-0.5, 0.5, n)
    >>> g = jax.grad(lam0)(eps)                                   # ∂λ₀/∂εᵢ = v₀ᵢ²
    >>> v = adj.eigsh(fam(eps), 1, sigma=-3.0)[1][:, 0]
    >>> bool(jnp.allclose(g, v ** 2, atol=1e-6))
    True
    """
    parts = _sparse_parts(A)
    if parts is None:
        w, V = jnp.linalg.eigh(_dense(A))
        idx = jnp.argsort(jnp.abs(w - sigma))[:k]
        idx = jnp.sort(idx)
        return w[idx], V[:, idx]
    v, P = parts
    return _eigsh(jnp.asarray(v), P, int(k), float(sigma), alg, float(rtol))


def _host_eigs(vals, P, k, sigma, alg):
    e = sv.eigsh(lo.Sparse(np.asarray(vals), P), k, sigma=sigma, alg=alg)
    return e


@partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3, 4, 5))
def _eigsh(v, P, k, sigma, alg, rtol):
    n = P.shape[0]
    rd = _real(v.dtype)

    def host(vals):
        e = _host_eigs(vals, P, k, sigma, alg)
        return np.asarray(e.values, rd), np.asarray(e.vectors).astype(vals.dtype)

    return jax.pure_callback(host, (jax.ShapeDtypeStruct((k,), rd),
                                    jax.ShapeDtypeStruct((n, k), v.dtype)), v,
                             vmap_method="sequential")


def _spmm(vals, P, X):
    """A X for A = Sparse(vals, P), in jnp (linear in vals and in X)."""
    return jax.ops.segment_sum(vals[:, None] * X[P.indices], P.rows, P.shape[0])


@_eigsh.defjvp
def _eigsh_jvp(P, k, sigma, alg, rtol, primals, tangents):
    (v,), (dv,) = primals, tangents
    w, V = _eigsh(v, P, k, sigma, alg, rtol)
    dAV = _spmm(dv, P, V)                                # dA V
    G = jnp.conj(V).T @ dAV                              # Vᴴ dA V (k × k)
    dw = jnp.real(jnp.diagonal(G))
    gap = w[None, :] - w[:, None]                        # gap[j, i] = λᵢ − λⱼ
    off = ~jnp.eye(k, dtype=bool)
    F = jnp.where(off, 1.0 / jnp.where(off, gap, 1.0), 0.0)     # F[j, i] = 1/(λᵢ − λⱼ)
    dV_in = V @ (G * F)
    v0 = jax.lax.stop_gradient(v)
    V0, w0 = jax.lax.stop_gradient(V), jax.lax.stop_gradient(w)

    def proj(X):
        return X - V0 @ (jnp.conj(V0).T @ X)

    def matvec(X):                                       # Q (A − λᵢ) Q, column i
        QX = proj(X)
        return proj(_spmm(v0, P, QX) - QX * w0[None, :])

    def host_solve(vals, lam, Vh, B):
        return _projected_solve(np.asarray(vals), P, np.asarray(lam), np.asarray(Vh),
                                np.asarray(B), sigma, alg, rtol).astype(B.dtype)

    def solve(_, B):
        return jax.pure_callback(host_solve, jax.ShapeDtypeStruct(B.shape, B.dtype), v0, w0, V0,
                                 B, vmap_method="sequential")

    def transpose_solve(_, B):  # Mᵀ = conj(M) for the Hermitian M
        return jnp.conj(solve(None, jnp.conj(B)))

    X = jax.lax.custom_linear_solve(matvec, -proj(dAV), solve, transpose_solve)
    return (w, V), (dw, dV_in + X)


def _projected_solve(vals, P, lam, V, B, sigma, alg, rtol):
    """Columns xᵢ = (Q(A − λᵢ)Q)⁺ bᵢ (so xᵢ ⊥ V), by GMRES preconditioned with a
    factorization of A − σI."""
    import scipy.sparse.linalg as sla

    from solvers.internals import shifted

    A = lo.Sparse(vals, P)
    cache = sv.init(sv.LinearProblem(shifted(A, sigma), hermitian=True), alg or sv.Auto())
    op = cache.as_operator()
    n, k = B.shape
    X = np.zeros_like(B)

    def proj(x):
        return x - V @ (V.conj().T @ x)

    for i in range(k):
        b = proj(B[:, i])   # the pseudo-inverse: a cotangent need not be ⊥ V
        bn = np.linalg.norm(b)
        if bn == 0:
            continue
        M = sla.LinearOperator((n, n), dtype=B.dtype,
                               matvec=lambda x, i=i: proj(A @ proj(x) - lam[i] * proj(x)))
        Pm = sla.LinearOperator((n, n), dtype=B.dtype, matvec=lambda x: proj(op @ proj(x)))
        x, _ = sla.gmres(M, b, M=Pm, rtol=rtol, atol=0.0, restart=min(n, 60), maxiter=200)
        x = proj(x)
        res = np.linalg.norm(M @ x - b) / bn
        if res > 10 * rtol:
            raise sv.ConvergenceError(f"adj.eigsh: the projected solve of eigenvector {i} stopped "
                                      f"at relative residual {res:.3g} > rtol={rtol:g}", [res],
                                      status=sv.Status.MAX_ITERATIONS)
        X[:, i] = x
    return X
