"""The full gradient ∂f/∂A, collected lazily during ``torch.autograd`` backward passes for a
:class:`~adjoints.torch.Factorization` made with ``full_grad=True`` (``F.grad``).

Each solve's backward computes λ (the adjoint solution) and has its solution u; the term of
the full gradient it contributes is −λuᴴ (x = A⁻¹b) or −conj(u)λᵀ (x = A⁻ᵀb). Those factors
are copied to the host, O(n) per right-hand side, and ``F.grad`` is one ``lo.LowRank`` of all
of them: the gradient of the dense matrix, correct on structural zeros, never n×n.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

import linops as lo

__all__ = ["FullGradient", "GRADS", "record_full_gradient"]


class FullGradient:
    """Collects the full gradient ∂f/∂A of the solves with one factorization during
    ``torch.autograd`` backward passes: Σ −λ uᴴ over the solves (u = A⁻¹b) and −conj(u) λᵀ over
    the transposed ones, as host (numpy) factors of one ``lo.LowRank``. O(n) per column."""

    def __init__(self):
        self.U: list = []
        self.V: list = []

    def add(self, U: np.ndarray, V: np.ndarray) -> None:
        self.U.append(U)
        self.V.append(V)

    def operator(self):
        if not self.U:
            return None
        U, V = np.concatenate(self.U, axis=1), np.concatenate(self.V, axis=1)
        if U.shape[1] == 1:
            return lo.RankOne(U[:, 0], V[:, 0])
        return lo.LowRank(U, V)


GRADS: "weakref.WeakValueDictionary[int, FullGradient]" = weakref.WeakValueDictionary()


def _host_copy(t) -> np.ndarray:
    t = t.detach()
    t = t.resolve_conj() if t.is_conj() else t
    a = np.array(t.cpu().numpy(), copy=True)
    return a[:, None] if a.ndim == 1 else a


def record_full_gradient(key, lam, x, trans: str, nbatch: int) -> None:
    """Called by a solve's backward (torch.autograd, unbatched): add its term of ∂f/∂A to the
    collector of its factorization, if that factorization keeps one."""
    if nbatch or torch._C._functorch.is_functorch_wrapped_tensor(key) or key.numel() != 1:
        return
    sink = GRADS.get(int(key.reshape(-1)[0]))
    if sink is None:
        return
    L, X = _host_copy(lam), _host_copy(x)
    if trans == "N":          # x = A⁻¹b: Ā = −λ xᴴ
        sink.add(-L, X)
    else:                     # x = A⁻ᵀb: Ā = −conj(x) λᵀ = (−conj x)(conj λ)ᴴ
        sink.add(-X.conj(), L.conj())
