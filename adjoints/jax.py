"""JAX integration: ``solve`` and ``matmul`` usable under ``jax.grad``, ``jax.jit`` and ``jax.vmap``.

Sparse solves (A a ``lo.Sparse`` with jax values, a BCOO with concrete indices, or ``fam(θ)``
inside the traced function) run on the host through ``jax.pure_callback`` into ``solvers``. The
forward callback factorizes once and parks the cache in a small registry under an integer handle
that travels as a residual; the backward callback looks the handle up and solves with Aᵀ using the
SAME factors (JAX's convention for complex numbers is the plain transpose). ``stats()`` exposes
the counters that prove it, also under ``jax.jit``. If the registry (``capacity`` caches) evicted a
handle before its backward pass ran, the backward refactorizes and counts it in ``misses``.

On a GPU (arrays on a CUDA device) the sparse solve stays on the device: jax's cuSOLVER
``spsolve`` forward and backward, no host callback (cuSOLVER keeps no factors, so that path
factorizes twice per gradient; see ``_sparse_solve_gpu``).

Values cotangent: −λ[rows]·u[cols] on the pattern (O(nnz), never n×n). Dense A: jax's own LU
(``jax.scipy.linalg.lu_factor``), factorized once in the forward pass and reused transposed in
the backward pass; its cotangent is the dense −λuᵀ (documented: a dense A has a dense gradient).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import linops as lo
import solvers as sv
from linops._base import ensure_jax_pytrees
from linops._errors import ShapeError
from linops._sddmm import sddmm

ensure_jax_pytrees()

__all__ = ["solve", "matmul", "stats", "reset_stats", "Stats"]


@dataclass
class Stats:
    factorizations: int = 0
    transpose_solves: int = 0
    forward_solves: int = 0
    misses: int = 0


class _Registry:
    """Factorizations made by forward callbacks, keyed by handle, bounded (LRU)."""

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self.caches: OrderedDict[int, sv.LinearCache] = OrderedDict()
        self.counter = itertools.count(1)
        self.stats = Stats()
        self.lock = threading.Lock()

    def factorize(self, values: np.ndarray, pattern: lo.Pattern, alg) -> tuple[int, sv.LinearCache]:
        A = lo.Sparse(np.asarray(values), pattern)
        cache = sv.init(sv.LinearProblem(A), alg, check_mutation=False)
        with self.lock:
            self.stats.factorizations += 1
            key = next(self.counter)
            self.caches[key] = cache
            while len(self.caches) > self.capacity:
                self.caches.popitem(last=False)
        return key, cache

    def get(self, key: int, values, pattern, alg) -> sv.LinearCache:
        with self.lock:
            cache = self.caches.get(int(key))
            if cache is not None:
                self.caches.move_to_end(int(key))
                return cache
            self.stats.misses += 1
        return self.factorize(values, pattern, alg)[1]


_REGISTRY = _Registry()


def stats() -> Stats:
    """Counters of the host-side factorizations made by ``solve`` (a snapshot)."""
    s = _REGISTRY.stats
    return Stats(s.factorizations, s.transpose_solves, s.forward_solves, s.misses)


def reset_stats() -> None:
    _REGISTRY.stats = Stats()


# ----- solve -------------------------------------------------------------------------------------
def solve(A, b, alg=None):
    """u = A⁻¹ b, differentiable with respect to A's values and b (JAX convention).

    A: ``lo.Sparse`` (jax values leaf, static pattern), a BCOO/BCSR with concrete indices, a
    dense jax array or ``lo.Dense``. b: (n,) or (n, k). ``alg``: a ``solvers`` algorithm for the
    sparse path (default ``sv.Auto()``; it must be direct or converge to tight tolerance for
    accurate gradients).

    >>> import jax, jax.numpy as jnp
    >>> A = jnp.array([[4.0, 1.0], [2.0, 3.0]])
    >>> jax.grad(lambda b: solve(A, b).sum())(jnp.array([1.0, 2.0])).round(3).tolist()
    [0.1, 0.3]
    """
    if isinstance(A, (lo.Dense,)):
        A = A.a
    if not isinstance(A, lo.LinearOperator) and hasattr(A, "ndim") and not _is_jax_sparse(A):
        return _dense_solve(jnp.asarray(A), jnp.asarray(b))
    A = lo.aslinop(A)
    if not isinstance(A, lo.Sparse):
        raise TypeError(f"adjoints.jax.solve needs a lo.Sparse, BCOO/BCSR or dense array, got "
                        f"{type(A).__name__}")
    b = jnp.asarray(b)
    if b.ndim not in (1, 2) or b.shape[0] != A.shape[0] or A.shape[0] != A.shape[1]:
        raise ShapeError(f"solve needs a square A and b of shape (n,) or (n, k): A.shape={A.shape}, "
                         f"b.shape={tuple(b.shape)}")
    values = jnp.asarray(A.values)
    if _platform(values, b) == "gpu":
        return _sparse_solve_gpu(A.pattern)(values, b)
    return _sparse_solve(A.pattern, alg if alg is not None else sv.Auto(), b.ndim)(values, b)


def _platform(*arrays) -> str:
    """Where the computation runs: the device of the first concrete array; for tracers (inside
    jax.jit) jax's default backend, which is where a jitted computation on them runs."""
    for x in arrays:
        try:
            return next(iter(x.devices())).platform
        except Exception:  # a tracer has no device
            continue
    return jax.default_backend()


