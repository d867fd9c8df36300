"""``adj.matmul``: a sparse · dense product in either order, differentiable under every JAX
transform (the cotangent of the sparse values an SDDMM on the pattern)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

import linops as lo
from linops.internals import ShapeError

from ._solve import _as_jax, _is_jax_sparse
from ._spmm import spmm


def matmul(L: Any, R: Any) -> jax.Array:
    """Y = L @ R with one operand sparse (``lo.Sparse``, BCOO/BCSR) and the other a dense jax
    array: ``matmul(A, X)`` or ``matmul(X, A)``; differentiable in both under every transform.

    Cost O(nnz·k) (gather + sorted segment-sum). Adjoint: X̄ = AᵀȲ (or ȲAᵀ), values̄ = SDDMM
    of Ȳ and X on A's pattern, O(nnz·k); never an n×n array. Dense operands on both sides
    fall back to ``jnp.matmul``.

    Parameters
    ----------
    L, R : sparse operator or dense array
        One of them ``lo.Sparse`` (jax values; the pattern static) or a BCOO/BCSR; the other a
        dense array of shape (n,) or (n, k) on the right, (n,) or (m, n) on the left.

    Returns
    -------
    Y : jax array
        Of shape (m,) / (m, k) for A @ X, (n,) / (m, n) for X @ A.

    Raises
    ------
    ShapeError
        The shapes do not chain.
    TypeError
        Both operands are sparse.

    Notes
    -----
    ``X @ A`` runs as (Aᵀ Xᵀ)ᵀ on the transposed pattern (computed once per pattern), so both
    orders are a gather and a segment sum, and both differentiate to an SDDMM on A's pattern.
    The cotangents follow JAX's convention (plain transposes, no conjugation).

    Examples
    --------
    >>> import jax, jax.numpy as jnp, scipy.sparse as sp
    >>> A = lo.Sparse.from_scipy(sp.csr_array([[2.0, 1.0], [0.0, 4.0]]))
    >>> x = jnp.array([1.0, 2.0])
    >>> matmul(A, x).tolist(), matmul(x, A).tolist()              # A x and xᵀ A
    ([4.0, 8.0], [2.0, 9.0])
    >>> v = jnp.asarray(A.values)
    >>> jax.grad(lambda v: matmul(lo.Sparse(v, A.pattern), x).sum())(v).tolist()   # x_c
    [1.0, 2.0, 2.0]
    """
    l_sp, r_sp = _sparse_operand(L), _sparse_operand(R)
    if l_sp and r_sp:
        raise TypeError("matmul needs one dense operand; got two sparse operands "
                        f"({type(L).__name__}, {type(R).__name__})")
    if not (l_sp or r_sp):
        return jnp.matmul(_plain(L), _plain(R))
    if l_sp:
        A = lo.aslinop(L)
        X = _as_jax(R, "X")
        if X.ndim not in (1, 2) or X.shape[0] != A.shape[1]:
            raise ShapeError(f"A @ X with A.shape={A.shape} but X.shape={tuple(X.shape)}")
        return spmm(_as_jax(A.values, "A.values"), X, A.pattern, "N")
    A = lo.aslinop(R)
    X = _as_jax(L, "X")
    if X.ndim not in (1, 2) or X.shape[-1] != A.shape[0]:
        raise ShapeError(f"X @ A with X.shape={tuple(X.shape)} but A.shape={A.shape}")
    Xt = X.T if X.ndim == 2 else X  # X @ A = (Aᵀ Xᵀ)ᵀ: one primitive, trans="T"
    Y = spmm(_as_jax(A.values, "A.values"), Xt, A.pattern, "T")      # Yᵀ = Aᵀ Xᵀ
    return Y.T if X.ndim == 2 else Y


def _plain(x):
    """A Dense operator's array (for the dense-dense fallback)."""
    return x.a if isinstance(x, lo.Dense) else x


def _sparse_operand(x) -> bool:
    """``lo.Sparse`` or a jax sparse matrix: the operand whose values get an SDDMM cotangent."""
    return isinstance(x, lo.Sparse) or _is_jax_sparse(x)
