"""Lifetime judged by memory: each pattern runs 200 steps in one fresh subprocess
(tests/torch/torch_memory_child.py) on n = 930 with SuperLU (~0.5 MB per factorization, so
keeping one per step would grow the process by ~90 MB); the resident set after gc may grow by
less than 20 MB between step 20 and step 200. The counters are printed, not the verdict —
except that nothing may refactorize (misses) and at most the handle's factorization lives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="adjoints.torch needs torch (pip install \"linops[torch]\")")

HERE = Path(__file__).resolve().parent
CALLS = 200
LIMIT_MB = 20
# pattern -> factorizations per step (after the warm-up)
PATTERNS = {"train": 1, "train-logdet": 1, "func-grad": 1, "hvp": 1, "forward-only": 1,
            "handle": 0, "failing": 0}


@pytest.fixture(scope="module")
def results() -> dict:
    """Every pattern in one subprocess (one torch import): pattern -> its JSON row."""
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, str(HERE / "torch_memory_child.py"), str(CALLS),
                        *sorted(PATTERNS)], capture_output=True, text=True, timeout=600,
                       env=env, cwd=HERE.parents[1])
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(ln[2:]) for ln in p.stdout.splitlines() if ln.startswith("@@")]
    return {r["pattern"]: r for r in rows}


@pytest.mark.slow
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_rss_stays_flat_over_200_training_steps(results, pattern):
    r = results[pattern]
    print(r)
    assert r["grown_mb"] < LIMIT_MB, r
    assert r["misses"] == 0 and r["factorizations"] == PATTERNS[pattern] * r["calls"], r
    assert r["live"] <= 1, r
