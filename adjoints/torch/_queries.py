"""Queries of a factorization, differentiable: log-determinants and entries of the inverse.

``slogdet(key, values)`` reads (sign, log|det A|) off the factors (``cache.logdet()``: no
solve). Its derivative is tr(A⁻¹ dA) = Σₑ A⁻¹[cₑ, rₑ] dvₑ: the entries of A⁻¹ on Aᵀ's
pattern, by selected inversion of the SAME factors (:class:`InvSampleFn`, about two
factorizations' flops and no solve), so the gradient with respect to the stored values is
A⁻ᴴ on the pattern (torch's convention), and d sign = sign · i Im tr(A⁻¹dA) for complex A.

``inv_sample(key, values, rows, cols)`` gives A⁻¹[rows[k], cols[k]] by selected inversion
(positions outside the factor's filled pattern by solves for their columns). Its derivative
d(A⁻¹)ᵣ꜀ = −(A⁻¹ dA A⁻¹)ᵣ꜀ comes from the |R| distinct rows and |C| distinct columns involved:
|R| + |C| solves with the same factorization (differentiable solves, so every higher order
works) and one SDDMM — the second derivative of a log-determinant therefore costs 2n solves on
the one factorization and O(n²) memory: for small n only.
"""

from __future__ import annotations

import numpy as np
import torch

import linops as lo
import solvers as sv

from ._convert import from_host, np_dtype, to_host
from ._sparse import conj, sum_to
from ._store import cache_for, spec_id

__all__ = ["slogdet_kernel", "inv_sample_kernel", "slogdet_backward", "slogdet_jvp",
           "inv_sample_backward", "inv_sample_jvp"]

_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _members(key, values, nbatch):
    """(lead shape, flat keys, flat values thunk) of a batched call."""
    lead = tuple(torch.broadcast_shapes(key.shape[:nbatch], values.shape[:nbatch]))
    K = np.broadcast_to(key.detach().cpu().numpy()[..., 0], lead).reshape(-1)
    V = values.expand(lead + (values.shape[-1],)).reshape(-1, values.shape[-1])
    return lead, K, V


def _cache(k, v, sp):
    return cache_for(int(k), lambda: to_host(v), sp)


# ----- kernels -----------------------------------------------------------------------------------
def slogdet_kernel(key, values, spec: int, nbatch: int):
    sp = spec_id(spec)
    lead, K, V = _members(key, values, nbatch)
    signs = np.empty(K.shape, np_dtype(values.dtype))
    lds = np.empty(K.shape, np_dtype(_REAL.get(values.dtype, values.dtype)))
    for i, k in enumerate(K):
        cache, _ = _cache(k, V[i], sp)
        signs[i], lds[i] = cache.logdet()
    return (from_host(signs.reshape(lead), values.device),
            from_host(lds.reshape(lead), values.device))


def inv_sample_kernel(key, values, rows, cols, spec: int, nbatch: int):
    sp = spec_id(spec)
    lead, K, V = _members(key, values, nbatch)
    r, c = rows.cpu().numpy(), cols.cpu().numpy()
    out = np.empty((K.shape[0], r.shape[0]), np_dtype(values.dtype))
    for i, k in enumerate(K):
        cache, _ = _cache(k, V[i], sp)
        out[i] = lo.sample(sv.inverse(cache), r, c) if r.size else 0
    return from_host(out.reshape(lead + (r.shape[0],)), values.device)


# ----- derivative rules --------------------------------------------------------------------------
def _unit_columns(idx: torch.Tensor, n: int, dtype, device):
    """(distinct indices, position of each in them, the n×d matrix of their unit vectors)."""
    uniq, pos = torch.unique(idx, return_inverse=True)
    E = torch.zeros((n, uniq.shape[0]), dtype=dtype, device=device)
    E[uniq, torch.arange(uniq.shape[0], device=device)] = 1
    return uniq, pos, E


