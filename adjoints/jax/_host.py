"""Sparse solves on the host inside JAX: one factorization per matrix per computation, kept no
longer than the computation needs it (judged by memory, not by counters).

Two primitives:

``factorize_p(values) -> key``
    ``solvers.init`` on the host (SuperLU, CHOLMOD, PARDISO, a Krylov preconditioner: whatever
    ``alg`` says). The key (int32, shape (..., 1)) names the cache in the registry. vmap over
    values: one factorization per member; the members after the first reuse the first one's
    symbolic analysis (``sv.init(..., like=first)``), as does a site that factorizes new values
    of a pattern it has factorized before.
``host_solve_p(key, values, b) -> x``
    x = op(A)⁻¹ b with the cache ``key`` names; ``trans`` 'N' or 'T' (JAX's convention:
    the plain transpose). Linear in b, implicitly defined in A's values:

    * JVP: ẋ = op(A)⁻¹ (ḃ − op(Ȧ) x) — the same primitive with the SAME key, plus one
      ``spmm_p``; so forward mode, reverse mode (the transpose rule below) and every higher
      order reuse the factorization.
    * transpose (in b): op(A)⁻ᵀ c̄ — the same key, ``trans`` flipped.
    * vmap: native (any leading batch axes; right-hand sides that share a key are solved as
      columns of ONE call: vmap/jacrev/jacfwd over b is one multi-RHS solve).

Where factorizations are made. ``adjoints.jax`` binds ``factorize_p`` in the trace that owns
A's values (``adjoints.jax._factor``), memoized per (values, spec): a loop body (scan,
fori_loop, while_loop) that solves with a matrix built outside it does not factorize inside
the loop — the factorization is made once, before the loop, and every step's solve and every
cotangent solve of the backward loop use its key; a Python loop under jit that solves 50 times
with one A makes one factorize. A loop body that builds its matrix itself factorizes at every
step, and a step whose values equal those of a factorization the site still holds reuses it
(bit-for-bit comparison; ``stats().reuses``).

Who owns a factorization:

* eager: the key array (and every ``Factorization`` carrying it); ``weakref.finalize`` frees it
  with the last one.
* under jit: the compiled site (:class:`SiteState`, one per factorize site and compiled
  module). What lowering tells reliably is whether an op sits straight in the module's entry
  function (runs exactly once per run) or not (in a loop body, a cond branch, a nested
  function: runs any number of times). The policy:

  - factorize straight, every consumer straight: exact references; the last consumer of the
    run frees the factorization;
  - factorize straight, some consumer in a loop or branch: kept until the next run of the site
    factorizes other values (which frees it BEFORE factorizing: no two generations alive at
    once), or until the compiled module is dropped;
  - factorize inside a loop body: references as a hint; a factorization whose consumers have
    all run becomes idle (kept, so that the next step with the same values reuses it) and idle
    ones are freed when the site factorizes other values; at most ``KEEP_PER_SITE`` live per
    site.

  A computation that fails in adjoints.jax frees what compiled sites own; one that fails
  elsewhere (a user's callback) leaves its factorization to the next run of the site, which
  frees it. Capacities never change a result: a consumer that finds no factorization
  refactorizes from the values it receives (``stats().misses``), except for an explicit
  ``adj.factorize`` whose computation has ended, which is refused (``ExpiredFactorizationError``).

Factorizations are made and freed on one thread (:data:`adjoints.jax._live.HOST`;
SuperLU leaks a factor freed on another thread than the one that made it); solves run on the
thread XLA calls them on.

Errors: the eager impls raise the ``solvers`` exception itself; the jit callbacks never raise
inside XLA (that would bury the message), they return a status id that
:mod:`adjoints.jax._errors` turns into a run-time failure whose first line names the problem.

Example (eager; ``adjoints.jax.solve`` and ``adjoints.jax.factorize`` are the public way in):

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
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

import linops as lo
import solvers as sv

from . import _native
from ._errors import add_error_hook, emit_check, record
from ._live import (EAGER, HOST, REGISTRY, Entry, Stats, live, probe_of, reset_stats,
                            same_values, stats)
from ._spmm import align_batch, spmm_p, sum_to_shape

__all__ = ["Stats", "stats", "reset_stats", "live", "Spec", "Site", "SiteState", "factorize",
           "host_solve", "ExpiredFactorizationError"]

KEEP_PER_SITE = 64   # live factorizations one in-loop site may hold (a bound, never a result)


class ExpiredFactorizationError(RuntimeError):
    """An ``adjoints.jax.Factorization`` was used after the computation that made it ended.

    A factorization made inside ``jax.jit`` lives as long as that computation needs it (one
    returned from a jitted function: until that function runs again). Make it outside
    (``F = adj.factorize(A)``, eagerly) and pass F into the jitted function, or do all solves
    with it inside the one jitted function that made it.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, scipy.sparse as sp, linops as lo, adjoints.jax as adj
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> make = jax.jit(lambda v: adj.factorize(lo.Sparse(v, K.pattern)))
    >>> F = make(jnp.asarray(K.values))
    >>> F.solve(jnp.ones(2)).tolist()                # still the computation's factorization
    [0.375, 0.25]
    >>> _ = make(2 * jnp.asarray(K.values))           # the jitted function runs again
    >>> F.solve(jnp.ones(2))
    Traceback (most recent call last):
    ...
    adjoints.jax._host.ExpiredFactorizationError: adj.factorize: this factorization was made ...
    """


@dataclass(frozen=True, eq=False)
class Spec:
    """What to factorize: the static pattern, the ``solvers`` algorithm and the problem hints.
    ``explicit``: made by ``adj.factorize`` (a consumer that finds it gone refuses instead of
    refactorizing)."""

    pattern: lo.Pattern
    alg: Any
    hermitian: bool | None = None
    posdef: bool | None = None
    explicit: bool = False

    @property
    def key(self) -> tuple:
        """Hashable identity of the factorization this spec makes (explicit or not)."""
        try:
            hash(self.alg)
            alg = self.alg
        except TypeError:
            alg = ("id", id(self.alg))
        return (self.pattern, alg, self.hermitian, self.posdef)

    def __repr__(self) -> str:
        return f"Spec(n={self.pattern.shape[0]}, nnz={self.pattern.nnz}, alg={self.alg!r})"


class Site:
    """One traced factorization (its consumers carry the same site)."""

    _ids = itertools.count(1)

    def __init__(self):
        self.id = next(Site._ids)

    def __repr__(self) -> str:
        return f"site{self.id}"


class SiteState:
    """A factorize site lowered into one module: what lowering saw, and the factorizations its
    runs hold (see the module docstring for the policy)."""

    def __init__(self):
        self.factorize_eqns = 0
        self.factorize_straight = True
        self.consumers = 0
        self.consumers_straight = 0
        self.keys: dict = {}          # key -> None, in creation order
        self.idle: set = set()
        # the state lives as long as the compiled module's callbacks: when the module is
        # dropped, whatever its runs left alive goes with it
        weakref.finalize(self, _release_all, self.keys)

    @property
    def exact(self) -> bool:
        """References are exact: every op runs once per run."""
        return (self.factorize_eqns > 0 and self.factorize_straight
                and self.consumers == self.consumers_straight)

    @property
    def per_run(self) -> float:
        """Consumer references one factorize invocation hands out."""
        return self.consumers / self.factorize_eqns if self.factorize_eqns else 0.0

    def forget(self, k: int) -> None:
        """Registry callback: ``k`` is no longer this site's (freed, or taken by a holder)."""
        self.keys.pop(k, None)
        self.idle.discard(k)


