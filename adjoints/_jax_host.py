"""Sparse solves on the host inside JAX: one factorization per linearization point, and a
factorization lives exactly as long as the computation that needs it.

Two primitives:

``factorize_p(values) -> key``
    ``solvers.init`` on the host (SuperLU, CHOLMOD, a Krylov preconditioner: whatever ``alg``
    says). The key (int32, shape (..., 1)) names the cache in a registry.
``host_solve_p(key, values, b) -> x``
    x = op(A)⁻¹ b with the cache ``key`` names; ``trans`` 'N' or 'T' (JAX's convention:
    the plain transpose). Linear in b, implicitly defined in A's values:

    * JVP: ẋ = op(A)⁻¹ (ḃ − op(Ȧ) x) — the same primitive with the SAME key, plus one
      ``spmm_p``; so forward mode, reverse mode (the transpose rule below) and every higher
      order reuse the factorization.
    * transpose (in b): op(A)⁻ᵀ c̄ — the same key, ``trans`` flipped.
    * vmap: native (any leading batch axes; right-hand sides that share a key are solved as
      columns of one call; a batch of k matrices is k factorizations).

Who owns a factorization (so that nothing outlives the computation that needed it):

* eager (concrete values, e.g. ``jax.grad`` without ``jit``): the key array. Its
  ``weakref.finalize`` drops the factorization when JAX drops the last reference — when the
  residuals of a ``jax.vjp`` die, or right after a forward-only call.
* under ``jax.jit``: the compiled computation. Each consumer (``host_solve_p``) is lowered
  inline (``cacheable=False``) and counted per (factorization site, module) at lowering time;
  at run time the factorization is created with that many references and every consumer
  callback drops one, so the last solve of the computation frees it. Callbacks are
  side-effecting custom calls, so XLA neither removes nor merges them.

A consumer that finds no factorization (a key produced in one jitted function and used in
another, e.g. ``jax.grad(jax.jit(f))``, or a consumer inside a loop over a factorization made
outside it) refactorizes deterministically from the values it receives: correct, counted in
``stats().misses``, and never kept. Put ``jax.jit`` outermost to avoid it. Sites whose
consumers cannot be paired one-to-one with their factorizations (``jax.checkpoint``
rematerialisation, a consumer in a ``cond`` branch) keep at most ``GENERATIONS_KEPT``
generations; a failing computation frees everything compiled computations own. No capacity
ever changes a result, only whether a consumer has to refactorize.

Errors: the eager impls raise the ``solvers`` exception itself; the jit callbacks never raise
inside XLA (that would bury the message), they return a status id that
:mod:`adjoints._jax_errors` turns into a run-time failure whose first line names the problem.

Example (eager; ``adjoints.jax.solve`` is the public way in):

>>> import jax.numpy as jnp, scipy.sparse as sp, linops as lo, solvers as sv
>>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
>>> v = jnp.asarray(K.values)
>>> spec, site = Spec(K.pattern, sv.LU()), Site()
>>> keys = factorize(v, spec, site)
>>> keys.shape, live() >= 1
((1,), True)
>>> host_solve(keys, v, jnp.array([1.0, 2.0]), spec, site).tolist()
[0.25, 0.5]
>>> host_solve(keys, v, jnp.array([1.0, 1.0]), spec, site, trans="T").tolist()
[0.5, 0.125]
"""

from __future__ import annotations

import itertools
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

import linops as lo
import solvers as sv

from ._jax_errors import add_error_hook, emit_check, record
from ._jax_registry import REGISTRY, Stats, live, reset_stats, stats
from ._jax_spmm import align_batch, spmm_p, sum_to_shape

__all__ = ["Stats", "stats", "reset_stats", "live", "Spec", "Site", "factorize", "host_solve"]

GENERATIONS_KEPT = 8   # per *uncertain* compiled site only (see _Counter); never affects results


@dataclass(frozen=True, eq=False)
class Spec:
    """What to factorize: the static pattern, the ``solvers`` algorithm and the problem hints."""

    pattern: lo.Pattern
    alg: Any
    hermitian: bool | None = None
    posdef: bool | None = None

    def __repr__(self) -> str:
        return f"Spec(n={self.pattern.shape[0]}, nnz={self.pattern.nnz}, alg={self.alg!r})"


class Site:
    """One traced factorization (one call of ``adjoints.jax.solve`` while tracing)."""

    _ids = itertools.count(1)

    def __init__(self):
        self.id = next(Site._ids)

    def __repr__(self) -> str:
        return f"site{self.id}"


