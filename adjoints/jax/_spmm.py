"""``spmm_p``: CSR(values on a static pattern) times a dense array, as one bilinear JAX primitive.

op(A) X with A = values on ``pattern`` and op ∈ {N: A, T: Aᵀ (never conjugated)}. Because the
primitive is bilinear in (values, X), JAX derives jvp, vjp, jacfwd/jacrev, hessian and
linear_transpose from two transpose rules:

* X̄ = op(A)ᵀ Ȳ — the same primitive with the other ``trans``;
* values̄ₖ = Σⱼ Ȳ[rₖ, j] X[cₖ, j] (N) — an SDDMM on the pattern (``linops`` ``sddmm``, chunked),
  O(nnz·k) work, O(nnz) result; never an n×n array.

Leading batch dimensions (from ``jax.vmap``) are part of the primitive: every operand carries
``nbatch`` aligned leading axes of size 1 or B, broadcast like numpy. Forward cost: one gather
and one sorted ``segment_sum``, O(nnz·k).

A primitive of its own: its transpose rule for the values is exactly the SDDMM (``sddmm_p``,
whose own transposes are this primitive again), vmap over values, X or both is one call, and
the pattern is a static parameter, so jit never traces index arrays. On the CPU both
primitives run on the host from ``HOST_MIN_NNZ`` stored entries (scipy's CSR product, linops'
SDDMM, on the pattern's own arrays), so no index array becomes a constant of the compiled
module; batched products and small patterns stay gathers.

>>> import jax, jax.numpy as jnp, scipy.sparse as sp, linops as lo
>>> A = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
>>> v, x = jnp.asarray(A.values), jnp.array([1.0, 2.0])
>>> spmm(v, x, A.pattern).tolist(), spmm(v, x, A.pattern, "T").tolist()
([4.0, 8.0], [2.0, 9.0])
>>> jax.grad(lambda v: spmm(v, x, A.pattern).sum())(v).tolist()   # x at each column index
[1.0, 2.0, 2.0]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

import linops as lo
from linops.internals import HOST_MIN_NNZ, ShapeError, sddmm

from . import _native

__all__ = ["spmm", "spmm_p", "sddmm_p", "index32", "sum_to_shape", "align_batch"]

spmm_p = Primitive("adjoints_jax_spmm")
sddmm_p = Primitive("adjoints_jax_sddmm")
# on the CPU, patterns from HOST_MIN_NNZ entries multiply on the host (linops' threshold for
# a family's fam(θ) under jit, the same trade-off; a module global so tests can force it)


def index32(ix: np.ndarray) -> np.ndarray:
    """Index constants as int32 when they fit (jax without x64 has no int64)."""
    ix = np.asarray(ix)
    return ix.astype(np.int32) if ix.size == 0 or ix.max() < 2**31 - 1 else ix


def spmm(values, X, pattern: lo.Pattern, trans: str = "N"):
    """op(A) @ X for A = Sparse(values, pattern), X of shape (n,) or (n, k); differentiable in
    both arguments (forward and reverse, any order)."""
    m, n = pattern.shape if trans == "N" else pattern.shape[::-1]
    if X.ndim not in (1, 2) or X.shape[0] != n or values.shape != (pattern.nnz,):
        op = "A" if trans == "N" else "Aᵀ"
        raise ShapeError(f"{op} @ X with A.shape={pattern.shape} (values.shape="
                         f"{tuple(values.shape)}, nnz={pattern.nnz}) but X.shape={tuple(X.shape)}")
    return spmm_p.bind(values, X, pattern=pattern, trans=trans, nbatch=0)


def sum_to_shape(x, shape):
    """Sum the broadcast leading axes of ``x`` back to ``shape`` (size-1 axes, kept)."""
    axes = tuple(i for i, (a, b) in enumerate(zip(x.shape, shape)) if b == 1 and a != 1)
    return jnp.sum(x, axis=axes, keepdims=True) if axes else x


def _real_if(x, like_dtype):
    """JAX's convention for a real input of a complex map: its cotangent is the real part."""
    if np.dtype(like_dtype).kind != "c" and jnp.iscomplexobj(x):
        x = jnp.real(x)
    return x.astype(like_dtype)


def _op_pattern(pattern: lo.Pattern, trans: str):
    """(pattern of op(A), permutation of the values into it or None). Pattern.transpose is
    cached on the pattern, so the sort happens once per pattern."""
    if trans == "N":
        return pattern, None
    pt, perm = pattern.transpose()
    return pt, perm


