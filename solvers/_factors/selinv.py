"""Selected inversion: the entries of A⁻¹ on the filled pattern of a cache's factorization.

For B = Pr·A·Pc = L·U (or L·Lᴴ), the Takahashi recurrences compute Z = B⁻¹ on the pattern of
the factor, (L + U)ᵀ's, from the factor alone: no solve, no dense column. Every entry of A⁻¹ at
a stored position of A (what ∂ log det A / ∂A = A⁻ᴴ needs on A's pattern, what a parameter
family needs for tr(A⁻¹Kᵢ), the diagonal of A⁻¹) lies in that pattern. Cost: about twice the
flops of the numeric factorization; memory: one copy of the factor's values
(see :mod:`solvers._factors.selinv_kernels`).

Engines (reached through the factor attributes the solvers keep stable):

- CHOLMOD (``factor.factor``): its supernodal L is read in place (no ``L()`` copy, which
  would copy the factor three times over), with its permutation ``P``; a simplicial LDLᴴ
  factor (CHOLMOD's choice for small or very sparse matrices) becomes L·√D.
- SuperLU (``factor.lu``, ``order``/``reordered``): ``lu.L`` and ``lu.U`` with both
  permutations. scipy drops entries that cancelled to zero from these copies, so the pattern
  is rebuilt symbolically (the Cholesky structure of B + Bᵀ, which holds every LU of B
  without pivoting) plus the positions of A⁻¹'s diagonal and of A⁻¹ on A's pattern and its
  transpose (under row exchanges these are not B's positions; A's explicit zeros are in no
  factor), and the recurrences close on it. Memory: scipy builds both CSC copies at
  the first access of either and keeps them on the SuperLU object for its lifetime (measured:
  489 MB factor + 494 MB copies at n = 250 500, Q4 Poisson), so a SuperLU cache that ran a
  selected inversion holds its factor about twice until it is updated or dropped; the peak
  of the recurrences is 3.06× the factor's memory (the copies, the supernodal values XL/XU
  and the symbolic structure), CHOLMOD's 1.75×. Prefer ``sv.Cholesky()`` for Hermitian
  positive definite matrices.
- dense LU / Cholesky (``lu_piv``, ``L``): the inverse itself (dense is the pattern).
"""

from __future__ import annotations

import ctypes

import numpy as np

from linops.internals import to_numpy

from . import kernels
from .._errors import BackendNotSupported
from .._results import SelectedInverse


# ----- engines -----------------------------------------------------------------------------------
def _layout_arrays(sup, rp, rows, xp):
    n = int(sup[-1])
    return (sup, rp, rows, xp, kernels().col_to_super(n, sup))


def _finish(engine, shape, dtype, layout, XL, XU, hermitian, irp, icp):
    sup, rp, rows, xp, _ = layout
    # thousands of small BLAS products: OpenBLAS's thread start-up per product cost 7x the work
    # on a loaded 2-core machine (n = 250 500: 4.7 s -> 0.4 s single-threaded)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        bad = kernels().selinv_supernodal(sup, rp, rows, xp, XL, XU, hermitian)
    if bad:
        raise RuntimeError(f"selected inversion: supernode {bad - 1} needs an entry outside the "
                           f"factor's pattern (the pattern is not closed); please report this")
    return SelectedInverse(engine, shape, dtype, layout, XL, XU, hermitian, irp, icp)


# CHOLMOD's cholmod_factor (SuiteSparse 5.x, 64-bit): the fields read here, in order
class _CholmodFactor(ctypes.Structure):
    _fields_ = [(name, t) for name, t in [
        ("n", ctypes.c_size_t), ("minor", ctypes.c_size_t), ("Perm", ctypes.c_void_p),
        ("ColCount", ctypes.c_void_p), ("IPerm", ctypes.c_void_p), ("nzmax", ctypes.c_size_t),
        ("p", ctypes.c_void_p), ("i", ctypes.c_void_p), ("x", ctypes.c_void_p),
        ("z", ctypes.c_void_p), ("nz", ctypes.c_void_p), ("next", ctypes.c_void_p),
        ("prev", ctypes.c_void_p), ("nsuper", ctypes.c_size_t), ("ssize", ctypes.c_size_t),
        ("xsize", ctypes.c_size_t), ("maxcsize", ctypes.c_size_t), ("maxesize", ctypes.c_size_t),
        ("super_", ctypes.c_void_p), ("pi", ctypes.c_void_p), ("px", ctypes.c_void_p),
        ("s", ctypes.c_void_p), ("ordering", ctypes.c_int), ("is_ll", ctypes.c_int),
        ("is_super", ctypes.c_int), ("is_monotonic", ctypes.c_int), ("itype", ctypes.c_int),
        ("xtype", ctypes.c_int), ("dtype", ctypes.c_int)]]