class _Counter:
    """One factorization site lowered into one module: how many consumers were lowered, and the
    live factorizations its runs created.

    ``uncertain``: the site's consumers cannot be matched one-to-one to its factorizations
    (a second factorize of the site in the module, as ``jax.checkpoint`` rematerialisation
    makes, or a consumer inside a ``cond`` branch that may not run). Such a counter keeps at
    most ``GENERATIONS_KEPT`` generations alive (evicted ones are refactorized if still needed:
    correct, counted as misses); every other counter is exact and unbounded.
    """

    def __init__(self):
        self.consumers = 0
        self.factorize_eqns = 0
        self.uncertain = False
        self.live: set = set()
        self.generations: deque = deque()
        # the counter lives as long as the compiled module's lowering cache: when the module
        # is dropped, whatever its runs left alive (a run that failed midway) goes with it
        weakref.finalize(self, _release_all, self.live)

    def created(self, keys) -> None:
        """Record one run's new factorizations; an uncertain site evicts its oldest
        generation beyond ``GENERATIONS_KEPT`` (an exact site frees through its consumers)."""
        if not self.uncertain:
            return
        with REGISTRY.lock:
            self.generations.append(list(keys))
            while len(self.generations) > GENERATIONS_KEPT:
                REGISTRY.release(self.generations.popleft())


def _release_all(live: set) -> None:
    """Finalizer of a _Counter (a function of ``live`` only: it must not reference the counter)."""
    REGISTRY.release(list(live))


# ----- host work (shared by the eager impls and the jit callbacks) -------------------------------
def _factor(values: np.ndarray, spec: Spec):
    """solvers.init on a private, read-only copy of the values (a callback's buffers die after
    the call; read-only, so that the operator keeps it as its snapshot without a second copy)."""
    v = np.array(values, copy=True)
    v.setflags(write=False)
    A = lo.Sparse(v, spec.pattern)
    cache = sv.init(sv.LinearProblem(A, hermitian=spec.hermitian, posdef=spec.posdef), spec.alg)
    with REGISTRY.lock:
        REGISTRY.stats.factorizations += 1
    return cache


def _factorize_host(values, spec: Spec, refs, owner, raise_errors: bool):
    """One ``solvers.init`` per leading (vmap) index of ``values``: (keys, status, made keys).

    On a failure it releases what it made and raises (eager), or, inside a callback that must
    not raise, records the exception and leaves key 0 in the failed member's place."""
    values = np.asarray(values)
    lead = values.shape[:-1]
    keys = np.zeros(lead + (1,), np.int32)
    status = np.zeros(lead + (1,), np.int32)
    made = []
    for idx in np.ndindex(*lead):
        try:
            cache = _factor(values[idx], spec)
        except Exception as e:
            if raise_errors:
                REGISTRY.release(made)
                raise
            status[idx + (0,)] = record(e)
            continue
        k = REGISTRY.add(cache, refs, owner)
        keys[idx + (0,)] = k
        made.append(k)
    return keys, status, made


def _solve_host(keys, values, b, spec: Spec, trans: str, nbatch: int, owner,
                raise_errors: bool):
    """x = op(A)⁻¹ b for every batch index: (x, status).

    The ``nbatch`` leading axes of keys, values and b broadcast against each other; the
    right-hand sides that share a key are solved together, as columns of one call. With an
    ``owner`` (jit) each key used drops one consumer reference, failed or not."""
    keys, values, b = np.asarray(keys), np.asarray(values), np.asarray(b)
    nb = nbatch
    core = b.shape[nb:]
    n = spec.pattern.shape[0]
    lead = np.broadcast_shapes(keys.shape[:nb], values.shape[:nb], b.shape[:nb])
    K = np.broadcast_to(keys[..., 0], lead).reshape(-1)
    V = np.broadcast_to(values, lead + values.shape[nb:]).reshape(-1, values.shape[-1])
    R = np.broadcast_to(b, lead + core).reshape((-1,) + core)
    out = np.empty(R.shape, b.dtype)
    status = np.zeros((), np.int32)
    uniq = np.unique(K)
    try:
        for k in uniq:
            idx = np.flatnonzero(K == k)
            if k == 0:  # its factorization failed; that failure is being reported
                out[idx] = np.nan
                continue
            cache = REGISTRY.get(k)
            if cache is None:  # a key from another computation, or evicted: refactorize, once
                cache = _factor(V[idx[0]], spec)
                with REGISTRY.lock:
                    REGISTRY.stats.misses += 1
            cols = np.moveaxis(R[idx], 0, -1).reshape(n, -1)
            X = cache.solve(cols) if trans == "N" else cache.solve_transpose(cols)
            X = np.asarray(X).reshape((n,) + core[1:] + (idx.size,))
            out[idx] = np.moveaxis(X, -1, 0).astype(b.dtype, copy=False)
            with REGISTRY.lock:
                attr = "forward_solves" if trans == "N" else "transpose_solves"
                setattr(REGISTRY.stats, attr, getattr(REGISTRY.stats, attr) + 1)
    except Exception as e:
        if raise_errors:
            raise
        status = np.asarray(record(e), np.int32)
        out[...] = np.nan  # never read: the status check fails the computation first
    finally:
        if owner is not None:
            REGISTRY.consume(uniq, owner)
    return out.reshape(lead + core), status


