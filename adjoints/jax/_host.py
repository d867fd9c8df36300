"""Sparse solves on the host inside JAX: the factorize and solve primitives, and the lowering
that every host primitive of adjoints.jax shares.

``factorize_p(values) -> key``
    ``solvers.init`` on the host (SuperLU, CHOLMOD, PARDISO, a Krylov preconditioner: whatever
    ``alg`` says). The key (int32, shape (..., 1)) names the cache in the live-factorization
    store (:mod:`adjoints.jax._live`). vmap over values: one factorization per member; values
    equal to a live factorization's (any site, any earlier step) reuse it; a new factorization
    reuses the symbolic analysis of a live one of the same pattern (``sv.init(..., like=)``).
``host_solve_p(key, values, b) -> x``
    x = op(A)⁻¹ b with the cache ``key`` names; ``trans`` 'N' or 'T' (JAX's convention: the
    plain transpose). Linear in b, implicitly defined in A's values:

    * JVP: ẋ = op(A)⁻¹ (ḃ − op(Ȧ) x) — the same primitive with the SAME key, plus one
      ``spmm_p``; so forward mode, reverse mode (the transpose rule below) and every higher
      order reuse the factorization.
    * transpose (in b): op(A)⁻ᵀ c̄ — the same key, ``trans`` flipped.
    * vmap: native (any leading batch axes; right-hand sides that share a key are solved as
      columns of ONE call: vmap/jacrev/jacfwd over b is one multi-RHS solve).

The log-determinant and inverse-entry primitives (:mod:`adjoints.jax._queries`) are consumers
of the same keys, lowered by the same :func:`emit_host_call`.

Where factorizations are made: ``adjoints.jax`` binds ``factorize_p`` in the trace that owns
A's values (:mod:`adjoints.jax._factor`), memoized per (values, spec): a loop body that solves
with a matrix built outside it factorizes once, before the loop, and a Python loop under jit
that solves 50 times with one A makes one factorize. How long a factorization lives is the
store's policy (:class:`adjoints.jax._live.Store`), fed by what lowering records about each
operation (:mod:`adjoints.jax._sites`); correctness never depends on it: a consumer checks
the values against the factorization its key names and refactorizes when they differ or it
is gone (``stats().misses``).

Interface of a host primitive (what a native XLA lowering would replace): operands are plain
arrays (key int32 (..., 1), values (..., nnz), right-hand sides); static parameters are the
:class:`Spec`, the :class:`~adjoints.jax._sites.Site` / ``Link`` / ``role`` of the operation,
and the shapes; the host work is one function of numpy arrays (``_factorize_compiled``,
``_solve_host``, ...); the lowering (:func:`emit_host_call`) adds the run id as a first operand
and a status output that :mod:`adjoints.jax._errors` turns into a named run-time error.

Errors: the eager impls raise the ``solvers`` exception itself; the jit callbacks never raise
inside XLA (that would bury the message), they return a status id whose error's first line
names the problem.

Example (eager; ``adjoints.jax.solve`` and ``adjoints.jax.factorize`` are the public way in):

>>> import jax.numpy as jnp, scipy.sparse as sp, linops as lo, solvers as sv
>>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
>>> v = jnp.asarray(K.values)
>>> spec = Spec(K.pattern, sv.LU())
>>> keys = factorize(v, spec, None)
>>> keys.shape, live() >= 1
((1,), True)
>>> host_solve(keys, v, jnp.array([1.0, 2.0]), spec, None).tolist()
[0.25, 0.5]
>>> host_solve(keys, v, jnp.array([1.0, 1.0]), spec, None, trans="T").tolist()
[0.5, 0.125]
"""

from __future__ import annotations

import weakref
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

import linops as lo
import solvers as sv

from . import _ffi, _native
from ._errors import add_error_hook, emit_check, raise_for, record
from ._live import HOST, STORE, Spec, Stats, live, probe_of, reset_stats, stats
from ._sites import Link, module_info, straight
from ._spmm import align_batch, spmm_p, sum_to_shape

__all__ = ["Stats", "stats", "reset_stats", "live", "Spec", "factorize", "host_solve",
           "ExpiredFactorizationError", "emit_host_call", "factor_on_host", "cache_for",
           "flip_role", "check_finite"]