def _cholmod_struct(factor) -> _CholmodFactor:
    """The cholmod_factor behind a scikit-sparse Factor, found and verified, read-only.

    scikit-sparse keeps it in a C field after the object header and ``_common``; we take the
    pointer after the slot that holds ``_common`` and accept it only if its ``n`` and ``Perm``
    are those ``Factor.P()`` reports (a view onto ``Perm``): any other layout is refused."""
    P = factor.P()
    perm_ptr = P.__array_interface__["data"][0]
    base = id(factor)
    common = id(factor._common)
    for k in range(2, 8):
        if ctypes.c_void_p.from_address(base + 8 * k).value == common:
            ptr = ctypes.c_void_p.from_address(base + 8 * (k + 1)).value
            if ptr:
                st = _CholmodFactor.from_address(ptr)
                if st.n == P.size and st.Perm == perm_ptr and st.dtype == 0 and st.xtype in (1, 2):
                    return st
            break
    raise BackendNotSupported("selected inversion: this scikit-sparse build keeps its CHOLMOD "
                              "factor in a layout linops does not know; use sv.LU() (SuperLU)")


def _carray(ptr, count, dtype):
    if count == 0:
        return np.zeros(0, dtype)
    ct = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.int64): ctypes.c_int64,
          np.dtype(np.float64): ctypes.c_double}[np.dtype(dtype)]
    return np.ctypeslib.as_array((ct * count).from_address(ptr))


def cholmod(f, shape) -> SelectedInverse:
    st = _cholmod_struct(f.factor)
    n = int(st.n)
    itype = np.int64 if st.itype == 2 else np.int32
    cplx = st.xtype == 2
    P = np.asarray(f.factor.P(), dtype=np.int64)
    iP = np.empty(n, np.int64)
    iP[P] = np.arange(n)

    def values(count):  # a private copy: the factor's own values are never written
        raw = _carray(st.x, count * (2 if cplx else 1), np.float64)
        return raw.view(np.complex128).copy() if cplx else raw.copy()

    if st.is_super:
        ns = int(st.nsuper)
        sup = _carray(st.super_, ns + 1, itype).astype(np.int64)
        rp = _carray(st.pi, ns + 1, itype).astype(np.int64)
        xp = _carray(st.px, ns + 1, itype).astype(np.int64)
        rows = _carray(st.s, int(st.ssize), itype).astype(np.int64)
        XL = values(int(st.xsize))
        layout = _layout_arrays(sup, rp, rows[:rp[-1]], xp)
    else:  # simplicial LDLᴴ (or LLᴴ): columns as supernodes of width one, L·√D
        p = _carray(st.p, n + 1, itype).astype(np.int64)
        nz = _carray(st.nz, n, itype).astype(np.int64)
        idx = _carray(st.i, int(st.nzmax), itype)
        X = values(int(st.nzmax))
        take = np.concatenate([np.arange(p[j], p[j] + nz[j]) for j in range(n)]) if n else \
            np.zeros(0, np.int64)
        rp = np.zeros(n + 1, np.int64)
        np.cumsum(nz, out=rp[1:])
        rows = idx[take].astype(np.int64)
        XL = X[take]
        if not st.is_ll:
            d = np.real(XL[rp[:-1]])
            sd = np.sqrt(d)
            col = np.repeat(np.arange(n), nz)
            XL = XL * sd[col]
            XL[rp[:-1]] = sd
        _sort_columns(rp, rows, XL)
        layout = _layout_arrays(np.arange(n + 1, dtype=np.int64), rp, rows, rp.copy())
    XU = np.zeros(1, XL.dtype)
    dtype = np.complex128 if cplx else np.float64
    return _finish("CHOLMOD", shape, dtype, layout, XL, XU, True, iP, iP)


def _sort_columns(rp, rows, X):
    for j in range(rp.size - 1):
        a, b = rp[j], rp[j + 1]
        if b - a > 1 and np.any(np.diff(rows[a:b]) < 0):
            o = np.argsort(rows[a:b], kind="stable")
            rows[a:b] = rows[a:b][o]
            X[a:b] = X[a:b][o]