# ----- factorize_p -------------------------------------------------------------------------------
factorize_p = Primitive("adjoints_jax_factorize")


def factorize(values, spec: Spec, site: Site):
    """Key of a fresh host factorization of ``Sparse(values, spec.pattern)`` (not differentiable:
    the derivative of a solve comes from ``host_solve_p``'s own rule)."""
    return factorize_p.bind(jax.lax.stop_gradient(values), spec=spec, site=site)


def _factorize_impl(values, *, spec, site):
    """Eager: factorize now; the returned key array owns the factorizations."""
    keys, _, made = _factorize_host(values, spec, None, None, raise_errors=True)
    out = jnp.asarray(keys)
    weakref.finalize(out, REGISTRY.release, made)   # the key array owns the factorizations
    return out


def _factorize_abstract(values, *, spec, site):
    return jax.core.ShapedArray(tuple(values.shape[:-1]) + (1,), np.int32)


def _module_counter(ctx, site: Site) -> _Counter:
    """The counter of (site, module being lowered): kept in the module context's own cache,
    so that it is shared by every lowering rule of one module and dies with it."""
    store = ctx.module_context.cached_primitive_lowerings
    key = ("adjoints.jax host consumers", site)
    c = store.get(key)
    if c is None:
        c = store[key] = _Counter()
    return c


def _factorize_lowering(ctx, values, *, spec, site):
    """A side-effecting callback that factorizes with as many references as the module has
    consumers of this site. ``counter.consumers`` is read when the callback RUNS: by then
    every consumer of the module has been lowered and counted."""
    counter = _module_counter(ctx, site)
    counter.factorize_eqns += 1
    # a second factorize of one site in one module (rematerialisation): refs can't be exact
    counter.uncertain |= counter.factorize_eqns > 1
    keys_aval = ctx.avals_out[0]

    def callback(v):
        keys, status, made = _factorize_host(v, spec, counter.consumers, counter, False)
        if counter.consumers and made:
            counter.created(made)
        return keys, status

    sub = ctx.replace(avals_out=[keys_aval, keys_aval])
    outs, _, _ = mlir.emit_python_callback(sub, callback, None, [values], ctx.avals_in,
                                           [keys_aval, keys_aval], has_side_effect=True,
                                           returns_token=False)
    keys, status = outs
    emit_check(ctx, status, keys_aval)
    return [keys]


def _factorize_jvp(primals, tangents, *, spec, site):
    """Keys have no tangent: derivatives of a solve come from ``host_solve_p``'s JVP."""
    out = factorize_p.bind(*primals, spec=spec, site=site)
    return out, ad.Zero.from_primal_value(out)


def _factorize_batch(args, dims, *, spec, site):
    """vmap over values: one factorization per batch member, the batch axis first."""
    (values,), (d,) = args, dims
    return factorize_p.bind(jnp.moveaxis(values, d, 0), spec=spec, site=site), 0


factorize_p.def_impl(_factorize_impl)
factorize_p.def_abstract_eval(_factorize_abstract)
mlir.register_lowering(factorize_p, _factorize_lowering, cacheable=False)
ad.primitive_jvps[factorize_p] = _factorize_jvp
batching.primitive_batchers[factorize_p] = _factorize_batch


# ----- host_solve_p ------------------------------------------------------------------------------
host_solve_p = Primitive("adjoints_jax_host_solve")


