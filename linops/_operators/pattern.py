"""CSR sparsity patterns: immutable, canonical (sorted, unique), hashable by a cheap fingerprint.

A pattern is the structure of a sparse matrix without its numbers. Keeping it apart from the
values lets one pattern serve many operators (a family K(θ), its transposes, projections and
fixed-pattern gradients), lets it be static data under ``jax.jit``, and lets every derived index
array (row of each entry, transposed pattern and permutation, device copies) be computed once
per pattern and kept.
"""

from __future__ import annotations

import hashlib
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from .._base import check_shape
from .._errors import PatternError


def index_dtype(nnz: int, shape) -> np.dtype:
    """int32 when nnz and both dimensions fit in it (scipy's choice), else int64."""
    big = max(int(nnz), int(shape[0]) + 1, int(shape[1]) + 1)
    return np.dtype(np.int32) if big < np.iinfo(np.int32).max else np.dtype(np.int64)


class Pattern:
    """The structure of an m×n CSR matrix: where its nnz stored entries are.

    Row i stores the columns ``indices[indptr[i]:indptr[i + 1]]``. Invariants, checked once at
    construction (O(nnz)) with the offending values in the message: ``indptr`` starts at 0, is
    non-decreasing and ends at nnz; column indices lie in [0, n) and are strictly increasing
    within each row (canonical CSR: sorted, no duplicates).

    Parameters
    ----------
    indptr : array_like of int, shape (m + 1,)
    indices : array_like of int, shape (nnz,)
    shape : tuple of two ints
        (m, n).

    Raises
    ------
    PatternError
        If the arrays break an invariant; use :meth:`from_coo` for unsorted or duplicated
        positions, it canonicalises.
    ShapeError
        If ``shape`` is not two non-negative integers.

    Notes
    -----
    The index arrays are copied into host (numpy) arrays of ``index_dtype`` — int32 while the
    sizes fit (as scipy does: products then run on them without conversion, and they take half
    the memory), int64 beyond — and made read-only, whatever the backend of the values that will
    live on the pattern; a pattern can never change once made
    (setting an attribute raises AttributeError). Equality and hashing use a blake2b
    fingerprint of the shape and index bytes, computed once (O(nnz)), so a pattern can key a
    dict, serve as static data for ``jax.jit``, and be compared in O(1) after the first time.
    Patterns pickle.

    Examples
    --------
    >>> P = Pattern([0, 1, 3], [1, 0, 1], (2, 2))      # (0, 1), (1, 0), (1, 1)
    >>> P.nnz, P.rows.tolist()
    (3, [0, 1, 1])
    >>> P == Pattern.from_coo([1, 0, 1], [1, 1, 0], (2, 2))
    True
    """

    __slots__ = ("indptr", "indices", "shape", "__dict__")

    def __init__(self, indptr, indices, shape):
        shape = check_shape(shape)
        indices = np.asarray(indices).reshape(-1)
        idx = index_dtype(indices.shape[0], shape)
        indptr = np.array(indptr, dtype=np.int64, copy=True).reshape(-1)  # checked, then narrowed
        indices = np.array(indices, dtype=np.int64, copy=True)
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
            rows = np.repeat(np.arange(m, dtype=idx), np.diff(indptr))
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
        indptr, indices = indptr.astype(idx, copy=False), indices.astype(idx, copy=False)
        indptr.setflags(write=False)
        indices.setflags(write=False)
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "shape", shape)

    def __setattr__(self, name, value):
        raise AttributeError("Pattern is immutable")

    # ----- constructors -------------------------------------------------------------------------
    @classmethod
    def _trusted(cls, indptr, indices, shape) -> "Pattern":
        """A pattern from index arrays its caller has just computed, canonical, and hands over.

        For linops code only (a transposition, an assembly) that built canonical CSR itself: no
        validation pass and no copy. The arrays are kept — narrowed to :func:`index_dtype`
        (which copies only if their dtype differs) and made read-only in place — so the
        caller must not hold them, nor arrays they view, after the call; a scipy result it
        drops is the usual source. Cost O(1) for arrays already of the index dtype, where the
        constructor pays O(nnz) for its checks and copies: an assembled pattern can take
        hundreds of MB. Anything from a user goes through ``Pattern(...)``, which checks.

        Examples
        --------
        >>> indptr, indices = np.array([0, 1, 2], dtype=np.int32), np.array([1, 0], dtype=np.int32)
        >>> P = Pattern._trusted(indptr, indices, (2, 2))
        >>> P.indices is indices, indices.flags.writeable
        (True, False)
        """
        p = object.__new__(cls)
        idx = index_dtype(len(indices), shape)
        for name, a in (("indptr", indptr), ("indices", indices)):
            a = np.ascontiguousarray(a).astype(idx, copy=False)
            a.setflags(write=False)
            object.__setattr__(p, name, a)
        object.__setattr__(p, "shape", (int(shape[0]), int(shape[1])))
        return p

    @classmethod
    def from_coo(cls, rows, cols, shape) -> "Pattern":
        """The canonical pattern of the positions (rows[k], cols[k]), in any order.

        Repeated positions are merged; the result is sorted by row, then column. Cost:
        O(len·log len) (a sort of the linear keys).

        Parameters
        ----------
        rows, cols : array_like of int, same shape
        shape : tuple of two ints

        Returns
        -------
        Pattern

        Raises
        ------
        PatternError
            If rows and cols differ in shape, or an index is out of range (the message gives
            the range and the offending min/max).

        Examples
        --------
        >>> P = Pattern.from_coo([1, 0, 1], [0, 2, 0], (2, 3))
        >>> P.nnz, P.indptr.tolist(), P.indices.tolist()
        (2, [0, 1, 2], [2, 0])
        """
        p, _ = cls.from_coo_with_map(rows, cols, shape)
        return p

    @classmethod
    def from_coo_with_map(cls, rows, cols, shape) -> tuple["Pattern", np.ndarray]:
        """:meth:`from_coo`, plus the slot of each input position in the pattern.

        ``pos[k]`` is the index into the pattern's values of (rows[k], cols[k]); repeated
        positions share a slot. This is how COO data with duplicates becomes values:
        ``values = bincount(pos, data)`` (an assembly), a linear map that autodiff can follow.

        Returns
        -------
        pattern : Pattern
        pos : ndarray of int64, shape (len(rows),)

        Raises
        ------
        PatternError
            As :meth:`from_coo`.

        Examples
        --------
        >>> P, pos = Pattern.from_coo_with_map([1, 0, 1], [0, 1, 0], (2, 2))
        >>> P.indices.tolist(), pos.tolist()
        ([1, 0], [1, 0, 1])
        """
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
        """The pattern of a scipy sparse matrix or array (any format), canonicalised.

        Duplicates merge; explicitly stored zeros stay (they are structure). S is not modified.

        Examples
        --------
        >>> import scipy.sparse as sp
        >>> Pattern.from_scipy(sp.eye(3)).indices.tolist()
        [0, 1, 2]
        """
        S = S.tocsr()
        if not S.has_canonical_format:
            S = S.copy()
            S.sum_duplicates()
        return cls(S.indptr, S.indices, S.shape)

    @classmethod
    def diagonal(cls, n: int) -> "Pattern":
        """The n×n pattern of the main diagonal (nnz = n).

        Examples
        --------
        >>> Pattern.diagonal(3)
        Pattern(shape=(3, 3), nnz=3, fingerprint=68052ec5)
        """
        return cls(np.arange(n + 1), np.arange(n), (n, n))

    # ----- derived ------------------------------------------------------------------------------
    @property
    def nnz(self) -> int:
        """The number of stored positions (explicit zeros of the source count)."""
        return int(self.indices.shape[0])

    @cached_property
    def rows(self) -> np.ndarray:
        """Row index of every stored entry (nnz,), read-only: the COO rows of the pattern.

        Computed at construction (the canonical check needs it) and kept."""
        r = np.repeat(np.arange(self.shape[0], dtype=self.indices.dtype), np.diff(self.indptr))
        r.setflags(write=False)
        return r

    @cached_property
    def keys(self) -> np.ndarray:
        """Sorted linear keys row·n + col of the stored entries (nnz,), read-only.

        Canonical CSR order is increasing key order, which is what makes :meth:`locate` a
        binary search. Computed on first use and kept."""
        k = self.rows.astype(np.int64) * self.shape[1] + self.indices  # int64: no overflow
        k.setflags(write=False)
        return k

    @cached_property
    def fingerprint(self) -> str:
        """A 32-hex-digit blake2b digest of shape, indptr and indices: equal patterns, equal
        fingerprints. Computed once, O(nnz); ``==`` and ``hash`` use it."""
        h = hashlib.blake2b(digest_size=16)
        h.update(np.asarray(self.shape, dtype=np.int64).tobytes())
        h.update(self.indptr.tobytes())
        h.update(self.indices.tobytes())
        return h.hexdigest()

    @cached_property
    def _transpose(self) -> tuple["Pattern", np.ndarray]:
        # a stable sort by (column, row) lists the entries in the transpose's CSR order; the
        # sort order itself is the gather from our values to the transpose's
        # (scipy's CSR -> CSC conversion is that stable counting sort, O(nnz + n) in C; its
        # data, the entry numbers, come out as the gather)
        import scipy.sparse as sp

        m, n = self.shape
        numbers = np.arange(self.nnz, dtype=self.indices.dtype)
        C = sp.csr_matrix((numbers, self.indices, self.indptr), shape=self.shape).tocsc()
        perm = np.asarray(C.data, dtype=self.indices.dtype)
        perm.setflags(write=False)
        return Pattern._trusted(C.indptr, C.indices, (n, m)), perm

    def on(self, be, name: str):
        """Index array ``name`` ('indptr', 'indices', 'rows' or 'perm_T') for backend ``be``.

        numpy and jax get the host array (jax takes numpy indices as constants); a backend whose
        indices live on a device (cupy) gets a copy made once per pattern and kept, so repeated
        products move no indices.

        Parameters
        ----------
        be : Backend
            An entry of the backend table (``linops.internals.backend_of(x)``).
        name : {'indptr', 'indices', 'rows', 'perm_T'}
            'perm_T' is the gather of :meth:`transpose`.

        Examples
        --------
        >>> import numpy as np
        >>> from linops.internals import backend_of
        >>> Pattern.diagonal(2).on(backend_of(np.ones(1)), "rows").tolist()
        [0, 1]
        """
        host = self.transpose()[1] if name == "perm_T" else getattr(self, name)
        if not be.device_indices:
            return host
        cache = self.__dict__.setdefault("_device", {})
        if (be.name, name) not in cache:
            cache[(be.name, name)] = be.index(host)
        return cache[(be.name, name)]

    def transpose(self) -> tuple["Pattern", np.ndarray]:
        """(Pᵀ, perm): the transposed pattern and the gather taking values to its order.

        If ``values`` live on this pattern, ``values[perm]`` are the values of the transpose
        on Pᵀ (conjugate them for the adjoint). Computed once per pattern, O(nnz log nnz), and
        kept: every later transpose or adjoint is a gather.

        Returns
        -------
        PT : Pattern of shape (n, m)
        perm : ndarray of int64, shape (nnz,), read-only

        Examples
        --------
        >>> P = Pattern.from_coo([0, 0, 1], [0, 2, 1], (2, 3))
        >>> PT, perm = P.transpose()
        >>> PT.shape, PT.indices.tolist(), perm.tolist()
        ((3, 2), [0, 1, 0], [0, 2, 1])
        """
        return self._transpose

    def locate(self, rows, cols) -> tuple[np.ndarray, np.ndarray]:
        """(slot, found): the pattern slot of each (rows[k], cols[k]) and whether it is stored.

        A binary search in :attr:`keys`, O(len·log nnz). Where ``found`` is False, ``slot`` is
        clipped to [0, nnz - 1], so a gather with it stays in bounds (for nnz > 0) and its
        result must be masked out.

        Parameters
        ----------
        rows, cols : array_like of int, same shape
            Host arrays; not range-checked (``sample`` checks).

        Returns
        -------
        slot : ndarray of int64
        found : ndarray of bool

        Examples
        --------
        >>> P = Pattern.from_coo([0, 0, 1], [0, 2, 1], (2, 3))
        >>> slot, found = P.locate([0, 1, 1], [2, 1, 2])
        >>> slot.tolist(), found.tolist()
        ([1, 2, 2], [True, True, False])
        """
        key = np.asarray(rows, dtype=np.int64) * self.shape[1] + np.asarray(cols, dtype=np.int64)
        slot = np.searchsorted(self.keys, key)
        slot = np.minimum(slot, max(self.nnz - 1, 0))
        found = (self.keys[slot] == key) if self.nnz else np.zeros(key.shape, dtype=bool)
        return slot, found

    def union(self, *others: "Pattern") -> "Pattern":
        """The pattern of every position stored in this or any of ``others``.

        Cost O(N log N) for N the total nnz. Find where each operand's entries went with
        ``union.locate(P.rows, P.indices)``.

        Raises
        ------
        PatternError
            If the shapes differ.

        Examples
        --------
        >>> P = Pattern.diagonal(2).union(Pattern.from_coo([0], [1], (2, 2)))
        >>> P.nnz, P.indices.tolist()
        (3, [0, 1, 1])
        """
        for o in others:
            if o.shape != self.shape:
                raise PatternError(f"union of patterns with shapes {self.shape} and {o.shape}")
        rows = np.concatenate([self.rows] + [o.rows for o in others])
        cols = np.concatenate([self.indices] + [o.indices for o in others])
        return Pattern.from_coo(rows, cols, self.shape)

    def to_scipy(self, values=None):
        """A scipy ``csr_array`` on this pattern, with ``values`` (default: ones, float64).

        The index arrays are copied, so the result may be edited freely.

        Examples
        --------
        >>> Pattern.from_coo([0, 1], [1, 1], (2, 2)).to_scipy().toarray()
        array([[0., 1.],
               [0., 1.]])
        """
        data = np.ones(self.nnz) if values is None else values
        return sp.csr_array((data, self.indices.copy(), self.indptr.copy()), shape=self.shape)

    # ----- identity -----------------------------------------------------------------------------
    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __eq__(self, other) -> bool:
        # shape and nnz first: unequal patterns are then usually told apart without hashing
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
