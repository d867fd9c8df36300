"""The two operations of a sparse solve: ``factorize(values) -> key`` and
``solve(key, values, b) -> op(A)⁻¹ b``, each twice — as a ``torch.autograd.Function`` (eager
code and every ``torch.func`` transform) and as a ``torch.library.custom_op`` with
``register_autograd``, a fake kernel and ``register_vmap`` (``torch.compile`` keeps it opaque:
Dynamo cannot trace a Function that defines ``jvp``). Both run the same host kernels and the
same derivative rules (:func:`solve_backward`, :func:`solve_jvp`, :func:`solve_vmap`).

``solve`` is linear in b and implicitly defined by A's values (op: none 'N' or the plain
transpose 'T'; Aᴴ is conj ∘ solve_T ∘ conj):

* backward (torch's convention, df = Re⟨ḡ, dx⟩): λ = op(A)⁻ᴴ ḡ — the SAME operation with the
  same key and op flipped, between conjugations — b̄ = λ, and the values' cotangent −λ xᴴ
  sampled on the pattern (op 'N': −λ[r] conj(x[c]); 'T': −conj(x[r] conj(λ[c])));
* jvp: ẋ = op(A)⁻¹ (ḃ − op(Ȧ) x), the same operation again;
* vmap: every operand gets one more leading batch axis (``nbatch``); the host kernel solves
  the right-hand sides that share a factorization as the columns of ONE call.

Because the rules call the operation itself, every order of differentiation (double backward,
Hessian-vector products, ``jacfwd(jacrev)``) runs solves on the one factorization: nothing
here ever factorizes again. ``factorize`` under vmap makes one factorization per member on one
symbolic analysis (``solvers.init(..., like=)``).
"""

from __future__ import annotations

import numpy as np
import torch

from linops.internals import namespace

from . import _full_grad, _products, _store
from ._convert import from_host, to_host
from ._sparse import conj, sum_to
from ._store import REGISTRY, cache_for, factorize_host, own, spec_id

__all__ = ["FactorizeFn", "SolveFn", "factorize_op", "solve_op", "factorize", "solve"]


# ----- host kernels ------------------------------------------------------------------------------
def factorize_kernel(values: torch.Tensor, spec: int) -> torch.Tensor:
    """Keys (int64, values.shape[:-1] + (1,), on the CPU) of fresh factorizations of every
    member of ``values`` (..., nnz); the key tensor's storage owns them."""
    sp = spec_id(spec)
    lead = tuple(values.shape[:-1])
    V = to_host(values).reshape(-1, values.shape[-1])
    keys = factorize_host(V, sp)
    key = torch.tensor(keys, dtype=torch.int64).reshape(lead + (1,))
    own(key, keys)
    return key


def solve_kernel(key, values, b, spec: int, trans: str, nbatch: int) -> torch.Tensor:
    """op(A)⁻¹ b for every batch index: the ``nbatch`` leading axes of key, values and b
    broadcast; right-hand sides that share a key are solved together, as columns of one call."""
    sp = spec_id(spec)
    K = key.detach().cpu().numpy()
    B = to_host(b)
    if nbatch == 0:
        X = _solve_one(int(K.reshape(-1)[0]), lambda: to_host(values), B, sp, trans)
        return from_host(X, b.device)
    nb, n = nbatch, sp.n
    core = tuple(b.shape[nb:])
    lead = torch.broadcast_shapes(key.shape[:nb], values.shape[:nb], b.shape[:nb])
    xp = namespace(B)
    Kf = np.broadcast_to(K[..., 0], lead).reshape(-1)
    Bf = xp.broadcast_to(B, lead + core).reshape((-1,) + core)
    out = xp.empty(Bf.shape, dtype=B.dtype)
    for k in np.unique(Kf):
        idx = np.flatnonzero(Kf == k)
        V = _member_values(values, nb, lead, int(idx[0]))
        cols = xp.moveaxis(Bf[idx], 0, -1).reshape(n, -1)
        X = _solve_one(int(k), V, cols, sp, trans)
        out[idx] = xp.moveaxis(X.reshape((n,) + core[1:] + (idx.size,)), -1, 0)
    return from_host(out.reshape(lead + core), b.device)


