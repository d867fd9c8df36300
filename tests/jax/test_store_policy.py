"""The live-factorization store owns its policy: no module of adjoints.jax other than _live.py
reaches into the store's entries, lock, pool or run bookkeeping (the old registry was read and
written from outside ~20 times), and the store's decisions are reachable as its methods."""

from __future__ import annotations

import re
from pathlib import Path

import adjoints.jax as adj
from adjoints.jax import _live

PKG = Path(adj.__file__).resolve().parent
PRIVATE = re.compile(r"\b(?:STORE|REGISTRY|Store)\s*\.\s*(_\w+|lock|entries)\b|\bREGISTRY\b")


def test_no_module_reaches_into_the_store():
    hits = []
    for path in sorted(PKG.glob("*.py")):
        if path.name == "_live.py":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE.search(line):
                hits.append(f"{path.name}:{i}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_the_policy_is_the_stores_methods():
    names = {"add", "lookup", "find", "like", "hold", "unhold", "begin", "abandon",
             "factorized", "moved_on", "consumed", "trim_pool", "forget_op", "settle", "drop",
             "stats", "reset_stats", "live"}
    assert names <= set(dir(_live.Store)), names - set(dir(_live.Store))
    s = _live.Store()
    assert (s.live(), s.stats().factorizations) == (0, 0)
