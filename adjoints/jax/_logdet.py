"""JAX: log-determinants, entries of the inverse and eigenpairs of sparse matrices under every
JAX transform (``grad``, ``jvp``, ``vmap``, ``jit`` and second order: ``hessian``, ``jvp`` of
``grad``, ``jacfwd(jacrev)``).

``slogdet``/``logdet`` and ``inv_sample`` go through the same bridge as ``adj.solve``: the
factorization is ``factorize_p`` in the live-factorization store (counted in ``adj.stats()``,
shared with solves of the same values, freed by the same rules) and the queries are the host
primitives of :mod:`adjoints.jax._queries`, whose tangents are solves with that factorization:

- d log|det A| = Re tr(A⁻¹dA) = Re Σₑ (A⁻¹)_{cₑ rₑ} dvₑ: the selected inverse on Aᵀ's pattern
  from the same factors (one host query per linearization point);
- d(A⁻¹)ᵣ꜀ = −(A⁻¹ dA A⁻¹)ᵣ꜀: solves with the same factorization for the rows and columns of
  A⁻¹ involved, in blocks; so the hessian of log det, −tr(A⁻¹dA A⁻¹dA'), is exact too.

``eigsh`` is a ``jax.custom_jvp`` whose primal is one host computation through
``jax.pure_callback``; its tangent is written in jnp (dλᵢ = Re(vᵢᴴ dA vᵢ), dvᵢ by a projected
solve). Dense jax arrays go to jnp.linalg (``slogdet``, ``inv``, ``eigh``), whose derivatives
JAX has.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse.linalg as sla

import linops as lo
import solvers as sv
from linops.internals import ShapeError, csr_parts, dense_array
from solvers.internals import shifted

from . import _factor as _fac
from . import _queries
from ._factor import Factorization
from ._live import Spec
from ._solve import _as_jax, working_dtype


def _sparse_parts(A):
    """(values, pattern) of a sparse operand, or None for a dense one."""
    return csr_parts(A)


def _dense(A):
    a = dense_array(A) if isinstance(A, lo.LinearOperator) else None
    return jnp.asarray(A if a is None else a)


def _real(dtype):
    return jnp.zeros((), dtype).real.dtype


def _factorization(A, alg, posdef: bool):
    """A Factorization of the sparse A for log det and inverse entries (A itself if it is one),
    or None when A is dense. Without ``alg``: Cholesky when ``posdef`` else LU, and any live
    factorization of the same values with selected inversion serves (a solve's, say)."""
    if isinstance(A, Factorization):
        if alg is not None:
            raise TypeError(f"a Factorization answers with its own algorithm ({A.spec.alg!r}); "
                            f"alg must be None, got {alg!r}")
        return A
    parts = _sparse_parts(A)
    if parts is None:
        return None
    raw, P = parts
    v = _as_jax(raw, "A.values")
    v = v.astype(working_dtype(v.dtype))
    auto = alg is None
    alg = (sv.Cholesky() if posdef else sv.LU()) if auto else alg
    spec = Spec(P, alg, hermitian=True if posdef else None, posdef=True if posdef else None,
                needs="logdet", auto=auto)
    return _fac.make(v, spec, raw)


# ----- slogdet / logdet --------------------------------------------------------------------------
def slogdet(A, alg=None, *, posdef: bool = False):
    """(sign, log|det A|) of a sparse or dense A, differentiable under every JAX transform.

    Parameters
    ----------
    A : lo.Sparse (jax or numpy values; ``fam(θ)``), an ``adj.Factorization``, a dense jax
        array or lo.Dense
    alg : solvers algorithm, optional
        The host factorization of a sparse A: default ``sv.Cholesky()`` when ``posdef``,
        ``sv.LU()`` otherwise (any direct method with ``cache.logdet()``; derivatives need
        selected inversion: SuperLU, CHOLMOD). Without it, a live factorization of the same
        values that has selected inversion is used (one a solve of the same matrix made).
    posdef : bool
        A is Hermitian positive definite (CHOLMOD, half the work).

    Returns
    -------
    (sign, logabsdet) : jax arrays
        ``sign`` of A's dtype (±1, or a unit complex number), ``logabsdet`` real.

    Raises
    ------
    solvers.SingularMatrixError, solvers.NotHermitianError, solvers.BackendNotSupported
        Eager: as in ``solvers``; under jit, a runtime error whose first line names them.

    Notes
    -----
    Cost: one host factorization per linearization point, counted in ``adj.stats()`` and
    shared with solves of the same values; under ``grad``/``jvp`` its selected inverse on Aᵀ's
    pattern (about two factorizations' flops, O(nnz(L)) memory) gives the tangent tr(A⁻¹dA) —
    the gradient with respect to the stored values is (A⁻ᵀ)ᵣ꜀ on A's pattern (JAX's convention:
    no conjugation). ``d sign = sign·i·Im tr(A⁻¹dA)`` for complex A. Second order (``hessian``,
    ``jvp`` of ``grad``): −tr(A⁻¹dA A⁻¹dA') by solves with the same factorization, about 2n
    solve columns per direction in blocks of at most 64 columns (memory O(64·n)); reverse over
    reverse (``jacrev(jacrev)``) stores those columns (O(n²)): prefer ``jax.hessian``.

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
    >>> h = jax.hessian(f)(jnp.asarray(K.values))        # −(A⁻ᵀ)_{c r'}(A⁻ᵀ)_{c' r}
    >>> round(float(h[0, 0]) * 25, 10)                    # −((A⁻¹)₀₀)² · 25 = −9
    -9.0
    """
    F = _factorization(A, alg, posdef)
    if F is None:
        return jnp.linalg.slogdet(_dense(A))
    if F.spec.pattern.shape[0] == 0:
        dt = F.values.dtype
        return jnp.ones(F.values.shape[:-1], dt), jnp.zeros(F.values.shape[:-1], _real(dt))
    lead = F.key.ndim - 1
    if lead:   # a batch of factorizations (vmapped F, stacked F)
        fn = lambda k, v: tuple(_queries.slogdet(k, v, F.spec, None))   # noqa: E731
        for _ in range(lead):
            fn = jax.vmap(fn)
        return fn(F.key, F.values)
    return _queries.slogdet(F.key, F.values, F.spec, F.site)


def logdet(A, alg=None, *, posdef: bool = False):
    """log|det A| (= log det A for a positive determinant): ``slogdet(A, ...)[1]``.

    Examples
    --------
    >>> import jax.numpy as jnp, adjoints.jax as adj
    >>> round(float(adj.logdet(jnp.array([[2.0, 0.0], [0.0, -3.0]]))), 12) == round(float(jnp.log(6.0)), 12)
    True
    """
    return slogdet(A, alg, posdef=posdef)[1]


# ----- entries of the inverse --------------------------------------------------------------------
def inv_sample(A, rows, cols, alg=None, *, posdef: bool = False):
    """The entries A⁻¹[rows[k], cols[k]], differentiable under every JAX transform.

    Values by selected inversion of one host factorization (positions outside the factor's
    filled pattern by a solve per distinct column); the tangent −(A⁻¹ dA A⁻¹)[r, c] from the
    rows R and columns C of A⁻¹ involved: |R| + |C| solves with the same factorization and an
    O(nnz·|C|) product. So derivatives of a few entries (a local density of states, a Green's
    function element) are cheap, and of the whole diagonal cost 2n solves; second derivatives
    differentiate those solves (each again a solve with the same factorization).

    Parameters
    ----------
    A : lo.Sparse, an ``adj.Factorization``, a dense jax array or lo.Dense
    rows, cols : 1-D integer arrays (concrete), of one length
    alg, posdef
        As for :func:`slogdet`.

    Returns
    -------
    jax array (len(rows),)

    Raises
    ------
    ShapeError
        rows and cols of different lengths, or outside [0, n).

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
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    cols = np.asarray(cols, dtype=np.int64).reshape(-1)
    F = _factorization(A, alg, posdef)
    n = (F.shape if F is not None else _dense(A).shape)[0]
    if rows.shape != cols.shape:
        raise ShapeError(f"inv_sample needs rows and cols of one length, got rows.shape="
                         f"{rows.shape} and cols.shape={cols.shape}")
    bad = (rows < 0) | (rows >= n) | (cols < 0) | (cols >= n)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ShapeError(f"inv_sample position ({int(rows[k])}, {int(cols[k])}) is outside a "
                         f"matrix of shape ({n}, {n})")
    if F is None:
        return jnp.linalg.inv(_dense(A))[rows, cols]
    if rows.size == 0 or n == 0:
        return jnp.zeros(F.values.shape[:-1] + (rows.size,), F.values.dtype)
    lead = F.key.ndim - 1
    if lead:
        fn = lambda k, v: _queries.inv_entries(k, v, F.spec, None, rows, cols)   # noqa: E731
        for _ in range(lead):
            fn = jax.vmap(fn)
        return fn(F.key, F.values)
    return _queries.inv_entries(F.key, F.values, F.spec, F.site, rows, cols)


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
