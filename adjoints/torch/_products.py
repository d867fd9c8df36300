"""The sparse products as differentiable operations: ``spmm`` (Y = op(A) X) and ``sddmm``
(s = U Vᴴ on A's pattern), each a ``torch.autograd.Function`` (with ``jvp`` and ``vmap``) and
a ``torch.library.custom_op`` (``register_autograd``, fake kernel, ``register_vmap``) for
``torch.compile``. They are each other's derivatives, so every order of differentiation stays
in O(nnz·k) products:

* Y = op(A) X:   X̄ = op(A)ᴴ Ȳ = conj(op'(A) conj Ȳ) (op' the other of 'N'/'T'),
  values̄ = sddmm(Ȳ, X) ('N') or conj(sddmm(X, Ȳ)) ('T'); Ẏ = op(Ȧ) X + op(A) Ẋ.
* s = U Vᴴ|P:    Ū = spmm(s̄, V, 'N'), V̄ = spmm(conj s̄, U, 'T'); ṡ = U̇ Vᴴ|P + U V̇ᴴ|P.

Leading batch axes (``nbatch``, from vmap) broadcast; one matrix applied to a batch is one
product with the batch as extra columns.
"""

from __future__ import annotations

import torch

from . import _kernels as K
from ._sparse import conj, sum_to
from ._store import spec_id

__all__ = ["spmm", "sddmm", "SpMMFn", "SDDMMFn", "spmm_op", "sddmm_op", "FN", "OP"]


def _flip(trans: str) -> str:
    return "T" if trans == "N" else "N"


def _lift(t, d):
    return t.unsqueeze(0) if d is None else t.movedim(d, 0)


# ----- batched host kernels ----------------------------------------------------------------------
def spmm_kernel(values, X, spec: int, trans: str, nbatch: int) -> torch.Tensor:
    P = spec_id(spec).pattern
    m = P.shape[0] if trans == "N" else P.shape[1]
    nb = nbatch
    core = tuple(X.shape[nb:])
    vec = len(core) == 1
    if nb == 0:
        Y = K.spmm(values, X[:, None] if vec else X, P, trans)
        return Y[:, 0] if vec else Y
    lead = tuple(torch.broadcast_shapes(values.shape[:nb], X.shape[:nb]))
    B = 1
    for d in lead:
        B *= d
    kk = 1 if vec else core[1]
    n = core[0]
    if all(d == 1 for d in values.shape[:nb]):   # one matrix: the batch as extra columns
        Xm = X.expand(lead + core).reshape(B, n, kk).permute(1, 2, 0).reshape(n, kk * B)
        Y = K.spmm(values.reshape(-1), Xm, P, trans).reshape(m, kk, B).permute(2, 0, 1)
    else:
        V = values.expand(lead + (values.shape[-1],)).reshape(B, -1)
        Xb = X.expand(lead + core).reshape(B, n, kk)
        Y = torch.stack([K.spmm(V[i], Xb[i], P, trans) for i in range(B)])
    return Y.reshape(lead + ((m,) if vec else (m, kk))).contiguous()


def sddmm_kernel(U, V, spec: int, nbatch: int) -> torch.Tensor:
    P = spec_id(spec).pattern
    nb = nbatch
    if nb == 0:
        return K.sddmm(U, V, P)
    lead = tuple(torch.broadcast_shapes(U.shape[:nb], V.shape[:nb]))
    Ub = U.expand(lead + tuple(U.shape[nb:])).reshape((-1,) + tuple(U.shape[nb:]))
    Vb = V.expand(lead + tuple(V.shape[nb:])).reshape((-1,) + tuple(V.shape[nb:]))
    return torch.stack([K.sddmm(Ub[i], Vb[i], P) for i in range(Ub.shape[0])]).reshape(
        lead + (P.nnz,))


