"""Assembly of a family K(θ) = K₀ + Σᵢ θᵢ Kᵢ from explicit terms, element blocks or COO
triplets: its union pattern, Mᴴ (parameters × slots: K(θ)'s values are one SpMV) and Bᴴ (the
lifted right-hand side's θ-dependent part), as :class:`Parts`, the stored form that
``AffineSparse`` keeps as it is.

Element blocks get K's pattern from the boolean incidence product E Eᵀ and each element
entry's slot from a search within its row, in chunks through buffers allocated once; slots
ascend with (row, column), so Mᴴ comes out in CSR as written. General triplets are bucketed
by row and sorted within rows by scipy's compiled COO → CSR. Fixed dofs
(:class:`linops._family.dirichlet.Dirichlet`) are eliminated on the way.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np
import scipy.sparse as sp
from scipy.sparse import _sparsetools as st

from .._algebra import as_operator
from .assembly_input import (check_coo, check_coo_ranges, check_elements, check_range,
                              element_blocks)
from .._backend import seal
from .dirichlet import Dirichlet
from .._errors import ShapeError
from .._operators.pattern import Pattern, index_dtype
from .._operators.sparse import Sparse

#: samples per call of the slot search (bounds the temporaries of from_elements to a few MB)
_CHUNK = 1 << 18


class Parts(NamedTuple):
    """The stored form of an ``AffineSparse``, field for field: its constructor's arguments
    (their meaning is in its docstring)."""

    pattern: Pattern
    MH: Sparse
    offset: Any = None
    free: Any = None
    n_full: int | None = None
    lift: Any = None
    lift0: Any = None
    fixed_values: Any = None


# ----- the three routes -------------------------------------------------------------------------
def assemble_terms(terms: Sequence, offset=None) -> Parts:
    """The parts of ``AffineSparse.from_terms(terms, offset)`` (arguments, errors and cost as
    documented there).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> parts = assemble_terms([sp.eye(2), sp.csr_array([[0.0, 1.0], [0.0, 0.0]])])
    >>> parts.pattern.nnz, parts.MH.shape
    (3, (2, 3))
    """
    ops = [_as_sparse(K, f"terms[{i}]") for i, K in enumerate(terms)]
    if not ops:
        raise ValueError("from_terms needs at least one term")
    shape = ops[0].shape
    for i, K in enumerate(ops):
        if K.shape != shape:
            raise ShapeError(f"all terms must share one shape: terms[0].shape={shape} but "
                             f"terms[{i}].shape={K.shape}")
    pats = [K.pattern for K in ops]
    pattern = pats[0].union(*pats[1:]) if len(pats) > 1 else pats[0]
    slots, params, coefs = [], [], []
    for i, K in enumerate(ops):
        s, _ = pattern.locate(K.pattern.rows, K.pattern.indices)
        slots.append(s)
        params.append(np.full(s.shape, i))
        coefs.append(np.asarray(K.values))
    dtype = np.result_type(*[c.dtype for c in coefs])
    M = sp.csr_array((np.concatenate(coefs).astype(dtype),
                      (np.concatenate(slots), np.concatenate(params))),
                     shape=(pattern.nnz, len(ops)))
    off = None
    if offset is not None:
        off = _as_sparse(offset, "offset")
        if off.shape != shape:
            raise ShapeError(f"offset.shape={off.shape} but the family's shape={shape}")
    return _stored(pattern, _adjoint_of_scipy(M), None if off is None else (off, None))


def assemble_elements(Ke, dofs, n: int, fixed=None, offset=None, fixed_values=None) -> Parts:
    """The parts of ``AffineSparse.from_elements(Ke, dofs, n, fixed, offset,
    fixed_values=...)`` (arguments, errors and cost as documented there).

    Examples
    --------
    >>> import numpy as np
    >>> parts = assemble_elements(np.array([[1.0, -1.0], [-1.0, 1.0]]),
    ...                           np.array([[0, 1], [1, 2]]), 3, fixed=[0])
    >>> parts.pattern.nnz, parts.MH.shape, parts.free.tolist()
    (4, (2, 4), [1, 2])
    """
    dofs, Ke = check_elements(Ke, dofs, n)
    bc = Dirichlet(n, fixed, fixed_values)
    pattern, MH, lift = _element_maps(Ke, dofs, bc, dofs.shape[0])
    return _stored(pattern, MH, _offset(offset, bc), bc, lift)


def assemble_coo(rows, cols=None, values=None, param=None, *, shape=None,
                 n_params: int | None = None, offset=None, fixed=None,
                 fixed_values=None) -> Parts:
    """The parts of ``AffineSparse.from_coo(...)``, same arguments (errors and cost as
    documented there): triplets in element blocks take the element route, others the sort.

    Examples
    --------
    >>> import numpy as np
    >>> parts = assemble_coo([0, 0, 1], [0, 1, 1], [1.0, 2.0, 3.0], [0, 1, 1], shape=2)
    >>> parts.pattern.indices.tolist(), parts.MH.shape
    ([0, 1, 1], (2, 3))
    """
    rows, cols, values, param, n = check_coo(rows, cols, values, param, shape)
    bc = Dirichlet(n, fixed, fixed_values)
    blocks = element_blocks(rows, cols, values, param, n_params)
    if blocks is not None:          # the ranges follow from the blocks' dofs and count
        Ke, dofs = blocks
        P = dofs.shape[0] if n_params is None else int(n_params)
        check_range("rows and cols", dofs, n, f"shape={(n, n)}")
        pattern, MH, lift = _element_maps(Ke, dofs, bc, P)
    else:
        P = check_coo_ranges(rows, cols, param, n, n_params)
        pattern, MH, lift = _coo_maps(rows, cols, values, param, bc, P)
    return _stored(pattern, MH, _offset(offset, bc), bc, lift)


def _stored(pattern: Pattern, MH: Sparse, offset, bc=None, lift=None) -> Parts:
    """The family's parts: the offset's pattern joins K's (Mᴴ's columns move to their slots
    in the union, an order-preserving map: no sort)."""
    free = n_full = g = lift0 = None
    if bc is not None:
        free, n_full, g = bc.free, bc.n, bc.g
    off_vals = None
    if offset is not None:
        off, lift0 = offset
        if off.pattern != pattern:
            union = pattern.union(off.pattern)
            slot, _ = union.locate(pattern.rows, pattern.indices)
            MH = Sparse(MH.values, Pattern._trusted(MH.pattern.indptr,
                                                    slot[MH.pattern.indices],
                                                    (MH.shape[0], union.nnz)))
            pattern = union
        off_vals = np.zeros(pattern.nnz, dtype=np.result_type(MH.dtype, off.dtype))
        s_off, _ = pattern.locate(off.pattern.rows, off.pattern.indices)
        off_vals[s_off] = np.asarray(off.values)
        off_vals = seal(off_vals)
    return Parts(pattern, MH, off_vals, free, n_full, lift, lift0, g)


def _offset(offset, bc: Dirichlet):
    """(K₀ on the free dofs as a Sparse, b₀ = K₀,fd g or None), or None without an offset."""
    return None if offset is None else bc.eliminate_offset(_as_sparse(offset, "offset"))


# ----- element blocks ---------------------------------------------------------------------------
def _element_maps(Ke, dofs, bc: Dirichlet, n_params: int):
    """(pattern, Mᴴ, Bᴴ or None) of an element family; elements that repeat a dof go through
    the general COO route."""
    ne, k = dofs.shape
    order, ds = _sorted_dofs(dofs, bc.newidx)            # free numbers, -1 for fixed dofs
    if order is None:                                    # an element repeats a dof
        return _coo_maps(*_element_triplets(Ke, dofs), bc, n_params)
    pattern = _element_pattern(ds, bc.nf)
    MH = _element_map(Ke, order, ds, pattern, n_params)
    lift = _element_lift(Ke, dofs, bc, n_params) if bc.g is not None else None
    return pattern, MH, lift


def _sorted_dofs(dofs, newidx):
    """(order, ds): each element's dofs in ascending order — one (k,) permutation when all
    elements share it (structured meshes: no per-element sort), else (ne, k) — and their
    free numbers ``newidx[dofs]`` in that order; (None, None) if an element repeats a dof.
    The common order is checked column pair by column pair (no sorted copy of dofs)."""
    ne, k = dofs.shape
    p0 = np.argsort(dofs[0], kind="stable") if ne else np.arange(k)
    if k < 2 or all(bool(np.all(dofs[:, p0[a + 1]] > dofs[:, p0[a]])) for a in range(k - 1)):
        return p0, np.take(newidx, dofs)[:, p0]
    order = np.argsort(dofs, axis=1, kind="stable")
    sd = np.take_along_axis(dofs, order, axis=1)
    if bool(np.any(sd[:, 1:] == sd[:, :-1])):
        return None, None
    return order, newidx[sd]


def _element_pattern(ds, nf: int) -> Pattern:
    """K's pattern = pattern(E Eᵀ), E the free-dof × element incidence, as a boolean sparse
    product (logical or: a dof shared by any number of elements cannot wrap to zero)."""
    ne = ds.shape[0]
    live = ds >= 0
    nlive = live.sum(axis=1)
    it = index_dtype(int(nlive.sum()), (ne, nf))
    indptr = np.zeros(ne + 1, dtype=it)
    np.cumsum(nlive, out=indptr[1:])
    Et = sp.csr_array((np.ones(int(indptr[-1]), dtype=bool), ds[live].astype(it, copy=False),
                       indptr), shape=(ne, nf))
    KP = Et.T.tocsr() @ Et
    del Et
    KP.sort_indices()               # in place: a transposed copy would be one more fresh K
    return Pattern._trusted(KP.indptr, KP.indices, (nf, nf))


def _element_map(Ke, order, ds, pattern: Pattern, n_params: int) -> Sparse:
    """Mᴴ (parameters × slots) in CSR: element e's live pairs, in sorted-dof order, are its
    row; their slots ascend with (row, column), so the row is canonical as written.

    Chunks of ``_CHUNK`` samples through buffers allocated once (a fresh large array per
    chunk would pay its page faults every time); the outputs are written in place."""
    ne, k = ds.shape
    kk = k * k
    live = ds >= 0
    nlive = live.sum(axis=1).astype(np.int64)
    N = int((nlive * nlive).sum())
    mit = index_dtype(N, (n_params, pattern.nnz))
    mh_indptr = np.full(n_params + 1, N, dtype=mit)
    mh_indptr[0] = 0
    np.cumsum(nlive * nlive, out=mh_indptr[1:ne + 1])
    slots = np.empty(N, dtype=mit)
    coef = np.empty(N, dtype=Ke.dtype)
    pit = pattern.indices.dtype
    search = _slot_search(pattern)
    step = max(1, _CHUNK // max(kk, 1))              # k = 0: elements without dofs
    nb = min(step, ne)
    found = np.empty(nb * kk, dtype=pit)
    mask = np.empty(nb * kk, dtype=bool)
    kbuf = np.empty((nb, kk), dtype=Ke.dtype)
    flat = (order[..., :, None] * k + order[..., None, :]).reshape(order.shape[:-1] + (kk,))
    if order.ndim == 1 and Ke.ndim == 2:
        kbuf[...] = Ke.reshape(-1)[flat]                # one element matrix, one dof order
    part_none = np.zeros(0, dtype=np.int64)
    for e0 in range(0, ne, step):
        e1 = min(ne, e0 + step)
        nc = e1 - e0
        o0, o1 = int(mh_indptr[e0]), int(mh_indptr[e1])
        d = ds[e0:e1].astype(pit, copy=False)
        r, c, f = np.repeat(d, k, axis=1).reshape(-1), np.tile(d, (1, k)).reshape(-1), found[:nc * kk]
        search(r, c, f)                                 # a fixed dof (-1) finds some slot: masked
        kc = kbuf[:nc]
        if order.ndim == 2 and Ke.ndim == 2:
            np.take(Ke.reshape(-1), flat[e0:e1], out=kc)
        elif order.ndim == 1 and Ke.ndim == 3:
            np.take(Ke[e0:e1].reshape(nc, kk), flat, axis=1, out=kc)
        elif Ke.ndim == 3:
            kc[...] = np.take_along_axis(Ke[e0:e1].reshape(nc, kk), flat[e0:e1], axis=1)
        kf = kc.reshape(-1)
        part = np.flatnonzero(nlive[e0:e1] < k) if o1 - o0 < nc * kk else part_none
        if part.size * 8 > nc:                          # many elements touch fixed dofs
            m = mask[:nc * kk]
            np.minimum(r, c, out=r)                     # r is spent
            np.greater_equal(r, 0, out=m)
            np.compress(m, f, out=slots[o0:o1])
            np.compress(m, kf, out=coef[o0:o1])
            continue
        # runs of full elements are copied whole; the few partial ones keep their live pairs
        lo_ = 0
        for hi in (*part.tolist(), nc):
            if hi > lo_:
                a, b = int(mh_indptr[e0 + lo_]), int(mh_indptr[e0 + hi])
                slots[a:b] = f[lo_ * kk:hi * kk]
                coef[a:b] = kf[lo_ * kk:hi * kk]
            lo_ = hi + 1
        if part.size:
            ix = (part[:, None] * kk + np.arange(kk)).reshape(-1)
            lm = np.minimum(r[ix], c[ix]) >= 0
            counts = (nlive[e0 + part] ** 2).astype(np.int64)
            start = mh_indptr[e0 + part].astype(np.int64) - (np.cumsum(counts) - counts)
            dest = np.arange(int(counts.sum())) + np.repeat(start, counts)
            slots[dest] = f[ix][lm]
            coef[dest] = kf[ix][lm]
    if N and int(slots.min()) < 0:  # pragma: no cover - an internal invariant
        raise RuntimeError("from_elements: an element entry has no slot in the pattern")
    if Ke.dtype.kind == "c":
        np.conjugate(coef, out=coef)
    return Sparse(seal(coef), Pattern._trusted(mh_indptr, slots, (n_params, pattern.nnz)))


def _slot_search(pattern: Pattern):
    """out[k] = slot of (rows[k], cols[k]) in the canonical pattern (all present): scipy's
    compiled per-row search (csr_sample_offsets), or a global searchsorted without it."""
    indptr, indices = pattern.indptr, pattern.indices
    n_row, n_col = pattern.shape
    try:
        from scipy.sparse._sparsetools import csr_sample_offsets  # private scipy API: guarded
    except ImportError:  # pragma: no cover - scipy private API moved
        keys = pattern.rows.astype(np.int64) * n_col + indices

        def search(rows, cols, out):
            out[...] = np.searchsorted(keys, rows.astype(np.int64) * n_col + cols)
        return search

    def search(rows, cols, out):
        csr_sample_offsets(n_row, n_col, indptr, indices, rows.size, rows, cols, out)
    return search


def _element_lift(Ke, dofs, bc: Dirichlet, n_params: int) -> Sparse:
    """Bᴴ for the prescribed values: column e of B is element e's free × fixed block times g,
    from the elements that touch both kinds of dof only."""
    fx = ~bc.is_free[dofs]
    touch = np.flatnonzero(fx.any(axis=1) & ~fx.all(axis=1))
    d = dofs[touch]
    Kt = Ke[touch] if Ke.ndim == 3 else Ke
    gl = np.where(fx[touch], bc.g[d], 0)
    contrib = np.einsum("eab,eb->ea", np.broadcast_to(Kt, (touch.size,) + Ke.shape[-2:]), gl)
    r = bc.newidx[d]
    keep = r >= 0
    e = np.broadcast_to(touch[:, None], d.shape)
    B = sp.csr_array((contrib[keep], (r[keep], e[keep])), shape=(bc.nf, n_params))
    return _adjoint_of_scipy(B)


def _element_triplets(Ke, dofs):
    """All ne·k² (row, col, value, element) triplets of an element family."""
    ne, k = dofs.shape
    r = np.broadcast_to(dofs[:, :, None], (ne, k, k)).reshape(-1)
    c = np.broadcast_to(dofs[:, None, :], (ne, k, k)).reshape(-1)
    v = np.broadcast_to(Ke, (ne, k, k)).reshape(-1)
    p = np.repeat(np.arange(ne), k * k)
    return r, c, v, p


# ----- COO triplets -----------------------------------------------------------------------------
def _coo_maps(rows, cols, values, param, bc: Dirichlet, P: int):
    """(pattern, Mᴴ, Bᴴ or None) of general triplets: eliminate, then sort within rows."""
    lift = None
    if bc.nf < bc.n:
        fr, fc = bc.is_free[rows], bc.is_free[cols]
        if bc.g is not None:
            s = np.flatnonzero(fr & ~fc)
            B = sp.csr_array((values[s] * bc.g[cols[s]], (bc.newidx[rows[s]], param[s])),
                             shape=(bc.nf, P))
            lift = _adjoint_of_scipy(B)
        keep = fr & fc
        del fr, fc
        rows, cols = bc.newidx[rows[keep]], bc.newidx[cols[keep]]
        values, param = values[keep], param[keep]
    pattern, MH = _coo_core(rows, cols, values, param, bc.nf, P)
    return pattern, MH, lift


def _coo_core(rows, cols, values, param, n: int, P: int):
    """(pattern, Mᴴ) of the triplets (rows, cols, values, param) on an n×n pattern.

    scipy's compiled COO → CSR buckets the triplets by row, carrying their positions; a
    per-row sort orders the columns; equal neighbours share a slot (the pattern). Mᴴ is then
    one more COO → CSR, by parameter: the triplets arrive in slot order, so each parameter's
    row is already sorted and repeated (parameter, slot) pairs are summed by scipy."""
    N = rows.size
    it = index_dtype(max(N, n), (n, n))
    indptr = np.empty(n + 1, dtype=it)
    scol = np.empty(N, dtype=it)
    sid = np.empty(N, dtype=it)
    st.coo_tocsr(n, n, N, rows.astype(it, copy=False), cols.astype(it, copy=False),
                 np.arange(N, dtype=it), indptr, scol, sid)
    st.csr_sort_indices(n, indptr, scol, sid)
    first = np.ones(N, dtype=bool)               # first triplet of a slot (row, col)
    if N:
        np.not_equal(scol[1:], scol[:-1], out=first[1:])
        first[indptr[:-1][indptr[:-1] < N]] = True
    slot = np.cumsum(first, dtype=np.int64)
    nnz = int(slot[-1]) if N else 0
    pattern = Pattern._trusted(np.concatenate(([0], slot))[indptr], scol[first], (n, n))
    del scol, first
    slot -= 1
    v = values[sid]
    if v.dtype.kind == "c":
        np.conjugate(v, out=v)
    MH = sp.csr_array((v, (param[sid], slot)), shape=(P, nnz))
    MH.sum_duplicates()
    return pattern, Sparse(seal(MH.data), Pattern._trusted(MH.indptr, MH.indices, (P, nnz)))


# ----- small helpers ----------------------------------------------------------------------------
def _adjoint_of_scipy(M) -> Sparse:
    """Mᴴ as a lo.Sparse from a scipy matrix (one counting-sort transposition)."""
    MH = M.conj().T if np.iscomplexobj(M.data) else M.T
    return Sparse.from_scipy(MH)


def _as_sparse(K, name: str) -> Sparse:
    """K as a lo.Sparse (scipy sparse accepted); TypeError naming ``name`` for anything else."""
    op = as_operator(K, f"AffineSparse {name}")
    if not isinstance(op, Sparse):
        raise TypeError(f"AffineSparse {name} must be sparse (scipy sparse or lo.Sparse), got "
                        f"{type(op).__name__}")
    return op