def _sparse_solve_gpu(pattern: lo.Pattern):
    """GPU path without a host round trip: jax's cuSOLVER ``spsolve`` forward and, with the
    transposed pattern, backward. cuSOLVER's sparse QR keeps no factors, so this path factorizes
    twice per gradient (and once per right-hand-side column); the dense GPU path (jax LU) and the
    CPU path factorize once. Not batchable with vmap (spsolve has no batching rule)."""
    from jax.experimental.sparse.linalg import spsolve

    pt, perm = pattern.transpose()
    rows, cols = pattern.rows, pattern.indices
    ind, ptr = jnp.asarray(pattern.indices, jnp.int32), jnp.asarray(pattern.indptr, jnp.int32)
    indT, ptrT = jnp.asarray(pt.indices, jnp.int32), jnp.asarray(pt.indptr, jnp.int32)

    def cols_solve(values, ind_, ptr_, B):
        if B.ndim == 1:
            return spsolve(values, ind_, ptr_, B)
        return jnp.stack([spsolve(values, ind_, ptr_, B[:, j]) for j in range(B.shape[1])], axis=1)

    @jax.custom_vjp
    def f(values, b):
        return cols_solve(values, ind, ptr, b)

    def fwd(values, b):
        u = cols_solve(values, ind, ptr, b)
        return u, (values, u)

    def bwd(res, ubar):
        values, u = res
        lam = cols_solve(values[perm], indT, ptrT, ubar)           # Aᵀλ = ū (JAX convention)
        return -sddmm(lam, u, rows, cols, conj_v=False).astype(values.dtype), lam.astype(ubar.dtype)

    f.defvjp(fwd, bwd)
    return f


def _is_jax_sparse(A) -> bool:
    return type(A).__module__.startswith("jax.experimental.sparse")


def _sparse_solve(pattern: lo.Pattern, alg, b_ndim: int):
    rows, cols = pattern.rows, pattern.indices
    nnz, n = pattern.nnz, pattern.shape[0]

    def split(values, b):
        """Host arrays with leading vmap dims ('expand_dims') -> flat batch lists."""
        values, b = np.asarray(values), np.asarray(b)
        nb = b.ndim - b_ndim
        batch = np.broadcast_shapes(values.shape[:-1], b.shape[:nb])
        return values.reshape(-1, nnz), batch, nb

    def host_forward(values, b):
        V, batch, nb = split(values, b)
        B = np.broadcast_to(b, batch + b.shape[nb:]).reshape((-1,) + b.shape[nb:])
        U = np.empty(B.shape, dtype=np.result_type(V.dtype, B.dtype))
        keys = np.empty(B.shape[0], dtype=np.int64)
        if V.shape[0] == 1:  # one matrix: factorize once, all right-hand sides in one pass
            key, cache = _REGISTRY.factorize(V[0], pattern, alg)
            cols_ = np.moveaxis(B, 0, -1).reshape(n, -1)
            X = np.asarray(cache.solve(cols_))
            U[...] = np.moveaxis(X.reshape((n,) + B.shape[2:] + (B.shape[0],)), -1, 0)
            keys[:] = key
        else:
            Vb = np.broadcast_to(V.reshape(values.shape), batch + (nnz,)).reshape(-1, nnz)
            for i in range(B.shape[0]):
                key, cache = _REGISTRY.factorize(Vb[i], pattern, alg)
                U[i] = np.asarray(cache.solve(B[i]))
                keys[i] = key
        _REGISTRY.stats.forward_solves += 1
        return U.reshape(batch + b.shape[nb:]), keys.reshape(batch)

    def host_adjoint(keys, values, ubar):
        keys = np.asarray(keys)
        ubar = np.asarray(ubar)
        nb = keys.ndim
        V = np.asarray(values)
        batch = keys.shape
        Ub = ubar.reshape((-1,) + ubar.shape[nb:])
        Vb = np.broadcast_to(V, batch + (nnz,)).reshape(-1, nnz) if nb else V.reshape(1, nnz)
        kf = keys.reshape(-1)
        out = np.empty(Ub.shape, dtype=np.result_type(V.dtype, Ub.dtype))
        for key in np.unique(kf):
            idx = np.flatnonzero(kf == key)
            cache = _REGISTRY.get(int(key), Vb[idx[0]], pattern, alg)
            C = np.moveaxis(Ub[idx], 0, -1).reshape(n, -1)
            X = np.asarray(cache.solve_transpose(C))
            out[idx] = np.moveaxis(X.reshape((n,) + Ub.shape[2:] + (idx.size,)), -1, 0)
            _REGISTRY.stats.transpose_solves += 1
        return out.reshape(ubar.shape)

    @jax.custom_vjp
    def f(values, b):
        return fwd(values, b)[0]

    def fwd(values, b):
        dtype = jnp.result_type(values.dtype, b.dtype)
        u, keys = jax.pure_callback(
            host_forward,
            (jax.ShapeDtypeStruct(b.shape, dtype), jax.ShapeDtypeStruct((), jnp.int64)),
            values, b, vmap_method="expand_dims")
        return u, (values, u, keys)

    def bwd(res, ubar):
        values, u, keys = res
        lam = jax.pure_callback(host_adjoint, jax.ShapeDtypeStruct(ubar.shape, ubar.dtype),
                                keys, values, ubar, vmap_method="expand_dims")
        # JAX convention: b̄ = A⁻ᵀū, values̄ₖ = −λ[rowₖ]·u[colₖ] (no conjugate), O(nnz·k)
        vbar = -sddmm(lam, u, rows, cols, conj_v=False)
        return vbar.astype(values.dtype) if not jnp.iscomplexobj(values) else vbar, lam.astype(ubar.dtype)

    f.defvjp(fwd, bwd)
    return f