# ----- derivative rules --------------------------------------------------------------------------
def _spmm_backward(W, ctx_vals, g, needs):
    spmm, sddmm = W
    values, X, spec, trans, nbatch = ctx_vals
    gv = gX = None
    if g is None:
        return None, None
    vec = X.dim() - nbatch == 1
    if needs[1]:
        gX = conj(spmm(values, conj(g), spec, _flip(trans), nbatch))
        gX = sum_to(gX, X.shape)
        gX = (gX if X.is_complex() else gX.real).to(X.dtype)
    if needs[0]:
        Gm, Xm = (g.unsqueeze(-1), X.unsqueeze(-1)) if vec else (g, X)
        gv = sddmm(Gm, Xm, spec, nbatch) if trans == "N" else conj(sddmm(Xm, Gm, spec, nbatch))
        gv = sum_to(gv, values.shape)
        gv = (gv if values.is_complex() else gv.real).to(values.dtype)
    return gv, gX


def _spmm_jvp(W, values, X, dv, dX, spec, trans, nbatch):
    spmm = W[0]
    out = None
    if dv is not None:
        out = spmm(dv, X, spec, trans, nbatch)
    if dX is not None:
        t = spmm(values, dX, spec, trans, nbatch)
        out = t if out is None else out + t
    return out


def _sddmm_backward(W, U, V, g, spec, nbatch, needs):
    spmm = W[0]
    gU = gV = None
    if g is None:
        return None, None
    if needs[0]:
        gU = sum_to(spmm(g, V, spec, "N", nbatch), U.shape)
        gU = (gU if U.is_complex() else gU.real).to(U.dtype)
    if needs[1]:
        gV = sum_to(spmm(conj(g), U, spec, "T", nbatch), V.shape)
        gV = (gV if V.is_complex() else gV.real).to(V.dtype)
    return gU, gV


def _sddmm_jvp(W, U, V, dU, dV, spec, nbatch):
    sddmm = W[1]
    out = None
    if dU is not None:
        out = sddmm(dU, V, spec, nbatch)
    if dV is not None:
        t = sddmm(U, dV, spec, nbatch)
        out = t if out is None else out + t
    return out


# ----- autograd.Functions ------------------------------------------------------------------------
class SpMMFn(torch.autograd.Function):
    """Y = op(A) X with A = Sparse(values, pattern of ``spec``)."""

    @staticmethod
    def forward(values, X, spec, trans, nbatch):
        return spmm_kernel(values, X, spec, trans, nbatch)

    @staticmethod
    def setup_context(ctx, inputs, output):
        values, X, spec, trans, nbatch = inputs
        ctx.meta = (spec, trans, nbatch)
        ctx.save_for_backward(values, X)
        ctx.save_for_forward(values, X)

    @staticmethod
    def backward(ctx, g):
        values, X = ctx.saved_tensors
        gv, gX = _spmm_backward(FN, (values, X) + ctx.meta, g, ctx.needs_input_grad)
        return gv, gX, None, None, None

    @staticmethod
    def jvp(ctx, dv, dX, dspec, dtrans, dnb):
        values, X = ctx.saved_tensors
        return _spmm_jvp(FN, values, X, dv, dX, *ctx.meta)

    @staticmethod
    def vmap(info, in_dims, values, X, spec, trans, nbatch):
        return SpMMFn.apply(_lift(values, in_dims[0]), _lift(X, in_dims[1]), spec, trans,
                            nbatch + 1), 0


class SDDMMFn(torch.autograd.Function):
    """s = (U Vᴴ) on the pattern of ``spec``: U (..., m, k), V (..., n, k) -> (..., nnz)."""

    @staticmethod
    def forward(U, V, spec, nbatch):
        return sddmm_kernel(U, V, spec, nbatch)

    @staticmethod
    def setup_context(ctx, inputs, output):
        U, V, spec, nbatch = inputs
        ctx.meta = (spec, nbatch)
        ctx.save_for_backward(U, V)
        ctx.save_for_forward(U, V)

    @staticmethod
    def backward(ctx, g):
        U, V = ctx.saved_tensors
        gU, gV = _sddmm_backward(FN, U, V, g, *ctx.meta, ctx.needs_input_grad)
        return gU, gV, None, None

    @staticmethod
    def jvp(ctx, dU, dV, dspec, dnb):
        U, V = ctx.saved_tensors
        return _sddmm_jvp(FN, U, V, dU, dV, *ctx.meta)

    @staticmethod
    def vmap(info, in_dims, U, V, spec, nbatch):
        return SDDMMFn.apply(_lift(U, in_dims[0]), _lift(V, in_dims[1]), spec, nbatch + 1), 0


