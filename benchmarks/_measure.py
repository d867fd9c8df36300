"""Shared helpers for the benchmark scripts: timing with repeats, tracemalloc peaks, tables."""

from __future__ import annotations

import time
import tracemalloc


def timed(fn, repeat: int = 3):
    """(best seconds, result) over ``repeat`` runs."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def peak_bytes(fn):
    """(peak traced bytes, result) of one run (numpy allocations are traced)."""
    tracemalloc.start()
    try:
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, out


def table(rows: list[dict], cols: list[str]) -> str:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    head = " | ".join(c.ljust(widths[c]) for c in cols)
    sep = "-|-".join("-" * widths[c] for c in cols)
    body = "\n".join(" | ".join(str(r.get(c, "")).ljust(widths[c]) for c in cols) for r in rows)
    return f"{head}\n{sep}\n{body}"


def mib(b) -> str:
    return f"{b / 2**20:.1f}"
