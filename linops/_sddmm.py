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

    U: (m, k) or (m,), V: (n, k) or (n,); rows, cols: integer arrays of equal length.
    Cost O(len(rows)·k); temporaries bounded by ``chunk_bytes``.

    >>> import numpy as np
    >>> sddmm(np.array([[1.0], [2.0]]), np.array([[3.0], [4.0]]), [0, 1], [1, 0])
    array([4., 6.])
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