def superlu(f, shape) -> SelectedInverse:
    K = kernels()
    lu = f.lu
    n = shape[0]
    perm_r = np.asarray(lu.perm_r, dtype=np.int64)
    perm_c = np.asarray(lu.perm_c, dtype=np.int64)
    # Pr·M·Pc = L·U with (Pr M)[perm_r[i]] = M[i] and (M Pc)[:, perm_c[j]] = M[:, j]; M = A or
    # A[row_order][:, order] (row_order: symmetric mode only). B[k, j] = A[rp[k], cp[j]] with
    # rp = (row_order)[argsort(perm_r)], cp = (order)[argsort(perm_c)]
    rp_ = np.argsort(perm_r)
    cp_ = np.argsort(perm_c)
    if f.reordered:
        cp_ = np.asarray(f.order, dtype=np.int64)[cp_]
        if getattr(f, "row_order", None) is not None:
            rp_ = np.asarray(f.row_order, dtype=np.int64)[rp_]
    L = lu.L.tocsc()
    U = lu.U.tocsc()                 # both as scipy made them: no conversion, int32 indices
    # the symmetric closure: the Cholesky structure of pattern(L + U) + its transpose, in B's
    # order relabelled by a postorder of its elimination tree (an equivalent order: the factors
    # of Π B Πᵀ are Π L Πᵀ and Π U Πᵀ), so that supernodes are contiguous and can be relaxed
    ident = np.arange(n, dtype=np.int64)
    # B's row and column of A's row r / column c: A⁻¹[r, c] = B⁻¹[icp0[r], irp0[c]]. With row
    # exchanges the positions that hold A⁻¹ on A's pattern and its diagonal are not B's, so
    # they join the symbolic structure (as do A's explicit zeros, which no factor stores)
    irp0 = np.empty(n, np.int64)
    irp0[rp_] = ident
    icp0 = np.empty(n, np.int64)
    icp0[cp_] = ident
    Ap, Aj = f.pattern.indptr, f.pattern.indices
    Mp, Mi = K.upper_pattern(n, L.indptr, L.indices, U.indptr, U.indices, Ap, Aj, irp0, icp0,
                             ident)
    post = K.postorder(K.etree(n, Mp, Mi))
    del Mp, Mi
    ipost = np.empty(n, np.int64)
    ipost[post] = ident
    Mp, Mi = K.upper_pattern(n, L.indptr, L.indices, U.indptr, U.indices, Ap, Aj, irp0, icp0,
                             ipost)
    parent, Sp, Si = K.symbolic_cholesky(n, Mp, Mi)
    del Mp, Mi
    sup, rpt, rows, xp = K.supernodes(n, parent, Sp, Si)
    del Sp, Si, parent
    layout = _layout_arrays(sup, rpt, rows, xp)
    dtype = np.dtype(L.dtype)
    c2s = layout[4]
    # one factor at a time: its values go into the layout, then its scipy copy is freed
    XL = np.zeros(int(xp[-1]), dtype)
    miss = K.scatter(sup, rpt, rows, xp, c2s, L.indptr, L.indices, L.data, XL, False, ipost)
    del L
    XU = np.zeros(int(xp[-1]), dtype)
    miss += K.scatter(sup, rpt, rows, xp, c2s, U.indptr, U.indices, U.data, XU, True, ipost)
    del U
    if miss:
        raise RuntimeError(f"selected inversion: {miss} entries of SuperLU's factors fell "
                           f"outside the symbolic structure; please report this")
    # A⁻¹[r, c] = (B⁻¹)[icp0[r], irp0[c]] and B⁻¹ = Πᵀ Z' Π: fold the postorder in
    irp, icp = ipost[irp0], ipost[icp0]
    return _finish("SuperLU", shape, dtype, layout, XL, XU, False, irp, icp)


def dense(f, shape) -> SelectedInverse:
    """Dense factors: the inverse is the selected inverse (n×n, the size of the factor itself),
    from the factorization by triangular solves with the identity (LAPACK getrs/trtrs)."""
    n = shape[0]
    eye = f.be.xp.eye(n, dtype=f.dtype)
    Z = np.asarray(to_numpy(f.solve(eye, "N")))
    # one supernode holding every column: its block is the full n×n square, column-major
    layout = _layout_arrays(np.array([0, n], np.int64), np.array([0, n], np.int64),
                            np.arange(n, dtype=np.int64), np.array([0, n * n], np.int64))
    XL = np.ascontiguousarray(Z.T).reshape(-1)  # entry (r, c) at c·n + r
    ident = np.arange(n, dtype=np.int64)
    return SelectedInverse("dense", shape, Z.dtype, layout, XL, np.zeros(1, Z.dtype),
                           False, ident, ident)
