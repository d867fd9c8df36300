"""JAX: least squares x = A⁺b (min ‖Ax − b‖; the minimum-norm solution for a wide A) under
``grad``, ``jvp``, ``jacfwd``/``jacrev``, ``hessian``, ``vmap`` and ``jit``.

x is implicit in A and b: for A (m ≥ n) with full column rank, G x = Aᴴb with G = AᴴA, so

    ẋ = G⁻¹ (Ȧᴴ r + Aᴴ (ḃ − Ȧ x)),     r = b − A x;

for a wide A (m < n) with full row rank, x = Aᴴ y with H y = b, H = A Aᴴ, so

    ẋ = Ȧᴴ y + Aᴴ H⁻¹ (ḃ − Ȧ x − A Ȧᴴ y).

Both are the Golub–Pereyra derivative of A⁺b where A has full rank (the other terms vanish).
The primal x is ONE QR solve (SuiteSparseQR on the host for a sparse A, ``jnp.linalg.qr`` for a
dense one); the tangent is a ``jax.custom_jvp`` rule whose only solve is the Gram solve
z ↦ G⁻¹z (H⁻¹z), R⁻¹R⁻ᴴz from the same R — never G itself, never the normal equations — as a
``jax.lax.custom_linear_solve`` whose matvec z ↦ Aᴴ(A z) is a product in A's values. JAX
transposes the rule for reverse mode (the transposed solve is the same Gram solve, and the
values' cotangent of the products is an SDDMM on A's pattern: the rank-2 r λᴴ − (Aλ) xᴴ of
``adjoints.solve_pullback`` sampled there), and differentiates it again for the Hessian.

One factorization per linearization point: a sparse A's QR lives in a small host store keyed by
A's pattern, the algorithm and a digest of its values; the forward solve makes it, and every
tangent, cotangent and Hessian solve at the same values finds it there (at most
:data:`CAPACITY` are kept; the least recently used is dropped, and its memory freed, when more
arrive). :func:`stats` counts factorizations and reuses. A dense A's Q and R are XLA values made
once per call and closed over by its solves.

A without full column (tall) or full row (wide) rank raises :class:`solvers.RankDeficientError`
by name (under jit: a runtime error whose first line names it), as ``sv.QR`` does: there the
derivative does not exist.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

import linops as lo
import solvers as sv
from linops.internals import ShapeError, csr_parts, dense_array

from ._errors import guard, record, register_message
from ._solve import _as_jax, _coerce
from ._spmm import spmm

__all__ = ["lstsq", "stats", "reset_stats", "clear", "CAPACITY"]

CAPACITY = 8    # host QR factorizations kept at a time (least recently used dropped first)

_RANK = register_message(
    sv.RankDeficientError,
    "adj.lstsq: A ({0}×{1}) has numerical rank below {2}: |R[{3}, {3}]| = {4:.3g} ≤ {5:.3g} "
    "(20·(m+n)·eps·max|Rᵢᵢ|) in its QR; without full column (tall A) or full row (wide A) rank "
    "x = A⁺b has no derivative. Regularise (stack √α·L under A and zeros under b)")


@dataclass
class LstsqStats:
    """Counters of :func:`lstsq`'s host factorizations (process-wide; :func:`reset_stats`).

    Attributes: ``factorizations`` (QR factorizations made), ``reuses`` (solves that found
    the factorization of their values in the store), ``solves`` (forward QR solves),
    ``gram_solves`` (R⁻¹R⁻ᴴ solves of tangents and cotangents), ``live`` (factorizations
    held now), ``peak_live``.
    """

    factorizations: int = 0
    reuses: int = 0
    solves: int = 0
    gram_solves: int = 0
    live: int = 0
    peak_live: int = 0


@dataclass
class _Store:
    """LRU of ``solvers`` least-squares caches keyed by (pattern, algorithm, dtype, digest of
    the values). Thread-safe; a dropped cache frees its factorization when nothing holds it."""

    entries: OrderedDict = field(default_factory=OrderedDict)
    counts: LstsqStats = field(default_factory=LstsqStats)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # host work (factorizations and solves) one at a time: XLA may run two callbacks of one
    # computation at once, and SuiteSparseQR's binding shares one cholmod_common workspace
    making: threading.RLock = field(default_factory=threading.RLock)

    def cache(self, values: np.ndarray, pattern: lo.Pattern, alg, dtype) -> sv.LinearCache:
        digest = hashlib.blake2b(np.ascontiguousarray(values).view(np.uint8),
                                 digest_size=16).hexdigest()
        key = (pattern, alg, np.dtype(dtype).str, digest)
        hit = self._lookup(key)
        if hit is not None:
            return hit
        with self.making:           # a concurrent callback with these values waits, then finds it
            hit = self._lookup(key)
            if hit is not None:
                return hit
            A = lo.Sparse(np.asarray(values, dtype=dtype), pattern)
            cache = sv.init(sv.LeastSquares(A), alg)       # the factorization (may raise)
            self._insert(key, cache)
        return cache

    def _lookup(self, key):
        with self.lock:
            hit = self.entries.get(key)
            if hit is not None:
                self.entries.move_to_end(key)
                self.counts.reuses += 1
            return hit

    def _insert(self, key, cache) -> None:
        with self.lock:
            self.counts.factorizations += 1
            self.entries[key] = cache
            while len(self.entries) > CAPACITY:
                self.entries.popitem(last=False)
            self.counts.live = len(self.entries)
            self.counts.peak_live = max(self.counts.peak_live, self.counts.live)


_STORE = _Store()


def stats() -> LstsqStats:
    """A snapshot of the counters of :func:`lstsq`'s host factorizations.

    Examples
    --------
    >>> reset_stats(); stats().factorizations
    0
    """
    with _STORE.lock:
        return LstsqStats(**vars(_STORE.counts))


def reset_stats() -> None:
    """Zero the counters (the factorizations held stay, counted in ``live``)."""
    with _STORE.lock:
        live = len(_STORE.entries)
        _STORE.counts = LstsqStats(live=live, peak_live=live)


def clear() -> None:
    """Drop every factorization the store holds (their memory is freed)."""
    with _STORE.lock:
        _STORE.entries.clear()
        _STORE.counts.live = 0


# ----- the public function -----------------------------------------------------------------------
def lstsq(A, b, alg=None):
    """x = A⁺b — min ‖Ax − b‖, the minimum-norm solution for a wide A — differentiable in A's
    arrays and in b under every JAX transform.

    Parameters
    ----------
    A : operator
        Sparse: ``lo.Sparse`` with jax values (the differentiable leaf; pattern static),
        ``fam(θ)`` of a ``lo.AffineSparse`` family, or a BCOO/BCSR with concrete indices —
        factorized by SuiteSparseQR on the host (``pip install "linops[qr]"``). Dense: an
        (m, n) array or ``lo.Dense``, factorized by ``jnp.linalg.qr`` in XLA. Any m, n: a tall
        A needs full column rank, a wide one full row rank.
    b : array (m,) or (m, k)
    alg : ``sv.QR()`` or None
        The factorization (the only one: its rank check is what makes the derivative
        defined; ``sv.LSMR``'s minimum-norm solution of a rank-deficient A has none).

    Returns
    -------
    x : jax array (n,) or (n, k), dtype ``result_type(A, b)``

    Raises
    ------
    ShapeError
        b's rows are not A's (at trace time).
    TypeError
        ``alg`` other than QR, or a matrix-free A (least squares needs its entries here).
    solvers.RankDeficientError
        A lacks full column (tall) or row (wide) rank; eager: raised, under jit: a runtime
        error whose first line names it. Also ``solvers.NonFiniteInputError`` for NaN/Inf.
    solvers.BackendNotSupported
        A sparse A without the ``qr`` extra.

    Notes
    -----
    Cost: one QR factorization per linearization point, one Q-and-R solve for x; each
    tangent (jvp/jacfwd column) or cotangent (grad/vjp) is one Gram solve R⁻¹R⁻ᴴ with the same
    R (no Q) plus products with A, O(nnz); the values' cotangent is an SDDMM on A's pattern
    (O(nnz)), never an m×n array. ``vmap`` over b only shares one factorization and solves all
    columns in one host call; ``vmap`` over A's values factorizes once per member. JAX's
    convention: cotangents use plain transposes (``jax.test_util.check_grads`` agrees).

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpy as np, scipy.sparse as sp, linops as lo
    >>> S = lo.Sparse.from_scipy(sp.csr_array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]]))
    >>> b = jnp.array([1.0, 2.0, 2.0])
    >>> lstsq(lo.Sparse(jnp.asarray(S.values), S.pattern), b).round(6).tolist()
    [1.166667, 0.5]
    >>> f = lambda v: lstsq(lo.Sparse(v, S.pattern), b).sum()
    >>> g = jax.jit(jax.grad(f))(jnp.asarray(S.values))       # on A's 5 stored entries
    >>> a = jnp.asarray(S.to_scipy().toarray())
    >>> ref = jax.grad(lambda a: (jnp.linalg.pinv(a) @ b).sum())(a)
    >>> bool(jnp.allclose(g, ref[S.pattern.rows, S.pattern.indices]))
    True
    >>> lstsq(jnp.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]]), b)
    Traceback (most recent call last):
    ...
    solvers._errors.RankDeficientError: adj.lstsq: A (3×2) has numerical rank below 2: ...
    """
    if alg is not None and not isinstance(alg, sv.QR):
        raise TypeError(f"adj.lstsq takes alg=sv.QR() (or None), got {alg!r}: its rank check "
                        f"is what makes x = A⁺b differentiable (LSMR's minimum-norm solution of "
                        f"a rank-deficient A has no derivative)")
    alg = sv.QR() if alg is None else alg
    b = _as_jax(b, "b")
    op = _coerce(A)
    shape = tuple(op.shape)
    if len(shape) != 2:
        raise ShapeError(f"lstsq needs a matrix A, got A.shape={shape}")
    m, n = shape
    if b.ndim not in (1, 2) or b.shape[0] != m:
        raise ShapeError(f"lstsq needs b of shape (m,) or (m, k) with m={m}: A.shape={shape}, "
                         f"b.shape={tuple(b.shape)}")
    vec = b.ndim == 1
    B = b[:, None] if vec else b
    if isinstance(op, lo.LinearOperator):
        parts = csr_parts(op)
        if parts is None and dense_array(op) is None:
            raise TypeError(f"adj.lstsq needs A's entries (lo.Sparse, fam(θ), BCOO/BCSR, or a "
                            f"dense array); got {type(op).__name__}")
        if parts is None:
            op = _as_jax(dense_array(op), "A")
    if isinstance(op, lo.LinearOperator):
        values, pattern = csr_parts(op)
        values = _as_jax(values, "A.values")
        dtype = jnp.result_type(values.dtype, B.dtype)
        if B.size == 0 or m == 0 or n == 0:
            X = jnp.zeros((n, B.shape[1]), dtype)
        else:
            X = _x_sparse(values.astype(dtype), B.astype(dtype), _Sparse(pattern, alg))
    else:
        dtype = jnp.result_type(op.dtype, B.dtype)
        if B.size == 0 or m == 0 or n == 0:
            X = jnp.zeros((n, B.shape[1]), dtype)
        else:
            a = op.astype(dtype)
            X = _x_dense(a, B.astype(dtype), *_dense_factors(a))
    return X[:, 0] if vec else X


# ----- the derivative, shared by both paths --------------------------------------------------------
def _tangent(mv, rmv, gram, x, b, dmv, drmv, db):
    """ẋ at (A, b) from the products with A (``mv`` X = A X, ``rmv`` Y = AᴴY), those with Ȧ
    (``dmv``, ``drmv``) and the Gram solve ``gram`` (G⁻¹ for a tall A, H⁻¹ for a wide one);
    linear in (Ȧ, ḃ), so JAX transposes it."""
    m, n = b.shape[0], x.shape[0]
    if m >= n:
        r = b - mv(x)
        return gram(drmv(r) + rmv(db - dmv(x)))
    y = gram(b)                                   # H⁻¹ b (= A⁺ᴴ x); differentiable in A, b
    return drmv(y) + rmv(gram(db - dmv(x) - mv(drmv(y))))


def _gram_solve(mv, rmv, tall, solve, c):
    """G⁻¹ c (tall: G = AᴴA) or H⁻¹ c (wide: H = AAᴴ) by ``solve`` (R⁻¹R⁻ᴴ from the QR), as
    a custom_linear_solve: its matvec is the product with A (differentiable in A's arrays), its
    transpose the conjugated solve (G is Hermitian)."""
    gm = (lambda z: rmv(mv(z))) if tall else (lambda z: mv(rmv(z)))

    def tsolve(_, c):
        return jnp.conj(solve(None, jnp.conj(c)))

    return jax.lax.custom_linear_solve(gm, c, solve, tsolve)


# ----- sparse: SuiteSparseQR on the host --------------------------------------------------------
@dataclass(frozen=True)
class _Sparse:
    """The static part of a sparse least-squares problem (hashable: a custom_jvp argument)."""

    pattern: lo.Pattern
    alg: sv.QR

    def mv(self, v, X):
        return spmm(v, X, self.pattern, "N")

    def rmv(self, v, Y):
        return spmm(jnp.conj(v), Y, self.pattern, "T")


def _batched_host(one, values, rhs):
    """Apply ``one(values_1d, rhs_2d) -> out_2d`` to jax's ``vmap_method='expand_dims'`` inputs
    (the same number of leading batch axes on both, size 1 where unbatched). Members sharing
    their values (a vmap over b only) are one call with all their columns. Returns (out, status)
    with status (int32, per member) from :func:`record` for an exception, else 0."""
    d = values.ndim - 1
    lead = tuple(np.broadcast_shapes(values.shape[:d], rhs.shape[:d]))
    r, k = rhs.shape[-2:]
    R = np.broadcast_to(rhs, lead + (r, k)).reshape(-1, r, k)
    nb = R.shape[0]
    Vf = values.reshape(-1, values.shape[-1])
    outs, status = [], np.zeros(nb, np.int32)
    try:
        if Vf.shape[0] == 1:                          # one matrix: all columns in one call
            X = one(Vf[0], np.moveaxis(R, 0, 1).reshape(r, nb * k))
            outs = list(np.moveaxis(X.reshape(X.shape[0], nb, k), 1, 0))
        else:
            V = np.broadcast_to(values, lead + values.shape[d:]).reshape(nb, -1)
            outs = [one(V[i], R[i]) for i in range(nb)]
    except Exception as e:  # noqa: BLE001 — named on the jax side (guard), never lost here
        status[:] = record(e)
        return None, status.reshape(lead)
    return np.stack(outs).reshape(lead + outs[0].shape), status.reshape(lead)


def _host_call(kind, sp: _Sparse, v, C, rows_out):
    """pure_callback of the host solve ``kind`` ('x': A⁺C by Q and R; 'gram': G⁻¹C or H⁻¹C by
    R only) at A = Sparse(v, pattern); guarded (a failure raises by name)."""
    dtype = C.dtype

    def one(vals, rhs):
        with _STORE.making:
            cache = _STORE.cache(vals, sp.pattern, sp.alg, dtype)
            with _STORE.lock:
                if kind == "x":
                    _STORE.counts.solves += 1
                else:
                    _STORE.counts.gram_solves += 1
            if kind == "x":
                return np.asarray(cache.solve(rhs))
            m, n = sp.pattern.shape
            if m >= n:
                return np.asarray(cache.solve_gram(rhs))
            # wide: the QR is of Aᴴ = QR, so H = AAᴴ = RᴴR: A⁺ᴴA⁺c = A⁺ᴴ(A⁺c) (Q cancels)
            return np.asarray(cache.solve_adjoint(cache.solve(rhs)))

    def host(vals, rhs):
        vals, rhs = np.asarray(vals), np.asarray(rhs)
        out, st = _batched_host(one, vals, rhs)
        lead = st.shape
        if out is None:
            out = np.zeros(lead + (rows_out, rhs.shape[-1]), dtype)
        return out.astype(dtype, copy=False), st

    out_shape = (jax.ShapeDtypeStruct((rows_out, C.shape[1]), dtype),
                 jax.ShapeDtypeStruct((), jnp.int32))
    X, st = jax.pure_callback(host, out_shape, jax.lax.stop_gradient(v), C,
                              vmap_method="expand_dims")
    return guard(X, st)


@partial(jax.custom_jvp, nondiff_argnums=(2,))
def _x_sparse(v, B, sp: _Sparse):
    return _host_call("x", sp, v, B, sp.pattern.shape[1])


@_x_sparse.defjvp
def _x_sparse_jvp(sp, primals, tangents):
    v, B = primals
    dv, dB = tangents
    X = _x_sparse(v, B, sp)
    m, n = sp.pattern.shape
    tall = m >= n
    v0 = jax.lax.stop_gradient(v)

    def solve(_, c):       # the factors at the primal values; custom_linear_solve differentiates
        return _host_call("gram", sp, v0, c, n if tall else m)    # through the matvec below

    def mv(Z):
        return sp.mv(v, Z)

    def rmv(Y):
        return sp.rmv(v, Y)

    gram = partial(_gram_solve, mv, rmv, tall, solve)
    dX = _tangent(mv, rmv, gram, X, B, lambda Z: sp.mv(dv, Z), lambda Y: sp.rmv(dv, Y), dB)
    return X, dX


# ----- dense: jnp.linalg.qr in XLA ---------------------------------------------------------------
def _dense_factors(a):
    """(Q, R) of A (m ≥ n) or of Aᴴ (m < n), economic, rank-checked; not differentiated."""
    m, n = a.shape
    a0 = jax.lax.stop_gradient(a)
    Q, R = jnp.linalg.qr(a0 if m >= n else jnp.conj(a0).T, mode="reduced")
    d = jnp.abs(jnp.diagonal(R))
    real = d.dtype
    eps = float(jnp.finfo(real).eps)
    tol = 20 * (m + n) * eps * jnp.max(d)
    i = jnp.argmin(d)
    bad = (d[i] <= tol) | ~jnp.isfinite(jnp.max(d))
    info = jnp.stack([jnp.asarray(m, real), jnp.asarray(n, real), jnp.asarray(min(m, n), real),
                      i.astype(real), d[i], tol])
    R = guard(R, jnp.where(bad, _RANK, 0), info)
    return Q, R


def _dense_gram_solve(R):
    st = jax.scipy.linalg.solve_triangular

    def solve(_, c):            # (RᴴR)⁻¹ c
        return st(R, st(R, c, trans="C", lower=False), lower=False)

    return solve


@jax.custom_jvp
def _x_dense(a, B, Q, R):
    m, n = a.shape
    st = jax.scipy.linalg.solve_triangular
    if m >= n:                  # x = R⁻¹ Qᴴ b
        return st(R, jnp.conj(Q).T @ B, lower=False)
    return Q @ st(R, B, trans="C", lower=False)   # Aᴴ = QR: x = Q R⁻ᴴ b (minimum norm)


@_x_dense.defjvp
def _x_dense_jvp(primals, tangents):
    a, B, Q, R = primals
    da, dB = tangents[:2]       # Q and R are stop_gradient'ed factors: no tangent
    X = _x_dense(a, B, Q, R)
    m, n = a.shape

    def mv(Z):
        return a @ Z

    def rmv(Y):
        return jnp.conj(a).T @ Y

    gram = partial(_gram_solve, mv, rmv, m >= n, _dense_gram_solve(jax.lax.stop_gradient(R)))
    dX = _tangent(mv, rmv, gram, X, B, lambda Z: da @ Z, lambda Y: jnp.conj(da).T @ Y, dB)
    return X, dX
