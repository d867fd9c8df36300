"""Auto without hints: an SPD matrix gets the symmetric factorization anyway (issue 19, item 6).

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/auto_hints.py [nx]

Times ``sv.solve(sv.LinearProblem(K, b))`` with and without ``posdef=True`` on the Q4 family
(n = nx·(nx+1), default nx = 400: n = 160 400), and PARDISO's unsymmetric type (what Auto chose
without a hint before), as process CPU time, best of 3 interleaved runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
from solvers.internals import entry  # noqa: E402


def main(nx: int = 400) -> dict:
    fam, b = lo.testing.poisson_family(nx)
    K = fam(0.5 + np.random.default_rng(0).random(fam.n_params))
    cases = {"posdef=True": (dict(posdef=True), None), "no hint": ({}, None)}
    if entry("pardiso").unavailable() is None:
        cases["Pardiso(posdef=False)"] = ({}, sv.Pardiso(posdef=False))
    best, kinds = {}, {}
    for _ in range(3):
        for name, (hints, alg) in cases.items():
            t = time.process_time()
            sol = sv.solve(sv.LinearProblem(K, b, **hints), alg)
            best[name] = min(best.get(name, np.inf), time.process_time() - t)
            kinds[name] = sol.cache.kind
    print(f"n = {K.shape[0]}")
    for name in cases:
        print(f"  {name:24s} {kinds[name]:28s} {best[name]:.3f} s CPU "
              f"({best[name] / best['posdef=True']:.2f}x posdef=True)")
    return best


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
