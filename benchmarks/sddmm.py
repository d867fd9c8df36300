"""SDDMM (project a rank-k LowRank onto a random pattern) vs dense product then sampling.

    python benchmarks/sddmm.py [--sizes 2000 20000 200000] [--ks 1 8 32]

Both routes in one run, side by side: time (best of 3) and tracemalloc peak. The dense route
is skipped where U Vᴴ would not fit in 8 GiB and reported as the memory it would need.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import linops as lo  # noqa: E402
from _measure import mib, peak_bytes, table, timed  # noqa: E402

DENSE_BUDGET = 8 * 2**30


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[2_000, 20_000, 200_000])
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 8, 32])
    args = ap.parse_args(argv)
    rows = []
    for n in args.sizes:
        rng = np.random.default_rng(0)
        P = lo.Pattern.from_coo(rng.integers(0, n, 5 * n), rng.integers(0, n, 5 * n), (n, n))
        P.rows, P.keys
        for k in args.ks:
            U, V = rng.standard_normal((n, k)), rng.standard_normal((n, k))
            G = lo.LowRank(U, V)
            t_lazy, S = timed(lambda: lo.project(G, pattern=P))
            m_lazy, _ = peak_bytes(lambda: lo.project(G, pattern=P))
            need = n * n * 8
            row = {"n": n, "nnz": P.nnz, "k": k, "lazy s": f"{t_lazy:.4f}", "lazy MiB": mib(m_lazy)}
            if need <= DENSE_BUDGET:
                def dense():
                    D = U @ V.T
                    return D[P.rows, P.indices]
                t_dense, ref = timed(dense, repeat=1 if n > 10_000 else 3)
                m_dense, _ = peak_bytes(dense)
                assert np.allclose(ref, S.values)
                row.update({"dense s": f"{t_dense:.4f}", "dense MiB": mib(m_dense),
                            "speedup": f"{t_dense / t_lazy:.1f}x", "memory ratio": f"{m_dense / m_lazy:.0f}x"})
            else:
                row.update({"dense s": "cannot run", "dense MiB": f"would need {need / 2**30:.0f} GiB",
                            "speedup": "-", "memory ratio": "-"})
            rows.append(row)
            print(row, flush=True)
    print()
    print(table(rows, ["n", "nnz", "k", "lazy s", "dense s", "speedup", "lazy MiB", "dense MiB", "memory ratio"]))


if __name__ == "__main__":
    main()
