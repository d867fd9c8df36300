"""Benchmarks of issue 26: generalized eigenproblems and sparse least squares with gradients.

    PYTHONPATH=. python benchmarks/eig_lstsq.py [eig] [lstsq] [cond] [--small]

eig    K v = λ M v at n ≈ 100 000 (a clamped plate, Q4, random stiffness θ and density ρ per
       cell): the 6 lowest modes by sv.eigsh(K, 6, M=M, sigma=0) on one factorization; the
       gradients of all 6 eigenvalues for K and M (ad.eigsh_pullback + fam.pullback) timed
       against the eigensolve; values against scipy's eigsh(K, 6, M, sigma=0); gradients
       against central differences (each a new eigensolve) at 3 cells for θ and 3 for ρ.
lstsq  min ‖Ax − b‖ at m = 200 000, n = 50 000 (sparse, cond ≈ 1e8 by column scaling):
       sv.QR (SuiteSparseQR) solve alone against value + ∂A cotangent (rank 2, its bytes).
cond   cond 1e10, m = 60, n = 20: the θ-gradient of f = Σx by QR and by the normal
       equations, against central differences in 50-digit arithmetic (mpmath).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import adjoints as ad
import linops as lo
import solvers as sv


def _t(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def bench_eig(nx: int) -> dict:
    fK, fM = lo.testing.membrane_families(nx)
    rng = np.random.default_rng(0)
    th = rng.uniform(0.5, 1.5, fK.n_params)
    rho = rng.uniform(0.5, 1.5, fM.n_params)
    K, M = fK(th), fM(rho)
    e, t_eig = _t(lambda: sv.eigsh(K, 6, sigma=0.0, M=M))
    lb = np.ones(6)

    def grads():
        g = ad.eigsh_pullback(e, values_bar=np.eye(6)[0])
        out = [(fK.pullback(g.K), fM.pullback(g.M))]
        for i in range(1, 6):   # every mode's gradient, each its own pair of contractions
            g = ad.eigsh_pullback(e, values_bar=np.eye(6)[i])
            out.append((fK.pullback(g.K), fM.pullback(g.M)))
        return out

    G, t_grad = _t(grads)
    Ks, Ms = K.to_scipy().tocsc(), M.to_scipy().tocsc()
    (w_ref, _), t_scipy = _t(lambda: sla.eigsh(Ks, 6, Ms, sigma=0.0))
    val_err = float(np.abs(np.sort(w_ref) - e.values).max() / np.abs(w_ref).max())
    h = 1e-5
    errs = []
    for which, fam, p in (("theta", fK, th), ("rho", fM, rho)):
        for seed in range(3):   # directional derivatives along random directions over all cells
            d = h * p * np.random.default_rng(10 + seed).uniform(-1, 1, p.size)

            def lam(q):
                KK, MM = (fK(q), M) if which == "theta" else (K, fM(q))
                return sv.eigsh(KK, 6, sigma=0.0, M=MM).values

            fd = (lam(p + d) - lam(p - d)) / 2
            got = np.array([G[i][0 if which == "theta" else 1] @ d for i in range(6)])
            errs.append(float(np.abs(got - fd).max() / np.abs(fd).max()))
    return {"n": K.shape[0], "nnz_K": K.pattern.nnz, "eigsh_s": t_eig, "scipy_eigsh_s": t_scipy,
            "grad_s": t_grad, "grad_fraction": t_grad / t_eig,
            "factorizations": e.cache.stats.factorizations, "kind": e.cache.kind,
            "values_rel_err": val_err, "grad_fd_rel_err_max": max(errs), "lambda": e.values}


def lstsq_matrix(m: int, n: int, cond: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    blocks = []
    for i in range(m // n):   # banded blocks (bounded fill), each its own band offsets
        off = [0, i + 1, -(2 * i + 3)]
        vals = [rng.uniform(1.0, 2.0, n - abs(o)) for o in off]
        blocks.append(sp.diags(vals, off, shape=(n, n)))
    A = sp.vstack(blocks).tocsr()
    scale = np.logspace(0, -np.log10(cond), n)
    rng.shuffle(scale)
    return sp.csr_array(A @ sp.diags(scale))


def bench_lstsq(m: int, n: int) -> dict:
    A = lstsq_matrix(m, n, 1e8)
    b = np.random.default_rng(1).standard_normal(m)
    prob = sv.LeastSquares(A, b)

    def solve_only():
        return sv.solve(prob, sv.QR()).u

    def value_and_grad():
        sol = sv.solve(prob, sv.QR())
        g = ad.solve_pullback(sol, np.ones(n))
        return sol, g

    _, t_solve = _t(solve_only)
    (sol, g), t_both = _t(value_and_grad)
    _, t_solve2 = _t(solve_only)
    U, V = g.A.factors()
    r = b - A @ sol.u
    return {"m": m, "n": n, "nnz": A.nnz, "qr_solve_s": min(t_solve, t_solve2),
            "value_and_grad_s": t_both, "ratio": t_both / min(t_solve, t_solve2),
            "cotangent": type(g.A).__name__, "rank": U.shape[1],
            "cotangent_bytes": U.nbytes + V.nbytes,
            "normal_residual_rel": float(np.linalg.norm(A.T @ r) / np.linalg.norm(A.T @ b))}


def bench_cond(cond: float = 1e10) -> dict:
    import mpmath  # noqa: PLC0415 (only this check needs it)

    mpmath.mp.dps = 50
    rng = np.random.default_rng(3)
    m, n = 60, 20
    u, _ = np.linalg.qr(rng.standard_normal((m, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    A0 = (u * np.logspace(0, -np.log10(cond), n)) @ v.T
    A1 = rng.standard_normal((m, n)) * 1e-3
    b = rng.standard_normal(m)

    def x_mp(t):
        A = mpmath.matrix(A0.tolist()) + mpmath.mpf(t) * mpmath.matrix(A1.tolist())
        return mpmath.qr_solve(A, mpmath.matrix(b.tolist()))[0]

    h = mpmath.mpf("1e-20")
    fd = float((sum(x_mp(h)) - sum(x_mp(-h))) / (2 * h))
    sol = sv.solve(sv.LeastSquares(sp.csr_array(A0), b), sv.QR())
    g_qr = lo.inner(ad.solve_pullback(sol, np.ones(n)).A, lo.Dense(A1))
    # the normal equations: x = (AᵀA)⁻¹Aᵀb, λ = (AᵀA)⁻¹x̄, Ā = rλᵀ − Aλxᵀ, all by Cholesky of AᵀA
    N = A0.T @ A0
    try:
        import scipy.linalg as sl  # noqa: PLC0415

        c = sl.cho_factor(N)
        x = sl.cho_solve(c, A0.T @ b)
        lam = sl.cho_solve(c, np.ones(n))
        g_ne = float((b - A0 @ x) @ A1 @ lam - (A0 @ lam) @ A1 @ x)
    except np.linalg.LinAlgError as e:
        g_ne = f"Cholesky of AᵀA failed: {e}"
    return {"cond": cond, "fd_mp50": fd, "qr": g_qr, "qr_rel_err": abs(g_qr - fd) / abs(fd),
            "normal_equations": g_ne,
            "normal_rel_err": abs(g_ne - fd) / abs(fd) if isinstance(g_ne, float) else None}


def main(argv):
    small = "--small" in argv
    which = [a for a in argv if not a.startswith("--")] or ["eig", "lstsq", "cond"]
    if "eig" in which:
        r = bench_eig(40 if small else 317)
        print(f"eig: n = {r['n']}, nnz(K) = {r['nnz_K']}, {r['kind']}, factorizations = "
              f"{r['factorizations']}")
        print(f"  eigsh(K, 6, M, sigma=0) {r['eigsh_s']:.2f} s (scipy eigsh {r['scipy_eigsh_s']:.2f}"
              f" s); 6 mode gradients for K and M {r['grad_s']:.3f} s = "
              f"{100 * r['grad_fraction']:.1f} % of the eigensolve (target ≤ 10 %)")
        print(f"  values vs scipy: {r['values_rel_err']:.2e} (target 1e-10); gradients vs "
              f"central differences: {r['grad_fd_rel_err_max']:.2e} (target 1e-7)")
    if "lstsq" in which:
        m, n = (20_000, 5_000) if small else (200_000, 50_000)
        r = bench_lstsq(m, n)
        print(f"lstsq: m = {r['m']}, n = {r['n']}, nnz = {r['nnz']}, cond ≈ 1e8")
        print(f"  QR solve {r['qr_solve_s']:.2f} s; value + ∂A cotangent {r['value_and_grad_s']:.2f}"
              f" s = {r['ratio']:.2f}× (target ≤ 1.3×); cotangent {r['cotangent']} rank "
              f"{r['rank']}, {r['cotangent_bytes'] / 1e6:.2f} MB; ‖Aᵀr‖/‖Aᵀb‖ = "
              f"{r['normal_residual_rel']:.1e}")
    if "cond" in which:
        r = bench_cond()
        print(f"cond 1e10 (m = 60, n = 20), ∂(Σx)/∂θ against 50-digit central differences "
              f"{r['fd_mp50']:.12g}:")
        print(f"  QR: {r['qr']:.12g} (relative error {r['qr_rel_err']:.1e}, target 1e-6); "
              f"normal equations: {r['normal_equations']} (relative error "
              f"{r['normal_rel_err']})")


if __name__ == "__main__":
    main(sys.argv[1:])
