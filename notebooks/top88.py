"""A line-by-line numpy/scipy transliteration of top88.m, the reference for notebook 01.

Andreassen, Clausen, Schevenels, Lazarov, Sigmund, "Efficient topology optimization in MATLAB
using 88 lines of code", Struct. Multidisc. Optim. 43:1-16 (2011). The MATLAB code is
``top88(nelx, nely, volfrac, penal, rmin, ft)``; notebook 01 runs it with the MBB example
of the 99-line code it started from (Sigmund 2001, ``top(60,20,0.5,3.0,1.5)``).

Nothing here uses linops: it is the independent reference the notebook checks against. The
translation keeps the MATLAB structure (and its comments' section titles); MATLAB's column-major
arrays ``x(nely, nelx)`` are kept as vectors in the same (column-major) element order,
``e = elx * nely + ely``, and 1-based dof numbers become 0-based. ``K \\ F`` (CHOLMOD in MATLAB)
becomes ``scipy.sparse.linalg.spsolve`` (SuperLU): a different direct solver, so results agree to
rounding, not bit for bit. Checked once against top88.m itself run in GNU Octave 7.3: the same
iteration counts (94 for ft=1, 127 for ft=2), the same compliance printed at every iteration
(4 decimals) and final densities within 1e-8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve


def element_stiffness(nu: float) -> np.ndarray:
    """KE of top88.m: bilinear plane-stress square element, unit Young's modulus."""
    A11 = np.array([[12, 3, -6, -3], [3, 12, 3, 0], [-6, 3, 12, -3], [-3, 0, -3, 12]])
    A12 = np.array([[-6, -3, 0, 3], [-3, -6, -3, -6], [0, -3, -6, 3], [3, -6, 3, -6]])
    B11 = np.array([[-4, 3, -2, 9], [3, -4, -9, 4], [-2, -9, -4, -3], [9, 4, -3, -4]])
    B12 = np.array([[2, -3, 4, -9], [-3, 2, 9, -2], [4, 9, 2, 3], [-9, -2, 3, 2]])
    return 1 / (1 - nu**2) / 24 * (np.block([[A11, A12], [A12.T, A11]])
                                   + nu * np.block([[B11, B12], [B12.T, B11]]))


def edof_matrix(nelx: int, nely: int) -> np.ndarray:
    """edofMat of top88.m (0-based): the 8 dofs of each element, element e = elx*nely + ely."""
    nodenrs = np.arange((1 + nelx) * (1 + nely)).reshape(1 + nelx, 1 + nely).T   # (nely+1, nelx+1)
    edofVec = (2 * nodenrs[:-1, :-1] + 2).reshape(-1, order="F")
    return edofVec[:, None] + np.array([0, 1, 2 * nely + 2, 2 * nely + 3, 2 * nely, 2 * nely + 1, -2, -1])


def mbb_supports(nelx: int, nely: int):
    """Half MBB beam: unit downward load at the top-left node, symmetry line on the left edge,
    roller at the bottom-right corner. Returns (F, fixeddofs, freedofs)."""
    ndof = 2 * (nely + 1) * (nelx + 1)
    F = np.zeros(ndof)
    F[1] = -1.0                                                # F = sparse(2,1,-1,...)
    fixeddofs = np.union1d(np.arange(0, 2 * (nely + 1), 2), [ndof - 1])
    freedofs = np.setdiff1d(np.arange(ndof), fixeddofs)
    return F, fixeddofs, freedofs


def filter_matrix(nelx: int, nely: int, rmin: float):
    """H and Hs of top88.m (the four nested loops, vectorised over elements)."""
    r = int(np.ceil(rmin)) - 1
    iH, jH, sH = [], [], []
    i1, j1 = np.meshgrid(np.arange(nelx), np.arange(nely), indexing="ij")
    i1, j1 = i1.ravel(), j1.ravel()
    for di in range(-r, r + 1):
        for dj in range(-r, r + 1):
            i2, j2 = i1 + di, j1 + dj
            ok = (i2 >= 0) & (i2 < nelx) & (j2 >= 0) & (j2 < nely)
            iH.append((i1 * nely + j1)[ok])
            jH.append((i2 * nely + j2)[ok])
            sH.append(np.maximum(0.0, rmin - np.hypot(di, dj)) * np.ones(ok.sum()))
    H = sp.csr_matrix((np.concatenate(sH), (np.concatenate(iH), np.concatenate(jH))),
                      shape=(nelx * nely, nelx * nely))
    return H, np.asarray(H.sum(axis=1)).ravel()


