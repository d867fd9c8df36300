"""Factor queries on the host inside JAX: log-determinants and entries of the inverse, through
the same keys, store and lowering as the solves (:mod:`adjoints.jax._host`).

``logdet_p(key, values) -> (sign, log|det A|)``
    ``cache.logdet()`` of the factorization ``key`` names: O(n) on the factors, no solve.
    JVP: d log|det A| = Re tr(A⁻¹dA) = Re Σₑ (A⁻¹)_{cₑrₑ} dvₑ and, for complex A,
    d sign = sign·i·Im tr(A⁻¹dA): the entries of A⁻¹ on Aᵀ's pattern are ``inv_entries_p``
    of the same key (selected inversion on the same factors). Linear in dv, so JAX transposes
    it for reverse mode by itself.
``inv_entries_p(key, values) -> A⁻¹[rows, cols]``
    the entries at static positions: selected inversion of the factors (SuperLU, CHOLMOD,
    dense), positions outside the factor's filled pattern by solves (``lo.sample`` of
    ``sv.inverse``). JVP: d(A⁻¹)[r, c] = −(A⁻¹ dA A⁻¹)[r, c] = −(A⁻ᵀeᵣ)ᵀ dA (A⁻¹e_c), computed by
    solves with the SAME factorization (``host_solve_p``: counted, differentiable again) in
    blocks of at most ``m`` distinct rows and columns (``lax.scan`` over the blocks: memory
    O(n·m), a fixed number of operations in the module). So the second derivatives of log det
    (``jax.hessian``, ``jvp`` of ``grad``) and the first derivatives of a few entries cost
    solves with one factorization, and the hessian of entries differentiates those solves.

Both are consumers in the live-factorization store's sense: they claim and release the
factorization like a solve (:mod:`adjoints.jax._live`), with vmap over leading batch axes.

>>> import jax.numpy as jnp, numpy as np, scipy.sparse as sp, linops as lo, solvers as sv
>>> from adjoints.jax._live import Spec
>>> from adjoints.jax._factor import make
>>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [1.0, 3.0]]))
>>> F = make(jnp.asarray(K.values), Spec(K.pattern, sv.LU()))
>>> s, ld = slogdet(F.key, F.values, F.spec, None)
>>> float(s), round(float(jnp.exp(ld)), 12)
(1.0, 5.0)
>>> (inv_entries(F.key, F.values, F.spec, None, [0, 1], [0, 1]) * 5).round(12).tolist()
[3.0, 2.0]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

import linops as lo
import solvers as sv

from ._host import STORE, cache_for, emit_host_call, host_solve_p
from ._sites import Link, module_info, straight
from ._spmm import align_batch, index32, spmm_p

__all__ = ["slogdet", "inv_entries", "Positions", "logdet_p", "inv_entries_p"]


class Positions:
    """Static positions (rows, cols) of entries of A⁻¹: a hashable primitive parameter, with
    the blocks the tangent's solves are grouped in (computed once)."""

    def __init__(self, rows, cols):
        self.rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        self.cols = np.asarray(cols, dtype=np.int64).reshape(-1)
        self._h = hash((self.rows.tobytes(), self.cols.tobytes()))
        self._blocks = {}

    def __hash__(self):
        return self._h

    def __eq__(self, other):
        return (isinstance(other, Positions) and np.array_equal(self.rows, other.rows)
                and np.array_equal(self.cols, other.cols))

    def __len__(self):
        return self.rows.size

    def blocks(self, n: int):
        """(C, R, gam, rho, src): per block the distinct columns C and rows R (padded with n)
        and for each of its outputs the index of its column in C and of its row in R; ``src``:
        where each position's value lands in the flattened block outputs. Greedy over the positions sorted by
        column: a block closes at m distinct columns or rows, or 4m outputs."""
        if n in self._blocks:
            return self._blocks[n]
        m = int(np.clip((1 << 20) // max(n, 1), 4, 64))
        order = np.lexsort((self.rows, self.cols))
        blocks, cur = [], None
        for k in order:
            r, c = int(self.rows[k]), int(self.cols[k])
            if (cur is None or len(cur[2]) >= 4 * m
                    or (c not in cur[0] and len(cur[0]) >= m)
                    or (r not in cur[1] and len(cur[1]) >= m)):
                cur = ({}, {}, [])
                blocks.append(cur)
            C, R, out = cur
            C.setdefault(c, len(C))
            R.setdefault(r, len(R))
            out.append((C[c], R[r], int(k)))
        nb = max(len(blocks), 1)
        kb = max((len(b[2]) for b in blocks), default=1)
        Cs = np.full((nb, m), n, np.int64)
        Rs = np.full((nb, m), n, np.int64)
        gam = np.zeros((nb, kb), np.int64)
        rho = np.zeros((nb, kb), np.int64)
        src = np.zeros(len(self), np.int64)
        for i, (C, R, out) in enumerate(blocks):
            Cs[i, :len(C)] = list(C)
            Rs[i, :len(R)] = list(R)
            for j, (g, h, k) in enumerate(out):
                gam[i, j], rho[i, j], src[k] = g, h, i * kb + j
        self._blocks[n] = tuple(index32(a) for a in (Cs, Rs, gam, rho, src))
        return self._blocks[n]


# ----- host work ---------------------------------------------------------------------------------
def _members(keys, values, nbatch):
    """(lead shape, flat keys, flat values) of the broadcast batch axes."""
    keys, values = np.asarray(keys), np.asarray(values)
    lead = np.broadcast_shapes(keys.shape[:nbatch], values.shape[:nbatch])
    K = np.broadcast_to(keys[..., 0], lead).reshape(-1)
    V = np.broadcast_to(values, lead + values.shape[nbatch:]).reshape(-1, values.shape[-1])
    return lead, K, V


def _logdet_host(keys, values, spec, nbatch, op, sign_dtype, real_dtype):
    lead, K, V = _members(keys, values, nbatch)
    signs = np.empty(K.size, sign_dtype)
    logs = np.empty(K.size, real_dtype)
    used = set()
    try:
        for i, (k, v) in enumerate(zip(K, V)):
            k, cache = cache_for(int(k), v, spec, keep=op is not None)
            if cache is None:
                signs[i], logs[i] = np.nan, np.nan
                continue
            used.add(k)
            s, ld = cache.logdet()
            signs[i], logs[i] = s, ld
            STORE.count(queries=1)
            cache = None
        return signs.reshape(lead), logs.reshape(lead)
    finally:
        if op is not None:
            STORE.consumed(op, used)


def _entries_host(keys, values, spec, pos: Positions, nbatch, op, dtype):
    lead, K, V = _members(keys, values, nbatch)
    out = np.empty((K.size, len(pos)), dtype)
    used = set()
    try:
        for i, (k, v) in enumerate(zip(K, V)):
            k, cache = cache_for(int(k), v, spec, keep=op is not None)
            if cache is None:
                out[i] = np.nan
                continue
            used.add(k)
            out[i] = np.asarray(lo.sample(sv.inverse(cache), pos.rows, pos.cols))
            STORE.count(queries=1)
            cache = None
        return out.reshape(lead + (len(pos),))
    finally:
        if op is not None:
            STORE.consumed(op, used)


def _real(dtype):
    return jnp.finfo(dtype).dtype


def _queried(site) -> None:
    """A query consumes the factorization of ``site``: its factorize keeps the Python callback
    (adjoints.jax._native lowers only factorizations that solves alone consume)."""
    if site is not None:
        site.solves_only = False


# ----- logdet_p ----------------------------------------------------------------------------------
logdet_p = Primitive("adjoints_jax_logdet")
logdet_p.multiple_results = True


def slogdet(keys, values, spec, site, *, link=None):
    """(sign, log|det A|) of the factorization ``keys`` names (A = Sparse(values, pattern))."""
    _queried(site)
    return tuple(logdet_p.bind(keys, values, spec=spec, site=site,
                               link=Link() if link is None else link, role="primal", nbatch=0))


def _logdet_abstract(keys, values, *, spec, site, link, role, nbatch):
    lead = np.broadcast_shapes(keys.shape[:nbatch], values.shape[:nbatch])
    dt = values.dtype
    return (jax.core.ShapedArray(tuple(lead), dt), jax.core.ShapedArray(tuple(lead), _real(dt)))


def _logdet_impl(keys, values, *, spec, site, link, role, nbatch):
    dt = jnp.asarray(values).dtype
    s, ld = _logdet_host(keys, values, spec, nbatch, None, np.dtype(dt), np.dtype(_real(dt)))
    return jnp.asarray(s), jnp.asarray(ld)


def _logdet_lowering(ctx, keys, values, *, spec, site, link, role, nbatch):
    op = module_info(ctx).add("consumer", site, link, role, straight())
    s_aval, l_aval = ctx.avals_out

    def fn(k, v):
        return _logdet_host(k, v, spec, nbatch, op, np.dtype(s_aval.dtype),
                            np.dtype(l_aval.dtype))

    return emit_host_call(ctx, op, fn, [keys, values], [s_aval, l_aval],
                          jax.core.ShapedArray((), np.int32))


def _logdet_jvp(primals, tangents, *, spec, site, link, role, nbatch):
    keys, values = primals
    _, dv = tangents
    params = dict(spec=spec, site=site, link=link, nbatch=nbatch)
    sign, ld = logdet_p.bind(keys, values, role=role, **params)
    if type(dv) is ad.Zero:
        return (sign, ld), (ad.Zero.from_primal_value(sign), ad.Zero.from_primal_value(ld))
    P = spec.pattern
    # tr(A⁻¹ dA) = Σₑ (A⁻¹)[cₑ, rₑ] dvₑ: the selected inverse on Aᵀ's pattern, same factors
    z = inv_entries_p.bind(keys, values, pos=_transposed(P), role="tangent", **params)
    t = jnp.sum(z * dv.astype(z.dtype), axis=-1)
    dld = jnp.real(t).astype(ld.dtype)
    if jnp.iscomplexobj(sign):
        dsign = sign * (1j * jnp.imag(t)).astype(sign.dtype)
    else:
        dsign = jnp.zeros_like(sign)
    return (sign, ld), (dsign, dld)


def _logdet_batch(args, dims, *, spec, site, link, role, nbatch):
    keys, values = align_batch(args, dims)
    out = logdet_p.bind(keys, values, spec=spec, site=site, link=link, role=role,
                        nbatch=nbatch + 1)
    return out, (0, 0)


_TRANSPOSED: dict = {}


def _transposed(P: lo.Pattern) -> Positions:
    """Positions (cₑ, rₑ) of Aᵀ's entries, in A's value order (one object per pattern)."""
    hit = _TRANSPOSED.get(P)
    if hit is None:
        hit = _TRANSPOSED[P] = Positions(P.indices, P.rows)
        if len(_TRANSPOSED) > 64:   # a bounded memo (patterns of the computations running)
            _TRANSPOSED.pop(next(iter(_TRANSPOSED)))
    return hit


logdet_p.def_impl(_logdet_impl)
logdet_p.def_abstract_eval(_logdet_abstract)
ad.primitive_jvps[logdet_p] = _logdet_jvp
batching.primitive_batchers[logdet_p] = _logdet_batch


# ----- inv_entries_p -----------------------------------------------------------------------------
inv_entries_p = Primitive("adjoints_jax_inv_entries")


def inv_entries(keys, values, spec, site, rows, cols, *, link=None):
    """A⁻¹[rows[k], cols[k]] with the factorization ``keys`` names."""
    _queried(site)
    return inv_entries_p.bind(keys, values, spec=spec, site=site,
                              link=Link() if link is None else link, role="primal",
                              pos=Positions(rows, cols), nbatch=0)


def _entries_abstract(keys, values, *, spec, site, link, role, pos, nbatch):
    lead = np.broadcast_shapes(keys.shape[:nbatch], values.shape[:nbatch])
    return jax.core.ShapedArray(tuple(lead) + (len(pos),), values.dtype)


def _entries_impl(keys, values, *, spec, site, link, role, pos, nbatch):
    dt = np.dtype(jnp.asarray(values).dtype)
    return jnp.asarray(_entries_host(keys, values, spec, pos, nbatch, None, dt))


def _entries_lowering(ctx, keys, values, *, spec, site, link, role, pos, nbatch):
    op = module_info(ctx).add("consumer", site, link, role, straight())
    aval = ctx.avals_out[0]

    def fn(k, v):
        return (_entries_host(k, v, spec, pos, nbatch, op, np.dtype(aval.dtype)),)

    return emit_host_call(ctx, op, fn, [keys, values], [aval], jax.core.ShapedArray((), np.int32))


def _sandwich(keys, values, dv, spec, site, link, pos: Positions):
    """(A⁻¹ dA A⁻¹)[rows, cols] for one matrix (no batch axes), by solves with the key's
    factorization in blocks (see :meth:`Positions.blocks`); linear in dv."""
    n = spec.pattern.shape[0]
    Cs, Rs, gam, rho, src = pos.blocks(n)
    m = Cs.shape[1]
    dtype = jnp.result_type(values.dtype, dv.dtype)
    params = dict(spec=spec, site=site, link=link, role="tangent", nbatch=0)
    eye = jnp.arange(m)

    def unit(ix):   # the n × m unit columns e_ix (padding index n gives a zero column)
        return jnp.zeros((n + 1, m), dtype).at[ix, eye].set(1)[:n]

    def block(_, blk):
        C, R, g, r = blk
        XC = host_solve_p.bind(keys, values, unit(C), trans="N", **params)   # A⁻¹ E_C
        YR = host_solve_p.bind(keys, values, unit(R), trans="T", **params)   # A⁻ᵀ E_R
        W = spmm_p.bind(dv.astype(dtype), XC, pattern=spec.pattern, trans="N", nbatch=0)
        return None, jnp.sum(YR[:, r] * W[:, g], axis=0)

    _, vals = jax.lax.scan(block, None, (Cs, Rs, gam, rho))
    return vals.reshape(-1)[src]


def _entries_jvp(primals, tangents, *, spec, site, link, role, pos, nbatch):
    keys, values = primals
    _, dv = tangents
    params = dict(spec=spec, site=site, link=link, pos=pos)
    z = inv_entries_p.bind(keys, values, role=role, nbatch=nbatch, **params)
    if type(dv) is ad.Zero:
        return z, ad.Zero.from_primal_value(z)
    fn = lambda k, v, d: -_sandwich(k, v, d, spec, site, link, pos)   # noqa: E731
    if nbatch:
        keys, values, dv = (jnp.broadcast_to(x, z.shape[:nbatch] + x.shape[nbatch:])
                            for x in (keys, values, dv))
        for _ in range(nbatch):
            fn = jax.vmap(fn)
    return z, fn(keys, values, dv).astype(z.dtype)


def _entries_batch(args, dims, *, spec, site, link, role, pos, nbatch):
    keys, values = align_batch(args, dims)
    out = inv_entries_p.bind(keys, values, spec=spec, site=site, link=link, role=role, pos=pos,
                             nbatch=nbatch + 1)
    return out, 0


inv_entries_p.def_impl(_entries_impl)
inv_entries_p.def_abstract_eval(_entries_abstract)
ad.primitive_jvps[inv_entries_p] = _entries_jvp
batching.primitive_batchers[inv_entries_p] = _entries_batch


mlir.register_lowering(logdet_p, _logdet_lowering, cacheable=False)
mlir.register_lowering(inv_entries_p, _entries_lowering, cacheable=False)