def _member_values(values, nb, lead, i):
    """A thunk for the values of flat batch member ``i`` (read only on a miss)."""
    def get():
        V = values.expand(tuple(lead) + tuple(values.shape[nb:])).reshape(-1, values.shape[-1])
        return to_host(V[i])
    return get


def _solve_one(k: int, values_thunk, B, sp, trans: str):
    cache, temporary = cache_for(k, values_thunk, sp)
    try:
        X = cache.solve(B) if trans == "N" else cache.solve_transpose(B)
        REGISTRY.count(**{"forward_solves" if trans == "N" else "transpose_solves": 1},
                       solve_columns=1 if B.ndim == 1 else int(B.shape[1]))
        return X
    finally:
        if temporary:
            _store.HOST.discard([cache])
        cache = None


# ----- derivative rules, shared by the Functions and the custom ops ------------------------------
def _flip(trans: str) -> str:
    return "T" if trans == "N" else "N"


def solve_backward(W, key, values, x, g, spec: int, trans: str, nbatch: int, b_shape,
                   need_values: bool, need_b: bool, record=None):
    """(values̄, b̄) of x = op(A)⁻¹ b for the cotangent g: one solve with op flipped (same key)
    and one SDDMM. ``W``: the world's (solve, spmm, sddmm) operations."""
    solve, _, sddmm = W
    if g is None or not (need_values or need_b):
        return None, None
    g = g.to(x.dtype)
    lam = conj(solve(key, values, conj(g), spec, _flip(trans), nbatch))
    if record is not None:
        record(key, lam, x, trans, nbatch)
    gb = sum_to(lam, b_shape) if need_b else None
    gv = None
    if need_values:
        L, X = (lam.unsqueeze(-1), x.unsqueeze(-1)) if x.dim() - nbatch == 1 else (lam, x)
        gv = -sddmm(L, X, spec, nbatch) if trans == "N" else -conj(sddmm(X, L, spec, nbatch))
        gv = sum_to(gv, values.shape)
        if not values.is_complex():
            gv = gv.real
        gv = gv.to(values.dtype)
    return gv, gb


def solve_jvp(W, key, values, x, dvalues, db, spec: int, trans: str, nbatch: int):
    """ẋ = op(A)⁻¹ (ḃ − op(Ȧ) x): one more solve with the same key and one SpMM."""
    solve, spmm, _ = W
    rhs = None if db is None else db.to(x.dtype)
    if dvalues is not None:
        ax = spmm(dvalues, x, spec, trans, nbatch).to(x.dtype)
        rhs = -ax if rhs is None else rhs - ax
    if rhs is None:
        return torch.zeros_like(x)
    return solve(key, values, rhs, spec, trans, nbatch)


def lift(t: torch.Tensor, d):
    """A vmapped operand with its batch axis first (size 1, to broadcast, where unbatched)."""
    return t.unsqueeze(0) if d is None else t.movedim(d, 0)


def solve_vmap(W, in_dims, key, values, b, spec: int, trans: str, nbatch: int):
    kd, vd, bd = in_dims[:3]
    return W[0](lift(key, kd), lift(values, vd), lift(b, bd), spec, trans, nbatch + 1), 0


# ----- torch.autograd.Function -------------------------------------------------------------------
class FactorizeFn(torch.autograd.Function):
    """values (..., nnz) -> keys (..., 1): not differentiable (the derivatives of a solve come
    from :class:`SolveFn`'s rules); vmap: one factorization per member, one analysis."""

    @staticmethod
    def forward(values, spec):
        return factorize_kernel(values, spec)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output)

    @staticmethod
    def backward(ctx, gkey):
        return None, None

    @staticmethod
    def jvp(ctx, dvalues, dspec):
        return None

    @staticmethod
    def vmap(info, in_dims, values, spec):
        return FactorizeFn.apply(lift(values, in_dims[0]), spec), 0


