"""Compile time and memory of ``jit(grad(a·solve(fam(θ), b)))`` for a from_terms family.

    python benchmarks/from_terms_compile.py [--sizes 1600 6400 25600]

The family K(θ) = θ₁K₁ + θ₂K₂ + θ₃K₃ (``lo.AffineSparse.from_terms``) on a 9-point pattern of
an m×m grid (n = m²): K₁ = T⊗T, K₂ = T⊗I + I⊗T, K₃ = 4 I⊗I with T = tridiag(−1, 2, −1). Each
size runs in a fresh process (x64 on) and reports: the lowering + compilation of the jitted
gradient, the first call (the first factorization's one-time costs), a second jit's trace +
compile + run, the process's RSS after imports and the problem's construction, its peak RSS, and
what the jit added. The targets were ≤ 2 s and ≤ 300 MB per size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import numpy as np, scipy.sparse as sp
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import linops as lo
import adjoints.jax as adj

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

n = int(sys.argv[1]); m = int(round(n ** 0.5)); n = m * m
T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], (m, m)); I = sp.eye(m)
fam = lo.AffineSparse.from_terms([sp.csr_array(sp.kron(T, T)),
                                  sp.csr_array(sp.kron(T, I) + sp.kron(I, T)),
                                  sp.csr_array(sp.kron(I, I) * 4.0)])
rng = np.random.default_rng(0)
a, b = jnp.asarray(rng.standard_normal(n)), jnp.asarray(rng.standard_normal(n))
th = jnp.array([1.0, 0.5, 0.1])
f = lambda t: a @ adj.solve(fam(t), b)
r0 = rss_mb()
t0 = time.perf_counter()
compiled = jax.jit(jax.grad(f)).lower(th).compile()
t1 = time.perf_counter()
compiled(th).block_until_ready()
t2 = time.perf_counter()
jax.jit(jax.grad(lambda t: 2.0 * f(t)))(th).block_until_ready()
t3 = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("@@" + json.dumps({"n": n, "nnz": int(fam.pattern.nnz), "compile_s": t1 - t0,
                         "first_call_s": t2 - t1, "second_jit_s": t3 - t2, "rss_mb": r0,
                         "peak_rss_mb": peak, "jit_added_mb": peak - r0}))
"""


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1600, 6400, 25600])
    args = ap.parse_args(argv)
    rows = []
    for n in args.sizes:
        p = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True, text=True,
                           check=True)
        rows.append(json.loads(next(ln[2:] for ln in p.stdout.splitlines()
                                    if ln.startswith("@@"))))
    print("| n | nnz | lower+compile s | first call s | second jit s | RSS after imports MB "
          "| peak RSS MB | jit adds MB |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']:,} | {r['nnz']:,} | {r['compile_s']:.2f} | {r['first_call_s']:.2f} | "
              f"{r['second_jit_s']:.2f} | {r['rss_mb']:.0f} | {r['peak_rss_mb']:.0f} | "
              f"{r['jit_added_mb']:.0f} |")
    return rows


if __name__ == "__main__":
    main()
