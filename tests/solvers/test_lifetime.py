"""Lifetimes proven by memory, not counters (the numpy engines).

Each pattern runs 100 times in a fresh subprocess: a cache is made, solves forward and adjoint,
is updated, and is dropped (``:patterns``: on a new sparsity pattern each time, so that the
symbolic analyses ``sv.analyses`` keeps are evicted, not accumulated). The process's RSS after
``gc.collect()`` is read after a warm-up of 25 calls and at the end; growth over those 75 calls
must stay under 25 MB. Keeping every cache instead (measured, 70×70 Poisson matrix) grows it by
82 MB with CG + AMG (1.1 MB a cache: 3.3x the limit), 114–250 MB with every other pattern;
without a leak no pattern grew by more than 3.9 MB (over 75 or 150 calls). The JAX patterns are
in ``tests/jax/test_lifetime.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solvers.internals import entry

ROOT = Path(__file__).resolve().parents[2]
CALLS, WARMUP = 100, 25
LIMIT_MB = 25.0

SCRIPT = r"""
import gc, json, sys
import numpy as np, pyamg, scipy.sparse as sp
import solvers as sv

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

pattern, calls, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
P = sp.csr_matrix(pyamg.gallery.poisson((70, 70), format="csr"))
n = P.shape[0]
b = np.ones(n)
algs = {"pardiso": lambda: sv.Pardiso(), "cholmod": lambda: sv.Cholesky(), "superlu": lambda: sv.LU(),
        "cg+amg": lambda: sv.CG(rtol=1e-10, precond=sv.AMG()),
        "petsc": lambda: sv.PETSc(), "auto": lambda: sv.Auto()}
name, _, mode = pattern.partition(":")
mark = None
base = sv.init(sv.LinearProblem(P, b, posdef=True), algs[name]()) if mode == "like" else None
for i in range(calls):
    A = P * (1.0 + 0.01 * (i % 7))
    if mode == "patterns":   # a new pattern every call: kept analyses (sv.analyses) are evicted
        E = sp.csr_matrix(([0.01, 0.01], ([i, i + 100], [i + 100, i])), shape=P.shape)
        A = sp.csr_matrix(A + E)
    if mode == "like":
        cache = sv.init(sv.LinearProblem(A, b, posdef=True), like=base)
    else:
        cache = sv.init(sv.LinearProblem(A, b, posdef=True), algs[name]())
    cache.solve()
    cache.solve_adjoint(b)
    if mode == "update":
        cache.update(A=2 * A)
        cache.solve()
    del cache
    if i == warmup - 1:
        gc.collect()
        mark = rss_mb()
gc.collect()
print("RESULT " + json.dumps({"warm": mark, "end": rss_mb()}))
"""

PATTERNS = ["superlu", "superlu:update", "superlu:like", "cholmod", "cholmod:update",
            "cholmod:like", "cholmod:patterns", "pardiso", "pardiso:update", "pardiso:like",
            "pardiso:patterns", "cg+amg",
            "cg+amg:update", "auto", "petsc", "petsc:update"]


def _missing(pattern: str) -> str | None:
    name = pattern.partition(":")[0]
    if name == "pardiso":
        return entry("pardiso").unavailable()
    if name == "petsc":
        return entry("petsc").unavailable()
    if name == "cholmod":
        import solvers as sv

        return None if sv.cholmod_available() else "scikit-sparse not installed"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("pattern", PATTERNS)
def test_rss_stays_flat_over_100_caches(pattern):
    why = _missing(pattern)
    if why:
        pytest.skip(why)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", SCRIPT, pattern, str(CALLS), str(WARMUP)],
                       capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("RESULT "))
    r = json.loads(line[len("RESULT "):])
    growth = r["end"] - r["warm"]
    print(f"{pattern}: RSS {r['warm']:.0f} MB after {WARMUP} calls, {r['end']:.0f} MB after "
          f"{CALLS}")
    assert growth < LIMIT_MB, f"{pattern}: RSS grew {growth:.0f} MB over {CALLS - WARMUP} calls"