class SolveFn(torch.autograd.Function):
    """x = op(A)⁻¹ b with the factorization ``key`` names (A = Sparse(values, pattern))."""

    @staticmethod
    def forward(key, values, b, spec, trans, nbatch):
        return solve_kernel(key, values, b, spec, trans, nbatch)

    @staticmethod
    def setup_context(ctx, inputs, output):
        key, values, b, spec, trans, nbatch = inputs
        ctx.meta = (spec, trans, nbatch, tuple(b.shape))
        ctx.save_for_backward(key, values, output)
        ctx.save_for_forward(key, values, output)

    @staticmethod
    def backward(ctx, g):
        key, values, x = ctx.saved_tensors
        spec, trans, nbatch, b_shape = ctx.meta
        gv, gb = solve_backward(FN, key, values, x, g, spec, trans, nbatch, b_shape,
                                ctx.needs_input_grad[1], ctx.needs_input_grad[2],
                                _full_grad.record_full_gradient if _full_grad.GRADS else None)
        return None, gv, gb, None, None, None

    @staticmethod
    def jvp(ctx, dkey, dvalues, db, dspec, dtrans, dnbatch):
        key, values, x = ctx.saved_tensors
        spec, trans, nbatch, _ = ctx.meta
        return solve_jvp(FN, key, values, x, dvalues, db, spec, trans, nbatch)

    @staticmethod
    def vmap(info, in_dims, key, values, b, spec, trans, nbatch):
        return solve_vmap(FN, in_dims, key, values, b, spec, trans, nbatch)


# ----- torch.library custom operators (torch.compile) --------------------------------------------
@torch.library.custom_op("linops::factorize", mutates_args=())
def factorize_op(values: torch.Tensor, spec: int) -> torch.Tensor:
    """Keys of host factorizations of ``values`` (..., nnz) (see :class:`FactorizeFn`)."""
    return factorize_kernel(values, spec)


@factorize_op.register_fake
def _(values, spec):
    return torch.empty(tuple(values.shape[:-1]) + (1,), dtype=torch.int64, device="cpu")


def _factorize_vmap(info, in_dims, values, spec):
    return factorize_op(lift(values, in_dims[0]), spec), 0


factorize_op.register_vmap(_factorize_vmap)


@torch.library.custom_op("linops::solve", mutates_args=())
def solve_op(key: torch.Tensor, values: torch.Tensor, b: torch.Tensor, spec: int, trans: str,
             nbatch: int) -> torch.Tensor:
    """op(A)⁻¹ b with the factorization ``key`` names (see :class:`SolveFn`)."""
    return solve_kernel(key, values, b, spec, trans, nbatch)


@solve_op.register_fake
def _(key, values, b, spec, trans, nbatch):
    lead = torch.broadcast_shapes(key.shape[:nbatch], values.shape[:nbatch], b.shape[:nbatch])
    return b.new_empty(tuple(lead) + tuple(b.shape[nbatch:]))


def _solve_op_setup(ctx, inputs, output):
    key, values, b, spec, trans, nbatch = inputs
    ctx.meta = (spec, trans, nbatch, tuple(b.shape))
    ctx.save_for_backward(key, values, output)


def _solve_op_backward(ctx, g):
    key, values, x = ctx.saved_tensors
    spec, trans, nbatch, b_shape = ctx.meta
    gv, gb = solve_backward(OP, key, values, x, g, spec, trans, nbatch, b_shape,
                            ctx.needs_input_grad[1], ctx.needs_input_grad[2])
    return None, gv, gb, None, None, None


def _solve_op_vmap(info, in_dims, key, values, b, spec, trans, nbatch):
    return solve_vmap(OP, in_dims, key, values, b, spec, trans, nbatch)


solve_op.register_autograd(_solve_op_backward, setup_context=_solve_op_setup)
solve_op.register_vmap(_solve_op_vmap)

FN = (SolveFn.apply,) + _products.FN
OP = (solve_op,) + _products.OP


# ----- the two entry points the front end calls ---------------------------------------------------
def factorize(values: torch.Tensor, spec: int) -> torch.Tensor:
    """Keys of factorizations of ``values`` (not differentiable: detached here)."""
    if torch.compiler.is_compiling():
        return factorize_op(values.detach(), spec)
    return FactorizeFn.apply(values.detach(), spec)


def solve(key, values, b, spec: int, trans: str) -> torch.Tensor:
    """op(A)⁻¹ b, differentiable in values and b under every transform."""
    if torch.compiler.is_compiling():
        return solve_op(key, values, b, spec, trans, 0)
    return SolveFn.apply(key, values, b, spec, trans, 0)
