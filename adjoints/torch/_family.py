"""``fam(θ)`` for a torch θ: one differentiable operation from θ to K(θ)'s values.

An ``lo.AffineSparse`` family stores Mᴴ (p × nnz), the map from parameters to values, on the
host. With a torch θ, ``fam(θ)`` is ``Sparse(M θ + K₀, pattern)`` where M θ is ONE sparse
product (:func:`adjoints.torch._products.spmm` with Mᴴ's values as a constant and the plain
transpose of conj(Mᴴ)): O(nnz(M)), differentiable in θ under torch.autograd, every torch.func
transform (``vmap`` over θ: one product with the batch as columns) and ``torch.compile``. Its
cotangent is θ̄ = Mᴴ v̄ — the family's pullback, O(nnz) — so the gradient of anything computed
from K(θ) reaches θ without a ∂f/∂K in between.

Importing ``adjoints.torch`` registers this rule on linops' ``family_call`` generic.
"""

from __future__ import annotations

import torch

import linops as lo
from linops.internals import family_call_generic

from ._convert import np_dtype
from ._products import spmm
from ._store import spec_const

__all__ = ["family_values"]

_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}


@torch.compiler.assume_constant_result
def _constants(fam: lo.AffineSparse, dtype: torch.dtype, device) -> tuple:
    """(conj(Mᴴ) values, K₀ values or None) as tensors of ``dtype`` on ``device``, made once
    per (family, dtype, device) and kept with the family (constants of a compiled graph)."""
    cache = fam.__dict__.setdefault("_torch_constants", {})
    key = (dtype, str(device))
    hit = cache.get(key)
    if hit is None:
        mh = fam.MH.values.conj() if fam.MH.values.dtype.kind == "c" else fam.MH.values
        mh = torch.as_tensor(mh.astype(np_dtype(dtype)), device=device)
        k0 = None if fam.offset is None else torch.as_tensor(
            fam.offset.astype(np_dtype(dtype)), device=device)
        hit = cache[key] = (mh, k0)
    return hit


@torch.compiler.assume_constant_result
def _value_dtype(fam: lo.AffineSparse, theta_dtype: torch.dtype) -> torch.dtype:
    """The dtype of K(θ)'s values: θ's precision; complex when θ or the family (its map or its
    offset) is."""
    complex_fam = fam.MH.values.dtype.kind == "c" or (fam.offset is not None
                                                       and fam.offset.dtype.kind == "c")
    if complex_fam and not theta_dtype.is_complex:
        return _COMPLEX.get(theta_dtype, theta_dtype)
    return theta_dtype


def family_values(fam: lo.AffineSparse, theta: torch.Tensor) -> torch.Tensor:
    """K(θ)'s values (nnz,): M θ (+ K₀), one differentiable sparse product."""
    dtype = _value_dtype(fam, theta.dtype)
    mh, k0 = _constants(fam, dtype, theta.device)
    spec = spec_const(fam.MH.pattern, "product")
    values = spmm(mh, theta.to(dtype), spec, "T")        # (Mᴴ)ᴴ θ = conj(Mᴴ)ᵀ θ
    return values if k0 is None else values + k0


@family_call_generic.register(torch.Tensor)
def _(theta, fam):
    return lo.Sparse(family_values(fam, theta), fam.pattern)