@jax.custom_vjp
def _dense_solve(A, b):
    return _dense_fwd(A, b)[0]


def _dense_fwd(A, b):
    if A.ndim != 2 or A.shape[0] != A.shape[1] or b.shape[0] != A.shape[0]:
        raise ShapeError(f"solve needs a square A and b of shape (n,) or (n, k): A.shape={A.shape}, "
                         f"b.shape={tuple(b.shape)}")
    lu = jax.scipy.linalg.lu_factor(A)
    u = jax.scipy.linalg.lu_solve(lu, b)
    return u, (lu, u)


def _dense_bwd(res, ubar):
    lu, u = res
    lam = jax.scipy.linalg.lu_solve(lu, ubar, trans=1)  # same factors, transposed
    if u.ndim == 1:
        Abar = -jnp.outer(lam, u)
    else:
        Abar = -lam @ u.T
    return Abar, lam


_dense_solve.defvjp(_dense_fwd, _dense_bwd)


# ----- matmul ------------------------------------------------------------------------------------
def matmul(L, R):
    """Y = L @ R with one operand a sparse operator (``lo.Sparse``, BCOO/BCSR) and the other a
    dense jax array: ``matmul(A, X)`` or ``matmul(X, A)``. Differentiable in both: X̄ by a
    sparse·dense product, the values' cotangent by SDDMM on A's pattern (O(nnz·k); never n×n).
    Dense jax arrays on both sides fall back to ``jnp.matmul``.
    """
    l_sp, r_sp = _sparse_operand(L), _sparse_operand(R)
    if l_sp and r_sp:
        raise TypeError("matmul needs one dense operand")
    if not (l_sp or r_sp):
        return jnp.matmul(_plain(L), _plain(R))
    if l_sp:
        A = lo.aslinop(L)
        X = jnp.asarray(R)
        if X.shape[0] != A.shape[1]:
            raise ShapeError(f"A @ X with A.shape={A.shape} but X.shape={tuple(X.shape)}")
        return _spmm_left(A.pattern)(jnp.asarray(A.values), X)
    A = lo.aslinop(R)
    X = jnp.asarray(L)
    if X.shape[-1] != A.shape[0]:
        raise ShapeError(f"X @ A with X.shape={tuple(X.shape)} but A.shape={A.shape}")
    return _spmm_right(A.pattern)(jnp.asarray(A.values), X)


def _plain(x):
    return x.a if isinstance(x, lo.Dense) else x


def _sparse_operand(x) -> bool:
    return isinstance(x, lo.Sparse) or _is_jax_sparse(x)


def _spmm_left(pattern: lo.Pattern):
    rows, cols = pattern.rows, pattern.indices

    @jax.custom_vjp
    def f(values, X):
        return lo.Sparse(values, pattern) @ X

    def fwd(values, X):
        return f(values, X), (values, X)

    def bwd(res, Ybar):
        values, X = res
        A = lo.Sparse(values, pattern)
        Xbar = A.T @ Ybar                                   # Aᵀ Ȳ
        vbar = sddmm(Ybar, X, rows, cols, conj_v=False)     # Σⱼ Ȳ[r,j] X[c,j]
        return vbar.astype(values.dtype), Xbar.astype(X.dtype)

    f.defvjp(fwd, bwd)
    return f


def _spmm_right(pattern: lo.Pattern):
    rows, cols = pattern.rows, pattern.indices

    @jax.custom_vjp
    def f(values, X):
        return X @ lo.Sparse(values, pattern)

    def fwd(values, X):
        return f(values, X), (values, X)

    def bwd(res, Ybar):
        values, X = res
        A = lo.Sparse(values, pattern)
        Xbar = (A @ Ybar.T).T if Ybar.ndim == 2 else A @ Ybar   # Ȳ Aᵀ
        Xt = X.T if X.ndim == 2 else X
        Yt = Ybar.T if Ybar.ndim == 2 else Ybar
        vbar = sddmm(Xt, Yt, rows, cols, conj_v=False)          # Σᵢ X[i,r] Ȳ[i,c]
        return vbar.astype(values.dtype), Xbar.astype(X.dtype)

    f.defvjp(fwd, bwd)
    return f
