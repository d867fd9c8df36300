"""Compiled kernels of the selected inversion (numba): supernodal Takahashi recurrences.

Why our own kernel: no package on the index computes a selected inverse from a factorization
someone else made. ``selinv`` (PyPI, a wrapper of Lin Lin's Fortran SelInv) factorizes again
with its own LDLᵀ (a second factorization), is real symmetric and float64 only, and builds from
source with a Fortran toolchain; SelectedInversion.jl is Julia. The recurrences need loops over
supernodes with dense products inside, which numpy cannot express without a Python loop per
supernode (10⁵ of them at n = 250 000); numba compiles those loops and calls BLAS for the
products (``np.dot`` on contiguous blocks).

Layout (the supernodal layout of CHOLMOD, shared by every engine): supernode s owns the
columns ``sup[s]:sup[s+1]`` (ncol of them) and the sorted row list ``rows[rp[s]:rp[s+1]]``
(nrow rows, the first ncol are its own columns); its values are an nrow×ncol column-major block
at ``X[xp[s]:]``, entry (r, c) at ``xp[s] + c·nrow + r``. For a factor B = L·U (or L·Lᴴ) the
block of L holds L[rows, cols]; the block of U (unsymmetric case) holds U[cols, rows]ᵀ. The
selected inverse Z = B⁻¹ overwrites them in place: ``XL`` gets Z[rows, cols] (its top ncol×ncol
square the FULL diagonal block Z[cols, cols]) and ``XU`` gets Z[cols, rows]ᵀ below that square.

Recurrences for supernode s with below-structure C (Z_CC gathered from its ancestors):

    Z_Cs = −Z_CC L_Cs L_ss⁻¹
    Z_sC = −U_ss⁻¹ U_sC Z_CC                 (Hermitian: Z_sC = Z_Csᴴ, not computed)
    Z_ss = U_ss⁻¹ (L_ss⁻¹ − U_sC Z_Cs)       (Hermitian: L_ss⁻ᴴ (L_ss⁻¹ − L_Csᴴ Z_Cs))

Cost: the flops of the factorization (about twice them), memory one copy of the factor's values.
"""

from __future__ import annotations

import numba as nb
import numpy as np

_JIT = dict(cache=True, nogil=True)


@nb.njit(**_JIT)
def cycle_count(p):
    """Number of cycles of the permutation p (0-based), O(n)."""
    n = p.size
    seen = np.zeros(n, np.bool_)
    c = 0
    for i in range(n):
        if not seen[i]:
            c += 1
            j = i
            while not seen[j]:
                seen[j] = True
                j = p[j]
    return c


# ----- symbolic: the Cholesky structure of a symmetric pattern, in its given order -------------
@nb.njit(**_JIT)
def _add(a, b, cnt, Mi, fill, counting):
    if a != b:
        k = max(a, b)
        if counting:
            cnt[k + 1] += 1
        else:
            Mi[fill[k]] = min(a, b)
            fill[k] += 1


@nb.njit(**_JIT)
def _pairs(n, Lp, Li, Up, Uj, Ap, Aj, irow, icol, relabel, cnt, Mi, fill, counting):
    for j in range(n):
        for p in range(Lp[j], Lp[j + 1]):
            _add(relabel[j], relabel[Li[p]], cnt, Mi, fill, counting)
        for p in range(Up[j], Up[j + 1]):
            _add(relabel[j], relabel[Uj[p]], cnt, Mi, fill, counting)
    if Ap.size == 0:
        return
    for i in range(n):
        # A⁻¹[i, i] = Z[icol[i], irow[i]]; for a stored A[i, j]: A⁻¹[i, j] and A⁻¹[j, i]
        _add(relabel[icol[i]], relabel[irow[i]], cnt, Mi, fill, counting)
        for p in range(Ap[i], Ap[i + 1]):
            j = Aj[p]
            _add(relabel[icol[i]], relabel[irow[j]], cnt, Mi, fill, counting)
            _add(relabel[icol[j]], relabel[irow[i]], cnt, Mi, fill, counting)


