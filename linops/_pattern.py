"""CSR sparsity patterns: immutable, canonical (sorted, unique), hashable by a cheap fingerprint."""

from __future__ import annotations

import hashlib
from functools import cached_property

import numpy as np

from ._base import check_shape
from ._errors import PatternError


class Pattern:
    """The structure of a CSR matrix: ``indptr`` (m+1,), ``indices`` (nnz,), ``shape`` (m, n).

    Invariants, checked once at construction with the offending values in the message:
    indptr starts at 0, is non-decreasing and ends at nnz; column indices lie in [0, n) and are
    strictly increasing within each row (canonical CSR: sorted, no duplicates). Index arrays are
    host (numpy) arrays and are copied read-only, so a pattern can never change after it was
    made; it is hashable (blake2b fingerprint of the index bytes, computed once) and can serve as
    static data for ``jax.jit``.

    >>> P = Pattern.from_coo([0, 1, 1], [1, 0, 1], (2, 2))
    >>> P.nnz, P.indptr.tolist(), P.indices.tolist()
    (3, [0, 1, 3], [1, 0, 1])
    """

    __slots__ = ("indptr", "indices", "shape", "__dict__")

    def __init__(self, indptr, indices, shape):
        shape = check_shape(shape)
        indptr = np.array(indptr, dtype=np.int64, copy=True).reshape(-1)
        indices = np.array(indices, dtype=np.int64, copy=True).reshape(-1)
        m, n = shape
        if indptr.shape[0] != m + 1:
            raise PatternError(f"indptr must have length m+1={m + 1} for shape={shape}, "
                               f"got len(indptr)={indptr.shape[0]}")
        if indptr[0] != 0 or indptr[-1] != indices.shape[0]:
            raise PatternError(f"indptr must start at 0 and end at nnz={indices.shape[0]}, got "
                               f"indptr[0]={indptr[0]}, indptr[-1]={indptr[-1]}")
        if m and np.any(np.diff(indptr) < 0):
            r = int(np.argmax(np.diff(indptr) < 0))
            raise PatternError(f"indptr decreases at row {r}: {indptr[r]} > {indptr[r + 1]}")
        if indices.size:
            bad = (indices < 0) | (indices >= n)
            if bad.any():
                k = int(np.argmax(bad))
                raise PatternError(f"column index out of range [0, {n}) for shape={shape}: "
                                   f"indices[{k}]={indices[k]}")
            rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(indptr))
            step = np.diff(indices)
            same_row = rows[1:] == rows[:-1]
            badk = same_row & (step <= 0)
            if badk.any():
                k = int(np.argmax(badk))
                raise PatternError(
                    f"pattern is not canonical: row {rows[k]} has column {indices[k]} followed by "
                    f"{indices[k + 1]} (indices must be sorted and unique per row); build it with "
                    f"Pattern.from_coo or Sparse.from_scipy, which canonicalise")
            self.__dict__["rows"] = rows
            rows.setflags(write=False)
        indptr.setflags(write=False)
        indices.setflags(write=False)
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "shape", shape)

    def __setattr__(self, name, value):
        raise AttributeError("Pattern is immutable")

    # ----- constructors -------------------------------------------------------------------------
    @classmethod
    def from_coo(cls, rows, cols, shape) -> "Pattern":
        """Canonical pattern of the (row, col) positions given (duplicates merged)."""
        p, _ = cls.from_coo_with_map(rows, cols, shape)
        return p

    @classmethod
    def from_coo_with_map(cls, rows, cols, shape) -> tuple["Pattern", np.ndarray]:
        """Pattern of (rows, cols) plus ``pos`` with pattern slot of each input entry."""
        m, n = check_shape(shape)
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        cols = np.asarray(cols, dtype=np.int64).reshape(-1)
        if rows.shape != cols.shape:
            raise PatternError(f"rows.shape={rows.shape} but cols.shape={cols.shape}")
        for name, ix, bound in (("rows", rows, m), ("cols", cols, n)):
            if ix.size and (ix.min() < 0 or ix.max() >= bound):
                raise PatternError(f"{name} out of range [0, {bound}) for shape={(m, n)}: "
                                   f"min={ix.min()}, max={ix.max()}")
        keys = rows * n + cols
        ukeys, pos = np.unique(keys, return_inverse=True)
        urows, ucols = np.divmod(ukeys, n) if n else (ukeys, ukeys)
        indptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(urows, minlength=m), out=indptr[1:])
        return cls(indptr, ucols, (m, n)), pos.reshape(-1)

    @classmethod
    def from_scipy(cls, S) -> "Pattern":
        S = S.tocsr()
        if not S.has_canonical_format:
            S = S.copy()
            S.sum_duplicates()
        return cls(S.indptr, S.indices, S.shape)

    @classmethod
    def diagonal(cls, n: int) -> "Pattern":
        return cls(np.arange(n + 1), np.arange(n), (n, n))

    # ----- derived ------------------------------------------------------------------------------
    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @cached_property
    def rows(self) -> np.ndarray:
        """Row index of every stored entry (nnz,)."""
        r = np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.indptr))
        r.setflags(write=False)
        return r

    @cached_property
    def keys(self) -> np.ndarray:
        """Sorted linear keys row*n + col (for membership and lookups by binary search)."""
        k = self.rows * self.shape[1] + self.indices
        k.setflags(write=False)
        return k

    @cached_property
    def fingerprint(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        h.update(np.asarray(self.shape, dtype=np.int64).tobytes())
        h.update(self.indptr.tobytes())
        h.update(self.indices.tobytes())
        return h.hexdigest()

    @cached_property
    def _transpose(self) -> tuple["Pattern", np.ndarray]:
        m, n = self.shape
        order = np.lexsort((self.rows, self.indices))  # by column, then row
        cols = self.indices[order]
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(cols, minlength=n), out=indptr[1:])
        perm = order.copy()
        perm.setflags(write=False)
        return Pattern(indptr, self.rows[order], (n, m)), perm

    def on(self, be, name: str):
        """Index array ``name`` ('indptr', 'indices', 'rows' or 'perm_T') for backend ``be``.

        numpy and jax get the host array (jax takes numpy indices as constants); a backend whose
        indices live on a device (cupy) gets a copy made once per pattern and kept, so repeated
        products move no indices."""
        host = self.transpose()[1] if name == "perm_T" else getattr(self, name)
        if not be.device_indices:
            return host
        cache = self.__dict__.setdefault("_device", {})
        if (be.name, name) not in cache:
            cache[(be.name, name)] = be.index(host)
        return cache[(be.name, name)]

    def transpose(self) -> tuple["Pattern", np.ndarray]:
        """(Pᵀ, perm): the transposed pattern and the gather taking values to its order."""
        return self._transpose

    def locate(self, rows, cols) -> tuple[np.ndarray, np.ndarray]:
        """(slot, found): pattern slot of each (row, col) and whether it is stored."""
        key = np.asarray(rows, dtype=np.int64) * self.shape[1] + np.asarray(cols, dtype=np.int64)
        slot = np.searchsorted(self.keys, key)
        slot = np.minimum(slot, max(self.nnz - 1, 0))
        found = (self.keys[slot] == key) if self.nnz else np.zeros(key.shape, dtype=bool)
        return slot, found

    def union(self, *others: "Pattern") -> "Pattern":
        for o in others:
            if o.shape != self.shape:
                raise PatternError(f"union of patterns with shapes {self.shape} and {o.shape}")
        rows = np.concatenate([self.rows] + [o.rows for o in others])
        cols = np.concatenate([self.indices] + [o.indices for o in others])
        return Pattern.from_coo(rows, cols, self.shape)

    def to_scipy(self, values=None):
        import scipy.sparse as sp

        data = np.ones(self.nnz) if values is None else values
        return sp.csr_array((data, self.indices.copy(), self.indptr.copy()), shape=self.shape)

    # ----- identity -----------------------------------------------------------------------------
    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, Pattern):
            return NotImplemented
        return (self.shape == other.shape and self.nnz == other.nnz
                and self.fingerprint == other.fingerprint)

    def __repr__(self) -> str:
        return f"Pattern(shape={self.shape}, nnz={self.nnz}, fingerprint={self.fingerprint[:8]})"

    def __reduce__(self):
        return (Pattern, (self.indptr, self.indices, self.shape))
