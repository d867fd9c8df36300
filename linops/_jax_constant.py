"""A sparse matrix with host-constant values times a jax array, as one linear JAX primitive.

Used by the jax backend for products whose matrix is a host numpy constant: a family's map
θ ↦ values (``fam(θ)`` under ``jax.jit``) and its pullback. Why a primitive of our own: on the CPU,
XLA runs a ``segment_sum`` (a scatter) about 3.5x slower than scipy's CSR product, while a row
gather in groups of equal row length (each group one fused multiply-add per position) runs near
scipy's speed. The transpose of a gather is a scatter, so letting JAX transpose the gather would
put the slow kernel into every gradient; this primitive is linear in X and its transpose rule is
the gather of the transposed matrix (the pattern's cached transpose), so both directions gather.

Layout ("row groups"): rows are grouped by their number of stored entries; a group of r rows
with c entries each keeps an (r, c) array of column indices and one of values. Memory: exactly
nnz values and indices (no padding) plus one row permutation when the groups are not already in
row order. Patterns with more than ``MAX_GROUPS`` distinct row lengths (irregular graphs) use
the sorted ``segment_sum`` instead; results are the same.

jvp: linear (the primitive on the tangent); transpose: the other direction; vmap: the batch
axis joins the columns of X. Cost: O(nnz·k) per product, one compilation per shape.
"""

from __future__ import annotations

import weakref

import numpy as np
import scipy.sparse as sp

MAX_GROUPS = 8  # distinct row lengths kept as groups; beyond, the sorted segment_sum
HOST_MIN_NNZ = 1 << 16   # on the CPU, matrices at least this large multiply on the host

_p = None
_OPS: dict[int, tuple] = {}  # id(values) -> (weakref to values, pattern, weakref to op)


class _Layout:
    """One direction (A or Aᵀ) of a constant CSR matrix, in row groups or as sorted COO."""

    def __init__(self, values: np.ndarray, pattern):
        counts = np.diff(pattern.indptr)
        lengths = np.unique(counts)
        self.m = pattern.shape[0]
        self.groups = None
        if len(lengths) <= MAX_GROUPS and pattern.nnz:
            order = np.argsort(counts, kind="stable")
            starts = pattern.indptr[:-1]
            self.groups = []
            for c in lengths:
                rows = order[counts[order] == c]
                if c == 0:
                    self.groups.append((rows.size, None, None))
                    continue
                slots = starts[rows][:, None] + np.arange(c)
                self.groups.append((rows.size, _index32(pattern.indices[slots]), values[slots]))
            self.unpermute = (None if np.array_equal(order, np.arange(self.m))
                              else _index32(np.argsort(order)))
        else:
            self.values, self.indices, self.rows = values, _index32(pattern.indices), \
                _index32(pattern.rows)

    def apply(self, X, dtype):
        # optional: jax (the jax extra)
        import jax
        import jax.numpy as jnp

        tail = X.shape[1:]
        if self.groups is None:
            contrib = jnp.asarray(self.values, dtype).reshape((-1,) + (1,) * len(tail)) \
                * X[self.indices]
            return jax.ops.segment_sum(contrib, self.rows, num_segments=self.m,
                                       indices_are_sorted=True)
        parts = []
        for r, idx, vals in self.groups:
            if idx is None:
                parts.append(jnp.zeros((r,) + tail, dtype))
                continue
            vals = jnp.asarray(vals, dtype)
            # one (r, c) gather and a sum over the c positions: a fixed number of operations
            # per group whatever its row length (a position-by-position loop put c operations
            # in the module: a family's pullback row of 7 840 entries compiled for minutes)
            gathered = X[idx]                                  # (r, c) + tail
            parts.append(jnp.sum(vals.reshape(vals.shape + (1,) * len(tail)) * gathered,
                                 axis=1))
        out = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
        return out if self.unpermute is None else out[self.unpermute]