def _release_all(keys: dict) -> None:
    """Finalizer of a SiteState (a function of ``keys`` only: it must not reference the state)."""
    REGISTRY.release(list(keys))


# ----- host work (runs on the host thread) -------------------------------------------------------
def _factor(values: np.ndarray, spec: Spec, like=None):
    """solvers.init on a private, read-only copy of the values (a callback's buffers die after
    the call). ``like``: a cache of the same pattern whose symbolic analysis to reuse."""
    v = np.array(values, copy=True)
    v.setflags(write=False)
    A = lo.Sparse(v, spec.pattern)
    prob = sv.LinearProblem(A, hermitian=spec.hermitian, posdef=spec.posdef)
    cache = sv.init(prob, spec.alg, like=like)
    REGISTRY.count(factorizations=1, symbolic_analyses=cache.stats.symbolic_analyses)
    return cache


def _factorize_eager(values, spec: Spec):
    """One ``solvers.init`` per leading (vmap) index; each key eager-owned (holders added by
    the caller). On a failure it frees what it made and raises."""
    values = np.asarray(values)
    lead = values.shape[:-1]
    keys = np.zeros(lead + (1,), np.int32)
    made, like = [], None
    try:
        for idx in np.ndindex(*lead):
            cache = _factor(values[idx], spec, like)
            like = cache if like is None else like
            e = Entry(cache, EAGER, None, spec.key, spec.explicit)
            k = REGISTRY.add(e)
            keys[idx + (0,)] = k
            made.append(k)
    except Exception:
        REGISTRY.release(made)
        raise
    return keys, made