# ----- custom operators --------------------------------------------------------------------------
@torch.library.custom_op("linops::spmm", mutates_args=())
def spmm_op(values: torch.Tensor, X: torch.Tensor, spec: int, trans: str,
            nbatch: int) -> torch.Tensor:
    """Y = op(A) X (see :class:`SpMMFn`)."""
    return spmm_kernel(values, X, spec, trans, nbatch)


@spmm_op.register_fake
def _(values, X, spec, trans, nbatch):
    P = spec_id(spec).pattern
    m = P.shape[0] if trans == "N" else P.shape[1]
    lead = tuple(torch.broadcast_shapes(values.shape[:nbatch], X.shape[:nbatch]))
    core = tuple(X.shape[nbatch:])
    dtype = torch.promote_types(values.dtype, X.dtype)
    return X.new_empty(lead + (m,) + core[1:], dtype=dtype)


def _spmm_setup(ctx, inputs, output):
    values, X, spec, trans, nbatch = inputs
    ctx.meta = (spec, trans, nbatch)
    ctx.save_for_backward(values, X)


def _spmm_op_backward(ctx, g):
    values, X = ctx.saved_tensors
    gv, gX = _spmm_backward(OP, (values, X) + ctx.meta, g, ctx.needs_input_grad)
    return gv, gX, None, None, None


spmm_op.register_autograd(_spmm_op_backward, setup_context=_spmm_setup)
spmm_op.register_vmap(lambda info, in_dims, values, X, spec, trans, nbatch: (
    spmm_op(_lift(values, in_dims[0]), _lift(X, in_dims[1]), spec, trans, nbatch + 1), 0))


@torch.library.custom_op("linops::sddmm", mutates_args=())
def sddmm_op(U: torch.Tensor, V: torch.Tensor, spec: int, nbatch: int) -> torch.Tensor:
    """s = U Vᴴ on the pattern (see :class:`SDDMMFn`)."""
    return sddmm_kernel(U, V, spec, nbatch)


@sddmm_op.register_fake
def _(U, V, spec, nbatch):
    lead = tuple(torch.broadcast_shapes(U.shape[:nbatch], V.shape[:nbatch]))
    return U.new_empty(lead + (spec_id(spec).pattern.nnz,),
                       dtype=torch.promote_types(U.dtype, V.dtype))


def _sddmm_setup(ctx, inputs, output):
    U, V, spec, nbatch = inputs
    ctx.meta = (spec, nbatch)
    ctx.save_for_backward(U, V)


def _sddmm_op_backward(ctx, g):
    U, V = ctx.saved_tensors
    gU, gV = _sddmm_backward(OP, U, V, g, *ctx.meta, ctx.needs_input_grad)
    return gU, gV, None, None


sddmm_op.register_autograd(_sddmm_op_backward, setup_context=_sddmm_setup)
sddmm_op.register_vmap(lambda info, in_dims, U, V, spec, nbatch: (
    sddmm_op(_lift(U, in_dims[0]), _lift(V, in_dims[1]), spec, nbatch + 1), 0))


# The operations each world composes its rules from: autograd.Functions (eager, torch.func)
# and custom operators (torch.compile, whose traced backward must stay in operators).
FN = (SpMMFn.apply, SDDMMFn.apply)
OP = (spmm_op, sddmm_op)


# ----- entry points ------------------------------------------------------------------------------
def spmm(values, X, spec: int, trans: str, nbatch: int = 0) -> torch.Tensor:
    """op(A) X, differentiable in values and X under every transform and torch.compile."""
    if torch.compiler.is_compiling():
        return spmm_op(values, X, spec, trans, nbatch)
    return SpMMFn.apply(values, X, spec, trans, nbatch)


def sddmm(U, V, spec: int, nbatch: int = 0) -> torch.Tensor:
    """U Vᴴ on the pattern, differentiable in U and V under every transform."""
    if torch.compiler.is_compiling():
        return sddmm_op(U, V, spec, nbatch)
    return SDDMMFn.apply(U, V, spec, nbatch)