@nb.njit(**_JIT)
def upper_pattern(n, Lp, Li, Up, Uj, Ap, Aj, irow, icol, relabel):
    """The strict upper triangle of pattern(L + U + E) + its transpose, as column lists (CSC,
    rows i < k in column k, duplicates allowed, int32), with the indices relabelled by
    ``relabel``. L and U in compressed form of either orientation (only the symmetric closure
    is built). E: the positions of Z = B⁻¹ that hold A⁻¹'s diagonal and A⁻¹ on A's pattern
    and its transpose, A⁻¹[r, c] = Z[icol[r], irow[c]] for A's CSR pattern (Ap, Aj) — under
    row pivoting they are not in pattern(L + U), and an explicit zero of A is in no factor
    (empty Ap: no E). O(nnz), no temporaries."""
    cnt = np.zeros(n + 1, np.int64)
    Mi = np.empty(0, np.int32)
    fill = cnt[:1]
    _pairs(n, Lp, Li, Up, Uj, Ap, Aj, irow, icol, relabel, cnt, Mi, fill, True)
    for k in range(n):
        cnt[k + 1] += cnt[k]
    Mi = np.empty(cnt[n], np.int32)
    fill = cnt[:-1].copy()
    _pairs(n, Lp, Li, Up, Uj, Ap, Aj, irow, icol, relabel, cnt, Mi, fill, False)
    return cnt, Mi


@nb.njit(**_JIT)
def etree(n, Mp, Mi):
    """Elimination tree of the symmetric pattern whose upper triangle is (Mp, Mi) (Liu's
    algorithm with path compression)."""
    parent = np.full(n, -1, np.int64)
    ancestor = np.full(n, -1, np.int64)
    for k in range(n):
        for p in range(Mp[k], Mp[k + 1]):
            i = Mi[p]
            while i != -1 and i < k:
                inext = ancestor[i]
                ancestor[i] = k
                if inext == -1:
                    parent[i] = k
                i = inext
    return parent