class _ConstantSparse:
    """A = Sparse(values, pattern) with host values; hashed by identity (a primitive param)."""

    def __init__(self, values: np.ndarray, pattern):
        # strongly: a layout (the transposed one for a gradient) may be built long after the
        # caller dropped its array — a lo.Sparse made inside a traced function is gone once
        # tracing ends, but lowering and transposition come later. The op lives as long as the
        # jaxprs that use it (it is their primitive parameter), and _OPS holds it weakly.
        self._values, self.pattern = values, pattern
        self._layouts: dict[str, _Layout] = {}

    def layout(self, trans: str) -> _Layout:
        if trans not in self._layouts:
            values = self._values
            if trans == "N":
                self._layouts[trans] = _Layout(values, self.pattern)
            else:
                PT, perm = self.pattern.transpose()
                self._layouts[trans] = _Layout(values[perm], PT)
        return self._layouts[trans]

    def out_rows(self, trans: str) -> int:
        return self.pattern.shape[0 if trans == "N" else 1]

    def host_matrix(self, trans: str, dtype):
        """scipy CSR of op(A) in ``dtype`` (made once per direction and dtype)."""
        key = ("host", trans, np.dtype(dtype).str)
        if key not in self._layouts:
            values, P = self._values, self.pattern
            if trans != "N":
                P, perm = P.transpose()
                values = values[perm]
            self._layouts[key] = sp.csr_array(
                (np.asarray(values).astype(dtype, copy=False), P.indices, P.indptr),
                shape=P.shape)
        return self._layouts[key]


def _index32(ix) -> np.ndarray:
    ix = np.asarray(ix)
    return ix.astype(np.int32) if ix.size == 0 or ix.max() < 2**31 - 1 else ix


def _op_for(values: np.ndarray, pattern) -> _ConstantSparse:
    """One op per (array, pattern) while either is in use (products traced twice with one
    family share their layouts); nothing here keeps an array or an op alive."""
    key = id(values)
    hit = _OPS.get(key)
    if hit is not None and hit[0]() is values and hit[1] is pattern:
        op = hit[2]()
        if op is not None:
            return op
    op = _ConstantSparse(values, pattern)
    # the callback binds the dict itself: at interpreter shutdown the module's globals are
    # already None when the last arrays die
    _OPS[key] = (weakref.ref(values, lambda _, k=key, ops=_OPS: ops.pop(k, None)), pattern,
                 weakref.ref(op))
    return op


def _primitive():
    global _p
    if _p is not None:
        return _p
    # optional: jax (the jax extra)
    import jax
    import jax.numpy as jnp
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching, mlir

    p = Primitive("linops_constant_spmm")

    def impl(X, *, op, trans):
        return op.layout(trans).apply(X, X.dtype)

    p.def_impl(impl)
    p.def_abstract_eval(lambda X, *, op, trans: jax.core.ShapedArray(
        (op.out_rows(trans),) + X.shape[1:], X.dtype))
    gather = mlir.lower_fun(impl, multiple_results=False)
    mlir.register_lowering(p, gather)

    def cpu_lowering(ctx, X, *, op, trans):
        """Large matrices on the CPU: scipy's CSR product in a host callback. The row-group
        gather would make XLA embed the matrix (its values and indices) in the compiled
        module as constants, and compiling copies them several times: the first call of a
        jitted gradient at n = 640 800 peaked at 3.2x the numpy path's memory for that alone."""
        if op.pattern.nnz < HOST_MIN_NNZ:
            return gather(ctx, X, op=op, trans=trans)
        aval = ctx.avals_out[0]
        dtype = np.dtype(aval.dtype)

        def callback(x):
            return (np.asarray(op.host_matrix(trans, dtype) @ np.asarray(x), dtype),)

        outs, _, _ = mlir.emit_python_callback(ctx, callback, None, [X], ctx.avals_in,
                                               ctx.avals_out, has_side_effect=False,
                                               returns_token=False)
        return outs

    mlir.register_lowering(p, cpu_lowering, platform="cpu")

    def transpose(ct, X, *, op, trans):
        if type(ct) is ad.Zero:
            return (ad.Zero(X.aval),)
        return (p.bind(ct, op=op, trans="T" if trans == "N" else "N"),)

    ad.deflinear2(p, transpose)

    def batch(args, dims, *, op, trans):
        (X,), (d,) = args, dims
        X = jnp.moveaxis(X, d, -1)           # (n, B) or (n, k, B)
        flat = X.reshape(X.shape[0], -1)
        out = p.bind(flat, op=op, trans=trans)
        return out.reshape((out.shape[0],) + X.shape[1:]), X.ndim - 1

    batching.primitive_batchers[p] = batch
    _p = p
    return p


def constant_spmm(values: np.ndarray, pattern, X, trans: str = "N"):
    """op(A) @ X for A = Sparse(values, pattern) with host-constant ``values`` and a jax X of
    shape (n,) or (n, k); op = A ("N") or Aᵀ ("T", not conjugated). Traceable and
    differentiable in X to any order; the result has X's dtype promoted with the values'."""
    # optional: jax (the jax extra)
    import jax
    import jax.numpy as jnp

    dtype = jnp.promote_types(jax.dtypes.canonicalize_dtype(values.dtype), X.dtype)
    return _primitive().bind(jnp.asarray(X, dtype), op=_op_for(values, pattern), trans=trans)
