"""Lifetime judged by memory: seven usage patterns interleaved over 280 steps in one fresh
subprocess (tests/torch/torch_memory_child.py) on n = 930 with SuperLU (~0.5 MB per
factorization, so a pattern that kept one per step would grow the process by ~18 MB over its
36 measured steps); the resident set after gc may grow by less than 8 MB between the end of
the warm-up and the end. Nothing may refactorize (misses), each pattern makes the
factorizations it should, and at most the handle's factorization lives at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="adjoints.torch needs torch (pip install \"linops[torch]\")")

HERE = Path(__file__).resolve().parent
STEPS = 280
LIMIT_MB = 8
# pattern -> factorizations per step (after the warm-up)
PATTERNS = {"train": 1, "train-logdet": 1, "func-grad": 1, "hvp": 1, "forward-only": 1,
            "handle": 0, "failing": 0}


@pytest.mark.slow
def test_rss_stays_flat_over_hundreds_of_training_steps():
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, str(HERE / "torch_memory_child.py"), str(STEPS),
                        *PATTERNS], capture_output=True, text=True, timeout=600,
                       env=env, cwd=HERE.parents[1])
    assert p.returncode == 0, p.stderr[-3000:]
    r, = [json.loads(ln[2:]) for ln in p.stdout.splitlines() if ln.startswith("@@")]
    print(r)
    steps = {k: sum(1 for i in range(STEPS - r["steps"], STEPS)
                    if list(PATTERNS)[i % len(PATTERNS)] == k) for k in PATTERNS}
    assert r["grown_mb"] < LIMIT_MB, r
    assert r["misses"] == 0 and r["live"] <= 1, r
    assert r["factorizations"] == {k: PATTERNS[k] * steps[k] for k in PATTERNS}, r