def _factorize_compiled(values, spec: Spec, state: SiteState):
    """The jit callback: (keys, status). Reuses a factorization of the same values the site
    holds; frees what the site's policy says is no longer needed BEFORE factorizing."""
    values = np.asarray(values)
    lead = values.shape[:-1]
    flat = values.reshape((-1, values.shape[-1]))
    keys = np.zeros(flat.shape[0], np.int32)
    status = np.zeros(flat.shape[0], np.int32)
    skey = spec.key
    hint = state.per_run
    with REGISTRY.lock:
        held = [(k, REGISTRY.entries[k]) for k in state.keys if k in REGISTRY.entries]
    hits, probes = {}, []
    for i, v in enumerate(flat):
        probes.append(probe_of(v))
        for k, e in held:
            if same_values(e, v, probes[i]):
                hits[i] = k
                break
    like = None
    if len(hits) < flat.shape[0]:
        used = set(hits.values())
        with REGISTRY.lock:
            old = [k for k in state.keys if k not in used
                   and (state.factorize_straight or k in state.idle)]
            for k in old:   # a factorization of this pattern to take the symbolic analysis from
                if like is None and REGISTRY.entries[k].spec_key == skey:
                    like = REGISTRY.entries[k].cache
            if like is None and used:
                like = REGISTRY.entries[next(iter(used))].cache
        REGISTRY.release(old)
    with REGISTRY.lock:
        for i, k in hits.items():
            e = REGISTRY.entries.get(k)
            if e is None:
                continue
            keys[i] = k
            state.idle.discard(k)
            if e.refs is not None:
                e.refs += hint
        REGISTRY.stats.reuses += len(hits)
    for i in range(flat.shape[0]):
        if keys[i]:
            continue
        try:
            cache = _factor(flat[i], spec, like)
        except Exception as exc:
            status[i] = record(exc)
            continue
        like = cache if like is None else like
        refs = None if (state.factorize_straight and not state.exact) else hint
        k = REGISTRY.add(Entry(cache, state, refs, skey, spec.explicit))
        with REGISTRY.lock:
            state.keys[k] = None
            over = []
            if not state.factorize_straight and len(state.keys) > KEEP_PER_SITE:
                over = list(state.keys)[:len(state.keys) - KEEP_PER_SITE]
        REGISTRY.release(over)
        keys[i] = k
    cache = like = None
    return keys.reshape(lead + (1,)), status.reshape(lead + (1,))


_EXPIRED = ("adj.factorize: this factorization was made inside a jitted computation that has "
            "ended (a Factorization lives as long as the computation that made it). Make it "
            "outside jax.jit (F = adj.factorize(A)) and pass F in as an argument, or do every "
            "solve with it inside the jitted function that made it")


