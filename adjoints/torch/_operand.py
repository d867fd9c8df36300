"""What ``adjoints.torch`` accepts as a matrix, reduced once at the boundary to values and a
static pattern (or a dense tensor).

* ``lo.Sparse`` whose values are a torch tensor (``fam(θ)`` gives one), or numpy values
  (then a constant tensor);
* a torch sparse COO / CSR / CSC tensor: coalesced (duplicates summed, row-major order = CSR
  order), its indices read once into a ``lo.Pattern`` on the host, its values kept as the
  differentiable tensor (the gradient reaches the sparse tensor's values: torch's masked
  semantics); under ``torch.func`` and ``torch.compile`` use ``lo.Sparse`` instead, since
  sparse tensors do not pass through those transforms;
* a scipy sparse matrix (constant);
* a dense 2-D tensor (solved by ``torch.linalg``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

import linops as lo
from linops.internals import ShapeError

from ._convert import SUPPORTED

__all__ = ["Operand", "operand", "as_tensor", "real_dtype"]

_SPARSE = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


@dataclass(frozen=True)
class Operand:
    """A matrix as the front end uses it: ``values`` + ``pattern`` (sparse) or ``dense``."""

    values: Any = None
    pattern: lo.Pattern | None = None
    dense: Any = None

    @property
    def shape(self) -> tuple:
        return tuple(self.pattern.shape) if self.dense is None else tuple(self.dense.shape)

    @property
    def dtype(self) -> torch.dtype:
        return (self.values if self.dense is None else self.dense).dtype


def operand(A, who: str) -> Operand:
    """The :class:`Operand` of A (TypeError naming what is accepted otherwise)."""
    if isinstance(A, lo.Sparse):
        v = A.values
        if not isinstance(v, torch.Tensor):
            v = torch.from_numpy(np.array(v))
        return Operand(_float(v, f"{who}: A.values"), A.pattern)
    if isinstance(A, torch.Tensor):
        if A.layout in _SPARSE:
            return _from_torch_sparse(A, who)
        if A.layout != torch.strided or A.dim() != 2:
            raise ShapeError(f"{who}: a dense A must be a 2-D tensor, got shape "
                             f"{tuple(A.shape)} ({A.layout})")
        return Operand(dense=_float(A, f"{who}: A"))
    if sp.issparse(A):
        return operand(lo.Sparse.from_scipy(A), who)
    raise TypeError(f"{who}: A must be a lo.Sparse (torch values: lo.Sparse(v, pattern), "
                    f"fam(θ)), a torch sparse COO/CSR/CSC tensor, a scipy sparse matrix or a "
                    f"dense 2-D tensor; got {type(A).__module__}.{type(A).__name__}")


def _from_torch_sparse(A: torch.Tensor, who: str) -> Operand:
    """Coalesced COO: sorted row-major, duplicates summed (a linear, differentiable map)."""
    if A.dim() != 2 or A.dense_dim() != 0:
        raise ShapeError(f"{who}: a sparse A must be 2-D without dense dimensions, got shape "
                         f"{tuple(A.shape)} with dense_dim={A.dense_dim()}")
    C = (A if A.layout == torch.sparse_coo else A.to_sparse_coo()).coalesce()
    ij = C.indices().detach().cpu().numpy()
    P = lo.Pattern.from_coo(ij[0], ij[1], tuple(A.shape))
    return Operand(_float(C.values(), f"{who}: A.values()"), P)


def _float(t: torch.Tensor, who: str) -> torch.Tensor:
    if t.dtype in SUPPORTED:
        return t
    if t.is_floating_point() or t.is_complex():
        from linops.internals import BackendNotSupported  # deferred: error path only

        raise BackendNotSupported(f"{who}: dtype {t.dtype} is not supported; supported: "
                                  f"float32, float64, complex64, complex128")
    return t.to(torch.get_default_dtype())


def as_tensor(b, who: str, like: torch.Tensor | None = None) -> torch.Tensor:
    """b as a floating tensor (numpy arrays and lists converted, integers to the default
    float dtype), on ``like``'s device."""
    if not isinstance(b, torch.Tensor):
        try:
            b = torch.as_tensor(np.asarray(b))
        except (TypeError, ValueError):
            raise TypeError(f"{who} must be a tensor or an array, got {type(b).__name__}") \
                from None
    b = _float(b, who)
    if like is not None and b.device != like.device:
        raise ValueError(f"{who} is on {b.device} but A's values are on {like.device}; move "
                         f"one of them (.to(device))")
    return b


def real_dtype(dt: torch.dtype) -> torch.dtype:
    return {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dt, dt)
