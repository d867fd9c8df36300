"""Small tensor helpers of the derivative rules: ``conj`` (nothing for real tensors) and
``sum_to`` (a broadcast result summed back to an operand's shape)."""

from __future__ import annotations

import torch

__all__ = ["sum_to", "conj"]


def conj(x: torch.Tensor) -> torch.Tensor:
    """conj(x) as a new tensor (a lazy conjugate view has no vmap batching rule once negated,
    ``conj_physical`` none at all), nothing for real x."""
    return torch.complex(x.real, -x.imag) if x.is_complex() else x


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