def _spmm_impl(values, X, *, pattern, trans, nbatch):
    pat, perm = _op_pattern(pattern, trans)
    if perm is not None:
        values = jnp.take(values, index32(perm), axis=-1)
    nb = nbatch
    vec = X.ndim == nb + 1
    # gather X's row c for every stored (r, c), scale by the value, sum per row r (CSR rows are
    # sorted, and segment_sum is told so)
    Xg = jnp.take(X, index32(pat.indices), axis=nb)
    contrib = (values if vec else values[..., None]) * Xg
    if nb:
        contrib = jnp.moveaxis(contrib, nb, 0)
    out = jax.ops.segment_sum(contrib, index32(pat.rows), num_segments=pat.shape[0],
                              indices_are_sorted=True)
    return jnp.moveaxis(out, 0, nb) if nb else out


def _spmm_abstract(values, X, *, pattern, trans, nbatch):
    """Shape: broadcast batch axes + (rows of op(A),) + X's column axis, if any."""
    nb = nbatch
    m = pattern.shape[0] if trans == "N" else pattern.shape[1]
    lead = np.broadcast_shapes(values.shape[:nb], X.shape[:nb])
    dtype = jnp.result_type(values.dtype, X.dtype)
    return jax.core.ShapedArray(tuple(lead) + (m,) + tuple(X.shape[nb + 1:]), dtype)


def _flip(trans: str) -> str:
    """'N' <-> 'T'."""
    return "T" if trans == "N" else "N"


def _values_ct(ct, values, X, *, pattern, trans, nbatch):
    """values̄ for Y = op(A) X: Σⱼ Ȳ[r, j] X[c, j] (N) or Σⱼ Ȳ[c, j] X[r, j] (T)."""
    aval = values.aval
    rows, cols = index32(pattern.rows), index32(pattern.indices)
    nb = nbatch
    if nb == 0:  # one SDDMM on the pattern (its own primitive: see sddmm_p)
        U, V = (ct, X) if trans == "N" else (X, ct)
        out = sddmm_p.bind(U, V, pattern=pattern)
    else:  # batched: the plain gather-product (sddmm has no batch axes)
        ri, ci = (rows, cols) if trans == "N" else (cols, rows)
        a, b = jnp.take(ct, ri, axis=nb), jnp.take(X, ci, axis=nb)
        prod = a * b
        out = prod if prod.ndim == nb + 1 else jnp.sum(prod, axis=-1)
    return _real_if(sum_to_shape(out, aval.shape), aval.dtype)


def _x_ct(ct, values, X, *, pattern, trans, nbatch):
    """X̄ = op(A)ᵀ Ȳ: the same primitive with ``trans`` flipped."""
    aval = X.aval
    out = spmm_p.bind(values, ct, pattern=pattern, trans=_flip(trans), nbatch=nbatch)
    return _real_if(sum_to_shape(out, aval.shape), aval.dtype)


spmm_p.def_impl(_spmm_impl)
spmm_p.def_abstract_eval(_spmm_abstract)
ad.defbilinear(spmm_p, _values_ct, _x_ct)
_spmm_gather = mlir.lower_fun(_spmm_impl, multiple_results=False)
mlir.register_lowering(spmm_p, _spmm_gather)


# ----- sddmm_p: values[k] = Σⱼ U[rₖ, j] V[cₖ, j] on the pattern (no conjugation) ----------------
def _sddmm_impl(U, V, *, pattern):
    """linops' chunked SDDMM (bounded temporaries for wide U, V)."""
    return sddmm(U, V, index32(pattern.rows), index32(pattern.indices), conj_v=False)


def _sddmm_abstract(U, V, *, pattern):
    return jax.core.ShapedArray((pattern.nnz,), jnp.result_type(U.dtype, V.dtype))


def _sddmm_u_ct(ct, U, V, *, pattern):
    """Ū[r] = Σₖ ct[k] V[cₖ] over the entries of row r: A(ct) V."""
    out = spmm_p.bind(ct, V, pattern=pattern, trans="N", nbatch=0)
    return _real_if(out, U.aval.dtype)


def _sddmm_v_ct(ct, U, V, *, pattern):
    """V̄[c] = Σₖ ct[k] U[rₖ] over the entries of column c: A(ct)ᵀ U."""
    out = spmm_p.bind(ct, U, pattern=pattern, trans="T", nbatch=0)
    return _real_if(out, V.aval.dtype)