def _inv_columns(W, key, values, rows, cols, spec, nbatch, dtype):
    """A⁻ᵀ E_R (|R| transpose solves) and A⁻¹ E_C (|C| solves), with the row/column positions."""
    solve = W[0]
    n = spec_id(spec).n
    _, rho, ER = _unit_columns(rows, n, dtype, values.device)
    _, gam, EC = _unit_columns(cols, n, dtype, values.device)
    lift = (1,) * nbatch
    XT = solve(key, values, ER.reshape(lift + ER.shape), spec, "T", nbatch)
    Y = solve(key, values, EC.reshape(lift + EC.shape), spec, "N", nbatch)
    return XT, Y, rho, gam


def inv_sample_backward(W, key, values, rows, cols, z, g, spec, nbatch):
    """values̄ₑ = −Σₖ z̄ₖ conj(A⁻¹[rₖ, rₑ]) conj(A⁻¹[cₑ, cₖ]): an SDDMM of (A⁻ᴴE_R)[:, ρ]·z̄ and
    (A⁻¹E_C)[:, γ] (n × K each)."""
    if g is None:
        return None
    XT, Y, rho, gam = _inv_columns(W, key, values, rows, cols, spec, nbatch, z.dtype)
    U = conj(XT).index_select(-1, rho) * g.to(z.dtype).unsqueeze(-2)   # A⁻ᴴ[:, rₖ] z̄ₖ
    gv = -W[2](U, Y.index_select(-1, gam), spec, nbatch)
    gv = sum_to(gv, values.shape)
    return (gv if values.is_complex() else gv.real).to(values.dtype)


def inv_sample_jvp(W, key, values, rows, cols, z, dvalues, spec, nbatch):
    """żₖ = −(A⁻¹ Ȧ A⁻¹)[rₖ, cₖ] = −Σᵢ (A⁻ᵀ E_R)[i, ρₖ] (Ȧ A⁻¹ E_C)[i, γₖ]."""
    if dvalues is None:
        return torch.zeros_like(z)
    XT, Y, rho, gam = _inv_columns(W, key, values, rows, cols, spec, nbatch, z.dtype)
    AY = W[1](dvalues.to(z.dtype), Y, spec, "N", nbatch)
    return -(XT.index_select(-1, rho) * AY.index_select(-1, gam)).sum(-2)


def _transposed_entries(spec, device):
    P = spec_id(spec).pattern
    return (torch.as_tensor(np.array(P.indices), dtype=torch.int64, device=device),
            torch.as_tensor(np.array(P.rows), dtype=torch.int64, device=device))


def slogdet_backward(W, key, values, sign, g_sign, g_ld, spec, nbatch):
    """values̄ = conj(Z)(ḡ_ℓ + iα) with Z = A⁻¹ on Aᵀ's pattern, α = −Im(conj(s̄)s)."""
    if g_sign is None and g_ld is None:
        return None
    rows, cols = _transposed_entries(spec, values.device)
    Z = W[3](key, values, rows, cols, spec, nbatch)          # A⁻¹[cₑ, rₑ]
    coef = torch.zeros_like(sign.real) if g_ld is None else g_ld
    if values.is_complex():
        coef = coef.to(values.dtype)
        if g_sign is not None:
            coef = coef + 1j * (-(conj(g_sign) * sign).imag)
    gv = conj(Z) * coef.unsqueeze(-1)
    gv = sum_to(gv, values.shape)
    return (gv if values.is_complex() else gv.real).to(values.dtype)


def slogdet_jvp(W, key, values, sign, dvalues, spec, nbatch):
    """dℓ = Re tr(A⁻¹Ȧ), d sign = sign · i Im tr(A⁻¹Ȧ)."""
    if dvalues is None:
        return torch.zeros_like(sign), torch.zeros_like(sign.real)
    rows, cols = _transposed_entries(spec, values.device)
    Z = W[3](key, values, rows, cols, spec, nbatch)
    t = (Z * dvalues.to(Z.dtype)).sum(-1)
    ds = sign * (1j * t.imag) if values.is_complex() else torch.zeros_like(sign)
    return ds, t.real
