"""What the snapshot mutation rule costs: one copy when an operator is built, nothing per solve.

    python benchmarks/snapshot_cost.py [--dense 2500] [--grid 400]

Side by side in one run (best of 3): building the operator (the snapshot copy) against init
(the factorization), a solve and an adjoint solve with the cache, for a dense n×n matrix (LU)
and for the 2-D Q4 Poisson matrix on a grid×grid mesh as a scipy CSR (sparse LU). The copy is
paid once per operator; a solve never reads A's arrays again (tests/solvers/test_trust_contract.py counts it),
so the per-solve cost of the rule is zero.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import linops as lo  # noqa: E402
import solvers as sv  # noqa: E402
from _measure import table, timed  # noqa: E402


def _row(name: str, make, nnz: int) -> dict:
    t_wrap, A = timed(make)
    t_init, cache = timed(lambda: sv.init(sv.LinearProblem(A), sv.LU()))
    n = A.shape[0]
    b = np.random.default_rng(0).standard_normal(n)
    t_solve, _ = timed(lambda: cache.solve(b))
    t_adj, _ = timed(lambda: cache.solve_adjoint(b))
    return {"operator": name, "stored values": f"{nnz:,}", "snapshot ms": f"{t_wrap * 1e3:.1f}",
            "init ms": f"{t_init * 1e3:.0f}", "solve ms": f"{t_solve * 1e3:.1f}",
            "adjoint ms": f"{t_adj * 1e3:.1f}",
            "snapshot / solve": f"{t_wrap / t_solve:.2f}"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dense", type=int, default=2500, help="n of the dense matrix")
    ap.add_argument("--grid", type=int, default=400, help="grid side of the sparse matrix")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(1)
    D = np.eye(args.dense) * args.dense + rng.random((args.dense, args.dense))
    S = lo.testing.poisson_family(args.grid)[0](np.ones(args.grid**2)).to_scipy()
    rows = [_row(f"lo.Dense, n = {args.dense}", lambda: lo.Dense(D), D.size),
            _row(f"lo.aslinop(scipy CSR), n = {S.shape[0]:,}", lambda: lo.aslinop(S), S.nnz)]
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