def _solve_host(keys, values, b, spec: Spec, trans: str, nbatch: int, state):
    """x = op(A)⁻¹ b for every batch index. The ``nbatch`` leading axes of keys, values and b
    broadcast against each other; the right-hand sides that share a key are solved together,
    as columns of one call. ``state``: the compiled site whose consumer this is (None: eager)."""
    keys, values, b = np.asarray(keys), np.asarray(values), np.asarray(b)
    if nbatch == 0:   # the common case (a step of a loop): one key, no batch bookkeeping
        k = int(keys[0])
        e = REGISTRY.get(k) if k else None
        if e is not None:
            try:
                X = e.cache.solve(b) if trans == "N" else e.cache.solve_transpose(b)
                REGISTRY.count(**{"forward_solves" if trans == "N" else "transpose_solves": 1})
                return np.asarray(X).astype(b.dtype, copy=False)
            finally:
                e = None
                if state is not None:
                    _consumed((k,), state)
    nb = nbatch
    core = b.shape[nb:]
    n = spec.pattern.shape[0]
    lead = np.broadcast_shapes(keys.shape[:nb], values.shape[:nb], b.shape[:nb])
    K = np.broadcast_to(keys[..., 0], lead).reshape(-1)
    V = np.broadcast_to(values, lead + values.shape[nb:]).reshape(-1, values.shape[-1])
    R = np.broadcast_to(b, lead + core).reshape((-1,) + core)
    out = np.empty(R.shape, b.dtype)
    uniq = np.unique(K)
    try:
        for k in uniq:
            idx = np.flatnonzero(K == k)
            if k == 0:  # its factorization failed; that failure is being reported
                out[idx] = np.nan
                continue
            e = REGISTRY.get(k)
            cache = None if e is None else e.cache
            if cache is None:
                if spec.explicit:
                    raise ExpiredFactorizationError(_EXPIRED)
                v = V[idx[0]]
                found = REGISTRY.find(spec.key, v, probe_of(v))
                if found is not None:
                    cache = found[1].cache
                    REGISTRY.count(reuses=1)
                else:  # a key from another computation, or freed: refactorize, once, not kept
                    cache = _factor(v, spec)
                    REGISTRY.count(misses=1)
            cols = np.moveaxis(R[idx], 0, -1).reshape(n, -1)
            X = cache.solve(cols) if trans == "N" else cache.solve_transpose(cols)
            X = np.asarray(X).reshape((n,) + core[1:] + (idx.size,))
            out[idx] = np.moveaxis(X, -1, 0).astype(b.dtype, copy=False)
            REGISTRY.count(**{"forward_solves" if trans == "N" else "transpose_solves": 1})
    finally:
        cache = e = None
        if state is not None:
            _consumed(uniq, state)
    return out.reshape(lead + core)


def _consumed(keys, state: SiteState) -> None:
    """One consumer of ``state`` ran for each of ``keys``: drop a reference each."""
    free = []
    with REGISTRY.lock:
        for k in keys:
            e = REGISTRY.entries.get(int(k))
            if e is None or e.owner is not state or e.refs is None:
                continue
            e.refs -= 1
            if e.refs <= 1e-9:
                if state.exact:
                    free.append(int(k))
                else:   # idle: kept for a next step with the same values; one per site
                    free.extend(state.idle)
                    state.idle.clear()
                    state.idle.add(int(k))
    REGISTRY.release(free)


def _guarded(fn, *args):
    """Run ``fn`` on the host thread inside a callback: (result, status id or 0)."""
    try:
        return HOST.call(fn, *args), 0
    except Exception as exc:
        return None, record(exc)


# ----- factorize_p -------------------------------------------------------------------------------
factorize_p = Primitive("adjoints_jax_factorize")