def _sddmm_batch(args, dims, *, pattern):
    """vmap: the plain gather-product over the aligned batch axis (JAX differentiates it)."""
    U, V = align_batch(args, dims)
    a = jnp.take(U, index32(pattern.rows), axis=1)
    b = jnp.take(V, index32(pattern.indices), axis=1)
    prod = a * b
    return (prod if prod.ndim == 2 else jnp.sum(prod, axis=-1)), 0


sddmm_p.def_impl(_sddmm_impl)
sddmm_p.def_abstract_eval(_sddmm_abstract)
ad.defbilinear(sddmm_p, _sddmm_u_ct, _sddmm_v_ct)
batching.primitive_batchers[sddmm_p] = _sddmm_batch
_sddmm_gather = mlir.lower_fun(_sddmm_impl, multiple_results=False)
mlir.register_lowering(sddmm_p, _sddmm_gather)


# ----- the CPU: large patterns multiply on the host ----------------------------------------------
# Lowered as gathers, both primitives make XLA embed the pattern's index arrays in the compiled
# module as constants (hex text in the StableHLO, then parsed and copied while compiling): at
# n = 640 800 the first call of jit(value_and_grad) through adj.solve carried four 2.8·10⁶-entry
# index constants and peaked at 1.63× the numpy gradient's memory. On the CPU, patterns from
# HOST_MIN_NNZ entries run scipy's CSR product and linops' SDDMM in a host callback instead,
# on the pattern's own arrays (no copy, no constant); results are the same. The SDDMM in float64
# and complex128 is the native FFI call where solvers._native is built (the pattern's indices
# copied into the native table once per process, under a byte cap: no Python per call, which
# inside a compiled loop was a callback per step).
def _index_pair(pattern):
    """The pattern's (rows, cols) as contiguous int32 arrays where they fit (see index32)."""
    return (np.ascontiguousarray(index32(pattern.rows)),
            np.ascontiguousarray(index32(pattern.indices)))


def _host_callback(ctx, fn, args):
    outs, _, _ = mlir.emit_python_callback(ctx, fn, None, list(args), ctx.avals_in,
                                           ctx.avals_out, has_side_effect=False,
                                           returns_token=False)
    return outs


def _spmm_cpu(ctx, values, X, *, pattern, trans, nbatch):
    if nbatch or pattern.nnz < HOST_MIN_NNZ:
        return _spmm_gather(ctx, values, X, pattern=pattern, trans=trans, nbatch=nbatch)
    dtype = np.dtype(ctx.avals_out[0].dtype)
    pat, perm = _op_pattern(pattern, trans)

    def product(v, x):
        v = np.asarray(v)
        A = sp.csr_array((v if perm is None else v[perm], pat.indices, pat.indptr),
                         shape=pat.shape)
        return (np.asarray(A @ np.asarray(x), dtype),)

    return _host_callback(ctx, product, (values, X))


def _sddmm_cpu(ctx, U, V, *, pattern):
    if pattern.nnz < HOST_MIN_NNZ:
        return _sddmm_gather(ctx, U, V, pattern=pattern)
    if _native.sddmm_applies(ctx):
        rows, cols = _index_pair(pattern)
        pid = _native.pattern_id(pattern, rows, cols) if rows.dtype == np.int32 else None
        if pid is not None:
            # the native SDDMM: no Python per call, so a solve's values cotangent inside a
            # compiled loop's backward pass costs its O(nnz·k) and nothing more
            return _native.lower_sddmm(ctx, U, V, pid=pid)
    dtype = np.dtype(ctx.avals_out[0].dtype)

    def sample(u, v):
        return (np.asarray(sddmm(np.asarray(u), np.asarray(v), pattern.rows, pattern.indices,
                                 conj_v=False), dtype),)

    return _host_callback(ctx, sample, (U, V))


mlir.register_lowering(spmm_p, _spmm_cpu, platform="cpu")
mlir.register_lowering(sddmm_p, _sddmm_cpu, platform="cpu")


def align_batch(args, dims):
    """Move every batched operand's vmap axis to the front; give unbatched ones a size-1 axis."""
    out = []
    for a, d in zip(args, dims):
        if d is None:
            out.append(jnp.expand_dims(a, 0))
        else:
            out.append(jnp.moveaxis(a, d, 0) if d != 0 else a)
    return out


def _spmm_batch(args, dims, *, pattern, trans, nbatch):
    """vmap: one more aligned leading axis; the impl broadcasts size-1 axes."""
    values, X = align_batch(args, dims)
    return spmm_p.bind(values, X, pattern=pattern, trans=trans, nbatch=nbatch + 1), 0


batching.primitive_batchers[spmm_p] = _spmm_batch