@nb.njit(**_JIT)
def postorder(parent):
    """post[k] = the k-th node of a depth-first postorder of the forest (children first)."""
    n = parent.size
    head = np.full(n, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    for j in range(n - 1, -1, -1):
        if parent[j] != -1:
            nxt[j] = head[parent[j]]
            head[parent[j]] = j
    post = np.empty(n, np.int64)
    stack = np.empty(n, np.int64)
    k = 0
    for root in range(n):
        if parent[root] != -1:
            continue
        top = 0
        stack[0] = root
        while top >= 0:
            p = stack[top]
            c = head[p]
            if c == -1:
                top -= 1
                post[k] = p
                k += 1
            else:
                head[p] = nxt[c]
                top += 1
                stack[top] = c
    return post


@nb.njit(**_JIT)
def symbolic_cholesky(n, Mp, Mi):
    """Elimination tree and column structures of the Cholesky factor of the symmetric pattern
    whose upper triangle is (Mp, Mi), in its own order. Returns (parent, Lp, Li): column j of L
    has the sorted rows ``Li[Lp[j]:Lp[j+1]]``, the first being j. O(nnz(L))."""
    parent = etree(n, Mp, Mi)
    # row k of L = the nodes on the etree paths from the entries M[i, k], i < k, up to k
    count = np.ones(n, np.int64)
    mark = np.full(n, -1, np.int64)
    for k in range(n):
        mark[k] = k
        for p in range(Mp[k], Mp[k + 1]):
            i = Mi[p]
            while i != -1 and i < k and mark[i] != k:
                count[i] += 1
                mark[i] = k
                i = parent[i]
    Lp = np.zeros(n + 1, np.int64)
    for j in range(n):
        Lp[j + 1] = Lp[j] + count[j]
    Li = np.empty(Lp[n], np.int32)
    fill = Lp[:-1].copy()
    for j in range(n):
        Li[fill[j]] = j
        fill[j] += 1
    mark[:] = -1
    for k in range(n):
        mark[k] = k
        for p in range(Mp[k], Mp[k + 1]):
            i = Mi[p]
            while i != -1 and i < k and mark[i] != k:
                Li[fill[i]] = k  # k grows: every column's rows come out sorted
                fill[i] += 1
                mark[i] = k
                i = parent[i]
    return parent, Lp, Li


@nb.njit(**_JIT)
def supernodes(n, parent, Lp, Li):
    """Supernodes of a column structure in postorder: fundamental ones (struct(j) = {j} ∪
    struct(j+1)), then relaxed as CHOLMOD does — a supernode is merged into the next one when
    that is its parent and the merged block stays small (width ≤ 4) or mostly filled (≤ 80 %
    zeros up to width 16, 10 % up to 48, 5 % beyond). Returns (sup, rp, rows, xp) in the layout
    above; merged blocks hold explicit zeros, which the recurrences fill with A⁻¹'s entries."""
    cnt = np.empty(n, np.int64)
    for j in range(n):
        cnt[j] = Lp[j + 1] - Lp[j]
    fund = [0]
    for j in range(n - 1):
        if not (parent[j] == j + 1 and cnt[j] == cnt[j + 1] + 1):
            fund.append(j + 1)
    fund.append(n)
    sup_l = [0]
    f = 0                      # the current group starts at column f, its first column's count
    nzg = 0                    # true entries of the group
    for s in range(len(fund) - 1):
        a, b = fund[s], fund[s + 1]
        true = 0
        for j in range(a, b):
            true += cnt[j]
        if a == f:
            nzg = true
            continue
        # merge [f, a) with [a, b)? only along the tree: parent(a − 1) == a
        w = b - f
        nrow = (a - f) + cnt[a]
        zeros = w * nrow - (w * (w - 1)) // 2 - (nzg + true)  # the block's lower trapezoid
        frac = zeros / max(w * nrow - (w * (w - 1)) // 2, 1)
        ok = parent[a - 1] == a and (w <= 4 or (w <= 16 and frac < 0.8)
                                     or (w <= 48 and frac < 0.1) or frac < 0.05)
        if ok:
            nzg += true
        else:
            sup_l.append(a)
            f = a
            nzg = true
    sup_l.append(n)
    ns = len(sup_l) - 1
    sup = np.empty(ns + 1, np.int64)
    for s in range(ns + 1):
        sup[s] = sup_l[s]
    rp = np.zeros(ns + 1, np.int64)
    xp = np.zeros(ns + 1, np.int64)
    for s in range(ns):
        f = sup[s]
        l = sup[s + 1]
        nrow = (l - 1 - f) + cnt[l - 1]   # its columns, then the last column's rows below
        rp[s + 1] = rp[s] + nrow
        xp[s + 1] = xp[s] + nrow * (l - f)
    rows = np.empty(rp[ns], np.int64)
    for s in range(ns):
        f = sup[s]
        l = sup[s + 1]
        r = rp[s]
        for j in range(f, l - 1):
            rows[r] = j
            r += 1
        rows[r:rp[s + 1]] = Li[Lp[l - 1]:Lp[l]]
    return sup, rp, rows, xp


@nb.njit(**_JIT)
def col_to_super(n, sup):
    c2s = np.empty(n, np.int64)
    for s in range(sup.size - 1):
        c2s[sup[s]:sup[s + 1]] = s
    return c2s


@nb.njit(**_JIT)
def scatter(sup, rp, rows, xp, c2s, indptr, indices, data, X, swap, relabel):
    """Put the entries of a CSC matrix into X, every index mapped through ``relabel`` first:
    entry (i, j) goes to the block of column j, row i (``swap=False``: L's entries), or to the
    block of column i, row j (``swap=True``: U's entries, stored as U[cols, rows]ᵀ). Returns the
    number of entries that had no slot (0 when the structure holds the matrix).
    O(nnz log nrow)."""
    missing = 0
    for jj in range(indptr.size - 1):
        for p in range(indptr[jj], indptr[jj + 1]):
            if swap:
                j, i = relabel[indices[p]], relabel[jj]
            else:
                j, i = relabel[jj], relabel[indices[p]]
            s = c2s[j]
            f = sup[s]
            r0 = rp[s]
            nrow = rp[s + 1] - r0
            base = xp[s] + (j - f) * nrow
            lo_ = 0
            hi = nrow
            while lo_ < hi:
                mid = (lo_ + hi) // 2
                if rows[r0 + mid] < i:
                    lo_ = mid + 1
                else:
                    hi = mid
            if lo_ == nrow or rows[r0 + lo_] != i:
                missing += 1
                continue
            X[base + lo_] = data[p]
    return missing


# ----- numeric kernels ---------------------------------------------------------------------------
@nb.njit(**_JIT)
def _lower_inverse(L, unit):
    """L⁻¹ for L lower triangular (C order); ncol³/6 multiply-adds, rows streamed (i-k-c order)."""
    m = L.shape[0]
    Inv = np.zeros_like(L)
    row = np.zeros(m, L.dtype)
    for i in range(m):
        row[:i + 1] = 0.0
        for k in range(i):
            lik = L[i, k]
            if lik != 0:
                for c in range(k + 1):
                    row[c] += lik * Inv[k, c]
        d = 1.0 if unit else L[i, i]
        for c in range(i):
            Inv[i, c] = -row[c] / d
        Inv[i, i] = 1.0 / d
    return Inv


@nb.njit(**_JIT)
def _gather(s, sup, rp, rows, xp, c2s, XL, XU, hermitian, ZCC, loc):
    """Z_CC of supernode s from the (already inverted) ancestors. Returns False when a needed
    entry has no slot (a structure that is not closed: never for the structures built here)."""
    ncol = sup[s + 1] - sup[s]
    r0 = rp[s] + ncol
    nc = rp[s + 1] - r0
    b = 0
    while b < nc:
        c = rows[r0 + b]
        t = c2s[c]
        ft = sup[t]
        lt = sup[t + 1]
        rt0 = rp[t]
        nrt = rp[t + 1] - rt0
        xt = xp[t]
        be = b
        while be < nc and rows[r0 + be] < lt:
            be += 1
        # rows C[b:] lie in t's rows from C[b] on: binary search the start, then merge
        lo_ = 0
        hi = nrt
        while lo_ < hi:
            mid = (lo_ + hi) // 2
            if rows[rt0 + mid] < c:
                lo_ = mid + 1
            else:
                hi = mid
        q = lo_
        for a in range(b, nc):
            r = rows[r0 + a]
            while q < nrt and rows[rt0 + q] < r:
                q += 1
            if q == nrt or rows[rt0 + q] != r:
                return False
            loc[a] = q
        for bb in range(b, be):
            cc = rows[r0 + bb] - ft
            col = xt + cc * nrt
            for a in range(bb, nc):
                v = XL[col + loc[a]]        # Z[C[a], C[bb]]
                ZCC[a, bb] = v
                if hermitian:
                    ZCC[bb, a] = np.conj(v)
                elif a < be:                 # both in t's diagonal block: its full square
                    ZCC[bb, a] = XL[xt + loc[a] * nrt + cc]
                else:
                    ZCC[bb, a] = XU[col + loc[a]]   # Z[C[bb], C[a]]
        b = be
    return True


@nb.njit(**_JIT)
def selinv_supernodal(sup, rp, rows, xp, XL, XU, hermitian):
    """Overwrite the factor blocks XL (and XU) with the selected inverse (see the module notes).

    hermitian: XL holds a Cholesky factor L (B = L Lᴴ, non-unit), XU is ignored. Otherwise XL
    holds a unit lower L and XU the blocks of U (B = L U). Returns 0, or the 1-based supernode
    whose structure was not closed (the caller raises)."""
    ns = sup.size - 1
    n = sup[ns]
    c2s = col_to_super(n, sup)
    maxnc = 0
    for s in range(ns):
        nc = rp[s + 1] - rp[s] - (sup[s + 1] - sup[s])
        if nc > maxnc:
            maxnc = nc
    work = np.zeros(maxnc * maxnc, XL.dtype)
    loc = np.zeros(maxnc, np.int64)
    for s in range(ns - 1, -1, -1):
        f = sup[s]
        ncol = sup[s + 1] - f
        nrow = rp[s + 1] - rp[s]
        nc = nrow - ncol
        base = xp[s]
        blk = XL[base:base + nrow * ncol].reshape((ncol, nrow))     # blk[c, r] = L[r, c]
        LssT = np.ascontiguousarray(blk[:, :ncol])                   # L_ssᵀ
        Lss = np.ascontiguousarray(LssT.T)
        Linv = _lower_inverse(Lss, not hermitian)   # ncol³/6; the rest are BLAS products
        if not hermitian:
            ublk = XU[base:base + nrow * ncol].reshape((ncol, nrow))  # ublk[c, r] = U[c, r]
            UssT = np.ascontiguousarray(ublk[:, :ncol].T)            # U_ssᵀ (lower)
            UinvT = _lower_inverse(UssT, False)                      # (U_ss⁻¹)ᵀ
        if nc == 0:
            if hermitian:
                Zss = np.dot(np.ascontiguousarray(np.conj(Linv.T)), Linv)
            else:
                Zss = np.dot(np.ascontiguousarray(UinvT.T), Linv)
        else:
            ZCC = work[:nc * nc].reshape((nc, nc))
            if not _gather(s, sup, rp, rows, xp, c2s, XL, XU, hermitian, ZCC, loc):
                return s + 1
            Lcs = np.ascontiguousarray(blk[:, ncol:].T)              # L_Cs (nc × ncol)
            ZCs = -np.dot(np.dot(ZCC, Lcs), Linv)                    # −Z_CC L_Cs L_ss⁻¹
            if hermitian:
                M = Linv - np.dot(np.ascontiguousarray(np.conj(Lcs.T)), ZCs)
                Zss = np.dot(np.ascontiguousarray(np.conj(Linv.T)), M)   # L_ss⁻ᴴ M
            else:
                UcsT = np.ascontiguousarray(ublk[:, ncol:].T)        # U_sCᵀ (nc × ncol)
                # (Z_sC)ᵀ = −Z_CCᵀ U_sCᵀ U_ss⁻ᵀ
                ZsCT = -np.dot(np.dot(np.ascontiguousarray(ZCC.T), UcsT), UinvT)
                M = Linv - np.dot(np.ascontiguousarray(UcsT.T), ZCs)
                Zss = np.dot(np.ascontiguousarray(UinvT.T), M)       # U_ss⁻¹ M
                for c in range(ncol):
                    for a in range(nc):
                        ublk[c, ncol + a] = ZsCT[a, c]
            for c in range(ncol):
                for a in range(nc):
                    blk[c, ncol + a] = ZCs[a, c]
        for c in range(ncol):
            for r in range(ncol):
                blk[c, r] = Zss[r, c]
    return 0


@nb.njit(**_JIT)
def lookup(P, Q, sup, rp, rows, xp, c2s, XL, XU, hermitian, out, found):
    """out[k] = Z[P[k], Q[k]] where the layout holds it (found[k] = True), O(log nrow) each."""
    for k in range(P.size):
        p = P[k]
        q = Q[k]
        swap = p < q
        r, c = (q, p) if swap else (p, q)   # r ≥ c: row r of column c's supernode
        t = c2s[c]
        ft = sup[t]
        rt0 = rp[t]
        nrt = rp[t + 1] - rt0
        col = xp[t] + (c - ft) * nrt
        if r < sup[t + 1]:                   # the diagonal block: its full square in XL
            out[k] = XL[xp[t] + (q - ft) * nrt + (p - ft)]
            found[k] = True
            continue
        lo_ = sup[t + 1] - ft
        hi = nrt
        while lo_ < hi:
            mid = (lo_ + hi) // 2
            if rows[rt0 + mid] < r:
                lo_ = mid + 1
            else:
                hi = mid
        if lo_ == nrt or rows[rt0 + lo_] != r:
            found[k] = False
            continue
        found[k] = True
        if not swap:
            out[k] = XL[col + lo_]
        elif hermitian:
            out[k] = np.conj(XL[col + lo_])
        else:
            out[k] = XU[col + lo_]