def host_solve(keys, values, b, spec: Spec, site: Site, trans: str = "N"):
    """op(A)⁻¹ b with the factorization ``keys`` names (A = Sparse(values, spec.pattern))."""
    return host_solve_p.bind(keys, values, b, spec=spec, site=site, trans=trans, nbatch=0)


def _solve_impl(keys, values, b, *, spec, site, trans, nbatch):
    """Eager: solve now with the registry's cache (or refactorize on a miss)."""
    out, _ = _solve_host(keys, values, b, spec, trans, nbatch, None, raise_errors=True)
    return jnp.asarray(out)


def _solve_abstract(keys, values, b, *, spec, site, trans, nbatch):
    nb = nbatch
    lead = np.broadcast_shapes(keys.shape[:nb], values.shape[:nb], b.shape[:nb])
    return jax.core.ShapedArray(tuple(lead) + tuple(b.shape[nb:]), b.dtype)


def _solve_lowering(ctx, keys, values, b, *, spec, site, trans, nbatch):
    """A side-effecting callback that solves and drops one reference of its factorization."""
    counter = _module_counter(ctx, site)
    counter.consumers += 1
    # a consumer in a cond branch may never run, and then its reference would never be dropped
    counter.uncertain |= any(part == "cond" or part.startswith("branch_")
                             for part in str(ctx.name_stack).split("/"))
    x_aval = ctx.avals_out[0]
    st_aval = jax.core.ShapedArray((), np.int32)

    def callback(k, v, rhs):
        return _solve_host(k, v, rhs, spec, trans, nbatch, counter, raise_errors=False)

    sub = ctx.replace(avals_out=[x_aval, st_aval])
    outs, _, _ = mlir.emit_python_callback(sub, callback, None, [keys, values, b], ctx.avals_in,
                                           [x_aval, st_aval], has_side_effect=True,
                                           returns_token=False)
    x, status = outs
    emit_check(ctx, status, st_aval)
    return [x]


def _flip(trans: str) -> str:
    """'N' <-> 'T' (JAX transposes never conjugate)."""
    return "T" if trans == "N" else "N"


def _solve_jvp(primals, tangents, *, spec, site, trans, nbatch):
    keys, values, b = primals
    _, dvalues, db = tangents  # keys carry no tangent
    params = dict(spec=spec, site=site, trans=trans, nbatch=nbatch)
    x = host_solve_p.bind(keys, values, b, **params)
    rhs = None if type(db) is ad.Zero else db
    if type(dvalues) is not ad.Zero:       # ẋ = op(A)⁻¹ (ḃ − op(Ȧ) x)
        dax = spmm_p.bind(dvalues, x, pattern=spec.pattern, trans=trans, nbatch=nbatch)
        dax = dax.astype(x.dtype)           # x's dtype already promotes A's and b's
        rhs = -dax if rhs is None else rhs - dax
    if rhs is None:
        return x, ad.Zero.from_primal_value(x)
    return x, host_solve_p.bind(keys, values, rhs, **params)


def _solve_transpose(ct, keys, values, b, *, spec, site, trans, nbatch):
    """Transpose in b: op(A)⁻ᵀ c̄ with the same key. A's values are never the linear input:
    the JVP above moved their tangent into the right-hand side."""
    if ad.is_undefined_primal(keys) or ad.is_undefined_primal(values):
        raise NotImplementedError("host_solve_p is linear in b only")
    aval = b.aval
    if type(ct) is ad.Zero:
        return None, None, ad.Zero(aval)
    out = host_solve_p.bind(keys, values, ct, spec=spec, site=site, trans=_flip(trans),
                            nbatch=nbatch)
    return None, None, sum_to_shape(out, aval.shape).astype(aval.dtype)


def _solve_batch(args, dims, *, spec, site, trans, nbatch):
    """vmap: one more leading batch axis on every operand (size 1 where unbatched)."""
    keys, values, b = align_batch(args, dims)
    out = host_solve_p.bind(keys, values, b, spec=spec, site=site, trans=trans,
                            nbatch=nbatch + 1)
    return out, 0


host_solve_p.def_impl(_solve_impl)
host_solve_p.def_abstract_eval(_solve_abstract)
mlir.register_lowering(host_solve_p, _solve_lowering, cacheable=False)
ad.primitive_jvps[host_solve_p] = _solve_jvp
ad.primitive_transposes[host_solve_p] = _solve_transpose
batching.primitive_batchers[host_solve_p] = _solve_batch
add_error_hook(REGISTRY.release_owned)   # a failed computation's remaining consumers never run
