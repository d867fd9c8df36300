"""GPU benchmark, CPU path beside it in the same run (device timings with synchronisation).

    python benchmarks/gpu_bench.py [--quick]

1. SDDMM throughput (project a rank-k LowRank onto a random pattern): cupy vs numpy, and
   torch.sparse.sampled_addmm when torch with CUDA is importable.
2. SpMM both orders (A @ X, X @ A) with gradients through adjoints.jax on the GPU vs CPU.
3. Value + gradient of aᵀK(θ)⁻¹b for the 2-D FE family: cupy (cupyx splu: host factorization,
   device solves), jax on the GPU (cuSOLVER spsolve, no host callback), numpy CPU path.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import linops as lo
import solvers as sv
import adjoints as ad


def best(fn, sync, repeat=3):
    fn()
    sync()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    import cupy as cp

    cs = cp.cuda.Device().synchronize
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"device: {dev}; cupy {cp.__version__}")
    rows = []

    # 1. SDDMM --------------------------------------------------------------------------------
    n, k = (200_000, 32) if args.quick else (2_000_000, 32)
    nnz = 10 * n
    rng = np.random.default_rng(0)
    P = lo.Pattern.from_coo(rng.integers(0, n, nnz), rng.integers(0, n, nnz), (n, n))
    U, V = rng.standard_normal((n, k)), rng.standard_normal((n, k))
    Gn, Gc = lo.LowRank(U, V), lo.LowRank(cp.asarray(U), cp.asarray(V))
    t_cpu = best(lambda: lo.project(Gn, pattern=P), lambda: None, 1)
    t_gpu = best(lambda: lo.project(Gc, pattern=P), cs)
    ok = np.allclose(cp.asnumpy(lo.project(Gc, pattern=P).values[:1000]),
                     lo.project(Gn, pattern=P).values[:1000])
    gflop = 2 * P.nnz * k / 1e9
    rows.append(("SDDMM", f"n={n:,} nnz={P.nnz:,} k={k}", t_cpu, t_gpu, f"{gflop / t_gpu:.0f} GFLOP/s, correct={ok}"))
    try:
        import torch

        if torch.cuda.is_available():
            crow = torch.as_tensor(P.indptr, device="cuda")
            col = torch.as_tensor(P.indices, device="cuda")
            S = torch.sparse_csr_tensor(crow, col, torch.zeros(P.nnz, dtype=torch.float64, device="cuda"), (n, n))
            Ut, Vt = torch.as_tensor(U, device="cuda"), torch.as_tensor(V.T.copy(), device="cuda")
            t_t = best(lambda: torch.sparse.sampled_addmm(S, Ut, Vt, beta=0.0), torch.cuda.synchronize)
            rows.append(("SDDMM torch.sparse.sampled_addmm", "same", float("nan"), t_t, f"linops/torch = {t_gpu / t_t:.2f}"))
    except Exception as e:  # torch missing or without this kernel
        rows.append(("SDDMM torch", f"skipped: {type(e).__name__}", float("nan"), float("nan"), ""))

    # 2. SpMM both orders with gradients (jax on the GPU) -----------------------------------
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import adjoints.jax as adj

    m = 200_000 if args.quick else 1_000_000
    Pm = lo.Pattern.from_coo(rng.integers(0, m, 10 * m), rng.integers(0, m, 10 * m), (m, m))
    vals = rng.standard_normal(Pm.nnz)
    X = rng.standard_normal((m, 64))
    for order in ("A@X", "X@A"):
        def make(device):
            v = jax.device_put(jnp.asarray(vals), device)
            Xd = jax.device_put(jnp.asarray(X if order == "A@X" else X.T), device)
            if order == "A@X":
                f = lambda v, X: jnp.sum(adj.matmul(lo.Sparse(v, Pm), X) ** 2)
            else:
                f = lambda v, X: jnp.sum(adj.matmul(X, lo.Sparse(v, Pm)) ** 2)
            g = jax.jit(jax.grad(f, (0, 1)))
            return lambda: jax.block_until_ready(g(v, Xd))
        gpu = [d for d in jax.devices() if d.platform == "gpu"]
        t_g = best(make(gpu[0]), lambda: None) if gpu else float("nan")
        t_c = best(make(jax.devices("cpu")[0]), lambda: None, 1)
        rows.append((f"SpMM {order} + grad (jax)", f"n={m:,} nnz={Pm.nnz:,} k=64", t_c, t_g, ""))

    # 3. value + gradient of aᵀK(θ)⁻¹b ---------------------------------------------------------
    nx = 100 if args.quick else 300
    fam, b = lo.testing.poisson_family(nx)
    theta = 0.5 + rng.random(fam.n_params)
    a = rng.standard_normal(fam.shape[0])

    def numpy_path():
        sol = sv.solve(sv.LinearProblem(fam(theta), b), sv.LU())
        return fam.pullback(ad.solve_pullback(sol, a).A)

    th_c, b_c, a_c = cp.asarray(theta), cp.asarray(b), cp.asarray(a)

    def cupy_path():
        sol = sv.solve(sv.LinearProblem(fam(th_c), b_c), sv.LU())
        return fam.pullback(ad.solve_pullback(sol, a_c).A)

    ref = numpy_path()
    err = float(np.abs(cp.asnumpy(cupy_path()) - ref).max() / np.abs(ref).max())
    t_np = best(numpy_path, lambda: None, 1)
    t_cp = best(cupy_path, cs)
    rows.append(("grad aᵀK(θ)⁻¹b cupy (splu)", f"n={fam.shape[0]:,}", t_np, t_cp, f"rel. diff {err:.1e}"))
    gpu = [d for d in jax.devices() if d.platform == "gpu"]
    if gpu:
        tj = jax.device_put(jnp.asarray(theta), gpu[0])
        aj, bj = jax.device_put(jnp.asarray(a), gpu[0]), jax.device_put(jnp.asarray(b), gpu[0])
        g = jax.jit(jax.grad(lambda th: jnp.dot(aj, adj.solve(fam(th), bj))))
        gj = g(tj)
        errj = float(np.abs(np.asarray(gj) - ref).max() / np.abs(ref).max())
        t_j = best(lambda: jax.block_until_ready(g(tj)), lambda: None)
        rows.append(("grad aᵀK(θ)⁻¹b jax GPU (spsolve)", f"n={fam.shape[0]:,}", t_np, t_j, f"rel. diff {errj:.1e}"))

    print(f"\n{'benchmark':<36} {'size':<34} {'CPU s':>9} {'GPU s':>9}  note")
    for name, size, tc, tg, note in rows:
        print(f"{name:<36} {size:<34} {tc:9.4f} {tg:9.4f}  {note}")


if __name__ == "__main__":
    main()
