"""``at.matmul``: a sparse · dense product in either order, differentiable under torch.autograd,
every ``torch.func`` transform and ``torch.compile``; the cotangent of the sparse values is an
SDDMM on the pattern (the graph-learning case: learnable edge weights)."""

from __future__ import annotations

from typing import Any

import scipy.sparse as sp
import torch

import linops as lo
from linops.internals import ShapeError

from ._operand import as_tensor, operand
from ._products import spmm
from ._store import spec_const

__all__ = ["matmul"]

_SPARSE = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


def _is_sparse(x) -> bool:
    return (isinstance(x, lo.Sparse) or sp.issparse(x)
            or (isinstance(x, torch.Tensor) and x.layout in _SPARSE))


def matmul(L: Any, R: Any) -> torch.Tensor:
    """Y = L @ R with one operand sparse and the other a dense tensor: ``matmul(A, X)`` (A X)
    or ``matmul(X, A)`` (X A); differentiable in both.

    Parameters
    ----------
    L, R : sparse matrix or dense tensor
        One of them ``lo.Sparse`` with torch values (learnable: the pattern is static), a
        torch sparse COO/CSR/CSC tensor or a scipy sparse matrix; the other a dense tensor of
        shape (n,) or (n, k) on the right, (n,) or (m, n) on the left. Two dense tensors fall
        back to ``torch.matmul``.

    Returns
    -------
    Y : tensor
        (m,) / (m, k) for A @ X; (n,) / (m, n) for X @ A.

    Raises
    ------
    ShapeError
        The shapes do not chain.
    TypeError
        Both operands are sparse.

    Notes
    -----
    Cost O(nnz·k) (scipy's CSR product on the CPU). Adjoint (torch's convention): X̄ = AᴴȲ
    (or ȲAᴴ), values̄ = SDDMM of Ȳ and X on A's pattern — Ȳ[r] · conj(X[c]) per stored entry,
    O(nnz·k) by a compiled row-parallel kernel; never an n×n array. ``X @ A`` runs as
    (Aᵀ Xᵀ)ᵀ through the native CSC view (no transposed pattern). Forward mode, vmap (a batch
    of X or of value sets) and double backward use the same two products.

    Examples
    --------
    >>> import torch, scipy.sparse as sp, linops as lo, adjoints.torch as at
    >>> K = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> w = torch.tensor(K.values, requires_grad=True)
    >>> A = lo.Sparse(w, K.pattern)
    >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> at.matmul(A, x).tolist(), at.matmul(x, A).tolist()        # A x and xᵀ A
    ([4.0, 8.0], [2.0, 9.0])
    >>> at.matmul(A, x).sum().backward()
    >>> w.grad.tolist()                                          # Ȳ[r] x[c]: the SDDMM
    [1.0, 2.0, 2.0]
    """
    l_sp, r_sp = _is_sparse(L), _is_sparse(R)
    if l_sp and r_sp:
        raise TypeError(f"matmul needs one dense operand; got two sparse operands "
                        f"({type(L).__name__}, {type(R).__name__})")
    if not (l_sp or r_sp):
        return torch.matmul(as_tensor(L, "matmul: L"), as_tensor(R, "matmul: R"))
    op = operand(L if l_sp else R, "matmul")
    X = as_tensor(R if l_sp else L, "matmul: X", op.values)
    spec = spec_const(op.pattern, "product")
    m, n = op.shape
    if l_sp:
        if X.dim() not in (1, 2) or X.shape[0] != n:
            raise ShapeError(f"A @ X with A.shape={op.shape} but X.shape={tuple(X.shape)}")
        return spmm(op.values, X, spec, "N")
    if X.dim() not in (1, 2) or X.shape[-1] != m:
        raise ShapeError(f"X @ A with X.shape={tuple(X.shape)} but A.shape={op.shape}")
    if X.dim() == 1:
        return spmm(op.values, X, spec, "T")
    return spmm(op.values, X.T, spec, "T").T            # X A = (Aᵀ Xᵀ)ᵀ
