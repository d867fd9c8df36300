"""Sparse products written in torch operations (gathers and ``index_add``), with leading batch
axes: what the tangent and cotangent rules of the solves compute with, so that torch
differentiates, vmaps and compiles them like any other operation.

``spmv(v, X, P, trans)`` is op(A) X for A = Sparse(v, P) (op: none or the plain transpose),
``sddmm(U, V, P)`` samples U Vᴴ on P (``out[e] = Σₖ U[rₑ, k] conj(V[cₑ, k])``); both cost
O(nnz·k). ``sum_to`` reduces a broadcast result to an operand's shape. The index tensors of a
pattern are made once per (pattern, device) and kept for the few most recent patterns.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

import linops as lo

__all__ = ["indices", "spmv", "sddmm", "sum_to", "conj"]

_KEEP = 16
_INDEX: OrderedDict = OrderedDict()


def indices(P: lo.Pattern, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols) of P's stored entries as int64 tensors on ``device``."""
    key = (P, str(device))
    hit = _INDEX.get(key)
    if hit is None:
        hit = (torch.as_tensor(P.rows, dtype=torch.int64, device=device),
               torch.as_tensor(P.indices, dtype=torch.int64, device=device))
        _INDEX[key] = hit
        while len(_INDEX) > _KEEP:
            _INDEX.popitem(last=False)
    _INDEX.move_to_end(key)
    return hit


def conj(x: torch.Tensor) -> torch.Tensor:
    """conj(x) (nothing for real x)."""
    return x.conj() if x.is_complex() else x


def spmv(v: torch.Tensor, X: torch.Tensor, P: lo.Pattern, trans: str, vector: bool):
    """op(A) X for A = Sparse(v, P): v (..., nnz), X (..., n) when ``vector`` else (..., n, k),
    leading axes broadcasting; op is none ('N') or the plain transpose ('T'). O(nnz·k)."""
    r, c = indices(P, X.device)
    src, dst = (c, r) if trans == "N" else (r, c)
    dtype = torch.promote_types(v.dtype, X.dtype)
    Xm = X.unsqueeze(-1) if vector else X
    prod = v.to(dtype).unsqueeze(-1) * Xm.to(dtype).index_select(-2, src)
    m = P.shape[0] if trans == "N" else P.shape[1]
    out = prod.new_zeros(prod.shape[:-2] + (m, prod.shape[-1])).index_add(-2, dst, prod)
    return out.squeeze(-1) if vector else out


def sddmm(U: torch.Tensor, V: torch.Tensor, P: lo.Pattern, vector: bool) -> torch.Tensor:
    """(U Vᴴ) sampled on P: ``out[..., e] = Σₖ U[..., rₑ, k] conj(V[..., cₑ, k])``; ``vector``:
    U and V are (..., n) (one column). O(nnz·k); nothing of size n×n."""
    r, c = indices(P, U.device)
    if vector:
        return U.index_select(-1, r) * conj(V).index_select(-1, c)
    return (U.index_select(-2, r) * conj(V).index_select(-2, c)).sum(-1)


def sum_to(x: torch.Tensor, shape) -> torch.Tensor:
    """x summed over the axes it was broadcast along to reach its shape from ``shape``."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    extra = x.dim() - len(shape)
    if extra:
        x = x.sum(tuple(range(extra)))
    dims = tuple(i for i, (a, b) in enumerate(zip(x.shape, shape)) if b == 1 and a != 1)
    return x.sum(dims, keepdim=True) if dims else x
