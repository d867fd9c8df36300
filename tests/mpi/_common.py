"""Shared pieces of the MPI scripts run by tests/mpi/test_petsc.py (each under mpirun -n P).

Problems are defined globally (cheap at test sizes); each rank takes its element block
(``element_slice``) and its owned rows (``fam.owned_range``), exactly as a user would.
The serial reference is the numpy path: lo.AffineSparse + sv.solve(LU) + ad.solve_pullback +
fam.pullback.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from petsc4py import PETSc

PETSc.Log.begin()

import adjoints as ad  # noqa: E402
import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
from linops.petsc import PETScElementFamily, element_slice  # noqa: E402

COMM = PETSc.COMM_WORLD
MPI = COMM.tompi4py()
EVENTS = ("KSPSetUp", "PCSetUp", "MatLUFactorSym", "MatLUFactorNum", "MatCholFctrSym",
          "MatCholFctrNum", "KSPSolve", "PCApply", "PCApplyTranspose", "MatTranspose")


def events() -> dict:
    return {e: PETSc.Log.Event(e).getPerfInfo()["count"] for e in EVENTS}


def delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in a}


def emit(obj) -> None:
    """Rank 0 prints one JSON line the test parses."""
    if COMM.getRank() == 0:
        print("RESULT " + json.dumps(obj), flush=True)


# ----- problems -----------------------------------------------------------------------------------
def top88_ke(nu: float = 0.3) -> np.ndarray:
    """Q4 plane-stress element stiffness of top88 (E = 1, unit square element)."""
    A11 = np.array([[12, 3, -6, -3], [3, 12, 3, 0], [-6, 3, 12, -3], [-3, 0, -3, 12]])
    A12 = np.array([[-6, -3, 0, 3], [-3, -6, -3, -6], [0, -3, -6, 3], [3, -6, 3, -6]])
    B11 = np.array([[-4, 3, -2, 9], [3, -4, -9, 4], [-2, -9, -4, -3], [9, 4, -3, -4]])
    B12 = np.array([[2, -3, 4, -9], [-3, 2, 9, -2], [4, 9, 2, 3], [-9, -2, 3, 2]])
    top = np.hstack([A11, A12]) + nu * np.hstack([B11, B12])
    bot = np.hstack([A12.T, A11]) + nu * np.hstack([B12.T, B11])
    return np.vstack([top, bot]) / (1 - nu ** 2) / 24


def mbb(nelx: int, nely: int):
    """Half MBB beam (top88): x-dofs of the left edge and the y-dof of the bottom-right node
    fixed, unit downward load at the top-left node. Elements and nodes column-major."""
    nodenrs = np.arange((nelx + 1) * (nely + 1)).reshape(nelx + 1, nely + 1).T
    edof_vec = (2 * nodenrs[:-1, :-1] + 2).T.reshape(-1)     # 0-based y-dof of the lower-left node
    offs = np.array([0, 1, 2 * nely + 2, 2 * nely + 3, 2 * nely, 2 * nely + 1, -2, -1])
    dofs = edof_vec[:, None] + offs[None, :]
    n = 2 * (nelx + 1) * (nely + 1)
    fixed = np.union1d(np.arange(0, 2 * (nely + 1), 2), [n - 1])
    f = np.zeros(n)
    f[1] = -1.0
    return top88_ke(), dofs, n, fixed, f


def problem(name: str, size: int):
    """(Ke, dofs, n, fixed, b_full or None, serial family, b_free) for a named problem."""
    if name == "poisson":
        fam, b = lo.testing.poisson_family(size)
        ix = np.arange((size + 1) ** 2).reshape(size + 1, size + 1)
        return (lo.testing.q4_laplace_stiffness(), lo.testing.grid_dofs(size, size),
                (size + 1) ** 2, ix[:, 0], fam, b)
    if name == "convection":  # nonsymmetric: Laplacian + a skew-symmetric element part
        ix = np.arange((size + 1) ** 2).reshape(size + 1, size + 1)
        S = 0.4 * np.array([[0, 1, 0, -1], [-1, 0, 1, 0], [0, -1, 0, 1], [1, 0, -1, 0]], float)
        Ke = lo.testing.q4_laplace_stiffness() + S
        dofs = lo.testing.grid_dofs(size, size)
        fam = lo.AffineSparse.from_elements(Ke, dofs, (size + 1) ** 2, fixed=ix[:, 0])
        return Ke, dofs, (size + 1) ** 2, ix[:, 0], fam, np.full(fam.shape[0], 1.0 / size ** 2)
    if name == "mbb":
        Ke, dofs, n, fixed, f = mbb(3 * size, size)
        fam = lo.AffineSparse.from_elements(Ke, dofs, n, fixed=fixed)
        return Ke, dofs, n, fixed, fam, f[fam.free]
    raise ValueError(name)


def parameters(name: str, n_elements: int, n_free: int, b_free):
    rng = np.random.default_rng(7)
    if name == "mbb":  # SIMP stiffness of densities in [0.2, 1]: θ = Emin + x³ (1 − Emin)
        x = 0.2 + 0.8 * rng.random(n_elements)
        return 1e-9 + x ** 3 * (1 - 1e-9), b_free.copy()           # compliance: a = f
    return 0.5 + rng.random(n_elements), rng.standard_normal(n_free)


def serial_reference(sfam, b, theta, a):
    sol = sv.solve(sv.LinearProblem(sfam(theta), b), sv.LU())
    g = ad.solve_pullback(sol, a)
    return float(a @ sol.u), sfam.pullback(g.A)


def distributed(fam, alg, theta_l, b_l, a_l, path: str):
    """Value aᵀK⁻¹b and θ̄ on this rank, through the cache or the factor directly."""
    K = fam(theta_l)
    e0 = events()
    if path == "cache":
        cache = sv.init(sv.LinearProblem(K, b_l), alg)
        e1 = events()
        u = cache.solve()
        e2 = events()
        g = ad.solve_pullback(cache, a_l)
        e3 = events()
        factor, stats = cache.factor, vars(cache.stats).copy()
        G = g.A
    else:
        factor = alg.setup(K, None)
        e1 = events()
        u = factor.solve(b_l[:, None], "N")[:, 0]
        e2 = events()
        lam = factor.solve(a_l[:, None], "H")[:, 0]
        e3 = events()
        G, stats = lo.RankOne(-lam, u), {"factorizations": 1}
    theta_bar = fam.pullback(G)
    value = MPI.allreduce(float(a_l @ u))
    grads = MPI.gather(theta_bar, root=0)
    return {"value": value, "grad": None if grads is None else np.concatenate(grads),
            "init": delta(e0, e1), "solve": delta(e1, e2), "adjoint": delta(e2, e3),
            "stats": stats, "mode": factor.transpose_mode, "note": factor.transpose_note,
            "transpose_setups": factor.transpose_setups, "kind": factor.kind,
            "cotangent_shape": list(G.shape), "local_n": MPI.allgather(fam.local_shape[0])}


def argv(i: int, default: str) -> str:
    return sys.argv[i] if len(sys.argv) > i else default