@dataclass
class Top88Result:
    xPhys: np.ndarray           # final physical densities, element order e = elx*nely + ely
    compliance: list            # c printed at each iteration ("Obj.")
    change: list                # change printed at each iteration ("ch.")
    volume: list                # mean(xPhys) printed at each iteration ("Vol.")

    @property
    def iterations(self) -> int:
        return len(self.compliance)


def top88(nelx, nely, volfrac, penal, rmin, ft, *, max_loop=2000) -> Top88Result:
    """Run top88.m to its own convergence criterion (``while change > 0.01``)."""
    # MATERIAL PROPERTIES
    E0, Emin, nu = 1.0, 1e-9, 0.3
    # PREPARE FINITE ELEMENT ANALYSIS
    KE = element_stiffness(nu)
    edofMat = edof_matrix(nelx, nely)
    iK = np.kron(edofMat, np.ones((8, 1), dtype=int)).ravel()
    jK = np.kron(edofMat, np.ones((1, 8), dtype=int)).ravel()
    ndof = 2 * (nely + 1) * (nelx + 1)
    # DEFINE LOADS AND SUPPORTS (HALF MBB-BEAM)
    F, fixeddofs, freedofs = mbb_supports(nelx, nely)
    U = np.zeros(ndof)
    # PREPARE FILTER
    H, Hs = filter_matrix(nelx, nely, rmin)
    # INITIALIZE ITERATION
    x = np.full(nelx * nely, volfrac)
    xPhys = x.copy()
    loop, change = 0, 1.0
    out = Top88Result(None, [], [], [])
    # START ITERATION
    while change > 0.01:
        loop += 1
        if loop > max_loop:
            raise RuntimeError(f"top88 did not converge in {max_loop} iterations")
        # FE-ANALYSIS
        sK = (KE.reshape(-1, order="F")[:, None] * (Emin + xPhys**penal * (E0 - Emin))).reshape(-1, order="F")
        # entry 64e+8a+b is (iK, jK) = (edofMat[e,b], edofMat[e,a]) with value KE[b,a]s_e, as in MATLAB
        K = sp.coo_matrix((sK, (iK, jK)), shape=(ndof, ndof)).tocsc()
        K = (K + K.T) / 2
        U[freedofs] = spsolve(K[freedofs][:, freedofs], F[freedofs])
        # OBJECTIVE FUNCTION AND SENSITIVITY ANALYSIS
        Ue = U[edofMat]
        ce = np.sum((Ue @ KE) * Ue, axis=1)
        c = np.sum((Emin + xPhys**penal * (E0 - Emin)) * ce)
        dc = -penal * (E0 - Emin) * xPhys**(penal - 1) * ce
        dv = np.ones(nelx * nely)
        # FILTERING/MODIFICATION OF SENSITIVITIES
        if ft == 1:
            dc = H @ (x * dc) / Hs / np.maximum(1e-3, x)
        elif ft == 2:
            dc = H @ (dc / Hs)
            dv = H @ (dv / Hs)
        # OPTIMALITY CRITERIA UPDATE OF DESIGN VARIABLES AND PHYSICAL DENSITIES
        l1, l2, move = 0.0, 1e9, 0.2
        while (l2 - l1) / (l1 + l2) > 1e-3:
            lmid = 0.5 * (l2 + l1)
            xnew = np.maximum(0, np.maximum(x - move, np.minimum(1, np.minimum(x + move, x * np.sqrt(-dc / dv / lmid)))))
            if ft == 1:
                xPhys = xnew
            elif ft == 2:
                xPhys = (H @ xnew) / Hs
            if xPhys.sum() > volfrac * nelx * nely:
                l1 = lmid
            else:
                l2 = lmid
        change = np.abs(xnew - x).max()
        x = xnew
        # PRINT RESULTS (recorded instead of printed)
        out.compliance.append(c)
        out.volume.append(xPhys.mean())
        out.change.append(change)
    out.xPhys = xPhys
    return out
