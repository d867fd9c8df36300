"""Host kernels of the sparse products (plain tensors, below every transform).

``spmm``: op(A) X through scipy's CSR products on the tensors' memory (op 'N' or the plain
transpose 'T', the native CSC view: no transposed pattern). ``sddmm``: U Vᴴ sampled on the
pattern by a compiled row-parallel loop (numba): each stored entry (r, c) is the dot product
of U's row r with conj(V's row c), O(nnz·k) flops, O(nnz) output, no n×n array. CUDA tensors
use torch's own operations (cuSPARSE through ``torch.sparse``, gathers for the SDDMM).
"""

from __future__ import annotations

import numba as nb
import numpy as np
import torch

import linops as lo

__all__ = ["spmm", "sddmm"]

# fastmath lets the k-term dot products vectorize (their summation order is free); direct
# indexing (no row views) keeps the loop as lean as scipy's CSR product
_JIT = dict(cache=True, nogil=True, parallel=True, fastmath=True, boundscheck=False)


@nb.njit(**_JIT)
def _sddmm_real(indptr, indices, U, V, out):  # pragma: no cover - compiled
    m = indptr.shape[0] - 1
    k = U.shape[1]
    for i in nb.prange(m):
        for e in range(indptr[i], indptr[i + 1]):
            j = indices[e]
            s = U[i, 0] * V[j, 0]
            for t in range(1, k):
                s += U[i, t] * V[j, t]
            out[e] = s


@nb.njit(**_JIT)
def _sddmm_complex(indptr, indices, U, V, out):  # pragma: no cover - compiled
    m = indptr.shape[0] - 1
    k = U.shape[1]
    for i in nb.prange(m):
        for e in range(indptr[i], indptr[i + 1]):
            j = indices[e]
            s = U[i, 0] * np.conj(V[j, 0])
            for t in range(1, k):
                s += U[i, t] * np.conj(V[j, t])
            out[e] = s


def _csr(values: np.ndarray, P: lo.Pattern):
    import scipy.sparse as sp  # deferred: only the host kernels need scipy.sparse

    return sp.csr_matrix((values, P.indices, P.indptr), shape=P.shape)


def _host(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    return (t.resolve_conj() if t.is_conj() else t).numpy()


def spmm(values: torch.Tensor, X: torch.Tensor, P: lo.Pattern, trans: str) -> torch.Tensor:
    """op(A) X for one A = Sparse(values, P) and X (n, k): a new tensor of the promoted dtype."""
    dtype = torch.promote_types(values.dtype, X.dtype)
    if X.device.type != "cpu":
        return _spmm_torch(values.to(dtype), X.to(dtype), P, trans)
    A = _csr(_host(values), P)
    Y = (A @ _host(X)) if trans == "N" else (A.T @ _host(X))
    return torch.from_numpy(np.ascontiguousarray(Y)).to(dtype)


def sddmm(U: torch.Tensor, V: torch.Tensor, P: lo.Pattern) -> torch.Tensor:
    """(U Vᴴ)[r, c] at P's stored entries, for U (m, k), V (n, k): shape (nnz,)."""
    dtype = torch.promote_types(U.dtype, V.dtype)
    U, V = U.to(dtype), V.to(dtype)
    if U.device.type != "cpu":
        r, c = _index(P, U.device)
        Vc = V.conj() if V.is_complex() else V
        return (U.index_select(0, r) * Vc.index_select(0, c)).sum(-1)
    out = np.zeros(P.nnz, dtype=_host(U).dtype)
    if P.nnz and U.shape[1]:
        kernel = _sddmm_complex if U.is_complex() else _sddmm_real
        kernel(P.indptr, P.indices, np.ascontiguousarray(_host(U)),
               np.ascontiguousarray(_host(V)), out)
    return torch.from_numpy(out)


def _index(P: lo.Pattern, device):
    return (torch.as_tensor(np.array(P.rows), dtype=torch.int64, device=device),
            torch.as_tensor(np.array(P.indices), dtype=torch.int64, device=device))


def _spmm_torch(values, X, P, trans):
    r, c = _index(P, X.device)
    src, dst = (c, r) if trans == "N" else (r, c)
    m = P.shape[0] if trans == "N" else P.shape[1]
    return X.new_zeros((m, X.shape[1])).index_add_(0, dst, values[:, None] * X.index_select(0, src))
