"""SDDMM: sampled dense-dense product on an arbitrary set of positions.

``values[k] = Σ_r U[rows[k], r] * conj(V[cols[k], r])`` — the entries of U Vᴴ at (rows, cols).

Why our own kernel: scipy has none; cuSPARSE's SDDMM needs CSR with a fixed layout and does not
conjugate; ``jax.experimental.sparse`` computes it only inside its own autodiff rules. This one is
written once against the array API (numpy, cupy, jax alike): gathers of U's and V's rows in
chunks of positions, so the temporaries stay under ``chunk_bytes`` (64 MiB by default) whatever
nnz·k is, and nothing of size m×n is ever allocated. Cost O(nnz·k) flops, O(nnz) output.
"""

from __future__ import annotations

import numpy as np

from ._backend import backend_of
from ._errors import ShapeError

CHUNK_BYTES = 64 * 2**20


def sddmm(U, V, rows, cols, *, conj_v: bool = True, chunk_bytes: int = CHUNK_BYTES):
    """Entries of U Vᴴ (or U Vᵀ with ``conj_v=False``) at positions (rows[k], cols[k]).

    ``out[k] = Σᵣ U[rows[k], r] · conj(V[cols[k], r])``: a sampled dense-dense matrix product.
    It is how ``project``, ``sample`` and ``inner`` read a low-rank operator on a sparsity
    pattern, and the gradient of a sparse matrix's values in ``Y = A X``.

    Cost O(len(rows)·k) flops and O(len(rows)) output. The gathered rows are processed in
    chunks, so the temporaries stay under ``chunk_bytes`` whatever len(rows)·k is; nothing of
    size m×n is allocated.

    Parameters
    ----------
    U : array of shape (m, k) or (m,)
    V : array of shape (n, k) or (n,)
        numpy, cupy or jax, one backend; 1-D factors are taken as one column.
    rows, cols : integer arrays or lists of equal length
        Positions; repeats are allowed. Not range-checked (an out-of-range index raises
        numpy's IndexError; use ``lo.sample`` for checked access).
    conj_v : bool, default True
        Conjugate V (the U Vᴴ convention of ``LowRank``); False gives U Vᵀ.
    chunk_bytes : int, default 64 MiB
        Upper bound on the temporaries.

    Returns
    -------
    array of shape (len(rows),)
        dtype: the promotion of U's and V's; in their backend.

    Raises
    ------
    ShapeError
        If U and V have different numbers of columns.

    Examples
    --------
    >>> import numpy as np
    >>> U, V = np.array([[1.0, 1j], [2.0, 0.0]]), np.array([[1.0, 1.0], [0.0, 1j]])
    >>> sddmm(U, V, [0, 1, 0], [1, 0, 0])              # (U Vᴴ)[0, 1], [1, 0], [0, 0]
    array([1.+0.j, 2.+0.j, 1.+1.j])
    >>> sddmm(U, V, [0], [1], conj_v=False)            # (U Vᵀ)[0, 1] = 0 + 1j·1j
    array([-1.+0.j])
    """
    be = backend_of(U, V)
    xp = be.xp
    if U.ndim == 1:
        U = U[:, None]
    if V.ndim == 1:
        V = V[:, None]
    if U.shape[1] != V.shape[1]:
        raise ShapeError(f"sddmm: U.shape={tuple(U.shape)} and V.shape={tuple(V.shape)} differ "
                         f"in rank")
    rows, cols = be.index(np.asarray(rows) if isinstance(rows, list) else rows), \
        be.index(np.asarray(cols) if isinstance(cols, list) else cols)
    nnz = int(rows.shape[0])
    k = int(U.shape[1])
    dtype = np.result_type(U.dtype, V.dtype)
    # two gathered (chunk, k) blocks plus their product
    per_entry = 3 * max(k, 1) * np.dtype(dtype).itemsize
    chunk = max(1, int(chunk_bytes) // per_entry)
    Vc = xp.conj(V) if conj_v and np.dtype(V.dtype).kind == "c" else V
    if nnz <= chunk:
        return be.rowdot(U[rows], Vc[cols])
    if be.mutable:  # write the chunks into one output (no concatenation copy)
        out = xp.empty(nnz, dtype=dtype)
        for s in range(0, nnz, chunk):
            out[s:s + chunk] = be.rowdot(U[rows[s:s + chunk]], Vc[cols[s:s + chunk]])
        return out
    return xp.concatenate([be.rowdot(U[rows[s:s + chunk]], Vc[cols[s:s + chunk]])
                           for s in range(0, nnz, chunk)])