class ExpiredFactorizationError(RuntimeError):
    """Kept so that ``except adj.ExpiredFactorizationError`` clauses keep working; no longer
    raised.

    A :class:`adjoints.jax.Factorization` now lives as long as it is held (returned from
    ``jax.jit``, carried out of a loop, sliced out of a batch), and a consumer whose key names
    no factorization refactorizes from the values it carries (counted in
    ``adj.stats().misses``) instead of failing.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, scipy.sparse as sp, linops as lo, adjoints.jax as adj
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> make = jax.jit(lambda v: adj.factorize(lo.Sparse(v, K.pattern)))
    >>> F = make(jnp.asarray(K.values))
    >>> _ = make(2 * jnp.asarray(K.values))           # the jitted function runs again
    >>> F.solve(jnp.ones(2)).tolist()                 # F still holds its factorization
    [0.375, 0.25]
    """


_ROLE_TEXT = {"primal": "b", "tangent": "the tangent right-hand side (ḃ − Ȧu)",
              "cotangent": "the cotangent flowing back into this solve"}


def flip_role(role: str) -> str:
    """The role of the transpose of an operation with ``role``."""
    return "tangent" if role == "cotangent" else "cotangent"


def check_finite(x: np.ndarray, what: str) -> None:
    """NonFiniteInputError naming the first NaN/Inf of ``x`` (O(size), vectorised)."""
    ok = np.isfinite(x)
    if ok.all():
        return
    bad = np.flatnonzero(~ok.reshape(-1))
    idx = np.unravel_index(int(bad[0]), x.shape)
    raise sv.NonFiniteInputError(
        f"{what} contains {x.reshape(-1)[bad[0]]} at index {tuple(int(i) for i in idx)} "
        f"({bad.size} non-finite entries; adjoints.jax checks every right-hand side)")


# ----- host work (runs on the host thread) -------------------------------------------------------
def factor_on_host(values: np.ndarray, spec: Spec, like=None, loop: bool = False):
    """solvers.init on a private, read-only copy of the values (a callback's buffers die after
    the call). ``like``: a cache of the same pattern whose symbolic analysis to reuse. NaN/Inf
    in the values are named by their row and column. ``loop``: the factorization is solved
    at the steps of a compiled loop through the native FFI call, so the default algorithm
    prefers an engine that call solves with (``sv.Auto(loop_solves=True)``); an algorithm the
    caller chose is kept."""
    v = np.array(values, copy=True)
    ok = np.isfinite(v)
    if not ok.all():
        k = int(np.flatnonzero(~ok)[0])
        P = spec.pattern
        raise sv.NonFiniteInputError(
            f"A contains {v[k]} at ({int(P.rows[k])}, {int(P.indices[k])}) (stored entry {k}; "
            f"{int((~ok).sum())} non-finite values); adjoints.jax checks every factorization")
    v.setflags(write=False)
    A = lo.Sparse(v, spec.pattern)
    prob = sv.LinearProblem(A, hermitian=spec.hermitian, posdef=spec.posdef)
    alg = replace(spec.alg, loop_solves=True) if loop and isinstance(spec.alg, sv.Auto) \
        else spec.alg
    cache = sv.init(prob, alg, like=like, check_finite=False)
    STORE.count(factorizations=1, symbolic_analyses=cache.stats.symbolic_analyses)
    return cache


def _factorize_eager(values, spec: Spec):
    """One factorization per leading (vmap) index, each held once (by the caller's key array);
    the members after the first reuse the first one's symbolic analysis. On a failure, frees
    what it made."""
    values = np.asarray(values)
    lead = values.shape[:-1]
    keys = np.zeros(lead + (1,), np.int32)
    made, like = [], None
    try:
        for idx in np.ndindex(*lead):
            cache = factor_on_host(values[idx], spec, like)
            like = cache if like is None else like
            k = STORE.add(cache, spec, holders=1)
            keys[idx + (0,)] = k
            made.append(k)
        cache = like = None
    except Exception:
        cache = like = None
        STORE.drop(made)
        raise
    return keys