def factorize(values, spec: Spec, site: Site):
    """Key of a fresh host factorization of ``Sparse(values, spec.pattern)`` (not differentiable:
    the derivative of a solve comes from ``host_solve_p``'s own rule)."""
    return factorize_p.bind(jax.lax.stop_gradient(values), spec=spec, site=site)


def _factorize_impl(values, *, spec, site):
    """Eager: factorize now; the returned key array owns the factorizations."""
    keys, made = HOST.call(_factorize_eager, np.asarray(values), spec)
    out = jnp.asarray(keys)
    for k in made:
        REGISTRY.hold(k)
        weakref.finalize(out, REGISTRY.unhold, k)
    return out


def _factorize_abstract(values, *, spec, site):
    return jax.core.ShapedArray(tuple(values.shape[:-1]) + (1,), np.int32)


def _site_state(ctx, site: Site) -> SiteState:
    """The state of (site, module being lowered): kept in the module context's own cache,
    so that it is shared by every lowering rule of one module."""
    store = ctx.module_context.cached_primitive_lowerings
    key = ("adjoints.jax site", site)
    s = store.get(key)
    if s is None:
        s = store[key] = SiteState()
    return s


def _straight() -> bool:
    """The op being lowered sits directly in the module's entry function (not in a loop body,
    a cond branch or a nested function): it runs exactly once per run."""
    try:
        from jax._src.lib.mlir import ir

        owner = ir.InsertionPoint.current.block.owner
        op = owner.operation
        return (op.name == "func.func"
                and ir.StringAttr(op.attributes["sym_name"]).value == "main")
    except Exception:  # pragma: no cover - unknown lowering context: assume the worst
        return False


def _factorize_lowering(ctx, values, *, spec, site):
    """A side-effecting callback that factorizes under the site's policy."""
    state = _site_state(ctx, site)
    state.factorize_eqns += 1
    state.factorize_straight &= _straight()
    keys_aval = ctx.avals_out[0]

    def callback(v):
        out, st = _guarded(_factorize_compiled, v, spec, state)
        if st:
            return np.zeros(keys_aval.shape, np.int32), np.full(keys_aval.shape, st, np.int32)
        return out

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
    out = HOST.call(_solve_host, np.asarray(keys), np.asarray(values), np.asarray(b), spec,
                    trans, nbatch, None)
    return jnp.asarray(out)


def _solve_abstract(keys, values, b, *, spec, site, trans, nbatch):
    nb = nbatch
    lead = np.broadcast_shapes(keys.shape[:nb], values.shape[:nb], b.shape[:nb])
    return jax.core.ShapedArray(tuple(lead) + tuple(b.shape[nb:]), b.dtype)


def _solve_lowering(ctx, keys, values, b, *, spec, site, trans, nbatch):
    """A side-effecting callback that solves and hands back one reference of its factorization."""
    state = _site_state(ctx, site)
    state.consumers += 1
    straight = _straight()
    state.consumers_straight += straight
    # ---- hook: a KLU solve in a loop body lowers to the native XLA FFI call (adjoints.jax.
    # _native), with this callback's function as its fallback; everything else stays here
    if _native.applies(ctx, spec, state, straight):
        return _native.lower_solve(
            ctx, keys, values, b, trans=trans, nbatch=nbatch,
            fallback=lambda k, v, rhs: _solve_host(k, v, rhs, spec, trans, nbatch, state))
    x_aval = ctx.avals_out[0]
    st_aval = jax.core.ShapedArray((), np.int32)

    def callback(k, v, rhs):
        # solves run on the calling XLA thread (a hand-off per solve would cost more than a
        # small solve); only making and freeing factorizations must stay on the host thread
        try:
            out, st = _solve_host(k, v, rhs, spec, trans, nbatch, state), 0
        except Exception as exc:
            out, st = None, record(exc)
        if st:
            return np.full(x_aval.shape, np.nan, x_aval.dtype), np.asarray(st, np.int32)
        return out, np.zeros((), np.int32)

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
add_error_hook(REGISTRY.release_compiled)   # a failed computation's remaining consumers never run
