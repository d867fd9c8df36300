"""Forward + adjoint solves on 2-D Poisson: the adjoint is (nearly) free with factorize-once.

    python benchmarks/solve_adjoint.py [--sizes 100 200 400]   (grid sides; n = side²)

Per size and algorithm, in one run: t(init+solve), t(init+solve+solve_adjoint), their ratio;
a hand-written scipy ``splu`` script doing the same two solves (library overhead = linops /
scipy, target <= 1.10x); ``jax.experimental.sparse.linalg.spsolve`` forward + its VJP
(which refactorizes). Best of 3 each.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pyamg
import scipy.sparse.linalg as spl

sys.path.insert(0, os.path.dirname(__file__))
import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
from _measure import table, timed  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 400])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    rows = []
    for side in args.sizes:
        S = pyamg.gallery.poisson((side, side), format="csr")
        n = S.shape[0]
        A = lo.aslinop(S)
        b = np.ones(n)
        c = np.linspace(0, 1, n)

        def scipy_pair():
            lu = spl.splu(S.tocsc())
            return lu.solve(b), lu.solve(c, trans="T")

        t_sp1, _ = timed(lambda: spl.splu(S.tocsc()).solve(b), args.repeat)
        t_sp2, _ = timed(scipy_pair, args.repeat)
        algs = {"LU (SuperLU)": sv.LU(), "CG+AMG": sv.CG(rtol=1e-10, precond=sv.AMG())}
        if sv.cholmod_available():
            algs["Cholesky (CHOLMOD)"] = sv.Cholesky()
        for name, alg in algs.items():
            prob = sv.LinearProblem(A, b, hermitian=True, posdef=True)

            def fwd():
                cache = sv.init(prob, alg)
                cache.solve()
                return cache

            def pair():
                cache = fwd()
                cache.solve_adjoint(c)
                return cache

            t1, _ = timed(fwd, args.repeat)
            t2, cache = timed(pair, args.repeat)
            row = {"n": n, "algorithm": name, "solve s": f"{t1:.3f}", "solve+adjoint s": f"{t2:.3f}",
                   "adjoint/forward": f"{t2 / t1:.2f}", "factorizations": cache.stats.factorizations}
            if name.startswith("LU"):
                row["scipy splu pair s"] = f"{t_sp2:.3f}"
                row["linops/scipy"] = f"{t2 / t_sp2:.2f}x"
            rows.append(row)
            print(row, flush=True)
        try:
            import jax

            jax.config.update("jax_enable_x64", True)
            import jax.numpy as jnp
            from jax.experimental.sparse.linalg import spsolve

            data, ind, ptr = jnp.asarray(S.data), jnp.asarray(S.indices), jnp.asarray(S.indptr)
            bj, cj = jnp.asarray(b), jnp.asarray(c)

            def jax_pair():
                u, vjp = jax.vjp(lambda bb: spsolve(data, ind, ptr, bb), bj)
                lam = vjp(cj)[0]
                return np.asarray(u), np.asarray(lam)

            t_j, _ = timed(jax_pair, args.repeat)
            linops_lu = next(r for r in rows if r["n"] == n and r["algorithm"].startswith("LU"))
            rows.append({"n": n, "algorithm": "jax spsolve + vjp", "solve+adjoint s": f"{t_j:.3f}",
                         "factorizations": 2,
                         "linops/scipy": f"jax/linops = {t_j / float(linops_lu['solve+adjoint s']):.1f}x"})
            print(rows[-1], flush=True)
        except ImportError:
            pass
    print()
    print(table(rows, ["n", "algorithm", "solve s", "solve+adjoint s", "adjoint/forward", "factorizations",
                       "scipy splu pair s", "linops/scipy"]))


if __name__ == "__main__":
    main()