def _factorize_compiled(values, spec: Spec, op, loop: bool = False):
    """The jit callback: (keys, status). Reuses a live factorization of the same values; frees
    what this operation made in an earlier run BEFORE factorizing (no two generations).
    ``loop``: native loop solves consume the keys (see :func:`factor_on_host`)."""
    values = np.asarray(values)
    lead = values.shape[:-1]
    flat = values.reshape((-1, values.shape[-1]))
    keys = np.zeros(flat.shape[0], np.int32)
    status = np.zeros(flat.shape[0], np.int32)
    probes = [probe_of(v) for v in flat]
    STORE.moved_on(op, probes)
    for i, v in enumerate(flat):
        hit = STORE.find(spec, v, probes[i])
        if hit is not None:
            keys[i] = hit[0]
            STORE.count(reuses=1)
            continue
        STORE.trim_pool()
        try:
            cache = factor_on_host(v, spec, STORE.like(spec), loop)
        except Exception as exc:
            status[i] = record(exc)
            continue
        keys[i] = STORE.add(cache, spec)
        cache = None
    STORE.factorized(op, keys)
    if loop:   # native loop solves consume them: their first step finds the native factor
        _native.alias_keys(keys[keys != 0])
    return keys.reshape(lead + (1,)), status.reshape(lead + (1,))


def cache_for(k: int, v: np.ndarray, spec: Spec, keep: bool = True, loop: bool = False):
    """(key, cache) for key ``k`` and A's values ``v``: the cache ``k`` names if it was made
    from ``v``; else a live factorization of ``v`` that serves ``spec``; else a new one (a
    miss: stored under a new key when ``keep`` — a compiled consumer then claims it — else
    used once, key 0). ``(0, None)`` for key 0 (a failed factorization being reported)."""
    if not k:
        return 0, None
    cache = STORE.lookup(k, v)
    if cache is not None:
        return k, cache
    probe = probe_of(v)
    found = STORE.find(spec, v, probe)
    if found is not None:
        STORE.count(reuses=1)
        return found
    cache = HOST.call(factor_on_host, v, spec, STORE.like(spec), loop)
    STORE.count(misses=1)
    return (STORE.add(cache, spec) if keep else 0), cache


def _solve_host(keys, values, b, spec: Spec, trans: str, nbatch: int, op, role: str):
    """x = op(A)⁻¹ b for every batch index. The ``nbatch`` leading axes of keys, values and b
    broadcast against each other; the right-hand sides that share a key are solved together,
    as columns of one call. ``op``: the compiled operation (None: eager)."""
    keys, values, b = np.asarray(keys), np.asarray(values), np.asarray(b)
    used, transient = set(), []
    try:
        nb = nbatch
        core = b.shape[nb:]
        n = spec.pattern.shape[0]
        lead = np.broadcast_shapes(keys.shape[:nb], values.shape[:nb], b.shape[:nb])
        K = np.broadcast_to(keys[..., 0], lead).reshape(-1)
        V = np.broadcast_to(values, lead + values.shape[nb:]).reshape(-1, values.shape[-1])
        check_finite(b, _ROLE_TEXT[role])
        R = np.broadcast_to(b, lead + core).reshape((-1,) + core)
        out = np.empty(R.shape, b.dtype)
        groups = {}
        for i, k in enumerate(K):   # members sharing a key and its values: one call
            groups.setdefault((int(k), probe_of(V[i])), []).append(i)
        for (k, _), idx in groups.items():
            idx = np.asarray(idx)
            k, cache = cache_for(k, V[idx[0]], spec, keep=op is not None,
                                 loop=getattr(op, "native", False))
            if cache is None:       # its factorization failed; that failure is being reported
                out[idx] = np.nan
                continue
            used.add(k)
            if not k:
                transient.append(cache)   # an eager miss: used once, dropped on the host thread
            cols = np.moveaxis(R[idx], 0, -1).reshape(n, -1)
            X = cache.solve(cols) if trans == "N" else cache.solve_transpose(cols)
            X = np.asarray(X).reshape((n,) + core[1:] + (idx.size,))
            out[idx] = np.moveaxis(X, -1, 0).astype(b.dtype, copy=False)
            STORE.count(**{"forward_solves" if trans == "N" else "transpose_solves": 1})
            cache = None
        return out.reshape(lead + core)
    finally:
        cache = None
        HOST.discard(transient)
        if op is not None:
            STORE.consumed(op, used)


# ----- the lowering every host primitive shares --------------------------------------------------
def emit_host_call(ctx, op, fn, operands, avals_out, status_aval):
    """Lower one host operation: a side-effecting callback ``fn(*operands) -> outputs`` (numpy
    arrays) run with the run id first (the store's run boundary), its status checked after it.

    ``fn`` returns the outputs, or ``(outputs, status)`` when ``status_aval`` has a shape (per
    batch member statuses); an exception becomes a status id (the named error at run time) and
    NaN/zero outputs."""
    avals_in = [_ffi.RUN_ID_AVAL, *ctx.avals_in]
    weakref.finalize(op, STORE.forget_op, op.id)   # the module dropped: the op's pins end

    def callback(run, *args):
        def work():
            STORE.begin(_ffi.run_id_of_buffer(run))
            op.module.freeze()
            return fn(*args)

        try:
            res = work() if op.kind == "consumer" else HOST.call(work)
        except Exception as exc:
            st = record(exc)
            return (*[np.full(a.shape, np.nan if np.dtype(a.dtype).kind in "fc" else 0, a.dtype)
                      for a in avals_out], np.full(status_aval.shape, st, np.int32))
        if status_aval.shape:
            outs, status = res
            return (*outs, status)
        return (*res, np.zeros((), np.int32))

    sub = ctx.replace(avals_in=avals_in, avals_out=[*avals_out, status_aval])
    run = _ffi.emit_run_id(ctx)
    outs, _, _ = mlir.emit_python_callback(sub, callback, None, [run, *operands], avals_in,
                                           [*avals_out, status_aval], has_side_effect=True,
                                           returns_token=False)
    emit_check(ctx, outs[-1], status_aval)
    return list(outs[:-1])


# ----- factorize_p -------------------------------------------------------------------------------
factorize_p = Primitive("adjoints_jax_factorize")


def factorize(values, spec: Spec, site):
    """Key of a host factorization of ``Sparse(values, spec.pattern)`` (not differentiable:
    the derivative of a solve comes from ``host_solve_p``'s own rule). ``site``: the traced
    factorization it belongs to (an :class:`adjoints.jax._sites.Site`, or None eagerly)."""
    return factorize_p.bind(jax.lax.stop_gradient(values), spec=spec, site=site)


def _factorize_impl(values, *, spec, site):
    """Eager: factorize now; the returned key array holds the factorizations."""
    keys = HOST.call(_factorize_eager, np.asarray(values), spec)
    out = jnp.asarray(keys)
    weakref.finalize(out, STORE.unhold, [int(k) for k in keys.reshape(-1)])
    return out


def _factorize_abstract(values, *, spec, site):
    return jax.core.ShapedArray(tuple(values.shape[:-1]) + (1,), np.int32)


def _factorize_lowering(ctx, values, *, spec, site):
    op = module_info(ctx).add("factorize", site, straight=straight())
    keys_aval = ctx.avals_out[0]
    # ---- hook: a KLU factorization in a loop body that only native solves consume lowers to
    # the FFI factorize (adjoints.jax._native): a step of the loop never enters Python
    if _native.factorize_applies(ctx, spec, op):
        op.native = True

        def fallback(v):
            op.module.freeze()
            keys, status = HOST.call(_factorize_compiled, np.array(v), spec, op, True)
            raise_for(status)
            return keys

        return _native.lower_factorize(ctx, values, spec=spec, op=op, fallback=fallback)

    def fn(v):
        keys, status = _factorize_compiled(v, spec, op, op.module.loop_solved(op))
        return (keys,), status

    return emit_host_call(ctx, op, fn, [values], [keys_aval], keys_aval)


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


def host_solve(keys, values, b, spec: Spec, site, trans: str = "N", *, link=None,
               role: str = "primal"):
    """op(A)⁻¹ b with the factorization ``keys`` names (A = Sparse(values, spec.pattern))."""
    return host_solve_p.bind(keys, values, b, spec=spec, site=site,
                             link=Link() if link is None else link, role=role, trans=trans,
                             nbatch=0)


def _solve_impl(keys, values, b, *, spec, site, link, role, trans, nbatch):
    """Eager: solve now with the store's cache (or refactorize on a miss)."""
    out = _solve_host(np.asarray(keys), np.asarray(values), np.asarray(b), spec, trans, nbatch,
                      None, role)
    return jnp.asarray(out)


def _solve_abstract(keys, values, b, *, spec, site, link, role, trans, nbatch):
    nb = nbatch
    lead = np.broadcast_shapes(keys.shape[:nb], values.shape[:nb], b.shape[:nb])
    return jax.core.ShapedArray(tuple(lead) + tuple(b.shape[nb:]), b.dtype)


def _solve_lowering(ctx, keys, values, b, *, spec, site, link, role, trans, nbatch):
    op = module_info(ctx).add("consumer", site, link, role, straight())
    # ---- hook: a KLU solve in a loop body lowers to the native XLA FFI call (adjoints.jax.
    # _native), with this callback's function as its fallback; everything else stays here
    if _native.applies(ctx, spec, op):
        op.native = True

        def fallback(k, v, rhs):
            op.module.freeze()
            return _solve_host(k, v, rhs, spec, trans, nbatch, op, role)

        return _native.lower_solve(ctx, keys, values, b, trans=trans, nbatch=nbatch,
                                   fallback=fallback, op=op)
    st_aval = jax.core.ShapedArray((), np.int32)

    def fn(k, v, rhs):
        # solves run on the calling XLA thread (a hand-off per solve would cost more than a
        # small solve); only making and freeing factorizations stay on the host thread
        return (_solve_host(k, v, rhs, spec, trans, nbatch, op, role),)

    return emit_host_call(ctx, op, fn, [keys, values, b], [ctx.avals_out[0]], st_aval)


def _flip(trans: str) -> str:
    """'N' <-> 'T' (JAX transposes never conjugate)."""
    return "T" if trans == "N" else "N"


def _solve_jvp(primals, tangents, *, spec, site, link, role, trans, nbatch):
    keys, values, b = primals
    _, dvalues, db = tangents  # keys carry no tangent
    params = dict(spec=spec, site=site, link=link, trans=trans, nbatch=nbatch)
    x = host_solve_p.bind(keys, values, b, role=role, **params)
    rhs = None if type(db) is ad.Zero else db
    if type(dvalues) is not ad.Zero:       # ẋ = op(A)⁻¹ (ḃ − op(Ȧ) x)
        dax = spmm_p.bind(dvalues, x, pattern=spec.pattern, trans=trans, nbatch=nbatch)
        dax = dax.astype(x.dtype)           # x's dtype already promotes A's and b's
        rhs = -dax if rhs is None else rhs - dax
    if rhs is None:
        return x, ad.Zero.from_primal_value(x)
    return x, host_solve_p.bind(keys, values, rhs, role="tangent", **params)


def _solve_transpose(ct, keys, values, b, *, spec, site, link, role, trans, nbatch):
    """Transpose in b: op(A)⁻ᵀ c̄ with the same key. A's values are never the linear input:
    the JVP above moved their tangent into the right-hand side."""
    if ad.is_undefined_primal(keys) or ad.is_undefined_primal(values):
        raise NotImplementedError("host_solve_p is linear in b only")
    aval = b.aval
    if type(ct) is ad.Zero:
        return None, None, ad.Zero(aval)
    out = host_solve_p.bind(keys, values, ct, spec=spec, site=site, link=link,
                            role=flip_role(role), trans=_flip(trans), nbatch=nbatch)
    return None, None, sum_to_shape(out, aval.shape).astype(aval.dtype)


def _solve_batch(args, dims, *, spec, site, link, role, trans, nbatch):
    """vmap: one more leading batch axis on every operand (size 1 where unbatched)."""
    keys, values, b = align_batch(args, dims)
    out = host_solve_p.bind(keys, values, b, spec=spec, site=site, link=link, role=role,
                            trans=trans, nbatch=nbatch + 1)
    return out, 0


host_solve_p.def_impl(_solve_impl)
host_solve_p.def_abstract_eval(_solve_abstract)
mlir.register_lowering(host_solve_p, _solve_lowering, cacheable=False)
ad.primitive_jvps[host_solve_p] = _solve_jvp
ad.primitive_transposes[host_solve_p] = _solve_transpose
batching.primitive_batchers[host_solve_p] = _solve_batch
add_error_hook(STORE.abandon)   # a failed computation's remaining consumers never run
